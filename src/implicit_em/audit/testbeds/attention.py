r"""Attention's gradient laws on a trained transformer: a small causal transformer trained on the bijection wind
tunnel, its float64 capture (α, q, k, v, the upstream g, the attention input x and autograd's gradients, per layer),
and every law of paper §4.2 evaluated from the capture independently of autograd (numpy float64, explicit index
sums), with the controls that remove one ingredient of each law.

Shapes (as in ``probes/capture.py``): α (B, H, T, S), q (B, H, T, E), k and v (B, H, S, E), g (B, H, T, E), x (B, T, D);
a residual is max |autograd − law| / max |autograd| per head, (H,).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.probes import AttentionProbe
from implicit_em.windtunnel.models import Block, CausalSelfAttention, CausalTransformer
from implicit_em.windtunnel.tasks import BijectionTask
from implicit_em.windtunnel.train import windtunnel_loss

__all__ = [
    "Training",
    "advantage_range",
    "advantages_np",
    "capture",
    "centring_violation",
    "gate_tightness",
    "hopfield_law_np",
    "key_gate_violation",
    "layer_residuals",
    "per_head_max",
    "relative",
    "routing_law_np",
    "row_gate_violation",
    "train",
    "uniform_weights",
    "unit_weights",
    "value_law_np",
    "w_k_law_np",
    "w_q_law_np",
    "w_v_law_np",
]

Array = np.ndarray


@dataclass(frozen=True)
class Training:
    """The transformer and its float32 Adam training on the bijection task."""

    n_symbols: int = 8  # V of the bijection task (sequence length 2(V - 1))
    n_layers: int = 2
    n_heads: int = 2
    d_model: int = 32
    steps: int = 400  # Adam steps before the float64 capture
    batch_size: int = 64
    lr: float = 3e-3


# --------------------------------------------------------------------------------------------------------------
# The laws, evaluated independently in numpy float64 (explicit index sums; shapes as in probes/capture.py:
# alpha (B, H, T, S), q (B, H, T, E), k and v (B, H, S, E), g (B, H, T, E), x (B, T, D))
# --------------------------------------------------------------------------------------------------------------


def _sum(spec: str, *operands: Array) -> Array:
    """``np.einsum`` without BLAS or a contraction path: the sum over the indices, written out."""
    return np.asarray(np.einsum(spec, *operands, optimize=False))


def value_law_np(alpha: Array, g: Array) -> Array:
    r""":math:`\partial\ell/\partial v_j = \sum_i \alpha_{ij} g_i`, (B, H, S, E)."""
    return _sum("bhij,bhie->bhje", alpha, g)


def advantages_np(alpha: Array, v: Array, g: Array) -> tuple[Array, Array]:
    r""":math:`a_{ij} = g_i \cdot v_j` (B, H, T, S) and the baseline :math:`\bar a_i = \sum_k \alpha_{ik} a_{ik}`
    (B, H, T, 1)."""
    a = _sum("bhie,bhje->bhij", g, v)
    return a, _sum("bhij,bhij->bhi", alpha, a)[..., None]


def routing_law_np(alpha: Array, v: Array, g: Array, baseline: bool = True) -> Array:
    r""":math:`\partial\ell/\partial s_{ij} = \alpha_{ij}(a_{ij} - \bar a_i)` (``baseline=False``: the control
    :math:`\alpha_{ij} a_{ij}`), (B, H, T, S)."""
    a, a_bar = advantages_np(alpha, v, g)
    return alpha * (a - a_bar) if baseline else alpha * a


def w_v_law_np(alpha: Array, g: Array, x: Array) -> Array:
    r""":math:`\partial\ell/\partial W_V = \sum_{ij} \alpha_{ij} g_i x_j^\top` per head, (H, E, D)."""
    return _sum("bhij,bhie,bjd->hed", alpha, g, x)


def w_q_law_np(grad_s: Array, k: Array, x: Array, scale: float) -> Array:
    r""":math:`\partial\ell/\partial W_Q = c \sum_{ij} G_{ij} k_j x_i^\top` per head, (H, E, D)."""
    return scale * _sum("bhij,bhje,bid->hed", grad_s, k, x)


def w_k_law_np(grad_s: Array, q: Array, x: Array, scale: float) -> Array:
    r""":math:`\partial\ell/\partial W_K = c \sum_{ij} G_{ij} q_i x_j^\top` per head, (H, E, D)."""
    return scale * _sum("bhij,bhie,bjd->hed", grad_s, q, x)


def hopfield_law_np(alpha: Array, k: Array) -> Array:
    r"""The read-out with values = keys, :math:`\sum_j \alpha_{ij} k_j`, (B, H, T, E)."""
    return _sum("bhij,bhje->bhie", alpha, k)


def unit_weights(visible: Array) -> Array:
    """The control weights: 1 on every visible key (the responsibilities removed), (..., T, S) from a boolean
    mask."""
    return visible.astype(np.float64)


def uniform_weights(visible: Array) -> Array:
    """Uniform weights over the visible keys of each query row, (..., T, S) from a boolean mask (the description
    of how far the responsibilities are from uniform)."""
    w = unit_weights(visible)
    return w / np.maximum(w.sum(-1, keepdims=True), 1.0)


# --------------------------------------------------------------------------------------------------------------
# Residuals per head, and the three properties of a score gradient G that "responsibility-gated advantage" names
# --------------------------------------------------------------------------------------------------------------


def per_head_max(x: Array, head_axis: int = 1) -> Array:
    """max |x| over every axis but ``head_axis``, shape (H,)."""
    return np.abs(np.moveaxis(x, head_axis, 0)).reshape(x.shape[head_axis], -1).max(axis=1)


def relative(diff: Array, ref: Array, head_axis: int = 1) -> Array:
    """max |diff| / max |ref| per head (0 where both vanish)."""
    num, den = per_head_max(diff, head_axis), per_head_max(ref, head_axis)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), num)


def advantage_range(a: Array, visible: Array) -> Array:
    r""":math:`R_i = \max_j a_{ij} - \min_j a_{ij}` over the visible keys, (B, H, T, 1)."""
    hi = np.where(visible, a, -np.inf).max(-1, keepdims=True)
    lo = np.where(visible, a, np.inf).min(-1, keepdims=True)
    return np.asarray(hi - lo)


def centring_violation(grad_s: Array) -> Array:
    r"""max_i :math:`|\sum_j G_{ij}|` / max :math:`|G|` per head (0 for a centred advantage)."""
    return relative(grad_s.sum(-1), grad_s)


def key_gate_violation(grad_s: Array, alpha: Array, a: Array, visible: Array) -> Array:
    r"""max over visible pairs of :math:`(|G_{ij}| - \alpha_{ij} R_i)_+` / max :math:`|G|` per head (0 when every
    key's score gradient is within its responsibility times the advantage range)."""
    excess = np.where(visible, np.abs(grad_s) - alpha * advantage_range(a, visible), 0.0)
    return relative(np.maximum(excess, 0.0), grad_s)


def gate_tightness(grad_s: Array, alpha: Array, a: Array, visible: Array) -> tuple[float, float]:
    r"""How close a score gradient comes to the two gates: max :math:`|G_{ij}|/(\alpha_{ij} R_i)` over visible pairs
    and max :math:`\sum_j|G_{ij}| / (2(1-\max_j\alpha_{ij})R_i)` over rows, where the bound is positive (1: the bound
    is attained; above 1: violated)."""
    r_range = advantage_range(a, visible)
    key_bound = np.where(visible, alpha * r_range, 0.0)
    row_bound = 2.0 * (1.0 - alpha.max(-1, keepdims=True)) * r_range
    l1 = np.abs(np.where(visible, grad_s, 0.0)).sum(-1, keepdims=True)
    key = np.abs(grad_s)[key_bound > 0] / key_bound[key_bound > 0]
    row = l1[row_bound > 0] / row_bound[row_bound > 0]
    return float(key.max(initial=0.0)), float(row.max(initial=0.0))


def row_gate_violation(grad_s: Array, alpha: Array, a: Array, visible: Array) -> Array:
    r"""max over rows of :math:`(\sum_j |G_{ij}| - 2(1 - \max_j\alpha_{ij}) R_i)_+` / max row :math:`\ell_1` per
    head (0 when every row's score gradient vanishes as its weights concentrate)."""
    l1 = np.abs(np.where(visible, grad_s, 0.0)).sum(-1, keepdims=True)
    bound = 2.0 * (1.0 - alpha.max(-1, keepdims=True)) * advantage_range(a, visible)
    return relative(np.maximum(l1 - bound, 0.0), l1)


def train(settings: Training, init_seed: int, batch_seed: int) -> tuple[CausalTransformer, BijectionTask, list[float]]:
    """A small causal transformer trained with Adam on the bijection task in float32: the model (initialised after
    ``torch.manual_seed(init_seed)``), the task, and the loss of every step (batches from ``batch_seed``)."""
    cfg = settings
    task = BijectionTask(cfg.n_symbols)
    torch.manual_seed(init_seed)
    model = CausalTransformer(task.vocab_size, task.n_classes, task.seq_len(), cfg.n_layers, cfg.n_heads, cfg.d_model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(batch_seed)
    losses: list[float] = []
    for _ in range(cfg.steps):
        batch = task.sample(cfg.batch_size, gen)
        loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model, task, losses


def _attention_of(block: nn.Module) -> CausalSelfAttention:
    attn = block.attn if isinstance(block, Block) else None
    if not isinstance(attn, CausalSelfAttention):
        raise TypeError(f"expected a windtunnel Block with CausalSelfAttention, got {type(block).__name__}")
    return attn


def _np(t: Tensor) -> Array:
    return np.asarray(t.detach().to(torch.float64).cpu().numpy())


def _hopfield_autograd(q: Tensor, k: Tensor, visible: Tensor, scale: float) -> Tensor:
    r""":math:`c^{-1}\nabla_q \log\sum_j \exp(c\,q\cdot k_j)` over the visible keys, by autograd on a fresh leaf."""
    leaf = q.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        s = (torch.matmul(leaf, k.detach().transpose(-2, -1)) * scale).masked_fill(~visible, float("-inf"))
        (grad,) = torch.autograd.grad(torch.logsumexp(s, dim=-1).sum(), leaf)
    return grad / scale


@dataclass(frozen=True)
class _Layer:
    """One layer's capture as float64 arrays (shapes in the module docstring), with the causal mask ``visible``
    (T, S), ∂ℓ/∂W_{Q,K,V} per head (H, E, D), autograd's Hopfield gradient (B, H, T, E) and the score scale c."""

    alpha: Array
    q: Array
    k: Array
    v: Array
    g: Array
    grad_s: Array
    grad_v: Array
    x: Array
    grad_w: dict[str, Array]
    visible: Array
    hop_grad: Array
    scale: float


def _layer(site: dict[str, Tensor], grad_qkv: Tensor, x: Tensor, scale: float) -> _Layer:
    alpha, q, k, v, g = (_np(site[n]) for n in ("hook_pattern", "hook_q", "hook_k", "hook_v", "hook_z_grad"))
    h, e, t = alpha.shape[1], v.shape[-1], alpha.shape[-2]
    visible = np.tril(np.ones((t, alpha.shape[-1]), dtype=bool))  # causal: query i sees keys j <= i
    grad_w = {n: _np(w).reshape(h, e, -1) for n, w in zip("qkv", grad_qkv.chunk(3, dim=0), strict=True)}
    hop_grad = _np(_hopfield_autograd(site["hook_q"], site["hook_k"], torch.from_numpy(visible), scale))
    grad_s, grad_v = _np(site["hook_attn_scores_grad"]), _np(site["hook_v_grad"])
    return _Layer(alpha, q, k, v, g, grad_s, grad_v, _np(x), grad_w, visible, hop_grad, scale)


def _residuals(c: _Layer) -> dict[str, Array]:
    """Every law and control of one layer against autograd, per head (H,)."""
    alpha, q, k, v, g, xs, scale, visible = c.alpha, c.q, c.k, c.v, c.g, c.x, c.scale, c.visible
    grad_s, grad_v, grad_w, hop_grad = c.grad_s, c.grad_v, c.grad_w, c.hop_grad
    uniform = np.broadcast_to(uniform_weights(visible), alpha.shape)
    unit = np.broadcast_to(unit_weights(visible), alpha.shape)
    a, a_bar = advantages_np(alpha, v, g)
    law_s, no_base = routing_law_np(alpha, v, g), routing_law_np(alpha, v, g, baseline=False)
    ungated = np.where(visible, a - a_bar, 0.0)
    return {
        "value_law": relative(grad_v - value_law_np(alpha, g), grad_v),
        "value_unweighted": relative(grad_v - value_law_np(unit, g), grad_v),
        "value_uniform": relative(grad_v - value_law_np(uniform, g), grad_v),
        "w_v_law": relative(grad_w["v"] - w_v_law_np(alpha, g, xs), grad_w["v"], 0),
        "w_v_unweighted": relative(grad_w["v"] - w_v_law_np(unit, g, xs), grad_w["v"], 0),
        "w_v_uniform": relative(grad_w["v"] - w_v_law_np(uniform, g, xs), grad_w["v"], 0),
        "routing_law": relative(grad_s - law_s, grad_s),
        "routing_no_baseline": relative(grad_s - no_base, grad_s),
        "centred": centring_violation(grad_s),
        "centred_no_baseline": centring_violation(no_base),
        "key_gated": key_gate_violation(grad_s, alpha, a, visible),
        "key_gated_ungated": key_gate_violation(ungated, alpha, a, visible),
        "row_gated": row_gate_violation(grad_s, alpha, a, visible),
        "row_gated_ungated": row_gate_violation(ungated, alpha, a, visible),
        "w_q_law": relative(grad_w["q"] - w_q_law_np(law_s, k, xs, scale), grad_w["q"], 0),
        "w_q_no_baseline": relative(grad_w["q"] - w_q_law_np(no_base, k, xs, scale), grad_w["q"], 0),
        "w_k_law": relative(grad_w["k"] - w_k_law_np(law_s, q, xs, scale), grad_w["k"], 0),
        "w_k_no_baseline": relative(grad_w["k"] - w_k_law_np(no_base, q, xs, scale), grad_w["k"], 0),
        "hopfield": relative(hop_grad - hopfield_law_np(alpha, k), hop_grad),
        "hopfield_unweighted": relative(hop_grad - hopfield_law_np(unit, k), hop_grad),
        "hopfield_uniform": relative(hop_grad - hopfield_law_np(uniform, k), hop_grad),
    }


def _description(c: _Layer) -> dict[str, Any]:
    """How close the score gradient comes to its gates; per query row (at least two visible keys, a nonzero
    advantage range) max α, the share of the advantage range reaching the scores, the ungated control's share and
    ‖g_i‖; and the points the figure's scatter draws."""
    alpha, visible, grad_s, g = c.alpha, c.visible, c.grad_s, c.g
    a, a_bar = advantages_np(alpha, c.v, g)
    law_s, no_base = routing_law_np(alpha, c.v, g), routing_law_np(alpha, c.v, g, baseline=False)
    ungated = np.where(visible, a - a_bar, 0.0)
    r_range = advantage_range(a, visible)[..., 0]
    rows = (visible.sum(-1) >= 2)[None, None] & (r_range > 0)
    gate = np.abs(grad_s).sum(-1) / np.where(rows, r_range, 1.0)
    law_w = [w_q_law_np(law_s, c.k, c.x, c.scale), w_k_law_np(law_s, c.q, c.x, c.scale), w_v_law_np(alpha, g, c.x)]
    unit = np.broadcast_to(unit_weights(visible), alpha.shape)
    return {
        "tightness": gate_tightness(grad_s, alpha, a, visible),
        "rows": {
            "p": alpha.max(-1)[rows],
            "gate": gate[rows],
            "ungated": (np.abs(ungated).sum(-1) / np.where(rows, r_range, 1.0))[rows],
            "g_norm": np.linalg.norm(g, axis=-1)[rows],
        },
        "points": {
            "grad_v": c.grad_v,
            "law_v": value_law_np(alpha, g),
            "unweighted_v": value_law_np(unit, g),
            "grad_s": grad_s,
            "law_s": law_s,
            "no_base": no_base,
            "grad_w": np.concatenate([c.grad_w[n].ravel() for n in "qkv"]),
            "law_w": np.concatenate([w.ravel() for w in law_w]),
            "visible": np.broadcast_to(visible, alpha.shape),
        },
    }


def layer_residuals(site: dict[str, Tensor], grad_qkv: Tensor, x: Tensor, scale: float) -> dict[str, Any]:
    """Every law and control of one layer against autograd, per head (``residuals``); and the gating description and
    figure points (``tightness``, ``rows``, ``points``). ``site``: the probe's tensors of the layer, ``grad_qkv``
    autograd's ∂ℓ/∂qkv.weight (3HE, D), ``x`` the attention input (B, T, D), ``scale`` = c."""
    layer = _layer(site, grad_qkv, x, scale)
    return {"residuals": _residuals(layer), **_description(layer)}


def capture(model: CausalTransformer, task: BijectionTask, probe_batch: int, probe_seed: int) -> dict[str, Any]:
    """Float64 forward and backward on a fresh batch of ``probe_batch`` sequences (drawn from ``probe_seed``) under
    the probe; per layer :func:`layer_residuals`. The model is cast to float64 in place."""
    model = model.double()
    model.zero_grad(set_to_none=True)
    batch = task.sample(probe_batch, torch.Generator().manual_seed(probe_seed))
    attns = [_attention_of(block) for block in model.blocks]
    inputs: dict[int, Tensor] = {}  # layer -> x, the attention input (B, T, D)

    def keep_input(layer: int) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], None]:
        return lambda module, args, output: inputs.__setitem__(layer, args[0].detach())

    hooks = [attn.register_forward_hook(keep_input(i)) for i, attn in enumerate(attns)]
    try:
        with AttentionProbe(model) as probe:
            loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch)
            loss.backward()
    finally:
        for handle in hooks:
            handle.remove()
    cache = probe.cache
    layers = []
    for layer, attn in enumerate(attns):
        prefix = f"blocks.{layer}.attn."
        site = {name[len(prefix) :]: t for name, t in cache.items() if name.startswith(prefix)}
        assert attn.qkv.weight.grad is not None
        scale = 1.0 / math.sqrt(attn.qkv.weight.shape[1] // attn.n_heads)  # the default 1/sqrt(d_k)
        layers.append(layer_residuals(site, attn.qkv.weight.grad, inputs[layer], scale))
    return {"layers": layers, "loss": float(loss.detach())}
