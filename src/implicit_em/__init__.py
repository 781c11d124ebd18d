"""implicit-em: gradient descent as implicit EM in distance-based models.

The public names below are loaded on first use (PEP 562), as scikit-learn and SciPy load their submodules: so
``import implicit_em`` and the ``implicit-em`` command's ``--help`` and argument errors do not pay for importing
torch. ``from implicit_em import GaussianMixture`` and ``implicit_em.lse`` work as always.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the type checker and the reader see; at run time each name is loaded by __getattr__
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
    from implicit_em.mixture import GaussianMixture, MixtureSelector
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

#: Each public name and the module it lives in (a module name itself for ``diagnostics`` and ``probes``).
_WHERE = {
    "AttentionProbe": "implicit_em.probes",
    "GaussianComponents": "implicit_em.distances",
    "GaussianEnergies": "implicit_em.distances",
    "GaussianMixture": "implicit_em.mixture",
    "HeadProbe": "implicit_em.probes",
    "MahalanobisUnit": "implicit_em.distances",
    "MixtureSelector": "implicit_em.mixture",
    "Monitor": "implicit_em.diagnostics",
    "NoneOfTheAbove": "implicit_em.distances",
    "Prototypes": "implicit_em.distances",
    "constrained_cross_entropy": "implicit_em.objectives",
    "correntropy": "implicit_em.objectives",
    "diagnostics": "",
    "gaussian_energies": "implicit_em.distances",
    "gaussian_mixture_log_likelihood": "implicit_em.distances",
    "identity_residual": "implicit_em.laws",
    "independent_sigmoid_bce": "implicit_em.objectives",
    "lse": "implicit_em.objectives",
    "mixture_nll": "implicit_em.objectives",
    "open_set_lse": "implicit_em.objectives",
    "open_set_responsibilities": "implicit_em.objectives",
    "probes": "",
    "responsibilities": "implicit_em.objectives",
    "set_validate_args": "implicit_em._checks",
    "softmin_bounds": "implicit_em.objectives",
    "validate_args_enabled": "implicit_em._checks",
}

__all__ = [
    "AttentionProbe",
    "GaussianComponents",
    "GaussianEnergies",
    "GaussianMixture",
    "HeadProbe",
    "MahalanobisUnit",
    "MixtureSelector",
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
assert set(__all__) == set(_WHERE)  # one list, two spellings: the literal is what linters and readers see
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Load a public name on first use and keep it in the module's namespace (later look-ups are plain)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'implicit_em' has no attribute {name!r}")
    where = _WHERE[name]
    module = importlib.import_module(where or f"implicit_em.{name}")
    value = module if not where else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
