"""Tests of the `implicit-em` command: the demo's law checks hold, and the controls visibly break them."""

import subprocess
import sys

import pytest
import torch

from implicit_em.cli import law_checks, main


@pytest.mark.parametrize("check", law_checks(), ids=lambda c: c.regime)
def test_demo_law_residuals(check: object) -> None:
    assert hasattr(check, "residual")
    r64, r32 = (float(check.residual(dt)) for dt in (torch.float64, torch.float32))  # type: ignore[attr-defined]
    if check.regime.startswith("control"):  # type: ignore[attr-defined]
        assert r64 > 0.1 and r32 > 0.1  # no responsibility law for unnormalised objectives
    else:
        assert r64 <= 1e-12
        assert r32 <= 1e-5


def test_demo_prints_every_regime(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for check in law_checks():
        assert check.regime in out and check.law in out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from implicit_em import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"implicit-em {__version__}"


def test_a_reader_that_closes_the_pipe_gets_no_traceback() -> None:
    """`implicit-em demo | head`: a reader that exits before the demo writes (`head -n 0` exits at once, and the
    demo's first write comes after importing torch), so every write meets a closed pipe."""
    import subprocess
    import sys

    demo = "import sys; from implicit_em.cli import main; sys.exit(main(['demo']))"
    cmd = f'"{sys.executable}" -c "{demo}" | head -n 0'
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141  # pipefail: the demo's own status, 128 + SIGPIPE


def test_the_wind_tunnel_is_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["windtunnel", "oracle", "--n-symbols", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["no_context_entropy_mae_bits"]["replacement=False"] == pytest.approx(1.107, abs=5e-4)
    assert main(["windtunnel", "train", "--preset", "tiny", "--n-symbols", "1", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("implicit-em windtunnel train: error:") and "n_symbols" in err and "Traceback" not in err


def test_wind_tunnel_help_shows_every_preset_value(capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses
    import re

    from implicit_em.windtunnel.config import WindTunnelConfig

    with pytest.raises(SystemExit):
        main(["windtunnel", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(before the preset)" not in text
    presets = {name: getattr(WindTunnelConfig, name)() for name in ("full", "quick", "tiny")}
    for f in dataclasses.fields(WindTunnelConfig):
        values = {name: getattr(cfg, f.name) for name, cfg in presets.items()}
        if len({repr(v) for v in values.values()}) > 1:  # the help names each preset's own value
            shown = ", ".join(f"{name} {value!r}" for name, value in values.items())
            assert shown in text, (f.name, shown)
    assert re.search(r"presets: full \d+, quick \d+, tiny \d+", text)  # at least one field differs between presets


@pytest.mark.parametrize(
    ("args", "expected"),
    [([], None), (["--replacement"], True), (["--no-replacement"], False), (["--replacement", "false"], False)],
)
def test_replacement_is_a_flag(args: list[str], expected: bool | None) -> None:
    from implicit_em.windtunnel.__main__ import build_parser

    parsed = build_parser().parse_args(["train", "--out", "x", *args])
    assert parsed.replacement is expected  # None: the preset decides


def test_training_logs_go_through_tqdm(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """While a run trains, the log handlers write with tqdm.write, so a log line never breaks the bar."""
    import importlib
    import logging

    from implicit_em.windtunnel.train import NonFiniteLossError

    seen: list[list[str]] = []

    def fake_train(*args: object, **kwargs: object) -> object:
        seen.append([type(h).__name__ for h in logging.getLogger().handlers])
        raise NonFiniteLossError("stop here", step=0, loss=float("nan"))

    # the command imports train when it runs (not at start-up): the module's function is what it calls
    monkeypatch.setattr(importlib.import_module("implicit_em.windtunnel.train"), "train", fake_train)
    assert main(["windtunnel", "train", "--preset", "tiny", "--out", str(tmp_path)]) == 1
    assert seen and "_TqdmLoggingHandler" in seen[0]


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["demo"],
        ["audit"],
        ["report"],
        ["windtunnel"],
        ["windtunnel", "train"],
        ["windtunnel", "oracle"],
        ["windtunnel", "summarize"],
    ],
    ids=lambda c: " ".join(c) or "implicit-em",
)
def test_help_text_has_no_rst_markup(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out  # the help was printed, so the checks below read it
    for markup in ("``", ":class:", ":func:", ":math:", ":meth:"):
        assert markup not in out, (markup, out)


def test_the_windtunnel_package_loads_its_names_on_first_use_and_train_stays_the_function() -> None:
    code = (
        "import sys, types\n"
        "import implicit_em.windtunnel as wt\n"
        "print('torch' in sys.modules)\n"
        "import implicit_em.windtunnel.train\n"  # the submodule: the import system binds the package's `train`
        "from implicit_em.windtunnel import train, StickyTestbed, WindTunnelConfig\n"
        "print(callable(train) and not isinstance(train, types.ModuleType), train.__module__)\n"
        "print(sorted(set(wt.__all__) - set(dir(wt))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split("\n")[:3] == ["False", "True implicit_em.windtunnel.train", "[]"], done.stderr
