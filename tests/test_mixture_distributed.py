"""Batch EM over two processes (torch.distributed, gloo on CPU) equals batch EM on the concatenated data."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from implicit_em.mixture import GaussianMixture

WORLD = 2


def _data() -> np.ndarray:
    rng = np.random.RandomState(0)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    return np.vstack([c + rng.randn(700, 2) @ rng.randn(2, 2) * 0.7 for c in centres])[rng.permutation(2800)]


def _start() -> dict[str, np.ndarray]:
    return {
        "means_init": np.array([[1.0, 1.0], [5.0, 1.0], [1.0, 5.0], [5.0, 5.0]]),
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(2)] * 4),
    }


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        x = _data()
        shard = np.array_split(x, [1000])[rank]  # unequal shards: 1000 and 1800 rows
        given = GaussianMixture(4, split_merge=0, tol=1e-8, random_state=0, **_start()).fit(shard)
        default = GaussianMixture(4, random_state=0).fit(shard)
        np.savez(
            Path(out_dir) / f"rank{rank}.npz",
            given_means=given.means_,
            given_cov=given.covariances_,
            given_weights=given.weights_,
            given_lb=given.lower_bound_,
            given_iter=given.n_iter_,
            default_means=default.means_,
            default_lb=default.lower_bound_,
        )
        try:
            GaussianMixture(4, fitter="online_em").fit(shard)
            raised = False
        except NotImplementedError:
            raised = True
        np.save(Path(out_dir) / f"raised{rank}.npy", np.array(raised))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_em_over_two_processes_equals_em_on_all_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))  # loopback: no network
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(WORLD)]
    single = GaussianMixture(4, split_merge=0, tol=1e-8, random_state=0, **_start()).fit(_data())
    for r in ranks:
        np.testing.assert_allclose(r["given_means"], single.means_, rtol=0, atol=1e-10)
        np.testing.assert_allclose(r["given_cov"], single.covariances_, rtol=0, atol=1e-10)
        np.testing.assert_allclose(r["given_weights"], single.weights_, rtol=0, atol=1e-12)
        assert abs(float(r["given_lb"]) - single.lower_bound_) < 1e-10
        assert int(r["given_iter"]) == single.n_iter_
    # with the default start (rank 0's k-means, split-and-merge proposed by rank 0) every process ends identical
    np.testing.assert_array_equal(ranks[0]["default_means"], ranks[1]["default_means"])
    assert float(ranks[0]["default_lb"]) == float(ranks[1]["default_lb"])
    assert float(ranks[0]["default_lb"]) >= single.lower_bound_ - 1e-3  # the same optimum, to the default tol
    assert all(bool(np.load(tmp_path / f"raised{r}.npy")) for r in range(WORLD))
