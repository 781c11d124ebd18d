"""Merge audit run folders of one size and seed, each of which ran other experiments, into the first one.

    .venv/bin/python tools/merge_audit_runs.py DEST OTHER... [--replace NAME ...]

A full audit split over several processes (``implicit-em audit --full --only ... --out runs/X``, one per core)
ends in several folders; this copies every record of OTHER (with its figures) into DEST in registry order and
rewrites DEST's report. Every record keeps the commit, config and code hashes it ran with, so a resume in DEST
keeps exactly the records whose hashes match the code. A name already in DEST is an error unless it is listed
in ``--replace`` (a later rerun of it).
"""

import argparse
import json
import shutil
from pathlib import Path

from implicit_em.audit import EXPERIMENTS
from implicit_em.report import write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("others", type=Path, nargs="+")
    parser.add_argument("--replace", nargs="*", default=[], help="experiments of DEST that OTHER reruns")
    args = parser.parse_args()
    base = json.loads((args.dest / "results.json").read_text())
    for other in args.others:
        run = json.loads((other / "results.json").read_text())
        if (run["size"], run["seed"]) != (base["size"], base["seed"]):
            raise SystemExit(f"{other}: size/seed {run['size']}/{run['seed']}, DEST has {base['size']}/{base['seed']}")
        if run["provenance"].get("dirty"):
            raise SystemExit(f"{other}: ran on a dirty checkout")
        for name, record in run["experiments"].items():
            if name in base["experiments"] and name not in args.replace:
                raise SystemExit(f"{name} is in {args.dest} and {other} (use --replace {name})")
            base["experiments"][name] = record
            for fig in record.get("figures", []):
                (args.dest / fig).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(other / fig, args.dest / fig)
    order = [e.name for e in EXPERIMENTS]
    base["experiments"] = {n: base["experiments"][n] for n in order if n in base["experiments"]}
    base["provenance"]["merged_from"] = [str(p) for p in (args.dest, *args.others)]
    (args.dest / "results.json").write_text(json.dumps(base, indent=1))
    print(f"{write_report(args.dest)}: {len(base['experiments'])} experiments")


if __name__ == "__main__":
    main()
