"""A saved ``GaussianMixture`` read and scored with numpy alone: what ``implicit-em predict`` needs, without torch.

The file format is :mod:`implicit_em.mixture._io`'s (which writes it and builds the estimator from it); reading and
checking a file live here, so that ``GaussianMixture.load`` and :func:`read_mixture` refuse the same files with the
same messages. :class:`NumpyMixture` scores rows in float64 with numpy (scikit-learn's
``_estimate_log_gaussian_prob`` on the Cholesky factors of the precisions): its responsibilities equal the
estimator's ``predict_proba`` to round-off (1e-12), and importing it costs numpy, not torch (the command's
start-up: benchmarks/cli_startup.py).
"""

import json
import math
import os
import re
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["FORMAT", "SUFFIXES", "VERSION", "NumpyMixture", "read_mixture"]

FORMAT = "implicit_em.mixture.GaussianMixture"
VERSION = 1
SUFFIXES = (".npz", ".safetensors")
COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
_META = "__implicit_em__"
_ATTR = "attr."  # array key prefix of a fitted attribute
_PARAM = "param."  # array key prefix of an array constructor parameter
_SHIFT = "shift"
_REQUIRED_ARRAYS = ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_")
_REQUIRED_VALUES = ("n_features_in_", "converged_", "n_iter_", "lower_bound_")
_LEARNED = re.compile(r"[a-z][a-z0-9_]*_")  # sklearn's fitted-attribute names: public, ending in "_"


def _safetensors() -> Any:
    try:
        import safetensors.numpy
    except ImportError:
        raise ValueError(
            "a .safetensors model needs the safetensors package: pip install 'implicit-em[safetensors]' (or save "
            "as .npz)"
        ) from None
    return safetensors.numpy


# -- reading -------------------------------------------------------------------------------------------------


def _bad(path: Path, why: str) -> ValueError:
    return ValueError(f"{path} is not a readable implicit-em GaussianMixture model: {why}")


def _read(path: Path) -> tuple[dict[str, np.ndarray], str]:
    """The arrays and the JSON text of a model file, by its content (a zip archive is ``.npz``)."""
    with path.open("rb") as f:
        head = f.read(8)
    if head[:4] == b"PK\x03\x04":
        return _read_npz(path)
    if len(head) == 8:
        return _read_safetensors(path)
    raise _bad(path, f"it holds {path.stat().st_size} bytes, too few for a model")


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], str]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise _bad(
                path, "it holds an object array, which only pickle can read (refused; nothing was run)"
            ) from None
        raise _bad(path, f"the archive cannot be read ({err})") from None
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, RuntimeError) as err:
        raise _bad(path, f"it is truncated or not a numpy archive ({type(err).__name__}: {err})") from None
    raw = arrays.pop(_META, None)
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise _bad(path, f"it is a numpy archive without the {_META} record a saved model has")
    try:
        return arrays, raw.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(path, f"its {_META} record is not UTF-8 text") from None


def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], str]:
    _safetensors()
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="np") as f:
            metadata = f.metadata() or {}
            arrays = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise _bad(path, f"it is truncated or neither a numpy archive nor a safetensors file ({err})") from None
    if _META not in metadata:
        raise _bad(path, f"it is a safetensors file without the {_META} record a saved model has")
    return arrays, metadata[_META]


def _parse_meta(path: Path, text: str) -> dict[str, Any]:
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise _bad(path, f"its {_META} record is not JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _bad(path, f"its {_META} record does not name the format {FORMAT!r}")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _bad(path, f"its format version {version!r} is not a positive integer")
    if version > VERSION:
        raise ValueError(
            f"{path} was written by implicit-em {meta.get('implicit_em_version', '?')} in model format version "
            f"{version}; this implicit-em reads versions up to {VERSION}: upgrade implicit-em to load it"
        )
    return meta


def _check_fitted_state(path: Path, model: Any, arrays: dict[str, np.ndarray]) -> None:
    """Every attribute the scoring methods read is there, finite and of the shape its covariance type implies."""
    for name in _REQUIRED_ARRAYS:
        if _ATTR + name not in arrays:
            raise _bad(path, f"the fitted array {name} is missing")
    for name in _REQUIRED_VALUES:
        if not hasattr(model, name):
            raise _bad(path, f"the fitted attribute {name} is missing")
    if model.covariance_type not in COVARIANCE_TYPES:
        raise _bad(path, f"covariance_type {model.covariance_type!r} is not one of {COVARIANCE_TYPES}")
    means = model.means_
    if means.ndim != 2:
        raise _bad(path, f"means_ has shape {means.shape}, expected (K, D)")
    k, d = means.shape
    n_features = model.n_features_in_
    if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features != d:
        raise _bad(path, f"n_features_in_ is {n_features!r} but means_ has {d} features")
    cov_shape = {"full": (k, d, d), "tied": (d, d), "diag": (k, d), "spherical": (k,)}[model.covariance_type]
    shapes = {"weights_": (k,), "covariances_": cov_shape, "precisions_cholesky_": cov_shape, "precisions_": cov_shape}
    if _SHIFT in arrays:
        shapes[_SHIFT] = (d,)
    for name, shape in shapes.items():
        array = arrays[name] if name == _SHIFT else getattr(model, name)
        if array.shape != shape:
            raise _bad(
                path,
                f"{name} has shape {array.shape}, expected {shape} for {k} {model.covariance_type} "
                f"components in {d} features",
            )
    for name in (*_REQUIRED_ARRAYS, _SHIFT):
        array = arrays.get(_SHIFT) if name == _SHIFT else getattr(model, name)
        if array is not None and (array.dtype.kind != "f" or not np.isfinite(array).all()):
            raise _bad(path, f"{name} is not an array of finite floats")
    _check_parameter_values(path, model, k)
    kinds = [(model.converged_, bool), (model.n_iter_, int), (model.lower_bound_, int | float)]
    if not all(isinstance(value, kind) for value, kind in kinds) or isinstance(model.n_iter_, bool):
        raise _bad(path, "converged_, n_iter_ and lower_bound_ are not a bool, an int and a number")


def _check_parameter_values(path: Path, model: Any, k: int) -> None:
    """The values a mixture can hold: ``n_components`` = K, weights ≥ 0 summing to 1 (to the dtype's round-off),
    positive variances and Cholesky factors of the precisions that are upper triangular with a positive
    diagonal (a zero factor is an infinite variance: every score would be NaN)."""
    if model.n_components != k:
        raise _bad(path, f"n_components is {model.n_components!r} but its arrays hold {k} components")
    weights = np.asarray(model.weights_, dtype=np.float64)
    tol = 1e-4 if model.weights_.dtype == np.float32 else 1e-8
    if (weights < 0).any() or abs(float(weights.sum()) - 1.0) > tol:
        raise _bad(path, f"weights_ {np.array2string(weights, precision=4, threshold=8)} are not ≥ 0 summing to 1")
    chol, cov = np.asarray(model.precisions_cholesky_), np.asarray(model.covariances_)
    if model.covariance_type in ("full", "tied"):
        diag_chol, diag_cov = np.diagonal(chol, axis1=-2, axis2=-1), np.diagonal(cov, axis1=-2, axis2=-1)
        if not np.allclose(chol, np.triu(chol), rtol=0, atol=0):
            raise _bad(path, "precisions_cholesky_ is not upper triangular (scikit-learn's Cholesky factor)")
    else:
        diag_chol, diag_cov = chol, cov
    if not (diag_chol > 0).all():
        raise _bad(path, "precisions_cholesky_ has a diagonal entry ≤ 0: not the Cholesky factor of a precision")
    if not (diag_cov > 0).all():
        raise _bad(path, "covariances_ has a variance ≤ 0")


# -- scoring without torch -----------------------------------------------------------------------------------


class NumpyMixture:
    """The fitted parameters of a saved mixture and its scores, in numpy float64 (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        self.covariance_type: str = model.covariance_type
        self.n_components: int = int(model.means_.shape[0])
        self.n_features_in_: int = int(model.n_features_in_)
        self.weights_, self.means_, self.precisions_cholesky_, self.covariances_ = (
            np.asarray(a, dtype=np.float64)
            for a in (model.weights_, model.means_, model.precisions_cholesky_, model.covariances_)
        )

    def weighted_log_prob(self, x: np.ndarray) -> np.ndarray:
        """log π_j + log N(x_i; μ_j, Σ_j), (N, K): whitened residuals (x − μ_j) U_j, U the precisions' Cholesky
        factors (upper triangular for full and tied, their diagonal for diag, a scalar per component spherical)."""
        x = np.asarray(x, dtype=np.float64)
        mu, u, kind = self.means_, self.precisions_cholesky_, self.covariance_type
        d = x.shape[1]
        if kind == "full":
            sq = np.stack([np.square((x - mu[j]) @ u[j]).sum(1) for j in range(len(mu))], axis=1)
            log_det = np.log(np.diagonal(u, axis1=1, axis2=2)).sum(1)
        elif kind == "tied":
            sq = np.stack([np.square((x - mu[j]) @ u).sum(1) for j in range(len(mu))], axis=1)
            log_det = np.full(len(mu), np.log(np.diag(u)).sum())
        elif kind == "diag":
            sq = np.stack([np.square((x - mu[j]) * u[j]).sum(1) for j in range(len(mu))], axis=1)
            log_det = np.log(u).sum(1)
        else:  # spherical
            sq = np.stack([np.square(x - mu[j]).sum(1) * u[j] ** 2 for j in range(len(mu))], axis=1)
            log_det = d * np.log(u)
        with np.errstate(divide="ignore"):  # a component of weight 0: log 0 = -inf, responsibility 0
            log_w = np.log(self.weights_)
        return log_w + log_det - 0.5 * d * math.log(2 * math.pi) - 0.5 * sq

    def marginal_log_prob(self, x: np.ndarray) -> np.ndarray:
        """:meth:`weighted_log_prob` of rows with NaN features over their observed ones (``missing="marginalize"``):
        log π_j + log N(x_o; μ_o, Σ_oo), one Cholesky factor of Σ_oo per component and pattern of missing features."""
        x = np.asarray(x, dtype=np.float64)
        k, d = self.means_.shape
        cov = {
            "full": lambda: self.covariances_,
            "tied": lambda: np.broadcast_to(self.covariances_, (k, d, d)),
            "diag": lambda: np.stack([np.diag(c) for c in self.covariances_]),
            "spherical": lambda: self.covariances_[:, None, None] * np.eye(d),
        }[self.covariance_type]()
        with np.errstate(divide="ignore"):
            log_w = np.log(self.weights_)
        out = np.empty((x.shape[0], k))
        patterns, inverse = np.unique(np.isnan(x), axis=0, return_inverse=True)
        for p, miss in enumerate(patterns):
            rows, obs = np.nonzero(inverse.reshape(-1) == p)[0], ~miss
            for j in range(k):
                chol = np.linalg.cholesky(cov[j][np.ix_(obs, obs)])
                z = np.linalg.solve(chol, (x[np.ix_(rows, obs)] - self.means_[j, obs]).T)
                log_det = np.log(np.diag(chol)).sum()
                out[rows, j] = log_w[j] - log_det - 0.5 * obs.sum() * math.log(2 * math.pi) - 0.5 * (z * z).sum(0)
        return out

    def _log_prob(self, x: np.ndarray) -> np.ndarray:
        return self.marginal_log_prob(x) if np.isnan(x).any() else self.weighted_log_prob(x)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The most probable component of every row, (N,) (rows with NaN: on their observed features)."""
        return np.asarray(self._log_prob(np.asarray(x, dtype=np.float64)).argmax(1))

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Responsibilities, (N, K), float64 (rows with NaN: on their observed features)."""
        logp = self._log_prob(np.asarray(x, dtype=np.float64))
        logp -= logp.max(1, keepdims=True)
        p = np.exp(logp)
        return np.asarray(p / p.sum(1, keepdims=True))


#: the constructor parameters of ``GaussianMixture`` (tests/test_cli_predict_numpy.py keeps it equal to them)
PARAMETERS = frozenset(
    {
        "n_components", "covariance_type", "tol", "reg_covar", "max_iter", "n_init", "init_params",
        "weights_init", "means_init", "precisions_init", "random_state", "warm_start", "verbose",
        "verbose_interval", "fitter", "volume", "batch_size", "learning_rate", "optimizer", "split_merge",
        "device", "dtype", "checkpoint", "checkpoint_every", "missing",
    }
)  # fmt: skip


def read_mixture(path: str | os.PathLike[str]) -> NumpyMixture:
    """The mixture saved at ``path`` (``GaussianMixture.save``), checked as ``GaussianMixture.load`` checks it
    (the same ValueError naming the file), without importing torch."""
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no model file {source}" + (" (it is a directory)" if source.is_dir() else ""))
    arrays, text = _read(source)
    meta = _parse_meta(source, text)
    params = meta.get("params")
    if not isinstance(params, dict):
        raise _bad(source, "its constructor parameters are missing")
    unknown = sorted(set(params) - PARAMETERS)
    if unknown:
        raise _bad(source, f"it sets parameters this GaussianMixture does not have: {', '.join(unknown)}")
    fitted = fitted_attributes(source, meta, arrays)
    model = SimpleNamespace(n_components=params.get("n_components"), covariance_type=params.get("covariance_type"))
    for name, value in fitted.items():
        setattr(model, name, value)
    _check_fitted_state(source, model, arrays)
    return NumpyMixture(model)


def fitted_attributes(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The fitted attributes a file holds (from its JSON record and its ``attr.`` arrays), names checked."""
    attributes = meta.get("attributes")
    if not isinstance(attributes, dict) or not all(_LEARNED.fullmatch(str(k)) for k in attributes):
        raise _bad(path, "its fitted attributes are not a mapping of attribute names")
    out = dict(attributes)
    for key, value in arrays.items():
        if key.startswith(_ATTR):
            name = key[len(_ATTR) :]
            if not _LEARNED.fullmatch(name):
                raise _bad(path, f"it holds an array named {key!r}, not a fitted attribute")
            out[name] = value
    return out
