"""Adapter: modules calling ``torch.nn.functional.scaled_dot_product_attention`` (nn.MultiheadAttention too).

``nn.MultiheadAttention`` (with ``need_weights=False``), ``TransformerEncoderLayer`` and hand-written modules
call ``F.scaled_dot_product_attention`` through the ``torch.nn.functional`` module. During a probed module's
forward, and only then, that name points at :func:`_probe_sdpa`, which computes the same attention explicitly
so that the probe can see it. ``nn.MultiheadAttention`` converts its boolean masks (``True`` = masked, the
inverse of sdpa) to additive float masks before it calls sdpa, so the patched function only ever sees sdpa's
conventions. A module that bound the function at import time (``from torch.nn.functional import
scaled_dot_product_attention``) is out of reach; the probe warns when a probed forward captured nothing.

How a captured call runs (explicit; the fused kernel plus a shadow recomputation of the observed sub-batch;
or split, with attention dropout) is decided by :func:`implicit_em.probes.attention._observed_attention`; this
adapter only translates sdpa's signature: its explicit path is
:func:`implicit_em.probes.attention.attend` (keys and values repeated to the query heads under ``enable_gqa``),
its fused path the function the patch replaced.
"""

import warnings
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.probes.attention import _observed_attention, attend, repeat_kv


@runtime_checkable  # so that the test-time type checker can check it
class SiteScope(Protocol):
    """What :func:`install` asks of the probe (``AttentionProbe`` implements it; this module never imports it)."""

    def capturing(self, site: str | None) -> bool: ...

    def calls_at(self, site: str) -> int: ...

    def enter_site(self, site: str) -> None: ...

    def exit_site(self, site: str) -> None: ...


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
    """sdpa's signature, translated for :func:`implicit_em.probes.attention._observed_attention`.

    Explicitly the call is :func:`implicit_em.probes.attention.attend` (the probe observes it), with keys and
    values repeated to the query heads under ``enable_gqa``; fused, it is the function the patch replaced.
    """
    gqa = {"enable_gqa": True} if enable_gqa else {}

    def explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> tuple[Tensor, Tensor]:
        n_rep = q.shape[-3] // k.shape[-3] if enable_gqa else 1  # sdpa's enable_gqa: heads (..., H, S, E)
        return attend(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask, p, is_causal, scale)

    def fused(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> Tensor:
        output: Tensor = _fused()(q, k, v, mask, p, is_causal, scale=scale, **gqa)
        return output

    return _observed_attention(query, key, value, attn_mask, dropout_p, explicit, fused)[0]


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


def install(probe: SiteScope, module: nn.Module, site: str) -> list[Any]:
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
            _warn_no_capture(site)

    return [
        module.register_forward_pre_hook(pre_hook, with_kwargs=True),
        module.register_forward_hook(post_hook, with_kwargs=True, always_call=True),
    ]


def _warn_no_capture(site: str) -> None:
    """Called when a probed module's forward ran without reaching the attention function."""
    warnings.warn(
        f"{site}: the module's forward did not reach a probe-able attention call (a fused fast path, an "
        "import-time alias of scaled_dot_product_attention, or need_weights=True); nothing was captured",
        RuntimeWarning,
        stacklevel=3,
    )
