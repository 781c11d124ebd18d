"""Write ``tests/data/audit_metric_units.json`` from a quick run folder: per experiment, the key, label and unit of
every metric it declared (the list ``tests/test_audit_metrics.py`` checks).

    python tools/audit_metric_units.py runs/demo
"""

import json
import sys
from pathlib import Path

_OUT = Path(__file__).parents[1] / "tests" / "data" / "audit_metric_units.json"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    state = json.loads((Path(args[0]) / "results.json").read_text())
    if state.get("size") != "quick":
        print(f"{args[0]} holds a {state.get('size')} run; the list is of a quick run", file=sys.stderr)
        return 2
    undeclared = {n: e["undeclared_metrics"] for n, e in state["experiments"].items() if e.get("undeclared_metrics")}
    if undeclared:
        print(f"metrics set without a unit: {undeclared}", file=sys.stderr)
        return 1
    table = {
        name: {k: {"label": d["label"], "unit": d["unit"]} for k, d in e.get("metric_info", {}).items()}
        for name, e in state["experiments"].items()
    }
    _OUT.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
    print(f"{_OUT}: {sum(len(v) for v in table.values())} metrics of {len(table)} experiments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
