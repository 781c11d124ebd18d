"""The attention probe on torch.nn.MultiheadAttention, TransformerEncoderLayer and F.sdpa modules (case b)."""

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.probes import AttentionProbe, _torch_mha

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


# ---- summary mode on a sub-batch: the fused kernel computes the call, the first n sequences are recomputed ----


class SdpaGQA(nn.Module):
    """A hand-written grouped-query block: 4 query heads, 2 key/value heads, sdpa's enable_gqa."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8, dtype=torch.float64)
        self.kv = nn.Linear(8, 8, dtype=torch.float64)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, 4, 2).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, 2, 2).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, t, 8)


def _counting_sdpa(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace F.scaled_dot_product_attention by a wrapper that records the batch size of each call."""
    fused, batches = F.scaled_dot_product_attention, []

    def counted(query: Tensor, *args: object, **kwargs: object) -> Tensor:
        batches.append(query.shape[0])
        return fused(query, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    return batches


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("mask", ["none", "padding", "causal", "both", "float"])
def test_summary_sub_batch_keeps_results_and_laws(monkeypatch: pytest.MonkeyPatch, n: int, mask: str) -> None:
    """The fused kernel computes the whole call, the first n sequences are recomputed explicitly beside it:
    outputs and gradients are the unprobed model's bit for bit, the laws hold on the n observed sequences."""
    batches = _counting_sdpa(monkeypatch)
    model, x = Wrapped(True), torch.randn(3, 5, 8, dtype=torch.float64)
    padding, attn_mask = _masks()[mask]
    out, grads = _run(model, x, padding, attn_mask)
    batches.clear()
    with AttentionProbe(model, mode="summary", summary_batch=n) as probe:
        probed, probed_grads = _run(model, x, padding, attn_mask)
    assert batches == [3]  # the whole call went through the saved (fused) function
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL
    assert torch.equal(probed, out)
    assert all(torch.equal(h, g) for g, h in zip(grads, probed_grads, strict=True))
    assert not _torch_mha._saved and F.scaled_dot_product_attention.__name__ == "counted"  # patch removed


@pytest.mark.parametrize("mask", ["padding", "both"])
def test_summary_sub_batch_statistics_are_those_of_the_first_sequences(mask: str) -> None:
    """With a sum loss each sequence's gradients do not depend on the others: the statistics of the first n
    sequences of a batch equal full-mode statistics of those n sequences alone."""
    model, x = Wrapped(True), torch.randn(3, 5, 8, dtype=torch.float64)
    padding, attn_mask = _masks()[mask]
    with AttentionProbe(model, mode="summary", summary_batch=2) as sub:
        _run(model, x, padding, attn_mask)
    with AttentionProbe(model, mode="full") as full:
        _run(model, x[:2], None if padding is None else padding[:2], attn_mask)
    expected, got = full.summary()["blocks.0.attn"], sub.summary()["blocks.0.attn"]
    assert set(got) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=1e-12, rtol=0, msg=name)


def test_summary_sub_batch_grouped_query_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = _counting_sdpa(monkeypatch)
    model, x = SdpaGQA(), torch.randn(4, 5, 8, dtype=torch.float64)
    out, grads = _run(model, x)
    batches.clear()
    with AttentionProbe(model, sites=[""], mode="summary", summary_batch=1) as probe:
        probed, probed_grads = _run(model, x)
    assert batches == [4]
    assert probe.check_laws()["routing_law"] <= TOL and probe.check_laws()["value_law"] <= TOL
    assert probe.summary()["blocks.0.attn"]["entropy"].shape == (4,)
    assert torch.equal(probed, out)
    assert all(torch.equal(h, g) for g, h in zip(grads, probed_grads, strict=True))


@pytest.mark.parametrize("mask", ["none", "padding", "both"])
def test_summary_sub_batch_with_dropout_splits_the_call(monkeypatch: pytest.MonkeyPatch, mask: str) -> None:
    """With attention dropout the observed sequences run explicitly on the model's path (their dropout draws are
    the model's), the other 3 - n the fused kernel; the dropout-aware laws hold on the observed ones."""
    batches = _counting_sdpa(monkeypatch)
    model, x = Wrapped(True, dropout=0.3).train(), torch.randn(3, 5, 8, dtype=torch.float64)
    padding, attn_mask = _masks()[mask]
    with AttentionProbe(model, mode="summary", summary_batch=1) as probe:
        _run(model, x, padding, attn_mask)
    assert batches == [2]
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


def test_summary_batch_at_least_the_batch_observes_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = _counting_sdpa(monkeypatch)
    model, x = Wrapped(True), torch.randn(3, 5, 8, dtype=torch.float64)
    padding, _ = _masks()["padding"]
    with AttentionProbe(model, mode="summary", summary_batch=3) as same:
        _run(model, x, padding, None)
    with AttentionProbe(model, mode="summary", summary_batch=None) as whole:
        _run(model, x, padding, None)
    assert batches == []  # no split: the fused function was never called
    for name, value in whole.summary()["blocks.0.attn"].items():
        assert torch.equal(same.summary()["blocks.0.attn"][name], value), name


def test_summary_sub_batch_every_n_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = _counting_sdpa(monkeypatch)
    model, x = Wrapped(True), torch.randn(3, 5, 8, dtype=torch.float64)
    with AttentionProbe(model, mode="summary", every=2, summary_batch=1) as probe:
        for _ in range(4):
            _run(model, x, None, None)
    assert batches == [3, 3, 3, 3]  # one fused call per forward, captured or not
    assert probe.calls_at("blocks.0.attn") == 2
    assert probe.check_laws()["routing_law"] <= TOL


@pytest.mark.parametrize("mode", ["full", "summary"])
@pytest.mark.parametrize("shape", [(0, 5, 8), (3, 0, 8)])
def test_an_empty_batch_or_sequence_is_skipped_with_a_note(mode: str, shape: tuple[int, int, int]) -> None:
    """A batch or a sequence of length 0 runs forward and backward as without the probe (the Lightning callback's
    training step goes on), the probe notes the skipped call, and check_laws on nothing but empty calls says so
    in one line; a later non-empty call is checked as usual (before: a raw IndexError in both modes)."""
    model = Wrapped(batch_first=True)
    with pytest.warns(RuntimeWarning, match="skipped an empty call"), AttentionProbe(model, mode=mode) as probe:
        model(torch.zeros(*shape, dtype=torch.float64), None, None).sum().backward()
    assert len(probe.skipped) == 1 and "blocks.0.attn" in probe.skipped[0]
    with pytest.raises(RuntimeError, match="every captured call was empty"):
        probe.check_laws()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="skipped an empty call"), AttentionProbe(model, mode=mode) as probe:
        model(torch.zeros(*shape, dtype=torch.float64), None, None).sum().backward()
        model(x, None, None).pow(2).sum().backward()
    verdict = probe.check_laws()
    assert verdict.passed and len(probe.skipped) == 1
