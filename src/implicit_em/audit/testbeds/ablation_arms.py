r"""The ablation arms trained on three settings: the bijection wind tunnel, the sticky testbed and the companion's
one head; what each arm's model is measured on, and the summaries over seeds.

Every arm of a seed shares the initialisation, the data stream, the optimiser and the number of steps; only the
score gradient differs (:data:`ARMS`, :func:`~implicit_em.audit.testbeds.ablation.routed_softmax`). A *record* is
one trained (or untrained) model's numbers: ``kl`` (held-out KL(Bayes ‖ model), bits), the value-manifold
signature (``pc1``, ``pc12``, ``participation_ratio``, ``spearman_abs``), and for a trained arm ``final_loss``
(nats), ``kl_history`` (bits at each checkpoint), ``plateau_drop`` / ``plateau_change`` (the last fifth of the
checkpoints against the fifth before) and ``qk_change`` (max |Δ| of the query/key weights). On the sticky testbed
a record also holds ``sticky_manifold``'s two subspace scores, ``readout`` and ``value`` (mean cos² to the span of
the centred symbol means, :func:`~implicit_em.audit.testbeds.sticky_manifold.transformer_scores`).

The summaries (:func:`summarise`, :func:`manifold_summary`) are means and sample sds over the seeds, summed in
order (``sum(x) / n``): for eight or more values that is not bitwise numpy's pairwise sum
(:func:`implicit_em.audit.stats.mean`), so the recorded numbers keep this arithmetic.
"""

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.audit.core import Context
from implicit_em.audit.testbeds.ablation import (
    AblatedStickyAttention,
    Mode,
    ablated_sticky,
    ablated_transformer,
    final_residual,
    query_key_weights,
    row_permutations,
    single_head,
    sticky_query_key_weights,
)
from implicit_em.audit.testbeds.manifold import mean_cos2, value_manifold_signature
from implicit_em.audit.testbeds.one_head import no_context_posterior, stack_inits
from implicit_em.audit.testbeds.sticky_fits import trained
from implicit_em.audit.testbeds.sticky_manifold import (
    context_readout_subspace,
    planted_testbed_model,
    shuffled_labels,
    symbol_mean_basis,
    transformer_scores,
)
from implicit_em.windtunnel.metrics import entropy_bits, evaluate_predictions, kl_bits
from implicit_em.windtunnel.sticky import StickyBatch, StickyTestbed, fit, forward_filter, plateau_change, plateau_drop
from implicit_em.windtunnel.tasks import BijectionTask, StickyMarkovTask
from implicit_em.windtunnel.train import windtunnel_loss

__all__ = [
    "ARMS",
    "MEASURES",
    "BijectionSetting",
    "OneHeadSetting",
    "bijection_arms",
    "exact_copy",
    "history_record",
    "init_spread",
    "manifold_checks",
    "manifold_summary",
    "onehead_arms",
    "shuffled_control",
    "sticky_arms",
    "summarise",
]

ARMS: dict[str, Mode] = {"A": "exact", "B": "zero", "C": "no_baseline", "D": "permuted"}
MEASURES = ("readout", "value")  # sticky_manifold's two subspace measures


@dataclass(frozen=True)
class BijectionSetting:
    """The bijection wind tunnel (keys without replacement) and its training: the wind tunnel's causal
    transformer, AdamW (weight decay 0) with warm-up then cosine, a fresh batch each step."""

    n_symbols: int = 6  # V; L = V - 1 pairs
    n_layers: int = 1
    n_heads: int = 2
    d_model: int = 32
    d_ff: int = 64
    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-2  # weight decay 0, so arm B's query/key weights stay exactly where they started
    warmup_steps: int = 20
    eval_size: int = 128  # held-out sequences; the signature uses all their key positions
    n_checkpoints: int = 20  # held-out KL during training, for the plateau gate


@dataclass(frozen=True)
class OneHeadSetting:
    """The companion's one-head sticky setting (``sticky_sculpting``'s head: no positions, no residual, no MLP),
    inputs x / noise, a pool of training sequences trained full batch with Adam."""

    stay: float = 0.8
    noise: float = 3.0
    length: int = 60  # T of every training and held-out sequence
    train_sequences: int = 32  # the training pool, full batch
    heldout: int = 2
    steps: int = 150
    lr: float = 1e-2  # Adam
    init_std: float = 0.1


def history_record(history: list[float], final_loss: float, window: float) -> dict[str, Any]:
    """A trained arm's curve: its last loss (nats), held-out KL history (bits) and plateau numbers over ``window``."""
    return {
        "final_loss": final_loss,
        "kl_history": history,
        "plateau_drop": plateau_drop(history, window),
        "plateau_change": plateau_change(history, window),
    }


# ---------------------------------------------------------------------------------------------------- bijection


def _lr(step: int, s: BijectionSetting) -> float:
    """Linear warm-up, then cosine decay to 0 (the wind tunnel's schedule)."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    return 0.5 * s.lr * (1.0 + math.cos(math.pi * (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)))


@torch.no_grad()
def _bijection_kl(model: nn.Module, tokens: Tensor, positions: Tensor, posterior: Tensor) -> float:
    model.eval()
    p = torch.softmax(model(tokens)[:, positions].double(), dim=-1)
    model.train()
    return float(kl_bits(posterior, p).mean())


@torch.no_grad()
def _bijection_measure(model: nn.Module, tokens: Tensor, positions: Tensor, posterior: Tensor) -> dict[str, float]:
    """Held-out KL and entropy MAE (bits) and the signature of the final residual (B, P, D) at the key positions."""
    model.eval()
    p = torch.softmax(model(tokens)[:, positions].double(), dim=-1)  # (B, P, C)
    metrics = evaluate_predictions(p, posterior)
    residual = final_residual(model, tokens)[:, positions]  # type: ignore[arg-type]  # (B, P, D)
    sig = value_manifold_signature(residual.reshape(-1, residual.shape[-1]), entropy_bits(posterior).reshape(-1))
    model.train()
    return {"kl": metrics.kl, "mae": metrics.entropy_mae_per_sample, **sig}


def bijection_arms(
    s: BijectionSetting, streams: dict[str, int], window: float, arms: dict[str, Mode] | None = None
) -> dict[str, dict[str, Any]]:
    """The random-init model and the arms for one replicate: ``{"init", "A", ..., "floor"}`` records.

    ``streams``: the seeds of the model's ``init``, the ``held``-out set, the ``perm``utations and the ``data``
    stream (the same for every arm). ``arms`` defaults to :data:`ARMS` (a test plants an arm equal to A)."""
    task = BijectionTask(s.n_symbols)
    held = task.sample(s.eval_size, torch.Generator().manual_seed(streams["held"]))
    every = max(1, s.steps // s.n_checkpoints)
    out: dict[str, dict[str, Any]] = {}
    for arm, mode in (ARMS if arms is None else arms).items():
        model = ablated_transformer(
            task.vocab_size, task.n_classes, task.seq_len(), s.n_layers, s.n_heads, s.d_model, s.d_ff,
            mode, streams["init"], perm_seed=streams["perm"],
        )  # fmt: skip
        if arm == "A":
            out["init"] = _bijection_measure(model, held.tokens, held.positions, held.posterior)
        qk0 = query_key_weights(model)
        opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
        data = torch.Generator().manual_seed(streams["data"])  # the same stream for every arm
        history: list[float] = []
        for step in range(s.steps):
            for group in opt.param_groups:
                group["lr"] = _lr(step, s)
            batch = task.sample(s.batch_size, data)
            loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if (step + 1) % every == 0 or step + 1 == s.steps:
                history.append(_bijection_kl(model, held.tokens, held.positions, held.posterior))
        out[arm] = _bijection_measure(model, held.tokens, held.positions, held.posterior)
        out[arm].update(history_record(history, float(loss.detach()), window))
        qk = query_key_weights(model)
        out[arm]["qk_change"] = max(float((a - b).abs().max()) for a, b in zip(qk, qk0, strict=True))
    out["floor"] = {"kl": task.no_context_mae()}  # uniform predictor: KL = log2 V - H_Bayes = the MAE floor
    return out


# ------------------------------------------------------------------------------------------ sticky (testbed)


def exact_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose attention backward is the exact gradient. The forward is the same in every mode, so
    the copy is the same function; the context read-out differentiates the logits by the inputs, and through an
    ablated arm's own backward it would read the surgery's Jacobian (for B, none through the scores)."""
    exact = copy.deepcopy(model)
    for m in exact.modules():
        if isinstance(m, AblatedStickyAttention):
            m.mode, m.perm = "exact", None
    return exact


@torch.no_grad()
def _sticky_measure(model: nn.Module, held: StickyBatch, basis: Tensor, queries: list[int]) -> dict[str, float]:
    """Held-out KL (bits), the signature of the final residual (B, T, D) at every held-out position, and
    ``sticky_manifold``'s two subspace scores, read on the model's own function (:func:`exact_copy`)."""
    model.eval()
    p = torch.softmax(model(held.x).double(), dim=-1)
    residual = model.residual(held.x)  # type: ignore[operator]  # (B, T, D)
    model.train()
    sig = value_manifold_signature(residual.reshape(-1, residual.shape[-1]), entropy_bits(held.posterior).reshape(-1))
    with torch.enable_grad():
        scores = transformer_scores(exact_copy(model), basis, held.x, queries)
    return {"kl": float(kl_bits(held.posterior, p).mean()), **sig, **scores}


def sticky_arms(
    tb: StickyTestbed,
    init_seed: int,
    perm_seed: int,
    held: StickyBatch,
    queries: list[int],
    window: float,
    arms: dict[str, Mode] | None = None,
) -> dict[str, Any]:
    """The random init and the arms on the testbed for one replicate: ``{"init", "A", ..., "floor"}`` records.

    Every arm starts from ``tb.model(init_seed)`` and trains with :func:`~implicit_em.windtunnel.sticky.fit` on
    ``init_seed``'s stream; arm A goes through the surgery's exact mode, whose backward differs from the plain
    model's at round-off, so it is trained here, not read from :func:`~.sticky_fits.trained`."""
    basis = symbol_mean_basis(tb.means)
    out: dict[str, Any] = {}
    for arm, mode in (ARMS if arms is None else arms).items():
        model = ablated_sticky(tb.model(init_seed), mode, perm_seed=perm_seed)
        if arm == "A":
            out["init"] = _sticky_measure(model, held, basis, queries)
        qk0 = sticky_query_key_weights(model)
        result = fit(tb, model, init_seed, eval_batch=held)
        out[arm] = _sticky_measure(model, held, basis, queries)
        out[arm].update(history_record(result.kl_history, result.final_loss, window))
        out[arm]["wall_s"] = result.wall_s
        qk = sticky_query_key_weights(model)
        out[arm]["qk_change"] = max(float((a - b).abs().max()) for a, b in zip(qk, qk0, strict=True))
    out["floor"] = {"kl": tb.no_context_kl_bits(held)}
    return out


def init_spread(
    tb: StickyTestbed, init_seeds: list[int], held: StickyBatch, queries: list[int]
) -> list[dict[str, float]]:
    """``sticky_manifold``'s two scores of untrained models from ``init_seeds`` (the random-init spread σ_init)."""
    basis = symbol_mean_basis(tb.means)
    return [transformer_scores(tb.model(s), basis, held.x, queries) for s in init_seeds]


def shuffled_control(
    ctx: Context, tb: StickyTestbed, init_seed: int, shuffle_seed: int, held: StickyBatch, queries: list[int]
) -> dict[str, float]:
    """The other-window-label control: ``tb.model(init_seed)`` trained with the exact gradient on ``init_seed``'s
    input stream, each window's labels those of another window of its batch (``sticky_manifold``'s
    :func:`~.sticky_manifold.shuffled_labels`); its final KL (bits), wall time and two scores. The fit is the shared
    one (:func:`~.sticky_fits.trained`): ``sticky_manifold`` reads the same model where its testbed is this one."""
    model, result = trained(ctx, shuffled_labels(tb, shuffle_seed), init_seed, held)
    scores = transformer_scores(model, symbol_mean_basis(tb.means), held.x, queries)
    return {"kl": result.kl_history[-1], "wall_s": result.wall_s, **scores}


def manifold_checks(tb: StickyTestbed, init_seed: int, held: StickyBatch, queries: list[int]) -> dict[str, float]:
    """The read-out's identities (``sticky_manifold``'s): ``tb.model(init_seed)`` with its input embedding planted to
    read only the mean span (both measures 1) or only its complement (0), float32; the exact Bayes filter's context
    read-out (1, float64)."""
    basis = symbol_mean_basis(tb.means)
    m: dict[str, float] = {}
    for name, inside in (("in", True), ("out", False)):
        planted = transformer_scores(planted_testbed_model(tb.model(init_seed), basis, inside), basis, held.x, queries)
        m[f"planted_{name}_readout"], m[f"planted_{name}_value"] = planted["readout"], planted["value"]

    def bayes(x: Tensor) -> Tensor:  # the exact log-predictive, differentiable in x (float64)
        return (forward_filter(tb.log_likelihood(x), tb.transition) @ tb.transition).log()

    readout = context_readout_subspace(bayes, held.x.double(), queries, basis.shape[1])
    m["bayes_readout"] = mean_cos2(readout, basis)
    return m


# ------------------------------------------------------------------------- the companion's one head (reported)


@torch.no_grad()
def _onehead_measure(
    params: dict[str, Tensor], x: Tensor, posterior: Tensor, mode: Mode, perm: Tensor
) -> list[dict[str, float]]:
    """Per run r of ``params`` (R, ...): held-out KL (bits) and the signature of y = αV at every held-out position."""
    batched = {k: v[:, None] for k, v in params.items()}  # (R, 1, ...): broadcast over the H sequences
    logits, y = single_head(batched, x[None], mode, perm)  # (R, H, T, C), (R, H, T, E)
    kl = kl_bits(posterior[None].expand(logits.shape[0], -1, -1, -1), torch.softmax(logits.double(), -1))
    h = entropy_bits(posterior).reshape(-1)
    return [
        {"kl": float(kl[r].mean()), **value_manifold_signature(y[r].reshape(-1, y.shape[-1]), h)}
        for r in range(logits.shape[0])
    ]


def onehead_arms(s: OneHeadSetting, streams: dict[str, Any]) -> tuple[dict[str, list[dict[str, float]]], float]:
    """Every arm and the random init of the one-head setting over the replicates' inits (batched: R runs), and the
    no-context KL. ``streams``: ``means`` (the chain's emission means), ``train`` and ``held`` (a seed per
    sequence), ``inits`` (a seed per replicate), ``perm`` (the row permutations)."""
    task = StickyMarkovTask(length=s.length, stay=s.stay, noise=s.noise, means_seed=streams["means"])
    train = [task.sample(torch.Generator().manual_seed(seed)) for seed in streams["train"]]
    held = [task.sample(torch.Generator().manual_seed(seed)) for seed in streams["held"]]
    x = torch.stack([q.inputs.float() for q in train]) / s.noise  # (N, T, D): the paper's unit-noise scale
    y = torch.stack([q.targets for q in train])  # (N, T)
    x_held = torch.stack([q.inputs.float() for q in held]) / s.noise
    post_held = torch.stack([q.posterior for q in held])  # (H, T, C)
    no_context = float(kl_bits(post_held, torch.stack([no_context_posterior(task, q) for q in held])).mean())
    perm = row_permutations(s.length, streams["perm"])
    out: dict[str, list[dict[str, float]]] = {}
    for arm, mode in ARMS.items():
        params = stack_inits(streams["inits"], 1, s.init_std)  # (R, ...): the same inits for every arm
        if arm == "A":
            out["init"] = _onehead_measure(params, x_held, post_held, mode, perm)
        qk0 = torch.cat([params["W_Q"].detach().flatten(1), params["W_K"].detach().flatten(1)], 1).clone()
        opt = torch.optim.Adam(list(params.values()), lr=s.lr)
        for _ in range(s.steps):
            logits, _ = single_head({k: v[:, None] for k, v in params.items()}, x[None], mode, perm)  # (R, N, T, C)
            per_run = F.cross_entropy(logits.flatten(1, 2).transpose(1, 2),
                                      y.flatten()[None].expand(len(streams["inits"]), -1),
                                      reduction="none").mean(dim=1)  # fmt: skip
            opt.zero_grad(set_to_none=True)
            per_run.sum().backward()  # each run gets exactly its own gradient
            opt.step()
        out[arm] = _onehead_measure(params, x_held, post_held, mode, perm)
        qk = torch.cat([params["W_Q"].detach().flatten(1), params["W_K"].detach().flatten(1)], 1)
        for r, rec in enumerate(out[arm]):
            rec["final_loss"] = float(per_run[r].detach())
            rec["qk_change"] = float((qk[r] - qk0[r]).abs().max())
    return out, no_context


# ---------------------------------------------------------------------------------------------------- summaries


def _mean(records: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in records) / len(records)


def _sd(records: list[dict[str, Any]], key: str) -> float:
    if len(records) < 2:
        return 0.0
    mu = _mean(records, key)
    return math.sqrt(sum((r[key] - mu) ** 2 for r in records) / (len(records) - 1))


def summarise(
    runs: dict[str, list[dict[str, Any]]], floors: list[float], learned_fraction: float, plateau_tol: float
) -> dict[str, float]:
    """Seed means and sds of KL, PC1 share, PC1+PC2, participation ratio and |ρ| for the init and every arm, the KL
    ratios to A, B-D's max query/key change, the mean no-context KL, and arm A's worst seed against its own bars:
    KL_A / no-context, the last-fifth drop in bits and over the plateau allowance (``plateau_tol`` ×
    ``learned_fraction`` × no-context), the relative drop."""
    m: dict[str, float] = {"no_context_kl": sum(floors) / len(floors)}
    for name in ("init", *ARMS):
        for key in ("kl", "pc1", "pc12", "participation_ratio", "spearman_abs"):
            m[f"{name}_{key}"] = _mean(runs[name], key)
            m[f"{name}_{key}_sd"] = _sd(runs[name], key)
    for arm in ("B", "C", "D"):
        m[f"{arm}_over_A_kl"] = m[f"{arm}_kl"] / m["A_kl"] if m["A_kl"] > 0 else math.inf
        m[f"{arm}_qk_change"] = max(r["qk_change"] for r in runs[arm])
    a_runs = runs["A"]
    if "plateau_drop" in a_runs[0]:
        track = [r["kl"] / f for r, f in zip(a_runs, floors, strict=True)]
        allowance = [plateau_tol * learned_fraction * f for f in floors]
        drop_in_bars = [r["plateau_drop"] / a for r, a in zip(a_runs, allowance, strict=True)]
        m["A_track_ratio_max"] = max(track)
        m["A_plateau_drop_max"] = max(r["plateau_drop"] for r in a_runs)
        m["A_plateau_in_bars_max"] = max(x if x == x else math.inf for x in drop_in_bars)  # NaN: too few points
        m["A_plateau_change_max"] = max(r["plateau_change"] for r in a_runs)
    return m


def manifold_summary(replicates: list[dict[str, Any]], chance: float, margin_fraction: float) -> dict[str, float]:
    """The read-out over the replicates: each name's mean and sd of both measures, the init spread (mean and sd over
    every extra random init of every replicate), each arm's mean paired gain over its replicate's own init (and its
    sd), the shuffled-label control's mean (NaN without one), chance and the aligned bar
    ``chance + margin_fraction (1 - chance)``."""
    m: dict[str, float] = {
        "chance": chance, "aligned_threshold": chance + margin_fraction * (1.0 - chance),
        "n_shuffled": float(sum("shuffled" in s for s in replicates)),
    }  # fmt: skip
    for x in MEASURES:
        for name in ("init", *ARMS, "shuffled"):
            recs = [s[name] for s in replicates if name in s]
            m[f"{name}_{x}"] = _mean(recs, x) if recs else math.nan  # no control model: its gate cannot pass
            m[f"{name}_{x}_sd"] = _sd(recs, x) if recs else math.nan
        spread = [r for s in replicates for r in s["init_spread"]]
        m[f"init_spread_{x}_mean"] = _mean(spread, x) if spread else math.nan
        m[f"init_spread_{x}_sd"] = _sd(spread, x) if len(spread) > 1 else math.nan
        for arm in ARMS:
            gains = [{"d": s[arm][x] - s["init"][x]} for s in replicates]
            m[f"{arm}_{x}_gain"], m[f"{arm}_{x}_gain_sd"] = _mean(gains, "d"), _sd(gains, "d")
    return m
