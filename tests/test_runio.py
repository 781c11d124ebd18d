"""Run I/O shared by the audit runner and the wind tunnel: atomic writes, environment, threads, signals."""

import importlib.metadata
import json
import os
import signal
from pathlib import Path

import torch

from implicit_em import _runio
from implicit_em.audit import core as _base
from implicit_em.audit import runner

# ---------------------------------------------------------------------------------------------- users
# The audit runner, the experiments and the wind tunnel use these helpers, not copies of them.


def test_the_runner_the_experiments_and_the_windtunnel_use_the_shared_helpers() -> None:
    wt_train = importlib.import_module("implicit_em.windtunnel.train")  # the package's `train` is the function
    assert runner._write_atomic is _runio.write_text_atomic
    assert runner._environment is _runio.environment
    assert _base.torch_threads is _runio.torch_threads
    assert wt_train.torch_threads is _runio.torch_threads and wt_train.DeferSignals is _runio.DeferSignals


def test_environment_records_versions_platform_threads_and_date() -> None:
    env = _runio.environment()
    keys = ["implicit_em", "torch", "numpy", "scikit-learn", "transformers", "python", "platform", "cpu_count"]
    assert list(env) == [*keys, "torch_threads", "loadavg", "date"]
    assert env["torch"] == torch.__version__ and env["torch_threads"] == torch.get_num_threads()
    assert env["numpy"] == importlib.metadata.version("numpy")
    assert _runio.distribution_version("no-such-distribution-xyz") is None
    assert list(_runio.versions()) == ["python", "torch", "implicit_em"]
    assert _runio.versions()["implicit_em"] == env["implicit_em"]


def test_defer_signals_holds_sigterm_and_restores_the_handler() -> None:
    handler = signal.getsignal(signal.SIGTERM)
    with _runio.DeferSignals() as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.received == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is handler


def test_torch_threads_sets_and_restores_the_setting() -> None:
    before = torch.get_num_threads()
    with _runio.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_write_json_atomic_writes_indented_json_without_a_trailing_newline(tmp_path: Path) -> None:
    obj = {"config": {"lr": 1e-3, "test_lengths": [30, 50]}, "kl": 0.125}
    _runio.write_json_atomic(obj, tmp_path / "a.json")
    _runio.write_json_atomic(obj, tmp_path / "b.json", indent=1)
    assert (tmp_path / "a.json").read_text() == json.dumps(obj, indent=2)
    assert (tmp_path / "b.json").read_text() == json.dumps(obj, indent=1)


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
    assert torch.load(ckpt, weights_only=True) == {"step": 3}
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
