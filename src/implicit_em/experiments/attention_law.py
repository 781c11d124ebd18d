r"""Attention's gradient laws in a trained transformer, and whether they instantiate Theorem 1 (paper §4.2).

Claim (paper §4.2): the parameters of attention "accumulate responsibility-weighted updates across all queries and
all training examples". The referee (review-implicit-em.json, major comment 2) objects that "softmax attention is
a network layer, not a loss", so Theorem 1 (:math:`\partial L/\partial d_j = -r_j`) is not instantiated.

Method. A small causal transformer (:class:`implicit_em.windtunnel.models.CausalTransformer`, attention through the
library's explicit :func:`implicit_em.probes.attention`) is trained for a few dozen Adam steps with the real
cross-entropy loss of the bijection wind tunnel. The trained model is then cast to float64, and on a fresh batch
:class:`implicit_em.probes.AttentionProbe` captures per layer and head the weights :math:`\alpha`, the values
:math:`v`, the upstream gradient :math:`u = \partial\ell/\partial o` and autograd's :math:`\partial\ell/\partial s`
and :math:`\partial\ell/\partial v`. Three residuals, each relative to the size of autograd's gradient (max norm):

(a) value law :math:`\partial\ell/\partial v_j = \sum_i \alpha_{ij} u_i`, and the paper's persistent form
    :math:`\partial\ell/\partial W_V = \sum_{ij} \alpha_{ij} u_i x_j^\top` against autograd's gradient of W_V;
(b) routing law :math:`\partial\ell/\partial s_{ij} = \alpha_{ij}(b_{ij} - \sum_k \alpha_{ik} b_{ik})`,
    :math:`b_{ij} = u_i \cdot v_j`;
(c) Theorem-1 form: for each query row the best scalar :math:`c_i` in :math:`\partial\ell/\partial s_i \approx
    -c_i \alpha_i`; the residual is :math:`\|g + c\alpha\|_F / \|g\|_F` over all rows of a head (one minus it
    squared is the share of the score gradient's energy that the responsibilities explain).

Verdict. REFUTED if (a) or (b) exceeds ``law_tol`` (1e-10, float64). Otherwise SUPPORTED if (c) is at most
``theorem1_tol`` (1e-6: the score gradient *is* a multiple of the responsibilities, Theorem 1 as stated), else
PARTIAL: values and W_V receive exactly responsibility-weighted updates, but the scores' gradient is a
responsibility-gated advantage, not the responsibility. (c) of at least 0.1 (``theorem1_far``) is called far from it.
"""

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.experiments._base import Context, Experiment, Result, Verdict, criterion, pyplot, torch_threads
from implicit_em.probes import AttentionProbe, routing_law, value_law
from implicit_em.windtunnel.models import Block, CausalSelfAttention, CausalTransformer
from implicit_em.windtunnel.tasks import BijectionTask, bijection_entropy_without_replacement
from implicit_em.windtunnel.train import windtunnel_loss


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds of the run; ``quick()`` for tests and demos, ``full()`` for the audit."""

    seed: int = 0  # model seeds seed, seed + 1, ...
    n_symbols: int = 8  # V of the bijection task (sequence length 2(V - 1))
    n_layers: int = 2
    n_heads: int = 2
    d_model: int = 32
    steps: int = 400  # Adam steps of training before the float64 capture
    batch_size: int = 64
    lr: float = 3e-3
    probe_batch: int = 32  # sequences in the float64 capture
    seeds: int = 1  # independent models (seed, seed + 1, ...)
    # verdict thresholds (module docstring): the exact laws hold to float64 round-off; "Theorem 1 as stated" if the
    # best −c·α fit leaves at most 1e-6; a residual of at least 0.1 is called "far from" it in the summary
    law_tol: float = 1e-10
    theorem1_tol: float = 1e-6
    theorem1_far: float = 0.1

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n_symbols=12, n_layers=2, n_heads=4, d_model=64, steps=1500, batch_size=128, probe_batch=64, seeds=3)


def _relative(residual: Tensor, reference: Tensor) -> float:
    """max |residual| / max |reference| (0 when both vanish)."""
    scale = float(reference.abs().max())
    err = float(residual.abs().max())
    return err / scale if scale > 0 else err


def theorem1_fit(grad_scores: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    r"""Best per-row fit :math:`g_i \approx -c_i \alpha_i` and its residual, for (B, H, T, S) tensors.

    :math:`c_i = -(g_i \cdot \alpha_i)/(\alpha_i \cdot \alpha_i)` minimises :math:`\|g_i + c_i \alpha_i\|`.
    Returns (the fit :math:`-c\alpha`, the per-head relative residual :math:`\|g + c\alpha\|_F/\|g\|_F`, (H,)).
    """
    c = -(grad_scores * weights).sum(-1, keepdim=True) / (weights * weights).sum(-1, keepdim=True)  # (B, H, T, 1)
    fit = -c * weights
    resid = (grad_scores - fit).square().sum(dim=(0, 2, 3)).sqrt()
    norm = grad_scores.square().sum(dim=(0, 2, 3)).sqrt()
    return fit, resid / norm


def _train(cfg: Config, seed: int) -> tuple[CausalTransformer, BijectionTask, list[float]]:
    """Train a small causal transformer on the bijection task in float32; returns the model and its losses."""
    task = BijectionTask(cfg.n_symbols)
    torch.manual_seed(seed)
    model = CausalTransformer(task.vocab_size, task.n_classes, task.seq_len(), cfg.n_layers, cfg.n_heads, cfg.d_model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    for _ in range(cfg.steps):
        batch = task.sample(cfg.batch_size, gen)
        loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model, task, losses


def _attention_of(block: nn.Module) -> CausalSelfAttention:
    attn = block.attn if isinstance(block, Block) else None
    if not isinstance(attn, CausalSelfAttention):
        raise TypeError(f"expected a windtunnel Block with CausalSelfAttention, got {type(block).__name__}")
    return attn


def _capture(model: CausalTransformer, task: BijectionTask, cfg: Config, seed: int) -> dict[str, Any]:
    """Float64 forward and backward on a fresh batch under the probe; residuals of the three forms per head."""
    model = model.double()
    model.zero_grad(set_to_none=True)
    batch = task.sample(cfg.probe_batch, torch.Generator().manual_seed(10_000 + seed))
    attns = [_attention_of(block) for block in model.blocks]
    inputs: dict[int, Tensor] = {}  # layer -> x, the attention input (B, T, D)

    def keep_input(layer: int) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], None]:
        return lambda module, args, output: inputs.__setitem__(layer, args[0].detach())

    hooks = [attn.register_forward_hook(keep_input(i)) for i, attn in enumerate(attns)]
    try:
        with AttentionProbe(model) as probe:
            loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch)
            loss.backward()
    finally:
        for handle in hooks:
            handle.remove()
    cache = probe.cache
    out: dict[str, Any] = {"value": [], "w_v": [], "routing": [], "theorem1": [], "cos": [], "points": []}
    for layer, attn in enumerate(attns):
        site = f"blocks.{layer}.attn"
        a, v = cache[f"{site}.hook_pattern"], cache[f"{site}.hook_v"]  # (B, H, T, S), (B, H, S, Dv)
        u, g = cache[f"{site}.hook_z_grad"], cache[f"{site}.hook_attn_scores_grad"]  # (B, H, T, Dv), (B, H, T, S)
        gv = cache[f"{site}.hook_v_grad"]  # (B, H, S, Dv)
        law_v = value_law(a, u)
        law_s = routing_law(a, v, u)
        # The paper's persistent form: dl/dW_V = sum_ij alpha_ij u_i x_j^T, the value rows of the qkv weight.
        assert attn.qkv.weight.grad is not None
        d = attn.qkv.weight.shape[1]
        grad_wv = attn.qkv.weight.grad[2 * d :]  # (D, D): rows h * Dv + e
        law_wv = torch.einsum("bhje,bjd->hed", law_v, inputs[layer]).reshape(d, d)
        fit, rel = theorem1_fit(g, a)
        cos = (g * -a).sum(-1) / (g.norm(dim=-1) * a.norm(dim=-1)).clamp_min(1e-300)  # (B, H, T)
        rows = g.norm(dim=-1) > 1e-12 * float(g.abs().max())  # rows whose gradient is not zero (T > 0)
        for h in range(a.shape[1]):
            out["value"].append(_relative(gv[:, h] - law_v[:, h], gv[:, h]))
            out["routing"].append(_relative(g[:, h] - law_s[:, h], g[:, h]))
            out["theorem1"].append(float(rel[h]))
            out["cos"].append(float(cos[:, h][rows[:, h]].abs().median()))
        out["w_v"].append(_relative(grad_wv - law_wv, grad_wv))
        keep = a > 0  # causal mask: only the keys a query can see
        out["points"].append(
            {
                "g": g[keep],
                "law_s": law_s[keep],
                "fit": fit[keep],
                "a": a[keep],
                "gv": gv.flatten(),
                "law_v": law_v.flatten(),
            }
        )
    out["loss"] = float(loss.detach())
    return out


def _figure(ctx: Context, points: dict[str, Tensor], theorem1: list[float], losses: list[float], cfg: Config) -> str:
    plt = pyplot()
    p = {k: t.numpy() for k, t in points.items()}
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = axes.ravel()

    def diagonal(a: Any, x: Any, y: Any, color: str, xlabel: str, ylabel: str, title: str) -> None:
        lim = float(abs(y).max()) * 1.05
        a.scatter(x, y, s=3, alpha=0.5, color=color)
        a.plot([-lim, lim], [-lim, lim], "k--", lw=0.8)
        a.set(xlabel=xlabel, ylabel=ylabel, title=title)

    diagonal(ax[0], p["law_v"], p["gv"], "C0", "value law Σ_i α_ij u_i", "autograd ∂ℓ/∂v", "(a) value law: exact")
    diagonal(ax[1], p["law_s"], p["g"], "C0", "routing law α(b − E_α b)", "autograd ∂ℓ/∂s", "(b) routing law: exact")
    diagonal(ax[2], p["fit"], p["g"], "C3", "best per-query fit −c·α", "autograd ∂ℓ/∂s", "(c) Theorem-1 form −c·α")
    ax[3].scatter(p["a"], p["g"], s=3, alpha=0.5, color="C2")
    ax[3].axhline(0.0, color="k", lw=0.8)
    ax[3].set(xlabel="responsibility α_ij", ylabel="autograd ∂ℓ/∂s", title="score gradient vs responsibility")
    ax[4].bar(range(len(theorem1)), theorem1, color="C3")
    ax[4].axhline(cfg.theorem1_far, color="k", ls=":", lw=0.8)  # the 'far from' threshold
    ax[4].set(
        xlabel="layer × head (all seeds)",
        ylabel="‖g + cα‖ / ‖g‖",
        title=f"(c) residual per head (dotted: {cfg.theorem1_far})",
        ylim=(0, 1.05),
    )
    ax[4].set_xticks(range(len(theorem1)))
    ax[5].plot(losses, lw=0.8, label="train loss (seed 0)")
    ax[5].axhline(math.log(cfg.n_symbols), color="C7", ls="--", lw=0.8, label="no-context (log V)")
    bayes = float(bijection_entropy_without_replacement(cfg.n_symbols).mean()) * math.log(2)
    ax[5].axhline(bayes, color="k", ls=":", lw=0.8, label="Bayes posterior")
    ax[5].set(xlabel="Adam step", ylabel="cross-entropy (nats)", title="training (float32)")
    ax[5].legend(fontsize=8)
    fig.suptitle("Attention in a trained transformer, float64 capture (last layer, first seed)")
    fig.tight_layout()
    return ctx.save_figure(fig, "attention_law", dpi=100)


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(1):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    t0 = time.perf_counter()
    value, w_v, routing, theorem1, cos, first_loss, last_loss = [], [], [], [], [], [], []
    points: dict[str, Tensor] | None = None
    losses: list[float] = []
    for k in range(cfg.seeds):
        model, task, losses_k = _train(cfg, cfg.seed + k)
        cap = _capture(model, task, cfg, cfg.seed + k)
        value += cap["value"]
        w_v += cap["w_v"]
        routing += cap["routing"]
        theorem1 += cap["theorem1"]
        cos += cap["cos"]
        first_loss.append(sum(losses_k[:5]) / 5)
        last_loss.append(sum(losses_k[-5:]) / 5)
        if points is None:
            points, losses = cap["points"][-1], losses_k  # last layer of the first seed
    assert points is not None
    laws = max(max(value), max(w_v), max(routing))
    t1_min = min(theorem1)
    criteria = [
        criterion("max relative residual of the value, W_V and routing laws", laws, "<=", cfg.law_tol),
        criterion("theorem1_rel_residual_max", max(theorem1), "<=", cfg.theorem1_tol),
        criterion("theorem1_rel_residual_min (far from Theorem 1 form)", t1_min, ">=", cfg.theorem1_far),
    ]
    laws_hold, theorem1_form, far_from_it = (c.passed for c in criteria)
    verdict: Verdict
    if not laws_hold:
        verdict, summary = "REFUTED", f"an exact attention law failed in float64 (max relative residual {laws:.2e})"
    elif theorem1_form:
        verdict, summary = "SUPPORTED", "the score gradient is a multiple of the responsibilities (Theorem 1 form)"
    else:
        far = "far from" if far_from_it else "not within tolerance of"
        verdict = "PARTIAL"
        summary = (
            f"value and W_V gradients are exactly responsibility-weighted (max rel. residual {max(value + w_v):.1e}) "
            f"and the routing law holds ({max(routing):.1e}); but the score gradient is an advantage gated by α, "
            f"{far} −c·α: relative residual {t1_min:.2f}–{max(theorem1):.2f} per head, so Theorem 1 is not "
            "instantiated as stated (the referee's point)"
        )
    no_context = math.log(cfg.n_symbols)  # CE of the uniform predictor (nats)
    bayes = float(bijection_entropy_without_replacement(cfg.n_symbols).mean()) * math.log(2)  # CE of the posterior
    metrics: dict[str, Any] = {
        "value_law_rel_residual_max": max(value),
        "w_v_law_rel_residual_max": max(w_v),
        "routing_law_rel_residual_max": max(routing),
        "theorem1_rel_residual_min": t1_min,
        "theorem1_rel_residual_median": statistics.median(theorem1),
        "theorem1_rel_residual_max": max(theorem1),
        "theorem1_rel_residual_per_head": theorem1,
        "theorem1_explained_energy_max": 1.0 - t1_min**2,
        "cos_score_grad_vs_minus_alpha_median": statistics.median(cos),
        "train_loss_first5": first_loss,
        "train_loss_last5": last_loss,
        "no_context_loss": no_context,
        "bayes_loss": bayes,
        "heads_checked": len(theorem1),
        "seconds": time.perf_counter() - t0,
    }
    details = (
        f"Config: {asdict(cfg)}. Bijection task V={cfg.n_symbols}, trained {cfg.steps} Adam steps in float32, "
        f"then one float64 batch of {cfg.probe_batch} sequences captured with AttentionProbe (full mode). "
        "Residuals are max |autograd − law| / max |autograd| per head (W_V per layer). The Theorem-1 fit allows a "
        "free scalar per query row, the most generous reading; it must fail because Σ_j ∂ℓ/∂s_ij = 0 while "
        "Σ_j α_ij = 1. The median |cos(∂ℓ/∂s_i, −α_i)| over rows is also reported. "
        "The paper text we have does not contain the review's quoted phrase 'each backward pass updates those "
        "parameters in proportion to the responsibilities'; the claim quotes §4.2's nearest sentence."
    )
    return Result(verdict, summary, metrics, criteria, [_figure(ctx, points, theorem1, losses, cfg)], details)


EXPERIMENT = Experiment(
    name="attention_law",
    title="Attention: responsibility-weighted value updates, advantage-weighted score gradients",
    claim=(
        "The mixture is re-instantiated for every query, but the underlying parameters—$W_{Q}$, $W_{K}$, "
        "$W_{V}$—accumulate responsibility-weighted updates across all queries and all training examples."
    ),
    source="paper §4.2; review-implicit-em.json: referee major comment 2 ('softmax attention is a network layer, "
    "not a loss')",
    Config=Config,
    run=run,
)
