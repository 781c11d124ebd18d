"""Small data: scikit-learn's GaussianMixture against ours (defaults, and ``split_merge=0``) on its bundled sets.

The README's speed-ups are measured at a million rows; this shows where they do not hold. Each contender is
fitted ``--repeats`` times, interleaved round by round, on one torch thread and one BLAS thread
(``OMP_NUM_THREADS=1`` is set before numpy loads), and the medians, the mean log-likelihood per sample and the
load average go to ``benchmarks/results/small_data.json``.

    .venv/bin/python benchmarks/small_data.py --repeats 5
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy and torch load their thread pools

import argparse
import json
import statistics
import sys
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn import datasets
from sklearn.mixture import GaussianMixture as SklearnGM

from implicit_em.mixture import GaussianMixture

CASES = [("digits", "load_digits", 10, "diag"), ("wine", "load_wine", 3, "full"), ("iris", "load_iris", 3, "full"),
         ("breast_cancer", "load_breast_cancer", 2, "full")]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "small_data.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    load_before = os.getloadavg()
    rows = []
    for name, loader, k, cov in CASES:
        x = getattr(datasets, loader)().data.astype(np.float64)
        contenders: dict[str, Any] = {
            "scikit-learn": partial(SklearnGM, k, covariance_type=cov, random_state=0),
            "ours, defaults (split-and-merge)": partial(GaussianMixture, k, covariance_type=cov, random_state=0),
            "ours, split_merge=0": partial(GaussianMixture, k, covariance_type=cov, random_state=0, split_merge=0),
        }
        times: dict[str, list[float]] = {c: [] for c in contenders}
        score: dict[str, float] = {}
        for _ in range(args.repeats):
            for label, make in contenders.items():
                t0 = time.perf_counter()
                model = make().fit(x)
                times[label].append(time.perf_counter() - t0)
                score[label] = float(model.score(x))
        sk = statistics.median(times["scikit-learn"])
        for label in contenders:
            med = statistics.median(times[label])
            rows.append({"data": name, "shape": list(x.shape), "k": k, "covariance_type": cov, "contender": label,
                         "median_s": med, "vs_sklearn": sk / med, "log_likelihood": score[label]})  # fmt: skip
            print(f"{name:<14}{label:<36}{med:8.3f} s  {sk / med:6.2f}x scikit-learn  log-lik {score[label]:.4f}")
    record = {
        "repeats": args.repeats,
        "rows": rows,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
