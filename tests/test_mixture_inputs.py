"""Bad input and faults: clear ValueErrors, the reg_covar floor for degenerate data, never NaN parameters; and
scikit-learn's estimator checks."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.utils.estimator_checks import parametrize_with_checks

from implicit_em.mixture import GaussianMixture

FITTERS = ["em", "online_em", "gd"]


def _x(n: int = 200, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randn(n, d)


def _finite(gm: GaussianMixture) -> bool:
    return all(
        np.isfinite(getattr(gm, a)).all() for a in ("weights_", "means_", "covariances_", "precisions_cholesky_")
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_non_finite_rows_raise(bad: float, kind: str) -> None:
    x = _x()
    x[5, 1] = bad
    data = torch.from_numpy(x) if kind == "torch" else x
    with pytest.raises(ValueError, match=r"NaN|inf"):
        GaussianMixture(2).fit(data)


def test_non_finite_rows_in_a_stream_raise() -> None:
    x = _x()
    x[150, 0] = np.nan
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x)), batch_size=64)
    with pytest.raises(ValueError, match="NaN"):
        GaussianMixture(2).fit(loader)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_one_dimensional_x_raises(kind: str) -> None:
    x = np.arange(10.0)
    with pytest.raises(ValueError, match="2D"):
        GaussianMixture(2).fit(torch.from_numpy(x) if kind == "torch" else x)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_fewer_samples_than_components_raises(kind: str) -> None:
    x = _x(n=3)
    with pytest.raises(ValueError, match="n_samples >= n_components"):
        GaussianMixture(5).fit(torch.from_numpy(x) if kind == "torch" else x)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_wrong_n_features_at_predict_raises(kind: str) -> None:
    gm = GaussianMixture(2, random_state=0).fit(_x())
    x = _x(d=4)
    with pytest.raises(ValueError, match="features"):
        gm.predict(torch.from_numpy(x) if kind == "torch" else x)


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("covariance_type", "banana"),
        ("fitter", "sgd"),
        ("n_components", 0),
        ("init_params", "x"),
        ("tol", -1.0),
        ("optimizer", "lbfgs"),
        ("batch_size", 0),
    ],
)
def test_bad_parameters_name_the_parameter(param: str, value: object) -> None:
    with pytest.raises(ValueError, match=param):
        GaussianMixture(**{"n_components": 2, param: value}).fit(_x())


@pytest.mark.parametrize("fitter", FITTERS)
def test_numpy_integers_and_integer_valued_floats_give_the_same_fit(fitter: str) -> None:
    """What the estimator accepts (numpy integers for counts, ints for tol and reg_covar) also passes the test-time
    type checker of the fitters, and fits exactly as the plain Python values do."""
    plain = {"n_components": 2, "max_iter": 3, "n_init": 1, "split_merge": 1, "tol": 0.0, "reg_covar": 0.0}
    other = {**{k: np.int64(v) for k, v in plain.items() if isinstance(v, int)}, "tol": 0, "reg_covar": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter=3 does not converge
        fits = [GaussianMixture(**kw, fitter=fitter, random_state=0).fit(_x()) for kw in (plain, other)]
    np.testing.assert_array_equal(fits[0].means_, fits[1].means_)
    assert fits[0].n_iter_ == fits[1].n_iter_


def test_bad_user_init_shapes_raise() -> None:
    with pytest.raises(ValueError, match="means_init"):
        GaussianMixture(2, means_init=np.zeros((3, 3))).fit(_x())
    with pytest.raises(ValueError, match="weights_init"):
        GaussianMixture(2, weights_init=[0.7, 0.7]).fit(_x())


@pytest.mark.parametrize("fitter", FITTERS)
def test_constant_feature_is_floored_not_nan(fitter: str) -> None:
    x = _x()
    x[:, 2] = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = GaussianMixture(2, random_state=0, fitter=fitter, max_iter=20).fit(x)
    assert _finite(gm)
    assert np.isfinite(gm.score(x))
    assert gm.covariances_[:, 2, 2].min() >= 0.5 * gm.reg_covar


@pytest.mark.parametrize("fitter", FITTERS)
def test_duplicated_points_give_finite_parameters(fitter: str) -> None:
    x = np.vstack([np.repeat(_x(n=2), 50, axis=0), _x(n=100, seed=1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = GaussianMixture(3, random_state=0, fitter=fitter, max_iter=20).fit(x)
    assert _finite(gm)


def test_singular_data_with_zero_reg_covar_warns_and_stays_finite() -> None:
    x = np.repeat(_x(n=3), 20, axis=0)
    with pytest.warns(RuntimeWarning):
        gm = GaussianMixture(3, reg_covar=0.0, random_state=0, max_iter=5).fit(x)
    assert _finite(gm)


def test_volume_false_needs_gradient_descent() -> None:
    with pytest.raises(ValueError, match="volume=False"):
        GaussianMixture(2, volume=False).fit(_x())


def test_methods_before_fit_raise() -> None:
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        GaussianMixture(2).predict(_x())


def test_sample_bic_aic_have_sklearn_shapes() -> None:
    gm = GaussianMixture(2, random_state=0).fit(_x())
    xs, labels = gm.sample(50)
    assert xs.shape == (50, 3) and labels.shape == (50,)
    n_params = 2 * 3 * 4 / 2 + 2 * 3 + 1
    assert gm.bic(_x()) == pytest.approx(-2 * gm.score(_x()) * 200 + n_params * np.log(200))
    assert gm.aic(_x()) == pytest.approx(-2 * gm.score(_x()) * 200 + 2 * n_params)


# sklearn's checks run on small arrays; the stochastic fitters get the same checks.
_EXPECTED_FAILED: dict[str, str] = {}  # every check passes for all three fitters (none is expected to fail)


@parametrize_with_checks(
    [
        GaussianMixture(random_state=0),
        GaussianMixture(fitter="online_em", random_state=0, max_iter=20),
        GaussianMixture(fitter="gd", random_state=0, max_iter=20),
    ],
    expected_failed_checks=lambda est: _EXPECTED_FAILED,
)
def test_sklearn_estimator_checks(estimator: GaussianMixture, check: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)  # type: ignore[operator]
