"""Start-up of the ``implicit-em`` command: wall time of ``--help`` and of usage errors, against ``import torch``.

Each command runs as a fresh process (what a user types), the contenders interleaved round by round, and the
median of ``--repeats`` rounds is reported with the load average and the thread settings, to
``benchmarks/results/cli_startup.json``. ``import torch`` in the same run is the yardstick: a command that
imported torch before parsing its arguments could not start faster than it.

    .venv/bin/python benchmarks/cli_startup.py --repeats 15
    git worktree add /tmp/old 9216389 && .venv/bin/python benchmarks/cli_startup.py --baseline-src /tmp/old/src

``predict 150 rows``: a saved 3-component model scoring 150 rows of 4 features, the command's whole run (it
reads the model with numpy alone, ``implicit_em._model_file``; with ``--baseline-src`` of a checkout before that,
the same command through ``GaussianMixture.load``, which imports torch).

``--baseline-src`` adds every command run on another checkout's sources (``PYTHONPATH``), interleaved with the
current ones: the before/after ratio of one change, measured in one run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS: dict[str, list[str]] = {
    "implicit-em --help": ["-m", "implicit_em.cli", "--help"],
    "implicit-em fit --help": ["-m", "implicit_em.cli", "fit", "--help"],
    "implicit-em audit --help": ["-m", "implicit_em.cli", "audit", "--help"],
    "implicit-em probe --help": ["-m", "implicit_em.cli", "probe", "--help"],
    "implicit-em windtunnel --help": ["-m", "implicit_em.cli", "windtunnel", "--help"],
    "implicit-em windtunnel train --help (imports torch)": ["-m", "implicit_em.cli", "windtunnel", "train", "--help"],
    "fit on a missing file (error)": ["-m", "implicit_em.cli", "fit", "missing.npy", "--n-components", "2"],
    "fit --out a directory (error)": ["-m", "implicit_em.cli", "fit", "x.csv", "--n-components", "2", "--out", "d.npz"],
    "audit --only '' (error)": ["-m", "implicit_em.cli", "audit", "--only", ""],
    "predict 150 rows (iris-sized, K = 3)": ["-m", "implicit_em.cli", "predict", "model.npz", "rows.csv"],
    "python -c 'import torch' (yardstick)": ["-c", "import torch"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cli_startup.json")
    parser.add_argument("--baseline-src", type=Path, default=None, help="another checkout's src/, run alongside")
    args = parser.parse_args(argv)
    here = str(Path(__file__).resolve().parents[1] / "src")
    runs = {name: (cmd, here) for name, cmd in COMMANDS.items()}
    if args.baseline_src is not None:
        runs |= {f"baseline: {name}": (cmd, str(args.baseline_src.resolve())) for name, cmd in COMMANDS.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "x.csv").write_text("1,2\n3,4\n5,6\n")
        Path(tmp, "d.npz").mkdir()
        _predict_inputs(Path(tmp))
        for _ in range(args.repeats):
            for name, (cmd, src) in runs.items():  # interleaved: a load spike hits every contender alike
                env = {**os.environ, "PYTHONPATH": src}
                t0 = time.perf_counter()
                subprocess.run([sys.executable, *cmd], cwd=tmp, capture_output=True, check=False, env=env)
                times[name].append(time.perf_counter() - t0)
    medians = {name: statistics.median(t) for name, t in times.items()}
    torch_s = medians["python -c 'import torch' (yardstick)"]
    record = {
        "repeats": args.repeats,
        "baseline_src": None if args.baseline_src is None else str(args.baseline_src),
        "median_seconds": medians,
        "ratio_to_import_torch": {name: m / torch_s for name, m in medians.items()},
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": sys.version.split()[0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(f"median of {args.repeats} runs each (load average {load_before[0]:.2f} before)")
    for name, m in medians.items():
        print(f"  {name:<50} {m * 1000:8.0f} ms  ({m / torch_s:.2f}x import torch)")
    return 0


def _predict_inputs(folder: Path) -> None:
    """A fitted 3-component model of 150 rows in 4 features (iris' size) and those rows, for ``predict``."""
    import numpy as np

    from implicit_em import GaussianMixture

    rows = np.random.default_rng(0).normal(size=(150, 4)) + np.repeat(np.eye(4)[:3] * 4, 50, axis=0)
    np.savetxt(folder / "rows.csv", rows, delimiter=",")
    GaussianMixture(3, random_state=0).fit(rows).save(folder / "model.npz")


if __name__ == "__main__":
    sys.exit(main())
