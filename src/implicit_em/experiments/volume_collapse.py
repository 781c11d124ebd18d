r"""The volume term: what happens to a Gaussian component trained without log|det W| (paper §3.4, §6.2).

Method: one full-covariance component on 2-D data (covariance Σ_data), trained by mini-batch gradient descent
(``GaussianMixture(fitter="gd")``, Adam) from the same start, once on the distance-only objective
½‖W(x − μ)‖² (``volume=False``) and once on the exact energy ½‖W(x − μ)‖² − log|det W| (``volume=True``). After
every epoch: log det Σ of the learned metric and the mean distance-only objective on all the data.

What the claim says and what is measured: §6.2 says the log-det term "prevents collapse: without it, a component
could shrink its covariance to zero, placing infinite density on a single point". The distance-only objective is
minimised by W → 0, i.e. Σ growing without bound (all distances shrink to zero, the metric collapses); shrinking
Σ makes every distance larger, so it is not what happens.

Verdict: SUPPORTED if without the volume term log det Σ grows by more than log(100) while the objective keeps
improving (better at the last epoch than at the first, and in at least 70% of epochs; late epochs are noisy),
with it Σ converges to Σ_data (relative error ≤ 5%), and Σ does not grow but shrinks (the claim's direction);
PARTIAL if the first two hold but Σ grows rather than shrinks: the volume term is needed, for a different reason
than the one given; REFUTED if training without it does not degenerate.
"""

import math
from dataclasses import dataclass

import numpy as np

from implicit_em.experiments._base import Context, Experiment, Result, Verdict, criterion, pyplot


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 2000  # 2-D samples
    epochs: int = 40  # epochs of mini-batch gradient descent, each arm
    # verdict thresholds (module docstring): without the volume term the metric "degenerates" if log det Σ grows by
    # more than log(100) (volume ×100) while the objective improves in at least 70% of epochs (late epochs are
    # noisy); with it, Σ must match the data covariance to 5% (relative Frobenius error)
    growth_min: float = math.log(100)
    improving_share_min: float = 0.7
    relative_error_max: float = 0.05

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n=20000, epochs=150)


def _trace(x: np.ndarray, volume: bool, epochs: int, seed: int) -> tuple[list[float], list[float], np.ndarray]:
    from implicit_em.mixture import GaussianMixture

    rng = np.random.RandomState(seed)
    gm = GaussianMixture(
        1,
        fitter="gd",
        volume=volume,
        learning_rate=0.05,
        random_state=seed,
        means_init=x.mean(0, keepdims=True) + 1.0,
        precisions_init=np.eye(x.shape[1])[None],
    )
    logdets, objective = [], []
    for _ in range(epochs):
        for idx in np.array_split(rng.permutation(len(x)), max(len(x) // 200, 1)):
            gm.partial_fit(x[idx])
        cov = gm.covariances_[0]
        logdets.append(float(np.linalg.slogdet(cov)[1]))
        diff = x - gm.means_[0]
        objective.append(float(-0.5 * np.mean(np.sum(diff @ np.linalg.inv(cov) * diff, axis=1))))
    return logdets, objective, gm.covariances_[0]


def run(cfg: Config, ctx: Context) -> Result:
    plt = pyplot()
    rng = np.random.RandomState(cfg.seed)
    n, epochs = cfg.n, cfg.epochs
    x = rng.randn(n, 2) @ np.array([[2.0, 0.0], [0.5, 1.0]])
    data_cov = np.cov(x.T, bias=True)
    data_logdet = float(np.linalg.slogdet(data_cov)[1])
    ld_off, obj_off, _ = _trace(x, False, epochs, cfg.seed)
    ld_on, _, cov_on = _trace(x, True, epochs, cfg.seed)
    growth = ld_off[-1] - ld_off[0]
    increasing = float(np.mean(np.diff(ld_off) > 0))
    improving = float(np.mean(np.diff(obj_off) > 0))
    rel_err = float(np.linalg.norm(cov_on - data_cov) / np.linalg.norm(data_cov))

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    a1.plot(ld_off, label="distance only (volume=False)")
    a1.plot(ld_on, label="with log|det W| (volume=True)")
    a1.axhline(data_logdet, color="grey", ls="--", label="log det Σ_data")
    a1.set_xlabel("epoch")
    a1.set_ylabel("log det Σ")
    a1.legend(fontsize=8)
    a1.set_title("the learned metric")
    a2.plot(obj_off)
    a2.set_xlabel("epoch")
    a2.set_ylabel("−mean ½‖W(x − μ)‖²")
    a2.set_title("the distance-only objective keeps improving")
    fig.tight_layout()
    figure = ctx.save_figure(fig, "volume_collapse")

    criteria = [
        criterion("growth of log det Σ without volume", growth, ">", cfg.growth_min),
        criterion("objective without volume: last − first epoch", obj_off[-1] - obj_off[0], ">", 0.0),
        criterion("fraction of epochs with improving objective", improving, ">=", cfg.improving_share_min),
        criterion("with volume: relative error of Σ", rel_err, "<=", cfg.relative_error_max),
        criterion("log det Σ without volume: last − first epoch (the claim: shrinks)", growth, "<", 0.0),
    ]
    grows, improves, mostly_improves, healthy, shrinks = (c.passed for c in criteria)
    degenerates = grows and improves and mostly_improves
    verdict: Verdict
    if degenerates and healthy:
        verdict = "SUPPORTED" if shrinks else "PARTIAL"
    else:
        verdict = "REFUTED" if not degenerates else "PARTIAL"
    summary = (
        f"Without the volume term the metric degenerates: log det Σ rises by {growth:.1f} (Σ's volume ×"
        f"{np.exp(growth):.3g}) in {epochs} epochs while the objective improves in {100 * improving:.0f}% of them; "
        f"with it Σ converges to the data covariance (relative error {rel_err:.3f}). The term is needed, but the "
        "collapse runs the other way from the paper's wording: Σ grows without bound, it does not shrink to zero."
        if verdict == "PARTIAL" and degenerates and healthy
        else f"log det Σ change without the volume term {growth:.2f}, relative error with it {rel_err:.3f}."
    )
    return Result(
        verdict,
        summary,
        {
            "log det Σ, no volume: first epoch": ld_off[0],
            "log det Σ, no volume: last epoch": ld_off[-1],
            "growth of log det Σ without volume": growth,
            "fraction of epochs with growing log det Σ": increasing,
            "fraction of epochs with improving objective": improving,
            "log det Σ_data": data_logdet,
            "with volume: relative error of Σ": rel_err,
            "epochs": epochs,
            "n": n,
        },
        criteria,
        [figure],
        details="With the volume term the energy is ½‖W(x−μ)‖² − log|det W| = ½(x−μ)ᵀΣ⁻¹(x−μ) + ½ log det Σ + const: "
        "the log-det term penalises large volume and the distance term penalises small volume. Dropping the "
        "log-det term leaves only the penalty on small volume, so Σ expands. The singularity the paper describes "
        "(a component shrinking onto one point with unbounded likelihood) belongs to the full likelihood, log-det "
        "included, and is what reg_covar guards against.",
    )


EXPERIMENT = Experiment(
    name="volume_collapse",
    title="The log-determinant volume term and collapse",
    claim="A full Gaussian mixture model includes a log-determinant term in the likelihood, a penalty on the volume "
    "of each component’s covariance. This term prevents collapse: without it, a component could shrink its "
    "covariance to zero, placing infinite density on a single point and achieving unbounded likelihood.",
    source="paper §6.2 (Scale and Collapse), §3.4",
    Config=Config,
    run=run,
)
