"""Wind-tunnel checkpoints (issue 11): an exact resume (train_loss included), a load that runs no code, a clear
error for an unreadable checkpoint, and a run that stops at the first non-finite step with its last good state."""

import importlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.train import train

_TIMING = ("elapsed_s", "cpu_s")


def _load(run_dir: Path) -> dict[str, Any]:
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)


def _strict_json(path: Path) -> Any:
    """json.loads that refuses NaN and Infinity (they are not JSON)."""

    def refuse(token: str) -> None:
        raise ValueError(f"{path.name} holds {token}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def _history_without_timing(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in h.items() if k not in _TIMING} for h in _strict_json(run_dir / "metrics.json")["history"]]


# ---------------------------------------------------------------------------------------------- finding 1


@pytest.mark.parametrize("stop_after", [3, 15, 24])
def test_resume_restores_the_running_train_loss_bitwise(tmp_path: Path, stop_after: int) -> None:
    """Stopping between two evaluations and resuming gives the same train_loss history, to the bit."""
    c = WindTunnelConfig.tiny(steps=30, checkpoint_every=7, eval_every=10)
    train(c, tmp_path / "straight", progress=False)
    train(c, tmp_path / "resumed", progress=False, stop_after=stop_after)
    train(c, tmp_path / "resumed", progress=False)
    straight, resumed = (_history_without_timing(tmp_path / d) for d in ("straight", "resumed"))
    assert [h["step"] for h in straight] == [10, 20, 30]
    assert resumed == straight  # every field, train_loss included, compared exactly
    for k, v in _load(tmp_path / "straight")["model"].items():
        torch.testing.assert_close(_load(tmp_path / "resumed")["model"][k], v, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------- finding 2


class _RunsCode:
    """Unpickling this runs ``exec`` of a line that creates a marker file: what a crafted checkpoint can do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def _crafted_checkpoint(run_dir: Path, marker: Path, config: WindTunnelConfig) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "checkpoint.pt"
    torch.save({"config": config.to_dict(), "step": 1, "payload": _RunsCode(marker)}, path)
    return path


def test_the_crafted_checkpoint_would_run_code_under_a_plain_pickle_load(tmp_path: Path) -> None:
    """The payload of the next test is live: loaded without weights_only it creates the marker."""
    marker = tmp_path / "ran"
    path = _crafted_checkpoint(tmp_path / "run", marker, WindTunnelConfig.tiny())
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_resume_refuses_a_checkpoint_that_would_run_code_and_runs_none(tmp_path: Path) -> None:
    c = WindTunnelConfig.tiny(steps=3)
    marker = tmp_path / "ran"
    path = _crafted_checkpoint(tmp_path / "run", marker, c)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"checkpoint\.pt.*(refus|weights_only)") as info:
        train(c, tmp_path / "run", progress=False)
    assert not marker.exists()
    assert "weights_only=False" not in str(info.value)  # never advise loading it unsafely
    assert path.read_bytes() == before  # left as it was: no silent restart


def test_the_runs_own_checkpoint_holds_only_tensors_and_plain_values(tmp_path: Path) -> None:
    """What train writes loads with weights_only=True: configs as plain dicts, RNG states as tensors."""
    train(WindTunnelConfig.tiny(task="hmm", steps=4), tmp_path, progress=False)
    state = _load(tmp_path)
    assert isinstance(state["config"], dict) and isinstance(state["generator"], torch.Tensor)
    assert WindTunnelConfig.from_dict(state["config"]) == WindTunnelConfig.tiny(task="hmm", steps=4)

    def plain(x: Any) -> bool:
        if isinstance(x, dict):
            return all(isinstance(k, (str, int)) and plain(v) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return all(plain(v) for v in x)
        return x is None or isinstance(x, (bool, int, float, str, torch.Tensor))

    assert plain(state)


# ---------------------------------------------------------------------------------------------- finding 3


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "garbage": b"\x80\x02not a checkpoint"}[how])


@pytest.mark.parametrize("how", ["empty", "truncated", "garbage"])
def test_an_unreadable_checkpoint_is_named_with_how_to_start_over(tmp_path: Path, how: str) -> None:
    c = WindTunnelConfig.tiny(steps=5)
    train(c, tmp_path, progress=False)
    ckpt = tmp_path / "checkpoint.pt"
    _corrupt(ckpt, how)
    before = ckpt.read_bytes()
    with pytest.raises(ValueError, match=r"checkpoint\.pt.*delete it.*(fresh|new)") as info:
        train(c, tmp_path, progress=False)
    assert str(ckpt) in str(info.value)
    assert ckpt.read_bytes() == before  # an error, not a silent restart over it


def test_a_checkpoint_that_is_not_a_windtunnel_one_is_named(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(3)}, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"checkpoint\.pt.*not a wind-tunnel checkpoint.*missing"):
        train(WindTunnelConfig.tiny(steps=2), tmp_path, progress=False)


# ---------------------------------------------------------------------------------------------- finding 5


@pytest.mark.parametrize("lr", [1e3, 1e5])
def test_a_diverging_run_stops_naming_the_step_and_loss_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, lr: float
) -> None:
    c = WindTunnelConfig.tiny(steps=50, lr=lr, warmup_steps=0, checkpoint_every=1, eval_every=1)
    with pytest.raises(FloatingPointError, match=r"^training diverged at step \d+: .*loss") as info:
        train(c, tmp_path, progress=False)
    bad_step = int(re.match(r"training diverged at step (\d+)", str(info.value)).group(1))  # type: ignore[union-attr]
    assert bad_step >= 2  # so that there is a good state before it
    state = _load(tmp_path)
    assert state["step"] == bad_step - 1  # the last finite state, one step before the bad one
    assert all(bool(torch.isfinite(v).all()) for v in state["model"].values())
    assert f"step {bad_step - 1}) is kept in {tmp_path / 'checkpoint.pt'}" in str(info.value)
    if (tmp_path / "metrics.json").exists():
        _strict_json(tmp_path / "metrics.json")


def test_a_run_that_diverges_at_its_first_step_leaves_no_nan_checkpoint(tmp_path: Path) -> None:
    c = WindTunnelConfig.tiny(steps=5, lr=1e30, warmup_steps=0, checkpoint_every=1, eval_every=1)
    with pytest.raises(FloatingPointError, match=r"step 1: .*loss .*no checkpoint was written"):
        train(c, tmp_path, progress=False)
    assert not (tmp_path / "checkpoint.pt").exists() and not (tmp_path / "metrics.json").exists()


def test_a_non_finite_loss_stops_before_the_update(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss that is NaN at step 3 (here injected) ends the run there: no optimiser step, checkpoint at 2."""
    train_module = importlib.import_module("implicit_em.windtunnel.train")  # the package's `train` is the function
    calls = {"n": 0}
    real = train_module.windtunnel_loss

    def nan_at_step_3(logits: torch.Tensor, batch: Any, loss: str = "softmax") -> torch.Tensor:
        calls["n"] += 1
        value = real(logits, batch, loss)
        return value * math.nan if calls["n"] == 3 else value

    monkeypatch.setattr(train_module, "windtunnel_loss", nan_at_step_3)
    with pytest.raises(FloatingPointError, match=r"step 3: the loss is not finite \(loss nan"):
        train(WindTunnelConfig.tiny(steps=10, checkpoint_every=1), tmp_path, progress=False)
    assert _load(tmp_path)["step"] == 2


def test_metrics_json_of_every_finished_run_is_strict_json(tmp_path: Path) -> None:
    for task in ("bijection", "hmm"):
        train(WindTunnelConfig.tiny(task=task, steps=3, loss="sigmoid"), tmp_path / task, progress=False)
        m = _strict_json(tmp_path / task / "metrics.json")
        assert all(math.isfinite(h["train_loss"]) for h in m["history"])


def test_no_library_module_loads_a_checkpoint_unsafely() -> None:
    """Every torch.load in src/ is weights_only=True, and nothing there unpickles directly."""
    import implicit_em

    src = Path(implicit_em.__file__).parent
    sources = {p: p.read_text() for p in src.rglob("*.py")}
    loads = [(p.name, line.strip()) for p, s in sources.items() for line in s.splitlines() if "torch.load(" in line]
    assert loads and all("weights_only=True" in line for _, line in loads), loads
    assert not [p.name for p, s in sources.items() if "pickle.load" in s]
