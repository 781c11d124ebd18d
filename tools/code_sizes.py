"""File and function sizes of a package folder, read with ast: lines per file, its longest function, and how many
functions exceed a limit.

    python tools/code_sizes.py src/implicit_em/audit [--limit 60] [--json OUT]
"""

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any


def sizes(folder: Path, limit: int) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        lengths = {f"{f.name}:{f.lineno}": (f.end_lineno or f.lineno) - f.lineno + 1 for f in funcs}
        longest = max(lengths.items(), key=lambda kv: kv[1], default=("-", 0))
        rows.append({
            "file": str(path.relative_to(folder)),
            "lines": len(text.splitlines()),
            "functions": len(funcs),
            "longest": longest[0],
            "longest_lines": longest[1],
            "over_limit": sum(v > limit for v in lengths.values()),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = sizes(args.folder, args.limit)
    for r in rows:
        print(f"{r['file']:<42}{r['lines']:>6} lines {r['functions']:>4} functions  longest {r['longest_lines']:>4}"
              f" ({r['longest']})  over {args.limit}: {r['over_limit']}")  # fmt: skip
    total = sum(r["lines"] for r in rows)
    print(f"{'total':<42}{total:>6} lines, {sum(r['over_limit'] for r in rows)} functions over {args.limit} lines")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
