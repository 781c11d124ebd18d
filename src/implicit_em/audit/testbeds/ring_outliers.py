r"""Clusters on a ring with outliers beyond it, and prototypes fitted to them by full-batch gradient descent (read by
``correntropy_robustness``).

Data: K 2-D Gaussian clusters of standard deviation s, centres on a ring of radius R at a random phase, n points
each; outliers (a share of the whole data set) on a half-circle of directions centred on a random direction, at a gap
Δ beyond the ring in units of the kernel width :math:`\sigma = \sqrt2 s` (so :math:`\exp(-\|x-m\|^2/\sigma^2)` is the
clusters' own Gaussian); the starts are K distinct random inliers. Descent: B problems at once, each the loss
:math:`\sum_i w_i\,\ell(x_i) / n_\mathrm{in}` of the points present (weight 0: absent), so without outliers the
trajectory is the same problem minus their terms. A fit is described by its centre error (mean distance of a
prototype to the nearest true centre, units of s), coverage (share of centres with a prototype within s) and
duplicate rate ((K − distinct sites)/K, prototypes closer than s/2 linked into one site).
"""

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from implicit_em.distances import squared_euclidean
from implicit_em.objectives import correntropy, independent_sigmoid_bce, mixture_nll

__all__ = [
    "Data",
    "Descent",
    "Ring",
    "closed_form_weights",
    "closed_mass",
    "descend",
    "describe",
    "draw",
    "fit_all",
    "gradient_mass",
    "outlier_gradients",
    "outliers",
    "per_point",
    "sites",
    "squared",
]

F64 = torch.float64
OBJECTIVES = ("lse", "correntropy", "sigmoid")  # the objectives a fit may descend (per_point)


@dataclass(frozen=True)
class Ring:
    """The data's setting: K clusters on a ring and the outliers' share and arc."""

    clusters: int = 5  # K, also the number of prototypes
    per_cluster: int = 40
    cluster_std: float = 0.5  # s
    ring_radius: float = 3.0  # adjacent centres 3.5 apart (7 s)
    outlier_share: float = 0.2  # of the whole data set: 50 outliers beside 200 inliers
    outlier_arc: float = math.pi  # outlier directions: a half-circle centred on a random direction

    @property
    def kernel_width(self) -> float:
        """σ = √2·s: the kernel exp(−‖x − m‖²/σ²) is a cluster's Gaussian."""
        return math.sqrt(2.0) * self.cluster_std


@dataclass(frozen=True)
class Descent:
    """Full-batch gradient descent: the same for every objective and condition."""

    steps: int = 1000
    learning_rate: float = 0.25


@dataclass(frozen=True)
class Data:
    """One seed's data: inliers (N_in, 2), centres (K, 2), outlier directions (N_out, 2), starts (K, 2)."""

    inliers: torch.Tensor
    centres: torch.Tensor
    directions: torch.Tensor
    starts: torch.Tensor


def draw(ring: Ring, seed: int) -> Data:
    """One seed's data (module docstring), every draw from one ``torch.Generator`` seeded ``seed``."""
    g = torch.Generator().manual_seed(seed)
    k = ring.clusters
    angle = torch.rand(1, generator=g, dtype=F64) * 2 * math.pi / k + torch.arange(k, dtype=F64) * 2 * math.pi / k
    centres = ring.ring_radius * torch.stack([angle.cos(), angle.sin()], -1)  # (K, 2)
    noise = ring.cluster_std * torch.randn(k, ring.per_cluster, 2, generator=g, dtype=F64)
    inliers = (centres[:, None, :] + noise).reshape(-1, 2)  # (N_in, 2)
    n_out = round(ring.outlier_share / (1 - ring.outlier_share) * len(inliers))
    phi = 2 * math.pi * torch.rand(1, generator=g, dtype=F64)
    phi = phi + (torch.rand(n_out, generator=g, dtype=F64) - 0.5) * ring.outlier_arc
    starts = inliers[torch.randperm(len(inliers), generator=g)[:k]].clone()
    return Data(inliers, centres, torch.stack([phi.cos(), phi.sin()], -1), starts)


def outliers(ring: Ring, data: Data, gap: float) -> torch.Tensor:
    """The outliers at ``gap`` (units of σ) beyond the ring, (N_out, 2)."""
    return (ring.ring_radius + gap * ring.kernel_width) * data.directions


def squared(x: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """‖x_i − m_j‖² for B problems at once: x (B, N, 2), prototypes (B, K, 2) -> (B, N, K), the library's
    :func:`~implicit_em.distances.squared_euclidean` mapped over the problems."""
    out: torch.Tensor = torch.vmap(squared_euclidean)(x, prototypes)
    return out


def descend(
    per_point: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    weight: torch.Tensor,
    starts: torch.Tensor,
    descent: Descent,
    n_in: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient descent on B problems at once: x (B, N, 2), point weights (B, N) (0: absent), starts (B, K, 2);
    ``per_point`` maps squared distances (B, N, K) to each point's loss (B, N). Returns the prototypes (B, K, 2) and
    each problem's final gradient norm (B,)."""
    m = starts.clone().requires_grad_(True)
    grad = torch.zeros_like(m)
    for _ in range(descent.steps):
        loss = (per_point(squared(x, m)) * weight).sum() / n_in
        (grad,) = torch.autograd.grad(loss, m)
        with torch.no_grad():
            m -= descent.learning_rate * grad
    return m.detach(), grad.norm(dim=(-2, -1))


def sites(prototypes: torch.Tensor, radius: float) -> int:
    """The number of distinct sites of prototypes (K, 2): those closer than ``radius`` (single linkage) are one."""
    k = len(prototypes)
    near = torch.cdist(prototypes, prototypes) < radius
    label = list(range(k))
    for i in range(k):
        for j in range(k):
            if near[i, j] and label[j] != label[i]:
                old, new = label[j], label[i]
                label = [new if v == old else v for v in label]
    return len(set(label))


def describe(prototypes: torch.Tensor, centres: torch.Tensor, cluster_std: float) -> dict[str, float]:
    """Centre error (units of s), coverage and duplicate rate of prototypes (K, 2) against centres (K, 2)."""
    s = cluster_std
    dist = torch.cdist(prototypes, centres)  # (K, K)
    k = len(prototypes)
    return {
        "centre error": float(dist.min(1).values.mean()) / s,
        "coverage": float((dist.min(0).values < s).to(F64).mean()),
        "duplicates": (k - sites(prototypes, 0.5 * s)) / k,
    }


def per_point(objective: str, sq: torch.Tensor, sigma: float, bias: float) -> torch.Tensor:
    """The loss of each point from its squared distances ‖x − m_j‖², (..., K) -> (...)."""
    if objective == "lse":
        return mixture_nll(sq / sigma**2)
    if objective == "correntropy":
        # d = ‖x − m‖; correntropy depends on d² only, so a clamp at 1e-300 (gradient 0 there, as at d = 0) is exact
        return correntropy(sq.clamp_min(1e-300).sqrt(), sigma)
    if objective == "sigmoid":
        return independent_sigmoid_bce(bias - sq / sigma**2, torch.ones_like(sq))
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


def closed_form_weights(
    objective: str, sq: torch.Tensor, sigma: float, bias: float, planted: bool = False
) -> torch.Tensor:
    """w_j in ∂ℓ/∂m_j = w_j 2(m_j − x)/σ², (..., K); ``planted``: the control's wrong form."""
    u = sq / sigma**2
    if objective == "lse":
        return torch.ones_like(u) if planted else torch.softmax(-u, -1)  # planted: no responsibilities
    if objective == "correntropy":
        return torch.exp(-sq.sqrt() / sigma**2) if planted else torch.exp(-u)  # planted: exp(−d/σ²)
    return torch.sigmoid(bias - u) if planted else torch.sigmoid(u - bias)


def gradient_mass(
    objective: str, prototypes: torch.Tensor, points: torch.Tensor, sigma: float, bias: float
) -> dict[str, Any]:
    """Per point (P, 2): Σ_j ‖∂ℓ/∂m_j‖ by autograd (a copy of the prototypes (K, 2) per point) and by the closed
    form, and the relative miss of the closed form and of the planted one."""
    copies = prototypes.expand(len(points), -1, -1).clone().requires_grad_(True)  # (P, K, 2)
    sq = (points[:, None, :] - copies).square().sum(-1)  # (P, K)
    (auto,) = torch.autograd.grad(per_point(objective, sq, sigma, bias).sum(), copies)
    sq = sq.detach()
    direction = 2 * (prototypes[None] - points[:, None, :]) / sigma**2  # (P, K, 2)
    closed = closed_form_weights(objective, sq, sigma, bias)[..., None] * direction
    planted = closed_form_weights(objective, sq, sigma, bias, planted=True)[..., None] * direction
    scale = float(closed.abs().amax())
    return {
        "mass": auto.norm(dim=-1).sum(-1),  # (P,)
        "closed mass": closed.norm(dim=-1).sum(-1),
        "closed rel": float((auto - closed).abs().amax()) / scale if scale > 0 else float((auto != 0).any()),
        "planted rel": float((auto - planted).abs().amax()) / scale if scale > 0 else math.inf,
    }


def closed_mass(
    objective: str, prototypes: torch.Tensor, points: torch.Tensor, sigma: float, bias: float
) -> torch.Tensor:
    """Σ_j ‖∂ℓ/∂m_j‖ per point (P,) from the closed form alone."""
    sq = (points[:, None, :] - prototypes[None]).square().sum(-1)  # (P, K)
    size = 2 * (points[:, None, :] - prototypes[None]).norm(dim=-1) / sigma**2  # (P, K)
    return (closed_form_weights(objective, sq, sigma, bias) * size).sum(-1)


def fit_all(
    ring: Ring, datas: list[Data], gaps: tuple[float, ...], descent: Descent, bias: float
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Every objective's fit per (seed, condition): prototypes (seeds, 1 + gaps, K, 2), condition 0 without
    outliers; and the largest final gradient norm over the fits."""
    conditions: list[float | None] = [None, *gaps]  # None: no outliers
    xs, ws, starts = [], [], []  # one problem per (seed, condition): inliers, then outliers (weight 0 when absent)
    for data in datas:
        n_in, n_out = len(data.inliers), len(data.directions)
        for gap in conditions:
            xs.append(torch.cat([data.inliers, outliers(ring, data, 1.0 if gap is None else gap)]))
            ws.append(torch.cat([torch.ones(n_in, dtype=F64), torch.full((n_out,), float(gap is not None), dtype=F64)]))
            starts.append(data.starts)
    x, w, m0 = torch.stack(xs), torch.stack(ws), torch.stack(starts)
    n_in = ring.clusters * ring.per_cluster
    fits: dict[str, torch.Tensor] = {}
    grad_norm: dict[str, float] = {}
    for objective in OBJECTIVES:
        loss = functools.partial(per_point, objective, sigma=ring.kernel_width, bias=bias)
        prototypes, norms = descend(loss, x, w, m0, descent, n_in)
        fits[objective] = prototypes.reshape(len(datas), len(conditions), ring.clusters, 2)
        grad_norm[objective] = float(norms.max())
    return fits, grad_norm


def outlier_gradients(
    ring: Ring, datas: list[Data], fits: dict[str, torch.Tensor], gaps: tuple[float, ...], bias: float
) -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]], dict[str, float], dict[str, float]]:
    """At each objective's fit without outliers, for the outliers of every gap: per gap and seed the median
    per-outlier gradient mass and the outliers' share of all gradient mass; the closed forms' largest miss and the
    planted forms' smallest, per objective."""
    shape = (ring.kernel_width, bias)
    mass: dict[str, list[list[float]]] = {o: [] for o in OBJECTIVES}
    share: dict[str, list[list[float]]] = {o: [] for o in OBJECTIVES}
    closed_rel = dict.fromkeys(OBJECTIVES, 0.0)
    planted_rel = dict.fromkeys(OBJECTIVES, math.inf)
    for objective in OBJECTIVES:
        for gap in gaps:
            per_seed_mass, per_seed_share = [], []
            for i, data in enumerate(datas):
                m = fits[objective][i, 0]
                out = gradient_mass(objective, m, outliers(ring, data, gap), *shape)
                inl = gradient_mass(objective, m, data.inliers, *shape)
                closed_rel[objective] = max(closed_rel[objective], out["closed rel"], inl["closed rel"])
                planted_rel[objective] = min(planted_rel[objective], out["planted rel"])
                per_seed_mass.append(float(out["mass"].median()))
                total_out = float(out["mass"].sum())
                per_seed_share.append(total_out / (total_out + float(inl["mass"].sum())))
            mass[objective].append(per_seed_mass)
            share[objective].append(per_seed_share)
    return mass, share, closed_rel, planted_rel
