"""The wind tunnel's ``checkpoint.pt``: what it holds, and a load that can run no code.

A checkpoint is a plain dict of tensors and plain values (no custom classes), so it loads with
``torch.load(weights_only=True)``::

    config       WindTunnelConfig.to_dict(): str, int, float, bool, None, a tuple of ints
    model        the model's state_dict (tensors)
    optimizer    AdamW's state_dict (tensors, ints, floats, bools, lists)
    generator    the data generator's RNG state, a uint8 tensor
    history      the evaluation records, a list of dicts of floats
    step         optimiser steps done
    loss_sum     running sum of the training loss since the last evaluation (a float)
    loss_n       how many steps that sum holds
    elapsed      wall seconds so far
    cpu          CPU seconds so far

``loss_sum`` and ``loss_n`` make the resumed ``train_loss`` history equal, bit for bit, that of an uninterrupted
run. A file that is empty, truncated, not a checkpoint, or holds anything that would import or call Python code is
refused with a :class:`CheckpointError` that names it and says how to start over: never a silent restart.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from implicit_em._runio import load_torch_weights_only, save_torch_atomic
from implicit_em.windtunnel.config import WindTunnelConfig

__all__ = ["START_OVER", "CheckpointError", "Progress", "load_checkpoint", "restore_checkpoint", "save_checkpoint"]

#: The keys every wind-tunnel checkpoint holds (``loss_sum``/``loss_n``/``cpu`` are absent from older ones).
REQUIRED_KEYS = ("config", "model", "optimizer", "generator", "history", "step", "elapsed")


class CheckpointError(ValueError):
    """A run directory's checkpoint cannot be used: unreadable, not a wind-tunnel checkpoint, unsafe to load, or
    written by a different configuration. The message names the file and how to start over."""


#: How to start over, said by every checkpoint error.
START_OVER = "delete it to start the run over from step 0, or use a fresh run directory (--out) for a new run"


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read ``path`` with ``torch.load(weights_only=True)`` onto the CPU and check its keys.

    Raises:
        CheckpointError: the file cannot be read, holds Python objects other than tensors and plain containers
            (loading them could run code: nothing is executed, the file is refused), or lacks a checkpoint's keys.
    """
    state = load_torch_weights_only(path, what="wind-tunnel checkpoint", start_over=START_OVER, error=CheckpointError)
    if not isinstance(state, dict):
        kind = type(state).__name__
        raise CheckpointError(f"{path} is not a wind-tunnel checkpoint (it holds a {kind}); {START_OVER}")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path} is not a wind-tunnel checkpoint (missing keys {missing}); {START_OVER}")
    return state


@dataclass
class Progress:
    """Where a run stands: what a checkpoint holds beside the weights, the optimiser and the data generator."""

    history: list[dict[str, float]] = field(default_factory=list)
    step: int = 0
    elapsed: float = 0.0  # wall seconds of training, summed over every resume
    cpu: float = 0.0
    loss_sum: float = 0.0  # the running training loss since the last evaluation (checkpointed: an exact resume)
    loss_n: int = 0
    _since: tuple[float, float] = (0.0, 0.0)  # (perf_counter, process_time) when the clock last started

    def start_clock(self) -> None:
        self._since = (time.perf_counter(), time.process_time())

    def clock(self) -> tuple[float, float]:
        """Wall and CPU seconds of training so far."""
        return self.elapsed + time.perf_counter() - self._since[0], self.cpu + time.process_time() - self._since[1]

    def bank_clock(self) -> None:
        """Add the time since the clock started to ``elapsed`` and ``cpu`` (before a checkpoint saves them)."""
        self.elapsed, self.cpu = self.clock()
        self.start_clock()


def save_checkpoint(
    path: Path,
    config: WindTunnelConfig,
    progress: Progress,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
) -> None:
    """Write the checkpoint atomically (the previous one stays whole until the new one is complete)."""
    state = {
        "config": config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generator": generator.get_state(),
        "history": progress.history,
        "step": progress.step,
        "loss_sum": progress.loss_sum,
        "loss_n": progress.loss_n,
        "elapsed": progress.elapsed,
        "cpu": progress.cpu,
    }
    save_torch_atomic(state, path)


def restore_checkpoint(
    path: Path,
    config: WindTunnelConfig,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
) -> Progress:
    """Load a checkpoint (weights only: no code runs) into model, optimiser and data generator.

    Raises:
        CheckpointError: the file is unusable (:func:`load_checkpoint`), from another configuration, or does not
            fit the model.
    """
    state = load_checkpoint(path)
    try:
        same = WindTunnelConfig.from_dict(state["config"]) == config  # fields added later take defaults
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path} holds an invalid configuration ({e}); {START_OVER}") from None
    if not same:
        raise CheckpointError(
            f"{path} was written by a different configuration; use a fresh run_dir (--out), or the "
            f"configuration in {path.parent / 'config.json'} to resume it"
        )
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
    except (RuntimeError, KeyError, ValueError, TypeError) as e:
        raise CheckpointError(f"{path} does not fit this configuration's model ({e}); {START_OVER}") from None
    # a checkpoint from before the running loss was saved resumes with train_loss averaged over fewer steps
    loss_sum, loss_n = state.get("loss_sum", 0.0), state.get("loss_n", 0)
    return Progress(state["history"], state["step"], state["elapsed"], state.get("cpu", 0.0), loss_sum, loss_n)
