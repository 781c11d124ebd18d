"""Which records of a stored audit are current: same config, same code, and what a resume would keep.

    .venv/bin/python tools/check_audit_records.py docs/audit-full-results.json

For every experiment of the registry it prints the record's verdict, the commit it ran at, and ``current`` or why a
resume in a folder holding this ``results.json`` would rerun it (its config or its code changed, naming the files;
missing; ERROR; a dirty checkout). It uses the runner's own test (``runner._stale``), minus the library versions:
those are this machine's, and the stored ones are printed instead. Exit status 0 when every record is current and
clean, 1 otherwise, so a session can check "every code hash current" before it says so.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from implicit_em.audit import EXPERIMENTS, Experiment
from implicit_em.audit import provenance as _provenance
from implicit_em.audit.runner import _stale


def check(
    results: dict[str, Any], experiments: Sequence[Experiment[Any]] = EXPERIMENTS
) -> list[tuple[str, str, str, str | None]]:
    """(name, verdict, commit, why) for each of ``experiments`` (the registry); ``why`` is None when current."""
    quick, seed = results["size"] == "quick", int(results["seed"])
    rows = []
    for exp in experiments:
        done = results["experiments"].get(exp.name)
        cfg = exp.config(quick, seed)
        code = _provenance.code_files(exp.run.__module__)
        why = _stale(done, _provenance.config_dict(cfg), _provenance.config_hash(cfg), code, {})
        if why is not None and why.startswith("library versions changed"):
            why = None  # the stored versions are the record's machine's; printed, not compared
        if why is None and done is not None and done.get("dirty"):
            why = "it ran on a dirty checkout"
        verdict = done["verdict"] if done else "-"
        commit = (done.get("commit") or "?")[:7] if done else "-"
        rows.append((exp.name, verdict, commit, why))
    return rows


def main(argv: list[str] | None = None, experiments: Sequence[Experiment[Any]] = EXPERIMENTS) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results.json (e.g. docs/audit-full-results.json)")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    rows = check(results, experiments)
    for name, verdict, commit, why in rows:
        print(f"{name:26s} {verdict:10s} {commit:8s} {why or 'current'}")
    stale = [name for name, _, _, why in rows if why is not None]
    print(f"{len(rows) - len(stale)} of {len(rows)} current ({results['size']}, seed {results['seed']})")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
