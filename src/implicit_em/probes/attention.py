"""Softmax attention written out, so that scores and weights can be observed (paper §4.2).

This is the library's probe-able attention function. It has the signature and the semantics of
:func:`torch.nn.functional.scaled_dot_product_attention` (boolean masks: ``True`` takes part), and computes

.. math::  s_{ij} = q_i \\cdot k_j \\cdot \\text{scale}, \\quad \\alpha_i = \\mathrm{softmax}(s_i), \\quad
           o_i = \\sum_j \\alpha_{ij} v_j

explicitly, which is what the attention probe hooks into.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def attention_scores(query: Tensor, key: Tensor, scale: float | None = None) -> Tensor:
    """Scaled dot-product scores s, shape (..., T, S), from query (..., T, E) and key (..., S, E)."""
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must share the last dimension, got {tuple(query.shape)} and {tuple(key.shape)}"
        )
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return torch.matmul(query, key.transpose(-2, -1)) * scale  # (..., T, S)


def apply_mask(
    scores: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False
) -> Tensor:
    """Add an sdpa-style mask to scores: boolean ``False`` (or ``is_causal`` future) entries become -inf."""
    if is_causal:
        t, s = scores.shape[-2], scores.shape[-1]
        causal = torch.ones(t, s, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return scores


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Drop-in for :func:`torch.nn.functional.scaled_dot_product_attention`, computed explicitly.

    Args:
        query: (..., T, E); key: (..., S, E); value: (..., S, Ev).
        attn_mask: boolean (True takes part) or additive float mask broadcastable to (..., T, S).
        dropout_p: dropout on the weights (training only; it breaks the exact score law).
        is_causal: mask the future (top-left aligned as in sdpa).
        scale: defaults to 1/sqrt(E).
    Returns:
        output, shape (..., T, Ev).
    """
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as in sdpa)")
    scores = apply_mask(attention_scores(query, key, scale), attn_mask, is_causal)  # (..., T, S)
    weights = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    return torch.matmul(weights, value)  # (..., T, Ev)
