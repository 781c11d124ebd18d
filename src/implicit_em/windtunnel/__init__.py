"""Bayesian wind tunnels: tasks with exact posteriors, small models, a training loop, metrics in bits.

See docs/windtunnel.md and Agarwal, Dalal & Misra, arXiv 2512.22471 and 2512.22473.

The names below are loaded on first use (PEP 562, as :mod:`implicit_em` itself), so that
``implicit-em windtunnel --help`` and its usage errors answer before torch is imported.
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the type checker and the reader see; at run time each name is loaded by __getattr__
    from implicit_em.windtunnel.config import WindTunnelConfig
    from implicit_em.windtunnel.metrics import (
        WindTunnelMetrics,
        entropy_bits,
        evaluate_predictions,
        kl_bits,
        predictive,
    )
    from implicit_em.windtunnel.models import (
        CausalTransformer,
        LSTMModel,
        PrefixMLP,
        TokenMLP,
        count_parameters,
        matched_lstm,
        matched_mlp,
        matched_prefix_mlp,
    )
    from implicit_em.windtunnel.sticky import (
        StickyAttention,
        StickyBatch,
        StickyTestbed,
        StickyTransformer,
        parameter_groups,
        plateau_change,
        plateau_drop,
    )
    from implicit_em.windtunnel.tasks import (
        Batch,
        BijectionTask,
        HMMFilteringTask,
        StickyMarkovTask,
        bijection_entropy_without_replacement,
        bijection_no_context_mae,
        bijection_posterior,
        hmm_forward_filter,
        sticky_transition_matrix,
    )
    from implicit_em.windtunnel.train import (
        CheckpointError,
        NonFiniteLossError,
        TrainResult,
        evaluate,
        train,
        windtunnel_loss,
    )

#: Each public name and the module it lives in.
_WHERE = {
    "Batch": "implicit_em.windtunnel.tasks",
    "BijectionTask": "implicit_em.windtunnel.tasks",
    "CausalTransformer": "implicit_em.windtunnel.models",
    "CheckpointError": "implicit_em.windtunnel.train",
    "HMMFilteringTask": "implicit_em.windtunnel.tasks",
    "LSTMModel": "implicit_em.windtunnel.models",
    "NonFiniteLossError": "implicit_em.windtunnel.train",
    "PrefixMLP": "implicit_em.windtunnel.models",
    "StickyAttention": "implicit_em.windtunnel.sticky",
    "StickyBatch": "implicit_em.windtunnel.sticky",
    "StickyMarkovTask": "implicit_em.windtunnel.tasks",
    "StickyTestbed": "implicit_em.windtunnel.sticky",
    "StickyTransformer": "implicit_em.windtunnel.sticky",
    "TokenMLP": "implicit_em.windtunnel.models",
    "TrainResult": "implicit_em.windtunnel.train",
    "WindTunnelConfig": "implicit_em.windtunnel.config",
    "WindTunnelMetrics": "implicit_em.windtunnel.metrics",
    "bijection_entropy_without_replacement": "implicit_em.windtunnel.tasks",
    "bijection_no_context_mae": "implicit_em.windtunnel.tasks",
    "bijection_posterior": "implicit_em.windtunnel.tasks",
    "count_parameters": "implicit_em.windtunnel.models",
    "entropy_bits": "implicit_em.windtunnel.metrics",
    "evaluate": "implicit_em.windtunnel.train",
    "evaluate_predictions": "implicit_em.windtunnel.metrics",
    "hmm_forward_filter": "implicit_em.windtunnel.tasks",
    "kl_bits": "implicit_em.windtunnel.metrics",
    "matched_lstm": "implicit_em.windtunnel.models",
    "matched_mlp": "implicit_em.windtunnel.models",
    "matched_prefix_mlp": "implicit_em.windtunnel.models",
    "parameter_groups": "implicit_em.windtunnel.sticky",
    "plateau_change": "implicit_em.windtunnel.sticky",
    "plateau_drop": "implicit_em.windtunnel.sticky",
    "predictive": "implicit_em.windtunnel.metrics",
    "sticky_transition_matrix": "implicit_em.windtunnel.tasks",
    "train": "implicit_em.windtunnel.train",
    "windtunnel_loss": "implicit_em.windtunnel.train",
}

__all__ = [
    "Batch",
    "BijectionTask",
    "CausalTransformer",
    "CheckpointError",
    "HMMFilteringTask",
    "LSTMModel",
    "NonFiniteLossError",
    "PrefixMLP",
    "StickyAttention",
    "StickyBatch",
    "StickyMarkovTask",
    "StickyTestbed",
    "StickyTransformer",
    "TokenMLP",
    "TrainResult",
    "WindTunnelConfig",
    "WindTunnelMetrics",
    "bijection_entropy_without_replacement",
    "bijection_no_context_mae",
    "bijection_posterior",
    "count_parameters",
    "entropy_bits",
    "evaluate",
    "evaluate_predictions",
    "hmm_forward_filter",
    "kl_bits",
    "matched_lstm",
    "matched_mlp",
    "matched_prefix_mlp",
    "parameter_groups",
    "plateau_change",
    "plateau_drop",
    "predictive",
    "sticky_transition_matrix",
    "train",
    "windtunnel_loss",
]
assert set(__all__) == set(_WHERE)  # one list, two spellings: the literal is what linters and readers see


def __getattr__(name: str) -> Any:
    """Load a public name on first use and keep it in the module's namespace (later look-ups are plain)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'implicit_em.windtunnel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


class _Package(types.ModuleType):
    """This package, where ``train`` stays the function: importing the submodule ``windtunnel/train.py`` makes
    the import system set the package's attribute ``train`` to that module, which the eager imports this file
    had before rebound to the function; the module stays in ``sys.modules``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "train" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
