r"""Sufficient statistics of a Gaussian mixture on quadratic features: the fast E- and M-step engine.

All K full-covariance log-densities are one matrix product. With the quadratic features

.. math::  \phi(x) = [x_a x_b \text{ for } a \le b,\; x,\; 1] \in R^{P},\quad P = D(D+1)/2 + D + 1,

.. math::  \log \pi_j + \log N(x; \mu_j, \Sigma_j) = \phi(x)^\top A_{:, j}

for a parameter matrix A (P, K) built once per step from (π, μ, Λ = Σ⁻¹). The M-step statistics are
S = Rᵀφ (K, P) on the same features: their columns are N_j = Σ_i r_ij, Σ_i r_ij x_i and the upper triangle of
Σ_i r_ij x_i x_iᵀ. Data are shifted by a fixed vector (their mean) before φ so that float32 keeps its digits;
the statistics are accumulated in float64.

``diag`` and ``spherical`` need no cross products: their score matrix and statistics use the *diagonal* features
φ_d(x) = [x², x, 1] ∈ R^{2D+1} (:func:`diagonal_features_t`), whose statistics hold the diagonal of Σ r x xᵀ only
(all their M-step reads). Which features a score matrix is for is read from its rows (:func:`is_diagonal`): 2D + 1
rows are the diagonal features (at D = 1 the two layouts are the same three columns in the same order).

Parameters are kept in scikit-learn's shapes: weights (K,), means (K, D), covariances and precisions_cholesky
(K, D, D) full, (D, D) tied, (K, D) diag, (K,) spherical (paper §3.4; W_j = precisions_cholesky_[j]ᵀ). The shapes
and the conversions between covariances, precisions and their Cholesky factors are :mod:`implicit_em.gaussian`.
Signatures name the shapes: N samples, D features, K components, P = D(D+1)/2 + D + 1 quadratic features.
"""

import math
import warnings
from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em import gaussian


class MixtureParams(NamedTuple):
    """Gaussian mixture parameters in scikit-learn's shapes (see module docstring)."""

    weights: Float[Tensor, " k"]
    means: Float[Tensor, "k d"]
    covariances: gaussian.Shaped
    precisions_cholesky: gaussian.Shaped


class Summary(NamedTuple):
    """Sufficient statistics of a batch in shifted coordinates x - shift, float64.

    n: number of samples (0-dim); nk (K,) = Σ r; sx (K, D) = Σ r x; sxx (K, D, D) = Σ r x xᵀ;
    loglik: Σ_i log p(x_i) under the parameters used for the E-step (0-dim; 0 when resp were given).
    """

    n: Float[Tensor, ""]
    nk: Float[Tensor, " k"]
    sx: Float[Tensor, "k d"]
    sxx: Float[Tensor, "k d d"]
    loglik: Float[Tensor, ""]

    def __add__(self, other: "Summary") -> "Summary":  # type: ignore[override]
        return Summary(*(a + b for a, b in zip(self, other, strict=True)))

    def scaled(self, c: float) -> "Summary":
        """All statistics times c (online EM's running average)."""
        return Summary(*(a * c for a in self))


def _triu(n_features: int, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    rows, cols = torch.triu_indices(n_features, n_features, device=device)
    return rows, cols


def quadratic_features_t(x: Float[Tensor, "n d"]) -> Float[Tensor, "p n"]:
    """φ(x)ᵀ, shape (P, N) with P = D(D+1)/2 + D + 1: rows x_a x_b (a ≤ b, row-major upper triangle), x, 1.

    Built transposed from D broadcast products, each writing contiguous rows of one buffer: on CPU this is
    several times faster than writing column blocks of an (N, P) buffer, and far faster than an index gather.
    dtype and device follow x.
    """
    n, d = x.shape
    xt = x.T.contiguous()  # (D, N)
    out = torch.empty(d * (d + 1) // 2 + d + 1, n, dtype=x.dtype, device=x.device)
    row = 0
    for a in range(d):
        torch.mul(xt[a:], xt[a], out=out[row : row + d - a])  # x_a x_b for b ≥ a
        row += d - a
    out[row : row + d] = xt
    out[-1] = 1
    return out


def diagonal_features_t(x: Float[Tensor, "n d"]) -> Float[Tensor, "p n"]:
    """φ_d(x)ᵀ, shape (2D + 1, N): rows x_a² (a < D), x, 1 (the features of ``diag`` and ``spherical``)."""
    n, d = x.shape
    out = torch.empty(2 * d + 1, n, dtype=x.dtype, device=x.device)
    out[d : 2 * d] = x.T
    torch.mul(out[d : 2 * d], out[d : 2 * d], out=out[:d])
    out[-1] = 1
    return out


def is_diagonal(n_params: int, n_features: int) -> bool:
    """Whether a score matrix or statistics of ``n_params`` columns is on the diagonal features (2D + 1 of them;
    at D = 1 the layouts coincide and the quadratic one is named)."""
    return n_features > 1 and n_params == 2 * n_features + 1


def features_t(x: Float[Tensor, "n d"], n_params: int) -> Float[Tensor, "p n"]:
    """The features a score matrix of ``n_params`` rows is for: diagonal or quadratic (:func:`is_diagonal`)."""
    if is_diagonal(n_params, x.shape[1]):
        return diagonal_features_t(x)
    return quadratic_features_t(x)


def quadratic_features(x: Float[Tensor, "n d"]) -> Float[Tensor, "n p"]:
    """φ(x) = [x_a x_b (a ≤ b), x, 1], shape (N, P) (a transposed view of :func:`quadratic_features_t`)."""
    return quadratic_features_t(x).T


def score_matrix(params: MixtureParams, covariance_type: str, shift: Float[Tensor, " d"]) -> Float[Tensor, "p k"]:
    r"""A (P, K) with φ(x - shift)ᵀ A_{:,j} = log π_j + log N(x; μ_j, Σ_j): on the quadratic features for ``full``
    and ``tied``, on the diagonal ones (P = 2D + 1) for ``diag`` and ``spherical``.

    With m = μ - shift: log N = -½ xᵀΛx + xᵀΛm - ½ mᵀΛm + log|det W| - (D/2) log 2π.
    """
    weights, means, _, prec_chol = (t.double() for t in params)  # built in float64, cast by the caller
    k, d = means.shape
    log_det = gaussian.log_det(prec_chol, covariance_type, d, triangular=True)
    offsets = torch.log(weights) + log_det - 0.5 * d * math.log(2 * math.pi)
    if covariance_type in ("diag", "spherical") and d > 1:
        lam = prec_chol**2 if covariance_type == "diag" else (prec_chol**2)[:, None].expand(k, d)  # (K, D)
        return diagonal_score_matrix(lam, means - shift.double(), offsets)
    lam = gaussian.full_precisions(prec_chol, covariance_type, k, d)  # (K, D, D)
    return quadratic_score_matrix(lam, means - shift.double(), offsets)


def diagonal_score_matrix(
    precisions: Float[Tensor, "k d"], means: Float[Tensor, "k d"], offsets: Float[Tensor, " k"]
) -> Float[Tensor, "p k"]:
    r"""A (2D + 1, K) with φ_d(x)ᵀ A_{:,j} = offsets_j - ½ Σ_a λ_ja (x_a - m_ja)², for diagonal precisions λ (K, D)."""
    lin = precisions * means  # (K, D)
    const = offsets - 0.5 * (lin * means).sum(-1)
    return torch.cat([-0.5 * precisions, lin, const[:, None]], dim=1).T.contiguous()  # (2D + 1, K)


def quadratic_score_matrix(
    precisions: Float[Tensor, "k d d"], means: Float[Tensor, "k d"], offsets: Float[Tensor, " k"]
) -> Float[Tensor, "p k"]:
    r"""A (P, K) with φ(x)ᵀ A_{:,j} = offsets_j - ½ (x - m_j)ᵀ Λ_j (x - m_j), for Λ (K, D, D), m (K, D), offsets (K,).

    Differentiable in all three (the gradient fitter backpropagates through it). An off-diagonal pair
    x_a x_b appears twice in xᵀΛx, hence the coefficient -Λ_ab for a < b and -½Λ_aa on the diagonal.
    """
    d = means.shape[1]
    rows, cols = _triu(d, means.device)
    quad = -precisions[:, rows, cols] * torch.where(rows == cols, 0.5, 1.0).to(precisions.dtype)  # (K, D(D+1)/2)
    lin = torch.einsum("kab,kb->ka", precisions, means)  # (K, D)
    const = offsets - 0.5 * (lin * means).sum(-1)
    return torch.cat([quad, lin, const[:, None]], dim=1).T.contiguous()  # (P, K)


def weighted_log_prob(
    x: Float[Tensor, "n d"], a: Float[Tensor, "p k"], shift: Float[Tensor, " d"]
) -> Float[Tensor, "n k"]:
    """log π_j + log N(x_i; μ_j, Σ_j), shape (N, K), in the dtype of ``a`` (cast x and shift to it)."""
    return (a.T @ features_t(x.to(a.dtype) - shift.to(a.dtype), a.shape[0])).T


def _unpack(
    s: Float[Tensor, "k p"], n_features: int
) -> tuple[Float[Tensor, " k"], Float[Tensor, "k d"], Float[Tensor, "k d d"]]:
    """Split Rᵀφ (K, P) into nk (K,), Σ r x (K, D), Σ r x xᵀ (K, D, D) (on the diagonal features: its diagonal, the
    rest zero)."""
    k = s.shape[0]
    if is_diagonal(s.shape[1], n_features):
        return s[:, -1], s[:, n_features : 2 * n_features], torch.diag_embed(s[:, :n_features])
    rows, cols = _triu(n_features, s.device)
    q = rows.numel()
    sxx = torch.zeros(k, n_features, n_features, dtype=s.dtype, device=s.device)
    sxx[:, rows, cols] = s[:, :q]
    sxx[:, cols, rows] = s[:, :q]
    return s[:, -1], s[:, q : q + n_features], sxx


def log_normalize(logp: Float[Tensor, "k n"]) -> tuple[Float[Tensor, "k n"], Float[Tensor, " n"]]:
    """Responsibilities and log-normaliser of log-joint scores (K, N) along dim 0: (softmax, logsumexp).

    Log-ratios below a floor (0.6·log of the dtype's smallest normal: -52 in float32, -425 in float64) are
    raised to it, so that no responsibility, and no product of one with a feature in the statistics matmul, is
    a subnormal number: on x86 CPUs each subnormal operand takes a microcode assist, and far-away components
    made the E-step 6× slower (measured at N = 1e6, D = K = 16). The change to a responsibility is at most
    e^-52 ≈ 3e-23, far below float32 round-off; the log-normaliser changes by at most K·e^-52 relative.
    A column that is -inf throughout (zero density under every component) gets log p = -inf and uniform
    responsibilities instead of NaN.
    """
    floor = 0.6 * math.log(torch.finfo(logp.dtype).tiny)
    top = logp.amax(0)
    ratios = (logp - torch.where(torch.isfinite(top), top, 0.0)).clamp_(min=floor).exp_()  # -inf column: uniform
    total = ratios.sum(0)
    return ratios.div_(total), total.log_().add_(top)


def summarize(
    x: Float[Tensor, "n d"],
    a: Float[Tensor, "p k"],
    shift: Float[Tensor, " d"],
    weights: Float[Tensor, " n"] | None = None,
) -> tuple[Summary, Float[Tensor, " n"]]:
    """E-step and statistics for a chunk: returns (Summary in float64, log p(x_i) per row (N,)).

    ``weights`` (N,): each row's responsibilities and log-likelihood count that many times (n = Σ w)."""
    phi_t = features_t(x.to(a.dtype) - shift.to(a.dtype), a.shape[0])  # (P, N)
    resp, log_norm = log_normalize(a.T @ phi_t)  # (K, N), (N,)
    if weights is None:
        nk, sx, sxx = _unpack((resp @ phi_t.T).double(), x.shape[1])
        n = torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)
        return Summary(n, nk, sx, sxx, log_norm.double().sum()), log_norm
    nk, sx, sxx = _unpack(((resp * weights.to(resp.dtype)) @ phi_t.T).double(), x.shape[1])
    return Summary(weights.double().sum(), nk, sx, sxx, weighted_sum(log_norm, weights)), log_norm


def weighted_sum(values: Float[Tensor, " n"], weights: Float[Tensor, " n"]) -> Float[Tensor, ""]:
    """Σ w_i v_i in float64, a row of weight zero adding nothing even where v_i is ±inf (a removed row)."""
    w = weights.double()
    return torch.where(w > 0, w * values.double(), 0.0).sum()


def summarize_resp(
    x: Float[Tensor, "n d"],
    resp: Float[Tensor, "n k"],
    shift: Float[Tensor, " d"],
    weights: Float[Tensor, " n"] | None = None,
) -> Summary:
    """Statistics for given responsibilities (N, K) (initialisation from labels), float64; ``weights`` as in
    :func:`summarize`."""
    phi_t = quadratic_features_t(x.to(resp.dtype) - shift.to(resp.dtype))  # (P, N)
    if weights is not None:
        resp = resp * weights.to(resp.dtype)[:, None]
    nk, sx, sxx = _unpack((phi_t @ resp).T.double(), x.shape[1])
    n = (
        torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)
        if weights is None
        else weights.double().sum()
    )
    return Summary(n, nk, sx, sxx, torch.zeros((), dtype=torch.float64, device=x.device))


def expected_summary(params: MixtureParams, covariance_type: str, shift: Float[Tensor, " d"]) -> Summary:
    """The per-sample statistics the parameters imply: π_j, π_j m_j, π_j (Σ_j + m_j m_jᵀ) (online EM's s_0)."""
    w, mu, cov, _ = (t.double() for t in params)
    k, d = mu.shape
    m = mu - shift.double()
    full = gaussian.full_matrices(cov, covariance_type, k, d)  # (K, D, D)
    sxx = w[:, None, None] * (full + m[:, :, None] * m[:, None, :])
    one = torch.ones((), dtype=torch.float64, device=w.device)
    return Summary(one, w.clone(), w[:, None] * m, sxx, torch.zeros_like(one))


def covariances_from_summary(
    summary: Summary,
    means_shifted: Float[Tensor, "k d"],
    nk: Float[Tensor, " k"],
    reg_covar: float,
    covariance_type: str,
) -> gaussian.Shaped:
    """The M-step covariances of sklearn's ``_estimate_gaussian_covariances_*`` from the statistics."""
    d = means_shifted.shape[1]
    outer = means_shifted[:, :, None] * means_shifted[:, None, :]  # (K, D, D)
    eye = torch.eye(d, dtype=outer.dtype, device=outer.device)
    if covariance_type == "tied":
        scatter = summary.sxx.sum(0) - (nk[:, None, None] * outer).sum(0)
        return scatter / nk.sum() + reg_covar * eye
    full = summary.sxx / nk[:, None, None] - outer
    if covariance_type == "full":
        return full + reg_covar * eye
    diag = torch.diagonal(full, dim1=-2, dim2=-1) + reg_covar
    return diag if covariance_type == "diag" else diag.mean(1)


def from_summaries(
    summary: Summary, shift: Float[Tensor, " d"], reg_covar: float, covariance_type: str, dtype: torch.dtype
) -> MixtureParams:
    """M-step (paper §2.3) from accumulated statistics; mirrors sklearn's ``_m_step`` (nk + 10·eps)."""
    nk = summary.nk + 10 * torch.finfo(torch.float64).eps
    means_shifted = summary.sx / nk[:, None]
    cov = covariances_from_summary(summary, means_shifted, nk, reg_covar, covariance_type)
    weights = nk / nk.sum()
    means = means_shifted + shift.double()
    cov = floor_covariances(cov, covariance_type, reg_covar)
    prec_chol = gaussian.precisions_cholesky(cov, covariance_type, on_singular="ridge")
    return MixtureParams(weights.to(dtype), means.to(dtype), cov.to(dtype), prec_chol.to(dtype))


def floor_covariances(cov: gaussian.Shaped, covariance_type: str, reg_covar: float) -> gaussian.Shaped:
    """Keep every variance at or above reg_covar, with a warning when one fell below reg_covar / 2 (round-off
    in float32 statistics of a collapsed component) or is not finite (then it falls back to reg_covar·I)."""
    if covariance_type in ("full", "tied"):
        diag = torch.diagonal(cov, dim1=-2, dim2=-1)
        bad = ~torch.isfinite(cov).all() | (diag < 0.5 * reg_covar).any()
    else:
        bad = ~torch.isfinite(cov).all() | (cov < 0.5 * reg_covar).any()
    if not bool(bad):
        return cov
    warnings.warn(
        f"a component's covariance fell below reg_covar={reg_covar:g} (degenerate or empty component); "
        "flooring it at reg_covar",
        RuntimeWarning,
        stacklevel=3,
    )
    cov = torch.nan_to_num(cov, nan=reg_covar, posinf=reg_covar, neginf=reg_covar)
    if covariance_type in ("full", "tied"):
        diag = torch.diagonal(cov, dim1=-2, dim2=-1)
        return cov + torch.diag_embed((reg_covar - diag).clamp(min=0))
    return cov.clamp(min=reg_covar)
