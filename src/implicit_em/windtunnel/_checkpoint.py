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

import pickle
import re
from pathlib import Path
from typing import Any

import torch

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
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        named = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if named:  # the weights-only unpickler stopped before importing or calling anything
            raise CheckpointError(
                f"the checkpoint {path} is refused: it would import and call {named.group(1)} when unpickled, "
                f"and a wind-tunnel checkpoint holds only tensors and plain values (a crafted file can run code); "
                f"nothing was executed. If you did not write it, {START_OVER}"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(e))  # not torch's advice to unpickle it
        raise _unreadable(path, "UnpicklingError", detail.group(1) if detail else "not a pickle") from None
    except Exception as e:  # empty (EOFError), truncated (RuntimeError from the zip reader), unreadable (OSError)
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else "no data"
        raise _unreadable(path, type(e).__name__, first_line) from None
    if not isinstance(state, dict):
        kind = type(state).__name__
        raise CheckpointError(f"{path} is not a wind-tunnel checkpoint (it holds a {kind}); {START_OVER}")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path} is not a wind-tunnel checkpoint (missing keys {missing}); {START_OVER}")
    return state


def _unreadable(path: Path, kind: str, detail: str) -> CheckpointError:
    size = path.stat().st_size if path.exists() else 0
    return CheckpointError(
        f"cannot read the checkpoint {path} ({size} bytes; {kind}: {detail[:200]}): it is empty, "
        f"truncated or not a checkpoint; {START_OVER}"
    )
