"""``examples/fit_gmm_torchrun.py`` under ``torchrun`` (``python -m torch.distributed.run``) on two processes: each
reads its row range of one memory-mapped ``.npy``, and the model rank 0 saves equals the single-process fit of
the whole file (issue 14). Fails on the old code: the default start came from rank 0's shard alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist

import implicit_em
from implicit_em._runio import torch_threads
from implicit_em.mixture import GaussianMixture

ROOT = Path(__file__).resolve().parents[1]
SRC = str(Path(implicit_em.__file__).resolve().parents[1])


def _tiny(path: Path) -> np.ndarray:
    rng = np.random.RandomState(1)
    centres = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    x = np.vstack([c + rng.randn(200, 2) @ rng.randn(2, 2) for c in centres])[rng.permutation(600)]
    np.save(path, x)
    return x


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize(("fitter", "checkpoint"), [("em", False), ("online_em", False), ("em", True)])
def test_torchrun_example_equals_the_single_process_fit(tmp_path: Path, fitter: str, checkpoint: bool) -> None:
    # with --checkpoint: each process writes fit.rank{r}of2.ckpt and removes it when the fit completes
    npy, model = tmp_path / "x.npy", tmp_path / "model.npz"
    _tiny(npy)
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),  # loopback: no network
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    args = [str(npy), "--n-components", "3", "--fitter", fitter, "--batch-size", "128", "--threads", "1"]
    args += ["--checkpoint", str(tmp_path / "fit.ckpt")] if checkpoint else []
    done = subprocess.run(
        [*cmd, str(ROOT / "examples" / "fit_gmm_torchrun.py"), *args, "--out", str(model)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert (summary["world_size"], summary["rows"], summary["rows_here"]) == (2, 600, 300)
    fitted = GaussianMixture.load(model)
    with torch_threads(1):  # in a process group a memmap's mini-batches are an array's (rows of a global permutation)
        single = GaussianMixture(3, fitter=fitter, batch_size=128, random_state=0).fit(np.load(npy))
    assert fitted.n_iter_ == single.n_iter_ == summary["n_iter"]
    for key in ("weights_", "means_", "covariances_"):
        np.testing.assert_allclose(getattr(fitted, key), getattr(single, key), rtol=0, atol=1e-10)  # sum order only
    assert abs(summary["lower_bound"] - single.lower_bound_) < 1e-10
    assert not list(tmp_path.glob("fit*")), "each process removes its checkpoint files"
