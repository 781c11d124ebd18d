"""The README's Python blocks run as written, in order, in one namespace, from an empty working folder.

A block that stopped running (a renamed argument, a removed name) fails here; the README's figures are checked
where they are produced (benchmarks/ and the audit), not here.
"""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[str]:
    return _BLOCK.findall(README.read_text())


def test_the_readme_has_one_python_example_per_part() -> None:
    blocks = _blocks()
    assert len(blocks) == 4  # objectives, mixtures, probes, wind tunnels
    assert all(5 <= len(b.strip().splitlines()) <= 12 for b in blocks), [len(b.splitlines()) for b in blocks]


@pytest.mark.parametrize("index", range(4), ids=["objectives", "mixtures", "probes", "windtunnels"])
def test_a_readme_block_runs_as_written(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the mixture block saves model.npz where it runs
    code = _blocks()[index]
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})


def test_the_readme_is_short_and_has_no_overlong_line() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 250
    assert max(map(len, lines)) <= 400
