"""Input checks shared by the objectives and the distance layers.

Shape checks are free and always run. Checks that read tensor values (NaN, -inf, rows with no possible
component) cost one reduction and, on an accelerator, a device synchronisation. They run by default and can be
switched off for speed, as :meth:`torch.distributions.Distribution.set_default_validate_args` does::

    implicit_em.set_validate_args(False)
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

_VALIDATE_ARGS = True


def set_validate_args(value: bool) -> None:
    """Turn the value checks (NaN, -inf, all-impossible rows) on or off for the whole library."""
    global _VALIDATE_ARGS
    _VALIDATE_ARGS = bool(value)


def validate_args_enabled() -> bool:
    """Whether value checks are on (default True)."""
    return _VALIDATE_ARGS


def check_floating(name: str, t: Tensor) -> None:
    """Raise unless ``t`` is a floating-point tensor."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def check_distances(d: Tensor, dim: int, name: str = "d") -> None:
    """Check a distance tensor: float, at least one dimension, K >= 1 along ``dim``; then, when value checks are
    on, no NaN, no -inf, and no row whose distances are all +inf (a row with no possible component)."""
    check_floating(name, d)
    if d.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension (the K components), got a scalar")
    if not -d.dim() <= dim < d.dim():
        raise ValueError(f"dim={dim} is out of range for {name} of shape {tuple(d.shape)}")
    if d.shape[dim] == 0:
        raise ValueError(f"{name} has K = 0 components along dim={dim} (shape {tuple(d.shape)}); need K >= 1")
    if not _VALIDATE_ARGS:
        return
    if torch.isnan(d).any():
        raise ValueError(f"{name} contains NaN")
    if (d == float("-inf")).any():
        raise ValueError(f"{name} contains -inf (a distance must be > -inf; +inf marks an impossible component)")
    if d.numel() > 0 and torch.isposinf(d).all(dim=dim).any():
        raise ValueError(
            f"{name} has a row where every distance is +inf: no component is possible there, so the "
            "log-sum-exp is -inf and the responsibilities are undefined"
        )


def max_abs(x: Tensor | np.ndarray) -> float:
    """max |x| over all elements: NaN if any is NaN, inf if any is +-inf, 0.0 when there are none.

    Taken from the minimum and the maximum (reductions, which propagate NaN), so no temporary of x's size is
    made: ``torch.isfinite(x).all()`` builds an |x| copy and boolean masks, 1.4x a float64 input. A CPU tensor
    is read through its numpy view (shared memory; numpy's allocations are the ones tracemalloc sees).
    """
    if isinstance(x, Tensor):
        x = x.detach()
        if x.numel() == 0:
            return 0.0
        if x.device.type == "cpu" and x.dtype not in (torch.bfloat16, torch.bool):
            low, high = _min_max(x.resolve_neg().numpy())
        else:
            lo, hi = torch.aminmax(x if x.dtype != torch.bool else x.to(torch.uint8))
            low, high = float(lo), float(hi)  # one device synchronisation
    elif x.size == 0:
        return 0.0
    else:
        low, high = _min_max(x)
    return math.nan if math.isnan(low) or math.isnan(high) else max(abs(low), abs(high))


def _min_max(x: np.ndarray) -> tuple[float, float]:
    return float(x.min()), float(x.max())


def check_finite(name: str, t: Tensor) -> None:
    """When value checks are on, raise if ``t`` holds NaN or +-inf (one reduction, no temporary copy)."""
    if _VALIDATE_ARGS and not math.isfinite(max_abs(t)):
        raise ValueError(f"{name} contains NaN or inf")
