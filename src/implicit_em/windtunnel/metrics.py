r"""Wind-tunnel metrics in bits: entropy MAE under both protocols, KL(Bayes ‖ model), per-position curves.

Companion notes §A. With :math:`H(p) = -\sum_c p_c \log_2 p_c` at each scored position t of each sequence b:

- per-sample entropy MAE: :math:`\frac{1}{BP}\sum_{b,t} |H(p^{model}_{bt}) - H(p^{Bayes}_{bt})|`;
- mean-curve entropy MAE: :math:`\frac1P \sum_t |\bar H^{model}(t) - \bar H^{Bayes}(t)|` with the curves
  averaged over sequences first (errors of opposite sign cancel, so this is never larger);
- KL: :math:`\frac{1}{BP}\sum_{b,t} \mathrm{KL}(p^{Bayes}_{bt} \| p^{model}_{bt})` in bits (cannot cancel).
"""

import math
from dataclasses import asdict, dataclass

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = [
    "Curves",
    "WindTunnelMetrics",
    "entropy_bits",
    "evaluate_predictions",
    "kl_bits",
    "predictive",
]

_LOG2 = math.log(2.0)


def entropy_bits(p: Float[Tensor, "*batch c"]) -> Float[Tensor, "*batch"]:
    """Shannon entropy in bits along the last dimension, with 0 log 0 = 0."""
    return -torch.special.xlogy(p, p).sum(dim=-1) / _LOG2


def kl_bits(p: Float[Tensor, "*batch c"], q: Float[Tensor, "*batch c"]) -> Float[Tensor, "*batch"]:
    r""":math:`\mathrm{KL}(p \| q) = \sum_c p_c \log_2(p_c / q_c)` in bits, 0 where p_c = 0."""
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(dim=-1) / _LOG2


@dataclass(frozen=True)
class Curves:
    """Per-position curves (length P lists): mean entropies, mean |ΔH|, mean KL, all in bits."""

    entropy_model: list[float]
    entropy_bayes: list[float]
    abs_entropy_error: list[float]
    kl: list[float]


@dataclass(frozen=True)
class WindTunnelMetrics:
    """The numbers of one evaluation, in bits (see the module docstring for the definitions)."""

    entropy_mae_per_sample: float
    entropy_mae_mean_curve: float
    kl: float
    cross_entropy: float
    n_sequences: int
    curves: Curves
    sigmoid_sum_error: float | None = None  # sigmoid loss only: mean |sum_c sigmoid(z_c) - 1| before normalising

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def evaluate_predictions(model: Float[Tensor, "b p c"], bayes: Float[Tensor, "b p c"]) -> WindTunnelMetrics:
    """Compare the model's predictive distributions with the exact posterior (both (B, P, C), rows sum to 1).

    ``cross_entropy`` is the expected cross-entropy :math:`-\\sum_c p^{Bayes}_c \\log_2 p^{model}_c` in bits,
    i.e. the Bayes entropy plus the KL.
    """
    if model.shape != bayes.shape or model.dim() != 3:
        raise ValueError(f"model and bayes must both be (B, P, C), got {tuple(model.shape)} and {tuple(bayes.shape)}")
    model, bayes = model.double(), bayes.double()
    h_model, h_bayes = entropy_bits(model), entropy_bits(bayes)  # (B, P)
    abs_err = (h_model - h_bayes).abs()
    kl = kl_bits(bayes, model)  # (B, P)
    curve_model, curve_bayes = h_model.mean(dim=0), h_bayes.mean(dim=0)  # (P,)
    curves = Curves(
        entropy_model=curve_model.tolist(),
        entropy_bayes=curve_bayes.tolist(),
        abs_entropy_error=abs_err.mean(dim=0).tolist(),
        kl=kl.mean(dim=0).tolist(),
    )
    return WindTunnelMetrics(
        entropy_mae_per_sample=float(abs_err.mean()),
        entropy_mae_mean_curve=float((curve_model - curve_bayes).abs().mean()),
        kl=float(kl.mean()),
        cross_entropy=float((h_bayes + kl).mean()),
        n_sequences=int(model.shape[0]),
        curves=curves,
    )


def predictive(logits: Float[Tensor, "*batch c"], loss: str = "softmax") -> Float[Tensor, "*batch c"]:
    """The model's predictive distribution from its logits.

    ``softmax``: softmax(z). ``sigmoid``: the independent per-class probabilities sigmoid(z_c), normalised to
    sum to one (at the population optimum of independent BCE, sigmoid(z_c) is the marginal p(c | context), which
    already sums to one; normalising only makes an imperfect model's output a distribution).
    """
    if loss == "softmax":
        return torch.softmax(logits, dim=-1)
    if loss == "sigmoid":
        s = torch.sigmoid(logits)
        return s / s.sum(dim=-1, keepdim=True)
    raise ValueError(f"loss must be 'softmax' or 'sigmoid', got {loss!r}")
