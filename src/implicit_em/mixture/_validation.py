"""Checks of :class:`~implicit_em.mixture.GaussianMixture`'s inputs: one pure function per check.

Each check names the argument it reads and says what is wrong, as scikit-learn does, and raises ``ValueError``
(``TypeError`` for a wrong kind of object); none changes a valid input or its result. The estimator calls them
from ``_check_parameters``, ``_source`` and ``_apply_user_init``, the data adapter (``_data.py``) per batch.

**How large X may be.** The fitters sum products of the centred data over the rows in the compute dtype
(the quadratic features x_a x_b of ``_stats.py``). With N rows and m = max |X|, every such sum is at most N·m²
in magnitude (Σ (x − x̄)² ≤ Σ x² ≤ N·m²), so

.. math::  N \\cdot \\max |X|^2 < \\text{finfo(dtype).max}

guarantees that none overflows; X beyond that raises (it used to give NaN ``means_``). In float64 that is
max |X| < 1.3e154 / √N; float32 (3.4e38) allows 1.8e19 / √N, so float32 data that large fits with
``dtype="float64"``. For a stream N is the number of rows read so far in the pass.

**When reg_covar dominates.** ``reg_covar`` is an absolute floor added to every variance. When it exceeds a
tenth of a feature's variance (0 < var_f < 10·reg_covar) it, not the data, sets that feature's fitted spread:
at data scale 1e-8 it moves the log-likelihood by about 32 nats per sample. :func:`warn_if_reg_covar_dominates`
then warns with :class:`RegCovarWarning`; the numbers do not change. Constant features (variance 0) are what the
floor is for and do not warn.
"""

import math
import os
import sys
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em._checks import max_abs

__all__ = [
    "RegCovarWarning",
    "check_device",
    "check_finite_parameter",
    "check_magnitude",
    "check_means_init",
    "check_precisions_init",
    "check_real_dtype",
    "check_values",
    "check_warm_start_width",
    "check_weights_init",
    "magnitude_limit",
    "warn_if_reg_covar_dominates",
]

_NOT_NUMBERS = tuple(getattr(torch, n) for n in ("quint8", "qint8", "qint32", "quint4x2") if hasattr(torch, n))
REG_COVAR_RATIO = 0.1  # warn when reg_covar > REG_COVAR_RATIO x the smallest nonzero per-feature variance


class RegCovarWarning(UserWarning):
    """``reg_covar`` exceeds a tenth of a feature's variance, so the floor, not the data, sets its spread."""


def check_real_dtype(name: str, dtype: torch.dtype | np.dtype[Any]) -> None:
    """Raise unless ``dtype`` holds real numbers: complex would lose its imaginary part in the float cast."""
    if isinstance(dtype, torch.dtype):  # bool and integers cast exactly (as sklearn casts them)
        complex_, real = dtype.is_complex, not dtype.is_complex and dtype not in _NOT_NUMBERS
    else:
        complex_, real = dtype.kind == "c", dtype.kind in "biuf"
    if complex_:
        raise ValueError(
            f"{name} holds complex numbers (dtype {dtype}); a Gaussian mixture here is over real data, and the "
            f"cast to float would drop the imaginary part. Pass {name}.real, or stack real and imaginary parts "
            "as separate features"
        )
    if not real:
        raise ValueError(f"{name} must hold real numbers, got dtype {dtype}")


def magnitude_limit(n_rows: int, dtype: torch.dtype) -> float:
    """The bound on max |X| of the module docstring: sqrt(finfo(dtype).max / N)."""
    return math.sqrt(torch.finfo(dtype).max / max(int(n_rows), 1))


def check_magnitude(name: str, peak: float, n_rows: int, dtype: torch.dtype) -> None:
    """Raise if N·peak² would overflow ``dtype`` (``peak`` = max |X| over the first ``n_rows`` rows)."""
    limit = magnitude_limit(n_rows, dtype)
    if peak < limit:
        return
    hint = " or fit with dtype='float64'" if dtype != torch.float64 else ""
    raise ValueError(
        f"{name} is too large for {str(dtype).replace('torch.', '')}: max |{name}| = {peak:.3g} with "
        f"{n_rows} rows, and sums of squares over the rows need N·max|{name}|² < {torch.finfo(dtype).max:.3g} "
        f"(max |{name}| < {limit:.3g}). Rescale {name} (e.g. divide by its standard deviation){hint}"
    )


def check_values(
    name: str, x: Tensor | np.ndarray, n_rows: int, dtype: torch.dtype, missing: bool = False, first_row: int = 0
) -> float:
    """No NaN or inf in ``x`` and N·max|x|² within ``dtype`` (N = ``n_rows``); returns max |x|.

    One reduction over ``x`` with no temporary of its size (``_checks.max_abs``). ``missing``: a NaN is a missing
    value (``missing="marginalize"``), allowed except where a whole row is NaN (named by its row, counted from
    ``first_row``); inf is still an error, and the magnitude is over the observed values."""
    peak = max_abs(x)
    if math.isnan(peak) and missing:
        t = torch.as_tensor(x)
        nan = torch.isnan(t)
        empty = torch.nonzero(nan.all(1)).reshape(-1)
        if len(empty):
            raise ValueError(
                f"{len(empty)} row(s) of {name} have every feature missing (first: row {first_row + int(empty[0])}); "
                "a row with nothing observed says nothing about the mixture: remove it"
            )
        peak = max_abs(torch.where(nan, 0.0, t))
        if math.isinf(peak):
            raise ValueError(f"Input {name} contains infinity (inf); NaN is a missing value, inf is not")
    if not math.isfinite(peak):
        raise ValueError(f"Input {name} contains NaN or infinity (inf); remove or impute those rows")
    check_magnitude(name, peak, n_rows, dtype)
    return peak


def _as_float64(name: str, value: Any) -> np.ndarray:
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of numbers, got {value!r:.80}") from err
    if not np.isfinite(out).all():
        what = "NaN" if np.isnan(out).any() else "inf"
        raise ValueError(f"{name} contains {what}; every value must be finite")
    return out


def check_sample_weight(sample_weight: Any, n_samples: int | None) -> np.ndarray:
    """``sample_weight`` as float64 (N,): one finite, non-negative number per row of X, not all zero.

    A weight multiplies its row's share of every statistic and of the log-likelihood: an integer weight equals
    repeating the row, a zero weight equals removing it."""
    if isinstance(sample_weight, Tensor):
        sample_weight = sample_weight.detach().cpu().numpy()
    w = _as_float64("sample_weight", sample_weight)
    if w.ndim != 1:
        raise ValueError(f"sample_weight must be 1-D (one weight per row of X), got shape {w.shape}")
    if n_samples is not None and w.shape[0] != n_samples:
        raise ValueError(f"sample_weight has {w.shape[0]} weights, but X has {n_samples} rows")
    if (w < 0).any():
        raise ValueError(f"sample_weight must be non-negative, got {float(w.min()):g} at row {int(w.argmin())}")
    if not (w > 0).any():
        raise ValueError("sample_weight is zero for every row; at least one row must have a positive weight")
    return w


def check_weights_init(weights: Any, n_components: int) -> np.ndarray:
    """``weights_init`` as float64 (K,): finite, in [0, 1], summing to 1 (within 1e-6)."""
    w = _as_float64("weights_init", weights)
    if w.shape != (n_components,) or (w < 0).any() or (w > 1).any() or abs(float(w.sum()) - 1) > 1e-6:
        raise ValueError(
            f"weights_init must have shape ({n_components},), lie in [0, 1] and sum to 1, got {w} (shape {w.shape})"
        )
    return w


def check_means_init(means: Any, n_components: int, n_features: int) -> np.ndarray:
    """``means_init`` as float64 (K, D), finite."""
    mu = _as_float64("means_init", means)
    if mu.shape != (n_components, n_features):
        raise ValueError(f"means_init must have shape ({n_components}, {n_features}), got {mu.shape}")
    return mu


def check_precisions_init(precisions: Any, covariance_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """``precisions_init`` as float64 in ``shape``: finite; symmetric positive definite ("full", "tied"; the test
    of sklearn's ``_check_precision_matrix``: allclose to its transpose, every eigenvalue > 0) or positive."""
    prec = _as_float64("precisions_init", precisions)
    if prec.shape != shape:
        raise ValueError(
            f"precisions_init must have shape {shape} for covariance_type={covariance_type!r}, got {prec.shape}"
        )
    if covariance_type in ("full", "tied"):
        mats = prec.reshape(-1, *prec.shape[-2:])
        for j, p in enumerate(mats):
            which = f"precisions_init[{j}]" if covariance_type == "full" else "precisions_init"
            if not np.allclose(p, p.T):
                raise ValueError(f"{which} must be symmetric, positive definite; it is not symmetric")
            low = float(np.linalg.eigvalsh(p).min())
            if not low > 0:
                raise ValueError(f"{which} must be symmetric, positive definite; its smallest eigenvalue is {low:.3g}")
    elif not (prec > 0).all():
        raise ValueError(f"precisions_init must be positive ({covariance_type!r}), got minimum {prec.min():.3g}")
    return prec


def check_warm_start_width(n_features: int, n_features_in: int) -> None:
    """A ``warm_start`` refit continues the previous parameters, so X must keep their width."""
    if n_features != n_features_in:
        raise ValueError(
            f"X has {n_features} features, but warm_start=True continues the previous fit, which has "
            f"{n_features_in} features; set warm_start=False to fit from scratch"
        )


def check_finite_parameter(name: str, value: Any) -> None:
    """A numeric hyper-parameter (``reg_covar``, ``learning_rate``) must be finite."""
    if isinstance(value, int | float) and not math.isfinite(value):
        raise ValueError(f"The '{name}' parameter of GaussianMixture must be finite. Got {value!r}")


def check_device(device: Any) -> torch.device:
    """``device`` as a ``torch.device`` this process can allocate on."""
    try:
        out = torch.device(device)
        torch.empty(0, device=out)
    except (RuntimeError, AssertionError, TypeError, ValueError) as err:
        raise ValueError(f"The 'device' parameter of GaussianMixture is not usable here: {device!r} ({err})") from err
    return out


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside this package (the user's call), for ``warnings.warn``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def warn_if_reg_covar_dominates(reg_covar: float, variances: Tensor) -> None:
    """Warn (:class:`RegCovarWarning`) when 0 < var_f < reg_covar / REG_COVAR_RATIO for a feature f.

    ``variances``: the per-feature variance of the data (or of the initialisation sample), shape (D,)."""
    import warnings

    v = variances.detach().double().cpu()
    small = (v > 0) & (v * REG_COVAR_RATIO < reg_covar)
    if not bool(small.any()):
        return
    f = int(torch.where(small, v, torch.inf).argmin())
    warnings.warn(
        f"reg_covar={reg_covar:g} exceeds {REG_COVAR_RATIO:g} x the variance of {int(small.sum())} feature(s) "
        f"(feature {f} has variance {float(v[f]):.3g}): the floor, not the data, sets their fitted spread and "
        "shifts the log-likelihood. Rescale X (e.g. StandardScaler) or lower reg_covar",
        RegCovarWarning,
        stacklevel=_user_stacklevel(),
    )
