"""The attention probe on every Hugging Face family (tiny configs, float64), the verdict and the no-capture report.

On the code before this change BERT, RoBERTa and T5 captured nothing (the probe picked ``BertAttention`` and
``T5LayerSelfAttention``, which never call the attention function) and check_laws blamed the ``with`` block;
T5's position bias was refused; there was no warning and check_laws returned a plain dict (no ``passed``).
"""

import json
import runpy
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from implicit_em.probes import AttentionProbe, LawVerdict
from implicit_em.probes._verdict import FACTOR

transformers = pytest.importorskip("transformers")

MATRIX = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "probe_matrix.py"))
FAMILIES = [f for f in MATRIX["FAMILIES"] if f.refused is None]
BY_NAME = MATRIX["BY_NAME"]
TOL = 1e-10
#: families whose eager attention computes its softmax in float32 whatever the model's dtype (their
#: ``eager_attention_forward`` passes dtype=torch.float32), so their output_attentions carry float32 rounding
FLOAT32_SOFTMAX = {"llama", "qwen2", "mistral", "phi3", "vit"}
SITES = {"t5": 6, "whisper": 6}  # encoder self, decoder self and cross; the others have two layers
SITE_CLASS = {"bert": "BertSelfAttention", "roberta": "RobertaSelfAttention", "t5": "T5Attention"}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_laws_hold_and_weights_are_the_models_own(family: Any) -> None:
    row = MATRIX["measure"](family, torch.float64)
    assert row["sites"] == SITES.get(family.name, 2)
    if family.name in SITE_CLASS:
        assert row["site_modules"] == [SITE_CLASS[family.name]]
    assert row["routing_law"] <= TOL and row["value_law"] <= TOL and row["hopfield"] <= TOL
    assert row["verdict"] == "pass"
    gap = 1e-6 if family.name in FLOAT32_SOFTMAX else 1e-12
    assert row["weights_vs_output_attentions"] <= gap


def test_t5_probes_encoder_decoder_and_cross_attention() -> None:
    model = MATRIX["build"](BY_NAME["t5"], torch.float64)
    probe = AttentionProbe(model)
    names = list(probe.sites.values())
    assert names[:2] == ["encoder.block.0.layer.0.SelfAttention", "encoder.block.1.layer.0.SelfAttention"]
    assert names[2:4] == ["decoder.block.0.layer.0.SelfAttention", "decoder.block.0.layer.1.EncDecAttention"]


def test_t5_summary_sub_batch_keeps_outputs_and_gradients_bit_for_bit() -> None:
    """The shadow recomputation must not add gradient to T5's relative position bias."""
    family = BY_NAME["t5"]
    model, args = MATRIX["build"](family, torch.float64), MATRIX["inputs"](family, torch.float64)

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        out = model(**args)
        MATRIX["loss_of"](out).backward()
        return out.last_hidden_state.detach(), [p.grad.clone() for p in model.parameters()]

    plain, grads = step()
    with AttentionProbe(model, mode="summary", summary_batch=1) as probe:
        probed, probed_grads = step()
    assert torch.equal(plain, probed)
    assert all(torch.equal(g, h) for g, h in zip(grads, probed_grads, strict=True))
    assert probe.check_laws()["routing_law"] <= TOL and probe.check_laws().passed


def test_softcapping_is_refused_with_the_reason() -> None:
    family = BY_NAME["gemma2"]
    model, args = MATRIX["build"](family, torch.float64), MATRIX["inputs"](family, torch.float64)
    with pytest.raises(ValueError, match=r"refuses logit soft-capping.*tanh"), AttentionProbe(model):
        model(**args)


def test_a_model_without_the_interface_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from implicit_em.probes import _hf

    model = MATRIX["build"](BY_NAME["bert"], torch.float64)
    monkeypatch.setattr(_hf, "calls_attention_interface", lambda module: False)
    with pytest.raises(ValueError, match="BertModel: no module calls Hugging Face's attention interface"):
        AttentionProbe(model)


def test_a_forward_that_reached_no_site_warns_and_names_the_sites() -> None:
    family = BY_NAME["bert"]
    model, args = MATRIX["build"](family, torch.float64), MATRIX["inputs"](family, torch.float64)
    outer = ["encoder.layer.0.attention", "encoder.layer.1.attention"]  # what the old discovery picked
    with pytest.warns(RuntimeWarning) as caught, AttentionProbe(model, sites=outer) as probe:
        MATRIX["loss_of"](model(**args)).backward()
    message = str(caught[0].message)
    assert "nothing was captured" in message and "encoder.layer.0.attention," in message
    assert "called by encoder.layer.0.attention.self, encoder.layer.1.attention.self" in message
    with pytest.raises(RuntimeError, match="no attention call was captured") as error:
        probe.check_laws()
    assert "`with` block" not in str(error.value)


def test_a_forward_that_reached_its_sites_does_not_warn() -> None:
    family = BY_NAME["gpt2"]
    model, args = MATRIX["build"](family, torch.float64), MATRIX["inputs"](family, torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with AttentionProbe(model, mode="summary", every=2):
            for _ in range(2):  # the second forward is not sampled: it captures nothing and must not warn
                model(**args)


# ---- the verdict ---------------------------------------------------------------------------------------------


def _gpt2_verdict(dtype: torch.dtype, scale: float = 1.0, mode: str = "full") -> tuple[LawVerdict, AttentionProbe]:
    family = BY_NAME["gpt2"]
    model, args = MATRIX["build"](family, dtype), MATRIX["inputs"](family, dtype)
    with AttentionProbe(model, mode=mode) as probe:  # type: ignore[arg-type]
        (scale * MATRIX["loss_of"](model(**args))).backward()
    return probe.check_laws(), probe


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["full", "summary"])
def test_verdict_knows_the_dtype_and_passes(dtype: torch.dtype, mode: str) -> None:
    verdict, _ = _gpt2_verdict(dtype, mode=mode)
    assert verdict.dtype == dtype and verdict.tolerance == FACTOR * torch.finfo(dtype).eps
    assert verdict.passed and all(verdict.law_passed.values())
    laws = {"routing_law", "value_law", "hopfield"} if mode == "full" else {"routing_law", "value_law"}
    assert set(verdict.law_passed) == laws
    assert set(verdict.layer_passed) == set(verdict["layers"]) == {"blocks.0.attn", "blocks.1.attn"}


def test_verdict_is_the_old_dict() -> None:
    verdict, _ = _gpt2_verdict(torch.float64)
    assert isinstance(verdict, dict) and list(verdict) == ["routing_law", "value_law", "hopfield", "layers"]
    assert verdict["routing_law"] == max(row["routing_law"] for row in verdict["layers"].values())
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["dtype"] == "float64" and data["passed"] is True


def test_verdict_does_not_depend_on_the_loss_scale() -> None:
    """The residuals grow with the loss; the residual over its scale does not, nor the verdict."""
    small, _ = _gpt2_verdict(torch.float32)
    large, _ = _gpt2_verdict(torch.float32, scale=1e6)
    assert large["hopfield"] == small["hopfield"]  # a forward identity: no gradient involved
    assert large.passed and small.passed
    for site, row in large.relative.items():
        for law in ("routing_law", "value_law"):
            assert row[law] <= 4 * torch.finfo(torch.float32).eps, (site, law)
            assert small.relative[site][law] <= 4 * torch.finfo(torch.float32).eps, (site, law)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_verdict_fails_a_law_off_by_one_percent(dtype: torch.dtype) -> None:
    _, probe = _gpt2_verdict(dtype)
    probe.cache["blocks.1.attn.hook_v"].mul_(1.01)  # the probe's own tensors: the routing law now misses
    verdict = probe.check_laws()
    assert not verdict.passed and verdict.law_passed == {"routing_law": False, "value_law": True, "hopfield": True}
    assert (
        verdict.layer_passed["blocks.0.attn"]["routing_law"]
        and not verdict.layer_passed["blocks.1.attn"]["routing_law"]
    )
    assert verdict.relative["blocks.1.attn"]["routing_law"] > 100 * verdict.tolerance  # 425x in float32
