"""Every setting of a wind-tunnel run, with its default: :class:`WindTunnelConfig` and its presets.

The presets are ``tiny`` (seconds, for tests), ``quick`` (about ten minutes on 2 CPU cores) and ``full`` (the
papers' sizes, for a GPU). ``python -m implicit_em.windtunnel train`` turns every field into an option.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

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
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        for name in ("steps", "batch_size", "eval_every", "eval_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.lr <= 0 or self.min_lr < 0 or self.grad_clip <= 0:
            raise ValueError("need warmup_steps >= 0, lr > 0, min_lr >= 0, grad_clip > 0")

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
        d = dict(d)
        d["test_lengths"] = tuple(d.get("test_lengths", ()))
        return cls(**d)
