"""Overhead of the attention probe on a tiny GPT-2 training step (CPU).

Contenders, interleaved step by step on identical copies of one model (4 layers, d_model 128, 4 heads,
sequence 128, batch 16 by default):

* ``none``: the model's own attention (sdpa), no probe;
* ``detached``: the same, after a probe was attached and detached once (its code path when not attached);
* ``summary``: a summary-mode probe with its defaults (per-head statistics and law residuals of the first
  ``summary_batch=1`` sequence, recomputed explicitly beside HF's fused sdpa, which computes the batch) on every
  step;
* ``summary_stats``: the same without the law residuals (``laws=False``);
* ``summary_n2``: summary mode observing the first 2 sequences (``summary_batch=2``);
* ``summary_full_batch``: summary mode observing the whole batch (``summary_batch=None``), every step;
* ``summary_full_batch_stats``: the same without the law residuals;
* ``summary_every10``: summary mode (defaults) sampling one step in ten;
* ``full``: full capture (every tensor of every layer and head).

Each step is forward, loss, backward and an AdamW step; the probe is entered and left around each step (so
its set-up cost is counted). Reported: median (and mean) seconds per step over ``--steps`` steps after
``--warmup`` steps, and each median divided by ``none``'s median from the same run. A micro-benchmark adds the
cost of the observer check in :func:`implicit_em.probes.attention` when no probe is active.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/probe_overhead.py
    .venv/bin/python benchmarks/probe_overhead.py --quick        # seconds, used by the tests
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from implicit_em.probes import AttentionProbe
from implicit_em.probes.attention import attend, attention_scores, masked_softmax

RESULTS = Path(__file__).parent / "results" / "probe_overhead.json"


def build_model(n_layer: int, d_model: int, n_head: int, seq: int, vocab: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=n_layer,
        n_embd=d_model,
        n_head=n_head,
        n_positions=seq,
        vocab_size=vocab,
        bos_token_id=0,
        eos_token_id=0,
        attn_pdrop=0.0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
    )
    return GPT2LMHeadModel(config).train()


def make_contenders(
    model: torch.nn.Module,
) -> tuple[dict[str, torch.nn.Module], dict[str, Callable[[], contextlib.AbstractContextManager[Any]]]]:
    """Each contender: its own copy of the model, and a factory for the context that wraps one step."""
    copies = {name: copy.deepcopy(model) for name in CONTENDERS}
    with AttentionProbe(copies["detached"]):  # attach once, then never again
        pass
    kwargs: dict[str, dict[str, Any]] = {
        "summary": {"mode": "summary"},
        "summary_stats": {"mode": "summary", "laws": False},
        "summary_n2": {"mode": "summary", "summary_batch": 2},
        "summary_full_batch": {"mode": "summary", "summary_batch": None},
        "summary_full_batch_stats": {"mode": "summary", "summary_batch": None, "laws": False},
        "summary_every10": {"mode": "summary", "every": 10},
        "full": {"mode": "full"},
    }
    probes = {name: AttentionProbe(copies[name], **kw) for name, kw in kwargs.items()}  # reused: keeps the step count
    factories: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
        "none": contextlib.nullcontext,
        "detached": contextlib.nullcontext,
        **{name: functools.partial(_same, probe) for name, probe in probes.items()},
    }
    return copies, factories


def _same(probe: AttentionProbe) -> AttentionProbe:
    return probe


CONTENDERS = [
    "none",
    "detached",
    "summary",
    "summary_stats",
    "summary_n2",
    "summary_full_batch",
    "summary_full_batch_stats",
    "summary_every10",
    "full",
]


def observer_check_cost(repeats: int) -> dict[str, float]:
    """Seconds per call of attend() (observer check included) and of the same computation without the check."""
    q = torch.randn(1, 1, 4, 8)

    def bare(q: torch.Tensor) -> torch.Tensor:
        weights = masked_softmax(attention_scores(q, q, 0.35), masked=False)
        return torch.matmul(weights, q)

    timings: dict[str, list[float]] = {"attention": [], "bare": []}
    for _ in range(5):
        for name, fn in (("attention", lambda: attend(q, q, q, scale=0.35)), ("bare", lambda: bare(q))):
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            timings[name].append((time.perf_counter() - start) / repeats)
    return {name: statistics.median(values) for name, values in timings.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    model = build_model(args.layers, args.d_model, args.heads, args.seq, args.vocab)
    copies, wrap = make_contenders(model)
    optimisers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in copies.items()}
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    load_before = os.getloadavg()
    for i in range(args.warmup + args.steps):
        for name in CONTENDERS:
            m, opt = copies[name], optimisers[name]
            start = time.perf_counter()
            with wrap[name]():
                loss = m(input_ids=ids, labels=ids).loss
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
            if i >= args.warmup:
                times[name].append(elapsed)
        if args.progress:
            print(f"step {i + 1}/{args.warmup + args.steps}", flush=True)
    load_after = os.getloadavg()
    base = statistics.median(times["none"])
    check = observer_check_cost(args.micro_repeats)
    return {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "model": {
            "layers": args.layers,
            "d_model": args.d_model,
            "heads": args.heads,
            "seq": args.seq,
            "batch": args.batch,
            "vocab": args.vocab,
        },
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "seconds_per_step": {
            name: {"median": statistics.median(t), "mean": statistics.fmean(t), "min": min(t)}
            for name, t in times.items()
        },
        "ratio_to_none": {name: statistics.median(t) / base for name, t in times.items()},
        "observer_check_seconds_per_call": check,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--micro-repeats", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few steps (for tests)")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.layers, args.d_model, args.heads, args.seq, args.batch = 2, 16, 2, 8, 2
        args.steps, args.warmup, args.micro_repeats = 2, 1, 100
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"threads {result['environment']['threads']}, load {result['environment']['loadavg_before']}")
    for name in CONTENDERS:
        s = result["seconds_per_step"][name]
        print(
            f"{name:24s} median {s['median'] * 1e3:8.1f} ms  mean {s['mean'] * 1e3:8.1f} ms  "
            f"x{result['ratio_to_none'][name]:.3f}"
        )
    c = result["observer_check_seconds_per_call"]
    print(f"attention() {c['attention'] * 1e6:.2f} us/call vs bare {c['bare'] * 1e6:.2f} us/call")


if __name__ == "__main__":
    main()
