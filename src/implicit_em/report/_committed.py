"""The committed full-size audit records (``docs/audit-full-results.json``), where this installation has them: a
clone of the repository does, an installed wheel does not."""

import json
from pathlib import Path
from typing import Any

__all__ = ["FULL_RECORDS", "committed_full_records"]

FULL_RECORDS = Path(__file__).resolve().parents[3] / "docs" / "audit-full-results.json"


def committed_full_records(path: Path = FULL_RECORDS) -> dict[str, Any] | None:
    """The committed full-size records, or None where this installation has no such file."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
