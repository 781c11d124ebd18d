r"""Gradient descent on the exact mixture negative log-likelihood: implicit EM (paper §3.4, §4.1).

The loss of a mini-batch is the mean of

.. math::  L^-(x) = -\log \sum_j \pi_j \exp(-e_j(x)),\qquad e_j(x) = \tfrac12\|W_j(x-\mu_j)\|^2 - \log|\det W_j|
           + \tfrac D2 \log 2\pi

with energies from :class:`~implicit_em.distances.GaussianComponents` and log π = log_softmax(logits). Its
gradient with respect to e_j is the responsibility r_j (the paper's law). The step computes it that way: the
energies of all components are one matrix product on the quadratic features of ``_stats``, the responsibilities
of that product are the gradient, and autograd carries it from the score matrix to the parameters of
``GaussianComponents`` (:func:`accumulate_gradient`; equal to plain autograd through the components, which
:func:`batch_loss` keeps as the reference). With ``volume=False`` the energy is the distance ½‖z_j‖² alone,
whose optimum is W → 0 (metric collapse, the reason for the volume term).

The fit works in standardised coordinates (x − shift) / scale, so Adam's learning rate does not depend on the
units of the data; parameters are mapped back exactly. ``scale`` is one scalar (``fit_gd``'s default, and
"spherical"), one per feature, or (the estimator's schedule, "full" and "tied") the Cholesky factor C of the
data covariance, u = C⁻¹(x − shift): each keeps the triangular or diagonal structure of W.

In a ``torch.distributed`` process group the fit is data-parallel (:func:`group_gd_step`): each process takes
its rows of the global mini-batch (the one the single process draws from the concatenated data), the gradient
is all-reduced, and every process takes the same optimiser step.

A SIGINT stops the fit after the optimiser step in progress (:mod:`implicit_em.mixture._interrupt`; the step
updates the parameters in place, so it is never cut halfway); the snapshot (model, optimiser, learning-rate
halvings and :class:`~implicit_em.mixture._epochs.EpochPosition`) resumes it with the same numbers, bitwise on
CPU, as a run that was never stopped.
"""

import copy
import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em.distances import GaussianComponents
from implicit_em.gaussian import covariances_from_precisions_cholesky, full_precisions
from implicit_em.mixture import _distributed, _interrupt, _missing
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import Callback, FitResult, SafePoint
from implicit_em.mixture._epochs import EpochPosition, weighted_epoch_batches
from implicit_em.mixture._gd_fast import FastStep
from implicit_em.mixture._interrupt import FitInterrupted
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._stats import (
    MixtureParams,
    log_normalize,
    quadratic_features_t,
    quadratic_score_matrix,
    weighted_sum,
)
from implicit_em.objectives import mixture_nll

OPTIMIZERS = ("adam", "sgd")
LR_HALVINGS = 3  #: plateaus that halve the learning rate before the next one stops the fit
MIN_STEPS = 64  #: the estimator's epochs take at least this many optimiser steps (whole passes over the data)

_PASS_ROWS = 16_384  # rows per chunk of the one pass that measures the feature scales
Scale = float | Tensor  #: the standardising scale: one scalar, or one per feature (D,) (see fit_gd)


#: certify(params) -> (mean log-likelihood at params, the gain of one exact EM step from them)
Certify = Callable[[MixtureParams], tuple[float, float]]


class GDState(NamedTuple):
    """The model and optimiser a gradient fit (or ``partial_fit``) continues from, and the scale its
    standardised coordinates use (a ``partial_fit`` step after ``fit`` must step in the same coordinates)."""

    components: GaussianComponents
    logits: nn.Parameter
    optimizer: torch.optim.Optimizer
    scale: Scale | None = None


def make_state(
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
    scale: Scale,
    learning_rate: float,
    optimizer: str,
) -> GDState:
    """Standardised components and logits from sklearn-shaped parameters, with a fresh optimiser (a per-feature
    ``scale`` keeps the structure of "full", "tied" and "diag"; "spherical" takes a scalar one)."""
    centred = params.means - shift
    if isinstance(scale, Tensor) and scale.dim() == 2:  # u = C⁻¹(x − shift)
        c = scale.to(dtype=centred.dtype, device=centred.device)
        means = torch.linalg.solve_triangular(c, centred.T, upper=False).T
    else:
        means = centred / _like(scale, centred)
    prec_chol = _scale_rows(params.precisions_cholesky, scale, covariance_type)
    components = GaussianComponents.from_precisions_cholesky(means, prec_chol, covariance_type)  # type: ignore[arg-type]
    logits = nn.Parameter(torch.log(params.weights).clone())
    groups = [*components.parameters(), logits]
    opt: torch.optim.Optimizer
    if optimizer == "adam":  # float32 data: torch's fused Adam (one kernel for all tensors; float64 keeps the loop)
        if uses_fast_step(params.means.dtype) and means.device.type in ("cpu", "cuda"):
            opt = torch.optim.Adam(groups, lr=learning_rate, fused=True)
        else:
            opt = torch.optim.Adam(groups, lr=learning_rate)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=learning_rate, momentum=0.9)
    else:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    return GDState(components, logits, opt, scale)


def batch_loss(state: GDState, x_std: Float[Tensor, "b d"], volume: bool) -> Float[Tensor, ""]:
    """Mean mixture NLL of a standardised batch (the distance-only objective when volume=False), by autograd
    through :class:`GaussianComponents` and :func:`mixture_nll`: the reference for :func:`accumulate_gradient`."""
    out = state.components(x_std)
    d = out.energy if volume else out.distance
    return mixture_nll(d, torch.log_softmax(state.logits, dim=0)).mean()


def log_joint_matrix(state: GDState, volume: bool) -> Float[Tensor, "p k"]:
    """A (P, K), differentiable in the parameters, with φ(x_std)ᵀ A_{:,j} = log π_j − e_j(x_std) (volume=True)
    or log π_j − ½‖z_j‖² (volume=False): the model's energies on the quadratic features of ``_stats``."""
    c = state.components
    lam = full_precisions(c.precisions_cholesky(), c.covariance_type, c.n_components, c.n_features)
    offsets = torch.log_softmax(state.logits, dim=0)
    if volume:
        offsets = offsets + c.log_det() - 0.5 * c.n_features * math.log(2 * math.pi)
    return quadratic_score_matrix(lam, c.means, offsets)


def accumulate_gradient(
    state: GDState, x_std: Float[Tensor, "b d"], volume: bool, weights: Tensor | None = None, rows: float = 0.0
) -> Float[Tensor, " b"]:
    r"""Backpropagate the mean mixture NLL of a standardised batch into the parameters; returns log p per row.

    This is the paper's law used as the algorithm: ∂L⁻/∂(log π_j − e_j) = −r_j, so the gradient with respect
    to the score matrix A is −φ Rᵀ / B, the E-step statistics of EM, and autograd takes it from A to the
    parameters. Equal to autograd through :func:`batch_loss` (tested to 1e-10 in float64) at the cost of the
    EM pass: two matrix products on the quadratic features instead of K whitenings and their backward.
    ``weights`` (B,): the row weights' sum Σ w log p divided by ``rows`` (the batch's weighted size) instead.
    """
    a = log_joint_matrix(state, volume)
    with torch.no_grad():
        phi_t = quadratic_features_t(x_std.to(a.dtype))  # (P, B)
        resp, log_norm = log_normalize(a.detach().T @ phi_t)  # (K, B), (B,)
        if weights is None:
            grad = (phi_t @ resp.T).mul_(-1.0 / x_std.shape[0])  # (P, K)
        else:
            grad = (phi_t @ (resp * weights.to(resp.dtype)).T).mul_(-1.0 / rows)
    a.backward(grad)
    return log_norm


def gd_step(
    state: GDState,
    x: Float[Tensor, "b d"],
    shift: Float[Tensor, " d"],
    scale: Scale,
    volume: bool,
    reg_covar: float = 0.0,
    fast: FastStep | None = None,
    weights: Tensor | None = None,
    mean_weight: float | None = None,
    missing: bool = False,
) -> float:
    """One optimiser step on batch x (original coordinates), with ``reg_covar``'s penalty when > 0 and the
    objective is the likelihood (volume=True; :func:`_reg_covar_backward`); returns the batch's mean objective
    per sample in original coordinates (log-likelihood when volume=True; without the penalty). In float32 the
    step is :class:`FastStep`'s (the fit's ``fast``, else one made for this step): the same gradient without
    autograd or a per-batch solve.

    ``weights`` (B,): the step follows Σ_i w_i log p(x_i) / (B · ``mean_weight``), an unbiased estimate of the
    data's weighted mean log-likelihood when ``mean_weight`` is the mean weight of all the rows (default: this
    batch's), and returns the batch's weighted mean.

    ``missing``: x may hold NaN (missing values); a batch that does steps on its observed-data log-likelihood
    with the statistics of :func:`missing_statistics` (Fisher's identity), by the autograd step."""
    if missing and _missing.has_nan(x):
        return _missing_step(state, x, shift, scale, reg_covar, weights, mean_weight)
    jacobian = _log_jacobian(scale, x.shape[1]) if volume else 0.0  # density of x = density of x_std / |det S|
    rows = float(x.shape[0])
    if weights is not None:
        rows = x.shape[0] * (float(weights.double().mean()) if mean_weight is None else mean_weight)
    if fast is None and uses_fast_step(x.dtype):
        fast = FastStep(state.components, state.logits, shift, scale, x.shape[0], x.dtype)
    if fast is not None:
        s, loglik = fast.statistics(x, fast.score_matrix_t(volume), weights)
        fast.set_gradient(s, x.shape[0] if weights is None else rows, volume, reg_covar)  # with the penalty's
        state.optimizer.step()
        if weights is None:
            return float(loglik) / x.shape[0] - jacobian
        return float(loglik) / float(weights.double().sum()) - jacobian
    x_std = _standardise(x, shift, scale)
    state.optimizer.zero_grad(set_to_none=True)
    log_norm = accumulate_gradient(state, x_std, volume, weights, rows)
    if weights is None:
        loss = -log_norm.double().mean()
    else:
        loss = -weighted_sum(log_norm, weights) / weights.double().sum()
    if reg_covar > 0 and volume:
        _reg_covar_backward(state, scale, reg_covar)
    state.optimizer.step()
    return -float(loss.detach()) - jacobian


def missing_statistics(
    state: GDState, x: Float[Tensor, "b d"], shift: Float[Tensor, " d"], scale: Scale, weights: Tensor | None = None
) -> tuple[Float[Tensor, "p k"], float, float]:
    """For a batch with missing values (NaN): the statistics Σ_i w_i r_ij E_j[φ(u_i) | x_o] (P, K, float64) whose
    negative, divided by the rows, is the gradient of the batch's mean observed-data log-likelihood with respect
    to :func:`log_joint_matrix` (Fisher's identity, ``_missing``), Σ w log p(x_o) in original coordinates, and
    Σ w (the rows when unweighted)."""
    c = state.components
    params = state_params(state, c.covariance_type, shift, scale)
    summary = _missing.batch_summary(x, params, c.covariance_type, shift, weights)
    stat = _missing.gradient_statistics(summary, _whitening(scale, c.n_features, x.device))
    return stat, float(summary.loglik), float(summary.n)


def _missing_step(
    state: GDState,
    x: Float[Tensor, "b d"],
    shift: Float[Tensor, " d"],
    scale: Scale,
    reg_covar: float,
    weights: Tensor | None,
    mean_weight: float | None,
) -> float:
    """:func:`gd_step` on a batch with missing values: autograd from the score matrix, with the expected
    statistics for −φRᵀ; returns the batch's (weighted) mean observed-data log-likelihood."""
    rows = float(x.shape[0])
    if weights is not None:
        rows = x.shape[0] * (float(weights.double().mean()) if mean_weight is None else mean_weight)
    stat, loglik, mass = missing_statistics(state, x, shift, scale, weights)
    state.optimizer.zero_grad(set_to_none=True)
    a = log_joint_matrix(state, True)
    a.backward(stat.to(a.dtype).mul_(-1.0 / rows))
    if reg_covar > 0:
        _reg_covar_backward(state, scale, reg_covar)
    state.optimizer.step()
    return loglik / mass


def _missing_mass(x: Tensor, weights: Tensor | None) -> float:
    return float(x.shape[0]) if weights is None else float(weights.double().sum())


def _whitening(scale: Scale, d: int, device: torch.device) -> Tensor | None:
    """L = S⁻¹ of the standardising map u = L(x − shift) as a (D, D) float64 matrix (None: the identity)."""
    if not isinstance(scale, Tensor):
        return None if scale == 1.0 else torch.eye(d, dtype=torch.float64, device=device) / scale
    s = scale.double().to(device)
    if s.dim() == 2:
        return torch.linalg.solve_triangular(s, torch.eye(d, dtype=torch.float64, device=device), upper=False)
    return torch.diag(1.0 / s)


def uses_fast_step(dtype: torch.dtype) -> bool:
    """Whether gd's steps on data of this dtype take :class:`FastStep`: float32 (its E-step GEMMs then run in
    float32, as EM's do; the parameters stay in the state's dtype, float64 in the estimator). Float64 data keep
    the autograd step, the reference the golden numbers were recorded with, bitwise."""
    return dtype == torch.float32


def group_gd_step(
    state: GDState,
    x: Float[Tensor, "b d"],
    shift: Float[Tensor, " d"],
    scale: Scale,
    volume: bool,
    reg_covar: float = 0.0,
    fast: FastStep | None = None,
    weights: Tensor | None = None,
    mean_weight: float = 1.0,
    missing: bool = False,
) -> tuple[float, float] | None:
    r"""One data-parallel optimiser step in a process group: x is this process's part of the global batch
    (possibly empty). The gradient of the summed NLL with respect to the score matrix A, −φRᵀ (the E-step
    statistics, :func:`accumulate_gradient`), is summed over the processes by one all-reduce, with the rows, the
    summed objective and a pending interrupt (every process then raises ``KeyboardInterrupt`` here, before the
    step); divided by the global rows and back-propagated from A, it gives every process the parameter
    gradient of the global batch's mean NLL (the map from A's gradient to the parameters' is linear), so every
    process takes the same step. Returns the global batch's summed objective (original coordinates) and rows,
    or None when the global batch is empty (every process's stream is exhausted: the epoch is over). With
    ``fast`` (float32) the statistics and the backward are :class:`FastStep`'s.

    ``weights`` (B,), this process's rows' weights: the step follows Σ w log p over the global batch divided by
    its rows times ``mean_weight`` (the mean weight of every row of every process), as :func:`gd_step` does in
    one process, and the objective returned is Σ w log p with Σ w (a global batch of zero weights: no step).
    ``missing``: x may hold NaN; this process's part then adds :func:`missing_statistics` (the autograd step)."""
    a: Tensor | None = None
    jacobian = _log_jacobian(scale, x.shape[1]) if volume else 0.0  # density of x = density of x_std / |det S|
    if missing and fast is None and _missing.has_nan(x):
        state.optimizer.zero_grad(set_to_none=True)
        a = log_joint_matrix(state, volume)
        stat, observed, _ = missing_statistics(state, x, shift, scale, weights)
        loglik = torch.tensor(observed + _missing_mass(x, weights) * jacobian, dtype=torch.float64)  # as x_std's
    elif fast is not None:
        stat, loglik = fast.statistics(x, fast.score_matrix_t(volume), weights)  # (K, P) circulant, float64
    else:
        x_std = _standardise(x, shift, scale)
        state.optimizer.zero_grad(set_to_none=True)
        a = log_joint_matrix(state, volume)
        with torch.no_grad():
            phi_t = quadratic_features_t(x_std.to(a.dtype))  # (P, B)
            resp, log_norm = log_normalize(a.detach().T @ phi_t)  # (K, B), (B,)
            if weights is not None:
                resp = resp * weights.to(resp.dtype)
            stat = (phi_t @ resp.T).double()  # (P, K)
            loglik = log_norm.double().sum() if weights is None else weighted_sum(log_norm, weights)
    with torch.no_grad():
        mass = float(x.shape[0]) if weights is None else float(weights.double().sum())
        tail = [mass, float(x.shape[0]), float(loglik), float(_interrupt.requested())]
        tail_t = torch.tensor(tail, dtype=torch.float64, device=stat.device)
        flat = _distributed.all_reduce_sum(torch.cat([stat.reshape(-1), tail_t]))
    if flat[-1] > 0:
        _interrupt.clear()
        raise KeyboardInterrupt
    total, rows = float(flat[-4]), int(flat[-3])
    if rows == 0:
        return None
    if total == 0:  # every row of the global batch removed: no step
        return 0.0, 0.0
    scale_rows = rows if weights is None else rows * mean_weight
    # the same parameters on every process: the same penalty gradient (the fast step adds it to dW)
    if fast is not None:
        fast.set_gradient(flat[: stat.numel()].reshape(stat.shape), scale_rows, volume, reg_covar)
    else:
        assert a is not None
        a.backward(flat[: stat.numel()].reshape(stat.shape).to(a.dtype).mul_(-1.0 / scale_rows))
        if reg_covar > 0 and volume:
            _reg_covar_backward(state, scale, reg_covar)
    state.optimizer.step()
    return float(flat[-2]) - total * jacobian, total


@torch.no_grad()
def state_params(state: GDState, covariance_type: str, shift: Float[Tensor, " d"], scale: Scale) -> MixtureParams:
    """sklearn-shaped parameters in original coordinates."""
    c = state.components
    if isinstance(scale, Tensor) and scale.dim() == 2:  # x = shift + C u
        means = c.means.detach() @ scale.to(c.means.dtype).T + shift.to(c.means.dtype)
    else:
        means = c.means.detach() * _like(scale, c.means) + shift.to(c.means.dtype)
    prec_chol = _scale_rows(c.precisions_cholesky().detach(), scale, covariance_type, inverse=True)
    weights = torch.softmax(state.logits.detach(), dim=0)
    cov = covariances_from_precisions_cholesky(prec_chol, covariance_type)
    return MixtureParams(weights, means, cov, prec_chol)


def fit_gd(
    data: DataSource,
    params: MixtureParams,
    settings: FitSettings,
    *,
    shift: Float[Tensor, " d"],
    scale: float,
    generator: torch.Generator,
    state: GDState | None = None,
    callback: Callback | None = None,
    resume: dict[str, Any] | None = None,
    on_safe_point: SafePoint | None = None,
    min_steps: int = 1,
    per_feature_scale: bool = False,
    average: bool = False,
    lr_halvings: int = LR_HALVINGS,
    certify: Certify | None = None,
) -> tuple[FitResult, GDState]:
    """Epochs of mini-batch gradient descent with the learning rate halved on plateaus; ``settings`` gives
    ``covariance_type``, ``tol``, ``max_iter``, ``batch_size``, ``learning_rate``, ``optimizer``, ``volume`` and
    ``reg_covar``.

    An epoch whose mean objective improves by less than ``tol`` on the previous one (or gets worse) halves the
    learning rate (as ``torch.optim.lr_scheduler.ReduceLROnPlateau(factor=0.5, patience=0)``); the fit has
    converged at the first plateau (|change| < tol) after ``lr_halvings`` halvings. A constant step leaves
    the iterate in a noise ball whose size grows with the step: at N = 3e5 from k-means, Adam at 0.01 stayed
    0.017 nats/sample short of the EM optimum, the halvings end 0.001 short.

    The estimator's schedule (the defaults here are the earlier schedule, bitwise): ``min_steps``
    makes an epoch whole passes until it has that many steps (with N <= batch_size an epoch was one full-batch
    step, and 100 epochs too few); ``per_feature_scale`` steps in whitened coordinates (:func:`feature_scale`,
    unless ``state`` is given: then the caller's ``scale``); ``average`` ends at the mean of the last epoch's
    iterates (:class:`_EpochAverage`); ``lr_halvings`` (the estimator: 1) is the halvings before the plateau
    that stops the fit. ``settings.reg_covar`` > 0 adds to every step the gradient of the penalty whose
    stationary points are EM-with-reg_covar's fixed points (:func:`_reg_covar_backward`; the schedule before
    the earlier schedule had none: pass ``reg_covar=0``). ``n_iter`` counts epochs, at
    most ``max_iter``.

    ``certify(params)`` (the estimator: :func:`~implicit_em.mixture._em.em_step_gain` on the data): at the
    plateau that would stop the fit, the gain of one exact EM step from the end (the epoch's mean iterate when
    ``average``); a gain of at least ``tol`` means the plateau is slow progress, not the optimum, and the fit
    goes on with its learning rate restored (and the halvings counted again). The plateau rule alone stopped
    0.2 nats per row short of EM on overlapping ill-conditioned components (benchmarks/gd_certificate.py).
    The certificates taken are in the result's ``certificates`` (epoch, gain).

    ``lower_bound`` of the result is the last epoch's mean objective (a running average over the epoch, not
    an exact pass; the estimator replaces it by an exact pass). ``on_safe_point(epochs, snapshot)`` follows
    every epoch that did not converge; ``resume`` takes such a snapshot, or the one a
    :class:`~implicit_em.mixture._interrupt.FitInterrupted` carries (after any step).
    """
    covariance_type, tol, max_iter, batch_size = (
        settings.covariance_type,
        settings.tol,
        settings.max_iter,
        settings.batch_size,
    )
    volume, reg_covar = settings.volume, settings.reg_covar
    learning_rate, optimizer = settings.learning_rate, settings.optimizer
    coords: Scale = scale
    if state is None:
        coords = feature_scale(data, shift, scale, covariance_type) if per_feature_scale else scale
        state = make_state(params, covariance_type, shift, coords, learning_rate, optimizer)
    pos, halvings, converged = EpochPosition(), 0, False
    certificates: list[tuple[int, float]] = []
    tail = _EpochAverage(_parameters(state)) if average else None
    if resume is not None:
        pos, halvings = _load_snapshot(state, resume, generator, tail)
    mean = pos.prev
    in_group = data.layout is not None  # a process group: data-parallel steps on the global mini-batches
    passes = epoch_passes(data, batch_size, min_steps)
    mean_weight = _mean_weight(data)
    missing = data.missing
    fast = None
    if uses_fast_step(data.dtype):
        fast = FastStep(state.components, state.logits, shift, coords, batch_size, data.dtype)

    def snapshot() -> dict[str, Any]:
        return _snapshot(state, covariance_type, shift, coords, pos, halvings, generator, tail)

    with _interrupt.deferred():
        try:
            for epoch in range(pos.epoch + 1, max_iter + 1):
                if not in_group:  # in a process group the interrupt flag travels with the all-reduce
                    _interrupt.check()
                t0 = time.perf_counter()
                if tail is not None and pos.step == 0:
                    tail.reset()
                for x, w in _epoch_batches(data, batch_size, generator, pos, passes):
                    step: tuple[float, float] | None
                    if in_group:
                        step = group_gd_step(
                            state, x, shift, coords, volume, reg_covar, fast, w, mean_weight or 1.0, missing
                        )
                        if step is None:
                            break
                    elif w is None:
                        mean = gd_step(state, x, shift, coords, volume, reg_covar, fast, missing=missing)
                        step = mean * x.shape[0], x.shape[0]
                    elif bool((w > 0).any()):  # the batch's weighted log-likelihood and weight
                        total = float(w.double().sum())
                        mean = gd_step(state, x, shift, coords, volume, reg_covar, fast, w, mean_weight, missing)
                        step = mean * total, total
                    else:  # every row of the batch removed: no step
                        step = 0.0, 0.0
                    pos.advance(*step)
                    if tail is not None:
                        tail.add()
                    if not in_group:  # in a process group the interrupt flag travels with the all-reduce
                        _interrupt.check()
                mean, prev = pos.mean(), pos.prev
                if not math.isfinite(mean):
                    raise FloatingPointError("gradient descent diverged (non-finite objective); lower learning_rate")
                if mean - prev < tol:  # a plateau or a step back: halve the step; stop at a plateau once halved enough
                    if halvings >= lr_halvings and abs(mean - prev) < tol:
                        converged = True
                        if certify is not None:
                            converged, gain = _certified(
                                state, tail, lambda: state_params(state, covariance_type, shift, coords), certify, tol
                            )
                            certificates.append((epoch, gain))
                        if not converged:  # slow progress, not the optimum: the learning rate back, halvings anew
                            halvings = 0
                            for group in state.optimizer.param_groups:
                                group["lr"] = learning_rate
                    else:
                        halvings += 1
                        for group in state.optimizer.param_groups:
                            group["lr"] *= 0.5
                pos.end_epoch(prev if converged else mean)
                if callback is not None:
                    usage = torch.softmax(state.logits.detach(), dim=0)
                    callback(epoch, mean, time.perf_counter() - t0, usage)
                if converged:
                    break
                if on_safe_point is not None:
                    on_safe_point(pos.epoch, snapshot)
        except KeyboardInterrupt:
            saved = snapshot()  # the iterate and the sums: a resumed fit continues exactly
            if tail is not None and pos.step == 0:  # between epochs: what a fit of max_iter = pos.epoch ends with
                tail.apply()
            kept = FitResult(state_params(state, covariance_type, shift, coords), pos.epoch, pos.prev, False, True)
            raise FitInterrupted(kept, state, saved) from None
    if tail is not None:
        tail.apply()  # the mean of the last epoch's iterates (Polyak-Ruppert): the centre of the noise ball
    result = FitResult(state_params(state, covariance_type, shift, coords), pos.epoch, mean, converged, False)
    return result._replace(certificates=tuple(certificates)), state


def _certified(
    state: GDState,
    tail: "_EpochAverage | None",
    current: Callable[[], MixtureParams],
    certify: Certify,
    tol: float,
) -> tuple[bool, float]:
    """Whether one EM step from where the fit would end (the epoch's mean iterate, ``current()`` after
    ``tail.apply()``) gains less than ``tol``, and the gain; the iterate is left as it was."""
    saved = [p.detach().clone() for p in _parameters(state)]
    if tail is not None:
        tail.apply()
    params = current()
    with torch.no_grad():
        for p, v in zip(_parameters(state), saved, strict=True):
            p.copy_(v)
    _, gain = certify(params)
    return gain < tol, gain


def _like(scale: Scale, ref: Tensor) -> Scale:
    """The scale as it multiplies ``ref``: a float stays a float (the scalar path's numbers are unchanged)."""
    return scale.to(dtype=ref.dtype, device=ref.device) if isinstance(scale, Tensor) else scale


def _standardise(x: Float[Tensor, "b d"], shift: Float[Tensor, " d"], scale: Scale) -> Float[Tensor, "b d"]:
    """(x − shift) / scale, or C⁻¹(x − shift) for a triangular factor C, in x's dtype."""
    if isinstance(scale, Tensor) and scale.dim() == 2:
        return torch.linalg.solve_triangular(scale.to(x.dtype), (x - shift.to(x.dtype)).T, upper=False).T
    return (x - shift.to(x.dtype)) / _like(scale, x)


def _log_jacobian(scale: Scale, d: int) -> float:
    """log|det S| of the standardising map S = diag(scale): D log s, or Σ_d log s_d."""
    if isinstance(scale, Tensor):
        return float((scale.diagonal() if scale.dim() == 2 else scale).double().log().sum())
    return d * math.log(scale)


def _scale_rows(prec_chol: Tensor, scale: Scale, covariance_type: str, inverse: bool = False) -> Tensor:
    r"""sklearn's precision Cholesky factor U (z = (x − μ)ᵀU) in standardised coordinates x = shift + S u:
    U' = S U, the rows scaled (``inverse``: U = S⁻¹U'). Row scaling keeps U triangular ("full", "tied") or
    diagonal ("diag", stored (K, D)); a scalar scale also keeps "spherical" (K,)."""
    if not isinstance(scale, Tensor):
        return prec_chol / scale if inverse else prec_chol * scale
    if covariance_type == "spherical":
        raise ValueError("a spherical covariance takes one scalar scale, got one per feature")
    s = scale.to(dtype=prec_chol.dtype, device=prec_chol.device)
    if s.dim() == 2:  # U' = Cᵀ U: upper triangular times upper triangular ("full", "tied" only)
        if covariance_type not in ("full", "tied"):
            raise ValueError(f"a triangular scale keeps only full and tied covariances, got {covariance_type!r}")
        return torch.linalg.solve_triangular(s.T, prec_chol, upper=True) if inverse else s.T @ prec_chol
    s = 1.0 / s if inverse else s
    return prec_chol * (s[:, None] if covariance_type in ("full", "tied") else s)  # U (.., D, D) or diag (.., D)


def _mean_weight(data: DataSource) -> float | None:
    """The mean weight of every row (of every process's shard in a process group), or None: unweighted."""
    mass = data.weight_sum()  # a weighted stream: one pass
    if mass is None:
        return None
    if data.layout is None:
        return mass / max(int(data.n_samples or 0), 1)
    total = _distributed.all_reduce_sum(torch.tensor([mass], dtype=torch.float64, device=data.device))
    return float(total[0]) / max(data.layout[1], 1)


def feature_scale(data: DataSource, shift: Float[Tensor, " d"], scale: float, covariance_type: str) -> Scale:
    """The per-feature standard deviations of the data (float64, (D,); one pass, over every shard in a process
    group), so that every feature has unit spread in the coordinates Adam steps in: Adam moves every parameter
    by about the learning rate, so with one scalar scale a feature 1e4 times narrower than the widest one (wine,
    breast cancer) gets mean and precision steps 1e4 times too large for it. A feature without spread keeps the
    scalar ``scale``; "spherical" keeps it for every feature (a per-feature scale would not stay spherical)."""
    if covariance_type == "spherical":
        return scale
    total: Tensor | None = None
    for batch in data.weighted_batches(_PASS_ROWS):  # weighted rows count as the weights say
        x, w = batch if isinstance(batch, tuple) else (batch, None)
        xc = x.double() - shift.double().to(x.device)
        if data.missing:  # a missing value sits at the mean: the spread of the observed values, a little less
            xc = torch.nan_to_num(xc, nan=0.0)
        if w is None:
            rows = torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device)
            part = torch.cat([xc.sum(0), (xc.T @ xc).reshape(-1), rows])
        else:
            wc = w.double().to(x.device)[:, None]
            part = torch.cat([(wc * xc).sum(0), (xc.T @ (wc * xc)).reshape(-1), wc.sum().reshape(1)])
        total = part if total is None else total + part
    if total is None:
        return scale
    if data.layout is not None:  # a process group: the sums over every process's shard
        total = _distributed.all_reduce_sum(total)
    total = total.cpu()
    d = int(shift.numel())
    n = max(float(total[-1]), 1.0)
    mean = total[:d] / n
    cov = total[d : d + d * d].reshape(d, d) / n - torch.outer(mean, mean)
    if covariance_type in ("full", "tied"):
        chol, info = torch.linalg.cholesky_ex(cov)
        if int(info) == 0 and bool((chol.diagonal() > 1e-12 * scale).all()):
            return chol
    std = cov.diagonal().clamp_min(0.0).sqrt()
    return torch.where(std > 1e-12 * scale, std, torch.full_like(std, scale))


def epoch_passes(data: DataSource, batch_size: int, min_steps: int) -> int:
    """Passes over the data in one epoch: enough for ``min_steps`` optimiser steps; one when a pass has that
    many, or when its steps are not known (a stream in a process group)."""
    rows = data.layout[1] if data.layout is not None else data.n_samples
    if min_steps <= 1 or rows is None or (data.layout is not None and data.kind == "iterable"):
        return 1
    return max(1, math.ceil(min_steps / max(1, math.ceil(rows / batch_size))))


def _epoch_batches(
    data: DataSource, batch_size: int, generator: torch.Generator, pos: EpochPosition, passes: int
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """:func:`~implicit_em.mixture._epochs.weighted_epoch_batches` over ``passes`` consecutive passes, each
    reshuffled by the generator; a resumed epoch redraws them from the state it started from and skips the steps
    taken. Each batch comes with its rows' weights (None for unweighted data)."""
    if passes == 1:
        return weighted_epoch_batches(data, batch_size, generator, pos)
    if pos.step == 0:
        pos.generator = generator.get_state()
    else:
        assert pos.generator is not None
        generator.set_state(pos.generator.cpu())
    chained = itertools.chain.from_iterable(data.weighted_step_batches(batch_size, generator) for _ in range(passes))
    return itertools.islice(chained, pos.step, None)


@torch.no_grad()
def _reg_covar_backward(state: GDState, scale: Scale, reg_covar: float) -> None:
    r"""Add to the parameters' gradient that of ½·reg_covar·Σ_j sg(π_j)·tr(P_j), P_j the precision in the
    original coordinates and sg(π_j) the current weight held fixed: the penalty whose stationary points are
    the fixed points of EM with ``reg_covar``.

    The exact likelihood is unbounded when a covariance becomes singular (a component on a few points, or a
    feature without spread inside it). EM's M-step maximises Σ_n r_nj log N(x_n | μ_j, Σ_j) − ½·reg·N_j·tr(P_j)
    (that is what adding reg·I to the covariance does: Σ_j = S_j + reg·I); with π_j = N_j / N at a stationary
    point of the weights, the same term per row is this penalty, so gd's stationary points are EM-with-
    reg_covar's: Σ_j = S_j + reg·I (full), its diagonal (diag), their pooled (tied) or averaged (spherical)
    forms, every mean and weight unchanged. sg(π) keeps the penalty from moving the weights (the responsibility
    sums stay the only force on them). The gradient is smooth, unlike a projection onto Σ ⪰ reg·I, which Adam
    follows badly: its moments keep the outward push the projection undoes (breast cancer: 0.7 nats short of
    EM's regularised optimum in training). Only for the likelihood (volume=True): the distance-only objective's
    optimum is W → 0, not a singular covariance, and a pull on tr(P) would push it the same way, into the
    collapse that objective is there to show. tr(P) = ‖W S⁻¹‖²_F in the standardised coordinates x = shift + S u,
    so the gradient is analytic: reg·π_j·W_j G with G = S⁻¹S⁻ᵀ, carried to log_diag and lower (no autograd
    graph: ~0.1 ms a step otherwise; tested against autograd of an independent trace).
    """
    c = state.components
    w = c.whitening().detach()
    coef = reg_covar * torch.softmax(state.logits.detach(), dim=0).to(w.dtype)  # reg·sg(π_j), (K,)
    if c.covariance_type in ("full", "tied"):
        if isinstance(scale, Tensor) and scale.dim() == 2:  # G = C⁻¹C⁻ᵀ
            eye = torch.eye(scale.shape[0], dtype=w.dtype, device=w.device)
            inv = torch.linalg.solve_triangular(scale.to(w.dtype), eye, upper=False)
            d_w = w @ (inv @ inv.T)
        else:  # G = diag(1/s²): columns of W scaled
            d_w = w / (_like(scale, w) ** 2)
        d_w = d_w * (coef[:, None, None] if c.covariance_type == "full" else reg_covar)  # tied: Σπ = 1
        _add_grad(c.lower, torch.tril(d_w, diagonal=-1))
        _add_grad(c.log_diag, d_w.diagonal(dim1=-2, dim2=-1) * c.log_diag.detach().exp())
    elif c.covariance_type == "diag":  # ½·reg·π_j Σ_d w_jd²/s_d²: d/d log w = reg·π_j w²/s²
        _add_grad(c.log_diag, coef[:, None] * (w / _like(scale, w)) ** 2)
    else:  # spherical: ½·reg·π_j D w_j²/s²
        _add_grad(c.log_scale, coef * c.n_features * (w / _like(scale, w)) ** 2)


def _add_grad(p: nn.Parameter, g: Tensor) -> None:
    """p.grad += g (or = g when p has none yet), as autograd accumulates."""
    g = g.to(p.dtype)
    if p.grad is None:
        p.grad = g.clone()
    else:
        p.grad.add_(g)


def _parameters(state: GDState) -> list[nn.Parameter]:
    """The optimised tensors, in a fixed order: the components' parameters, then the logits."""
    return [*state.components.parameters(), state.logits]


class _EpochAverage:
    """The running mean of the iterates of the epoch in progress (Polyak-Ruppert averaging over one epoch).

    Adam at a fixed rate leaves the iterate in a noise ball around the optimum (mini-batch noise, or the
    oscillation of its normalised full-batch steps); the mean of the last epoch's iterates sits near its centre,
    which the plateau test cannot reach by halving the rate without many more epochs. Sums are float64.
    """

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.sums = [torch.zeros_like(p, dtype=torch.float64) for p in params]
        self.count = 0

    def reset(self) -> None:
        for total in self.sums:
            total.zero_()
        self.count = 0

    @torch.no_grad()
    def add(self) -> None:
        for total, p in zip(self.sums, self.params, strict=True):
            total.add_(p.detach().double())
        self.count += 1

    @torch.no_grad()
    def apply(self) -> None:
        """Set the parameters to the mean (a no-op before any step)."""
        if self.count == 0:
            return
        for total, p in zip(self.sums, self.params, strict=True):
            p.copy_(total / self.count)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "sums": [t.clone() for t in self.sums]}

    def load(self, d: dict[str, Any]) -> None:
        self.count = int(d["count"])
        for total, saved in zip(self.sums, d["sums"], strict=True):
            total.copy_(saved)


def _snapshot(
    state: GDState,
    covariance_type: str,
    shift: Float[Tensor, " d"],
    scale: Scale,
    pos: EpochPosition,
    halvings: int,
    generator: torch.Generator,
    tail: _EpochAverage | None = None,
) -> dict[str, Any]:
    """What gradient descent resumes from: the model's and the optimiser's state dicts (copies), the
    parameters they give, the position, the learning-rate halvings, the generator's state and (when the fit
    averages) the epoch's running sums of the iterates."""
    extra = {} if tail is None else {"average": tail.to_dict()}
    return {
        **extra,
        "params": list(state_params(state, covariance_type, shift, scale)),
        "components": {k: v.detach().clone() for k, v in state.components.state_dict().items()},
        "logits": state.logits.detach().clone(),
        "optimizer": copy.deepcopy(state.optimizer.state_dict()),
        "halvings": halvings,
        "position": pos.to_dict(),
        "generator": generator.get_state(),
    }


def _load_snapshot(
    state: GDState, snapshot: dict[str, Any], generator: torch.Generator, tail: _EpochAverage | None = None
) -> tuple[EpochPosition, int]:
    """Overwrite the state (built from the snapshot's parameters) with the snapshot's exact tensors."""
    if tail is not None and "average" in snapshot:
        tail.load(snapshot["average"])
    state.components.load_state_dict(snapshot["components"])
    with torch.no_grad():
        state.logits.copy_(snapshot["logits"])
    state.optimizer.load_state_dict(snapshot["optimizer"])
    generator.set_state(snapshot["generator"].cpu())
    return EpochPosition.from_dict(snapshot["position"]), int(snapshot["halvings"])
