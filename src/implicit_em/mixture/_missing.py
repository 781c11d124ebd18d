r"""Missing values integrated out: the E-step of a Gaussian mixture on rows with NaN features (Ghahramani &
Jordan, 1994), for all three fitters, in memory, on streams and in process groups.

For a row with observed coordinates o and missing m, and component j with mean μ and covariance Σ:

- E-step: the row's density is the marginal over o, N(x_o; μ_o, Σ_oo), so the responsibilities r_j and the
  log-likelihood use only what was observed;
- the missing coordinates are completed by their conditional mean x̂_m = μ_m + Σ_mo Σ_oo⁻¹ (x_o − μ_o), and their
  second moment by x̂ x̂ᵀ plus the conditional covariance C = Σ_mm − Σ_mo Σ_oo⁻¹ Σ_om on the (m, m) block;
- the expected statistics Σ r x̃ and Σ r (x̃ x̃ᵀ + C) are a :class:`~implicit_em.mixture._stats.Summary` like any
  batch's, so batch EM and online EM take their M-steps on them unchanged (diag and spherical keep the diagonal),
  and a process group sums them with the same all-reduce;
- gradient descent steps on the observed-data log-likelihood Σ log p(x_o). By Fisher's identity its gradient is
  the gradient of the expected complete-data log-likelihood at the current parameters, which is linear in the
  expected quadratic features: the gradient with respect to gd's score matrix is −Σ_i r_ij E_j[φ(u_i) | x_o]
  (:func:`gradient_statistics`), the complete-data step's −φRᵀ with each row's features replaced by their
  conditional expectation. The paper's law, ∂L/∂(log-joint_j) = −r_j, holds for the marginal as it is.

A batch is split by its pattern of missing features, so each pattern costs one Cholesky factor per component.
Computed in float64. A batch without any NaN never comes here: the complete-data E-step runs on it, so data with
nothing missing give the complete-data fit bitwise.
"""

import math
from collections.abc import Iterable

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian
from implicit_em.mixture._stats import (
    MixtureParams,
    Summary,
    log_normalize,
    summarize,
    weighted_log_prob,
    weighted_sum,
)

__all__ = [
    "batch_log_prob",
    "batch_summary",
    "fill",
    "gradient_statistics",
    "has_nan",
    "nan_moments",
    "pass_loglik",
    "pass_summary",
]

Batch = Tensor | tuple[Tensor, Tensor]


def has_nan(x: Tensor) -> bool:
    """Whether the batch holds a NaN (a missing value)."""
    return bool(torch.isnan(x).any())


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
    dev = x.device
    full = gaussian.full_matrices(cov.double(), covariance_type, k, d)  # (K, D, D)
    o = torch.from_numpy(np.nonzero(~miss)[0]).to(dev)
    m = torch.from_numpy(np.nonzero(miss)[0]).to(dev)
    xo = x[:, o].double()  # (B, |o|)
    s_oo = full[:, o][:, :, o]  # (K, |o|, |o|)
    chol = torch.linalg.cholesky(s_oo)
    diff = (xo[None] - mu[:, o].double()[:, None, :]).transpose(1, 2)  # (K, |o|, B)
    z = torch.linalg.solve_triangular(chol, diff, upper=False)  # L⁻¹ (x_o − μ_o)
    log_det = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)  # ½ log|Σ_oo|
    logp = torch.log(w.double())[:, None] - log_det[:, None] - 0.5 * len(o) * math.log(2 * math.pi)
    logp = logp - 0.5 * (z * z).sum(1)  # (K, B)
    filled = x.double().expand(k, *x.shape).clone()  # (K, B, D)
    cond = torch.zeros(k, d, d, dtype=torch.float64, device=dev)
    if len(m):
        s_mo = full[:, m][:, :, o]  # (K, |m|, |o|)
        alpha = torch.linalg.solve_triangular(chol, s_mo.transpose(1, 2), upper=False)  # L⁻¹ Σ_om
        beta = torch.linalg.solve_triangular(chol.transpose(1, 2), z, upper=True)  # Σ_oo⁻¹ (x_o − μ_o)
        filled[:, :, m] = (mu[:, m].double()[:, :, None] + s_mo @ beta).transpose(1, 2)
        block = full[:, m][:, :, m] - alpha.transpose(1, 2) @ alpha
        cond[:, m[:, None], m[None, :]] = block
    return logp.T, filled - shift.double().to(dev), cond


def _as_float64(params: MixtureParams) -> MixtureParams:
    return MixtureParams(*(t.double() for t in params))


def batch_summary(
    x: Float[Tensor, "b d"],
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
    weights: Float[Tensor, " b"] | None = None,
) -> Summary:
    """The expected statistics of the rows of x (NaN: missing) in shifted coordinates, summed in float64 (see the
    module docstring); ``weights`` (B,): each row counts that many times."""
    params = _as_float64(params)
    k, d = params.means.shape
    dev = x.device
    nk = torch.zeros(k, dtype=torch.float64, device=dev)
    sx = torch.zeros(k, d, dtype=torch.float64, device=dev)
    sxx = torch.zeros(k, d, d, dtype=torch.float64, device=dev)
    loglik = torch.zeros((), dtype=torch.float64, device=dev)
    for rows, miss in _patterns(torch.isnan(x).cpu().numpy()):
        idx = torch.from_numpy(rows).to(dev)
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
    n = torch.tensor(float(x.shape[0]), dtype=torch.float64, device=dev) if weights is None else weights.double().sum()
    return Summary(n, nk, sx, sxx, loglik)


def batch_log_prob(x: Float[Tensor, "b d"], params: MixtureParams, covariance_type: str) -> Float[Tensor, "b k"]:
    """log π_j + log N(x_o; μ_o, Σ_oo) of every row over its observed features, (B, K), float64."""
    params = _as_float64(params)
    out = torch.empty(x.shape[0], params.means.shape[0], dtype=torch.float64, device=x.device)
    shift = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    for rows, miss in _patterns(torch.isnan(x).cpu().numpy()):
        idx = torch.from_numpy(rows).to(x.device)
        out[idx] = _pattern_terms(x[idx], miss, params, covariance_type, shift)[0]
    return out


def pass_summary(
    batches: Iterable[Batch],
    a: Float[Tensor, "p k"],
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
) -> Summary | None:
    """:func:`~implicit_em.mixture._estep.pass_summary` for data that may hold NaN: a batch with a NaN takes
    :func:`batch_summary`, any other the complete-data E-step under the score matrix ``a``."""
    total: Summary | None = None
    for batch in batches:
        x, w = batch if isinstance(batch, tuple) else (batch, None)
        part = batch_summary(x, params, covariance_type, shift, w) if has_nan(x) else summarize(x, a, shift, w)[0]
        total = part if total is None else total + part
    return total


def pass_loglik(
    batches: Iterable[Batch],
    a: Float[Tensor, "p k"],
    params: MixtureParams,
    covariance_type: str,
    shift: Float[Tensor, " d"],
) -> tuple[float, float]:
    """Σ log p(x_o) and the rows (Σ w, Σ w log p for weighted batches) of data that may hold NaN."""
    total, n = 0.0, 0.0
    for batch in batches:
        x, w = batch if isinstance(batch, tuple) else (batch, None)
        logp = batch_log_prob(x, params, covariance_type) if has_nan(x) else weighted_log_prob(x, a, shift)
        log_p = log_normalize(logp.T)[1]
        total += float(log_p.double().sum() if w is None else weighted_sum(log_p, w))
        n += x.shape[0] if w is None else float(w.double().sum())
    return total, n


def gradient_statistics(summary: Summary, whiten: Float[Tensor, "d d"] | None) -> Float[Tensor, "p k"]:
    r"""Σ_i r_ij E_j[φ(u_i) | x_o] as the (P, K) statistics of gd's score matrix (the rows of
    :func:`~implicit_em.mixture._stats.quadratic_features_t`: u_a u_b for a ≤ b, u, 1), from a summary in the
    coordinates x − shift and the map u = ``whiten`` (x − shift) (None: the identity). E[u] = L E[x − shift] and
    E[u uᵀ] = L E[(x − shift)(x − shift)ᵀ] Lᵀ, so the statistics need nothing but the summary."""
    sx, sxx = summary.sx, summary.sxx
    if whiten is not None:
        lw = whiten.double().to(sx.device)
        sx = sx @ lw.T
        sxx = lw @ sxx @ lw.T
    d = sx.shape[1]
    rows, cols = torch.triu_indices(d, d, device=sx.device)
    return torch.cat([sxx[:, rows, cols].T, sx.T, summary.nk[None]], dim=0)


def fill(x: Float[Tensor, "n d"], values: Float[Tensor, " d"]) -> Float[Tensor, "n d"]:
    """x with every NaN replaced by its column's value (the starts: k-means on the completed sample)."""
    return torch.where(torch.isnan(x), values.to(dtype=x.dtype, device=x.device), x)


def nan_moments(
    x: Float[Tensor, "n d"], weights: Float[Tensor, " n"] | None = None
) -> tuple[Float[Tensor, " d"], Float[Tensor, " d"]]:
    """Per-feature mean and variance (float64) over each column's observed rows (weighted when given): the
    coordinates' shift and scale. A column with nothing observed gets mean 0 and variance 1."""
    xd = x.double()
    seen = ~torch.isnan(xd)
    w = seen.double() if weights is None else seen.double() * weights.double().to(xd.device)[:, None]
    mass = w.sum(0)
    zeroed = torch.where(seen, xd, 0.0)
    mean = torch.where(mass > 0, (w * zeroed).sum(0) / mass.clamp_min(1e-300), 0.0)
    var = (w * torch.where(seen, xd - mean, 0.0) ** 2).sum(0) / mass.clamp_min(1e-300)
    return mean, torch.where(mass > 0, var, 1.0)
