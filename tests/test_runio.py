"""Run I/O shared by the audit runner and the wind tunnel: atomic writes, environment, threads, signals."""

import importlib
import json
import os
import signal
from pathlib import Path

import torch

from implicit_em import _runio
from implicit_em.experiments import _base, runner

wt_train = importlib.import_module("implicit_em.windtunnel.train")  # the package's `train` is the function

# ---------------------------------------------------------------------------------------------- old == new
# These pin the helpers that moved into _runio to the copies they replace; they go with the copies.


def test_write_text_atomic_equals_the_runners_copy(tmp_path: Path) -> None:
    text = json.dumps({"a": [1, 2.5, "x"], "b": None}, indent=1)
    runner._write_atomic(tmp_path / "old.json", text)
    _runio.write_text_atomic(tmp_path / "new.json", text)
    assert (tmp_path / "old.json").read_bytes() == (tmp_path / "new.json").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "old.json"]


def test_write_json_atomic_equals_the_windtunnels_copy(tmp_path: Path) -> None:
    obj = {"config": {"lr": 1e-3, "test_lengths": [30, 50]}, "kl": 0.125, "name": "K=20"}
    wt_train._write_json(obj, tmp_path / "old.json")
    _runio.write_json_atomic(obj, tmp_path / "new.json")
    assert (tmp_path / "old.json").read_bytes() == (tmp_path / "new.json").read_bytes()


def test_save_torch_atomic_equals_the_windtunnels_copy(tmp_path: Path) -> None:
    obj = {"model": {"w": torch.randn(3, 2)}, "step": 7, "generator": torch.Generator().manual_seed(1).get_state()}
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    wt_train._save_atomic(obj, tmp_path / "old" / "checkpoint.pt")
    _runio.save_torch_atomic(obj, tmp_path / "new" / "checkpoint.pt")
    assert (tmp_path / "old" / "checkpoint.pt").read_bytes() == (tmp_path / "new" / "checkpoint.pt").read_bytes()


def test_versions_equal_the_windtunnels_and_environment_the_runners() -> None:
    assert _runio.versions() == wt_train._versions()
    assert list(_runio.versions()) == list(wt_train._versions())
    old, new = runner._environment(), _runio.environment()
    assert list(old) == list(new)
    moving = {"loadavg", "date"}  # read at call time
    assert {k: v for k, v in old.items() if k not in moving} == {k: v for k, v in new.items() if k not in moving}


def test_torch_threads_equals_the_experiments_copy() -> None:
    before = torch.get_num_threads()
    seen = []
    for threads in (_base.torch_threads, _runio.torch_threads):
        with threads(1):
            seen.append(torch.get_num_threads())
        seen.append(torch.get_num_threads())
    assert seen == [1, before, 1, before]


def test_defer_signals_equals_the_windtunnels_copy() -> None:
    for defer in (wt_train._DeferSignals, _runio.DeferSignals):
        handler = signal.getsignal(signal.SIGTERM)
        with defer() as signals:
            os.kill(os.getpid(), signal.SIGTERM)
            assert signals.received == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is handler


# ---------------------------------------------------------------------------------------------- behaviour


def test_atomic_writes_replace_the_target_and_leave_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text("old")
    _runio.write_json_atomic({"kl": 0.5}, path)
    assert json.loads(path.read_text()) == {"kl": 0.5}
    _runio.write_text_atomic(path, "new")
    assert path.read_text() == "new"
    ckpt = tmp_path / "checkpoint.pt"
    _runio.save_torch_atomic({"step": 3}, ckpt)
    assert torch.load(ckpt, weights_only=False) == {"step": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "metrics.json"]


def test_package_version_is_the_installed_metadata() -> None:
    import implicit_em

    assert _runio.package_version() == implicit_em.__version__
    assert _runio.versions()["torch"] == torch.__version__


def test_torch_threads_restores_the_setting_after_an_error_and_none_leaves_it() -> None:
    before = torch.get_num_threads()
    try:
        with _runio.torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before
    with _runio.torch_threads(None):
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before
