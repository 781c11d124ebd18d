r"""Online (stochastic) EM for Gaussian mixtures (Cappé & Moulines 2009).

Learning is split as in pomegranate: ``summarize`` accumulates sufficient statistics of a batch, and
``from_summaries`` turns statistics into parameters. Online EM keeps a running average of the per-sample
statistics s = (π_j, E[r_j x], E[r_j x xᵀ]) and takes the M-step after every mini-batch b:

.. math::  s_t = (1 - \gamma_t)\, s_{t-1} + \gamma_t\, \hat s(b_t),\qquad \gamma_t = (t + t_0)^{-\kappa}

with s_0 the statistics the initial parameters imply. Defaults t_0 = 2, κ = 0.5. After the stochastic epochs
one exact EM iteration over all the data lands on the batch optimum and gives an exact lower bound.

In a ``torch.distributed`` process group every step is global (:func:`group_online_step`): each process
summarises its rows of the global mini-batch (the one the single process draws from the concatenated data), one
all-reduce adds the statistics, and every process takes the same step, so the fit equals the single-process fit
on the concatenated data up to the order of floating-point sums.

A SIGINT stops the fit after the mini-batch step in progress (:mod:`implicit_em.mixture._interrupt`); its
snapshot (the running statistics, the parameters and the :class:`~implicit_em.mixture._epochs.EpochPosition`)
resumes it with the same numbers, bitwise on CPU, as a run that was never stopped.
"""

import math
import time
from dataclasses import replace
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em.mixture import _distributed, _interrupt, _missing
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import Callback, FitResult, SafePoint, fit_em
from implicit_em.mixture._epochs import EpochPosition, weighted_epoch_batches
from implicit_em.mixture._estep import Summarizer
from implicit_em.mixture._interrupt import FitInterrupted
from implicit_em.mixture._settings import CHUNK, FitSettings
from implicit_em.mixture._stats import MixtureParams, Summary, expected_summary, from_summaries, score_matrix


class OnlineState(NamedTuple):
    """Running per-sample statistics (shifted coordinates) and the number of steps taken."""

    stats: Summary
    step: int


def init_state(params: MixtureParams, covariance_type: str, shift: Float[Tensor, " d"]) -> OnlineState:
    """s_0 from the current parameters, t = 0."""
    return OnlineState(expected_summary(params, covariance_type, shift), 0)


def online_step(
    state: OnlineState,
    x: Float[Tensor, "b d"],
    params: MixtureParams,
    *,
    covariance_type: str,
    reg_covar: float,
    shift: Float[Tensor, " d"],
    compute_dtype: torch.dtype,
    step_offset: float = 2.0,
    step_power: float = 0.5,
    summarizer: Summarizer | None = None,
    weights: Float[Tensor, " b"] | None = None,
    missing: bool = False,
) -> tuple[OnlineState, MixtureParams, Float[Tensor, ""]]:
    """One stochastic EM step on batch x: returns the new state, the new parameters and Σ_i log p(x_i) (float64).
    ``summarizer``: the fit's E-step (:class:`~implicit_em.mixture._estep.Summarizer`), whose buffers are kept
    across steps; by default one for this batch. ``weights`` (B,): each row counts that many times (the step
    averages the statistics over Σ w, and the log-likelihood is Σ_i w_i log p(x_i)). ``missing``: x may hold NaN
    (missing values), whose expected statistics the step averages in (``_missing.batch_summary``)."""
    batch = _batch(x, params, covariance_type, shift, compute_dtype, summarizer, weights, missing)
    state, new = _update(state, batch, params, covariance_type, reg_covar, shift, step_offset, step_power)
    return state, new, batch.loglik


def _batch(
    x: Float[Tensor, "b d"],
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
    compute_dtype: torch.dtype,
    summarizer: Summarizer | None,
    weights: Float[Tensor, " b"] | None,
    missing: bool,
) -> Summary:
    """The statistics of batch x under ``params``: the expected ones when it holds a missing value."""
    if missing and _missing.has_nan(x):
        return _missing.batch_summary(x, params, covariance_type, shift, weights)
    a = score_matrix(params, covariance_type, shift).to(compute_dtype)
    return (summarizer or Summarizer.for_batch(x, a))(x, a, shift, weights)


def _update(
    state: OnlineState,
    batch: Summary,
    params: MixtureParams,
    covariance_type: str,
    reg_covar: float,
    shift: Float[Tensor, " d"],
    step_offset: float = 2.0,
    step_power: float = 0.5,
) -> tuple[OnlineState, MixtureParams]:
    """s_t from s_{t-1} and the batch's summed statistics, and the M-step from s_t."""
    gamma = (state.step + step_offset) ** (-step_power)
    mean_batch = batch.scaled(1.0 / float(batch.n))
    stats = state.stats.scaled(1.0 - gamma) + mean_batch.scaled(gamma)
    new = from_summaries(stats, shift, reg_covar, covariance_type, params.means.dtype)
    return OnlineState(stats, state.step + 1), new


def group_online_step(
    state: OnlineState,
    x: Float[Tensor, "b d"],
    params: MixtureParams,
    *,
    covariance_type: str,
    reg_covar: float,
    shift: Float[Tensor, " d"],
    compute_dtype: torch.dtype,
    summarizer: Summarizer | None = None,
    weights: Float[Tensor, " b"] | None = None,
    missing: bool = False,
) -> tuple[OnlineState, MixtureParams, float, float] | None:
    """One global step in a process group: x is this process's part of the global batch (possibly empty), the
    statistics of every part are summed by one all-reduce (which also carries a pending interrupt: every
    process then raises ``KeyboardInterrupt`` here, before the step), and every process takes the same step.
    Returns the new state, the new parameters, the global batch's summed log-likelihood and rows (Σ w for
    weighted rows), or None when the global batch is empty (the streams of every process are exhausted: the
    epoch is over). Weighted rows: a global batch whose weights are all zero takes no step and returns the state
    and parameters unchanged; whether it held rows at all (a weighted stream's end) is one more collective,
    taken only then."""
    k, d = params.means.shape
    if x.shape[0] > 0:
        batch = _batch(x, params, covariance_type, shift, compute_dtype, summarizer, weights, missing)
    else:
        batch = _distributed.zero_summary(k, d, params.means.device)
    batch, stop = _distributed.all_reduce_pass(batch, _interrupt.requested())
    if stop:
        _interrupt.clear()
        raise KeyboardInterrupt
    if float(batch.n) == 0:  # no mass: the end of every stream, or weights all zero (every process is here)
        if weights is None or not _distributed.any_stop(x.shape[0] > 0, params.means.device):
            return None
        return state, params, 0.0, 0.0
    state, new = _update(state, batch, params, covariance_type, reg_covar, shift)
    return state, new, float(batch.loglik), float(batch.n)


def fit_online_em(
    data: DataSource,
    params: MixtureParams,
    settings: FitSettings,
    *,
    shift: Float[Tensor, " d"],
    generator: torch.Generator,
    state: OnlineState | None = None,
    final_em_steps: int = 1,
    callback: Callback | None = None,
    resume: dict[str, Any] | None = None,
    on_safe_point: SafePoint | None = None,
) -> tuple[FitResult, OnlineState]:
    """Epochs of online EM on mini-batches of ``batch_size`` rows (read from ``settings``, as
    ``covariance_type``, ``reg_covar``, ``tol`` and ``max_iter``) until the epoch's mean train log-likelihood
    changes by less than ``tol``, then ``final_em_steps`` exact EM iterations. ``max_iter`` bounds the
    stochastic epochs, and ``n_iter`` of the result counts them (at most ``max_iter``; the exact iterations are
    not counted, as sklearn's ``n_iter_`` counts only what ``max_iter`` bounds); ``lower_bound`` is the exact
    iteration's. ``max_iter=0`` returns ``params`` unchanged (lower bound -inf), as sklearn does.

    ``on_safe_point(epochs, snapshot)`` follows every epoch that did not converge; ``resume`` takes such a
    snapshot, or the one a :class:`~implicit_em.mixture._interrupt.FitInterrupted` carries (after any step).
    """
    covariance_type, reg_covar, tol, max_iter = (
        settings.covariance_type,
        settings.reg_covar,
        settings.tol,
        settings.max_iter,
    )
    batch_size = settings.batch_size
    online = state if state is not None else init_state(params, covariance_type, shift)
    if max_iter == 0:
        return FitResult(params, 0, -math.inf, False, False), online
    pos, done = EpochPosition(), False
    if resume is not None:
        params, online, pos, done = _from_snapshot(resume, generator)
    in_group = data.layout is not None  # a process group: one global step per mini-batch
    k, d = params.means.shape
    summarizer = Summarizer(batch_size, d, k, data.dtype, data.device)  # one per fit: buffers reused

    def snapshot() -> dict[str, Any]:
        return _snapshot(params, online, pos, done, generator)

    with _interrupt.deferred():
        try:
            for epoch in range(pos.epoch + 1, (pos.epoch if done else max_iter) + 1):
                if not in_group:  # in a process group the interrupt flag travels with the all-reduce
                    _interrupt.check()
                t0 = time.perf_counter()
                for x, w in weighted_epoch_batches(data, batch_size, generator, pos):
                    if not in_group and w is not None and not bool((w > 0).any()):  # removed rows: no step
                        pos.advance(0.0, 0.0)
                        continue
                    if in_group:
                        step = group_online_step(
                            online,
                            x,
                            params,
                            covariance_type=covariance_type,
                            reg_covar=reg_covar,
                            shift=shift,
                            compute_dtype=data.dtype,
                            summarizer=summarizer,
                            weights=w,
                            missing=data.missing,
                        )
                        if step is None:
                            break
                        online, params, loglik, rows = step
                        pos.advance(loglik, rows)
                        continue
                    online, params, batch_loglik = online_step(
                        online,
                        x,
                        params,
                        covariance_type=covariance_type,
                        reg_covar=reg_covar,
                        shift=shift,
                        compute_dtype=data.dtype,
                        summarizer=summarizer,
                        weights=w,
                        missing=data.missing,
                    )
                    pos.advance(float(batch_loglik), x.shape[0] if w is None else float(w.sum()))
                    _interrupt.check()
                usage = params.weights if pos.step > 0 else torch.zeros_like(params.weights)
                mean, prev = pos.mean(), pos.prev
                pos.end_epoch(prev if abs(mean - prev) < tol else mean)
                if callback is not None:
                    callback(epoch, mean, time.perf_counter() - t0, usage)
                if abs(mean - prev) < tol:
                    break
                if on_safe_point is not None:
                    on_safe_point(pos.epoch, snapshot)
        except KeyboardInterrupt:
            raise FitInterrupted(FitResult(params, pos.epoch, pos.prev, False, True), online, snapshot()) from None
        done = True
        try:
            exact = replace(settings, max_iter=final_em_steps, batch_size=max(batch_size, CHUNK))
            result = fit_em(data, params, exact, shift=shift, lower_bound=pos.prev, callback=callback)
        except FitInterrupted as stop:  # resumes by running the exact iteration again
            kept = stop.result._replace(n_iter=pos.epoch)
            raise FitInterrupted(kept, online, snapshot()) from None
    converged = result.converged or (pos.epoch < max_iter)
    return result._replace(n_iter=pos.epoch, converged=converged), online


def _snapshot(
    params: MixtureParams, state: OnlineState, pos: EpochPosition, done: bool, generator: torch.Generator
) -> dict[str, Any]:
    """What online EM resumes from: parameters, running statistics, position, the generator's state, and
    whether the stochastic epochs are over (``done``: only the exact EM iteration is left)."""
    return {
        "params": list(params),
        "stats": list(state.stats),
        "online_step": state.step,
        "position": pos.to_dict(),
        "generator": generator.get_state(),
        "done": done,
    }


def _from_snapshot(
    snapshot: dict[str, Any], generator: torch.Generator
) -> tuple[MixtureParams, OnlineState, EpochPosition, bool]:
    generator.set_state(snapshot["generator"].cpu())
    state = OnlineState(Summary(*snapshot["stats"]), int(snapshot["online_step"]))
    pos = EpochPosition.from_dict(snapshot["position"])
    return MixtureParams(*snapshot["params"]), state, pos, bool(snapshot["done"])
