r"""The subspaces ``sticky_manifold`` compares, its shuffled-label control, its paired statistics, and its reported
one-head setting (``sticky_sculpting``'s head: the paper's SGD, an online Adam arm and a shuffled-label Adam arm).

The head reads row vectors: :math:`v_t = x_t W_V` with :math:`x_t \in \mathbb{R}^{D}` (D = 20), W_V (D, E) = (20, 15),
W_O (E, C) = (15, 8). Every subspace is returned as a (D, k) matrix with orthonormal columns in input space
:math:`\mathbb{R}^{D}`, the space where the symbol means live, so that ``manifold.principal_angles`` compares
like with like:

- :func:`symbol_mean_basis`: the span of the centred means :math:`\mu_s - \bar\mu`, rank C - 1 = 7;
- :func:`readout_subspace`: the input directions the value-to-logit map reads. For row vectors the map is
  :math:`x \mapsto x W_V W_O`; what of x reaches the logits is its projection on the column space of the (D, C)
  matrix :math:`W_V W_O` (in the column-vector convention of the papers, :math:`W_O^\top W_V^\top`, this is the
  map's row space). The softmax ignores a shift common to all C logits, so the direction :math:`W_V W_O \mathbf 1`
  is invisible to the loss (and under plain gradient descent :math:`W_O \mathbf 1` never changes: the
  cross-entropy's logit gradient sums to zero over the C logits): nothing in the loss shapes that direction. The
  subspace therefore is the column space of
  :math:`W_V W_O (I - \mathbf 1 \mathbf 1^\top / C)`, rank C - 1 = 7, the part of the map the loss can shape;
- :func:`value_subspace`: the principal subspace of the value vectors, pulled back. The k-th principal coordinate
  of the centred value vectors is :math:`v_t \cdot e_k = x_t \cdot (W_V e_k)`, a linear functional of the input; so
  the top-k principal subspace of the values corresponds exactly to the span of :math:`W_V e_1, \dots, W_V e_k` in
  input space (the input directions the leading value components read). The value vectors themselves span all of
  :math:`\mathbb{R}^{E}` (the noise is full rank), so their plain span says nothing; their principal subspace does.

The same two measures on the shared sticky testbed (:class:`~implicit_em.windtunnel.sticky.StickyTransformer`),
where the value map is no longer linear in x_t (input embedding, positions, LayerNorm) and the
logits read the context through two layers:

- :func:`transformer_value_subspace`: the first attention layer's values :math:`v_t = W_V\,\mathrm{LN}(W_{in} x_t +
  p_t)` (both heads, 32-d). Their input map is linearised by its Jacobian :math:`J_t = \partial v_t / \partial x_t`
  (E, D) averaged over the held-out positions, :math:`\bar J`; then :func:`value_subspace` with
  :math:`W_V := \bar J^\top` (D, E): the principal subspace of the x-driven part of the values, pulled back. For a
  linear value map (the one head) :math:`\bar J^\top = W_V` and this is :func:`value_subspace` itself;
- :func:`context_readout_subspace`: the input directions through which the *earlier* inputs move the
  prediction. For query positions t and every earlier j < t, the rows of the class-centred logit Jacobian
  :math:`\partial \tilde z_t / \partial x_j` (C rows in :math:`\mathbb{R}^{D}` each, :math:`\tilde z = z -
  \bar z`: the softmax ignores a common shift), stacked over windows, j and t; the subspace is their top C - 1
  right singular vectors. For the exact Bayes predictive every such row lies in the centred mean span (the
  likelihood reads x_j only through :math:`x_j \cdot \mu_s`, and a shift common to the C of them changes nothing),
  so the Bayes filter scores 1 (an identity). For the one head this is the generalisation of
  :func:`readout_subspace`: without the score path :math:`\partial \tilde z_t / \partial x_j = \alpha_{tj}
  (W_V W_O (I - \mathbf 1 \mathbf 1^\top / C))^\top`.

Everything geometric is float64.
"""

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.func import jacrev, vmap

from implicit_em.audit import seeds
from implicit_em.audit.core import Context
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import one_head
from implicit_em.audit.testbeds.manifold import mean_cos2, random_mean_cos2, value_manifold_signature
from implicit_em.audit.testbeds.one_head import (
    kl_runs,
    no_context_posterior,
    single_head_logits,
    stack_inits,
    train_runs,
)
from implicit_em.probes.attention import attention
from implicit_em.windtunnel.metrics import entropy_bits
from implicit_em.windtunnel.sticky import StickyBatch, StickyTestbed
from implicit_em.windtunnel.tasks import StickyMarkovTask, StickySequence

__all__ = [
    "MEASURES",
    "ONEHEAD_ARMS",
    "OneHead",
    "OneHeadData",
    "ShuffledLabels",
    "context_readout_subspace",
    "describe",
    "head_signatures",
    "mean_value_jacobian",
    "onehead_data",
    "onehead_details",
    "onehead_figure",
    "onehead_measure",
    "onehead_train",
    "paired",
    "planted_controls",
    "planted_testbed_model",
    "put_paired",
    "readout_subspace",
    "shared_design",
    "shuffle_labels",
    "shuffled_labels",
    "subspace_scores",
    "symbol_mean_basis",
    "train_online_adam",
    "transformer_scores",
    "transformer_value_subspace",
    "value_subspace",
]

F64 = torch.float64
MEASURES = ("readout", "value")  # the two subspaces compared with the mean span (module docstring)


def symbol_mean_basis(means: Float[Tensor, "c d"]) -> Float[Tensor, "d k"]:
    r"""Orthonormal basis (D, C - 1) of the span of the centred symbol means :math:`\mu_s - \bar\mu`.

    C centred vectors sum to zero, so their span has rank at most C - 1; the basis is the leading C - 1 left
    singular vectors of :math:`(\mu - \bar\mu)^\top` (D, C).
    """
    mu = means.detach().to(F64)
    centred = (mu - mu.mean(dim=0)).T  # (D, C)
    u, s, _ = torch.linalg.svd(centred, full_matrices=False)
    k = mu.shape[0] - 1
    if float(s[k - 1]) <= 1e-10 * float(s[0]):
        raise ValueError(f"the centred means span fewer than {k} dimensions")
    return u[:, :k]


def readout_subspace(w_v: Float[Tensor, "d e"], w_o: Float[Tensor, "e c"]) -> Float[Tensor, "d k"]:
    r"""Orthonormal basis (D, C - 1) of the column space of :math:`W_V W_O (I - \mathbf 1 \mathbf 1^\top / C)`.

    The input directions whose value-to-logit read-out the softmax sees (module docstring).
    """
    m = w_v.detach().to(F64) @ w_o.detach().to(F64)  # (D, C)
    c = m.shape[1]
    m = m - m.mean(dim=1, keepdim=True)  # m (I - 11ᵀ/C): drop the common logit shift
    u, s, _ = torch.linalg.svd(m, full_matrices=False)
    if float(s[c - 2]) <= 1e-10 * max(float(s[0]), 1e-300):
        raise ValueError(f"the centred read-out has rank below {c - 1}")
    return u[:, : c - 1]


def value_subspace(w_v: Float[Tensor, "d e"], x: Float[Tensor, "n d"], k: int) -> Float[Tensor, "d k"]:
    r"""Orthonormal basis (D, k) of :math:`\mathrm{span}(W_V e_1, \dots, W_V e_k)`, with :math:`e_1, \dots, e_k`
    the top-k principal axes (in :math:`\mathbb{R}^{E}`) of the centred value vectors :math:`v_t = x_t W_V`."""
    w = w_v.detach().to(F64)
    v = x.detach().to(F64) @ w  # (N, E)
    _, s, vh = torch.linalg.svd(v - v.mean(dim=0), full_matrices=False)
    if k > s.numel() or float(s[k - 1]) <= 1e-10 * max(float(s[0]), 1e-300):
        raise ValueError(f"the value vectors have fewer than {k} principal directions")
    q, _ = torch.linalg.qr(w @ vh[:k].T)  # (D, k): the functionals x -> x . (W_V e_j)
    return q


def train_online_adam(
    params: dict[str, Tensor],
    pool_x: Float[Tensor, "p t d"],
    pool_y: Int[Tensor, "p t"],
    order: Int[Tensor, "steps r"],
    lr: float,
    x_eval: Float[Tensor, "h t d"],
    y_eval: Int[Tensor, "h t"],
    eval_every: int,
) -> Tensor:
    """Adam on R independent runs at once, run r reading pool sequence ``order[step, r]`` at each step.

    Adam's update is elementwise, so each run gets exactly the trajectory it would get alone (the objective is the
    sum over runs of each run's mean cross-entropy). Returns the held-out cross-entropy (nats) of every run at step
    0 and every ``eval_every`` steps and after the last step, (L, R).
    """
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    curve = [_eval_loss(params, x_eval, y_eval)]
    steps = order.shape[0]
    for step in range(steps):
        logits = single_head_logits(params, pool_x[order[step]])  # (R, T, C)
        per_run = F.cross_entropy(logits.transpose(1, 2), pool_y[order[step]], reduction="none").mean(dim=1)
        opt.zero_grad(set_to_none=True)
        per_run.sum().backward()
        opt.step()
        if (step + 1) % eval_every == 0 or step == steps - 1:
            curve.append(_eval_loss(params, x_eval, y_eval))
    return torch.stack(curve)


@torch.no_grad()
def _eval_loss(params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
    """Mean cross-entropy (nats) of every run over the held-out sequences ``x`` (H, T, D), ``y`` (H, T): (R,)."""
    batched = {k: v[:, None] for k, v in params.items()}  # (R, 1, ...): broadcast over the H sequences
    logits = single_head_logits(batched, x[None])  # (R, H, T, C)
    r, h, t, c = logits.shape
    target = y[None].expand(r, h, t).reshape(-1)
    return F.cross_entropy(logits.reshape(-1, c), target, reduction="none").reshape(r, -1).mean(dim=1)


def subspace_scores(
    params: dict[str, Tensor], basis: Float[Tensor, "d k"], x: Float[Tensor, "n d"]
) -> dict[str, Tensor]:
    """Mean cos² of the principal angles to ``basis`` for every run of batched weights (R, ...), each (R,) float64:
    ``readout`` (:func:`readout_subspace`), ``readout_raw`` (the 8 columns of W_V W_O as they are) and ``value``
    (:func:`value_subspace` on the inputs ``x``, k = basis rank)."""
    k = basis.shape[1]
    out: dict[str, list[float]] = {"readout": [], "readout_raw": [], "value": []}
    for w_v, w_o in zip(params["W_V"].detach(), params["W_O"].detach(), strict=True):
        out["readout"].append(mean_cos2(readout_subspace(w_v, w_o), basis))
        out["readout_raw"].append(mean_cos2(w_v.double() @ w_o.double(), basis))
        out["value"].append(mean_cos2(value_subspace(w_v, x, k), basis))
    return {name: torch.tensor(v, dtype=F64) for name, v in out.items()}


@torch.no_grad()
def head_signatures(
    params: dict[str, Tensor], x: Float[Tensor, "h t d"], entropy: Float[Tensor, " n"]
) -> dict[str, Tensor]:
    """``manifold.value_manifold_signature`` of every run's attention output o_t = sum_j alpha_tj v_j (the 15-d
    read-out W_O reads) at all H T positions of ``x``, against the Bayes ``entropy`` (H T,): each key (R,)."""
    rows: list[dict[str, float]] = []
    for r in range(params["W_V"].shape[0]):
        w = {name: p[r].detach() for name, p in params.items()}
        o = attention(x @ w["W_Q"], x @ w["W_K"], x @ w["W_V"], is_causal=True)  # (H, T, E)
        rows.append(value_manifold_signature(o.reshape(-1, o.shape[-1]), entropy))
    return {key: torch.tensor([row[key] for row in rows], dtype=F64) for key in rows[0]}


def planted_controls(
    basis: Float[Tensor, "d k"], x: Float[Tensor, "n d"], seed: int, n_random: int, e: int = 15
) -> dict[str, float]:
    """The measures' controls: heads planted with W_V = B R inside the mean span (score 1) and W_V = B_perp R'
    orthogonal to it (score 0), on both measures; and ``n_random`` Gaussian heads on the read-out measure, whose
    subspace is uniformly random (rotation invariance), so their mean must be :func:`random_mean_cos2` = k / D.
    ``random_heads_z`` is that mean's distance from k / D in standard errors."""
    g = torch.Generator().manual_seed(seed)
    d, k = basis.shape
    full, _ = torch.linalg.qr(torch.cat([basis, torch.randn(d, d - k, generator=g, dtype=F64)], dim=1))
    perp = full[:, k:]  # (D, D - k): the orthogonal complement of the mean span
    c = k + 1
    m: dict[str, float] = {}
    for name, b in (("in", basis), ("out", perp)):
        w_v = b @ torch.randn(b.shape[1], e, generator=g, dtype=F64)  # (D, E), columns in span(b)
        w_o = torch.randn(e, c, generator=g, dtype=F64)
        m[f"planted_{name}_readout"] = mean_cos2(readout_subspace(w_v, w_o), basis)
        m[f"planted_{name}_value"] = mean_cos2(value_subspace(w_v, x, k), basis)
    heads = torch.tensor(
        [
            mean_cos2(readout_subspace(torch.randn(d, e, generator=g), torch.randn(e, c, generator=g)), basis)
            for _ in range(n_random)
        ],
        dtype=F64,
    )
    sd = float(heads.std())
    se = sd / math.sqrt(n_random)
    m.update(random_heads_mean=float(heads.mean()), random_heads_sd=sd, random_heads_se=se)
    m["random_heads_z"] = abs(float(heads.mean()) - random_mean_cos2(d, k, k)) / se
    return m


def shuffle_labels(y: Int[Tensor, "p t"], seed: int) -> Int[Tensor, "p t"]:
    """Each sequence's targets permuted over its positions: the same label frequencies, no link to the inputs."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([row[torch.randperm(row.numel(), generator=g)] for row in y])


# ------------------------------------------------------------------------------------- the shared sticky testbed


def mean_value_jacobian(model: nn.Module, x: Float[Tensor, "b t d"]) -> Float[Tensor, "e d"]:
    r"""The first attention layer's value Jacobian :math:`\partial v_t / \partial x_t` (E, D), averaged over every
    position of ``x``, float64; :math:`v_t = W_V\,\mathrm{LN}_1(W_{in} x_t + p_t)` (both heads, before the split)."""
    block = model.blocks[0]  # type: ignore[index]
    b, t, d = x.shape
    pos = model.pos(torch.arange(t)).detach()  # type: ignore[operator]  # (T, d_model)

    def value(x_tok: Tensor, p_tok: Tensor) -> Tensor:
        return block.attn.W_V(block.ln1(model.inp(x_tok) + p_tok))  # type: ignore[operator, union-attr]

    with torch.no_grad():
        xs = x.detach().reshape(-1, d)  # (B T, D)
        ps = pos[None].expand(b, t, -1).reshape(-1, pos.shape[-1])  # (B T, d_model)
        jac = vmap(jacrev(value, argnums=0))(xs, ps)  # (B T, E, D)
    return jac.to(F64).mean(dim=0)


def transformer_value_subspace(model: nn.Module, x: Float[Tensor, "b t d"], k: int) -> Float[Tensor, "d k"]:
    """The principal subspace (D, k) of the first layer's values, pulled back through their mean Jacobian (module
    docstring): :func:`value_subspace` with W_V the transposed mean Jacobian."""
    return value_subspace(mean_value_jacobian(model, x).T, x.reshape(-1, x.shape[-1]), k)


def context_readout_subspace(
    logits_fn: Callable[[Tensor], Tensor], x: Float[Tensor, "b t d"], queries: Sequence[int], k: int
) -> Float[Tensor, "d k"]:
    r"""Top-k right singular subspace (D, k) of the rows of :math:`\partial \tilde z_t / \partial x_j`, j < t, for the
    query positions t in ``queries``, stacked over the windows of ``x`` (module docstring).

    ``logits_fn`` maps x (B, T, D) to logits or log-probabilities (B, T, C), position by position causally; the
    windows are independent, so the gradient of a sum over windows gives each window's own Jacobian row.
    """
    xg = x.detach().clone().requires_grad_(True)
    z = logits_fn(xg)
    rows = []
    for t in queries:
        if not 0 < t < x.shape[1]:
            raise ValueError(f"query position {t} has no earlier input in a window of {x.shape[1]}")
        zc = z[:, t] - z[:, t].mean(dim=-1, keepdim=True)  # (B, C): the common logit shift removed
        for c in range(zc.shape[-1]):
            (g,) = torch.autograd.grad(zc[:, c].sum(), xg, retain_graph=True)  # (B, T, D)
            rows.append(g[:, :t].detach().to(F64).reshape(-1, x.shape[-1]))
    stacked = torch.cat(rows)  # (rows, D)
    _, s, vh = torch.linalg.svd(stacked, full_matrices=False)
    if float(s[k - 1]) <= 1e-10 * max(float(s[0]), 1e-300):
        raise ValueError(f"the context read-out has rank below {k}")
    return vh[:k].T


def planted_testbed_model(model: nn.Module, basis: Float[Tensor, "d k"], inside: bool) -> nn.Module:
    """A copy of ``model`` whose input embedding reads only the span of ``basis`` (``inside``) or only its
    orthogonal complement: W_in <- W_in P. Every path from x to the values and the logits passes through W_in, so
    both measures must score 1 (inside) or 0 (outside) up to float32 round-off."""
    planted = copy.deepcopy(model)
    proj = basis @ basis.T  # (D, D)
    if not inside:
        proj = torch.eye(basis.shape[0], dtype=F64) - proj
    with torch.no_grad():
        w: Tensor = planted.inp.weight  # type: ignore[union-attr, assignment]
        w.copy_((w.double() @ proj).to(w.dtype))
    return planted


def transformer_scores(
    model: nn.Module, basis: Float[Tensor, "d k"], x: Float[Tensor, "b t d"], queries: Sequence[int]
) -> dict[str, float]:
    """Mean cos² of the principal angles to ``basis`` of the model's ``readout`` (:func:`context_readout_subspace`)
    and ``value`` (:func:`transformer_value_subspace`) subspaces, in eval mode."""
    k = basis.shape[1]
    was = model.training
    model.eval()
    try:
        readout = context_readout_subspace(model, x, queries, k)
        value = transformer_value_subspace(model, x, k)
    finally:
        model.train(was)
    return {"readout": mean_cos2(readout, basis), "value": mean_cos2(value, basis)}


@dataclass(frozen=True)
class ShuffledLabels(StickyTestbed):
    """The same testbed and input stream, every window trained on the labels of another window of its batch (the
    one before it, an independent draw of the chain): the labels keep the chain's law, their link to x is gone.
    ``fit`` trains on it unchanged. (Permuting the labels within a window, the first draft, leaks: a window of a
    sticky chain visits few symbols, so its own label set is still predictable from its inputs; the claim's page.)
    """

    shuffle_seed: int = 0  # kept for the record; the roll is deterministic

    def batches(self, seed: int) -> Any:
        for x, y in super().batches(seed):
            yield x, y.roll(1, dims=0)


def shuffled_labels(tb: StickyTestbed, shuffle_seed: int) -> ShuffledLabels:
    fields = {f.name: getattr(tb, f.name) for f in dataclasses.fields(tb) if f.init}
    return ShuffledLabels(**fields, shuffle_seed=shuffle_seed)


def shared_design(
    tb: StickyTestbed, seed: int, n_inits: int, n_shuffled: int
) -> tuple[StickyBatch, list[int], list[ShuffledLabels]]:
    """``sticky_manifold``'s deciding design at ``seed``, for every claim that reads the same fits
    (``sticky_fits.trained`` caches them by testbed, init seed and held-out batch): the held-out windows, the
    ``n_inits`` init seeds (each the model's init and its stream), and the other-window-label controls, control i
    trained from init i."""
    held = tb.eval_batch(seeds.derive(seed, "sticky-held"))
    inits = [seeds.derive(seed, "sticky", i) for i in range(n_inits)]
    controls = [shuffled_labels(tb, seeds.derive(seed, "sticky-shuffle", i)) for i in range(n_shuffled)]
    return held, inits, controls


# ----------------------------------------------------------------------------------- paired statistics, declared


def _sd(x: Tensor) -> float:
    return float(x.std(unbiased=True)) if x.numel() > 1 else 0.0  # torch's std: not bitwise stats.sd (numpy)


def paired(init: Tensor, trained: Tensor) -> dict[str, float]:
    """Paired statistics of per-run values (R,): d = trained - init, its mean, sd, se and mean / sd."""
    d = (trained - init).double()
    sd = _sd(d)
    return {
        "init_mean": float(init.double().mean()),
        "init_sd": _sd(init.double()),
        "trained_mean": float(trained.double().mean()),
        "trained_sd": _sd(trained.double()),
        "d_mean": float(d.mean()),
        "d_sd": sd,
        "d_se": sd / math.sqrt(d.numel()),
        "d_in_sd": float(d.mean()) / sd if sd > 0 else math.copysign(math.inf, float(d.mean())),
    }


def put_paired(
    m: Metrics, prefix: str, stats: dict[str, float], unit: str, what: str, base: str = "init", arm: str = "trained"
) -> None:
    """``m.put`` each :func:`paired` statistic as ``{prefix}_{key}``: ``what`` of the ``base`` and of the ``arm``
    (mean, SD), and the paired difference arm - base (mean, SD, SE in ``unit``, mean / SD in SDs)."""
    words = {
        "init_mean": (unit, f"{base}, mean"),
        "init_sd": (unit, f"{base}, SD"),
        "trained_mean": (unit, f"{arm}, mean"),
        "trained_sd": (unit, f"{arm}, SD"),
        "d_mean": (unit, f"paired change {arm} − {base}, mean"),
        "d_sd": (unit, f"paired change {arm} − {base}, SD"),
        "d_se": (unit, f"paired change {arm} − {base}, SE"),
        "d_in_sd": ("SDs", f"paired change {arm} − {base}, mean / SD"),
    }
    for key, value in stats.items():
        m.put(f"{prefix}_{key}", value, words[key][0], f"{what}: {words[key][1]}")


# ------------------------------------------------------------- reported: the companion's one-head setting

ONEHEAD_ARMS = ("init", "sgd", "adam", "shuffled")  # at its random init; the paper's SGD; online Adam; Adam, shuffled
ONEHEAD_WORDS = {"init": "random init", "sgd": "paper's SGD", "adam": "Adam", "shuffled": "Adam, shuffled labels"}
_MEASURE_WORDS = {
    "readout": "read-out col(W_V W_O), logit shift removed: mean cos² to span(μ)",
    "value": "value PCs span(W_V e_1..e_7): mean cos² to span(μ)",
    "readout_raw": "raw 8-column read-out W_V W_O: mean cos² to span(μ)",
}
_SIGNATURE_WORDS = {
    "pc1": ("fraction", "PC1 share of the head output"),
    "pc12": ("fraction", "PC1+PC2 share of the head output"),
    "participation_ratio": ("components", "participation ratio of the head output"),
    "spearman_abs": ("correlation", "|Spearman ρ| of the output's PC1 with the Bayes entropy"),
}


_CONTROL_WORDS = {
    "planted_in_readout": ("mean cos²", "one head, control: a head planted in the mean span, read-out (1)"),
    "planted_in_value": ("mean cos²", "one head, control: a head planted in the mean span, value PCs (1)"),
    "planted_out_readout": ("mean cos²", "one head, control: a head planted orthogonal to it, read-out (0)"),
    "planted_out_value": ("mean cos²", "one head, control: a head planted orthogonal to it, value PCs (0)"),
    "random_heads_mean": ("mean cos²", "one head, control: Gaussian heads' read-out, mean (7/20 expected)"),
    "random_heads_sd": ("mean cos²", "one head, control: Gaussian heads' read-out, SD"),
    "random_heads_se": ("mean cos²", "one head, control: Gaussian heads' read-out, SE of the mean"),
    "random_heads_z": ("s.e. units", "one head, control: Gaussian heads' |mean − 7/20| in standard errors"),
}


@dataclass(frozen=True)
class OneHead:
    """The companion's one-head setting (``sticky_sculpting``'s chain, head and paper optimiser), reported only."""

    stay: float = one_head.STAY
    noise: float = one_head.NOISE  # the model reads x / noise
    init_std: float = one_head.INIT_STD
    sgd_lr: float = one_head.SGD_LR  # the paper's full-batch SGD
    sgd_steps: int = one_head.SGD_STEPS
    length: int = 100  # T of every sequence
    n_inits: int = 10  # paired runs
    pool: int = 32  # training sequences; the SGD arm's run r trains on sequence r
    n_heldout: int = 2
    adam_lr: float = 3e-3  # the online Adam arm (chosen on held-out loss only, before the testbed decided)
    adam_steps: int = 600
    eval_every: int = 50
    n_random_heads: int = 200  # Gaussian heads for the read-out measure's chance level
    companion_pc1: float = 0.8  # Agarwal, Dalal & Misra, arXiv 2512.22471: PC1 > 80% of the variance
    companion_pc12: float = 0.3  # arXiv 2512.23752: PC1+PC2 > 30%


@dataclass
class OneHeadData:
    """The seed's chain and sequences, as the head reads them (x / noise)."""

    task: StickyMarkovTask
    pool_x: Tensor  # (P, T, D)
    pool_y: Tensor  # (P, T)
    held: list[StickySequence]
    x_held: Tensor  # (H, T, D)
    y_held: Tensor  # (H, T)
    post_held: Tensor  # (H, T, C)


def onehead_data(s: OneHead, seed: int) -> OneHeadData:
    """The chain of ``seed`` (its means), a pool of training sequences and the held-out ones."""
    task = StickyMarkovTask(length=s.length, stay=s.stay, noise=s.noise, means_seed=seed)
    pool = [task.sample(seeds.torch_generator(seed, "onehead-pool", p)) for p in range(s.pool)]
    held = [task.sample(seeds.torch_generator(seed, "onehead-held", h)) for h in range(s.n_heldout)]
    return OneHeadData(
        task=task, pool_x=torch.stack([q.inputs.float() for q in pool]) / s.noise,
        pool_y=torch.stack([q.targets for q in pool]), held=held,
        x_held=torch.stack([q.inputs.float() for q in held]) / s.noise, y_held=torch.stack([q.targets for q in held]),
        post_held=torch.stack([q.posterior for q in held]),
    )  # fmt: skip


def onehead_train(s: OneHead, data: OneHeadData, seed: int) -> tuple[dict[str, dict[str, Tensor]], dict[str, Tensor]]:
    """Every arm from the same inits: the weights (R, ...) per arm and the curves (the SGD arm's training loss, the
    Adam arms' held-out loss; (L, R) nats)."""
    inits = [seeds.derive(seed, "onehead-init", i) for i in range(s.n_inits)]
    states = {arm: stack_inits(inits, 1, s.init_std) for arm in ONEHEAD_ARMS}  # the same inits in every arm
    runs = torch.arange(s.n_inits) % s.pool
    curves = {"sgd": train_runs(states["sgd"], data.pool_x[runs], data.pool_y[runs], s.sgd_lr, s.sgd_steps,
                                s.eval_every)}  # fmt: skip
    order = torch.randint(0, s.pool, (s.adam_steps, s.n_inits), generator=seeds.torch_generator(seed, "onehead-order"))
    held = (data.x_held, data.y_held)
    curves["adam"] = train_online_adam(states["adam"], data.pool_x, data.pool_y, order, s.adam_lr, *held, s.eval_every)
    shuffled_y = shuffle_labels(data.pool_y, seeds.derive(seed, "onehead-shuffle"))
    curves["shuffled"] = train_online_adam(states["shuffled"], data.pool_x, shuffled_y, order, s.adam_lr, *held,
                                           s.eval_every)  # fmt: skip
    return states, curves


def _onehead_angles(
    m: Metrics, s: OneHead, data: OneHeadData, states: dict[str, dict[str, Tensor]], seed: int, margin_fraction: float
) -> tuple[dict[str, dict[str, Tensor]], dict[str, dict[str, Tensor]]]:
    """The subspace scores, the value-manifold signatures and the KL of every arm; returns the per-run scores and
    signatures."""
    p = "onehead"
    basis = symbol_mean_basis(data.task.means)  # (D, 7)
    x_values = data.x_held.reshape(-1, data.x_held.shape[-1])  # (H T, D): the value vectors' inputs
    entropy = entropy_bits(data.post_held).reshape(-1)  # (H T,) bits
    chance = random_mean_cos2(basis.shape[0], basis.shape[1], basis.shape[1])
    m.put(f"{p}_chance", chance, "mean cos²", "one head: a uniformly random 7-d subspace (chance, 7/20)")
    m.put(f"{p}_chance_raw", random_mean_cos2(basis.shape[0], 8, basis.shape[1]), "mean cos²",
          "one head: a uniformly random 8-d subspace (chance of the raw read-out)")  # fmt: skip
    m.put(f"{p}_aligned_threshold", chance + margin_fraction * (1.0 - chance), "mean cos²",
          "one head: the aligned bar, half way from chance to the mean span")  # fmt: skip
    m.put(f"{p}_n_runs", float(s.n_inits), "count", "one head: paired initialisations")
    measured = {arm: subspace_scores(states[arm], basis, x_values) for arm in ONEHEAD_ARMS}
    sigs = {arm: head_signatures(states[arm], data.x_held, entropy) for arm in ONEHEAD_ARMS}
    kl = {arm: kl_runs(states[arm], data.x_held, data.post_held) for arm in ONEHEAD_ARMS}
    for arm in ONEHEAD_ARMS[1:]:
        for x in (*MEASURES, "readout_raw"):
            put_paired(m, f"{p}_{arm}_{x}", paired(measured["init"][x], measured[arm][x]), "mean cos²",
                       f"one head, {ONEHEAD_WORDS[arm]}: {_MEASURE_WORDS[x]}", "at init", "trained")  # fmt: skip
        for key in sigs["init"]:
            put_paired(m, f"{p}_{arm}_signature_{key}", paired(sigs["init"][key], sigs[arm][key]),
                       _SIGNATURE_WORDS[key][0], f"one head, {ONEHEAD_WORDS[arm]}: {_SIGNATURE_WORDS[key][1]}",
                       "at init", "trained")  # fmt: skip
        m.put(f"{p}_{arm}_kl_mean", float(kl[arm].mean()), "bits",
              f"one head, {ONEHEAD_WORDS[arm]}: KL(Bayes ‖ model), mean over inits (held out)")  # fmt: skip
    m.put(f"{p}_init_kl_mean", float(kl["init"].mean()), "bits", "one head at its random init: KL(Bayes ‖ model)")
    for x in MEASURES:  # Adam beyond its shuffled-label control, paired by init
        put_paired(
            m,
            f"{p}_adam_vs_shuffled_{x}",
            paired(measured["shuffled"][x], measured["adam"][x]),
            "mean cos²",
            f"one head, Adam beyond its shuffled-label control: {_MEASURE_WORDS[x]}",
            "shuffled",
            "Adam",
        )
    for key, value in planted_controls(
        basis, x_values, seeds.derive(seed, "onehead-controls"), s.n_random_heads
    ).items():
        m.put(f"{p}_{key}", value, *_CONTROL_WORDS[key])
    return measured, sigs


def _onehead_references(m: Metrics, s: OneHead, data: OneHeadData, states: dict[str, dict[str, Tensor]],
                        curves: dict[str, Tensor], sigs: dict[str, dict[str, Tensor]]) -> None:  # fmt: skip
    """The Bayes signature, the companion's bars, the held-out and training losses and the references (nats)."""
    p, post, y = "onehead", data.post_held, data.y_held
    entropy = entropy_bits(post).reshape(-1)
    bayes_logits = post.log().reshape(-1, post.shape[-1])
    for key, value in value_manifold_signature(bayes_logits - bayes_logits.mean(1, keepdim=True), entropy).items():
        m.put(
            f"{p}_bayes_signature_{key}",
            value,
            _SIGNATURE_WORDS[key][0],
            f"one head: the exact Bayes log-predictive's {_SIGNATURE_WORDS[key][1].replace('head output', 'values')}",
        )
    for arm in ONEHEAD_ARMS:
        for key, bar in (("pc1", s.companion_pc1), ("pc12", s.companion_pc12)):
            m.put(f"{p}_{arm}_signature_{key}_share_above_companion", float((sigs[arm][key] > bar).double().mean()),
                  "fraction", f"one head, {ONEHEAD_WORDS[arm]}: share of inits with {key.upper()} share > {bar:g} "
                  "(the companion's)")  # fmt: skip
    adam_mean = curves["adam"].mean(dim=1)
    mid = curves["adam"].shape[0] // 2
    held_loss = "one head, Adam: held-out cross-entropy"
    m.put(f"{p}_adam_heldout_init", float(adam_mean[0]), "nats", f"{held_loss} at init")
    m.put(f"{p}_adam_heldout_final", float(adam_mean[-1]), "nats", f"{held_loss} at the end")
    m.put(f"{p}_adam_heldout_mid", float(adam_mean[mid]), "nats", f"{held_loss} half way")
    gain = m.put(f"{p}_adam_heldout_gain", m[f"{p}_adam_heldout_init"] - m[f"{p}_adam_heldout_final"], "nats",
                 f"{held_loss}: gain, init − end")  # fmt: skip
    late = (m[f"{p}_adam_heldout_mid"] - m[f"{p}_adam_heldout_final"]) / gain if gain > 0 else math.inf
    m.put(f"{p}_adam_late_share", late, "fraction", "one head, Adam: share of the held-out gain in its second half")
    m.put(f"{p}_shuffled_heldout_final", float(curves["shuffled"][-1].mean()), "nats",
          "one head, Adam on shuffled labels: held-out cross-entropy at the end")  # fmt: skip
    m.put(f"{p}_sgd_heldout_final", float(_eval_loss(states["sgd"], data.x_held, y).mean()), "nats",
          "one head, paper's SGD: held-out cross-entropy at the end")  # fmt: skip
    m.put(f"{p}_sgd_train_loss_initial", float(curves["sgd"][0].mean()), "nats",
          "one head, paper's SGD: training cross-entropy at step 0")  # fmt: skip
    m.put(f"{p}_sgd_train_loss_final", float(curves["sgd"][-1].mean()), "nats",
          "one head, paper's SGD: training cross-entropy at the end")  # fmt: skip
    m.put(f"{p}_bayes_heldout_loss", float(-post.gather(-1, y[..., None]).log().mean()), "nats",
          "one head's chain: the Bayes predictive's held-out cross-entropy")  # fmt: skip
    p_nc = torch.stack([no_context_posterior(data.task, q) for q in data.held])
    m.put(f"{p}_no_context_heldout_loss", float(-p_nc.gather(-1, y[..., None]).log().mean()), "nats",
          "one head's chain: the no-context predictor's held-out cross-entropy")  # fmt: skip


def onehead_measure(m: Metrics, s: OneHead, seed: int, margin_fraction: float) -> dict[str, Any]:
    """The one-head setting at ``seed``: its metrics put into ``m`` as ``onehead_*``; returns what its figure draws
    (per-run scores, signatures, curves)."""
    start = time.perf_counter()
    data = onehead_data(s, seed)
    states, curves = onehead_train(s, data, seed)
    train_s = time.perf_counter() - start
    measured, sigs = _onehead_angles(m, s, data, states, seed, margin_fraction)
    _onehead_references(m, s, data, states, curves, sigs)
    for arm in ONEHEAD_ARMS:
        for x in (*MEASURES, "readout_raw"):
            m.put(f"onehead_{arm}_{x}_per_run", measured[arm][x].tolist(), "mean cos²",
                  f"one head, {ONEHEAD_WORDS[arm]}: {_MEASURE_WORDS[x]}, per init")  # fmt: skip
        for key in sigs[arm]:
            m.put(f"onehead_{arm}_signature_{key}_per_run", sigs[arm][key].tolist(), _SIGNATURE_WORDS[key][0],
                  f"one head, {ONEHEAD_WORDS[arm]}: {_SIGNATURE_WORDS[key][1]}, per init")  # fmt: skip
    m.put("onehead_adam_heldout_curve_mean", curves["adam"].mean(dim=1).tolist(), "nats",
          f"one head, Adam: held-out cross-entropy every {s.eval_every} steps, mean over inits")  # fmt: skip
    m.put("onehead_shuffled_heldout_curve_mean", curves["shuffled"].mean(dim=1).tolist(), "nats",
          f"one head, Adam on shuffled labels: held-out cross-entropy every {s.eval_every} steps, mean")  # fmt: skip
    m.put("onehead_train_s", train_s, "s", "one head: training time of its three arms")
    m.put("onehead_wall_s", time.perf_counter() - start, "s", "one head: wall time")
    return {"measured": measured, "sigs": sigs, "curves": curves}


def describe(m: Metrics, prefix: str) -> str:
    """Both measures of one arm in words: init -> trained (paired gain ± sd, mean / sd)."""
    return "; ".join(
        f"{label} {m[f'{prefix}_{x}_init_mean']:.3f} -> {m[f'{prefix}_{x}_trained_mean']:.3f} "
        f"(paired gain {m[f'{prefix}_{x}_d_mean']:+.3f} ± {m[f'{prefix}_{x}_d_sd']:.3f}, "
        f"{m[f'{prefix}_{x}_d_in_sd']:.1f}σ)"
        for x, label in (("readout", "read-out"), ("value", "value PCs"))
    )


def _signature_line(m: Metrics, arm: str) -> str:
    p = f"onehead_{arm}_signature"
    return (
        f"PC1 {m[f'{p}_pc1_init_mean']:.3f} -> {m[f'{p}_pc1_trained_mean']:.3f} "
        f"({m[f'{p}_pc1_d_in_sd']:+.1f}σ paired), PC1+PC2 {m[f'{p}_pc12_trained_mean']:.3f}, "
        f"participation ratio {m[f'{p}_participation_ratio_trained_mean']:.2f}, |ρ| "
        f"{m[f'{p}_spearman_abs_init_mean']:.3f} -> {m[f'{p}_spearman_abs_trained_mean']:.3f} "
        f"({m[f'{p}_spearman_abs_d_in_sd']:+.1f}σ paired)"
    )


def onehead_details(m: Metrics, s: OneHead) -> str:
    """The one-head setting's numbers in words (reported, not deciding)."""
    o = {k.removeprefix("onehead_"): v for k, v in m.items() if k.startswith("onehead_")}
    return (
        f"One-head setting (sticky_sculpting's; reported, not deciding): stay {s.stay:g}, noise {s.noise:g}, "
        f"the model reads x / {s.noise:g}; T = {s.length}, {s.n_inits} initialisations (N(0, {s.init_std:g}²)), "
        f"{s.pool} training sequences, {s.n_heldout} held out. Basis: the span of the centred symbol means (rank 7 "
        f"in R^20); chance (a uniformly random 7-d subspace) {o['chance']:.2f}. Controls: planted heads in the span "
        f"{o['planted_in_readout']:.12f} / {o['planted_in_value']:.12f} (read-out / value PCs), orthogonal "
        f"{o['planted_out_readout']:.1e} / {o['planted_out_value']:.1e}; {s.n_random_heads} Gaussian heads "
        f"{o['random_heads_mean']:.4f} ± {o['random_heads_sd']:.4f} (sd; {o['random_heads_z']:.1f} se from 7/20). "
        f"Held-out cross-entropy (nats): Adam {o['adam_heldout_init']:.3f} -> {o['adam_heldout_mid']:.3f} (half "
        f"way) -> {o['adam_heldout_final']:.3f}; shuffled labels -> {o['shuffled_heldout_final']:.3f}; the paper's "
        f"SGD -> {o['sgd_heldout_final']:.3f} (training loss {o['sgd_train_loss_initial']:.3f} -> "
        f"{o['sgd_train_loss_final']:.3f}); no-context predictor {o['no_context_heldout_loss']:.3f}, Bayes "
        f"{o['bayes_heldout_loss']:.3f}. KL(Bayes || model) in bits: init {o['init_kl_mean']:.3f}, SGD "
        f"{o['sgd_kl_mean']:.3f}, Adam {o['adam_kl_mean']:.3f}, shuffled {o['shuffled_kl_mean']:.3f}. "
        f"Principal angles, mean cos² (init -> trained, paired gain ± sd): Adam {describe(m, 'onehead_adam')}. "
        f"SGD {describe(m, 'onehead_sgd')}. Shuffled labels {describe(m, 'onehead_shuffled')}. The raw 8-column "
        f"read-out (chance {o['chance_raw']:.2f}): init {o['adam_readout_raw_init_mean']:.3f}, Adam "
        f"{o['adam_readout_raw_trained_mean']:.3f}, SGD {o['sgd_readout_raw_trained_mean']:.3f}. Value-manifold "
        f"signature of the head output (reported, not deciding; companion PC1 > {s.companion_pc1:g}, PC1+PC2 > "
        f"{s.companion_pc12:g}): Adam {_signature_line(m, 'adam')}; SGD {_signature_line(m, 'sgd')}; shuffled "
        f"{_signature_line(m, 'shuffled')}; the exact Bayes log-predictive PC1 {o['bayes_signature_pc1']:.3f}, |ρ| "
        f"{o['bayes_signature_spearman_abs']:.3f}."
    )


def onehead_figure(ctx: Context, m: Metrics, s: OneHead, drawn: dict[str, Any]) -> str:
    """The one-head setting: both measures per arm, the signature, and the Adam arms' held-out loss."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    measured, sigs, curves = drawn["measured"], drawn["sigs"], drawn["curves"]
    labels = {**ONEHEAD_WORDS, "adam": "Adam (decisive)"}
    markers = {"init": "o", "sgd": "s", "adam": "^", "shuffled": "x"}
    for ax, x, title in (
        (axes[0, 0], "readout", "Read-out subspace: col(W_V W_O), logit shift removed"),
        (axes[0, 1], "value", "Value PCs: span(W_V e_1..e_7)"),
    ):
        for i, arm in enumerate(ONEHEAD_ARMS):
            values = measured[arm][x].tolist()
            spread = 0.6 / max(len(values), 1)  # the runs side by side within +-0.3 of their arm's tick
            ax.plot([i + spread * (j - len(values) / 2) for j in range(len(values))], values, markers[arm], ms=4)
        ax.axhline(m["onehead_chance"], color="0.5", ls=":", label=f"random subspace ({m['onehead_chance']:.2f})")
        bar = m["onehead_aligned_threshold"]
        ax.axhline(bar, color="k", alpha=0.4, lw=2, label=f"aligned ({bar:.3f})")
        ax.axhline(m[f"onehead_planted_in_{x}"], color="C2", ls="--", lw=1, label="planted head in the mean span")
        ax.set_xticks(range(len(ONEHEAD_ARMS)), [labels[a] for a in ONEHEAD_ARMS], fontsize=8)
        ax.set(ylim=(0, 1.3), ylabel="mean cos² of the 7 principal angles", title=title)
        ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax = axes[1, 0]
    for arm in ONEHEAD_ARMS:
        ax.plot(sigs[arm]["pc1"].tolist(), sigs[arm]["spearman_abs"].tolist(), markers[arm], ms=5, label=labels[arm])
    ax.plot([m["onehead_bayes_signature_pc1"]], [m["onehead_bayes_signature_spearman_abs"]], "k*", ms=12,
            label="Bayes log-predictive")  # fmt: skip
    ax.axvline(s.companion_pc1, color="0.5", ls=":", label=f"companion PC1 > {s.companion_pc1:g}")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="PC1 share of the head output", ylabel="|Spearman ρ| of PC1 with H_Bayes",
           title="Value-manifold signature (held out)")  # fmt: skip
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    steps = [min(i * s.eval_every, s.adam_steps) for i in range(curves["adam"].shape[0])]
    for arm in ("adam", "shuffled"):
        color = f"C{ONEHEAD_ARMS.index(arm)}"
        ax.plot(steps, curves[arm].mean(dim=1).tolist(), color=color, label=labels[arm])
        ax.fill_between(steps, curves[arm].min(dim=1).values.tolist(), curves[arm].max(dim=1).values.tolist(),
                        alpha=0.2, color=color)  # fmt: skip
    ax.axhline(m["onehead_sgd_heldout_final"], color="C1", ls="-.", lw=1, label="paper's SGD, final")
    ax.axhline(math.log(8), color="0.5", ls=":", label="log 8 (uniform)")
    ax.axhline(m["onehead_no_context_heldout_loss"], color="C2", ls="--", lw=1, label="no-context predictor")
    ax.axhline(m["onehead_bayes_heldout_loss"], color="k", ls="--", lw=1, label="Bayes predictive")
    ax.set(xlabel="Adam step", ylabel="held-out cross-entropy (nats)", title="Learning (mean, min-max over inits)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return ctx.save_figure(fig, "sticky_manifold_onehead", dpi=100)
