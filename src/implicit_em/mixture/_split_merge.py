r"""Split-and-merge moves out of EM's local optima (after Ueda, Nakano, Ghahramani & Hinton 2000, "SMEM").

EM from k-means often ends with two components sharing one cluster while another component covers two
clusters. A move merges the pair (i, j) whose responsibilities overlap most,

.. math::  J_{merge}(i, j) = \frac{r_i^\top r_j}{\|r_i\| \|r_j\|},

into one moment-matched Gaussian, and splits the component k whose own points gain most log-likelihood from
two Gaussians instead of one (a two-component EM on those points, which also gives the two halves), putting
the halves in slots k and j. EM then runs to convergence from the moved parameters, and the move is kept only if
the mean log-likelihood rises by more than ``tol``. Candidates are scored on a sample of at most 50,000 rows
(in a process group the global sample, the one the single process draws from the concatenated shards, so the
proposals are the single process's; rank 0 scores them and every process tries the same moves);
each trial is a full EM run, so the cost is (trials) × (one EM run). An interrupt during a trial raises
:class:`~implicit_em.mixture._interrupt.FitInterrupted` with the best result so far (the trial is dropped).
"""

import math
from dataclasses import replace
from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian
from implicit_em.mixture import _distributed, _stats
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import Callback, FitResult, fit_em
from implicit_em.mixture._interrupt import FitInterrupted
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._stats import MixtureParams


def _full_covariances(params: MixtureParams, covariance_type: str) -> Float[Tensor, "k d d"]:
    """(K, D, D) float64 covariances, a copy the moves can write into."""
    k, d = params.means.shape
    return gaussian.full_matrices(params.covariances.double(), covariance_type, k, d).clone()


def _as_type(full: Tensor, covariance_type: str, old: Tensor) -> Tensor:
    if covariance_type == "full":
        return full
    if covariance_type == "tied":
        return old.double()  # a shared covariance does not move
    diag = torch.diagonal(full, dim1=-2, dim2=-1)
    return diag if covariance_type == "diag" else diag.mean(1)


class Split(NamedTuple):
    """Two-component fit of the points one component owns: weights (2,), means (2, D), covariances."""

    weights: Float[Tensor, " 2"]
    means: Float[Tensor, "2 d"]
    covariances: Float[Tensor, "2 d d"]


def split_proposals(
    x: Float[Tensor, "n d"], params: MixtureParams, covariance_type: str, shift: Float[Tensor, " d"]
) -> list[tuple[float, int, Split]]:
    """For every component, the gain in log-likelihood of its own points (hard assignment on the sample) from
    two Gaussians instead of one, with the two-component fit; best first. This is a direct form of SMEM's
    split criterion (how badly one Gaussian fits the local data)."""
    a = _stats.score_matrix(params, covariance_type, shift)
    labels = _stats.weighted_log_prob(x.double(), a, shift).argmax(1)
    d = x.shape[1]
    out = []
    for k in range(params.means.shape[0]):
        xk = x[labels == k].double()
        if len(xk) < 4 * (d + 1):
            continue
        gain, split = two_gaussians(xk)
        out.append((gain, k, split))
    return sorted(out, key=lambda t: -t[0])


def two_gaussians(
    x: Float[Tensor, "n d"], reg_covar: float = 1e-6, max_iter: int = 30, tol: float = 1e-3
) -> tuple[float, Split]:
    """EM for two full-covariance Gaussians on x (float64), started by splitting the one-Gaussian fit along its
    principal axis (means μ ± √λ₁ v₁, SMEM's split); returns (total log-likelihood gain over one Gaussian, fit).

    The one-Gaussian log-likelihood is the closed form -N/2 (D (1 + log 2π) + log det Σ).
    """
    n, d = x.shape
    mean = x.mean(0)
    cov = torch.cov(x.T, correction=0).reshape(d, d) + reg_covar * torch.eye(d, dtype=x.dtype, device=x.device)
    one = -0.5 * (d * (1 + math.log(2 * math.pi)) + torch.linalg.slogdet(cov)[1])
    evals, evecs = torch.linalg.eigh(cov)
    step = evals[-1].clamp(min=0).sqrt() * evecs[:, -1]
    cov2 = torch.stack([cov, cov])
    params = MixtureParams(
        torch.full((2,), 0.5, dtype=x.dtype, device=x.device),
        torch.stack([mean + step, mean - step]),
        cov2,
        gaussian.precisions_cholesky(cov2, "full", on_singular="ridge"),
    )
    data = DataSource(x, x.device, x.dtype, d)
    fit = fit_em(
        data,
        params,
        FitSettings(covariance_type="full", reg_covar=reg_covar, tol=tol, max_iter=max_iter, batch_size=n),
        shift=mean,
        sync=False,  # a local fit on one process's sample, never summed across processes
        interruptible=False,  # part of choosing a move (on rank 0 alone): a SIGINT is acted on in the trials
    )
    p = fit.params
    two = _stats.summarize(x, _stats.score_matrix(p, "full", mean), mean)[0].loglik / n
    return float(n * (two - one)), Split(p.weights, p.means, p.covariances)


def merge_pairs(
    x: Float[Tensor, "n d"], params: MixtureParams, covariance_type: str, shift: Float[Tensor, " d"]
) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, by decreasing overlap of their responsibilities on the sample."""
    a = _stats.score_matrix(params, covariance_type, shift)
    r = torch.softmax(_stats.weighted_log_prob(x.double(), a, shift), dim=1)  # (N, K)
    norm = r.norm(dim=0).clamp(min=1e-12)
    overlap = (r.T @ r) / (norm[:, None] * norm[None, :])  # (K, K)
    iu, ju = torch.triu_indices(r.shape[1], r.shape[1], offset=1)
    order = torch.argsort(overlap[iu, ju], descending=True)
    return [(int(iu[m]), int(ju[m])) for m in order.tolist()]


def candidates(
    x: Float[Tensor, "n d"], params: MixtureParams, covariance_type: str, shift: Float[Tensor, " d"]
) -> list[tuple[int, int, int, Split]]:
    """(i, j, k, split) moves, best first: merge i and j, split k (k ∉ {i, j}) as ``split`` proposes. The
    best few merges are paired with the best few splits, ordered by merge rank then split rank."""
    merges = merge_pairs(x, params, covariance_type, shift)[:4]
    splits = split_proposals(x, params, covariance_type, shift)[:4]
    return [(i, j, k, sp) for (i, j) in merges for (_, k, sp) in splits if k not in (i, j)]


def apply_move(params: MixtureParams, move: tuple[int, int, int, Split], covariance_type: str) -> MixtureParams:
    """Merge i and j into slot i (moment matching); k's two halves from the split fit go to slots k and j."""
    i, j, k, split = move
    w, mu = params.weights.double().clone(), params.means.double().clone()
    full = _full_covariances(params, covariance_type)
    wm = w[i] + w[j]
    mean_m = (w[i] * mu[i] + w[j] * mu[j]) / wm
    second = (w[i] * (full[i] + torch.outer(mu[i], mu[i])) + w[j] * (full[j] + torch.outer(mu[j], mu[j]))) / wm
    cov_m = second - torch.outer(mean_m, mean_m)
    wk = w[k].clone()
    sw, smu, scov = (t.to(w.device) for t in split)
    w[i], mu[i], full[i] = wm, mean_m, cov_m
    w[j], mu[j], full[j] = wk * sw[0], smu[0], scov[0]
    w[k], mu[k], full[k] = wk * sw[1], smu[1], scov[1]
    cov = _as_type(0.5 * (full + full.mT), covariance_type, params.covariances)
    dtype = params.means.dtype
    prec = gaussian.precisions_cholesky(cov, covariance_type, on_singular="ridge")
    return MixtureParams(w.to(dtype), mu.to(dtype), cov.to(dtype), prec.to(dtype))


def fit_split_merge(
    data: DataSource,
    result: FitResult,
    sample: Float[Tensor, "n d"],
    settings: FitSettings,
    *,
    shift: Float[Tensor, " d"],
    batch_size: int,
    callback: Callback | None = None,
) -> tuple[FitResult, int]:
    """Up to ``settings.split_merge`` split-and-merge trials after a converged EM result, each an EM run with the
    fit's ``covariance_type``, ``reg_covar``, ``tol`` and ``max_iter`` in chunks of ``batch_size`` rows; returns
    the best result and the number of accepted moves.

    The best result is one EM run, as sklearn's ``n_iter_`` and ``lower_bounds_`` describe one run: ``result``
    itself, or the EM run after the last accepted move, with its own ``n_iter`` (at most ``max_iter``) and its
    own ``lower_bounds``. The iterations of all trials reach ``callback`` (the estimator counts them in
    ``n_split_merge_iter_``); they are not added to ``n_iter``.
    """
    if params_too_few(result.params):
        return result, 0
    covariance_type, tol, n_trials = settings.covariance_type, settings.tol, settings.split_merge
    trial_settings = replace(settings, batch_size=batch_size)
    accepted, trials = 0, 0
    best = result
    bounds: list[float] = []

    def record(epoch: int, loglik: float, seconds: float, usage: Tensor) -> None:
        bounds.append(loglik)
        if callback is not None:
            callback(epoch, loglik, seconds, usage)

    while trials < n_trials:
        moved = False
        # rank 0 proposes from the global sample and every process tries the same moves (EM is summed over all)
        moves = candidates(sample, best.params, covariance_type, shift) if _distributed.rank() == 0 else None
        for move in _distributed.broadcast_object(moves):
            if trials >= n_trials:
                break
            trials += 1
            bounds.clear()
            try:
                start = apply_move(best.params, move, covariance_type)
                trial = fit_em(data, start, trial_settings, shift=shift, callback=record)
            except FitInterrupted:
                raise FitInterrupted(best._replace(interrupted=True, converged=False), None, None) from None
            if trial.lower_bound > best.lower_bound + tol:
                best, moved = trial._replace(lower_bounds=tuple(bounds)), True
                accepted += 1
                break
        if not moved:
            break
    return best, accepted


def params_too_few(params: MixtureParams) -> bool:
    """A move needs three distinct components."""
    return params.means.shape[0] < 3
