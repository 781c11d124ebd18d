"""Sizes that cannot decide by construction (``report/_sizes.py``): declared for registry experiments only, true of
the committed seed table, and said by the report and the audit's closing table beside the verdict (and only at the
size declared)."""

import json
from pathlib import Path

from _report_cases import results
from implicit_em.audit import EXPERIMENTS
from implicit_em.audit.summaries import WIDTH, closing_table
from implicit_em.report import render
from implicit_em.report._committed import committed_seed_rows
from implicit_em.report._sizes import CANNOT_DECIDE, cannot_decide


def test_every_declared_size_is_a_registry_experiment_s_and_undecided_at_every_committed_seed() -> None:
    names = {e.name for e in EXPERIMENTS}
    rows = committed_seed_rows()
    assert rows is not None  # a clone of the repository has the seed table
    for name, sizes in CANNOT_DECIDE.items():
        assert name in names
        assert set(sizes) <= {"quick", "full"} and all(len(why) > 40 for why in sizes.values())
        if "quick" in sizes:  # the seed table holds quick runs: a size declared unable to decide never decided
            assert set(rows[name]["verdicts"].values()) == {"UNDECIDED"}, name


def _with_smoke(size: str) -> dict[str, object]:
    state = results()
    state["size"] = size
    state["experiments"]["two_timescale"] = {  # type: ignore[index]
        "name": "two_timescale", "title": "Two timescales", "verdict": "UNDECIDED", "summary": "gates failed",
        "criteria": [{"metric": "tracks", "comparison": "<=", "threshold": 0.1, "measured": 0.6, "passed": False,
                      "role": "gate"}],
    }  # fmt: skip
    return state


def test_the_report_says_a_smoke_size_cannot_decide_at_that_size_only(tmp_path: Path) -> None:
    quick = render(_with_smoke("quick"), tmp_path)
    assert quick.count("cannot decide, by construction") == 2  # the contents table and the experiment's section
    assert cannot_decide("two_timescale", "quick") in quick
    assert "cannot decide, by construction" not in render(_with_smoke("full"), tmp_path)
    assert cannot_decide("theorem1", "quick") == ""


def test_the_closing_table_marks_the_smoke_size_row(tmp_path: Path) -> None:
    state = json.loads(json.dumps(_with_smoke("quick")))
    for rec in state["experiments"].values():
        rec.setdefault("code_hash", "h")
    rows = closing_table(state, None)
    marked = [r for r in rows if "this size cannot decide" in r]
    assert len(marked) == 1 and "two_timescale" in marked[0]
    assert all(len(r) <= WIDTH for r in rows)
    state["size"] = "full"
    assert not any("cannot decide" in r for r in closing_table(state, None))
