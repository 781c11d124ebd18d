r"""Classical batch EM for Gaussian mixtures (paper §2.3), chunked over N.

Each iteration is one pass over the data: the E-step and the statistics Rᵀφ of every chunk
(``_estep.pass_summary``: the float64 reference, or in float32 the fused pass, equal to it to round-off), then
the M-step from their sum (``_stats.from_summaries``). The loop, the stopping rule
(|Δ lower bound| < tol, lower bound = mean log-likelihood under the parameters *before* the M-step) and the
M-step formulas are those of ``sklearn.mixture.GaussianMixture``, so from the same start the two agree to
round-off. ``_estimate_gaussian_parameters`` and ``_estimate_log_gaussian_prob`` are the direct float64 forms
(responsibilities times centred data), kept as the oracle for the fast path.
"""

import functools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian
from implicit_em.distances import gaussian_energies
from implicit_em.mixture import _distributed, _interrupt, _missing
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._estep import pass_summary
from implicit_em.mixture._fused import Batch
from implicit_em.mixture._interrupt import FitInterrupted
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._stats import MixtureParams, Summary, from_summaries, score_matrix

#: callback(epoch, mean train log-likelihood, seconds, component usage (K,)) after every pass
Callback = Callable[[int, float, float, Tensor], None]

#: on_safe_point(units done, snapshot): called where a fit can be resumed from (after an iteration, or an epoch
#: of the stochastic fitters); ``snapshot()`` builds the resumable state (a dict of tensors, numbers, strings and
#: lists, what a checkpoint stores and the fitter's ``resume`` argument takes) only when the caller wants it
SafePoint = Callable[[int, Callable[[], dict[str, Any]]], None]


class FitResult(NamedTuple):
    """What a fitter returns: the parameters, iterations run, final lower bound and whether it converged.

    ``n_iter`` counts the units of ``max_iter`` (EM iterations, or epochs) of the one run that produced
    ``params``, so it never exceeds ``max_iter``. ``interrupted`` is True only in the result a
    :class:`~implicit_em.mixture._interrupt.FitInterrupted` carries; ``params`` are then the last complete ones
    (EM never decreases the likelihood, so they are the best so far). ``lower_bounds``: the lower bound after
    each of those ``n_iter`` units (the estimator's ``lower_bounds_``); the fitters leave it empty and the
    estimator fills it from the run's history records (``_starts.py``), so a resumed run has it whole.
    ``certificates``: gd's (epoch, gain of one exact EM step from its end) at each plateau it tested
    (``_gd.fit_gd``'s ``certify``); empty for the EM fitters.
    """

    params: MixtureParams
    n_iter: int
    lower_bound: float
    converged: bool
    interrupted: bool
    lower_bounds: tuple[float, ...] = ()
    certificates: tuple[tuple[int, float], ...] = ()


def full_pass(
    data: DataSource,
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
    batch_size: int,
    sync: bool = True,
    interruptible: bool = False,
) -> Summary:
    """One E-step over all the data: the summed statistics (float64) and the summed log-likelihood; in a
    process group (and unless ``sync=False``), summed over every process's shard
    (:mod:`implicit_em.mixture._distributed`).

    ``interruptible``: a pending SIGINT raises ``KeyboardInterrupt`` between chunks (the pass is abandoned), or,
    in a process group, after the all-reduce that tells every process about it (all of them raise).
    """
    a = score_matrix(params, covariance_type, shift).to(data.dtype)
    collective = sync and _distributed.active()
    batches = data.weighted_batches(batch_size)
    if interruptible and not collective:
        batches = _checked(batches)
    if data.missing:  # a batch with NaN integrates its missing features out (float64)
        total = _missing.pass_summary(batches, a, params, covariance_type, shift)
    else:
        total = pass_summary(batches, a, shift, lookahead=data.kind != "iterable")
    if collective:  # every process's statistics summed; a process without data adds zeros
        k, d = params.means.shape
        total = total or _distributed.zero_summary(k, d, params.means.device)
        total, stop = _distributed.all_reduce_pass(total, interruptible and _interrupt.requested())
        if stop:  # some process was interrupted: every process stops here
            _interrupt.clear()
            raise KeyboardInterrupt
    if total is None or float(total.n) == 0:
        raise ValueError("X has no samples")
    return total


def _checked(batches: Iterator[Batch]) -> Iterator[Batch]:
    """The batches, with a pending SIGINT raised before each is handed on."""
    for batch in batches:
        _interrupt.check()
        yield batch


def fit_em(
    data: DataSource,
    params: MixtureParams,
    settings: FitSettings,
    *,
    shift: Float[Tensor, " d"],
    lower_bound: float = -math.inf,
    callback: Callback | None = None,
    sync: bool = True,
    resume: dict[str, Any] | None = None,
    on_safe_point: SafePoint | None = None,
    interruptible: bool = True,
) -> FitResult:
    """Batch EM from ``params`` until |Δ mean log-likelihood| < tol or ``max_iter`` iterations (over every
    process's shard in a process group unless ``sync=False``), in chunks of ``batch_size`` rows: ``covariance_type``,
    ``reg_covar``, ``tol``, ``max_iter`` and ``batch_size`` are read from ``settings``.

    A SIGINT (:mod:`implicit_em.mixture._interrupt`) stops it at the next chunk boundary with
    :class:`~implicit_em.mixture._interrupt.FitInterrupted`, carrying the last complete iteration and its
    snapshot. ``on_safe_point(n_iter, snapshot)`` is called after every iteration that did not converge;
    ``resume`` (such a snapshot: parameters, iterations done, lower bound) continues after that iteration,
    with exactly the numbers an uninterrupted run has. ``interruptible=False`` (a local fit inside another
    computation) leaves a SIGINT pending for the caller.
    """
    covariance_type, reg_covar, tol = settings.covariance_type, settings.reg_covar, settings.tol
    n_done, converged = 0, False
    if resume is not None:
        params, n_done, lower_bound = _from_snapshot(resume)
    with _interrupt.deferred():
        try:
            for n_iter in range(n_done + 1, settings.max_iter + 1):
                t0 = time.perf_counter()
                prev = lower_bound
                summary = full_pass(data, params, covariance_type, shift, settings.batch_size, sync, interruptible)
                new = from_summaries(summary, shift, reg_covar, covariance_type, params.means.dtype)
                params, lower_bound, n_done = new, float(summary.loglik / summary.n), n_iter  # one commit
                if callback is not None:
                    callback(n_iter, lower_bound, time.perf_counter() - t0, summary.nk / summary.n)
                if abs(lower_bound - prev) < tol:
                    converged = True
                    break
                if on_safe_point is not None:
                    on_safe_point(n_done, functools.partial(em_snapshot, params, n_done, lower_bound))
        except KeyboardInterrupt:
            result = FitResult(params, n_done, lower_bound, False, True)
            raise FitInterrupted(result, None, em_snapshot(params, n_done, lower_bound)) from None
    return FitResult(params, n_done, lower_bound, converged, False)


def em_step_gain(
    data: DataSource, params: MixtureParams, settings: FitSettings, shift: Float[Tensor, " d"]
) -> tuple[float, float]:
    """The certificate a stochastic fit stops on: (L(θ), L(θ') − L(θ)), the mean log-likelihood at ``params`` and
    what one exact EM step θ → θ' (``settings``' covariance type and reg_covar) gains on it, from two passes
    over the data (summed over every process in a process group: collective).

    EM's own stopping rule reads one iteration's gain (|ΔL| < tol); a stochastic fit whose end passes the same
    test has reached what EM at that ``tol`` would accept as converged. A gain far above ``tol`` says the end is
    not a stationary point of the likelihood, however flat the fit's running objective looked."""
    covariance_type, chunk = settings.covariance_type, settings.batch_size
    summary = full_pass(data, params, covariance_type, shift, chunk, interruptible=True)
    stepped = from_summaries(summary, shift, settings.reg_covar, covariance_type, params.means.dtype)
    after = full_pass(data, stepped, covariance_type, shift, chunk, interruptible=True)
    before_mean, after_mean = float(summary.loglik / summary.n), float(after.loglik / after.n)
    return before_mean, after_mean - before_mean


def em_snapshot(params: MixtureParams, n_iter: int, lower_bound: float) -> dict[str, Any]:
    """The state batch EM resumes from after ``n_iter`` iterations (``fit_em(resume=...)``)."""
    return {"params": list(params), "n_iter": n_iter, "lower_bound": lower_bound}


def _from_snapshot(snapshot: dict[str, Any]) -> tuple[MixtureParams, int, float]:
    return MixtureParams(*snapshot["params"]), int(snapshot["n_iter"]), float(snapshot["lower_bound"])


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
