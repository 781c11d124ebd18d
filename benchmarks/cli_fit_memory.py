"""Peak memory and wall time of ``implicit-em fit`` on ``.npy`` files of 1e5, 1e6 and 3e6 rows: flat in N?

Writes float32 data (N x 16, drawn from 8 Gaussian blobs) to a temporary folder, then runs
``implicit-em fit X.npy --n-components 8 --fitter F --max-iter M --json --quiet`` in a fresh subprocess for each
N and fitter (``em`` and ``online_em``), one torch thread (``OMP_NUM_THREADS=1``). A ``.npy`` is streamed in
row batches (``_cli_data.NpyRows``), so what the process holds should not grow with N beyond the k-means sample
(at most 200,000 rows). Reported per run: wall seconds, peak RSS (the child's own ``ru_maxrss`` from
``os.wait4``, the per-child form of ``resource.getrusage(RUSAGE_CHILDREN)``) and the fit's statistics; the RSS of
a child that only imports the command is the baseline.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/cli_fit_memory.py
    .venv/bin/python benchmarks/cli_fit_memory.py --rows 20000,200000 --max-iter 5     # a quick look
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

_D, _K = 16, 8


def _write(path: Path, n: int, seed: int = 0) -> None:
    """N x 16 float32 rows from 8 blobs, written in blocks (the writer itself stays small)."""
    rng = np.random.RandomState(seed)
    centres = rng.randn(_K, _D).astype(np.float32) * 4
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, _D))
    for start in range(0, n, 100_000):
        rows = min(100_000, n - start)
        out[start : start + rows] = centres[rng.randint(0, _K, rows)] + rng.randn(rows, _D).astype(np.float32)
    out.flush()
    del out


def _child(args: list[str]) -> tuple[float, int, str]:
    """Run ``python args`` with one thread; (wall seconds, peak RSS in bytes, stdout)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.PIPE, env=env, text=True)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{args} exited {proc.returncode}: {err.strip()[-500:]}")
    return wall, int(usage.ru_maxrss) * 1024, text  # ru_maxrss is in kilobytes on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000,3000000", help="comma-separated N")
    parser.add_argument("--fitters", default="online_em,em")
    parser.add_argument("--max-iter", type=int, default=20, help="EM iterations or epochs (default 20)")
    parser.add_argument("--out", default="benchmarks/results/cli_fit_memory.json")
    args = parser.parse_args(argv)
    rows = [int(float(n)) for n in args.rows.split(",")]
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        _, baseline, _ = _child(["-c", "import implicit_em.cli, implicit_em.mixture"])
        print(f"baseline (imports only): peak RSS {baseline / 2**20:.0f} MiB")
        for n in rows:
            path = Path(tmp) / f"x{n}.npy"
            _write(path, n)
            for fitter in args.fitters.split(","):
                command = ["-m", "implicit_em.cli", "fit", str(path), "--n-components", str(_K), "--fitter", fitter]
                command += ["--max-iter", str(args.max_iter), "--json", "--quiet"]
                wall, rss, text = _child(command)
                fit = json.loads(text)
                record = {"n": n, "fitter": fitter, "file_mib": path.stat().st_size / 2**20, "wall_s": wall}
                record.update(peak_rss_mib=rss / 2**20, above_baseline_mib=(rss - baseline) / 2**20)
                record.update({key: fit[key] for key in ("log_likelihood", "n_iter", "converged", "seconds")})
                records.append(record)
                print(
                    f"N = {n:>9,}  {fitter:<10} file {record['file_mib']:6.1f} MiB  wall {wall:7.1f} s  peak RSS "
                    f"{record['peak_rss_mib']:6.0f} MiB (+{record['above_baseline_mib']:.0f} over imports)  "
                    f"loglik {fit['log_likelihood']:.4f}  iterations {fit['n_iter']}"
                )
            path.unlink()
    result = {
        "command": " ".join(["benchmarks/cli_fit_memory.py", *(argv if argv is not None else sys.argv[1:])]),
        "features": _D,
        "components": _K,
        "max_iter": args.max_iter,
        "baseline_rss_mib": baseline / 2**20,
        "runs": records,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
