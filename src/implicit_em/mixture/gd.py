r"""Gradient descent on the exact mixture negative log-likelihood: implicit EM (paper §3.4, §4.1).

The loss of a mini-batch is the mean of

.. math::  L^-(x) = -\log \sum_j \pi_j \exp(-e_j(x)),\qquad e_j(x) = \tfrac12\|W_j(x-\mu_j)\|^2 - \log|\det W_j|
           + \tfrac D2 \log 2\pi

with energies from :class:`~implicit_em.distances.GaussianComponents` and log π = log_softmax(logits). Its
gradient with respect to e_j is the responsibility r_j: every step is weighted by the E-step the fit never
computes explicitly. With ``volume=False`` the energy is the distance ½‖z_j‖² alone, whose optimum is W → 0
(metric collapse, the reason for the volume term).

The fit works in standardised coordinates (x − shift) / scale with one scalar scale, so Adam's learning rate
does not depend on the units of the data; parameters are mapped back exactly (scale is a scalar, so the
triangular and diagonal structure of W is kept).
"""

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor, nn

from implicit_em._checks import set_validate_args, validate_args_enabled
from implicit_em.distances import GaussianComponents
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._stats import MixtureParams, covariances_from_precision_cholesky
from implicit_em.mixture.em import Callback, FitResult
from implicit_em.objectives import mixture_nll

OPTIMIZERS = ("adam", "sgd")


@contextmanager
def _no_value_checks() -> Iterator[None]:
    """The data were checked when read; skip the foundation's per-call NaN/inf reductions inside the loop."""
    before = validate_args_enabled()
    set_validate_args(False)
    try:
        yield
    finally:
        set_validate_args(before)


class GDState(NamedTuple):
    """The model and optimiser a gradient fit (or ``partial_fit``) continues from."""

    components: GaussianComponents
    logits: nn.Parameter
    optimizer: torch.optim.Optimizer


def make_state(
    params: MixtureParams,
    covariance_type: str,
    shift: Tensor,
    scale: float,
    learning_rate: float,
    optimizer: str,
) -> GDState:
    """Standardised components and logits from sklearn-shaped parameters, with a fresh optimiser."""
    means = (params.means - shift) / scale
    prec_chol = params.precisions_cholesky * scale
    components = GaussianComponents.from_precisions_cholesky(means, prec_chol, covariance_type)  # type: ignore[arg-type]
    logits = nn.Parameter(torch.log(params.weights).clone())
    groups = [*components.parameters(), logits]
    opt: torch.optim.Optimizer
    if optimizer == "adam":
        opt = torch.optim.Adam(groups, lr=learning_rate)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=learning_rate, momentum=0.9)
    else:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    return GDState(components, logits, opt)


def batch_loss(state: GDState, x_std: Tensor, volume: bool) -> Tensor:
    """Mean mixture NLL of a standardised batch (the distance-only objective when volume=False)."""
    out = state.components(x_std)
    d = out.energy if volume else out.distance
    return mixture_nll(d, torch.log_softmax(state.logits, dim=0)).mean()


def gd_step(state: GDState, x: Tensor, shift: Tensor, scale: float, volume: bool) -> float:
    """One optimiser step on batch x (original coordinates); returns the batch's mean objective per sample in
    original coordinates (log-likelihood when volume=True)."""
    x_std = (x - shift.to(x.dtype)) / scale
    state.optimizer.zero_grad(set_to_none=True)
    with _no_value_checks():
        loss = batch_loss(state, x_std, volume)
        loss.backward()
    state.optimizer.step()
    jacobian = x.shape[1] * math.log(scale) if volume else 0.0  # density of x = density of x_std / scale^D
    return -float(loss.detach()) - jacobian


@torch.no_grad()
def state_params(state: GDState, covariance_type: str, shift: Tensor, scale: float) -> MixtureParams:
    """sklearn-shaped parameters in original coordinates."""
    c = state.components
    means = c.means.detach() * scale + shift.to(c.means.dtype)
    prec_chol = c.precisions_cholesky().detach() / scale
    weights = torch.softmax(state.logits.detach(), dim=0)
    cov = covariances_from_precision_cholesky(prec_chol, covariance_type)
    return MixtureParams(weights, means, cov, prec_chol)


def fit_gd(
    data: DataSource,
    params: MixtureParams,
    *,
    covariance_type: str,
    tol: float,
    max_iter: int,
    shift: Tensor,
    scale: float,
    batch_size: int,
    generator: torch.Generator,
    learning_rate: float,
    optimizer: str,
    volume: bool = True,
    state: GDState | None = None,
    callback: Callback | None = None,
) -> tuple[FitResult, GDState]:
    """Epochs of mini-batch gradient descent until the epoch's mean objective changes by less than ``tol``.

    ``lower_bound`` of the result is the last epoch's mean objective (a running average over the epoch, not
    an exact pass; the estimator replaces it by an exact pass).
    """
    state = state if state is not None else make_state(params, covariance_type, shift, scale, learning_rate, optimizer)
    prev, epoch, converged = -math.inf, 0, False
    try:
        for epoch in range(1, max_iter + 1):
            t0 = time.perf_counter()
            total, count = 0.0, 0
            for x in data.batches(batch_size, generator=generator):
                total += gd_step(state, x, shift, scale, volume) * x.shape[0]
                count += x.shape[0]
            mean = total / max(count, 1)
            if not math.isfinite(mean):
                raise FloatingPointError("gradient descent diverged (non-finite objective); lower learning_rate")
            if callback is not None:
                usage = torch.softmax(state.logits.detach(), dim=0)
                callback(epoch, mean, time.perf_counter() - t0, usage)
            if abs(mean - prev) < tol:
                converged = True
                break
            prev = mean
    except KeyboardInterrupt:
        return FitResult(
            state_params(state, covariance_type, shift, scale), max(epoch - 1, 0), prev, False, True
        ), state
    return FitResult(state_params(state, covariance_type, shift, scale), epoch, mean, converged, False), state
