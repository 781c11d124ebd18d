"""implicit-em: gradient descent as implicit EM in distance-based models."""

from implicit_em import diagnostics, probes
from implicit_em._checks import set_validate_args, validate_args_enabled
from implicit_em.diagnostics import Monitor
from implicit_em.distances import (
    GaussianComponents,
    GaussianEnergies,
    MahalanobisUnit,
    NoneOfTheAbove,
    Prototypes,
    gaussian_energies,
    gaussian_mixture_log_likelihood,
)
from implicit_em.laws import identity_residual
from implicit_em.mixture import GaussianMixture
from implicit_em.objectives import (
    constrained_cross_entropy,
    correntropy,
    independent_sigmoid_bce,
    lse,
    mixture_nll,
    open_set_lse,
    open_set_responsibilities,
    responsibilities,
    softmin_bounds,
)
from implicit_em.probes import AttentionProbe, HeadProbe

__all__ = [
    "AttentionProbe",
    "GaussianComponents",
    "GaussianEnergies",
    "GaussianMixture",
    "HeadProbe",
    "MahalanobisUnit",
    "Monitor",
    "NoneOfTheAbove",
    "Prototypes",
    "constrained_cross_entropy",
    "correntropy",
    "diagnostics",
    "gaussian_energies",
    "gaussian_mixture_log_likelihood",
    "identity_residual",
    "independent_sigmoid_bce",
    "lse",
    "mixture_nll",
    "open_set_lse",
    "open_set_responsibilities",
    "probes",
    "responsibilities",
    "set_validate_args",
    "softmin_bounds",
    "validate_args_enabled",
]
__version__ = "0.1.0"
