r"""Is Bayesian structure a necessary consequence of the LSE geometry? Wind tunnels with no softmax over classes.

Claim (paper §1 and §1.3, restated in §8): trained networks' Bayesian behaviour is a "necessary consequence of the
geometry of common objective functions"; "the Bayesian structure observed by Agarwal et al. (2025b) is forced by
the geometry of the loss rather than emergent"; in §8, "a necessary consequence of the objectives used to train
them, not a property of the architecture". ``bayes_necessity`` removes the LSE from the loss only (independent
sigmoids at the output) and keeps the softmax attention inside the network. This experiment removes it
everywhere it normalises over alternatives: if an arm with no softmax and no log-sum-exp over the classes or the
keys, in its forward pass or its loss, tracks the exact posterior about as well as the softmax transformer, the LSE
geometry is not necessary for that behaviour.

What "no softmax or LSE anywhere" can and cannot mean (decided in issue 25). A BCE-trained arm is not free of every
log-sum-exp: binary cross-entropy with logits is, per class, :math:`\log(1 + e^{z_k}) - t_k z_k =
\operatorname{LSE}(0, z_k) - t_k z_k`, a *two-way* LSE of class k against a fixed zero logit, with gradient
:math:`\sigma(z_k) - t_k`; and every sigmoid (the LSTM's gates, sigmoid attention) is a two-way softmax,
:math:`\sigma(x) = e^x / (e^0 + e^x)`. Any likelihood of a binary outcome under a logistic link contains one, so no
arm trained on a label can be free of them. What the no-softmax arms lack is a normaliser *over the task's
alternatives*: no partition function couples the K classes or the keys, no quantity sums to one across them. That is
the paper's own line (§6.1: with independent sigmoids "no partition function coupling the classes",
"responsibilities do not exist: no quantity sums to one across classes", "competition arises from normalization.
[...] The explanatory scope of the framework ends where normalization ends"). So the test removes the K-way LSE, the
geometry the claim's mechanism needs (r_k = softmax over the alternatives), and keeps, and reports, the two-way LSEs
that BCE and sigmoids are made of; a refutation here refutes the necessity of normalisation over alternatives, and
cannot speak to a reading under which a per-class two-way LSE is "the geometry" (a reading §6.1 rules out). The
recorder below finds both kinds, so the reading is checked, not assumed.

Method. Bayesian wind tunnels with exact posteriors (:mod:`implicit_em.windtunnel`): bijection elimination without
replacement (V symbols, L = V - 1 pairs, the sampled next symbol as a hard label) and HMM filtering with a fresh
small HMM per sequence (S states and S symbols, K observations), trained two ways on the same sequences:

- ``hmm_sampled`` (decides): the label at each o_t is the hidden state the chain was in
  (:class:`~implicit_em.audit.testbeds.unnormalised.SampledStateHMMTask`), as a real label is observed; cross-entropy
  or BCE on that one-hot label; its minimiser is the filtering posterior, reached through label noise;
- ``hmm`` (reported, the earlier design): the exact filtering posterior as a soft target (distillation), which
  hands the model the answer's shape at every step; kept beside the new arm, not used by the verdict.

Six arms, each over ``n_seeds`` training seeds (independent data streams: seed s draws its batches from a
generator seeded with s), with the same optimiser, schedule and steps (the wind tunnel's loop,
:func:`~implicit_em.audit.testbeds.unnormalised.train_arm`), parameter-matched within 10%:

============================  ==========================================  ==============  =====================
arm                            network                                     loss            K-way softmax / LSE
============================  ==========================================  ==============  =====================
``softmax``                    causal transformer, softmax attention       softmax CE      keys and classes
``attn_bce``                   the same transformer                        sigmoid BCE     keys only
``sigmoid_attn_bce``           transformer, sigmoid attention (no norm.)   sigmoid BCE     **none**
``lstm_ce``                    LSTM (wind tunnel's ``matched_lstm``)       softmax CE      classes only
``lstm_bce``                   the same LSTM                               sigmoid BCE     **none**
``prefix_mlp_bce``             MLP on the flattened one-hot prefix         sigmoid BCE     **none**
============================  ==========================================  ==============  =====================

The three arms marked **none** are the "no softmax anywhere" arms on which the verdict rests: sigmoid attention
(:class:`~implicit_em.audit.testbeds.unnormalised.UnnormalisedTransformer`, weights
:math:`\sigma(s_{ij} - \log(i+1))`, no normalisation over keys; why a sigmoid and that bias, see that module),
LSTM gates (sigmoid, tanh), GELU MLPs, and independent per-class BCE against the one-hot label (or the soft
posterior on ``hmm``). LayerNorm stays in the transformer: it rescales a vector, it does not normalise over
alternatives. The absence is checked, not assumed: every arm's training step (forward, loss, backward) on every
task is run under a dispatch-level recorder of the aten operators it calls
(:func:`~implicit_em.audit.testbeds.unnormalised.lse_operators`), which sorts them into K-way softmax/LSE operators
(``softmax``, ``log_softmax``, ``logsumexp``, ``cross_entropy``, fused attention), hand-written LSEs (a log of
exponentials through sums and products), named two-way LSEs (``softplus``, ``log_sigmoid``, BCE) and sigmoids. No
K-way or hand-written one may appear in a no-softmax arm; the recorder must find them in the softmax arm (it is
shown to work), and it must find BCE's two-way LSE in every BCE arm (an identity of the code, reported: it is how
the reading above is checked). A BCE arm's *predictive* is sigmoid(z) renormalised to sum to one over the classes
(:func:`~implicit_em.windtunnel.metrics.predictive`, as ``bayes_necessity`` does): an evaluation-time division that
makes the outputs a distribution to measure; it is not part of training and is not a softmax.

Measured per arm and seed, on one fixed evaluation set per task (the two HMM tasks share theirs): KL(Bayes ||
model) in bits (the number the verdict uses: it cannot be met by matching entropies alone) and the per-sample
entropy MAE, both at 3/4 of the steps and at the end; their seed means and ranges; the ratio of each arm's KL to the
softmax arm's, per seed and for the means; parameter counts and wall time. Negative controls, computed exactly on
the evaluation set: the no-context floor (the uniform predictor: for the bijection it equals the task's no-context
MAE) and, for the HMM, the emission-only predictor p(s_t | o_t), which reads the emission matrix but does not
filter.

Verdict rule (issue 25; thresholds in ``Config`` with their sources, fixed before the deciding runs; each comparison
in ``Result.criteria``). The deciding tasks are the bijection and ``hmm_sampled``, both on sampled labels.

- gate, per deciding task: the softmax arm *tracks the posterior*: its KL <= ``learned_fraction`` (0.1) x the
  task's no-context floor on *every* seed (the worst seed; issue 25 §2: a mean can pass where seeds fail);
- gate, per deciding task: it has *reached its plateau*: its seed-mean KL fell by no more than ``plateau_fraction``
  (0.2) x that bar over the last quarter of the steps (``Plateau`` below: why absolute);
- a deciding task is *decisive* if both gates hold; otherwise that half is UNDECIDED;
- controls (gates of the whole experiment: a failure makes it UNDECIDED): no K-way or hand-written softmax/LSE
  operator in any no-softmax arm's training step, at least one in the softmax arm's; every arm causal (changing
  future tokens moves no earlier logit by more than ``causal_tol``); on the HMM the emission-only predictor fails
  the bar (so the bar needs filtering, not just reading the matrices).

REFUTED if, on a decisive task, any no-softmax arm reaches KL <= ``ratio_tol`` (2) x the softmax arm's KL (seed
means): one counterexample refutes a necessity claim, whatever the other half. SUPPORTED if both deciding tasks
are decisive and every no-softmax arm is more than 2x worse on both. UNDECIDED otherwise (the summary says which
half could not decide and why). The soft-target ``hmm`` is reported beside them with the same numbers and its own
tracking and plateau state, and so is the verdict of the rule before issue 25 (``old_rule_verdict``: the bijection
and the soft-target HMM decide, tracking judged on the seed mean, PARTIAL where a task or a control failed).

Plateau and sizes. The step budgets, the learning rate and the HMM's size were chosen on pilots of the softmax arm
alone (no other arm was run before the rule and the sizes were fixed). On the bijection (V = 10, lr 3e-3, seed 0,
before issue 25) its KL keeps falling in proportion as the cosine schedule anneals: 0.0152 -> 0.0078 bits over the
last quarter of 2,000 steps, 0.0098 -> 0.0051 over the last quarter of 4,000 (lr 1e-2: 0.0143 -> 0.0060 at 2,000).
The posterior is exactly representable there, so the KL heads to zero and a relative plateau test is not met at any
budget this machine allows. The test is therefore absolute, on the scale on which tracking is judged: a drop of at
most a fifth of the tracking bar over the last quarter. On the soft-target HMM (seed 0, before issue 25), 3 states
and 3 symbols with K = 8 (37 tokens) needed 3,000 steps at lr 3e-3 to reach 0.029 bits (bar 0.036; 81 s a run, too
dear for 36 runs); at 1,600 steps it stayed at 0.040, at lr 1e-2 it did not learn (0.32), and at batch 32 and
2,400 steps it reached 0.040. With 2 states and 2 symbols (K = 8, 27 tokens) it reached 0.0082 bits at 1,600 steps
(bar 0.026; last quarter 0.0093 -> 0.0082): the full size's HMM.

Pilot of the sampled-label HMM (issue 25; the softmax arm alone, full size's network, optimiser and HMM, pilot seeds
100-102, disjoint from the deciding seeds 0-2; evaluation set of seed 100, bar 0.0264 bits, plateau tolerance
0.0053; chosen on the two gates only, before any other arm ran on sampled labels): at 1,600 steps (the soft target's
budget) KL 0.0178 and 0.0208 (seeds 100, 101), last-quarter drops 0.0024 and 0.0040: both gates held, seed 101 with
little margin (KL 0.79x the bar, drop 0.75x the tolerance); at 3,200 steps KL 0.0160, 0.0164, 0.0144 (seeds 100-102,
0.55-0.62x the bar), drops 0.0017, 0.0007, 0.0043. The full size's ``hmm_sampled_steps`` is 3,200: the label noise
costs about twice the soft target's steps for the same margin. That pilot was run and recorded by the session that
began this work; ``benchmarks/normalisation_necessity_pilot.py`` re-runs it (the softmax arm alone, the same seeds,
sizes and steps) and docs/audit.md gives what it printed, before the deciding run. Consequence, stated in every
summary: the ratios compare arms at one budget sized for the softmax arm, with its KL still falling slowly on the
bijection.
"""

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.audit.core import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    gate,
    gated,
    identity,
    pyplot,
    torch_threads,
)
from implicit_em.audit.testbeds.unnormalised import (
    ArmRun,
    SampledStateHMMTask,
    SigmoidSelfAttention,
    Task,
    build_arm_model,
    lse_operators,
    train_arm,
)
from implicit_em.probes.attention import attention_scores
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.metrics import evaluate_predictions
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask

__all__ = ["ARMS", "DECIDING", "EXPERIMENT", "TASKS", "Config", "run"]

# (name, architecture of _unnormalised.build_arm_model, loss, no K-way softmax / LSE anywhere), in the report's order
ARMS = (
    ("softmax", "transformer", "softmax", False),
    ("attn_bce", "transformer", "sigmoid", False),
    ("sigmoid_attn_bce", "unnormalised", "sigmoid", True),
    ("lstm_ce", "lstm", "softmax", False),
    ("lstm_bce", "lstm", "sigmoid", True),
    ("prefix_mlp_bce", "prefix_mlp", "sigmoid", True),
)
NO_SOFTMAX = tuple(name for name, _, _, none in ARMS if none)
BCE_ARMS = tuple(name for name, _, loss, _ in ARMS if loss == "sigmoid")
LABELS = {
    "softmax": "transformer, softmax CE",
    "attn_bce": "transformer, sigmoid BCE",
    "sigmoid_attn_bce": "sigmoid attention, BCE",
    "lstm_ce": "LSTM, softmax CE",
    "lstm_bce": "LSTM, BCE",
    "prefix_mlp_bce": "prefix MLP, BCE",
}
TASKS = ("bijection", "hmm_sampled", "hmm")  # the order they run and are reported in
DECIDING = ("bijection", "hmm_sampled")  # sampled labels: the verdict's tasks; "hmm" (soft target) is reported
OLD_DECIDING = ("bijection", "hmm")  # the rule before issue 25
TASK_LABELS = {
    "bijection": "bijection",
    "hmm_sampled": "HMM, sampled states",
    "hmm": "HMM, soft posterior target (reported)",
}


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
    hmm_steps: int = 160  # the soft-target HMM (reported)
    hmm_sampled_steps: int = 160  # the sampled-label HMM (decides); full size: pilot in the module docstring
    batch_size: int = 32
    lr: float = 1e-2
    warmup_steps: int = 16
    eval_size: int = 256
    n_seeds: int = 1  # training seeds seed, seed + 1, ...
    n_curve_points: int = 8  # evaluations per run (3/4 and the end among them)
    threads: int | None = 1  # 2 threads on 2 shared cores spin-wait (bayes_necessity measured 57x slower)
    # verdict thresholds, fixed before the full size ran (module docstring):
    # "tracks the posterior": KL <= learned_fraction x the no-context floor, on every seed; bayes_necessity's bar
    # (paper §5.3: small transformers match the posterior to 1e-3 - 1e-4 bits; one order of magnitude below the
    # floor is the weakest reading of tracking); every seed, not the mean: issue 25 §2.
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
        """V = 10 (2,000 steps) and a 2-state, 2-symbol HMM with K = 8 (27 tokens; 3,200 steps on sampled states,
        1,600 on the soft target), two layers of width 32, lr 3e-3, three seeds (sizes chosen on the softmax arm
        alone: module docstring).

        Budget (measured on one loaded thread, batch 64): a transformer step costs 12-20 ms on the bijection and
        about 8-18 ms on the HMM, the LSTM and the prefix MLP less.
        """
        return cls(
            n_symbols=10, hmm_states=2, hmm_obs=8, n_layers=2, n_heads=2, d_model=32, d_ff=64,
            bijection_steps=2000, hmm_steps=1600, hmm_sampled_steps=3200, batch_size=64, lr=3e-3,
            warmup_steps=100, eval_size=1024, n_seeds=3,
        )  # fmt: skip


def _task(cfg: Config, name: str) -> Task:
    if name == "bijection":
        return BijectionTask(cfg.n_symbols)
    if name == "hmm_sampled":
        return SampledStateHMMTask(cfg.hmm_obs, cfg.hmm_states, cfg.hmm_states)
    return HMMFilteringTask(cfg.hmm_obs, cfg.hmm_states, cfg.hmm_states)


def _steps(cfg: Config, task: str) -> int:
    return {"bijection": cfg.bijection_steps, "hmm_sampled": cfg.hmm_sampled_steps, "hmm": cfg.hmm_steps}[task]


def _windtunnel_config(cfg: Config, task: str, loss: str, seed: int) -> WindTunnelConfig:
    """The wind tunnel's settings for one arm (the optimiser and schedule fields are what ``train_arm`` reads)."""
    return WindTunnelConfig(
        task="bijection" if task == "bijection" else "hmm", loss=loss, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
        d_model=cfg.d_model, d_ff=cfg.d_ff, steps=_steps(cfg, task), batch_size=cfg.batch_size, lr=cfg.lr,
        warmup_steps=cfg.warmup_steps, seed=seed, threads=cfg.threads, device="cpu",
    )  # fmt: skip


def _eval_steps(steps: int, n_points: int) -> tuple[int, ...]:
    """Evaluation steps: ``n_points`` evenly spaced ones, with 3/4 of the steps and the last among them."""
    spaced = {max(1, round(steps * (i + 1) / n_points)) for i in range(n_points)}
    return tuple(sorted(spaced | {_three_quarters(steps), steps}))


def _three_quarters(steps: int) -> int:
    return max(1, round(0.75 * steps))


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
    """On a deciding ``task``: the gates (softmax tracks on its worst seed, has plateaued), then each no-softmax
    arm more than ratio_tol x worse than softmax (seed means)."""
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


def _identities(m: dict[str, Any]) -> list[Criterion]:
    """What the BCE arms contain by construction, shown by the recorder: BCE with logits, LSE(0, z) - t z."""
    return [
        identity(f"two-way LSE operators (BCE: LSE(0, z) - t z) in {name}'s training step",
                 m[f"{name}_two_way_lse_op_count"], ">=", 1)
        for name in BCE_ARMS
    ]  # fmt: skip


def _criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    return [c for task in DECIDING for c in _task_criteria(cfg, m, task)] + _control_criteria(cfg, m) + _identities(m)


def _status(cfg: Config, m: dict[str, Any], task: str, worst_seed: bool = True) -> str:
    """``decisive``, ``not tracking`` or ``no plateau``: whether the softmax arm qualifies on ``task``; tracking on
    its worst seed (the rule) or on its seed mean (the rule before issue 25)."""
    bar = _bar(cfg, m, task)
    kl = m[f"{task}_softmax_kl_range"][1] if worst_seed else m[f"{task}_softmax_kl"]
    if not kl <= bar:
        return "not tracking"
    if not m[f"{task}_softmax_plateau_drop"] <= cfg.plateau_fraction * bar:
        return "no plateau"
    return "decisive"


def _close(cfg: Config, m: dict[str, Any], task: str) -> list[str]:
    """The no-softmax arms within ratio_tol x the softmax arm's KL on ``task`` (seed means)."""
    return [n for n in NO_SOFTMAX if m[f"{task}_{n}_kl"] <= cfg.ratio_tol * m[f"{task}_softmax_kl"]]


_TWO_WAY = (
    "What is left in the BCE arms is a two-way LSE per class, log(1 + e^z) - t z = LSE(0, z) - t z (the recorder "
    "finds it in every BCE arm), with no partition function across the classes or keys: the case §6.1 places "
    'outside the framework ("responsibilities do not exist"), so the result reads on normalisation over '
    "alternatives, not on every LSE"
)


def _decide(cfg: Config, m: dict[str, Any]) -> tuple[Verdict, str]:
    criteria = _criteria(cfg, m)
    gated("SUPPORTED", [c for c in criteria if c.role == "identity"])  # a broken identity is a bug: it raises
    numbers = _numbers(cfg, m)
    failed = [c.metric for c in _control_criteria(cfg, m) if not c.passed]
    if failed:
        return "UNDECIDED", f"A control failed ({'; '.join(failed)}), so the testbed cannot decide; {numbers}."
    status = {task: _status(cfg, m, task) for task in DECIDING}
    undecided = ", ".join(f"{TASK_LABELS[t]}: softmax {s}" for t, s in status.items() if s != "decisive")
    refuting = [
        f"{LABELS[n]} on the {TASK_LABELS[t]} ({m[f'{t}_{n}_over_softmax_kl']:.2f}x)"
        for t in DECIDING
        if status[t] == "decisive"
        for n in _close(cfg, m, t)
    ]
    if refuting:
        other = f" (undecided elsewhere: {undecided})" if undecided else ""
        return "REFUTED", (
            f"With no softmax and no log-sum-exp over the classes or the keys anywhere, {', '.join(refuting)} "
            f"reach(es) within {cfg.ratio_tol:g}x of the softmax transformer's KL on a sampled-label task where it "
            f"tracks the posterior on every seed and has plateaued{other}. {_TWO_WAY}; {numbers}."
        )
    if not undecided:
        return "SUPPORTED", (
            f"On both sampled-label tasks the softmax transformer tracks the posterior on every seed and every arm "
            f"without a K-way softmax or LSE is more than {cfg.ratio_tol:g}x worse in KL. {_TWO_WAY}; {numbers}."
        )
    decided = [t for t, s in status.items() if s == "decisive"]
    held = (
        f"on the {TASK_LABELS[decided[0]]} every no-softmax arm is more than {cfg.ratio_tol:g}x worse"
        if decided
        else "no task decides"
    )
    return "UNDECIDED", f"Undecided where the softmax arm does not qualify ({undecided}); {held}; {numbers}."


def _old_rule_verdict(cfg: Config, m: dict[str, Any]) -> Verdict:
    """The rule before issue 25: the bijection and the soft-target HMM decide, tracking on the seed mean, PARTIAL
    where a control failed or no refutation came with a task undecided."""
    if not all(c.passed for c in _control_criteria(cfg, m)):
        return "PARTIAL"
    status = {task: _status(cfg, m, task, worst_seed=False) for task in OLD_DECIDING}
    if any(s == "decisive" and _close(cfg, m, t) for t, s in status.items()):
        return "REFUTED"
    return "SUPPORTED" if all(s == "decisive" for s in status.values()) else "PARTIAL"


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
        parts.append(
            f"{TASK_LABELS[task]}: {arms}; floor {m[f'{task}_floor_kl']:.4f}{extra}, bar {_bar(cfg, m, task):.4f}"
            + ("" if task in DECIDING else f", softmax {_status(cfg, m, task)}")
        )
    return f"KL(Bayes || model) in bits, mean of {seeds} seed{'s' if seeds > 1 else ''}: " + "; ".join(parts)


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(cfg.threads):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    m: dict[str, Any] = {"seeds": seeds, "n_symbols": cfg.n_symbols, "hmm_states": cfg.hmm_states,
                         "hmm_obs": cfg.hmm_obs}  # fmt: skip
    found: dict[str, dict[str, list[str]]] = {name: {} for name, _, _, _ in ARMS}
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
                    for kind, ops in lse_operators(model, probe_batch, loss).items():
                        found[name].setdefault(kind, []).extend(f"{task_name}:{op}" for op in ops)
                runs[name].append(train_arm(model, task, wcfg, eval_batch, _eval_steps(steps, cfg.n_curve_points)))
                if seed == seeds[0]:
                    model.eval()
                    leaks[f"{task_name}_{name}"] = _causal_leak(model, probe_batch, task.vocab_size)
                    if architecture == "unnormalised":
                        m[f"{task_name}_{name}_attention_row_sum"] = _attention_row_sums(model, eval_batch.tokens)
        m.update(_summaries(task_name, runs, _three_quarters(steps)))
    for name, kinds in found.items():
        k_way = kinds.get("k_way", []) + kinds.get("by_hand", [])
        m[f"{name}_softmax_op_count"], m[f"{name}_softmax_ops"] = len(k_way), k_way
        two_way = kinds.get("two_way_lse", [])
        m[f"{name}_two_way_lse_op_count"], m[f"{name}_two_way_lse_ops"] = len(two_way), two_way
        m[f"{name}_sigmoid_op_count"] = len(kinds.get("sigmoid", []))
    m["causal_leak_per_arm"] = leaks
    m["causal_leak_max"] = max(leaks.values())
    m["task_states"] = {task: _status(cfg, m, task) for task in TASKS}
    m["old_rule_verdict"] = _old_rule_verdict(cfg, m)
    criteria = _criteria(cfg, m)
    verdict, summary = _decide(cfg, m)
    figures = _figures(ctx, cfg, m)
    m["wall_s"] = time.perf_counter() - start
    return Result(verdict, summary, m, criteria, figures, _details(cfg, m))


def _figures(ctx: Context, cfg: Config, m: dict[str, Any]) -> list[str]:
    plt = pyplot()
    names = [name for name, _, _, _ in ARMS]
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    fig, axes = plt.subplots(1, len(TASKS), figsize=(16, 4.2))
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
        if task != "bijection":
            ax.axhline(m[f"{task}_emission_only_kl"], color="C5", ls="-.", lw=1, label="emission-only")
        ax.set_xticks(range(len(names)), [LABELS[n].replace(", ", "\n") for n in names], fontsize=7)
        ax.set(
            ylabel="KL(Bayes || model), bits", title=f"{TASK_LABELS[task]}: seed mean and range (hatched: no softmax)"
        )
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    bar_figure = ctx.save_figure(fig, "normalisation_necessity_kl", dpi=100)

    fig, axes = plt.subplots(1, len(TASKS), figsize=(16, 4))
    for ax, task in zip(axes, TASKS, strict=True):
        for n in names:
            ax.plot(m[f"{task}_{n}_curve_steps"], m[f"{task}_{n}_curve_kl"], marker="o", ms=3, color=colors[n],
                    ls="--" if n in NO_SOFTMAX else "-", label=LABELS[n])  # fmt: skip
        ax.axhline(_bar(cfg, m, task), color="k", ls="--", lw=1)
        ax.axvline(_three_quarters(m[f"{task}_steps"]), color="0.7", lw=1)
        ax.set_yscale("log")
        ax.set(xlabel="step", ylabel="KL, bits (seed mean)", title=f"{TASK_LABELS[task]}: curves (dashed: no softmax)")
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
        f"{cfg.hmm_states} states and symbols, K = {cfg.hmm_obs}, on the chain's sampled hidden states "
        f"({cfg.hmm_sampled_steps} steps; decides) and on the exact posterior as a soft target ({cfg.hmm_steps} "
        "steps; distillation, reported: it does not decide); transformer "
        f"{cfg.n_layers} layer(s), {cfg.n_heads} heads, d_model {cfg.d_model}; AdamW, batch {cfg.batch_size}, "
        f"lr {cfg.lr}, warm-up {cfg.warmup_steps} then cosine; training seeds {m['seeds']}; one fixed evaluation "
        f"set of {cfg.eval_size} sequences per task.",
        f"Parameters (bijection/HMM): {params}.",
        "No K-way softmax or LSE anywhere: sigmoid attention (weights sigmoid(s - log(i+1)), no normalisation over "
        "keys), LSTM and prefix MLP, each with independent BCE (against the one-hot label; the soft posterior on "
        "the reported HMM). Over the three tasks the recorder found K-way or hand-written softmax/LSE operators "
        f"{m['softmax_softmax_op_count']} time(s) in the softmax arm's step and "
        + ", ".join(f"{m[f'{n}_softmax_op_count']} in {LABELS[n]}'s" for n in NO_SOFTMAX)
        + "; two-way LSEs (softplus, log-sigmoid, BCE with logits) "
        + ", ".join(f"{m[f'{n}_two_way_lse_op_count']} in {LABELS[n]}'s" for n in BCE_ARMS)
        + ", and sigmoids (a two-way softmax against a fixed zero) "
        + ", ".join(f"{m[f'{n}_sigmoid_op_count']} in {LABELS[n]}'s" for n in NO_SOFTMAX)
        + ". The LSTM's cell runs inside one fused oneDNN operator (its sigmoid gates are not seen one by one). "
        "A BCE arm's predictive is sigmoid(z) divided by its sum: an evaluation-time normalisation, not part of "
        "training.",
        "The soft-target HMM (distillation) beside the sampled-label one: softmax "
        f"{m['hmm_softmax_kl']:.4f} against {m['hmm_sampled_softmax_kl']:.4f} bits, "
        + ", ".join(
            f"{LABELS[n]} {m[f'hmm_{n}_over_softmax_kl']:.2f}x against {m[f'hmm_sampled_{n}_over_softmax_kl']:.2f}x"
            for n in NO_SOFTMAX
        )
        + f" softmax's KL; the rule before issue 25 (soft target deciding, seed-mean tracking) gives "
        f"{m['old_rule_verdict']}.",
        "Sigmoid attention's trained rows sum to "
        + ", ".join(f"{m.get(f'{t}_sigmoid_attn_bce_attention_row_sum', math.nan):.2f} ({t})" for t in TASKS)
        + " on average (a softmax row sums to 1).",
        f"Per seed, the no-softmax arms: {per_seed}.",
        f"KL at 3/4 of the steps -> at the end, per seed: {late}.",
        f"Softmax arm per task: {', '.join(f'{TASK_LABELS[t]} {st}' for t, st in m['task_states'].items())}.",
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
    "its controls, too short for the softmax arm to reach the tracking bar (UNDECIDED at seeds 0-4); the full size "
    "repeats it at V = 10 and K = 8 over three seeds."
)


def _is_quick(cfg: Config) -> bool:
    """Whether ``cfg`` is the quick size (at any seed)."""
    return dataclasses.replace(cfg, seed=0) == Config.quick()


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
        "paper §1, §1.3 and §8 (§6.1 for what BCE keeps); review-implicit-em: referee major comment 3; issue 12 "
        "item 5 (arms with no softmax in the network or the loss); issue 25 §6 (sampled labels, two-way LSEs)"
    ),
    Config=Config,
    run=run,
)
