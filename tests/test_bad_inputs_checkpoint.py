"""The bad-input battery of the checkpoint and interrupt options of ``GaussianMixture`` (issue 11 §1-2).

Rows in the format of ``tests/_battery.py``: a misuse raises ``ValueError`` (or ``TypeError``) naming the
argument or the file and saying how to start over; the uses that must keep working fit. A checkpoint that does
not belong to the call is written by an interrupted fit of other parameters or data (``_written``).
"""

import os
import pickle
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from _battery import Case, ids
from implicit_em.mixture import GaussianMixture
from implicit_em.mixture._fitting import History

_DIR: list[Path] = []  # this module's temporary folder (set by the fixture below)
BASE: dict[str, Any] = {"n_components": 3, "random_state": 0, "max_iter": 6, "tol": 0.0, "split_merge": 0}
_rng = np.random.RandomState(0)
X = np.vstack([c + _rng.randn(60, 2) for c in ([0.0, 0.0], [5.0, 1.0], [1.0, 5.0])])[_rng.permutation(180)]
X_OTHER = X + 1e-3  # the same shape, other values


@pytest.fixture(scope="module", autouse=True)
def _folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    _DIR[:] = [tmp_path_factory.mktemp("checkpoints")]


def _p(name: str) -> Path:
    return _DIR[0] / name


def _gm(**kw: Any) -> GaussianMixture:
    return GaussianMixture(**{**BASE, **kw})


@contextmanager
def _sigint_after_record(k: int) -> Iterator[None]:
    """A SIGINT (a real one, to this process) right after the k-th iteration's history record."""
    original, calls = History.epoch, [0]

    def record(self: History, *args: Any) -> None:
        original(self, *args)
        calls[0] += 1
        if calls[0] == k:
            os.kill(os.getpid(), signal.SIGINT)

    History.epoch = record  # type: ignore[method-assign]
    try:
        yield
    finally:
        History.epoch = original  # type: ignore[method-assign]


def _interrupted(gm: GaussianMixture, x: Any = X, k: int = 2) -> tuple[bool, GaussianMixture]:
    """Fit with a SIGINT after iteration k: (whether KeyboardInterrupt reached us, the estimator)."""
    with _sigint_after_record(k):
        try:
            gm.fit(x)
        except KeyboardInterrupt:
            return True, gm
    return False, gm


def _written(name: str, x: Any = X, **kw: Any) -> Path:
    """A checkpoint left by an interrupted fit of these parameters (BASE updated with kw) and data."""
    path = _p(name)
    path.unlink(missing_ok=True)
    raised, _ = _interrupted(_gm(**kw, checkpoint=path), x)
    assert raised and path.exists()
    return path


def _file(name: str, content: bytes) -> Path:
    path = _p(name)
    path.write_bytes(content)
    return path


def _truncated(name: str) -> Path:
    whole = _written(name + ".whole").read_bytes()
    return _file(name, whole[: len(whole) // 2])


def _torch_file(name: str, obj: Any) -> Path:
    path = _p(name)
    torch.save(obj, path)
    return path


def _other_version(name: str) -> Path:
    path = _written(name)
    payload = torch.load(path, weights_only=True)
    torch.save({**payload, "version": 999}, path)
    return path


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {_p('pickle-ran-code')}",))


def _pickle_that_runs_code() -> None:
    """A pickle whose loading would run a shell command; it must be refused without running it."""
    path = _file("pickled.ckpt", pickle.dumps(_RunsCode()))
    try:
        _gm(checkpoint=path).fit(X)
    finally:
        assert not _p("pickle-ran-code").exists(), "loading the checkpoint ran code"


def _missing_dir() -> Path:
    return _p("no-such-folder") / "fit.ckpt"


def _under_a_file() -> Path:
    return _file("a-file", b"x") / "fit.ckpt"


# -- checks of the rows that fit ---------------------------------------------------------------------------


def _fitted_and_removed(name: str) -> Any:
    def check(gm: GaussianMixture) -> bool:
        return bool(np.isfinite(gm.means_).all()) and not _p(name).exists()

    return check


def _same_as_plain(**kw: Any) -> Any:
    def check(gm: GaussianMixture) -> bool:
        with pytest.warns(Warning):  # ConvergenceWarning: tol=0
            plain = _gm(**kw).fit(X)
        return np.array_equal(gm.means_, plain.means_) and gm.n_iter_ == plain.n_iter_

    return check


def _resumed(name: str, **kw: Any) -> GaussianMixture:
    path = _written(name, **kw)
    with pytest.warns(Warning):
        return _gm(**kw, checkpoint=path).fit(X)


def _resumed_with(name: str, **options: Any) -> GaussianMixture:
    """Resumed by a call that differs only in options that do not change the result."""
    path = _written(name)
    with pytest.warns(Warning):
        return _gm(checkpoint=path, **options).fit(X)


def _interrupt_kept(k: int) -> Any:
    def check(out: tuple[bool, GaussianMixture]) -> bool:
        raised, gm = out
        return raised and gm.n_iter_ == k and gm.converged_ is False

    return check


def _interrupted_partial_fit(fitter: str) -> tuple[bool, GaussianMixture]:
    gm = _gm(fitter=fitter).partial_fit(X[:60])
    with _sigint_inside(History, "epoch"):
        try:
            gm.partial_fit(X[60:120])
        except KeyboardInterrupt:
            return True, gm
    return False, gm


@contextmanager
def _sigint_inside(owner: Any, name: str) -> Iterator[None]:
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return out

    setattr(owner, name, wrapped)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _stale_tmp() -> Path:
    path = _p("stale.ckpt")
    _file("stale.ckpt.tmp", b"half a write")
    return path


def _warm_chain() -> GaussianMixture:
    path = _p("warm.ckpt")
    with pytest.warns(Warning):
        gm = _gm(warm_start=True, checkpoint=path).fit(X)
        gm.fit(X)  # the first fit removed its checkpoint; the continuation writes and removes its own
    return gm


def _warm_continuation(path: Path) -> GaussianMixture:
    with pytest.warns(Warning):
        gm = _gm(warm_start=True).fit(X)  # fitted: the next fit continues from these parameters
    return gm.set_params(checkpoint=path).fit(X)


def _loader() -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.from_numpy(X)), batch_size=50)


_FOREIGN = "belongs to another fit: {}.*Delete the file to start this fit over"
_UNREADABLE = r"cannot be read.*empty, truncated or not a GaussianMixture checkpoint\. Delete the file"

CASES = [
    # checkpoint_every
    Case("checkpoint_every 0", lambda: _gm(checkpoint_every=0).fit(X), ValueError, "'checkpoint_every'.*>= 1. Got 0"),
    Case("checkpoint_every negative", lambda: _gm(checkpoint_every=-2).fit(X), ValueError, "'checkpoint_every'"),
    Case("checkpoint_every float", lambda: _gm(checkpoint_every=2.5).fit(X), ValueError, "'checkpoint_every'.*2.5"),
    Case("checkpoint_every bool", lambda: _gm(checkpoint_every=True).fit(X), ValueError, "'checkpoint_every'"),
    Case("checkpoint_every string", lambda: _gm(checkpoint_every="3").fit(X), ValueError, "'checkpoint_every'"),
    Case("checkpoint_every None", lambda: _gm(checkpoint_every=None).fit(X), ValueError, "'checkpoint_every'"),
    Case(
        "checkpoint_every 0 in partial_fit",
        lambda: _gm(checkpoint_every=0).partial_fit(X),
        ValueError,
        "'checkpoint_every'",
    ),
    # the path
    Case("checkpoint an int", lambda: _gm(checkpoint=123).fit(X), TypeError, "'checkpoint'.*file path.*123"),
    Case("checkpoint a list", lambda: _gm(checkpoint=["a.ckpt"]).fit(X), TypeError, "'checkpoint'.*file path"),
    Case(
        "checkpoint in a missing directory",
        lambda: _gm(checkpoint=_missing_dir()).fit(X),
        ValueError,
        "no-such-folder, which does not exist; create the directory first",
    ),
    Case(
        "checkpoint under a file",
        lambda: _gm(checkpoint=_under_a_file()).fit(X),
        ValueError,
        "a-file, which does not exist",
    ),
    Case("checkpoint a directory", lambda: _gm(checkpoint=_DIR[0]).fit(X), ValueError, "is a directory"),
    Case("checkpoint the empty string", lambda: _gm(checkpoint="").fit(X), ValueError, "is a directory"),
    # files that are not checkpoints of this call
    Case("empty checkpoint", lambda: _gm(checkpoint=_file("empty.ckpt", b"")).fit(X), ValueError, _UNREADABLE),
    Case("truncated checkpoint", lambda: _gm(checkpoint=_truncated("half.ckpt")).fit(X), ValueError, _UNREADABLE),
    Case(
        "garbage checkpoint",
        lambda: _gm(checkpoint=_file("garbage.ckpt", b"\x00\x01 not a zip")).fit(X),
        ValueError,
        _UNREADABLE,
    ),
    Case("pickle that would run code", _pickle_that_runs_code, ValueError, _UNREADABLE),
    Case(
        "torch file that would run code, and no advice to load it unsafely",
        lambda: _gm(checkpoint=_torch_file("runs-code.ckpt", {"x": _RunsCode()})).fit(X),
        ValueError,
        r"(?s)^(?!.*weights_only.{0,5}\b(set to )?.?False).*GaussianMixture checkpoint .*(cannot be read|is refused)",
    ),
    Case(
        "torch file that is not a checkpoint",
        lambda: _gm(checkpoint=_torch_file("tensor.ckpt", torch.ones(3))).fit(X),
        ValueError,
        "is not a GaussianMixture checkpoint. Delete the file",
    ),
    Case(
        "dict that is not a checkpoint",
        lambda: _gm(checkpoint=_torch_file("dict.ckpt", {"format": "other"})).fit(X),
        ValueError,
        "is not a GaussianMixture checkpoint",
    ),
    Case(
        "checkpoint of another format version",
        lambda: _gm(checkpoint=_other_version("v999.ckpt")).fit(X),
        ValueError,
        "format version 999.*Delete the file",
    ),
    Case(
        "checkpoint of other n_components",
        lambda: _gm(n_components=2, checkpoint=_written("k3.ckpt")).fit(X),
        ValueError,
        _FOREIGN.format("n_components is 3 in the file but 2 in this call"),
    ),
    Case(
        "checkpoint of another covariance_type",
        lambda: _gm(covariance_type="diag", checkpoint=_written("full.ckpt")).fit(X),
        ValueError,
        _FOREIGN.format("covariance_type"),
    ),
    Case(
        "checkpoint of another fitter",
        lambda: _gm(fitter="gd", checkpoint=_written("em.ckpt")).fit(X),
        ValueError,
        _FOREIGN.format("fitter is 'em' in the file but 'gd'"),
    ),
    Case(
        "checkpoint of other data values",
        lambda: _gm(checkpoint=_written("x.ckpt")).fit(X_OTHER),
        ValueError,
        _FOREIGN.format("data rows"),
    ),
    Case(
        "checkpoint of other data shape",
        lambda: _gm(checkpoint=_written("x-all.ckpt")).fit(X[:150]),
        ValueError,
        _FOREIGN.format("(data rows|data shape)"),
    ),
    Case(
        "checkpoint of an array used with a tensor",
        lambda: _gm(checkpoint=_written("array.ckpt")).fit(torch.from_numpy(X)),
        ValueError,
        _FOREIGN.format("(data dtype|data kind)"),
    ),
    Case(
        "checkpoint of another random_state",
        lambda: _gm(random_state=1, checkpoint=_written("seed0.ckpt")).fit(X),
        ValueError,
        _FOREIGN.format("random_state is 0 in the file but 1"),
    ),
    Case(
        "checkpoint of other means_init",
        lambda: _gm(means_init=X[:3] + 1, checkpoint=_written("means.ckpt", means_init=X[:3])).fit(X),
        ValueError,
        _FOREIGN.format("means_init is array"),
    ),
    Case(
        "checkpoint of another dtype",
        lambda: _gm(dtype="float32", checkpoint=_written("f64.ckpt")).fit(X),
        ValueError,
        _FOREIGN.format("dtype"),
    ),
    Case(
        "cold checkpoint found by a warm-start continuation",
        lambda: _warm_continuation(_written("cold.ckpt")),
        ValueError,
        _FOREIGN.format("start is init in the file but warm [0-9a-f]+ in this call"),
    ),
    # interrupts: raised to the caller, the last complete state kept
    Case("Ctrl-C during fit (em)", lambda: _interrupted(_gm()), check=_interrupt_kept(2)),
    Case("Ctrl-C during fit (online_em)", lambda: _interrupted(_gm(fitter="online_em")), check=_interrupt_kept(2)),
    Case("Ctrl-C during fit (gd)", lambda: _interrupted(_gm(fitter="gd")), check=_interrupt_kept(2)),
    Case("Ctrl-C with n_init 2", lambda: _interrupted(_gm(n_init=2), k=8), check=_interrupt_kept(2)),
    Case(
        "Ctrl-C with a checkpoint writes it",
        lambda: _interrupted(_gm(checkpoint=_p("ctrl-c.ckpt"), checkpoint_every=100)),
        check=lambda out: _interrupt_kept(2)(out) and _p("ctrl-c.ckpt").exists(),
    ),
    Case(
        "Ctrl-C during partial_fit (online_em)",
        lambda: _interrupted_partial_fit("online_em"),
        check=_interrupt_kept(2),  # the step completes and is counted
    ),
    Case("Ctrl-C during partial_fit (gd)", lambda: _interrupted_partial_fit("gd"), check=_interrupt_kept(2)),
    # uses that must keep working
    Case("no checkpoint", lambda: _gm(max_iter=100, tol=1e-3).fit(X), check=lambda gm: gm.converged_),
    Case(
        "checkpoint as str",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=str(_p("s.ckpt"))).fit(X),
        check=_fitted_and_removed("s.ckpt"),
    ),
    Case(
        "checkpoint as Path",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("p.ckpt")).fit(X),
        check=_fitted_and_removed("p.ckpt"),
    ),
    Case(
        "checkpoint_every numpy int",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("np.ckpt"), checkpoint_every=np.int64(2)).fit(X),
        check=_fitted_and_removed("np.ckpt"),
    ),
    Case(
        "checkpoint_every above max_iter",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("big.ckpt"), checkpoint_every=10**6).fit(X),
        check=_fitted_and_removed("big.ckpt"),
    ),
    Case(
        "checkpoint with max_iter 0",
        lambda: _gm(max_iter=0, checkpoint=_p("m0.ckpt")).fit(X),
        check=_fitted_and_removed("m0.ckpt"),
    ),
    Case(
        "stale temporary file",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_stale_tmp()).fit(X),
        check=lambda gm: not _p("stale.ckpt").exists() and not _p("stale.ckpt.tmp").exists(),
    ),
    Case("resume of the same call (em)", lambda: _resumed("same-em.ckpt"), check=_same_as_plain()),
    Case(
        "resume of the same call (online_em)",
        lambda: _resumed("same-oem.ckpt", fitter="online_em", batch_size=50),
        check=_same_as_plain(fitter="online_em", batch_size=50),
    ),
    Case(
        "resume of the same call (gd)",
        lambda: _resumed("same-gd.ckpt", fitter="gd", batch_size=50),
        check=_same_as_plain(fitter="gd", batch_size=50),
    ),
    Case(
        "resume with another verbose and checkpoint_every",
        lambda: _resumed_with("verbose.ckpt", verbose=1, checkpoint_every=5),
        check=_same_as_plain(),
    ),
    Case("warm start with a checkpoint", _warm_chain, check=lambda gm: gm.n_iter_ == 6 and len(gm.history_) == 6),
    Case(
        "partial_fit ignores the checkpoint",
        lambda: _gm(checkpoint=_p("partial.ckpt")).partial_fit(X),
        check=lambda gm: gm.n_iter_ == 1 and not _p("partial.ckpt").exists(),
    ),
    Case(
        "checkpoint with a DataLoader",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("loader.ckpt")).fit(_loader()),
        check=_fitted_and_removed("loader.ckpt"),
    ),
    Case(
        "checkpoint with a tensor",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("tensor-x.ckpt")).fit(torch.from_numpy(X)),
        check=_fitted_and_removed("tensor-x.ckpt"),
    ),
    Case(
        "checkpoint with float32 data",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("f32.ckpt")).fit(X.astype(np.float32)),
        check=_fitted_and_removed("f32.ckpt"),
    ),
    Case(
        "fit_predict with a checkpoint",
        lambda: _gm(max_iter=100, tol=1e-3, checkpoint=_p("fp.ckpt")).fit_predict(X),
        check=lambda labels: labels.shape == (180,) and not _p("fp.ckpt").exists(),
    ),
    Case(
        "checkpoint with n_init 3 and split-and-merge",
        lambda: GaussianMixture(3, n_init=3, random_state=0, checkpoint=_p("n3.ckpt")).fit(X),
        check=_fitted_and_removed("n3.ckpt"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_battery(case: Case) -> None:
    case.check_it()


def test_battery_counts() -> None:
    kinds = [c.kind for c in CASES]
    assert (len(CASES), kinds.count("error"), kinds.count("fit")) == (56, 31, 25)
