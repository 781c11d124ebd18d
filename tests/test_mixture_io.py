"""GaussianMixture.save / load (``mixture/_io.py``): exact round trips, and every bad file refused by name.

All of these fail on the code before ``save``/``load`` existed (AttributeError). Planted bugs they catch: not
storing ``_shift`` (scores then differ in the last bits: the bitwise tests), dropping ``allow_pickle=False``
(the pickle test creates a file), skipping the format-version check (the newer-version test).
"""

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError

from implicit_em.mixture import GaussianMixture, _io

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
SUFFIXES = (".npz", ".safetensors")


def _data(n: int = 300, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0] * d, [4.0] * d, [-3.0, 5.0, 1.0][:d]])
    return centres[rng.randint(0, 3, n)] + rng.randn(n, d)


def _fit(covariance_type: str = "full", fitter: str = "em", **kwargs: Any) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GaussianMixture(
            3, covariance_type=covariance_type, fitter=fitter, random_state=0, max_iter=20, **kwargs
        ).fit(_data())


def _assert_same_scores(a: GaussianMixture, b: GaussianMixture, x: np.ndarray) -> None:
    """Bitwise: predict, predict_proba and score_samples of the two models on x."""
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    for method in ("predict_proba", "score_samples"):
        ours, theirs = getattr(a, method)(x), getattr(b, method)(x)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), method


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_round_trip_scores_bitwise_equal(tmp_path: Path, covariance_type: str, suffix: str) -> None:
    model = _fit(covariance_type)
    loaded = GaussianMixture.load(model.save(tmp_path / f"model{suffix}"))
    x = _data(200, seed=1)
    _assert_same_scores(model, loaded, x)
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_"):
        assert np.array_equal(getattr(model, name), getattr(loaded, name)), name
        assert getattr(loaded, name).dtype == getattr(model, name).dtype
    for name in ("n_features_in_", "converged_", "n_iter_", "lower_bound_", "history_"):
        assert getattr(loaded, name) == getattr(model, name), name
    assert loaded.get_params() == model.get_params()
    assert torch.equal(loaded._shift, model._shift) and loaded._scale == model._scale


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_round_trip_of_the_other_fitters(tmp_path: Path, fitter: str) -> None:
    model = _fit("diag", fitter)
    loaded = GaussianMixture.load(model.save(tmp_path / "model.npz"))
    _assert_same_scores(model, loaded, _data(100, seed=2))
    assert loaded.fitter == fitter


def test_array_dtype_and_device_parameters_round_trip(tmp_path: Path) -> None:
    means_init = _data(3, seed=3)
    model = _fit("full", means_init=means_init, dtype=torch.float32, device=torch.device("cpu"))
    loaded = GaussianMixture.load(model.save(tmp_path / "model.safetensors"))
    assert np.array_equal(loaded.means_init, means_init)
    assert loaded.dtype is torch.float32 and loaded.device == torch.device("cpu")
    _assert_same_scores(model, loaded, _data(50, seed=4))


def test_a_generator_random_state_is_stored_as_none(tmp_path: Path) -> None:
    model = _fit("spherical").set_params(random_state=np.random.RandomState(5))
    assert GaussianMixture.load(model.save(tmp_path / "model.npz")).random_state is None


def test_a_loaded_model_keeps_learning(tmp_path: Path) -> None:
    """partial_fit and a warm-start refit continue from the loaded parameters (new running statistics)."""
    model = _fit("full")
    loaded = GaussianMixture.load(model.save(tmp_path / "model.npz"))
    loaded.partial_fit(_data(100, seed=6))
    assert loaded.n_iter_ == model.n_iter_ + 1 and np.isfinite(loaded.means_).all()


def test_the_file_records_versions_and_parameters_as_json(tmp_path: Path) -> None:
    path = _fit("tied").save(tmp_path / "model.npz")
    with np.load(path, allow_pickle=False) as archive:
        meta = json.loads(archive["__implicit_em__"].tobytes().decode())
    from implicit_em import __version__

    assert meta["format"] == _io.FORMAT and meta["format_version"] == _io.VERSION
    assert meta["implicit_em_version"] == __version__
    assert meta["params"]["covariance_type"] == "tied" and meta["attributes"]["n_features_in_"] == 3
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, replaced atomically


def test_saving_an_unfitted_model_fails(tmp_path: Path) -> None:
    with pytest.raises(NotFittedError, match="not fitted"):
        GaussianMixture(2).save(tmp_path / "model.npz")
    assert not (tmp_path / "model.npz").exists()


@pytest.mark.parametrize("name", ["model.pkl", "model", "missing/model.npz"])
def test_saving_under_a_bad_name_fails(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"\.npz|does not exist"):
        _fit().save(tmp_path / name)


def _saved(tmp_path: Path, suffix: str = ".npz") -> Path:
    return _fit("diag").save(tmp_path / f"model{suffix}")


def _rewrite_npz(path: Path, change: Any) -> None:
    """Rewrite a saved .npz with ``change(members, meta)`` applied (members: name -> array, meta: the JSON)."""
    with np.load(path, allow_pickle=False) as archive:
        members = {name: archive[name] for name in archive.files}
    meta = json.loads(members.pop("__implicit_em__").tobytes().decode())
    change(members, meta)
    text = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **members, __implicit_em__=text)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_truncated_file_is_refused_by_name(tmp_path: Path, suffix: str) -> None:
    path = _saved(tmp_path, suffix)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"{path.name} is not a readable implicit-em GaussianMixture model"):
        GaussianMixture.load(path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"weights,means\n1,2\n", "neither a numpy archive nor a safetensors"),
        (b"", "too few for a model"),
    ],
)
def test_a_file_that_is_not_a_model_is_refused(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "model.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=reason):
        GaussianMixture.load(path)


def test_a_numpy_archive_without_the_record_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "other.npz", weights_=np.ones(2))
    with pytest.raises(ValueError, match=r"other\.npz .* without the __implicit_em__ record"):
        GaussianMixture.load(tmp_path / "other.npz")


def test_a_safetensors_file_without_the_record_is_refused(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({"weights": np.ones(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match=r"other\.safetensors .* without the __implicit_em__ record"):
        GaussianMixture.load(tmp_path / "other.safetensors")


class _Plant:
    """Unpickling this creates a file: proof that code from the archive ran."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.target),))


def test_a_pickle_bearing_archive_is_refused_without_running_it(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    planted = tmp_path / "code-ran"
    bomb = np.empty(1, dtype=object)
    bomb[0] = _Plant(str(planted))

    def add_object_array(members: dict[str, Any], meta: dict[str, Any]) -> None:
        members["attr.extra_"] = bomb

    _rewrite_npz(path, add_object_array)
    with pytest.raises(ValueError, match=r"model.npz .*object array, which only pickle can read"):
        GaussianMixture.load(path)
    assert not planted.exists()


def test_a_newer_format_version_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    _rewrite_npz(path, lambda members, meta: meta.update(format_version=_io.VERSION + 1))
    with pytest.raises(ValueError, match=rf"model.npz .*format version {_io.VERSION + 1}.* upgrade"):
        GaussianMixture.load(path)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m, meta: m.pop("attr.means_"), "means_ is missing"),
        (lambda m, meta: m.update({"attr.weights_": np.ones(5)}), r"weights_ has shape \(5,\)"),
        (lambda m, meta: m.update({"attr.covariances_": np.ones((3, 4))}), "covariances_ has shape"),
        (lambda m, meta: m["attr.precisions_cholesky_"].__setitem__((0, 0), np.nan), "not an array of finite"),
        (lambda m, meta: meta["params"].update(bogus=1), "parameters this GaussianMixture does not have: bogus"),
        (lambda m, meta: meta["attributes"].pop("n_iter_"), "n_iter_ is missing"),
        (lambda m, meta: meta["attributes"].update(n_features_in_=7), "n_features_in_ is 7"),
        (lambda m, meta: meta.update(format="something else"), "does not name the format"),
    ],
    ids=["no-means", "weights-shape", "cov-shape", "nan", "unknown-param", "no-n-iter", "width", "format"],
)
def test_an_inconsistent_model_is_refused(tmp_path: Path, change: Any, reason: str) -> None:
    path = _saved(tmp_path)
    _rewrite_npz(path, change)
    with pytest.raises(ValueError, match=reason):
        GaussianMixture.load(path)


def _set_weights(members: dict[str, np.ndarray], weights: list[float]) -> None:
    members["attr.weights_"] = np.asarray(weights)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m, meta: _set_weights(m, [1.5, -0.5, 0.0]), "not ≥ 0 summing to 1"),
        (lambda m, meta: _set_weights(m, [0.9, 0.9, 0.9]), "not ≥ 0 summing to 1"),
        (lambda m, meta: m["attr.precisions_cholesky_"].__setitem__(0, 0.0), "diagonal entry ≤ 0"),
        (lambda m, meta: m["attr.precisions_cholesky_"].__setitem__((0, 2, 0), 1.0), "not upper triangular"),
        (lambda m, meta: m["attr.covariances_"].__setitem__((1, 1, 1), -1.0), "variance ≤ 0"),
        (lambda m, meta: meta["params"].update(n_components=7), "n_components is 7 but its arrays hold 3"),
    ],
    ids=["negative-weight", "weights-sum", "zero-cholesky", "lower-triangle", "negative-variance", "k-mismatch"],
)
def test_an_impossible_mixture_is_refused_on_load_and_by_predict(
    tmp_path: Path, change: Any, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each printed NaN (or garbage) from ``predict`` with exit 0 before load checked the values."""
    from implicit_em.cli import main

    path = _fit("full").save(tmp_path / "model.npz")
    _rewrite_npz(path, change)
    with pytest.raises(ValueError, match=reason):
        GaussianMixture.load(path)
    data = tmp_path / "x.csv"
    np.savetxt(data, _data(20), delimiter=",")
    assert main(["predict", str(path), str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and reason.split(" ")[0] in err


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no model file .*nothing\.npz"):
        GaussianMixture.load(tmp_path / "nothing.npz")


def test_without_safetensors_the_message_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(ValueError, match=r"implicit-em\[safetensors\]"):
        _fit().save(tmp_path / "model.safetensors")
