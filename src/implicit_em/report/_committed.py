"""The committed full-size audit records (``docs/audit-full-results.json``), where this installation has them: a
clone of the repository does, an installed wheel does not."""

import json
from pathlib import Path
from typing import Any

__all__ = ["FULL_RECORDS", "committed_full_records", "full_size_cell"]

FULL_RECORDS = Path(__file__).resolve().parents[3] / "docs" / "audit-full-results.json"


def committed_full_records(path: Path = FULL_RECORDS) -> dict[str, Any] | None:
    """The committed full-size records, or None where this installation has no such file."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def full_size_cell(record: dict[str, Any], ref: dict[str, Any]) -> str:
    """The committed full-size record ``ref`` of ``record``'s claim, as "VERDICT @commit" (``*`` after the verdict
    where ``ref``'s code hash is not ``record``'s)."""
    changed = "*" if ref.get("code_hash") != record.get("code_hash") else ""
    return f"{ref.get('verdict')}{changed} @{str(ref.get('commit') or '')[:7]}"
