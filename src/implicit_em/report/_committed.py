"""The committed audit records, where this installation has them (a clone of the repository does, an installed
wheel does not): the full-size records (``docs/audit-full-results.json``) and the quick audit's seed table
(``docs/audit-seed-table.json``: each claim's verdict at seeds 0 to 4 and whether they agree)."""

import json
from pathlib import Path
from typing import Any

__all__ = ["FULL_RECORDS", "SEED_TABLE", "committed_full_records", "committed_seed_rows", "full_size_cell", "seed_cell"]

FULL_RECORDS = Path(__file__).resolve().parents[3] / "docs" / "audit-full-results.json"
SEED_TABLE = Path(__file__).resolve().parents[3] / "docs" / "audit-seed-table.json"


def _read(path: Path) -> dict[str, Any] | None:
    """A committed JSON file, or None where this installation has no such file (or it is not JSON)."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def committed_full_records(path: Path = FULL_RECORDS) -> dict[str, Any] | None:
    """The committed full-size records, or None where this installation has no such file."""
    return _read(path)


def full_size_cell(record: dict[str, Any], ref: dict[str, Any]) -> str:
    """The committed full-size record ``ref`` of ``record``'s claim, as "VERDICT @commit" (``*`` after the verdict
    where ``ref``'s code hash is not ``record``'s)."""
    changed = "*" if ref.get("code_hash") != record.get("code_hash") else ""
    return f"{ref.get('verdict')}{changed} @{str(ref.get('commit') or '')[:7]}"


def committed_seed_rows(path: Path = SEED_TABLE) -> dict[str, dict[str, Any]] | None:
    """The seed table's rows by claim name (``verdicts`` by seed, ``stability``), or None where there is none."""
    table = _read(path)
    if table is None or not isinstance(table.get("rows"), list):
        return None
    return {str(row["name"]): row for row in table["rows"] if isinstance(row, dict) and "name" in row}


def seed_cell(row: dict[str, Any]) -> str:
    """A seed-table row in one cell: its stability, then its verdicts ("stable: PARTIAL ×5"), each with its seeds
    where they differ ("flips: PARTIAL ×4, SUPPORTED (seed 3)")."""
    by_verdict: dict[str, list[str]] = {}
    for seed, verdict in row.get("verdicts", {}).items():
        by_verdict.setdefault(str(verdict), []).append(str(seed))
    parts = sorted(by_verdict.items(), key=lambda kv: -len(kv[1]))
    words = [f"{v} ×{len(s)}" if len(s) > 1 or len(parts) == 1 else f"{v} (seed {s[0]})" for v, s in parts]
    return f"{row.get('stability', '?')}: {', '.join(words)}"
