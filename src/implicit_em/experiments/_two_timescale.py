r"""Helpers of the ``two_timescale`` experiment: stabilisation times, a batched sticky-chain sampler, Adam over
stacked runs with one learning rate per run and parameter group, and a transformer's attention and values.

Stabilisation time (issue 12). For snapshots :math:`Z_0, \ldots, Z_n` of a quantity taken at steps
:math:`s_0 < \ldots < s_n` (the last is the end of training),

.. math::  \delta_i = \|Z_i - Z_n\|_F / \|Z_n\|_F, \qquad \tau = s_{i^*}, \quad
           i^* = \min\{i : \delta_j < \epsilon \text{ for every } j \ge i\},

the first snapshot after which the relative distance to the final value stays below :math:`\epsilon`. Its
resolution is the snapshot interval; :math:`\tau = s_n` (censored) when the quantity only settles at the end.
"""

from typing import cast

import torch
from jaxtyping import Float, Int
from torch import Tensor

from implicit_em.probes.attention import attend
from implicit_em.windtunnel.models import Block, CausalSelfAttention, CausalTransformer
from implicit_em.windtunnel.tasks import StickyMarkovTask, hmm_forward_filter

__all__: list[str] = []  # private helpers; the experiment is implicit_em.experiments.two_timescale


def relative_distances(path: Float[Tensor, "n r *shape"]) -> Float[Tensor, "n r"]:
    r""":math:`\delta_i = \|Z_i - Z_n\|_F / \|Z_n\|_F` for every snapshot i and run r; ``path`` (n+1, R, ...)."""
    if path.dim() < 2:
        raise ValueError(f"path must be (snapshots, runs, ...), got shape {tuple(path.shape)}")
    flat = path.reshape(path.shape[0], path.shape[1], -1).double()  # (n+1, R, F)
    final = flat[-1]  # (R, F)
    norm = final.norm(dim=-1)  # (R,)
    if bool((norm == 0).any()):
        raise ValueError("a run's final value is zero: the relative distance is undefined")
    return (flat - final).norm(dim=-1) / norm


def stabilisation_times(delta: Float[Tensor, "n r"], steps: Int[Tensor, " n"], tol: float) -> Int[Tensor, " r"]:
    r"""τ per run: the step of the first snapshot after which :math:`\delta < \epsilon` holds to the end."""
    if delta.shape[0] != steps.shape[0]:
        raise ValueError(f"delta has {delta.shape[0]} snapshots, steps {steps.shape[0]}")
    ok = delta < tol  # (n+1, R); the last row is delta = 0
    # index of the last snapshot that is not ok, + 1 (0 if every snapshot is ok)
    idx = torch.arange(1, delta.shape[0] + 1)[:, None].expand_as(ok)
    first = torch.where(~ok, idx, torch.zeros_like(idx)).amax(dim=0)  # (R,)
    return steps[first.clamp(max=delta.shape[0] - 1)]


def planted_path(
    steps: Int[Tensor, " n"], scale: float, start: float, generator: torch.Generator, shape: tuple[int, ...] = (6, 5)
) -> tuple[Tensor, int]:
    r"""A synthetic trajectory with a known τ: :math:`Z_s = Z_\infty + e^{-s/\text{scale}} (Z_0 - Z_\infty)` with
    :math:`\|Z_0 - Z_\infty\| = \text{start}\,\|Z_\infty\|`, stopped at the last step.

    Returns the path (n+1, 1, *shape) and its exact τ at tolerance 0.05 on the snapshot grid (computed from the
    closed form :math:`\delta_s = \text{start}\,|e^{-s/\text{scale}} - e^{-s_n/\text{scale}}|`).
    """
    z_inf = torch.randn(*shape, generator=generator, dtype=torch.float64)
    direction = torch.randn(*shape, generator=generator, dtype=torch.float64)
    direction = direction * start * z_inf.norm() / direction.norm()
    s = steps.double()
    decay = torch.exp(-s / scale)
    path = z_inf + decay.reshape(-1, *[1] * len(shape)) * direction  # (n+1, *shape)
    final = path[-1]
    # closed form of the relative distance to the final snapshot
    delta = start * z_inf.norm() * (decay - decay[-1]).abs() / final.norm()
    bad = (delta >= 0.05).nonzero()
    first = int(bad.max()) + 1 if bad.numel() else 0
    return path[:, None], int(steps[min(first, len(steps) - 1)])


# ---------------------------------------------------------------------------------------------- sticky chain


def sample_sticky(task: StickyMarkovTask, batch: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    r"""``batch`` sequences of the sticky chain at once: inputs x (B, T, D) float64, targets y (B, T), Bayes
    predictive (B, T, C) float64.

    The same law as :meth:`StickyMarkovTask.sample` (y_0 uniform, :math:`y_t \sim A_{y_{t-1}}`,
    :math:`x_t = \mu_{y_{t-1}} + \sigma\varepsilon_t`, the forward filter times A), vectorised over sequences.
    """
    a, means, t = task.transition, task.means, task.length
    c = a.shape[0]
    y = [torch.randint(0, c, (batch,), generator=generator)]
    cdf = a.cumsum(dim=1)
    for _ in range(t):
        u = torch.rand(batch, 1, generator=generator, dtype=a.dtype)
        y.append((cdf[y[-1]] < u).sum(dim=1).clamp(max=c - 1))
    ys = torch.stack(y, dim=1)  # (B, T+1)
    eps = torch.randn(batch, t, means.shape[1], generator=generator, dtype=torch.float64) * task.noise
    x = means[ys[:, :-1]] + eps  # (B, T, D): x_t observes y_{t-1}
    log_lik = -0.5 * ((x[:, :, None, :] - means[None, None]) ** 2).sum(-1) / task.noise**2  # (B, T, C)
    obs = torch.arange(t)[None].expand(batch, -1)
    filt = hmm_forward_filter(a.log()[None].expand(batch, -1, -1), log_lik.transpose(1, 2), obs)  # (B, T, C)
    return x, ys[:, 1:], filt @ a


class StackedAdam:
    r"""Adam over R runs stacked along dim 0 of every parameter, with one learning rate per run and group.

    For parameter p with gradient g (each run's own gradient: the objective is a sum over runs),
    :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`, :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`,
    :math:`p \leftarrow p - \eta_r\, \hat m / (\sqrt{\hat v} + \epsilon)` with bias corrections, as
    :class:`torch.optim.Adam`; ``lr[name]`` is the (R,) vector :math:`\eta_r` of that parameter.
    """

    def __init__(self, params: dict[str, Tensor], lr: dict[str, Tensor], betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:  # fmt: skip
        self.params, self.betas, self.eps, self.t = params, betas, eps, 0
        self.lr = {k: v.reshape(-1, *[1] * (params[k].dim() - 1)).to(params[k].dtype) for k, v in lr.items()}
        self.m = {k: torch.zeros_like(p) for k, p in params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, Tensor]) -> None:
        self.t += 1
        b1, b2 = self.betas
        for k, p in self.params.items():
            g = grads[k]
            self.m[k].mul_(b1).add_(g, alpha=1 - b1)
            self.v[k].mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (self.v[k] / (1 - b2**self.t)).sqrt().add_(self.eps)
            p.sub_(self.lr[k] * (self.m[k] / (1 - b1**self.t)) / denom)


# ---------------------------------------------------------------------------------------------- transformer


def transformer_state(model: CausalTransformer, tokens: Int[Tensor, "b t"]) -> dict[str, Tensor]:
    r"""The model's forward pass written out, returning what the two-timescale measure snapshots.

    Keys: ``logits`` (B, T, C), exactly ``model(tokens)``; ``A`` the attention weights of every layer,
    (n_layers, B, H, T, T); ``V`` the value vectors :math:`v_j = \mathrm{LN}(x_j) W_V + b_V` of every layer,
    (n_layers, B, H, T, D/H); ``W_V`` (n_layers, D, D); ``W_QK`` the per-head bilinear score forms
    :math:`W_Q^{h\top} W_K^h` (n_layers, H, D, D), so that :math:`s_{ij} \propto h_i W_{QK}^h h_j^\top` up to
    the bias terms.
    """
    b, t = tokens.shape
    x = model.tok(tokens) + model.pos(torch.arange(t, device=tokens.device))  # (B, T, D)
    a_all, v_all, wv_all, wqk_all = [], [], [], []
    for layer in model.blocks:
        block = cast(Block, layer)
        attn = cast(CausalSelfAttention, block.attn)
        d, h = x.shape[-1], attn.n_heads
        q, k, v = attn.qkv(block.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D/H)
        out, weights = attend(q, k, v, is_causal=True)  # (B, H, T, D/H), (B, H, T, T)
        x = x + attn.proj(out.transpose(1, 2).reshape(b, t, d))
        x = x + block.mlp(block.ln2(x))
        w_q, w_k, w_v = attn.qkv.weight.split(d, dim=0)  # (D, D) each, rows = output features
        per_head = (w_q.view(h, d // h, d), w_k.view(h, d // h, d))  # (H, D/H, D)
        a_all.append(weights)
        v_all.append(v)
        wv_all.append(w_v)
        wqk_all.append(per_head[0].transpose(1, 2) @ per_head[1])  # (H, D, D)
    logits = model.head(model.ln_f(x))
    return {
        "logits": logits,
        "A": torch.stack(a_all),
        "V": torch.stack(v_all),
        "W_V": torch.stack(wv_all),
        "W_QK": torch.stack(wqk_all),
    }


def constant_after_warmup(step: int, lr: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then constant ``lr`` (no decay: a schedule that anneals to zero would
    make every quantity stop moving at the end, whatever its timescale)."""
    return lr * min(1.0, (step + 1) / max(1, warmup))
