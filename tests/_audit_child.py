"""A small registry of fast, deterministic experiments, and ``implicit-em`` run on it, for the audit's fault tests.

The fault tests (``tests/test_audit_faults.py``) start ``python -c "...; _audit_child.main(argv)"`` as a child
process, kill it or interrupt it, and run the same command again. Each experiment takes a few short steps (a
pause, then a draw from a generator seeded by its config), so a signal can land in the middle of one, and its
numbers depend only on its config: an uninterrupted run gives the same records in any process. Two of them
misbehave under Ctrl-C the way library code can: ``swallow`` catches the KeyboardInterrupt and finishes early with
other numbers, ``convert`` turns it into a RuntimeError.
"""

import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from implicit_em.audit import Context, Experiment, Result, criterion


@dataclass(frozen=True)
class Config:
    seed: int = 0
    steps: int = 6
    pause: float = 0.05  # seconds per step
    tol: float = 3.0  # |x| <= tol decides the verdict

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(steps=12)


def _walk(name: str, cfg: Config, on_interrupt: str) -> Result:
    """A seeded random walk of ``cfg.steps`` steps; what a KeyboardInterrupt does depends on ``on_interrupt``."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + zlib.crc32(name.encode()))
    x = torch.zeros((), dtype=torch.float64)
    taken = 0
    try:
        for _ in range(cfg.steps):
            time.sleep(cfg.pause)
            x = x + torch.randn((), generator=g, dtype=torch.float64)
            taken += 1
    except KeyboardInterrupt:
        if on_interrupt == "convert":
            raise RuntimeError("interrupted inside a library call") from None
        if on_interrupt != "swallow":
            raise
    c = criterion("|x|", float(x.abs()), "<=", cfg.tol)
    verdict = "SUPPORTED" if c.passed else "REFUTED"
    return Result(verdict, f"{name}: {taken} steps", {"x": float(x), "steps": taken}, [c])


class _Run:
    """An experiment's ``run``: a module-level class, so that ``jobs`` > 1 can send it to a worker (pickle)."""

    def __init__(self, name: str, on_interrupt: str) -> None:
        self.name, self.on_interrupt = name, on_interrupt

    def __call__(self, cfg: Config, ctx: Context) -> Result:
        return _walk(self.name, cfg, self.on_interrupt)


def _experiment(name: str, on_interrupt: str = "raise") -> Experiment[Config]:
    run = _Run(name, on_interrupt)
    return Experiment(name, name.title(), f"the claim of {name}", "tests/_audit_child.py", Config, run)


EXPERIMENTS = [
    _experiment("alpha"),
    _experiment("swallow", "swallow"),
    _experiment("convert", "convert"),
    _experiment("omega"),
]


def main(argv: Sequence[str]) -> int:
    """``implicit-em argv`` with :data:`EXPERIMENTS` as the registry."""
    import implicit_em.audit as ex
    from implicit_em.cli import main as cli

    ex.EXPERIMENTS = list(EXPERIMENTS)
    return cli(list(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
