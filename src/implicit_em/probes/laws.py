r"""Exact gradient laws of softmax attention (DESIGN.md §1, paper §4.2) and the Hopfield read-out identity.

For one head with scores :math:`s_{ij}`, weights :math:`\alpha_i = \mathrm{softmax}(s_i)`, output
:math:`o_i = \sum_j \tilde\alpha_{ij} v_j` and upstream gradient :math:`u_i = \partial\ell/\partial o_i`:

.. math::
    b_{ij} = u_i \cdot v_j, \qquad
    \frac{\partial \ell}{\partial s_{ij}}
        = \alpha_{ij}\Big(\tilde b_{ij} - \sum_k \alpha_{ik} \tilde b_{ik}\Big)
    \quad\text{(routing law)}, \qquad
    \frac{\partial \ell}{\partial v_j} = \sum_i \tilde\alpha_{ij} u_i \quad\text{(value law)}.

Without dropout :math:`\tilde\alpha = \alpha` and :math:`\tilde b = b`. With attention dropout the weights are
multiplied by :math:`m_{ij} = \mathrm{Bernoulli}(1-p)/(1-p)` (``keep``): :math:`\tilde\alpha = m \odot \alpha`
and :math:`\tilde b = m \odot b`, the dropout-aware form of the routing law.

Shapes: weights and scores (B, H, T, S); value (B, H, S, Dv); upstream (B, H, T, Dv).
"""

from __future__ import annotations

import torch
from torch import Tensor


def routing_law(weights: Tensor, value: Tensor, upstream: Tensor, keep: Tensor | None = None) -> Tensor:
    """The score gradient the routing law predicts, shape (..., T, S)."""
    b = torch.matmul(upstream, value.transpose(-2, -1))  # (..., T, S): b_ij = u_i . v_j
    if keep is not None:
        b = b * keep
    return weights * (b - (weights * b).sum(dim=-1, keepdim=True))


def value_law(weights: Tensor, upstream: Tensor, keep: Tensor | None = None) -> Tensor:
    """The value gradient the value law predicts, shape (..., S, Dv)."""
    dropped = weights if keep is None else weights * keep
    return torch.matmul(dropped.transpose(-2, -1), upstream)


def per_head_max(x: Tensor) -> Tensor:
    """Max |x| per head of a (B, H, ...) tensor, shape (H,).

    ``abs().amax()`` rather than ``vector_norm(ord=inf)``: the same value (NaN propagates too), about 15 times
    faster on CPU for (B, H, T, S) tensors.
    """
    return x.abs().amax(dim=(0, *range(2, x.dim())))


def per_head_norm(x: Tensor) -> Tensor:
    """Euclidean norm per head of a (B, H, ...) tensor, shape (H,) (a square-sum reduction; ``vector_norm`` over
    dims (0, 2, ...) takes a slow strided path on CPU)."""
    return x.square().sum(dim=(0, *range(2, x.dim()))).sqrt()


def routing_law_residual(
    grad_scores: Tensor, weights: Tensor, value: Tensor, upstream: Tensor, keep: Tensor | None = None
) -> Tensor:
    """Max |dl/ds − routing law| per head, shape (H,); the cheap form used in summary mode (one T x S buffer)."""
    b = torch.matmul(upstream, value.transpose(-2, -1))  # (B, H, T, S), the only T x S allocation
    if keep is not None:
        b.mul_(keep)
    mean_b = (weights * b).sum(dim=-1, keepdim=True)  # E_alpha[b] per query row
    b.sub_(mean_b).mul_(weights).sub_(grad_scores)
    return per_head_max(b)


def hopfield_residual(query: Tensor, key: Tensor, scores: Tensor, scale: float) -> Tensor:
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
        readout = torch.matmul(weights, k)  # (B, H, T, E): the read-out with values = keys
        return per_head_max((grad_q / scale - readout) * alive)
