"""tools/audit_pin.py: the pin of quick runs and the comparison that lists every difference."""

import json
from pathlib import Path
from typing import Any

from _scripts import benchmark_script


def _run(folder: Path, seed: int, verdict: str, kl: float) -> Path:
    record = {"verdict": verdict, "summary": "s", "metrics": {"kl": kl, "n": 3}, "criteria": [{"measured": kl}]}
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"size": "quick", "seed": seed, "experiments": {"a": record}}))
    return folder


def _pin(tmp_path: Path, name: str, runs: list[tuple[int, str, float]]) -> dict[str, Any]:
    pin = benchmark_script("audit_pin")
    return dict(pin.record([_run(tmp_path / f"{name}{s}", s, v, kl) for s, v, kl in runs]))


def test_equal_runs_compare_bitwise_equal(tmp_path: Path) -> None:
    pin = benchmark_script("audit_pin")
    old = _pin(tmp_path, "old", [(0, "SUPPORTED", 0.1), (1, "SUPPORTED", 0.2)])
    new = _pin(tmp_path, "new", [(0, "SUPPORTED", 0.1), (1, "SUPPORTED", 0.2)])
    lines, flipped = pin.compare(old, new, None)
    assert flipped == 0 and all(line.endswith("bitwise equal") for line in lines)


def test_a_changed_number_and_a_changed_verdict_are_listed(tmp_path: Path) -> None:
    pin = benchmark_script("audit_pin")
    old = _pin(tmp_path, "old", [(0, "SUPPORTED", 0.1), (1, "SUPPORTED", 0.2)])
    new = _pin(tmp_path, "new", [(0, "SUPPORTED", 0.1 + 1e-17 + 1e-16), (1, "PARTIAL", 0.2)])
    lines, flipped = pin.compare(old, new, None)
    assert flipped == 1
    assert "seed 0 a: SUPPORTED -> SUPPORTED, 2 differences" in lines
    assert any("metrics / kl: 0.1 -> 0.1000000000000001" in line for line in lines)
    assert "seed 1 a: SUPPORTED -> PARTIAL, bitwise equal  VERDICT CHANGED" in lines
