"""Does ``fitter="gd"`` end where EM ends, from the same start, on data sets it was not tuned on?

Protocol (written before the deciding runs; the "issue" shape was piloted at data seed 0, see docs/mixture.md):

- Data (float32, N_train = 1e6, held-out 1e5, D = K = 16, full covariance, weights from a Dirichlet(5)):
  ``benchmark`` (the peers' benchmark, ``gmm_vs_peers.make_truth``), and four shapes drawn here: ``issue``
  (means N(0, 1), covariances a random rotation of eigenvalues 0.05·[1, 40], log-uniform, condition number 40),
  ``separated`` (means N(0, 4²), eigenvalues 0.05·[1, 4]), ``overlapping`` (means N(0, 0.5²), 0.3·[1, 4]),
  ``ill_conditioned`` (means N(0, 1.5²), 0.01·[1, 1000]). Data seed 1 (``--seed``).
- One start per data set: the estimator's k-means start (``random_state=0``, ``split_merge=0``), passed to every
  fit below as ``weights_init``/``means_init``/``precisions_init``.
- EM's optimum: batch EM from the start to tol 1e-6 (max_iter 1,000). EM at defaults: tol 1e-3. gd: the estimator
  at its defaults (certified stop). Control: gd with the plateau rule alone (``certify`` off). Polish: EM to tol
  1e-6 from gd's end, the optimum of the basin gd ended in.
- Read: the training and held-out gaps to EM's optimum (nats per row, positive = gd below), gd's last certificate
  (the gain of one exact EM step from its end), the polish gain, seconds (one thread; gd with and without the
  certificate interleaved, so their ratio is what the certificate costs).
- Rule: gd's stop is *certified* when its last certificate is below tol (1e-3). gd *reaches EM's optimum* when
  its training gap is at most 0.001. A larger gap with a polish gain at most 0.001 is *another optimum*: EM from
  gd's end stays there, so no stopping rule closes it.

    .venv/bin/python benchmarks/gd_certificate.py            # writes benchmarks/results/gd_certificate.json
"""

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

K = D = 16
SHAPES: dict[str, tuple[float, float, float]] = {  # mean spread, eigenvalue scale, condition number
    "issue": (1.0, 0.05, 40.0),
    "separated": (4.0, 0.05, 4.0),
    "overlapping": (0.5, 0.3, 4.0),
    "ill_conditioned": (1.5, 0.01, 1000.0),
}


def make_truth(name: str, seed: int) -> dict[str, np.ndarray]:
    """The mixture of data set ``name`` (see the module docstring)."""
    if name == "benchmark":
        sys.path.insert(0, str(Path(__file__).parent))
        from gmm_vs_peers import make_truth as peers_truth

        return peers_truth(seed)
    spread, scale, cond = SHAPES[name]
    rng = np.random.RandomState(seed)
    means = rng.randn(K, D) * spread
    covs = np.empty((K, D, D))
    for j in range(K):
        q, _ = np.linalg.qr(rng.randn(D, D))
        ev = np.exp(rng.uniform(0, math.log(cond), D))
        ev[0], ev[1] = 1.0, cond
        covs[j] = (q * (ev * scale)) @ q.T
    return {"weights": rng.dirichlet(5 * np.ones(K)), "means": means, "covariances": covs}


def draw(truth: dict[str, np.ndarray], n: int, rng: np.random.RandomState) -> np.ndarray:
    z = rng.choice(K, size=n, p=truth["weights"])
    chol = np.linalg.cholesky(truth["covariances"])
    out = np.empty((n, D))
    for j in range(K):
        idx = np.nonzero(z == j)[0]
        out[idx] = truth["means"][j] + rng.randn(len(idx), D) @ chol[j].T
    return out.astype(np.float32)


def _fit(x: np.ndarray, start: dict[str, Any], **kw: Any) -> tuple[Any, float]:
    from implicit_em import GaussianMixture

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GaussianMixture(K, split_merge=0, **start, **kw).fit(x)
    return model, time.perf_counter() - t0


def _start_of(model: Any) -> dict[str, Any]:
    return {
        "weights_init": np.asarray(model.weights_, dtype=np.float64),
        "means_init": np.asarray(model.means_, dtype=np.float64),
        "precisions_init": np.asarray(model.precisions_, dtype=np.float64),
    }


def one(name: str, seed: int, n: int) -> dict[str, Any]:
    from implicit_em.mixture._fitting import REGISTRY

    rng = np.random.RandomState(seed + 1000)
    truth = make_truth(name, seed)
    x, held = draw(truth, n, rng), draw(truth, 100_000, rng)
    start_model, _ = _fit(x, {}, max_iter=0, random_state=0)
    start = _start_of(start_model)
    optimum, t_opt = _fit(x, start, tol=1e-6, max_iter=1000)
    default, t_em = _fit(x, start)
    schedule = REGISTRY["gd"].schedule  # type: ignore[attr-defined]
    gd, t_gd = _fit(x, start, fitter="gd", random_state=0)
    schedule["certify"] = False
    try:
        plateau, t_plateau = _fit(x, start, fitter="gd", random_state=0)
    finally:
        schedule["certify"] = True
    polish, _ = _fit(x, _start_of(gd), tol=1e-6, max_iter=1000)
    train = {m: float(v.score(x)) for m, v in (("optimum", optimum), ("em", default), ("gd", gd),
                                              ("plateau", plateau), ("polish", polish))}  # fmt: skip
    test = {m: float(v.score(held)) for m, v in (("optimum", optimum), ("em", default), ("gd", gd),
                                                ("plateau", plateau))}  # fmt: skip
    last = gd.certificates_[-1][1] if gd.certificates_ else float("nan")
    gap = train["optimum"] - train["gd"]
    polish_gain = train["polish"] - train["gd"]
    verdict = "reaches EM's optimum" if gap <= 1e-3 else "another optimum" if polish_gain <= 1e-3 else "stopped short"
    return {
        "data": name,
        "seed": seed,
        "n": n,
        "train": train,
        "heldout": test,
        "gap_train": {m: train["optimum"] - v for m, v in train.items()},
        "gap_heldout": {m: test["optimum"] - v for m, v in test.items()},
        "gd_epochs": int(gd.n_iter_),
        "gd_converged": bool(gd.converged_),
        "certificates": gd.certificates_,
        "certified": bool(last < 1e-3),
        "plateau_epochs": int(plateau.n_iter_),
        "polish_gain": polish_gain,
        "em_iters": {"optimum": int(optimum.n_iter_), "em": int(default.n_iter_)},
        "seconds": {"optimum": t_opt, "em": t_em, "gd": t_gd, "plateau": t_plateau},
        "verdict": verdict,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--data", default="benchmark," + ",".join(SHAPES))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gd_certificate.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    for name in args.data.split(","):
        load = os.getloadavg()[0]
        row = one(name, args.seed, args.n)
        row["load_before"] = load
        rows.append(row)
        print(
            f"{name:16s} gap train gd {row['gap_train']['gd']:+.4f} plateau-only {row['gap_train']['plateau']:+.4f} "
            f"EM(tol 1e-3) {row['gap_train']['em']:+.4f} | held-out gd {row['gap_heldout']['gd']:+.4f} | "
            f"cert {row['certificates']} polish {row['polish_gain']:.4f} | gd {row['seconds']['gd']:.1f} s "
            f"(plateau-only {row['seconds']['plateau']:.1f} s, EM {row['seconds']['em']:.1f} s) -> {row['verdict']}",
            flush=True,
        )
    meta = {"threads": 1, "machine": platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
