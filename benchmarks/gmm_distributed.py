"""Throughput of GaussianMixture over torch.distributed: 1 process against 2 (gloo on CPU, one thread each).

Data: N rows of a 16-component full-covariance mixture in D = 16 (float32, in memory), split into contiguous
shards, one per process (generated once, read by every process from a temporary .npy). Each configuration fits
from the same given start (no k-means: the timing is the fitters'), with ``tol=0`` so every run does the same
work: batch EM for ``--em-iter`` iterations, and online EM for ``--online-epochs`` epochs at each mini-batch size
of ``--online-batch-sizes`` (4096, the default, and larger ones: one all-reduce per mini-batch, so the
synchronisation's share of a step falls as the batch grows). Throughput is N divided by the median seconds of an
EM iteration (one E-step pass over all shards, the all-reduce and the M-step) or of an online-EM epoch, from the
fit's ``history_``. The parameters 1 and 2 processes reach are compared as a check.

The 1- and 2-process runs are interleaved ``--repeats`` times (1, 2, 1, 2, ...), so a change of load on the
machine hits both alike; each speed-up is that repeat's 2-process throughput over its 1-process throughput, and
the table shows the median throughputs and every repeat's speed-up with their median.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gmm_distributed.py

Writes benchmarks/results/gmm_distributed.json (thread counts, load average before and after) and prints the
markdown table of docs/mixture.md; ``--table JSON`` prints that table from a JSON written earlier, without
running anything. ``--quick`` is a seconds-long run.
"""

import argparse
import json
import math
import os
import platform
import resource
import statistics
import sys
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


def _fit(
    x: np.ndarray, start: dict[str, np.ndarray], fitter: str, units: int, batch_size: int | None
) -> dict[str, Any]:
    from implicit_em.mixture import GaussianMixture

    gm = GaussianMixture(K, fitter=fitter, tol=0.0, max_iter=units, split_merge=0, batch_size=batch_size, **start)
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
    }


def _configs(args: argparse.Namespace) -> list[tuple[str, str, int, int | None]]:
    """(name, fitter, units, batch size) of every configuration timed."""
    out: list[tuple[str, str, int, int | None]] = [("em", "em", args.em_iter, None)]
    out += [(f"online_em_{b}", "online_em", args.online_epochs, b) for b in args.online_batch_sizes]
    return out


def _run(rank: int, world: int, args: argparse.Namespace, npy: str, out: str, init: str) -> None:
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        x = np.load(npy, mmap_mode="r", allow_pickle=False)
        lo, hi = args.n * rank // world, args.n * (rank + 1) // world
        shard = np.array(x[lo:hi])  # this process's rows, in memory
        _, start = make_data(0, args.seed)
        result: dict[str, Any] = {name: _fit(shard, start, f, u, b) for name, f, u, b in _configs(args)}
        result["torch_threads"] = torch.get_num_threads()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        if world > 1:
            dist.barrier()  # every process done before any tears its connections down (gloo aborts otherwise)
    finally:
        if world > 1:
            dist.destroy_process_group()


def _cpu_seconds() -> tuple[float, float]:
    """(CPU seconds every process on the machine has used since boot, from /proc/stat; CPU seconds of this
    process and its finished children): their growth over the run tells how much other jobs ran meanwhile."""
    own = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    mine = sum(r.ru_utime + r.ru_stime for r in own)
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:  # not Linux
        return math.nan, mine
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4))  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK"), mine


def _other_cpu(before: tuple[float, float], after: tuple[float, float]) -> float:
    """CPU seconds that other processes used between two :func:`_cpu_seconds` readings (about 0 on a quiet
    machine, up to the run's wall seconds per busy core when another job competed)."""
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1]))


def _label(name: str, default_batch: int) -> str:
    if name == "em":
        return "batch EM pass"
    b = int(name.rsplit("_", 1)[1])
    default = ", the default" if b == default_batch else ""
    return f"online EM epoch, mini-batches of {b:,}{default}"


def table(record: dict[str, Any]) -> str:
    """The markdown table of docs/mixture.md from a result JSON: median samples per second for 1 and 2
    processes, every repeat's speed-up and their median."""
    lines = [
        f"| N = {record['n_rows']:,}, D = {record['n_features']}, K = {record['n_components']} "
        f"| 1 process | 2 processes | speed-up (repeats) | median speed-up |",
        "|---|---|---|---|---|",
    ]
    for name, r in record["configs"].items():
        s1, s2 = (r["samples_per_second_median"][w] for w in ("1", "2"))
        each = ", ".join(f"{s:.2f}×" for s in r["speedups"])
        lines.append(
            f"| {_label(name, record['online_em_default_batch_size'])} | {s1 / 1e6:.2f} M/s | {s2 / 1e6:.2f} M/s "
            f"| {each} | **{r['speedup_median']:.2f}×** |"
        )
    load = record["loadavg_before"][0], record["loadavg_after"][0]
    lines.append("")
    other = record.get("other_processes_cpu_seconds", math.nan)
    lines.append(
        f"Load average (1 min) before {load[0]:.2f}, after {load[1]:.2f}; other processes used {other:.0f} CPU "
        f"seconds during the {record.get('wall_seconds', math.nan):.0f} s run; torch {record['torch']}."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=400_000, help="rows over all processes")
    p.add_argument("--em-iter", type=int, default=6)
    p.add_argument("--online-epochs", type=int, default=3)
    p.add_argument(
        "--online-batch-sizes", type=lambda s: [int(v) for v in s.split(",")], default=[4096, 16384, 32768, 65536]
    )
    p.add_argument("--repeats", type=int, default=3, help="interleaved 1- and 2-process runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/gmm_distributed.json")
    p.add_argument("--table", metavar="JSON", help="print the markdown table of a result JSON and exit")
    p.add_argument("--quick", action="store_true", help="a seconds-long run (N = 20,000, 2 iterations/epochs)")
    args = p.parse_args(argv)
    if args.table:
        record = json.loads(Path(args.table).read_text())
        print(table(record))
        return record
    if args.quick:
        args.n, args.em_iter, args.online_epochs, args.repeats = 20_000, 3, 2, 1
        args.online_batch_sizes = [4096]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: no network
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # one thread per process: the spawned children read it when numpy and torch load
    load_before = list(os.getloadavg())
    cpu_before, t_start = _cpu_seconds(), time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {"1": [], "2": []}
    restarts: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        npy = str(Path(tmp) / "x.npy")
        np.save(npy, make_data(args.n, args.seed)[0])
        for repeat in range(args.repeats):
            for world in (1, 2):
                out, init = str(Path(tmp) / f"w{world}r{repeat}.json"), str(Path(tmp) / f"init{world}r{repeat}")
                t0 = time.perf_counter()
                try:
                    mp.spawn(_run, args=(world, args, npy, out, init), nprocs=world, join=True)
                except mp.ProcessExitedException as died:  # gloo aborted (SIGABRT) twice in ~10 runs: retried once
                    restarts.append(f"{world} processes, repeat {repeat}: {died}")
                    print(f"restarting: {restarts[-1]}", file=sys.stderr)
                    init += "-again"
                    mp.spawn(_run, args=(world, args, npy, out, init), nprocs=world, join=True)
                runs[str(world)].append({**json.loads(Path(out).read_text()), "wall_seconds": time.perf_counter() - t0})
    record: dict[str, Any] = {
        "benchmark": "gmm_distributed",
        "n_rows": args.n,
        "n_features": D,
        "n_components": K,
        "dtype": "float32",
        "em_iterations": args.em_iter,
        "online_em_epochs": args.online_epochs,
        "online_em_batch_sizes": args.online_batch_sizes,
        "online_em_default_batch_size": 4096,
        "repeats": args.repeats,
        "order": "interleaved: 1, 2, 1, 2, ... processes",
        "backend": "gloo",
        "torch_threads_per_process": runs["1"][0]["torch_threads"],
        "omp_num_threads": os.environ["OMP_NUM_THREADS"],
        "cpu_count": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": list(os.getloadavg()),
        "other_processes_cpu_seconds": _other_cpu(cpu_before, _cpu_seconds()),
        "wall_seconds": time.perf_counter() - t_start,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "restarts": restarts,
        "configs": {},
    }
    for name, fitter, _, batch in _configs(args):
        sps = {w: [args.n / run[name]["median_seconds"] for run in runs[w]] for w in ("1", "2")}
        speedups = [b / a for a, b in zip(sps["1"], sps["2"], strict=True)]
        diff = max(
            float(np.max(np.abs(np.array(one[name]["means"]) - np.array(two[name]["means"]))))
            for one, two in zip(runs["1"], runs["2"], strict=True)
        )
        record["configs"][name] = {
            "fitter": fitter,
            "batch_size": batch,
            "unit": "EM pass" if fitter == "em" else "online-EM epoch",
            "samples_per_second": sps,
            "samples_per_second_median": {w: statistics.median(v) for w, v in sps.items()},
            "speedups": speedups,
            "speedup_median": statistics.median(speedups),
            "seconds_per_unit": {w: [run[name]["seconds_per_unit"] for run in runs[w]] for w in ("1", "2")},
            "max_abs_means_difference_1_vs_2": diff,
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(table(record))
    return record


if __name__ == "__main__":
    main()
