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

from pathlib import Path
from typing import Any

from implicit_em._runio import load_torch_weights_only

__all__ = ["START_OVER", "CheckpointError", "load_checkpoint"]

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
