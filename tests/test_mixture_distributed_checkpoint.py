"""Checkpoints of a fit in a ``torch.distributed`` process group (issue 14, part 1; ``mixture/_checkpoint.py``).

Two gloo processes on CPU, started as subprocesses, fit the cases of ``tests/_checkpoint_cases.py`` (several
starts, split-and-merge for the EM fitters) over shards of 100 and 140 rows with ``checkpoint=PATH``; each
process writes ``PATH`` with ``.rank{r}of2`` before the suffix. The em and online_em fits are "killed" by an
exception fit does not catch right after the k-th checkpoint write (the files as a kill there leaves them); the
gd fit by a real SIGKILL of both processes at an unplanned moment after its k-th write. The oracle of a
resumed fit is the uninterrupted fit of the same group without a checkpoint (bitwise, float64) and, as in
``tests/test_mixture_distributed.py``, the single-process fit on the union of the shards. Mismatched files (one
process without its file, files at different points, a shard's file on the other process, files of another
world size beside) raise the same ``ValueError`` on both processes, within a timeout; one process a write
behind (the only other state a kill can leave: every write waits for both processes) falls back. On the old
code every fit
with a checkpoint in a process group raised ``NotImplementedError``.
"""

import json
import os
import re
import shutil
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
from _checkpoint_cases import FITS, blobs
from implicit_em._runio import torch_threads
from implicit_em.mixture import GaussianMixture, _checkpoint

SRC = str(Path(implicit_em.__file__).resolve().parents[1])
TESTS = str(Path(__file__).resolve().parent)
SPLIT = 100  # rank 0 holds rows [0, 100) of the blobs, rank 1 rows [100, 240)
#: fitter -> (estimator parameters, the checkpoint write after which both processes die). Two starts each, the
#: EM fitters with a split-and-merge trial; every write is one unit but the writes before the second start and
#: before split-and-merge, so the kill lands in the second start: em 93 writes (51 iterations, then 39), the
#: kill after iteration 16 of start 2; online_em 54 (30 epochs, then 22), after epoch 9; gd 7 (3 + 3 epochs of
#: 64 Adam steps), the SIGKILL in the ~1.5 s of start 2's epochs after the write before it.
CASES: dict[str, tuple[dict[str, Any], int]] = {
    "em": ({**FITS["em"], "split_merge": 1}, 70),
    "online_em": (FITS["online_em"], 41),
    "gd": ({**FITS["gd"], "max_iter": 3}, 4),
}
PARAMS = ("weights_", "means_", "covariances_", "precisions_cholesky_")

_RANK = textwrap.dedent(
    """
    import json, os, shutil, sys, warnings
    from pathlib import Path
    import numpy as np
    import torch
    import torch.distributed as dist
    from _checkpoint_cases import blobs
    from implicit_em.mixture import GaussianMixture, _checkpoint

    torch.set_num_threads(1)
    rank, init_file, out, plan = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), json.loads(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    shard = np.array_split(blobs(), [SPLIT])[rank]
    save, load, saves, resumed = _checkpoint.GroupCheckpoint.save, _checkpoint.GroupCheckpoint.load, [0], [False]

    class Killed(BaseException):  # what fit does not catch: the files as a kill right after the write leaves them
        pass

    def announce():  # the parent SIGKILLs both processes when it sees this
        open(out / "announce", "w").close()

    def save_then_die(self, payload):
        save(self, payload)
        saves[0] += 1
        shutil.copy(self.path, f"{self.path}.save{saves[0]}")  # every point, for the mismatch cases
        if saves[0] == kill_at and sigkill:
            announce()
        elif saves[0] == kill_at:
            raise Killed

    def load_and_tell(self):
        payload = load(self)
        resumed[0] = payload is not None
        return payload

    _checkpoint.GroupCheckpoint.save, _checkpoint.GroupCheckpoint.load = save_then_die, load_and_tell
    report = {}
    for name, options, path, kill_at, sigkill in plan:
        saves[0] = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gd stops at max_iter: a ConvergenceWarning
            try:
                gm = GaussianMixture(**options, checkpoint=path).fit(shard)
                params = {k: getattr(gm, k).tolist() for k in ("weights_", "means_", "covariances_",
                                                               "precisions_cholesky_")}
                report[name] = {"resumed": resumed[0], "n_iter": gm.n_iter_, "lower_bound": gm.lower_bound_,
                                "history": [h["loglik"] for h in gm.history_], **params}
            except ValueError as err:
                report[name] = {"error": str(err)}
            except Killed:
                report[name] = {"killed": saves[0]}
        resumed[0] = False
    (out / f"report-rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()  # both done before either tears its connections down: without it gloo's teardown aborted
    dist.destroy_process_group()  # one launch in three ("terminate called without an active exception")
    """
).replace("SPLIT", str(SPLIT))


def _launch(tmp: Path, plan: list[list[Any]], tag: str, sigkill: bool = False) -> list[dict[str, Any]]:
    """Both processes through ``plan``, rows (name, estimator parameters, checkpoint path or None, the write
    after which to die or -1, whether by SIGKILL: the parent kills both when the file ``announce`` appears);
    each one's report (none when killed)."""
    script = tmp / "rank.py"
    script.write_text(_RANK)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SRC, TESTS]),
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),  # loopback: no network
        "OMP_NUM_THREADS": "1",
    }
    args = [str(tmp / f"init-{tag}"), str(tmp), json.dumps(plan)]
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
    deadline = time.monotonic() + 120
    while sigkill and not (tmp / "announce").exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.005)
    for p in procs if sigkill else []:
        p.kill()  # SIGKILL, at whatever point of the fit each process is
    try:
        errs = [p.communicate(timeout=120)[1] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{tag}: a process hung (no process may raise alone)")
    for r, (p, err) in enumerate(zip(procs, errs, strict=True)):
        assert p.returncode == (-9 if sigkill else 0), f"{tag} rank {r}: rc {p.returncode}: {err[-3000:]}"
    return [] if sigkill else [json.loads((tmp / f"report-rank{r}.json").read_text()) for r in (0, 1)]


def _files(path: Path) -> list[Path]:
    """The files of processes 0 and 1 and their previous writes: [0, 1, 0.prev, 1.prev]."""
    ranks = [_checkpoint.rank_path(path, r, 2) for r in (0, 1)]
    return ranks + [p.with_name(p.name + ".prev") for p in ranks]


def _arrange(tmp: Path, name: str, writes: tuple[tuple[int | None, int | None], ...]) -> Path:
    """At the checkpoint path ``name``.ckpt, em's files as process r had them: its file holding write
    ``writes[r][0]`` and its ``.prev`` write ``writes[r][1]`` (None: no such file)."""
    path, killed = tmp / f"{name}.ckpt", _files(tmp / "killed-em.ckpt")
    for r, pair in enumerate(writes):
        for dst, n in zip(_files(path)[r::2], pair, strict=True):
            if n is not None:
                shutil.copy(f"{killed[r]}.save{n}", dst)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """One launch of both processes that kills a fit of each fitter after its write ``CASES[fitter][1]`` (em and
    online_em by an exception fit does not catch, gd last by SIGKILL soon after); then one more launch with the
    uninterrupted fits, the resumed fits (from the files the kill left) and em from rearranged files."""
    tmp = tmp_path_factory.mktemp("distckpt")
    kill = [["killed", options, str(tmp / f"killed-{f}.ckpt"), k, f == "gd"] for f, (options, k) in CASES.items()]
    _launch(tmp, kill, "kill", sigkill=True)
    plan = []
    for fitter, (options, _) in CASES.items():
        for src, dst in zip(_files(tmp / f"killed-{fitter}.ckpt"), _files(tmp / f"r-{fitter}.ckpt"), strict=True):
            if src.exists():  # a SIGKILL between keeping the file as .prev and the new write leaves only .prev
                shutil.copy(src, dst)
        plan += [
            [f"plain-{fitter}", options, None, -1, False],
            [f"resumed-{fitter}", options, str(tmp / f"r-{fitter}.ckpt"), -1, False],
        ]
    k = CASES["em"][1]
    arranged = {
        "behind": ((k - 1, k - 2), (k, k - 1)),  # process 0 was killed before its last write: both resume k - 1
        "mid_write": ((None, k - 1), (k, k - 1)),  # ... between keeping its file as .prev and the new write
        "first": ((1, None), (None, None)),  # killed around the first write: a fresh fit on both
        "missing": ((k, k - 1), (None, None)),
        "apart": ((k - 2, None), (k, k - 1)),  # no write both hold
        "swapped": ((k, k - 1), (k, k - 1)),
        "world": ((k, k - 1), (k, k - 1)),
    }
    for name, writes in arranged.items():
        plan.append([name, CASES["em"][0], str(_arrange(tmp, name, writes)), -1, False])
    a, b, _, _ = _files(tmp / "swapped.ckpt")
    a.rename(tmp / "t")  # each process finds the other shard's file
    b.rename(a)
    (tmp / "t").rename(b)
    shutil.copy(a, _checkpoint.rank_path(tmp / "world.ckpt", 0, 3))  # a file of a 3-process fit beside
    return tmp, _launch(tmp, plan, "resume")


skip = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


@skip
@pytest.mark.parametrize(
    ("fitter", "case"),
    [
        *((f, f"resumed-{f}") for f in CASES),
        ("em", "behind"),
        ("em", "mid_write"),
    ],
)
def test_a_killed_distributed_fit_resumes_to_the_uninterrupted_fit_bitwise(
    runs: tuple[Path, list[dict[str, Any]]], fitter: str, case: str
) -> None:
    # behind, mid_write: one process a write behind the other; both fall back to the write both hold
    tmp, reports = runs
    for rank, report in enumerate(reports):
        got, want = dict(report[case]), dict(report[f"plain-{fitter}"])
        assert got.pop("resumed", None) and not want.pop("resumed"), f"rank {rank}: {report[case]}"
        assert got == want, f"rank {rank}: the resumed fit differs from the uninterrupted one"
    assert reports[0][case] == reports[1][case]
    name = f"r-{fitter}" if case.startswith("resumed") else case
    assert not any(p.exists() for p in _files(tmp / f"{name}.ckpt")), "each process removes its files"


@skip
def test_a_group_killed_around_its_first_write_starts_afresh(runs: tuple[Path, list[dict[str, Any]]]) -> None:
    # process 0 holds write 1, process 1 nothing: the latest point both hold is the start
    tmp, reports = runs
    for report in reports:
        got, want = dict(report["first"]), dict(report["plain-em"])
        assert got.pop("resumed", True) is False and want.pop("resumed") is False, report["first"]
        assert got == want
    assert not any(p.exists() for p in _files(tmp / "first.ckpt"))


@skip
@pytest.mark.parametrize("fitter", list(CASES))
def test_the_resumed_distributed_fit_equals_the_single_process_fit_on_the_union(
    runs: tuple[Path, list[dict[str, Any]]], fitter: str
) -> None:
    got = runs[1][0][f"resumed-{fitter}"]
    with torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single = GaussianMixture(**CASES[fitter][0]).fit(blobs())
    assert got["n_iter"] == single.n_iter_
    for key in PARAMS:  # the order of the sums over the shards only; Adam carries gd's round-off: 1e-9
        np.testing.assert_allclose(got[key], getattr(single, key), rtol=0, atol=1e-9 if fitter == "gd" else 1e-10)


@skip
@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing", r"process 1: no file"),
        ("apart", r"process 0: write 68 \(start 2 after 15 .*process 1: write 70 .* and write 69"),
        ("swapped", r"belongs to another fit: data rows is"),
        ("world", r"another process group or a single process lie beside .*world\.rank0of3\.ckpt"),
    ],
)
def test_mismatched_checkpoints_raise_the_same_error_on_every_process(
    runs: tuple[Path, list[dict[str, Any]]], case: str, says: str
) -> None:
    tmp, reports = runs
    errors = [report[case].get("error", "") for report in reports]
    assert all("cannot be resumed together" in e and "Delete the per-process files" in e for e in errors), errors
    assert any(re.search(says, e) for e in errors), errors
    assert f"{case}.rank0of2.ckpt" in errors[0] and f"{case}.rank1of2.ckpt" in errors[1]
    kept = [p.exists() for p in _files(tmp / f"{case}.ckpt")[:2]]
    assert kept == [True, case != "missing"], "the files are kept"


def test_a_single_process_refuses_to_start_beside_per_process_files(tmp_path: Path) -> None:
    path = tmp_path / "fit.ckpt"
    _checkpoint.rank_path(path, 1, 2).write_bytes(b"")
    with pytest.raises(ValueError, match=r"per-process checkpoints .*fit\.rank1of2\.ckpt of a torch.distributed"):
        GaussianMixture(2, checkpoint=path).fit(blobs())


def test_rank_path_puts_the_rank_and_world_size_before_the_suffix() -> None:
    assert _checkpoint.rank_path(Path("/a/fit.ckpt"), 0, 2) == Path("/a/fit.rank0of2.ckpt")
    assert _checkpoint.rank_path(Path("fit"), 3, 12) == Path("fit.rank3of12")
