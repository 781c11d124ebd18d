"""Where the quick audit's time goes (issue 26: ``make demo`` within 3 minutes on a 2-core machine at load 2).

Reads the ``results.json`` of one or more audit runs (``runs/demo/results.json`` after ``make demo``) and prints,
per run, the worker seconds of each experiment (slowest first), their sum, the jobs, the load average when the run
started, and the least wall time any schedule of those experiments on that many workers could take:
max(sum / jobs, the slowest experiment), since an experiment runs on one worker. The experiments' own clocks
exclude process start-up and the report, which the run's wall time (the fresh clone's log) includes.

    .venv/bin/python tools/quick_audit_time.py runs/demo/results.json [OTHER.json ...] [--write OUT.json]
"""

import argparse
import json
from pathlib import Path
from typing import Any


def breakdown(path: Path) -> dict[str, Any]:
    """One run's per-experiment seconds, their sum and the schedule bound."""
    state = json.loads(path.read_text())
    env, prov = state.get("environment", {}), state.get("provenance", {})
    seconds = {name: float(rec["seconds"]) for name, rec in state["experiments"].items() if "seconds" in rec}
    jobs = int(env.get("audit_jobs", {}).get("jobs", 1))
    total = sum(seconds.values())
    return {
        "run": str(path),
        "size": state.get("size"),
        "seed": state.get("seed"),
        "commit": prov.get("commit"),
        "dirty": prov.get("dirty"),
        "date": env.get("date"),
        "cpu_count": env.get("cpu_count"),
        "jobs": jobs,
        "threads_per_job": env.get("audit_jobs", {}).get("threads_per_job"),
        "loadavg_at_start": env.get("loadavg"),
        "experiments": len(seconds),
        "worker_seconds": dict(sorted(seconds.items(), key=lambda kv: -kv[1])),
        "worker_seconds_total": total,
        "least_wall_s": max(total / jobs, max(seconds.values(), default=0.0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--write", type=Path, help="also write the breakdowns as JSON")
    args = parser.parse_args()
    runs = [breakdown(p) for p in args.results]
    for r in runs:
        print(f"{r['run']} ({r['size']}, seed {r['seed']}, {str(r['commit'])[:7]}, {r['jobs']} jobs x "
              f"{r['threads_per_job']} thread, load at start {r['loadavg_at_start']})")  # fmt: skip
        for name, sec in r["worker_seconds"].items():
            print(f"  {name:26s} {sec:7.1f} s")
        print(f"  {'total worker time':26s} {r['worker_seconds_total']:7.1f} s; least wall time on {r['jobs']} "
              f"workers {r['least_wall_s']:.0f} s")  # fmt: skip
    if args.write:
        args.write.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
