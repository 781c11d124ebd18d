r"""The subspaces ``sticky_manifold`` compares, and its online Adam arm, for the head of ``sticky_sculpting``.

The head reads row vectors: :math:`v_t = x_t W_V` with :math:`x_t \in \mathbb{R}^{D}` (D = 20), W_V (D, E) = (20, 15),
W_O (E, C) = (15, 8). Every subspace is returned as a (D, k) matrix with orthonormal columns in input space
:math:`\mathbb{R}^{D}`, the space where the symbol means live, so that :func:`_manifold.principal_angles` compares
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

The same two measures on the shared sticky testbed (:class:`~implicit_em.windtunnel.sticky.StickyTransformer`,
issue 25 §1), where the value map is no longer linear in x_t (input embedding, positions, LayerNorm) and the
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.func import jacrev, vmap

from implicit_em.audit.testbeds.manifold import mean_cos2, random_mean_cos2, value_manifold_signature
from implicit_em.audit.testbeds.one_head import single_head_logits
from implicit_em.probes.attention import attention
from implicit_em.windtunnel.sticky import StickyTestbed

__all__ = [
    "ShuffledLabels",
    "context_readout_subspace",
    "head_signatures",
    "mean_value_jacobian",
    "planted_controls",
    "planted_testbed_model",
    "readout_subspace",
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
    """:func:`_manifold.value_manifold_signature` of every run's attention output o_t = sum_j alpha_tj v_j (the 15-d
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
    sticky chain visits few symbols, so its own label set is still predictable from its inputs; sticky_manifold's page.)
    """

    shuffle_seed: int = 0  # kept for the record; the roll is deterministic

    def batches(self, seed: int) -> Any:
        for x, y in super().batches(seed):
            yield x, y.roll(1, dims=0)


def shuffled_labels(tb: StickyTestbed, shuffle_seed: int) -> ShuffledLabels:
    fields = {f.name: getattr(tb, f.name) for f in dataclasses.fields(tb) if f.init}
    return ShuffledLabels(**fields, shuffle_seed=shuffle_seed)
