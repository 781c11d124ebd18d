"""Pin the audit's behaviour: record every quick metric, criterion, verdict and summary of runs at several seeds,
and compare two pins, listing every difference.

    # one quick run per seed (any code), then the pin of those runs
    implicit-em audit --quick --seed S --out runs/pin/sS            # S = 0..4
    python tools/audit_pin.py record runs/pin/s0 ... runs/pin/s4 -o pin-before.json
    python tools/audit_pin.py compare pin-before.json pin-after.json [--only NAME ...]

``compare`` prints, per experiment and seed, the verdicts (old -> new) and every metric, criterion or summary that
differs (bitwise: ``==`` on the JSON values), and exits 1 when a verdict differs, 0 otherwise. Metric keys that
exist on one side only are listed as added or removed.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def record(run_dirs: list[Path]) -> dict[str, Any]:
    """``{seed: {experiment: {verdict, summary, metrics, criteria}}}`` of the runs in ``run_dirs``."""
    pin: dict[str, Any] = {}
    for run in run_dirs:
        results = json.loads((run / "results.json").read_text())
        seed = str(results["seed"])
        if seed in pin:
            raise SystemExit(f"two runs of seed {seed}: {run}")
        pin[seed] = {
            name: {k: rec.get(k) for k in ("verdict", "summary", "metrics", "criteria")}
            for name, rec in results["experiments"].items()
        }
    return pin


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if k not in new:
                out.append(f"{path}{k}: removed")
            elif k not in old:
                out.append(f"{path}{k}: added")
            else:
                _diff(old[k], new[k], f"{path}{k} / ", out)
    elif old != new:
        out.append(f"{path.rstrip(' /')}: {_short(old)} -> {_short(new)}")


def _short(value: Any, width: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def compare(old: dict[str, Any], new: dict[str, Any], only: list[str] | None) -> tuple[list[str], int]:
    lines, flipped = [], 0
    for seed in sorted(set(old) & set(new), key=int):
        names = [n for n in old[seed] if n in new[seed] and (only is None or n in only)]
        for name in names:
            a, b = old[seed][name], new[seed][name]
            same = a["verdict"] == b["verdict"]
            flipped += not same
            diffs: list[str] = []
            _diff({k: a[k] for k in ("metrics", "criteria", "summary")},
                  {k: b[k] for k in ("metrics", "criteria", "summary")}, "", diffs)  # fmt: skip
            state = "bitwise equal" if not diffs else f"{len(diffs)} differences"
            mark = "" if same else "  VERDICT CHANGED"
            lines.append(f"seed {seed} {name}: {a['verdict']} -> {b['verdict']}, {state}{mark}")
            lines += [f"    {d}" for d in diffs]
    return lines, flipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    rec = sub.add_parser("record", help="write the pin of quick runs")
    rec.add_argument("runs", nargs="+", type=Path)
    rec.add_argument("-o", "--out", type=Path, required=True)
    cmp_ = sub.add_parser("compare", help="list every difference between two pins")
    cmp_.add_argument("old", type=Path)
    cmp_.add_argument("new", type=Path)
    cmp_.add_argument("--only", nargs="+")
    args = parser.parse_args(argv)
    if args.verb == "record":
        args.out.write_text(json.dumps(record(args.runs), indent=1, ensure_ascii=False))
        return 0
    lines, flipped = compare(json.loads(args.old.read_text()), json.loads(args.new.read_text()), args.only)
    print("\n".join(lines))
    print(f"{flipped} verdict(s) changed")
    return 1 if flipped else 0


if __name__ == "__main__":
    sys.exit(main())
