r"""Classical batch EM for Gaussian mixtures (paper §2.3), chunked over N.

Each iteration is one pass over the data: the E-step and the statistics Rᵀφ of every chunk
(``_stats.summarize``), then the M-step from their sum (``_stats.from_summaries``). The loop, the stopping rule
(|Δ lower bound| < tol, lower bound = mean log-likelihood under the parameters *before* the M-step) and the
M-step formulas are those of ``sklearn.mixture.GaussianMixture``, so from the same start the two agree to
round-off. ``_estimate_gaussian_parameters`` and ``_estimate_log_gaussian_prob`` are the direct float64 forms
(responsibilities times centred data), kept as the oracle for the fast path.
"""

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian
from implicit_em.distances import gaussian_energies
from implicit_em.mixture import _distributed
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._stats import (
    MixtureParams,
    Summary,
    from_summaries,
    score_matrix,
    summarize,
)

#: callback(epoch, mean train log-likelihood, seconds, component usage (K,)) after every pass
Callback = Callable[[int, float, float, Tensor], None]


class FitResult(NamedTuple):
    """What a fitter returns: the parameters, iterations run, final lower bound and whether it converged.

    ``interrupted`` is True when a KeyboardInterrupt stopped the fit; ``params`` are then the last complete
    ones (EM never decreases the likelihood, so they are the best so far).
    """

    params: MixtureParams
    n_iter: int
    lower_bound: float
    converged: bool
    interrupted: bool


def full_pass(
    data: DataSource,
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
    batch_size: int,
    sync: bool = True,
) -> Summary:
    """One E-step over all the data: the summed statistics (float64) and the summed log-likelihood; in a
    process group (and unless ``sync=False``), summed over every process's shard
    (:mod:`implicit_em.mixture._distributed`)."""
    a = score_matrix(params, covariance_type, shift).to(data.dtype)
    total: Summary | None = None
    for x in data.batches(batch_size):
        part, _ = summarize(x, a, shift)
        total = part if total is None else total + part
    if sync and _distributed.active():  # every process's statistics summed; a process without data adds zeros
        k, d = params.means.shape
        total = _distributed.all_reduce_summary(total or _distributed.zero_summary(k, d, params.means.device))
    if total is None or float(total.n) == 0:
        raise ValueError("X has no samples")
    return total


def fit_em(
    data: DataSource,
    params: MixtureParams,
    *,
    covariance_type: str,
    reg_covar: float,
    tol: float,
    max_iter: int,
    shift: Float[Tensor, " d"],
    batch_size: int,
    lower_bound: float = -math.inf,
    callback: Callback | None = None,
    sync: bool = True,
) -> FitResult:
    """Batch EM from ``params`` until |Δ mean log-likelihood| < tol or ``max_iter`` iterations (over every
    process's shard in a process group unless ``sync=False``)."""
    converged, n_iter = False, 0
    try:
        for n_iter in range(1, max_iter + 1):
            t0 = time.perf_counter()
            prev = lower_bound
            summary = full_pass(data, params, covariance_type, shift, batch_size, sync)
            lower_bound = float(summary.loglik / summary.n)
            params = from_summaries(summary, shift, reg_covar, covariance_type, params.means.dtype)
            if callback is not None:
                callback(n_iter, lower_bound, time.perf_counter() - t0, summary.nk / summary.n)
            if abs(lower_bound - prev) < tol:
                converged = True
                break
    except KeyboardInterrupt:
        return FitResult(params, max(n_iter - 1, 0), lower_bound, False, True)
    return FitResult(params, n_iter, lower_bound, converged, False)


def _estimate_gaussian_parameters(
    x: Float[Tensor, "n d"], resp: Float[Tensor, "n k"], reg_covar: float, covariance_type: str
) -> tuple[Float[Tensor, " k"], Float[Tensor, "k d"], gaussian.Shaped]:
    """Reference M-step: nk (K,), means (K, D), covariances (sklearn shapes) from data and responsibilities.

    .. math::  N_j = \\sum_i r_{ij},\\quad \\mu_j = \\frac{1}{N_j}\\sum_i r_{ij} x_i,\\quad
               \\Sigma_j = \\frac{1}{N_j}\\sum_i r_{ij} (x_i - \\mu_j)(x_i - \\mu_j)^\\top + \\text{reg}\\, I
    """
    nk = resp.sum(0) + 10 * torch.finfo(resp.dtype).eps
    means = resp.T @ x / nk[:, None]
    eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
    if covariance_type == "tied":
        cov = (x.T @ x - (nk[:, None] * means).T @ means) / nk.sum()
        return nk, means, cov + reg_covar * eye
    diff = x[None, :, :] - means[:, None, :]  # (K, N, D)
    full = torch.einsum("nk,kna,knb->kab", resp, diff, diff) / nk[:, None, None]
    if covariance_type == "full":
        return nk, means, full + reg_covar * eye
    diag = torch.diagonal(full, dim1=-2, dim2=-1) + reg_covar
    return nk, means, diag if covariance_type == "diag" else diag.mean(1)


def _estimate_log_gaussian_prob(
    x: Float[Tensor, "n d"], means: Float[Tensor, "k d"], prec_chol: gaussian.Shaped, covariance_type: str
) -> Float[Tensor, "n k"]:
    """Reference log N(x_i; μ_j, Σ_j), shape (N, K): the foundation's Gaussian energies, negated.

    Whitening W_j = U_jᵀ for sklearn's upper-triangular ``precisions_cholesky_`` U (full, tied); U itself for
    diag and spherical (:func:`implicit_em.distances.whiten`).
    """
    whitening = prec_chol.mT if covariance_type in ("full", "tied") else prec_chol
    return -gaussian_energies(x, means, whitening, covariance_type)  # type: ignore[arg-type]
