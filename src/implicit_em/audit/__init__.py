"""The claims audit: one module per claim in :mod:`implicit_em.audit.claims`, each exposing ``EXPERIMENT`` (an
:class:`Experiment` with its ``Config`` and ``run(cfg, ctx)``), listed in :data:`EXPERIMENTS` in the report's order.

    from implicit_em.audit import EXPERIMENTS, run_audit
    run_audit("audit-run", quick=True, seed=0)       # results.json, figures/, report.html

Layers, each importing only those below it: ``claims`` -> ``testbeds`` (what several claims train or compute) ->
``core``, ``metrics``, ``seeds``, ``stats``, ``plots`` -> the library. ``runner`` and ``provenance`` run claims and
say where a result came from. A claim never imports another claim.
"""

from implicit_em.audit.claims import EXPERIMENTS
from implicit_em.audit.core import (
    DECISIVE,
    ROLES,
    VERDICTS,
    Context,
    Criterion,
    Experiment,
    ExperimentConfig,
    Result,
    Role,
    Verdict,
    criterion,
    gate,
    gated,
    identity,
)
from implicit_em.audit.runner import run_audit, select

__all__ = [
    "DECISIVE",
    "EXPERIMENTS",
    "ROLES",
    "VERDICTS",
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
    "run_audit",
    "select",
]
