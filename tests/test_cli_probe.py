"""``implicit-em probe``: a config.json alone (random init), a save_pretrained folder, text through its tokenizer,
and one-line errors with status 2. The subcommand is new: every test fails on the code before it."""

import json
from pathlib import Path
from typing import Any

import pytest

from implicit_em.cli import main

transformers = pytest.importorskip("transformers")


def _gpt2_config() -> Any:
    return transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=40, n_positions=32, bos_token_id=0,
                                   eos_token_id=0)  # fmt: skip


def _bert_config() -> Any:
    return transformers.BertConfig(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                                   vocab_size=40, max_position_embeddings=32, pad_token_id=0)  # fmt: skip


def _probe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["probe", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize(("name", "config", "module"), [
    ("gpt2", _gpt2_config, "transformer.h.1.attn"),
    ("bert", _bert_config, "encoder.layer.1.attention.self"),
])  # fmt: skip
def test_a_config_alone_runs_with_random_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, config: Any, module: str
) -> None:
    path = tmp_path / "config.json"
    config().to_json_file(path)
    status, out, _ = _probe(capsys, str(path), "--tokens", "9", "--json")
    result = json.loads(out)
    assert status == 0 and result["passed"] and result["weights"].startswith("random init")
    assert [s["site"] for s in result["sites"]] == ["blocks.0.attn", "blocks.1.attn"]
    assert result["sites"][1]["module"] == module
    for row in result["sites"]:
        assert row["routing_law"] <= 1e-10 and row["routing_law_passed"] and row["value_law_passed"]
        assert 0.0 < row["entropy"] <= 2.2 and 1 / 9 <= row["max_responsibility"] <= 1.0  # log 9 = 2.197
    status, table, _ = _probe(capsys, str(path), "--dtype", "float32")
    assert status == 0 and "random init" in table and "float32" in table and table.count(" pass ") == 6


def _saved(tmp_path: Path, tokenizer: bool) -> Path:
    folder = tmp_path / "model"
    transformers.GPT2LMHeadModel(_gpt2_config()).save_pretrained(folder)
    if tokenizer:
        from tokenizers import Tokenizer, models, pre_tokenizers

        words = ["[UNK]", "the", "probe", "reads", "attention", "laws", "hold"]
        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_a_saved_model_folder_loads_its_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _probe(capsys, str(_saved(tmp_path, tokenizer=False)), "--tokens", "12", "--json")
    result = json.loads(out)
    assert status == 0 and result["weights"] == "loaded" and result["class"] == "GPT2LMHeadModel"
    assert result["input"].startswith("12 random tokens")


def test_text_goes_through_the_folders_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _probe(
        capsys, str(_saved(tmp_path, tokenizer=True)), "--text", "the probe reads the laws", "--json"
    )
    assert status == 0 and json.loads(out)["input"] == "text, 5 tokens"


def test_text_without_a_tokenizer_names_the_missing_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _probe(capsys, str(_saved(tmp_path, tokenizer=False)), "--text", "hello there")
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no tokenizer for --text" in err and "--tokens N" in err


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing", "no such file or directory"),
    (lambda p: p, "no config.json in this folder"),
    (lambda p: (p / "c.json").write_text("{not json") and p / "c.json", "not a readable JSON config"),
    (lambda p: (p / "c.json").write_text('{"n_layer": 2}') and p / "c.json", 'no "model_type"'),
    (lambda p: (p / "c.json").write_text('{"model_type": "no-such-model"}') and p / "c.json",
     "unknown model_type 'no-such-model'"),
    (lambda p: (p / "c.json").write_text('{"model_type": "gtp2"}') and p / "c.json",
     "unknown model_type 'gtp2' (close matches: gpt2"),
])  # fmt: skip
def test_bad_paths_give_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    status, out, err = _probe(capsys, str(make(tmp_path)))
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("implicit-em probe: error:") and message in err and "Traceback" not in err
    assert len(err) < 300  # transformers' own message for an unknown model type is one line of 12,000 characters


def test_a_truncated_safetensors_file_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old code let safetensors' SafetensorError through: a 29-line traceback and status 1 (a law failed)."""
    transformers.GPT2LMHeadModel(_gpt2_config()).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    status, out, err = _probe(capsys, str(tmp_path))
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"implicit-em probe: error: cannot load the model from {tmp_path}: SafetensorError")


def test_a_folder_without_weights_says_how_to_use_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpt2_config().save_pretrained(tmp_path)
    status, _, err = _probe(capsys, str(tmp_path))
    assert status == 2 and "no weights" in err and "config.json for a random initialisation" in err


def test_too_many_tokens_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _gpt2_config().to_json_file(tmp_path / "config.json")
    status, _, err = _probe(capsys, str(tmp_path / "config.json"), "--tokens", "33")
    assert status == 2 and "33 tokens exceed the model's 32 positions" in err


def test_bad_options_are_argparse_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["probe", str(tmp_path), "--dtype", "float16"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_the_table_gives_units_the_loss_and_flags_random_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    _gpt2_config().to_json_file(config)
    status, out, _ = _probe(capsys, str(config))
    assert status == 0
    assert "loss backpropagated: next-token cross-entropy" in out
    assert "max |autograd - law| / scale" in out and "entropy in nats" in out
    assert "note: random weights" in out
    status, out, _ = _probe(capsys, str(config), "--json")
    result = json.loads(out)
    assert result["loss"].startswith("next-token") and isinstance(result["same_numbers_everywhere"], bool)


def test_identical_numbers_at_every_site_are_flagged() -> None:
    from implicit_em._cli_probe import _same_numbers_everywhere

    row = {"entropy": 1.917, "max_responsibility": 0.212}
    assert _same_numbers_everywhere([row, dict(row), dict(row)])
    assert not _same_numbers_everywhere([row, {**row, "entropy": 1.5}])
    assert not _same_numbers_everywhere([row])  # one site: nothing to compare
