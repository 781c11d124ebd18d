"""The attention probe on torch.nn.MultiheadAttention, TransformerEncoderLayer and F.sdpa modules (case b)."""

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.probes import AttentionProbe

TOL = 1e-10


class Wrapped(nn.Module):
    """nn.MultiheadAttention with padding and attention masks, called as the probe needs (need_weights=False)."""

    def __init__(self, batch_first: bool, dropout: float = 0.0) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.mha = nn.MultiheadAttention(8, 2, dropout=dropout, batch_first=batch_first, dtype=torch.float64)

    def forward(self, x: Tensor, padding: Tensor | None, mask: Tensor | None) -> Tensor:
        x = x if self.batch_first else x.transpose(0, 1)
        out = self.mha(x, x, x, key_padding_mask=padding, need_weights=False, attn_mask=mask)[0]
        return out if self.batch_first else out.transpose(0, 1)


class SdpaBlock(nn.Module):
    """A hand-written attention block that calls F.scaled_dot_product_attention, as nanoGPT does."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24, dtype=torch.float64)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, 8)


class SdpaAttention(SdpaBlock):
    pass


def _masks() -> dict[str, tuple[Tensor | None, Tensor | None]]:
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = True  # True = ignore (nn.MultiheadAttention's convention, the inverse of sdpa's)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    return {
        "none": (None, None),
        "padding": (padding, None),
        "causal": (None, causal),
        "both": (padding, causal),
        "float": (None, torch.randn(5, 5, dtype=torch.float64)),
    }


def _run(model: nn.Module, *args: object) -> tuple[Tensor, list[Tensor]]:
    model.zero_grad()
    out = model(*args)
    (out.sin() * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["none", "padding", "causal", "both", "float"])
def test_multihead_attention_laws_and_unchanged_results(batch_first: bool, mask: str) -> None:
    model, x = Wrapped(batch_first), torch.randn(3, 5, 8, dtype=torch.float64)
    padding, attn_mask = _masks()[mask]
    out, grads = _run(model, x, padding, attn_mask)
    with AttentionProbe(model) as probe:
        probed, probed_grads = _run(model, x, padding, attn_mask)
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL and laws["hopfield"] <= TOL
    # the probe swaps the fused kernel for the explicit one: equal up to rounding, not bit for bit
    torch.testing.assert_close(probed, out, atol=1e-12, rtol=0)
    for g, h in zip(grads, probed_grads, strict=True):
        torch.testing.assert_close(h, g, atol=1e-12, rtol=0)
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_padding_keys_get_zero_weight() -> None:
    model, x = Wrapped(True), torch.randn(3, 5, 8, dtype=torch.float64)
    padding, _ = _masks()["padding"]
    with AttentionProbe(model) as probe:
        _run(model, x, padding, None)
    pattern = probe.cache["blocks.0.attn.hook_pattern"]  # (B, H, T, S)
    assert torch.equal(pattern[1, :, :, 3:], torch.zeros_like(pattern[1, :, :, 3:]))
    assert torch.isneginf(probe.cache["blocks.0.attn.hook_attn_scores"][1, :, :, 3:]).all()


def test_multihead_attention_dropout_in_train_mode_uses_the_dropout_aware_law() -> None:
    model, x = Wrapped(True, dropout=0.3).train(), torch.randn(3, 5, 8, dtype=torch.float64)
    with AttentionProbe(model) as probe:
        _run(model, x, None, None)
    assert "blocks.0.attn.hook_dropout_keep" in probe.cache
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer(norm_first: bool) -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)
    layer = layer.double()
    x, padding = torch.randn(3, 5, 8, dtype=torch.float64), _masks()["padding"][0]
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)  # True = masked, as nn.Transformer expects
    out, _ = _run(layer, x, causal, padding)
    with AttentionProbe(layer) as probe:
        probed, _ = _run(layer, x, causal, padding)
    assert probe.sites == {"blocks.0.attn": "self_attn"}
    assert probe.check_laws()["routing_law"] <= TOL
    torch.testing.assert_close(probed, out, atol=1e-12, rtol=0)


def test_hand_written_sdpa_module_by_name_and_by_class() -> None:
    model, x = nn.Sequential(SdpaBlock(), SdpaAttention()), torch.randn(2, 5, 8, dtype=torch.float64)
    with AttentionProbe(model, sites=["0"]) as by_name:
        _run(model, x)
    with AttentionProbe(model) as by_class:  # class name ending in "Attention" is found
        _run(model, x)
    assert set(by_name.check_laws()["layers"]) == {"blocks.0.attn"}
    assert by_class.sites == {"blocks.0.attn": "1"}
    assert by_class.check_laws()["routing_law"] <= TOL


def test_need_weights_true_is_refused_clearly() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="need_weights=False"), AttentionProbe(mha):
        mha(x, x, x)
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_fused_fast_path_is_reported() -> None:
    """In inference without gradients nn.MultiheadAttention may take a fused path the probe cannot see."""
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with AttentionProbe(mha), torch.inference_mode(), pytest.warns(RuntimeWarning, match="nothing was captured"):
        mha(x, x, x, need_weights=False)
