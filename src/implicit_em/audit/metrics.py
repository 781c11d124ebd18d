"""Metrics declared where they are measured: a value, its unit and the words the report shows for it.

A claim's ``measure`` fills a :class:`Metrics` with :meth:`Metrics.put`::

    m = Metrics()
    m.put("bijection_A_kl", kl, "bits", "bijection, arm A: KL to the Bayes posterior")

It is a ``dict`` of values (what the verdict and the summary read), and it carries each key's :class:`Metric`
(label, unit, note), which the runner writes into the record as ``metric_info`` and the report shows as written:
the report never guesses a unit from a key. A unit is one of :data:`UNITS`, so a typo or an invented unit fails at
the line that measures it.
"""

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["UNITS", "Metric", "Metrics", "check_unit", "info"]

#: The units a metric may declare, each with what it means for a reader.
UNITS: dict[str, str] = {
    "bits": "information in base 2 (KL, entropy error of the wind tunnels)",
    "nats": "information in base e (cross-entropy, log-likelihood, log det)",
    "nats/sample": "a log-likelihood or its change, per data row",
    "s": "wall-clock seconds",
    "count": "a number of things (rows, runs, steps, iterations)",
    "steps": "optimiser steps",
    "iterations": "iterations of a fitter (EM, gradient descent)",
    "passes": "passes over the data",
    "fraction": "a share between 0 and 1",
    "ratio": "one quantity over another of the same kind",
    "relative": "a difference over the size of what it is compared with",
    "absolute": "an absolute difference, in the quantity's own units",
    "eps units": "machine epsilon times the scale of the inputs",
    "sign": "-1, +1 or 0",
    "mean cos²": "mean squared cosine of the principal angles between two subspaces (0-1)",
    "correlation": "a correlation coefficient (-1 to 1; |Spearman ρ| is its absolute value)",
    "data std": "standard deviations of the data",
    "σ units": "kernel widths σ",
    "s.e. units": "standard errors of a cluster mean",
    "SDs": "standard deviations of a paired difference (an effect size)",
    "data units": "the data's own coordinates",
    "distance": "a distance d in the model's own units",
    "rad": "an angle in radians",
    "classes": "a number of classes (an effective count)",
    "components": "a number of components or dimensions",
    "sum of weights": "the sum of a row of attention weights",
    "[mean, SE]": "a mean and its standard error",
    "text": "words: a setting or a description",
    "names": "a list of names (tasks, arms, mechanisms)",
    "mixed": "entries of several units, each said in its label",
    "θ units": "the fitted parameter vector's own coordinates",
    "gradient norm": "norm of the objective's gradient in θ units",
    "curvature": "eigenvalues of the objective's Hessian, per θ unit²",
    "learning rate": "a step size",
    "AUROC": "area under the ROC curve (0.5 chance, 1 perfect)",
    "ARI": "adjusted Rand index (0 chance, 1 identical partitions)",
    "accuracy": "share of correct predictions (0-1)",
    "rank": "an effective rank or dimension",
    "class": "a category named in words",
    "verdict": "SUPPORTED, PARTIAL, REFUTED or UNDECIDED, or a rule's outcome in words",
    "yes/no": "a boolean",
    "seed ids": "the seeds that were run",
    "config": "a setting of the experiment, recorded with its numbers",
    "value": "a plain number whose unit is the quantity itself (a weight, a coordinate, a parameter)",
}


def check_unit(unit: str) -> str:
    """``unit`` if it is one of :data:`UNITS`; else :class:`ValueError` naming the known ones."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; declare one of {sorted(UNITS)} (audit.metrics.UNITS)")
    return unit


@dataclass(frozen=True)
class Metric:
    """How the report shows one metric: ``label`` in words (may hold ``$..$`` math), ``unit`` from :data:`UNITS`,
    and an optional ``note``."""

    label: str
    unit: str
    note: str = ""

    def __post_init__(self) -> None:
        check_unit(self.unit)
        if not self.label.strip():
            raise ValueError("a metric's label is the words the report shows; it cannot be empty")


class Metrics(dict[str, Any]):
    """Measured values (a ``dict``) with the declaration of each key (:attr:`declared`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.declared: dict[str, Metric] = {}

    def put(self, key: str, value: Any, unit: str, label: str, note: str = "") -> Any:
        """Record ``value`` under ``key`` with its unit and label; returns ``value``. A key is declared once: a second
        ``put`` of it with another unit or label is an error (the report could show only one)."""
        metric = Metric(label, unit, note)
        old = self.declared.get(key)
        if old is not None and old != metric:
            raise ValueError(f"metric {key!r} declared twice: {old} and {metric}")
        self.declared[key] = metric
        self[key] = value
        return value

    def put_all(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]], unit: str, label: str) -> None:
        """:meth:`put` each ``(key, value)`` with one unit; ``label`` may hold ``{key}``."""
        items = values.items() if isinstance(values, Mapping) else values
        for key, value in items:
            self.put(key, value, unit, label.format(key=key))

    def undeclared(self) -> list[str]:
        """Keys set without :meth:`put` (item assignment); the runner records them as undeclared."""
        return [k for k in self if k not in self.declared]


def info(metrics: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``{key: {"label", "unit", "note"}}`` for each declared key of ``metrics`` (empty for a plain dict)."""
    declared: dict[str, Metric] = getattr(metrics, "declared", {})
    return {k: asdict(declared[k]) for k in metrics if k in declared}
