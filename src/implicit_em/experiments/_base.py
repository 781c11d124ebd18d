"""The claims audit's vocabulary: a claim, the experiment that tests it, and the result it ends in.

Every experiment quotes the claim it tests (with its section of the paper or the review it comes from), runs at a
quick size (seconds: ``make demo`` and the tests) or a full size, and returns a :class:`Result` whose verdict is
decided by numbers against stated thresholds (DESIGN.md §3):

- ``SUPPORTED``: the numbers meet the claim as written;
- ``PARTIAL``: a weaker reading holds, the claim as written does not (the summary says which is which);
- ``REFUTED``: the numbers contradict the claim as written.

An experiment that raises is recorded as ``ERROR`` with its traceback, never as a verdict.
"""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from implicit_em._runio import torch_threads as torch_threads  # re-exported: the experiments import it from here

Verdict = Literal["SUPPORTED", "PARTIAL", "REFUTED", "ERROR"]
VERDICTS: tuple[Verdict, ...] = ("SUPPORTED", "PARTIAL", "REFUTED", "ERROR")


@dataclass(frozen=True)
class Context:
    """What an experiment gets: its size, a seed, and a folder for its figures."""

    quick: bool
    seed: int
    figure_dir: Path

    def figure_path(self, name: str) -> Path:
        """Where to save figure ``name`` (a PNG file name); the folder is created."""
        self.figure_dir.mkdir(parents=True, exist_ok=True)
        return self.figure_dir / name


@dataclass
class Result:
    """The outcome of one experiment.

    ``metrics`` are the measured numbers (floats, ints, strings or small lists), ``thresholds`` the numbers the
    verdict compares them with, ``figures`` PNG paths relative to the run folder, ``details`` free notes
    (method, caveats) shown under the verdict.
    """

    verdict: Verdict
    summary: str
    metrics: dict[str, Any]
    thresholds: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    details: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def to_dict(self) -> dict[str, Any]:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Experiment:
    """A claim and the function that tests it: ``run(context) -> Result``."""

    name: str
    title: str
    claim: str  # quoted from the paper or the review
    source: str  # e.g. "paper §4.1, Eq. (6)" or "review-implicit-em: skeptic's concrete test"
    run: Callable[[Context], Result]


def _jsonable(value: Any) -> Any:
    """Floats that JSON cannot hold (NaN, inf) become strings; containers are converted recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        return _jsonable(value.item())  # numpy / torch scalars
    return value


def relative_figure(ctx: Context, path: Path) -> str:
    """A figure's path relative to the run folder (the parent of the figure folder), for the report."""
    return str(path.relative_to(ctx.figure_dir.parent))
