"""Where a stochastic fit is inside its epochs, so that it can stop after any mini-batch step and resume exactly.

Online EM and gradient descent draw every epoch's batch order from one torch generator
(:meth:`DataSource.step_batches`; in a process group the global batches, of which each process holds its rows).
An :class:`EpochPosition` holds the complete epochs, the steps taken in the epoch in progress, the generator
state that epoch started from and its running sums. Resuming sets the generator back to that state, draws the
same order and skips the batches already used (:func:`epoch_batches`), so the remaining steps see exactly the
batches an uninterrupted run sees.
"""

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from implicit_em.mixture._data import DataSource

__all__ = ["EpochPosition", "epoch_batches", "weighted_epoch_batches"]

T = TypeVar("T")


@dataclass
class EpochPosition:
    """Epochs complete, steps into the next one, the generator state it started from, its running sums
    (objective times rows, rows) and the previous epoch's mean objective."""

    epoch: int = 0
    step: int = 0
    generator: Tensor | None = None
    total: float = 0.0
    count: float = 0.0  # rows, or their summed weights
    prev: float = -math.inf

    def advance(self, objective_sum: float, rows: float) -> None:
        """One mini-batch step done."""
        self.step, self.total, self.count = self.step + 1, self.total + objective_sum, self.count + rows

    def mean(self) -> float:
        """The mean objective per row of the epoch so far."""
        return self.total / self.count if self.count > 0 else self.total

    def end_epoch(self, prev: float) -> None:
        """The epoch is complete; ``prev`` is the mean the next epoch compares with."""
        self.epoch, self.step, self.generator, self.total, self.count, self.prev = (
            self.epoch + 1,
            0,
            None,
            0.0,
            0,
            prev,
        )

    def to_dict(self) -> dict[str, Any]:
        """Numbers and a tensor only (what ``torch.load(weights_only=True)`` reads back)."""
        return {
            "epoch": self.epoch,
            "step": self.step,
            "generator": None if self.generator is None else self.generator.clone(),
            "total": self.total,
            "count": self.count,
            "prev": self.prev,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpochPosition":
        """The inverse of :meth:`to_dict`."""
        return cls(
            int(d["epoch"]), int(d["step"]), d["generator"], float(d["total"]), float(d["count"]), float(d["prev"])
        )


def epoch_batches(
    data: DataSource, batch_size: int, generator: torch.Generator, position: EpochPosition
) -> Iterator[Tensor]:
    """The batches of the epoch in progress: a new epoch records the generator state it starts from; a
    resumed one restarts from that state and skips the ``position.step`` batches already used."""
    return _epoch(data.step_batches, batch_size, generator, position)


def weighted_epoch_batches(
    data: DataSource, batch_size: int, generator: torch.Generator, position: EpochPosition
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """:func:`epoch_batches` with each batch's row weights (None for unweighted data)."""
    return _epoch(data.weighted_step_batches, batch_size, generator, position)


def _epoch(
    draw: Callable[[int, torch.Generator], Iterator[T]],
    batch_size: int,
    generator: torch.Generator,
    position: EpochPosition,
) -> Iterator[T]:
    if position.step == 0:
        position.generator = generator.get_state()
        return draw(batch_size, generator)
    assert position.generator is not None
    generator.set_state(position.generator.cpu())
    return itertools.islice(draw(batch_size, generator), position.step, None)
