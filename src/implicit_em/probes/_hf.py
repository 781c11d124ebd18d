"""Adapter: Hugging Face ``transformers`` models, through their attention-function interface.

Sites are the modules that call that interface: every HF attention module looks its function up in
``ALL_ATTENTION_FUNCTIONS`` inside its own ``forward`` and passes *itself* as the first argument, so the
modules whose ``forward`` names ``ALL_ATTENTION_FUNCTIONS`` (:func:`attention_sites`) are exactly the modules
the function will see (``BertSelfAttention``, not the ``BertAttention`` around it; ``T5Attention``, not
``T5LayerSelfAttention``). Modules that call the function without being a site are noted (the probe names
them when a forward captured nothing).

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

import inspect
import sys
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em.probes.attention import _active_observer, _observed_attention, attend, repeat_kv

NAME = "implicit_em_probe"


#: Keyword arguments of HF's attention interface that change the attention itself, so that the probe's explicit
#: attention (and the laws as stated) would not be the model's: refused, with the reason.
_REFUSED = {
    "softcap": (
        "logit soft-capping (Gemma-2 style, s = c tanh(s / c))",
        "the scores pass through tanh before the softmax and the probe's explicit attention has no soft-cap, so it "
        "would compute and check other scores than the model's",
    ),
    "s_aux": (
        "attention sinks (s_aux)",
        "a learned logit per head joins the softmax's normaliser, a key the probe's explicit attention does not "
        "have, so its weights would not be the model's",
    ),
}


def is_hf_model(model: nn.Module) -> bool:
    """Whether ``model`` is a ``transformers.PreTrainedModel`` (without importing transformers)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def calls_attention_interface(module: nn.Module) -> bool:
    """Whether ``module``'s forward looks up HF's attention function in ``ALL_ATTENTION_FUNCTIONS``.

    Read from the forward's bytecode (the global names it uses; decorators unwrapped), not from the class name:
    such a module passes itself to the attention function, which is what the probe's function sees.
    """
    forward = inspect.unwrap(type(module).forward)
    code = getattr(forward, "__code__", None)
    return code is not None and "ALL_ATTENTION_FUNCTIONS" in code.co_names


def attention_sites(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every module of an HF model that calls the attention interface, in module order.

    Raises ``ValueError`` naming the model when there is none: it computes attention inline (no interface the
    probe can reach), so its scores are out of the probe's reach.
    """
    found = [(name, module) for name, module in model.named_modules() if calls_attention_interface(module)]
    if not found:
        raise ValueError(
            f"{type(model).__name__}: no module calls Hugging Face's attention interface (ALL_ATTENTION_FUNCTIONS); "
            "this model computes attention inline, so the probe cannot reach its scores"
        )
    return found


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
        if observer is not None and site is None:
            observer.note_caller(module)
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
    for name, (what, why) in _REFUSED.items():
        if kwargs.get(name) is not None:
            raise ValueError(f"{site} ({type(module).__name__}): the attention probe refuses {what}: {why}")
    bias = kwargs.pop("position_bias", None)  # T5: a relative position bias added to the scores
    batch = query.shape[0]

    def explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> tuple[Tensor, Tensor]:
        b = _bias_rows(bias, batch, q.shape[0], head=True)
        if b is not None and q is not query and q.grad_fn is None:  # a shadow recomputation (detached leaves)
            b = b.detach()  # nothing may flow back from it into the model's bias
        return _explicit(module, q, k, v, mask, p, scaling, is_causal, site, b)

    def fused(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> Tensor:
        b = _bias_rows(bias, batch, q.shape[0], head=False)
        output: Tensor = sdpa_attention_forward(
            module, q, k, v, mask, dropout=p, scaling=scaling, is_causal=is_causal, position_bias=b, **kwargs
        )[0]
        return output

    # (B, T, H, D), and the weights only when the whole call ran explicitly (HF's sdpa returns none either)
    return _observed_attention(query, key, value, attention_mask, dropout, explicit, fused)


def _bias_rows(bias: Tensor | None, batch: int, rows: int, head: bool) -> Tensor | None:
    """The rows of a position bias for a part of a split call: the first ``rows`` (head) or the last (tail).

    A bias whose dim 0 is 1 (T5's (1, H, T, S)) broadcasts over the batch and is returned whole.
    """
    if bias is None or rows == batch or bias.shape[0] != batch:
        return bias
    return bias[:rows] if head else bias[batch - rows :]


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
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The observed explicit attention; returns (output (B, T, H, D), post-dropout weights (B, H, T, S)).

    ``bias`` (T5's position bias, (1 or B, H, T, S)) joins the mask as one additive mask, -inf where masked,
    so that the scores the probe records are those the softmax sees: s = q k^T scale + bias + mask.
    """
    n_rep = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)  # (B, H, S, D)
    causal = False
    if attention_mask is None:  # HF skipped building a causal mask: sdpa's is_causal is implied
        causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
        causal = causal and query.shape[2] > 1
    else:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    if bias is not None:
        attention_mask, causal = _with_bias(bias, attention_mask, causal, query.shape[2], key.shape[2]), False
    output, weights = attend(query, key, value, attention_mask, dropout, causal, scaling, site=site)
    return output.transpose(1, 2).contiguous(), weights  # (B, T, H, D)


def _with_bias(bias: Tensor, mask: Tensor | None, causal: bool, t: int, s: int) -> Tensor:
    """One additive mask from a position bias and a boolean or additive mask (or a causal one), -inf where masked.

    HF's sdpa path builds the same from the same pieces (``create_position_bias_mask``), with the dtype's
    minimum instead of -inf; both give exactly zero weight to masked keys.
    """
    if mask is None and causal:
        mask = torch.ones(t, s, dtype=torch.bool, device=bias.device).tril()  # top-left aligned, as sdpa's
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, float("-inf"))  # (1, H, T, S) and (B, 1, T, S) broadcast to (B, H, T, S)
    return bias + mask


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
