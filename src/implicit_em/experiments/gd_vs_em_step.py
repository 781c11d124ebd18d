r"""Is a gradient step EM's M-step? The skeptic's concrete test (review-implicit-em) and Xu & Jordan (1996).

Method, in float64:

1. The review's 1-D test: two components with known σ = 1, equal weights, data from 0.7·N(−2, 1) + 0.3·N(2, 1).
   At a start μ^t the responsibilities r_ij give EM's update μ_j^EM = Σ_i r_ij x_i / S_j (S_j = Σ_i r_ij) and a
   gradient step on L = −Σ_i log Σ_j exp(−(x_i − μ_j)²/2σ²), by autograd, μ_j^GD = μ_j^t − η ∂L/∂μ_j. The best
   single η (least squares over both components) leaves a relative error; the per-component steps η_j = σ²/S_j
   reproduce EM exactly.
2. The general form (Xu & Jordan): for a full-covariance mixture (D = 3, K = 4, random parameters), EM's mean
   update equals μ_j + (Σ_j / N_j) ∇_{μ_j} log-likelihood, the gradient preconditioned per component.
3. Trajectories: EM and gradient descent with the best constant step from the first comparison, iterated; the
   number of iterations each needs to come within 1e-8 nats/sample of the common fixed point.

Verdict: the claim as written ("it realizes [EM]") is REFUTED when the best single step leaves a relative error
≥ 1e-3 while the preconditioned step matches EM to ≤ 1e-10 (the responsibility-weighted, preconditioned reading
of §3.2 holds); SUPPORTED if a single step matched EM (≤ 1e-3).
"""

import math
from dataclasses import dataclass

import torch

from implicit_em.distances import GaussianComponents
from implicit_em.experiments._base import Context, Experiment, Result, Verdict, criterion, pyplot
from implicit_em.objectives import mixture_nll

_F64 = torch.float64


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 1000  # samples of the review's 1-D mixture
    n_xu_jordan: int = 500  # samples of the full-covariance mixture (D = 3, K = 4)
    iterations: int = 200  # EM and GD iterations of the trajectory comparison
    # verdict thresholds (module docstring): a single step "realizes" EM if it matches EM's update to 1e-3
    # (relative); the preconditioned step is EM exactly, so it must match to float64 round-off
    single_step_tol: float = 1e-3
    preconditioned_tol: float = 1e-10

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n=100_000, n_xu_jordan=20_000, iterations=1000)


def _loss_1d(x: torch.Tensor, mu: torch.Tensor, sigma: float) -> torch.Tensor:
    """L = −Σ_i log Σ_j exp(−(x_i − μ_j)²/2σ²) (the review's objective: no weights, no normaliser)."""
    d = (x[:, None] - mu[None, :]) ** 2 / (2 * sigma**2)
    return mixture_nll(d).sum()


def _em_step_1d(x: torch.Tensor, mu: torch.Tensor, sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.softmax(-((x[:, None] - mu[None, :]) ** 2) / (2 * sigma**2), dim=1)
    s = r.sum(0)
    return (r * x[:, None]).sum(0) / s, s


def _gradient_1d(x: torch.Tensor, mu: torch.Tensor, sigma: float) -> torch.Tensor:
    m = mu.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_loss_1d(x, m, sigma), m)
    return grad


def _xu_jordan_residual(seed: int, n: int) -> float:
    """max |μ^EM − (μ + (Σ_j/N_j) ∇_μ log-lik)| / max |μ^EM − μ| for a random full-covariance mixture."""
    g = torch.Generator().manual_seed(seed + 1)
    k, d = 4, 3
    x = torch.randn(n, d, generator=g, dtype=_F64) * 2
    comps = GaussianComponents(k, d, covariance_type="full", dtype=_F64)
    with torch.no_grad():
        comps.means.copy_(torch.randn(k, d, generator=g, dtype=_F64))
        comps.log_diag.copy_(0.3 * torch.randn(k, d, generator=g, dtype=_F64))
        comps.lower.copy_(0.3 * torch.randn(k, d, d, generator=g, dtype=_F64))
    log_w = torch.log_softmax(torch.randn(k, generator=g, dtype=_F64), 0)
    energy = comps(x).energy
    loglik = -mixture_nll(energy, log_w).sum()
    (grad_mu,) = torch.autograd.grad(loglik, comps.means)
    with torch.no_grad():
        r = torch.softmax(log_w - energy, dim=1)
        nk = r.sum(0)
        em = (r.T @ x) / nk[:, None]
        cov = comps.covariances()
        preconditioned = comps.means + torch.einsum("kab,kb->ka", cov, grad_mu) / nk[:, None]
        return float((preconditioned - em).abs().amax() / (em - comps.means).abs().amax())


def run(cfg: Config, ctx: Context) -> Result:
    plt = pyplot()
    n = cfg.n
    sigma = 1.0
    g = torch.Generator().manual_seed(cfg.seed)
    z = torch.rand(n, generator=g, dtype=_F64) < 0.7
    x = torch.where(z, -2.0, 2.0) + torch.randn(n, generator=g, dtype=_F64)
    mu0 = torch.tensor([-0.5, 0.5], dtype=_F64)

    mu_em, s = _em_step_1d(x, mu0, sigma)
    step = -_gradient_1d(x, mu0, sigma)  # ascent direction on the log-likelihood
    target = mu_em - mu0
    eta_best = float(step @ target / (step @ step))
    best_rel = float((mu0 + eta_best * step - mu_em).norm() / target.norm())
    eta_per = sigma**2 / s  # one step size per component
    per_rel = float((mu0 + eta_per * step - mu_em).norm() / target.norm())
    xj_rel = _xu_jordan_residual(cfg.seed, cfg.n_xu_jordan)

    # trajectories to the common fixed point
    def loglik(mu: torch.Tensor) -> float:
        return float(-_loss_1d(x, mu, sigma)) / n

    iters = cfg.iterations
    em_path, gd_path = [loglik(mu0)], [loglik(mu0)]
    mu_e, mu_g = mu0.clone(), mu0.clone()
    for _ in range(iters):
        mu_e = _em_step_1d(x, mu_e, sigma)[0]
        mu_g = mu_g - eta_best * _gradient_1d(x, mu_g, sigma)
        em_path.append(loglik(mu_e))
        gd_path.append(loglik(mu_g))
    optimum = max(max(em_path), max(gd_path))

    def reach(path: list[float]) -> int:
        return next((i for i, v in enumerate(path) if optimum - v <= 1e-8), -1)

    em_iters, gd_iters = reach(em_path), reach(gd_path)

    etas = torch.linspace(0.0, 2.5 * float(eta_per.max()), 200, dtype=_F64)
    errs = [float((mu0 + e * step - mu_em).norm() / target.norm()) for e in etas]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    a1.plot(etas.numpy(), errs)
    for j, e in enumerate(eta_per.tolist()):
        a1.axvline(e, color=f"C{j + 1}", ls="--", label=f"σ²/S_{j + 1} = {e:.2e}")
    a1.axvline(eta_best, color="k", lw=0.8, label=f"best single η = {eta_best:.2e}")
    a1.set_xlabel("step size η")
    a1.set_ylabel("‖μ_GD(η) − μ_EM‖ / ‖μ_EM − μ‖")
    a1.set_title("one step from the same start")
    a1.legend(fontsize=7)
    a2.semilogy([max(optimum - v, 1e-16) for v in em_path], label="EM")
    a2.semilogy([max(optimum - v, 1e-16) for v in gd_path], label="GD, best single η")
    a2.set_xlabel("iteration")
    a2.set_ylabel("nats/sample below the fixed point")
    a2.set_title("paths to the same fixed point")
    a2.legend(fontsize=8)
    fig.tight_layout()
    figure = ctx.save_figure(fig, "gd_vs_em_step")

    single = criterion("best single step: relative error vs EM update", best_rel, "<", cfg.single_step_tol)
    preconditioned = criterion(
        "preconditioned steps (σ²/S_j and Xu–Jordan): max relative error vs EM update",
        max(per_rel, xj_rel),
        "<=",
        cfg.preconditioned_tol,
    )
    verdict: Verdict = "SUPPORTED" if single.passed else ("REFUTED" if preconditioned.passed else "PARTIAL")
    summary = (
        f"A gradient step is not EM's M-step: the best single step size leaves {100 * best_rel:.1f}% of the EM update "
        f"unmatched (S_1 = {float(s[0]):.0f} ≠ S_2 = {float(s[1]):.0f}); EM is the gradient step preconditioned per "
        f"component (σ²/S_j, and Σ_j/N_j for full covariances: residual {max(per_rel, xj_rel):.1e}). EM reached the "
        f"fixed point in {em_iters} iterations, gradient descent with that step in "
        f"{gd_iters if gd_iters >= 0 else f'more than {iters}'}."
    )
    return Result(
        verdict,
        summary,
        {
            "S_j (soft counts)": [float(v) for v in s],
            "per-component EM step sizes σ²/S_j": [float(v) for v in eta_per],
            "best single step size": eta_best,
            "best single step: relative error vs EM update": best_rel,
            "per-component steps: relative error vs EM update": per_rel,
            "Xu–Jordan full covariance (D=3, K=4): relative error": xj_rel,
            "EM iterations to fixed point (1e-8 nats)": em_iters,
            "GD iterations to fixed point (1e-8 nats)": gd_iters,
            "n": n,
        },
        [single, preconditioned],
        [figure],
        details="The paper's own §3.2 narrows 'implicit EM' to responsibility-weighted updates and cites Xu & Jordan "
        "for the preconditioner; the audit confirms that reading (the gradient is the responsibility-weighted "
        "direction, and EM is that gradient under a per-component preconditioner) and refutes the stronger wording "
        "of §1.4 that gradient descent 'realizes' EM: with any single step size the two updates differ, and so "
        f"do their paths (log10 of the best single-step error: {math.log10(best_rel):.2f}).",
    )


EXPERIMENT = Experiment(
    name="gd_vs_em_step",
    title="A gradient step versus EM's M-step",
    claim="This identity implies that gradient descent on distance-based log-sum-exp objectives performs implicit "
    "expectation-maximization. The E-step is the forward pass, the M-step is the parameter update [...] Neural "
    "training does not approximate EM in this setting; it realizes it.",
    source="paper §1.4 (One interpretation), §3.2; review-implicit-em skeptic's concrete test; Xu & Jordan (1996)",
    Config=Config,
    run=run,
)
