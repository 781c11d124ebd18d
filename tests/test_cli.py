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
