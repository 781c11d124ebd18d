r"""The wind tunnel without normalisation over alternatives: at the output (independent sigmoids, ``bayes_necessity``)
and inside the attention (sigmoid attention, ``normalisation_necessity``), with the training loop, the read-outs and
the checks both claims run.

The wind tunnel's transformer (:class:`~implicit_em.windtunnel.models.CausalTransformer`) normalises twice with a
softmax: over the keys inside every attention layer (paper §4.2, the conditional regime) and, under cross-entropy,
over the classes at the output (§4.3). :class:`UnnormalisedTransformer` removes the first: each attention weight is
an elementwise sigmoid of its own score,

.. math::  \alpha_{ij} = \sigma\big(s_{ij} - \log n_i\big)\, \mathbb{1}[j \le i], \qquad
           s_{ij} = q_i \cdot k_j / \sqrt{E}, \qquad n_i = i + 1, \qquad o_i = \sum_j \alpha_{ij} v_j,

so no weight depends on another key's score and :math:`\sum_j \alpha_{ij}` is free (it lies in (0, n_i)); there is
no partition function, no log-sum-exp, and the gradient of the weights is not the routing law
:math:`\alpha_{ij}(b_{ij} - \mathbb{E}_{\alpha_i} b)` (it is :math:`\alpha_{ij}(1 - \alpha_{ij}) b_{ij}`, no
baseline). Why a sigmoid and not a ReLU: it is bounded, so a query's output cannot grow without limit with its
scores, and smooth with a non-zero gradient everywhere, so no head starts dead. Why the bias :math:`-\log n_i`
(sigmoid attention of Ramapuram et al. 2024, "Theory, analysis, and best practices for sigmoid self-attention",
whose recipe this is): at initialisation (scores near 0) the weights sum to :math:`n_i/(n_i + 1) \approx 1`, so
the output's scale does not grow with the prefix length, while one key whose score is large can still take a
weight near 1 (a fixed 1/n_i factor would cap it at 1/n_i). The bias is a constant of the position, not of the
scores: it normalises nothing. The rest of the network (embeddings, pre-norm LayerNorm, GELU MLPs, head) is the
wind tunnel's, with the same parameters and, at the same seed, the same initial weights as the softmax transformer.
LayerNorm is a normalisation of a vector's scale, not a softmax over alternatives; it stays.

:func:`train_arm` trains any wind-tunnel model on the wind tunnel's data stream with its optimiser and schedule
(:func:`~implicit_em.windtunnel.train.learning_rate`, AdamW, gradient clipping, the seeded batch generator), the
steps of :func:`~implicit_em.windtunnel.train.train` without its run directory; for a model ``train`` can build it
gives the same numbers (tested). It lets the experiment use tasks ``train`` cannot configure (a smaller HMM) and
the unnormalised transformer, which ``build_model`` does not know.

:class:`SampledStateHMMTask` is the wind tunnel's HMM filtering task with a label at every scored position: the
hidden state :math:`s_t` the chain was in when it emitted :math:`o_t`, as a real next-token or label would be
observed. Its tokens and exact posteriors are the parent's, draw for draw (same generator, same calls: tested);
only ``labels`` is added. Given everything a model sees (the matrices and :math:`o_{1:t}`), :math:`s_t` is
distributed as the filtering posterior, so cross-entropy or BCE against it has the posterior as its minimiser,
like the soft target, but with the sampling noise of a label (distillation against ``posterior`` has none).

:func:`lse_operators` checks what a training step computes, not what its code is called: it runs one step (forward,
loss, backward) under a dispatch-level recorder of the aten operators and sorts them by what they compute:

- ``k_way``: a softmax or log-sum-exp over a dimension of alternatives (``softmax``, ``log_softmax``, ``logsumexp``,
  ``cross_entropy``, fused scaled-dot-product attention);
- ``by_hand``: a *hand-written* LSE, a logarithm (``log``, ``log1p``, ...) of a tensor computed from exponentials
  (``exp``, ``expm1``, ``sigmoid``) through sums, products (matrix products among them) and reshapes only
  (``log(sum(exp(x)))``, ``log(exp(x) @ w)``, ``log1p(exp(x))``, ``log(sigmoid(x))``); its operators cannot tell
  a two-way one from a K-way one, so a check for K-way normalisation must count it with ``k_way``, on the safe side;
- ``two_way_lse``: the named two-way log-sum-exps, :math:`\operatorname{softplus}(x) = \log(1 + e^x) =
  \operatorname{LSE}(0, x)` and :math:`\log\sigma(x) = -\operatorname{LSE}(0, -x)` (``softplus``,
  ``log_sigmoid``, ``binary_cross_entropy[_with_logits]``: BCE with logits is
  :math:`\operatorname{LSE}(0, z) - t z` per class);
- ``sigmoid``: :math:`\sigma(x) = e^x / (e^0 + e^x)`, a two-way softmax of x against a fixed zero (``sigmoid``,
  ``silu``).

A fused kernel is one operator to the recorder: the LSTM's oneDNN layer (``mkldnn_rnn_layer``) computes the LSTM cell
(three sigmoid gates, two tanh) inside it, which the LSTM's definition fixes; no other arm runs a fused kernel.

:func:`law_checks` measures, in float64, what the output objective does to the logits :math:`z` (distances
:math:`d = -z`): softmax cross-entropy has the responsibility law :math:`\partial\ell/\partial z = r - t`, so
:math:`\sum_c \partial\ell/\partial z_c = 0` for any logits and the cross-class Hessian is :math:`-r_j r_k`;
independent per-class sigmoid BCE is a sum of per-class terms, so its gradient :math:`\sigma(z) - t` does not sum
to zero and :math:`\partial^2\ell/\partial z_j \partial z_k = 0` for :math:`j \ne k`, exactly. :class:`Network`
is the transformer's size; :func:`train_and_load` trains one wind-tunnel run in a folder and reads back the trained
model and the same model at initialisation.
"""

import dataclasses
import math
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from implicit_em.audit import stats
from implicit_em.audit.metrics import Metrics
from implicit_em.laws import identity_residual
from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce
from implicit_em.probes.attention import attention_scores
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.metrics import WindTunnelMetrics, evaluate_predictions
from implicit_em.windtunnel.models import (
    CausalSelfAttention,
    CausalTransformer,
    count_parameters,
    matched_lstm,
    matched_prefix_mlp,
)
from implicit_em.windtunnel.tasks import (
    _PROB_MIN_HUNDREDTHS,
    Batch,
    BijectionTask,
    HMMFilteringTask,
    _sample_categorical,
    hmm_forward_filter,
)
from implicit_em.windtunnel.train import (
    TrainResult,
    build_model,
    build_tasks,
    evaluate,
    learning_rate,
    train,
    windtunnel_loss,
)

__all__ = [
    "LSE_KINDS",
    "ArmRun",
    "ArmsOnTask",
    "Network",
    "OpRecorder",
    "SampledStateHMMTask",
    "SigmoidSelfAttention",
    "UnnormalisedTransformer",
    "attention_row_sums",
    "build_arm_model",
    "causal_leak",
    "eval_steps",
    "law_checks",
    "lse_operators",
    "no_context_floors",
    "op_kind",
    "output_objective",
    "put_arm_runs",
    "put_kl_ratios",
    "sigmoid_attention",
    "sigmoid_attention_weights",
    "three_quarters",
    "train_and_load",
    "train_arm",
    "train_arms",
]

Task = BijectionTask | HMMFilteringTask
#: The architectures :func:`build_arm_model` builds: the wind tunnel's, plus the unnormalised transformer.
ARCHITECTURES = ("transformer", "unnormalised", "lstm", "prefix_mlp")


class SampledStateHMMTask(HMMFilteringTask):
    """:class:`~implicit_em.windtunnel.tasks.HMMFilteringTask` whose batches carry the chain's hidden states as
    labels (B, K): the sampled-label version of the task (module docstring). Same arguments."""

    def with_length(self, n_obs: int) -> "SampledStateHMMTask":
        return SampledStateHMMTask(n_obs, self.n_states, self.n_symbols, self.floor)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """The parent's batch (same draws from ``generator``, in the same order) with ``labels`` = the states."""
        if generator is None:
            generator = torch.Generator().manual_seed(torch.seed() % 2**63)
        g, s, o, k = generator, self.n_states, self.n_symbols, self.n_obs
        trans_h = self._random_rows(batch_size, s, s, g)  # (B, S, S) hundredths
        emit_h = self._random_rows(batch_size, s, o, g)  # (B, S, O)
        transition, emission = trans_h.double() / 100, emit_h.double() / 100
        state = torch.randint(0, s, (batch_size,), generator=g)
        batch_index = torch.arange(batch_size)
        states, obs = [], []
        for t in range(k):
            if t > 0:
                state = _sample_categorical(transition[batch_index, state], g)
            states.append(state)
            obs.append(_sample_categorical(emission[batch_index, state], g))
        observations = torch.stack(obs, dim=1)  # (B, K)
        posterior = hmm_forward_filter(transition.log(), emission.log(), observations)  # (B, K, S)
        body = torch.stack((torch.full_like(observations, self.obs_token), observations + self.symbol_offset), 2)
        tokens = torch.cat(
            (
                torch.full((batch_size, 1), self.trans_token, dtype=torch.int64),
                trans_h.reshape(batch_size, -1) - _PROB_MIN_HUNDREDTHS,
                torch.full((batch_size, 1), self.emit_token, dtype=torch.int64),
                emit_h.reshape(batch_size, -1) - _PROB_MIN_HUNDREDTHS,
                torch.full((batch_size, 1), self.sep_token, dtype=torch.int64),
                body.reshape(batch_size, 2 * k),
            ),
            dim=1,
        )
        positions = torch.arange(self.header_len + 2, self.seq_len(), 2)  # the o_t tokens
        return Batch(tokens, positions, posterior, torch.stack(states, dim=1))

    def __repr__(self) -> str:
        return f"SampledStateHMMTask(n_obs={self.n_obs}, n_states={self.n_states}, n_symbols={self.n_symbols})"


#: What :func:`op_kind` sorts an operator into (module docstring).
LSE_KINDS = ("k_way", "by_hand", "two_way_lse", "sigmoid")
_K_WAY = re.compile(
    r"softmax|logsumexp|(?<!binary_)cross_entropy|scaled_dot_product|flash_attention|efficient_attention"
)
_TWO_WAY_LSE = re.compile(r"softplus|log_sigmoid|binary_cross_entropy")
_SIGMOID = re.compile(r"sigmoid|silu")
# the hand-written LSE: exponentials (sources), what carries them unchanged in kind (sums, products, reshapes), logs
_EXP_SOURCES = frozenset({"exp", "exp_", "exp2", "expm1", "sigmoid", "sigmoid_"})
_CARRIERS = frozenset(
    "add add_ sub sub_ rsub mul mul_ div div_ neg sum mean cumsum clamp clamp_min clamp_max where masked_fill cat "
    "stack view _unsafe_view reshape expand unsqueeze squeeze transpose permute select slice clone contiguous alias "
    "_to_copy t mm bmm addmm baddbmm matmul mv dot einsum".split()
)
_LOGS = frozenset({"log", "log_", "log1p", "log1p_", "log2", "log10", "xlogy"})


def _base_name(op: str) -> str:
    """``"aten._log_softmax.default"`` -> ``"_log_softmax"``."""
    parts = op.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "aten" else parts[0]


def op_kind(op: str) -> str | None:
    """What the aten operator named ``op`` computes, as one of :data:`LSE_KINDS` but ``by_hand`` (which needs the
    operator's inputs: :class:`OpRecorder`), or None (module docstring)."""
    name = _base_name(op)
    for kind, pattern in (("k_way", _K_WAY), ("two_way_lse", _TWO_WAY_LSE), ("sigmoid", _SIGMOID)):
        if pattern.search(name):
            return kind
    return None


class OpRecorder(TorchDispatchMode):
    """Records the name of every aten operator dispatched inside the block (forward and backward), and every
    logarithm taken of a tensor computed from exponentials through sums, products and reshapes only
    (``by_hand``: a hand-written log-sum-exp, softplus or log-sigmoid)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.by_hand: set[str] = set()
        self._exp: dict[int, weakref.ref[Tensor]] = {}  # tensors holding exponentials, by id

    def _holds_exp(self, x: Any) -> bool:
        ref = self._exp.get(id(x)) if isinstance(x, Tensor) else None
        return ref is not None and ref() is x

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        op = str(func)  # e.g. "aten._log_softmax.default"
        self.ops.add(op)
        out = func(*args, **(kwargs or {}))
        name = _base_name(op)
        inputs = tree_flatten((args, kwargs or {}))[0]
        tainted = any(self._holds_exp(x) for x in inputs)
        if name in _LOGS and tainted:
            self.by_hand.add(f"{op} (a log of exponentials: an LSE by hand)")
        if name in _EXP_SOURCES or (name in _CARRIERS and tainted):
            for y in tree_flatten(out)[0]:
                if isinstance(y, Tensor):
                    self._exp[id(y)] = weakref.ref(y)
        return out


def lse_operators(model: nn.Module, batch: Batch, loss: str) -> dict[str, list[str]]:
    """The softmax / log-sum-exp operators of one training step of ``model`` (forward, ``loss``, backward), by kind.

    Returns ``{kind: sorted operator names}`` for each of :data:`LSE_KINDS`.
    The gradients the step leaves are cleared.
    """
    recorder = OpRecorder()
    with recorder:
        out = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch, loss)
        out.backward()
    model.zero_grad(set_to_none=True)
    found: dict[str, list[str]] = {kind: [] for kind in LSE_KINDS}
    for op in recorder.ops:
        kind = op_kind(op)
        if kind is not None:
            found[kind].append(op)
    found["by_hand"] += recorder.by_hand
    return {kind: sorted(ops) for kind, ops in found.items()}


def sigmoid_attention_weights(scores: Float[Tensor, "*batch t s"]) -> Float[Tensor, "*batch t s"]:
    r"""Causal sigmoid attention weights :math:`\alpha_{ij} = \sigma(s_{ij} - \log(i + 1))\,\mathbb{1}[j \le i]`.

    Each weight is a function of its own score and its query's position only: no normalisation over keys.
    Causal alignment is top-left, as for sdpa's ``is_causal`` (query i sees keys 0..i).

    Args:
        scores: (..., T, S).
    Returns:
        the weights, (..., T, S); future keys get exactly 0.
    """
    t, s = scores.shape[-2], scores.shape[-1]
    visible = torch.ones(t, s, dtype=torch.bool, device=scores.device).tril()  # (T, S)
    n_keys = torch.arange(1, t + 1, device=scores.device, dtype=scores.dtype)  # (T,): keys query i sees
    weights = torch.sigmoid(scores - n_keys.log()[:, None])
    return weights.masked_fill(~visible, 0.0)


def sigmoid_attention(
    query: Float[Tensor, "*batch t e"], key: Float[Tensor, "*batch s e"], value: Float[Tensor, "*batch s ev"]
) -> Float[Tensor, "*batch t ev"]:
    r"""Causal sigmoid attention :math:`o_i = \sum_{j \le i} \sigma(q_i \cdot k_j/\sqrt{E} - \log(i+1))\, v_j`."""
    return torch.matmul(sigmoid_attention_weights(attention_scores(query, key)), value)


class SigmoidSelfAttention(CausalSelfAttention):
    """:class:`~implicit_em.windtunnel.models.CausalSelfAttention` with :func:`sigmoid_attention` (same parameters)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return sigmoid_attention(q, k, v)  # (B, H, T, d/H)


class UnnormalisedTransformer(CausalTransformer):
    """The wind tunnel's causal transformer with every attention layer replaced by :class:`SigmoidSelfAttention`.

    Same arguments, parameters and initialisation as :class:`~implicit_em.windtunnel.models.CausalTransformer`
    (built under the same torch seed, its weights are the softmax transformer's, bit for bit).
    """

    def __init__(
        self,
        vocab_size: int,
        n_classes: int,
        max_len: int,
        n_layers: int = 2,
        n_heads: int = 4,
        d_model: int = 64,
        d_ff: int | None = None,
    ) -> None:
        super().__init__(vocab_size, n_classes, max_len, n_layers, n_heads, d_model, d_ff)
        for block in self.blocks:
            assert isinstance(block.attn, CausalSelfAttention)
            sigmoid = SigmoidSelfAttention(d_model, n_heads)
            sigmoid.load_state_dict(block.attn.state_dict())  # keep the initial weights just drawn
            block.attn = sigmoid


def build_arm_model(architecture: str, task: Task, config: WindTunnelConfig) -> nn.Module:
    """The model of one arm, seeded as :func:`~implicit_em.windtunnel.train.build_model` seeds it.

    ``transformer`` and ``unnormalised`` share their initial weights; ``lstm`` and ``prefix_mlp`` are matched
    (within 10%) to the transformer's parameter count, as the wind tunnel matches them.
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")
    sizes = (task.vocab_size, task.n_classes, task.seq_len(), config.n_layers, config.n_heads, config.d_model)
    torch.manual_seed(config.seed)
    if architecture == "unnormalised":
        return UnnormalisedTransformer(*sizes, config.d_ff)
    transformer = CausalTransformer(*sizes, config.d_ff)
    if architecture == "transformer":
        return transformer
    reference = count_parameters(transformer)
    torch.manual_seed(config.seed)
    if architecture == "lstm":
        return matched_lstm(reference, task.vocab_size, task.n_classes, config.d_model)
    return matched_prefix_mlp(reference, task.vocab_size, task.n_classes, task.seq_len())


@dataclass(frozen=True)
class ArmRun:
    """One trained arm: its evaluations (``steps[i]`` -> ``kl[i]``, ``mae[i]``, bits), the final metrics, its
    parameter count and its wall time."""

    steps: list[int]
    kl: list[float]
    mae: list[float]
    final: WindTunnelMetrics
    n_params: int
    seconds: float


def train_arm(
    model: nn.Module, task: Task, config: WindTunnelConfig, eval_batch: Batch, eval_steps: tuple[int, ...]
) -> ArmRun:
    """Train ``model`` on ``task`` for ``config.steps`` steps of the wind tunnel's loop; evaluate at ``eval_steps``.

    Per step, as in :func:`~implicit_em.windtunnel.train.train`: learning rate from the warm-up + cosine schedule,
    a batch from the generator seeded with ``config.seed``, ``windtunnel_loss`` of ``config.loss`` on the scored
    positions, AdamW (``config.lr``, ``config.weight_decay``), clipping at ``config.grad_clip``. Runs on the CPU
    with the caller's torch threads (the audit's runner sets them). Raises ``FloatingPointError`` if the loss stops
    being finite.
    """
    start = time.perf_counter()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)  # draws every training batch
    wanted = set(eval_steps) | {config.steps}
    steps, kl, mae = [], [], []
    final: WindTunnelMetrics | None = None
    model.train()
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        batch = task.sample(config.batch_size, generator)
        loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch, config.loss)  # logits (B, P, C)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(
                f"the loss is not finite at step {step + 1} ({config.loss}, {type(model).__name__})"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        if step + 1 in wanted:
            final = evaluate(model, eval_batch, config.loss)
            steps.append(step + 1)
            kl.append(final.kl)
            mae.append(final.entropy_mae_per_sample)
    assert final is not None  # config.steps >= 1 is always evaluated
    return ArmRun(steps, kl, mae, final, count_parameters(model), time.perf_counter() - start)


@dataclass(frozen=True)
class ArmsOnTask:
    """What :func:`train_arms` returns: each arm's runs (one per seed, in order) and, on the first seed, its
    softmax/LSE operators by kind (:func:`lse_operators`), its causal leak (:func:`causal_leak`) and, for sigmoid
    attention, its trained mean row sum (:func:`attention_row_sums`)."""

    runs: dict[str, list[ArmRun]]
    operators: dict[str, dict[str, list[str]]]
    leaks: dict[str, float]
    row_sums: dict[str, float]


def train_arms(
    task: Task,
    arms: Sequence[tuple[str, str, str]],
    base: WindTunnelConfig,
    seeds: Sequence[int],
    eval_batch: Batch,
    probe: Batch,
    n_curve_points: int,
    leak_seed: int,
) -> ArmsOnTask:
    """Train every ``(name, architecture, loss)`` of ``arms`` on ``task`` at each of ``seeds`` (seed by seed, the
    arms in order), with ``base``'s optimiser and schedule and its ``loss`` and ``seed`` replaced; evaluate on
    ``eval_batch`` at :func:`eval_steps`; on the first seed record the operators of one step on ``probe`` before
    training and the causal leak (futures redrawn from a generator seeded ``leak_seed``) and row sums after."""
    runs: dict[str, list[ArmRun]] = {name: [] for name, _, _ in arms}
    out = ArmsOnTask(runs, {}, {}, {})
    at = eval_steps(base.steps, n_curve_points)
    for seed in seeds:
        for name, architecture, loss in arms:
            wcfg = dataclasses.replace(base, loss=loss, seed=seed)
            model = build_arm_model(architecture, task, wcfg)
            if seed == seeds[0]:
                out.operators[name] = lse_operators(model, probe, loss)
            runs[name].append(train_arm(model, task, wcfg, eval_batch, at))
            if seed == seeds[0]:
                model.eval()
                out.leaks[name] = causal_leak(model, probe, task.vocab_size, torch.Generator().manual_seed(leak_seed))
                if architecture == "unnormalised":
                    out.row_sums[name] = attention_row_sums(model, eval_batch.tokens)
    return out


def put_arm_runs(m: Metrics, key: str, label: str, arm_runs: list[ArmRun], at: int) -> None:
    """Declare in ``m`` one arm's runs over the seeds as ``{key}_<stat>``: KL(Bayes || model) at the end (seed mean,
    per seed, [min, max]) and at step ``at`` (seed mean, per seed), entropy MAE (mean, per seed), parameters,
    training time over the seeds, and the seed-mean KL curve with its steps; KL and MAE in bits."""
    kl = [r.final.kl for r in arm_runs]
    late = [r.kl[r.steps.index(at)] for r in arm_runs]
    mae = [r.final.entropy_mae_per_sample for r in arm_runs]
    m.put(f"{key}_kl", stats.mean(kl), "bits", f"{label}: KL(Bayes ‖ model), seed mean")
    m.put(f"{key}_kl_per_seed", kl, "bits", f"{label}: KL(Bayes ‖ model) per seed")
    m.put(f"{key}_kl_range", [min(kl), max(kl)], "bits", f"{label}: KL(Bayes ‖ model) [min, max] over seeds")
    m.put(f"{key}_kl_at_three_quarters", stats.mean(late), "bits", f"{label}: KL at 3/4 of the steps, seed mean")
    m.put(f"{key}_kl_at_three_quarters_per_seed", late, "bits", f"{label}: KL at 3/4 of the steps per seed")
    m.put(f"{key}_mae", stats.mean(mae), "bits", f"{label}: entropy MAE, seed mean")
    m.put(f"{key}_mae_per_seed", mae, "bits", f"{label}: entropy MAE per seed")
    m.put(f"{key}_params", arm_runs[0].n_params, "count", f"{label}: parameters")
    m.put(f"{key}_seconds", sum(r.seconds for r in arm_runs), "s", f"{label}: training time over the seeds")
    m.put(f"{key}_curve_steps", arm_runs[0].steps, "steps", f"{label}: evaluation steps of the KL curve")
    curve = [stats.mean([r.kl[i] for r in arm_runs]) for i in range(len(arm_runs[0].steps))]
    m.put(f"{key}_curve_kl", curve, "bits", f"{label}: KL curve, seed mean")


def put_kl_ratios(m: Metrics, key: str, reference: str, name: str, label: str) -> None:
    """Declare ``{key}_over_{name}_kl``, the seed-mean KL of the arm ``key`` over that of the arm ``reference``
    (named ``name``), and ``..._per_seed``, seed by seed; each denominator floored at 1e-12."""
    ratio = m[f"{key}_kl"] / max(m[f"{reference}_kl"], 1e-12)
    m.put(f"{key}_over_{name}_kl", ratio, "ratio", f"{label}: KL over the {name} arm's (seed means)")
    pairs = zip(m[f"{key}_kl_per_seed"], m[f"{reference}_kl_per_seed"], strict=True)
    per_seed = [x / max(y, 1e-12) for x, y in pairs]
    m.put(f"{key}_over_{name}_kl_per_seed", per_seed, "ratio", f"{label}: KL over the {name} arm's, per seed")


def eval_steps(steps: int, n_points: int) -> tuple[int, ...]:
    """Evaluation steps: ``n_points`` evenly spaced ones, with 3/4 of the steps and the last among them."""
    spaced = {max(1, round(steps * (i + 1) / n_points)) for i in range(n_points)}
    return tuple(sorted(spaced | {three_quarters(steps), steps}))


def three_quarters(steps: int) -> int:
    """The step at 3/4 of ``steps`` (at least 1): where the plateau test's last quarter begins."""
    return max(1, round(0.75 * steps))


@torch.no_grad()
def causal_leak(model: nn.Module, batch: Batch, vocab_size: int, generator: torch.Generator) -> float:
    """Max |change of a logit at a position <= p| when every token after p is redrawn (from ``generator``), over
    the cut points p in {0, T/3, T/2, T - 2} of the (B, T) tokens: 0 for a causal model."""
    tokens = batch.tokens
    t = tokens.shape[1]
    base = model(tokens)
    worst = 0.0
    for p in sorted({0, t // 3, t // 2, t - 2}):
        changed = tokens.clone()
        changed[:, p + 1 :] = torch.randint(0, vocab_size, (tokens.shape[0], t - p - 1), generator=generator)
        worst = max(worst, float((model(changed)[:, : p + 1] - base[:, : p + 1]).abs().max()))
    return worst


@torch.no_grad()
def attention_row_sums(model: nn.Module, tokens: Tensor) -> float:
    r"""Mean over layers, heads, sequences and query positions of :math:`\sum_j \alpha_{ij}` in the sigmoid
    attention layers of ``model`` (1 would be a normalised row); NaN if it has none. ``tokens``: (B, T)."""
    sums: list[Tensor] = []

    def capture(module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        assert isinstance(module, SigmoidSelfAttention)
        x = inputs[0]
        b, t, d = x.shape
        h = module.n_heads
        q, k, _ = module.qkv(x).split(d, dim=2)
        q, k = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k))  # (B, H, T, d/H)
        sums.append(sigmoid_attention_weights(attention_scores(q, k)).sum(dim=-1).flatten())  # (B·H·T,)

    handles = [m.register_forward_pre_hook(capture) for m in model.modules() if isinstance(m, SigmoidSelfAttention)]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return float(torch.cat(sums).mean()) if sums else math.nan


def no_context_floors(task: Task, batch: Batch) -> dict[str, float]:
    r"""KL(Bayes || predictor) in bits on ``batch`` of the exact no-context predictor (uniform: ``floor_kl``) and,
    for the HMM, of the emission-only predictor :math:`p(s_t \mid o_t)` (``emission_only_kl``), which reads the
    emission matrix but does not filter."""
    uniform = torch.full_like(batch.posterior, 1.0 / batch.posterior.shape[-1])
    out = {"floor_kl": evaluate_predictions(uniform, batch.posterior).kl}
    if isinstance(task, HMMFilteringTask):
        out["emission_only_kl"] = evaluate_predictions(task.emission_only_posterior(batch), batch.posterior).kl
    return out


@dataclass(frozen=True)
class Network:
    """The wind tunnel's causal transformer: layers, heads, width and MLP width (the matched MLPs and LSTM are
    sized from its parameter count)."""

    n_layers: int = 1
    n_heads: int = 2
    d_model: int = 32
    d_ff: int = 64


def train_and_load(wcfg: WindTunnelConfig, run_dir: Path) -> tuple[TrainResult, nn.Module, nn.Module]:
    """Train ``wcfg`` in ``run_dir``; return the result, the trained model (read from the checkpoint, on the CPU,
    in eval mode) and the same model at initialisation (``build_model`` seeds itself with ``wcfg.seed``)."""
    result = train(wcfg, run_dir, progress=False)
    task, _ = build_tasks(wcfg)
    initial, _ = build_model(wcfg, task, task.seq_len())
    trained, _ = build_model(wcfg, task, task.seq_len())
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True, map_location="cpu")
    trained.load_state_dict(state["model"])
    return result, trained.cpu().eval(), initial.cpu().eval()


def output_objective(loss: str) -> Callable[[Tensor, Tensor], Tensor]:
    """The per-position output loss as a function of distances d = -z (N, C) and class-index targets (N,):
    ``softmax`` cross-entropy or independent ``sigmoid`` BCE."""
    if loss == "softmax":
        return constrained_cross_entropy
    return lambda d, t: independent_sigmoid_bce(-d, t)


@torch.no_grad()
def _logits(model: nn.Module, batch: Batch) -> Tensor:
    return model(batch.tokens)[:, batch.positions].double()  # (B, P, C)


def law_checks(model: nn.Module, batch: Batch, loss: str, n_rows: int) -> dict[str, float]:
    r"""The output objective's gradient structure on ``batch`` (with labels), in float64.

    ``grad_sum_mean`` / ``grad_sum_max``: mean and max over positions of :math:`|\sum_c \partial\ell/\partial z_c|`;
    ``law_residual``: max :math:`|\partial\ell/\partial d - (t - \mathrm{softmax}(z))|`;
    ``hessian_offdiag_max``: max :math:`|\partial^2\ell/\partial z_j\partial z_k|`, j != k, on the first ``n_rows``
    rows.
    """
    assert batch.labels is not None
    z = _logits(model, batch).reshape(-1, batch.posterior.shape[-1])  # (B·P, C)
    labels = batch.labels.reshape(-1)
    objective = output_objective(loss)
    z_ = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(-z_, labels).sum(), z_)  # dl/dz, (B·P, C)
    sums = grad.sum(dim=-1).abs()
    residual = identity_residual(objective, -z, "constrained", target=labels)
    offdiag = 0.0
    for i in range(min(n_rows, z.shape[0])):
        hess = torch.autograd.functional.hessian(
            lambda zi, y=labels[i : i + 1]: objective(-zi[None], y).sum(), z[i]
        )  # (C, C)
        offdiag = max(offdiag, float((hess - torch.diag(torch.diagonal(hess))).abs().max()))
    return {
        "grad_sum_mean": float(sums.mean()),
        "grad_sum_max": float(sums.max()),
        "law_residual": float(residual),
        "hessian_offdiag_max": offdiag,
    }
