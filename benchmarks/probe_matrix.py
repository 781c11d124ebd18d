"""The attention probe on every Hugging Face family: sites found, law residuals and verdict, per dtype.

Each family is built from a tiny config (random weights, nothing downloaded), run once forward and backward
under a full-mode :class:`~implicit_em.probes.AttentionProbe`, and compared with the model's own attention
weights (``output_attentions=True`` with the eager implementation, where the model offers them). Families:
GPT-2, Llama (grouped-query), Qwen2, Mistral (sliding window 4), Phi-3, BERT, RoBERTa, T5 (encoder self-,
decoder self- and cross-attention, relative position bias), ViT, Whisper (encoder-decoder), and Gemma-2, whose
logit soft-capping the probe refuses (with the reason). Text inputs carry right padding on one sequence.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/probe_matrix.py     # < 1 min on one thread
    .venv/bin/python benchmarks/probe_matrix.py --dtypes float64 --families gpt2,t5  # a part

Writes ``benchmarks/results/probe_matrix.md`` and ``.json``; ``tests/test_probes_families.py`` runs the same
families through :func:`measure`.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from implicit_em.probes import AttentionProbe

RESULTS = Path(__file__).parent / "results"
VOCAB, BATCH, SEQ = 40, 2, 7
_TEXT = {"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32, "num_hidden_layers": 2}
_IDS = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def _config(name: str) -> Any:
    import transformers as tf

    decoder = {**_TEXT, **_IDS, "max_position_embeddings": 32, "num_key_value_heads": 1, "head_dim": 8}
    configs: dict[str, Callable[[], Any]] = {
        "gpt2": lambda: tf.GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=32, **_IDS),
        "llama": lambda: tf.LlamaConfig(**decoder),
        "qwen2": lambda: tf.Qwen2Config(**decoder),
        "mistral": lambda: tf.MistralConfig(**decoder, sliding_window=4),
        "phi3": lambda: tf.Phi3Config(**{k: v for k, v in decoder.items() if k != "head_dim"}),
        "bert": lambda: tf.BertConfig(**_TEXT, **_IDS, max_position_embeddings=32),
        "roberta": lambda: tf.RobertaConfig(**_TEXT, **_IDS, max_position_embeddings=40),
        "t5": lambda: tf.T5Config(
            vocab_size=VOCAB,
            d_model=16,
            d_kv=8,
            d_ff=32,
            num_layers=2,
            num_heads=2,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
            relative_attention_num_buckets=8,
            dropout_rate=0.0,
        ),
        "vit": lambda: tf.ViTConfig(**_TEXT, image_size=8, patch_size=4, num_channels=3),
        "whisper": lambda: tf.WhisperConfig(
            vocab_size=VOCAB,
            d_model=16,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            num_mel_bins=8,
            max_source_positions=8,
            max_target_positions=16,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
            suppress_tokens=None,
            begin_suppress_tokens=None,
        ),
        "gemma2": lambda: tf.Gemma2Config(**decoder),
    }
    return configs[name]()


@dataclass(frozen=True)
class Family:
    """How to build, feed and read one family: ``kind`` picks the inputs and the attention outputs' order."""

    name: str
    kind: str  # "text" (one stack), "image" (ViT), "seq2seq" (T5), "speech" (Whisper)
    refused: str | None = None  # the reason the probe refuses it, as its error says


FAMILIES = [
    Family("gpt2", "text"),
    Family("llama", "text"),
    Family("qwen2", "text"),
    Family("mistral", "text"),
    Family("phi3", "text"),
    Family("bert", "text"),
    Family("roberta", "text"),
    Family("t5", "seq2seq"),
    Family("vit", "image"),
    Family("whisper", "speech"),
    Family("gemma2", "text", refused="logit soft-capping"),
]
BY_NAME = {f.name: f for f in FAMILIES}


def build(family: Family, dtype: torch.dtype, seed: int = 0) -> Any:
    """The family's base model (``AutoModel``) from its tiny config, random weights, eval mode, in ``dtype``."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(_config(family.name))  # its default implementation (sdpa mostly)
    return model.to(dtype).eval()


def inputs(family: Family, dtype: torch.dtype, seed: int = 0) -> dict[str, Tensor]:
    """Forward arguments: token ids with right padding on the second sequence, pixels, or mel features."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 2 :] = 0  # right padding: no query row is left without a key
    if family.kind == "image":
        return {"pixel_values": torch.randn(BATCH, 3, 8, 8, generator=g, dtype=torch.float64).to(dtype)}
    if family.kind == "speech":
        features = torch.randn(BATCH, 8, 16, generator=g, dtype=torch.float64).to(dtype)
        return {"input_features": features, "decoder_input_ids": ids[:, :5]}
    if family.kind == "seq2seq":
        return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": ids[:, :5]}
    return {"input_ids": ids, "attention_mask": mask}


def loss_of(output: Any) -> Tensor:
    """A scalar that depends on every output unit: sum(sin(h) * w) with a fixed ramp w (dtype of h)."""
    h = output.last_hidden_state
    return (h.sin() * torch.linspace(-1.0, 1.0, h.shape[-1], dtype=h.dtype)).sum()


def eager_attentions(family: Family, model: Any, args: dict[str, Tensor]) -> list[Tensor]:
    """The model's own weights (eager implementation, ``output_attentions=True``), in site (module) order."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**args, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    if family.kind in ("seq2seq", "speech"):  # encoder layers, then per decoder layer: self, cross
        decoder = [a for pair in zip(out.decoder_attentions, out.cross_attentions, strict=True) for a in pair]
        return [*out.encoder_attentions, *decoder]
    return list(out.attentions)


def measure(family: Family, dtype: torch.dtype, seed: int = 0) -> dict[str, Any]:
    """One family in one dtype: sites, residuals, verdict and the largest |probe weights - eager weights|."""
    model = build(family, dtype, seed)
    args = inputs(family, dtype, seed)
    row: dict[str, Any] = {"family": family.name, "dtype": str(dtype).removeprefix("torch.")}
    try:
        probe = AttentionProbe(model)
        with probe, warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a probe that captured nothing fails the row
            loss_of(model(**args)).backward()
    except ValueError as err:
        if family.refused is None or family.refused not in str(err):
            raise
        return {**row, "sites": None, "verdict": "refused", "reason": str(err)}
    verdict = probe.check_laws()
    expected = eager_attentions(family, model, args)
    patterns = [probe.cache[f"{site}.hook_pattern"] for site in probe.sites]
    if len(expected) != len(patterns):
        raise AssertionError(f"{family.name}: {len(patterns)} sites but {len(expected)} attention outputs")
    weights_gap = max(float((p - e).abs().max()) for p, e in zip(patterns, expected, strict=True))
    eps = torch.finfo(dtype).eps
    return {
        **row,
        "sites": len(probe.sites),
        "site_modules": sorted({type(m).__name__ for m in probe._modules.values()}),
        "routing_law": verdict["routing_law"],
        "value_law": verdict["value_law"],
        "hopfield": verdict["hopfield"],
        "relative_in_eps": max(v for r in verdict.relative.values() for v in r.values()) / eps,
        "tolerance": verdict.tolerance,
        "weights_vs_output_attentions": weights_gap,
        "verdict": "pass" if verdict.passed else "FAIL",
    }


def _markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| family | dtype | sites | attention modules | routing law | value law | Hopfield | max residual/scale (eps) "
        "| weights vs output_attentions | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if r["verdict"] == "refused":
            what = BY_NAME[r["family"]].refused
            lines.append(f"| {r['family']} | {r['dtype']} | — | — | — | — | — | — | — | refused ({what}) |")
            continue
        lines.append(
            f"| {r['family']} | {r['dtype']} | {r['sites']} | {', '.join(r['site_modules'])} | {r['routing_law']:.1e} "
            f"| {r['value_law']:.1e} | {r['hopfield']:.1e} | {r['relative_in_eps']:.2f} "
            f"| {r['weights_vs_output_attentions']:.1e} | {r['verdict']} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float64,float32,bfloat16,float16", help="comma-separated torch dtypes")
    parser.add_argument("--families", default=",".join(BY_NAME), help="comma-separated family names")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for probe_matrix.md and .json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start, rows = time.perf_counter(), []
    for name in args.families.split(","):
        for dtype_name in args.dtypes.split(","):
            rows.append(measure(BY_NAME[name], getattr(torch, dtype_name)))
            print(f"{name:<8} {dtype_name:<9} {rows[-1]['verdict']}", flush=True)
    seconds = time.perf_counter() - start
    import transformers

    environment = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "seconds": round(seconds, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe_matrix.json").write_text(json.dumps({"environment": environment, "rows": rows}, indent=2))
    table = _markdown(rows)
    env = ", ".join(f"{k} {v}" for k, v in environment.items())
    (args.out / "probe_matrix.md").write_text(f"# Probe matrix\n\n{env}\n\n{table}")
    print(table)
    return rows


if __name__ == "__main__":
    main()
