"""Attention-probe cases run under one source tree; ``python _probes_golden_cases.py OUT.pt`` saves the results.

``tests/test_probes_golden.py`` runs this script twice in fresh interpreters, once with ``PYTHONPATH`` at the
working tree and once at the tree of the commit before the probe adapters were refactored (issue 9 part 5), and
asserts the two result dicts are equal bit for bit. Every case seeds the global generator before it builds its
model and inputs, so both runs build the same models and draw the same dropout masks; one torch thread keeps
the reductions in the same order.

Results are flat: ``<case>/out`` the model's output, ``<case>/grad/<param>`` its parameter gradients,
``<case>/cache/<key>`` the probe's cache, ``<case>/laws/<law>`` the ``check_laws`` maxima and, where the case
asks the model for them, ``<case>/attentions`` the number of layers that returned weights and
``<case>/attentions/<layer>`` those weights; ``warning/<i>/...`` the text, category and place (file:line) of
each warning the no-capture case gave, as uint8 tensors of UTF-8 bytes.
"""

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.probes import AttentionProbe

Results = dict[str, Tensor]


class Wrapped(nn.Module):
    """nn.MultiheadAttention called as the probe needs it (need_weights=False), batch first."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, dropout=dropout, batch_first=True, dtype=torch.float64)

    def forward(self, x: Tensor, padding: Tensor | None, mask: Tensor | None) -> Tensor:
        return self.mha(x, x, x, key_padding_mask=padding, need_weights=False, attn_mask=mask)[0]


class SdpaGQA(nn.Module):
    """A hand-written grouped-query block calling F.scaled_dot_product_attention(..., enable_gqa=True)."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int = 2) -> None:
        super().__init__()
        self.shape = heads, kv_heads, head_dim
        self.q = nn.Linear(8, heads * head_dim, dtype=torch.float64)
        self.kv = nn.Linear(8, 2 * kv_heads * head_dim, dtype=torch.float64)

    def forward(self, x: Tensor) -> Tensor:
        (b, t, _), (h, hkv, e) = x.shape, self.shape
        q = self.q(x).view(b, t, h, e).transpose(1, 2)  # (B, H, T, E)
        k, v = self.kv(x).view(b, t, 2, hkv, e).permute(2, 0, 3, 1, 4)  # (B, Hkv, S, E) each
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, t, h * e)


def _masks() -> dict[str, tuple[Tensor | None, Tensor | None]]:
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = True  # True = ignore (nn.MultiheadAttention's convention)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    return {
        "none": (None, None),
        "padding": (padding, None),
        "both": (padding, causal),
        "float": (None, torch.randn(5, 5, dtype=torch.float64)),
    }


def _record(name: str, model: nn.Module, out: Tensor, probe: AttentionProbe, results: Results) -> None:
    results[f"{name}/out"] = out.detach().clone()
    for param, p in model.named_parameters():
        if p.grad is not None:
            results[f"{name}/grad/{param}"] = p.grad.clone()
    for key, value in probe.cache.items():
        results[f"{name}/cache/{key}"] = value.clone()
    laws = probe.check_laws()
    for law in ("routing_law", "value_law", "hopfield"):
        if law in laws:
            results[f"{name}/laws/{law}"] = torch.tensor(laws[law], dtype=torch.float64)


def _torch_step(model: nn.Module, *args: Tensor | None) -> Tensor:
    model.zero_grad()
    out: Tensor = model(*args)
    (out.sin() * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum().backward()
    return out


PROBE_MODES: dict[str, dict[str, Any]] = {
    "full": {"mode": "full"},
    "summary_all": {"mode": "summary", "summary_batch": None},
    "summary_1": {"mode": "summary", "summary_batch": 1},
    "summary_2": {"mode": "summary", "summary_batch": 2},
}


def torch_cases(results: Results) -> None:
    """nn.MultiheadAttention (every mask, every probe mode, dropout) and grouped-query sdpa modules."""
    for mask in _masks():
        for mode, kwargs in PROBE_MODES.items():
            torch.manual_seed(1)
            model, x = Wrapped(), torch.randn(3, 5, 8, dtype=torch.float64)
            padding, attn_mask = _masks()[mask]
            with AttentionProbe(model, **kwargs) as probe:
                out = _torch_step(model, x, padding, attn_mask)
            _record(f"mha/{mask}/{mode}", model, out, probe, results)
    for mask in ("none", "padding", "both"):
        for mode in ("full", "summary_1"):  # explicit with dropout; split-and-concatenate
            torch.manual_seed(2)
            model, x = Wrapped(dropout=0.3).train(), torch.randn(3, 5, 8, dtype=torch.float64)
            padding, attn_mask = _masks()[mask]
            with AttentionProbe(model, **PROBE_MODES[mode]) as probe:
                out = _torch_step(model, x, padding, attn_mask)
            _record(f"mha_dropout/{mask}/{mode}", model, out, probe, results)
    for heads, kv_heads in ((4, 2), (6, 2)):
        for mode in ("full", "summary_1"):
            torch.manual_seed(3)
            gqa, x = SdpaGQA(heads, kv_heads), torch.randn(4, 5, 8, dtype=torch.float64)
            with AttentionProbe(gqa, sites=[""], **PROBE_MODES[mode]) as probe:
                out = _torch_step(gqa, x)
            _record(f"gqa{heads}x{kv_heads}/{mode}", gqa, out, probe, results)


def _text(text: str) -> Tensor:
    return torch.tensor(list(text.encode()), dtype=torch.uint8)


def warning_cases(results: Results) -> None:
    """The warning a probed forward that reached no probe-able call gives (the fused inference fast path)."""
    torch.manual_seed(5)
    mha, x = nn.MultiheadAttention(8, 2, batch_first=True).eval(), torch.randn(2, 5, 8)
    with warnings.catch_warnings(record=True) as caught, AttentionProbe(mha), torch.inference_mode():
        warnings.simplefilter("always")
        mha(x, x, x, need_weights=False)
    for i, w in enumerate(caught):
        results[f"warning/{i}/message"] = _text(str(w.message))
        results[f"warning/{i}/category"] = _text(w.category.__name__)
        results[f"warning/{i}/where"] = _text(f"{Path(w.filename).name}:{w.lineno}")  # the stacklevel's frame


def _gpt2(transformers: Any, dropout: float) -> Any:
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
    return transformers.GPT2LMHeadModel(config).double()


def _llama_gqa(transformers: Any, dropout: float) -> Any:
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
    return transformers.LlamaForCausalLM(config).double()


def _hf_step(model: nn.Module, ids: Tensor, mask: Tensor | None, output_attentions: bool) -> tuple[Tensor, Any]:
    model.zero_grad()
    kwargs = {"output_attentions": True} if output_attentions else {}
    result = model(input_ids=ids, attention_mask=mask, **kwargs)
    log_p = torch.log_softmax(result.logits, dim=-1)[:, :-1]
    (-log_p.gather(-1, ids[:, 1:, None]).mean()).backward()
    return result.logits, result.attentions


def hf_cases(results: Results) -> None:
    """GPT-2 and a grouped-query Llama built from tiny configs (no weights), padded and not, every path."""
    import transformers

    builders: dict[str, Callable[[Any, float], Any]] = {"gpt2": _gpt2, "llama_gqa": _llama_gqa}
    cases = [  # (mode, padded, dropout, output_attentions)
        ("full", False, 0.0, False),
        ("full", True, 0.0, False),
        ("full", True, 0.0, True),  # the weights the adapter returns reach the model's output
        ("summary_all", True, 0.0, False),
        ("summary_1", False, 0.0, False),
        ("summary_1", True, 0.0, False),
        ("summary_2", True, 0.0, True),
        ("full", True, 0.3, False),
        ("summary_1", True, 0.3, False),
    ]
    for name, build in builders.items():
        for mode, padded, dropout, attentions in cases:
            torch.manual_seed(4)
            model = build(transformers, dropout)
            model.train() if dropout > 0.0 else model.eval()
            ids = torch.randint(1, 40, (3, 7))
            mask = torch.ones(3, 7, dtype=torch.long)
            mask[1, :2] = 0  # left padding
            mask[2, 5:] = 0  # right padding
            with AttentionProbe(model, **PROBE_MODES[mode]) as probe:
                out, weights = _hf_step(model, ids, mask if padded else None, attentions)
            case = f"{name}/{mode}/{'padded' if padded else 'plain'}/p{dropout}/{'attn' if attentions else 'noattn'}"
            _record(case, model, out, probe, results)
            if attentions:  # HF leaves out the layers whose attention function returned no weights
                results[f"{case}/attentions"] = torch.tensor(len(weights))
            for layer, w in enumerate(weights or ()):
                results[f"{case}/attentions/{layer}"] = w.detach()


def main(path: str) -> None:
    torch.set_num_threads(1)
    results: Results = {}
    torch_cases(results)
    warning_cases(results)
    try:
        import transformers  # noqa: F401
    except ImportError:
        pass
    else:
        hf_cases(results)
    torch.save(results, path)


if __name__ == "__main__":
    main(sys.argv[1])
