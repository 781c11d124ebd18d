"""Reading a CSV for ``implicit-em fit``: ``_cli_data.read_data`` (pyarrow's reader when installed) against
pyarrow's own ``read_csv`` + ``to_numpy``, ``np.loadtxt`` and the csv-module reader it falls back to.

    python benchmarks/csv_read.py [--rows 1000000] [--cols 8] [--repeats 3]

Writes a CSV of random float64 values (shortest round-trip repr, a header row) into a temporary folder, then times
each reader ``--repeats`` times interleaved (the csv-module reader once: it is the slow one) and records medians,
the ratio of ``read_data`` to pyarrow's own time, torch-free (no torch import on this path), the CPU count and the
load average, in ``benchmarks/results/csv_read.json``. Every reader's array is checked equal to the others'.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from implicit_em import _cli_data

OUT = Path(__file__).parent / "results" / "csv_read.json"


def _pyarrow(path: Path) -> np.ndarray:
    from pyarrow import csv as pa_csv

    table = pa_csv.read_csv(path)
    return np.column_stack([c.to_numpy() for c in table.columns])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    x = np.random.default_rng(0).normal(size=(args.rows, args.cols))
    readers: dict[str, Callable[[Path], np.ndarray]] = {
        "read_data (pyarrow path)": lambda p: np.asarray(_cli_data.read_data(p).rows),
        "pyarrow read_csv + to_numpy": _pyarrow,
        "np.loadtxt": lambda p: np.loadtxt(p, delimiter=",", skiprows=1),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.csv"
        with path.open("w") as f:
            f.write(",".join(f"f{j}" for j in range(args.cols)) + "\n")
            for row in x:
                f.write(",".join(repr(float(v)) for v in row) + "\n")
        file_mb = path.stat().st_size / 1e6
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in readers}
        reference: np.ndarray | None = None
        for _ in range(args.repeats):
            for name, read in readers.items():
                start = time.perf_counter()
                got = read(path)
                times[name].append(time.perf_counter() - start)
                if reference is None:
                    reference = got
                assert np.array_equal(got, reference), name
        start = time.perf_counter()
        slow = _cli_data._read_text(path, ",").rows
        times["csv module (the fallback)"] = [time.perf_counter() - start]
        assert np.array_equal(slow, reference)
        load_after = os.getloadavg()
    medians = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "rows": args.rows,
        "cols": args.cols,
        "repeats": args.repeats,
        "file_mb": round(file_mb, 1),
        "median_s": medians,
        "read_data_over_pyarrow": medians["read_data (pyarrow path)"] / medians["pyarrow read_csv + to_numpy"],
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
