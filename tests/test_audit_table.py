"""The audit guide's table of results is ``tools/audit_table.py``'s output for the committed records, so the guide
shows no verdict the records do not hold; the tool's replacement keeps the rest of the page."""

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("audit_table", ROOT / "tools" / "audit_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guide_holds_the_table_of_the_committed_records() -> None:
    tool = _tool()
    text = (ROOT / "docs" / "audit.md").read_text()
    assert tool.replaced(text, tool.table()) == text, "run .venv/bin/python tools/audit_table.py --write"
    rows = [line for line in tool.table().splitlines() if line.startswith("| [`")]
    assert len(rows) == 18 and all(row.count(" | ") == 8 for row in rows)


def test_replacing_the_table_keeps_the_text_around_it() -> None:
    tool = _tool()
    text = f"before\n{tool.START}\nold\n{tool.END}\nafter\n"
    assert tool.replaced(text, "new") == f"before\n{tool.START}\nnew\n{tool.END}\nafter\n"
