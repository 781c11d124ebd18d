"""The summaries the claims compute over seeds, replicates and training curves: one of each (the plateau of a
training curve is the wind tunnel's, re-exported).

Conventions: :func:`sd` is the sample standard deviation (``ddof=1``), 0 for fewer than two values (a spread is
only reported over two or more); NaN inputs propagate; an empty input is an error.
"""

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as _scipy_stats

from implicit_em.windtunnel.sticky import plateau_change, plateau_drop

__all__ = ["mean", "median", "plateau_change", "plateau_drop", "sd", "spearman", "spread"]


def _values(xs: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(xs, dtype=np.float64).ravel()
    if arr.size == 0:
        raise ValueError(f"{what} of no values")
    return arr


def mean(xs: Sequence[float] | np.ndarray) -> float:
    """The arithmetic mean, in float64."""
    return float(np.mean(_values(xs, "mean")))


def sd(xs: Sequence[float] | np.ndarray) -> float:
    """The sample standard deviation (``ddof=1``); 0.0 for a single value."""
    arr = _values(xs, "sd")
    return float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0


def median(xs: Sequence[float] | np.ndarray) -> float:
    """The median, in float64."""
    return float(np.median(_values(xs, "median")))


def spread(xs: Sequence[float] | np.ndarray) -> dict[str, float]:
    """``{"median", "min", "max"}`` of ``xs``."""
    arr = _values(xs, "spread")
    return {"median": float(np.median(arr)), "min": float(arr.min()), "max": float(arr.max())}


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (NaN when either is constant)."""
    a, b = _values(x, "spearman"), _values(y, "spearman")
    if a.shape != b.shape:
        raise ValueError(f"spearman needs two equal-length sequences, got {a.size} and {b.size}")
    if np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(_scipy_stats.spearmanr(a, b).statistic)
