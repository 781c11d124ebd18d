r"""Is Bayesian structure a necessary consequence of the LSE geometry? Wind tunnels with no softmax anywhere.

Claim (paper §1 and §1.3, restated in §8): trained networks' Bayesian behaviour is a "necessary consequence of the
geometry of common objective functions"; "the Bayesian structure observed by Agarwal et al. (2025b) is forced by
the geometry of the loss rather than emergent"; in §8, "a necessary consequence of the objectives used to train
them, not a property of the architecture". ``bayes_necessity`` removes the LSE from the loss only (independent
sigmoids at the output) and keeps the softmax attention inside the network. This experiment removes it
everywhere: if an arm with no softmax and no log-sum-exp in its forward pass or its loss tracks the exact
posterior about as well as the softmax transformer, the LSE geometry is not necessary for that behaviour.

Method. Two Bayesian wind tunnels with exact posteriors (:mod:`implicit_em.windtunnel`): bijection elimination
without replacement (V symbols, L = V - 1 pairs, hard targets) and HMM filtering with a fresh small HMM per
sequence (S states and S symbols, K observations; the target is the soft filtering posterior). Six arms, each over
``n_seeds`` training seeds with the same data stream, optimiser, schedule and steps (the wind tunnel's loop,
:func:`~implicit_em.experiments._unnormalised.train_arm`), parameter-matched within 10%:

============================  ==========================================  ==============  ====================
arm                            network                                     loss            softmax / LSE
============================  ==========================================  ==============  ====================
``softmax``                    causal transformer, softmax attention       softmax CE      keys and classes
``attn_bce``                   the same transformer                        sigmoid BCE     keys only
``sigmoid_attn_bce``           transformer, sigmoid attention (no norm.)   sigmoid BCE     **none**
``lstm_ce``                    LSTM (wind tunnel's ``matched_lstm``)       softmax CE      classes only
``lstm_bce``                   the same LSTM                               sigmoid BCE     **none**
``prefix_mlp_bce``             MLP on the flattened one-hot prefix         sigmoid BCE     **none**
============================  ==========================================  ==============  ====================

The three arms marked **none** are the "no softmax anywhere" arms on which the verdict rests: sigmoid attention
(:class:`~implicit_em.experiments._unnormalised.UnnormalisedTransformer`, weights
:math:`\sigma(s_{ij} - \log(i+1))`, no normalisation over keys; why a sigmoid and that bias, see that module),
LSTM gates (sigmoid, tanh), GELU MLPs, and independent per-class BCE against the one-hot label (bijection) or the
soft posterior (HMM, BCE with soft targets). LayerNorm stays in the transformer: it rescales a vector, it does not
normalise over alternatives. The absence is checked, not assumed: every arm's training step (forward, loss,
backward) is run under a dispatch-level recorder of the aten operators it calls, and no operator whose name
contains ``softmax`` or ``logsumexp`` may appear in a no-softmax arm (the recorder must find them in the softmax
arm: it is shown to work). A BCE arm's *predictive* is sigmoid(z) renormalised to sum to one over the classes
(:func:`~implicit_em.windtunnel.metrics.predictive`, as ``bayes_necessity`` does): an evaluation-time division
that makes the outputs a distribution to measure; it is not part of training and is not a softmax.

Measured per arm and seed, on one fixed evaluation set per task: KL(Bayes || model) in bits (the number the
verdict uses: it cannot be met by matching entropies alone) and the per-sample entropy MAE, both at 3/4 of the
steps and at the end; their seed means and ranges; the ratio of each arm's KL to the softmax arm's, per seed and
for the means; parameter counts and wall time. Negative controls, computed exactly on the evaluation set: the
no-context floor (the uniform predictor: for the bijection it equals the task's no-context MAE) and, for the HMM,
the emission-only predictor p(s_t | o_t), which reads the emission matrix but does not filter.

Verdict rule (thresholds in ``Config`` with their sources, fixed before the full size ran; each comparison in
``Result.criteria``; KL are seed means, the per-seed numbers are reported):

- the softmax arm *tracks the posterior* on a task if its KL <= ``learned_fraction`` (0.1) x the task's
  no-context floor (the bar of ``bayes_necessity``);
- it has *reached its plateau* if its KL fell by no more than ``plateau_fraction`` (0.2) x that bar over the
  last quarter of the steps (``plateau`` below: why absolute);
- a task is *decisive* if the softmax arm tracks and has reached its plateau there;
- controls: no softmax/LSE operator in any no-softmax arm's training step, at least one in the softmax arm's;
  every arm causal (changing future tokens moves no earlier logit by more than ``causal_tol``); on the HMM the
  emission-only predictor fails the bar (so the bar needs filtering, not just reading the matrices).

REFUTED if, on a decisive task, any no-softmax arm reaches KL <= ``ratio_tol`` (2) x the softmax arm's KL.
SUPPORTED if both tasks are decisive and every no-softmax arm is more than 2x worse on both. PARTIAL otherwise
(the summary says which task was undecided and why), and PARTIAL whenever a control fails.

Plateau and sizes. The step budgets, the learning rate and the HMM's size were chosen on pilots of the softmax arm
alone (seed 0; no other arm was run before the rule and the sizes were fixed). On the bijection (V = 10, lr 3e-3)
its KL keeps falling in proportion as the cosine schedule anneals: 0.0152 -> 0.0078 bits over the last quarter of
2,000 steps, 0.0098 -> 0.0051 over the last quarter of 4,000 (lr 1e-2: 0.0143 -> 0.0060 at 2,000). The posterior
is exactly representable there, so the KL heads to zero and a relative plateau test is not met at any budget this
machine allows. The test is therefore absolute, on the scale on which tracking is judged: a drop of at most a
fifth of the tracking bar over the last quarter. On the HMM, 3 states and 3 symbols with K = 8 (37 tokens) needed
3,000 steps at lr 3e-3 to reach 0.029 bits (bar 0.036; 81 s a run, too dear for 36 runs); at 1,600 steps it
stayed at 0.040, at lr 1e-2 it did not learn (0.32), and at batch 32 and 2,400 steps it reached 0.040. With 2
states and 2 symbols (K = 8, 27 tokens) it reached 0.0082 bits at 1,600 steps (bar 0.026; last quarter
0.0093 -> 0.0082): the full size's HMM. Consequence, stated in every summary: the ratios compare arms at one
budget sized for the softmax arm, with its KL still falling slowly on the bijection.
"""

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from implicit_em.experiments._base import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    pyplot,
    torch_threads,
)
from implicit_em.experiments._unnormalised import (
    ArmRun,
    SigmoidSelfAttention,
    Task,
    build_arm_model,
    train_arm,
)
from implicit_em.probes.attention import attention_scores
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.metrics import evaluate_predictions
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask
from implicit_em.windtunnel.train import windtunnel_loss

__all__ = ["ARMS", "EXPERIMENT", "TASKS", "Config", "run"]

# (name, architecture of _unnormalised.build_arm_model, loss, no softmax / LSE anywhere), in the report's order
ARMS = (
    ("softmax", "transformer", "softmax", False),
    ("attn_bce", "transformer", "sigmoid", False),
    ("sigmoid_attn_bce", "unnormalised", "sigmoid", True),
    ("lstm_ce", "lstm", "softmax", False),
    ("lstm_bce", "lstm", "sigmoid", True),
    ("prefix_mlp_bce", "prefix_mlp", "sigmoid", True),
)
NO_SOFTMAX = tuple(name for name, _, _, none in ARMS if none)
LABELS = {
    "softmax": "transformer, softmax CE",
    "attn_bce": "transformer, sigmoid BCE",
    "sigmoid_attn_bce": "sigmoid attention, BCE",
    "lstm_ce": "LSTM, softmax CE",
    "lstm_bce": "LSTM, BCE",
    "prefix_mlp_bce": "prefix MLP, BCE",
}
TASKS = ("bijection", "hmm")
_SOFTMAX_OPS = ("softmax", "logsumexp")  # an aten operator whose name holds one of these normalises over a dim


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_symbols: int = 5  # bijection: V; L = V - 1 pairs
    hmm_states: int = 2  # HMM: S hidden states and S observation symbols
    hmm_obs: int = 3  # HMM: K observations per sequence
    n_layers: int = 1
    n_heads: int = 2
    d_model: int = 16
    d_ff: int = 32
    bijection_steps: int = 160
    hmm_steps: int = 160
    batch_size: int = 32
    lr: float = 1e-2
    warmup_steps: int = 16
    eval_size: int = 256
    n_seeds: int = 1  # training seeds seed, seed + 1, ...
    n_curve_points: int = 8  # evaluations per run (3/4 and the end among them)
    threads: int | None = 1  # 2 threads on 2 shared cores spin-wait (bayes_necessity measured 57x slower)
    # verdict thresholds, fixed before the full size ran (module docstring):
    # "tracks the posterior": KL <= learned_fraction x the no-context floor; bayes_necessity's bar (paper §5.3:
    # small transformers match the posterior to 1e-3 - 1e-4 bits; one order of magnitude below the floor is the
    # weakest reading of tracking).
    learned_fraction: float = 0.1
    # "reaches <= 2x the softmax arm's KL": the rule (issue 12 item 5); arXiv 2512.22471: reruns of one
    # recipe differ by 2.3x, so within 2x an arm is as good as softmax; removing a necessary ingredient should cost
    # far more.
    ratio_tol: float = 2.0
    # plateau: the softmax arm's KL falls by at most plateau_fraction x the tracking bar over the last quarter
    # (absolute, not relative: see the module docstring's "Plateau").
    plateau_fraction: float = 0.2
    # causality: float32 round-off of logits of size ~10 is ~1e-6; a leak of the future moves them by O(1e-2).
    causal_tol: float = 1e-5

    @classmethod
    def quick(cls) -> "Config":
        """V = 5, a 2-state HMM with K = 3, one layer of width 16, 160 steps, one training seed (seconds)."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """V = 10 (2,000 steps) and a 2-state, 2-symbol HMM with K = 8 (27 tokens, 1,600 steps), two layers of
        width 32, lr 3e-3, three seeds (sizes chosen on the softmax arm alone: module docstring).

        Budget (measured on one loaded thread, batch 64): a transformer step costs 12-20 ms on the bijection and
        about 18 ms on the HMM, the LSTM and the prefix MLP less; six arms over three seeds cost about 0.16 s per
        bijection step and 0.2 s per HMM step.
        """
        return cls(
            n_symbols=10, hmm_states=2, hmm_obs=8, n_layers=2, n_heads=2, d_model=32, d_ff=64,
            bijection_steps=2000, hmm_steps=1600, batch_size=64, lr=3e-3, warmup_steps=100, eval_size=1024,
            n_seeds=3,
        )  # fmt: skip


def _task(cfg: Config, name: str) -> Task:
    if name == "bijection":
        return BijectionTask(cfg.n_symbols)
    return HMMFilteringTask(cfg.hmm_obs, cfg.hmm_states, cfg.hmm_states)


def _steps(cfg: Config, task: str) -> int:
    return cfg.bijection_steps if task == "bijection" else cfg.hmm_steps


def _windtunnel_config(cfg: Config, task: str, loss: str, seed: int) -> WindTunnelConfig:
    """The wind tunnel's settings for one arm (the optimiser and schedule fields are what ``train_arm`` reads)."""
    return WindTunnelConfig(
        task=task, loss=loss, n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_model=cfg.d_model, d_ff=cfg.d_ff,
        steps=_steps(cfg, task), batch_size=cfg.batch_size, lr=cfg.lr, warmup_steps=cfg.warmup_steps, seed=seed,
        threads=cfg.threads, device="cpu",
    )  # fmt: skip


def _eval_steps(steps: int, n_points: int) -> tuple[int, ...]:
    """Evaluation steps: ``n_points`` evenly spaced ones, with 3/4 of the steps and the last among them."""
    spaced = {max(1, round(steps * (i + 1) / n_points)) for i in range(n_points)}
    return tuple(sorted(spaced | {_three_quarters(steps), steps}))


def _three_quarters(steps: int) -> int:
    return max(1, round(0.75 * steps))


class _OpRecorder(TorchDispatchMode):
    """Records the name of every aten operator dispatched inside the block (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.add(str(func))  # e.g. "aten._log_softmax.default"
        return func(*args, **(kwargs or {}))


def _softmax_ops(model: nn.Module, batch: Batch, loss: str) -> list[str]:
    """The softmax / log-sum-exp operators one training step of ``model`` (forward, loss, backward) calls."""
    recorder = _OpRecorder()
    with recorder:
        out = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch, loss)
        out.backward()
    model.zero_grad(set_to_none=True)
    return sorted(op for op in recorder.ops if any(s in op for s in _SOFTMAX_OPS))


@torch.no_grad()
def _causal_leak(model: nn.Module, batch: Batch, vocab_size: int) -> float:
    """Max |change of a logit at a position <= p| when every token after p is redrawn, over a few cut points p."""
    tokens = batch.tokens
    t = tokens.shape[1]
    base = model(tokens)
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for p in sorted({0, t // 3, t // 2, t - 2}):
        changed = tokens.clone()
        changed[:, p + 1 :] = torch.randint(0, vocab_size, (tokens.shape[0], t - p - 1), generator=g)
        worst = max(worst, float((model(changed)[:, : p + 1] - base[:, : p + 1]).abs().max()))
    return worst


@torch.no_grad()
def _attention_row_sums(model: nn.Module, tokens: Tensor) -> float:
    r"""Mean over layers, heads, sequences and query positions of :math:`\sum_j \alpha_{ij}` in the sigmoid
    attention layers of ``model`` (1 would be a normalised row); NaN if it has none."""
    sums: list[Tensor] = []

    def capture(module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        assert isinstance(module, SigmoidSelfAttention)
        x = inputs[0]
        b, t, d = x.shape
        h = module.n_heads
        q, k, _ = module.qkv(x).split(d, dim=2)
        q, k = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k))  # (B, H, T, d/H)
        scores = attention_scores(q, k)  # (B, H, T, T)
        visible = torch.ones(t, t, dtype=torch.bool).tril()
        n_keys = torch.arange(1, t + 1, dtype=scores.dtype)
        weights = torch.sigmoid(scores - n_keys.log()[:, None]).masked_fill(~visible, 0.0)
        sums.append(weights.sum(dim=-1).flatten())

    handles = [m.register_forward_pre_hook(capture) for m in model.modules() if isinstance(m, SigmoidSelfAttention)]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return float(torch.cat(sums).mean()) if sums else math.nan


def _floors(task: Task, batch: Batch) -> dict[str, float]:
    """KL (bits) of the exact no-context predictor (uniform) and, for the HMM, of the emission-only predictor."""
    uniform = torch.full_like(batch.posterior, 1.0 / batch.posterior.shape[-1])
    out = {"floor_kl": evaluate_predictions(uniform, batch.posterior).kl}
    if isinstance(task, HMMFilteringTask):
        out["emission_only_kl"] = evaluate_predictions(task.emission_only_posterior(batch), batch.posterior).kl
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _summaries(task: str, runs: dict[str, list[ArmRun]], three_quarters: int) -> dict[str, Any]:
    """Seed means, per-seed values and ranges of every arm's KL and MAE (end and 3/4), and the ratios to softmax."""
    m: dict[str, Any] = {}
    for name, arm_runs in runs.items():
        kl = [r.final.kl for r in arm_runs]
        late = [r.kl[r.steps.index(three_quarters)] for r in arm_runs]
        mae = [r.final.entropy_mae_per_sample for r in arm_runs]
        p = f"{task}_{name}"
        m.update({f"{p}_kl": _mean(kl), f"{p}_kl_per_seed": kl, f"{p}_kl_range": [min(kl), max(kl)]})
        m.update({f"{p}_kl_at_three_quarters": _mean(late), f"{p}_kl_at_three_quarters_per_seed": late})
        m.update({f"{p}_mae": _mean(mae), f"{p}_mae_per_seed": mae})
        m[f"{p}_params"] = arm_runs[0].n_params
        m[f"{p}_seconds"] = sum(r.seconds for r in arm_runs)
        m[f"{p}_curve_steps"] = arm_runs[0].steps
        m[f"{p}_curve_kl"] = [_mean([r.kl[i] for r in arm_runs]) for i in range(len(arm_runs[0].steps))]
    sm = m[f"{task}_softmax_kl_per_seed"]
    for name in runs:
        arm = m[f"{task}_{name}_kl_per_seed"]
        m[f"{task}_{name}_over_softmax_kl"] = m[f"{task}_{name}_kl"] / max(m[f"{task}_softmax_kl"], 1e-12)
        m[f"{task}_{name}_over_softmax_kl_per_seed"] = [a / max(b, 1e-12) for a, b in zip(arm, sm, strict=True)]
    m[f"{task}_softmax_plateau_drop"] = m[f"{task}_softmax_kl_at_three_quarters"] - m[f"{task}_softmax_kl"]
    return m


def _bar(cfg: Config, m: dict[str, Any], task: str) -> float:
    """The tracking bar on ``task``: ``learned_fraction`` x its exact no-context floor (KL, bits)."""
    return cfg.learned_fraction * m[f"{task}_floor_kl"]


def _task_criteria(cfg: Config, m: dict[str, Any], task: str) -> list[Criterion]:
    """On ``task``: softmax tracks, softmax has plateaued, then each no-softmax arm more than ratio_tol x worse."""
    bar, sm = _bar(cfg, m, task), m[f"{task}_softmax_kl"]
    out = [
        criterion(f"{task}: softmax_kl (tracks the posterior)", sm, "<=", bar),
        criterion(
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
    out = [
        criterion(f"softmax/LSE operators in {name}'s training step", m[f"{name}_softmax_op_count"], "==", 0)
        for name in NO_SOFTMAX
    ]
    out.append(criterion("softmax/LSE operators in softmax's training step (the recorder works)",
                         m["softmax_softmax_op_count"], ">=", 1))  # fmt: skip
    out.append(criterion("max causal leak over arms and tasks", m["causal_leak_max"], "<=", cfg.causal_tol))
    out.append(
        criterion("hmm: emission_only_kl (negative control: fails the bar)", m["hmm_emission_only_kl"], ">",
                  _bar(cfg, m, "hmm"))
    )  # fmt: skip
    return out


def _criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    return [c for task in TASKS for c in _task_criteria(cfg, m, task)] + _control_criteria(cfg, m)


def _decide(cfg: Config, m: dict[str, Any]) -> tuple[Verdict, str]:
    controls_ok = all(c.passed for c in _control_criteria(cfg, m))
    status, refuting = {}, []
    for task in TASKS:
        c = _task_criteria(cfg, m, task)
        tracks, plateau = c[0].passed, c[1].passed
        status[task] = "decisive" if tracks and plateau else ("not tracking" if not tracks else "no plateau")
        close = [name for name, crit in zip(NO_SOFTMAX, c[2:], strict=True) if not crit.passed]
        if status[task] == "decisive" and close:
            refuting += [f"{LABELS[n]} on the {task} ({m[f'{task}_{n}_over_softmax_kl']:.2f}x)" for n in close]
    numbers = _numbers(cfg, m)
    if not controls_ok:
        return "PARTIAL", f"A control failed (see the criteria), so the comparison does not decide; {numbers}."
    if refuting:
        return "REFUTED", (
            f"With no softmax and no log-sum-exp anywhere, {', '.join(refuting)} reach(es) within "
            f"{cfg.ratio_tol:g}x of the softmax transformer's KL on a task where it tracks the posterior; {numbers}."
        )
    if all(s == "decisive" for s in status.values()):
        return "SUPPORTED", (
            f"On both tasks the softmax transformer tracks the posterior and every arm without a softmax is more "
            f"than {cfg.ratio_tol:g}x worse in KL; {numbers}."
        )
    undecided = ", ".join(f"{task}: softmax {s}" for task, s in status.items() if s != "decisive")
    decided = [t for t, s in status.items() if s == "decisive"]
    held = (
        f"on the {decided[0]} every no-softmax arm is more than {cfg.ratio_tol:g}x worse"
        if decided
        else "no task decides"
    )
    return "PARTIAL", f"Undecided where the softmax arm does not qualify ({undecided}); {held}; {numbers}."


def _numbers(cfg: Config, m: dict[str, Any]) -> str:
    """Every arm's seed-mean KL (and its ratio to softmax) next to the floor and the bar, per task."""
    seeds = len(m["seeds"])
    parts = []
    for task in TASKS:
        arms = ", ".join(
            f"{LABELS[n]} {m[f'{task}_{n}_kl']:.4f}"
            + ("" if n == "softmax" else f" ({m[f'{task}_{n}_over_softmax_kl']:.1f}x)")
            for n, _, _, _ in ARMS
        )
        extra = f", emission-only {m['hmm_emission_only_kl']:.4f}" if task == "hmm" else ""
        parts.append(f"{task}: {arms}; floor {m[f'{task}_floor_kl']:.4f}{extra}, bar {_bar(cfg, m, task):.4f}")
    return f"KL(Bayes || model) in bits, mean of {seeds} seed{'s' if seeds > 1 else ''}: " + "; ".join(parts)


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(cfg.threads):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    m: dict[str, Any] = {"seeds": seeds, "n_symbols": cfg.n_symbols, "hmm_states": cfg.hmm_states,
                         "hmm_obs": cfg.hmm_obs}  # fmt: skip
    op_counts: dict[str, list[str]] = {name: [] for name, _, _, _ in ARMS}
    leaks: dict[str, float] = {}
    for task_name in TASKS:
        task, steps = _task(cfg, task_name), _steps(cfg, task_name)
        eval_batch = task.sample(cfg.eval_size, torch.Generator().manual_seed(10_000 + cfg.seed))
        probe_batch = Batch(eval_batch.tokens[:16], eval_batch.positions, eval_batch.posterior[:16],
                            None if eval_batch.labels is None else eval_batch.labels[:16])  # fmt: skip
        m.update({f"{task_name}_{k}": v for k, v in _floors(task, eval_batch).items()})
        m[f"{task_name}_steps"] = steps
        runs: dict[str, list[ArmRun]] = {name: [] for name, _, _, _ in ARMS}
        for seed in seeds:
            for name, architecture, loss, _ in ARMS:
                wcfg = _windtunnel_config(cfg, task_name, loss, seed)
                model = build_arm_model(architecture, task, wcfg)
                if seed == seeds[0]:
                    op_counts[name] += [f"{task_name}:{op}" for op in _softmax_ops(model, probe_batch, loss)]
                runs[name].append(train_arm(model, task, wcfg, eval_batch, _eval_steps(steps, cfg.n_curve_points)))
                if seed == seeds[0]:
                    model.eval()
                    leaks[f"{task_name}_{name}"] = _causal_leak(model, probe_batch, task.vocab_size)
                    if architecture == "unnormalised":
                        m[f"{task_name}_{name}_attention_row_sum"] = _attention_row_sums(model, eval_batch.tokens)
        m.update(_summaries(task_name, runs, _three_quarters(steps)))
    for name, ops in op_counts.items():
        m[f"{name}_softmax_op_count"] = len(ops)
        m[f"{name}_softmax_ops"] = ops
    m["causal_leak_per_arm"] = leaks
    m["causal_leak_max"] = max(leaks.values())
    criteria = _criteria(cfg, m)
    verdict, summary = _decide(cfg, m)
    figures = _figures(ctx, cfg, m)
    m["wall_s"] = time.perf_counter() - start
    return Result(verdict, summary, m, criteria, figures, _details(cfg, m))


def _figures(ctx: Context, cfg: Config, m: dict[str, Any]) -> list[str]:
    plt = pyplot()
    names = [name for name, _, _, _ in ARMS]
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, task in zip(axes, TASKS, strict=True):
        values = [m[f"{task}_{n}_kl"] for n in names]
        lows = [v - m[f"{task}_{n}_kl_range"][0] for v, n in zip(values, names, strict=True)]
        highs = [m[f"{task}_{n}_kl_range"][1] - v for v, n in zip(values, names, strict=True)]
        bars = ax.bar(range(len(names)), [max(v, 1e-6) for v in values], yerr=[lows, highs], capsize=3,
                      color=[colors[n] for n in names])  # fmt: skip
        for b, n in zip(bars, names, strict=True):
            if n in NO_SOFTMAX:
                b.set_hatch("//")
        ax.set_yscale("log")
        ax.axhline(m[f"{task}_floor_kl"], color="0.5", lw=1, label="no-context floor (uniform)")
        ax.axhline(_bar(cfg, m, task), color="k", ls="--", lw=1, label="tracking bar (0.1 x floor)")
        ax.axhline(cfg.ratio_tol * m[f"{task}_softmax_kl"], color="C0", ls=":", lw=1, label="2 x softmax")
        if task == "hmm":
            ax.axhline(m["hmm_emission_only_kl"], color="C5", ls="-.", lw=1, label="emission-only")
        ax.set_xticks(range(len(names)), [LABELS[n].replace(", ", "\n") for n in names], fontsize=7)
        ax.set(ylabel="KL(Bayes || model), bits", title=f"{task}: mean and range over seeds (hatched: no softmax)")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    bar_figure = ctx.save_figure(fig, "normalisation_necessity_kl", dpi=100)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, task in zip(axes, TASKS, strict=True):
        for n in names:
            ax.plot(m[f"{task}_{n}_curve_steps"], m[f"{task}_{n}_curve_kl"], marker="o", ms=3, color=colors[n],
                    ls="--" if n in NO_SOFTMAX else "-", label=LABELS[n])  # fmt: skip
        ax.axhline(_bar(cfg, m, task), color="k", ls="--", lw=1)
        ax.axvline(_three_quarters(m[f"{task}_steps"]), color="0.7", lw=1)
        ax.set_yscale("log")
        ax.set(xlabel="step", ylabel="KL, bits (seed mean)", title=f"{task}: learning curves (dashed: no softmax)")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return [bar_figure, ctx.save_figure(fig, "normalisation_necessity_curves", dpi=100)]


def _details(cfg: Config, m: dict[str, Any]) -> str:
    per_seed = "; ".join(
        f"{task} {LABELS[n]}: KL "
        + ", ".join(f"{v:.4f}" for v in m[f"{task}_{n}_kl_per_seed"])
        + " (ratio to softmax "
        + ", ".join(f"{r:.2f}" for r in m[f"{task}_{n}_over_softmax_kl_per_seed"])
        + ")"
        for task in TASKS
        for n in NO_SOFTMAX
    )
    late = "; ".join(
        f"{task} {LABELS[n]} "
        + ", ".join(
            f"{a:.4f} -> {b:.4f}"
            for a, b in zip(m[f"{task}_{n}_kl_at_three_quarters_per_seed"], m[f"{task}_{n}_kl_per_seed"], strict=True)
        )
        for task in TASKS
        for n, _, _, _ in ARMS
    )
    params = ", ".join(f"{LABELS[n]} {m[f'bijection_{n}_params']}/{m[f'hmm_{n}_params']}" for n, _, _, _ in ARMS)
    sentences = [
        f"Bijection V = {cfg.n_symbols} without replacement ({cfg.bijection_steps} steps) and HMM filtering with "
        f"{cfg.hmm_states} states and symbols, K = {cfg.hmm_obs} ({cfg.hmm_steps} steps); transformer "
        f"{cfg.n_layers} layer(s), {cfg.n_heads} heads, d_model {cfg.d_model}; AdamW, batch {cfg.batch_size}, "
        f"lr {cfg.lr}, warm-up {cfg.warmup_steps} then cosine; training seeds {m['seeds']}; one fixed evaluation "
        f"set of {cfg.eval_size} sequences per task.",
        f"Parameters (bijection/HMM): {params}.",
        "No softmax anywhere: sigmoid attention (weights sigmoid(s - log(i+1)), no normalisation over keys), LSTM "
        "and prefix MLP, each with independent BCE (soft targets on the HMM). The recorder found softmax/LSE "
        f"operators {m['softmax_softmax_op_count']} time(s) in the softmax arm's step and "
        + ", ".join(f"{m[f'{n}_softmax_op_count']} in {LABELS[n]}'s" for n in NO_SOFTMAX)
        + ". A BCE arm's predictive is sigmoid(z) divided by its sum: an evaluation-time normalisation, not part of "
        "training.",
        "Sigmoid attention's trained rows sum to "
        + ", ".join(f"{m.get(f'{t}_sigmoid_attn_bce_attention_row_sum', math.nan):.2f} ({t})" for t in TASKS)
        + " on average (a softmax row sums to 1).",
        f"Per seed, the no-softmax arms: {per_seed}.",
        f"KL at 3/4 of the steps -> at the end, per seed: {late}.",
        f"Causal leak (max |change of an earlier logit| when the future is redrawn): {m['causal_leak_max']:.1e}.",
        "Every arm gets the same steps, sized on the softmax arm; the plateau test is absolute (a fifth of the "
        "tracking bar over the last quarter): the softmax arm's KL still falls in proportion as the learning rate "
        "anneals, so the ratios are those of this budget.",
        "Scope: the abstract limits the claim to training-time gradient dynamics, which this does not test; it "
        "tests the necessity reading of §1, §1.3 and §8 (referee major comment 3).",
    ]
    return " ".join(sentences) + (_QUICK_NOTE if _is_quick(cfg) else "")


_QUICK_NOTE = (
    " Quick size: one training seed, V = 5 and a 2-state HMM with K = 3, 160 steps: a smoke test of the pipeline and "
    "its controls, too short for the softmax arm to reach the tracking bar (undecided at seeds 0, 1 and 2); the full "
    "size repeats it at V = 10 and K = 8 over three seeds."
)


def _is_quick(cfg: Config) -> bool:
    """Whether ``cfg`` is the quick size (at any seed)."""
    return dataclasses.replace(cfg, seed=0) == Config.quick()


EXPERIMENT = Experiment(
    name="normalisation_necessity",
    title="Bayesian structure with no softmax anywhere: sigmoid attention, LSTM and prefix MLP under BCE",
    claim=(
        "We argue that such behaviors are neither emergent nor accidental, but are necessary consequences of the "
        "geometry of common objective functions. [...] On this account, the Bayesian structure observed by "
        "Agarwal et al. (2025b) is forced by the geometry of the loss rather than emergent. [...] The "
        "responsibility-weighted gradient structure recently documented in transformers is a necessary "
        "consequence of the objectives used to train them, not a property of the architecture."
    ),
    source=(
        "paper §1, §1.3 and §8; review-implicit-em: referee major comment 3; issue 12 item 5 (arms with no "
        "softmax in the network or the loss)"
    ),
    Config=Config,
    run=run,
)
