"""Where one EM pass spends its time, phase by phase, against the machine's float32 matmul rate (issue 14, part 3).

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/em_pass_profile.py [--n 1000000] [--threads 2]

One pass of ``fitter="em"`` over N rows (D = K = 16, full covariances, float32, the estimator's chunk size) is
``mixture._em.full_pass`` followed by the M-step; this times its phases separately, chunk by chunk, on the same
data and parameters, interleaving the repeats and reporting medians:

- features: φ(x − shift)ᵀ, (P, N) with P = D(D+1)/2 + D + 1 = 153 (``quadratic_features_t``);
- E-step GEMM: Aᵀφ, (K, N), 2·N·P·K flops;
- normalise: softmax and log-sum-exp over the K rows (``log_normalize``);
- statistics GEMM: R φᵀ, (K, P), 2·N·P·K flops, then the float64 unpacking;
- M-step: ``from_summaries`` (K Cholesky factorisations, once per pass).

The floor of a phase is the time its flops take at the matmul rate measured in the same run (best of 5 of a
2048³ float32 product); the two GEMMs are the only phases with O(N·P·K) flops, so the pass's floor is their sum.
Writes benchmarks/results/em_pass_profile.json. Nothing here changes the library.
"""

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from implicit_em.mixture import GaussianMixture, _stats
from implicit_em.mixture._fitting import CHUNK


def matmul_gflops() -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 2048**3 / best / 1e9


def one_pass(x: torch.Tensor, a: torch.Tensor, shift: torch.Tensor, params: Any) -> dict[str, float]:
    """Seconds per phase of one pass over ``x`` in chunks of CHUNK rows, and the whole pass as the library runs it."""
    t = dict.fromkeys(("features", "E-step GEMM", "normalise", "statistics GEMM", "M-step", "whole pass"), 0.0)
    d = x.shape[1]
    total: _stats.Summary | None = None
    for start in range(0, x.shape[0], CHUNK):
        chunk = x[start : start + CHUNK]
        t0 = time.perf_counter()
        phi_t = _stats.quadratic_features_t(chunk - shift)
        t1 = time.perf_counter()
        logp = a.T @ phi_t
        t2 = time.perf_counter()
        resp, log_norm = _stats.log_normalize(logp)
        t3 = time.perf_counter()
        nk, sx, sxx = _stats._unpack((resp @ phi_t.T).double(), d)
        t4 = time.perf_counter()
        n = torch.tensor(float(chunk.shape[0]), dtype=torch.float64)
        part = _stats.Summary(n, nk, sx, sxx, log_norm.double().sum())
        total = part if total is None else total + part
        t["features"] += t1 - t0
        t["E-step GEMM"] += t2 - t1
        t["normalise"] += t3 - t2
        t["statistics GEMM"] += t4 - t3
    assert total is not None
    t0 = time.perf_counter()
    _stats.from_summaries(total, shift.double(), 1e-6, "full", torch.float32)
    t["M-step"] = time.perf_counter() - t0
    t0 = time.perf_counter()  # the library's own pass (the phases above, fused in summarize), plus the M-step
    whole: _stats.Summary | None = None
    for start in range(0, x.shape[0], CHUNK):
        part, _ = _stats.summarize(x[start : start + CHUNK], a, shift)
        whole = part if whole is None else whole + part
    assert whole is not None
    _stats.from_summaries(whole, shift.double(), 1e-6, "full", torch.float32)
    t["whole pass"] = time.perf_counter() - t0
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/em_pass_profile.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    d = k = 16
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(k, d, generator=g) * 4
    x = centres[torch.randint(k, (args.n,), generator=g)] + torch.randn(args.n, d, generator=g)
    gm = GaussianMixture(k, covariance_type="full", max_iter=2, split_merge=0, random_state=0, dtype="float32")
    gm.fit(x[:100_000].numpy())  # parameters in the right neighbourhood; their values do not change the cost
    params = _stats.MixtureParams(
        *(torch.as_tensor(v) for v in (gm.weights_, gm.means_, gm.covariances_, gm.precisions_cholesky_))
    )
    shift = x[:100_000].mean(0)
    a = _stats.score_matrix(params, "full", shift).float()
    p = d * (d + 1) // 2 + d + 1
    rates, runs = [], []
    for _ in range(args.repeats):  # the matmul rate and the pass interleaved
        rates.append(matmul_gflops())
        runs.append(one_pass(x, a, shift, params))
    rate = statistics.median(rates)
    med = {phase: statistics.median(r[phase] for r in runs) for phase in runs[0]}
    gemm_floor = 2 * args.n * p * k / (rate * 1e9)  # one GEMM's flops at the matmul rate
    floors = {"E-step GEMM": gemm_floor, "statistics GEMM": gemm_floor}
    floor = 2 * gemm_floor
    report = {
        "command": "benchmarks/em_pass_profile.py",
        "n": args.n,
        "d": d,
        "k": k,
        "p": p,
        "chunk": CHUNK,
        "threads": args.threads,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "matmul_gflops_median": rate,
        "matmul_gflops_runs": rates,
        "seconds_median": med,
        "floor_seconds": {"pass (both GEMMs)": floor, **floors},
        "whole_pass_over_floor": med["whole pass"] / floor,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"N = {args.n:,}, D = K = {d}, P = {p}, chunk {CHUNK}, {args.threads} threads, load {load_before[0]:.2f}")
    print(f"matmul rate {rate:.1f} GFLOP/s (median of {args.repeats}); floor of a pass {floor * 1e3:.1f} ms")
    for phase, sec in med.items():
        extra = f"  ({sec / floors[phase]:.2f}x its floor)" if phase in floors else ""
        print(f"  {phase:<16} {sec * 1e3:8.1f} ms  {sec / floor:5.2f}x the pass floor{extra}")


if __name__ == "__main__":
    main()
