"""``implicit-em predict`` scores with numpy alone (``_model_file``): the estimator's results, without torch.

References: the estimator's own ``predict`` and ``predict_proba`` on the same saved model (every covariance type,
float32 and float64 fits, a component of weight zero); the same refusals as ``GaussianMixture.load``; and a
fresh interpreter, where ``predict`` must finish without ``torch`` in ``sys.modules``.
"""

import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from implicit_em import GaussianMixture
from implicit_em._model_file import PARAMETERS, read_mixture

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")


def _x(n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0, 0.0], [4.0, 4.0, 4.0], [-3.0, 5.0, 1.0]])
    return centres[rng.randint(0, 3, n)] + rng.randn(n, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_numpy_scores_equal_the_estimators(tmp_path: Path, covariance_type: str, dtype: type) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GaussianMixture(3, covariance_type=covariance_type, random_state=0).fit(_x().astype(dtype))
    scorer = read_mixture(model.save(tmp_path / "m.npz"))
    x = _x(200, seed=1)
    np.testing.assert_array_equal(scorer.predict(x), model.predict(x))
    np.testing.assert_allclose(scorer.predict_proba(x), model.predict_proba(x), rtol=0, atol=1e-12)
    log_norm = np.logaddexp.reduce(scorer.weighted_log_prob(x), axis=1)
    np.testing.assert_allclose(log_norm, model.score_samples(x), rtol=1e-12)  # the log-densities themselves


def test_a_component_of_weight_zero_gets_no_rows(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GaussianMixture(3, random_state=0).fit(_x())
    model.weights_ = np.array([0.0, 0.5, 0.5])
    scorer = read_mixture(model.save(tmp_path / "m.npz"))
    proba = scorer.predict_proba(_x(50))
    assert np.isfinite(proba).all() and (proba[:, 0] == 0).all()
    np.testing.assert_allclose(proba, model.predict_proba(_x(50)), rtol=0, atol=1e-12)


def test_the_parameter_list_is_the_estimators() -> None:
    assert set(inspect.signature(GaussianMixture).parameters) == PARAMETERS


def test_predict_never_imports_torch(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GaussianMixture(3, random_state=0).fit(_x())
    path = model.save(tmp_path / "m.npz")
    data = tmp_path / "x.csv"
    np.savetxt(data, _x(20), delimiter=",")
    code = (
        "import sys; from implicit_em.cli import main; rc = main(['predict', sys.argv[1], sys.argv[2]]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path), str(data)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [int(v) for v in done.stdout.split()] == model.predict(_x(20)).tolist()


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_rows_with_nan_are_scored_on_their_observed_features(tmp_path: Path, covariance_type: str) -> None:
    """The numpy scorer's marginals equal the estimator's (``missing="marginalize"``), and predict uses them."""
    x = _x()
    holes = x.copy()
    holes[::3, 0] = np.nan
    holes[1::5, 2] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GaussianMixture(3, covariance_type=covariance_type, random_state=0, missing="marginalize").fit(holes)
    scorer = read_mixture(model.save(tmp_path / "m.npz"))
    np.testing.assert_allclose(scorer.predict_proba(holes), model.predict_proba(holes), rtol=0, atol=1e-10)
    np.testing.assert_array_equal(scorer.predict(holes), model.predict(holes))
    from implicit_em.cli import main

    data = tmp_path / "holes.csv"
    data.write_text("\n".join(",".join("" if np.isnan(v) else repr(float(v)) for v in row) for row in holes) + "\n")
    assert main(["predict", str(tmp_path / "m.npz"), str(data)]) == 2  # NaN without the flag: refused
    assert main(["predict", str(tmp_path / "m.npz"), str(data), "--missing", "marginalize", "--out",
                 str(tmp_path / "p.npy")]) == 0  # fmt: skip
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), model.predict(holes))
