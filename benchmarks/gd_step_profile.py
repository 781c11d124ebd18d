"""Where one gradient-descent step spends its time, piece by piece: the autograd step against the float32 fast
step of ``mixture/_gd_fast.py`` (issue 14, part 2).

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gd_step_profile.py [--n 1000000] [--batch 8192]

Data as ``gmm_vs_peers.py`` draws them (a 16-component mixture in D = 16, seed 0), float32, from a start of one EM
iteration on a 20,000-row sample, in the estimator's coordinates (the data covariance's Cholesky factor, float64
parameters). The pieces of the autograd step (float32 data, float64 parameters: its features and GEMMs run in
float64, what the estimator ran before issue 14 part 2): the standardisation (a triangular solve per batch), the
forward of the score matrix (an autograd graph), the features, the two GEMMs with the normalisation, the backward,
Adam. Of the fast step: the score matrix (float64, no graph), the fused E-step (float32), the analytic backward with
the ``reg_covar`` penalty's gradient (closed form, added to dW inside it), fused Adam. Repeats are interleaved and
medians reported (ms per step). Writes benchmarks/results/gd_step_profile.json, with the thread count and the load
average before and after.
Nothing here changes the library."""

import argparse
import itertools
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from gmm_vs_peers import draw, make_truth  # this script's folder

from implicit_em.mixture import GaussianMixture, _gd, _gd_fast, _stats
from implicit_em.mixture._data import DataSource


def _timed(pieces: dict[str, list[float]], name: str, t0: float) -> float:
    t1 = time.perf_counter()
    pieces.setdefault(name, []).append(1e3 * (t1 - t0))
    return t1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    x = draw(make_truth(0), args.n, np.random.RandomState(0))
    start = GaussianMixture(16, max_iter=1, random_state=0).fit(x[:20_000])
    data = DataSource(x, torch.device("cpu"), torch.float32)
    shift = torch.from_numpy(x).mean(0)
    params = _stats.MixtureParams(
        *(
            torch.as_tensor(np.asarray(v), dtype=torch.float32)
            for v in (start.weights_, start.means_, start.covariances_, start.precisions_cholesky_)
        )
    )
    coords = _gd.feature_scale(data, shift, 1.0, "full")
    batches = list(itertools.islice(data.batches(args.batch, torch.Generator().manual_seed(0)), args.steps))
    old = _gd.make_state(params._replace(means=params.means.double()), "full", shift, coords, 1e-3, "adam")
    new = _gd.make_state(params, "full", shift, coords, 1e-3, "adam")  # float32 params: fused Adam
    fast = _gd_fast.FastStep(new.components, new.logits, shift, coords, args.batch, torch.float32)
    load_before = list(os.getloadavg())
    old_t: dict[str, list[float]] = {}
    new_t: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for xb in batches:  # the autograd step, as _gd.gd_step ran it before (float32 data, float64 state)
            t = time.perf_counter()
            x_std = _gd._standardise(xb, shift, coords)
            t = _timed(old_t, "standardise", t)
            old.optimizer.zero_grad(set_to_none=True)
            a = _gd.log_joint_matrix(old, True)
            t = _timed(old_t, "score matrix (autograd forward)", t)
            with torch.no_grad():
                phi_t = _stats.quadratic_features_t(x_std.to(a.dtype))
                t = _timed(old_t, "features", t)
                resp, _ = _stats.log_normalize(a.detach().T @ phi_t)
                grad = (phi_t @ resp.T).mul_(-1.0 / xb.shape[0])
                t = _timed(old_t, "GEMMs + normalise", t)
            a.backward(grad)
            t = _timed(old_t, "backward (autograd)", t)
            old.optimizer.step()
            _timed(old_t, "Adam", t)
        for xb in batches:
            t = time.perf_counter()
            a_t = fast.score_matrix_t(True)
            t = _timed(new_t, "score matrix (float64, no graph)", t)
            s, _ = fast.statistics(xb, a_t)
            t = _timed(new_t, "fused E-step (features, GEMMs, normalise)", t)
            fast.set_gradient(s, xb.shape[0], True, 1e-6)  # with the estimator's default reg_covar's penalty
            t = _timed(new_t, "backward (analytic, with reg_covar's penalty)", t)
            new.optimizer.step()
            _timed(new_t, "Adam (fused)", t)
    report = {
        "config": vars(args),
        "loadavg_before": load_before,
        "loadavg_after": list(os.getloadavg()),
        "autograd_step_ms": {k: statistics.median(v) for k, v in old_t.items()},
        "fast_step_ms": {k: statistics.median(v) for k, v in new_t.items()},
    }
    for key in ("autograd_step_ms", "fast_step_ms"):
        report[key]["total"] = sum(report[key].values())
    out = Path(__file__).parent / "results" / "gd_step_profile.json"
    out.write_text(json.dumps(report, indent=1))
    for key in ("autograd_step_ms", "fast_step_ms"):
        print(key)
        for name, ms in report[key].items():
            print(f"  {name:45s} {ms:7.3f}")


if __name__ == "__main__":
    main()
