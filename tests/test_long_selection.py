"""The default selection (issue 26 §1): ``make test`` leaves out the tests of ``tests/long_tests.txt`` and CI runs
them. Every entry must name a test or a module-scoped fixture that exists (a stale entry would silently keep a
renamed test in the default run, or name nothing), and the mark must reach the tests it names."""

import ast
import subprocess
import sys
from pathlib import Path

from conftest import long_entries

ROOT = Path(__file__).resolve().parents[1]


def _definitions(path: Path) -> tuple[set[str], set[str]]:
    """The test functions (module level and in classes) and the module-scoped fixtures of a test file."""
    tree = ast.parse(path.read_text())
    tests = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
    fixtures = {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and any("fixture" in ast.unparse(d) and "scope=" in ast.unparse(d) for d in n.decorator_list)
    }
    return tests, fixtures


def test_every_entry_names_an_existing_test_or_module_fixture() -> None:
    entries = long_entries()
    assert len(entries) >= 20
    for entry in entries:
        path, _, name = entry.partition("::")
        assert (ROOT / path).is_file(), f"{entry}: no such file"
        tests, fixtures = _definitions(ROOT / path)
        if name.startswith("fixture:"):
            assert name.removeprefix("fixture:") in fixtures, f"{entry}: no module-scoped fixture of that name"
        else:
            assert name in tests, f"{entry}: no such test"


def test_the_default_selection_leaves_the_long_tests_out_and_test_long_selects_them() -> None:
    def collected(*marks: str) -> set[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", *marks, "tests/test_mixture_checkpoint.py",
             "tests/test_experiments_two_timescale.py"],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        return {line for line in done.stdout.splitlines() if "::" in line}

    default, long = collected(), collected("-m", "long")
    assert default and long and not default & long
    sigkill = "tests/test_mixture_checkpoint.py::test_resume_after_sigkill_equals_the_uninterrupted_fit["
    assert any(t.startswith(sigkill) for t in long) and not any(t.startswith(sigkill) for t in default)
    assert all("two_timescale" not in t for t in default if "test_quick_run_is_consistent" in t)
    assert any("two_timescale" in t and "test_quick_run_is_consistent" in t for t in long)  # through its fixture
