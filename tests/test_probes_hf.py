"""The attention probe on Hugging Face transformers models built from tiny random configs (case c)."""

import json
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from implicit_em.probes import AttentionProbe

transformers = pytest.importorskip("transformers")

TOL = 1e-10


def gpt2(dropout: float = 0.0) -> Any:  # a transformers model (untyped here)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=16,
        n_head=2,
        vocab_size=40,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
        attn_pdrop=dropout,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config).double().eval()


def llama_gqa(dropout: float = 0.0) -> Any:
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=4,
        intermediate_size=32,
        vocab_size=40,
        max_position_embeddings=16,
        attention_dropout=dropout,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(config).double().eval()


MODELS: dict[str, Callable[..., Any]] = {"gpt2": gpt2, "llama_gqa": llama_gqa}


def _batch() -> tuple[Tensor, Tensor]:
    ids = torch.randint(1, 40, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, :2] = 0  # left padding
    mask[2, 5:] = 0  # right padding
    return ids, mask


def _step(model: nn.Module, ids: Tensor, mask: Tensor | None) -> tuple[Tensor, list[Tensor]]:
    """Forward and backward with the LM loss computed here in float64 (HF's own loss upcasts to float32)."""
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits
    log_p = torch.log_softmax(logits, dim=-1)[:, :-1]
    loss = -log_p.gather(-1, ids[:, 1:, None]).mean()
    loss.backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("padded", [False, True])
def test_laws_hold_and_results_are_unchanged(name: str, padded: bool) -> None:
    model = MODELS[name]()
    ids, mask = _batch()
    used = mask if padded else None
    logits, grads = _step(model, ids, used)
    with AttentionProbe(model) as probe:
        assert model.config._attn_implementation == "implicit_em_probe"
        probed, probed_grads = _step(model, ids, used)
    assert model.config._attn_implementation == "sdpa"  # restored
    laws = probe.check_laws()
    assert set(laws["layers"]) == {"blocks.0.attn", "blocks.1.attn"}
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL and laws["hopfield"] <= TOL
    torch.testing.assert_close(probed, logits, atol=1e-12, rtol=0)
    for g, h in zip(grads, probed_grads, strict=True):
        torch.testing.assert_close(h, g, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", list(MODELS))
def test_causal_mask_is_applied(name: str) -> None:
    """The mask builder is registered: changing the last token leaves earlier logits untouched."""
    model = MODELS[name]()
    ids, _ = _batch()
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 40
    with AttentionProbe(model) as probe, torch.no_grad():
        before, after = model(input_ids=ids).logits, model(input_ids=changed).logits
    assert torch.equal(before[:, :-1], after[:, :-1])
    pattern = probe.cache["blocks.0.attn.hook_pattern"]
    assert torch.equal(pattern.triu(1), torch.zeros_like(pattern))


def test_padding_keys_get_zero_weight() -> None:
    model = gpt2()
    ids, mask = _batch()
    with AttentionProbe(model, layers=[1]) as probe:
        _step(model, ids, mask)
    pattern = probe.cache["blocks.1.attn.hook_pattern"]  # (B, H, T, S)
    assert torch.equal(pattern[1, :, :, :2], torch.zeros_like(pattern[1, :, :, :2]))


def test_grouped_query_attention_repeats_keys_and_values() -> None:
    model = llama_gqa()
    ids, _ = _batch()
    with AttentionProbe(model, heads=[0, 1, 3]) as probe:
        _step(model, ids, None)
    v = probe.cache["blocks.0.attn.hook_v"]
    assert v.shape == (3, 3, 7, 4)
    assert torch.equal(v[:, 0], v[:, 1])  # query heads 0 and 1 share key/value head 0


@pytest.mark.parametrize("name", list(MODELS))
def test_attention_dropout_in_train_mode(name: str) -> None:
    model = MODELS[name](dropout=0.3).train()
    ids, mask = _batch()
    with AttentionProbe(model) as probe:
        _step(model, ids, mask)
    assert "blocks.0.attn.hook_dropout_keep" in probe.cache
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


def test_summary_mode_every_n_steps() -> None:
    model = gpt2()
    ids, mask = _batch()
    with AttentionProbe(model, mode="summary", every=2) as probe:
        for _ in range(3):
            _step(model, ids, mask)
    assert probe.calls_at("blocks.0.attn") == 2
    assert all(t.dim() == 1 for t in probe.cache.values())
    assert probe.check_laws()["routing_law"] <= TOL


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_commits_one_record_per_site(reentrant: bool) -> None:
    """The checkpointed forward runs twice; only the call whose gradient arrives is kept."""
    model = llama_gqa().train()
    kwargs = {"use_reentrant": reentrant}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    ids, _ = _batch()
    with AttentionProbe(model) as probe:
        _step(model, ids, None)
    laws = probe.check_laws()
    assert set(laws["layers"]) == {"blocks.0.attn", "blocks.1.attn"}
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


def test_overhead_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    benchmark = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "probe_overhead.py"))
    out = tmp_path / "overhead.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["probe_overhead.py", "--quick", "--out", str(out)])
        benchmark["main"]()
    result = json.loads(out.read_text())
    assert set(result["ratio_to_none"]) == set(benchmark["CONTENDERS"])
    assert result["environment"]["threads"] >= 1 and len(result["environment"]["loadavg_before"]) == 3


# ---- summary mode on a sub-batch: HF's sdpa computes the call, the first n sequences are recomputed -----------


def _counting_sdpa(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Wrap F.scaled_dot_product_attention (which HF's sdpa function calls) to record each call's batch size."""
    fused, batches = torch.nn.functional.scaled_dot_product_attention, []

    def counted(query: Tensor, *args: object, **kwargs: object) -> Tensor:
        batches.append(query.shape[0])
        return fused(query, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    return batches


def _sum_step(model: nn.Module, ids: Tensor, mask: Tensor | None) -> None:
    """A float64 LM loss summed over sequences: each sequence's gradients do not depend on the others."""
    model.zero_grad()
    log_p = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits, dim=-1)[:, :-1]
    (-log_p.gather(-1, ids[:, 1:, None]).sum()).backward()


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("n", [1, 2])
def test_summary_sub_batch_keeps_results_and_laws(
    monkeypatch: pytest.MonkeyPatch, name: str, padded: bool, n: int
) -> None:
    batches = _counting_sdpa(monkeypatch)
    model = MODELS[name]()
    ids, mask = _batch()
    used = mask if padded else None
    logits, grads = _step(model, ids, used)
    batches.clear()
    with AttentionProbe(model, mode="summary", summary_batch=n) as probe:
        probed, probed_grads = _step(model, ids, used)
    assert batches == [3, 3]  # per layer, HF's sdpa computed the whole call
    laws = probe.check_laws()
    assert set(laws["layers"]) == {"blocks.0.attn", "blocks.1.attn"}
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL
    assert torch.equal(probed, logits)  # bit-identical: the recomputation only reads the gradient
    assert all(torch.equal(h, g) for g, h in zip(grads, probed_grads, strict=True))


@pytest.mark.parametrize("name", list(MODELS))
def test_summary_sub_batch_statistics_are_those_of_the_first_sequences(name: str) -> None:
    model = MODELS[name]()
    ids, mask = _batch()
    with AttentionProbe(model, mode="summary", summary_batch=2) as sub:
        _sum_step(model, ids, mask)
    with AttentionProbe(model, mode="full") as full:
        _sum_step(model, ids[:2], mask[:2])
    expected = full.summary()
    assert set(sub.summary()) == set(expected) == {"blocks.0.attn", "blocks.1.attn"}
    for site, stats in sub.summary().items():
        assert set(stats) == set(expected[site])
        for stat, value in stats.items():
            torch.testing.assert_close(value, expected[site][stat], atol=1e-12, rtol=0, msg=f"{site}.{stat}")


@pytest.mark.parametrize("name", list(MODELS))
def test_summary_sub_batch_with_attention_dropout(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """With dropout the observed sequence runs explicitly on the model's path, the other two HF's sdpa."""
    batches = _counting_sdpa(monkeypatch)
    model = MODELS[name](dropout=0.3).train()
    ids, mask = _batch()
    with AttentionProbe(model, mode="summary", summary_batch=1) as probe:
        _step(model, ids, mask)
    assert batches == [2, 2]
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


def test_summary_batch_at_least_the_batch_observes_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = _counting_sdpa(monkeypatch)
    model = llama_gqa()
    ids, mask = _batch()
    with AttentionProbe(model, mode="summary", summary_batch=7) as same:
        _step(model, ids, mask)
    with AttentionProbe(model, mode="summary", summary_batch=None) as whole:
        _step(model, ids, mask)
    assert batches == []
    for site, stats in whole.summary().items():
        for stat, value in stats.items():
            assert torch.equal(same.summary()[site][stat], value), f"{site}.{stat}"
