r"""The one-cluster escape of ``mixing_weight_escape``: data, E-step, the five update rules, a batched runner and
the directions along a path (Zhang, Poupart & Trimponias 2019 as in the classical EM literature; Xu & Jordan 1996).

Two components with identity covariances (known), float64, full batch; component 0 is the one cluster, component 1
starts with weight w₀. Every rule is written from the sufficient statistics N_j = Σ_i r_ij, S_j = Σ_i r_ij x_i of
one E-step, and a batch of B runs (one per start and step size) advances together.
"""

import math
import warnings
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor

from implicit_em.distances import gaussian_energies
from implicit_em.objectives import mixture_nll

__all__ = [
    "RunSettings",
    "Sample",
    "autograd_ascent",
    "best_step",
    "data_set",
    "directions",
    "estep",
    "gradient",
    "gradient_miss",
    "library_checks",
    "sample",
    "seed_run",
    "start",
    "trajectories",
    "update",
    "xu_jordan",
]

F64 = torch.float64
STEPPED = ("gd", "xj", "projected")  # the methods run over the step grid, their best admissible step kept
BIG, SMALL = 0, 1  # component indices: the one cluster, and the one with weight w₀
_ADAM_BETAS, _ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults
# run status codes
RUNNING, WINDOW, DONE, DESCENT, CENSORED, SLOWER = range(6)
_BLOCK = 64  # iterations between reads of the records (the statuses do not depend on it)


class RunSettings(Protocol):
    """What the runner reads from an experiment's ``Config``."""

    @property
    def offset(self) -> float: ...  # the small component's start, offset·√λ₁ along the first principal axis
    @property
    def escape_weight(self) -> float: ...
    @property
    def cap(self) -> int: ...
    @property
    def post_escape(self) -> int: ...
    @property
    def checkpoints(self) -> int: ...
    @property
    def ascent_slack(self) -> float: ...


# --- data, start, E-step and the updates -------------------------------------------------------------------------


def data_set(n: int, separation: float, seed: int) -> Tensor:
    """n samples of ½N((−s, 0), I) + ½N((s, 0), I), float64, shape (N, 2)."""
    g = torch.Generator().manual_seed(seed)
    side = torch.randint(0, 2, (n,), generator=g, dtype=F64) * 2 - 1
    centres = torch.stack([side * separation, torch.zeros(n, dtype=F64)], 1)
    return centres + torch.randn(n, 2, generator=g, dtype=F64)


def start(x: Tensor, w0: Tensor, offset: float) -> tuple[Tensor, Tensor]:
    """The one-cluster start for each w₀: weights (B, 2) = (1 − w₀, w₀), means (B, 2, D) = (x̄, x̄ + offset·√λ₁v₁)."""
    xbar = x.mean(0)
    evals, evecs = torch.linalg.eigh(torch.cov(x.T))
    small = xbar + offset * evals[-1].sqrt() * evecs[:, -1]
    b = w0.shape[0]
    means = torch.stack([xbar, small]).expand(b, 2, x.shape[1]).clone()
    return torch.stack([1 - w0, w0], 1), means


class Sample(NamedTuple):
    """The data and the sums every E-step reuses."""

    x: Tensor  # (N, D)
    ones_x: Tensor  # (N, 1 + D): [1, x], so N_c and S_c come out of one product
    total: Tensor  # Σ_i x_i, (D,)
    xbar: Tensor  # (D,)
    vbar: Tensor  # mean |x − x̄|², a scalar


def sample(x: Tensor) -> Sample:
    xbar = x.mean(0)
    ones_x = torch.cat([torch.ones(x.shape[0], 1, dtype=x.dtype), x], 1)
    return Sample(x, ones_x, x.sum(0), xbar, (x - xbar).square().sum(1).mean())


def estep(data: Sample, alpha: Tensor, means: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""One E-step for B two-component models with identity covariances: N_j (B, 2), S_j (B, 2, D), ℓ (B,).

    .. math::  \Delta_i = \log\frac{\pi_c}{\pi_b} + x_i\cdot(\mu_c - \mu_b) - \tfrac12(|\mu_c|^2 - |\mu_b|^2),
               \quad r_{ic} = \sigma(\Delta_i),\quad
               \ell = \log\pi_b - \tfrac12\big(\bar v + |\bar x - \mu_b|^2\big) - \tfrac D2\log 2\pi
                      + \tfrac1N\sum_i \log(1 + e^{\Delta_i})

    with b the big and c the small component and v̄ = mean |x − x̄|². The log-odds form keeps the small
    component's responsibilities (down to ~1e-6 here) to full relative precision.
    """
    x = data.x
    n, d = x.shape
    mb, mc = means[:, BIG], means[:, SMALL]  # (B, D)
    const = (alpha[:, SMALL] / alpha[:, BIG]).log() - 0.5 * (mc.square().sum(1) - mb.square().sum(1))
    delta = x @ (mc - mb).T + const  # (N, B)
    stats = torch.sigmoid(delta).T @ data.ones_x  # (B, 1 + D): N_c, S_c
    nk = torch.stack([n - stats[:, 0], stats[:, 0]], 1)
    sx = torch.stack([data.total - stats[:, 1:], stats[:, 1:]], 1)
    base = alpha[:, BIG].log() - 0.5 * (data.vbar + (data.xbar - mb).square().sum(1)) - 0.5 * d * math.log(2 * math.pi)
    loglik = base - torch.sigmoid(-delta).log().mean(0)  # log(1 + e^Δ) = −log σ(−Δ)
    return nk, sx, loglik


def gradient(alpha: Tensor, means: Tensor, nk: Tensor, sx: Tensor, n: int) -> tuple[Tensor, Tensor]:
    r"""∇ℓ in (softmax logits θ, means): ∂ℓ/∂θ_j = N_j/N − π_j, ∂ℓ/∂μ_j = (S_j − N_j μ_j)/N (identity Σ_j).

    The logit gradient sums to zero; the big component's is taken as minus the small one's, which avoids the
    cancellation of N_b/N − π_b (both ≈ 1 at the one-cluster start).
    """
    g_small = nk[:, SMALL] / n - alpha[:, SMALL]
    return torch.stack([-g_small, g_small], 1), (sx - nk[..., None] * means) / n


def xu_jordan(alpha: Tensor, means: Tensor, nk: Tensor, sx: Tensor, n: int) -> tuple[Tensor, Tensor]:
    r"""P(θ)∇ℓ (Xu & Jordan 1996) on the free weights and the means.

    .. math::  P_A \nabla_\pi\ell = (\mathrm{diag}\,\pi - \pi\pi^\top)\,\frac{N_j}{N\pi_j},\qquad
               P_{\mu_j}\nabla_{\mu_j}\ell = \frac{N}{N_j}\,\Sigma_j\,\frac{S_j - N_j\mu_j}{N}

    (mean log-likelihood, so P is N times the sum form's); at step 1 it gives EM's update exactly.
    """
    grad_pi = nk / (n * alpha)
    pa = alpha * grad_pi - alpha * (alpha * grad_pi).sum(1, keepdim=True)
    return pa, (n / nk)[..., None] * gradient(alpha, means, nk, sx, n)[1]


def update(method: str, state: dict[str, Tensor], nk: Tensor, sx: Tensor, step: Tensor, t: int, n: int) -> None:
    """One iteration of ``method`` in place from the E-step's statistics (``state``: weights, means, moments)."""
    alpha, means = state["alpha"], state["means"]
    eta = step[:, None]
    if method == "em":
        state["alpha"], state["means"] = nk / n, sx / nk[..., None]
    elif method == "gd":
        g_theta, g_mu = gradient(alpha, means, nk, sx, n)
        state["alpha"] = torch.softmax(alpha.log() + eta * g_theta, 1)
        state["means"] = means + eta[..., None] * g_mu
    elif method == "xj":
        p_alpha, p_mu = xu_jordan(alpha, means, nk, sx, n)
        state["alpha"], state["means"] = alpha + eta * p_alpha, means + eta[..., None] * p_mu
    elif method == "projected":  # Euclidean projection onto the 2-simplex: shift to sum 1, clip the small weight
        grad_pi = nk / (n * alpha)
        moved = (alpha + eta * (grad_pi - grad_pi.mean(1, keepdim=True)))[:, SMALL].clamp(0.0, 1.0)
        state["alpha"] = torch.stack([1 - moved, moved], 1)
        state["means"] = means + eta[..., None] * gradient(alpha, means, nk, sx, n)[1]
    elif method == "adam":  # torch.optim.Adam on the loss −ℓ over (θ, μ), written out for a batch of runs
        g_theta, g_mu = gradient(alpha, means, nk, sx, n)
        (b1, b2), c1, c2 = _ADAM_BETAS, 1 - _ADAM_BETAS[0] ** (t + 1), 1 - _ADAM_BETAS[1] ** (t + 1)
        theta = alpha.log()
        for name, p, g in (("theta", theta, -g_theta), ("means", means, -g_mu)):
            m = state[f"m_{name}"].mul_(b1).add_((1 - b1) * g)
            v = state[f"v_{name}"].mul_(b2).add_((1 - b2) * g * g)
            lr = step.view(-1, *[1] * (p.dim() - 1))
            new = p - lr / c1 * m / (v.sqrt() / math.sqrt(c2) + _ADAM_EPS)
            state["alpha" if name == "theta" else "means"] = torch.softmax(new, 1) if name == "theta" else new
    else:
        raise ValueError(f"unknown method {method!r}")


# --- the batched runner ---------------------------------------------------------------------------------------


def _checkpoints(cap: int, count: int) -> list[int]:
    """0 and about ``count`` log-spaced iterations up to ``cap``: where the GD path's directions are compared."""
    return sorted({0, *(round(float(v)) for v in np.geomspace(1, cap, count))})


def trajectories(
    data: Sample, method: str, w0: Tensor, step: Tensor, group: Tensor, cfg: RunSettings, select: bool = True
) -> dict[str, Any]:
    """B runs of ``method`` in one batch, run b from the one-cluster start with weight w0[b] and step step[b].

    Each iteration is an E-step (ℓ and the small weight recorded) and an update. Every ``_BLOCK`` iterations (and
    at the cap) the records are read: the escape (first iteration with π_c > ``escape_weight``) and the first
    descent of ℓ (beyond ``ascent_slack``). With ``select``, a run that descends before ``post_escape`` iterations
    after its escape is inadmissible; a run is done ``post_escape`` iterations after an admissible escape; runs
    of a ``group`` (one start) that have not escaped when another run of the group is done are stopped as slower
    (they cannot be its best step). Runs that reach the cap without escaping are censored. Without ``select``
    (Adam) runs go on to their escape window or the cap whatever ℓ does.
    Returns per run: status, escape iteration (−1: none), first descent (−1: none), the small weight at every
    iteration, and the parameters at the checkpoints and at the escape.
    """
    x, n, b = data.x, data.x.shape[0], w0.shape[0]
    alpha, means = start(x, w0, cfg.offset)
    state = {"alpha": alpha, "means": means}
    if method == "adam":
        for name, like in (("theta", alpha), ("means", means)):
            state[f"m_{name}"], state[f"v_{name}"] = torch.zeros_like(like), torch.zeros_like(like)
    status, escape, descent = (torch.full((b,), v) for v in (RUNNING, -1, -1))
    last = torch.full((b,), -math.inf, dtype=F64)  # ℓ at the previous iteration
    small = torch.full((b, cfg.cap + 1), math.nan, dtype=F64)
    loglik_rec = torch.full((b, cfg.cap + 1), math.nan, dtype=F64)
    marks = _checkpoints(cfg.cap, cfg.checkpoints)
    saved = {"alpha": torch.full((b, len(marks), 2), math.nan, dtype=F64)}
    saved["means"] = torch.full((b, len(marks), 2, x.shape[1]), math.nan, dtype=F64)
    at_escape = {"alpha": alpha.clone(), "means": means.clone()}
    live, sub, t0 = torch.arange(b), dict(state), 0
    for t in range(cfg.cap + 1):
        nk, sx, loglik = estep(data, sub["alpha"], sub["means"])
        loglik_rec[live, t], small[live, t] = loglik, sub["alpha"][:, SMALL]
        if t in marks:
            saved["alpha"][live, marks.index(t)], saved["means"][live, marks.index(t)] = sub["alpha"], sub["means"]
        new = (escape[live] < 0) & (sub["alpha"][:, SMALL] > cfg.escape_weight)
        if bool(new.any()):
            at_escape["alpha"][live[new]], at_escape["means"][live[new]] = sub["alpha"][new], sub["means"][new]
        if t == cfg.cap or (t + 1) % _BLOCK == 0:  # read the block's records
            _read_block(cfg, live, t0, t, small, loglik_rec, last, escape, descent, status, select)
            if select:
                for gid in group[status == DONE].unique():
                    status[(group == gid) & (status == RUNNING) & (escape < 0)] = SLOWER
            keep = (status[live] == RUNNING) | (status[live] == WINDOW)
            live, nk, sx, t0 = live[keep], nk[keep], sx[keep], t + 1
            sub = {k: v[keep] for k, v in sub.items()}
            if live.numel() == 0:
                break
        if t < cfg.cap:
            update(method, sub, nk, sx, step[live], t, n)
    return {
        "status": status,
        "escape": escape,
        "descent": descent,
        "small": small,
        "marks": marks,
        "saved": saved,
        "at_escape": at_escape,
    }


def _read_block(
    cfg: RunSettings,
    live: Tensor,
    t0: int,
    t1: int,
    small: Tensor,
    loglik: Tensor,
    last: Tensor,
    escape: Tensor,
    descent: Tensor,
    status: Tensor,
    select: bool,
) -> None:
    """Escapes, descents and statuses of the ``live`` runs from their records at iterations t0..t1 (in place)."""
    ll = torch.cat([last[live, None], loglik[live, t0 : t1 + 1]], 1)  # (L, 1 + T)
    drop = ~torch.isfinite(ll[:, 1:]) | (ll[:, 1:] < ll[:, :-1] - cfg.ascent_slack * ll[:, :-1].abs())
    last[live] = ll[:, -1]
    iters = torch.arange(t0, t1 + 1)
    first_drop = torch.where(drop, iters, cfg.cap + 1).amin(1)
    first_escape = torch.where(small[live, t0 : t1 + 1] > cfg.escape_weight, iters, cfg.cap + 1).amin(1)
    esc, des = escape[live], descent[live]
    esc = torch.where((esc < 0) & (first_escape <= cfg.cap), first_escape, esc)
    des = torch.where((des < 0) & (first_drop <= cfg.cap), first_drop, des)
    escape[live], descent[live] = esc, des
    st = status[live]
    st[esc >= 0] = WINDOW
    window_end = torch.where(esc >= 0, esc + cfg.post_escape, cfg.cap + 1)
    st[(esc >= 0) & (t1 >= window_end)] = DONE
    if t1 == cfg.cap:
        st[st == WINDOW] = DONE  # the window is cut by the cap
        st[st == RUNNING] = CENSORED
    if select:
        st[(des >= 0) & (des <= window_end)] = DESCENT
    status[live] = st


def best_step(out: dict[str, Any], steps: tuple[float, ...], k: int) -> dict[str, Any]:
    """For start k of a stepped run: the admissible step that escapes first, or censored / no admissible step."""
    s = len(steps)
    status, escape = out["status"][k * s : (k + 1) * s], out["escape"][k * s : (k + 1) * s]
    done = (status == DONE).nonzero().squeeze(1)
    top_descends = bool(status[-1] == DESCENT)
    if done.numel():
        i = int(done[escape[done].argmin()])
        return {"escape": int(escape[i]), "step": steps[i], "path": k * s + i, "top descends": top_descends}
    censored = (status == CENSORED).nonzero().squeeze(1)
    if censored.numel():  # the path shown is the largest censored step's, up to the cap
        i = int(censored.max())
        return {"escape": None, "outcome": "censored", "step": None, "path": k * s + i, "top descends": top_descends}
    return {"escape": None, "outcome": "no admissible step", "step": None, "path": None, "top descends": top_descends}


def autograd_ascent(x: Tensor, alpha: Tensor, means: Tensor, free: bool = False) -> tuple[Tensor, Tensor]:
    """∇ℓ by autograd of the library's loss (``mixture_nll`` of ``gaussian_energies``, identity covariances): in
    softmax logits θ = log π and means, as ``_gd.batch_loss`` differentiates it, or (``free``) in the free weights
    π (log π passed unnormalised: ∂ℓ/∂π_j = N_j/(Nπ_j), Xu & Jordan's gradient)."""
    w = (alpha if free else alpha.log()).clone().requires_grad_(True)
    mu = means.clone().requires_grad_(True)
    energies = gaussian_energies(x, mu, torch.ones(2, dtype=x.dtype), "spherical")
    log_w = w.log() if free else torch.log_softmax(w, 0)
    g_w, g_mu = torch.autograd.grad(-mixture_nll(energies, log_w).mean(), [w, mu])
    return g_w, g_mu


def gradient_miss(
    alpha: Tensor, means: Tensor, nk: Tensor, sx: Tensor, n: int, ref_theta: Tensor, ref_mu: Tensor
) -> float:
    """:func:`gradient` against autograd at one state, the larger block miss relative to the size of the terms
    each gradient is a difference of (N_j/N and π_j; S_j/N and N_j μ_j/N). Near a stationary point the gradient
    itself is such a difference, so relative to the gradient a correct evaluation would read as round-off ε/|∇|."""
    g_theta, g_mu = gradient(alpha[None], means[None], nk[None], sx[None], n)
    theta_scale = torch.maximum(nk / n, alpha).amax()
    mu_scale = ((sx.abs() + nk[:, None] * means.abs()) / n).amax()
    return max(
        float((g_theta[0] - ref_theta).abs().amax() / theta_scale), float((g_mu[0] - ref_mu).abs().amax() / mu_scale)
    )


def _rel(a: Tensor, b: Tensor) -> float:
    """max|a − b| / max|b|."""
    return float((a - b).abs().amax() / b.abs().amax())


def _angle(u: Tensor, v: Tensor) -> float:
    """The angle between u and v in radians, 2·atan2(‖û − v̂‖, ‖û + v̂‖) (accurate near 0 and π, Kahan)."""
    u, v = u.flatten() / u.norm(), v.flatten() / v.norm()
    return float(2 * torch.atan2((u - v).norm(), (u + v).norm()))


def directions(data: Sample, out: dict[str, Any], run: int | None) -> dict[str, Any] | None:
    """Along run ``run`` (its checkpoints up to its escape and the escape, or to the cap): GD's direction against
    EM's step.

    At each state (π, μ): u = ∇ℓ in (θ, μ) by autograd of the library's loss (GD's direction; the logit part sums
    to zero), v = (centred log(π^EM/π), μ^EM − μ) from :func:`estep` (EM's step in the same coordinates). Returns
    the small weight, the angle ∠(u, v), the larger of the two per-mean-block angles (zero by Fisher's identity),
    the Xu–Jordan step P∇ℓ (free-weight autograd gradient) against EM's step (relative miss), the analytic
    gradient of :func:`gradient` against autograd (relative miss), and the equivalent step: the η with which
    GD's small logit would move as far as EM's, v_c/u_c.
    """
    if run is None:
        return None
    esc = int(out["escape"][run])
    saved = out["saved"]
    states = [
        (saved["alpha"][run, i], saved["means"][run, i])
        for i, t in enumerate(out["marks"])
        if (t < esc or esc < 0) and bool(torch.isfinite(saved["alpha"][run, i]).all())
    ]
    if esc >= 0:
        states.append((out["at_escape"]["alpha"][run], out["at_escape"]["means"][run]))
    keys = (
        "small",
        "angle",
        "block angle",
        "xu-jordan miss",
        "gradient miss",
        "equivalent step",
    )
    rows: dict[str, Any] = {k: [] for k in keys}
    rows["escaped"] = esc >= 0
    n = data.x.shape[0]
    for alpha, means in states:
        nk, sx, _ = estep(data, alpha[None], means[None])
        nk, sx = nk[0], sx[0]
        em_alpha, em_means = nk / n, sx / nk[:, None]
        g_theta, g_mu = autograd_ascent(data.x, alpha, means)
        log_ratio = (em_alpha / alpha).log()
        v = torch.cat([log_ratio - log_ratio.mean(), (em_means - means).flatten()])
        rows["small"].append(float(alpha[SMALL]))
        rows["angle"].append(_angle(torch.cat([g_theta, g_mu.flatten()]), v))
        rows["equivalent step"].append(float(v[SMALL] / g_theta[SMALL]))  # the η that moves θ_c as EM does
        rows["block angle"].append(max(_angle(g_mu[j], em_means[j] - means[j]) for j in (BIG, SMALL)))
        g_pi, _ = autograd_ascent(data.x, alpha, means, free=True)
        xj_alpha = alpha + alpha * g_pi - alpha * (alpha * g_pi).sum()
        xj_means = means + (n / nk)[:, None] * g_mu
        rows["xu-jordan miss"].append(max(_rel(xj_alpha, em_alpha), _rel(xj_means, em_means)))
        rows["gradient miss"].append(gradient_miss(alpha, means, nk, sx, n, g_theta, g_mu))
    return rows


# --- one data set: every method from every start, and the checks against the library --------------------------


def seed_run(
    data: Sample,
    w0s: tuple[float, ...],
    steps: tuple[float, ...],
    adam_lrs: tuple[float, ...],
    cfg: RunSettings,
) -> dict[str, Any]:
    """Every method from the one-cluster start at every w₀ (K starts) on one data set: per method and start the best
    step (Adam: every learning rate), EM's ascent, the library checks, the directions along GD's best path and
    EM's path, and the small weight per iteration (for the figure)."""
    w0 = torch.tensor(w0s, dtype=F64)
    k = len(w0s)
    runs: dict[str, dict[str, Any]] = {}
    best: dict[str, list[Any]] = {}
    for method in ("em", *STEPPED, "adam"):
        grid = adam_lrs if method == "adam" else steps if method in STEPPED else (1.0,)
        s = len(grid)
        group = torch.arange(k * s) if method == "adam" else torch.arange(k).repeat_interleave(s)
        step = torch.tensor(grid, dtype=F64).repeat(k)
        out = trajectories(data, method, w0.repeat_interleave(s), step, group, cfg, select=method != "adam")
        runs[method] = out
        if method == "adam":
            best[method] = [
                [
                    {"escape": int(e) if e >= 0 else None, "descends": bool(out["descent"][i * s + j] >= 0)}
                    for j, e in enumerate(out["escape"][i * s : (i + 1) * s].tolist())
                ]
                for i in range(k)
            ]
        else:
            best[method] = [best_step(out, grid, i) for i in range(k)]
    em = runs["em"]
    return {
        "best": best,
        "em ascends and escapes": [bool(em["status"][i] == DONE) and int(em["descent"][i]) < 0 for i in range(k)],
        "library": library_checks(data, w0, cfg.offset),
        "gd path": [directions(data, runs["gd"], b["path"]) for b in best["gd"]],
        "em path": [directions(data, em, i) for i in range(k)],
        "small weight": {
            m: [runs[m]["small"][b["path"]] if b["path"] is not None else None for b in best[m]] for m in ("gd", "xj")
        }
        | {"em": [em["small"][i] for i in range(k)]},
    }


def library_checks(data: Sample, w0: Tensor, offset: float) -> dict[str, float]:
    """At every start (w0: (K,)): our EM step against one iteration of ``GaussianMixture(fitter="em")`` (weights,
    means, and ℓ), our gradient against autograd of the library's loss; each the largest relative miss."""
    from implicit_em.mixture import GaussianMixture

    alpha, means = start(data.x, w0, offset)
    nk, sx, loglik = estep(data, alpha, means)
    em_miss, ll_miss, grad_miss = 0.0, 0.0, 0.0
    for i in range(w0.shape[0]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning: one iteration is the point
            gm = GaussianMixture(
                2,
                covariance_type="spherical",
                weights_init=alpha[i].numpy(),
                means_init=means[i].numpy(),
                precisions_init=np.ones(2),
                max_iter=1,
                split_merge=0,
                dtype="float64",
            ).fit(data.x.numpy())
        ours_w, ours_mu = (nk[i] / data.x.shape[0]).numpy(), (sx[i] / nk[i][:, None]).numpy()
        em_miss = max(em_miss, float(np.max(np.abs(gm.weights_ - ours_w) / ours_w)))
        em_miss = max(em_miss, float(np.max(np.abs(gm.means_ - ours_mu)) / np.max(np.abs(ours_mu))))
        ll_miss = max(ll_miss, abs(gm.history_[0]["loglik"] - float(loglik[i])) / abs(float(loglik[i])))
        ref_theta, ref_mu = autograd_ascent(data.x, alpha[i], means[i])
        grad_miss = max(grad_miss, gradient_miss(alpha[i], means[i], nk[i], sx[i], data.x.shape[0], ref_theta, ref_mu))
    return {"em step": em_miss, "loglik": ll_miss, "gradient": grad_miss}
