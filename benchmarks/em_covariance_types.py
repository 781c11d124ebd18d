"""Seconds per EM iteration for ``diag`` and ``spherical`` at growing D and K: this library against scikit-learn
(numpy, and its Array API path on torch tensors), gmmx (JAX; ``--gmmx-python``: a Python with jax and gmmx, run in
its own process), its own quadratic-feature path (what every covariance type used before: D(D+1)/2 + D + 1
feature columns where these types need 2D + 1), and the floor (the pass's two GEMMs alone).

Every contender fits the same float32 data (a K-component diagonal mixture, N rows) from the same start
(``weights_init``, ``means_init``, ``precisions_init``: the truth perturbed), ``max_iter`` iterations with
``tol=0`` (so each runs them all), ``split_merge=0``, one thread (torch, and BLAS through threadpoolctl for
scikit-learn). A fit's seconds per iteration are its wall time over ``max_iter``; contenders are interleaved
within each repeat and the medians reported. "ours, quadratic features" is this library with the score matrix of
every type built on the full quadratic features (monkeypatched: the code path before the diagonal features).
scikit-learn's Array API path (``array_api_dispatch=True``, ``SCIPY_ARRAY_API=1``) runs on torch float64 tensors:
in float32 its M-step fails on a dtype mismatch (scikit-learn 1.9.1: "expected m1 and m2 to have the same
dtype"). gmmx (float32, jitted ``EMFitter.fit``, which blocks on its result) is timed on its second and later
calls in one process, after a first call that compiles; it has no spherical type.
The floor is the time of the E-step and statistics GEMMs of one pass at the diagonal features' width, measured
on the same shapes (chunks of 4,096 rows). Results: benchmarks/results/em_covariance_types.json.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/em_covariance_types.py \
        --gmmx-python /path/to/jax-env/bin/python

``--memory`` instead measures this library's peak memory at K = 1024 (D = 16, diag and full) at N = 1e5 and 1e6,
each fit in its own process: the E-step holds a bounded chunk of the N x K matrix, so the peak stays flat in N.
"""

import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"
os.environ["SCIPY_ARRAY_API"] = "1"  # before scipy is imported: scikit-learn's Array API path needs it

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from implicit_em import GaussianMixture  # noqa: E402
from implicit_em.mixture import _stats  # noqa: E402

CONTENDERS = ("ours", "ours_quadratic", "sklearn", "sklearn_torch")


def problem(d: int, k: int, n: int, cov: str, seed: int) -> dict[str, Any]:
    """Data from a K-component diagonal mixture and a start near it (means moved by 0.3, variances by 20%)."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 3, (k, d))
    var = rng.uniform(0.5, 2.0, (k, d)) if cov == "diag" else np.repeat(rng.uniform(0.5, 2.0, (k, 1)), d, 1)
    z = rng.integers(0, k, n)
    x = (means[z] + rng.normal(size=(n, d)) * np.sqrt(var[z])).astype(np.float32)
    start_var = var * rng.uniform(0.8, 1.2, var.shape)
    prec = 1 / start_var if cov == "diag" else 1 / start_var[:, 0]
    return {"x": x, "weights": np.full(k, 1 / k), "means": means + rng.normal(0, 0.3, means.shape),
            "precisions": prec}  # fmt: skip


def _quadratic_score_matrix(params: _stats.MixtureParams, covariance_type: str, shift: torch.Tensor) -> torch.Tensor:
    """The score matrix on the quadratic features for every type (the path before the diagonal features)."""
    weights, means, _, prec_chol = (t.double() for t in params)
    k, d = means.shape
    lam = _stats.gaussian.full_precisions(prec_chol, covariance_type, k, d)
    log_det = _stats.gaussian.log_det(prec_chol, covariance_type, d, triangular=True)
    offsets = torch.log(weights) + log_det - 0.5 * d * np.log(2 * np.pi)
    return _stats.quadratic_score_matrix(lam, means - shift.double(), offsets)


def fit_seconds(name: str, p: dict[str, Any], cov: str, iters: int) -> float:
    """One fit's wall seconds per iteration."""
    kw = {"n_components": len(p["weights"]), "covariance_type": cov, "max_iter": iters, "tol": 0.0,
          "weights_init": p["weights"], "means_init": p["means"], "precisions_init": p["precisions"]}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("sklearn", "sklearn_torch"):
            import sklearn
            from sklearn.mixture import GaussianMixture as SkGM

            x: Any = p["x"]
            if name == "sklearn_torch":  # the Array API path: torch float64 tensors in, torch tensors out
                x = torch.from_numpy(x.astype(np.float64))
                kw = {**kw, "init_params": "random_from_data"}  # its only inits; unused, all three are given
                kw.update({k: torch.from_numpy(np.asarray(kw[k], dtype=np.float64)) for k in
                           ("weights_init", "means_init", "precisions_init")})  # fmt: skip
            with threadpool_limits(1), sklearn.config_context(array_api_dispatch=name == "sklearn_torch"):
                start = time.perf_counter()
                SkGM(**kw).fit(x)
                return (time.perf_counter() - start) / iters
        real = _stats.score_matrix
        if name == "ours_quadratic":
            _stats.score_matrix = _quadratic_score_matrix  # type: ignore[assignment]
            import implicit_em.mixture._em as em

            em.score_matrix = _quadratic_score_matrix  # type: ignore[assignment]
        try:
            start = time.perf_counter()
            GaussianMixture(**kw, split_merge=0, dtype=torch.float32).fit(p["x"])
            return (time.perf_counter() - start) / iters
        finally:
            _stats.score_matrix = real  # type: ignore[assignment]
            import implicit_em.mixture._em as em

            em.score_matrix = real  # type: ignore[assignment]


_GMMX = """
import json, os, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
from gmmx import EMFitter, GaussianMixtureModelJax
z = np.load(sys.argv[1])
iters, repeats = int(sys.argv[2]), int(sys.argv[3])
gmm = GaussianMixtureModelJax.from_squeezed(means=jnp.asarray(z["means"], jnp.float32),
    covariances=jnp.asarray(1 / z["precisions"], jnp.float32), weights=jnp.asarray(z["weights"], jnp.float32),
    covariance_type="diag")
x = jnp.asarray(z["x"])
fitter = EMFitter(max_iter=iters, tol=0.0, reg_covar=1e-6)
jax.block_until_ready(fitter.fit(x, gmm))  # compiles
times = []
for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fitter.fit(x, gmm))
    times.append((time.perf_counter() - start) / iters)
print(json.dumps(times))
"""


def gmmx_seconds(python: str, p: dict[str, Any], iters: int, repeats: int) -> list[float]:
    """gmmx's seconds per iteration, ``repeats`` warm fits in one process on one thread (XLA's CPU flags)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cell.npz"
        np.savez(path, **{k: p[k] for k in ("x", "weights", "means", "precisions")})
        env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
               "JAX_PLATFORMS": "cpu"}  # fmt: skip
        out = subprocess.run([python, "-c", _GMMX, str(path), str(iters), str(repeats)], env=env, check=True,
                             capture_output=True, text=True)  # fmt: skip
        return list(json.loads(out.stdout.strip().splitlines()[-1]))


def floor_seconds(n: int, d: int, k: int, rows: int = 4096) -> float:
    """The two GEMMs of one pass at the diagonal features' width P = 2D + 1, float32, best of 3."""
    g = torch.Generator().manual_seed(0)
    p_cols = 2 * d + 1
    a_t, phi, r = (torch.randn(s, generator=g) for s in ((k, p_cols), (p_cols, rows), (k, rows)))
    out, stats = torch.empty(k, rows), torch.empty(k, p_cols)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(-(-n // rows)):
            torch.mm(a_t, phi, out=out)
            torch.mm(r, phi.T, out=stats)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dims", default="16,64,128")
    ap.add_argument("--components", default="16,64,256")
    ap.add_argument("--types", default="diag,spherical")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=60.0, help="a contender whose fit took longer repeats no more")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="a subset of " + ", ".join(CONTENDERS))
    ap.add_argument("--gmmx-python", default=None, help="a Python with jax and gmmx (diag only)")
    ap.add_argument("--memory", action="store_true", help="this library's peak memory at K = 1024, N = 1e5 and 1e6")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.child is not None:
        return _memory_child(args.child)
    if args.memory:
        return memory(args.out or Path(__file__).parent / "results" / "em_memory.json")
    args.out = args.out or Path(__file__).parent / "results" / "em_covariance_types.json"
    report: dict[str, Any] = {
        "command": "benchmarks/em_covariance_types.py "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": 1,
        "load_before": os.getloadavg(),
        "cells": [],
    }
    for cov in args.types.split(","):
        for d in map(int, args.dims.split(",")):
            for k in map(int, args.components.split(",")):
                p = problem(d, k, args.n, cov, seed=0)
                chosen = args.contenders.split(",")
                times: dict[str, list[float]] = {c: [] for c in chosen}
                for _ in range(args.repeats):
                    for c in chosen:  # interleaved
                        if times[c] and times[c][-1] * args.iters > args.budget:
                            continue
                        times[c].append(fit_seconds(c, p, cov, args.iters))
                contenders = list(chosen)
                if args.gmmx_python and cov == "diag":
                    times["gmmx"] = gmmx_seconds(args.gmmx_python, p, args.iters, args.repeats)
                    contenders.append("gmmx")
                cell: dict[str, Any] = {"covariance_type": cov, "d": d, "k": k, "n": args.n,
                                        "floor_s": floor_seconds(args.n, d, k), "load": os.getloadavg()[0]}  # fmt: skip
                for c in contenders:
                    cell[f"{c}_s"] = statistics.median(times[c])
                    cell[f"{c}_repeats"] = len(times[c])
                peers = [cell[f"{c}_s"] for c in ("sklearn", "sklearn_torch", "gmmx") if f"{c}_s" in cell]
                cell["fastest_peer_over_ours"] = min(peers) / cell["ours_s"]
                cell["sklearn_over_ours"] = cell["sklearn_s"] / cell["ours_s"]
                if "ours_quadratic_s" in cell:
                    cell["quadratic_over_ours"] = cell["ours_quadratic_s"] / cell["ours_s"]
                cell["ours_over_floor"] = cell["ours_s"] / cell["floor_s"]
                report["cells"].append(cell)
                print(_row(cell), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report, indent=1) + "\n")
    report["load_after"] = os.getloadavg()
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))


def _row(c: dict[str, Any]) -> str:
    gmmx = f"{c['gmmx_s']:.3f}" if "gmmx_s" in c else "n/a"
    quad = f"{c['ours_quadratic_s']:.3f}" if "ours_quadratic_s" in c else "–"
    quad_ratio = f"{c['quadratic_over_ours']:.1f}×" if "quadratic_over_ours" in c else "–"
    return (f"| {c['covariance_type']} | {c['d']} | {c['k']} | {c['ours_s']:.3f} | {quad} | "
            f"{c['sklearn_s']:.3f} | {c['sklearn_torch_s']:.3f} | {gmmx} | {c['floor_s']:.3f} | "
            f"{c['fastest_peer_over_ours']:.1f}× | {quad_ratio} | "
            f"{c['ours_over_floor']:.1f}× |")  # fmt: skip


def table(report: dict[str, Any]) -> str:
    """The markdown table of a report: seconds per iteration, medians."""
    head = ("| type | D | K | ours (s/iter) | ours, quadratic features | scikit-learn | scikit-learn, Array API "
            "(torch, float64) | gmmx | floor | fastest peer / ours | quadratic / ours | ours / floor |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    return "\n".join([head, *(_row(c) for c in report["cells"])])


def _memory_child(spec: str) -> None:
    """One fit of ``spec`` = "cov,n,k,d": prints the peak resident memory the fit added (MB, ru_maxrss)."""
    import resource

    cov, n, k, d = spec.split(",")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((int(n), int(d)), dtype=np.float32)  # no float64 temporary under the baseline
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        GaussianMixture(int(k), covariance_type=cov, max_iter=2, tol=0.0, split_merge=0, init_params="random_from_data",
                        random_state=0, dtype=torch.float32).fit(x)  # fmt: skip
    print(json.dumps({"added_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
                      "data_mb": x.nbytes / 2**20}))  # fmt: skip


def memory(out: Path) -> None:
    """Peak memory a fit adds at K = 1024, D = 16, N = 1e5 and 1e6 (each its own process), against N x K floats."""
    rows = []
    for cov in ("diag", "full"):
        for n in (100_000, 1_000_000):
            spec = f"{cov},{n},1024,16"
            res = subprocess.run([sys.executable, __file__, "--child", spec], check=True, capture_output=True,
                                 text=True)  # fmt: skip
            got = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append({"covariance_type": cov, "n": n, "k": 1024, "d": 16, **got,
                         "n_by_k_float32_mb": n * 1024 * 4 / 2**20})  # fmt: skip
            print(rows[-1], flush=True)
    out.write_text(json.dumps({"command": "benchmarks/em_covariance_types.py --memory", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
