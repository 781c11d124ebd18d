"""Adapter: modules calling ``torch.nn.functional.scaled_dot_product_attention`` (nn.MultiheadAttention too).

``nn.MultiheadAttention`` (with ``need_weights=False``), ``TransformerEncoderLayer`` and hand-written modules
call ``F.scaled_dot_product_attention`` through the ``torch.nn.functional`` module. During a probed module's
forward, and only then, that name points at :func:`_probe_sdpa`, which computes the same attention explicitly
so that the probe can see it. ``nn.MultiheadAttention`` converts its boolean masks (``True`` = masked, the
inverse of sdpa) to additive float masks before it calls sdpa, so the patched function only ever sees sdpa's
conventions. A module that bound the function at import time (``from torch.nn.functional import
scaled_dot_product_attention``) is out of reach; the probe warns when a probed forward captured nothing.

When the probe observes a sub-batch (summary mode, ``summary_batch``) of a 4-D call, the whole call runs the
function the patch replaced (the fused kernel) and the first n sequences are recomputed explicitly beside it
(:func:`implicit_em.probes.attention.shadow`): outputs and gradients are the unprobed model's, bit for bit. With
attention dropout the draws of the observed sequences must be the model's own, so there the first n sequences
take the explicit path and the other B - n the fused kernel (a mask sliced along the batch when its dim 0 is the
batch), concatenated along the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.probes.attention import active_observer, attend, repeat_kv, shadow, shadow_inputs, split_mask

if TYPE_CHECKING:
    from implicit_em.probes.capture import AttentionProbe

_saved: list[Any] = []  # the values F.scaled_dot_product_attention had before each active patch


@torch.compiler.disable
def _probe_sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """sdpa's signature, computed by :func:`implicit_em.probes.attention.attend` (the probe observes it).

    With a sub-batch to observe, the first n sequences are computed explicitly and the rest by the replaced
    (fused) function; the outputs are concatenated along the batch.
    """
    observer = active_observer()
    n = observer.sub_batch(query, key, value) if observer is not None else None
    if n is None:
        return attend(query, *_repeat_kv(query, key, value, enable_gqa), attn_mask, dropout_p, is_causal, scale)[0]
    head_mask, tail_mask = split_mask(attn_mask, n, query.shape[0])
    gqa = {"enable_gqa": True} if enable_gqa else {}
    if dropout_p == 0.0:  # the fused kernel computes the call; the observed sequences are recomputed beside it
        output = _fused()(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **gqa)
        q0, k0, v0 = shadow_inputs(query, key, value, n)
        return shadow(output, attend(q0, *_repeat_kv(q0, k0, v0, enable_gqa), head_mask, 0.0, is_causal, scale)[0])
    # split (not two slices): its backward concatenates the two gradients instead of adding zero-padded ones
    (q0, q1), (k0, k1), (v0, v1) = (x.split([n, x.shape[0] - n]) for x in (query, key, value))
    head = attend(q0, *_repeat_kv(q0, k0, v0, enable_gqa), head_mask, dropout_p, is_causal, scale)[0]
    tail = _fused()(q1, k1, v1, tail_mask, dropout_p, is_causal, scale=scale, **gqa)
    return torch.cat((head, tail))


def _repeat_kv(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> tuple[Tensor, Tensor]:
    """Keys and values repeated to the query heads, as sdpa's ``enable_gqa`` does."""
    n_rep = query.shape[-3] // key.shape[-3] if enable_gqa else 1
    return repeat_kv(key, n_rep), repeat_kv(value, n_rep)


def _fused() -> Any:
    """The sdpa the patch replaced (the innermost saved one that is not the probe's)."""
    for fn in reversed(_saved):
        if fn is not _probe_sdpa:
            return fn
    return torch._C._nn.scaled_dot_product_attention


def _patch() -> None:
    _saved.append(F.scaled_dot_product_attention)
    F.scaled_dot_product_attention = _probe_sdpa


def _unpatch() -> None:
    if _saved:
        F.scaled_dot_product_attention = _saved.pop()


def _need_weights(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if not isinstance(module, nn.MultiheadAttention):
        return False
    if "need_weights" in kwargs:
        return bool(kwargs["need_weights"])
    return bool(args[4]) if len(args) > 4 else True  # forward(query, key, value, key_padding_mask, need_weights)


def install(probe: AttentionProbe, module: nn.Module, site: str) -> list[Any]:
    """Hooks that scope the patch and the site name to ``module``'s forward; returns their handles."""
    calls_before: list[int] = []

    def pre_hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not probe.capturing(site):
            return
        if _need_weights(mod, args, kwargs):
            raise ValueError(
                f"{site}: nn.MultiheadAttention called with need_weights=True computes attention without "
                "scaled_dot_product_attention and returns head-averaged weights off the gradient path; "
                "call it with need_weights=False for the probe"
            )
        calls_before.append(probe.calls_at(site))
        probe.enter_site(site)
        _patch()

    def post_hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if not calls_before:
            return
        _unpatch()
        probe.exit_site(site)
        if probe.calls_at(site) == calls_before.pop():
            from implicit_em.probes.capture import warn_no_capture

            warn_no_capture(site)

    return [
        module.register_forward_pre_hook(pre_hook, with_kwargs=True),
        module.register_forward_hook(post_hook, with_kwargs=True, always_call=True),
    ]
