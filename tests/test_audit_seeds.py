"""tools/audit_seeds.py: the seed table flags an experiment whose verdict flips with the seed."""

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from _scripts import benchmark_script
from implicit_em.audit import EXPERIMENTS


def _script() -> ModuleType:
    return benchmark_script("audit_seeds")


def test_a_flipping_verdict_is_flagged_and_a_stable_one_is_not() -> None:
    script = _script()
    first, second = EXPERIMENTS[0].name, EXPERIMENTS[1].name
    runs = {
        s: {"experiments": {first: {"verdict": "SUPPORTED"}, second: {"verdict": "PARTIAL" if s else "REFUTED"}}}
        for s in (0, 1, 2)
    }
    rows = {row["name"]: row for row in script.seed_table(runs)}
    assert rows[first]["stable"] and not rows[second]["stable"]
    assert rows[second]["verdicts"] == {0: "REFUTED", 1: "PARTIAL", 2: "PARTIAL"}
    assert rows[EXPERIMENTS[2].name]["verdicts"][0] == "missing"  # not run at all: never counted as agreeing
    table = script.markdown(list(rows.values()), [0, 1, 2])
    assert f"| `{second}` | REFUTED | PARTIAL | PARTIAL | **no** |" in table
    assert f"| `{first}` | SUPPORTED | SUPPORTED | SUPPORTED | yes |" in table


def test_an_undecided_seed_is_never_called_stable() -> None:
    """UNDECIDED at every seed agrees, but there is no verdict to be stable: the table says "undecided"."""
    script = _script()
    first, second, third = (e.name for e in EXPERIMENTS[:3])
    runs = {
        s: {
            "experiments": {
                first: {"verdict": "UNDECIDED"},
                second: {"verdict": "UNDECIDED" if s == 1 else "PARTIAL"},
                third: {"verdict": "REFUTED"},
            }
        }
        for s in (0, 1, 2)
    }
    rows = {row["name"]: row for row in script.seed_table(runs)}
    assert [rows[n]["stability"] for n in (first, second, third)] == ["undecided", "undecided", "stable"]
    assert not rows[first]["stable"] and not rows[second]["stable"] and rows[third]["stable"]
    assert rows[EXPERIMENTS[3].name]["stability"] == "incomplete"
    table = script.markdown(list(rows.values()), [0, 1, 2])
    assert f"| `{first}` | UNDECIDED | UNDECIDED | UNDECIDED | undecided |" in table
    # an undecided seed does not hide two decisive verdicts that disagree
    mixed = {s: {"experiments": {first: {"verdict": ("UNDECIDED", "PARTIAL", "REFUTED")[s]}}} for s in (0, 1, 2)}
    assert script.seed_table(mixed)[0]["stability"] == "flips"
    assert f"| `{second}` | PARTIAL | UNDECIDED | PARTIAL | undecided |" in table


def _table(names: list[str], verdict: str) -> dict[str, Any]:
    """A seed table as docs/audit-seed-table.json holds it: seeds 0-2, every cell ``verdict``."""
    cells = {str(s): verdict for s in (0, 1, 2)}
    return {
        "seeds": [0, 1, 2],
        "rows": [{"name": n, "verdicts": dict(cells), "stable": True} for n in names],
        "summaries": {str(s): {n: f"old {n} {s}" for n in names} for s in (0, 1, 2)},
        "sources": {n: {str(s): {"folder": "old", "commit": "a", "seconds": 1.0} for s in (0, 1, 2)} for n in names},
        "not_kept": {f"{names[0]} seed 2": verdict},
        "torch_threads": 1,
    }


def _run(folder: Path, seed: int, records: dict[str, str], size: str = "quick", dirty: bool = False) -> Path:
    folder.mkdir(parents=True)
    experiments = {
        n: {"verdict": v, "summary": f"new {n} {seed}", "commit": "b", "dirty": dirty, "seconds": 2.0}
        for n, v in records.items()
    }
    (folder / "results.json").write_text(json.dumps({"size": size, "seed": seed, "experiments": experiments}))
    return folder


def test_update_replaces_only_the_cells_the_folders_hold(tmp_path: Path) -> None:
    """A rerun at seed 2 that flips one experiment's verdict makes its row flip; the other cells keep their
    verdicts, summaries and sources, and a replaced cell drops out of ``not_kept``."""
    script = _script()
    first, second = EXPERIMENTS[0].name, EXPERIMENTS[1].name
    table = _table([first, second], "SUPPORTED")
    new = script.update_table(table, [_run(tmp_path / "s2", 2, {first: "REFUTED"})])
    rows = {row["name"]: row for row in new["rows"]}
    assert rows[first]["verdicts"] == {"0": "SUPPORTED", "1": "SUPPORTED", "2": "REFUTED"}
    assert rows[first]["stability"] == "flips" and not rows[first]["stable"]
    assert rows[second]["stability"] == "stable"
    assert new["summaries"]["2"][first] == f"new {first} 2" and new["summaries"]["1"][first] == f"old {first} 1"
    assert new["sources"][first]["2"] == {"folder": str(tmp_path / "s2"), "commit": "b", "seconds": 2.0}
    assert new["sources"][second]["2"]["commit"] == "a"
    assert f"{first} seed 2" not in new["not_kept"]
    assert f"| `{first}` | SUPPORTED | SUPPORTED | REFUTED | **no** |" in script.markdown(new["rows"], ["0", "1", "2"])


@pytest.mark.parametrize(("size", "seed", "dirty"), [("full", 0, False), ("quick", 7, False), ("quick", 0, True)])
def test_update_refuses_a_full_run_an_unknown_seed_or_a_dirty_checkout(
    tmp_path: Path, size: str, seed: int, dirty: bool
) -> None:
    script = _script()
    name = EXPERIMENTS[0].name
    folder = _run(tmp_path / "run", seed, {name: "REFUTED"}, size=size, dirty=dirty)
    with pytest.raises(SystemExit):
        script.update_table(_table([name], "SUPPORTED"), [folder])
