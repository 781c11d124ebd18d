r"""Per-head residuals of the attention laws, as the attention probe reduces them (paper §4.2).

The laws themselves (routing, value, Hopfield) are pure functions in :mod:`implicit_em.laws`; this module holds
what only the probe needs: reductions per head of a (B, H, ...) tensor, the summary-mode routing residual that
allocates a single T x S buffer, and the Hopfield residual on recorded (masked) scores.

Shapes: weights and scores (B, H, T, S); value (B, H, S, Dv); upstream (B, H, T, Dv); query (B, H, T, E);
key (B, H, S, E).
"""

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em.laws import hopfield_law


def per_head_max(x: Float[Tensor, "b h *rest"]) -> Float[Tensor, " h"]:
    """Max |x| per head of a (B, H, ...) tensor, shape (H,).

    ``abs().amax()`` rather than ``vector_norm(ord=inf)``: the same value (NaN propagates too), about 15 times
    faster on CPU for (B, H, T, S) tensors.
    """
    return x.abs().amax(dim=(0, *range(2, x.dim())))


def per_head_norm(x: Float[Tensor, "b h *rest"]) -> Float[Tensor, " h"]:
    """Euclidean norm per head of a (B, H, ...) tensor, shape (H,) (a square-sum reduction; ``vector_norm`` over
    dims (0, 2, ...) takes a slow strided path on CPU)."""
    return x.square().sum(dim=(0, *range(2, x.dim()))).sqrt()


def routing_law_residual(
    grad_scores: Float[Tensor, "b h t s"],
    weights: Float[Tensor, "b h t s"],
    value: Float[Tensor, "b h s dv"],
    upstream: Float[Tensor, "b h t dv"],
    keep: Float[Tensor, "b h t s"] | None = None,
) -> Float[Tensor, " h"]:
    """Max |dl/ds − routing law| per head, shape (H,); the cheap form used in summary mode (one T x S buffer).

    The same numbers as ``per_head_max(grad_scores - implicit_em.laws.routing_law(weights, value, upstream, keep))``
    (a test pins the two), computed in place.
    """
    b = torch.matmul(upstream, value.transpose(-2, -1))  # (B, H, T, S), the only T x S allocation
    if keep is not None:
        b.mul_(keep)
    mean_b = (weights * b).sum(dim=-1, keepdim=True)  # E_alpha[b] per query row
    b.sub_(mean_b).mul_(weights).sub_(grad_scores)
    return per_head_max(b)


def hopfield_residual(
    query: Float[Tensor, "b h t e"], key: Float[Tensor, "b h s e"], scores: Float[Tensor, "b h t s"], scale: float
) -> Float[Tensor, " h"]:
    r"""Max |read-out − ∇_q E| per head, the forward-pass (Hopfield) identity.

    .. math::  E(q_i) = \log \sum_j \exp(\text{scale}\; q_i \cdot k_j + c_{ij}), \qquad
               \tfrac{1}{\text{scale}} \nabla_{q_i} E = \sum_j \alpha_{ij} k_j

    where :math:`c` is the additive part of the recorded ``scores`` (mask, bias; −inf where masked). The
    gradient comes from autograd on a fresh leaf, so the model's graph is not touched.

    Args:
        query: (B, H, T, E); key: (B, H, S, E); scores: the recorded masked scores (B, H, T, S).
    Returns:
        residual per head, shape (H,).
    """
    if query.dim() != 4 or key.dim() != 4 or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must share the last dimension, as (B, H, T, E) and (B, H, S, E); got "
            f"{tuple(query.shape)} and {tuple(key.shape)}"
        )
    expected = (*query.shape[:-1], key.shape[-2])
    if tuple(scores.shape) != expected:
        raise ValueError(f"scores must have shape {expected} (B, H, T, S), got {tuple(scores.shape)}")
    q = query.detach().clone().requires_grad_(True)
    k = key.detach()
    with torch.no_grad():
        plain = torch.matmul(q, k.transpose(-2, -1)) * scale
        masked = torch.isneginf(scores)
        bias = torch.where(masked, 0.0, scores - plain)  # the additive mask/bias, 0 where masked
        alive = ~masked.all(dim=-1, keepdim=True)  # (B, H, T, 1): rows with at least one key
    with torch.enable_grad():
        s = (torch.matmul(q, k.transpose(-2, -1)) * scale + bias).masked_fill(masked | ~alive, float("-inf"))
        energy = torch.logsumexp(s.masked_fill(~alive, 0.0), dim=-1)  # dead rows: constant, zero gradient
        (grad_q,) = torch.autograd.grad(energy.sum(), q)
    with torch.no_grad():
        weights = torch.softmax(s.masked_fill(~alive, 0.0), dim=-1) * alive
        readout = hopfield_law(weights, k)  # (B, H, T, E): the read-out with values = keys
        return per_head_max((grad_q / scale - readout) * alive)
