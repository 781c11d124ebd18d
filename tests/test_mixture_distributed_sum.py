"""The one collective of an EM iteration or online-EM step (``_distributed.all_reduce_pass``): the Summary packed
into one flat buffer (Σ r x xᵀ as its upper triangle) and summed by ``sum_small`` (an all-gather and a sum in
rank order on gloo).

The packing tests fail on the old code (no ``pack_summary``) and on a planted bug that drops the mirrored lower
triangle in ``unpack_summary``; the three-process test pins the sum in rank order, bitwise and identical on every
rank, which gloo's ring all-reduce (the old code) does not promise.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from implicit_em.mixture import _distributed
from implicit_em.mixture._stats import Summary, summarize


def _summary(seed: int, n: int = 50, k: int = 3, d: int = 4) -> Summary:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, dtype=torch.float64, generator=g)
    a = torch.randn(d * (d + 1) // 2 + d + 1, k, dtype=torch.float64, generator=g) * 0.1
    return summarize(x, a, torch.zeros(d, dtype=torch.float64))[0]


def _assert_same(got: Summary, want: Summary) -> None:
    for g, w, name in zip(got, want, Summary._fields, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("stop", [False, True])
def test_pack_then_unpack_gives_the_summary_back_bitwise(stop: bool) -> None:
    s = _summary(0)
    flat = _distributed.pack_summary(s, stop)
    k, d = s.sx.shape
    assert flat.shape == (1 + k + k * d + k * d * (d + 1) // 2 + 2,)  # n, nk, sx, upper sxx, loglik, flag
    back, flag = _distributed.unpack_summary(flat, s)
    _assert_same(back, s)
    assert flag is stop


def test_the_sum_of_packed_buffers_unpacks_to_the_sum_of_the_summaries() -> None:
    # what any element-wise all-reduce of the buffers computes: the statistics' sum, bitwise
    s0, s1 = _summary(1), _summary(2, n=70)
    summed, flag = _distributed.unpack_summary(
        _distributed.pack_summary(s0, False) + _distributed.pack_summary(s1, True), s0
    )
    _assert_same(summed, s0 + s1)
    assert flag


WORLD = 3


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        total, stop = _distributed.all_reduce_pass(_summary(10 + rank, n=40 + 17 * rank), rank == 2)
        arrays = {f: t.numpy() for f, t in zip(Summary._fields, total, strict=True)}
        np.savez(Path(out_dir) / f"rank{rank}.npz", stop=stop, **arrays)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_three_processes_sum_in_rank_order_and_agree_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # loopback: no network
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    want = _summary(10, n=40) + _summary(11, n=57) + _summary(12, n=74)  # rank order, element by element
    for rank in range(WORLD):
        got = np.load(tmp_path / f"rank{rank}.npz")
        assert bool(got["stop"])  # rank 2's interrupt reaches every process in the same collective
        for name, w in zip(Summary._fields, want, strict=True):
            np.testing.assert_array_equal(got[name], w.numpy(), err_msg=f"rank {rank}: {name}")
