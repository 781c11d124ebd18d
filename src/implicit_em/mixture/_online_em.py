r"""Online (stochastic) EM for Gaussian mixtures (Cappé & Moulines 2009).

Learning is split as in pomegranate: ``summarize`` accumulates sufficient statistics of a batch, and
``from_summaries`` turns statistics into parameters. Online EM keeps a running average of the per-sample
statistics s = (π_j, E[r_j x], E[r_j x xᵀ]) and takes the M-step after every mini-batch b:

.. math::  s_t = (1 - \gamma_t)\, s_{t-1} + \gamma_t\, \hat s(b_t),\qquad \gamma_t = (t + t_0)^{-\kappa}

with s_0 the statistics the initial parameters imply. Defaults t_0 = 2, κ = 0.5. After the stochastic epochs
one exact EM iteration over all the data lands on the batch optimum and gives an exact lower bound.
"""

import math
import time
from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import Callback, FitResult, fit_em
from implicit_em.mixture._stats import (
    MixtureParams,
    Summary,
    expected_summary,
    from_summaries,
    score_matrix,
    summarize,
)


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
) -> tuple[OnlineState, MixtureParams, Float[Tensor, " b"]]:
    """One stochastic EM step on batch x: returns the new state, the new parameters and log p(x_i) (B,)."""
    a = score_matrix(params, covariance_type, shift).to(compute_dtype)
    batch, log_norm = summarize(x, a, shift)
    gamma = (state.step + step_offset) ** (-step_power)
    mean_batch = batch.scaled(1.0 / float(batch.n))
    stats = state.stats.scaled(1.0 - gamma) + mean_batch.scaled(gamma)
    new = from_summaries(stats, shift, reg_covar, covariance_type, params.means.dtype)
    return OnlineState(stats, state.step + 1), new, log_norm


def fit_online_em(
    data: DataSource,
    params: MixtureParams,
    *,
    covariance_type: str,
    reg_covar: float,
    tol: float,
    max_iter: int,
    shift: Float[Tensor, " d"],
    batch_size: int,
    generator: torch.Generator,
    state: OnlineState | None = None,
    final_em_steps: int = 1,
    callback: Callback | None = None,
) -> tuple[FitResult, OnlineState]:
    """Epochs of online EM until the epoch's mean train log-likelihood changes by less than ``tol``, then
    ``final_em_steps`` exact EM iterations. ``max_iter`` bounds the stochastic epochs."""
    state = state if state is not None else init_state(params, covariance_type, shift)
    prev, epoch = -math.inf, 0
    try:
        for epoch in range(1, max_iter + 1):
            t0 = time.perf_counter()
            total, count = 0.0, 0
            usage = torch.zeros_like(params.weights)
            for x in data.batches(batch_size, generator=generator):
                state, params, log_norm = online_step(
                    state,
                    x,
                    params,
                    covariance_type=covariance_type,
                    reg_covar=reg_covar,
                    shift=shift,
                    compute_dtype=data.dtype,
                )
                total += float(log_norm.double().sum())
                count += x.shape[0]
                usage = params.weights
            mean = total / max(count, 1)
            if callback is not None:
                callback(epoch, mean, time.perf_counter() - t0, usage)
            if abs(mean - prev) < tol:
                break
            prev = mean
    except KeyboardInterrupt:
        return FitResult(params, max(epoch - 1, 0), prev, False, True), state
    result = fit_em(
        data,
        params,
        covariance_type=covariance_type,
        reg_covar=reg_covar,
        tol=tol,
        max_iter=final_em_steps,
        shift=shift,
        batch_size=max(batch_size, 16384),
        lower_bound=prev,
        callback=callback,
    )
    converged = result.converged or (epoch < max_iter)
    return result._replace(n_iter=epoch + result.n_iter, converged=converged and not result.interrupted), state
