r"""The gradient laws of the paper, one pure function per law (paper §3.4).

Each ``*_law`` function returns the gradient its law *predicts*, computed from tensors without autograd; compare it
with the gradient autograd measures to check the law. :func:`identity_residual` does that comparison for the three
distance regimes; ``implicit-em demo`` iterates a table of these functions; the probes and the claims audit call
them on live models.

======================  ==========================================================  ==========================
law                     predicted gradient                                          function
======================  ==========================================================  ==========================
LSE (Theorem 1)         :math:`\partial L/\partial d_j = -r_j`                      :func:`lse_law`
minimisation (§4.1)     :math:`\partial L^-/\partial d_j = +r_j`                    :func:`mixture_nll_law`
constrained (§4.3)      :math:`\partial \ell/\partial d_k = t_k - r_k`              :func:`constrained_law`
open set (§7.3)         :math:`\partial L_\varnothing/\partial \tilde d_j = -r_j`   :func:`open_set_law`
volume (§3.4)           :math:`\partial L/\partial W_j = \sum_i r_{ij}(W_j^{-\top}
                        - z_{ij}(x_i-\mu_j)^\top)`                                  :func:`volume_law`
routing (§4.2)          :math:`\partial\ell/\partial s_{ij} = \alpha_{ij}(b_{ij}
                        - \sum_k \alpha_{ik} b_{ik})`                               :func:`routing_law`
value (§4.2)            :math:`\partial\ell/\partial v_j = \sum_i \alpha_{ij} u_i`  :func:`value_law`
Hopfield (§4.2)         :math:`\nabla_q \log\sum_j \exp(q\cdot k_j)
                        = \sum_j \alpha_j k_j`                                      :func:`hopfield_law`
======================  ==========================================================  ==========================

Like the objectives, the functions follow their inputs' dtype and device and never call ``.item()``.
"""

from collections.abc import Callable

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em.objectives import Regime, _target_distribution, open_set_responsibilities, responsibilities

__all__ = [
    "constrained_law",
    "hopfield_law",
    "identity_residual",
    "lse_law",
    "mixture_nll_law",
    "open_set_law",
    "routing_law",
    "value_law",
    "volume_law",
]


# --------------------------------------------------------------------------------------------------------------
# The distance regimes: gradients with respect to the distances d
# --------------------------------------------------------------------------------------------------------------


def lse_law(
    d: Float[Tensor, "*batch k"], log_weights: Tensor | None = None, dim: int = -1
) -> Float[Tensor, "*batch k"]:
    r"""The LSE identity (paper Theorem 1, §3.1): the gradient of the log-sum-exp is minus the responsibilities.

    .. math::  L(d) = \log \sum_j \pi_j \exp(-d_j), \qquad \frac{\partial L}{\partial d_j} = -r_j,
               \qquad r = \mathrm{softmax}(\log\pi - d)

    Args:
        d: distances, K components along ``dim``.
        log_weights: optional normalised log mixing weights :math:`\log\pi`, (K,) or broadcastable to ``d``.
        dim: the component dimension.
    Returns:
        :math:`-r`, the shape of ``d``.
    """
    return -responsibilities(d, log_weights, dim=dim)


def mixture_nll_law(
    d: Float[Tensor, "*batch k"], log_weights: Tensor | None = None, dim: int = -1
) -> Float[Tensor, "*batch k"]:
    r"""The minimisation form (paper §4.1): the negative log marginal likelihood has gradient :math:`+r`.

    .. math::  L^-(d) = -\log \sum_j \pi_j \exp(-d_j), \qquad \frac{\partial L^-}{\partial d_j} = +r_j

    Args:
        d: distances (energies), K components along ``dim``.
        log_weights: optional normalised log mixing weights, as in :func:`lse_law`.
        dim: the component dimension.
    Returns:
        :math:`+r`, the shape of ``d``.
    """
    return responsibilities(d, log_weights, dim=dim)


def constrained_law(
    d: Float[Tensor, "*batch k"], target: Tensor, label_smoothing: float = 0.0, dim: int = -1
) -> Float[Tensor, "*batch k"]:
    r"""The constrained regime (paper §4.3): cross-entropy on logits :math:`-d` has gradient :math:`t - r`.

    .. math::  \ell = -\sum_k t_k \log \mathrm{softmax}(-d)_k, \qquad
               \frac{\partial \ell}{\partial d_k} = t_k - r_k, \qquad r = \mathrm{softmax}(-d)

    For class indices :math:`t` is one-hot (:math:`1[k = y] - r_k`); soft targets and label smoothing
    (:math:`t \leftarrow (1-\varepsilon)t + \varepsilon/K`) give the same law with the soft :math:`t`.

    Args:
        d: distances, K classes along ``dim``.
        target: class indices (integer, ``d``'s shape without ``dim``) or soft targets (``d``'s shape).
        label_smoothing: :math:`\varepsilon`, as in :func:`implicit_em.objectives.constrained_cross_entropy`.
        dim: the class dimension.
    Returns:
        :math:`t - r`, the shape of ``d``.
    """
    return _target_distribution(target, d, dim, label_smoothing) - responsibilities(d, dim=dim)


def identity_residual(
    objective: Callable[..., Tensor],
    d: Tensor,
    regime: Regime = "lse",
    target: Tensor | None = None,
    log_weights: Tensor | None = None,
    label_smoothing: float = 0.0,
    dim: int = -1,
) -> Tensor:
    r"""Check an objective's gradient against the responsibility law of its regime, by autograd.

    Runs ``objective`` on a copy of ``d`` (called as ``objective(d)``, or ``objective(d, target)`` in the
    constrained regime), differentiates the sum over rows, and returns :math:`\max |\partial L/\partial d - g|`
    where the expected gradient g is

    - ``"lse"``: :math:`-r` (L = log Σ π exp(−d), maximised; :func:`lse_law`);
    - ``"mixture_nll"``: :math:`+r` (the minimised negative log marginal likelihood; :func:`mixture_nll_law`);
    - ``"constrained"``: :math:`t - r` with t the target distribution (one-hot or soft, after label smoothing)
      and :math:`r = \mathrm{softmax}(-d)` (:func:`constrained_law`).

    with :math:`r = \mathrm{softmax}(\log\pi - d)` (``log_weights`` optional).

    Returns:
        the max absolute residual, a 0-dim tensor (call ``.item()`` yourself).
    """
    if regime not in ("lse", "mixture_nll", "constrained"):
        raise ValueError(f"regime must be 'lse', 'mixture_nll' or 'constrained', got {regime!r}")
    d_ = d.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        if regime == "constrained":
            if target is None:
                raise ValueError("the constrained regime needs a target")
            out = objective(d_, target)
        else:
            out = objective(d_)
        (grad,) = torch.autograd.grad(out.sum(), d_)
    if regime == "lse":
        expected = lse_law(d.detach(), log_weights, dim=dim)
    elif regime == "mixture_nll":
        expected = mixture_nll_law(d.detach(), log_weights, dim=dim)
    else:
        assert target is not None
        expected = constrained_law(d.detach(), target, label_smoothing, dim=dim)
    return (grad - expected).abs().amax()


# --------------------------------------------------------------------------------------------------------------
# The volume term: gradient with respect to the whitening
# --------------------------------------------------------------------------------------------------------------


def volume_law(
    x: Float[Tensor, "n d"],
    means: Float[Tensor, "k d"],
    whitening: Float[Tensor, "k d d"],
    r: Float[Tensor, "n k"],
) -> Float[Tensor, "k d d"]:
    r"""The gradient of the Gaussian mixture log-likelihood with respect to full whitenings (paper §3.4).

    With energies :math:`e_j(x) = \tfrac12\|z_j\|^2 - \log|\det W_j| + \tfrac D2 \log 2\pi`,
    :math:`z_{ij} = W_j(x_i - \mu_j)`, and :math:`L = \sum_i \log \sum_j \exp(-e_j(x_i))`:

    .. math::  \frac{\partial L}{\partial W_j} = \sum_i r_{ij}\big(W_j^{-\top} - z_{ij}(x_i - \mu_j)^\top\big)

    The volume term :math:`-\log|\det W_j|` contributes :math:`r_{ij} W_j^{-\top}`, which keeps :math:`W_j` from
    collapsing to 0. In the affine form :math:`z_j = W_j x + b_j` (paper §3.4) the same law reads
    :math:`r_j(W_j^{-\top} - z_j x^\top)`, with :math:`\partial L/\partial b_j = -r_j z_j`.

    Args:
        x: inputs, (N, D).
        means: :math:`\mu`, (K, D).
        whitening: full whitenings :math:`W`, (K, D, D), invertible.
        r: responsibilities :math:`\mathrm{softmax}(-e)`, (N, K).
    Returns:
        the predicted :math:`\partial L/\partial W`, (K, D, D).
    """
    diff = x[:, None, :] - means  # (N, K, D)
    z = torch.einsum("kij,nkj->nki", whitening, diff)  # (N, K, D)
    outer = torch.einsum("nk,nki,nkj->kij", r, z, diff)  # (K, D, D)
    # The law is about W^{-T} itself, so the inverse is formed (no linear system to solve instead).
    return r.sum(0)[:, None, None] * torch.linalg.inv(whitening).mT - outer


# --------------------------------------------------------------------------------------------------------------
# Softmax attention (the conditional regime) and the Hopfield read-out
# --------------------------------------------------------------------------------------------------------------


def routing_law(
    weights: Float[Tensor, "*batch t s"],
    value: Float[Tensor, "*batch s dv"],
    upstream: Float[Tensor, "*batch t dv"],
    keep: Float[Tensor, "*batch t s"] | None = None,
) -> Float[Tensor, "*batch t s"]:
    r"""The routing law of softmax attention (paper §4.2): the score gradient attention predicts.

    For scores :math:`s_{ij}`, weights :math:`\alpha_i = \mathrm{softmax}(s_i)`, output
    :math:`o_i = \sum_j \tilde\alpha_{ij} v_j` and upstream gradient :math:`u_i = \partial\ell/\partial o_i`:

    .. math::  b_{ij} = u_i \cdot v_j, \qquad
               \frac{\partial \ell}{\partial s_{ij}}
                   = \alpha_{ij}\Big(\tilde b_{ij} - \sum_k \alpha_{ik}\tilde b_{ik}\Big)

    Without dropout :math:`\tilde\alpha = \alpha` and :math:`\tilde b = b`. With attention dropout the weights are
    multiplied by :math:`m_{ij} = \mathrm{Bernoulli}(1-p)/(1-p)` (``keep``): :math:`\tilde b = m \odot b`, the
    dropout-aware form.

    Args:
        weights: :math:`\alpha`, before dropout, (..., T, S).
        value: :math:`v`, (..., S, Dv).
        upstream: :math:`u`, (..., T, Dv).
        keep: the dropout multiplier :math:`m`, (..., T, S), or ``None``.
    Returns:
        the predicted :math:`\partial\ell/\partial s`, (..., T, S).
    """
    b = torch.matmul(upstream, value.transpose(-2, -1))  # (..., T, S): b_ij = u_i . v_j
    if keep is not None:
        b = b * keep
    return weights * (b - (weights * b).sum(dim=-1, keepdim=True))


def value_law(
    weights: Float[Tensor, "*batch t s"],
    upstream: Float[Tensor, "*batch t dv"],
    keep: Float[Tensor, "*batch t s"] | None = None,
) -> Float[Tensor, "*batch s dv"]:
    r"""The value law of softmax attention (paper §4.2): each value's gradient is its weighted upstream gradient.

    .. math::  \frac{\partial \ell}{\partial v_j} = \sum_i \tilde\alpha_{ij} u_i,
               \qquad \tilde\alpha = m \odot \alpha \text{ (dropout) or } \alpha

    For :math:`v_j = W_V x_j` this gives :math:`\partial\ell/\partial W_V = \sum_{ij} \tilde\alpha_{ij} u_i x_j^\top`.

    Args:
        weights: :math:`\alpha`, before dropout, (..., T, S).
        upstream: :math:`u = \partial\ell/\partial o`, (..., T, Dv).
        keep: the dropout multiplier :math:`m`, (..., T, S), or ``None``.
    Returns:
        the predicted :math:`\partial\ell/\partial v`, (..., S, Dv).
    """
    dropped = weights if keep is None else weights * keep
    return torch.matmul(dropped.transpose(-2, -1), upstream)


def hopfield_law(weights: Float[Tensor, "*batch t s"], key: Float[Tensor, "*batch s e"]) -> Float[Tensor, "*batch t e"]:
    r"""The Hopfield identity (paper §4.2): the attention read-out with values = keys is a gradient.

    .. math::  E(q_i) = \log \sum_j \exp(c\, q_i \cdot k_j + m_{ij}), \qquad
               \tfrac{1}{c} \nabla_{q_i} E = \sum_j \alpha_{ij} k_j, \qquad
               \alpha_i = \mathrm{softmax}_j(c\, q_i \cdot k_j + m_{ij})

    with scale :math:`c` (:math:`1/\sqrt{E}` in attention) and an additive mask or bias :math:`m` that does not
    depend on :math:`q`.

    Args:
        weights: :math:`\alpha`, (..., T, S).
        key: :math:`k`, (..., S, E).
    Returns:
        the predicted :math:`\tfrac1c \nabla_q E`, (..., T, E).
    """
    return torch.matmul(weights, key)


# --------------------------------------------------------------------------------------------------------------
# The open set: the "none of the above" component (§6.3, §7.3)
# --------------------------------------------------------------------------------------------------------------


def open_set_law(d: Float[Tensor, "*batch k"], null_distance: float | Tensor, dim: int = -1) -> Float[Tensor, "..."]:
    r"""The open-set LSE identity (paper §7.3): Theorem 1 over the K components and the null one.

    .. math::  L_\varnothing = \log\Big(\sum_{j=1}^K \exp(-d_j) + \exp(-\tau)\Big), \qquad
               \frac{\partial L_\varnothing}{\partial d_j} = -r_j, \qquad
               \frac{\partial L_\varnothing}{\partial \tau} = -r_0

    with r the K + 1 responsibilities of :func:`implicit_em.objectives.open_set_responsibilities`. The gradient
    still sums to −1 over the K + 1 components, so the null component competes for every input like any other
    component; it is the null's share :math:`r_0` that the K real components lose.

    Args:
        d: distances, K components along ``dim``.
        null_distance: :math:`\tau`, a float, 0-dim tensor or one per row.
        dim: the component dimension.
    Returns:
        :math:`-r`, ``d``'s shape with K + 1 along ``dim``: entries 0..K−1 are :math:`\partial L_\varnothing /
        \partial d`, the last is :math:`\partial L_\varnothing / \partial \tau` per row (for a :math:`\tau`
        shared by all rows, the gradient of the summed objective is the sum of the last entries).
    """
    return -open_set_responsibilities(d, null_distance, dim=dim)
