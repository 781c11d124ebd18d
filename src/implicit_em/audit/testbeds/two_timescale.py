r"""Helpers of the ``two_timescale`` experiment: stabilisation times, a batched sticky-chain sampler, Adam over
stacked runs with one learning rate per run and parameter group, and a transformer's attention and values.

Stabilisation time (issue 12). For snapshots :math:`Z_0, \ldots, Z_n` of a quantity taken at steps
:math:`s_0 < \ldots < s_n` (the last is the end of training),

.. math::  \delta_i = \|Z_i - Z_n\|_F / \|Z_n\|_F, \qquad \tau = s_{i^*}, \quad
           i^* = \min\{i : \delta_j < \epsilon \text{ for every } j \ge i\},

the first snapshot after which the relative distance to the final value stays below :math:`\epsilon`. Its
resolution is the snapshot interval; :math:`\tau = s_n` (censored) when the quantity only settles at the end.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.func import functional_call, vmap

from implicit_em.probes.attention import attend
from implicit_em.windtunnel.models import Block, CausalSelfAttention, CausalTransformer
from implicit_em.windtunnel.tasks import StickyMarkovTask, hmm_forward_filter

__all__ = [
    "Protocol",
    "StackedOptimiser",
    "Trajectories",
    "displacement_times",
    "drift_step",
    "ema",
    "ema_beta",
    "ema_update",
    "noise_floor",
    "planted_noisy_path",
    "planted_path",
    "relative_distances",
    "sample_sticky",
    "schedule",
    "stabilisation_times",
    "stack_inits",
    "stacked",
    "sticky_state",
    "train_stack",
    "transformer_state",
]


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


@dataclass(frozen=True)
class Protocol:
    r"""An optimiser and its learning-rate schedule: ``optimiser`` ("sgd" or "adam") at peak rate ``lr`` for
    ``steps`` steps, a linear warm-up over ``warmup`` steps, then ``decay`` ("constant", or "cosine" to 0 at the
    end of the run's budget)."""

    name: str
    optimiser: Literal["sgd", "adam"]
    lr: float
    steps: int
    warmup: int = 0
    decay: Literal["constant", "cosine"] = "constant"


def schedule(protocol: Protocol, step: int, budget: int) -> float:
    r"""The rate factor at ``step`` of a run with ``budget`` steps: warm-up, then constant or
    :math:`\tfrac12(1 + \cos \pi u)` with :math:`u` the fraction of the post-warm-up budget spent; 0 from
    ``budget`` on (the run is over: it no longer moves)."""
    if step >= budget:
        return 0.0
    warmup = min(protocol.warmup, budget)
    if step < warmup:
        return (step + 1) / warmup
    if protocol.decay == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, budget - warmup)))


def drift_step(protocol: Protocol, budget: int, frac: float = 0.9) -> int:
    r"""The step by which ``frac`` of the run's summed learning rate has been spent: the τ of a quantity that
    moves in proportion to the rate and never settles (its τ is then the schedule's, not its own).

    A τ at or after this step is *censored*: the run cannot tell it from a quantity stopped by the schedule.
    Constant rate: 0.9 x the budget; cosine: about 0.6 x.
    """
    rates = torch.tensor([schedule(protocol, s, budget) for s in range(budget)], dtype=torch.float64)
    cum = rates.cumsum(0)
    return int(torch.searchsorted(cum, frac * float(cum[-1]))) + 1


class StackedOptimiser:
    r"""SGD or Adam over R runs stacked along dim 0 of every parameter, with a learning rate per run and element.

    ``lr[name]`` broadcasts against the parameter (R, ...) (a multiplier on a row block, e.g. the W_V rows of a
    fused qkv weight, is an (R, 3D, 1) tensor); each step's rate is ``lr x factor[r]`` (``factor`` the schedule
    per run). Adam: :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`, :math:`v \leftarrow \beta_2 v + (1-\beta_2)
    g^2`, :math:`p \leftarrow p - \eta\, \hat m / (\sqrt{\hat v} + \epsilon)` with bias corrections, as
    :class:`torch.optim.Adam`; SGD: :math:`p \leftarrow p - \eta g`, as :class:`torch.optim.SGD`. The gradient of
    each run is its own (the objective is a sum over runs).
    """

    def __init__(self, params: dict[str, Tensor], lr: dict[str, Tensor], optimiser: Literal["sgd", "adam"],
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:  # fmt: skip
        if optimiser not in ("sgd", "adam"):
            raise ValueError(f"optimiser must be 'sgd' or 'adam', got {optimiser!r}")
        self.params, self.kind, self.betas, self.eps, self.t = params, optimiser, betas, eps, 0
        self.lr = {k: lr[k].to(p.dtype) for k, p in params.items()}
        self.m = {k: torch.zeros_like(p) for k, p in params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, Tensor], factor: Tensor) -> None:
        self.t += 1
        b1, b2 = self.betas
        for k, p in self.params.items():
            g = grads[k]
            rate = self.lr[k] * factor.to(p.dtype).reshape(-1, *[1] * (p.dim() - 1))
            if self.kind == "sgd":
                p.sub_(rate * g)
                continue
            self.m[k].mul_(b1).add_(g, alpha=1 - b1)
            self.v[k].mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (self.v[k] / (1 - b2**self.t)).sqrt().add_(self.eps)
            p.sub_(rate * (self.m[k] / (1 - b1**self.t)) / denom)


# ---------------------------------------------------------------------------------------------- the τ instrument


def ema_beta(time_constant: float) -> float:
    r""":math:`\beta = e^{-1/h}`: the per-step decay of an exponential moving average with time constant h steps."""
    return math.exp(-1.0 / time_constant) if time_constant > 0 else 0.0


@torch.no_grad()
def ema_update(avg: Tensor, new: Tensor, beta: float) -> None:
    r"""One step of the average in place: :math:`\bar Z \leftarrow \beta \bar Z + (1 - \beta) Z` (started at
    :math:`\bar Z_0 = Z_0`, so it has no start-up bias)."""
    avg.mul_(beta).add_(new, alpha=1.0 - beta)


def ema(path: Float[Tensor, " n *shape"], beta: float) -> Float[Tensor, " n *shape"]:
    """The moving average of a per-step path (dim 0 the step), by :func:`ema_update` from ``path[0]``."""
    avg = path[0].clone()
    out = [avg.clone()]
    for z in path[1:]:
        ema_update(avg, z, beta)
        out.append(avg.clone())
    return torch.stack(out)


def displacement_times(
    path: Float[Tensor, "n r *shape"], steps: Int[Tensor, " n"], frac: float = 0.9
) -> dict[str, Tensor]:
    r"""Time to ``frac`` of the total displacement of an (averaged) trajectory.

    For snapshots :math:`\bar Z_0, \ldots, \bar Z_n` of run r, the total displacement is
    :math:`D = \|\bar Z_n - \bar Z_0\|_F` and τ the step of the first snapshot after which
    :math:`\|\bar Z_i - \bar Z_n\|_F \le (1 - \text{frac}) D` holds to the end. Scale-free (a multiple of Z has
    the same τ) and, unlike a band around the final value, blind to how large the final value is. A path of pure
    noise has τ at the very end (its distance to the end is of the order of D until the last average), so it is
    censored by :func:`drift_step`. Returns ``tau`` (R,) steps and ``total`` D (R,).
    """
    if path.dim() < 2 or path.shape[0] != steps.shape[0]:
        raise ValueError(
            f"path must be (snapshots, runs, ...) with {steps.shape[0]} snapshots, got {tuple(path.shape)}"
        )
    flat = path.reshape(path.shape[0], path.shape[1], -1).double()  # (n+1, R, F)
    total = (flat[-1] - flat[0]).norm(dim=-1)  # (R,)
    remaining = (flat - flat[-1]).norm(dim=-1)  # (n+1, R)
    ok = remaining <= (1.0 - frac) * total  # the last row is 0 <= band
    idx = torch.arange(1, flat.shape[0] + 1)[:, None].expand_as(ok)
    first = torch.where(~ok, idx, torch.zeros_like(idx)).amax(dim=0).clamp(max=flat.shape[0] - 1)  # (R,)
    return {"tau": steps[first], "total": total}


def noise_floor(end_a: Float[Tensor, " r *shape"], end_b: Float[Tensor, " r *shape"]) -> Float[Tensor, " r"]:
    r""":math:`\|\bar Z^a_n - \bar Z^b_n\|_F` per run: the same initialisation trained on two data orders."""
    return (end_a.reshape(end_a.shape[0], -1).double() - end_b.reshape(end_b.shape[0], -1).double()).norm(dim=-1)


def planted_noisy_path(
    n_steps: int, scale: float, noise: float, generator: torch.Generator, shape: tuple[int, ...] = (6, 5)
) -> tuple[Tensor, Tensor]:
    r"""Per-step trajectories with a known approach: :math:`Z_t = Z_\infty + e^{-t/\text{scale}}(Z_0 - Z_\infty)
    + \text{noise}\,\|Z_0 - Z_\infty\|\,\varepsilon_t / \sqrt{F}` (F elements, :math:`\varepsilon_t` iid standard
    normal), twice with the same :math:`Z_0, Z_\infty` and independent noise (two "data orders"); ``scale = inf``
    is pure noise around :math:`Z_0`. Returns two (n_steps+1, *shape) float64 paths; the noise-free τ to 90% of
    the displacement is :math:`\text{scale}\,\ln 10` (for a run much longer than the scale)."""
    z_inf = torch.randn(*shape, generator=generator, dtype=torch.float64)
    z_0 = torch.randn(*shape, generator=generator, dtype=torch.float64)
    decay = torch.exp(-torch.arange(n_steps + 1, dtype=torch.float64) / scale)  # 1 for every t when scale = inf
    mean = z_inf + decay.reshape(-1, *[1] * len(shape)) * (z_0 - z_inf)
    sd = noise * float((z_0 - z_inf).norm()) / math.sqrt(z_0.numel())
    draw = [mean + sd * torch.randn(mean.shape, generator=generator, dtype=torch.float64) for _ in range(2)]
    return draw[0], draw[1]


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


# ---------------------------------------------------------------------------------------------- stacked training


class _Call(nn.Module):
    """``fn(model, *args)`` as a module's forward, so :func:`torch.func.functional_call` can swap its weights."""

    def __init__(self, model: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.m, self.fn = model, fn

    def forward(self, *args: Any) -> Any:
        return self.fn(self.m, *args)


def stacked(model: nn.Module, fn: Callable[..., Any], in_dims: tuple[int | None, ...]) -> Callable[..., Any]:
    """``fn(model, *args)`` vectorised over runs: call it with stacked weights (R, ...) named as in
    ``model.named_parameters()`` and the arguments, batched along dim 0 where ``in_dims`` says 0."""
    call = _Call(model, fn)

    def one(params: dict[str, Tensor], *args: Any) -> Any:
        return functional_call(call, {f"m.{k}": v for k, v in params.items()}, args)

    return cast(Callable[..., Any], vmap(one, in_dims=(0, *in_dims)))


def stack_inits(models: list[nn.Module]) -> dict[str, Tensor]:
    """The models' weights stacked along a new dim 0 (R, ...), detached copies."""
    return {k: torch.stack([dict(m.named_parameters())[k].detach() for m in models]).clone()
            for k, _ in models[0].named_parameters()}  # fmt: skip


@dataclass
class Trajectories:
    """What :func:`train_stack` records. Snapshots (every ``snap_every`` steps and at the end) of the quantities
    of the runs ``snap_runs``, read from the averaged weights; the probe's cross-entropy against the posterior
    (nats) and KL(posterior ‖ model) (bits) of every run, every ``loss_every`` steps and at the end, from the
    averaged weights; each step's training loss of every run minus the Bayes predictive's (nats)."""

    steps: Tensor  # (n+1,)
    snaps: dict[str, Tensor]  # q -> (n+1, len(snap_runs), ...)
    loss_steps: Tensor  # (m+1,)
    probe_ce: Tensor  # (m+1, R)
    probe_kl: Tensor  # (m+1, R)
    train_gap: Tensor  # (steps, R)


def train_stack(
    params: dict[str, Tensor],
    lr_mult: dict[str, Tensor],
    budget: Tensor,
    protocol: Protocol,
    loss: Callable[[dict[str, Tensor], int], tuple[Tensor, Tensor]],
    probe: Callable[[dict[str, Tensor]], tuple[Tensor, Tensor]],
    state: Callable[[dict[str, Tensor]], dict[str, Tensor]],
    snap_runs: Tensor,
    snap_every: int,
    loss_every: int,
    ema_steps: float,
) -> Trajectories:
    r"""Train R stacked runs for ``protocol.steps`` steps and record their averaged trajectories.

    ``params`` (R, ...) are trained in place; run r's rate on an element is ``protocol.lr x lr_mult x
    schedule(step, budget[r])``. ``loss(params, step)`` returns each run's training loss (R,), whose sum is
    differentiated, and the Bayes predictive's loss on the same batch (R,); ``probe(params)`` the probe's
    cross-entropy and KL per run; ``state(params)`` the snapshot quantities of the runs it is given. The
    averaged weights :math:`\bar\theta` follow :func:`ema_update` with time constant ``ema_steps`` from the
    initialisation; every recorded trajectory is read from them.
    """
    lr = {k: protocol.lr * lr_mult[k] for k in params}
    opt = StackedOptimiser(params, lr, protocol.optimiser)
    beta = ema_beta(ema_steps)
    avg = {k: v.detach().clone() for k, v in params.items()}
    snaps: dict[str, list[Tensor]] = {}
    steps, loss_steps, ces, kls, gaps = [], [], [], [], []

    @torch.no_grad()
    def record(step: int, snap: bool, probe_now: bool) -> None:
        if snap:
            for q, z in state({k: v[snap_runs] for k, v in avg.items()}).items():
                snaps.setdefault(q, []).append(z.detach().clone())
            steps.append(step)
        if probe_now:
            ce, kl = probe(avg)
            ces.append(ce.double().tolist())  # lists, not small tensors (they pinned the heap before)
            kls.append(kl.double().tolist())
            loss_steps.append(step)

    for step in range(protocol.steps):
        record(step, step % snap_every == 0, step % loss_every == 0)
        factor = torch.tensor([schedule(protocol, step, int(b)) for b in budget])
        per_run, bayes = loss(params, step)
        grads = torch.autograd.grad(per_run.sum(), list(params.values()))
        opt.step(dict(zip(params, grads, strict=True)), factor)
        with torch.no_grad():
            for k, v in params.items():
                ema_update(avg[k], v, beta)
        gaps.append((per_run.detach().double() - bayes.double()).tolist())
    record(protocol.steps, True, True)
    return Trajectories(
        torch.tensor(steps), {q: torch.stack(v) for q, v in snaps.items()}, torch.tensor(loss_steps),
        torch.tensor(ces, dtype=torch.float64), torch.tensor(kls, dtype=torch.float64),
        torch.tensor(gaps, dtype=torch.float64),
    )  # fmt: skip


def sticky_state(model: nn.Module, x: Float[Tensor, "b t d"]) -> dict[str, Tensor]:
    r"""The :class:`~implicit_em.windtunnel.sticky.StickyTransformer`'s forward pass written out: ``logits``
    (B, T, C), exactly ``model(x)``; ``A`` (n_layers, B, H, T, T); ``V`` the values :math:`\mathrm{LN}(h_j) W_V +
    b_V` (n_layers, B, H, T, D/H); ``W_V`` (n_layers, D, D); ``W_QK`` the per-head :math:`W_Q^{h\top} W_K^h`
    (n_layers, H, D, D)."""
    b, t, _ = x.shape
    m = cast(Any, model)
    h = m.inp(x) + m.pos(torch.arange(t, device=x.device))
    a_all, v_all, wv_all, wqk_all = [], [], [], []
    for block in m.blocks:
        attn = block.attn
        d, heads = h.shape[-1], attn.n_heads
        z = block.ln1(h)
        q, k, v = (w(z).view(b, t, heads, d // heads).transpose(1, 2) for w in (attn.W_Q, attn.W_K, attn.W_V))
        out, weights = attend(q, k, v, is_causal=True)
        h = h + attn.W_O(out.transpose(1, 2).reshape(b, t, d))
        h = h + block.mlp(block.ln2(h))
        w_q, w_k = attn.W_Q.weight.view(heads, d // heads, d), attn.W_K.weight.view(heads, d // heads, d)
        a_all.append(weights)
        v_all.append(v)
        wv_all.append(attn.W_V.weight)
        wqk_all.append(w_q.transpose(1, 2) @ w_k)
    return {"logits": m.head(m.ln_f(h)), "A": torch.stack(a_all), "V": torch.stack(v_all),
            "W_V": torch.stack(wv_all), "W_QK": torch.stack(wqk_all)}  # fmt: skip
