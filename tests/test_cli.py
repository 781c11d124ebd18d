"""Tests of the `implicit-em` command: the demo's law checks hold, and the controls visibly break them."""

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
