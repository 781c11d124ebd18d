"""Seconds per EM iteration and peak memory as K, D and N grow: this library against every peer, full and diag.

The grid is the mixtures issue's: K in {16, 64, 256, 1024}, D in {16, 64, 128}, N in {1e5, 1e6}, covariance
"full" and "diag". Every contender fits the same float32 data (a K-component mixture of that type) from the same
start (the truth perturbed: ``weights_init``, ``means_init``, precisions), ``--iters`` EM iterations with no
early stop, one thread (torch; BLAS through the environment and threadpoolctl; XLA's single-thread flags). Each
fit runs in its own process; a contender's seconds per iteration are its fit's wall time over the iterations it
reports (so the fit's set-up is included, as a user pays it); its memory is the peak anonymous resident memory
over the fit (RssAnon, sampled every 5 ms) minus its value before the fit, the data already loaded.

Contenders: ``ours`` (``GaussianMixture(fitter="em", dtype=float32, split_merge=0)``), ``sklearn`` (numpy),
``torchgmm`` (batches of 100,000 rows, its fastest mode in benchmarks/gmm_vs_peers.py), ``pomegranate``
(``GeneralMixtureModel`` of ``Normal``) and ``gmmx`` (JAX, ``--gmmx-python``: a Python with jax and gmmx, run in
its own process; its jitted fit is timed on a second call, after a first that compiles, and blocked on).

What is not run, and why, is recorded in the cell instead of a number:

- a contender whose predicted memory exceeds ``--max-gb`` (the peers hold N x K matrices, gmmx's full covariances
  an N x K x D tensor: at N = 1e6, K = 1024, D = 128 that is 1 TB), from the formulas in :data:`MEMORY`;
- a fit that ran past ``--timeout`` seconds (killed; the cell says so);
- N = 1e6 for a contender whose N = 1e5 fit of the same shape took more than a tenth of the timeout (it would
  pass it: the work is linear in N).

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gmm_scaling.py --gmmx-python PATH

Results: benchmarks/results/gmm_scaling.json, written after every fit; a rerun with the same arguments skips the
fits already there (resume). ``--table`` prints the markdown table of a results file.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from gmm_vs_peers import _AnonPeak, count_calls

CONTENDERS = ("ours", "sklearn", "torchgmm", "pomegranate", "gmmx")
TORCHGMM_BATCH = 100_000

#: predicted peak bytes of a contender's fit beyond the data, from what it allocates at once (N rows, K
#: components, D features, B = min(N, 100,000) torchgmm's batch; float32 = 4 bytes, float64 = 8), calibrated on
#: the measured cells of D = 16 and K <= 256 (diag): used only to decide not to run a fit that would not fit
MEMORY = {
    "ours": "0 (the E-step holds a chunk of 16,384 rows x K)",
    "sklearn": "6 N K x 8 (log-probabilities, log-responsibilities, responsibilities and their temporaries)",
    "torchgmm": "6 B K x 4 (a batch's log-probabilities and responsibilities)",
    "pomegranate": "3 N K x 4 + N D x 4 (log-probabilities and responsibilities)",
    "gmmx": "diag 7 N K x 4; full 2 N K D x 4 (the whitened differences of every row per component)",
}


def predicted_bytes(name: str, n: int, k: int, d: int, cov: str = "diag") -> float:
    """:data:`MEMORY`'s formula for ``name``."""
    return {
        "ours": 0.0,
        "sklearn": 6.0 * n * k * 8,
        "torchgmm": 6.0 * min(n, TORCHGMM_BATCH) * k * 4,
        "pomegranate": 3.0 * n * k * 4 + n * d * 4,
        "gmmx": 7.0 * n * k * 4 if cov == "diag" else 2.0 * n * k * d * 4,
    }[name]


def problem(cov: str, n: int, k: int, d: int, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 rows of a K-component mixture (full: random correlated covariances; diag: random variances) and a
    start near the truth (means moved by 0.3, the same covariances), drawn component by component (no float64
    copy of X), then shuffled."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 3, (k, d))
    if cov == "full":
        a = rng.normal(size=(k, d, d)) / np.sqrt(d)
        covs = a @ a.transpose(0, 2, 1) + 0.5 * np.eye(d)
        chol = np.linalg.cholesky(covs)
    else:
        covs = rng.uniform(0.5, 2.0, (k, d))
        chol = None
    x = np.empty((n, d), dtype=np.float32)
    counts = rng.multinomial(n, np.full(k, 1 / k))
    row = 0
    for j, c in enumerate(counts):  # component by component, then shuffled
        e = rng.standard_normal((int(c), d))
        x[row : row + c] = means[j] + (e @ chol[j].T if chol is not None else e * np.sqrt(covs[j]))
        row += c
    x = x[rng.permutation(n)]
    prec = np.linalg.inv(covs) if cov == "full" else 1 / covs
    return {"x": x, "weights": np.full(k, 1 / k), "means": means + rng.normal(0, 0.3, means.shape),
            "covariances": covs, "precisions": prec}  # fmt: skip


def _fit(name: str, cov: str, x: np.ndarray, start: dict[str, np.ndarray], iters: int) -> int:
    """Fit ``iters`` EM iterations from ``start``; returns the iterations the contender reports."""
    import torch

    k = len(start["weights"])
    if name == "ours":
        from implicit_em import GaussianMixture

        m = GaussianMixture(k, covariance_type=cov, max_iter=iters, tol=0.0, split_merge=0, dtype=torch.float32,
                            weights_init=start["weights"], means_init=start["means"],
                            precisions_init=start["precisions"]).fit(x)  # fmt: skip
        return int(m.n_iter_)
    if name == "sklearn":
        from sklearn.mixture import GaussianMixture as Sk
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            sk = Sk(k, covariance_type=cov, max_iter=iters, tol=0.0, weights_init=start["weights"],
                    means_init=start["means"], precisions_init=start["precisions"]).fit(x)  # fmt: skip
        return int(sk.n_iter_)
    xt = torch.from_numpy(x)
    if name == "pomegranate":
        from pomegranate.distributions import Normal
        from pomegranate.gmm import GeneralMixtureModel

        dists = [Normal(means=torch.tensor(start["means"][j], dtype=torch.float32),
                        covs=torch.tensor(start["covariances"][j], dtype=torch.float32), covariance_type=cov)
                 for j in range(k)]  # fmt: skip
        gm = GeneralMixtureModel(dists, priors=torch.tensor(start["weights"], dtype=torch.float32), max_iter=iters,
                                 tol=-1.0)  # fmt: skip
        calls = count_calls(gm, "summarize")
        gm.fit(xt)
        return calls[0]
    if name == "torchgmm":
        import logging

        from torchgmm.bayes import GaussianMixture as Tg

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        tg = Tg(k, covariance_type=cov, init_means=torch.tensor(start["means"], dtype=torch.float32),
                convergence_tolerance=0.0, batch_size=TORCHGMM_BATCH,
                trainer_params={"max_epochs": iters, "accelerator": "cpu", "devices": 1, "enable_progress_bar": False,
                                "logger": False, "enable_model_summary": False})  # fmt: skip
        tg.fit(xt)
        return int(tg.num_iter_)
    raise ValueError(f"unknown contender {name!r}")


_GMMX = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
from gmmx import EMFitter, GaussianMixtureModelJax
z = np.load(sys.argv[1])
cov, iters = sys.argv[2], int(sys.argv[3])
gmm = GaussianMixtureModelJax.from_squeezed(means=jnp.asarray(z["means"], jnp.float32),
    covariances=jnp.asarray(z["covariances"], jnp.float32), weights=jnp.asarray(z["weights"], jnp.float32),
    covariance_type=cov)
x = jnp.asarray(np.load(sys.argv[4]))
fitter = EMFitter(max_iter=iters, tol=0.0, reg_covar=1e-6)
jax.block_until_ready(fitter.fit(x, gmm))  # compiles
sys.path.insert(0, sys.argv[5])
from gmm_vs_peers import _AnonPeak, count_calls
probe = _AnonPeak()
start = time.perf_counter()
jax.block_until_ready(fitter.fit(x, gmm))
seconds = time.perf_counter() - start
peak = probe.stop()
print(json.dumps({"seconds": seconds, "iterations": iters, "added_mb": peak - probe.base}))
"""


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One contender's fit of one cell, in this process (``--child``)."""
    import torch

    torch.set_num_threads(1)
    x = np.load(spec["x"])
    start = dict(np.load(spec["start"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: tol=0 runs every iteration by design
        try:  # imports and first-call set-up, not timed (a peer may refuse so few rows per component: no matter)
            _fit(spec["name"], spec["cov"], x[: max(2000, 20 * len(start["weights"]))], start, 1)
        except Exception:
            pass
        probe = _AnonPeak()
        t0 = time.perf_counter()
        iterations = _fit(spec["name"], spec["cov"], x, start, spec["iters"])
        seconds = time.perf_counter() - t0
    peak = probe.stop()
    return {"seconds": seconds, "iterations": iterations, "added_mb": peak - probe.base}


def _env() -> dict[str, str]:
    one = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")}
    return {**os.environ, **one, "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}  # fmt: skip


def run_one(name: str, spec: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The contender's fit in its own process: its result, or why there is none."""
    if name == "gmmx":
        if args.gmmx_python is None:
            return {"skipped": "no --gmmx-python"}
        cmd = [args.gmmx_python, "-c", _GMMX, spec["start"], spec["cov"], str(spec["iters"]), spec["x"],
               str(Path(__file__).parent)]  # fmt: skip
    else:
        cmd = [sys.executable, __file__, "--child", json.dumps({**spec, "name": name})]
    try:
        proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"ran past the {args.timeout:.0f} s timeout (killed)"}
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1][:300] if lines else f"exit status {proc.returncode}"}
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["seconds_per_iteration"] = got["seconds"] / max(int(got["iterations"]), 1)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--components", default="16,64,256,1024")
    ap.add_argument("--dims", default="16,64,128")
    ap.add_argument("--n", default="100000,1000000")
    ap.add_argument("--types", default="diag,full")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a fit may take before it is killed")
    ap.add_argument("--max-gb", type=float, default=6.0, help="do not run a fit predicted to need more memory")
    ap.add_argument("--gmmx-python", default=None, help="a Python with jax and gmmx")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gmm_scaling.json")
    ap.add_argument("--table", type=Path, default=None, help="print the markdown table of this results file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return
    # what the numbers depend on; the timeout is a budget (each fit it stopped says so), so a rerun with another
    # timeout keeps the fits already measured and measures what is missing or what the caller deleted
    config = {k: v for k, v in vars(args).items() if k in ("iters", "max_gb")}
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    if report.get("config") != config:
        report = {"config": config, "cells": {}}
    import sklearn
    import torch

    report["machine"] = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": 1,
                         "torch": torch.__version__, "sklearn": sklearn.__version__}  # fmt: skip
    report["memory_formulas"] = MEMORY
    names = args.contenders.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for cov in args.types.split(","):
            for d in map(int, args.dims.split(",")):
                for k in map(int, args.components.split(",")):
                    for n in sorted(map(int, args.n.split(","))):
                        _cell(report, args, names, cov, n, k, d, Path(tmp))
    print(table(report))


def _cell(report: dict[str, Any], args: argparse.Namespace, names: list[str], cov: str, n: int, k: int, d: int,
          tmp: Path) -> None:  # fmt: skip
    key = f"{cov},{d},{k},{n}"
    cell = report["cells"].setdefault(key, {})
    todo = [c for c in names if c not in cell]
    if not todo:
        return
    p = problem(cov, n, k, d)
    x_path, start_path = tmp / "x.npy", tmp / "start.npz"
    np.save(x_path, p.pop("x"))
    np.savez(start_path, **p)
    spec = {"cov": cov, "iters": args.iters, "x": str(x_path), "start": str(start_path)}
    for name in todo:  # the contenders in turn on the same data
        smaller = report["cells"].get(f"{cov},{d},{k},100000", {}).get(name, {})
        if predicted_bytes(name, n, k, d, cov) > args.max_gb * 2**30:
            got: dict[str, Any] = {"skipped": f"predicted {predicted_bytes(name, n, k, d, cov) / 2**30:.0f} GB "
                                              f"> {args.max_gb:g} GB ({MEMORY[name]})"}  # fmt: skip
        elif n > 100_000 and smaller and "seconds" not in smaller:
            why = smaller.get("skipped") or smaller.get("error")
            got = {"skipped": f"not run: at N = 1e5 of this shape, {why}"}
        elif n > 100_000 and smaller.get("seconds", 0.0) * n / 100_000 > args.timeout:
            got = {"skipped": f"N = 1e5 took {smaller['seconds']:.1f} s; x{n // 100_000} passes the timeout"}
        else:
            got = run_one(name, spec, args)
        got["load_average"] = os.getloadavg()[0]
        cell[name] = got
        args.out.write_text(json.dumps(report, indent=1))
        what = f"{got['seconds_per_iteration']:.3f} s/iter, +{got['added_mb']:.0f} MB" if "seconds" in got else \
            got.get("skipped") or got.get("error")  # fmt: skip
        print(f"{cov:4s} D={d:<3d} K={k:<4d} N={n:<7d} {name:11s} {what}", flush=True)


def table(report: dict[str, Any]) -> str:
    """One markdown row per cell: each contender's seconds per iteration and added peak memory (MB), and the
    fastest peer's seconds over ours ("timeout": killed at the timeout; "memory": predicted over ``--max-gb``;
    "—": not run, its N = 1e5 fit being too slow for N = 1e6)."""
    names = [c for c in CONTENDERS if any(c in cell for cell in report["cells"].values())]
    lines = ["| type | D | K | N | " + " | ".join(names) + " | fastest peer / ours |", "|" + "---|" * (5 + len(names))]
    for key, cell in report["cells"].items():
        cov, d, k, n = key.split(",")
        row = []
        for c in names:
            got = cell.get(c, {})
            if "seconds_per_iteration" in got:
                row.append(f"{got['seconds_per_iteration']:.3g} s, {got['added_mb']:.0f} MB")
            elif "skipped" in got:
                row.append("timeout" if "timeout" in got["skipped"] else "memory" if "GB" in got["skipped"] else "—")
            else:
                row.append("error" if "error" in got else "")
        peers = [g["seconds_per_iteration"] for c, g in cell.items() if c != "ours" and "seconds_per_iteration" in g]
        ours = cell.get("ours", {}).get("seconds_per_iteration")
        ratio = f"{min(peers) / ours:.1f}×" if peers and ours else "no peer ran"
        lines.append(f"| {cov} | {d} | {k} | {int(n):.0e} | " + " | ".join(row) + f" | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
