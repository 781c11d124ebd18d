r"""Specialisation and dynamics metrics: pure functions of responsibilities, parameters and attention patterns.

Shapes: r (N, K) responsibilities (any leading dims fold into N); K components; patterns (B, H, T, S).
"""

import numbers
from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian
from implicit_em._checks import check_finite, validate_args_enabled


def _rows(r: Tensor) -> Tensor:
    """``r`` as (N, K) rows, checked: responsibilities are finite, in [0, 1], and each row sums to 1 (to the square
    root of the dtype's epsilon: a softmax's round-off passes, a count or a logit does not). The value checks follow
    :func:`implicit_em.set_validate_args`, as the objectives' do."""
    if not isinstance(r, Tensor):
        raise TypeError(f"responsibilities must be a torch.Tensor (N, K), got {type(r).__name__}")
    if r.dim() < 1 or r.shape[-1] == 0:
        raise ValueError(f"responsibilities need a component dim, got shape {tuple(r.shape)}")
    rows = r.reshape(-1, r.shape[-1])  # (N, K)
    if validate_args_enabled() and rows.numel() and rows.is_floating_point():
        check_finite("responsibilities", rows)
        tol = float(torch.finfo(rows.dtype).eps) ** 0.5
        low, high = float(rows.min()), float(rows.max())
        if low < -tol or high > 1 + tol:
            raise ValueError(f"responsibilities must lie in [0, 1], got values from {low:.6g} to {high:.6g}")
        worst = float((rows.sum(dim=1) - 1).abs().max())
        if worst > tol * max(1, rows.shape[1]) ** 0.5:
            raise ValueError(f"responsibilities must sum to 1 over the components; a row is off by {worst:.3g}")
    return rows


def _usage(usage: Tensor) -> Tensor:
    """``usage`` checked: finite, non-negative, with some mass (its normalised form is defined)."""
    if validate_args_enabled():
        check_finite("usage", usage)
        if usage.numel() == 0 or float(usage.min()) < 0 or float(usage.sum()) <= 0:
            raise ValueError(f"usage must be non-negative with a positive sum, got {usage.tolist()}")
    return usage


def component_usage(r: Float[Tensor, "*n k"]) -> Float[Tensor, " k"]:
    r"""Responsibility mass per component, :math:`N_j / N` with :math:`N_j = \sum_i r_{ij}`; shape (K,)."""
    rows = _rows(r)
    return rows.sum(dim=0) / max(rows.shape[0], 1)


def usage_entropy(usage: Float[Tensor, " k"]) -> Float[Tensor, ""]:
    r"""Entropy (nats) of the normalised usage :math:`p_j = N_j / \sum_k N_k`; 0 if one component takes all."""
    p = _usage(usage) / usage.sum()
    return -torch.special.xlogy(p, p).sum()


def effective_components(usage: Float[Tensor, " k"]) -> Float[Tensor, ""]:
    r"""Effective number of components :math:`\exp H(p)`, from 1 (one component) to K (uniform usage)."""
    return usage_entropy(usage).exp()


def responsibility_histograms(r: Float[Tensor, "*n k"], bins: int = 10) -> Float[Tensor, "k b"]:
    """Counts of :math:`r_{ij}` per component in ``bins`` equal bins of [0, 1]; shape (K, bins).

    A specialised component has mass near 0 and near 1; an unspecialised one near 1/K.
    """
    if isinstance(bins, bool) or not isinstance(bins, numbers.Integral):
        raise TypeError(f"bins must be an integer, got {type(bins).__name__} {bins!r}")
    if bins < 1:
        raise ValueError(f"bins must be positive, got {bins}")
    index = (_rows(r) * bins).long().clamp(0, bins - 1)  # (N, K)
    return torch.nn.functional.one_hot(index, bins).sum(dim=0).to(r.dtype)  # (K, bins)


def relative_change(previous: Float[Tensor, "..."], current: Float[Tensor, "..."]) -> Float[Tensor, ""]:
    r""":math:`\lVert x_t - x_{t-1} \rVert_F / \lVert x_{t-1} \rVert_F` (a scalar tensor; inf if x_{t-1} = 0)."""
    if previous.shape != current.shape:
        raise ValueError(f"shapes differ: {tuple(previous.shape)} and {tuple(current.shape)}")
    return torch.linalg.vector_norm(current - previous) / torch.linalg.vector_norm(previous)


def drift(previous: Float[Tensor, "..."], current: Float[Tensor, "..."]) -> Float[Tensor, " k"]:
    r"""Per-component drift of prototypes or values (K, D): :math:`\lVert \mu_j' - \mu_j \rVert / \lVert \mu_j \rVert`.

    Returns:
        (K,) relative change of each row.
    """
    if previous.shape != current.shape or previous.dim() != 2:
        raise ValueError(f"drift needs two (K, D) tensors, got {tuple(previous.shape)} and {tuple(current.shape)}")
    return torch.linalg.vector_norm(current - previous, dim=1) / torch.linalg.vector_norm(previous, dim=1)


class TwoTimescale(NamedTuple):
    """Relative change per step of attention patterns, values and (optionally) W_V; ``ratio`` = values / attention."""

    attention: Float[Tensor, ""]
    values: Float[Tensor, ""]
    w_v: Float[Tensor, ""] | None
    ratio: Float[Tensor, ""]


def two_timescale(
    patterns_before: Float[Tensor, "..."],
    patterns_after: Float[Tensor, "..."],
    values_before: Float[Tensor, "..."],
    values_after: Float[Tensor, "..."],
    w_v_before: Float[Tensor, "..."] | None = None,
    w_v_after: Float[Tensor, "..."] | None = None,
) -> TwoTimescale:
    r"""The two-timescale measure of arXiv 2512.22473: how fast routing moves compared with content.

    .. math::  \rho = \frac{\lVert v_t - v_{t-1}\rVert / \lVert v_{t-1}\rVert}
                          {\lVert \alpha_t - \alpha_{t-1}\rVert / \lVert \alpha_{t-1}\rVert}

    Patterns and values must come from the same inputs at both steps (a fixed probe batch). A ratio above 1
    means the attention pattern (the E-step) has settled while the values (the M-step) still move.
    """
    attention = relative_change(patterns_before, patterns_after)
    values = relative_change(values_before, values_after)
    w_v = None
    if w_v_before is not None and w_v_after is not None:
        w_v = relative_change(w_v_before, w_v_after)
    return TwoTimescale(attention, values, w_v, values / attention)


def min_variance(whitening: gaussian.Shaped, covariance_type: str) -> Float[Tensor, " k"]:
    r"""Smallest variance of each component, :math:`1/\sigma_{\max}(W_j)^2` with :math:`\Sigma_j = (W_j^T W_j)^{-1}`.

    Whitening in the conventions of :func:`implicit_em.distances.gaussian_energies`: full (K, D, D), tied
    (D, D), diag (K, D), spherical (K,). Returns (K,) (tied: (1,)).
    """
    expected = {"full": (3, "(K, D, D)"), "tied": (2, "(D, D)"), "diag": (2, "(K, D)"), "spherical": (1, "(K,)")}
    if covariance_type in expected and whitening.dim() != expected[covariance_type][0]:
        shape = expected[covariance_type][1]
        raise ValueError(f"{covariance_type} whitening must have shape {shape}, got {tuple(whitening.shape)}")
    if covariance_type == "full":
        top = torch.linalg.matrix_norm(whitening, ord=2)
    elif covariance_type == "tied":
        top = torch.linalg.matrix_norm(whitening, ord=2)[None]
    elif covariance_type == "diag":
        top = whitening.abs().amax(dim=-1)
    elif covariance_type == "spherical":
        top = whitening.abs()
    else:
        raise ValueError(f"covariance_type must be full, tied, diag or spherical, got {covariance_type!r}")
    return top.pow(-2)
