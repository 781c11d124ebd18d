r"""Geometry read off a trained model: the value-manifold signature and principal angles between subspaces.

Shared by ``advantage_ablation``, ``sticky_manifold`` and ``two_timescale``.

- **Value-manifold signature** (Agarwal, Dalal & Misra, arXiv 2512.22471 and 2512.23752): PCA over the final-layer
  residuals (or value vectors) at the value positions; the share of variance on the first principal component
  (PC1), on the first two, the participation ratio :math:`(\sum_k \lambda_k)^2 / \sum_k \lambda_k^2`, and the
  Spearman rank correlation of the PC1 coordinate with the exact Bayes entropy at the same positions. The sign
  of a principal component is arbitrary, so the signature reports :math:`|\rho|`.
- **Principal angles** between the column spans of two matrices (Björck & Golub 1973): orthonormal bases
  :math:`Q_A, Q_B` by QR, then :math:`\cos\theta_i = \sigma_i(Q_A^\top Q_B)`. For a uniformly random
  p-dimensional subspace against a fixed q-dimensional one in :math:`\mathbb{R}^d`,
  :math:`\mathbb{E}\,\mathrm{tr}(P_A P_B) = pq/d`, so the mean of the :math:`\min(p, q)` squared cosines has
  expectation :math:`\max(p, q)/d` (:func:`random_mean_cos2`).

Everything is computed in float64.
"""

import torch
from scipy.stats import spearmanr
from torch import Tensor

__all__ = [
    "MARGIN_FRACTION",
    "PLANTED_TOL_FLOAT32",
    "PLANTED_TOL_FLOAT64",
    "QUERY_EVERY",
    "SIGMAS",
    "mean_cos2",
    "pc_shares",
    "principal_angles",
    "random_mean_cos2",
    "value_manifold_signature",
]

# the read-out's settings and bars, declared with sticky_manifold and shared by every claim that reads it
QUERY_EVERY = 8  # context read-out queries t = 7, 15, 23, 31 of T = 32
SIGMAS = 2.0  # the review: "improve over a random-initialization baseline by >2σ" (paired σ)
MARGIN_FRACTION = 0.5  # aligned: at least half way from chance to the mean span (1)
PLANTED_TOL_FLOAT32 = 1e-6  # planted float32 models score 1 or 0 up to this (float32 round-off)
PLANTED_TOL_FLOAT64 = 1e-9  # float64 planted checks (one-head heads, the Bayes filter's read-out)

F64 = torch.float64


def pc_shares(features: Tensor, standardize: bool = False) -> Tensor:
    r"""Explained-variance ratios of the centred ``features`` (n, d), largest first (float64, sums to 1).

    With ``standardize`` every column is divided by its standard deviation first (constant columns dropped), as
    the companion paper's "PCA over standardized last-layer value vectors" (§C)."""
    x = _matrix(features, "features")
    x = x - x.mean(dim=0)
    if standardize:
        sd = x.std(dim=0)
        keep = sd > 1e-12 * max(float(sd.max()), 1e-300)
        x = x[:, keep] / sd[keep]
    eig = torch.linalg.svdvals(x) ** 2
    total = eig.sum()
    if not total > 0:
        raise ValueError("features have zero variance: no principal components")
    return eig / total


def value_manifold_signature(features: Tensor, entropy: Tensor, standardize: bool = False) -> dict[str, float]:
    """PC1 share, PC1+PC2 share, participation ratio and |Spearman ρ| of the PC1 coordinate with ``entropy``.

    Args:
        features: (n, d) residuals or value vectors, one row per value position.
        entropy: (n,) the exact Bayes entropy at the same positions.
        standardize: standardise the columns before the PCA (see :func:`pc_shares`).
    """
    x = _matrix(features, "features")
    h = torch.as_tensor(entropy).detach().to(F64).reshape(-1)
    if h.shape[0] != x.shape[0]:
        raise ValueError(f"entropy has {h.shape[0]} entries for {x.shape[0]} feature rows")
    shares = pc_shares(x, standardize)
    xc = x - x.mean(dim=0)
    if standardize:
        sd = xc.std(dim=0)
        keep = sd > 1e-12 * max(float(sd.max()), 1e-300)
        xc = xc[:, keep] / sd[keep]
    _, _, vh = torch.linalg.svd(xc, full_matrices=False)
    pc1 = (xc @ vh[0]).numpy()
    rho = float(spearmanr(pc1, h.numpy()).statistic) if float(h.std()) > 0 else float("nan")
    return {
        "pc1": float(shares[0]),
        "pc12": float(shares[:2].sum()),
        "participation_ratio": float(1.0 / (shares**2).sum()),
        "spearman_abs": abs(rho),
    }


def principal_angles(a: Tensor, b: Tensor) -> Tensor:
    r"""Principal angles (radians, ascending) between the column spans of ``a`` (d, p) and ``b`` (d, q).

    :math:`\min(p, q)` angles; both matrices must have full column rank."""
    qa, qb = _basis(a, "a"), _basis(b, "b")
    if qa.shape[0] != qb.shape[0]:
        raise ValueError(f"a and b live in different spaces: {qa.shape[0]} and {qb.shape[0]} rows")
    cos = torch.linalg.svdvals(qa.T @ qb).clamp(0.0, 1.0)
    return torch.arccos(cos)


def mean_cos2(a: Tensor, b: Tensor) -> float:
    """Mean squared cosine of the principal angles between the column spans of ``a`` and ``b`` (1: nested)."""
    return float((torch.cos(principal_angles(a, b)) ** 2).mean())


def random_mean_cos2(d: int, p: int, q: int) -> float:
    """Expected :func:`mean_cos2` of a uniformly random p-dimensional subspace against a fixed q-dimensional one
    in R^d: E tr(P_A P_B) / min(p, q) = pq / (d min(p, q)) = max(p, q) / d."""
    if not 0 < p <= d or not 0 < q <= d:
        raise ValueError(f"subspace dimensions must lie in 1..d: p={p}, q={q}, d={d}")
    return max(p, q) / d


def _matrix(x: Tensor, name: str) -> Tensor:
    t = torch.as_tensor(x).detach().to(F64)
    if t.ndim != 2 or t.shape[0] < 2:
        raise ValueError(f"{name} must be a 2-D (n >= 2, d) matrix, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return t


def _basis(x: Tensor, name: str) -> Tensor:
    t = torch.as_tensor(x).detach().to(F64)
    if t.ndim != 2 or t.shape[1] > t.shape[0]:
        raise ValueError(f"{name} must be a (d, p) matrix with p <= d, got shape {tuple(t.shape)}")
    q, r = torch.linalg.qr(t)
    diag = r.diagonal().abs()
    if float(diag.min()) <= 1e-10 * max(float(diag.max()), 1e-300):
        raise ValueError(f"{name} does not have full column rank")
    return q
