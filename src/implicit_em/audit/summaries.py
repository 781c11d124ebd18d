"""One-line readings of audit records: the line a run prints as each claim finishes, and the closing table beside
the committed full-size records (``docs/audit-full-results.json`` in a clone of the repository).

A record's summary says everything and runs to hundreds of characters; the report shows it. A terminal gets one
line per claim under :data:`WIDTH` characters: the verdict, the wall time and the one criterion that decides it
(:func:`deciding`).
"""

from typing import Any

from implicit_em.report._committed import committed_full_records, full_size_cell
from implicit_em.report._sizes import cannot_decide

__all__ = ["WIDTH", "closing_table", "committed_full_records", "deciding", "finished_line"]

WIDTH = 120  #: the longest line printed per claim


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def deciding(record: dict[str, Any]) -> str:
    """The criterion that decides the record's verdict, in a few words: for UNDECIDED the first failed gate; for
    SUPPORTED the first test; for REFUTED and PARTIAL the first test that failed; for VERIFIED the first identity;
    for ERROR the summary's first sentence."""
    verdict, crit = record.get("verdict", ""), list(record.get("criteria") or [])
    if verdict == "ERROR" or not crit:
        return str(record.get("summary", "")).split(". ")[0]
    if verdict == "UNDECIDED":
        pick = [c for c in crit if c.get("role") == "gate" and not c.get("passed")]
        prefix = "gate failed: "
    elif verdict == "VERIFIED":
        pick, prefix = [c for c in crit if c.get("role") == "identity"], ""
    else:
        tests = [c for c in crit if c.get("role") == "test"]
        pick, prefix = ([c for c in tests if c.get("passed")] if verdict == "SUPPORTED" else
                        [c for c in tests if not c.get("passed")]) or tests, ""  # fmt: skip
    c = (pick or crit)[0]
    value = c.get("measured")
    shown = f"{value:.3g}" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)
    return f"{prefix}{c.get('metric')} = {shown} ({c.get('comparison')} {c.get('threshold'):g})"


def finished_line(name: str, record: dict[str, Any]) -> str:
    """``name: VERDICT in 12 s; <what decides>``, at most :data:`WIDTH` characters."""
    return _short(f"{name}: {record['verdict']} in {record['seconds']:.0f} s; {deciding(record)}", WIDTH)


def closing_table(state: dict[str, Any], full: dict[str, Any] | None) -> list[str]:
    """One row per experiment of ``state`` (a run's results): its verdict here, the committed full-size record's
    verdict and commit (flagged where that record's code hash is not this run's), and the claim's title; every row
    at most :data:`WIDTH` characters."""
    records = (full or {}).get("experiments", {})
    rows = []
    for name, rec in state["experiments"].items():
        ref = records.get(name)
        if state.get("size") == "full":
            other = ""
        elif ref is None:
            other = "no record" if full is not None else "not in this install"
        else:
            other = full_size_cell(rec, ref)
        title = rec.get("title", "")
        if cannot_decide(name, str(state.get("size"))):
            title = f"[this size cannot decide: a smoke size] {title}"
        rows.append(_short(f"  {rec['verdict']:<10}{name:<24}{other:<22}{title}", WIDTH))
    return rows
