"""Softmax attention written out, so that scores and weights can be observed (paper §4.2).

This is the library's probe-able attention function. It has the signature and the semantics of
:func:`torch.nn.functional.scaled_dot_product_attention` (boolean masks: ``True`` takes part; a query row
whose keys are all masked gets zero weights and a zero output, as sdpa gives), and computes

.. math::  s_{ij} = q_i \\cdot k_j \\cdot \\text{scale}, \\quad \\alpha_i = \\mathrm{softmax}(s_i), \\quad
           o_i = \\sum_j \\alpha_{ij} v_j

explicitly, which is what the attention probe (:class:`implicit_em.probes.AttentionProbe`) hooks into. When no
probe is active the only extra work is one module-level lookup.

Public (``__all__``): :func:`attention`, the drop-in; :func:`attend`, the same returning the weights too; its
pieces (:func:`attention_scores`, :func:`default_scale`, :func:`apply_mask`, :func:`masked_softmax`,
:func:`dropout_keep`) and grouped-query key/value repetition (:func:`repeat_kv`). The underscored names are the
probe's plumbing, shared with the framework adapters (``probes/_torch_mha.py``, ``probes/_hf.py``) and not API:
the active probe (:func:`_active_observer`), how a captured call runs (:func:`_observed_attention`) and the
shadow recomputation of a sub-batch (:func:`_shadow`). It imports nothing else from ``implicit_em.probes``.
"""

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = [
    "apply_mask",
    "attend",
    "attention",
    "attention_scores",
    "default_scale",
    "dropout_keep",
    "masked_softmax",
    "repeat_kv",
]


@runtime_checkable  # so that the test-time type checker can check it
class _AttentionObserver(Protocol):
    """What an active probe implements; :func:`attend` hands it every call (see ``probes/_capture.py``)."""

    def observe_call(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        scores: Tensor,
        weights: Tensor,
        keep: Tensor | None,
        output: Tensor,
        scale: float,
        site: str | None,
        masked: bool = False,
    ) -> None: ...

    def site_of(self, module: torch.nn.Module) -> str | None: ...

    def capturing(self, site: str | None) -> bool: ...

    def sub_batch(self, query: Tensor, key: Tensor, value: Tensor) -> int | None: ...

    def note_caller(self, module: torch.nn.Module) -> None: ...


#: An adapter's explicit attention: (query, key, value, mask, dropout_p) -> (output, post-dropout weights), where
#: output is in the adapter's layout with the batch first; it calls :func:`attend` (the probe observes it).
_ExplicitAttention = Callable[[Tensor, Tensor, Tensor, Tensor | None, float], tuple[Tensor, Tensor]]
#: The function an adapter replaced (the model's fused kernel): same arguments, returns the output only.
_FusedAttention = Callable[[Tensor, Tensor, Tensor, Tensor | None, float], Tensor]

# The active probe, if any. Set and cleared only by AttentionProbe.__enter__/__exit__.
_OBSERVER: _AttentionObserver | None = None


def _active_observer() -> _AttentionObserver | None:
    """The active probe, or None."""
    return _OBSERVER


def _set_observer(observer: _AttentionObserver | None) -> None:
    """Install (or, with None, remove) the probe that :func:`attend` reports to."""
    global _OBSERVER
    _OBSERVER = observer


def attention_scores(
    query: Float[Tensor, "*#batch t e"], key: Float[Tensor, "*#batch s e"], scale: float | None = None
) -> Float[Tensor, "*#batch t s"]:
    """Scaled dot-product scores s, shape (..., T, S), from query (..., T, E) and key (..., S, E)."""
    if query.dim() < 2 or key.dim() < 2:
        raise ValueError(
            f"query, key and value need shape (..., T, E), got {tuple(query.shape)} and {tuple(key.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must share the last dimension, got {tuple(query.shape)} and {tuple(key.shape)}"
        )
    scale = default_scale(query) if scale is None else scale
    return torch.matmul(query * scale, key.transpose(-2, -1))  # (..., T, S); scaling q is a T x E pass, not T x S


def default_scale(query: Float[Tensor, "... e"]) -> float:
    """sdpa's default scale, 1/sqrt(E)."""
    return 1.0 / math.sqrt(query.shape[-1])


def apply_mask(
    scores: Float[Tensor, "*#batch t s"], attn_mask: Tensor | None = None, is_causal: bool = False
) -> Float[Tensor, "*#batch t s"]:
    """Add an sdpa-style mask to scores: boolean ``False`` (or ``is_causal`` future) entries become -inf."""
    if is_causal:
        t, s = scores.shape[-2], scores.shape[-1]
        causal = torch.ones(t, s, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        try:
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            else:
                scores = scores + attn_mask
        except RuntimeError:  # checked only when it fails: no cost on the hot path
            if _broadcasts_to(attn_mask.shape, scores.shape):
                raise
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the scores (..., T, S) of shape "
                f"{tuple(scores.shape)}"
            ) from None
    return scores


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def masked_softmax(scores: Float[Tensor, "*batch t s"], masked: bool) -> Float[Tensor, "*batch t s"]:
    """Softmax over the last dim; with ``masked``, rows of all -inf scores get zero weights (sdpa's rule)."""
    if not masked:
        return torch.softmax(scores, dim=-1)
    dead = scores.amax(dim=-1, keepdim=True) == float("-inf")  # (..., T, 1): no key takes part
    # Zero the dead rows' scores first, so that neither the softmax nor its backward sees a row of -inf.
    return torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)


def dropout_keep(weights: Float[Tensor, "*shape"], dropout_p: float) -> Float[Tensor, "*shape"]:
    """The multiplier F.dropout applies: Bernoulli(1 - p) / (1 - p), drawn as F.dropout draws it."""
    if not 0.0 < dropout_p < 1.0:
        raise ValueError(f"dropout_p must lie in (0, 1) to draw a dropout mask, got {dropout_p}")
    return torch.empty_like(weights).bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p)


def _split_mask(attn_mask: Tensor | None, n: int, batch: int) -> tuple[Tensor | None, Tensor | None]:
    """An sdpa mask for the first ``n`` and the other ``batch - n`` sequences of 4-D (B, H, T, E) attention.

    Only a 4-D mask whose dim 0 is the batch is sliced (views, no copy); a mask that broadcasts over the batch
    (dim 0 of size 1, or fewer than 4 dims) goes to both parts unchanged.
    """
    if attn_mask is None or attn_mask.dim() != 4 or attn_mask.shape[0] != batch:
        return attn_mask, attn_mask
    return attn_mask[:n], attn_mask[n:]


def repeat_kv(x: Float[Tensor, "*batch h s d"], n_rep: int) -> Float[Tensor, "*batch hr s d"]:
    """(..., Hkv, S, D) -> (..., Hkv * n_rep, S, D), each key/value head repeated for its group of query heads.

    Grouped-query attention: HF's ``repeat_kv`` and sdpa's ``enable_gqa`` (``repeat_interleave`` on dim -3)
    give the same tensor. ``n_rep == 1`` returns ``x`` itself.
    """
    if n_rep == 1:
        return x
    *lead, h, s, d = x.shape
    return x[..., None, :, :].expand(*lead, h, n_rep, s, d).reshape(*lead, h * n_rep, s, d)  # (..., Hkv*n_rep, S, D)


def _shadow_inputs(query: Tensor, key: Tensor, value: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """Detached views (no copies) of the first ``n`` sequences, for a shadow computation (see :func:`_shadow`).

    When the model's attention takes part in a backward, the query and value views become leaves that require
    grad, so that the shadow's scores and values receive gradients; nothing flows back into the model from them.
    """
    grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    q, k, v = (x[:n].detach() for x in (query, key, value))
    if grad:
        q.requires_grad_(True)
        v.requires_grad_(True)
    return q, k, v


class _Shadow(torch.autograd.Function):
    """Forward: a copy of ``output``. Backward: the gradient to ``output``, and its first n rows to ``observed``."""

    @staticmethod
    def forward(ctx: Any, output: Tensor, observed: Tensor) -> Tensor:
        ctx.rows = observed.shape[0]
        return output.clone()  # a copy, not the input itself: callers may modify it in place

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, grad[: ctx.rows]


def _shadow(output: Tensor, observed: Tensor) -> Tensor:
    """The model's attention ``output`` (B, ...), with ``observed`` (n, ...) attached to its gradient.

    ``observed`` is an explicit recomputation of the first n rows of ``output`` from :func:`_shadow_inputs`. The
    result equals ``output`` bit for bit and its gradient reaches the model unchanged; the first n rows of that
    gradient (the upstream gradient u of those sequences) also run through the recomputation's backward, where
    the probe's hooks read dl/ds and dl/dv. Nothing flows back from the recomputation into the model.
    """
    if not observed.requires_grad:
        return output
    result: Tensor = _Shadow.apply(output, observed)
    return result


def attend(
    query: Float[Tensor, "*#batch t e"],
    key: Float[Tensor, "*#batch s e"],
    value: Float[Tensor, "*#batch s ev"],
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    site: str | None = None,
) -> tuple[Float[Tensor, "*#batch t ev"], Float[Tensor, "*#batch t s"]]:
    """Explicit attention that reports to the active probe; returns (output, post-dropout weights).

    ``site`` names the layer for the probe (adapters pass it); ``None`` lets the probe name it.
    """
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as in sdpa)")
    scale = default_scale(query) if scale is None else scale
    scores = apply_mask(attention_scores(query, key, scale), attn_mask, is_causal)  # (..., T, S)
    weights = masked_softmax(scores, masked=attn_mask is not None)
    keep = dropout_keep(weights, dropout_p) if dropout_p > 0.0 else None
    dropped = weights if keep is None else weights * keep
    output = torch.matmul(dropped, value)  # (..., T, Ev)
    observer = _OBSERVER
    if observer is not None:
        observer.observe_call(query, key, value, scores, weights, keep, output, scale, site, attn_mask is not None)
    return output, dropped


def _observed_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    explicit: _ExplicitAttention,
    fused: _FusedAttention,
) -> tuple[Tensor, Tensor | None]:
    """A captured call of an adapter: the whole call explicit, fused plus a shadow, or split and concatenated.

    The active probe's :meth:`~_AttentionObserver.sub_batch` decides. No sub-batch: ``explicit`` computes the
    whole call. A sub-batch of n of the B sequences, without dropout: ``fused`` computes the whole call and
    ``explicit`` recomputes the first n beside it (:func:`_shadow`), so outputs and gradients are the fused
    kernel's bit for bit. With dropout the observed sequences' draws must be the model's own: ``explicit``
    computes the first n, ``fused`` the other B - n, concatenated along the batch. In both sub-batch paths the
    mask is split as :func:`_split_mask` does.

    Args:
        query, key, value: (B, ..., E) with the batch first, as the adapter received them.
        attn_mask: the adapter's mask, batch first when it has a batch dim; dropout_p: the call's dropout.
        explicit, fused: the adapter's two ways to compute a call (see ``_ExplicitAttention``).
    Returns:
        output (B, ...) in the adapter's layout, and the post-dropout weights when ``explicit`` computed the
        whole call, else None.
    """
    observer = _active_observer()
    n = observer.sub_batch(query, key, value) if observer is not None else None
    if n is None:
        return explicit(query, key, value, attn_mask, dropout_p)
    head_mask, tail_mask = _split_mask(attn_mask, n, query.shape[0])
    if dropout_p == 0.0:  # the fused kernel computes the call; the observed sequences are recomputed beside it
        output = fused(query, key, value, attn_mask, dropout_p)
        q0, k0, v0 = _shadow_inputs(query, key, value, n)
        return _shadow(output, explicit(q0, k0, v0, head_mask, 0.0)[0]), None
    # split (not two slices): its backward concatenates the two gradients instead of adding zero-padded ones
    (q0, q1), (k0, k1), (v0, v1) = (x.split([n, x.shape[0] - n]) for x in (query, key, value))
    head = explicit(q0, k0, v0, head_mask, dropout_p)[0]
    tail = fused(q1, k1, v1, tail_mask, dropout_p)
    return torch.cat((head, tail)), None


def attention(
    query: Float[Tensor, "*#batch t e"],
    key: Float[Tensor, "*#batch s e"],
    value: Float[Tensor, "*#batch s ev"],
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Float[Tensor, "*#batch t ev"]:
    """Drop-in for :func:`torch.nn.functional.scaled_dot_product_attention`, computed explicitly.

    Args:
        query: (..., T, E); key: (..., S, E); value: (..., S, Ev).
        attn_mask: boolean (True takes part) or additive float mask broadcastable to (..., T, S).
        dropout_p: dropout on the weights (pass 0 in eval mode, as with sdpa). The probe's score law accounts
            for it (the multiplier is recorded).
        is_causal: mask the future (top-left aligned as in sdpa).
        scale: defaults to 1/sqrt(E).
    Returns:
        output, shape (..., T, Ev).
    """
    return attend(query, key, value, attn_mask, dropout_p, is_causal, scale)[0]
