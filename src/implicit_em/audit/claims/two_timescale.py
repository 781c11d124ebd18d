r"""Do attention patterns stabilise before the values? And is the "EM-like" speed-up specific to W_V?

Claim (paper §1.2, from the companion paper arXiv 2512.22473): "Attention weights tend to stabilize early in
training while value vectors continue to refine, a two-timescale structure that mirrors the E-step and M-step of
classical expectation-maximization" (§5.3: "attention patterns stabilize early while values continue to refine").
Companion notes §B: the "EM-like" arm is "the same gradients with lr 0.1 on W_V only" against "SGD lr 0.01 on all
parameters for 1000 steps", reported to reach SGD's final loss "≈2.3× sooner (5 seeds)".

Method (:mod:`implicit_em.audit.testbeds.two_timescale`). Deciding: the bijection wind tunnel and the shared sticky
testbed under a matched Adam (warm-up, cosine to 0); reported: the companion's SGD, its one-head sticky head and its
literal protocol (:mod:`~implicit_em.audit.testbeds.two_timescale_companion`; no-context is all but Bayes there).
Per seed one stack: the baseline, its data-order and half-budget twins, one arm per weight group (W_V, W_O,
W_Q/W_K) and multiplier. τ of A (attention weights) and V (value vectors), read from an exponential average of the
weights on a held-out probe, is the time to 90% of the total displacement, censored at the schedule's drift step.

Rule (thresholds in ``Config.rule``): a seed supports the ordering if τ_A <= ``ratio`` τ_V in both data orders
(:func:`~implicit_em.audit.testbeds.two_timescale.ordering`); a setting's ordering holds if >= ``frac_seeds`` of
its seeds support, fails if > 1 − ``frac_seeds`` contradict. The speed-up of an arm is the baseline's steps to its
own final probe loss (+ ``reach_tol`` of its fall) over the arm's; at the companion's multiplier it is W_V-specific
if speed-up(W_V) − 1, − speed-up(W_O) and − speed-up(W_Q/W_K) (paired per seed) all exceed ``n_se`` SE. SUPPORTED
if every deciding setting's ordering holds and its speed-up is W_V-specific; REFUTED if every deciding setting's
ordering fails; PARTIAL otherwise. Gates, per deciding setting on its Adam baseline: it tracks (KL <= ``track`` x
the no-context KL at every seed), it has plateaued (the half-budget twin ends within ``plateau`` x the no-context
KL of it), its ordering is decided; and the planted controls pass (known τ recovered, pure noise censored, the
ordering and specificity rules on planted pairs). Page: docs/claims/two_timescale.md (pilots, history).
"""

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from implicit_em.audit import provenance, seeds
from implicit_em.audit.core import Comparison, Context, Criterion, Experiment, Result, Verdict, criterion, gate, gated
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import two_timescale as tt
from implicit_em.audit.testbeds import two_timescale_companion as ttc
from implicit_em.windtunnel.sticky import StickyTestbed

__all__ = ["DECIDING", "EXPERIMENT", "Bijection", "Chain", "Config", "Measured", "OneHead", "Rule", "Testbed",
           "criteria", "figures", "measure", "protocol", "run", "settings", "state", "summary", "verdict"]  # fmt: skip

PROTOCOLS = ("sgd", "adam")
DECIDING = ("wind_tunnel", "sticky")  # the settings that decide; "sticky_one_head" is reported
DECIDING_PROTOCOL = "adam"  # the protocol whose baseline can track and plateau (the companion's SGD cannot)


@dataclass(frozen=True)
class Bijection:
    """The wind tunnel: bijection elimination without replacement, a causal transformer (pilot: the page)."""

    symbols: int = 6
    layers: int = 1
    heads: int = 2
    d_model: int = 16  # pilot: d = 32 cost 4x per step
    d_ff: int = 32
    batch: int = 16
    probe: int = 256  # held-out sequences
    adam_lr: float = 1e-2  # pilot: 3e-3 did not track in 600 steps
    adam_steps: int = 2400  # pilot: 1,200 steps tracked at every pilot seed; the half-budget twin gets them
    sgd_steps: int = 1000  # companion notes §B: "SGD lr 0.01 on all parameters for 1000 steps"
    multipliers: tuple[float, ...] = (2.0, 5.0, 10.0)  # the sweep "x2, x5, x10" asked of the EM-like arm


@dataclass(frozen=True)
class Chain:
    """The sticky chain both sticky settings sample: emission noise, window length, held-out probe windows."""

    noise: float = 3.0
    length: int = 32
    probe: int = 64


@dataclass(frozen=True)
class Testbed:
    """The shared sticky testbed (``StickyTestbed``); its recipe is this claim's sticky pilot's (the page)."""

    stay: float = 0.9
    d_model: int = 32
    layers: int = 1  # sticky pilot: 2 layers at batch 64 fell about as 1 / steps and missed the plateau gate
    heads: int = 2
    d_ff: int = 64
    batch: int = 128  # sticky pilot: batch 32, 2,000 steps missed both gates at full size
    adam_lr: float = 1e-2  # the testbed's own pilot: Adam 1e-2, cosine
    adam_steps: int = 4000  # sticky pilot: KL 0.059-0.062 of no-context, half-budget gap 0.013-0.018
    sgd_steps: int = 1000  # the companion's 1,000
    multipliers: tuple[float, ...] = (10.0,)  # x10 only (cost: the testbed costs ~50x the bijection per step)


@dataclass(frozen=True)
class OneHead:
    """The companion's one-head sticky head (W_Q, W_K 20x10, W_V 20x15, W_O 15x8; no positions, no residual)."""

    stay: float = 0.8  # sticky_sculpting's chain that needs context
    batch: int = 32
    adam_lr: float = 1e-2  # the testbed's rate
    adam_steps: int = 1000
    sgd_steps: int = 1000  # the companion's 1,000
    multipliers: tuple[float, ...] = (10.0,)


@dataclass(frozen=True)
class Rule:
    """The thresholds, fixed before the deciding runs."""

    displacement: float = 0.9  # "time to 90% of the total displacement" (the instrument asked for)
    ratio: float = 0.5  # "τ_A <= 0.5 τ_V" (the first rule's reading of "early")
    frac_seeds: float = 0.8  # "in >= 80% of 5 seeds"
    track: float = 0.1  # "KL to the exact Bayes update <= 0.1 x the no-context predictor's" (the audit's bar)
    plateau: float = 0.02  # declared: the half-budget twin within 0.02 x no-context KL (a fifth of the track bar)
    reach_tol: float = 0.01  # declared: "reached the baseline's final loss" = within 1% of its total fall
    n_se: float = 2.0  # "by >= 2 SE over seeds"
    planted_tol: float = 0.15  # declared: planted τ recovered within 15% (+ the average's lag and the grid)
    decide_multiplier: float = 10.0  # the companion's EM-like arm: lr 0.1 on W_V against 0.01


@dataclass(frozen=True)
class Config:
    """Sizes, protocols and thresholds (defaults: the full size)."""

    seed: int = 0
    n_seeds: int = 5  # ">= 5 seeds" (the first rule)
    sgd_lr: float = 0.01  # companion notes §B: SGD lr 0.01, constant
    adam_warmup: int = 50  # the matched Adam: linear warm-up (at most a tenth of the run), then cosine to 0
    snap_every: int = 10  # resolution of every τ, in steps
    loss_every: int = 5  # resolution of the speed-ups, in steps
    ema_steps: float = 10.0  # time constant of the weight average every trajectory is read from (lag ~ 10 steps)
    wind_tunnel: Bijection = field(default_factory=Bijection)
    chain: Chain = field(default_factory=Chain)
    testbed: Testbed = field(default_factory=Testbed)
    one_head: OneHead = field(default_factory=OneHead)
    companion: ttc.Companion = field(default_factory=ttc.Companion)  # the companion's literal setting (reported)
    rule: Rule = field(default_factory=Rule)

    @classmethod
    def quick(cls) -> "Config":
        """A smoke size, UNDECIDED by construction (neither deciding half can track): 2 seeds, x10 only, the sticky
        testbed 40 of its 4,000 Adam steps, the bijection's Adam 400 of 2,400, SGD and the one-head head 200, the
        companion T = 200 for 200 steps; the same gates as the full size (40-55 s a seed)."""
        return cls(n_seeds=2, wind_tunnel=Bijection(probe=128, adam_steps=400, sgd_steps=200, multipliers=(10.0,)),
                   chain=Chain(probe=32), testbed=Testbed(adam_steps=40, sgd_steps=40),
                   one_head=OneHead(adam_steps=200, sgd_steps=200), companion=ttc.Companion.quick())  # fmt: skip

    @classmethod
    def full(cls) -> "Config":
        """5 seeds; the bijection's whole sweep (x2, x5, x10 on each group), x10 on the sticky settings; the
        companion's literal protocol (T = 2000, 1,000 steps, the whole sweep: ~40 minutes a seed on a loaded core)."""
        return cls()


def protocol(cfg: Config, name: str, setting: str) -> tt.Protocol:
    """The protocol ``name`` ("sgd" or "adam") as run on ``setting``."""
    arm = _arm(cfg, setting)
    if name == "sgd":
        return tt.Protocol("sgd", "sgd", cfg.sgd_lr, arm.sgd_steps)
    steps = arm.adam_steps
    return tt.Protocol("adam", "adam", arm.adam_lr, steps, min(cfg.adam_warmup, steps // 10), "cosine")


def _streams(cfg: Config) -> dict[str, Any]:
    """Every random stream of one run, derived from its seed by name (``--seed 0`` and ``--seed 1`` share none):
    per inner seed its models' initialisation and two data streams; the probes; the chain's means (one, shared by
    both sticky settings); the planted controls'."""
    n = range(cfg.n_seeds)
    return {
        "models": [seeds.derive(cfg.seed, "init", i) for i in n],
        "data": [(seeds.derive(cfg.seed, "data", i, 0), seeds.derive(cfg.seed, "data", i, 1)) for i in n],
        "means": seeds.derive(cfg.seed, "chain means"),
        **{
            f"probe_{s}": seeds.torch_generator(cfg.seed, "probe", s)
            for s in ("wind_tunnel", "sticky", "sticky_one_head")
        },
        "planted": seeds.torch_generator(cfg.seed, "planted"),
    }


def settings(cfg: Config) -> dict[str, tt.Setting]:
    """The two deciding settings and the reported one-head head."""
    streams = _streams(cfg)
    w, c, b, o = cfg.wind_tunnel, cfg.chain, cfg.testbed, cfg.one_head
    bed = StickyTestbed(stay=b.stay, noise=c.noise, length=c.length, means_seed=streams["means"], d_model=b.d_model,
                        n_layers=b.layers, n_heads=b.heads, d_ff=b.d_ff)  # fmt: skip
    return {
        "wind_tunnel": tt.bijection_setting(
            w.symbols, w.layers, w.heads, w.d_model, w.d_ff, w.probe, streams["probe_wind_tunnel"], w.multipliers
        ),
        "sticky": tt.sticky_setting(bed, c.probe, streams["probe_sticky"], b.multipliers),
        "sticky_one_head": tt.one_head_setting(
            o.stay, c.noise, c.length, streams["means"], c.probe, streams["probe_sticky_one_head"], o.multipliers
        ),
    }


def state(outcomes: list[str], rule: Rule) -> str:
    """A setting's ordering over its seeds: "holds", "fails" or "undecided"."""
    n = len(outcomes)
    if outcomes.count("supports") / n >= rule.frac_seeds:
        return "holds"
    return "fails" if outcomes.count("fails") / n > 1 - rule.frac_seeds else "undecided"


# ---------------------------------------------------------------------------------------------- measure

_Q = {"A": "attention A", "V": "values V", "W_V": "$W_{V}$", "W_QK": "$W_{Q}W_{K}$"}
_NAMES = {"wind_tunnel": "wind tunnel", "sticky": "sticky testbed",
          "sticky_one_head": "one-head sticky head (companion's, reported)"}  # fmt: skip
_PROTO = {"sgd": "SGD", "adam": "Adam"}


class Measured(Metrics):
    """The metrics, and per setting and protocol the curves the figure draws (not recorded)."""

    curves: dict[str, dict[str, Any]]


def _arm(cfg: Config, name: str) -> Bijection | Testbed | OneHead:
    arms: dict[str, Bijection | Testbed | OneHead] = {"wind_tunnel": cfg.wind_tunnel, "sticky": cfg.testbed,
                                                      "sticky_one_head": cfg.one_head}  # fmt: skip
    return arms[name]


def _read(m: Measured, key: str, setting: tt.Setting, proto: tt.Protocol, trained: dict[str, Any], cfg: Config) -> None:
    """One setting under one protocol, into ``m`` under ``key_``: τ, orderings, tracking and plateau, speed-ups."""
    traj, runs, n, rule = trained["traj"], tt.run_names(setting.multipliers), cfg.n_seeds, cfg.rule
    words = f"{_NAMES[setting.name]}: {_PROTO[proto.name]}, "

    def put(k: str, value: Any, unit: str, label: str) -> Any:
        return m.put(f"{key}_{k}", value, unit, words + label)

    drift = tt.drift_step(proto, proto.steps, rule.displacement)
    t = {**tt.timescales(traj, drift, rule.displacement), "drift_step": drift}
    for q, z in _Q.items():
        put(f"tau_{q}", t[f"tau_{q}"], "steps", f"τ (90% of the displacement) of {z}")
        put(f"twin_tau_{q}", t[f"twin_tau_{q}"], "steps", f"data-order twin: τ of {z}")
        put(f"censored_{q}", t[f"censored_{q}"], "yes/no", f"censored (at or after the drift step): {z}")
        put(f"end_spread_{q}", t[f"end_spread_{q}"], "ratio", f"twins' end-point distance / displacement of {z}")
    put("drift_step", drift, "steps", "drift step (censoring line)")
    outcomes = put("outcomes", tt.ordering(t, rule.ratio), "verdict", "ordering per seed (supports/fails/undecided)")
    kl, col = traj.probe_kl[-1].reshape(n, len(runs)), {r: runs.index(r) for r in runs}
    put("baseline_kl_bits", kl[:, col["baseline"]].tolist(), "bits", "baseline: held-out KL(Bayes ‖ model)")
    put("twin_kl_bits", kl[:, col["twin"]].tolist(), "bits", "data-order twin: held-out KL")
    put("half_kl_bits", kl[:, col["half"]].tolist(), "bits", "half-budget twin: held-out KL")
    nc = put("no_context_kl_bits", setting.no_context_kl, "bits", "no-context KL(Bayes ‖ $p(y_{t} | x_{t})$)")
    track = put("track_ratio", (kl[:, col["baseline"]] / nc).tolist(), "ratio", "baseline KL / no-context KL")
    gap = put("plateau_gap_ratio", ((kl[:, col["half"]] - kl[:, col["baseline"]]) / nc).tolist(), "ratio",
              "(half-budget KL − KL) / no-context KL")  # fmt: skip
    tail = traj.train_gap[-max(1, traj.train_gap.shape[0] // 10) :].mean(0).reshape(n, len(runs))
    put("train_minus_bayes_nats", tail[:, col["baseline"]].tolist(), "nats", "baseline: training loss − Bayes")
    arms = {a: kl[:, col[a]].tolist() for a in tt.arm_names(setting.multipliers)}
    put("arm_kl_bits", arms, "bits", "per arm: held-out KL")
    su, shown = tt.speed_ups(traj.probe_ce, traj.loss_steps, n, runs, rule.reach_tol), [r for r in runs if r != "half"]
    put("speed_up", {r: su["speed_up"][:, col[r]].tolist() for r in shown}, "ratio", "speed-up per arm and seed")
    put("speed_up_mean", {r: float(su["speed_up"][:, col[r]].mean()) for r in shown}, "ratio",
        "speed-up per arm (mean over seeds)")  # fmt: skip
    put("reach_censored", {r: su["censored"][:, col[r]].tolist() for r in shown}, "yes/no",
        "never reached the target, per arm")  # fmt: skip
    spec = {f"x{x:g}": tt.specificity(su["speed_up"], runs, x, rule.n_se) for x in setting.multipliers}
    put("specific", {x: s["specific"] for x, s in spec.items()}, "yes/no", "W_V-specific, per multiplier")
    put("gain_mean_se", {x: list(s["gain"]) for x, s in spec.items()}, "[mean, SE]", "speed-up(W_V) − 1")
    put("vs_W_O_mean_se", {x: list(s["vs_W_O"]) for x, s in spec.items()}, "[mean, SE]",
        "speed-up(W_V) − speed-up(W_O)")  # fmt: skip
    put("vs_W_QK_mean_se", {x: list(s["vs_W_Q/W_K"]) for x, s in spec.items()}, "[mean, SE]",
        "speed-up(W_V) − speed-up(W_Q/W_K)")  # fmt: skip
    put("wall_s", trained["wall_s"], "s", "wall time")
    put("state", state(outcomes, rule), "verdict", "ordering over seeds (holds, fails or undecided)")
    put("tracks", max(track) <= rule.track, "yes/no", "tracks")
    put("plateaued", max(gap) <= rule.plateau, "yes/no", "plateaued")
    m.curves[key] = {"paths": {q: t[f"path_{q}"] for q in ("A", "V")}, "steps": traj.steps, "runs": runs,
                     "loss_steps": traj.loss_steps, "probe_ce": traj.probe_ce, "drift_step": drift}  # fmt: skip


def _trained(ctx: Context, cfg: Config, name: str, setting: tt.Setting, p: tt.Protocol,
             streams: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """``tt.train_setting`` of one setting and protocol, cached in the run folder (keyed by all it reads)."""
    key = {"setting": name, "arm": dataclasses.asdict(_arm(cfg, name)), "chain": dataclasses.asdict(cfg.chain),
           "protocol": dataclasses.asdict(p), "seed": cfg.seed, "n_seeds": cfg.n_seeds, "snap_every": cfg.snap_every,
           "loss_every": cfg.loss_every, "ema_steps": cfg.ema_steps,
           "code": provenance.code_hash(provenance.code_files(__name__))}  # fmt: skip

    def compute() -> dict[str, Any]:
        out = tt.train_setting(setting, p, _arm(cfg, name).batch, streams["models"], streams["data"], cfg.snap_every,
                               cfg.loss_every, cfg.ema_steps)  # fmt: skip
        return {**out, "traj": out["traj"].as_dict()}

    value = ctx.cached("two_timescale_setting", key, compute)
    return {**value, "traj": tt.Trajectories.from_dict(value["traj"])}


def measure(cfg: Config, ctx: Context) -> Measured:
    """The planted controls, then every setting under both protocols (each one stack of runs)."""
    start = time.perf_counter()
    streams, r = _streams(cfg), cfg.rule
    m = Measured()
    m.curves = {}
    planted = tt.planted_control(streams["planted"], cfg.ema_steps, cfg.snap_every, r.displacement, r.planted_tol,
                                 r.ratio, r.n_se)  # fmt: skip
    for speed in ("fast", "slow"):
        m.put(f"planted_tau_{speed}", planted[f"planted_tau_{speed}"], "steps",
              f"planted control: τ of the {speed} path (two noise draws)")  # fmt: skip
    m.put("planted_errors", planted["planted_errors"], "count", "planted controls: errors")
    for name, setting in settings(cfg).items():
        for proto in PROTOCOLS:
            p = protocol(cfg, proto, name)
            trained = _trained(ctx, cfg, name, setting, p, streams)
            _read(m, f"{name}_{proto}", setting, p, trained, cfg)
        m.put(f"{name}_note", setting.note, "text", f"{_NAMES[name]}: setting")
    out = ttc.train(cfg.companion, cfg.seed, list(range(cfg.n_seeds)), cfg.snap_every, cfg.loss_every, cfg.ema_steps,
                    ctx)  # fmt: skip
    ttc.put(m, ttc.readings(out, cfg.companion, r.ratio, r.reach_tol, r.n_se), out, cfg.companion)
    m.put("wall_s", time.perf_counter() - start, "s", "wall time")
    return m


# ---------------------------------------------------------------------------------------------- the rule


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """The planted controls' gate, then per deciding setting its Adam baseline's gates and the tests."""
    r, key = cfg.rule, f"x{cfg.rule.decide_multiplier:g}"
    out = [gate("planted controls (τ, censoring, ordering, specificity): errors", m["planted_errors"], "==", 0)]
    for name in DECIDING:
        p = f"{name}_{DECIDING_PROTOCOL}_"
        outcomes = m[p + "outcomes"]
        se = {k: m[f"{p}{k}_mean_se"][key][0] / max(m[f"{p}{k}_mean_se"][key][1], 1e-12) for k in
              ("gain", "vs_W_O", "vs_W_QK")}  # fmt: skip
        gates: list[tuple[str, float, Comparison, float]] = [
            (f"{name}: baseline KL / no-context KL, worst seed (tracks)", max(m[p + "track_ratio"]), "<=", r.track),
            (f"{name}: (half-budget KL − KL) / no-context KL, worst seed (plateau)", max(m[p + "plateau_gap_ratio"]),
             "<=", r.plateau),
            (f"{name}: ordering decided (seeds support >= {r.frac_seeds:g} or contradict > {1 - r.frac_seeds:.1g})",
             float(m[p + "state"] != "undecided"), "==", 1.0),
        ]  # fmt: skip
        tests: list[tuple[str, float, Comparison, float]] = [
            (f"{name}: fraction of seeds with τ_A <= {r.ratio:g} τ_V (both data orders)",
             outcomes.count("supports") / len(outcomes), ">=", r.frac_seeds),
            (f"{name}: speed-up(W_V {key}) − 1, in SEs", se["gain"], ">", r.n_se),
            (f"{name}: speed-up(W_V {key}) − speed-up(W_O {key}), in SEs", se["vs_W_O"], ">", r.n_se),
            (f"{name}: speed-up(W_V {key}) − speed-up(W_Q/W_K {key}), in SEs", se["vs_W_QK"], ">", r.n_se),
        ]  # fmt: skip
        out += [gate(*g) for g in gates] + [criterion(*t) for t in tests]
    return out


def verdict(cfg: Config, m: Metrics, crit: list[Criterion]) -> Verdict:
    """SUPPORTED if every deciding setting's ordering holds and its speed-up is W_V-specific, REFUTED if every
    deciding setting's ordering fails, PARTIAL otherwise (one part of the claim, or one setting); UNDECIDED if a
    gate failed."""
    key = f"x{cfg.rule.decide_multiplier:g}"
    states = [m[f"{n}_{DECIDING_PROTOCOL}_state"] for n in DECIDING]
    specific = [m[f"{n}_{DECIDING_PROTOCOL}_specific"][key] for n in DECIDING]
    if all(s == "holds" for s in states) and all(specific):
        return gated("SUPPORTED", crit)
    return gated("REFUTED" if all(s == "fails" for s in states) else "PARTIAL", crit)


def summary(cfg: Config, m: Metrics, v: Verdict) -> str:
    """The failed gates, then per setting and protocol: tracking, plateau, ordering, τ and the x10 speed-ups."""
    key = f"x{cfg.rule.decide_multiplier:g}"
    parts = []
    failed = [c.metric for c in criteria(cfg, m) if c.role == "gate" and not c.passed]
    if failed:
        parts.append("gates failed: " + "; ".join(failed))
    for name in (*DECIDING, "sticky_one_head"):
        for proto in PROTOCOLS:
            p = f"{name}_{proto}_"
            su = m[p + "speed_up_mean"]
            parts.append(
                f"{name.replace('_', ' ')}, {proto}: KL/no-context {max(m[p + 'track_ratio']):.3f} (worst seed; "
                f"{'tracks' if m[p + 'tracks'] else 'does not track'}, "
                f"{'plateaued' if m[p + 'plateaued'] else 'not plateaued'}); ordering {m[p + 'state']} (τ_A/τ_V "
                + ", ".join(f"{a}/{b}" for a, b in zip(m[p + "tau_A"], m[p + "tau_V"], strict=True))
                + f", drift step {m[p + 'drift_step']}); speed-up {key}: W_V {su[f'W_V {key}']:.2f}, W_O "
                f"{su[f'W_O {key}']:.2f}, W_Q/W_K {su[f'W_Q/W_K {key}']:.2f}, data-order twin {su['twin']:.2f}: "
                f"{'W_V-specific' if m[p + 'specific'][key] else 'not W_V-specific'}"
            )
    return f"{v}: " + "; ".join([*parts, ttc.summary(m, cfg.companion)]) + "."


def _details(cfg: Config) -> str:
    r = cfg.rule
    return (
        f"Every trajectory is read from an exponential average of the weights (time constant {cfg.ema_steps:g} "
        f"steps). τ = time to {r.displacement:g} of the total displacement of the averaged A (attention weights) "
        f"and V (value vectors) on a fixed held-out probe batch, snapshots every {cfg.snap_every} steps; an ordering "
        "counts only if the baseline and its data-order twin (same initialisation, another data stream) both show "
        "it; a τ at or after the schedule's drift step (90% of the summed learning rate spent) is censored. "
        f"Deciding protocol: Adam, linear warm-up then cosine decay to 0; the companion's SGD (lr {cfg.sgd_lr:g}, "
        f"{cfg.wind_tunnel.sgd_steps} steps) is reported. Speed-up = baseline's steps to its final probe loss "
        f"(+{r.reach_tol:g} of its fall) over the arm's (censored arms at their upper bound). Gates: the baseline "
        f"tracks (KL <= {r.track:g} x no-context, every seed) and its half-budget twin ends within {r.plateau:g} "
        "x no-context KL of it (plateau). The one-head sticky arm is the companion's literal head: it cannot "
        "represent the filter and is reported only; so is the companion's literal protocol (one sequence, full-batch "
        f"SGD lr {cfg.companion.lr:g}, {cfg.companion.steps} steps, T = {cfg.companion.length}), whose no-context "
        "predictor is all but Bayes. History: docs/claims/two_timescale.md."
    )


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """Per deciding setting (Adam): the remaining displacement of A and V per seed, and the arms' probe loss."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 * len(DECIDING), figsize=(6 * len(DECIDING) + 2, 4), squeeze=False)
    for c, name in enumerate(DECIDING):
        res = m.curves[f"{name}_{DECIDING_PROTOCOL}"]
        ax = axes[0, 2 * c]
        steps = res["steps"].tolist()
        for i, q in enumerate(("A", "V")):
            path = res["paths"][q]  # (n+1, seeds)
            for s in range(path.shape[1]):
                ax.plot(steps, path[:, s].clamp_min(1e-4).tolist(), color=f"C{i}", lw=0.8,
                        label=q if s == 0 else None)  # fmt: skip
        frac = 1 - cfg.rule.displacement
        ax.axhline(frac, color="k", ls="--", lw=1, label=f"{frac:.1g} of D")
        ax.axvline(res["drift_step"], color="grey", ls=":", lw=1, label="drift step (censoring)")
        ax.set_yscale("log")
        ax.set(xlabel="step", ylabel="‖Z̄_s − Z̄_end‖ / D", title=f"{name.replace('_', ' ')}: remaining displacement")
        ax.legend(fontsize=7)
        ax = axes[0, 2 * c + 1]
        runs = res["runs"]
        ce = res["probe_ce"].reshape(len(res["loss_steps"]), cfg.n_seeds, len(runs))
        for i, r in enumerate(["baseline", *[f"{g} x{cfg.rule.decide_multiplier:g}" for g in tt.GROUPS]]):
            ax.plot(res["loss_steps"].tolist(), ce[:, :, runs.index(r)].mean(1).tolist(), color=f"C{i}", label=r)
        ax.set(xlabel="step", ylabel="probe cross-entropy vs posterior (nats)",
               title=f"{name.replace('_', ' ')}: arms (mean over seeds)")  # fmt: skip
        ax.legend(fontsize=7)
    fig.tight_layout()
    return [ctx.save_figure(fig, "two_timescale", dpi=100)]


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), _details(cfg))


EXPERIMENT = Experiment(
    name="two_timescale",
    title="Two timescales: does attention stabilise before the values, and is the EM-like speed-up W_V's own?",
    claim=(
        "Attention weights tend to stabilize early in training while value vectors continue to refine, a "
        "two-timescale structure that mirrors the E-step and M-step of classical expectation-maximization."
    ),
    source=(
        "paper §1.2 (and §5.3), from arXiv 2512.22473; its 'EM-like' arm (lr 0.1 on W_V only, arXiv 2512.22473); "
        "review-gradient-dynamics-of-attention: the two-timescale EM picture"
    ),
    Config=Config,
    run=run,
)
