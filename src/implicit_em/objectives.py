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
    "constrained_cross_entropy",
    "correntropy",
    "gaussian_energies",
    "gaussian_mixture_log_likelihood",
    "independent_sigmoid_bce",
    "log_det_whitening",
    "lse",
    "mixture_nll",
    "responsibilities",
    "softmin_bounds",
    "whiten",
]

CovarianceType = Literal["full", "tied", "diag", "spherical"]
COVARIANCE_TYPES: tuple[str, ...] = ("full", "tied", "diag", "spherical")
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
    elif torch.broadcast_shapes(log_weights.shape, d.shape) != d.shape:
        raise ValueError(f"log_weights of shape {tuple(log_weights.shape)} does not broadcast to d {tuple(d.shape)}")
    if validate_args_enabled():
        if torch.isnan(log_weights).any() or torch.isposinf(log_weights).any():
            raise ValueError("log_weights contains NaN or +inf")
    logits = log_weights.to(d.dtype) - d
    if validate_args_enabled() and torch.isneginf(logits).all(dim=dim).any():
        raise ValueError("a row has zero weight (log π = -inf) or +inf distance for every component")
    return logits


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

    It is minimised; its gradient is :math:`\partial L^- / \partial d_j = +r_j` (the paper prints :math:`-r_j`
    in §4.1; the sign here is the right one). With Gaussian energies from :func:`gaussian_energies` this is
    exactly the Gaussian mixture negative log-likelihood.

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


def _target_distribution(target: Tensor, like: Tensor, dim: int, label_smoothing: float) -> Tensor:
    """Soft target distribution t (same shape as ``like``) from class indices or soft targets."""
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
    t = _target_distribution(targets, z, dim, 0.0)
    return F.binary_cross_entropy_with_logits(z, t, reduction="none").sum(dim=dim)


# --------------------------------------------------------------------------------------------------------------
# Gaussian energies with the volume term (§3.4)
# --------------------------------------------------------------------------------------------------------------

_WHITENING_NDIM = {"full": 3, "tied": 2, "diag": 2, "spherical": 1}


def _check_gaussian_args(x: Tensor, means: Tensor, whitening: Tensor, covariance_type: str) -> None:
    if covariance_type not in COVARIANCE_TYPES:
        raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {covariance_type!r}")
    for name, t in (("x", x), ("means", means), ("whitening", whitening)):
        check_floating(name, t)
    if means.dim() != 2 or means.shape[0] == 0:
        raise ValueError(f"means must have shape (K, D) with K >= 1, got {tuple(means.shape)}")
    k, dim = means.shape
    if x.dim() < 1 or x.shape[-1] != dim:
        raise ValueError(f"x must have shape (..., D) with D = {dim} (from means), got {tuple(x.shape)}")
    expected = {"full": (k, dim, dim), "tied": (dim, dim), "diag": (k, dim), "spherical": (k,)}[covariance_type]
    if tuple(whitening.shape) != expected:
        raise ValueError(
            f"{covariance_type} whitening must have shape {expected} for K = {k}, D = {dim}, "
            f"got {tuple(whitening.shape)}"
        )
    check_finite("x", x)
    check_finite("whitening", whitening)


def log_det_whitening(whitening: Tensor, covariance_type: CovarianceType, n_features: int) -> Tensor:
    r"""log|det W_j| for each component: (K,), or a 0-dim tensor for ``"tied"`` (one W shared by all).

    A general full W uses :func:`torch.linalg.slogdet`; diagonal and spherical W are O(D). For a triangular W
    the log-determinant is the sum of the log-diagonal (:class:`~implicit_em.distances.GaussianComponents` passes
    it precomputed). Spherical W is a scalar :math:`w` per component, :math:`\log|\det W| = D \log|w|`.
    """
    if covariance_type in ("full", "tied"):
        return torch.linalg.slogdet(whitening).logabsdet
    if covariance_type == "diag":
        return whitening.abs().log().sum(dim=-1)
    if covariance_type == "spherical":
        return n_features * whitening.abs().log()
    raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {covariance_type!r}")


def whiten(
    x: Float[Tensor, "*batch d"],
    means: Float[Tensor, "k d"],
    whitening: Tensor,
    covariance_type: CovarianceType = "full",
) -> Float[Tensor, "*batch k d"]:
    r"""Whitened residuals :math:`z_j = W_j (x - \mu_j)` for every component, shape (..., K, D).

    Whitening conventions (sklearn's ``precisions_cholesky_`` P): full (K, D, D), :math:`W_j = P_j^\top`;
    tied (D, D), :math:`W = P^\top`; diag (K, D), :math:`W_j = \mathrm{diag}(P_j)`; spherical (K,), a scalar.
    Computed on the explicit difference x − μ (no expansion of the square, so no cancellation), which holds
    (..., K, D) in memory; fitters for large N chunk over samples.
    """
    _check_gaussian_args(x, means, whitening, covariance_type)
    diff = x.unsqueeze(-2) - means  # (..., K, D)
    if covariance_type == "full":
        return torch.einsum("kij,...kj->...ki", whitening, diff)
    if covariance_type == "tied":
        return diff @ whitening.T
    if covariance_type == "diag":
        return diff * whitening
    return diff * whitening.unsqueeze(-1)


def gaussian_energies(
    x: Float[Tensor, "*batch d"],
    means: Float[Tensor, "k d"],
    whitening: Tensor,
    covariance_type: CovarianceType = "full",
    log_det: Tensor | None = None,
    volume: bool = True,
) -> Float[Tensor, "*batch k"]:
    r"""Gaussian energies with the volume term (paper §3.4; DESIGN.md §1).

    .. math::  e_j(x) = \tfrac12 \|z_j\|^2 - \log|\det W_j| + \tfrac{D}{2}\log 2\pi, \qquad z_j = W_j(x - \mu_j)

    so that :math:`-e_j(x) = \log \mathcal N(x; \mu_j, \Sigma_j)` with :math:`\Sigma_j = (W_j^\top W_j)^{-1}`,
    and ``-mixture_nll(e, log_weights)`` is the exact GMM log-likelihood. Without the volume term
    (``volume=False``) the result is the distance :math:`\tfrac12 \|z_j\|^2` alone, which is maximised by
    W → 0 (metric collapse).

    Args:
        x: inputs (..., D). means: (K, D). whitening: see :func:`whiten`.
        log_det: precomputed log|det W_j| ((K,) or 0-dim); computed by :func:`log_det_whitening` if omitted.
        volume: include −log|det W| + (D/2) log 2π.
    Returns:
        energies (..., K).
    Raises:
        ValueError: on shape mismatches, non-finite inputs (value checks on), or a singular whitening (a
            degenerate covariance: log|det W| = −inf).
    """
    z = whiten(x, means, whitening, covariance_type)
    sq = 0.5 * z.square().sum(dim=-1)  # (..., K)
    if not volume:
        return sq
    n_features = means.shape[-1]
    if log_det is None:
        log_det = log_det_whitening(whitening, covariance_type, n_features)
    if validate_args_enabled() and not torch.isfinite(log_det).all():
        raise ValueError("singular whitening (log|det W| is not finite): a degenerate covariance")
    return sq - log_det + 0.5 * n_features * math.log(2 * math.pi)


def gaussian_mixture_log_likelihood(
    x: Float[Tensor, "*batch d"],
    log_weights: Float[Tensor, " k"],
    means: Float[Tensor, "k d"],
    whitening: Tensor,
    covariance_type: CovarianceType = "full",
) -> Float[Tensor, "..."]:
    r""":math:`\log \sum_j \pi_j \mathcal N(x; \mu_j, \Sigma_j)` per sample: ``-mixture_nll`` of the energies."""
    return -mixture_nll(gaussian_energies(x, means, whitening, covariance_type), log_weights)
