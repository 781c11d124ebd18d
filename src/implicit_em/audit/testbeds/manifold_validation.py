r"""Does ``sticky_manifold``'s measure rank models by what they infer? Its validation, before it decides anything.

The audit's rule: a measure that summarises a model (a manifold, an alignment) must first rank models by what they
infer, at matched KL, before it decides anything. The referee's case: ``advantage_ablation``'s arm B (no score
gradient) ends at 0.21-0.28 of the no-context KL, more than twice the tracking bar (0.1), and still reads 0.999 on
both of ``sticky_manifold``'s measures (the context read-out and the layer-1 value PCs, mean cos² to the span of the
centred symbol means, :mod:`~implicit_em.audit.testbeds.sticky_manifold`).

The validation set, at each seed, all on the seed's held-out windows and chain:

- **checkpoints of one run**: init 0 of the seed (``tb.model(init_seed)`` on its own stream, the testbed's recipe:
  the run ``sticky_fits.trained`` makes for ``sticky_manifold``'s init 0 and ``advantage_ablation``'s arm A). Its
  held-out KL is read every ``probe_every`` steps (:func:`~implicit_em.windtunnel.sticky.fit`'s ``on_step``); the
  model is kept at step 0 and the first time its KL / no-context KL falls to each of ``levels`` (1.5 down to 0.12:
  15 to 1.2 tracking bars), and the run stops when the last level is crossed (the learning rate's schedule reads
  the testbed's full budget, so the steps taken are those of the full run); the run's end is the shared fit itself;
- **the own-position control**: the same init and stream with every attention layer seeing only its own position
  (:class:`OwnPositionAttention`: a diagonal mask), trained the same way. It cannot read the context, so it sits at
  the no-context KL or above it; its context read-out is exactly zero (every ∂z_t/∂x_j, j < t, vanishes), so that
  measure is undefined there (NaN, left out of the read-out's ranking); its value PCs are defined.

The statistics, per measure (:func:`validity`): Spearman's ρ of the measure with −KL over the set (does it rank the
models by KL?), the highest KL, in tracking bars, at which a model of the set reads aligned (>= the aligned bar,
0.675), and (reported) the KL of the first checkpoint of the run that reads aligned.

The rule (:class:`Validation`, declared before the pilot and the deciding runs; gates of ``sticky_manifold``): a
measure may decide only if ρ >= ``rho_bar`` (0.7) and no model of the set reads aligned at a KL of
``aligned_kl_bars`` (2) tracking bars or more. 2 bars: twice the most KL the tracking gate allows, and where arm B
sits (2.1-2.8 bars) reading 0.999; a measure aligned there says nothing about inference that the KL does not say
better. ρ >= 0.7: about the one-sided 1% critical value of Spearman's ρ for the 11-13 models of the set (0.68 at
n = 12), so a measure that does not order the models by their KL fails it; a measure that orders them to the end and
then sits at its ceiling among the tracking checkpoints passes it only just (ρ about 0.7 with two thirds of the set
tied), which is why the second condition is there.
"""

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from scipy.stats import spearmanr
from torch import Tensor, nn

from implicit_em.audit import provenance
from implicit_em.audit.core import Context, Criterion, gate
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import sticky_fits
from implicit_em.audit.testbeds.manifold import mean_cos2
from implicit_em.audit.testbeds.sticky_manifold import (
    MEASURES,
    transformer_scores,
    transformer_value_subspace,
)
from implicit_em.windtunnel.sticky import StickyAttention, StickyBatch, StickyTestbed, StickyTransformer, fit

__all__ = [
    "LEVELS",
    "OwnPositionAttention",
    "Validation",
    "checkpoint_run",
    "details",
    "figure",
    "gates",
    "measure",
    "own_position",
    "own_position_fit",
    "validity",
]

LEVELS = (1.5, 1.0, 0.7, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.12)  # KL / no-context KL at which a checkpoint is kept
_WORDS = {"readout": "context read-out", "value": "layer-1 value PCs"}


@dataclass(frozen=True)
class Validation:
    """The validation's set and its rule (module docstring), declared before the pilot (seeds 100-102)."""

    levels: tuple[float, ...] = LEVELS  # 15 down to 1.2 tracking bars: dense where arm B sits (2.1-2.8 bars)
    probe_every: int = 5  # held-out KL read every 5 steps to find the crossings
    init_index: int = 0  # the run: the seed's init 0 (sticky_manifold's and advantage_ablation's arm A)
    rho_bar: float = 0.7  # ranks by KL: about the one-sided 1% critical ρ at n = 12 (0.68)
    aligned_kl_bars: float = 2.0  # never aligned at >= 2 tracking bars (arm B: 2.1-2.8 bars, reading 0.999)


class OwnPositionAttention(StickyAttention):
    """The testbed's attention (its W_Q, W_K, W_V, W_O) with a diagonal mask: position t attends to t only.

    The softmax over one unmasked score is exactly 1, so the output is W_O v_t and W_Q, W_K get no gradient."""

    def __init__(self, base: StickyAttention) -> None:
        nn.Module.__init__(self)  # not StickyAttention's: it would draw fresh weights
        self.W_Q, self.W_K, self.W_V, self.W_O = base.W_Q, base.W_K, base.W_V, base.W_O
        self.n_heads = base.n_heads

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        t = q.shape[-2]
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
        own = torch.eye(t, dtype=torch.bool, device=q.device)
        return torch.softmax(s.masked_fill(~own, -math.inf), dim=-1) @ v


def own_position(model: StickyTransformer) -> StickyTransformer:
    """``model`` with every attention layer replaced, in place, by :class:`OwnPositionAttention` (same weights)."""
    for block in model.blocks:
        block.attn = OwnPositionAttention(block.attn)  # type: ignore[arg-type]
    return model


def _key(tb: StickyTestbed, init_seed: int, held: StickyBatch, **more: Any) -> dict[str, Any]:
    return {"settings": asdict(tb), "init_seed": init_seed, "held": [held.x, held.y], **more,
            "code": provenance.code_hash(provenance.code_files(__name__))}  # fmt: skip


class _AllCrossed(Exception):
    """Raised from ``on_step`` once the last level is crossed: the rest of the run is the shared fit's."""


def _snapshot(step: int, kl: float, model: nn.Module) -> dict[str, Any]:
    return {"step": step, "kl": kl, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def checkpoint_run(ctx: Context, tb: StickyTestbed, init_seed: int, held: StickyBatch, v: Validation) -> dict[str, Any]:
    """The run's checkpoints (step 0 and each first crossing of a level, module docstring) and its probed KL.

    ``{"checkpoints": [{"step", "kl", "state"}], "probe_steps", "probe_kl", "wall_s"}``, cached in the run folder."""

    def run() -> dict[str, Any]:
        start = time.perf_counter()
        model = tb.model(init_seed)
        bar = tb.no_context_kl_bits(held)
        kl0 = tb.kl_bits(model, held)
        kept = [_snapshot(0, kl0, model)]
        probe: dict[str, list[Any]] = {"probe_steps": [0], "probe_kl": [kl0]}
        pending = [lv for lv in v.levels if kl0 > lv * bar]

        def on_step(step: int, net: nn.Module) -> None:
            if (step + 1) % v.probe_every:
                return
            kl = tb.kl_bits(net, held)
            probe["probe_steps"].append(step + 1)
            probe["probe_kl"].append(kl)
            if any(kl <= lv * bar for lv in pending):
                kept.append(_snapshot(step + 1, kl, net))
                pending[:] = [lv for lv in pending if kl > lv * bar]
            if not pending:
                raise _AllCrossed

        try:
            fit(tb, model, init_seed, eval_batch=held, on_step=on_step)
        except _AllCrossed:
            pass
        return {"checkpoints": kept, **probe, "wall_s": time.perf_counter() - start}

    return ctx.cached("manifold_validation_run", _key(tb, init_seed, held, levels=list(v.levels),
                                                      probe_every=v.probe_every), run)  # fmt: skip


def own_position_fit(ctx: Context, tb: StickyTestbed, init_seed: int, held: StickyBatch) -> tuple[nn.Module, float]:
    """The own-position control trained by the testbed's ``fit`` on ``init_seed``'s stream: the model, its wall time."""

    def run() -> dict[str, Any]:
        model = own_position(tb.model(init_seed))
        res = fit(tb, model, init_seed, eval_batch=held)
        return {"state": model.state_dict(), "wall_s": res.wall_s}

    value = ctx.cached("manifold_validation_own", _key(tb, init_seed, held), run)
    model = own_position(tb.model(init_seed))
    model.load_state_dict(value["state"])
    return model, float(value["wall_s"])


def _own_scores(model: nn.Module, basis: Tensor, x: Tensor, queries: Sequence[int]) -> dict[str, float]:
    """The control's measures: its context Jacobian is exactly zero (checked), so its read-out is NaN."""
    xg = x.detach().clone().requires_grad_(True)
    z = model(xg)
    (g,) = torch.autograd.grad((z[:, max(queries)] ** 2).sum(), xg)
    if float(g[:, : max(queries)].abs().max()) != 0.0:
        raise AssertionError("the own-position control reads an earlier position")
    value = transformer_value_subspace(model, x, basis.shape[1])
    return {"readout": math.nan, "value": mean_cos2(value, basis)}


def validity(kl_in_bars: Sequence[float], scores: Sequence[float], aligned: float, first_of: int) -> dict[str, float]:
    """The validation statistics of one measure (NaN scores left out): Spearman's ρ of the score with −KL; the highest
    KL (tracking bars) of a model that reads aligned (0 if none does); the KL of the first of the first ``first_of``
    models (the run's checkpoints, in step order) that reads aligned (NaN if none)."""
    pairs = [(k, s) for k, s in zip(kl_in_bars, scores, strict=True) if s == s]
    rho = float(spearmanr([s for _, s in pairs], [-k for k, _ in pairs]).statistic) if len(pairs) > 2 else math.nan
    highest = max((k for k, s in pairs if s >= aligned), default=0.0)
    first = next((k for k, s in zip(kl_in_bars[:first_of], scores[:first_of], strict=True) if s >= aligned), math.nan)
    return {"rho": rho, "aligned_kl_max_in_bars": highest, "first_aligned_kl_in_bars": first}


def _models(ctx: Context, tb: StickyTestbed, held: StickyBatch, init_seed: int, v: Validation) -> dict[str, Any]:
    """The set's models: the run's checkpoints, its end (the shared fit), the control; the run's probe and times."""
    run = checkpoint_run(ctx, tb, init_seed, held, v)
    models: list[tuple[int, float, nn.Module]] = []
    for c in run["checkpoints"]:
        model = tb.model(init_seed)
        model.load_state_dict(c["state"])
        models.append((int(c["step"]), float(c["kl"]), model))
    end, res = sticky_fits.trained(ctx, tb, init_seed, held)
    models.append((res.steps[-1], res.kl_history[-1], end))
    control, control_s = own_position_fit(ctx, tb, init_seed, held)
    return {"models": models, "control": control, "run": run, "train_s": run["wall_s"] + control_s}


def measure(m: Metrics, ctx: Context, tb: StickyTestbed, held: StickyBatch, init_seeds: Sequence[int],
            queries: Sequence[int], basis: Tensor, v: Validation) -> dict[str, Any]:  # fmt: skip
    """The validation at one seed: its metrics put into ``m`` as ``validation_*`` (``m`` holds ``no_context_kl``,
    ``tracking_bar`` and ``aligned_threshold``); returns what :func:`figure` draws."""
    start = time.perf_counter()
    got = _models(ctx, tb, held, init_seeds[v.init_index], v)
    nc, bar, aligned = m["no_context_kl"], m["tracking_bar"], m["aligned_threshold"]
    steps = [s for s, _, _ in got["models"]]
    kl = [k for _, k, _ in got["models"]] + [tb.kl_bits(got["control"], held)]
    scores = [transformer_scores(net, basis, held.x, queries) for _, _, net in got["models"]]
    scores.append(_own_scores(got["control"], basis, held.x, queries))
    n = len(steps)
    m.put("validation_levels", list(v.levels), "ratio", "validation: the KL / no-context levels a checkpoint marks")
    m.put("validation_steps", steps, "steps", "validation: the run's checkpoints (step 0, each level's first crossing, "
          "the end)")  # fmt: skip
    m.put("validation_kl_per_checkpoint", kl[:n], "bits", "validation: held-out KL at each checkpoint of the run")
    m.put("validation_kl_ratio_per_checkpoint", [k / nc for k in kl[:n]], "ratio",
          "validation: KL / no-context KL at each checkpoint")  # fmt: skip
    m.put("validation_control_kl_ratio", kl[n] / nc, "ratio", "validation, own-position control: KL / no-context KL")
    for x in MEASURES:
        m.put(f"validation_{x}_per_checkpoint", [s[x] for s in scores[:n]], "mean cos²",
              f"validation: {_WORDS[x]} at each checkpoint of the run")  # fmt: skip
        m.put(f"validation_control_{x}", scores[n][x], "mean cos²", f"validation, own-position control: {_WORDS[x]}"
              + (" (NaN: it reads no earlier position)" if x == "readout" else ""))  # fmt: skip
        stats = validity([k / bar for k in kl], [s[x] for s in scores], aligned, n)
        m.put(f"validation_{x}_rho", stats["rho"], "correlation",
              f"validation: Spearman ρ of the {_WORDS[x]} with −KL (checkpoints and control)")  # fmt: skip
        m.put(f"validation_{x}_aligned_kl_max_in_bars", stats["aligned_kl_max_in_bars"], "ratio",
              f"validation: highest KL / tracking bar of a model aligned on the {_WORDS[x]}")  # fmt: skip
        m.put(f"validation_{x}_first_aligned_kl_in_bars", stats["first_aligned_kl_in_bars"], "ratio",
              f"validation: KL / tracking bar of the run's first checkpoint aligned on the {_WORDS[x]}")  # fmt: skip
    m.put("validation_inits_kl_per_run", [tb.kl_bits(tb.model(s), held) for s in init_seeds], "bits",
          "validation: held-out KL of each random init (the figure)")  # fmt: skip
    m.put("validation_train_s", got["train_s"], "s", "validation: training time of the run's prefix and the control")
    m.put("validation_s", time.perf_counter() - start, "s", "validation: wall time")
    return {"probe_steps": got["run"]["probe_steps"], "probe_kl": got["run"]["probe_kl"]}


def gates(m: Metrics, v: Validation) -> list[Criterion]:
    """The validation's gates, two per measure: ranks the models by KL; not aligned far above the tracking bar."""
    out = []
    for x in MEASURES:
        rho = f"validation: Spearman ρ of the {_WORDS[x]} with −KL, one run's checkpoints and the own-position control"
        out.append(gate(rho, m[f"validation_{x}_rho"], ">=", v.rho_bar))
        out.append(gate(f"validation: highest KL / tracking bar of a model aligned on the {_WORDS[x]}",
                        m[f"validation_{x}_aligned_kl_max_in_bars"], "<", v.aligned_kl_bars))  # fmt: skip
    return out


def details(m: Metrics, v: Validation) -> str:
    """The validation in words (shown under the verdict)."""
    rows = "; ".join(f"step {s}: {r:.3f} -> {a:.3f} / {b:.3f}" for s, r, a, b in zip(
        m["validation_steps"], m["validation_kl_ratio_per_checkpoint"], m["validation_readout_per_checkpoint"],
        m["validation_value_per_checkpoint"], strict=True))  # fmt: skip
    stats = "; ".join(
        f"{_WORDS[x]}: ρ {m[f'validation_{x}_rho']:.3f} (bar {v.rho_bar:g}), aligned up to "
        f"{m[f'validation_{x}_aligned_kl_max_in_bars']:.2f} tracking bars (bar < {v.aligned_kl_bars:g}), first "
        f"aligned checkpoint at {m[f'validation_{x}_first_aligned_kl_in_bars']:.2f} bars"
        for x in MEASURES
    )
    return (
        f"Validation of the measure (gates): one run (init {v.init_index}), kept at step 0 and where its KL / "
        f"no-context first falls to {', '.join(f'{lv:g}' for lv in v.levels)}, and its end; KL / no-context -> "
        f"read-out / value PCs: {rows}. Own-position control: KL / no-context "
        f"{m['validation_control_kl_ratio']:.3f}, read-out undefined (it reads no earlier position), value PCs "
        f"{m['validation_control_value']:.3f}. {stats}."
    )


def figure(ctx: Context, m: Metrics, drawn: dict[str, Any], name: str) -> str:
    """Both measures against KL / no-context: the run's checkpoints, the own-position control, the random inits and
    the trained models (and the shuffled-label control), with the tracking, 2 x tracking and aligned bars."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    nc = m["no_context_kl"]
    ratios = m["validation_kl_ratio_per_checkpoint"]
    for ax, x in zip(axes[:2], MEASURES, strict=True):
        ax.plot(ratios, m[f"validation_{x}_per_checkpoint"], "o-", color="C0", ms=5, label="one run's checkpoints")
        for r, s, step in zip(ratios, m[f"validation_{x}_per_checkpoint"], m["validation_steps"], strict=True):
            ax.annotate(str(step), (r, s), fontsize=6, xytext=(3, -9), textcoords="offset points")
        ax.plot([m["validation_control_kl_ratio"]], [m[f"validation_control_{x}"]], "X", color="C3", ms=9,
                label="own position only (control)")  # fmt: skip
        ax.plot([k / nc for k in m["validation_inits_kl_per_run"]], m[f"init_{x}_per_run"], "o", mfc="none",
                color="0.4", label="random inits")  # fmt: skip
        ax.plot([k / nc for k in m["trained_kl_per_run"]], m[f"trained_{x}_per_run"], "^", color="C1",
                label="trained inits (decide)")  # fmt: skip
        ax.plot([k / nc for k in m["shuffled_kl_per_run"]], m[f"shuffled_{x}_per_run"], "x", color="C2", ms=8,
                label="shuffled labels")  # fmt: skip
        ax.axvline(0.1, color="k", ls=":", lw=1, label="tracking bar (0.1)")
        ax.axvline(0.2, color="C3", ls=":", lw=1, label="2 × tracking (gate)")
        ax.axhline(m["aligned_threshold"], color="k", alpha=0.4, lw=2, label=f"aligned ({m['aligned_threshold']:.3f})")
        ax.axhline(m["chance"], color="0.5", ls="--", lw=1, label="chance (7/20)")
        ax.set_xscale("log")
        ax.set(ylim=(0, 1.05), xlabel="held-out KL / no-context KL", ylabel="mean cos² to span(μ)",
               title=f"{_WORDS[x]}: ρ {m[f'validation_{x}_rho']:.2f}, aligned up to "
               f"{m[f'validation_{x}_aligned_kl_max_in_bars']:.1f} bars")  # fmt: skip
        ax.legend(fontsize=6, loc="lower left")
    ax = axes[2]
    ax.plot(drawn["probe_steps"], [k / nc for k in drawn["probe_kl"]], color="C0", lw=1)
    ax.plot(m["validation_steps"], ratios, "o", color="C0", ms=4)
    ax.axhline(0.1, color="k", ls=":", lw=1)
    ax.axhline(0.2, color="C3", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="held-out KL / no-context KL", title="The run (probed every few steps, its prefix)")
    fig.tight_layout()
    return ctx.save_figure(fig, name, dpi=100)
