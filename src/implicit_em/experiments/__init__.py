"""The claims audit: one module per claim, each exposing ``EXPERIMENT`` (an :class:`Experiment` with its
``Config`` and ``run(cfg, ctx)``), listed in :data:`EXPERIMENTS` in the report's order.

    from implicit_em.experiments import EXPERIMENTS, run_audit
    run_audit("audit-run", quick=True, seed=0)       # results.json, figures/, report.html
"""

from typing import Any

from implicit_em.experiments import (
    advantage_ablation,
    attention_law,
    bayes_necessity,
    correntropy_robustness,
    cross_entropy_regime,
    foundations,
    gd_vs_em_step,
    mixing_weight_escape,
    normalisation_as_volume,
    normalisation_necessity,
    open_set,
    same_optimum,
    specialisation,
    sticky_manifold,
    sticky_sculpting,
    theorem1,
    two_timescale,
    volume_collapse,
)
from implicit_em.experiments._base import (
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
from implicit_em.experiments.runner import run_audit, select

# The registry, in the report's order: the identity first, then the unsupervised regime (§4.1, §6.2), attention
# (§4.2), the constrained regime (§4.3), and the claims about Bayesian behaviour (§1, the attention review).
EXPERIMENTS: list[Experiment[Any]] = [
    theorem1.EXPERIMENT,
    gd_vs_em_step.EXPERIMENT,
    same_optimum.EXPERIMENT,
    specialisation.EXPERIMENT,
    volume_collapse.EXPERIMENT,
    attention_law.EXPERIMENT,
    cross_entropy_regime.EXPERIMENT,
    bayes_necessity.EXPERIMENT,
    sticky_sculpting.EXPERIMENT,
    foundations.EXPERIMENT,
    correntropy_robustness.EXPERIMENT,
    open_set.EXPERIMENT,
    mixing_weight_escape.EXPERIMENT,
    normalisation_as_volume.EXPERIMENT,
    sticky_manifold.EXPERIMENT,
    advantage_ablation.EXPERIMENT,
    two_timescale.EXPERIMENT,
    normalisation_necessity.EXPERIMENT,
]

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
