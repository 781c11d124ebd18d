"""Collapse detectors: each scans a per-step history and returns a :class:`Finding` at the first step it fires.

Histories are (steps, K) tensors, one row per recorded step; ``steps`` gives the step numbers of the rows
(default 0, 1, ...). A detector returns ``None`` when it stays silent.
"""

import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class Finding:
    """A detector that fired: what, when (the step), which components, the value and the threshold crossed."""

    kind: str
    step: int
    components: tuple[int, ...]
    value: float
    threshold: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _history(history: Tensor | Sequence[Tensor], steps: Sequence[int] | None) -> tuple[Tensor, list[int]]:
    h = history if isinstance(history, Tensor) else torch.stack([torch.as_tensor(x) for x in history])
    if h.dim() != 2:
        raise ValueError(f"a history is (steps, K), got shape {tuple(h.shape)}")
    labels = list(range(h.shape[0])) if steps is None else list(steps)
    if len(labels) != h.shape[0]:
        raise ValueError(f"{len(labels)} step labels for {h.shape[0]} history rows")
    return h.detach(), labels


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def dominance(
    usage: Tensor | Sequence[Tensor], steps: Sequence[int] | None = None, threshold: float = 0.9
) -> Finding | None:
    """Fires when one component takes more than ``threshold`` of the responsibility mass."""
    h, labels = _history(usage, steps)
    share = h / h.sum(dim=1, keepdim=True)
    top, who = share.max(dim=1)
    hits = (top > threshold).nonzero()
    if len(hits) == 0:
        return None
    t = int(hits[0])
    return Finding(
        "dominance",
        labels[t],
        (int(who[t]),),
        float(top[t]),
        threshold,
        f"component {int(who[t])} takes {float(top[t]):.3f} of the mass (> {threshold})",
    )


def dead_components(
    usage: Tensor | Sequence[Tensor],
    steps: Sequence[int] | None = None,
    floor: float | None = None,
    patience: int = 3,
) -> Finding | None:
    """Fires when some component's usage share has stayed under ``floor`` (default 0.01/K) for the last
    ``patience`` rows or more: the components dead *now*. A component that died and came back is not named (the
    finding is withdrawn once it recovers); ``step`` is the step at which the earliest of the named components had
    been under the floor for ``patience`` rows, ``value`` the largest of their shares at the last row."""
    _check_positive("patience", patience)
    h, labels = _history(usage, steps)
    share = h / h.sum(dim=1, keepdim=True)
    floor = 0.01 / h.shape[1] if floor is None else floor
    run = torch.zeros(h.shape[1], dtype=torch.long)
    for t in range(h.shape[0]):
        run = torch.where(share[t] < floor, run + 1, torch.zeros_like(run))
    dead = (run >= patience).nonzero().flatten()
    if not len(dead):
        return None
    last = h.shape[0] - 1
    since = last - int(run[dead].max()) + patience  # the row at which the longest-dead one reached patience
    return Finding(
        "dead_components",
        labels[since],
        tuple(int(j) for j in dead),
        float(share[last, dead].max()),
        floor,
        f"components {[int(j) for j in dead]} under {floor:.3g} of the mass for the last {int(run[dead].max())} "
        f"steps (flagged at step {labels[since]})",
    )


def metric_collapse(
    log_det: Tensor | Sequence[Tensor], steps: Sequence[int] | None = None, drop: float = 5.0, window: int = 5
) -> Finding | None:
    r"""Fires when :math:`\log|\det W_j|` has fallen by more than ``drop`` nats and fell over the last ``window`` rows.

    Without the volume term the objective is maximised by W → 0: log|det W| falls without bound.
    """
    _check_positive("window", window)
    h, labels = _history(log_det, steps)
    for t in range(window, h.shape[0]):
        fallen = h[0] - h[t]
        falling = (h[t - window + 1 : t + 1] < h[t - window : t]).all(dim=0)
        hit = ((fallen > drop) & falling).nonzero().flatten()
        if len(hit):
            j = int(hit[fallen[hit].argmax()])
            return Finding(
                "metric_collapse",
                labels[t],
                tuple(int(i) for i in hit),
                float(fallen[j]),
                drop,
                f"log|det W| of component {j} fell {float(fallen[j]):.2f} nats and is still falling",
            )
    return None


def singularity(
    min_variance: Tensor | Sequence[Tensor], steps: Sequence[int] | None = None, floor: float = 1e-6
) -> Finding | None:
    """Fires when a component's smallest variance drops under ``floor`` (it is collapsing onto a point)."""
    h, labels = _history(min_variance, steps)
    hits = (h < floor).nonzero()
    if len(hits) == 0:
        return None
    t = int(hits[0, 0])
    js = (h[t] < floor).nonzero().flatten()
    return Finding(
        "singularity",
        labels[t],
        tuple(int(j) for j in js),
        float(h[t, js].min()),
        floor,
        f"components {[int(j) for j in js]} have a variance under {floor:g}",
    )
