r"""Do weight decay, layer normalisation or residual connections keep a representation from collapsing? (§6.2)

The claim, as written in paper/implicit-em-paper.md, §6.2 ("Scale and Collapse"), after "nothing in the objective
prevents the learned metric from degenerating. A network can learn to map all inputs to nearby points, collapsing
the distance structure and trivializing the responsibilities":

    In practice, collapse is often avoided through mechanisms external to the objective: weight decay regularizes
    the scale of projections, layer normalization constrains activation magnitudes, and architectural choices such
    as residual connections preserve signal diversity. These interventions stabilize the geometry, but none is
    derived from the objective whose pathology it controls.

The second sentence's "none is derived" is about derivations and is not tested. The setting
(:mod:`implicit_em.audit.testbeds.volume_arms`, its scale-sensitive part) is §6.2's own: the distance objective
without its volume term, L⁻ = −log Σ_j (1/K) exp(−½‖f(x) − μ_j‖²), K = 4 learnt prototypes, a 2-layer MLP encoder
on K = 4 clusters in D = 8, full-batch AdamW (lr 10⁻³). L⁻ sees the features' scale, so each mechanism acts on what
collapses. At the margin: over R replicate starts the bare encoder (``none``) collapses in about half of them within
the budget (700 steps, chosen on pilot seeds 100-102). Arms, paired by start: ``none``; weight decay 0.01, 0.1, 1;
LayerNorm on the features with a gain, then without; 1 and 2 residual blocks; the controls ``volume`` (L⁻ minus
½ log det Cov(z): the positive control) and ``placebo`` (``none`` from other starts: the negative control).

Collapse of a replicate: the held-out features' total variance tr Cov(z) at or under 5 % of its start; its time
is the first snapshot there, censored at the budget (a replicate that never collapses counts the budget). Per
dose, the paired difference of censored times from ``none``, mean ± 2 SE over the replicates. A mechanism
*delays* at a dose if mean − 2 SE > 0; it *stabilises* if it delays at its top dose and no dose step goes back by
more than 2 SE. Gates: ``none`` collapses in 25-75 % of replicates (the margin), ``volume`` delays, ``placebo``
does not. SUPPORTED if all three mechanisms stabilise, REFUTED if none delays at any dose, PARTIAL otherwise. The
previous setting (SimSiam's cosine, REFUTED) is computed beside the verdict. History: docs/claims/.
"""

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import implicit_em.audit.testbeds.volume_arms as va
from implicit_em.audit import seeds, stats
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gate, gated
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds.measured import Measured

__all__ = [
    "EXPERIMENT",
    "MECHANISMS",
    "Config",
    "Old",
    "Rule",
    "arms",
    "censored_times",
    "criteria",
    "doses",
    "effect",
    "figures",
    "measure",
    "old_reading",
    "readings",
    "run",
    "summary",
    "verdict",
]

MECHANISMS = ("weight_decay", "layernorm", "residual")  # the three §6.2 names: they decide the verdict
OLD_ARMS = ("none", "weight_decay", "layernorm", "residual", "logdet")  # the SimSiam setting's deciding arms


@dataclass(frozen=True)
class Rule:
    """The collapse criterion, the effect bar and the gates, declared before the deciding runs (seeds 0-4)."""

    # collapsed: tr Cov(z) ≤ 5 % of its start (pilot: collapsed runs sit at 1.3-3.8 %, the others at ≥ 12.7 %)
    collapse_ratio: float = 0.05
    # an effect is beyond noise when the paired mean difference clears this many standard errors
    n_se: float = 2.0
    # the margin: none collapses in this share range of its replicates (else UNDECIDED)
    margin_low: float = 0.25
    margin_high: float = 0.75


@dataclass(frozen=True)
class Old:
    """The previous setting (SimSiam's cosine on two noisy views, REFUTED), computed beside the verdict."""

    n: int = 300
    steps: int = 600
    eval_every: int = 50
    replicates: int = 1  # quick: its first replicate only (the record of all three: the claim's page)
    separation: float = 2.0
    sigma: float = 0.3
    lr: float = 1e-2
    weight_decay: float = 0.1


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n: int = 128  # training inputs (and as many held out), one data set per seed
    dim: int = 8  # D, input and feature dimension
    k: int = 4  # K, clusters and prototypes
    separation: float = 2.0  # cluster means ~ N(0, separation² Σ) (the previous setting's)
    hidden: int = 32  # the MLP blocks' hidden width
    steps: int = 700  # the budget (pilot seeds 100-102: none collapses in 26 of 48 starts by then, the placebo 21)
    lr: float = 1e-3  # AdamW's step (its default), every arm
    eval_every: int = 10  # steps between held-out snapshots (the resolution of a collapse time)
    replicates: int = 16  # R starts, shared by the arms (the placebo: R other starts)
    decays: tuple[float, ...] = (0.01, 0.1, 1.0)  # AdamW's default, GPT-style practice, ten times that
    volume_weight: float = 1.0  # the volume arm's weight on ½ log det Cov(z)
    rule: Rule = field(default_factory=Rule)
    old: Old = field(default_factory=Old)

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(replicates=48, old=Old(n=1000, steps=2000, eval_every=100, replicates=5))


def arms(cfg: Config) -> dict[str, tuple[str, int, va.Spec]]:
    """Every arm: its name → (mechanism or control, dose rank, spec). Dose 0 of every mechanism is ``none``."""
    out: dict[str, tuple[str, int, va.Spec]] = {"none": ("none", 0, va.Spec())}
    for i, w in enumerate(cfg.decays, 1):
        out[f"weight_decay {w:g}"] = ("weight_decay", i, va.Spec(decay=w))
    out["layernorm with gain"] = ("layernorm", 1, va.Spec(layernorm="gain"))
    out["layernorm without gain"] = ("layernorm", 2, va.Spec(layernorm="nogain"))
    out["residual 1 block"] = ("residual", 1, va.Spec(residual=1))
    out["residual 2 blocks"] = ("residual", 2, va.Spec(residual=2))
    out["volume"] = ("control", 0, va.Spec(volume=cfg.volume_weight))
    out["placebo"] = ("control", 0, va.Spec(init="placebo"))
    return out


def doses(cfg: Config, mechanism: str) -> list[str]:
    """The arms of ``mechanism`` in dose order, ``none`` first."""
    return ["none", *sorted((a for a, (m, _, _) in arms(cfg).items() if m == mechanism), key=lambda a: arms(cfg)[a][1])]


def censored_times(ratio: torch.Tensor, steps: list[int], bar: float) -> tuple[list[float], list[bool]]:
    """Per replicate (rows of ``ratio``, (R, T)): the first snapshot step with the ratio at or under ``bar`` and
    whether there is one; a replicate that never gets there (or reads NaN) counts the last step, censored."""
    times, hit = [], []
    for row in ratio.tolist():
        at = [t for t, v in zip(steps, row, strict=True) if v <= bar]
        times.append(float(at[0]) if at else float(steps[-1]))
        hit.append(bool(at))
    return times, hit


def effect(a: list[float], b: list[float]) -> dict[str, float]:
    """The paired difference a − b over replicates: its mean and standard error."""
    d = np.asarray(a) - np.asarray(b)
    return {"mean": float(d.mean()), "se": stats.sd(d) / math.sqrt(d.size)}


def _train_all(cfg: Config) -> dict[str, va.Trace]:
    sets = [
        va.make_data(cfg.n, cfg.n, cfg.dim, cfg.k, cfg.separation, seeds.torch_generator(cfg.seed, "mixture data", i))
        for i in range(cfg.replicates)
    ]
    data = va.stack_data(sets)  # one data set per replicate, shared by the arms
    out = {}
    for name, (_, _, spec) in arms(cfg).items():
        init = seeds.derive(cfg.seed, "mixture " + spec.init)
        out[name] = va.train_mixture(
            spec, data, cfg.replicates, cfg.k, cfg.hidden, cfg.steps, cfg.lr, cfg.eval_every, init
        )
    return out


def _arm_metrics(cfg: Config, tr: va.Trace, seconds: float) -> dict[str, Any]:
    ratio = tr.total_variance / tr.total_variance[:, :1]
    times, hit = censored_times(ratio, tr.steps, cfg.rule.collapse_ratio)
    return {
        "censored collapse step, per replicate": times,
        "collapsed, per replicate": hit,
        "collapse share": stats.mean([float(h) for h in hit]),
        "mean censored collapse step": stats.mean(times),
        "end variance ratio": stats.spread(ratio[:, -1].nan_to_num(math.inf).numpy()),
        "end exp I": stats.spread(tr.exp_information[:, -1].nan_to_num(math.nan).numpy()),
        "end log-volume change": stats.spread((tr.log_volume[:, -1] - tr.log_volume[:, 0]).numpy()),
        "non-finite replicates": int((~torch.isfinite(ratio[:, -1])).sum()),  # counted as never collapsing
        "seconds": seconds,
    }


PER_ARM = "per arm"


def _times(m: Metrics, arm: str) -> list[float]:
    return m[PER_ARM][arm]["censored collapse step, per replicate"]


def measure(cfg: Config, ctx: Context) -> Measured:
    """Every arm on the same R starts; per arm its censored collapse steps, shares and end states; per dose its
    paired effect on the censored step; the previous setting's reading beside."""
    t0 = time.perf_counter()
    traces = _train_all(cfg)
    seconds = (time.perf_counter() - t0) / len(traces)
    m = Measured()
    m.drawn["traces"] = traces
    per = {a: _arm_metrics(cfg, tr, seconds) for a, tr in traces.items()}
    m.put(PER_ARM, per, "mixed", "per arm: censored collapse steps (steps), shares, end ratios, exp I, seconds")
    vs_none = {a: effect(_times(m, a), _times(m, "none")) for a in per if a != "none"}
    m.put("effect vs none", vs_none, "[mean, SE]", "paired difference of censored collapse steps from none (steps)")
    steps = {}
    for mech in MECHANISMS:
        d = doses(cfg, mech)
        steps[mech] = [effect(_times(m, hi), _times(m, lo)) for lo, hi in itertools.pairwise(d)]
    m.put(
        "dose steps", steps, "[mean, SE]", "paired difference of censored collapse steps, each dose minus the one below"
    )
    rho = {}
    for mech in MECHANISMS:
        ranks = [float(i) for i, a in enumerate(doses(cfg, mech)) for _ in _times(m, a)]
        rho[mech] = stats.spearman(ranks, [t for a in doses(cfg, mech) for t in _times(m, a)])
    m.put("Spearman dose vs collapse step", rho, "correlation", "ρ of dose rank with censored collapse step (pooled)")
    m.put(
        "old SimSiam reading", old_reading(cfg), "mixed", "the previous setting (SimSiam's cosine), beside the verdict"
    )
    m.put("steps", cfg.steps, "steps", "the budget: training steps of every arm")
    m.put("replicates", cfg.replicates, "count", "replicate starts R per arm")
    return m


def _delays(m: Metrics, arm: str, n_se: float) -> float:
    e = m["effect vs none"][arm]
    return e["mean"] - n_se * e["se"]


def _monotone(m: Metrics, mech: str, n_se: float) -> float:
    """The worst dose step's mean + n_se·SE: ≥ 0 when no dose step goes back beyond noise."""
    return min(s["mean"] + n_se * s["se"] for s in m["dose steps"][mech])


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """The gates (margin, positive and negative controls), then per dose 'delays' and per mechanism 'monotone'."""
    r = cfg.rule
    share = m[PER_ARM]["none"]["collapse share"]
    out = [
        gate("gate: none collapses in at least the margin's low share", share, ">=", r.margin_low),
        gate("gate: none collapses in at most the margin's high share", share, "<=", r.margin_high),
        gate("gate: the volume term delays collapse (mean − 2 SE, steps)", _delays(m, "volume", r.n_se), ">", 0.0),
        gate(
            "gate: the placebo does not delay collapse (mean − 2 SE, steps)", _delays(m, "placebo", r.n_se), "<=", 0.0
        ),
    ]
    for mech in MECHANISMS:
        for a in doses(cfg, mech)[1:]:
            out.append(criterion(f"{a} delays collapse (mean − 2 SE, steps)", _delays(m, a, r.n_se), ">", 0.0))
        out.append(
            criterion(
                f"{mech}: no dose step goes back (worst mean + 2 SE, steps)", _monotone(m, mech, r.n_se), ">=", 0.0
            )
        )
    return out


def readings(cfg: Config, m: Metrics) -> dict[str, str]:
    """Per mechanism: 'stabilises' (delays at the top dose, no step back), 'delays at some dose' or 'no delay'."""
    out = {}
    for mech in MECHANISMS:
        d = doses(cfg, mech)[1:]
        delays = [_delays(m, a, cfg.rule.n_se) > 0 for a in d]
        if delays[-1] and _monotone(m, mech, cfg.rule.n_se) >= 0:
            out[mech] = "stabilises"
        else:
            out[mech] = "delays at some dose" if any(delays) else "no delay"
    return out


def verdict(cfg: Config, m: Metrics, crit: list[Criterion]) -> Verdict:
    """SUPPORTED if every mechanism stabilises, REFUTED if none delays at any dose, PARTIAL otherwise; UNDECIDED if
    a gate failed."""
    read = list(readings(cfg, m).values())
    if all(r == "stabilises" for r in read):
        return gated("SUPPORTED", crit)
    return gated("REFUTED" if all(r == "no delay" for r in read) else "PARTIAL", crit)


def _old_state(steps: list[int], spread: list[float]) -> str:
    """The previous rule: collapsed if the end spread ≤ 0.1; prevented if ≥ 0.3 and ≥ 0.8 × the spread at three
    quarters of training; partial otherwise."""
    i = min(range(len(steps)), key=lambda j: abs(steps[j] - 0.75 * steps[-1]))
    if spread[-1] <= 0.1:
        return "collapsed"
    return "prevented" if spread[-1] >= 0.3 and spread[-1] >= 0.8 * spread[i] else "partial"


def old_reading(cfg: Config) -> dict[str, Any]:
    """The previous setting's arms (SimSiam's cosine without the predictor, AdamW; same streams as before) and its
    rule's verdict: SUPPORTED if all three mechanisms prevent collapse in a majority, REFUTED if all three collapse,
    PARTIAL otherwise; UNDECIDED unless none collapses and logdet prevents."""
    o = cfg.old
    states: dict[str, list[str]] = {a: [] for a in OLD_ARMS}
    spreads: dict[str, list[float]] = {a: [] for a in OLD_ARMS}
    for i in range(o.replicates):
        data = va.make_data(
            o.n, o.n, cfg.dim, cfg.k, o.separation, torch.Generator().manual_seed(seeds.derive(cfg.seed, "data", i))
        )
        for arm in OLD_ARMS:
            model = va.Siamese(
                arm, data.x_train, cfg.hidden, torch.Generator().manual_seed(seeds.derive(cfg.seed, "init", i))
            )
            views = torch.Generator().manual_seed(seeds.derive(cfg.seed, "views", i))
            at, snaps = va.train_siamese(model, data, o.steps, o.lr, o.weight_decay, o.sigma, 1.0, o.eval_every, views)
            states[arm].append(_old_state(at, [s.spread for s in snaps]))
            spreads[arm].append(snaps[-1].spread)

    def most(arm: str, state: str) -> bool:
        return states[arm].count(state) > 0.5 * o.replicates

    if not (most("none", "collapsed") and most("logdet", "prevented")):
        v = "UNDECIDED"
    elif all(most(a, "prevented") for a in MECHANISMS):
        v = "SUPPORTED"
    else:
        v = "REFUTED" if all(most(a, "collapsed") for a in MECHANISMS) else "PARTIAL"
    return {"verdict": v, "states": states, "end spread": spreads, "replicates": o.replicates}


def summary(cfg: Config, m: Metrics, v: Verdict) -> str:
    failed = [c.metric for c in criteria(cfg, m) if c.role == "gate" and not c.passed]
    head = f"cannot decide: {'; '.join(failed)} failed. " if failed else ""
    read = readings(cfg, m)
    words = "; ".join(f"{mech}: {r}" for mech, r in read.items())
    per, eff = m[PER_ARM], m["effect vs none"]

    def arm(a: str) -> str:
        p = per[a]
        e = "" if a == "none" else f", {eff[a]['mean']:+.0f} ± {eff[a]['se']:.0f}"
        return f"{a} {p['collapse share']:.2f}{e}"

    old = m["old SimSiam reading"]
    return (
        f"{head}{words}. Collapse share of {cfg.replicates} starts, and the paired change of the censored collapse "
        f"step from none (mean ± SE, budget {cfg.steps}): " + "; ".join(arm(a) for a in per) + ". The previous "
        f"setting (SimSiam's cosine, {old['replicates']} replicate(s)) reads {old['verdict']} beside the verdict."
    )


DETAILS = (
    "The paper's distance objective without its volume term, on which collapse (every input on one point, the "
    "responsibilities the same for every input) is the optimum and the loss sees the features' scale, so weight "
    "decay, LayerNorm and residual connections each act on what collapses. The budget puts the bare encoder at the "
    "margin (it collapses in about half of its starts), so a mechanism can move collapse either way; the score, "
    "the censored collapse step, counts a start that never collapses at the budget and so reads both the "
    "probability and the time of collapse. One small setting (D = 8, K = 4, full-batch AdamW at lr 10⁻³); the "
    "doses are declared, not tuned; a placebo (other starts of the bare encoder) and a volume term are the controls. "
    "The previous setting (SimSiam's cosine, where a cosine loss ignores the scale weight decay and LayerNorm act "
    "on) is computed beside the verdict."
)


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """The variance ratio over training (median per arm), the share not yet collapsed, and the dose-responses."""
    plt = pyplot()
    traces: dict[str, va.Trace] = m.drawn["traces"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, (name, tr) in enumerate(traces.items()):
        ratio = (tr.total_variance / tr.total_variance[:, :1]).numpy()
        style = {"color": f"C{i % 10}", "ls": "--" if i >= 10 else "-"}
        a1.plot(tr.steps, np.nanmedian(ratio, 0), label=name, **style)
        alive = (np.minimum.accumulate(np.nan_to_num(ratio, nan=0.0), 1) > cfg.rule.collapse_ratio).mean(0)
        a2.step(tr.steps, alive, where="post", **style)
    a1.axhline(cfg.rule.collapse_ratio, color="grey", ls=":", label="collapse bar")
    a1.set(yscale="log", xlabel="step", ylabel="tr Cov(z) / start (held out)", title="scale of the features (median)")
    a1.legend(fontsize=6, ncol=2, loc="lower left")
    a2.set(xlabel="step", ylabel="share of starts not collapsed", title=f"survival ({cfg.replicates} starts)")
    for j, mech in enumerate(MECHANISMS):
        d = doses(cfg, mech)
        means = [m[PER_ARM][a]["mean censored collapse step"] for a in d]
        errs = [0.0] + [2 * m["effect vs none"][a]["se"] for a in d[1:]]
        a3.errorbar(range(len(d)), means, yerr=errs, marker="o", capsize=3, color=f"C{j}", label=mech)
    a3.axhline(m[PER_ARM]["volume"]["mean censored collapse step"], color="grey", ls="--", label="volume (control)")
    a3.set(xlabel="dose rank (0 = none)", ylabel="mean censored collapse step", title="dose-response (± 2 paired SE)")
    a3.legend(fontsize=7)
    fig.suptitle("§6.2: mechanisms external to the objective on the distance objective without its volume term")
    fig.tight_layout()
    return [ctx.save_figure(fig, "normalisation_as_volume")]


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), details=DETAILS)


EXPERIMENT = Experiment(
    name="normalisation_as_volume",
    title="Weight decay, LayerNorm and residual connections against collapse",
    claim="In practice, collapse is often avoided through mechanisms external to the objective: weight decay "
    "regularizes the scale of projections, layer normalization constrains activation magnitudes, and architectural "
    "choices such as residual connections preserve signal diversity. These interventions stabilize the geometry, "
    "but none is derived from the objective whose pathology it controls.",
    source="paper §6.2 (the distance objective without its volume term, at the margin of collapse)",
    Config=Config,
    run=run,
)
