"""Ctrl-C to one process of a ``torch.distributed`` fit (issue 11 §3): every process stops in the same iteration
with the same parameters and raises ``KeyboardInterrupt``; none returns as if it had finished, none hangs; each
keeps its own checkpoint file (``fit.rank{r}of2.ckpt``) for the rerun.

Two gloo processes on CPU are started as subprocesses (so that a real SIGINT can be sent to one of them); the
interrupted flag travels with the all-reduce of the E-step statistics (``mixture/_distributed.py``).
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch.distributed as dist

import implicit_em
from implicit_em._runio import torch_threads
from implicit_em.mixture import GaussianMixture

SRC = str(Path(implicit_em.__file__).resolve().parents[1])

_RANK = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import torch
    import torch.distributed as dist
    from implicit_em.mixture import GaussianMixture
    from implicit_em.mixture._fitting import History

    torch.set_num_threads(1)
    rank, init_file, out_dir, target, fitter = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    rng = np.random.RandomState(0)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    x = np.vstack([c + rng.randn(700, 2) @ rng.randn(2, 2) * 0.7 for c in centres])[rng.permutation(2800)]
    shard = np.array_split(x, [1000])[rank]
    start = {
        "means_init": np.array([[1.0, 1.0], [5.0, 1.0], [1.0, 5.0], [5.0, 5.0]]),
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(2)] * 4),
    }
    record = History.epoch

    def slow_record(self, n, *args):
        record(self, n, *args)
        if n == 3 and rank == target:
            open(f"{out_dir}/at-iteration-3", "w").close()
        time.sleep(0.01)

    History.epoch = slow_record
    batch = None if fitter == "em" else 256  # online_em, gd: 11 global mini-batch steps per epoch
    options = {"fitter": fitter, "batch_size": batch, "split_merge": 0, "tol": 0.0, "max_iter": 100000}
    gm = GaussianMixture(4, random_state=0, checkpoint=f"{out_dir}/fit.ckpt", **options, **start)
    try:
        gm.fit(shard)
        outcome = "RETURNED"
    except KeyboardInterrupt:
        outcome = "INTERRUPTED"
    except Exception as err:
        outcome = "ERROR-" + type(err).__name__
    np.savez(f"{out_dir}/rank{rank}.npz", means=gm.means_, cov=gm.covariances_, weights=gm.weights_, n=gm.n_iter_)
    kept = os.path.exists(f"{out_dir}/fit.rank{rank}of2.ckpt")  # each process keeps its own file for the rerun
    print(outcome, "KEPT" if kept else "REMOVED", flush=True)
    dist.barrier()  # both done before either tears its connections down (gloo aborts otherwise)
    dist.destroy_process_group()
    """
)


def _concatenated() -> np.ndarray:
    rng = np.random.RandomState(0)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    return np.vstack([c + rng.randn(700, 2) @ rng.randn(2, 2) * 0.7 for c in centres])[rng.permutation(2800)]


def _stop(procs: list[subprocess.Popen[str]], why: str) -> None:
    for p in procs:
        p.kill()
    outs = [p.communicate() for p in procs]
    pytest.fail(
        f"{why}: " + " | ".join(f"rc {p.returncode}: {o} {e[-1500:]}" for p, (o, e) in zip(procs, outs, strict=True))
    )


def _interrupted(tmp_path: Path, target: int, fitter: str) -> list[Any]:
    """Two processes fitting with ``fitter``, a SIGINT to rank ``target`` after its third iteration (epoch);
    checks that both raised and returns what each saved."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    env = {**os.environ, "PYTHONPATH": SRC, "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
    args = [str(tmp_path / "init"), str(tmp_path), str(target), fitter]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in (0, 1)
    ]
    deadline = time.monotonic() + 90
    while not (tmp_path / "at-iteration-3").exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            _stop(procs, "the processes never reached iteration 3")
        time.sleep(0.02)
    procs[target].send_signal(signal.SIGINT)
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=60)[0].split())
        except subprocess.TimeoutExpired:
            _stop(procs, "a process hung after the SIGINT")
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs == [["INTERRUPTED", "KEPT"]] * 2  # both raised; each kept its checkpoint (issue 14: was refused)
    return [np.load(tmp_path / f"rank{r}.npz") for r in (0, 1)]


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("target", [0, 1])
def test_sigint_to_one_process_stops_every_process_alike(target: int, tmp_path: Path) -> None:
    ranks = _interrupted(tmp_path, target, "em")
    n = int(ranks[0]["n"])
    assert n >= 3 and int(ranks[1]["n"]) == n
    for key in ("means", "cov", "weights"):
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key])
    start = {
        "means_init": np.array([[1.0, 1.0], [5.0, 1.0], [1.0, 5.0], [5.0, 5.0]]),
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(2)] * 4),
    }
    with torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single = GaussianMixture(4, split_merge=0, tol=0.0, max_iter=n, random_state=0, **start).fit(_concatenated())
    np.testing.assert_allclose(ranks[0]["means"], single.means_, rtol=0, atol=1e-10)  # the fit of n iterations
    np.testing.assert_allclose(ranks[0]["cov"], single.covariances_, rtol=0, atol=1e-10)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_sigint_stops_distributed_online_em_and_gd_in_the_same_step(fitter: str, tmp_path: Path) -> None:
    # the interrupt flag travels with each mini-batch's all-reduce (issue 14): both processes stop before the
    # same global step, with the same parameters; a process that raised alone would leave the other hanging
    ranks = _interrupted(tmp_path, 1, fitter)
    n = int(ranks[0]["n"])
    assert n >= 3 and int(ranks[1]["n"]) == n
    for key in ("means", "cov", "weights"):
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key])
