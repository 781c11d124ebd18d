"""Where one EM pass spends its time, phase by phase, against the machine's float32 matmul rate (issue 14, part 3).

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/em_pass_profile.py [--n 1000000] [--threads 2]

One pass of ``fitter="em"`` over N rows (D = K = 16, full covariances, float32, batches of the estimator's
CHUNK rows) is ``mixture._em.full_pass`` followed by the M-step. In float32 that pass is the fused one of
``mixture/_fused.py`` (chunks of SUB_CHUNK rows, one Python thread per intra-op thread, each running torch
single-threaded); this times its phases chunk by chunk inside each worker thread, on the same data and
parameters, interleaving the repeats and reporting medians (a phase's time is the mean over the workers of the
time each spent in it, so the phases add up to about the pass):

- features: φ(x − shift)ᵀ in circulant order, (P, B) with P = D(D+1)/2 + D + 1 = 153, into a reused buffer;
- E-step GEMM: Aᵀφᵀ, (K, B), 2·B·P·K flops (oneDNN's linear kernel where torch has it, as the library);
- normalise: softmax and log-sum-exp over the K rows (``_stats.log_normalize``);
- statistics GEMM: R φ, (K, P), 2·B·P·K flops, added to the float64 sums;
- M-step: ``from_summaries`` (K Cholesky factorisations, once per pass).

It also times the whole pass as the library runs it (``fused_pass_summary`` then the M-step), the same pass with
its E-step GEMM on ``torch.mm`` (as before issue 14's fifth session), and the pass before the fused one
(``_stats.summarize`` per batch, intra-op threads) on the same data. The floor of a phase
is the time its flops take at the matmul rate measured in the same run (best of 5 of a 2048³ float32 product,
all threads); the two GEMMs are the only phases with O(N·P·K) flops, so the pass's floor is their sum. The
write floor of the features is the time ``fill_`` takes to write the same φ buffers (each worker its own).
Writes benchmarks/results/em_pass_profile.json. Nothing here changes the library.
"""

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from gmm_vs_peers import matmul_gflops  # the same 2048³ rate the peer benchmark measures (this script's folder)

from implicit_em.mixture import GaussianMixture, _fused, _stats
from implicit_em.mixture._fitting import CHUNK

PHASES = ("features", "E-step GEMM", "normalise", "statistics GEMM")


def _worker_phases(sums: _fused._Sums, x: torch.Tensor, shift: torch.Tensor, t: dict[str, float]) -> None:
    """``_fused._Workspace.add`` with a timer between its operations (the same calls, in the same order)."""
    ws = sums.ws
    for start in range(0, x.shape[0], ws.rows):
        t0 = time.perf_counter()
        phi_t = ws.features(x[start : start + ws.rows], shift)
        t1 = time.perf_counter()
        logp = ws.scores(phi_t, sums.a_t)  # the library's E-step GEMM (oneDNN's kernel where torch has it)
        t2 = time.perf_counter()
        resp, log_norm = _stats.log_normalize(logp)
        t3 = time.perf_counter()
        assert sums.s is not None
        sums.s += ws.statistics(resp, phi_t)
        sums.loglik += log_norm.sum(dtype=torch.float64)
        t4 = time.perf_counter()
        for phase, sec in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            t[phase] += sec


def _write_floor(x: torch.Tensor, workers: int) -> float:
    """Seconds for each worker to fill_ its φ buffer once per chunk of its share of x (the bytes φ writes)."""
    rows, p = _fused.SUB_CHUNK, 153
    bufs = [torch.empty(p, rows) for _ in range(workers)]

    def fill(buf: torch.Tensor) -> None:
        for _ in range(0, x.shape[0] // workers, rows):
            buf.fill_(1.0)

    t0 = time.perf_counter()
    with _fused._one_thread_per_op(), ThreadPoolExecutor(workers, initializer=_fused._one_thread) as pool:
        list(pool.map(fill, bufs))
    return time.perf_counter() - t0


@contextlib.contextmanager
def _mm_e_step() -> Iterator[None]:
    """The fused pass with its E-step GEMM on torch.mm instead of oneDNN's kernel, while the block runs."""
    real = _fused._linear_for
    _fused._linear_for = lambda dtype, device: None
    try:
        yield
    finally:
        _fused._linear_for = real


def one_pass(x: torch.Tensor, a: torch.Tensor, shift: torch.Tensor, workers: int) -> dict[str, float]:
    """Seconds per phase of one fused pass over ``x`` (per worker), and the whole pass, old and new."""
    d = x.shape[1]
    order = _fused.circulant_order(d)
    a_t = a[order].T.contiguous()
    sums = [_fused._Sums(_fused.SUB_CHUNK, a_t, d) for _ in range(workers)]
    per_worker = [dict.fromkeys(PHASES, 0.0) for _ in range(workers)]
    with _fused._one_thread_per_op(), ThreadPoolExecutor(workers, initializer=_fused._one_thread) as pool:
        for start in range(0, x.shape[0], CHUNK):
            batch = x[start : start + CHUNK]
            block = -(-batch.shape[0] // (workers * _fused.SUB_CHUNK)) * _fused.SUB_CHUNK
            jobs = [
                pool.submit(_worker_phases, w, batch[i * block : (i + 1) * block], shift, per_worker[i])
                for i, w in enumerate(sums)
            ]
            for job in jobs:
                job.result()
    t = {phase: statistics.mean(w[phase] for w in per_worker) for phase in PHASES}
    total = _fused.fused_pass_summary((x[i : i + CHUNK] for i in range(0, x.shape[0], CHUNK)), a, shift)
    assert total is not None
    t0 = time.perf_counter()
    _stats.from_summaries(total, shift.double(), 1e-6, "full", torch.float32)
    t["M-step"] = time.perf_counter() - t0
    t0 = time.perf_counter()  # the library's own pass, plus the M-step
    total = _fused.fused_pass_summary((x[i : i + CHUNK] for i in range(0, x.shape[0], CHUNK)), a, shift)
    assert total is not None
    _stats.from_summaries(total, shift.double(), 1e-6, "full", torch.float32)
    t["whole pass"] = time.perf_counter() - t0
    t0 = time.perf_counter()  # the same pass with the E-step GEMM on torch.mm (MKL), as before issue 14's 5th session
    with _mm_e_step():
        total = _fused.fused_pass_summary((x[i : i + CHUNK] for i in range(0, x.shape[0], CHUNK)), a, shift)
    assert total is not None
    _stats.from_summaries(total, shift.double(), 1e-6, "full", torch.float32)
    t["whole pass, E-step on torch.mm"] = time.perf_counter() - t0
    t0 = time.perf_counter()  # the pass before the fused one: summarize per batch, intra-op threads
    old: _stats.Summary | None = None
    for start in range(0, x.shape[0], CHUNK):
        part, _ = _stats.summarize(x[start : start + CHUNK], a, shift)
        old = part if old is None else old + part
    assert old is not None
    _stats.from_summaries(old, shift.double(), 1e-6, "full", torch.float32)
    t["whole pass before (summarize)"] = time.perf_counter() - t0
    t["features write floor (fill_)"] = _write_floor(x, workers)
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
    one_pass(x, a, shift, args.threads)  # warm-up: buffers, thread pools, first-call costs
    rates, runs = [], []
    for _ in range(args.repeats):  # the matmul rate and the pass interleaved
        rates.append(matmul_gflops(args.threads))
        runs.append(one_pass(x, a, shift, args.threads))
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
        "sub_chunk": _fused.SUB_CHUNK,
        "workers": args.threads,
        "threads": args.threads,
        "e_step_gemm": "torch.mm (MKL)" if _fused._onednn_linear() is None else "oneDNN linear",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "matmul_gflops_median": rate,
        "matmul_gflops_runs": rates,
        "seconds_median": med,
        "floor_seconds": {"pass (both GEMMs)": floor, **floors},
        "whole_pass_over_floor": med["whole pass"] / floor,
        "whole_pass_before_over_floor": med["whole pass before (summarize)"] / floor,
        "whole_pass_e_step_mm_over_floor": med["whole pass, E-step on torch.mm"] / floor,
        "gemm_gflops": {phase: 2 * args.n * p * k / med[phase] / 1e9 for phase in floors},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(
        f"N = {args.n:,}, D = K = {d}, P = {p}, batches of {CHUNK}, chunks of {_fused.SUB_CHUNK}, "
        f"{args.threads} threads, load {load_before[0]:.2f}"
    )
    print(f"matmul rate {rate:.1f} GFLOP/s (median of {args.repeats}); floor of a pass {floor * 1e3:.1f} ms")
    for phase, sec in med.items():
        extra = f"  ({sec / floors[phase]:.2f}x its floor)" if phase in floors else ""
        print(f"  {phase:<30} {sec * 1e3:8.1f} ms  {sec / floor:5.2f}x the pass floor{extra}")


if __name__ == "__main__":
    main()
