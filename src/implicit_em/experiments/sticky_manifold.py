r"""Does training on the sticky Markov chain align the head's value space with the symbol means? The skeptic's test,
manifold half.

Claim (review of arXiv 2512.22473, "Gradient Dynamics of Attention", which paper/implicit-em-paper.md §1.2-1.3
leans on: "how cross-entropy training sculpts the geometry that the frozen network later uses"): the paper's
"central claim that these dynamics 'sculpt the low-dimensional manifolds identified in our companion work' is
supported only by qualitative specialization in the sticky Markov-chain simulations (§4)". The skeptic's concrete
test, as written: "Re-run the §4.2 sticky Markov-chain experiment, save the final attention matrix A and value
matrix V, then compute the average posterior approximation error (KL(posterior || true Bayesian update)) and the
principal angles between the span of V and the manifold basis from the companion paper; if either quantity fails to
improve over a random-initialization baseline by >2σ, the sculpting claim does not hold." The KL half is
``sticky_sculpting``; this experiment is the principal-angle half, plus the companion's value-manifold signature.

The manifold basis. The companion papers give no basis for this task; the task's ground truth is the symbol means:
x_t = mu_{y_{t-1}} + eps_t with isotropic noise, so everything x_t says about the hidden symbol lies in the span of
the centred means mu_s - mean(mu) (rank 7 in R^20), and a Bayes-optimal linear read-out of the symbol uses exactly
those directions. That span is the basis here (:func:`symbol_mean_basis`).

The learned value space, in the same space R^20 (the helper module ``_sticky_manifold`` derives both):

- read-out: the column space of W_V W_O (20 x 8; the row space of the map x -> W_O^T W_V^T x in the papers'
  column convention) after removing the common logit shift W_V W_O 1, which the softmax ignores (under SGD W_O 1
  never changes): rank 7 (:func:`readout_subspace`). The raw 8-column space is reported too (chance 8/20).
- value PCs: "the span of V" taken as the principal subspace of the value vectors v_t = x_t W_V on the held-out
  sequences (their plain span is all of R^15: the noise is full rank). Its k-th principal coordinate is
  x_t . (W_V e_k), so the top-7 principal subspace is the span of W_V e_1..e_7 in input space
  (:func:`value_subspace`).

Each is compared with the mean span by the mean squared cosine of its 7 principal angles (``_manifold.mean_cos2``:
1 nested, 0 orthogonal); for a uniformly random 7-dimensional subspace of R^20 its expectation is 7/20 = 0.35
(``_manifold.random_mean_cos2``).

Setting, head and initialisation: ``sticky_sculpting``'s, by import (stay 0.8, noise 3, the model reads x / 3;
one causal head, W_Q, W_K 20 x 10, W_V 20 x 15, W_O 15 x 8, init N(0, 0.1²)); T = 100 (quick) or 250 (full).
``n_inits`` random initialisations, each trained in two arms, and measured at init and after training (paired):

- SGD, the paper's: full-batch, lr 0.01, 1000 steps on one training sequence (sticky_sculpting's ``_train``); it
  barely leaves log 8 there (sticky_sculpting), so it is reported but does not decide;
- Adam, the decisive arm, fixed before any angle was computed: lr 3e-3, online, one sequence per step drawn from a
  pool of ``pool`` training sequences (600 steps quick, 1000 full). Chosen on held-out loss only (exploratory, seed
  0): Adam on one sequence memorises it (lr 1e-2 or 1e-3, T = 250: training loss 0.01-0.04 nats, held-out 11-24
  nats against Bayes 1.24); online from a pool of 32-64 sequences the held-out loss falls from 2.08 to about 1.75
  nats (no-context predictor 1.55-1.65, Bayes 1.34-1.44) and is flat after about half the steps. That it learned and
  plateaued is checked at run time.

Controls:

- planted heads: W_V = B R with B a basis of the mean span (R random) must score 1 on both measures, W_V = B_perp R'
  (the orthogonal complement) 0, to round-off; ``n_random_heads`` Gaussian heads must average 7/20 on the read-out
  measure (which is exactly uniform for them) within ``random_se_tol`` standard errors;
- the random initialisation, paired, the review's baseline;
- shuffled labels (negative control): the decisive Adam arm from the same inits and sequence order, but each
  training sequence's targets permuted (the labels' frequencies kept, their link to x destroyed). Training without
  the task's signal must not pass the alignment threshold, or the rule could not tell sculpting from training.

Verdict (thresholds in ``Config``, fixed before any angle was computed). For a measure (read-out, value PCs) on the
Adam arm, with d_r = mean cos²(trained_r) - mean cos²(init_r) over the runs:

- improved: mean d > ``sigmas`` x sd(d) (the review's "> 2σ", paired as the issue asks);
- aligned: mean trained cos² >= r + ``margin_fraction`` (1 - r), r = 7/20: the learned subspace is at least half
  way from chance to the mean span (0.675).

If a control fails, or the Adam arm does not learn (held-out gain >= ``min_gain_nats``) and plateau (the second
half of its steps brings <= ``plateau_fraction`` of the gain), the test cannot decide: PARTIAL, saying so.
Otherwise SUPPORTED if both measures are improved and aligned; REFUTED if neither improves by > 2σ (the skeptic's
rule); PARTIAL in between (which measure held, and how, is in the summary). The SGD arm's outcome under the same
rule is reported (``sgd_rule_outcome``).

Added after the first quick run (seed 0), reported only, the rule unchanged: the shuffled-label arm also gained
over its init by more than 2σ on both measures (read-out 0.345 -> 0.473, 4.1σ; Adam 0.345 -> 0.570, 2.8σ): any
training of this head moves W_V towards the high-variance input directions, and the centred means add variance
there, so the review's "> 2σ over a random-initialization baseline" alone does not separate sculpting from
training; the alignment threshold does (the shuffled arm stays under it). ``adam_vs_shuffled_*`` pairs the two
Adam arms (same inits, same sequence order): the gain that comes from the task's labels.

The value-manifold signature (arXiv 2512.22471, 2512.23752), reported, not deciding: PCA of the head's attention output
o_t = sum_j alpha_tj v_j (15-d, what W_O reads; the head has no residual stream) at every held-out position, with
the PC1 share, PC1+PC2, participation ratio and |Spearman ρ| of PC1 with the exact Bayes predictive entropy
(``_manifold.value_manifold_signature``), at init and after each arm, paired; next to it the same signature of the
exact Bayes log-predictive (centred, 8-d) and the companion's thresholds (PC1 > 0.8, §A; PC1+PC2 > 0.3, §C).
"""

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from implicit_em.experiments._base import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    pyplot,
    torch_threads,
)
from implicit_em.experiments._manifold import random_mean_cos2, value_manifold_signature
from implicit_em.experiments._sticky_manifold import (
    _eval_loss,
    head_signatures,
    planted_controls,
    shuffle_labels,
    subspace_scores,
    symbol_mean_basis,
    train_online_adam,
)
from implicit_em.experiments.sticky_sculpting import Config as SculptingConfig
from implicit_em.experiments.sticky_sculpting import (
    _kl_runs,
    _stack_inits,
    _train,
    no_context_posterior,
)
from implicit_em.windtunnel.metrics import entropy_bits
from implicit_em.windtunnel.tasks import StickyMarkovTask

__all__ = ["EXPERIMENT", "Config", "paired", "run"]

_SCULPTING = SculptingConfig()
MEASURES = ("readout", "value")
ARMS = ("init", "sgd", "adam", "shuffled")


@dataclass(frozen=True)
class Config:
    """Sizes, the two training arms and the thresholds (module docstring), fixed before any angle was computed."""

    seed: int = 0  # the chain's means, the sequences, the initialisations, the Adam arm's sequence order
    # sticky_sculpting's setting, head and paper optimiser (imported, recorded here)
    stay: float = _SCULPTING.stay
    noise: float = _SCULPTING.noise
    init_std: float = _SCULPTING.init_std
    sgd_lr: float = _SCULPTING.lr  # the paper's full-batch SGD
    sgd_steps: int = _SCULPTING.steps
    # sizes
    length: int = 100  # T of every sequence
    n_inits: int = 10  # paired runs (the issue: >= 10 inits)
    pool: int = 32  # training sequences; the SGD arm's run r trains on sequence r
    n_heldout: int = 2
    # the decisive Adam arm (chosen on held-out loss only; module docstring)
    adam_lr: float = 3e-3
    adam_steps: int = 600
    eval_every: int = 50
    n_random_heads: int = 200  # Gaussian heads for the read-out measure's chance level
    # thresholds
    sigmas: float = 2.0  # the review: "improve over a random-initialization baseline by >2σ" (paired σ)
    margin_fraction: float = 0.5  # aligned: at least half way from chance (7/20) to the mean span (1)
    planted_tol: float = 1e-9  # planted heads score 1 or 0 up to float64 round-off
    random_se_tol: float = 4.0  # random heads' mean within 4 standard errors of 7/20 (a false alarm at 6e-5)
    min_gain_nats: float = 0.1  # "learns": held-out loss falls by >= 0.1 nats (5% of log 8)
    plateau_fraction: float = 0.2  # "plateaus": the second half of the steps brings <= 20% of the held-out gain
    companion_pc1: float = 0.8  # reported only: Agarwal, Dalal & Misra, arXiv 2512.22471, PC1 > 80% of the variance
    companion_pc12: float = 0.3  # reported only: arXiv 2512.23752, PC1+PC2 > 30%

    @classmethod
    def quick(cls) -> "Config":
        """10 initialisations, T = 100, a pool of 32 sequences, Adam 600 steps."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """30 initialisations, T = 250, a pool of 64 sequences, 4 held out, Adam 1000 steps."""
        return cls(length=250, n_inits=30, pool=64, n_heldout=4, adam_steps=1000)


def _sd(x: Tensor) -> float:
    return float(x.std(unbiased=True)) if x.numel() > 1 else 0.0


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


def _aligned_threshold(cfg: Config, chance: float) -> float:
    return chance + cfg.margin_fraction * (1.0 - chance)


def _criteria(m: dict[str, float], cfg: Config) -> list[Criterion]:
    """Controls (7), the Adam arm learning and plateauing (2), then the decisive four (module docstring)."""
    thr, tol = m["aligned_threshold"], cfg.planted_tol
    crits = [
        criterion("planted head in the mean span: mean cos² (read-out)", m["planted_in_readout"], ">=", 1 - tol),
        criterion("planted head in the mean span: mean cos² (value PCs)", m["planted_in_value"], ">=", 1 - tol),
        criterion("planted head orthogonal to it: mean cos² (read-out)", m["planted_out_readout"], "<=", tol),
        criterion("planted head orthogonal to it: mean cos² (value PCs)", m["planted_out_value"], "<=", tol),
        criterion("random heads: |mean cos² - 7/20| in standard errors", m["random_heads_z"], "<=", cfg.random_se_tol),
        criterion("shuffled-label Adam arm: mean cos² (read-out)", m["shuffled_readout_trained_mean"], "<", thr),
        criterion("shuffled-label Adam arm: mean cos² (value PCs)", m["shuffled_value_trained_mean"], "<", thr),
        criterion("Adam arm: held-out loss gain, nats", m["adam_heldout_gain"], ">=", cfg.min_gain_nats),
        criterion("Adam arm: share of the gain in its second half", m["adam_late_share"], "<=", cfg.plateau_fraction),
    ]
    for measure, label in (("readout", "read-out"), ("value", "value PCs")):
        crits.append(
            criterion(
                f"Adam arm: paired gain in mean cos², trained - init ({label})",
                m[f"adam_{measure}_d_mean"],
                ">",
                cfg.sigmas * m[f"adam_{measure}_d_sd"],
            )
        )
        crits.append(criterion(f"Adam arm: trained mean cos² ({label})", m[f"adam_{measure}_trained_mean"], ">=", thr))
    return crits


def _rule(m: dict[str, float], arm: str, cfg: Config) -> dict[str, bool]:
    """The decisive rule's parts for one arm: improved (> 2σ paired) and aligned, per measure."""
    out = {}
    for measure in MEASURES:
        out[f"{measure}_improved"] = m[f"{arm}_{measure}_d_mean"] > cfg.sigmas * m[f"{arm}_{measure}_d_sd"]
        out[f"{measure}_aligned"] = m[f"{arm}_{measure}_trained_mean"] >= m["aligned_threshold"]
    return out


def _outcome(parts: dict[str, bool]) -> Verdict:
    if all(parts.values()):
        return "SUPPORTED"
    return "PARTIAL" if parts["readout_improved"] or parts["value_improved"] else "REFUTED"


def _describe(m: dict[str, float], arm: str) -> str:
    return "; ".join(
        f"{label} {m[f'{arm}_{x}_init_mean']:.3f} -> {m[f'{arm}_{x}_trained_mean']:.3f} "
        f"(paired gain {m[f'{arm}_{x}_d_mean']:+.3f} ± {m[f'{arm}_{x}_d_sd']:.3f}, {m[f'{arm}_{x}_d_in_sd']:.1f}σ)"
        for x, label in (("readout", "read-out"), ("value", "value PCs"))
    )


def _decide(m: dict[str, float], cfg: Config) -> tuple[Verdict, str]:
    crits = _criteria(m, cfg)
    controls, learned = crits[:7], crits[7:9]
    numbers = (
        f"mean cos² of the principal angles to the span of the centred symbol means, Adam arm (decisive, "
        f"{m['n_runs']:.0f} paired inits): {_describe(m, 'adam')}; chance 0.35, aligned at >= "
        f"{m['aligned_threshold']:.3f}. Paper's SGD: {_describe(m, 'sgd')}. Shuffled labels (negative control): "
        f"{_describe(m, 'shuffled')}; Adam beyond it: "
        + ", ".join(
            f"{label} {m[f'adam_vs_shuffled_{x}_d_mean']:+.3f} ({m[f'adam_vs_shuffled_{x}_d_in_sd']:.1f}σ)"
            for x, label in (("readout", "read-out"), ("value", "value PCs"))
        )
    )
    if not all(c.passed for c in controls):
        failed = ", ".join(c.metric for c in controls if not c.passed)
        return "PARTIAL", f"Undecided: a control failed ({failed}): {numbers}."
    if not all(c.passed for c in learned):
        return "PARTIAL", (
            f"Undecided: the decisive Adam arm did not learn and plateau (held-out gain "
            f"{m['adam_heldout_gain']:.3f} nats, share in the second half {m['adam_late_share']:.2f}): {numbers}."
        )
    parts = _rule(m, "adam", cfg)
    verdict = _outcome(parts)
    if verdict == "SUPPORTED":
        return verdict, f"Both value spaces move into the mean span beyond chance and init: {numbers}."
    if verdict == "REFUTED":
        return verdict, f"Neither value space improves over its random init by > {cfg.sigmas:g}σ: {numbers}."
    held = ", ".join(
        f"{label}: {'improved' if parts[f'{x}_improved'] else 'not improved'} and "
        f"{'aligned' if parts[f'{x}_aligned'] else 'not aligned'}"
        for x, label in (("readout", "read-out"), ("value", "value PCs"))
    )
    return verdict, f"Training moves the value space towards the mean span, not all the way ({held}): {numbers}."


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(1):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    task = StickyMarkovTask(length=cfg.length, stay=cfg.stay, noise=cfg.noise, means_seed=cfg.seed)
    base = 1_000 * cfg.seed
    pool = [task.sample(torch.Generator().manual_seed(base + 100 + p)) for p in range(cfg.pool)]
    held = [task.sample(torch.Generator().manual_seed(base + 500 + h)) for h in range(cfg.n_heldout)]
    pool_x = torch.stack([s.inputs.float() for s in pool]) / cfg.noise  # (P, T, D): what the model reads
    pool_y = torch.stack([s.targets for s in pool])  # (P, T)
    x_held = torch.stack([s.inputs.float() for s in held]) / cfg.noise  # (H, T, D)
    y_held = torch.stack([s.targets for s in held])
    post_held = torch.stack([s.posterior for s in held])  # (H, T, C)
    entropy = entropy_bits(post_held).reshape(-1)  # (H T,) bits
    basis = symbol_mean_basis(task.means)  # (D, 7)
    x_values = x_held.reshape(-1, x_held.shape[-1])  # (H T, D): the value vectors' inputs

    seeds = [base + i for i in range(cfg.n_inits)]
    states = {arm: _stack_inits(seeds, 1, cfg.init_std) for arm in ARMS}  # the same inits in every arm
    runs = torch.arange(cfg.n_inits) % cfg.pool
    sculpting = dataclasses.replace(_SCULPTING, lr=cfg.sgd_lr, steps=cfg.sgd_steps, log_every=cfg.eval_every)
    sgd_curve = _train(states["sgd"], pool_x[runs], pool_y[runs], sculpting)
    order = torch.randint(0, cfg.pool, (cfg.adam_steps, cfg.n_inits), generator=torch.Generator().manual_seed(base + 7))
    adam_curve = train_online_adam(
        states["adam"], pool_x, pool_y, order, cfg.adam_lr, x_held, y_held, cfg.eval_every
    )  # fmt: skip
    shuffled_curve = train_online_adam(
        states["shuffled"], pool_x, shuffle_labels(pool_y, base + 8), order, cfg.adam_lr, x_held, y_held,
        cfg.eval_every,
    )  # fmt: skip
    train_time = time.perf_counter() - start

    chance = random_mean_cos2(basis.shape[0], basis.shape[1], basis.shape[1])
    m: dict[str, float] = {"chance": chance, "chance_raw": random_mean_cos2(basis.shape[0], 8, basis.shape[1])}
    m["aligned_threshold"] = _aligned_threshold(cfg, chance)
    m["n_runs"] = float(cfg.n_inits)
    measured = {arm: subspace_scores(states[arm], basis, x_values) for arm in ARMS}
    sigs = {arm: head_signatures(states[arm], x_held, entropy) for arm in ARMS}
    kl = {arm: _kl_runs(states[arm], x_held, post_held) for arm in ARMS}
    for arm in ARMS[1:]:
        for measure in (*MEASURES, "readout_raw"):
            for key, value in paired(measured["init"][measure], measured[arm][measure]).items():
                m[f"{arm}_{measure}_{key}"] = value
        for key in sigs["init"]:
            for stat, value in paired(sigs["init"][key], sigs[arm][key]).items():
                m[f"{arm}_signature_{key}_{stat}"] = value
        m[f"{arm}_kl_mean"] = float(kl[arm].mean())
    m["init_kl_mean"] = float(kl["init"].mean())
    # added after the first quick run, reported only (module docstring): Adam beyond its shuffled-label control
    for measure in MEASURES:
        for key, value in paired(measured["shuffled"][measure], measured["adam"][measure]).items():
            m[f"adam_vs_shuffled_{measure}_{key}"] = value
    m.update(planted_controls(basis, x_values, 10_000 + cfg.seed, cfg.n_random_heads))
    bayes_logits = post_held.log().reshape(-1, post_held.shape[-1])
    for key, value in value_manifold_signature(bayes_logits - bayes_logits.mean(1, keepdim=True), entropy).items():
        m[f"bayes_signature_{key}"] = value
    for arm in ARMS:
        m[f"{arm}_signature_pc1_share_above_companion"] = float((sigs[arm]["pc1"] > cfg.companion_pc1).double().mean())
        m[f"{arm}_signature_pc12_share_above_companion"] = float(
            (sigs[arm]["pc12"] > cfg.companion_pc12).double().mean()
        )
    # held-out cross-entropy (nats): learning and plateau of the Adam arm, and the references
    adam_mean = adam_curve.mean(dim=1)
    mid = adam_curve.shape[0] // 2
    m["adam_heldout_init"], m["adam_heldout_final"] = float(adam_mean[0]), float(adam_mean[-1])
    m["adam_heldout_mid"] = float(adam_mean[mid])
    m["adam_heldout_gain"] = m["adam_heldout_init"] - m["adam_heldout_final"]
    gain = m["adam_heldout_gain"]
    m["adam_late_share"] = (m["adam_heldout_mid"] - m["adam_heldout_final"]) / gain if gain > 0 else math.inf
    m["shuffled_heldout_final"] = float(shuffled_curve[-1].mean())
    m["sgd_heldout_final"] = float(_eval_loss(states["sgd"], x_held, y_held).mean())
    m["sgd_train_loss_initial"], m["sgd_train_loss_final"] = float(sgd_curve[0].mean()), float(sgd_curve[-1].mean())
    m["bayes_heldout_loss"] = float(-post_held.gather(-1, y_held[..., None]).log().mean())
    p_nc = torch.stack([no_context_posterior(task, s) for s in held])
    m["no_context_heldout_loss"] = float(-p_nc.gather(-1, y_held[..., None]).log().mean())

    verdict, summary = _decide(m, cfg)
    figure = _figure(ctx, measured, sigs, adam_curve, shuffled_curve, m, cfg)
    metrics: dict[str, Any] = {
        **m,
        "sgd_rule_outcome": _outcome(_rule(m, "sgd", cfg)),
        "shuffled_rule_outcome": _outcome(_rule(m, "shuffled", cfg)),
        "adam_rule_parts": _rule(m, "adam", cfg),
        **{f"{arm}_{x}_per_run": measured[arm][x].tolist() for arm in ARMS for x in (*MEASURES, "readout_raw")},
        **{f"{arm}_signature_{k}_per_run": sigs[arm][k].tolist() for arm in ARMS for k in sigs[arm]},
        "adam_heldout_curve_mean": adam_mean.tolist(),
        "shuffled_heldout_curve_mean": shuffled_curve.mean(dim=1).tolist(),
        "train_s": train_time,
        "wall_s": time.perf_counter() - start,
    }
    return Result(verdict, summary, metrics, _criteria(m, cfg), [figure], _details(m, cfg))


def _figure(
    ctx: Context,
    measured: dict[str, dict[str, Tensor]],
    sigs: dict[str, dict[str, Tensor]],
    adam_curve: Tensor,
    shuffled_curve: Tensor,
    m: dict[str, float],
    cfg: Config,
) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    labels = {
        "init": "random init",
        "sgd": "paper's SGD",
        "adam": "Adam (decisive)",
        "shuffled": "Adam, shuffled labels",
    }
    markers = {"init": "o", "sgd": "s", "adam": "^", "shuffled": "x"}
    for ax, measure, title in (
        (axes[0, 0], "readout", "Read-out subspace: col(W_V W_O), logit shift removed"),
        (axes[0, 1], "value", "Value PCs: span(W_V e_1..e_7)"),
    ):
        for i, arm in enumerate(ARMS):
            values = measured[arm][measure].tolist()
            spread = 0.6 / max(len(values), 1)  # the runs side by side within +-0.3 of their arm's tick
            ax.plot([i + spread * (j - len(values) / 2) for j in range(len(values))], values, markers[arm], ms=4)
        ax.axhline(m["chance"], color="0.5", ls=":", label=f"random subspace ({m['chance']:.2f})")
        ax.axhline(m["aligned_threshold"], color="k", alpha=0.4, lw=2, label=f"aligned ({m['aligned_threshold']:.3f})")
        ax.axhline(m[f"planted_in_{measure}"], color="C2", ls="--", lw=1, label="planted head in the mean span")
        ax.set_xticks(range(len(ARMS)), [labels[a] for a in ARMS], fontsize=8)
        ax.set(ylim=(0, 1.3), ylabel="mean cos² of the 7 principal angles", title=title)
        ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax = axes[1, 0]
    for arm in ARMS:
        ax.plot(sigs[arm]["pc1"].tolist(), sigs[arm]["spearman_abs"].tolist(), markers[arm], ms=5, label=labels[arm])
    ax.plot([m["bayes_signature_pc1"]], [m["bayes_signature_spearman_abs"]], "k*", ms=12, label="Bayes log-predictive")
    ax.axvline(cfg.companion_pc1, color="0.5", ls=":", label=f"companion PC1 > {cfg.companion_pc1:g}")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="PC1 share of the head output", ylabel="|Spearman ρ| of PC1 with H_Bayes",
           title="Value-manifold signature (held out)")  # fmt: skip
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    steps = [min(i * cfg.eval_every, cfg.adam_steps) for i in range(adam_curve.shape[0])]
    for curve, arm in ((adam_curve, "adam"), (shuffled_curve, "shuffled")):
        ax.plot(steps, curve.mean(dim=1).tolist(), color=f"C{ARMS.index(arm)}", label=labels[arm])
        ax.fill_between(steps, curve.min(dim=1).values.tolist(), curve.max(dim=1).values.tolist(), alpha=0.2,
                        color=f"C{ARMS.index(arm)}")  # fmt: skip
    ax.axhline(m["sgd_heldout_final"], color="C1", ls="-.", lw=1, label="paper's SGD, final")
    ax.axhline(math.log(8), color="0.5", ls=":", label="log 8 (uniform)")
    ax.axhline(m["no_context_heldout_loss"], color="C2", ls="--", lw=1, label="no-context predictor")
    ax.axhline(m["bayes_heldout_loss"], color="k", ls="--", lw=1, label="Bayes predictive")
    ax.set(xlabel="Adam step", ylabel="held-out cross-entropy (nats)", title="Learning (mean, min-max over inits)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return ctx.save_figure(fig, "sticky_manifold", dpi=100)


def _signature_line(m: dict[str, float], arm: str) -> str:
    return (
        f"PC1 {m[f'{arm}_signature_pc1_init_mean']:.3f} -> {m[f'{arm}_signature_pc1_trained_mean']:.3f} "
        f"({m[f'{arm}_signature_pc1_d_in_sd']:+.1f}σ paired), PC1+PC2 {m[f'{arm}_signature_pc12_trained_mean']:.3f}, "
        f"participation ratio {m[f'{arm}_signature_participation_ratio_trained_mean']:.2f}, |ρ| "
        f"{m[f'{arm}_signature_spearman_abs_init_mean']:.3f} -> {m[f'{arm}_signature_spearman_abs_trained_mean']:.3f} "
        f"({m[f'{arm}_signature_spearman_abs_d_in_sd']:+.1f}σ paired)"
    )


def _details(m: dict[str, float], cfg: Config) -> str:
    return (
        f"Setting (sticky_sculpting's): stay {cfg.stay:g}, noise {cfg.noise:g}, the model reads x / {cfg.noise:g}; "
        f"T = {cfg.length}, {cfg.n_inits} initialisations (N(0, {cfg.init_std:g}²)), {cfg.pool} training sequences, "
        f"{cfg.n_heldout} held out. Basis: the span of the centred symbol means (rank 7 in R^20); chance (a uniformly "
        f"random 7-d subspace) {m['chance']:.2f}. Controls: planted heads in the span {m['planted_in_readout']:.12f} "
        f"/ {m['planted_in_value']:.12f} (read-out / value PCs), orthogonal {m['planted_out_readout']:.1e} / "
        f"{m['planted_out_value']:.1e}; {cfg.n_random_heads} Gaussian heads {m['random_heads_mean']:.4f} ± "
        f"{m['random_heads_sd']:.4f} (sd; {m['random_heads_z']:.1f} se from 7/20). "
        f"Held-out cross-entropy (nats): Adam {m['adam_heldout_init']:.3f} -> {m['adam_heldout_mid']:.3f} (half way) "
        f"-> {m['adam_heldout_final']:.3f}; shuffled labels -> {m['shuffled_heldout_final']:.3f}; the paper's SGD -> "
        f"{m['sgd_heldout_final']:.3f} (training loss {m['sgd_train_loss_initial']:.3f} -> "
        f"{m['sgd_train_loss_final']:.3f}); no-context predictor {m['no_context_heldout_loss']:.3f}, Bayes "
        f"{m['bayes_heldout_loss']:.3f}. KL(Bayes || model) in bits: init {m['init_kl_mean']:.3f}, SGD "
        f"{m['sgd_kl_mean']:.3f}, Adam {m['adam_kl_mean']:.3f}, shuffled {m['shuffled_kl_mean']:.3f}. "
        f"Principal angles, mean cos² (init -> trained, paired gain ± sd): Adam {_describe(m, 'adam')}. "
        f"SGD {_describe(m, 'sgd')}. Shuffled labels {_describe(m, 'shuffled')}. The raw 8-column read-out "
        f"(chance {m['chance_raw']:.2f}): init {m['adam_readout_raw_init_mean']:.3f}, Adam "
        f"{m['adam_readout_raw_trained_mean']:.3f}, SGD {m['sgd_readout_raw_trained_mean']:.3f}. "
        f"Value-manifold signature of the head output (reported, not deciding; companion PC1 > {cfg.companion_pc1:g}, "
        f"PC1+PC2 > {cfg.companion_pc12:g}): Adam {_signature_line(m, 'adam')}; SGD {_signature_line(m, 'sgd')}; "
        f"shuffled {_signature_line(m, 'shuffled')}; the exact Bayes log-predictive PC1 "
        f"{m['bayes_signature_pc1']:.3f}, |ρ| {m['bayes_signature_spearman_abs']:.3f}."
    )


EXPERIMENT = Experiment(
    name="sticky_manifold",
    title="Sticky Markov chain: does training align the head's value space with the symbol means, beyond its init?",
    claim=(
        "the central claim that these dynamics 'sculpt the low-dimensional manifolds identified in our companion "
        "work' is supported only by qualitative specialization in the sticky Markov-chain simulations (§4); the "
        "test: 'the principal angles between the span of V and the manifold basis from the companion paper; if "
        "either quantity fails to improve over a random-initialization baseline by >2σ, the sculpting claim does "
        "not hold.'"
    ),
    source=(
        "review-gradient-dynamics-of-attention: skeptic's load-bearing attack and concrete test, manifold "
        "half (arXiv 2512.22473 §4.2; implicit-em paper §1.2-1.3)"
    ),
    Config=Config,
    run=run,
)
