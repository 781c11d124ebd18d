"""Bayesian wind tunnels: tasks with exact posteriors, small models, a training loop, metrics in bits.

See docs/windtunnel.md and Agarwal, Dalal & Misra, arXiv 2512.22471 and 2512.22473.
"""

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
