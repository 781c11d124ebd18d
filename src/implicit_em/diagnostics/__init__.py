"""Diagnostics: specialisation, collapse and two-timescale dynamics (paper §7.3), and a Monitor that records them.

Pure functions of responsibilities, parameters or attention quantities return numbers or small tensors;
collapse detectors scan per-step histories and return a :class:`Finding`; :class:`Monitor` only collects.
The Lightning callback lives in :mod:`implicit_em.diagnostics.lightning` (optional ``lightning`` extra).
"""

from implicit_em.diagnostics._collapse import Finding, dead_components, dominance, metric_collapse, singularity
from implicit_em.diagnostics._metrics import (
    TwoTimescale,
    component_usage,
    drift,
    effective_components,
    min_variance,
    relative_change,
    responsibility_histograms,
    two_timescale,
    usage_entropy,
)
from implicit_em.diagnostics._monitor import Monitor

__all__ = [
    "Finding",
    "Monitor",
    "TwoTimescale",
    "component_usage",
    "dead_components",
    "dominance",
    "drift",
    "effective_components",
    "metric_collapse",
    "min_variance",
    "relative_change",
    "responsibility_histograms",
    "singularity",
    "two_timescale",
    "usage_entropy",
]
