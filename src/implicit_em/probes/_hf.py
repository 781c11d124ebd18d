"""Adapter: Hugging Face ``transformers`` models, through their attention-function interface.

While a probe is active the model's attention implementation is switched to ``"implicit_em_probe"``,
registered in ``AttentionInterface`` (the function below) **and** in ``AttentionMaskInterface`` (HF's sdpa
mask builder: without a mask builder the model would silently attend to the future). ``set_attn_implementation``
mutates the config object shared by the model's submodules; the previous implementation is restored on exit.

The function receives query (B, H, T, D), key and value (B, Hkv, S, D), the mask, ``scaling`` and ``dropout``,
and returns (output (B, T, H, D), weights). Grouped-query attention repeats keys and values to the query heads
as HF's ``repeat_kv`` does; calls outside a captured step go to HF's own sdpa function. How a captured call runs
(explicit; HF's sdpa function plus a shadow recomputation of the observed sub-batch; or split, with attention
dropout) is decided by :func:`implicit_em.probes.attention._observed_attention`; this adapter only translates
HF's signature: its explicit path is :func:`_explicit`, its fused path HF's sdpa function. When the probe
observes a sub-batch the weights returned are None, as HF's sdpa returns.
"""

import sys
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em.probes.attention import _active_observer, _observed_attention, attend, repeat_kv

NAME = "implicit_em_probe"


def is_hf_model(model: nn.Module) -> bool:
    """Whether ``model`` is a ``transformers.PreTrainedModel`` (without importing transformers)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


@torch.compiler.disable
def probe_attention_forward(
    module: nn.Module,
    query: Float[Tensor, "b h t d"],
    key: Float[Tensor, "b hkv s d"],
    value: Float[Tensor, "b hkv s dv"],
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Float[Tensor, "b t h dv"], Float[Tensor, "b h t s"] | None]:
    """The ``AttentionInterface`` function: explicit attention at probed sites, HF's sdpa elsewhere."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    observer = _active_observer()
    site = observer.site_of(module) if observer is not None else None
    if observer is None or not observer.capturing(site):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    if kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None:
        raise ValueError(f"{site}: the attention probe does not support softcap or position_bias")

    def explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> tuple[Tensor, Tensor]:
        return _explicit(module, q, k, v, mask, p, scaling, is_causal, site)

    def fused(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> Tensor:
        output: Tensor = sdpa_attention_forward(
            module, q, k, v, mask, dropout=p, scaling=scaling, is_causal=is_causal, **kwargs
        )[0]
        return output

    # (B, T, H, D), and the weights only when the whole call ran explicitly (HF's sdpa returns none either)
    return _observed_attention(query, key, value, attention_mask, dropout, explicit, fused)


def _explicit(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float,
    scaling: float | None,
    is_causal: bool | None,
    site: str | None,
) -> tuple[Tensor, Tensor]:
    """The observed explicit attention; returns (output (B, T, H, D), post-dropout weights (B, H, T, S))."""
    n_rep = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)  # (B, H, S, D)
    causal = False
    if attention_mask is None:  # HF skipped building a causal mask: sdpa's is_causal is implied
        causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
        causal = causal and query.shape[2] > 1
    else:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    output, weights = attend(query, key, value, attention_mask, dropout, causal, scaling, site=site)
    return output.transpose(1, 2).contiguous(), weights  # (B, T, H, D)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, probe_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def enable(model: nn.Module) -> str:
    """Switch ``model`` to the probe's attention; returns the implementation to restore."""
    _register()
    previous = str(model.config._attn_implementation)  # type: ignore[union-attr]
    model.set_attn_implementation(NAME)  # type: ignore[operator]
    if model.config._attn_implementation != NAME:  # type: ignore[union-attr]
        model.set_attn_implementation(previous)  # type: ignore[operator]
        raise ValueError(
            f"{type(model).__name__} cannot switch its attention implementation (it does not use HF's "
            "AttentionInterface), so the probe cannot reach its attention scores"
        )
    return previous


def disable(model: nn.Module, previous: str) -> None:
    """Restore the attention implementation ``enable`` replaced."""
    model.set_attn_implementation(previous)  # type: ignore[operator]
