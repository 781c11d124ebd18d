"""Saving and loading a fitted ``GaussianMixture`` in a format that cannot run code: ``.npz`` or ``.safetensors``.

``GaussianMixture.save(path)`` writes, by the path's suffix, either a numpy ``.npz`` archive (``np.savez``; read
back with ``np.load(allow_pickle=False)``, so an object array, which would need pickle, is refused) or a
safetensors file (``pip install 'implicit-em[safetensors]'``). Both hold plain numeric arrays and one JSON text:

- arrays: every fitted array attribute (``weights_`` (K,), ``means_`` (K, D), ``covariances_``,
  ``precisions_cholesky_`` and ``precisions_`` in the shape of the covariance type: full (K, D, D), tied (D, D),
  diag (K, D), spherical (K,)), the centre the scoring path expands around (``shift``, (D,)), and any array
  constructor parameter (``weights_init``, ``means_init``, ``precisions_init``), each in its own dtype;
- JSON (the ``.npz`` member ``__implicit_em__`` as UTF-8 bytes, or the safetensors metadata key of that name):
  the format name and version, the library version, the constructor parameters (``get_params``), the other
  fitted attributes (``n_features_in_``, ``converged_``, ``n_iter_``, ``lower_bound_``, ``history_``, ...) and
  the gradient-descent data scale.

The scoring methods of the loaded model equal the saved one's bitwise: every array is stored exactly, floats in
JSON as their shortest round-tripping text. Not stored: the fitters' running state (``partial_fit`` on a loaded
model starts new running statistics from the loaded parameters) and a ``random_state`` that is a generator
instance (stored as None, so ``sample`` then draws afresh). ``torch.dtype`` and ``torch.device`` parameters are
stored by name. The file is written through a temporary file and :func:`os.replace`, so a killed save leaves
the previous file.

Loading checks everything it reads: a file that is not a model, truncated, from a newer format version, or with
inconsistent shapes raises ``ValueError`` naming the file.
"""

import io
import json
import os
import re
import zipfile
from inspect import signature
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from implicit_em._runio import write_bytes_atomic
from implicit_em.gaussian import COVARIANCE_TYPES, parameter_shape

__all__ = ["FORMAT", "SUFFIXES", "VERSION", "load", "save"]

FORMAT = "implicit_em.mixture.GaussianMixture"
VERSION = 1
SUFFIXES = (".npz", ".safetensors")
_META = "__implicit_em__"
_ATTR = "attr."  # array key prefix of a fitted attribute
_PARAM = "param."  # array key prefix of an array constructor parameter
_SHIFT = "shift"
_REQUIRED_ARRAYS = ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_")
_REQUIRED_VALUES = ("n_features_in_", "converged_", "n_iter_", "lower_bound_")
_LEARNED = re.compile(r"[a-z][a-z0-9_]*_")  # sklearn's fitted-attribute names: public, ending in "_"


def save(model: Any, path: str | os.PathLike[str]) -> Path:
    """Write the fitted ``model`` to ``path`` (``.npz`` or ``.safetensors``); returns the path."""
    check_is_fitted(model)  # NotFittedError (a ValueError): "This GaussianMixture instance is not fitted yet..."
    target = Path(path)
    kind = _kind(target)
    arrays: dict[str, np.ndarray] = {}
    params = {name: _encode_param(name, value, arrays) for name, value in model.get_params(deep=False).items()}
    attributes: dict[str, Any] = {}
    for name, value in sorted(vars(model).items()):
        if _LEARNED.fullmatch(name) and name not in params:
            if isinstance(value, np.ndarray):
                arrays[_ATTR + name] = _plain_array(name, value)
            else:
                attributes[name] = _json_value(name, value)
    shift = getattr(model, "_shift", None)
    if shift is not None:
        arrays[_SHIFT] = np.ascontiguousarray(
            shift.detach().cpu().numpy() if isinstance(shift, torch.Tensor) else shift
        )
    scale = getattr(model, "_scale", None)
    meta = {
        "format": FORMAT,
        "format_version": VERSION,
        "implicit_em_version": _library_version(),
        "class": type(model).__name__,
        "params": params,
        "attributes": attributes,
        "scale": None if scale is None else float(scale),
    }
    text = json.dumps(meta, allow_nan=True)
    write_bytes_atomic(target, _npz_bytes(arrays, text) if kind == "npz" else _safetensors_bytes(arrays, text))
    return target


def load(cls: type, path: str | os.PathLike[str]) -> Any:
    """A fitted ``cls`` (a ``GaussianMixture``) read from ``path``, written by :func:`save`."""
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no model file {source}" + (" (it is a directory)" if source.is_dir() else ""))
    arrays, text = _read(source)
    meta = _parse_meta(source, text)
    model = cls(**_decode_params(source, meta, arrays, cls))
    attributes = meta.get("attributes")
    if not isinstance(attributes, dict) or not all(_LEARNED.fullmatch(str(k)) for k in attributes):
        raise _bad(source, "its fitted attributes are not a mapping of attribute names")
    for name, value in attributes.items():
        setattr(model, name, value)
    for key, value in arrays.items():
        if key.startswith(_ATTR):
            name = key[len(_ATTR) :]
            if not _LEARNED.fullmatch(name):
                raise _bad(source, f"it holds an array named {key!r}, not a fitted attribute")
            setattr(model, name, value)
    _check_fitted_state(source, model, arrays)
    if _SHIFT in arrays:  # without it, scoring expands around the mean of the means (a model fitted elsewhere)
        model._shift = torch.from_numpy(arrays[_SHIFT])
    scale = meta.get("scale")
    if scale is not None:
        model._scale = float(scale)
    return model


# -- writing -------------------------------------------------------------------------------------------------


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(
            f"cannot save a model as {path}: the file name must end in .npz (numpy) or .safetensors, got "
            f"{suffix or 'no suffix'!r}"
        )
    if not path.parent.is_dir():
        raise ValueError(f"cannot save a model as {path}: the directory {path.parent} does not exist")
    if suffix == ".safetensors":
        _safetensors()  # fail before any work if it is not installed
        return "safetensors"
    return "npz"


def _library_version() -> str:
    from implicit_em import __version__

    return __version__


def _plain_array(name: str, value: Any) -> np.ndarray:
    array = np.ascontiguousarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"cannot save {name}: an array of dtype {array.dtype} (only numbers are stored)")
    return array


def _json_value(name: str, value: Any) -> Any:
    """``value`` as plain JSON types (numpy scalars as Python numbers); TypeError for anything else."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(name, v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(name, v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return _json_value(name, value.tolist())
    raise TypeError(f"cannot save {name}: a {type(value).__name__} is neither an array nor plain JSON")


def _encode_param(name: str, value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """A constructor parameter as JSON: arrays go to ``arrays`` (named in a tag), dtypes and devices by name."""
    if isinstance(value, np.random.RandomState | np.random.Generator):
        return None  # a generator's state is not part of the model (see the module docstring)
    if isinstance(value, torch.dtype):
        return {"torch.dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"torch.device": str(value)}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.ndarray | torch.Tensor | list | tuple):
        data = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        arrays[_PARAM + name] = _plain_array(name, data)
        return {"array": _PARAM + name}
    return _json_value(name, value)


def _npz_bytes(arrays: dict[str, np.ndarray], text: str) -> bytes:
    buffer = io.BytesIO()
    members: dict[str, Any] = {**arrays, _META: np.frombuffer(text.encode("utf-8"), dtype=np.uint8)}
    np.savez(buffer, **members)
    return buffer.getvalue()


def _safetensors_bytes(arrays: dict[str, np.ndarray], text: str) -> bytes:
    numpy_io = _safetensors()
    return bytes(numpy_io.save(arrays, metadata={_META: text}))


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


def _decode_params(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], cls: type) -> dict[str, Any]:
    params = meta.get("params")
    if not isinstance(params, dict):
        raise _bad(path, "its constructor parameters are missing")
    known = set(signature(cls).parameters)
    unknown = sorted(set(params) - known)
    if unknown:
        raise _bad(path, f"it sets parameters this {cls.__name__} does not have: {', '.join(unknown)}")
    out = {}
    for name, value in params.items():
        if isinstance(value, dict) and set(value) == {"array"}:
            if value["array"] not in arrays:
                raise _bad(path, f"the array of parameter {name!r} is missing")
            value = arrays[value["array"]]
        elif isinstance(value, dict) and set(value) == {"torch.dtype"}:
            value = getattr(torch, str(value["torch.dtype"]), None)
            if not isinstance(value, torch.dtype):
                raise _bad(path, f"parameter {name!r} names no torch dtype")
        elif isinstance(value, dict) and set(value) == {"torch.device"}:
            value = torch.device(str(value["torch.device"]))
        out[name] = value
    return out


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
    cov_shape = parameter_shape(model.covariance_type, k, d)
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
