r"""A known Gaussian mixture, starts away from its optimum, and the library's three fitters read after every pass:
the setting of ``same_optimum``'s practical arm (batch EM, online EM, mini-batch gradient descent), on
:mod:`implicit_em.mixture`'s fitters, with the one scorer and the gap measures between two paths.

Parameters are sklearn-shaped :class:`~implicit_em.mixture._stats.MixtureParams`: weights (K,), means (K, D),
covariances (K, D, D) and precisions' Cholesky factors (K, D, D), float64, full covariances. A path is the list of
parameters after 0, 1, ..., P passes; every fitter gets the same ``shift`` (the data mean) and ``scale`` (the rms
standard deviation) as :class:`~implicit_em.mixture.GaussianMixture` gives it.
"""

import itertools
import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from implicit_em import gaussian
from implicit_em.audit.core import Context
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot

__all__ = [
    "COVARIANCE",
    "REG_COVAR",
    "STARTS",
    "PracticalSettings",
    "cells",
    "draw",
    "em_path",
    "em_polish",
    "gd_path",
    "make_start",
    "matched_gap",
    "off_path",
    "online_em_path",
    "params",
    "passes_to",
    "path_gap",
    "plot_curves",
    "plot_gaps",
    "practical_arms",
    "put_practical",
    "score",
    "shift_scale",
    "shrunk",
    "truth",
]

COVARIANCE = "full"
REG_COVAR = 1e-6  # the library's default


# -- data and starts ---------------------------------------------------------------------------------------------


def truth(k: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random mixture: weights (K,) ~ Dirichlet(5), means (K, D) ~ N(0, 9 I), covariances A Aᵀ / D + 0.2 I."""
    rng = np.random.RandomState(seed)
    means = rng.randn(k, d) * 3
    a = rng.randn(k, d, d) / np.sqrt(d)
    covs = a @ a.transpose(0, 2, 1) + 0.2 * np.eye(d)
    weights = rng.dirichlet(5 * np.ones(k))
    return weights, means, covs


def draw(weights: np.ndarray, means: np.ndarray, covs: np.ndarray, n: int, rng: np.random.RandomState) -> np.ndarray:
    """n rows (N, D) of the mixture."""
    z = rng.choice(len(weights), size=n, p=weights)
    chol = np.linalg.cholesky(covs)
    return means[z] + np.einsum("nab,nb->na", chol[z], rng.randn(n, means.shape[1]))


def params(weights: np.ndarray, means: np.ndarray, covs: np.ndarray) -> Any:
    """The :class:`~implicit_em.mixture._stats.MixtureParams` of numpy weights, means and covariances."""
    from implicit_em.mixture._stats import MixtureParams

    covs_t = torch.from_numpy(np.ascontiguousarray(covs))
    return MixtureParams(
        torch.from_numpy(weights), torch.from_numpy(means), covs_t, gaussian.precisions_cholesky(covs_t, COVARIANCE)
    )


def _data_row_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """K distinct data rows as means, the data's covariance (+ reg_covar) for every component, equal weights."""
    d = x.shape[1]
    means = x[rng.choice(len(x), size=k, replace=False)].copy()
    cov = np.cov(x, rowvar=False, bias=True).reshape(d, d) + REG_COVAR * np.eye(d)
    return params(np.full(k, 1.0 / k), means, np.broadcast_to(cov, (k, d, d)).copy())


def cells(x: np.ndarray, centers: np.ndarray) -> Any:
    """One hard assignment: every row to its nearest centre; each cell's share of the rows, mean and covariance
    (+ reg_covar). A centre that is a row of ``x`` keeps at least that row."""
    k, d = centers.shape
    labels = ((x[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)
    weights = np.bincount(labels, minlength=k) / len(x)
    means = np.stack([x[labels == j].mean(0) for j in range(k)])
    covs = np.stack([np.cov(x[labels == j], rowvar=False, bias=True).reshape(d, d) for j in range(k)])
    return params(weights, means, covs + REG_COVAR * np.eye(d))


def _kmeanspp_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """k-means++ seeds (scikit-learn's ``kmeans_plusplus``, its own seed drawn from ``rng``), then :func:`cells`."""
    from sklearn.cluster import kmeans_plusplus

    centers, _ = kmeans_plusplus(x, k, random_state=rng.randint(2**31 - 1))
    return cells(x, centers)


def shrunk(start: Any, t: float) -> Any:
    """A start pulled toward the data: every mean moved to x̄ + t (μ_j − x̄) (x̄ = Σ_j π_j μ_j, the data mean for
    cells), and the between-component spread it loses, (1 − t²) Σ_j π_j (μ_j − x̄)(μ_j − x̄)ᵀ, added to every
    covariance, so the start keeps the data's mean and covariance; weights unchanged."""
    from implicit_em.mixture._stats import MixtureParams

    w, mu = start.weights.double(), start.means.double()
    centre = w @ mu
    dev = mu - centre
    between = torch.einsum("k,ka,kb->ab", w, dev, dev)
    covs = start.covariances.double() + (1 - t * t) * between
    return MixtureParams(w.clone(), centre + t * dev, covs, gaussian.precisions_cholesky(covs, COVARIANCE))


def _shrunk_kmeanspp_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """k-means++ cells (:func:`_kmeanspp_start`) pulled halfway toward the data (:func:`shrunk`, t = 1/2)."""
    return shrunk(_kmeanspp_start(x, k, rng), 0.5)


#: The kinds of start: the claim's ("k-means++ pulled halfway") and the two it replaced (its page says why).
STARTS: dict[str, Callable[[np.ndarray, int, np.random.RandomState], Any]] = {
    "k-means++": _kmeanspp_start,
    "data rows": _data_row_start,
    "k-means++ pulled halfway": _shrunk_kmeanspp_start,
}


def make_start(x: np.ndarray, k: int, rng: np.random.RandomState, starts: str = "k-means++") -> Any:
    """One start away from the optimum, of the kind ``starts`` names (:data:`STARTS`)."""
    if starts not in STARTS:
        raise ValueError(f"starts must be one of {tuple(STARTS)}, got {starts!r}")
    return STARTS[starts](x, k, rng)


def shift_scale(x: Tensor) -> tuple[Tensor, float]:
    """The centre and scalar scale ``GaussianMixture`` gives its fitters (the data mean, the rms std)."""
    return x.mean(0), float(x.var(0, unbiased=False).mean().sqrt())


# -- the three fitters, read after every pass ------------------------------------------------------------------


def em_path(data: Any, start: Any, shift: Tensor, passes: int) -> list[Any]:
    """Batch EM: the parameters after 0, 1, ..., ``passes`` iterations (EM carries no state between them)."""
    from implicit_em.mixture._em import fit_em
    from implicit_em.mixture._settings import FitSettings

    one = FitSettings(covariance_type=COVARIANCE, reg_covar=REG_COVAR, tol=0.0, max_iter=1)
    path = [start]
    for _ in range(passes):
        path.append(fit_em(data, path[-1], one, shift=shift).params)
    return path


def online_em_path(data: Any, start: Any, shift: Tensor, passes: int, batch_size: int, seed: int) -> list[Any]:
    """Online EM: the parameters after 0, 1, ..., ``passes`` epochs of one continuous run (the running statistics
    and the step count carried from epoch to epoch; no final exact EM iteration)."""
    from implicit_em.mixture._online_em import fit_online_em
    from implicit_em.mixture._settings import FitSettings

    one = FitSettings(covariance_type=COVARIANCE, reg_covar=REG_COVAR, tol=0.0, max_iter=1, batch_size=batch_size)
    generator = torch.Generator().manual_seed(seed)
    path, state = [start], None
    for _ in range(passes):
        result, state = fit_online_em(
            data, path[-1], one, shift=shift, generator=generator, state=state, final_em_steps=0
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
    epochs, read by its callback, and held at its end point after it converges; returns them and the epochs run.
    reg_covar 0 and the schedule's defaults: the estimator's gd as it was before its schedule gained a penalty."""
    from implicit_em.mixture._gd import fit_gd, make_state, state_params
    from implicit_em.mixture._settings import FitSettings

    state = make_state(start, COVARIANCE, shift, scale, learning_rate, "adam")
    path = [start]

    def after_epoch(epoch: int, loglik: float, seconds: float, usage: Tensor) -> None:
        path.append(state_params(state, COVARIANCE, shift, scale))

    settings = FitSettings(
        covariance_type=COVARIANCE,
        reg_covar=0.0,
        tol=tol,
        max_iter=passes,
        batch_size=batch_size,
        learning_rate=learning_rate,
    )
    generator = torch.Generator().manual_seed(seed)
    result, _ = fit_gd(
        data, start, settings, shift=shift, scale=scale, generator=generator, state=state, callback=after_epoch
    )
    epochs = len(path) - 1
    return path + [path[-1]] * (passes - epochs), int(result.n_iter)


# -- one scorer, EM run on from an end, the path gaps ---------------------------------------------------------


def score(data: Any, mixture: Any, shift: Tensor) -> float:
    """The exact mean log-likelihood per sample of all of ``data`` under ``mixture``: the one scorer."""
    from implicit_em.mixture._fitting import _mean_loglik

    return float(_mean_loglik(data, mixture, COVARIANCE, shift))


def em_polish(
    data: Any, start: Any, shift: Tensor, max_iter: int, tol: float, reg_covar: float = REG_COVAR
) -> tuple[float, float, Any]:
    """Run EM from ``start`` until |Δ| < tol: (log-likelihood gained, largest mean moved, the end point).

    Both are zero at an EM fixed point. The move is in the data's units (components keep their labels under EM).
    """
    from implicit_em.mixture._em import fit_em
    from implicit_em.mixture._settings import FitSettings

    settings = FitSettings(covariance_type=COVARIANCE, reg_covar=reg_covar, tol=tol, max_iter=max_iter)
    end = fit_em(data, start, settings, shift=shift).params
    gain = score(data, end, shift) - score(data, start, shift)
    move = float((end.means - start.means).norm(dim=1).max())
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


# -- the practical arms from one start ---------------------------------------------------------------------------


class PracticalSettings(Protocol):
    """What :func:`practical_arms` reads from a claim's config."""

    @property
    def passes(self) -> int: ...  # passes over the data every fitter gets
    @property
    def batch_size(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def tol(self) -> float: ...  # gd's plateau rule
    @property
    def polish_iter(self) -> int: ...
    @property
    def polish_tol(self) -> float: ...
    @property
    def pace_tol(self) -> float: ...  # "within tol of EM's end" for the pace


def _paths(data: Any, start: Any, shift: Tensor, scale: float, cfg: PracticalSettings, order: tuple[int, int]) -> Any:
    """The five paths from one start (batch EM, online EM, gd, gd with the other order, gd at half the rate) and
    gd's epochs; ``order`` seeds the mini-batch orders (online EM and gd share the first)."""
    paths: dict[str, list[Any]] = {"em": em_path(data, start, shift, cfg.passes)}
    paths["online_em"] = online_em_path(data, start, shift, cfg.passes, cfg.batch_size, order[0])
    epochs: dict[str, int] = {}
    arms = {"gd": (cfg.learning_rate, order[0]), "gd, other order": (cfg.learning_rate, order[1])}
    arms["gd, half the rate"] = (cfg.learning_rate / 2, order[0])
    for name, (lr, seed) in arms.items():
        paths[name], epochs[name] = gd_path(data, start, shift, scale, cfg.passes, cfg.batch_size, lr, cfg.tol, seed)
    return paths, epochs


def practical_arms(
    data: Any, test: Any, start: Any, shift: Tensor, scale: float, std: float, cfg: PracticalSettings, order: Any
) -> dict[str, Any]:
    """Every practical arm from one start, each scored after every pass (``curves``: name → P + 1 mean
    log-likelihoods), with EM run on from the ends, the per-pass gaps to EM, gd's route and pace, and held-out
    scores; ``std`` is the unit of every means distance. The paths of EM and gd are kept (``path_em``, ``path_gd``)
    for the identities read along them."""
    paths, epochs = _paths(data, start, shift, scale, cfg, order)
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
    return {
        "path_em": paths["em"],
        "path_gd": paths["gd"],
        "gd_end": paths["gd"][-1],
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
        "pace": {name: passes_to(c, curves["em"][-1], cfg.pace_tol) for name, c in curves.items()},
        "held_out": {name: score(test, path[-1], shift) for name, path in paths.items()},
        "end_means_gap": matched_gap(means["em"][-1], means["gd"][-1]),
    }


def put_practical(m: Metrics, runs: list[dict[str, Any]]) -> None:
    """Declare the practical arms' metrics in ``m``: per start (``runs``: :func:`practical_arms` of every start),
    and the EM–EM path gaps between every pair of starts (matched components)."""
    em_vs_em = [
        path_gap(a["curves"]["em"], b["curves"]["em"], a["means"]["em"], b["means"]["em"], match=True)
        for a, b in itertools.combinations(runs, 2)
    ]
    values: dict[str, tuple[Any, str]] = {
        "EM's gain from gd's end, per start (nats/sample)": ([r["gain_gd"] for r in runs], "nats/sample"),
        "EM's means move from gd's end, per start (data std)": ([r["move_gd"] for r in runs], "data std"),
        "gd stopped by its own plateau rule, per start": ([r["stopped"] for r in runs], "yes/no"),
        "smallest weight at gd's end and after EM from it, per start": ([r["least_weight"] for r in runs], "fraction"),
        "one EM step from gd's end, per start (data std)": ([r["one_step_gd"] for r in runs], "data std"),
        "EM's gain from online EM's end, per start (nats/sample)": ([r["gain_online"] for r in runs], "nats/sample"),
        "control: EM's gain from the start, per start (nats/sample)": ([r["gain_start"] for r in runs], "nats/sample"),
        "gd–EM path gap, per start (nats/sample)": ([r["gaps"]["gd"][0] for r in runs], "nats/sample"),
        "gd–EM means path gap, per start (data std)": ([r["gaps"]["gd"][1] for r in runs], "data std"),
        "control: gd–gd (other mini-batch order) path gap, per start (nats/sample)": (
            [r["floor"][0] for r in runs],
            "nats/sample",
        ),
        "control: gd–gd (other mini-batch order) means path gap, per start (data std)": (
            [r["floor"][1] for r in runs],
            "data std",
        ),
        "control: EM–EM path gap, per pair of starts (nats/sample)": ([g[0] for g in em_vs_em], "nats/sample"),
        "control: EM–EM means path gap, per pair of starts (data std)": ([g[1] for g in em_vs_em], "data std"),
        "gd's means off EM's route, any pace, per start (data std)": ([r["route"]["gd"] for r in runs], "data std"),
        "control: gd (other order) off gd's route, any pace, per start (data std)": (
            [r["route"]["gd, other order"] for r in runs],
            "data std",
        ),
        "gd at half the rate–EM path gap, per start (nats/sample)": (
            [r["gaps"]["gd, half the rate"][0] for r in runs],
            "nats/sample",
        ),
        "online EM–EM path gap, per start (nats/sample)": ([r["gaps"]["online_em"][0] for r in runs], "nats/sample"),
        "passes to within 0.01 of EM's end, per start": ([r["pace"] for r in runs], "passes"),
        "gd epochs run (its plateau rule), per start": ([r["epochs"] for r in runs], "passes"),
        "full-data log-likelihood at the start, per start": ([r["curves"]["em"][0] for r in runs], "nats/sample"),
        "EM's full-data log-likelihood after P passes, per start": (
            [r["curves"]["em"][-1] for r in runs],
            "nats/sample",
        ),
        "held-out log-likelihood at the end, per start": ([r["held_out"] for r in runs], "nats/sample"),
        "|held-out em − gd| at the end, per start": (
            [abs(r["held_out"]["em"] - r["held_out"]["gd"]) for r in runs],
            "nats/sample",
        ),
        "matched means gap em–gd at the end, per start (data std)": ([r["end_means_gap"] for r in runs], "data std"),
        "full-data log-likelihood after every pass, per start and fitter (nats/sample)": (
            [r["curves"] for r in runs],
            "nats/sample",
        ),
    }
    for key, (value, unit) in values.items():
        m.put(key, value, unit, key.removesuffix(f" ({unit})"))


# -- figures --------------------------------------------------------------------------------------------------------


def plot_curves(curves: list[dict[str, list[float]]], ctx: Context, name: str) -> str:
    """One panel per start: every fitter's full-data mean log-likelihood after every pass (``curves``: per start,
    fitter → P + 1 values); saved as ``name``."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(3.2 * len(curves), 3.4), sharey=False, squeeze=False)
    for s, (ax, per_fitter) in enumerate(zip(axes[0], curves, strict=True)):
        end = max(c[-1] for c in per_fitter.values())
        for fitter, curve in per_fitter.items():
            ax.plot(range(len(curve)), curve, lw=1.2, ls="--" if "," in fitter else "-", label=fitter)
        lo = min(c[1] for c in per_fitter.values())
        ax.set_ylim(max(lo, end - 1.5), end + 0.05)
        ax.set_title(f"start {s}", fontsize=9)
        ax.set_xlabel("pass over the data")
    axes[0][0].set_ylabel("full-data mean log-likelihood")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("every fitter scored after every pass, from the same starts", fontsize=10)
    fig.tight_layout()
    return ctx.save_figure(fig, name)


def plot_gaps(curves: list[dict[str, list[float]]], tolerance: float, ctx: Context, name: str) -> str:
    """|Δ log-likelihood| per pass between pairs of fitters from every start, and between EM from two starts, with
    a horizontal line at ``tolerance``; saved as ``name``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    pairs = {
        "gd − EM": ("gd", "em", "C0"),
        "gd − gd, other order": ("gd", "gd, other order", "C1"),
        "gd at half the rate − EM": ("gd, half the rate", "em", "C2"),
        "online EM − EM": ("online_em", "em", "C3"),
    }
    for label, (first, second, color) in pairs.items():
        for s, c in enumerate(curves):
            gap = np.abs(np.subtract(c[first], c[second]))[1:]
            ax.plot(range(1, len(gap) + 1), np.maximum(gap, 1e-12), color=color, lw=1, label=label if s == 0 else None)
    for i, (run_a, run_b) in enumerate(itertools.combinations(curves, 2)):
        gap = np.abs(np.subtract(run_a["em"], run_b["em"]))[1:]
        two = "EM − EM, two starts" if i == 0 else None
        ax.plot(range(1, len(gap) + 1), np.maximum(gap, 1e-12), color="grey", lw=0.8, ls=":", label=two)
    ax.axhline(tolerance, color="k", ls="--", lw=0.8, label=f"tolerance {tolerance}")
    ax.set_yscale("log")
    ax.set_xlabel("pass over the data")
    ax.set_ylabel("|Δ full-data log-likelihood| (nats/sample)")
    ax.legend(fontsize=7)
    ax.set_title("path gaps per pass, every start")
    fig.tight_layout()
    return ctx.save_figure(fig, name)
