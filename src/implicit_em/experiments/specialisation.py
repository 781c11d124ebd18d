r"""Spontaneous specialisation from random initialisation (paper §4.1).

Method: 2-D data from five Gaussian clusters (unit-scale, centres on a circle of radius 6), N = 2000 (quick) or
20,000 (full). ``GaussianMixture(5, fitter="gd")`` (Adam on the exact negative log-likelihood, i.e. implicit EM,
tol 1e-5) starts from random prototypes: ``init_params="random_from_data"`` puts the means at random data points,
as a network's random initialisation would, with the data covariance for every component. Over several seeds
(quick 6, full 24): the adjusted Rand index of the learned clustering against the true clusters, the effective
number of components exp(H(usage)) per epoch, and the same for batch EM from the identical start as the
reference. A harder, symmetric start is reported too: ``init_params="random"`` (random responsibilities, so every
component starts near the data mean and nothing in the start separates them).

The paper's simplest distance model is run too: K Euclidean prototypes, L = −log Σ_j exp(−½‖x − m_j‖²) with
no weights and no covariances, Adam from K random data points.

Verdict (a seed specialises when its ARI ≥ 0.9): SUPPORTED if both models specialise in at least 80% of seeds;
PARTIAL if at least one specialises in at least half of them; REFUTED otherwise. EM's rate from the same starts
is reported for comparison.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from implicit_em.experiments._base import Context, Experiment, Result, Verdict, criterion, pyplot

K = 5


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 2000  # samples from the five clusters
    n_seeds: int = 6  # initialisations (random_state seed·1000 + s for s < n_seeds)
    prototype_epochs: int = 30  # Adam epochs of the Euclidean prototypes
    # verdict thresholds (module docstring): a seed specialises when its ARI ≥ 0.9; SUPPORTED needs both models
    # to specialise in ≥ 80% of seeds, PARTIAL one model in ≥ 50%
    specialised_ari: float = 0.9
    supported_share: float = 0.8
    partial_share: float = 0.5

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n=20_000, n_seeds=24, prototype_epochs=100)


def _data(n: int, rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    angles = 2 * np.pi * np.arange(K) / K
    centres = 6 * np.stack([np.cos(angles), np.sin(angles)], 1)
    labels = rng.randint(K, size=n)
    return centres[labels] + rng.randn(n, 2), labels


def _effective(usage: list[float]) -> float:
    p = np.asarray(usage, dtype=float)
    p = p[p > 0] / p.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def _prototypes(x: np.ndarray, seed: int, epochs: int) -> tuple[np.ndarray, list[float]]:
    """Euclidean prototypes (the paper's simplest distance model): Adam on mean −log Σ_j exp(−½‖x − m_j‖²) from
    prototypes at K random data points; returns the hard labels and exp(H(usage)) per epoch."""
    import torch

    from implicit_em.distances import Prototypes
    from implicit_em.objectives import mixture_nll, responsibilities

    g = torch.Generator().manual_seed(seed)
    xt = torch.from_numpy(x)
    model = Prototypes(K, x.shape[1], dtype=torch.float64)
    with torch.no_grad():
        model.prototypes.copy_(xt[torch.randperm(len(x), generator=g)[:K]])
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    curve = []
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(256):
            opt.zero_grad()
            mixture_nll(0.5 * model(xt[idx])).mean().backward()
            opt.step()
        with torch.no_grad():
            curve.append(_effective(responsibilities(0.5 * model(xt)).mean(0).tolist()))
    with torch.no_grad():
        return model(xt).argmin(1).numpy(), curve


def run(cfg: Config, ctx: Context) -> Result:
    import warnings

    from sklearn.metrics import adjusted_rand_score

    from implicit_em.mixture import GaussianMixture

    plt = pyplot()
    n, seeds = cfg.n, cfg.n_seeds
    rng = np.random.RandomState(cfg.seed)
    x, truth = _data(n, rng)
    ari: dict[str, list[float]] = {
        "prototypes": [],
        "gd": [],
        "em": [],
        "gd, symmetric start": [],
        "em, symmetric start": [],
    }
    curves: list[list[float]] = []
    proto_curves: list[list[float]] = []
    for s in range(seeds):
        labels, curve = _prototypes(x, cfg.seed * 1000 + s, cfg.prototype_epochs)
        ari["prototypes"].append(float(adjusted_rand_score(truth, labels)))
        proto_curves.append(curve)
        for init, suffix in (("random_from_data", ""), ("random", ", symmetric start")):
            common: dict[str, Any] = {
                "init_params": init,
                "random_state": cfg.seed * 1000 + s,
                "split_merge": 0,
                "max_iter": 300,
                "tol": 1e-5,
            }
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a seed that does not converge is a result here, not a warning
                gd = GaussianMixture(K, fitter="gd", batch_size=256, learning_rate=0.05, **common).fit(x)
                em = GaussianMixture(K, fitter="em", **common).fit(x)
            ari["gd" + suffix].append(float(adjusted_rand_score(truth, gd.predict(x))))
            ari["em" + suffix].append(float(adjusted_rand_score(truth, em.predict(x))))
            if not suffix:
                curves.append([_effective(h["usage"]) for h in gd.history_])
    rate = {name: float(np.mean(np.asarray(v) >= cfg.specialised_ari)) for name, v in ari.items()}

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, c in enumerate(curves):
        a1.plot(range(1, len(c) + 1), c, color="C0", alpha=0.6, label="Gaussian components (gd)" if i == 0 else None)
    for i, c in enumerate(proto_curves):
        a1.plot(range(1, len(c) + 1), c, color="C1", alpha=0.6, label="Euclidean prototypes" if i == 0 else None)
    a1.legend(fontsize=8)
    a1.axhline(K, color="grey", ls="--", lw=0.8)
    a1.set_xlabel("epoch")
    a1.set_ylabel("effective components exp(H(usage))")
    a1.set_title("gradient descent from random data points")
    a2.scatter(ari["em"], ari["gd"], label="Gaussian components (gd)")
    a2.scatter(ari["em"], ari["prototypes"], label="Euclidean prototypes")
    a2.plot([0, 1], [0, 1], color="grey", lw=0.8)
    a2.set_xlabel("ARI, batch EM (Gaussian components)")
    a2.set_ylabel("ARI, gradient descent")
    a2.legend(fontsize=8)
    a2.set_title(f"{seeds} seeds, same start for both")
    fig.tight_layout()
    figure = ctx.save_figure(fig, "specialisation")

    low, high = sorted((rate["gd"], rate["prototypes"]))
    both = criterion("specialisation rate, lower of gd and prototypes", low, ">=", cfg.supported_share)
    one = criterion("specialisation rate, higher of gd and prototypes", high, ">=", cfg.partial_share)
    verdict: Verdict = "SUPPORTED" if both.passed else ("PARTIAL" if one.passed else "REFUTED")
    summary = (
        f"Euclidean prototypes from random data points specialised (ARI ≥ {cfg.specialised_ari:g}) in "
        f"{100 * rate['prototypes']:.0f}% of {seeds} seeds (median ARI {np.median(ari['prototypes']):.3f}); Gaussian "
        "components (means at random data "
        f"points, the data covariance each) trained by gradient descent in {100 * rate['gd']:.0f}% (median ARI "
        f"{np.median(ari['gd']):.3f}, effective components at the end "
        f"{np.median([c[-1] for c in curves]):.2f} of {K}); batch EM from the same starts in "
        f"{100 * rate['em']:.0f}% (median {np.median(ari['em']):.3f}). From a symmetric start (random "
        f"responsibilities) gradient descent specialised in {100 * rate['gd, symmetric start']:.0f}% and EM in "
        f"{100 * rate['em, symmetric start']:.0f}%."
    )
    return Result(
        verdict,
        summary,
        {
            **{f"ARI per seed, {name}": v for name, v in ari.items()},
            **{f"specialisation rate, {name}": v for name, v in rate.items()},
            "effective components at the start (median over seeds)": float(np.median([c[0] for c in curves])),
            "effective components at the end (median over seeds)": float(np.median([c[-1] for c in curves])),
            "K, N, seeds": [K, n, seeds],
        },
        [both, one],
        [figure],
        details="Failures come in two kinds. EM's are local optima: two components share one cluster while one "
        "covers two (the library's split-and-merge moves, switched off here, exist for this). Gradient descent on "
        "Gaussian components fails differently: one broad component absorbs the data and the others starve (their "
        "gradients are weighted by their shrinking responsibilities), the positive feedback of §6.2. Adam with the "
        "library's plateau-halved rate, mini-batches of 256; fixing the weights uniform did not change this in a "
        "side run (4 seeds, ARI 0 to 0.75).",
    )


EXPERIMENT = Experiment(
    name="specialisation",
    title="Spontaneous specialisation from random initialisation",
    claim="The result is spontaneous specialization. Even from random initialization, components differentiate "
    "over training: each prototype drifts toward a region of input space for which it consistently takes high "
    "responsibility, while ceding other regions to competitors. Clustering emerges without being specified "
    "anywhere in the architecture.",
    source="paper §4.1 (Unsupervised regime)",
    Config=Config,
    run=run,
)
