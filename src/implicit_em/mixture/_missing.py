r"""Missing values integrated out: EM for a Gaussian mixture on rows with NaN features (Ghahramani & Jordan, 1994).

For a row with observed coordinates o and missing m, and component j with mean μ and covariance Σ:

- E-step: the row's density is the marginal over o, N(x_o; μ_o, Σ_oo), so the responsibilities r_j and the
  log-likelihood use only what was observed;
- the missing coordinates are completed by their conditional mean x̂_m = μ_m + Σ_mo Σ_oo⁻¹ (x_o − μ_o), and their
  second moment by x̂ x̂ᵀ plus the conditional covariance C = Σ_mm − Σ_mo Σ_oo⁻¹ Σ_om on the (m, m) block;
- M-step: the complete-data M-step (``_stats.from_summaries``) on the expected statistics Σ r x̃ and
  Σ r (x̃ x̃ᵀ + C), for every covariance type (diag and spherical keep their diagonal of the same statistics).

Rows are grouped by their pattern of missing features, so each pattern costs one Cholesky factor per component.
Computed in float64 with torch, chunk-free (the rows with NaN are held in memory). A row with nothing missing
takes the same formulas with m empty; data without any NaN never come here (the complete-data fitters run,
bitwise as before).
"""

import math
import time

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian
from implicit_em.mixture._em import Callback, FitResult
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._stats import MixtureParams, Summary, from_summaries, weighted_sum

__all__ = ["fit_em_missing", "weighted_log_prob_missing"]


def _patterns(missing: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(rows, missing-feature mask) for every distinct pattern of missing features, in a fixed order."""
    keys, inverse = np.unique(missing, axis=0, return_inverse=True)
    return [(np.nonzero(inverse.reshape(-1) == i)[0], keys[i]) for i in range(len(keys))]


def _pattern_terms(
    x: Float[Tensor, "b d"], miss: np.ndarray, params: MixtureParams, covariance_type: str, shift: Tensor
) -> tuple[Float[Tensor, "b k"], Float[Tensor, "k b d"], Float[Tensor, "k d d"]]:
    """For rows x sharing the missing mask ``miss``: log π_j + log N(x_o; μ_o, Σ_oo) (B, K), the completed rows
    x̃ − shift per component (K, B, D), and the conditional covariances on the missing block (K, D, D)."""
    w, mu, cov, _ = params
    k, d = mu.shape
    full = gaussian.full_matrices(cov.double(), covariance_type, k, d)  # (K, D, D)
    o = torch.from_numpy(np.nonzero(~miss)[0])
    m = torch.from_numpy(np.nonzero(miss)[0])
    xo = x[:, o].double()  # (B, |o|)
    s_oo = full[:, o][:, :, o]  # (K, |o|, |o|)
    chol = torch.linalg.cholesky(s_oo)
    diff = (xo[None] - mu[:, o].double()[:, None, :]).transpose(1, 2)  # (K, |o|, B)
    z = torch.linalg.solve_triangular(chol, diff, upper=False)  # L⁻¹ (x_o − μ_o)
    log_det = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)  # ½ log|Σ_oo|
    logp = torch.log(w.double())[:, None] - log_det[:, None] - 0.5 * len(o) * math.log(2 * math.pi)
    logp = logp - 0.5 * (z * z).sum(1)  # (K, B)
    filled = x.double().expand(k, *x.shape).clone()  # (K, B, D)
    cond = torch.zeros(k, d, d, dtype=torch.float64)
    if len(m):
        s_mo = full[:, m][:, :, o]  # (K, |m|, |o|)
        alpha = torch.linalg.solve_triangular(chol, s_mo.transpose(1, 2), upper=False)  # L⁻¹ Σ_om
        beta = torch.linalg.solve_triangular(chol.transpose(1, 2), z, upper=True)  # Σ_oo⁻¹ (x_o − μ_o)
        filled[:, :, m] = (mu[:, m].double()[:, :, None] + s_mo @ beta).transpose(1, 2)
        block = full[:, m][:, :, m] - alpha.transpose(1, 2) @ alpha
        cond[:, m[:, None], m[None, :]] = block
    return logp.T, filled - shift.double(), cond


def _summary(
    x: Float[Tensor, "n d"],
    patterns: list[tuple[np.ndarray, np.ndarray]],
    params: MixtureParams,
    covariance_type: str,
    shift: Tensor,
    weights: Tensor | None,
) -> Summary:
    """The expected statistics of every row (see the module docstring), summed in float64."""
    k, d = params.means.shape
    nk = torch.zeros(k, dtype=torch.float64)
    sx = torch.zeros(k, d, dtype=torch.float64)
    sxx = torch.zeros(k, d, d, dtype=torch.float64)
    loglik = torch.zeros((), dtype=torch.float64)
    for rows, miss in patterns:
        idx = torch.from_numpy(rows)
        logp, filled, cond = _pattern_terms(x[idx], miss, params, covariance_type, shift)
        log_norm = torch.logsumexp(logp, dim=1)
        resp = torch.exp(logp - log_norm[:, None])  # (B, K)
        if weights is not None:
            loglik = loglik + weighted_sum(log_norm, weights[idx])
            resp = resp * weights[idx].double()[:, None]
        else:
            loglik = loglik + log_norm.sum()
        r = resp.T  # (K, B)
        nk += r.sum(1)
        sx += torch.einsum("kb,kbd->kd", r, filled)
        sxx += torch.einsum("kb,kbd,kbe->kde", r, filled, filled) + r.sum(1)[:, None, None] * cond
    n = torch.tensor(float(x.shape[0]), dtype=torch.float64) if weights is None else weights.double().sum()
    return Summary(n, nk, sx, sxx, loglik)


def fit_em_missing(
    x: Float[Tensor, "n d"],
    params: MixtureParams,
    settings: FitSettings,
    *,
    shift: Float[Tensor, " d"],
    weights: Tensor | None = None,
    lower_bound: float = -math.inf,
    callback: Callback | None = None,
) -> FitResult:
    """Batch EM on rows with NaN features (float64), sklearn's loop and stopping rule (|Δ lower bound| < tol, the
    lower bound the mean observed-data log-likelihood before the M-step)."""
    x = x.double()
    patterns = _patterns(torch.isnan(x).numpy())
    params = MixtureParams(*(t.double() for t in params))
    n_iter, converged = 0, False
    for n_iter in range(1, settings.max_iter + 1):
        t0 = time.perf_counter()
        prev = lower_bound
        summary = _summary(x, patterns, params, settings.covariance_type, shift, weights)
        params = from_summaries(summary, shift, settings.reg_covar, settings.covariance_type, torch.float64)
        lower_bound = float(summary.loglik / summary.n)
        if callback is not None:
            callback(n_iter, lower_bound, time.perf_counter() - t0, summary.nk / summary.n)
        if abs(lower_bound - prev) < settings.tol:
            converged = True
            break
    return FitResult(params, n_iter, lower_bound, converged, False)


def weighted_log_prob_missing(
    x: Float[Tensor, "n d"], params: MixtureParams, covariance_type: str
) -> Float[Tensor, "n k"]:
    """log π_j + log N(x_o; μ_o, Σ_oo) of every row over its observed features, (N, K), float64."""
    x = x.double()
    params = MixtureParams(*(t.double() for t in params))
    out = torch.empty(x.shape[0], params.means.shape[0], dtype=torch.float64)
    shift = torch.zeros(x.shape[1], dtype=torch.float64)
    for rows, miss in _patterns(torch.isnan(x).numpy()):
        idx = torch.from_numpy(rows)
        out[idx] = _pattern_terms(x[idx], miss, params, covariance_type, shift)[0]
    return out
