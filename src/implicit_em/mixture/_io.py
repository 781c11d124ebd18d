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
from inspect import signature
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from implicit_em._runio import write_bytes_atomic

__all__ = ["FORMAT", "SUFFIXES", "VERSION", "load", "save"]

from implicit_em._model_file import (
    _ATTR,
    _LEARNED,
    _META,
    _PARAM,
    _SHIFT,
    FORMAT,
    SUFFIXES,
    VERSION,
    _bad,
    _check_fitted_state,
    _parse_meta,
    _read,
    _safetensors,
    fitted_attributes,
)


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
    for name, value in fitted_attributes(source, meta, arrays).items():
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


# -- reading -------------------------------------------------------------------------------------------------


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
