r"""The volume term: what a Gaussian component does without log|det W| (paper §3.4), and §6.2's sentence about it.

The claims, as written in paper/implicit-em-paper.md. §3.4 (the one this experiment's verdict judges):

    Second, the volume term removes the trivial collapse mode. Without it, the objective $\exp(-d_{j})$ alone is
    maximized by shrinking the learned metric: driving $W_{j}\to 0$ maps every input to the prototype, sending all
    distances to zero and all likelihoods to one. The $\log\lvert\det W_{j}\rvert$ term sends that configuration to
    $-\infty$, and equilibrium is reached where the learned metric matches the data’s covariance: growing $W_{j}$ is
    rewarded by volume but punished quadratically by distance, and vice versa.

§6.2 (judged separately):

    This term prevents collapse: without it, a component could shrink its covariance to zero, placing infinite
    density on a single point and achieving unbounded likelihood. The log-determinant diverges as the covariance
    collapses, counterbalancing the density gain.

The two sections predict opposite things for the same run: W → 0 means Σ = (WᵀW)⁻¹ grows without bound (§3.4),
while §6.2 has Σ shrink to zero. So each gets its own criteria, and either could come out true.

Method: one full-covariance component on 2-D data (covariance Σ_data), trained by mini-batch gradient descent
(``GaussianMixture(fitter="gd")``, Adam) from the same start, once on the distance-only objective
½‖W(x − μ)‖² (``volume=False``) and once on the exact energy ½‖W(x − μ)‖² − log|det W| (``volume=True``). After
every epoch: log det Σ of the learned metric and the mean distance-only objective −½‖W(x − μ)‖² on all the data.
This is repeated on ``replicates`` independent data sets and batch orders (seeds ``seed·replicates + i``); every
criterion is judged on the median over the replicates, and the min–max spread is reported.

Verdict (§3.4), thresholds fixed in ``Config``:

- A1, W → 0: without the term, log det Σ grows by more than log(100) (Σ's volume ×100);
- A2 and A3, the objective drives it ("maximized by"): without the term the distance-only objective is better at
  the last epoch than at the first, and improves in at least 90% of epochs;
- A4, equilibrium at the data covariance: with the term, ‖Σ̄ − Σ_data‖/‖Σ_data‖ ≤ 5%, where Σ̄ is the mean of the
  per-epoch Σ over the second half of the epochs (the tail average, which estimates where constant-step Adam
  hovers; see the history below).

SUPPORTED if A1–A4 hold; PARTIAL if A1 and A4 hold but the objective does not keep improving (A2 or A3 fails): the
metric collapses and the term restores the equilibrium, but not through a steadily improving objective; REFUTED
if A1 or A4 fails.

§6.2's sentence holds if, without the term, log det Σ falls by more than log(100) (B1, the mirror of A1) and, with
it, Σ reaches Σ_data (A4); otherwise it is contradicted. It is reported next to the verdict, not folded into it.

History of the 90% threshold: the first version (72c0d7b) required ≥ 90% of epochs improving; 106d3e4 lowered it to
70% (and added A2) after a full run measured 78%. A threshold moved to fit a measurement is no threshold, so 90% is
restored; the verdict the moved 70% would give is computed and reported too (``MOVED_IMPROVING_SHARE``), not used.

History of A4's estimator: through 1cd20bb, A4 was judged on the last iterate's Σ. The first full run of that version
(5 replicates) gave last-iterate errors 0.040, 0.041, 0.113, 0.069, 0.142 (median 0.069 > 0.05: REFUTED), while
the log det Σ trace of the same arm stays on log det Σ_data throughout; the single-seed full run before it had
measured 0.040, that is replicate 0 alone. The last iterate of a constant-step stochastic optimiser carries the
optimiser's stationary noise, whose size is set by the step and the batch, not by where the equilibrium is; so
the estimator, not the 5% threshold, was wrong for this claim. The change to the tail average was decided after
that run and before computing it; the last-iterate errors and the verdicts the last-iterate rule gives are still
computed and reported (``verdicts under each rule``), next to the one used.
"""

import math
from dataclasses import dataclass

import numpy as np

from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, pyplot

__all__ = ["EXPERIMENT", "Config", "run"]

MOVED_IMPROVING_SHARE = 0.7  # the threshold 106d3e4 set after seeing 0.78: reported, never used for the verdict


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 2000  # 2-D samples per replicate
    epochs: int = 40  # epochs of mini-batch gradient descent, each arm
    replicates: int = 5  # independent data sets and batch orders; criteria are judged on their median
    # verdict thresholds (module docstring)
    # A1, §3.4 "driving W_j → 0": log det Σ grows by more than log(100) (volume ×100), the module's first threshold
    growth_min: float = math.log(100)
    # A3, §3.4 "maximized by": the objective improves in ≥ 90% of epochs, the first version's threshold (72c0d7b;
    # 106d3e4 had moved it to 0.7 after a full run measured 0.78)
    improving_share_min: float = 0.9
    # A4, §3.4 "equilibrium [...] where the learned metric matches the data's covariance": 5% relative Frobenius error
    relative_error_max: float = 0.05
    # B1, §6.2 "shrink its covariance to zero": log det Σ falls by more than log(100) (volume ÷100), mirroring A1
    shrink_min: float = math.log(100)

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n=20000, epochs=150)


def _trace(x: np.ndarray, volume: bool, epochs: int, seed: int) -> tuple[list[float], list[float], np.ndarray]:
    """Train one component on x; per epoch log det Σ, the mean distance-only objective and Σ, (epochs, D, D)."""
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
    logdets, objective, covs = [], [], []
    for _ in range(epochs):
        for idx in np.array_split(rng.permutation(len(x)), max(len(x) // 200, 1)):
            gm.partial_fit(x[idx])
        cov = gm.covariances_[0]
        covs.append(cov)
        logdets.append(float(np.linalg.slogdet(cov)[1]))
        diff = x - gm.means_[0]
        objective.append(float(-0.5 * np.mean(np.sum(diff @ np.linalg.inv(cov) * diff, axis=1))))
    return logdets, objective, np.stack(covs)


@dataclass(frozen=True)
class _Replicate:
    """One data set, both arms: the per-epoch traces and the numbers the criteria use."""

    ld_off: list[float]  # log det Σ per epoch, no volume term
    ld_on: list[float]  # log det Σ per epoch, with it
    obj_off: list[float]  # the distance-only objective per epoch, no volume term
    data_logdet: float
    growth: float  # log det Σ, last − first epoch, no volume term
    objective_gain: float  # objective, last − first epoch, no volume term
    improving: float  # share of epochs whose objective is better than the epoch before
    rel_err: float  # ‖Σ̄ − Σ_data‖/‖Σ_data‖ with the volume term, Σ̄ the mean Σ over the second half of the epochs
    rel_err_last: float  # the same for the last epoch's Σ (the estimator through 1cd20bb)


def _replicate(n: int, epochs: int, seed: int) -> _Replicate:
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2) @ np.array([[2.0, 0.0], [0.5, 1.0]])
    data_cov = np.cov(x.T, bias=True)
    ld_off, obj_off, _ = _trace(x, False, epochs, seed)
    ld_on, _, covs_on = _trace(x, True, epochs, seed)

    def rel_err(cov: np.ndarray) -> float:
        return float(np.linalg.norm(cov - data_cov) / np.linalg.norm(data_cov))

    return _Replicate(
        ld_off=ld_off,
        ld_on=ld_on,
        obj_off=obj_off,
        data_logdet=float(np.linalg.slogdet(data_cov)[1]),
        growth=ld_off[-1] - ld_off[0],
        objective_gain=obj_off[-1] - obj_off[0],
        improving=float(np.mean(np.diff(obj_off) > 0)),
        rel_err=rel_err(covs_on[epochs // 2 :].mean(0)),
        rel_err_last=rel_err(covs_on[-1]),
    )


def _verdict_34(a1: bool, a2: bool, a3: bool, a4: bool) -> Verdict:
    """§3.4's verdict from its four criteria (module docstring)."""
    if not (a1 and a4):
        return "REFUTED"
    return "SUPPORTED" if a2 and a3 else "PARTIAL"


def _criteria(cfg: Config, med: dict[str, float]) -> list[Criterion]:
    """A1–A4 (§3.4, the verdict) and B1 (§6.2, judged separately) on the medians over replicates."""
    return [
        criterion("A1 §3.4 W → 0: growth of log det Σ without volume (median)", med["growth"], ">", cfg.growth_min),
        criterion("A2 §3.4: objective without volume, last − first epoch (median)", med["objective_gain"], ">", 0.0),
        criterion(
            "A3 §3.4: share of epochs with improving objective (median)",
            med["improving"],
            ">=",
            cfg.improving_share_min,
        ),
        criterion(
            "A4 §3.4: with volume, relative error of the tail-averaged Σ (median)",
            med["rel_err"],
            "<=",
            cfg.relative_error_max,
        ),
        criterion(
            "B1 §6.2, judged separately: change of log det Σ without volume (median; shrinks)",
            med["growth"],
            "<",
            -cfg.shrink_min,
        ),
    ]


def run(cfg: Config, ctx: Context) -> Result:
    reps = [_replicate(cfg.n, cfg.epochs, cfg.seed * cfg.replicates + i) for i in range(cfg.replicates)]
    keys = ("growth", "objective_gain", "improving", "rel_err", "rel_err_last")
    values = {k: [float(getattr(r, k)) for r in reps] for k in keys}
    med = {k: float(np.median(v)) for k, v in values.items()}
    criteria = _criteria(cfg, med)
    a1, a2, a3, a4, b1 = (c.passed for c in criteria)
    verdict = _verdict_34(a1, a2, a3, a4)
    a4_last = med["rel_err_last"] <= cfg.relative_error_max
    verdicts = {  # the rule used, and the ones that moved the 90% or judged the last iterate (module docstring)
        "A3 at 0.9, A4 on the tail average (used)": verdict,
        "A3 at the moved 0.7, A4 on the tail average": _verdict_34(
            a1, a2, med["improving"] >= MOVED_IMPROVING_SHARE, a4
        ),
        "A3 at 0.9, A4 on the last iterate": _verdict_34(a1, a2, a3, a4_last),
        "A3 at the moved 0.7, A4 on the last iterate": _verdict_34(
            a1, a2, med["improving"] >= MOVED_IMPROVING_SHARE, a4_last
        ),
    }
    sentence_62 = "holds" if b1 and a4 else "contradicted"
    spread = {k: [min(v), max(v)] for k, v in values.items()}
    figure = _figure(reps, cfg, med, ctx)

    growth, improving, rel_err = med["growth"], med["improving"], med["rel_err"]
    direction = "grows" if growth > 0 else "shrinks"
    failed = [c.metric.split(" ")[0] for c in criteria[:4] if not c.passed]
    summary = (
        f"§3.4: without the volume term log det Σ {direction} by {abs(growth):.1f} (Σ's volume ×{np.exp(growth):.3g}) "
        f"in {cfg.epochs} epochs, the distance-only objective improving in {100 * improving:.0f}% of them (A3 needs "
        f"≥ {100 * cfg.improving_share_min:.0f}%; last − first {med['objective_gain']:+.2g}); with it Σ averaged over "
        f"the second half is {rel_err:.3f} from the data covariance (last iterate {med['rel_err_last']:.3f}). Medians "
        f"of {cfg.replicates} replicates. {_reading(verdict, failed)} §6.2's sentence ('shrink its covariance to "
        f"zero') is {sentence_62}: Σ {direction}. With the 70% threshold moved after seeing a full run, §3.4 would be "
        f"{verdicts['A3 at the moved 0.7, A4 on the tail average']}."
    )
    return Result(
        verdict,
        summary,
        {
            "growth of log det Σ without volume (median)": growth,
            "objective without volume, last − first (median)": med["objective_gain"],
            "fraction of epochs with improving objective (median)": improving,
            "with volume: relative error of Σ, tail average (median)": rel_err,
            "with volume: relative error of Σ, last iterate (median)": med["rel_err_last"],
            "spread over replicates [min, max]": spread,
            "per replicate": values,
            "log det Σ, no volume: first epoch (replicate 0)": reps[0].ld_off[0],
            "log det Σ, no volume: last epoch (replicate 0)": reps[0].ld_off[-1],
            "log det Σ_data (replicate 0)": reps[0].data_logdet,
            "§3.4 verdicts under each rule": verdicts,
            "§6.2 sentence (judged separately)": sentence_62,
            "replicates": cfg.replicates,
            "epochs": cfg.epochs,
            "n": cfg.n,
        },
        criteria,
        [figure],
        details="With the volume term the energy is ½‖W(x−μ)‖² − log|det W| = ½(x−μ)ᵀΣ⁻¹(x−μ) + ½ log det Σ + const: "
        "the log-det term penalises large volume and the distance term penalises small volume, so the optimum is "
        "Σ = Σ_data (§3.4's equilibrium). Dropping the log-det term leaves only the penalty on small volume: the "
        "objective exp(−d) ≤ 1 is maximised as W → 0 (Σ → ∞), as §3.4 says. §6.2's sentence has it the other way: "
        "without the term exp(−d) never exceeds 1, so no infinite density and no unbounded likelihood are possible, "
        "and shrinking Σ lowers the objective. The single-point singularity §6.2 describes (a component shrinking "
        "onto one point with unbounded likelihood) belongs to the full likelihood, where it is the −½ log det Σ part "
        "that diverges; it is what reg_covar guards against. The 90% threshold on improving epochs is the first "
        "version's; a later version lowered it to 70% after a full run measured 78% (module docstring), and the "
        "verdict under that moved threshold is reported, not used. A4 judges the mean Σ over the second half of the "
        "epochs: the last iterate of constant-step Adam carries the optimiser's noise (its errors are reported too, "
        "with the verdicts a last-iterate rule gives). Late epochs are noisy: the objective is then "
        "close to its supremum 0 and each epoch's change is small against the noise of the mini-batch steps.",
    )


def _reading(verdict: Verdict, failed: list[str]) -> str:
    if verdict == "SUPPORTED":
        return "§3.4's prediction holds."
    if verdict == "PARTIAL":
        return (
            "W → 0 and the equilibrium hold as §3.4 predicts; the objective does not keep improving "
            f"({', '.join(failed)} fail)."
        )
    return f"§3.4's prediction fails on {', '.join(failed)}."


def _figure(reps: list[_Replicate], cfg: Config, med: dict[str, float], ctx: Context) -> str:
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, rep in enumerate(reps):
        first = i == 0
        a1.plot(rep.ld_off, color="C0", alpha=0.7, label="distance only (volume=False)" if first else None)
        a1.plot(rep.ld_on, color="C1", alpha=0.7, label="with log|det W| (volume=True)" if first else None)
        a2.semilogy(-np.asarray(rep.obj_off), color="C0", alpha=0.7)
    a1.axhline(reps[0].data_logdet, color="grey", ls="--", label="log det Σ_data (replicate 0)")
    a1.set_xlabel("epoch")
    a1.set_ylabel("log det Σ")
    a1.legend(fontsize=8)
    a1.set_title(f"the learned metric ({len(reps)} replicates)")
    a2.set_xlabel("epoch")
    a2.set_ylabel("mean ½‖W(x − μ)‖² (no volume; lower is better)")
    a2.set_title(f"distance-only objective (improving in {100 * med['improving']:.0f}% of epochs, median)", fontsize=10)
    fig.tight_layout()
    return ctx.save_figure(fig, "volume_collapse")


EXPERIMENT = Experiment(
    name="volume_collapse",
    title="The log-determinant volume term and collapse",
    claim="Second, the volume term removes the trivial collapse mode. Without it, the objective exp(−d_j) alone is "
    "maximized by shrinking the learned metric: driving W_j→0 maps every input to the prototype, sending all "
    "distances to zero and all likelihoods to one. The log|det W_j| term sends that configuration to −∞, and "
    "equilibrium is reached where the learned metric matches the data’s covariance [...]",
    source="paper §3.4 (the verdict); §6.2 ('without it, a component could shrink its covariance to zero'), "
    "judged separately",
    Config=Config,
    run=run,
)
