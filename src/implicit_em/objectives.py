r"""Log-sum-exp objectives over distances, and their controls (paper §3, §4, §6).

Every objective takes distances ``d`` of shape (..., K) (components along ``dim``, default the last) and returns
one value per row, shape (...); the caller reduces, as with :func:`torch.logsumexp`. Outputs follow the input's
dtype and device; float16, bfloat16, float32 and float64 all work.

The identity behind the library (Theorem 1): for :math:`L(d) = \log \sum_j \exp(-d_j)`,

.. math::  \frac{\partial L}{\partial d_j} = -r_j, \qquad r = \mathrm{softmax}(-d).

Conventions for infinite distances: ``+inf`` marks an impossible component (its responsibility is exactly 0,
no NaN). ``-inf`` and NaN are errors, and so is a row where every distance is ``+inf`` (no component is
possible, so the responsibilities are undefined). These value checks cost one reduction (a device sync on an
accelerator); switch them off with :func:`implicit_em.set_validate_args` (``False``), in which case such a row
gives ``lse = -inf`` and NaN responsibilities.
"""

import math
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from implicit_em._checks import check_distances, check_finite, check_floating, validate_args_enabled

__all__ = [
    "append_null",
    "constrained_cross_entropy",
    "correntropy",
    "independent_sigmoid_bce",
    "lse",
    "mixture_nll",
    "open_set_lse",
    "open_set_responsibilities",
    "responsibilities",
    "softmin_bounds",
]

Regime = Literal["lse", "mixture_nll", "constrained"]


# --------------------------------------------------------------------------------------------------------------
# The LSE family
# --------------------------------------------------------------------------------------------------------------


def lse(d: Float[Tensor, "*batch k"], dim: int = -1) -> Float[Tensor, "..."]:
    r"""Log-sum-exp of negative distances (paper Theorem 1).

    .. math::  L(d) = \log \sum_{j=1}^{K} \exp(-d_j)

    Gradient: :math:`\partial L / \partial d_j = -r_j` with :math:`r = \mathrm{softmax}(-d)`.

    Args:
        d: distances, K components along ``dim``.
        dim: the component dimension.
    Returns:
        L for each row: ``d``'s shape without ``dim``.
    """
    check_distances(d, dim)
    return torch.logsumexp(-d, dim=dim)


def _logits(d: Tensor, log_weights: Tensor | None, dim: int) -> Tensor:
    """log π − d, with 1-D log weights (K,) placed along ``dim``."""
    check_distances(d, dim)
    if log_weights is None:
        return -d
    check_floating("log_weights", log_weights)
    k = d.shape[dim]
    if log_weights.dim() == 1:
        if log_weights.shape[0] != k:
            raise ValueError(f"log_weights has {log_weights.shape[0]} entries but d has K = {k} along dim={dim}")
        shape = [1] * d.dim()
        shape[dim] = k
        log_weights = log_weights.reshape(shape)
    elif _broadcast(log_weights.shape, d.shape) != d.shape:
        raise ValueError(f"log_weights of shape {tuple(log_weights.shape)} does not broadcast to d {tuple(d.shape)}")
    if validate_args_enabled():
        if torch.isnan(log_weights).any() or torch.isposinf(log_weights).any():
            raise ValueError("log_weights contains NaN or +inf")
    logits = log_weights.to(d.dtype) - d
    if validate_args_enabled() and torch.isneginf(logits).all(dim=dim).any():
        raise ValueError("a row has zero weight (log π = -inf) or +inf distance for every component")
    return logits


def _broadcast(a: torch.Size, b: torch.Size) -> torch.Size | None:
    """The broadcast shape of ``a`` and ``b``, None if they do not broadcast."""
    try:
        return torch.broadcast_shapes(a, b)
    except RuntimeError:
        return None


def _check_tensor(name: str, t: object) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def responsibilities(
    d: Float[Tensor, "*batch k"], log_weights: Tensor | None = None, dim: int = -1
) -> Float[Tensor, "*batch k"]:
    r"""Responsibilities, the posterior over components (paper Eq. 4).

    .. math::  r_j = \frac{\pi_j \exp(-d_j)}{\sum_k \pi_k \exp(-d_k)} = \mathrm{softmax}(\log\pi - d)_j

    Args:
        d: distances, K components along ``dim``.
        log_weights: optional log mixing weights :math:`\log \pi`, shape (K,) or broadcastable to ``d``; assumed
            normalised (use :func:`torch.log_softmax` on free parameters). ``-inf`` means weight zero.
        dim: the component dimension.
    Returns:
        r, same shape as ``d``; each row lies in [0, 1] and sums to 1.
    """
    return torch.softmax(_logits(d, log_weights, dim), dim=dim)


def mixture_nll(d: Float[Tensor, "*batch k"], log_weights: Tensor | None = None, dim: int = -1) -> Float[Tensor, "..."]:
    r"""Negative log marginal likelihood of a mixture, the loss of the unsupervised regime (§4.1).

    .. math::  L^-(d) = -\log \sum_j \pi_j \exp(-d_j)

    It is minimised; its gradient is :math:`\partial L^- / \partial d_j = +r_j`, as the paper prints it in §4.1
    (the sign error a review reports there is not in this text of the paper). With Gaussian energies from
    :func:`~implicit_em.distances.gaussian_energies` this is exactly the Gaussian mixture negative log-likelihood.

    Args:
        d: distances (energies), K components along ``dim``.
        log_weights: optional normalised log mixing weights, as in :func:`responsibilities`.
        dim: the component dimension.
    Returns:
        :math:`L^-` for each row.
    """
    return -torch.logsumexp(_logits(d, log_weights, dim), dim=dim)


def softmin_bounds(d: Float[Tensor, "*batch k"], dim: int = -1) -> tuple[Tensor, Tensor]:
    r"""Bounds of the soft minimum :math:`-L(d)` (paper §3.1).

    .. math::  \min_j d_j - \log K \;\le\; -L(d) \;\le\; \min_j d_j

    Returns:
        (lower, upper) = (min d − log K, min d), each with ``d``'s shape without ``dim``.
    """
    check_distances(d, dim)
    dmin = torch.amin(d, dim=dim)
    return dmin - math.log(d.shape[dim]), dmin


# --------------------------------------------------------------------------------------------------------------
# The constrained regime and the non-normalised controls
# --------------------------------------------------------------------------------------------------------------


def _check_index_target(target: Tensor, like: Tensor, dim: int) -> None:
    """Class indices must have ``like``'s shape without ``dim`` and lie in [0, K)."""
    reduced = list(like.shape)
    del reduced[dim]
    if list(target.shape) != reduced:
        raise ValueError(
            f"class-index target must have shape {tuple(reduced)} (d without dim), got {tuple(target.shape)}"
        )
    k = like.shape[dim]
    if validate_args_enabled() and target.numel() > 0 and (target.min() < 0 or target.max() >= k):
        raise ValueError(f"class-index target out of range [0, {k})")


def _target_distribution(
    target: Tensor, like: Tensor, dim: int, label_smoothing: float, name: str = "target"
) -> Tensor:
    """Soft target distribution t (same shape as ``like``) from class indices or soft targets."""
    _check_tensor(name, target)
    k = like.shape[dim]
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], got {label_smoothing}")
    if not target.is_floating_point():
        _check_index_target(target, like, dim)
        t = F.one_hot(target.long(), k).to(like.dtype).movedim(-1, dim)
    else:
        if target.shape != like.shape:
            raise ValueError(f"soft target must have d's shape {tuple(like.shape)}, got {tuple(target.shape)}")
        check_finite("target", target)
        t = target.to(like.dtype)
    if label_smoothing > 0.0:
        t = t * (1.0 - label_smoothing) + label_smoothing / k
    return t


def constrained_cross_entropy(
    d: Float[Tensor, "*batch k"],
    target: Tensor,
    dim: int = -1,
    label_smoothing: float = 0.0,
) -> Float[Tensor, "..."]:
    r"""Cross-entropy on logits :math:`z = -d`, the constrained regime (paper §4.3).

    .. math::  \ell = -\sum_k t_k \log \mathrm{softmax}(-d)_k, \qquad
               \frac{\partial \ell}{\partial d_k} = t_k - r_k

    For class indices :math:`t` is one-hot, so :math:`\ell = d_y + \log \sum_k \exp(-d_k)`. Equal to
    ``torch.nn.functional.cross_entropy(-d, target, reduction="none", label_smoothing=...)``.

    Args:
        d: distances, K classes along ``dim``.
        target: class indices (integer, ``d``'s shape without ``dim``) or soft targets (``d``'s shape).
        dim: the class dimension.
        label_smoothing: mixes t with the uniform distribution, as in PyTorch.
    Returns:
        ℓ for each row.
    """
    log_r = torch.log_softmax(_logits(d, None, dim), dim=dim)
    _check_tensor("target", target)
    if not target.is_floating_point() and label_smoothing == 0.0:
        _check_index_target(target, d, dim)
        return -torch.gather(log_r, dim, target.long().unsqueeze(dim)).squeeze(dim)
    t = _target_distribution(target, d, dim, label_smoothing)
    # Impossible classes (+inf distance) have log r = -inf; with t = 0 they contribute 0, not 0·(-inf) = NaN.
    return -torch.where(t == 0, torch.zeros_like(log_r), t * log_r).sum(dim=dim)


def correntropy(d: Float[Tensor, "*batch k"], sigma: float | Tensor, dim: int = -1) -> Float[Tensor, "..."]:
    r"""Correntropy, a non-normalised control (paper §4.4, §6.1).

    .. math::  L(d) = \sum_j \left(1 - \exp(-d_j^2 / \sigma^2)\right)

    Its gradient :math:`2 d_j/\sigma^2 \exp(-d_j^2/\sigma^2)` is local to each component: the components do
    not compete, there are no responsibilities, and far outliers get a vanishing gradient.
    """
    check_floating("d", d)
    if validate_args_enabled() and torch.isnan(d).any():
        raise ValueError("d contains NaN")
    if isinstance(sigma, bool) or not isinstance(sigma, int | float | Tensor):
        raise TypeError(f"sigma must be a positive number or tensor, got {type(sigma).__name__}")
    sigma_t = torch.as_tensor(sigma, dtype=d.dtype, device=d.device)
    if validate_args_enabled() and not bool((sigma_t > 0).all()):
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return (1.0 - torch.exp(-(d / sigma_t).square())).sum(dim=dim)


def independent_sigmoid_bce(z: Float[Tensor, "*batch k"], targets: Tensor, dim: int = -1) -> Float[Tensor, "..."]:
    r"""Independent per-class sigmoid binary cross-entropy, the unnormalised control of the reviews.

    .. math::  \ell = \sum_k \mathrm{BCE}(\sigma(z_k), t_k), \qquad \partial \ell/\partial z_k = \sigma(z_k) - t_k

    The sigmoids are not coupled by a normaliser, so the gradients are not responsibilities and need not sum
    to zero across classes.

    Args:
        z: logits, K classes along ``dim``.
        targets: class indices (``z``'s shape without ``dim``; one-hot targets) or targets in [0, 1] of ``z``'s
            shape (multi-label or soft).
    Returns:
        ℓ for each row.
    """
    check_floating("z", z)
    check_finite("z", z)
    t = _target_distribution(targets, z, dim, 0.0, name="targets")
    return F.binary_cross_entropy_with_logits(z, t, reduction="none").sum(dim=dim)


# --------------------------------------------------------------------------------------------------------------
# The open set: an explicit "none of the above" component (§6.3, §7.3)
# --------------------------------------------------------------------------------------------------------------


def append_null(d: Float[Tensor, "*batch k"], null_distance: float | Tensor, dim: int = -1) -> Float[Tensor, "..."]:
    r"""The K distances with a "none of the above" component appended last along ``dim`` (paper §7.3).

    .. math::  \tilde d = (d_1, \dots, d_K, d_0), \qquad d_0 = \tau

    The null component's distance :math:`\tau` does not depend on the input: it is a threshold on the soft
    minimum of the K distances (see :func:`open_set_responsibilities`).

    Args:
        d: distances, K components along ``dim`` (K = 0 is allowed: then only the null component is left).
        null_distance: :math:`\tau`, a float, a 0-dim tensor, or a tensor broadcastable to ``d``'s shape without
            ``dim`` (one threshold per row). ``+inf`` switches the null component off; NaN and ``-inf`` are
            errors. It is cast to ``d``'s dtype.
        dim: the component dimension.
    Returns:
        :math:`\tilde d`, ``d``'s shape with K + 1 along ``dim``; index K (the last) is the null component.
    """
    check_floating("d", d)
    if d.dim() == 0:
        raise ValueError("d must have at least one dimension (the K components), got a scalar")
    if not -d.dim() <= dim < d.dim():
        raise ValueError(f"dim={dim} is out of range for d of shape {tuple(d.shape)}")
    dim = dim % d.dim()
    if isinstance(null_distance, Tensor):
        check_floating("null_distance", null_distance)
        tau = null_distance.to(device=d.device, dtype=d.dtype)
    else:
        tau = torch.tensor(float(null_distance), device=d.device, dtype=d.dtype)
    rows = d.shape[:dim] + d.shape[dim + 1 :]
    try:
        broadcast = torch.broadcast_shapes(tau.shape, rows)
    except RuntimeError:
        broadcast = None
    if broadcast != rows:
        raise ValueError(
            f"null_distance of shape {tuple(tau.shape)} does not broadcast to d's rows {tuple(rows)} "
            f"(d {tuple(d.shape)} without dim={dim})"
        )
    null = tau.expand(rows).unsqueeze(dim)  # (*rows) -> d's shape with 1 along dim
    out = torch.cat([d, null], dim=dim)
    check_distances(out, dim)  # NaN, -inf; a row of +inf is fine in d as long as the null is finite
    return out


def open_set_lse(d: Float[Tensor, "*batch k"], null_distance: float | Tensor, dim: int = -1) -> Float[Tensor, "..."]:
    r"""Log-sum-exp with a "none of the above" component of learnable distance :math:`\tau` (paper §6.3, §7.3).

    .. math::  L_\varnothing(d, \tau) = \log\Big(\sum_{j=1}^{K} \exp(-d_j) + \exp(-\tau)\Big)

    The closed-world LSE (:func:`lse`) forces the K responsibilities to sum to one, so every input is assigned
    (§6.3); the null component gives the normaliser an option that does not depend on the input, so an input far
    from every component is assigned to it. Gradients (Theorem 1 over K + 1 components,
    :func:`implicit_em.laws.open_set_law`): :math:`\partial L_\varnothing/\partial d_j = -r_j` and
    :math:`\partial L_\varnothing/\partial \tau = -r_0`. Computed as one :func:`torch.logsumexp` over the
    K + 1 distances (stable for any spread of d and :math:`\tau`).

    Args:
        d: distances, K components along ``dim``.
        null_distance: :math:`\tau`, a float, 0-dim tensor or one per row (see :func:`append_null`).
        dim: the component dimension.
    Returns:
        :math:`L_\varnothing` for each row: ``d``'s shape without ``dim``.
    """
    return torch.logsumexp(-append_null(d, null_distance, dim), dim=dim)


def open_set_responsibilities(
    d: Float[Tensor, "*batch k"], null_distance: float | Tensor, dim: int = -1
) -> Float[Tensor, "..."]:
    r"""Responsibilities over the K components and the "none of the above" one (paper §6.3, §7.3).

    .. math::  r_j = \frac{\exp(-d_j)}{\sum_k \exp(-d_k) + \exp(-\tau)}, \qquad
               r_0 = \frac{\exp(-\tau)}{\sum_k \exp(-d_k) + \exp(-\tau)}
                   = \sigma\big(-L(d) - \tau\big)

    with :math:`L(d)` the closed-world :func:`lse`. So :math:`r_0` is a monotone function of the soft minimum
    :math:`-L(d)` of the K distances: the explicit null component and "a threshold below which no component takes
    responsibility" (§7.3) are the same rule, with :math:`r_0 > 1/2` exactly when :math:`-L(d) > \tau`.

    Args:
        d: distances, K components along ``dim``.
        null_distance: :math:`\tau`, a float, 0-dim tensor or one per row (see :func:`append_null`).
        dim: the component dimension.
    Returns:
        r, ``d``'s shape with K + 1 along ``dim``; the last entry is :math:`r_0`; each row sums to 1.
    """
    return torch.softmax(-append_null(d, null_distance, dim), dim=dim)
