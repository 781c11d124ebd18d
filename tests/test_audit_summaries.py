"""The one-line readings of audit records: each claim's finished line names its verdict and what decides it in at
most 120 characters, and the closing table sets this run's verdicts beside the committed full-size records."""

from pathlib import Path
from typing import Any

import pytest

from implicit_em.audit.summaries import WIDTH, closing_table, committed_full_records, deciding, finished_line


def _crit(metric: str, measured: float, comparison: str, threshold: float, passed: bool, role: str) -> dict[str, Any]:
    return {"metric": metric, "measured": measured, "comparison": comparison, "threshold": threshold,
            "passed": passed, "role": role}  # fmt: skip


CRITERIA = [
    _crit("the gate", 0.5, "<=", 0.1, False, "gate"),
    _crit("first test", 0.9, ">=", 0.8, True, "test"),
    _crit("second test", 0.1, ">=", 0.8, False, "test"),
    _crit("an identity", 0.0, "<=", 16.0, True, "identity"),
]


@pytest.mark.parametrize(
    ("verdict", "named"),
    [("UNDECIDED", "gate failed: the gate = 0.5 (<= 0.1)"), ("SUPPORTED", "first test = 0.9 (>= 0.8)"),
     ("REFUTED", "second test = 0.1 (>= 0.8)"), ("PARTIAL", "second test = 0.1 (>= 0.8)"),
     ("VERIFIED", "an identity = 0 (<= 16)")],
)  # fmt: skip
def test_the_deciding_criterion_follows_the_verdict(verdict: str, named: str) -> None:
    assert deciding({"verdict": verdict, "criteria": CRITERIA}) == named


def test_an_error_reads_its_summary_and_every_line_fits() -> None:
    assert deciding({"verdict": "ERROR", "criteria": [], "summary": "ValueError: bad. More"}) == "ValueError: bad"
    long = {"verdict": "SUPPORTED", "seconds": 12.3, "criteria": [_crit("x" * 300, 1.0, ">", 0.0, True, "test")]}
    line = finished_line("claim", long)
    assert len(line) == WIDTH and line.startswith("claim: SUPPORTED in 12 s; x") and line.endswith("…")


def test_every_committed_full_record_reads_in_one_short_line() -> None:
    full = committed_full_records()
    assert full is not None  # a clone of the repository has them
    for name, record in full["experiments"].items():
        line = finished_line(name, record)
        assert len(line) <= WIDTH and f"{name}: {record['verdict']} in" in line


def test_the_closing_table_flags_a_changed_code_hash_and_missing_records(tmp_path: Path) -> None:
    full = {"experiments": {"a": {"verdict": "REFUTED", "commit": "abcdef123", "code_hash": "h1"},
                            "b": {"verdict": "PARTIAL", "commit": "abcdef123", "code_hash": "h2"}}}  # fmt: skip
    run = {"size": "quick", "experiments": {
        "a": {"verdict": "UNDECIDED", "code_hash": "h1", "title": "Claim A"},
        "b": {"verdict": "PARTIAL", "code_hash": "other", "title": "Claim B"},
        "c": {"verdict": "SUPPORTED", "code_hash": "h3", "title": "Claim C"}}}  # fmt: skip
    rows = closing_table(run, full)
    assert "REFUTED @abcdef1" in rows[0] and "*" not in rows[0] and rows[0].rstrip().endswith("Claim A")
    assert "PARTIAL* @abcdef1" in rows[1]
    assert "no record" in rows[2]
    assert all("not in this install" in r for r in closing_table(run, None))
    assert committed_full_records(tmp_path / "absent.json") is None
    assert all(len(r) <= WIDTH for r in rows)
