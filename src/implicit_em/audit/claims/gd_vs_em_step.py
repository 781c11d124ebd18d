r"""Is a gradient step EM's M-step? The skeptic's test swept over the imbalance, and Xu & Jordan (1996) in full.

Claims, as the paper writes them. §1.4 (One interpretation): "This identity implies that gradient descent on
distance-based log-sum-exp objectives performs implicit expectation-maximization. The E-step is the forward pass,
the M-step is the parameter update, and responsibilities are never explicitly computed because they coincide with
the gradients. Neural training does not approximate EM in this setting; it realizes it." §3.2 narrows it: "The
precise relationship is inherited from classical results: the gradient is the responsibility-weighted update
direction (Fisher’s identity), and the EM step is that same gradient under a positive-definite preconditioner (Xu
and Jordan, 1996)—the two methods share update structure, though not trajectories (Zhang et al., 2020)." (The
skeptic in review-implicit-em quotes §3.2 as "gradient descent on LSE objectives is exactly EM"; that sentence is
not in this version of the paper, so the audit tests the two passages above.)

Method, in float64.

1. **The imbalance sweep** (the review's concrete test, and the planted effect). Known σ = 1, no mixing weights,
   the review's objective L = −Σ_i log Σ_j exp(−(x_i − μ_j)²/2σ²), start μ = (−0.5, 0.5). For each weight w in
   ``Config.weights`` the data are n₁ = round(w·n) points −2 + u_i and n₂ = n − n₁ points 2 − u_i, mirrored
   from the *same* draws u_i ~ N(0, 1). At w = 0.5 the sample and the start are symmetric about 0, so
   S₁ = S₂ = n/2 (S_j = Σ_i r_ij) holds exactly, at the start and along the whole path: one step size η = σ²/S
   must reproduce EM's update and EM's trajectory. If it does not, the measurement is wrong. At each w: EM's
   update μ_j^EM = Σ_i r_ij x_i / S_j; the gradient of L by autograd; the best single η (least squares over both
   components) and its relative error ‖μ + η g − μ^EM‖ / ‖μ^EM − μ‖, which has the closed form |sin∠(g, δ)| with
   g_j = S_j δ_j / σ² and δ = μ^EM − μ; the per-component steps σ²/S_j (Xu–Jordan in 1-D). Paths: EM and gradient
   descent with that best single η, ``iterations`` steps each: the largest gap between the two paths and the
   iterations each needs to come within 1e-8 nats/sample of the better end point.
2. **Xu & Jordan's block preconditioner at every iterate of an EM run** (Xu & Jordan 1996). Data from a planted
   full-covariance mixture (D = 3, K = 4, weights 0.4/0.3/0.2/0.1); EM from a crude start (means at K data
   points, every Σ_j the data covariance, α uniform). At every iterate θ = (α, m, Σ) the gradient ∇ℓ of the
   mixture log-likelihood (autograd; α free, no simplex constraint; Σ_j a free matrix) and EM's update, with
   N_j = Σ_t h_j(t): mixing weights α + P_A ∇_α ℓ, P_A = (1/N)[diag(α) − ααᵀ], against N_j/N; means
   m_j + (Σ_j/N_j) ∇_{m_j} ℓ against Σ_t h_j(t) x_t / N_j; covariances Σ_j + (2/N_j) Σ_j G_j Σ_j
   (G_j = ∂ℓ/∂Σ_j) against the scatter about the *old* means, and that minus Δm_j Δm_jᵀ against the usual EM
   step (scatter about the new means): both. A block's residual is max|θ_b + P_b∇_bℓ − θ_b^EM| / max|θ_b^EM|,
   the miss relative to EM's update (float64 agreement of the two updates); its miss relative to EM's *step*,
   max|θ_b^EM − θ_b|, is reported beside it. The run stops early once some block's EM step falls below
   ``min_step`` (absolute; the parameters are O(1)): above it a wrong preconditioner that misses by more than
   ~1e-4 of the step still misses by more than 1e-10 of the update, so the check keeps its power. Negative
   control: the identity preconditioner (θ + ∇ℓ) must miss EM by at least ``control_min_miss`` of EM's step at
   every iterate; reported beside it, the best single step size per block (plain gradient ascent's best case)
   and the size of Δm Δmᵀ relative to the covariance step.

Verdict rule (thresholds in ``Config``, each comparison in ``Result.criteria``):

- controls (the measurement can find a match and can find a miss): at w = 0.5 the single-η error and the path gap
  ≤ ``preconditioned_tol``; the identity preconditioner misses by ≥ ``control_min_miss`` at every iterate.
  If a control fails the measurement is wrong and the verdict is ERROR, whatever the other numbers.
- SUPPORTED (§1.4 as written: the parameter update is the M-step) if the best single step matches EM's update to
  ``single_step_tol`` at every imbalanced sweep point;
- PARTIAL (§3.2's reading holds, §1.4's wording does not) if a single step fails somewhere in the sweep while the
  preconditioned steps (σ²/S_j over the sweep, and the three Xu–Jordan blocks at every iterate, both covariance
  forms) match EM to ``preconditioned_tol``;
- REFUTED if a single step fails and the preconditioned steps do not match EM either.

The previous rule of this module called the second case REFUTED ("REFUTED when the best single step leaves a
relative error ≥ 1e-3 while the preconditioned step matches EM to ≤ 1e-10"): it judged §1.4's sentence alone and
built the outcome into its only data set (a 0.7/0.3 mixture forces S₁ ≠ S₂). The audit's vocabulary calls "a
weaker reading holds, the claim as written does not" PARTIAL, and that weaker reading is the paper's own §3.2, so
the rule is corrected here; ``Result.metrics`` keeps the verdict the previous rule gives on the same numbers.

A correction made after seeing numbers, stated as such: this rule's first design measured the Xu–Jordan miss
relative to EM's *step*, with ``min_step`` = 1e-5 chosen from an estimate of ~1e-15 absolute round-off. Quick runs
(seeds 0-2) gave at most 8e-13, but the first full-size run (N = 20,000, 100 iterates) gave 1.4e-9 on the
covariance block where its step had fallen to 2e-5: an absolute miss of ~3e-14, float64 round-off of G_j (sums
of O(N_j) terms that cancel, amplified by Σ_j on both sides), so the estimate behind the floor was ~30× too
optimistic and that design read round-off as a failed identity (REFUTED). The tolerance (1e-10) is unchanged; the
residual is now measured against EM's update, the standard meaning of agreement to 1e-10 in float64, and the old
measure and the verdict it gives stay in ``Result.metrics``.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, pyplot
from implicit_em.objectives import mixture_nll

__all__ = ["EXPERIMENT", "Config", "run"]

_F64 = torch.float64
_SIGMA = 1.0  # the review's known component scale
_START = (-0.5, 0.5)  # the sweep's start: symmetric about 0, like the balanced sample
_REVIEW_W = 0.7  # the review's 0.7/0.3 mixture, the previous module's only data set
_BLOCKS = ("mixing weights", "means", "covariances (old means)", "covariances (usual EM)")
_FIRST_DESIGN = "preconditioned, first design: max miss relative to EM's step"


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 1000  # samples of each 1-D sweep point
    # share of the points near −2; 0.5 is the balanced control (S₁ = S₂), 0.7 the review's mixture
    weights: tuple[float, ...] = (0.5, 0.501, 0.502, 0.505, 0.51, 0.52, 0.55, 0.6, 0.7, 0.8, 0.9, 0.95)
    iterations: int = 200  # EM and GD iterations of each path comparison
    n_xu_jordan: int = 500  # samples of the full-covariance mixture (D = 3, K = 4)
    xu_jordan_iterations: int = 30  # EM iterates checked (fewer if a step falls below min_step)
    # thresholds (module docstring). single_step_tol: a single step "realizes" EM if it matches EM's update to
    # 1e-3 relative, a generous reading of "does not approximate EM; it realizes it" (kept from the previous rule).
    # preconditioned_tol: an exact identity must hold to float64 round-off, 1e-10 (issue 10). min_step: the check
    # keeps its power only while EM's step is ≫ 1e-10 of the update: a floor of 1e-5 resolves misses of ~1e-4 of
    # the step. control_min_miss: a wrong preconditioner must miss by O(1) (issue 10), half of EM's step or more.
    single_step_tol: float = 1e-3
    preconditioned_tol: float = 1e-10
    min_step: float = 1e-5
    control_min_miss: float = 0.5

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n=100_000, iterations=1000, n_xu_jordan=20_000, xu_jordan_iterations=100)


# --- the 1-D sweep ------------------------------------------------------------------------------------------------


def _sweep_data(u: Tensor, n: int, w: float) -> Tensor:
    """n₁ = round(w·n) points −2 + u_i and n − n₁ points 2 − u_i from the same draws u (mirror images)."""
    n1 = round(w * n)
    if not n // 2 <= n1 <= n:
        raise ValueError(f"weight {w} gives n₁ = {n1} of n = {n}; need n/2 ≤ n₁ ≤ n")
    return torch.cat([-2.0 + u[:n1], 2.0 - u[: n - n1]])


def _loss_1d(x: Tensor, mu: Tensor, sigma: float) -> Tensor:
    """L = −Σ_i log Σ_j exp(−(x_i − μ_j)²/2σ²) (the review's objective: no weights, no normaliser)."""
    d = (x[:, None] - mu[None, :]) ** 2 / (2 * sigma**2)
    return mixture_nll(d).sum()


def _em_step_1d(x: Tensor, mu: Tensor, sigma: float) -> tuple[Tensor, Tensor]:
    """EM's update of the means and the soft counts S_j = Σ_i r_ij at ``mu``."""
    r = torch.softmax(-((x[:, None] - mu[None, :]) ** 2) / (2 * sigma**2), dim=1)
    s = r.sum(0)
    return (r * x[:, None]).sum(0) / s, s


def _gradient_1d(x: Tensor, mu: Tensor, sigma: float) -> Tensor:
    m = mu.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_loss_1d(x, m, sigma), m)
    return grad


def _single_step(x: Tensor, mu: Tensor, sigma: float) -> dict[str, Any]:
    """One step from ``mu``: EM's update, the best single η for the gradient step and the per-component steps."""
    mu_em, s = _em_step_1d(x, mu, sigma)
    ascent = -_gradient_1d(x, mu, sigma)
    target = mu_em - mu
    eta = float(ascent @ target / (ascent @ ascent))  # least squares over both components
    per = sigma**2 / s  # one step size per component: Xu–Jordan's Σ_j/N_j in 1-D
    return {
        "mu_em": mu_em,
        "S": s,
        "ascent": ascent,
        "eta_best": eta,
        "best_rel": float((mu + eta * ascent - mu_em).norm() / target.norm()),
        "per_rel": float((mu + per * ascent - mu_em).norm() / target.norm()),
        "closed_form": float(_best_single_error(s, target)),
    }


def _best_single_error(s: Tensor, delta: Tensor) -> Tensor:
    """Relative error of the best single η, |sin∠(g, δ)| with g_j ∝ S_j δ_j: for two components
    |δ₁δ₂(S₁ − S₂)| / (‖δ‖ ‖(S₁δ₁, S₂δ₂)‖), zero iff S₁ = S₂ (or a component does not move)."""
    g = s * delta
    return (delta[0] * delta[1] * (s[0] - s[1])).abs() / (delta.norm() * g.norm())


def _paths(x: Tensor, mu0: Tensor, eta: float, iterations: int) -> dict[str, Any]:
    """EM and gradient descent with one constant η from ``mu0``: log-likelihood per sample along both, the
    largest gap between the two paths, and the iterations each needs to reach the better end point (−1: not)."""
    n = x.shape[0]

    def loglik(mu: Tensor) -> float:
        return float(-_loss_1d(x, mu, _SIGMA)) / n

    em, gd = [loglik(mu0)], [loglik(mu0)]
    mu_e, mu_g, gap = mu0.clone(), mu0.clone(), 0.0
    for _ in range(iterations):
        mu_e = _em_step_1d(x, mu_e, _SIGMA)[0]
        mu_g = mu_g - eta * _gradient_1d(x, mu_g, _SIGMA)
        gap = max(gap, float((mu_g - mu_e).abs().max()))
        em.append(loglik(mu_e))
        gd.append(loglik(mu_g))
    best = max(max(em), max(gd))

    def reach(path: list[float]) -> int:
        return next((i for i, v in enumerate(path) if best - v <= 1e-8), -1)

    return {"em": em, "gd": gd, "best": best, "gap": gap, "em_iters": reach(em), "gd_iters": reach(gd)}


def _sweep(cfg: Config) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(cfg.seed)
    u = torch.randn(cfg.n, generator=g, dtype=_F64)
    mu0 = torch.tensor(_START, dtype=_F64)
    rows = []
    for w in cfg.weights:
        x = _sweep_data(u, cfg.n, w)
        step = _single_step(x, mu0, _SIGMA)
        s1, s2 = (float(v) for v in step["S"])
        rows.append(
            {"w": w, "S1": s1, "S2": s2, "imbalance": (s1 - s2) / (s1 + s2), **step}
            | _paths(x, mu0, step["eta_best"], cfg.iterations)
        )
    return rows


# --- Xu & Jordan: the full block preconditioner along an EM run -----------------------------------------------------


def _planted_mixture(seed: int, n: int) -> Tensor:
    """n samples of a full-covariance mixture, D = 3, K = 4, weights 0.4/0.3/0.2/0.1, overlapping components."""
    g = torch.Generator().manual_seed(seed + 1)
    k, d = 4, 3
    means = 1.5 * torch.randn(k, d, generator=g, dtype=_F64)
    a = torch.randn(k, d, d, generator=g, dtype=_F64) / math.sqrt(d)
    chol = torch.linalg.cholesky(a @ a.mT + 0.3 * torch.eye(d, dtype=_F64))
    z = torch.multinomial(torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=_F64), n, replacement=True, generator=g)
    return means[z] + (chol[z] @ torch.randn(n, d, 1, generator=g, dtype=_F64)).squeeze(-1)


def _gmm_loglik(x: Tensor, alpha: Tensor, means: Tensor, covs: Tensor) -> Tensor:
    r"""ℓ = Σ_t log Σ_j α_j N(x_t; m_j, Σ_j), with α and each Σ_j free (no simplex, no symmetry constraint), so
    autograd gives ∂ℓ/∂α_j = N_j/α_j and G_j = ½ Σ_j⁻¹ [Σ_t h_j(t)(x_t − m_j)(x_t − m_j)ᵀ − N_j Σ_j] Σ_j⁻¹."""
    d = x.shape[1]
    diff = (x[None, :, :] - means[:, None, :]).mT  # (K, D, N)
    maha = (diff * torch.linalg.solve(covs, diff)).sum(1).T  # (N, K)
    energy = 0.5 * maha + 0.5 * torch.linalg.slogdet(covs).logabsdet + 0.5 * d * math.log(2 * math.pi)
    return -mixture_nll(energy, alpha.log()).sum()


def _em_update(x: Tensor, alpha: Tensor, means: Tensor, covs: Tensor) -> dict[str, Tensor]:
    """E-step and M-step (no ridge): N_j, α^EM, m^EM, the scatter about the old means and the usual
    Σ^EM about the new means."""
    with torch.no_grad():
        h = torch.softmax(alpha.log() + _log_gauss(x, means, covs), dim=1)  # (N, K)
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


def _log_gauss(x: Tensor, means: Tensor, covs: Tensor) -> Tensor:
    """log N(x_t; m_j, Σ_j), shape (N, K)."""
    dist = torch.distributions.MultivariateNormal(means, covariance_matrix=covs)
    return dist.log_prob(x[:, None, :])


def _preconditioned(theta: dict[str, Tensor], grad: dict[str, Tensor], nk: Tensor, n: int) -> dict[str, Tensor]:
    """θ + P(θ)∇ℓ(θ) block by block (Xu & Jordan 1996)."""
    a, ga = theta["alpha"], grad["alpha"]
    covs = theta["covs"]
    return {
        "alpha": a + (a * ga - a * (a @ ga)) / n,  # P_A = (1/N)[diag(α) − ααᵀ]
        "means": theta["means"] + torch.einsum("kab,kb->ka", covs, grad["means"]) / nk[:, None],  # Σ_j/N_j
        "covs_old": covs + 2 / nk[:, None, None] * covs @ grad["covs"] @ covs,  # (2/N_j) Σ_j G_j Σ_j
    }


def _rel(candidate: Tensor, target: Tensor, start: Tensor) -> float:
    """max|candidate − target| / max|target − start|: a miss relative to EM's step (start = θ) or to EM's
    update itself (start = 0)."""
    return float((candidate - target).abs().amax() / (target - start).abs().amax())


def _best_scalar_rel(theta: Tensor, grad: Tensor, target: Tensor) -> float:
    """Relative miss of θ + η∇ℓ with the best single η (least squares): plain gradient ascent's best case."""
    step, want = grad.flatten(), (target - theta).flatten()
    eta = step @ want / (step @ step)
    return float((eta * step - want).abs().amax() / want.abs().amax())


def _xu_jordan_run(cfg: Config) -> dict[str, Any]:
    """Run EM and, at every iterate, compare EM's update with θ + P∇ℓ (and with θ + ∇ℓ, the control)."""
    x = _planted_mixture(cfg.seed, cfg.n_xu_jordan)
    n, d = x.shape
    k = 4
    g = torch.Generator().manual_seed(cfg.seed + 2)
    theta = {
        "alpha": torch.full((k,), 1.0 / k, dtype=_F64),
        "means": x[torch.randperm(n, generator=g)[:k]].clone(),
        "covs": torch.cov(x.T).expand(k, d, d).clone(),
    }
    rows: list[dict[str, float]] = []
    for _ in range(cfg.xu_jordan_iterations):
        em = _em_update(x, theta["alpha"], theta["means"], theta["covs"])
        steps = {b: float((em[b] - theta[b]).abs().amax()) for b in ("alpha", "means", "covs")}
        if min(steps.values()) < cfg.min_step:
            break
        leaves = {b: t.clone().requires_grad_(True) for b, t in theta.items()}
        loglik = _gmm_loglik(x, leaves["alpha"], leaves["means"], leaves["covs"])
        grad = dict(zip(leaves, torch.autograd.grad(loglik, list(leaves.values())), strict=True))
        pre = _preconditioned(theta, grad, em["nk"], n)
        dm = em["means"] - theta["means"]
        usual = pre["covs_old"] - dm[:, :, None] * dm[:, None, :]  # the usual EM step: minus Δm_j Δm_jᵀ
        rank_one = float((dm[:, :, None] * dm[:, None, :]).abs().amax())
        checks = {  # block: (θ + P∇ℓ, EM's update, θ)
            "mixing weights": (pre["alpha"], em["alpha"], theta["alpha"]),
            "means": (pre["means"], em["means"], theta["means"]),
            "covariances (old means)": (pre["covs_old"], em["covs_old"], theta["covs"]),
            "covariances (usual EM)": (usual, em["covs"], theta["covs"]),
        }
        rows.append(
            {
                **{b: _rel(c, t, torch.zeros_like(t)) for b, (c, t, _) in checks.items()},  # miss / |θ^EM|
                **{f"{b} / step": _rel(c, t, start) for b, (c, t, start) in checks.items()},  # miss / |θ^EM − θ|
                "identity: mixing weights": _rel(theta["alpha"] + grad["alpha"], em["alpha"], theta["alpha"]),
                "identity: means": _rel(theta["means"] + grad["means"], em["means"], theta["means"]),
                "identity: covariances": _rel(theta["covs"] + grad["covs"], em["covs"], theta["covs"]),
                "single η: mixing weights": _best_scalar_rel(theta["alpha"], grad["alpha"], em["alpha"]),
                "single η: means": _best_scalar_rel(theta["means"], grad["means"], em["means"]),
                "single η: covariances": _best_scalar_rel(theta["covs"], grad["covs"], em["covs"]),
                "ΔmΔmᵀ / covariance step": rank_one / float((em["covs"] - theta["covs"]).abs().amax()),
                "smallest block step": min(steps.values()),
                "loglik per sample": float(loglik.detach()) / n,
            }
        )
        theta = {"alpha": em["alpha"], "means": em["means"], "covs": em["covs"]}
    if not rows:
        raise RuntimeError("the EM run had no step above min_step: nothing to check")
    return {"rows": rows, "n": n}


# --- verdict ---------------------------------------------------------------------------------------------------


def _criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    return [
        criterion(
            "best single step, imbalanced sweep points: max relative error vs EM update",
            m["best single step: max relative error, imbalanced"],
            "<",
            cfg.single_step_tol,
        ),
        criterion(
            "preconditioned steps: max miss (σ²/S_j over the sweep, / EM's step; Xu–Jordan α, m, Σ at every "
            "iterate, / EM's update)",
            m["preconditioned: max relative error"],
            "<=",
            cfg.preconditioned_tol,
        ),
        criterion(
            "control, S₁ = S₂ (w = 0.5): best single step's relative error",
            m["balanced: best single step relative error"],
            "<=",
            cfg.preconditioned_tol,
        ),
        criterion(
            "control, S₁ = S₂ (w = 0.5): max gap between the EM and GD paths",
            m["balanced: max gap between EM and GD paths"],
            "<=",
            cfg.preconditioned_tol,
        ),
        criterion(
            "control, identity preconditioner: smallest miss / EM's step over blocks and iterates",
            m["identity preconditioner: min relative miss"],
            ">=",
            cfg.control_min_miss,
        ),
    ]


def _decide(criteria: list[Criterion]) -> tuple[Verdict, Verdict]:
    """(verdict, the verdict the previous rule gives) from the criteria in :func:`_criteria`'s order."""
    single, preconditioned, *controls = (c.passed for c in criteria)
    previous: Verdict = "SUPPORTED" if single else ("REFUTED" if preconditioned else "PARTIAL")
    if not all(controls):
        return "ERROR", previous
    if single:
        return "SUPPORTED", previous
    return ("PARTIAL" if preconditioned else "REFUTED"), previous


def _metrics(cfg: Config, sweep: list[dict[str, Any]], xj: dict[str, Any]) -> dict[str, Any]:
    balanced = [r for r in sweep if r["w"] == 0.5]
    if not balanced:
        raise ValueError("Config.weights must include 0.5, the balanced control")
    imbalanced = [r for r in sweep if r["w"] != 0.5]
    fails = [r for r in imbalanced if r["best_rel"] >= cfg.single_step_tol]
    rows = xj["rows"]
    review = next((r for r in sweep if r["w"] == _REVIEW_W), None)
    return {
        "sweep: weight w of the −2 cluster": [r["w"] for r in sweep],
        "sweep: S₁": [r["S1"] for r in sweep],
        "sweep: S₂": [r["S2"] for r in sweep],
        "sweep: imbalance (S₁ − S₂)/(S₁ + S₂)": [r["imbalance"] for r in sweep],
        "sweep: best single η": [r["eta_best"] for r in sweep],
        "sweep: best single step relative error": [r["best_rel"] for r in sweep],
        "sweep: closed form |sin∠(g, δ)|": [r["closed_form"] for r in sweep],
        "sweep: per-component steps σ²/S_j relative error": [r["per_rel"] for r in sweep],
        "sweep: max gap between EM and GD paths": [r["gap"] for r in sweep],
        "sweep: EM iterations to fixed point (1e-8 nats)": [r["em_iters"] for r in sweep],
        "sweep: GD iterations to fixed point (1e-8 nats, −1 = not reached)": [r["gd_iters"] for r in sweep],
        "best single step: max relative error, imbalanced": max(r["best_rel"] for r in imbalanced),
        "best single step: smallest imbalance where it fails": min((r["imbalance"] for r in fails), default=None),
        "best single step: largest imbalance where it holds": max(
            (r["imbalance"] for r in imbalanced if r["best_rel"] < cfg.single_step_tol), default=None
        ),
        "review's 0.7/0.3: best single step relative error": review["best_rel"] if review else None,
        "balanced: |S₁ − S₂| / n": abs(balanced[0]["S1"] - balanced[0]["S2"]) / cfg.n,
        "balanced: best single step relative error": balanced[0]["best_rel"],
        "balanced: max gap between EM and GD paths": balanced[0]["gap"],
        "preconditioned: max relative error": max(
            max(r["per_rel"] for r in sweep), *(max(row[b] for row in rows) for b in _BLOCKS)
        ),
        "preconditioned, first design: max miss relative to EM's step": max(
            max(r["per_rel"] for r in sweep), *(max(row[f"{b} / step"] for row in rows) for b in _BLOCKS)
        ),
        **{f"Xu–Jordan {b}: max relative error": max(row[b] for row in rows) for b in _BLOCKS},
        **{f"Xu–Jordan {b}: max miss relative to EM's step": max(row[f"{b} / step"] for row in rows) for b in _BLOCKS},
        "Xu–Jordan: EM iterates checked": len(rows),
        "Xu–Jordan: smallest block step checked": min(row["smallest block step"] for row in rows),
        "identity preconditioner: min relative miss": min(
            row[f"identity: {b}"] for row in rows for b in ("mixing weights", "means", "covariances")
        ),
        **{
            f"best single η per block, {b}: relative miss (min, max over iterates)": [
                min(row[f"single η: {b}"] for row in rows),
                max(row[f"single η: {b}"] for row in rows),
            ]
            for b in ("mixing weights", "means", "covariances")
        },
        "ΔmΔmᵀ relative to the covariance step (min, max over iterates)": [
            min(row["ΔmΔmᵀ / covariance step"] for row in rows),
            max(row["ΔmΔmᵀ / covariance step"] for row in rows),
        ],
        "n": cfg.n,
        "n_xu_jordan": xj["n"],
    }


# --- figure and result --------------------------------------------------------------------------------------------


def _figure(cfg: Config, sweep: list[dict[str, Any]], xj: dict[str, Any], ctx: Context) -> str:
    plt = pyplot()
    fig, ((a1, a2), (a3, a4)) = plt.subplots(2, 2, figsize=(11, 7.5))
    floor = 1e-17  # round-off zeros drawn on the log axis
    off = [r for r in sweep if r["w"] != 0.5]
    imb = [abs(r["imbalance"]) for r in off]
    a1.loglog(imb, [max(r["best_rel"], floor) for r in off], "o-", label="best single η")
    a1.loglog(imb, [max(r["per_rel"], floor) for r in off], "s--", label="per component, σ²/S_j")
    a1.loglog(imb, imb, color="0.6", lw=0.8, label="error = imbalance")
    for r in sweep:
        if r["w"] == 0.5:
            a1.loglog([1e-4], [max(r["best_rel"], floor)], "D", color="C3", label="S₁ = S₂ (w = 0.5, drawn at 1e-4)")
    a1.axhline(cfg.single_step_tol, color="k", lw=0.8, ls=":", label=f"single-step tolerance {cfg.single_step_tol}")
    a1.set_xlabel("imbalance |S₁ − S₂|/(S₁ + S₂) at the start")
    a1.set_ylabel("‖μ_GD − μ_EM‖ / ‖μ_EM − μ‖")
    a1.set_title("one step: where a single step size fails")
    a1.legend(fontsize=7)

    review = next((r for r in sweep if r["w"] == _REVIEW_W), sweep[-1])
    mu0 = torch.tensor(_START, dtype=_F64)
    per = _SIGMA**2 / review["S"]
    etas = torch.linspace(0.0, 2.5 * float(per.max()), 200, dtype=_F64)
    target = review["mu_em"] - mu0
    errs = [float((mu0 + e * review["ascent"] - review["mu_em"]).norm() / target.norm()) for e in etas]
    a2.plot(etas.numpy(), errs)
    for j, e in enumerate(per.tolist()):
        a2.axvline(e, color=f"C{j + 1}", ls="--", label=f"σ²/S_{j + 1} = {e:.2e}")
    a2.axvline(review["eta_best"], color="k", lw=0.8, label=f"best single η = {review['eta_best']:.2e}")
    a2.set_xlabel("step size η")
    a2.set_ylabel("‖μ_GD(η) − μ_EM‖ / ‖μ_EM − μ‖")
    a2.set_title(f"one step at w = {review['w']}")
    a2.legend(fontsize=7)

    rows = xj["rows"]
    for b in _BLOCKS:
        a3.semilogy([max(row[b], floor) for row in rows], label=f"θ + P∇ℓ: {b}")
    for b in ("mixing weights", "means", "covariances"):
        a3.semilogy([row[f"single η: {b}"] for row in rows], ls="--", label=f"best single η: {b}")
    a3.semilogy(
        [min(row[f"identity: {b}"] for b in ("mixing weights", "means", "covariances")) for row in rows],
        "k:",
        label="identity preconditioner (smallest block, / step)",
    )
    a3.axhline(cfg.preconditioned_tol, color="k", lw=0.8, label=f"tolerance {cfg.preconditioned_tol:.0e}")
    a3.set_xlabel("EM iterate")
    a3.set_ylabel("miss / EM's update (solid), / EM's step (dashed)")
    a3.set_title("Xu–Jordan along an EM run (D = 3, K = 4)")
    a3.legend(fontsize=6, ncol=2)

    for r, c in ((sweep[0], "C0"), (review, "C1")):
        a4.semilogy([max(r["best"] - v, floor) for v in r["em"]], color=c, label=f"EM, w = {r['w']}")
        a4.semilogy([max(r["best"] - v, floor) for v in r["gd"]], color=c, ls="--", label=f"GD, w = {r['w']}")
    a4.set_ylim(bottom=1e-15)
    a4.set_xlabel("iteration")
    a4.set_ylabel("nats/sample below the better end point")
    a4.set_title("paths: EM vs GD with the best single η")
    a4.legend(fontsize=7)
    fig.tight_layout()
    return ctx.save_figure(fig, "gd_vs_em_step")


def _summary(verdict: Verdict, m: dict[str, Any]) -> str:
    xj = max(m[f"Xu–Jordan {b}: max relative error"] for b in _BLOCKS)
    imbalance, errors = m["sweep: imbalance (S₁ − S₂)/(S₁ + S₂)"], m["sweep: best single step relative error"]
    worst = max(range(len(errors)), key=errors.__getitem__)
    fails_from = m["best single step: smallest imbalance where it fails"]
    if fails_from is None:
        where = "holds to 1e-3 at every imbalance of the sweep"
    else:
        at = imbalance.index(fails_from)
        where = (
            f"misses it by ≥ 1e-3 from imbalance (S₁ − S₂)/(S₁ + S₂) = {fails_from:.4f} on (error {errors[at]:.4f}), "
            f"up to {100 * errors[worst]:.1f}% at {imbalance[worst]:.2f}"
        )
    review = m["review's 0.7/0.3: best single step relative error"]
    balanced = m["balanced: best single step relative error"]
    text = (
        f"A single step size reproduces EM's update at S₁ = S₂ (error {balanced:.0e}, whole "
        f"path to {m['balanced: max gap between EM and GD paths']:.0e}) and {where}"
        + (f"; {100 * review:.1f}% at the review's 0.7/0.3" if review is not None else "")
        + f". EM is the gradient step under Xu–Jordan's block preconditioner at all "
        f"{m['Xu–Jordan: EM iterates checked']} iterates of an EM run (α, m, Σ: residual ≤ {xj:.0e} of the update; "
        f"identity preconditioner: misses by ≥ {m['identity preconditioner: min relative miss']:.0f}× EM's step)."
    )
    if verdict == "PARTIAL":
        text += " §3.2's preconditioned reading holds; §1.4's 'the M-step is the parameter update' does not."
    if verdict == "ERROR":
        text += " A control failed, so these numbers do not decide the claim."
    return text


def run(cfg: Config, ctx: Context) -> Result:
    sweep = _sweep(cfg)
    xj = _xu_jordan_run(cfg)
    metrics = _metrics(cfg, sweep, xj)
    criteria = _criteria(cfg, metrics)
    verdict, previous = _decide(criteria)
    first = metrics | {"preconditioned: max relative error": metrics[_FIRST_DESIGN]}
    metrics["verdict under the previous rule (REFUTED whenever a single step fails)"] = previous
    metrics["verdict under this rule's first design (Xu–Jordan miss relative to EM's step)"] = _decide(
        _criteria(cfg, first)
    )[0]
    figure = _figure(cfg, sweep, xj, ctx)
    review = metrics["review's 0.7/0.3: best single step relative error"]
    return Result(
        verdict,
        _summary(verdict, metrics),
        metrics,
        criteria,
        [figure],
        details=(
            "Method: the review's 1-D test swept over the share w of the −2 cluster (mirrored samples, so w = 0.5 "
            "gives S₁ = S₂ exactly: the planted match), then Xu & Jordan's block preconditioner checked in all "
            "three blocks (mixing weights, means, covariances in both forms) at every iterate of a float64 EM run "
            "on a planted D = 3, K = 4 mixture, each miss relative to EM's update (and, reported, to its step). "
            "Controls: the "
            "balanced sweep point (a single η must match, step and path), the identity preconditioner (must miss "
            "by O(1)); beside them the best single step size per block, and Δm Δmᵀ, by which the old-means "
            "covariance step differs from the usual one. Reading: §1.4 says the parameter update is the M-step "
            "and training 'realizes' EM; that holds only where S₁ = S₂ (review's 0.7/0.3 case: "
            + (f"{100 * review:.1f}%" if review is not None else "not in the sweep")
            + " of EM's update unmatched by any single step). §3.2 says EM is the gradient under a positive-definite "
            "preconditioner and the two 'share update structure, though not trajectories'; the numbers show that "
            "(P_A is positive definite only on the simplex's tangent space: diag(α) − ααᵀ annihilates the ones "
            "vector). Caveats: one start per sweep point; the path comparison uses the best single η of the first "
            "step; the Xu–Jordan run stops once a block's step is below min_step, where round-off dominates."
        ),
    )


EXPERIMENT = Experiment(
    name="gd_vs_em_step",
    title="A gradient step versus EM's M-step",
    claim="This identity implies that gradient descent on distance-based log-sum-exp objectives performs implicit "
    "expectation-maximization. The E-step is the forward pass, the M-step is the parameter update, and "
    "responsibilities are never explicitly computed because they coincide with the gradients. Neural training does "
    'not approximate EM in this setting; it realizes it. (§3.2: "the EM step is that same gradient under a '
    "positive-definite preconditioner (Xu and Jordan, 1996)—the two methods share update structure, though not "
    'trajectories (Zhang et al., 2020).")',
    source="paper §1.4 (One interpretation), §3.2; review-implicit-em skeptic's concrete test; Xu & Jordan (1996) "
    "as in the classical EM literature",
    Config=Config,
    run=run,
)
