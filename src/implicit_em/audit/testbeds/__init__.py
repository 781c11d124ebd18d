"""What several claims train or compute, written once: trainers, settings and read-outs shared by the claims.

A testbed imports :mod:`implicit_em.audit.core` (and ``metrics``, ``seeds``, ``stats``, ``plots``), other testbeds
and the library, never a claim. Its modules are imported on first use (``testbeds.one_head``), so importing one
testbed runs no other.
"""

import importlib
from types import ModuleType

__all__ = [
    "ablation",
    "ablation_arms",
    "ablation_figures",
    "ablation_metrics",
    "attention",
    "classifier",
    "escape",
    "five_clusters",
    "gradient_em",
    "identities",
    "manifold",
    "manifold_validation",
    "measured",
    "mixture_classes",
    "mixture_ends",
    "mixture_paths",
    "one_head",
    "ood",
    "ring_outliers",
    "sticky_fits",
    "sticky_manifold",
    "two_timescale",
    "unnormalised",
    "volume_arms",
]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
