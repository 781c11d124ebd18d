"""Fault injection on the wind tunnel's command line (issue 11): a child process trains with checkpoints, is
killed (SIGKILL) or interrupted (SIGINT, SIGTERM) at a random, seeded step, and is resumed by the same command.
Its final weights and ``metrics.json`` (train_loss history included; only timings and load averages left out) equal
those of an uninterrupted run, bit for bit.

The step is chosen by a seeded generator; the parent polls the child's checkpoint and signals it once the
checkpoint reaches that step, after a seeded delay of a few milliseconds, so the signal lands anywhere in a step:
in the forward pass, the backward pass, an evaluation or the middle of writing a checkpoint.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import implicit_em

_STEPS = 400
_ARGS = ["train", "--preset", "tiny", "--no-progress", "--steps", str(_STEPS), "--eval-every", "10"]
_ARGS += ["--checkpoint-every", "3"]  # checkpoints between evaluations: the running train_loss must survive
_UNTIMED = ("wall_s", "cpu_s", "loadavg_start", "loadavg_end")


def _command(out: Path) -> list[str]:
    return [sys.executable, "-m", "implicit_em.windtunnel", *_ARGS, "--out", str(out)]


def _env() -> dict[str, str]:
    """The child imports this very tree of implicit_em."""
    src = str(Path(implicit_em.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def _run(out: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(out), env=_env(), capture_output=True, text=True, timeout=timeout)


def _checkpoint_step(out: Path) -> int | None:
    try:
        return int(torch.load(out / "checkpoint.pt", weights_only=True)["step"])
    except (FileNotFoundError, EOFError, RuntimeError):  # not written yet (each write is atomic)
        return None


def _signal_at(out: Path, sig: int, seed: int, timeout: float = 120) -> tuple[int, int]:
    """Start the command, send ``sig`` once its checkpoint reaches a seeded random step; (return code, that step)."""
    rng = random.Random(seed)
    target, delay = rng.randrange(10, _STEPS // 4), rng.uniform(0.0, 0.03)
    with open(out.with_suffix(".log"), "w") as log:
        child = subprocess.Popen(_command(out), env=_env(), stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + timeout
            while child.poll() is None and time.monotonic() < deadline:
                step = _checkpoint_step(out)
                if step is not None and step >= target:
                    time.sleep(delay)
                    child.send_signal(sig)
                    break
                time.sleep(0.005)
            return child.wait(timeout=timeout), target
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


def _comparable(out: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """metrics.json without timings and load averages (strict JSON), and the final weights."""

    def refuse(token: str) -> None:
        raise ValueError(f"metrics.json holds {token}, which is not JSON")

    metrics = json.loads((out / "metrics.json").read_text(), parse_constant=refuse)
    metrics = {k: v for k, v in metrics.items() if k not in _UNTIMED}
    metrics["history"] = [{k: v for k, v in h.items() if k not in ("elapsed_s", "cpu_s")} for h in metrics["history"]]
    return metrics, torch.load(out / "checkpoint.pt", weights_only=True)["model"]


def _assert_same_run(a: Path, b: Path) -> None:
    (metrics_a, weights_a), (metrics_b, weights_b) = _comparable(a), _comparable(b)
    assert metrics_a["complete"] and metrics_a["steps_done"] == _STEPS
    assert len(metrics_a["history"]) == _STEPS // 10
    assert metrics_b == metrics_a  # train_loss, kl, curves, oracle, config...: every number, exactly
    assert weights_b.keys() == weights_a.keys()
    for k, v in weights_a.items():
        torch.testing.assert_close(weights_b[k], v, rtol=0, atol=0)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run, by the same command."""
    out = tmp_path_factory.mktemp("straight") / "run"
    done = _run(out)
    assert done.returncode == 0, done.stderr
    return out


def _kill_and_resume(straight: Path, out: Path, seeds: list[int]) -> None:
    for seed in seeds:  # one kill per seed; the later ones land in a resumed run
        code, target = _signal_at(out, signal.SIGKILL, seed)
        assert code == -signal.SIGKILL, f"the child ended by itself ({code}) before the kill at step {target}"
        step = _checkpoint_step(out)
        assert step is not None and target <= step < _STEPS
    resumed = _run(out)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stderr
    _assert_same_run(straight, out)


def test_sigkill_at_a_random_step_then_the_same_command_resumes_exactly(straight: Path, tmp_path: Path) -> None:
    _kill_and_resume(straight, tmp_path / "run", seeds=[0])


@pytest.mark.parametrize("seeds", [[1], [2, 3], [4, 5, 6]])
def test_sigkill_repeatedly_then_resume_exactly(straight: Path, tmp_path: Path, seeds: list[int]) -> None:
    _kill_and_resume(straight, tmp_path / "run", seeds)


def _interrupt_and_resume(straight: Path, out: Path, sig: int, seed: int) -> None:
    code, target = _signal_at(out, sig, seed)
    assert code == 130, f"the interrupted child exited {code}, not 130 (KeyboardInterrupt after saving)"
    stopped = json.loads((out / "metrics.json").read_text())
    step = _checkpoint_step(out)
    assert step is not None and target <= step < _STEPS
    assert not stopped["complete"] and stopped["steps_done"] == step  # saved at the step where it stopped
    assert "interrupted at step" in out.with_suffix(".log").read_text()
    resumed = _run(out)
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_run(straight, out)


def test_sigint_stops_at_a_step_boundary_with_a_checkpoint_and_resumes_exactly(straight: Path, tmp_path: Path) -> None:
    _interrupt_and_resume(straight, tmp_path / "run", signal.SIGINT, seed=10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("seed", [11, 12])
def test_interrupts_at_random_steps_resume_exactly(straight: Path, tmp_path: Path, sig: int, seed: int) -> None:
    _interrupt_and_resume(straight, tmp_path / "run", sig, seed)
