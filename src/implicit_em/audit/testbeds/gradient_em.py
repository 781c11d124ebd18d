r"""A gradient step against EM's M-step, in float64: the review's 1-D two-component test, and Xu & Jordan's (1996)
block preconditioner along an EM run on a full-covariance mixture.

1-D: known σ, no mixing weights, :math:`L = -\sum_i \log\sum_j \exp(-(x_i - \mu_j)^2/2\sigma^2)`; EM's update
:math:`\mu_j^{EM} = \sum_i r_{ij} x_i / S_j` with :math:`S_j = \sum_i r_{ij}`; the gradient step
:math:`\mu - \eta\,\partial L/\partial\mu` reproduces it with one η only when :math:`S_1 = S_2`.

Xu & Jordan: at θ = (α, m, Σ), with :math:`N_j = \sum_t h_j(t)`, EM's update is θ + P(θ)∇ℓ(θ) block by block:
:math:`P_A = (1/N)[\mathrm{diag}(\alpha) - \alpha\alpha^\top]`, :math:`\Sigma_j/N_j` for :math:`m_j`, and
:math:`\Sigma_j + (2/N_j)\Sigma_j G_j \Sigma_j` (G_j = ∂ℓ/∂Σ_j) for the scatter about the *old* means.
"""

import math
from typing import Any

import torch
from torch import Tensor

from implicit_em.objectives import mixture_nll

__all__ = [
    "BLOCKS",
    "best_scalar_rel",
    "best_single_error",
    "em_step_1d",
    "em_update",
    "gmm_loglik",
    "gradient_1d",
    "log_gauss",
    "loss_1d",
    "paths",
    "planted_mixture",
    "preconditioned",
    "rel",
    "single_step",
    "sweep_data",
    "xu_jordan_run",
]

F64 = torch.float64
BLOCKS = ("mixing weights", "means", "covariances (old means)", "covariances (usual EM)")


# --- the 1-D test -------------------------------------------------------------------------------------------------


def sweep_data(u: Tensor, n: int, w: float) -> Tensor:
    """n₁ = round(w·n) points −2 + u_i and n − n₁ points 2 − u_i from the same draws u (N,) (mirror images)."""
    n1 = round(w * n)
    if not n // 2 <= n1 <= n:
        raise ValueError(f"weight {w} gives n₁ = {n1} of n = {n}; need n/2 ≤ n₁ ≤ n")
    return torch.cat([-2.0 + u[:n1], 2.0 - u[: n - n1]])


def loss_1d(x: Tensor, mu: Tensor, sigma: float) -> Tensor:
    """L = −Σ_i log Σ_j exp(−(x_i − μ_j)²/2σ²) for x (N,), μ (K,) (the review's objective: no weights, no
    normaliser)."""
    d = (x[:, None] - mu[None, :]) ** 2 / (2 * sigma**2)
    return mixture_nll(d).sum()


def em_step_1d(x: Tensor, mu: Tensor, sigma: float) -> tuple[Tensor, Tensor]:
    """EM's update of the means (K,) and the soft counts S_j = Σ_i r_ij (K,) at ``mu``."""
    r = torch.softmax(-((x[:, None] - mu[None, :]) ** 2) / (2 * sigma**2), dim=1)
    s = r.sum(0)
    return (r * x[:, None]).sum(0) / s, s


def gradient_1d(x: Tensor, mu: Tensor, sigma: float) -> Tensor:
    """∂L/∂μ (K,) by autograd."""
    m = mu.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_1d(x, m, sigma), m)
    return grad


def best_single_error(s: Tensor, delta: Tensor) -> Tensor:
    """Relative error of the best single η, |sin∠(g, δ)| with g_j ∝ S_j δ_j: for two components
    |δ₁δ₂(S₁ − S₂)| / (‖δ‖ ‖(S₁δ₁, S₂δ₂)‖), zero iff S₁ = S₂ (or a component does not move)."""
    g = s * delta
    return (delta[0] * delta[1] * (s[0] - s[1])).abs() / (delta.norm() * g.norm())


def single_step(x: Tensor, mu: Tensor, sigma: float) -> dict[str, Any]:
    """One step from ``mu``: EM's update, the best single η for the gradient step (least squares over both
    components) with its relative error, and the per-component steps σ²/S_j (Xu–Jordan's Σ_j/N_j in 1-D)."""
    mu_em, s = em_step_1d(x, mu, sigma)
    ascent = -gradient_1d(x, mu, sigma)
    target = mu_em - mu
    eta = float(ascent @ target / (ascent @ ascent))
    per = sigma**2 / s
    return {
        "mu_em": mu_em,
        "S": s,
        "ascent": ascent,
        "eta_best": eta,
        "best_rel": float((mu + eta * ascent - mu_em).norm() / target.norm()),
        "per_rel": float((mu + per * ascent - mu_em).norm() / target.norm()),
        "closed_form": float(best_single_error(s, target)),
    }


def paths(x: Tensor, mu0: Tensor, eta: float, iterations: int, sigma: float) -> dict[str, Any]:
    """EM and gradient descent with one constant η from ``mu0``: log-likelihood per sample along both, the
    largest gap between the two paths, and the iterations each needs to come within 1e-8 nats/sample of the better
    end point (−1: not)."""
    n = x.shape[0]
    em, gd = [float(-loss_1d(x, mu0, sigma)) / n], [float(-loss_1d(x, mu0, sigma)) / n]
    mu_e, mu_g, gap = mu0.clone(), mu0.clone(), 0.0
    for _ in range(iterations):
        mu_e = em_step_1d(x, mu_e, sigma)[0]
        mu_g = mu_g - eta * gradient_1d(x, mu_g, sigma)
        gap = max(gap, float((mu_g - mu_e).abs().max()))
        em.append(float(-loss_1d(x, mu_e, sigma)) / n)
        gd.append(float(-loss_1d(x, mu_g, sigma)) / n)
    best = max(max(em), max(gd))

    def reach(path: list[float]) -> int:
        return next((i for i, v in enumerate(path) if best - v <= 1e-8), -1)

    return {"em": em, "gd": gd, "best": best, "gap": gap, "em_iters": reach(em), "gd_iters": reach(gd)}


# --- Xu & Jordan along an EM run ------------------------------------------------------------------------------------


def planted_mixture(seed: int, n: int) -> Tensor:
    """n samples (N, 3) of a full-covariance mixture, D = 3, K = 4, weights 0.4/0.3/0.2/0.1, overlapping."""
    g = torch.Generator().manual_seed(seed)
    k, d = 4, 3
    means = 1.5 * torch.randn(k, d, generator=g, dtype=F64)
    a = torch.randn(k, d, d, generator=g, dtype=F64) / math.sqrt(d)
    chol = torch.linalg.cholesky(a @ a.mT + 0.3 * torch.eye(d, dtype=F64))
    z = torch.multinomial(torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64), n, replacement=True, generator=g)
    return means[z] + (chol[z] @ torch.randn(n, d, 1, generator=g, dtype=F64)).squeeze(-1)


def gmm_loglik(x: Tensor, alpha: Tensor, means: Tensor, covs: Tensor) -> Tensor:
    r"""ℓ = Σ_t log Σ_j α_j N(x_t; m_j, Σ_j), with α and each Σ_j free (no simplex, no symmetry constraint), so
    autograd gives ∂ℓ/∂α_j = N_j/α_j and G_j = ½ Σ_j⁻¹ [Σ_t h_j(t)(x_t − m_j)(x_t − m_j)ᵀ − N_j Σ_j] Σ_j⁻¹."""
    d = x.shape[1]
    diff = (x[None, :, :] - means[:, None, :]).mT  # (K, D, N)
    maha = (diff * torch.linalg.solve(covs, diff)).sum(1).T  # (N, K)
    energy = 0.5 * maha + 0.5 * torch.linalg.slogdet(covs).logabsdet + 0.5 * d * math.log(2 * math.pi)
    return -mixture_nll(energy, alpha.log()).sum()


def log_gauss(x: Tensor, means: Tensor, covs: Tensor) -> Tensor:
    """log N(x_t; m_j, Σ_j), shape (N, K)."""
    dist = torch.distributions.MultivariateNormal(means, covariance_matrix=covs)
    return dist.log_prob(x[:, None, :])


def em_update(x: Tensor, alpha: Tensor, means: Tensor, covs: Tensor) -> dict[str, Tensor]:
    """E-step and M-step (no ridge): N_j, α^EM, m^EM, the scatter about the old means and the usual Σ^EM about the
    new means."""
    with torch.no_grad():
        h = torch.softmax(alpha.log() + log_gauss(x, means, covs), dim=1)  # (N, K)
        nk = h.sum(0)
        new_means = h.T @ x / nk[:, None]

        def scatter(centres: Tensor) -> Tensor:
            diff = x[None, :, :] - centres[:, None, :]  # (K, N, D)
            return torch.einsum("nk,kna,knb->kab", h, diff, diff) / nk[:, None, None]

        return {
            "nk": nk,
            "alpha": nk / x.shape[0],
            "means": new_means,
            "covs_old": scatter(means),
            "covs": scatter(new_means),
        }


def preconditioned(theta: dict[str, Tensor], grad: dict[str, Tensor], nk: Tensor, n: int) -> dict[str, Tensor]:
    """θ + P(θ)∇ℓ(θ) block by block (Xu & Jordan 1996)."""
    a, ga = theta["alpha"], grad["alpha"]
    covs = theta["covs"]
    return {
        "alpha": a + (a * ga - a * (a @ ga)) / n,  # P_A = (1/N)[diag(α) − ααᵀ]
        "means": theta["means"] + torch.einsum("kab,kb->ka", covs, grad["means"]) / nk[:, None],  # Σ_j/N_j
        "covs_old": covs + 2 / nk[:, None, None] * covs @ grad["covs"] @ covs,  # (2/N_j) Σ_j G_j Σ_j
    }


def rel(candidate: Tensor, target: Tensor, start: Tensor) -> float:
    """max|candidate − target| / max|target − start|: a miss relative to EM's step (start = θ) or to EM's update
    itself (start = 0)."""
    return float((candidate - target).abs().amax() / (target - start).abs().amax())


def best_scalar_rel(theta: Tensor, grad: Tensor, target: Tensor) -> float:
    """Relative miss of θ + η∇ℓ with the best single η (least squares): plain gradient ascent's best case."""
    step, want = grad.flatten(), (target - theta).flatten()
    eta = step @ want / (step @ step)
    return float((eta * step - want).abs().amax() / want.abs().amax())


def _iterate(x: Tensor, theta: dict[str, Tensor], em: dict[str, Tensor], steps: dict[str, float]) -> dict[str, float]:
    """One EM iterate's comparisons: every block's θ + P∇ℓ against EM's update (relative to the update and to EM's
    step), the identity preconditioner and the best single step per block (the controls), and ΔmΔmᵀ's size."""
    leaves = {b: t.clone().requires_grad_(True) for b, t in theta.items()}
    loglik = gmm_loglik(x, leaves["alpha"], leaves["means"], leaves["covs"])
    grad = dict(zip(leaves, torch.autograd.grad(loglik, list(leaves.values())), strict=True))
    pre = preconditioned(theta, grad, em["nk"], x.shape[0])
    dm = em["means"] - theta["means"]
    usual = pre["covs_old"] - dm[:, :, None] * dm[:, None, :]  # the usual EM step: minus Δm_j Δm_jᵀ
    rank_one = float((dm[:, :, None] * dm[:, None, :]).abs().amax())
    checks = {  # block: (θ + P∇ℓ, EM's update, θ)
        "mixing weights": (pre["alpha"], em["alpha"], theta["alpha"]),
        "means": (pre["means"], em["means"], theta["means"]),
        "covariances (old means)": (pre["covs_old"], em["covs_old"], theta["covs"]),
        "covariances (usual EM)": (usual, em["covs"], theta["covs"]),
    }
    return {
        **{b: rel(c, t, torch.zeros_like(t)) for b, (c, t, _) in checks.items()},  # miss / |θ^EM|
        **{f"{b} / step": rel(c, t, start) for b, (c, t, start) in checks.items()},  # miss / |θ^EM − θ|
        "identity: mixing weights": rel(theta["alpha"] + grad["alpha"], em["alpha"], theta["alpha"]),
        "identity: means": rel(theta["means"] + grad["means"], em["means"], theta["means"]),
        "identity: covariances": rel(theta["covs"] + grad["covs"], em["covs"], theta["covs"]),
        "single η: mixing weights": best_scalar_rel(theta["alpha"], grad["alpha"], em["alpha"]),
        "single η: means": best_scalar_rel(theta["means"], grad["means"], em["means"]),
        "single η: covariances": best_scalar_rel(theta["covs"], grad["covs"], em["covs"]),
        "ΔmΔmᵀ / covariance step": rank_one / float((em["covs"] - theta["covs"]).abs().amax()),
        "smallest block step": min(steps.values()),
        "loglik per sample": float(loglik.detach()) / x.shape[0],
    }


def xu_jordan_run(x: Tensor, start_seed: int, iterations: int, min_step: float) -> list[dict[str, float]]:
    """EM from a crude start on data x (N, D) with K = 4 (means at K data points drawn with ``start_seed``, every
    Σ_j the data covariance, α uniform): at every iterate the comparisons of :func:`_iterate`, until ``iterations``
    or until some block's EM step falls below ``min_step``."""
    n, d = x.shape
    k = 4
    g = torch.Generator().manual_seed(start_seed)
    theta = {
        "alpha": torch.full((k,), 1.0 / k, dtype=F64),
        "means": x[torch.randperm(n, generator=g)[:k]].clone(),
        "covs": torch.cov(x.T).expand(k, d, d).clone(),
    }
    rows: list[dict[str, float]] = []
    for _ in range(iterations):
        em = em_update(x, theta["alpha"], theta["means"], theta["covs"])
        steps = {b: float((em[b] - theta[b]).abs().amax()) for b in ("alpha", "means", "covs")}
        if min(steps.values()) < min_step:
            break
        rows.append(_iterate(x, theta, em, steps))
        theta = {"alpha": em["alpha"], "means": em["means"], "covs": em["covs"]}
    if not rows:
        raise RuntimeError("the EM run had no step above min_step: nothing to check")
    return rows
