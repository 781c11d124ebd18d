"""Pilot for same_optimum's start fix (issue 25, third session): quick seeds 100 and 101, full seed 100; not deciding.
Old starts: K data rows, data covariance. New: k-means++ seeds, then one hard assignment's cells (weights,
means, covariances + reg_covar), as scikit-learn's init_params='k-means++'. Reads EM's certified fixed point from
each start: its smallest weight, iterations, the gain from the start (the control needs > 0.01 nats/sample)."""

import json
import sys
import time
from typing import Any

import numpy as np
import torch
from sklearn.cluster import kmeans_plusplus

from implicit_em import gaussian
from implicit_em.audit.claims import same_optimum as so
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._stats import MixtureParams


def new_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """k-means++ seeds, then one hard assignment's cells (scikit-learn's init_params='k-means++')."""
    centers, _ = kmeans_plusplus(x, k, random_state=rng.randint(2**31 - 1))
    lab = ((x[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)
    d = x.shape[1]
    w = np.bincount(lab, minlength=k) / len(x)
    mu = np.stack([x[lab == j].mean(0) for j in range(k)])
    cov = np.stack(
        [np.cov(x[lab == j], rowvar=False, bias=True).reshape(d, d) for j in range(k)]
    ) + so.REG_COVAR * np.eye(d)
    covs = torch.from_numpy(cov)
    return MixtureParams(
        torch.from_numpy(w), torch.from_numpy(mu), covs, gaussian.precisions_cholesky(covs, so.COVARIANCE)
    )


def main(size: str, seed: int, which: str) -> None:
    """Print one JSON row per start: EM's certified fixed point from it."""
    cfg = so.Config.full() if size == "full" else so.Config.quick()
    truth = so._truth(cfg.k, cfg.d, seed)
    rng = np.random.RandomState(seed + 1)
    x = so._draw(*truth, cfg.n, rng)
    data = DataSource(x, torch.device("cpu"), torch.float64)
    pr = so.problem(x, cfg.k, cfg.prior)
    srng = np.random.RandomState(seed + 2)
    make = so._data_row_start if which == "old" else new_start
    for s in range(cfg.n_starts):
        st = make(x, cfg.k, srng)
        t = time.time()
        end, g, it, step = so.em_fixed_point(
            data, st, pr, cfg.em_step_tol, cfg.em_max_iter, cfg.em_block, cfg.em_reg_covar
        )
        ll = so.value(end, pr)
        row = dict(start=s, start_min_w=float(st.weights.min()), em_min_w=float(end.weights.min()), grad=g, iters=it)
        row.update(step=step, gain=ll - so.value(st, pr), ll=ll, sec=round(time.time() - t, 1))
        print(json.dumps(row), flush=True)


# usage: python benchmarks/same_optimum_start_pilot.py quick|full SEED old|new
# (the experiment's starts are new_start moved into the module: tests/test_experiments_same_optimum.py checks it)
if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
