"""The audit guide's table of results, from the committed records: each claim's quick verdicts at seeds 0 to 4
(``docs/audit-seed-table.json``) and its full-size record at seed 0 (``docs/audit-full-results.json``; ``*`` where the
record's config or code is not this checkout's, as ``tools/check_audit_records.py`` says).

    .venv/bin/python tools/audit_table.py            # print the table
    .venv/bin/python tools/audit_table.py --write    # replace the table in docs/audit.md

docs/audit.md holds the table between ``<!-- audit-table -->`` and ``<!-- /audit-table -->``;
``tests/test_audit_table.py`` checks that it is this tool's output for the committed files, so the guide cannot
show a verdict the records do not hold.
"""

import argparse
import sys
from pathlib import Path
from typing import Any

from implicit_em.audit import EXPERIMENTS
from implicit_em.audit import provenance as _provenance
from implicit_em.audit.runner import _stale
from implicit_em.report._committed import committed_full_records, committed_seed_rows
from implicit_em.report._sizes import cannot_decide

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "audit.md"
START, END = "<!-- audit-table -->", "<!-- /audit-table -->"


def table() -> str:
    """One row per registry experiment: its page, title, the five quick verdicts, stability, the full record."""
    seeds = committed_seed_rows() or {}
    records = committed_full_records() or {}
    full = records.get("experiments", {})
    lines = [
        "| experiment | claim | seed 0 | seed 1 | seed 2 | seed 3 | seed 4 | quick, over seeds | full size, seed 0 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for exp in EXPERIMENTS:
        row = seeds.get(exp.name, {})
        verdicts = [str(row.get("verdicts", {}).get(str(s), "—")) for s in range(5)]
        stability = str(row.get("stability", "—"))
        if cannot_decide(exp.name, "quick"):
            stability += " (a smoke size: cannot decide)"
        rec = full.get(exp.name)
        full_cell = f"{rec['verdict']} @{str(rec.get('commit') or '')[:7]}" if rec else "—"
        if rec and _changed_since(exp, rec, records):
            full_cell += " *"
        title = exp.title.replace("|", "\\|")
        lines.append(f"| [`{exp.name}`](claims/{exp.name}.md) | {title} | " + " | ".join(verdicts)
                     + f" | {stability} | {full_cell} |")  # fmt: skip
    return "\n".join(lines)


def _changed_since(exp: Any, rec: dict[str, Any], records: dict[str, Any]) -> bool:
    """Whether the record's config or code is not this checkout's (``tools/check_audit_records.py``'s test)."""
    cfg = exp.config(records["size"] == "quick", int(records["seed"]))
    code = _provenance.code_files(exp.run.__module__)
    why = _stale(rec, _provenance.config_dict(cfg), _provenance.config_hash(cfg), code, {})
    return why is not None and not why.startswith("library versions changed")


def replaced(text: str, new_table: str) -> str:
    """``text`` with the table between the markers replaced by ``new_table``."""
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{new_table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the table in docs/audit.md")
    args = parser.parse_args(argv)
    if args.write:
        GUIDE.write_text(replaced(GUIDE.read_text(), table()))
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
