r"""The volume term: what a Gaussian component does without log|det W| (paper §3.4), and §6.2's sentence about it.

The claims, as written in paper/implicit-em-paper.md. §3.4 (the one the verdict judges):

    Second, the volume term removes the trivial collapse mode. Without it, the objective $\exp(-d_{j})$ alone is
    maximized by shrinking the learned metric: driving $W_{j}\to 0$ maps every input to the prototype, sending all
    distances to zero and all likelihoods to one. The $\log\lvert\det W_{j}\rvert$ term sends that configuration to
    $-\infty$, and equilibrium is reached where the learned metric matches the data’s covariance: growing $W_{j}$ is
    rewarded by volume but punished quadratically by distance, and vice versa.

§6.2 (judged separately): "This term prevents collapse: without it, a component could shrink its covariance to
zero, placing infinite density on a single point and achieving unbounded likelihood." The two sections predict
opposite things for the same run (W → 0 means Σ = (WᵀW)⁻¹ grows; §6.2 has Σ shrink), so each has its criteria.

Method: one full-covariance component on 2-D data (covariance Σ_data), mini-batch gradient descent
(``GaussianMixture(fitter="gd")``, Adam) from one start, once on the distance-only objective ½‖W(x − μ)‖²
(``volume=False``) and once on the exact energy ½‖W(x − μ)‖² − log|det W| (``volume=True``). After every epoch:
log det Σ and the mean distance-only objective −½‖W(x − μ)‖² on all the data. Repeated on ``n_seeds`` independent
data sets and batch orders; every criterion is judged on the median over them (the min–max spread is reported).

Rule (§3.4), thresholds in ``Config``: A1, W → 0: without the term log det Σ grows by more than log 100; A2, the
objective drives it: without the term the objective is better at the last epoch than at the first; A3, the collapse
proceeds monotonically in trend: without the term Spearman's ρ(epoch, log det Σ) ≥ 0.9; A4, equilibrium: with the
term ‖Σ̄ − Σ_data‖/‖Σ_data‖ ≤ 5%, Σ̄ the mean Σ over the second half of the epochs (the tail average; the last
iterate's error is reported beside). SUPPORTED if A1–A4 hold; PARTIAL if A1 and A4 hold and A2 or A3 fails; REFUTED
if A1 or A4 fails. Gate C3, A3's control: with the term (no collapse) the same ρ is below 0.9, else UNDECIDED (a
trend measure that reads an arm at equilibrium as a collapse cannot decide). The share of epochs whose objective
improved (A3 until the referee's change) is reported, not judged. §6.2's sentence holds if without the term
log det Σ falls by more than log 100 (B1, A1's mirror) and A4 holds; it is reported beside the verdict. History:
docs/claims/volume_collapse.md.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from implicit_em.audit import seeds, stats
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gate, gated
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds.measured import Measured

__all__ = [
    "EXPERIMENT",
    "Config",
    "Replicate",
    "Rule",
    "criteria",
    "figures",
    "measure",
    "replicate",
    "run",
    "summary",
    "trace",
    "verdict",
]


@dataclass(frozen=True)
class Rule:
    """The thresholds of §3.4's criteria and §6.2's."""

    # A1, §3.4 "driving W_j → 0": log det Σ grows by more than log(100) (Σ's volume ×100)
    growth_min: float = math.log(100)
    # A3, §3.4 "driving W_j → 0" as a trend: Spearman ρ(epoch, log det Σ) ≥ 0.9 without the term (ρ = 1 is a
    # collapse that never reverses; 0.9, the first version's 90% monotonicity bar on the rank scale); its control
    # C3 (a gate): with the term, at equilibrium, the same ρ is below it. Declared before the deciding seeds (page)
    trend_min: float = 0.9
    # A4, §3.4 "equilibrium [...] where the learned metric matches the data's covariance": 5% relative Frobenius error
    relative_error_max: float = 0.05
    # B1, §6.2 "shrink its covariance to zero": log det Σ falls by more than log(100) (volume ÷100), mirroring A1
    shrink_min: float = math.log(100)


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 2000  # 2-D samples per replicate
    epochs: int = 40  # epochs of mini-batch gradient descent, each arm
    n_seeds: int = 5  # independent data sets and batch orders; criteria are judged on their median
    rule: Rule = field(default_factory=Rule)

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n=20000, epochs=150)


def trace(x: np.ndarray, volume: bool, epochs: int, seed: int) -> tuple[list[float], list[float], np.ndarray]:
    """Train one component on x (N, 2); per epoch log det Σ, the mean distance-only objective and Σ, (epochs, 2, 2)."""
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
class Replicate:
    """One data set, both arms: the per-epoch traces and the numbers the criteria use."""

    ld_off: list[float]  # log det Σ per epoch, no volume term
    ld_on: list[float]  # log det Σ per epoch, with it
    obj_off: list[float]  # the distance-only objective per epoch, no volume term
    data_logdet: float
    growth: float  # log det Σ, last − first epoch, no volume term
    objective_gain: float  # objective, last − first epoch, no volume term
    improving: float  # share of epochs whose objective is better than the epoch before (the old A3, reported)
    trend: float  # Spearman ρ(epoch, log det Σ), no volume term
    trend_on: float  # the same with the volume term (A3's control)
    rel_err: float  # ‖Σ̄ − Σ_data‖/‖Σ_data‖ with the volume term, Σ̄ the mean Σ over the second half of the epochs
    rel_err_last: float  # the same for the last epoch's Σ


def replicate(n: int, epochs: int, seed: int) -> Replicate:
    """Data x = z·[[2, 0], [0.5, 1]] (z standard normal, N × 2) and both arms on it, batch orders from ``seed``."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2) @ np.array([[2.0, 0.0], [0.5, 1.0]])
    data_cov = np.cov(x.T, bias=True)
    ld_off, obj_off, _ = trace(x, False, epochs, seed)
    ld_on, _, covs_on = trace(x, True, epochs, seed)

    def rel_err(cov: np.ndarray) -> float:
        return float(np.linalg.norm(cov - data_cov) / np.linalg.norm(data_cov))

    return Replicate(
        ld_off=ld_off,
        ld_on=ld_on,
        obj_off=obj_off,
        data_logdet=float(np.linalg.slogdet(data_cov)[1]),
        growth=ld_off[-1] - ld_off[0],
        objective_gain=obj_off[-1] - obj_off[0],
        improving=float(np.mean(np.diff(obj_off) > 0)),
        trend=stats.spearman(np.arange(epochs), ld_off),
        trend_on=stats.spearman(np.arange(epochs), ld_on),
        rel_err=rel_err(covs_on[epochs // 2 :].mean(0)),
        rel_err_last=rel_err(covs_on[-1]),
    )


def _replicate_seed(cfg: Config, i: int) -> int:
    """Replicate i's seed: its data set, its batch orders and the fitter's ``random_state``."""
    return seeds.derive(cfg.seed, "replicate", i)


GROWTH = "growth of log det Σ without volume (median)"
GAIN = "objective without volume, last − first (median)"
IMPROVING = "fraction of epochs with improving objective (median)"
TREND = "Spearman ρ(epoch, log det Σ) without volume (median)"
TREND_ON = "with volume: Spearman ρ(epoch, log det Σ) (median)"
REL_ERR = "with volume: relative error of Σ, tail average (median)"
REL_ERR_LAST = "with volume: relative error of Σ, last iterate (median)"
SENTENCE_62 = "§6.2 sentence (judged separately)"


def measure(cfg: Config, ctx: Context) -> Measured:
    """Both arms on ``n_seeds`` data sets; the medians the criteria read, their spreads, and §6.2's sentence."""
    reps = [replicate(cfg.n, cfg.epochs, _replicate_seed(cfg, i)) for i in range(cfg.n_seeds)]
    keys = ("growth", "objective_gain", "trend", "trend_on", "improving", "rel_err", "rel_err_last")
    values = {k: [float(getattr(r, k)) for r in reps] for k in keys}
    med = {k: stats.median(v) for k, v in values.items()}
    m = Measured()
    m.drawn["replicates"] = reps
    m.put(GROWTH, med["growth"], "nats", "without volume: log det Σ, last − first epoch (median over data sets)")
    m.put(GAIN, med["objective_gain"], "nats", "without volume: −½‖W(x − μ)‖², last − first epoch (median)")
    m.put(TREND, med["trend"], "correlation", "without volume: Spearman ρ of log det Σ with the epoch (median)")
    m.put(TREND_ON, med["trend_on"], "correlation", "with volume: the same ρ, A3's control (median)")
    m.put(IMPROVING, med["improving"], "fraction", "without volume: share of epochs whose objective improved (median)")
    m.put(REL_ERR, med["rel_err"], "relative", "with volume: ‖Σ̄ − Σ_data‖/‖Σ_data‖, Σ̄ the tail average (median)")
    m.put(REL_ERR_LAST, med["rel_err_last"], "relative", "with volume: the same for the last iterate (median)")
    spread = {k: [min(v), max(v)] for k, v in values.items()}
    m.put("spread over replicates [min, max]", spread, "mixed", "[min, max] over data sets of each number above")
    m.put("per replicate", values, "mixed", "each number above per data set")
    m.put(
        "log det Σ, no volume: first epoch (replicate 0)",
        reps[0].ld_off[0],
        "nats",
        "without volume: log det Σ, first epoch (data set 0)",
    )
    m.put(
        "log det Σ, no volume: last epoch (replicate 0)",
        reps[0].ld_off[-1],
        "nats",
        "without volume: log det Σ, last epoch (data set 0)",
    )
    m.put("log det Σ_data (replicate 0)", reps[0].data_logdet, "nats", "log det Σ_data (data set 0)")
    shrinks = med["growth"] < -cfg.rule.shrink_min
    holds = shrinks and med["rel_err"] <= cfg.rule.relative_error_max
    m.put(
        SENTENCE_62, "holds" if holds else "contradicted", "verdict", "§6.2's sentence (B1 and A4), judged separately"
    )
    m.put("replicates", cfg.n_seeds, "count", "data sets (replicates)")
    m.put("epochs", cfg.epochs, "count", "epochs of each arm")
    m.put("n", cfg.n, "count", "samples N per data set")
    return m


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """A1–A4 (§3.4, the verdict) and B1 (§6.2, judged separately) on the medians over the data sets."""
    r = cfg.rule
    return [
        criterion("A1 §3.4 W → 0: growth of log det Σ without volume (median)", m[GROWTH], ">", r.growth_min),
        criterion("A2 §3.4: objective without volume, last − first epoch (median)", m[GAIN], ">", 0.0),
        criterion("A3 §3.4 W → 0 in trend: ρ(epoch, log det Σ) without volume (median)", m[TREND], ">=", r.trend_min),
        criterion(
            "A4 §3.4: with volume, relative error of the tail-averaged Σ (median)",
            m[REL_ERR],
            "<=",
            r.relative_error_max,
        ),
        criterion(
            "B1 §6.2, judged separately: change of log det Σ without volume (median; shrinks)",
            m[GROWTH],
            "<",
            -r.shrink_min,
        ),
        gate("C3 A3's control: with volume, ρ(epoch, log det Σ) (median; no collapse)", m[TREND_ON], "<", r.trend_min),
    ]


def verdict(cfg: Config, m: Metrics, crit: list[Criterion]) -> Verdict:
    """REFUTED unless A1 and A4 hold; then SUPPORTED if A2 and A3 hold too, else PARTIAL (B1 is not counted); UNDECIDED
    if the control C3 fails."""
    a1, a2, a3, a4 = (c.passed for c in crit[:4])
    if not (a1 and a4):
        return gated("REFUTED", crit)
    return gated("SUPPORTED" if a2 and a3 else "PARTIAL", crit)


def summary(cfg: Config, m: Metrics, v: Verdict) -> str:
    crit = criteria(cfg, m)
    growth = m[GROWTH]
    direction = "grows" if growth > 0 else "shrinks"
    failed = ", ".join(c.metric.split(" ")[0] for c in crit[:4] if not c.passed)
    reading = {
        "SUPPORTED": "§3.4's prediction holds.",
        "PARTIAL": f"W → 0 and the equilibrium hold as §3.4 predicts; {failed} fails.",
        "UNDECIDED": f"The control C3 failed: with the term log det Σ trends too (ρ = {m[TREND_ON]:.2f}), so the trend "
        "measure cannot tell a collapse from convergence.",
    }.get(v, f"§3.4's prediction fails on {failed}.")
    return (
        f"§3.4: without the volume term log det Σ {direction} by {abs(growth):.1f} (Σ's volume ×{np.exp(growth):.3g}) "
        f"in {cfg.epochs} epochs, with rank correlation ρ = {m[TREND]:.3f} with the epoch (A3 needs "
        f"≥ {cfg.rule.trend_min:g}; with the term, the control, ρ = {m[TREND_ON]:.2f}); the distance-only objective "
        f"last − first {m[GAIN]:+.2g}, improving in {100 * m[IMPROVING]:.0f}% of epochs (reported, not judged); with "
        f"the term Σ averaged over the second half is {m[REL_ERR]:.3f} from the data covariance (last iterate "
        f"{m[REL_ERR_LAST]:.3f}). Medians of {cfg.n_seeds} replicates. {reading} §6.2's sentence ('shrink its "
        f"covariance to zero') is {m[SENTENCE_62]}: Σ {direction}."
    )


DETAILS = (
    "With the volume term the energy is ½‖W(x−μ)‖² − log|det W| = ½(x−μ)ᵀΣ⁻¹(x−μ) + ½ log det Σ + const: the "
    "log-det term penalises large volume and the distance term penalises small volume, so the optimum is Σ = Σ_data "
    "(§3.4's equilibrium). Dropping the log-det term leaves only the penalty on small volume: the objective exp(−d) "
    "≤ 1 is maximised as W → 0 (Σ → ∞), as §3.4 says. §6.2's sentence has it the other way: without the term "
    "exp(−d) never exceeds 1, so no infinite density and no unbounded likelihood are possible, and shrinking Σ "
    "lowers the objective. The single-point singularity §6.2 describes belongs to the full likelihood, where it is "
    "the −½ log det Σ part that diverges; it is what reg_covar guards against. A4 judges the mean Σ over the second "
    "half of the epochs: the last iterate of constant-step Adam carries the optimiser's noise (its error is "
    "reported too). Late epochs are noisy: the objective is then close to its supremum 0 and each epoch's change is "
    "small against the noise of the mini-batch steps, so A3 reads the trend of log det Σ (Spearman's ρ with the "
    "epoch), not the share of improving epochs (reported). History of the rule: docs/claims/volume_collapse.md."
)


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """log det Σ per epoch for both arms, and the distance-only objective per epoch, every data set."""
    plt = pyplot()
    reps = m.drawn["replicates"]
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
    a1.set_title(f"the learned metric ({len(reps)} replicates; ρ {m[TREND]:.2f} and {m[TREND_ON]:.2f})", fontsize=10)
    a2.set_xlabel("epoch")
    a2.set_ylabel("mean ½‖W(x − μ)‖² (no volume; lower is better)")
    a2.set_title(f"distance-only objective (improving in {100 * m[IMPROVING]:.0f}% of epochs, median)", fontsize=10)
    fig.tight_layout()
    return [ctx.save_figure(fig, "volume_collapse")]


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), details=DETAILS)


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
