"""The Monitor: records diagnostics per step as JSON lines (and optionally TensorBoard); it only collects.

Each ``log_*`` call computes the metrics of ``_metrics.py`` from what it is given, appends one record
``{"step": ..., name: value, ...}`` to the JSON-lines file, keeps the small histories that the collapse
detectors scan, and returns the record. :meth:`Monitor.findings` runs the detectors.

Every line is strict JSON (RFC 8259, which has no NaN or Infinity): a non-finite value (NaN, ±inf, e.g. a
relative change from zero or a diverged run) is written as ``null``; the record kept in memory and returned
keeps the float itself. A value that is not a number, string, boolean, None, tensor, numpy value, list or dict
is a TypeError naming it.
"""

import json
import math
import numbers
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import torch
from torch import Tensor

from implicit_em.diagnostics import _collapse
from implicit_em.diagnostics._collapse import Finding
from implicit_em.diagnostics._metrics import (
    component_usage,
    drift,
    effective_components,
    relative_change,
    responsibility_histograms,
    two_timescale,
    usage_entropy,
)


def _plain(value: Any, name: str) -> Any:
    """Tensors (and numpy values) to numbers or nested lists; TypeError naming ``name`` for what JSON cannot hold."""
    if isinstance(value, Tensor):
        value = value.detach().cpu()
        return value.item() if value.dim() == 0 else value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{name}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, name) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":  # numpy arrays and scalars
        return value.tolist()
    raise TypeError(
        f"Monitor.log: {name} is {type(value).__name__}; log numbers, strings, tensors, numpy values, lists or dicts"
    )


def _step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"Monitor: step must be an integer, got {type(step).__name__} {step!r}")
    return int(step)


def _null_non_finite(value: Any) -> Any:
    """NaN and ±inf to None (JSON null), recursively: what the JSON-lines file holds."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _null_non_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_null_non_finite(v) for v in value]
    return value


class Monitor:
    """Record diagnostics per step.

    Args:
        path: JSON-lines file to append to (``None``: keep records in memory only, in ``records``).
        tensorboard: a log directory or a ``torch.utils.tensorboard.SummaryWriter`` (needs the ``tensorboard``
            package: ``pip install implicit-em[tensorboard]``); scalars and per-head/per-component vectors are
            written as ``name`` and ``name/<i>``.
        dominance: threshold of the dominance detector; ``dead_floor``, ``dead_patience``, ``collapse_drop``,
            ``collapse_window``, ``variance_floor``: the other detectors' settings (see ``_collapse.py``).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        tensorboard: Any = None,
        dominance: float = 0.9,
        dead_floor: float | None = None,
        dead_patience: int = 3,
        collapse_drop: float = 5.0,
        collapse_window: int = 5,
        variance_floor: float = 1e-6,
    ) -> None:
        self.path = None if path is None else Path(path)
        self._file: IO[str] | None = None
        if self.path is not None and self.path.is_dir():
            raise ValueError(f"path {str(self.path)!r} is a folder; Monitor needs a JSON-lines file to append to")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._writer = _tensorboard_writer(tensorboard)
        self.dominance, self.dead_floor, self.dead_patience = dominance, dead_floor, dead_patience
        self.collapse_drop, self.collapse_window, self.variance_floor = collapse_drop, collapse_window, variance_floor
        self.records: list[dict[str, Any]] = []
        self.histories: dict[str, tuple[list[int], list[Tensor]]] = {}
        self._previous: dict[str, Tensor] = {}

    # ---- writing -------------------------------------------------------------------------------------
    def log(self, step: int, **values: Any) -> dict[str, Any]:
        """Write one record of plain values or tensors at ``step``; returns it (tensors as floats/lists).

        The JSON line holds ``null`` where the record holds NaN or ±inf (see the module docstring).
        """
        record = {"step": _step(step), **{name: _plain(value, name) for name, value in values.items()}}
        line = json.dumps(_null_non_finite(record), allow_nan=False) if self._file is not None else ""
        self.records.append(record)
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        if self._writer is not None:
            for name, value in record.items():
                _write_scalars(self._writer, name, value, int(step))
        return record

    def _remember(self, name: str, step: int, value: Tensor) -> None:
        steps, values = self.histories.setdefault(name, ([], []))
        steps.append(_step(step))
        values.append(value.detach().cpu().to(torch.float64))

    def history(self, name: str) -> tuple[list[int], Tensor]:
        """The recorded steps and a (steps, K) tensor of one history (usage, log_det, min_variance)."""
        steps, values = self.histories[name]
        return steps, torch.stack(values)

    # ---- what it computes ----------------------------------------------------------------------------
    def log_responsibilities(self, step: int, r: Tensor, bins: int = 10, prefix: str = "") -> dict[str, Any]:
        """Usage (K,), usage entropy, effective number of components and per-component histograms (K, bins)."""
        with torch.no_grad():
            usage = component_usage(r)
            self._remember(prefix + "usage", step, usage)
            return self.log(
                step,
                **{
                    prefix + "usage": usage,
                    prefix + "usage_entropy": usage_entropy(usage),
                    prefix + "effective_components": effective_components(usage),
                    prefix + "histograms": responsibility_histograms(r, bins),
                },
            )

    def log_components(
        self,
        step: int,
        means: Tensor | None = None,
        log_det: Tensor | None = None,
        min_variance: Tensor | None = None,
        prefix: str = "",
    ) -> dict[str, Any]:
        """Prototype drift since the previous call (K,), log|det W| (K,) and smallest variances (K,)."""
        values: dict[str, Tensor] = {}
        with torch.no_grad():
            if means is not None:
                previous = self._previous.get(prefix + "means")
                if previous is not None:
                    values[prefix + "drift"] = drift(previous, means.detach())
                self._previous[prefix + "means"] = means.detach().clone()
            for name, tensor in ((prefix + "log_det", log_det), (prefix + "min_variance", min_variance)):
                if tensor is not None:
                    values[name] = tensor
                    self._remember(name, step, tensor)
        return self.log(step, **values)

    def log_parameters(self, step: int, **parameters: Tensor) -> dict[str, Any]:
        """Relative change of each named tensor since the previous call, e.g. ``w_v=..., w_qk=...``."""
        values: dict[str, Tensor] = {}
        for name, tensor in parameters.items():
            previous = self._previous.get("param." + name)
            if previous is not None:
                values[name + "_change"] = relative_change(previous, tensor.detach())
            self._previous["param." + name] = tensor.detach().clone()
        return self.log(step, **values)

    def log_attention(self, step: int, probe: Any, w_v: dict[str, Tensor] | None = None) -> dict[str, Any]:
        """Law residuals and per-head statistics of an :class:`~implicit_em.probes.AttentionProbe`.

        In full mode it also records the two-timescale measure per site against the previous call (use a fixed
        probe batch so that both calls see the same inputs); ``w_v`` maps site names to W_V for the same.
        """
        values: dict[str, Any] = {}
        try:
            laws = probe.check_laws()
            values.update({law: laws[law] for law in ("routing_law", "value_law", "hopfield") if law in laws})
        except RuntimeError:  # a forward-only step: no gradients, no laws
            pass
        for site, stats in probe.summary().items():
            values.update({f"{site}.{name}": value for name, value in stats.items()})
        cache = probe.cache
        for site in probe.sites or {name.rsplit(".", 1)[0] for name in cache}:
            pattern, value = cache.get(f"{site}.hook_pattern"), cache.get(f"{site}.hook_v")
            if pattern is None or value is None:
                continue
            before = (self._previous.get(site + ".pattern"), self._previous.get(site + ".v"))
            w_now = None if w_v is None else w_v.get(site)
            if before[0] is not None and before[1] is not None and before[0].shape == pattern.shape:
                w_before = self._previous.get(site + ".w_v")
                measure = two_timescale(before[0], pattern, before[1], value, w_before, w_now)
                values[f"{site}.attention_change"] = measure.attention
                values[f"{site}.value_change"] = measure.values
                values[f"{site}.timescale_ratio"] = measure.ratio
                if measure.w_v is not None:
                    values[f"{site}.w_v_change"] = measure.w_v
            self._previous[site + ".pattern"], self._previous[site + ".v"] = pattern.clone(), value.clone()
            if w_now is not None:
                self._previous[site + ".w_v"] = w_now.detach().clone()
        return self.log(step, **values)

    # ---- detectors -----------------------------------------------------------------------------------
    def findings(self, prefix: str = "") -> list[Finding]:
        """Run the collapse detectors over the recorded histories; the findings that fired, by step."""
        found: list[Finding | None] = []
        if prefix + "usage" in self.histories:
            steps, usage = self.history(prefix + "usage")
            found.append(_collapse.dominance(usage, steps, threshold=self.dominance))
            found.append(_collapse.dead_components(usage, steps, self.dead_floor, self.dead_patience))
        if prefix + "log_det" in self.histories:
            steps, log_det = self.history(prefix + "log_det")
            found.append(_collapse.metric_collapse(log_det, steps, self.collapse_drop, self.collapse_window))
        if prefix + "min_variance" in self.histories:
            steps, variance = self.history(prefix + "min_variance")
            found.append(_collapse.singularity(variance, steps, floor=self.variance_floor))
        return sorted((f for f in found if f is not None), key=lambda f: f.step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.flush()

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _tensorboard_writer(tensorboard: Any) -> Any:
    if tensorboard is None or hasattr(tensorboard, "add_scalar"):
        return tensorboard
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:  # torch.utils.tensorboard needs the separate tensorboard package
        raise ImportError(
            "the TensorBoard sink needs the tensorboard package: pip install implicit-em[tensorboard]"
        ) from error
    return SummaryWriter(log_dir=str(tensorboard))


def _write_scalars(writer: Any, name: str, value: Any, step: int) -> None:
    if name == "step":
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value):
            writer.add_scalar(name, value, step)
    elif isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        for i, v in enumerate(value):
            writer.add_scalar(f"{name}/{i}", v, step)
