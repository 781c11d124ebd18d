r"""Score-gradient surgery for ``advantage_ablation``: a softmax whose backward pass is the routing law, or not.

The attention law (Agarwal, Dalal & Misra, arXiv 2512.22473; paper §4.2): with scores :math:`s_{ij}`, weights
:math:`\alpha_i = \mathrm{softmax}(s_i)` over the visible keys, output :math:`y_i = \sum_j \alpha_{ij} v_j` and
upstream gradient :math:`u_i = \partial\ell/\partial y_i`,

.. math::  \frac{\partial \ell}{\partial s_{ij}} = \alpha_{ij}\,\big(b_{ij} - \mathbb{E}_{\alpha_i}[b]\big),
           \qquad b_{ij} = u_i \cdot v_j .

Since :math:`\partial\ell/\partial\alpha_{ij} = u_i\cdot v_j = b_{ij}`, a :class:`torch.autograd.Function` that maps
s to :math:`\alpha` receives b itself as its incoming gradient and can return any of four score gradients
(:data:`MODES`):

- ``exact`` (arm A): :math:`\alpha \odot (b - \mathbb{E}_\alpha b)`, autograd's gradient;
- ``zero`` (arm B): 0; the scores, and everything upstream of them through the scores, get no gradient;
- ``no_baseline`` (arm C): :math:`\alpha \odot b`, the advantage without its baseline
  (it differs from A by exactly :math:`\alpha \odot \mathbb{E}_\alpha b`);
- ``permuted`` (arm D): :math:`\alpha_{ij}\, a_{i,\pi_i(j)}` with :math:`a = b - \mathbb{E}_\alpha b` the
  advantages and :math:`\pi_i` a fixed permutation of the visible keys 0..i of query row i (drawn once from a seed
  by :func:`row_permutations`, the same for every batch entry, head and step): the gate and each row's set of
  advantages are kept, which key receives which advantage is scrambled.

Values, W_O and every other parameter keep their exact gradients along every path that does not pass through the
scores. The models here (:func:`ablated_transformer`, :func:`ablated_sticky`, :func:`single_head`) are the wind
tunnel's causal transformer, the sticky testbed's transformer (:mod:`implicit_em.windtunnel.sticky`) and
``sticky_sculpting``'s single head with their softmax replaced by :func:`routed_softmax`.
"""

import math
from typing import Any, Literal, cast

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em.windtunnel.models import CausalSelfAttention, CausalTransformer
from implicit_em.windtunnel.sticky import StickyAttention, StickyTransformer

__all__ = [
    "MODES",
    "AblatedSelfAttention",
    "AblatedStickyAttention",
    "Mode",
    "ablated_sticky",
    "ablated_transformer",
    "attention_layers",
    "final_residual",
    "gradient_checks",
    "query_key_weights",
    "routed_softmax",
    "row_permutations",
    "single_head",
    "sticky_query_key_weights",
]

Mode = Literal["exact", "zero", "no_baseline", "permuted"]
MODES: tuple[Mode, ...] = ("exact", "zero", "no_baseline", "permuted")


class _RoutedSoftmax(torch.autograd.Function):
    """alpha = softmax(s) over the causal keys; backward returns the score gradient of ``mode`` (module docstring)."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, mode: str, perm: Tensor | None) -> Tensor:
        t, n = s.shape[-2], s.shape[-1]
        causal = torch.ones(t, n, dtype=torch.bool, device=s.device).tril()  # (T, S): key j <= query i
        alpha = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)  # (..., T, S)
        ctx.mode = mode
        ctx.save_for_backward(alpha, perm if perm is not None else torch.empty(0, dtype=torch.long))
        return alpha

    @staticmethod
    def backward(ctx: Any, b: Tensor) -> tuple[Tensor | None, None, None]:
        alpha, perm = ctx.saved_tensors
        if ctx.mode == "zero":
            return torch.zeros_like(b), None, None
        if ctx.mode == "no_baseline":
            return alpha * b, None, None
        advantage = b - (alpha * b).sum(dim=-1, keepdim=True)  # (..., T, S): b_ij - E_{alpha_i}[b]
        if ctx.mode == "permuted":  # key j receives the advantage of key pi_i(j); masked keys map to themselves
            advantage = advantage.gather(-1, perm.expand_as(advantage))
        return alpha * advantage, None, None


def routed_softmax(
    s: Float[Tensor, "*batch t s"], mode: Mode = "exact", perm: Tensor | None = None
) -> Float[Tensor, "*batch t s"]:
    r"""Causal softmax :math:`\alpha = \mathrm{softmax}(s)` whose backward pass is the score gradient of ``mode``.

    Args:
        s: scores (..., T, S) with S = T (causal self-attention: query i sees keys 0..i).
        mode: one of :data:`MODES`.
        perm: (T, S) int64, :func:`row_permutations`; required for ``permuted``.
    Returns:
        alpha, same shape as s; the forward value is the same in every mode.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if s.dim() < 2 or s.shape[-1] != s.shape[-2]:
        raise ValueError(f"scores must be (..., T, T), got {tuple(s.shape)}")
    if mode == "permuted" and (perm is None or tuple(perm.shape) != tuple(s.shape[-2:])):
        got = None if perm is None else tuple(perm.shape)
        raise ValueError(f"mode 'permuted' needs perm of shape {tuple(s.shape[-2:])}, got {got}")
    out: Tensor = _RoutedSoftmax.apply(s, mode, perm.to(s.device) if perm is not None else None)
    return out


def row_permutations(t: int, seed: int) -> Tensor:
    """(T, T) int64: row i is a uniformly random permutation of the visible keys 0..i followed by i+1..T-1 in place.

    Drawn once from ``seed`` (a fixed permutation per query row, the same for the whole run)."""
    g = torch.Generator().manual_seed(seed)
    keys = torch.rand(t, t, generator=g, dtype=torch.float64)
    cols = torch.arange(t)
    keys = torch.where(cols[None, :] > cols[:, None], 2.0 + cols.double()[None, :], keys)  # masked keys sort last
    return torch.argsort(keys, dim=-1)


def gradient_checks(seed: int, t: int = 6, e: int = 4) -> dict[str, float]:
    """Max errors, float64, of the four score gradients on a random causal head (scores, values and upstream
    gradients drawn from ``seed``) against autograd's exact one.

    ``exact_vs_autograd``: |A - autograd|; ``no_baseline_minus_exact``: |(C - A) - α⊙E_α b|; ``zero``: |B|;
    ``permuted_vs_exact``: |D/α - π(A/α)| on the visible keys (A/α is the advantage)."""
    g = torch.Generator().manual_seed(seed)
    s0 = torch.randn(2, t, t, generator=g, dtype=torch.float64)
    v = torch.randn(2, t, e, generator=g, dtype=torch.float64)
    u = torch.randn(2, t, e, generator=g, dtype=torch.float64)  # the upstream gradient dl/dy
    perm = row_permutations(t, seed)
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def grad(mode: Mode | None) -> Tensor:
        s = s0.clone().requires_grad_(True)
        alpha = (
            torch.softmax(s.masked_fill(~causal, float("-inf")), -1) if mode is None else routed_softmax(s, mode, perm)
        )
        ((alpha @ v) * u).sum().backward()
        assert s.grad is not None
        return s.grad

    ref, a, b, c, d = grad(None), grad("exact"), grad("zero"), grad("no_baseline"), grad("permuted")
    alpha = torch.softmax(s0.masked_fill(~causal, float("-inf")), -1)
    bij = u @ v.transpose(-2, -1)  # b_ij = u_i . v_j
    adv = torch.where(causal, a / alpha, 0.0)
    return {
        "exact_vs_autograd": float((a - ref).abs().max()),
        "no_baseline_minus_exact": float(((c - a) - alpha * (alpha * bij).sum(-1, keepdim=True)).abs().max()),
        "zero": float(b.abs().max()),
        "permuted_vs_exact": float(
            torch.where(causal, d / alpha - adv.gather(-1, perm.expand_as(adv)), 0.0).abs().max()
        ),
    }


class AblatedSelfAttention(CausalSelfAttention):
    """The wind tunnel's multi-head causal self-attention (the given ``qkv`` and ``proj``, so no new weights are
    drawn) through :func:`routed_softmax`."""

    def __init__(self, qkv: nn.Linear, proj: nn.Linear, n_heads: int, mode: Mode, perm: Tensor | None) -> None:
        nn.Module.__init__(self)  # not CausalSelfAttention's: it would draw fresh qkv and proj weights
        self.qkv, self.proj, self.n_heads, self.mode = qkv, proj, n_heads, mode
        self.perm: Tensor | None = perm  # a plain attribute, not state: (T, T) row permutations for ``permuted``

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        t = q.shape[-2]
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
        perm = None if self.perm is None else self.perm[:t, :t]
        return routed_softmax(s, self.mode, perm) @ v  # (B, H, T, d/H)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, mode={self.mode!r}"


def ablated_transformer(
    vocab_size: int,
    n_classes: int,
    max_len: int,
    n_layers: int,
    n_heads: int,
    d_model: int,
    d_ff: int,
    mode: Mode,
    seed: int,
    perm_seed: int,
) -> CausalTransformer:
    """:class:`~implicit_em.windtunnel.models.CausalTransformer` (initialised from ``seed``) with every attention
    replaced by :class:`AblatedSelfAttention` of ``mode``; the weights, and so the initialisation, are unchanged.

    Every layer's attention uses the same row permutations, drawn from ``perm_seed`` (used by ``permuted`` only)."""
    torch.manual_seed(seed)
    model = CausalTransformer(vocab_size, n_classes, max_len, n_layers, n_heads, d_model, d_ff)
    perm = row_permutations(max_len, perm_seed) if mode == "permuted" else None
    for block in model.blocks:
        old = cast(CausalSelfAttention, block.attn)
        block.attn = AblatedSelfAttention(old.qkv, old.proj, old.n_heads, mode, perm)
    return model


class AblatedStickyAttention(StickyAttention):
    """The sticky testbed's attention (the given W_Q, W_K, W_V, W_O, so no new weights are drawn) through
    :func:`routed_softmax`."""

    def __init__(self, base: StickyAttention, mode: Mode, perm: Tensor | None) -> None:
        nn.Module.__init__(self)  # not StickyAttention's: it would draw fresh weights
        self.W_Q, self.W_K, self.W_V, self.W_O = base.W_Q, base.W_K, base.W_V, base.W_O
        self.n_heads, self.mode = base.n_heads, mode
        self.perm: Tensor | None = perm  # a plain attribute, not state: (T, T) row permutations for ``permuted``

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        t = q.shape[-2]
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
        perm = None if self.perm is None else self.perm[:t, :t]
        return routed_softmax(s, self.mode, perm) @ v  # (B, H, T, d/H)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, mode={self.mode!r}"


def ablated_sticky(model: StickyTransformer, mode: Mode, perm_seed: int) -> StickyTransformer:
    """``model`` (the sticky testbed's transformer) with every attention replaced, in place, by
    :class:`AblatedStickyAttention` of ``mode``; the weights, and so the initialisation, are unchanged. Every layer
    uses the same row permutations, drawn from ``perm_seed`` (used by ``permuted`` only). Returns ``model``."""
    perm = row_permutations(model.max_len, perm_seed) if mode == "permuted" else None
    for block in model.blocks:
        block.attn = AblatedStickyAttention(cast(StickyAttention, block.attn), mode, perm)
    return model


def sticky_query_key_weights(model: nn.Module) -> list[Tensor]:
    """Each sticky attention layer's W_Q and W_K weights and biases, detached copies."""
    return [
        p.detach().clone()
        for m in model.modules()
        if isinstance(m, StickyAttention)
        for p in (m.W_Q.weight, m.W_Q.bias, m.W_K.weight, m.W_K.bias)
    ]


def attention_layers(model: nn.Module) -> list[AblatedSelfAttention]:
    """Every :class:`AblatedSelfAttention` of ``model``, in order."""
    return [m for m in model.modules() if isinstance(m, AblatedSelfAttention)]


def query_key_weights(model: nn.Module) -> list[Tensor]:
    """Each layer's query and key rows of ``qkv.weight``, (2 d_model, d_model), detached copies."""
    return [a.qkv.weight[: 2 * a.qkv.in_features].detach().clone() for a in attention_layers(model)]


def final_residual(model: CausalTransformer, tokens: Tensor) -> Float[Tensor, "b t d"]:
    """The residual stream after the last block, before the final LayerNorm, (B, T, D): the companion paper's
    "final-layer residual"."""
    t = tokens.shape[1]
    x = model.tok(tokens) + model.pos(torch.arange(t, device=tokens.device))  # (B, T, D)
    for block in model.blocks:
        x = block(x)
    return x


def single_head(
    params: dict[str, Tensor], x: Float[Tensor, "*b t d"], mode: Mode = "exact", perm: Tensor | None = None
) -> tuple[Float[Tensor, "*b t c"], Float[Tensor, "*b t e"]]:
    r"""``sticky_sculpting``'s head through :func:`routed_softmax`: logits
    :math:`\mathrm{softmax}_{causal}(QK^\top/\sqrt{d_k})\,V\,W_O` and the head output before W_O, y = alpha V."""
    q, k, v = x @ params["W_Q"], x @ params["W_K"], x @ params["W_V"]  # (*b, T, 10), (*b, T, 10), (*b, T, 15)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (*b, T, T)
    y = routed_softmax(s, mode, perm) @ v  # (*b, T, 15)
    return y @ params["W_O"], y
