"""Gaussian mixture fitting: implicit_em's three fitters against scikit-learn, pomegranate and torchgmm.

Data: a known 16-component full-covariance mixture in D = 16 (``make_truth``), N_train rows plus a held-out set.
Every contender starts from the same k-means start (sklearn ``KMeans(n_init=1)`` labels, then one M-step) except
"ours default", which runs its own initialisation inside the timed fit. Each contender runs in its own
process (so peak memory is its own) with the same thread count; contenders are interleaved over repeats and the
medians reported. Held-out log-likelihood is computed for every contender by one float64 scorer from the fitted
parameters. The oracle is batch EM started from the true parameters. Memory: peak RSS (VmHWM, which also counts
a memmap's file pages) and peak anonymous memory (RssAnon sampled every 5 ms), each minus its value before the fit.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gmm_vs_peers.py --n-train 100000 --repeats 3
    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gmm_vs_peers.py --n-train 1000000 --repeats 3

Results go to benchmarks/results/gmm_<N>.json, rewritten after every contender; a rerun with the same
arguments skips what is already there (resume). ``--quick`` is a seconds-long run for the tests.
"""

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

K, D = 16, 16
PEERS = ["sklearn", "pomegranate", "torchgmm", "torchgmm_batch"]
OURS = ["ours_em", "ours_online_em", "ours_online_em_1pass", "ours_gd", "ours_online_em_memmap", "ours_default"]


def make_truth(seed: int) -> dict[str, np.ndarray]:
    """A 16-component full-covariance mixture in 16 dimensions with overlapping components."""
    rng = np.random.RandomState(seed)
    means = rng.randn(K, D) * 1.5
    a = rng.randn(K, D, D) / math.sqrt(D)
    covs = a @ a.transpose(0, 2, 1) + 0.05 * np.eye(D)
    weights = rng.dirichlet(5 * np.ones(K))
    return {"weights": weights, "means": means, "covariances": covs}


def draw(truth: dict[str, np.ndarray], n: int, rng: np.random.RandomState) -> np.ndarray:
    z = rng.choice(K, size=n, p=truth["weights"])
    chol = np.linalg.cholesky(truth["covariances"])
    out = np.empty((n, D))
    for j in range(K):  # per component, to keep memory at O(N D)
        idx = np.nonzero(z == j)[0]
        out[idx] = truth["means"][j] + rng.randn(len(idx), D) @ chol[j].T
    return out


def heldout_loglik(x: np.ndarray, weights: np.ndarray, means: np.ndarray, covs: np.ndarray) -> float:
    """Mean log-likelihood per sample, float64, from mixture parameters (the one scorer for everyone)."""
    import torch

    from implicit_em import gaussian
    from implicit_em.mixture import _stats

    w, mu, c = (torch.as_tensor(np.asarray(v, dtype=np.float64)) for v in (weights, means, covs))
    params = _stats.MixtureParams(w / w.sum(), mu, c, gaussian.precisions_cholesky(c, "full", on_singular="ridge"))
    xt = torch.from_numpy(x)
    shift = xt.mean(0)
    a = _stats.score_matrix(params, "full", shift)
    total = 0.0
    for s in range(0, len(x), 65536):
        total += float(torch.logsumexp(_stats.weighted_log_prob(xt[s : s + 65536], a, shift), 1).sum())
    return total / len(x)


def matmul_gflops(threads: int) -> float:
    """The machine's float32 matrix-multiply rate (GFLOP/s) with this many threads: best of 5 of 2048³."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 2048**3 / best / 1e9


# -- contenders (run in a child process) -----------------------------------------------------------------------


def _import_contender(name: str) -> None:
    if name == "sklearn":
        import sklearn.mixture  # noqa: F401
    elif name == "pomegranate":
        import pomegranate.gmm  # noqa: F401
    elif name.startswith("torchgmm"):
        import torchgmm.bayes  # noqa: F401
    else:
        import implicit_em.mixture  # noqa: F401


def _run(name: str, work: Path, tol: float, max_iter: int, seed: int) -> dict[str, Any]:
    import torch

    threads = int(os.environ["BENCH_THREADS"])
    torch.set_num_threads(threads)
    _import_contender(name)  # imports are not part of the fit time
    train = np.load(work / "train.npy", mmap_mode="r" if name.endswith("memmap") else None)
    start = dict(np.load(work / "start.npz"))
    n = len(train)
    base_rss = _rss_mb()
    anon = _AnonPeak()
    t0 = time.perf_counter()
    iters: int | str
    if name == "sklearn":
        from sklearn.mixture import GaussianMixture as Sk

        m = Sk(
            K,
            tol=tol,
            max_iter=max_iter,
            weights_init=start["weights"],
            means_init=start["means"],
            precisions_init=np.linalg.inv(start["covariances"]),
            random_state=seed,
        ).fit(train)
        params, iters = (m.weights_, m.means_, m.covariances_), m.n_iter_
    elif name == "pomegranate":
        from pomegranate.distributions import Normal
        from pomegranate.gmm import GeneralMixtureModel

        dists = [
            Normal(
                means=torch.tensor(start["means"][j], dtype=torch.float32),
                covs=torch.tensor(start["covariances"][j], dtype=torch.float32),
                covariance_type="full",
            )
            for j in range(K)
        ]
        # pomegranate's tol is on the total log-likelihood; tol·N makes it sklearn's per-sample tol
        m = GeneralMixtureModel(
            dists, priors=torch.tensor(start["weights"], dtype=torch.float32), max_iter=max_iter, tol=tol * n
        )
        calls = count_calls(m, "summarize")
        m.fit(torch.from_numpy(np.asarray(train, dtype=np.float32)))
        params = (
            m.priors.numpy(),
            np.stack([d.means.numpy() for d in m.distributions]),
            np.stack([d.covs.numpy() for d in m.distributions]),
        )
        iters = calls[0]
    elif name.startswith("torchgmm"):
        import logging

        from torchgmm.bayes import GaussianMixture as Tg

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        batch = 100_000 if name == "torchgmm_batch" else None
        m = Tg(
            K,
            covariance_type="full",
            init_means=torch.tensor(start["means"], dtype=torch.float32),
            convergence_tolerance=tol,
            batch_size=batch,
            trainer_params={
                "max_epochs": max_iter,
                "accelerator": "cpu",
                "devices": 1,
                "enable_progress_bar": False,
                "logger": False,
                "enable_model_summary": False,
            },
        )
        m.fit(torch.from_numpy(np.asarray(train, dtype=np.float32)))
        cov = m.model_.covariances
        cov = cov() if callable(cov) else cov
        params = (m.model_.component_probs.numpy(), m.model_.means.numpy(), cov.numpy())
        iters = m.num_iter_
    else:
        from implicit_em.mixture import GaussianMixture

        kw: dict[str, Any] = {"tol": tol, "max_iter": max_iter, "random_state": seed, "dtype": "float32"}
        if name != "ours_default":  # the shared start, plain fitters (no split-and-merge search)
            kw.update(
                weights_init=start["weights"],
                means_init=start["means"],
                split_merge=0,
                precisions_init=np.linalg.inv(start["covariances"]),
            )
        if name == "ours_online_em_1pass":  # one stochastic pass, then one exact EM iteration
            kw["max_iter"] = 1
        fitter = {"ours_em": "em", "ours_gd": "gd", "ours_default": "em"}.get(name, "online_em")
        m = GaussianMixture(K, fitter=fitter, **kw).fit(train)
        params, iters = (m.weights_, m.means_, m.covariances_), m.n_iter_
    seconds = time.perf_counter() - t0
    peak_anon = anon.stop()
    return {
        "seconds": seconds,
        "iterations": int(iters),
        "peak_rss_mb": _rss_mb(),
        "base_rss_mb": base_rss,
        "peak_anon_mb": peak_anon,
        "base_anon_mb": anon.base,
        "params": [np.asarray(p, dtype=np.float64).tolist() for p in params],
    }


def count_calls(obj: Any, method: str) -> list[int]:
    """Wrap ``obj.<method>`` to count its calls (pomegranate's EM iterations: one ``summarize`` each); the count
    is the returned list's one element."""
    calls = [0]
    original = getattr(obj, method)

    def counting(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return original(*a, **k)

    setattr(obj, method, counting)
    return calls


def _anon_mb() -> float:
    """This process's current anonymous resident memory (RssAnon): heap and tensors, without the file pages
    of a memmap, which the kernel can drop at any time but which VmHWM counts."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _AnonPeak:
    """The peak of RssAnon over a fit, sampled every 5 ms by a daemon thread (numpy and torch release the GIL)."""

    def __init__(self) -> None:
        import threading

        self.base = self.peak = _anon_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, _anon_mb())

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return max(self.peak, _anon_mb())


def _rss_mb() -> float:
    """This process's peak resident memory (VmHWM: per address space, so not inherited from the parent the
    way ru_maxrss is across fork/exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- driver ----------------------------------------------------------------------------------------------------


def _child(name: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {
        **os.environ,
        "BENCH_THREADS": str(args.threads),
        "OMP_NUM_THREADS": str(args.threads),
        "MKL_NUM_THREADS": str(args.threads),
        "OPENBLAS_NUM_THREADS": str(args.threads),
        "NUMBA_NUM_THREADS": str(args.threads),
    }
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--work",
        str(work),
        "--tol",
        str(args.tol),
        "--max-iter",
        str(args.max_iter),
        "--seed",
        str(args.seed),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc={proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-train", type=int, default=100_000)
    p.add_argument("--n-test", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--contenders", default=",".join(PEERS + OURS))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--quick", action="store_true", help="tiny sizes, ours only (for tests)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_run(args.child, args.work, args.tol, args.max_iter, args.seed)))
        return
    if args.quick:
        args.n_train, args.n_test, args.repeats = 3000, 2000, 1
        args.contenders = "ours_em,ours_online_em,ours_gd,ours_default"
    out = args.out or Path(__file__).parent / "results" / f"gmm_{args.n_train}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("child", "work", "out", "timeout")
    }
    report: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if report.get("config") != config:
        report = {"config": config, "runs": {}}
    report["machine"] = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "python": platform.python_version(),
    }
    import sklearn
    import torch

    report["versions"] = {"torch": torch.__version__, "sklearn": sklearn.__version__, "numpy": np.__version__}
    from importlib.metadata import PackageNotFoundError, version

    for mod in ("pomegranate", "torchgmm", "psutil"):
        try:
            report["versions"][mod] = version(mod)
        except PackageNotFoundError:  # a peer that is not installed is reported, not hidden
            report["versions"][mod] = "not installed"
    rng = np.random.RandomState(args.seed)
    truth = make_truth(args.seed)
    train, test = draw(truth, args.n_train, rng), draw(truth, args.n_test, rng)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        np.save(work / "train.npy", train)
        torch.set_num_threads(args.threads)
        if "start" not in report:
            from sklearn.cluster import KMeans

            from implicit_em.mixture._em import _estimate_gaussian_parameters

            t0 = time.perf_counter()
            labels = KMeans(K, n_init=1, random_state=args.seed).fit(train).labels_
            resp = torch.nn.functional.one_hot(torch.from_numpy(labels.astype(np.int64)), K).double()
            nk, means, covs = _estimate_gaussian_parameters(torch.from_numpy(train), resp, 1e-6, "full")
            report["start"] = {
                "kmeans_seconds": time.perf_counter() - t0,
                "weights": (nk / nk.sum()).tolist(),
                "means": means.tolist(),
                "covariances": covs.tolist(),
            }
        start = {k: np.asarray(report["start"][k]) for k in ("weights", "means", "covariances")}
        np.savez(work / "start.npz", **start)
        if "oracle" not in report:
            from implicit_em.mixture import GaussianMixture

            oracle = GaussianMixture(
                K,
                tol=1e-6,
                max_iter=1000,
                weights_init=truth["weights"],
                means_init=truth["means"],
                precisions_init=np.linalg.inv(truth["covariances"]),
            )
            oracle.fit(train)
            report["oracle"] = {
                "heldout_truth_params": heldout_loglik(test, truth["weights"], truth["means"], truth["covariances"]),
                "heldout_em_from_truth": heldout_loglik(test, oracle.weights_, oracle.means_, oracle.covariances_),
                "iterations": oracle.n_iter_,
            }
            report["start"]["heldout"] = heldout_loglik(test, start["weights"], start["means"], start["covariances"])
        report["matmul_gflops"] = matmul_gflops(args.threads)
        names = args.contenders.split(",")
        for rep in range(args.repeats):
            for name in names if rep % 2 == 0 else names[::-1]:  # interleave: alternate the order
                runs = report["runs"].setdefault(name, [])
                if len(runs) > rep:
                    continue  # resume
                load = os.getloadavg()
                res = _child(name, work, args)
                res["loadavg_before"] = load
                if "params" in res:
                    res["heldout"] = heldout_loglik(test, *(np.asarray(v) for v in res.pop("params")))
                    res["gap_to_em_from_truth"] = report["oracle"]["heldout_em_from_truth"] - res["heldout"]
                runs.append(res)
                print(
                    f"[{rep}] {name}: "
                    + ", ".join(
                        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in res.items()
                        if k != "loadavg_before"
                    ),
                    flush=True,
                )
                _summarise(report, args)
                out.write_text(json.dumps(report, indent=1))
    _summarise(report, args)
    out.write_text(json.dumps(report, indent=1))
    print(_table(report))


def table_from_json(path: Path) -> str:
    """The markdown table of a results file (used for docs/mixture.md)."""
    return _table(json.loads(Path(path).read_text()))


def _summarise(report: dict[str, Any], args: argparse.Namespace) -> None:
    flops_per_iter = 4 * args.n_train * K * D * D
    summary = {}
    for name, runs in report["runs"].items():
        ok = [r for r in runs if "seconds" in r]
        if not ok:
            summary[name] = {"error": runs[-1].get("error")}
            continue
        sec = float(np.median([r["seconds"] for r in ok]))
        it = float(np.median([r["iterations"] for r in ok]))
        summary[name] = {
            "seconds": sec,
            "iterations": it,
            "heldout": float(np.median([r["heldout"] for r in ok])),
            "gap_to_em_from_truth": float(np.median([r["gap_to_em_from_truth"] for r in ok])),
            "peak_rss_mb": float(np.median([r["peak_rss_mb"] for r in ok])),
            "extra_rss_mb": float(np.median([r["peak_rss_mb"] - r["base_rss_mb"] for r in ok])),
            "extra_anon_mb": float(
                np.median([r.get("peak_anon_mb", np.nan) - r.get("base_anon_mb", np.nan) for r in ok])
            ),
            "fraction_of_matmul_rate": flops_per_iter * it / sec / (report["matmul_gflops"] * 1e9),
        }
    peers = [(summary[p]["seconds"], p) for p in PEERS if "seconds" in summary.get(p, {})]
    if peers:
        fastest, peer = min(peers)
        for s in summary.values():
            if "seconds" in s:
                s["speedup_vs_fastest_peer"] = fastest / s["seconds"]
                s["reaches_fastest_peer_heldout"] = s["heldout"] >= summary[peer]["heldout"] - 0.01
    report["summary"] = summary


def _table(report: dict[str, Any]) -> str:
    rows = [
        "| contender | fit s | iters/epochs | held-out loglik | gap to EM from truth | peak RSS MB (extra) "
        "| extra anon MB | speed-up vs fastest peer | reaches its loglik (±0.01) | matmul rate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["summary"].items():
        if "seconds" not in s:
            rows.append(f"| {name} | failed: {s['error']} | | | | | | | | |")
            continue
        rows.append(
            f"| {name} | {s['seconds']:.2f} | {s['iterations']:.0f} | {s['heldout']:.4f} | "
            f"{s['gap_to_em_from_truth']:.4f} | {s['peak_rss_mb']:.0f} ({s['extra_rss_mb']:.0f}) | "
            f"{s.get('extra_anon_mb', float('nan')):.0f} | "
            f"{s.get('speedup_vs_fastest_peer', float('nan')):.2f}× | "
            f"{'yes' if s.get('reaches_fastest_peer_heldout') else 'no'} | {100 * s['fraction_of_matmul_rate']:.1f}% |"
        )
    o = report["oracle"]
    rows.append(
        f"\nEM from the true parameters: {o['heldout_em_from_truth']:.4f} "
        f"(true parameters themselves: {o['heldout_truth_params']:.4f}); shared k-means start: "
        f"{report['start']['heldout']:.4f}, k-means took {report['start']['kmeans_seconds']:.1f} s; "
        f"matmul rate {report['matmul_gflops']:.1f} GFLOP/s"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
