"""Every setting of a wind-tunnel run, with its default: :class:`WindTunnelConfig` and its presets.

The presets are ``tiny`` (seconds, for tests), ``quick`` (about ten minutes on 2 CPU cores) and ``full`` (the
papers' sizes, for a GPU). ``python -m implicit_em.windtunnel train`` turns every field into an option.
"""

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["LOSSES", "MODELS", "TASKS", "WindTunnelConfig"]

TASKS = ("bijection", "hmm")
MODELS = ("transformer", "mlp", "prefix_mlp", "lstm")
LOSSES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class WindTunnelConfig:
    """Every setting of a wind-tunnel run, with its default."""

    # task
    task: str = "bijection"  # "bijection" or "hmm"
    n_symbols: int = 20  # bijection: V (keys and values); L = V - 1 pairs
    replacement: bool = False  # bijection: keys drawn with replacement
    n_obs: int = 20  # hmm: training length K
    test_lengths: tuple[int, ...] = (30, 50)  # hmm: extra evaluation lengths (length generalisation)
    # model
    model: str = "transformer"  # "transformer", "mlp" (matched, no context), "prefix_mlp" (matched, flattened
    # prefix: context, no attention) or "lstm" (matched)
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 64
    d_ff: int = 256
    loss: str = "softmax"  # "softmax" cross-entropy or independent per-class "sigmoid" BCE
    # optimisation
    steps: int = 6000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-5  # end of the cosine
    warmup_steps: int = 300
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    # evaluation and checkpoints
    eval_every: int = 1000
    eval_size: int = 2048
    eval_seed: int = 12345  # the evaluation set is the same for every training seed
    checkpoint_every: int = 500
    threads: int | None = None  # torch.set_num_threads in the training process (None: leave as is)
    device: str = "auto"  # "auto" (cuda when available, else cpu), "cpu", "cuda", "cuda:1", ...

    def __post_init__(self) -> None:
        """Check every setting, naming it: ``TypeError`` for a wrong type, ``ValueError`` for a bad value.

        numpy scalars are accepted and stored as Python ones (so the config stays JSON and weights-only safe).
        """
        for name, choices in (("task", TASKS), ("model", MODELS), ("loss", LOSSES)):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {value!r}")
        self._set("replacement", _as_bool("replacement", self.replacement))
        for name, low in _INT_MINIMA.items():
            self._set(name, _as_int(name, getattr(self, name), low))
        for name in ("seed", "eval_seed"):  # torch seeds; eval_seed + i seeds the i-th evaluation set
            self._set(name, _as_int(name, getattr(self, name), 0, _SEED_END))
        self._set("test_lengths", _as_lengths(self.test_lengths))
        if self.threads is not None:
            self._set("threads", _as_int("threads", self.threads, 1, what="None or >= 1"))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        for name, strict in (("lr", True), ("min_lr", False), ("weight_decay", False)):  # lr > 0, the others >= 0
            self._set(name, _as_float(name, getattr(self, name), 0.0, strict))
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr (the end of the cosine) must be <= lr, got min_lr={self.min_lr} > lr={self.lr}")
        self._set("grad_clip", _as_float("grad_clip", self.grad_clip, 0.0, True))  # finite: config.json is JSON
        _check_device(self.device)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: __post_init__ normalises a field once, in place

    @classmethod
    def quick(cls, **overrides: Any) -> "WindTunnelConfig":
        """CPU setting, about 10 minutes on 2 cores (see docs/windtunnel.md for the measured numbers)."""
        task = overrides.get("task", cls.task)
        base: dict[str, Any] = {"steps": 20000, "batch_size": 64, "lr": 1e-3, "eval_every": 2000}
        if task == "hmm":
            base.update(steps=5000, batch_size=32, n_layers=3, eval_every=1000, eval_size=1024)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def full(cls, **overrides: Any) -> "WindTunnelConfig":
        """The papers' sizes (GPU): 6 layers, 6 heads, d_model 192 on bijection; 9, 8, 256 on HMM."""
        task = overrides.get("task", cls.task)
        base: dict[str, Any] = dict(
            n_layers=6, n_heads=6, d_model=192, d_ff=768, batch_size=128, steps=100_000, lr=3e-4,
            warmup_steps=2000, eval_every=5000, checkpoint_every=5000, eval_size=8192,
        )  # fmt: skip
        if task == "hmm":
            base.update(n_layers=9, n_heads=8, d_model=256, d_ff=1024)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def tiny(cls, **overrides: Any) -> "WindTunnelConfig":
        """Seconds: for tests only."""
        base: dict[str, Any] = dict(
            n_symbols=5, n_obs=4, test_lengths=(6,), n_layers=1, n_heads=2, d_model=16, d_ff=32, steps=20,
            batch_size=16, warmup_steps=5, eval_every=10, eval_size=64, checkpoint_every=5, threads=1,
        )  # fmt: skip
        base.update(overrides)
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WindTunnelConfig":
        """The config of :meth:`to_dict` (a plain dict, as ``config.json`` and checkpoints hold it); fields added
        later take their defaults, unknown keys are refused."""
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown WindTunnelConfig fields: {unknown}")
        return cls(**d)  # a JSON list of test_lengths becomes a tuple in __post_init__


# ---------------------------------------------------------------------------------------------- the checks

#: Integer settings and their smallest allowed value.
_INT_MINIMA = {
    "n_symbols": 2, "n_obs": 1, "n_layers": 0, "n_heads": 1, "d_model": 1, "d_ff": 1, "steps": 1, "batch_size": 1,
    "warmup_steps": 0, "eval_every": 1, "eval_size": 1, "checkpoint_every": 1,
}  # fmt: skip
_SEED_END = 2**63 - 2**16  # torch.Generator.manual_seed takes up to 2**64 - 1; leave room for eval_seed + i


def _as_int(name: str, value: Any, low: int, end: int | None = None, what: str | None = None) -> int:
    """``value`` as a Python int in ``low <= value < end``; bools and floats (even 2.0) are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low or (end is not None and value >= end):
        bound = what or (f">= {low}" if end is None else f">= {low} and < {end}")
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _as_float(name: str, value: Any, low: float, strict: bool) -> float:
    """``value`` as a finite Python float, > low (``strict``) or >= low."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and (value > low if strict else value >= low)):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {low:g}, got {value}")
    return value


def _as_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _as_lengths(value: Any) -> tuple[int, ...]:
    """test_lengths as a tuple of ints >= 1 (a list, as JSON gives it back, is accepted)."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"test_lengths must be a tuple of integers, got {value!r}")
    try:
        lengths = tuple(_as_int("test_lengths", k, 1) for k in value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"test_lengths must be a tuple of integers >= 1, got {value!r}") from None
    return lengths


def _check_device(device: Any) -> None:
    """``auto``, or a name :class:`torch.device` parses (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ...)."""
    if device == "auto":
        return
    try:
        if not isinstance(device, str) or not device:
            raise ValueError
        torch.device(device)
    except (RuntimeError, ValueError):
        expected = "'auto' or a torch device name such as 'cpu' or 'cuda:0'"
        raise ValueError(f"device must be {expected}, got {device!r}") from None
