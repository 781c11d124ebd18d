"""The claims audit's vocabulary: a claim, the experiment that tests it, its config, and the result it ends in.

Every experiment quotes the claim it tests (with its section of the paper or the review it comes from) and declares
a frozen dataclass ``Config`` holding its quick size (seconds: ``make demo`` and the tests), its full size, a
``seed``, and the thresholds its verdict uses, each with a comment saying where it comes from; so the thresholds are
fixed before ``run(cfg, ctx)`` sees a number. The verdict is computed from :class:`Criterion` records (metric,
comparison, threshold, measured, passed) made by :func:`criterion`, and is one of:

- ``SUPPORTED``: the numbers meet the claim as written;
- ``PARTIAL``: a weaker reading holds, the claim as written does not (the summary says which is which);
- ``REFUTED``: the numbers contradict the claim as written;
- ``VERIFIED``: what the claim states is algebra (a derivative, an identity between two formulas), checked in
  finite precision on correct code; it could not have come out the other way, so it is verified, not tested on
  data. Only a rule whose criteria are all identities and gates gives it, and such a rule gives nothing else;
- ``UNDECIDED``: the testbed could not decide: a *gate* failed (the deciding arm does not track the posterior, or
  has not plateaued; for an identity, a control showing that the check could fail), so no reading of the claim,
  weak or strong, is made. It is not PARTIAL: PARTIAL says a weaker reading holds, UNDECIDED says nothing about the
  claim, only about the setting.

Each criterion has a ``role``: ``"test"`` (it reads the claim, or a control that could make the reading fail),
``"gate"`` (the testbed can decide: tracking, plateau, a planted error the check catches; a failed gate makes the
verdict UNDECIDED, see :func:`gated`), or ``"identity"`` (an analytic check that cannot fail on correct code, such
as softmax gradients summing to zero: reported and checked, never counted as evidence; made by :func:`identity`).
SUPPORTED, PARTIAL and REFUTED rest on at least one test; :func:`gated` refuses them otherwise.

An experiment that raises is recorded as ``ERROR`` with its traceback, never as a verdict.
"""

import dataclasses
import hashlib
import json
import math
import operator
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

from implicit_em._runio import torch_threads as torch_threads  # re-exported: the experiments import it from here
from implicit_em.audit.metrics import info as metric_info
from implicit_em.audit.plots import pyplot as pyplot  # re-exported for the claims that import it from here

__all__ = [
    "DECISIVE",
    "ROLES",
    "VERDICTS",
    "Comparison",
    "Context",
    "Criterion",
    "Experiment",
    "ExperimentConfig",
    "Result",
    "Role",
    "Verdict",
    "criterion",
    "gate",
    "gated",
    "identity",
    "roles",
]

Verdict = Literal["SUPPORTED", "PARTIAL", "REFUTED", "VERIFIED", "UNDECIDED", "ERROR"]
VERDICTS: tuple[Verdict, ...] = ("SUPPORTED", "PARTIAL", "REFUTED", "VERIFIED", "UNDECIDED", "ERROR")
DECISIVE: tuple[Verdict, ...] = ("SUPPORTED", "PARTIAL", "REFUTED")  # the verdicts that say something of the claim

Role = Literal["test", "gate", "identity"]
ROLES: tuple[Role, ...] = ("test", "gate", "identity")

Comparison = Literal["<=", ">=", "<", ">", "=="]
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
    "==": operator.eq,
}

_C = TypeVar("_C", bound="ExperimentConfig")


class ExperimentConfig(Protocol):
    """What every experiment's ``Config`` offers: a frozen dataclass with a ``seed`` field and two sizes."""

    @property
    def seed(self) -> int: ...

    @classmethod
    def quick(cls: type[_C]) -> _C: ...

    @classmethod
    def full(cls: type[_C]) -> _C: ...


@dataclass(frozen=True)
class Criterion:
    """One comparison a verdict rests on: ``measured <comparison> threshold`` and whether it held.

    A NaN measurement fails every comparison. ``role`` says what the verdict does with it (module docstring).
    """

    metric: str
    comparison: Comparison
    threshold: float
    measured: float
    passed: bool
    role: Role = "test"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")


def criterion(
    metric: str, measured: float, comparison: Comparison, threshold: float, *, role: Role = "test"
) -> Criterion:
    """Evaluate ``measured <comparison> threshold`` (e.g. ``criterion("residual", r, "<=", 1e-10)``)."""
    if comparison not in _COMPARE:
        raise ValueError(f"comparison must be one of {tuple(_COMPARE)}, got {comparison!r}")
    measured, threshold = float(measured), float(threshold)
    return Criterion(metric, comparison, threshold, measured, bool(_COMPARE[comparison](measured, threshold)), role)


def gate(metric: str, measured: float, comparison: Comparison, threshold: float) -> Criterion:
    """A criterion that says whether the testbed can decide (tracking, plateau); see :func:`gated`."""
    return criterion(metric, measured, comparison, threshold, role="gate")


def identity(metric: str, measured: float, comparison: Comparison, threshold: float) -> Criterion:
    """An analytic check that holds on correct code whatever the data: reported, not counted as evidence.

    It still fails loudly when it does not hold (a bug), but a verdict must not rest on it.
    """
    return criterion(metric, measured, comparison, threshold, role="identity")


def gated(verdict: Verdict, criteria: list[Criterion]) -> Verdict:
    """``verdict`` if every gate among ``criteria`` held, else ``UNDECIDED``.

    A failed identity is a bug, not a finding, and raises :class:`AssertionError` naming it, so a broken analytic
    check can never pass as a verdict. Evidence is counted only from tests: SUPPORTED, PARTIAL or REFUTED with no
    test among ``criteria``, or VERIFIED with one, raises :class:`ValueError` (a rule that says more than its
    criteria can). ``ERROR`` passes through unchanged.
    """
    broken = [c.metric for c in criteria if c.role == "identity" and not c.passed]
    if broken:
        raise AssertionError(f"analytic identities failed (a bug, not a finding): {', '.join(broken)}")
    if verdict == "ERROR":
        return verdict
    tests = sum(c.role == "test" for c in criteria)
    if verdict in DECISIVE and not tests:
        raise ValueError(f"{verdict} rests on tests, and these criteria are all identities and gates: VERIFIED")
    if verdict == "VERIFIED" and tests:
        raise ValueError(f"VERIFIED is for identities only, and {tests} of these criteria are tests")
    return verdict if all(c.passed for c in criteria if c.role == "gate") else "UNDECIDED"


def roles(criteria: list[Criterion]) -> dict[str, int]:
    """How many of ``criteria`` are tests, gates and identities: what a verdict rests on, at a glance."""
    return {role: sum(c.role == role for c in criteria) for role in ROLES}


@dataclass(frozen=True)
class Context:
    """What an experiment gets besides its config: the run folder, where its figures go."""

    run_dir: Path

    @property
    def figure_dir(self) -> Path:
        return self.run_dir / "figures"

    def save_figure(self, fig: Any, name: str, dpi: int = 110) -> str:
        """Save matplotlib figure ``fig`` as ``figures/<name>.png`` in the run folder, close it, and return that
        path relative to the run folder (what ``Result.figures`` holds and the report embeds)."""
        if not name or Path(name).name != name:
            raise ValueError(f"a figure name is a plain file name, got {name!r}")
        filename = name if name.endswith(".png") else f"{name}.png"
        self.figure_dir.mkdir(parents=True, exist_ok=True)
        path = self.figure_dir / filename
        fig.savefig(path, dpi=dpi)
        pyplot().close(fig)
        return str(path.relative_to(self.run_dir))

    def cached(self, name: str, key: dict[str, Any], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``compute()`` once per run folder and ``key``: what a testbed trains, shared by every claim that reads it.

        The value is a dict of tensors, numbers, strings and lists of them, stored as
        ``testbeds/<name>-<hash of key>.pt`` in the run folder (written atomically, read with
        ``weights_only=True``). ``key`` must name everything the value depends on (the testbed's settings, its seeds,
        the hash of the code that computes it). Two workers asking for the same key at once: the second waits for
        the first (a file lock) and reads its value.
        """
        import torch

        text = json.dumps(_jsonable(key), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_digest)
        digest = hashlib.sha256(f"{name}\n{text}".encode()).hexdigest()[:20]
        folder = self.run_dir / "testbeds"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}-{digest}.pt"
        with open(folder / f".{path.name}.lock", "a+") as lock:
            _lock(lock)
            if path.is_file():
                return dict(torch.load(path, weights_only=True))
            value = compute()
            tmp = path.with_suffix(".pt.tmp")
            torch.save(value, tmp)
            os.replace(tmp, path)
            return value


@dataclass
class Result:
    """The outcome of one experiment.

    ``metrics`` are the measured numbers (floats, ints, strings or small lists), ``criteria`` the comparisons the
    verdict was computed from, ``figures`` PNG paths relative to the run folder, ``details`` free notes (method,
    caveats) shown under the verdict.
    """

    verdict: Verdict
    summary: str
    metrics: dict[str, Any]
    criteria: list[Criterion] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    details: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def to_dict(self) -> dict[str, Any]:
        """The record's fields as JSON-ready values, with ``metric_info``: each declared metric's label, unit and
        note (see :mod:`implicit_em.audit.metrics`)."""
        out = {k: _jsonable(v) for k, v in asdict(self).items()}
        out["metric_info"] = metric_info(self.metrics)
        return out


@dataclass(frozen=True)
class Experiment(Generic[_C]):
    """A claim and the function that tests it: ``run(cfg, ctx) -> Result`` with ``cfg`` a ``Config``."""

    name: str
    title: str
    claim: str  # quoted from the paper or the review
    source: str  # e.g. "paper §4.1, Eq. (6)" or "review-implicit-em: skeptic's concrete test"
    Config: type[_C]  # a frozen dataclass with ``seed`` and classmethods ``quick()`` and ``full()``
    run: Callable[[_C, Context], Result]

    def __post_init__(self) -> None:
        cls = self.Config
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen:
            raise TypeError(f"{self.name}: Config must be a frozen dataclass, got {cls!r}")
        if "seed" not in getattr(cls, "__dataclass_fields__", {}):
            raise TypeError(f"{self.name}: Config must have a 'seed' field")
        if not (callable(getattr(cls, "quick", None)) and callable(getattr(cls, "full", None))):
            raise TypeError(f"{self.name}: Config must offer classmethods quick() and full()")

    def config(self, quick: bool = True, seed: int = 0) -> _C:
        """The resolved config: ``Config.quick()`` or ``Config.full()`` with ``seed`` in it."""
        base = self.Config.quick() if quick else self.Config.full()
        return dataclasses.replace(base, seed=seed)  # type: ignore[type-var]


def _digest(value: Any) -> str:
    """A tensor or array in a cache key: its dtype, shape and the sha256 of its bytes."""
    to_numpy = getattr(value, "numpy", None)
    array = to_numpy() if callable(to_numpy) and hasattr(value, "detach") else value
    if not hasattr(array, "tobytes"):
        raise TypeError(f"a cache key holds JSON values, tensors and arrays; got {type(value).__name__}")
    data = array.tobytes() if not hasattr(value, "detach") else value.detach().contiguous().cpu().numpy().tobytes()
    return f"{getattr(value, 'dtype', '')}{tuple(getattr(value, 'shape', ()))}:{hashlib.sha256(data).hexdigest()}"


def _lock(file: Any) -> None:
    """An exclusive lock on an open file, released when it is closed or its process dies (no lock on Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return
    fcntl.flock(file.fileno(), fcntl.LOCK_EX)


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
