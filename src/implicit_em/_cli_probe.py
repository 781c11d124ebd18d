"""``implicit-em probe``: the attention probe on a local Hugging Face model, one forward and backward.

    implicit-em probe MODEL_DIR_OR_CONFIG [--text "..."] [--tokens N] [--seed S] [--dtype float32|float64] [--json]

MODEL_DIR_OR_CONFIG is a directory written by ``save_pretrained`` (config and weights, loaded with
``local_files_only=True``; nothing is downloaded) or a config.json alone (random weights from the seed, and the
output says so). The input is ``--text`` through the directory's tokenizer, or ``--tokens`` random token ids;
models whose config describes images get random pixels. Causal language models are run with their next-token
loss; other models with ``sum(sin(h) * w)`` on the last hidden state (the laws hold for any loss). The table
has one row per attention site: the law residuals with pass/fail against the dtype's tolerance
(:class:`~implicit_em.probes.LawVerdict`), the mean attention entropy and the mean largest responsibility.

Exit status: 0 when every law passes, 1 when one fails, 2 for bad input (one line on stderr).
"""

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from implicit_em._cli_args import positive_int, seed

if TYPE_CHECKING:  # torch is imported when the probe runs, not when the command line is parsed
    import torch
    from torch import Tensor

__all__ = ["add_parser", "run"]

_DTYPES = ("float32", "float64")
_LAWS = ("routing_law", "value_law", "hopfield")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model")


class ProbeInputError(ValueError):
    """Input the user can fix: reported as one line and exit status 2."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``probe`` on the ``implicit-em`` subparsers; returns its parser."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "probe",
        help="check the attention laws on a local Hugging Face model (a save_pretrained folder or a config.json)",
        description="One forward and backward of a local Hugging Face model under the attention probe: per site, "
        "the law residuals against the dtype's tolerance, the mean entropy and the mean max responsibility.",
    )
    parser.add_argument("model", metavar="MODEL_DIR_OR_CONFIG", help="save_pretrained folder, or a config.json")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--text", default=None, help="input text, tokenized by the folder's tokenizer")
    source.add_argument("--tokens", type=positive_int, default=None, help="N random token ids (default 16)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the random weights and inputs (default 0)")
    parser.add_argument("--dtype", choices=_DTYPES, default="float64", help="compute dtype (default float64)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the ``probe`` subcommand; returns the exit status."""
    import torch

    try:
        result = probe_model(Path(args.model), args.text, args.tokens, args.seed, getattr(torch, args.dtype))
    except ProbeInputError as err:
        print(f"implicit-em probe: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0 if result["passed"] else 1


def probe_model(path: Path, text: str | None, tokens: int | None, seed: int, dtype: "torch.dtype") -> dict[str, Any]:
    """Load, run under the probe and summarise; raises :class:`ProbeInputError` for input the user can fix."""
    import torch

    try:
        import transformers
    except ImportError:
        raise ProbeInputError("needs transformers: pip install implicit-em[hf]") from None
    from implicit_em.probes import AttentionProbe

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    config, folder, weights = _load_config(path)
    model = _load_model(transformers, config, folder if weights else None).to(dtype).eval()
    inputs = _inputs(transformers, config, folder, text, tokens, seed, dtype)
    try:
        with AttentionProbe(model) as probe:
            _loss(model, inputs).backward()
        verdict = probe.check_laws()
    except (ValueError, RuntimeError) as err:  # a refused model (soft-capping), a model the probe cannot reach
        raise ProbeInputError(str(err).splitlines()[0]) from None
    summary = probe.summary()
    sites = []
    for site, module in probe.sites.items():
        stats = summary.get(site, {})
        row: dict[str, Any] = {"site": site, "module": module}
        for law in _LAWS:
            if law in verdict["layers"].get(site, {}):
                row[law] = verdict["layers"][site][law]
                row[f"{law}_relative"] = verdict.relative[site][law]
                row[f"{law}_passed"] = verdict.layer_passed[site][law]
        row["entropy"] = float(stats["entropy"].mean()) if "entropy" in stats else None
        row["max_responsibility"] = float(stats["max_weight"].mean()) if "max_weight" in stats else None
        sites.append(row)
    return {
        "model": str(path),
        "class": type(model).__name__,
        "weights": "loaded" if weights else "random init (no weights: config only)",
        "input": inputs["_describe"],
        "dtype": str(dtype).removeprefix("torch."),
        "tolerance": verdict.tolerance,
        "factor": verdict.factor,
        "passed": verdict.passed,
        "loss": _loss_name(model, inputs),
        "sites": sites,
        "same_numbers_everywhere": _same_numbers_everywhere(sites),
    }


def _loss_name(model: Any, inputs: dict[str, Any]) -> str:
    """What :func:`_loss` backpropagates, in words (the laws hold for any loss; the numbers depend on it)."""
    causal = "input_ids" in inputs and not getattr(model.config, "is_encoder_decoder", False)
    if causal and _is_causal_lm(model.config):
        return "next-token cross-entropy, mean over the input's positions"
    return "sum(sin(h) * w), h the last hidden state, w a fixed ramp from -1 to 1 (the model has no LM head here)"


def _same_numbers_everywhere(sites: list[dict[str, Any]]) -> bool:
    """Whether every site (of two or more) shows the same entropy and max r to 6 digits: what random weights
    whose layers are initialised alike look like; a trained model's layers differ."""
    stats = {(round(r["entropy"], 6), round(r["max_responsibility"], 6)) for r in sites if r["entropy"] is not None}
    return len(sites) > 1 and len(stats) == 1


def _load_config(path: Path) -> tuple[Any, Path, bool]:
    """(config, folder, whether weights are loaded): a save_pretrained folder or a config JSON file."""
    from transformers import AutoConfig

    if not path.exists():
        raise ProbeInputError(f"{path}: no such file or directory")
    folder, file = (path, path / "config.json") if path.is_dir() else (path.parent, path)
    if not file.is_file():
        raise ProbeInputError(f"{path}: no config.json in this folder (expected a save_pretrained folder)")
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProbeInputError(f"{file}: not a readable JSON config ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ProbeInputError(f'{file}: not a Hugging Face config (no "model_type")')
    model_type = data.pop("model_type")
    data.pop("transformers_version", None)
    known = _model_types()
    if model_type not in known:  # transformers' own message lists all of them (12,000 characters in one line)
        close = difflib.get_close_matches(model_type, known, n=3)
        hint = f"close matches: {', '.join(close)}" if close else "no close match among transformers' model types"
        raise ProbeInputError(f"{file}: unknown model_type {model_type!r} ({hint})")
    try:
        config = AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError, TypeError) as err:
        raise ProbeInputError(f"{file}: {err}".splitlines()[0]) from None
    weights = path.is_dir() and any(any(folder.glob(p)) for p in ("*.safetensors", "pytorch_model*.bin"))
    if path.is_dir() and not weights:
        raise ProbeInputError(
            f"{path}: no weights (model.safetensors or pytorch_model.bin); pass {file} for a random initialisation"
        )
    return config, folder, weights


def _model_types() -> list[str]:
    """The model types this transformers can build a config for (``AutoConfig.for_model``'s keys)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return list(CONFIG_MAPPING.keys())


def _is_causal_lm(config: Any) -> bool:
    """A decoder-only language model (GPT-2, Llama...): not an encoder with an LM head (BERT), not seq2seq."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    kind = type(config)
    encoder = kind in MODEL_FOR_MASKED_LM_MAPPING or getattr(config, "is_encoder_decoder", False)
    return kind in MODEL_FOR_CAUSAL_LM_MAPPING and not encoder


def _load_model(transformers: Any, config: Any, folder: Path | None) -> Any:
    """The model from its config (random weights) or from the folder's weights. Any failure to read the user's
    files is input the user can fix: a truncated or corrupt ``model.safetensors`` raises safetensors' own
    ``SafetensorError`` (not an OSError), a mismatched checkpoint a RuntimeError; each becomes one line and exit 2.
    KeyboardInterrupt is not an Exception and still reaches the caller."""
    auto = transformers.AutoModelForCausalLM if _is_causal_lm(config) else transformers.AutoModel
    try:
        if folder is None:
            return auto.from_config(config)
        return auto.from_pretrained(folder, config=config, local_files_only=True)
    except Exception as err:  # every loader error is the file's problem, reported in one line
        what = "build the model" if folder is None else f"load the model from {folder}"
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ProbeInputError(f"cannot {what}: {type(err).__name__}: {first}") from None


def _inputs(
    transformers: Any,
    config: Any,
    folder: Path,
    text: str | None,
    tokens: int | None,
    seed: int,
    dtype: "torch.dtype",
) -> dict[str, Any]:
    """The forward's keyword arguments, plus ``_describe`` (a line for the report)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if getattr(config, "image_size", None) is not None and getattr(config, "num_channels", None) is not None:
        if text is not None:
            raise ProbeInputError(f"{type(config).__name__} takes images, not --text")
        size = config.image_size
        pixels = torch.randn(1, config.num_channels, size, size, generator=g, dtype=torch.float64).to(dtype)
        return {"pixel_values": pixels, "_describe": f"random image {size}x{size}"}
    if getattr(config, "num_mel_bins", None) is not None:
        raise ProbeInputError(f"{type(config).__name__} takes audio features; implicit-em probe runs text models")
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ProbeInputError(f"{type(config).__name__} has no vocab_size: not a text model")
    if text is not None:
        missing = ProbeInputError(
            f"{folder}: no tokenizer for --text ({', '.join(_TOKENIZER_FILES)}); pass --tokens N for random token ids"
        )
        if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
            raise missing  # transformers would build an empty tokenizer from the config alone
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError):
            raise missing from None
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        describe = f"text, {ids.shape[1]} tokens"
    else:
        n = 16 if tokens is None else tokens
        ids = torch.randint(0, vocab, (1, n), generator=g)
        describe = f"{n} random tokens (seed {seed})"
    if ids.shape[1] < 2:
        raise ProbeInputError("the input has fewer than 2 tokens: nothing to attend over")
    limit = _max_positions(config)
    if limit is not None and ids.shape[1] > limit:
        raise ProbeInputError(f"{ids.shape[1]} tokens exceed the model's {limit} positions")
    args: dict[str, Any] = {"input_ids": ids, "_describe": describe}
    if getattr(config, "is_encoder_decoder", False):
        args["decoder_input_ids"] = ids
    return args


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def _loss(model: Any, inputs: dict[str, Any]) -> "Tensor":
    """The causal LM's next-token loss, in the model's dtype; otherwise sum(sin(h) * w) on the last hidden state."""
    import torch

    args = {k: v for k, v in inputs.items() if not k.startswith("_")}
    output = model(**args)
    logits = getattr(output, "logits", None)
    if logits is not None and "input_ids" in args and not getattr(model.config, "is_encoder_decoder", False):
        ids = args["input_ids"]
        log_p = torch.log_softmax(logits, dim=-1)[:, :-1]
        return -log_p.gather(-1, ids[:, 1:, None]).mean()
    h = output.last_hidden_state
    return (h.sin() * torch.linspace(-1.0, 1.0, h.shape[-1], dtype=h.dtype)).sum()


def _table(result: dict[str, Any]) -> str:
    mark = {True: "pass", False: "FAIL"}
    lines = [
        f"{result['model']}: {result['class']}, weights {result['weights']}",
        f"input: {result['input']}; dtype {result['dtype']}; loss backpropagated: {result['loss']}",
        f"law columns: max |autograd - law| / scale (the law's own bound, docs/probes.md); passes when <= "
        f"{result['tolerance']:.1e} ({result['factor']:g} eps)",
        "entropy: mean attention entropy in nats (at most log of the keys attended over); max r: mean largest weight",
        "",
        f"{'site':<16}{'module':<40}{'routing law':>18}{'value law':>18}{'Hopfield':>18}{'entropy':>10}{'max r':>8}",
    ]
    for row in result["sites"]:
        cells = [
            f"{row[f'{law}_relative']:>9.1e} {mark[row[f'{law}_passed']]:<4}" if law in row else f"{'—':>14}"
            for law in _LAWS
        ]
        entropy = "—" if row["entropy"] is None else f"{row['entropy']:.3f}"
        top = "—" if row["max_responsibility"] is None else f"{row['max_responsibility']:.3f}"
        lines.append(
            f"{row['site']:<16}{row['module']:<40}" + "".join(f"{c:>18}" for c in cells) + f"{entropy:>10}{top:>8}"
        )
    lines.append("")
    if result["weights"] != "loaded":
        lines.append("note: random weights (a config alone): the entropies describe an untrained model")
    if result["same_numbers_everywhere"]:
        lines.append("note: every site shows the same entropy and max r, as layers initialised alike do")
    lines.append("every law passes" if result["passed"] else "a law FAILS: see the rows marked FAIL")
    return "\n".join(lines)
