"""Seed stability of the claims audit: the quick audit at several seeds, one verdict table.

A verdict that flips with the seed is not a verdict. This runs ``implicit-em audit --quick --seed S`` for each seed
(resumable: each seed has its own run folder, so an interrupted run continues where it stopped) and prints, per
experiment, the verdict at every seed and whether they agree, as the markdown table of docs/audit.md; the table
and the per-seed summaries also go to ``OUT/seed-table.json``.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/audit_seeds.py --seeds 0 1 2 --out runs/seeds
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from implicit_em.experiments import DECISIVE, EXPERIMENTS, run_audit


def seed_table(runs: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per experiment: its verdict at each seed, and ``stability``: ``"stable"`` when every seed gave the
    same decisive verdict (SUPPORTED, PARTIAL or REFUTED), ``"undecided"`` when any seed's testbed could not decide
    (UNDECIDED: there is no verdict to be stable), ``"incomplete"`` when a seed did not run it or raised,
    ``"flips"`` otherwise. ``stable`` is True only for the first."""
    rows = []
    for exp in EXPERIMENTS:
        verdicts = {s: state["experiments"].get(exp.name, {}).get("verdict", "missing") for s, state in runs.items()}
        values = set(verdicts.values())
        if "missing" in values or "ERROR" in values:
            stability = "incomplete"
        elif "UNDECIDED" in values:
            stability = "undecided"
        elif len(values) == 1 and values <= set(DECISIVE):
            stability = "stable"
        else:
            stability = "flips"
        rows.append({"name": exp.name, "verdicts": verdicts, "stable": stability == "stable", "stability": stability})
    return rows


_STABILITY_CELL = {"stable": "yes", "undecided": "undecided", "incomplete": "incomplete", "flips": "**no**"}


def markdown(rows: list[dict[str, Any]], seeds: list[int]) -> str:
    head = "| experiment | " + " | ".join(f"seed {s}" for s in seeds) + " | stable |"
    lines = [head, "|" + "---|" * (len(seeds) + 2)]
    for row in rows:
        cells = " | ".join(row["verdicts"][s] for s in seeds)
        lines.append(f"| `{row['name']}` | {cells} | {_STABILITY_CELL[row['stability']]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/seeds", help="parent folder; seed S runs in OUT/seed-S")
    parser.add_argument("--only", default=None, help="comma-separated experiment names (default: all)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    only = args.only.split(",") if args.only else None
    runs: dict[int, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for seed in args.seeds:
        runs[seed] = run_audit(out / f"seed-{seed}", quick=True, seed=seed, only=only, progress=True)
    rows = seed_table(runs)
    table = markdown(rows, args.seeds)
    summaries = {
        s: {n: {"verdict": r["verdict"], "summary": r["summary"]} for n, r in state["experiments"].items()}
        for s, state in runs.items()
    }
    record = {
        "seeds": args.seeds,
        "rows": rows,
        "summaries": summaries,
        "seconds": time.perf_counter() - t0,
        "loadavg": list(os.getloadavg()),
        "torch_threads": 1,
    }
    (out / "seed-table.json").write_text(json.dumps(record, indent=1))
    print(table)
    return (
        0 if all(row["stability"] in ("stable", "undecided") for row in rows) else 1
    )  # UNDECIDED is reported, not a flip


if __name__ == "__main__":
    sys.exit(main())
