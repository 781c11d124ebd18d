"""One module per claim of the paper or its reviews, each ending in its ``EXPERIMENT`` record, and the registry.

A claim imports :mod:`implicit_em.audit.core`, :mod:`implicit_em.audit.testbeds` and the library; never another
claim (``tests/test_audit_layers.py`` checks it). Adding a claim: its module here, its line in
:data:`EXPERIMENTS`, its test, and its page in ``docs/claims/``.
"""

from typing import Any

from implicit_em.audit.claims import (
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
from implicit_em.audit.core import Experiment

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
    "EXPERIMENTS",
    "advantage_ablation",
    "attention_law",
    "bayes_necessity",
    "correntropy_robustness",
    "cross_entropy_regime",
    "foundations",
    "gd_vs_em_step",
    "mixing_weight_escape",
    "normalisation_as_volume",
    "normalisation_necessity",
    "open_set",
    "same_optimum",
    "specialisation",
    "sticky_manifold",
    "sticky_sculpting",
    "theorem1",
    "two_timescale",
    "volume_collapse",
]
