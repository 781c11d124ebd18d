"""Throughput of GaussianMixture over torch.distributed: 1 process against 2 (gloo on CPU, one thread each).

Data: N rows of a 16-component full-covariance mixture in D = 16 (float32, in memory), split into contiguous
shards, one per process; every process generates the same data from the seed and keeps its rows. Each
configuration fits from the same given start (no k-means: the timing is the fitters'), with ``tol=0`` so every
run does the same work: batch EM for ``--em-iter`` iterations, online EM for ``--online-epochs`` epochs of
mini-batches of 4096 rows (one all-reduce per mini-batch). Throughput is N divided by the median seconds of an
EM iteration (one E-step pass over all shards, the all-reduce and the M-step) or of an online-EM epoch, from the
fit's ``history_``. The parameters the two configurations reach are compared as a check.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gmm_distributed.py

Writes benchmarks/results/gmm_distributed.json with the thread counts and the load average before and after.
``--quick`` is a seconds-long run.
"""

import argparse
import json
import math
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

K, D = 16, 16


def make_data(n: int, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """N float32 rows of a 16-component mixture, and a start (the true means, unit precisions, equal weights)."""
    rng = np.random.RandomState(seed)
    means = rng.randn(K, D) * 1.5
    a = rng.randn(K, D, D) / math.sqrt(D)
    chol = np.linalg.cholesky(a @ a.transpose(0, 2, 1) + 0.05 * np.eye(D))
    z = rng.randint(K, size=n)
    x = means[z] + np.einsum("nab,nb->na", chol[z], rng.randn(n, D))
    start = {"means_init": means, "weights_init": np.full(K, 1.0 / K), "precisions_init": np.stack([np.eye(D)] * K)}
    return x.astype(np.float32), start


def _fit(args: argparse.Namespace, x: np.ndarray, start: dict[str, np.ndarray], fitter: str) -> dict[str, Any]:
    from implicit_em.mixture import GaussianMixture

    units = args.em_iter if fitter == "em" else args.online_epochs
    gm = GaussianMixture(
        K, fitter=fitter, tol=0.0, max_iter=units, split_merge=0, batch_size=4096 if fitter != "em" else None, **start
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=0: a fixed amount of work, never "converged"
        gm.fit(x)
    total = time.perf_counter() - t0
    seconds = [float(h["seconds"]) for h in gm.history_[:units]]
    return {
        "seconds_per_unit": seconds,
        "median_seconds": statistics.median(seconds[1:] if len(seconds) > 2 else seconds),
        "fit_seconds": total,
        "means": gm.means_.tolist(),
        "lower_bound": float(gm.lower_bound_),
    }


def _run(rank: int, world: int, args: argparse.Namespace, out: str, init: str) -> None:
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        x, start = make_data(args.n, args.seed)
        lo, hi = args.n * rank // world, args.n * (rank + 1) // world
        shard = np.ascontiguousarray(x[lo:hi])
        del x
        result = {fitter: _fit(args, shard, start, fitter) for fitter in ("em", "online_em")}
        result["torch_threads"] = torch.get_num_threads()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
    finally:
        if world > 1:
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=400_000, help="rows over all processes")
    p.add_argument("--em-iter", type=int, default=6)
    p.add_argument("--online-epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/gmm_distributed.json")
    p.add_argument("--quick", action="store_true", help="a seconds-long run (N = 20,000, 3 iterations, 2 epochs)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.em_iter, args.online_epochs = 20_000, 3, 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: no network
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # one thread per process: the spawned children read it when numpy and torch load
    load_before = list(os.getloadavg())
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in (1, 2):
            out, init = str(Path(tmp) / f"w{world}.json"), str(Path(tmp) / f"init{world}")
            t0 = time.perf_counter()
            mp.spawn(_run, args=(world, args, out, init), nprocs=world, join=True)
            runs[str(world)] = {**json.loads(Path(out).read_text()), "wall_seconds": time.perf_counter() - t0}
    record: dict[str, Any] = {
        "benchmark": "gmm_distributed",
        "n_rows": args.n,
        "n_features": D,
        "n_components": K,
        "dtype": "float32",
        "em_iterations": args.em_iter,
        "online_em_epochs": args.online_epochs,
        "online_em_batch_size": 4096,
        "backend": "gloo",
        "torch_threads_per_process": runs["1"]["torch_threads"],
        "omp_num_threads": os.environ["OMP_NUM_THREADS"],
        "cpu_count": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": list(os.getloadavg()),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    for fitter, unit in (("em", "EM pass"), ("online_em", "online-EM pass")):
        sps = {w: args.n / runs[w][fitter]["median_seconds"] for w in ("1", "2")}
        diff = float(np.max(np.abs(np.array(runs["1"][fitter]["means"]) - np.array(runs["2"][fitter]["means"]))))
        record[fitter] = {
            "unit": unit,
            "samples_per_second": {f"{w}_process{'es' if w == '2' else ''}": sps[w] for w in ("1", "2")},
            "speedup": sps["2"] / sps["1"],
            "median_seconds": {w: runs[w][fitter]["median_seconds"] for w in ("1", "2")},
            "seconds_per_unit": {w: runs[w][fitter]["seconds_per_unit"] for w in ("1", "2")},
            "max_abs_means_difference_1_vs_2": diff,
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    for fitter in ("em", "online_em"):
        r = record[fitter]
        s1, s2 = r["samples_per_second"].values()
        print(f"{r['unit']:>15}: 1 process {s1:,.0f}/s, 2 processes {s2:,.0f}/s, speed-up {r['speedup']:.2f}x")
    print(f"load average before {load_before}, after {record['loadavg_after']}")
    return record


if __name__ == "__main__":
    main()
