"""Seed stability of the claims audit: the quick audit at several seeds, one verdict table.

A verdict that flips with the seed is not a verdict. This runs ``implicit-em audit --quick --seed S`` for each seed
(resumable: each seed has its own run folder, so an interrupted run continues where it stopped) and prints, per
experiment, the verdict at every seed and whether they agree, as the markdown table of docs/audit.md; the table
and the per-seed summaries also go to ``OUT/seed-table.json``.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python tools/audit_seeds.py --seeds 0 1 2 --out runs/seeds

Where an experiment is rerun on its own (``implicit-em audit --quick --only NAME --seed S --out DIR``, one folder
per seed), ``--update TABLE DIR...`` replaces just the cells those folders hold in an existing table (docs/
audit-seed-table.json): each cell's verdict, summary and source (folder, commit, seconds), refusing a run on a
dirty checkout or at full size, and prints the regenerated markdown table:

    .venv/bin/python tools/audit_seeds.py --update docs/audit-seed-table.json runs/x/quick-s0 runs/x/quick-s1
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from implicit_em.audit import DECISIVE, EXPERIMENTS, run_audit


def seed_table(runs: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per experiment: its verdict at each seed, and ``stability``: ``"stable"`` when every seed gave the
    same decisive verdict (SUPPORTED, PARTIAL or REFUTED) or VERIFIED, ``"flips"`` when two seeds give different
    decisive verdicts (whatever the others gave), ``"undecided"`` when otherwise any seed's testbed could not decide
    (UNDECIDED: there is no verdict to be stable), ``"incomplete"`` when a seed did not run it or raised,
    ``"flips"`` otherwise. ``stable`` is True only for the first."""
    rows = []
    for exp in EXPERIMENTS:
        verdicts = {s: state["experiments"].get(exp.name, {}).get("verdict", "missing") for s, state in runs.items()}
        values = set(verdicts.values())
        if "missing" in values or "ERROR" in values:
            stability = "incomplete"
        elif (
            len(values & {*DECISIVE, "VERIFIED"}) > 1
        ):  # two decisive verdicts disagree: a flip, undecided seeds or not
            stability = "flips"
        elif "UNDECIDED" in values:
            stability = "undecided"
        elif len(values) == 1 and values <= {*DECISIVE, "VERIFIED"}:
            stability = "stable"
        else:
            stability = "flips"
        rows.append({"name": exp.name, "verdicts": verdicts, "stable": stability == "stable", "stability": stability})
    return rows


_STABILITY_CELL = {"stable": "yes", "undecided": "undecided", "incomplete": "incomplete", "flips": "**no**"}


def markdown(rows: list[dict[str, Any]], seeds: Sequence[int | str]) -> str:
    head = "| experiment | " + " | ".join(f"seed {s}" for s in seeds) + " | stable |"
    lines = [head, "|" + "---|" * (len(seeds) + 2)]
    for row in rows:
        cells = " | ".join(row["verdicts"][s] for s in seeds)
        lines.append(f"| `{row['name']}` | {cells} | {_STABILITY_CELL[row['stability']]} |")
    return "\n".join(lines)


def update_table(table: dict[str, Any], folders: list[Path]) -> dict[str, Any]:
    """``table`` (the JSON that docs/audit-seed-table.json holds) with the cells of the quick runs in ``folders``
    replaced: verdict, summary and source of every (experiment, seed) a folder's ``results.json`` records."""
    seeds = [int(s) for s in table["seeds"]]
    verdicts = {row["name"]: dict(row["verdicts"]) for row in table["rows"]}
    summaries = {str(s): dict(table["summaries"].get(str(s), {})) for s in seeds}
    sources = {name: dict(cells) for name, cells in table.get("sources", {}).items()}
    not_kept = dict(table.get("not_kept", {}))
    for folder in folders:
        run = json.loads((folder / "results.json").read_text())
        if run["size"] != "quick":
            raise SystemExit(f"{folder}: size {run['size']}, the seed table is quick")
        seed = str(run["seed"])
        if int(seed) not in seeds:
            raise SystemExit(f"{folder}: seed {seed} is not a column of the table ({seeds})")
        for name, record in run["experiments"].items():
            if record.get("dirty"):
                raise SystemExit(f"{folder}: {name} ran on a dirty checkout")
            verdicts.setdefault(name, {})[seed] = record["verdict"]
            summaries[seed][name] = record["summary"]
            sources.setdefault(name, {})[seed] = {
                "folder": str(folder),
                "commit": record.get("commit"),
                "seconds": record.get("seconds"),
            }
            not_kept.pop(f"{name} seed {seed}", None)
    runs = {s: {"experiments": {n: {"verdict": v[str(s)]} for n, v in verdicts.items() if str(s) in v}} for s in seeds}
    rows = seed_table(runs)
    for row in rows:  # the table's JSON keys its seeds as strings
        row["verdicts"] = {str(s): v for s, v in row["verdicts"].items()}
    return {**table, "rows": rows, "summaries": summaries, "sources": sources, "not_kept": not_kept}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/seeds", help="parent folder; seed S runs in OUT/seed-S")
    parser.add_argument("--only", default=None, help="comma-separated experiment names (default: all)")
    parser.add_argument(
        "--update", nargs="+", metavar=("TABLE", "DIR"), help="replace the cells that quick run folders DIR hold"
    )
    args = parser.parse_args(argv)
    if args.update:
        if len(args.update) < 2:
            parser.error("--update needs the table and at least one run folder")
        path, folders = Path(args.update[0]), [Path(f) for f in args.update[1:]]
        updated = update_table(json.loads(path.read_text()), folders)
        path.write_text(json.dumps(updated, indent=1, ensure_ascii=False) + "\n")
        print(markdown(updated["rows"], [str(s) for s in updated["seeds"]]))
        return 0
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
