r"""The two-timescale protocol: three settings, many runs per seed trained as one stack, and the τ instrument.

Settings (:class:`Setting`): the bijection wind tunnel (:func:`bijection_setting`), the shared sticky testbed
(:func:`sticky_setting`) and the companion's one-head sticky head (:func:`one_head_setting`). Per seed the stack
holds the control runs (:data:`CONTROL_RUNS`: the baseline, its data-order twin, its half-budget twin) and one arm
per weight group and multiplier ("W_V x10": that group's rate times 10). :func:`train_setting` trains them with
:class:`StackedOptimiser` under a :class:`Protocol` and reads every trajectory from an exponential average of the
weights (:func:`train_stack`).

The τ instrument. For averaged snapshots :math:`\bar Z_0, \ldots, \bar Z_n` of a quantity at steps
:math:`s_0 < \ldots < s_n`, with total displacement :math:`D = \|\bar Z_n - \bar Z_0\|_F`,

.. math::  \tau = s_{i^*}, \quad i^* = \min\{i : \|\bar Z_j - \bar Z_n\|_F \le (1 - f) D
           \text{ for every } j \ge i\}

(:func:`displacement_times`, f = 0.9), censored at or after the schedule's drift step (:func:`drift_step`).
:func:`ordering` reads τ_A against τ_V in both data orders; :func:`speed_ups` and :func:`specificity` read the
arms' speed to the baseline's final probe loss; :func:`planted_control` runs all of it on planted paths.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.func import functional_call, vmap

from implicit_em.audit.testbeds.one_head import SHAPES, single_head_logits
from implicit_em.probes.attention import attend
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.models import Block, CausalSelfAttention, CausalTransformer
from implicit_em.windtunnel.sticky import StickyTestbed
from implicit_em.windtunnel.tasks import BijectionTask, StickyMarkovTask, hmm_forward_filter

__all__ = [
    "CONTROL_RUNS",
    "GROUPS",
    "QUANTITIES",
    "Protocol",
    "Setting",
    "StackedOptimiser",
    "Trajectories",
    "arm_names",
    "bijection_setting",
    "displacement_times",
    "drift_step",
    "ema",
    "ema_beta",
    "ema_update",
    "lr_multipliers",
    "mean_se",
    "noise_floor",
    "one_head_setting",
    "ordering",
    "planted_control",
    "planted_noisy_path",
    "run_names",
    "sample_sticky",
    "schedule",
    "specificity",
    "speed_ups",
    "stack_inits",
    "stacked",
    "sticky_setting",
    "sticky_state",
    "timescales",
    "train_setting",
    "train_stack",
    "transformer_state",
]

QUANTITIES = ("A", "V", "W_V", "W_QK")  # what is snapshotted: attention weights, values, W_V, W_Q W_K^T
GROUPS = ("W_V", "W_O", "W_Q/W_K")  # the weight groups whose rate is multiplied, one at a time
CONTROL_RUNS = ("baseline", "twin", "half")  # per seed: the baseline, its data-order twin, its half-budget twin


def arm_names(multipliers: tuple[float, ...]) -> list[str]:
    """The multiplier arms, "W_V x10" and so on, the three groups within each multiplier."""
    return [f"{g} x{m:g}" for m in multipliers for g in GROUPS]


def run_names(multipliers: tuple[float, ...]) -> list[str]:
    """The runs of one seed, in the order of the stack: the three control runs, then the arms."""
    return [*CONTROL_RUNS, *arm_names(multipliers)]


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

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict of tensors (what :meth:`~implicit_em.audit.core.Context.cached` stores)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> "Trajectories":
        """The inverse of :meth:`as_dict`."""
        return cls(**{f.name: value[f.name] for f in fields(cls)})


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


# ---------------------------------------------------------------------------------------------- settings


@dataclass
class Setting:
    """What the stacked trainer needs of a task and its model.

    ``model(seed)`` one initialised model; ``logits(model, inputs)`` its scored logits (B, P, C); ``state(model,
    inputs)`` the snapshot quantities; ``groups(name)`` -> [(group, row slice or None for the whole weight)], which
    weights of parameter ``name`` a group's multiplier scales; ``sample(batch, generator)`` inputs, sampled labels
    (B, P) and the exact posterior (B, P, C) float64; ``probe`` a held-out (inputs, posterior); ``no_context_kl``
    the best context-free predictor's KL on the probe (bits); ``note`` the setting in words.
    """

    name: str
    model: Callable[[int], nn.Module]
    logits: Callable[[nn.Module, Tensor], Tensor]
    state: Callable[[nn.Module, Tensor], dict[str, Tensor]]
    groups: Callable[[str], list[tuple[str, slice | None]]]
    sample: Callable[[int, torch.Generator], tuple[Tensor, Tensor, Tensor]]
    probe: tuple[Tensor, Tensor]
    no_context_kl: float
    n_classes: int
    note: str
    multipliers: tuple[float, ...] = (10.0,)


def bijection_setting(symbols: int, layers: int, heads: int, d_model: int, d_ff: int, probe_size: int,
                      probe_generator: torch.Generator, multipliers: tuple[float, ...]) -> Setting:  # fmt: skip
    """Bijection elimination without replacement (V = ``symbols``) on a
    :class:`~implicit_em.windtunnel.models.CausalTransformer`: W_V and W_Q/W_K are row blocks of the fused qkv
    weight and bias, W_O the attention's output projection; scored at the even positions."""
    task = BijectionTask(symbols)
    d = d_model

    def model(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return CausalTransformer(task.vocab_size, task.n_classes, task.seq_len(), layers, heads, d, d_ff)

    positions = torch.arange(0, task.seq_len(), 2)

    def logits(m: nn.Module, tokens: Tensor) -> Tensor:
        return m(tokens)[:, positions]

    def state(m: nn.Module, tokens: Tensor) -> dict[str, Tensor]:
        s = transformer_state(m, tokens)  # type: ignore[arg-type]
        return {q: s[q] for q in QUANTITIES}

    def groups(name: str) -> list[tuple[str, slice | None]]:
        if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
            return [("W_Q/W_K", slice(0, 2 * d)), ("W_V", slice(2 * d, 3 * d))]
        if ".attn.proj." in name:
            return [("W_O", None)]
        return []

    def sample(batch: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        b = task.sample(batch, g)
        assert b.labels is not None  # the bijection task samples its labels
        return b.tokens, b.labels, b.posterior

    probe = task.sample(probe_size, probe_generator)
    uniform = torch.full_like(probe.posterior, 1.0 / task.n_classes)
    return Setting("wind_tunnel", model, logits, state, groups, sample, (probe.tokens, probe.posterior),
                   float(kl_bits(probe.posterior, uniform).mean()), task.n_classes,
                   f"bijection V = {symbols}, {layers}-layer {heads}-head transformer, d = {d}",
                   multipliers)  # fmt: skip


def sticky_setting(bed: StickyTestbed, probe_size: int, probe_generator: torch.Generator,
                   multipliers: tuple[float, ...]) -> Setting:  # fmt: skip
    """The shared sticky testbed (:class:`~implicit_em.windtunnel.sticky.StickyTestbed`): a causal transformer with
    positions that can represent the filter, labels sampled from the chain; groups W_V, W_O, W_Q/W_K by name."""

    def sample(batch: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        b = bed.sample(batch, g)
        return b.x, b.y, b.posterior

    def state(m: nn.Module, x: Tensor) -> dict[str, Tensor]:
        s = sticky_state(m, x)
        return {q: s[q] for q in QUANTITIES}

    def groups(name: str) -> list[tuple[str, slice | None]]:
        for role, group in (("W_V", "W_V"), ("W_O", "W_O"), ("W_Q", "W_Q/W_K"), ("W_K", "W_Q/W_K")):
            if f".{role}." in f".{name}":
                return [(group, None)]
        return []

    probe = bed.sample(probe_size, probe_generator)
    return Setting("sticky", bed.model, lambda m, x: m(x), state, groups, sample, (probe.x, probe.posterior),
                   bed.no_context_kl_bits(probe), bed.n_symbols,
                   f"the shared sticky testbed (stay {bed.stay:g}, noise {bed.noise:g}, T = {bed.length}, "
                   f"{bed.n_layers}-layer {bed.n_heads}-head transformer with positions, d = {bed.d_model}, "
                   "sampled labels, online)", multipliers)  # fmt: skip


class _OneHead(nn.Module):
    """The companion's sticky-chain head: W_Q, W_K 20x10, W_V 20x15, W_O 15x8, init N(0, 0.1²), no residual."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        for name, shape in SHAPES.items():
            self.register_parameter(name, nn.Parameter(torch.randn(*shape, generator=g) * 0.1))

    def forward(self, x: Tensor) -> Tensor:
        return single_head_logits(dict(self.named_parameters()), x)


def _one_head_state(m: nn.Module, x: Tensor) -> dict[str, Tensor]:
    p = dict(m.named_parameters())
    _, a = attend(x @ p["W_Q"], x @ p["W_K"], x @ p["W_V"], is_causal=True)
    return {"A": a, "V": x @ p["W_V"], "W_V": p["W_V"], "W_QK": p["W_Q"] @ p["W_K"].T}


def one_head_setting(stay: float, noise: float, length: int, means_seed: int, probe_size: int,
                     probe_generator: torch.Generator, multipliers: tuple[float, ...]) -> Setting:  # fmt: skip
    """The companion's literal one-head sticky head on its chain (inputs x / σ): no positions, no residual, so it
    cannot represent the filter; its no-context KL is against the best predictor from x_t alone."""
    task = StickyMarkovTask(length=length, stay=stay, noise=noise, means_seed=means_seed)

    def sample(batch: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        x, y, post = sample_sticky(task, batch, g)
        return (x / noise).float(), y, post

    def groups(name: str) -> list[tuple[str, slice | None]]:
        return [({"W_Q": "W_Q/W_K", "W_K": "W_Q/W_K"}.get(name, name), None)]

    xp, _, post_p = sample(probe_size, probe_generator)
    log_lik = -0.5 * ((xp.double()[:, :, None] * noise - task.means) ** 2).sum(-1) / noise**2
    no_context = torch.softmax(log_lik, dim=-1) @ task.transition  # the best predictor from x_t alone
    return Setting("sticky_one_head", _OneHead, lambda m, x: m(x), _one_head_state, groups, sample, (xp, post_p),
                   float(kl_bits(post_p, no_context).mean()), 8,
                   f"the companion's one-head sticky head (stay {stay:g}, noise {noise:g}, T = "
                   f"{length}, online): no positions, no residual; it cannot represent the filter",
                   multipliers)  # fmt: skip


# ---------------------------------------------------------------------------------------------- one stack


def lr_multipliers(params: dict[str, Tensor], setting: Setting, runs: list[str]) -> dict[str, Tensor]:
    """Per run and element, the multiplier of the base rate: an arm "G xm" scales group G's weights by m.
    ``params`` (R, ...) with run r the ``runs[r % len(runs)]`` of its seed."""
    out = {}
    for name, p in params.items():
        mult = torch.ones_like(p)  # (R, ...)
        for r in range(p.shape[0]):
            run = runs[r % len(runs)]
            if run in CONTROL_RUNS:
                continue
            group, m = run.rsplit(" x", 1)
            for g, rows in setting.groups(name):
                if g == group:
                    mult[r, rows if rows is not None else slice(None)] = float(m)
        out[name] = mult
    return out


def train_setting(setting: Setting, protocol: Protocol, batch: int, model_seeds: list[int],
                  stream_seeds: list[tuple[int, int]], snap_every: int, loss_every: int,
                  ema_steps: float) -> dict[str, Any]:  # fmt: skip
    """Every run of every seed of ``setting`` under ``protocol``, stacked; returns ``traj`` (:class:`Trajectories`)
    and ``wall_s``. Seed i initialises every run from ``model_seeds[i]``; its data streams are
    ``stream_seeds[i]`` = (order a: every run but the twin, order b: the twin), independent generators. The
    snapshots are of the baseline and the twin of every seed, in that order."""
    runs = run_names(setting.multipliers)
    n_runs, n = len(runs), len(model_seeds)
    base = setting.model(model_seeds[0])
    params = {k: v.requires_grad_(True) for k, v in stack_inits([setting.model(s) for s in model_seeds
                                                                 for _ in runs]).items()}  # fmt: skip
    stream = torch.tensor([2 * i + (runs[j] == "twin") for i in range(n) for j in range(n_runs)])
    gens = [torch.Generator().manual_seed(s) for pair in stream_seeds for s in pair]
    budget = torch.tensor([protocol.steps // 2 if runs[j] == "half" else protocol.steps for _ in range(n)
                           for j in range(n_runs)])  # fmt: skip
    logits_fn = stacked(base, setting.logits, (0,))
    probe_fn = stacked(base, setting.logits, (None,))
    state_fn = stacked(base, setting.state, (None,))
    x_probe, post_probe = setting.probe

    def loss(p: dict[str, Tensor], step: int) -> tuple[Tensor, Tensor]:
        draws = [setting.sample(batch, g) for g in gens]
        x = torch.stack([d[0] for d in draws])[stream]
        y = torch.stack([d[1] for d in draws])[stream]  # (R, B, P)
        post = torch.stack([d[2] for d in draws])[stream]
        z = logits_fn(p, x)  # (R, B, P, C)
        ce = F.cross_entropy(z.reshape(-1, setting.n_classes), y.reshape(-1), reduction="none")
        bayes = -post.gather(-1, y[..., None]).log().reshape(len(stream), -1).mean(1)
        return ce.reshape(len(stream), -1).mean(1), bayes

    def probe(p: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(probe_fn(p, x_probe).double(), dim=-1)  # (R, B, P, C)
        post = post_probe[None].expand_as(logp)
        return -(post * logp).sum(-1).mean(dim=(1, 2)), kl_bits(post, logp.exp()).mean(dim=(1, 2))

    def state(p: dict[str, Tensor]) -> dict[str, Tensor]:
        return state_fn(p, x_probe)

    snap = torch.tensor([i * n_runs + j for i in range(n) for j in range(2)])  # baseline, twin of every seed
    start = time.perf_counter()
    traj = train_stack(params, lr_multipliers(params, setting, runs), budget, protocol, loss, probe, state, snap,
                       snap_every, loss_every, ema_steps)  # fmt: skip
    return {"traj": traj, "wall_s": time.perf_counter() - start}


# ---------------------------------------------------------------------------------------------- readings


def timescales(traj: Trajectories, drift: int, displacement: float) -> dict[str, Any]:
    """Per seed and quantity q: ``tau_q`` and ``twin_tau_q``, τ to ``displacement`` of the averaged path of the
    baseline and of its data-order twin (the noise floor of τ is their spread); ``censored_q``, either at or after
    the drift step; ``end_spread_q``, the twins' end-point distance over the baseline's displacement; ``path_q``
    the baseline's remaining displacement ‖Z̄_s − Z̄_end‖ / D, (n+1, seeds)."""
    out: dict[str, Any] = {}
    for q in QUANTITIES:
        z = traj.snaps[q]  # (n+1, 2 n_seeds, ...): baseline, twin of every seed
        base, twin = z[:, 0::2], z[:, 1::2]
        ta, tb = (displacement_times(p, traj.steps, displacement) for p in (base, twin))
        out[f"tau_{q}"] = ta["tau"].tolist()
        out[f"twin_tau_{q}"] = tb["tau"].tolist()
        out[f"censored_{q}"] = [bool(a >= drift or b >= drift) for a, b in zip(ta["tau"], tb["tau"], strict=True)]
        out[f"end_spread_{q}"] = (noise_floor(base[-1], twin[-1]) / ta["total"].clamp_min(1e-300)).tolist()
        out[f"path_{q}"] = (base - base[-1]).flatten(2).norm(dim=-1) / ta["total"].clamp_min(1e-300)  # (n+1, n)
    return out


def ordering(t: dict[str, Any], ratio: float) -> list[str]:
    """Per seed: "supports", "fails" or "undecided"; an ordering counts only if both data orders show it.

    With τ_A, τ_V of the baseline and of its data-order twin (lo, hi: the smaller and larger of the two) and D
    the drift step (a τ at or after it is censored: its true τ is later): A and V censored in both orders:
    undecided; A censored, V not: fails; V censored, A not: supports if τ_A,hi <= ratio x D, else undecided;
    otherwise supports if τ_A,hi <= ratio τ_V,lo, fails if τ_A,lo > ratio τ_V,hi, else undecided (the
    difference is within the data-order noise).
    """
    out, drift = [], t["drift_step"]
    for i in range(len(t["tau_A"])):
        ta = sorted((t["tau_A"][i], t["twin_tau_A"][i]))
        tv = sorted((t["tau_V"][i], t["twin_tau_V"][i]))
        a_cens, v_cens = ta[0] >= drift, tv[0] >= drift
        if a_cens and v_cens:
            out.append("undecided")
        elif a_cens:
            out.append("fails")
        elif v_cens:
            out.append("supports" if ta[1] <= ratio * drift else "undecided")
        elif ta[1] <= ratio * tv[0]:
            out.append("supports")
        else:
            out.append("fails" if ta[0] > ratio * tv[1] else "undecided")
    return out


def speed_ups(probe_ce: Tensor, steps: Tensor, n_seeds: int, runs: list[str], reach_tol: float) -> dict[str, Any]:
    """Per seed and run: steps to the baseline's final probe loss (+ ``reach_tol`` of its fall), and the
    speed-up baseline's steps / run's steps; a run that never gets there is censored and counted at its upper
    bound (baseline's steps / all steps). ``probe_ce`` (m+1, n_seeds x len(runs))."""
    ce = probe_ce.reshape(len(steps), n_seeds, len(runs))
    b = runs.index("baseline")
    target = ce[-1, :, b] + reach_tol * (ce[0, :, b] - ce[-1, :, b])  # (seeds,)
    reached = ce <= target[None, :, None]
    first = torch.where(reached.any(0), reached.double().argmax(0), torch.full(reached.shape[1:], -1))
    last = int(steps[-1])
    reach = torch.where(first >= 0, steps[first.clamp(min=0)], torch.full_like(first, last))
    su = reach[:, b].double().clamp_min(1.0)[:, None] / reach.double().clamp_min(1.0)
    return {"speed_up": su, "censored": first < 0, "reach_step": reach}


def mean_se(x: Tensor) -> tuple[float, float]:
    """Mean and standard error over seeds (torch's unbiased std / √n; inf for one seed)."""
    se = float(x.std(unbiased=True)) / math.sqrt(x.numel()) if x.numel() > 1 else math.inf
    return float(x.mean()), se


def specificity(su: Tensor, runs: list[str], multiplier: float, n_se: float) -> dict[str, Any]:
    """At one multiplier: W_V's speed-up over 1 and over W_O's and W_Q/W_K's (paired per seed), means and SEs;
    W_V-specific iff all three exceed ``n_se`` SE. ``su`` (seeds, len(runs))."""
    col = {r: runs.index(r) for r in runs}
    v = su[:, col[f"W_V x{multiplier:g}"]]
    out: dict[str, Any] = {"gain": mean_se(v - 1.0)}
    for g in ("W_O", "W_Q/W_K"):
        out[f"vs_{g}"] = mean_se(v - su[:, col[f"{g} x{multiplier:g}"]])
    out["specific"] = all(mean > n_se * se for mean, se in (out["gain"], out["vs_W_O"], out["vs_W_Q/W_K"]))
    return out


def planted_control(generator: torch.Generator, ema_steps: float, snap_every: int, displacement: float,
                    planted_tol: float, ratio: float, n_se: float) -> dict[str, Any]:  # fmt: skip
    """The instrument on paths with a known answer; returns the planted τ and the number of errors.

    τ: per-step exponential approaches (scales 40 and 160 steps, per-element noise 0.05 of the displacement),
    twice with independent noise (two "data orders"), averaged with the run's average and snapshotted on its
    grid: both τ within ``planted_tol`` of scale·ln 10 plus the average's lag and one snapshot; pure noise (no
    approach) is censored (τ at or after the drift step of a constant rate, 0.9 x the run). Ordering: the
    fast/slow pair supports, its reverse fails. Specificity: a planted W_V-only speed-up (2x against 1x for the
    other groups, seed noise 0.1) is W_V-specific; the same speed-up on every group is not.
    """
    n_steps, beta = 1000, ema_beta(ema_steps)
    steps = torch.arange(0, n_steps + 1, snap_every)
    drift = drift_step(Protocol("planted", "sgd", 1.0, n_steps), n_steps, displacement)
    taus: dict[float, list[int]] = {}
    errors = 0
    for scale in (40.0, 160.0, math.inf):
        pair = [ema(p, beta)[steps][:, None] for p in planted_noisy_path(n_steps, scale, 0.05, generator)]
        tau = [int(displacement_times(z, steps, displacement)["tau"][0]) for z in pair]
        if math.isinf(scale):
            errors += sum(t < drift for t in tau)  # pure noise must be censored
            continue
        taus[scale] = tau
        expected = scale * math.log(10.0)
        errors += sum(abs(t - expected) > planted_tol * expected + ema_steps + snap_every for t in tau)
    fast, slow = taus[40.0], taus[160.0]
    case = {"tau_A": [fast[0], slow[0]], "twin_tau_A": [fast[1], slow[1]], "tau_V": [slow[0], fast[0]],
            "twin_tau_V": [slow[1], fast[1]], "drift_step": drift}  # fmt: skip
    errors += ordering(case, ratio) != ["supports", "fails"]
    runs = ["baseline", *[f"{grp} x10" for grp in GROUPS]]
    noise = 0.1 * torch.randn(5, 4, generator=generator, dtype=torch.float64)
    planted = torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=torch.float64) + noise
    planted[:, 0] = 1.0
    same = torch.tensor([1.0, 2.0, 2.0, 2.0], dtype=torch.float64) + noise
    same[:, 0] = 1.0
    errors += not specificity(planted, runs, 10.0, n_se)["specific"]
    errors += specificity(same, runs, 10.0, n_se)["specific"]
    return {"planted_tau_fast": fast, "planted_tau_slow": slow, "planted_errors": int(errors)}
