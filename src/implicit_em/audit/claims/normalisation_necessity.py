r"""Is Bayesian structure a necessary consequence of the LSE geometry? Wind tunnels with no softmax over alternatives.

Claim (paper §1, §1.3 and §8): trained networks' Bayesian behaviour is "forced by the geometry of the loss rather
than emergent", "a necessary consequence of the objectives used to train them, not a property of the architecture".
If an arm with no softmax and no log-sum-exp over the classes or the keys, in its forward pass or its loss, tracks
the exact posterior about as well as the softmax transformer, that geometry is not necessary for the behaviour.

Method. Bayesian wind tunnels with exact posteriors: bijection elimination (V symbols, the sampled next symbol as
the label) and a small HMM per sequence, trained on the state the chain was in (``hmm_sampled``, decides) and on
the exact filtering posterior as a soft target (``hmm``, distillation, reported). Six parameter-matched arms, same
data, optimiser, schedule and steps, over ``n_seeds`` training seeds: the softmax transformer (CE), the same under
BCE (softmax attention kept), sigmoid attention + BCE, LSTM + CE, LSTM + BCE and a prefix MLP + BCE; the last
three and sigmoid attention have no K-way softmax or LSE anywhere (``ARMS``). Measured per arm and seed: KL(Bayes ||
model) in bits at 3/4 of the steps and at the end, its ratio to the softmax arm's, entropy MAE, parameters, time.

Rule (thresholds in ``Config``). The deciding tasks are the bijection and ``hmm_sampled``. Per deciding task, two
gates on the softmax arm: it tracks (KL <= ``learned_fraction`` x the no-context floor on its worst seed) and has
plateaued (its seed-mean KL fell by at most ``plateau_fraction`` x that bar over the last quarter); a task whose
gates hold is decisive, otherwise that half is undecided. REFUTED if on a decisive task any no-softmax arm reaches
KL <= ``ratio_tol`` x the softmax arm's (seed means); SUPPORTED if both tasks are decisive and every no-softmax arm
is more than ``ratio_tol`` x worse on both; UNDECIDED otherwise.

Controls, gates of the whole experiment: a dispatch-level recorder finds no K-way or hand-written softmax/LSE
operator in a no-softmax arm's training step and at least one in the softmax arm's; every arm is causal; on the HMM
the emission-only predictor fails the bar. Identity: every BCE arm contains BCE's two-way LSE, LSE(0, z) - t z per
class (reported: the result reads on normalisation over alternatives, §6.1, not on every LSE). History and pilots:
docs/claims/normalisation_necessity.md.
"""

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from implicit_em.audit import seeds
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gate, gated, identity
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import unnormalised as arms
from implicit_em.audit.testbeds.unnormalised import Network, SampledStateHMMTask, Task
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask

__all__ = ["ARMS", "DECIDING", "EXPERIMENT", "TASKS", "Config", "HMMSize", "Steps", "criteria", "details", "figures"]
__all__ += ["measure", "run", "summary", "verdict"]

# (name, architecture of unnormalised.build_arm_model, loss, no K-way softmax / LSE anywhere), in the report's order
ARMS = (
    ("softmax", "transformer", "softmax", False),
    ("attn_bce", "transformer", "sigmoid", False),
    ("sigmoid_attn_bce", "unnormalised", "sigmoid", True),
    ("lstm_ce", "lstm", "softmax", False),
    ("lstm_bce", "lstm", "sigmoid", True),
    ("prefix_mlp_bce", "prefix_mlp", "sigmoid", True),
)
NAMES = tuple(name for name, _, _, _ in ARMS)
NO_SOFTMAX = tuple(name for name, _, _, none in ARMS if none)
BCE_ARMS = tuple(name for name, _, loss, _ in ARMS if loss == "sigmoid")
_WORDS = ("transformer, softmax CE", "transformer, sigmoid BCE", "sigmoid attention, BCE", "LSTM, softmax CE")
LABELS = dict(zip(NAMES, (*_WORDS, "LSTM, BCE", "prefix MLP, BCE"), strict=True))
TASKS = ("bijection", "hmm_sampled", "hmm")  # the order they run and are reported in
DECIDING = ("bijection", "hmm_sampled")  # sampled labels: the verdict's tasks; "hmm" (soft target) is reported
TASK_LABELS = dict(
    zip(TASKS, ("bijection", "HMM, sampled states", "HMM, soft posterior target (reported)"), strict=True)
)


@dataclass(frozen=True)
class HMMSize:
    """The HMM filtering task: ``states`` hidden states and as many observation symbols, ``n_obs`` per sequence."""

    states: int = 2
    n_obs: int = 3


@dataclass(frozen=True)
class Steps:
    """Training steps per task (every arm gets the same)."""

    bijection: int = 160
    hmm_sampled: int = 160  # decides; full size: the pilot in docs/claims/normalisation_necessity.md
    hmm: int = 160  # the soft-target HMM (reported)


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_seeds: int = 1  # training seeds, each an independent data stream
    n_symbols: int = 5  # bijection: V; L = V - 1 pairs
    hmm: HMMSize = field(default_factory=HMMSize)
    network: Network = field(default_factory=lambda: Network(n_layers=1, n_heads=2, d_model=16, d_ff=32))
    steps: Steps = field(default_factory=Steps)
    batch_size: int = 32
    lr: float = 1e-2
    warmup_steps: int = 16
    eval_size: int = 256
    n_curve_points: int = 8  # evaluations per run (3/4 and the end among them)
    # "tracks the posterior": KL <= learned_fraction x the no-context floor, on every seed; bayes_necessity's bar
    # (paper §5.3: small transformers match the posterior to 1e-3 - 1e-4 bits; one order of magnitude below the
    # floor is the weakest reading of tracking); every seed, not the mean: a mean can pass where seeds fail.
    learned_fraction: float = 0.1
    # "reaches <= 2x the softmax arm's KL": arXiv 2512.22471: reruns of one recipe differ by 2.3x, so within 2x an
    # arm is as good as softmax; removing a necessary ingredient should cost far more.
    ratio_tol: float = 2.0
    # plateau: the softmax arm's KL falls by at most plateau_fraction x the tracking bar over the last quarter
    # (absolute, not relative: its KL heads to zero on the bijection; docs/claims/normalisation_necessity.md).
    plateau_fraction: float = 0.2
    # causality: float32 round-off of logits of size ~10 is ~1e-6; a leak of the future moves them by O(1e-2).
    causal_tol: float = 1e-5

    @classmethod
    def quick(cls) -> "Config":
        """V = 5, a 2-state HMM with K = 3, one layer of width 16, 160 steps, one training seed (seconds)."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """V = 10 (2,000 steps) and a 2-state, 2-symbol HMM with K = 8 (27 tokens; 3,200 steps on sampled states,
        1,600 on the soft target), two layers of width 32, lr 3e-3, three seeds (sizes chosen on the softmax arm
        alone). A transformer step costs 12-20 ms on one loaded thread at batch 64."""
        return cls(
            n_seeds=3, n_symbols=10, hmm=HMMSize(states=2, n_obs=8), network=Network(2, 2, 32, 64),
            steps=Steps(bijection=2000, hmm_sampled=3200, hmm=1600), batch_size=64, lr=3e-3, warmup_steps=100,
            eval_size=1024,
        )  # fmt: skip


def _train_seeds(cfg: Config) -> list[int]:
    """The torch seeds of the training replicates: each seeds an arm's initial weights and its batch stream."""
    return [seeds.derive(cfg.seed, "train", i) for i in range(cfg.n_seeds)]


def _task(cfg: Config, name: str) -> Task:
    if name == "bijection":
        return BijectionTask(cfg.n_symbols)
    if name == "hmm_sampled":
        return SampledStateHMMTask(cfg.hmm.n_obs, cfg.hmm.states, cfg.hmm.states)
    return HMMFilteringTask(cfg.hmm.n_obs, cfg.hmm.states, cfg.hmm.states)


def _windtunnel_config(cfg: Config, task: str, loss: str, seed: int) -> WindTunnelConfig:
    """The wind tunnel's settings for one arm (the optimiser and schedule fields are what ``train_arm`` reads)."""
    net = cfg.network
    return WindTunnelConfig(
        task="bijection" if task == "bijection" else "hmm", loss=loss, n_layers=net.n_layers, n_heads=net.n_heads,
        d_model=net.d_model, d_ff=net.d_ff, steps=getattr(cfg.steps, task), batch_size=cfg.batch_size, lr=cfg.lr,
        warmup_steps=cfg.warmup_steps, seed=seed, device="cpu",
    )  # fmt: skip


def measure(cfg: Config, ctx: Context) -> Metrics:
    """Train every arm on every task and seed; the controls on the first seed."""
    m = Metrics()
    m.put("seeds", _train_seeds(cfg), "seed ids", "training seeds")
    m.put("n_symbols", cfg.n_symbols, "count", "bijection: symbols V")
    m.put("hmm_states", cfg.hmm.states, "count", "HMM: hidden states (and observation symbols)")
    m.put("hmm_obs", cfg.hmm.n_obs, "count", "HMM: observations per sequence")
    found: dict[str, dict[str, list[str]]] = {name: {} for name in NAMES}
    leaks = {key: leak for task_name in TASKS for key, leak in _measure_task(cfg, task_name, m, found).items()}
    for name, kinds in found.items():
        arm = LABELS[name]
        k_way = kinds.get("k_way", []) + kinds.get("by_hand", [])
        m.put(f"{name}_softmax_op_count", len(k_way), "count", f"{arm}: K-way or hand-written softmax/LSE operators")
        m.put(f"{name}_softmax_ops", k_way, "names", f"{arm}: K-way or hand-written softmax/LSE operators")
        two_way = kinds.get("two_way_lse", [])
        m.put(f"{name}_two_way_lse_op_count", len(two_way), "count", f"{arm}: two-way LSE operators (BCE, softplus)")
        m.put(f"{name}_two_way_lse_ops", two_way, "names", f"{arm}: two-way LSE operators (BCE, softplus)")
        m.put(f"{name}_sigmoid_op_count", len(kinds.get("sigmoid", [])), "count", f"{arm}: sigmoid operators")
    m.put("causal_leak_per_arm", leaks, "absolute", "largest change of an earlier logit when the future is redrawn")
    m.put("causal_leak_max", max(leaks.values()), "absolute", "causal leak, largest over arms and tasks")
    states = {task: _status(cfg, m, task) for task in TASKS}
    m.put("task_states", states, "text", "softmax arm per task: decisive, not tracking or no plateau")
    return m


def _measure_task(cfg: Config, task_name: str, m: Metrics, found: dict[str, dict[str, list[str]]]) -> dict[str, float]:
    """Train the arms on one task over the seeds; its floors, runs and ratios into ``m``, its operators into
    ``found``; returns its causal leaks by arm."""
    task, steps, t = _task(cfg, task_name), getattr(cfg.steps, task_name), TASK_LABELS[task_name]
    eval_batch = task.sample(cfg.eval_size, seeds.torch_generator(cfg.seed, "eval"))  # one stream: HMMs share it
    probe = Batch(eval_batch.tokens[:16], eval_batch.positions, eval_batch.posterior[:16],
                  None if eval_batch.labels is None else eval_batch.labels[:16])  # fmt: skip
    floors = arms.no_context_floors(task, eval_batch)
    m.put(f"{task_name}_floor_kl", floors["floor_kl"], "bits", f"{t}: no-context floor (uniform predictor), KL")
    if "emission_only_kl" in floors:
        m.put(f"{task_name}_emission_only_kl", floors["emission_only_kl"], "bits", f"{t}: emission-only predictor, KL")
    m.put(f"{task_name}_steps", steps, "steps", f"{t}: training steps")
    base = _windtunnel_config(cfg, task_name, "softmax", 0)  # train_arms sets each arm's loss and seed
    arms_ = [(name, architecture, loss) for name, architecture, loss, _ in ARMS]
    leak_seed = seeds.derive(cfg.seed, "causal leak")
    trained = arms.train_arms(task, arms_, base, _train_seeds(cfg), eval_batch, probe, cfg.n_curve_points, leak_seed)
    for name, kinds in trained.operators.items():
        for kind, ops in kinds.items():
            found[name].setdefault(kind, []).extend(f"{task_name}:{op}" for op in ops)
    for name, row_sum in trained.row_sums.items():
        label = f"{t}, {LABELS[name]}: mean row sum of the trained attention"
        m.put(f"{task_name}_{name}_attention_row_sum", row_sum, "sum of weights", label)
    for name, arm_runs in trained.runs.items():  # softmax first: the others' ratios read it
        label = f"{t}, {LABELS[name]}"
        arms.put_arm_runs(m, f"{task_name}_{name}", label, arm_runs, arms.three_quarters(steps))
        arms.put_kl_ratios(m, f"{task_name}_{name}", f"{task_name}_softmax", "softmax", label)
    drop = m[f"{task_name}_softmax_kl_at_three_quarters"] - m[f"{task_name}_softmax_kl"]
    m.put(f"{task_name}_softmax_plateau_drop", drop, "bits", f"{t}: softmax arm's KL drop over the last quarter")
    return {f"{task_name}_{name}": leak for name, leak in trained.leaks.items()}


def _bar(cfg: Config, m: dict[str, Any], task: str) -> float:
    """The tracking bar on ``task``: ``learned_fraction`` x its exact no-context floor (KL, bits)."""
    return cfg.learned_fraction * m[f"{task}_floor_kl"]


def _status(cfg: Config, m: dict[str, Any], task: str) -> str:
    """``decisive``, ``not tracking`` or ``no plateau``: whether the softmax arm qualifies on ``task`` (tracking
    on its worst seed, then the plateau)."""
    bar = _bar(cfg, m, task)
    if not m[f"{task}_softmax_kl_range"][1] <= bar:
        return "not tracking"
    if not m[f"{task}_softmax_plateau_drop"] <= cfg.plateau_fraction * bar:
        return "no plateau"
    return "decisive"


def _close(cfg: Config, m: dict[str, Any], task: str) -> list[str]:
    """The no-softmax arms within ratio_tol x the softmax arm's KL on ``task`` (seed means)."""
    return [n for n in NO_SOFTMAX if m[f"{task}_{n}_kl"] <= cfg.ratio_tol * m[f"{task}_softmax_kl"]]


def _task_criteria(cfg: Config, m: dict[str, Any], task: str) -> list[Criterion]:
    """On a deciding ``task``: the gates of that half (softmax tracks on its worst seed, has plateaued), then each
    no-softmax arm more than ratio_tol x worse than softmax (seed means)."""
    bar, sm = _bar(cfg, m, task), m[f"{task}_softmax_kl"]
    out = [
        gate(f"{task}: softmax_kl, worst seed (tracks the posterior)", m[f"{task}_softmax_kl_range"][1], "<=", bar),
        gate(
            f"{task}: softmax KL drop over the last quarter (plateau)",
            m[f"{task}_softmax_plateau_drop"], "<=", cfg.plateau_fraction * bar,
        ),
    ]  # fmt: skip
    out += [
        criterion(f"{task}: {name}_kl (> {cfg.ratio_tol:g}x softmax)", m[f"{task}_{name}_kl"], ">", cfg.ratio_tol * sm)
        for name in NO_SOFTMAX
    ]
    return out


def _control_criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    """The controls, gates of the whole experiment: without them the comparison cannot be read."""
    out = [
        gate(f"K-way or hand-written softmax/LSE operators in {name}'s training step", m[f"{name}_softmax_op_count"],
             "==", 0)
        for name in NO_SOFTMAX
    ]  # fmt: skip
    out.append(gate("K-way softmax/LSE operators in softmax's training step (the recorder works)",
                    m["softmax_softmax_op_count"], ">=", 1))  # fmt: skip
    out.append(gate("max causal leak over arms and tasks", m["causal_leak_max"], "<=", cfg.causal_tol))
    out.append(
        gate("hmm: emission_only_kl (negative control: fails the bar)", m["hmm_emission_only_kl"], ">",
             _bar(cfg, m, "hmm"))
    )  # fmt: skip
    return out


def criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    """Per deciding task its two gates and its tests, then the controls, then the identities (what the BCE arms
    contain by construction, shown by the recorder: BCE with logits, LSE(0, z) - t z)."""
    identities = [
        identity(f"two-way LSE operators (BCE: LSE(0, z) - t z) in {name}'s training step",
                 m[f"{name}_two_way_lse_op_count"], ">=", 1)
        for name in BCE_ARMS
    ]  # fmt: skip
    return [c for task in DECIDING for c in _task_criteria(cfg, m, task)] + _control_criteria(cfg, m) + identities


def verdict(cfg: Config, m: dict[str, Any], crit: list[Criterion]) -> Verdict:
    """The rule of the module docstring. A deciding task's gates decide that half only; the controls, identities
    and decisive halves' tests pass through :func:`gated` (a failed control: UNDECIDED; an identity raises)."""
    decisive = [t for t in DECIDING if _status(cfg, m, t) == "decisive"]
    refuted = any(_close(cfg, m, t) for t in decisive)
    half = [c for c in crit if c.metric.startswith(tuple(f"{t}: " for t in DECIDING))]
    whole = [c for c in crit if c not in half or (c.role == "test" and c.metric.split(":")[0] in decisive)]
    return gated("REFUTED" if refuted else "SUPPORTED" if len(decisive) == len(DECIDING) else "UNDECIDED", whole)


_TWO_WAY = (
    "What is left in the BCE arms is a two-way LSE per class, log(1 + e^z) - t z = LSE(0, z) - t z (the recorder "
    "finds it in every BCE arm), with no partition function across the classes or keys: the case §6.1 places "
    'outside the framework ("responsibilities do not exist"), so the result reads on normalisation over '
    "alternatives, not on every LSE"
)


def summary(cfg: Config, m: dict[str, Any], verdict: Verdict) -> str:
    """The verdict in words with every arm's numbers."""
    numbers = _numbers(cfg, m)
    failed = [c.metric for c in _control_criteria(cfg, m) if not c.passed]
    if failed:
        return f"A control failed ({'; '.join(failed)}), so the testbed cannot decide; {numbers}."
    status = {task: _status(cfg, m, task) for task in DECIDING}
    undecided = ", ".join(f"{TASK_LABELS[t]}: softmax {s}" for t, s in status.items() if s != "decisive")
    if verdict == "REFUTED":
        refuting = [
            f"{LABELS[n]} on the {TASK_LABELS[t]} ({m[f'{t}_{n}_over_softmax_kl']:.2f}x)"
            for t in DECIDING
            if status[t] == "decisive"
            for n in _close(cfg, m, t)
        ]
        other = f" (undecided elsewhere: {undecided})" if undecided else ""
        return (
            f"With no softmax and no log-sum-exp over the classes or the keys anywhere, {', '.join(refuting)} "
            f"reach(es) within {cfg.ratio_tol:g}x of the softmax transformer's KL on a sampled-label task where it "
            f"tracks the posterior on every seed and has plateaued{other}. {_TWO_WAY}; {numbers}."
        )
    if verdict == "SUPPORTED":
        return (
            f"On both sampled-label tasks the softmax transformer tracks the posterior on every seed and every arm "
            f"without a K-way softmax or LSE is more than {cfg.ratio_tol:g}x worse in KL. {_TWO_WAY}; {numbers}."
        )
    decided = [t for t, s in status.items() if s == "decisive"]
    held = (
        f"on the {TASK_LABELS[decided[0]]} every no-softmax arm is more than {cfg.ratio_tol:g}x worse"
        if decided
        else "no task decides"
    )
    return f"Undecided where the softmax arm does not qualify ({undecided}); {held}; {numbers}."


def _numbers(cfg: Config, m: dict[str, Any]) -> str:
    """Every arm's seed-mean KL (and its ratio to softmax) next to the floor and the bar, per task."""
    n, parts = len(m["seeds"]), []
    for task in TASKS:
        arms = ", ".join(
            f"{LABELS[n]} {m[f'{task}_{n}_kl']:.4f}"
            + ("" if n == "softmax" else f" ({m[f'{task}_{n}_over_softmax_kl']:.1f}x)")
            for n in NAMES
        )
        extra = f", emission-only {m['hmm_emission_only_kl']:.4f}" if task == "hmm" else ""
        parts.append(
            f"{TASK_LABELS[task]}: {arms}; floor {m[f'{task}_floor_kl']:.4f}{extra}, bar {_bar(cfg, m, task):.4f}"
            + ("" if task in DECIDING else f", softmax {_status(cfg, m, task)}")
        )
    return f"KL(Bayes || model) in bits, mean of {n} seed{'s' if n > 1 else ''}: " + "; ".join(parts)


def figures(cfg: Config, m: dict[str, Any], ctx: Context) -> list[str]:
    """The seed-mean KL per arm and task (bars with the seed range), and the KL curves over training."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(TASKS), figsize=(16, 4.2))
    for ax, task in zip(axes, TASKS, strict=True):
        values = [m[f"{task}_{n}_kl"] for n in NAMES]
        lows = [v - m[f"{task}_{n}_kl_range"][0] for v, n in zip(values, NAMES, strict=True)]
        highs = [m[f"{task}_{n}_kl_range"][1] - v for v, n in zip(values, NAMES, strict=True)]
        bars = ax.bar(range(len(NAMES)), [max(v, 1e-6) for v in values], yerr=[lows, highs], capsize=3,
                      color=[f"C{i}" for i in range(len(NAMES))])  # fmt: skip
        for b, n in zip(bars, NAMES, strict=True):
            if n in NO_SOFTMAX:
                b.set_hatch("//")
        ax.set_yscale("log")
        ax.axhline(m[f"{task}_floor_kl"], color="0.5", lw=1, label="no-context floor (uniform)")
        ax.axhline(_bar(cfg, m, task), color="k", ls="--", lw=1, label="tracking bar (0.1 x floor)")
        ax.axhline(cfg.ratio_tol * m[f"{task}_softmax_kl"], color="C0", ls=":", lw=1, label="2 x softmax")
        if task != "bijection":
            ax.axhline(m[f"{task}_emission_only_kl"], color="C5", ls="-.", lw=1, label="emission-only")
        ax.set_xticks(range(len(NAMES)), [LABELS[n].replace(", ", "\n") for n in NAMES], fontsize=7)
        ax.set(
            ylabel="KL(Bayes || model), bits", title=f"{TASK_LABELS[task]}: seed mean and range (hatched: no softmax)"
        )
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    bars_png = ctx.save_figure(fig, "normalisation_necessity_kl", dpi=100)
    fig, axes = plt.subplots(1, len(TASKS), figsize=(16, 4))
    for ax, task in zip(axes, TASKS, strict=True):
        for i, n in enumerate(NAMES):
            ax.plot(m[f"{task}_{n}_curve_steps"], m[f"{task}_{n}_curve_kl"], marker="o", ms=3, color=f"C{i}",
                    ls="--" if n in NO_SOFTMAX else "-", label=LABELS[n])  # fmt: skip
        ax.axhline(_bar(cfg, m, task), color="k", ls="--", lw=1)
        ax.axvline(arms.three_quarters(m[f"{task}_steps"]), color="0.7", lw=1)
        ax.set_yscale("log")
        ax.set(xlabel="step", ylabel="KL, bits (seed mean)", title=f"{TASK_LABELS[task]}: curves (dashed: no softmax)")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return [bars_png, ctx.save_figure(fig, "normalisation_necessity_curves", dpi=100)]


def details(cfg: Config, m: dict[str, Any]) -> str:
    """The setting, the operators the recorder found and the scope, in words."""
    net, steps = cfg.network, cfg.steps
    sentences = [
        f"Bijection V = {cfg.n_symbols} ({steps.bijection} steps); HMM with {cfg.hmm.states} states and symbols, "
        f"K = {cfg.hmm.n_obs}, on the chain's sampled states ({steps.hmm_sampled} steps; decides) and on the exact "
        f"posterior as a soft target ({steps.hmm} steps; distillation, reported); transformer {net.n_layers} "
        f"layer(s), {net.n_heads} heads, d_model {net.d_model}; AdamW, batch {cfg.batch_size}, lr {cfg.lr}, warm-up "
        f"{cfg.warmup_steps} then cosine; training seeds {m['seeds']}; one fixed evaluation set of {cfg.eval_size} "
        "sequences per task. Parameters (bijection/HMM): "
        + ", ".join(f"{LABELS[n]} {m[f'bijection_{n}_params']}/{m[f'hmm_{n}_params']}" for n in NAMES)
        + ".",
        f"K-way or hand-written softmax/LSE operators over the three tasks: {m['softmax_softmax_op_count']} in the "
        "softmax arm's step, "
        + ", ".join(f"{m[f'{n}_softmax_op_count']} in {LABELS[n]}'s" for n in NO_SOFTMAX)
        + "; two-way LSEs (softplus, log-sigmoid, BCE with logits) "
        + ", ".join(f"{m[f'{n}_two_way_lse_op_count']} in {LABELS[n]}'s" for n in BCE_ARMS)
        + ". The LSTM's cell runs inside one fused oneDNN operator. A BCE arm's predictive is sigmoid(z) divided by "
        "its sum: an evaluation-time normalisation, not part of training.",
        "Sigmoid attention's trained rows sum to "
        + ", ".join(f"{m.get(f'{t}_sigmoid_attn_bce_attention_row_sum', math.nan):.2f} ({t})" for t in TASKS)
        + f" on average (a softmax row sums to 1). Causal leak: {m['causal_leak_max']:.1e}.",
        "Every arm gets the same steps, sized on the softmax arm, whose KL still falls as the learning rate anneals: "
        "the ratios are those of this budget. Scope: the abstract limits the claim to training-time gradient "
        "dynamics, which this does not test; it tests the necessity reading of §1, §1.3 and §8.",
    ]
    if dataclasses.replace(cfg, seed=0) == Config.quick():
        sentences.append(
            "Quick size: a smoke test of the pipeline and its controls, too short for the softmax arm to "
            "reach the tracking bar; the full size repeats it at V = 10 and K = 8 over three seeds."
        )
    return " ".join(sentences)


def run(cfg: Config, ctx: Context) -> Result:
    """Measure, judge, describe and draw (the order of the module)."""
    start = time.perf_counter()
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    text, pictures = summary(cfg, m, v), figures(cfg, m, ctx)
    m.put("wall_s", time.perf_counter() - start, "s", "wall time")
    return Result(v, text, m, crit, pictures, details(cfg, m))


EXPERIMENT = Experiment(
    name="normalisation_necessity",
    title="Bayesian structure with no softmax over alternatives: sigmoid attention, LSTM and prefix MLP under BCE",
    claim=(
        "We argue that such behaviors are neither emergent nor accidental, but are necessary consequences of the "
        "geometry of common objective functions. [...] On this account, the Bayesian structure observed by "
        "Agarwal et al. (2025b) is forced by the geometry of the loss rather than emergent. [...] The "
        "responsibility-weighted gradient structure recently documented in transformers is a necessary "
        "consequence of the objectives used to train them, not a property of the architecture."
    ),
    source=(
        "paper §1, §1.3 and §8 (§6.1 for what BCE keeps); review-implicit-em: referee major comment 3 (arms with no "
        "softmax in the network or the loss; sampled labels; two-way LSEs)"
    ),
    Config=Config,
    run=run,
)
