"""benchmarks/audit_seeds.py: the seed table flags an experiment whose verdict flips with the seed."""

import importlib.util
from pathlib import Path
from types import ModuleType

from implicit_em.experiments import EXPERIMENTS


def _script() -> ModuleType:
    path = Path(__file__).parents[1] / "benchmarks" / "audit_seeds.py"
    spec = importlib.util.spec_from_file_location("audit_seeds", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    assert f"| `{second}` | PARTIAL | UNDECIDED | PARTIAL | undecided |" in table
