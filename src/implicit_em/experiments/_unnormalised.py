r"""Model variants and the training loop of ``normalisation_necessity``: attention with no normalisation over keys.

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
"""

import math
import time
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em._runio import torch_threads
from implicit_em.probes.attention import attention_scores
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.metrics import WindTunnelMetrics
from implicit_em.windtunnel.models import (
    CausalSelfAttention,
    CausalTransformer,
    count_parameters,
    matched_lstm,
    matched_prefix_mlp,
)
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask
from implicit_em.windtunnel.train import evaluate, learning_rate, windtunnel_loss

__all__ = [
    "ArmRun",
    "SigmoidSelfAttention",
    "UnnormalisedTransformer",
    "build_arm_model",
    "sigmoid_attention",
    "sigmoid_attention_weights",
    "train_arm",
]

Task = BijectionTask | HMMFilteringTask
#: The architectures :func:`build_arm_model` builds: the wind tunnel's, plus the unnormalised transformer.
ARCHITECTURES = ("transformer", "unnormalised", "lstm", "prefix_mlp")


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
    with ``config.threads`` intra-op threads, as ``train`` does (None: the caller's setting). Raises
    ``FloatingPointError`` if the loss stops being finite.
    """
    with torch_threads(config.threads):
        return _train_arm(model, task, config, eval_batch, eval_steps)


def _train_arm(
    model: nn.Module, task: Task, config: WindTunnelConfig, eval_batch: Batch, eval_steps: tuple[int, ...]
) -> ArmRun:
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
