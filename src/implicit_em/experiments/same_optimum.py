r"""EM and gradient descent on the same mixture objective: same fixed points, same path? (paper §4.1)

Claim (paper §4.1, of gradient descent on :math:`L = -\log\sum_j \exp(-d_j)`): "This regime optimizes the same
objective as classical EM on mixture models, with the same responsibilities governing both the fixed points and
the path toward them." The two halves are tested separately.

Method. Data from a known full-covariance mixture (quick: K = 4, D = 2, N = 5000; full: K = 8, D = 8,
N = 50,000) and a held-out set. ``n_starts`` starts away from the optimum, each K distinct data rows as means,
the data's covariance for every component and equal weights (``random_from_data`` means with a non-degenerate
covariance). From each start the library's three fitters run ``passes`` passes over the data: batch EM
(:func:`~implicit_em.mixture._em.fit_em`, one iteration per pass), online EM
(:func:`~implicit_em.mixture._online_em.fit_online_em`, one epoch per pass, its state carried on, so the passes
are one continuous run) and gradient descent (:func:`~implicit_em.mixture._gd.fit_gd`: Adam on the exact
negative log-likelihood, i.e. implicit EM, the library's schedule, read after every epoch by its callback).
Every fitter's parameters after every pass are scored by one full-data scorer, the library's exact mean
log-likelihood (``_fitting._mean_loglik``, what ``GaussianMixture.score`` computes), so no fitter's own log
(EM's pre-update value, the running mini-batch average of online EM and gd) enters a comparison.

Fixed points: run EM to convergence from gradient descent's end point; at an EM fixed point it gains nothing and
moves nothing. Path: the gap between two trajectories from the same start is the largest difference over passes
1..P of their full-data log-likelihoods (nats/sample), and of their means (component by component, in data
standard deviations).

Controls. (i) The fixed-point test applied to the start: EM (its P passes) must gain more than the tolerance
there (else the start is already a fixed point and the test has no power: the old experiment's flaw). (ii) The
path test applied to EM from two different starts (means matched by Hungarian assignment at every pass): the gap
must exceed the tolerance (else the metric cannot tell paths apart). (iii) Gradient descent's own path noise: gd again
with another mini-batch order; the path tolerance is the larger of the fixed one and this floor, so gd is only
asked to follow EM's path as closely as it follows its own. (iv) Reported: gd at half the learning rate and
online EM, two responsibility-driven methods, against EM's path. Also reported, not deciding (added after the
first run, to separate route from pace): the largest distance of gd's means (all K as one vector) from the
polyline through EM's iterates, whatever the pace, against gd with another mini-batch order from gd's route.

Verdict. Fixed-point half: at every start, EM from gd's end gains at most ``fixed_gain_max`` (0.01 nats/sample)
and moves the means by at most ``fixed_move_max`` (0.1 data std). Path half: at every start, gd's path gap to
EM is at most max(``path_gap_max`` (0.01 nats/sample), control iii) and its means gap at most
max(``path_means_max`` (0.1 data std), control iii). SUPPORTED if both halves hold and controls (i) and (ii)
pass; PARTIAL if exactly one half holds, or both with a failed control (then a half may hold vacuously);
REFUTED if neither holds.

Earlier rule (replaced, issue 10): one k-means start, which at the full size already was EM's optimum (EM's
history flat from its first iteration), and "passes to come within 0.01 nats of EM's final value", read from
each fitter's own log. The passes to come within 0.01 nats of EM's end from each start are still reported, on
the full-data scorer, as the pace; they no longer decide.
"""

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.experiments._base import Context, Criterion, Experiment, Result, Verdict, criterion, pyplot

__all__ = [
    "EXPERIMENT",
    "Config",
    "decide",
    "em_path",
    "em_polish",
    "gd_path",
    "matched_gap",
    "off_path",
    "online_em_path",
    "passes_to",
    "path_gap",
    "run",
    "score",
]

COVARIANCE = "full"
REG_COVAR = 1e-6  # the library's default


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0  # truth and data (seed, seed + 1), starts and mini-batch orders (seed + 2, ...)
    k: int = 4  # components of the true mixture and of every fit
    d: int = 2  # dimension
    n: int = 5000  # training samples (and n // 2 held out)
    n_starts: int = 3  # starts away from the optimum (the issue asks for at least 3)
    passes: int = 60  # passes over the data every fitter gets (EM iterations, epochs)
    batch_size: int = 256  # mini-batch rows of online EM and gd
    learning_rate: float = 0.01  # gd's initial Adam rate (the library's default), halved on plateaus
    tol: float = 1e-5  # gd's plateau rule (as in the earlier version of this experiment)
    polish_iter: int = 1000  # EM iterations run from gd's end (and from the start) in the fixed-point test
    polish_tol: float = 1e-9  # their stopping rule, |Δ mean log-likelihood|
    # verdict thresholds (module docstring). Fixed points: the tolerance of the earlier version of this
    # experiment, 0.01 nats/sample and 0.1 data standard deviations, now asked of EM run on from gd's end.
    fixed_gain_max: float = 0.01
    fixed_move_max: float = 0.1
    # Path: the same two tolerances asked at every pass instead of only at the end (a path is "the same" to the
    # precision the end points are), floored by gd's own path noise (control iii).
    path_gap_max: float = 0.01
    path_means_max: float = 0.1

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(k=8, d=8, n=50_000, n_starts=5, batch_size=1024)


# -- data and starts ---------------------------------------------------------------------------------------------


def _truth(k: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    means = rng.randn(k, d) * 3
    a = rng.randn(k, d, d) / np.sqrt(d)
    covs = a @ a.transpose(0, 2, 1) + 0.2 * np.eye(d)
    weights = rng.dirichlet(5 * np.ones(k))
    return weights, means, covs


def _draw(weights: np.ndarray, means: np.ndarray, covs: np.ndarray, n: int, rng: np.random.RandomState) -> np.ndarray:
    z = rng.choice(len(weights), size=n, p=weights)
    chol = np.linalg.cholesky(covs)
    return means[z] + np.einsum("nab,nb->na", chol[z], rng.randn(n, means.shape[1]))


def _start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """K distinct data rows as means, the data's covariance (+ reg_covar) for every component, equal weights."""
    from implicit_em import gaussian
    from implicit_em.mixture._stats import MixtureParams

    means = torch.from_numpy(x[rng.choice(len(x), size=k, replace=False)].copy())
    cov = torch.from_numpy(np.cov(x, rowvar=False, bias=True).reshape(x.shape[1], x.shape[1]))
    covs = (cov + REG_COVAR * torch.eye(x.shape[1], dtype=torch.float64)).expand(k, -1, -1).clone()
    prec_chol = gaussian.precisions_cholesky(covs, COVARIANCE)
    return MixtureParams(torch.full((k,), 1.0 / k, dtype=torch.float64), means, covs, prec_chol)


def _shift_scale(x: Tensor) -> tuple[Tensor, float]:
    """The centre and scalar scale ``GaussianMixture`` gives its fitters (the data mean, the rms std)."""
    return x.mean(0), float(x.var(0, unbiased=False).mean().sqrt())


# -- the three fitters, read after every pass ------------------------------------------------------------------


def em_path(data: Any, start: Any, shift: Tensor, passes: int) -> list[Any]:
    """Batch EM: the parameters after 0, 1, ..., ``passes`` iterations (EM carries no state between them)."""
    from implicit_em.mixture._em import fit_em
    from implicit_em.mixture._fitting import CHUNK

    path = [start]
    for _ in range(passes):
        result = fit_em(
            data,
            path[-1],
            covariance_type=COVARIANCE,
            reg_covar=REG_COVAR,
            tol=0.0,
            max_iter=1,
            shift=shift,
            batch_size=CHUNK,
        )
        path.append(result.params)
    return path


def online_em_path(data: Any, start: Any, shift: Tensor, passes: int, batch_size: int, seed: int) -> list[Any]:
    """Online EM: the parameters after 0, 1, ..., ``passes`` epochs of one continuous run (the running statistics
    and the step count carried from epoch to epoch; no final exact EM iteration)."""
    from implicit_em.mixture._online_em import fit_online_em

    generator = torch.Generator().manual_seed(seed)
    path, state = [start], None
    for _ in range(passes):
        result, state = fit_online_em(
            data,
            path[-1],
            covariance_type=COVARIANCE,
            reg_covar=REG_COVAR,
            tol=0.0,
            max_iter=1,
            shift=shift,
            batch_size=batch_size,
            generator=generator,
            state=state,
            final_em_steps=0,
        )
        path.append(result.params)
    return path


def gd_path(
    data: Any,
    start: Any,
    shift: Tensor,
    scale: float,
    passes: int,
    batch_size: int,
    learning_rate: float,
    tol: float,
    seed: int,
) -> tuple[list[Any], int]:
    """Gradient descent (``fit_gd``, Adam, the library's plateau schedule): the parameters after 0, 1, ...
    epochs, read by its callback, and held at its end point after it converges; returns them and the epochs run."""
    from implicit_em.mixture._gd import fit_gd, make_state, state_params

    state = make_state(start, COVARIANCE, shift, scale, learning_rate, "adam")
    path = [start]

    def after_epoch(epoch: int, loglik: float, seconds: float, usage: Tensor) -> None:
        path.append(state_params(state, COVARIANCE, shift, scale))

    result, _ = fit_gd(
        data,
        start,
        covariance_type=COVARIANCE,
        tol=tol,
        max_iter=passes,
        shift=shift,
        scale=scale,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
        learning_rate=learning_rate,
        optimizer="adam",
        state=state,
        callback=after_epoch,
    )
    epochs = len(path) - 1
    return path + [path[-1]] * (passes - epochs), int(result.n_iter)


# -- one scorer, the fixed-point test, the path gap -----------------------------------------------------------


def score(data: Any, params: Any, shift: Tensor) -> float:
    """The exact mean log-likelihood per sample of all of ``data`` under ``params``: the one scorer."""
    from implicit_em.mixture._fitting import _mean_loglik

    return float(_mean_loglik(data, params, COVARIANCE, shift))


def em_polish(data: Any, params: Any, shift: Tensor, max_iter: int, tol: float) -> tuple[float, float, Any]:
    """Run EM from ``params`` until |Δ| < tol: (log-likelihood gained, largest mean moved, the end point).

    Both are zero at an EM fixed point. The move is in the data's units (components keep their labels under EM).
    """
    from implicit_em.mixture._em import fit_em
    from implicit_em.mixture._fitting import CHUNK

    end = fit_em(
        data,
        params,
        covariance_type=COVARIANCE,
        reg_covar=REG_COVAR,
        tol=tol,
        max_iter=max_iter,
        shift=shift,
        batch_size=CHUNK,
    ).params
    gain = score(data, end, shift) - score(data, params, shift)
    move = float((end.means - params.means).norm(dim=1).max())
    return gain, move, end


def matched_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Largest distance between the means of a and b (K, D) after the Hungarian matching of their components."""
    from scipy.optimize import linear_sum_assignment

    dist = np.linalg.norm(a[:, None] - b[None], axis=-1)
    rows, cols = linear_sum_assignment(dist)
    return float(dist[rows, cols].max())


def path_gap(
    ll_a: list[float], ll_b: list[float], mu_a: list[np.ndarray], mu_b: list[np.ndarray], match: bool
) -> tuple[float, float]:
    """(largest |Δ log-likelihood|, largest mean distance) over passes 1..P of two trajectories; component by
    component (same start, same labels) or, with ``match``, after the Hungarian matching at every pass."""
    if len(ll_a) != len(ll_b) or len(mu_a) != len(mu_b) or len(ll_a) != len(mu_a):
        raise ValueError(f"trajectories of different lengths: {len(ll_a)}, {len(ll_b)}, {len(mu_a)}, {len(mu_b)}")
    gap = max(abs(a - b) for a, b in zip(ll_a[1:], ll_b[1:], strict=True))
    if match:
        means = max(matched_gap(a, b) for a, b in zip(mu_a[1:], mu_b[1:], strict=True))
    else:
        means = max(float(np.linalg.norm(a - b, axis=-1).max()) for a, b in zip(mu_a[1:], mu_b[1:], strict=True))
    return float(gap), means


def off_path(points: list[np.ndarray], path: list[np.ndarray]) -> float:
    """Largest distance from any of ``points`` to the polyline through ``path`` (all K means as one vector):
    how far a trajectory strays from another one's route, whatever its pace."""
    route = [p.ravel() for p in path]
    worst = 0.0
    for q in (p.ravel() for p in points):
        best = math.inf
        for a, b in itertools.pairwise(route):
            ab = b - a
            t = float(np.clip(np.dot(q - a, ab) / max(float(np.dot(ab, ab)), 1e-300), 0.0, 1.0))
            best = min(best, float(np.linalg.norm(q - a - t * ab)))
        worst = max(worst, best)
    return worst


def passes_to(curve: list[float], target: float, tol: float) -> int:
    """The first pass p ≥ 1 whose log-likelihood is within tol of target (-1 if none)."""
    return next((p for p, v in enumerate(curve) if p >= 1 and v >= target - tol), -1)


def decide(fixed: bool, path: bool, controls: bool) -> Verdict:
    """The verdict rule of the module docstring."""
    if fixed and path:
        return "SUPPORTED" if controls else "PARTIAL"
    return "PARTIAL" if fixed or path else "REFUTED"


# -- the experiment --------------------------------------------------------------------------------------------


def run(cfg: Config, ctx: Context) -> Result:
    from implicit_em.mixture._data import DataSource

    truth = _truth(cfg.k, cfg.d, cfg.seed)
    rng = np.random.RandomState(cfg.seed + 1)
    x_np, x_test_np = _draw(*truth, cfg.n, rng), _draw(*truth, cfg.n // 2, rng)
    data = DataSource(x_np, torch.device("cpu"), torch.float64)
    test = DataSource(x_test_np, torch.device("cpu"), torch.float64)
    shift, scale = _shift_scale(torch.from_numpy(x_np))
    std = float(x_np.std())  # the unit of every means distance
    start_rng = np.random.RandomState(cfg.seed + 2)
    starts = [_start(x_np, cfg.k, start_rng) for _ in range(cfg.n_starts)]

    runs: list[dict[str, Any]] = []
    for s, start in enumerate(starts):
        order = 1000 * (cfg.seed + 3) + 10 * s  # mini-batch orders, distinct per start and arm
        paths: dict[str, list[Any]] = {"em": em_path(data, start, shift, cfg.passes)}
        paths["online_em"] = online_em_path(data, start, shift, cfg.passes, cfg.batch_size, order)
        epochs: dict[str, int] = {}
        arms = {"gd": (cfg.learning_rate, order), "gd, other order": (cfg.learning_rate, order + 1)}
        arms["gd, half the rate"] = (cfg.learning_rate / 2, order)
        for name, (lr, seed) in arms.items():
            paths[name], epochs[name] = gd_path(
                data, start, shift, scale, cfg.passes, cfg.batch_size, lr, cfg.tol, seed
            )
        curves = {name: [score(data, p, shift) for p in path] for name, path in paths.items()}
        means = {name: [p.means.numpy() / std for p in path] for name, path in paths.items()}
        gain_gd, move_gd, polished = em_polish(data, paths["gd"][-1], shift, cfg.polish_iter, cfg.polish_tol)
        gain_online, move_online, _ = em_polish(data, paths["online_em"][-1], shift, cfg.polish_iter, cfg.polish_tol)
        one_step = em_path(data, paths["gd"][-1], shift, 1)[-1]
        gaps = {
            name: path_gap(curves["em"], curves[name], means["em"], means[name], match=False)
            for name in ("gd", "online_em", "gd, half the rate")
        }
        route = {name: off_path(means[name], means[ref]) for name, ref in (("gd", "em"), ("gd, other order", "gd"))}
        floor = path_gap(curves["gd"], curves["gd, other order"], means["gd"], means["gd, other order"], match=False)
        target = curves["em"][-1]
        runs.append(
            {
                "curves": curves,
                "means": means,
                "epochs": epochs,
                "stopped": epochs["gd"] < cfg.passes,  # gd's own plateau rule declared convergence
                "least_weight": (float(paths["gd"][-1].weights.min()), float(polished.weights.min())),
                "gain_gd": gain_gd,
                "move_gd": move_gd / std,
                "gain_online": gain_online,
                "move_online": move_online / std,
                "gain_start": curves["em"][-1] - curves["em"][0],  # EM's own P passes from the start
                "one_step_gd": float((one_step.means - paths["gd"][-1].means).abs().max()) / std,
                "gaps": gaps,
                "floor": floor,
                "route": route,
                "pace": {name: passes_to(c, target, cfg.path_gap_max) for name, c in curves.items()},
                "held_out": {name: score(test, path[-1], shift) for name, path in paths.items()},
                "end_means_gap": matched_gap(means["em"][-1], means["gd"][-1]),
            }
        )
    # control (ii): EM from different starts, every pair
    em_vs_em = [
        path_gap(a["curves"]["em"], b["curves"]["em"], a["means"]["em"], b["means"]["em"], match=True)
        for a, b in itertools.combinations(runs, 2)
    ]

    worst_gain = max(r["gain_gd"] for r in runs)
    worst_move = max(r["move_gd"] for r in runs)
    worst_gap = max(r["gaps"]["gd"][0] for r in runs)
    worst_means = max(r["gaps"]["gd"][1] for r in runs)
    floor_gap = max(r["floor"][0] for r in runs)
    floor_means = max(r["floor"][1] for r in runs)
    crit: list[Criterion] = [
        criterion("EM's gain from gd's end, worst start (nats/sample)", worst_gain, "<=", cfg.fixed_gain_max),
        criterion("EM's means move from gd's end, worst start (data std)", worst_move, "<=", cfg.fixed_move_max),
        criterion("gd–EM path gap, worst start (nats/sample)", worst_gap, "<=", max(cfg.path_gap_max, floor_gap)),
        criterion(
            "gd–EM means path gap, worst start (data std)", worst_means, "<=", max(cfg.path_means_max, floor_means)
        ),
        criterion(
            "control: EM's gain from the start, least (nats/sample)",
            min(r["gain_start"] for r in runs),
            ">",
            cfg.fixed_gain_max,
        ),
        criterion(
            "control: EM–EM path gap between starts, least (nats/sample)",
            min(g[0] for g in em_vs_em),
            ">",
            cfg.path_gap_max,
        ),
    ]
    fixed_ok = crit[0].passed and crit[1].passed
    path_ok = crit[2].passed and crit[3].passed
    controls_ok = crit[4].passed and crit[5].passed
    verdict = decide(fixed_ok, path_ok, controls_ok)

    figures = [_plot_curves(runs, ctx), _plot_gaps(runs, em_vs_em, cfg, ctx)]
    per_start = lambda f: [f(r) for r in runs]  # noqa: E731
    metrics: dict[str, Any] = {
        "EM's gain from gd's end, per start (nats/sample)": per_start(lambda r: r["gain_gd"]),
        "EM's means move from gd's end, per start (data std)": per_start(lambda r: r["move_gd"]),
        "gd stopped by its own plateau rule, per start": per_start(lambda r: r["stopped"]),
        "smallest weight at gd's end and after EM from it, per start": per_start(lambda r: r["least_weight"]),
        "one EM step from gd's end, per start (data std)": per_start(lambda r: r["one_step_gd"]),
        "EM's gain from online EM's end, per start (nats/sample)": per_start(lambda r: r["gain_online"]),
        "control: EM's gain from the start, per start (nats/sample)": per_start(lambda r: r["gain_start"]),
        "gd–EM path gap, per start (nats/sample)": per_start(lambda r: r["gaps"]["gd"][0]),
        "gd–EM means path gap, per start (data std)": per_start(lambda r: r["gaps"]["gd"][1]),
        "control: gd–gd (other mini-batch order) path gap, per start (nats/sample)": per_start(lambda r: r["floor"][0]),
        "control: gd–gd (other mini-batch order) means path gap, per start (data std)": per_start(
            lambda r: r["floor"][1]
        ),
        "control: EM–EM path gap, per pair of starts (nats/sample)": [g[0] for g in em_vs_em],
        "control: EM–EM means path gap, per pair of starts (data std)": [g[1] for g in em_vs_em],
        "gd's means off EM's route, any pace, per start (data std)": per_start(lambda r: r["route"]["gd"]),
        "control: gd (other order) off gd's route, any pace, per start (data std)": per_start(
            lambda r: r["route"]["gd, other order"]
        ),
        "gd at half the rate–EM path gap, per start (nats/sample)": per_start(
            lambda r: r["gaps"]["gd, half the rate"][0]
        ),
        "online EM–EM path gap, per start (nats/sample)": per_start(lambda r: r["gaps"]["online_em"][0]),
        "passes to within 0.01 of EM's end, per start": per_start(lambda r: r["pace"]),
        "gd epochs run (its plateau rule), per start": per_start(lambda r: r["epochs"]),
        "full-data log-likelihood at the start, per start": per_start(lambda r: r["curves"]["em"][0]),
        "EM's full-data log-likelihood after P passes, per start": per_start(lambda r: r["curves"]["em"][-1]),
        "held-out log-likelihood at the end, per start": per_start(lambda r: r["held_out"]),
        "|held-out em − gd| at the end, per start": per_start(lambda r: abs(r["held_out"]["em"] - r["held_out"]["gd"])),
        "matched means gap em–gd at the end, per start (data std)": per_start(lambda r: r["end_means_gap"]),
        "K, D, N, starts, passes": [cfg.k, cfg.d, cfg.n, cfg.n_starts, cfg.passes],
    }
    return Result(
        verdict,
        _summary(verdict, fixed_ok, path_ok, controls_ok, crit, runs, em_vs_em),
        metrics,
        crit,
        figures,
        details=_details(cfg),
    )


def _summary(
    verdict: Verdict,
    fixed_ok: bool,
    path_ok: bool,
    controls_ok: bool,
    crit: list[Criterion],
    runs: list[dict[str, Any]],
    em_vs_em: list[tuple[float, float]],
) -> str:
    n = len(runs)
    gained = [r for r in runs if r["gain_gd"] > crit[0].threshold]
    moved = [r for r in runs if r["move_gd"] > crit[1].threshold]
    stopped = sum(r["stopped"] for r in gained)
    fixed = (
        f"Fixed points {'the same' if fixed_ok else 'not the same'}: from {n} starts away from the optimum (EM gains "
        f"at least {crit[4].measured:.2f} nats/sample from each), EM run on from gd's end gains more than "
        f"{crit[0].threshold} nats/sample at {len(gained)} of {n} (up to {crit[0].measured:.1e}"
        + (f"; gd's own plateau rule had stopped it at {stopped} of these" if stopped else "")
        + f") and moves the means more than {crit[1].threshold} data std at {len(moved)} of {n} "
        f"(up to {crit[1].measured:.2f})."
    )
    pace = [r["pace"] for r in runs]
    path = (
        f" Paths {'the same' if path_ok else 'not the same'}: per pass, gd's full-data log-likelihood is up to "
        f"{crit[2].measured:.3f} nats/sample from EM's (tolerance {crit[2].threshold:.3f}, gd against itself with "
        f"another mini-batch order at most {max(r['floor'][0] for r in runs):.3f}; EM from two different starts at "
        f"least {min(g[0] for g in em_vs_em):.3f}), its means up to {crit[3].measured:.2f} data std from EM's; "
        f"at any pace, gd's means stray up to {max(r['route']['gd'] for r in runs):.2f} data std from EM's route "
        f"(gd with another order from gd's: {max(r['route']['gd, other order'] for r in runs):.2f}). "
        f"Passes to within 0.01 nats of EM's end: EM {[p['em'] for p in pace]}, gd {[p['gd'] for p in pace]}, "
        f"online EM {[p['online_em'] for p in pace]}."
    )
    apart = sum(abs(r["held_out"]["em"] - r["held_out"]["gd"]) > crit[0].threshold for r in runs)
    ends = (
        f" From {apart} of {n} starts gd ends more than {crit[0].threshold} nats/sample (held out) below EM."
        if apart
        else ""
    )
    control = "" if controls_ok else " A control failed, so a half may hold vacuously (see the criteria)."
    return fixed + path + ends + control


def _details(cfg: Config) -> str:
    return (
        f"{cfg.n_starts} starts, each {cfg.k} distinct data rows as means with the data's covariance and equal "
        f"weights; {cfg.passes} passes per fitter; online EM and gd on mini-batches of {cfg.batch_size} "
        f"({math.ceil(cfg.n / cfg.batch_size)} steps per pass, EM one), gd with Adam at {cfg.learning_rate} halved "
        "on plateaus (the library's schedule; after it stops its end point is held). Every trajectory is scored "
        "after every pass by one function, the library's exact full-data mean log-likelihood; the fitters' own "
        "logs are not used. The fixed-point test runs EM on from gd's end (up to "
        f"{cfg.polish_iter} iterations, |Δ| < {cfg.polish_tol:g}). Path gaps are the largest per-pass differences "
        "over passes 1..P. Caveat: a pass is one EM iteration but many mini-batch steps, so 'the same path per "
        "pass' is one reading of 'the path'; the pace row shows how many passes each needs, the route row how far "
        "gd strays from EM's route at any pace. Where EM gains from gd's end, look at the smallest weights: gd "
        "can leave a component nearly empty (its gradient scales with its weight; EM's M-step divides by it), "
        "and a nearly empty component's mean is weakly determined, so its move can exceed the means tolerance "
        "while the likelihood gain stays below the gain tolerance."
    )


def _plot_curves(runs: list[dict[str, Any]], ctx: Context) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.4), sharey=False, squeeze=False)
    for s, (ax, r) in enumerate(zip(axes[0], runs, strict=True)):
        end = max(c[-1] for c in r["curves"].values())
        for name, curve in r["curves"].items():
            ax.plot(range(len(curve)), curve, lw=1.2, ls="--" if "," in name else "-", label=name)
        lo = min(c[1] for c in r["curves"].values())
        ax.set_ylim(max(lo, end - 1.5), end + 0.05)
        ax.set_title(f"start {s}", fontsize=9)
        ax.set_xlabel("pass over the data")
    axes[0][0].set_ylabel("full-data mean log-likelihood")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("every fitter scored after every pass, from the same starts", fontsize=10)
    fig.tight_layout()
    return ctx.save_figure(fig, "same_optimum")


def _plot_gaps(runs: list[dict[str, Any]], em_vs_em: list[tuple[float, float]], cfg: Config, ctx: Context) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    pairs = {
        "gd − EM": ("gd", "em", "C0"),
        "gd − gd, other order": ("gd", "gd, other order", "C1"),
        "gd at half the rate − EM": ("gd, half the rate", "em", "C2"),
        "online EM − EM": ("online_em", "em", "C3"),
    }
    for label, (first, second, color) in pairs.items():
        for s, r in enumerate(runs):
            gap = np.abs(np.subtract(r["curves"][first], r["curves"][second]))[1:]
            ax.plot(range(1, len(gap) + 1), np.maximum(gap, 1e-12), color=color, lw=1, label=label if s == 0 else None)
    for i, (run_a, run_b) in enumerate(itertools.combinations(runs, 2)):
        gap = np.abs(np.subtract(run_a["curves"]["em"], run_b["curves"]["em"]))[1:]
        ax.plot(
            range(1, len(gap) + 1),
            np.maximum(gap, 1e-12),
            color="grey",
            lw=0.8,
            ls=":",
            label="EM − EM, two starts" if i == 0 else None,
        )
    ax.axhline(cfg.path_gap_max, color="k", ls="--", lw=0.8, label=f"tolerance {cfg.path_gap_max}")
    ax.set_yscale("log")
    ax.set_xlabel("pass over the data")
    ax.set_ylabel("|Δ full-data log-likelihood| (nats/sample)")
    ax.legend(fontsize=7)
    ax.set_title("path gaps per pass, every start")
    fig.tight_layout()
    return ctx.save_figure(fig, "same_optimum_gaps")


EXPERIMENT = Experiment(
    name="same_optimum",
    title="EM and gradient descent: same fixed points, same path?",
    claim="This regime optimizes the same objective as classical EM on mixture models, with the same "
    "responsibilities governing both the fixed points and the path toward them.",
    source="paper §4.1 (Unsupervised regime)",
    Config=Config,
    run=run,
)
