r"""The closed-world assumption (§6.3) and its "none of the above" fix (§7.3), on a prototype classifier.

Claim (paper §6.3): "Softmax normalization guarantees that responsibilities sum to one, so some class must take full
responsibility for every input. There is no “none of the above”: an out-of-distribution input, no matter how
anomalous, is assigned to whichever class has the lowest distance, and the model’s confidence may be arbitrarily
high." §7.3: objectives that support non-assignment, "whether through an explicit “none of the above” component or a
threshold below which no component takes responsibility", would extend implicit EM to open sets. Both options are one
rule: a null component of distance τ has :math:`r_0 = \sigma(-L(d) - \tau)`, :math:`L = \log\sum_j e^{-d_j}`, a
monotone function of −L, so training with it can only help through the distances it learns.

Method. The digits' classes 0–6 are known (split 75/25 per seed); the OOD pool is every image of 7–9, as many noise
images (half uniform on [0, 16], half per-pixel marginals of the training images) and as many natural-image patches
as uniform-noise images (:mod:`implicit_em.audit.testbeds.ood`). Two prototype classifiers
(:mod:`implicit_em.audit.testbeds.classifier`) from one initialisation and batch order: *closed*, cross-entropy over
the 7 classes; *open*, with :class:`implicit_em.distances.NoneOfTheAbove` appended (learnable τ) and the soft target
:math:`(1-\varepsilon)e_y + \varepsilon e_\varnothing`, so τ settles where the null's mean share on known images is
ε; it never sees an OOD input. OOD scores: 1 − max r (closed), r_0 (open), −L and min d (closed); AUROC of held-out
known against OOD, in log space so saturated responsibilities do not tie.

Rule, on the mean over ``n_seeds`` seeds (thresholds in ``Config``, the audit's own: the paper states no number):
C1 at least 20% of OOD inputs get max r > 0.9 (closed); C2–C4 AUROC(r_0), AUROC(−L), AUROC(min d) beat AUROC(1 − max
r) by ≥ 0.05; C5 |accuracy gap| ≤ 1 point; C6 at most 5% of held-out known images have r_0 > 1/2. REFUTED if C1
fails; SUPPORTED if C1–C6 hold; PARTIAL otherwise. Controls: a random score's AUROC within 4 null standard deviations
of 1/2 at every seed, or the run raises; C6 (a null that takes every input fails it); reported, AUROC(r_0) =
AUROC(−L) of the open model, and noise scaled by c = 1 … 32 ("no matter how anomalous"). History and the earlier
pool's verdict: ``docs/claims/open_set.md``.
"""

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.audit import seeds
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gated
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import classifier, ood
from implicit_em.audit.testbeds.classifier import NullComponent, Training
from implicit_em.audit.testbeds.measured import Measured

__all__ = ["EXPERIMENT", "Config", "criteria", "figures", "measure", "run", "summary", "verdict"]

KNOWN = 7  # classes 0..6 are known; 7, 8, 9 are the unseen ones
SCALES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # noise images scaled away from the training mean
OOD_SETS = ood.SETS  # the verdict's OOD pool, in this order: digits 7–9, uniform, marginal, natural patches


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_seeds: int = 5  # independent splits, initialisations and noise; every criterion reads their mean
    train: Training = field(default_factory=lambda: Training(epochs=20))  # cross_entropy_regime's rate, D = 16
    null: NullComponent = field(default_factory=NullComponent)  # lr 5e-2, ε = 0.05: a pilot on training numbers
    # thresholds, all the audit's own, set with the request for this experiment before any run: the paper gives no
    # number (§6.3 says only "may be arbitrarily high", §7.3 proposes the options without a size)
    confident_r: float = 0.9  # C1: "confident" means max r > 0.9 ...
    confident_share_min: float = 0.2  # ... and the closed world shows if ≥ 20% of OOD inputs are confident
    auroc_gain_min: float = 0.05  # C2–C4: the open-set scores beat 1 − max r by ≥ 0.05 AUROC (audit's bar, not §7.3's)
    accuracy_gap_max: float = 0.01  # C5: "at equal in-distribution accuracy (within 1 point)"
    flagged_known_max: float = 0.05  # C6: at most 5% of held-out known digits rejected (the 95%-retained point)
    random_sigmas: float = 4.0  # control: a random score's AUROC within 4 null standard deviations of 1/2

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n_seeds=10, train=Training(epochs=60))


def _data(seed: int, index: int) -> dict[str, Tensor]:
    """Replicate ``index`` of the run seeded ``seed``: known train/test (x, y), the unseen digits 7–9, the noise
    images and the natural-image patches, all standardised float64 (N, 64): centred by the training mean, divided by
    the training data's overall std."""
    x, y = classifier.digits()
    known = y < KNOWN
    x_tr, x_te, y_tr, y_te = classifier.split(x[known], y[known], seeds.derive(seed, "split", index))
    unseen = x[~known]
    n_uniform = len(unseen) // 2
    noise = seeds.generator(seed, "noise", index)
    uniform, marginal = ood.noise_images(noise, x_tr, n_uniform, len(unseen) - n_uniform)
    mean, scale = x_tr.mean(axis=0), x_tr.std()
    as_x = lambda a: torch.as_tensor((a - mean) / scale, dtype=torch.float64)  # noqa: E731
    return {
        "x_train": as_x(x_tr),
        "y_train": torch.as_tensor(y_tr, dtype=torch.long),
        "x_known": as_x(x_te),
        "y_known": torch.as_tensor(y_te, dtype=torch.long),
        "x_unseen": as_x(unseen),
        "x_uniform": as_x(uniform),
        "x_marginal": as_x(marginal),
        "x_natural": as_x(ood.natural_patches(seeds.derive(seed, "natural", index), n_uniform)),
    }


def _one_seed(cfg: Config, index: int) -> dict[str, Any]:
    """Replicate ``index``: train both models on one split and score the held-out known images and the OOD pool."""
    data = _data(cfg.seed, index)
    x, y = data["x_train"], data["y_train"]
    init, order = seeds.derive(cfg.seed, "init", index), seeds.derive(cfg.seed, "batches", index)  # both alike
    closed, _, hist_closed = classifier.fit(x, y, KNOWN, cfg.train, init, order)
    open_model, null, hist_open = classifier.fit(x, y, KNOWN, cfg.train, init, order, cfg.null)
    assert null is not None
    x_ood = torch.cat([data[f"x_{name}"] for name in OOD_SETS])
    sizes = [len(data[f"x_{name}"]) for name in OOD_SETS]
    known = {"closed": ood.scores(closed, None, data["x_known"]), "open": ood.scores(open_model, null, data["x_known"])}
    pool = {"closed": ood.scores(closed, None, x_ood), "open": ood.scores(open_model, null, x_ood)}
    rng = seeds.generator(cfg.seed, "random score", index)  # the random score of the control
    n_known, n_ood = len(data["y_known"]), len(x_ood)
    out = ood.pool_numbers(cfg.confident_r, known, pool, sizes)
    out.update(
        replicate=index,
        accuracy_closed=classifier.accuracy(closed, data["x_known"], data["y_known"]),
        accuracy_open=classifier.accuracy(open_model, data["x_known"], data["y_known"]),
        auroc_random=ood.auroc(rng.uniform(size=n_known), rng.uniform(size=n_ood)),
        auroc_random_sd=ood.null_sd(n_known, n_ood),
        tau=float(null.null_distance.detach()),
        train_accuracy_closed=hist_closed["train_accuracy"][-1],
        train_null_share=hist_open["null_share"][-1],
        n_known=n_known,
        n_ood=dict(zip(OOD_SETS, sizes, strict=True)),
    )
    # "no matter how anomalous": noise images scaled away from the training mean (the origin after centring)
    far = torch.cat([data["x_uniform"], data["x_marginal"]])
    out["scaled_max_r_median"] = [float(ood.scores(closed, None, c * far)["max_r"].median()) for c in SCALES]
    out["scaled_r0_median"] = [float(ood.scores(open_model, null, c * far)["r0"].median()) for c in SCALES]
    out["hist"] = ood.distributions(known, pool, sizes)
    return out


def _check_random_score(cfg: Config, runs: list[dict[str, Any]]) -> None:
    """The control: a random score must not look like a detector, or the AUROC cannot be trusted (raises)."""
    for r in runs:
        if abs(r["auroc_random"] - 0.5) > cfg.random_sigmas * r["auroc_random_sd"]:
            raise RuntimeError(
                f"a random score has AUROC {r['auroc_random']:.3f} at replicate {r['replicate']}, more than "
                f"{cfg.random_sigmas} null sd ({r['auroc_random_sd']:.3f}) from 1/2: the AUROC cannot be trusted"
            )


def _spread(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Mean, sample sd, min and max of ``key`` over the seeds (statistics' exact mean, as recorded before)."""
    values = [r[key] for r in runs]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.mean(values), "sd": sd, "min": min(values), "max": max(values)}


# per seed, then reported as mean, sd, min and max over seeds: key -> (unit, label)
_PER_SEED: dict[str, tuple[str, str]] = {
    "confident_share": ("fraction", "share of OOD inputs with max r > 0.9 (closed model)"),
    **{
        f"confident_share_{name}": ("fraction", f"share of {label} with max r > 0.9 (closed model)")
        for name, label in (
            ("unseen", "digits 7–9"),
            ("uniform", "uniform noise"),
            ("marginal", "marginal noise"),
            ("noise", "noise images"),
            ("known", "held-out known digits"),
            ("natural", "natural-image patches"),
        )
    },
    "auroc_msp": ("AUROC", "AUROC of 1 − max r (closed model)"),
    "auroc_null": ("AUROC", "AUROC of the null component's r₀ (open model)"),
    "auroc_softmin": ("AUROC", "AUROC of the soft minimum −L (closed model)"),
    "auroc_min_d": ("AUROC", "AUROC of the minimum distance (closed model)"),
    "auroc_softmin_open": ("AUROC", "AUROC of the soft minimum −L (open model)"),
    "auroc_msp_open": ("AUROC", "AUROC of 1 − max r (open model)"),
    "auroc_random": ("AUROC", "AUROC of a random score (control)"),
    "accuracy_closed": ("accuracy", "held-out accuracy, closed model"),
    "accuracy_open": ("accuracy", "held-out accuracy, open model"),
    **{
        f"flagged_{name}": ("fraction", f"share of {label} with r₀ > 1/2 (rejected by the open model)")
        for name, label in (
            ("known", "held-out known digits"),
            ("ood", "OOD inputs"),
            ("unseen", "digits 7–9"),
            ("uniform", "uniform noise"),
            ("marginal", "marginal noise"),
            ("natural", "natural-image patches"),
        )
    },
    "null_share_known": ("fraction", "the null's mean share r₀ on held-out known digits"),
    "train_null_share": ("fraction", "the null's mean share r₀ on the training images (target ε)"),
    "tau": ("distance", "the learned null distance τ"),
    **{
        f"auroc_{s}_{name}": ("AUROC", f"AUROC of {score} against {label}")
        for s, score in (("msp", "1 − max r"), ("null", "r₀"), ("softmin", "−L"), ("min_d", "min d"))
        for name, label in zip(
            OOD_SETS, ("digits 7–9", "uniform noise", "marginal noise", "natural patches"), strict=True
        )
    },
}


def measure(cfg: Config, ctx: Context) -> Measured:
    """Both models at every seed; the criteria's means, the per-seed numbers' spreads, the scaled noise."""
    t0 = time.perf_counter()
    runs = [_one_seed(cfg, s) for s in range(cfg.n_seeds)]
    _check_random_score(cfg, runs)
    m = Measured()
    m.drawn = {"first": runs[0]["hist"]}
    m.drawn["per_seed"] = {
        k: [r[k] for r in runs]
        for k in ("auroc_msp", "auroc_null", "auroc_softmin", "auroc_min_d", "scaled_max_r_median", "scaled_r0_median")
    }
    gains = {k: [r[f"auroc_{k}"] - r["auroc_msp"] for r in runs] for k in ("null", "softmin", "min_d")}
    gap = statistics.mean(r["accuracy_open"] - r["accuracy_closed"] for r in runs)
    share = statistics.mean(r["confident_share"] for r in runs)
    m.put(
        "confident_share_ood_mean",
        share,
        "fraction",
        "share of OOD inputs with max r > 0.9 (closed model), mean over seeds",
    )
    for k, label in (("null", "r₀ (open)"), ("softmin", "−L (closed)"), ("min_d", "min d (closed)")):
        m.put(
            f"auroc_gain_{k}_mean",
            statistics.mean(gains[k]),
            "AUROC",
            f"AUROC gain of {label} over 1 − max r, mean over seeds",
        )
    for k, label in (("null", "r₀ (open)"), ("softmin", "−L (closed)"), ("min_d", "min d (closed)")):
        m.put(f"auroc_gain_{k}_per_seed", gains[k], "AUROC", f"AUROC gain of {label} over 1 − max r, per seed")
    m.put("accuracy_gap_abs_mean", abs(gap), "accuracy", "|held-out accuracy, open − closed|, mean over seeds")
    m.put("accuracy_gap_mean", gap, "accuracy", "held-out accuracy, open − closed, mean over seeds")
    flagged = statistics.mean(r["flagged_known"] for r in runs)
    m.put("flagged_known_mean", flagged, "fraction", "share of held-out known digits with r₀ > 1/2, mean over seeds")
    for key, (unit, label) in _PER_SEED.items():
        m.put(key, _spread(runs, key), unit, f"{label}: mean, sd, min, max over seeds")
    _put_controls(m, runs)
    m.put("seconds", time.perf_counter() - t0, "s", "run time")
    return m


def _put_controls(m: Metrics, runs: list[dict[str, Any]]) -> None:
    """The identity AUROC(r_0) = AUROC(−L) of the open model, the random score's null sd, the scaled noise, sizes."""
    same = max(abs(r["auroc_null"] - r["auroc_softmin_open"]) for r in runs)
    m.put(
        "auroc_null_minus_softmin_open_max_abs",
        same,
        "AUROC",
        "|AUROC(r₀) − AUROC(−L)| of the open model, max over seeds (0: the identity)",
    )
    m.put("auroc_random_null_sd", runs[0]["auroc_random_sd"], "AUROC", "sd of a random score's AUROC under the null")
    m.put("scales", list(SCALES), "ratio", "c: noise images multiplied by c after centring")
    for key, label in (("scaled_max_r_median", "median max r (closed)"), ("scaled_r0_median", "median r₀ (open)")):
        mean = [statistics.mean(v) for v in zip(*(r[key] for r in runs), strict=True)]
        m.put(f"{key}_mean", mean, "fraction", f"{label} on noise × c, per c: mean over seeds")
    m.put("n_known_test", runs[0]["n_known"], "count", "held-out known digits per seed")
    m.put("n_ood", runs[0]["n_ood"], "count", "OOD inputs per seed, per set")


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """C1 the closed world; C2–C4 the gains of r_0, −L and min d; C5 the accuracy gap; C6 the known rejected."""
    return [
        criterion("confident_share_ood_mean", m["confident_share_ood_mean"], ">=", cfg.confident_share_min),
        criterion("auroc_gain_null_mean", m["auroc_gain_null_mean"], ">=", cfg.auroc_gain_min),
        criterion("auroc_gain_softmin_mean", m["auroc_gain_softmin_mean"], ">=", cfg.auroc_gain_min),
        criterion("auroc_gain_min_d_mean", m["auroc_gain_min_d_mean"], ">=", cfg.auroc_gain_min),
        criterion("accuracy_gap_abs_mean", m["accuracy_gap_abs_mean"], "<=", cfg.accuracy_gap_max),
        criterion("flagged_known_mean", m["flagged_known_mean"], "<=", cfg.flagged_known_max),
    ]


def verdict(cfg: Config, m: Metrics, criteria: list[Criterion]) -> Verdict:
    """REFUTED if C1 fails; SUPPORTED if C1–C6 hold; PARTIAL otherwise."""
    v: Verdict
    if not criteria[0].passed:
        v = "REFUTED"
    else:
        v = "SUPPORTED" if all(c.passed for c in criteria[1:]) else "PARTIAL"
    return gated(v, criteria)


def summary(cfg: Config, m: Metrics, verdict: Verdict) -> str:
    mean = lambda key: m[key]["mean"]  # noqa: E731
    share = m["confident_share_ood_mean"]
    if verdict == "REFUTED":
        text = (
            f"only {share:.0%} of OOD inputs get max r > {cfg.confident_r} from the closed classifier (threshold "
            f"{cfg.confident_share_min:.0%}): the closed-world limitation does not show at this size"
        )
    else:
        failed = [c.metric for c in criteria(cfg, m)[1:] if not c.passed]
        text = (
            f"closed world: {share:.0%} of OOD inputs (digits 7–9 {mean('confident_share_unseen'):.0%}, "
            f"noise {mean('confident_share_noise'):.0%}, natural patches {mean('confident_share_natural'):.0%})"
            f" get max r > {cfg.confident_r}; AUROC 1 − max r {mean('auroc_msp'):.3f}, r_0 {mean('auroc_null'):.3f}, "
            f"−L {mean('auroc_softmin'):.3f}, min d {mean('auroc_min_d'):.3f}; accuracy gap "
            f"{m['accuracy_gap_mean'] * 100:+.1f} points; {m['flagged_known_mean']:.1%} of held-out known digits "
            "rejected" + (f" (missed: {', '.join(failed)})" if failed else "")
        )
    per_set = ", ".join(
        f"{label} {mean(f'auroc_msp_{name}'):.3f} / {mean(f'auroc_null_{name}'):.3f}"
        for name, label in zip(OOD_SETS, ("digits 7–9", "uniform", "marginal", "natural patches"), strict=True)
    )
    return (
        f"{text}. Per OOD set, AUROC 1 − max r / r_0: {per_set}. The +0.05 AUROC bar and the other thresholds are "
        "the audit's own; the paper states no number."
    )


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """Max r and r_0 per set, the ROC curves (first seed), the AUROCs per seed, and the scaled noise."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 5, figsize=(24, 4.4))
    first, per_seed = m.drawn["first"], m.drawn["per_seed"]
    bins = np.linspace(0, 1, 41)
    for name, color in (("known", "C0"), ("unseen", "C1"), ("noise", "C3"), ("natural", "C2")):
        label = {"known": "held-out 0–6", "unseen": "digits 7–9", "noise": "noise", "natural": "natural patches"}[name]
        ax[0].hist(first["max_r"][name].numpy(), bins=bins, alpha=0.45, color=color, density=True, label=label)
        ax[1].hist(first["r0"][name].numpy(), bins=bins, alpha=0.45, color=color, density=True, label=label)
    ax[0].axvline(cfg.confident_r, color="k", ls=":", lw=0.8)
    ax[0].set(xlabel="max r (closed model)", ylabel="density", title="closed world: confidence (dotted: 0.9)")
    ax[1].axvline(0.5, color="k", ls=":", lw=0.8)
    ax[1].set(xlabel="r_0 (open model)", title="the null component's responsibility (dotted: 1/2)")
    for i, (label, (known, pool)) in enumerate(first["roc"].items()):
        fpr, tpr = ood.roc_curve(known, pool)
        ax[2].plot(fpr, tpr, color=f"C{i}", lw=1.2, label=label)
    ax[2].plot([0, 1], [0, 1], "k:", lw=0.8)
    ax[2].set(xlabel="false-positive rate (held-out known)", ylabel="true-positive rate (OOD)")
    ax[2].set_title("ROC, first replicate")
    keys = [("auroc_msp", "1 − max r"), ("auroc_null", "r_0"), ("auroc_softmin", "−L"), ("auroc_min_d", "min d")]
    for j, (key, _) in enumerate(keys):
        values = per_seed[key]
        ax[3].plot([j] * len(values), values, "o", color=f"C{j}", alpha=0.6)
        ax[3].plot([j - 0.2, j + 0.2], [statistics.mean(values)] * 2, "-", color=f"C{j}", lw=2)
    ax[3].axhline(statistics.mean(per_seed["auroc_msp"]) + cfg.auroc_gain_min, color="k", ls=":", lw=0.8)
    ax[3].set_xticks(range(len(keys)), [label for _, label in keys])
    ax[3].set(
        ylabel="AUROC (held-out known vs OOD)", title=f"per seed and mean (dotted: baseline + {cfg.auroc_gain_min})"
    )
    for key, label, marker, color in (
        ("scaled_max_r_median", "median max r (closed)", "o-", "C0"),
        ("scaled_r0_median", "median r_0 (open)", "s-", "C1"),
    ):
        for curve in per_seed[key]:
            ax[4].semilogx(SCALES, curve, marker, ms=3, color=color, alpha=0.5)
        ax[4].plot([], [], marker, color=color, label=label)
    ax[4].set(
        xlabel="c (noise images × c, after centring)", ylim=(0, 1.02), title="no matter how anomalous: every seed"
    )
    for a in (*ax[:3], ax[4]):
        a.legend(fontsize=7)
    fig.suptitle(
        "Open set on digits: trained on 0–6, tested on 7–9, noise and natural-image patches "
        "(closed vs none-of-the-above)"
    )
    fig.tight_layout()
    return [ctx.save_figure(fig, "open_set", dpi=100)]


def _details(cfg: Config, m: Metrics) -> str:
    return (
        f"Config: {asdict(cfg)}. Known classes 0–{KNOWN - 1}: {m['n_known_test']} held-out images per seed; OOD: "
        f"{m['n_ood']} (digits 7–9, uniform noise, per-pixel-marginal noise, natural-image patches from "
        "scikit-learn's sample photographs on the digits' 8×8 grid and 0–16 scale). Model: Linear(64 → "
        f"{cfg.train.embed_dim}) then squared Euclidean distances to {KNOWN} prototypes, float64, Adam. The open "
        "model appends NoneOfTheAbove (learnable τ) and is trained with cross-entropy over K + 1 components, target "
        f"(1 − ε) e_y + ε e_null with ε = {cfg.null.mass}; it never sees an OOD input. Every criterion is the mean "
        f"over {cfg.n_seeds} seeds; per-seed values and spreads are in the metrics. r_0 = σ(−L − τ) is a monotone "
        "function of the soft minimum −L, so AUROC(r_0) equals AUROC(−L) of the open model (reported as "
        "auroc_null_minus_softmin_open_max_abs); the null differs from the closed model's −L only through the "
        "distances its training learns. The scaled-noise rows are the median max r (closed) and median r_0 (open) "
        f"on noise images multiplied by c = {list(SCALES)} after centring. A reading of the distance scores (exact, "
        "not measured): with d_k = ‖e‖² − 2 e·m_k + ‖m_k‖² for the embedding e of x, cross-entropy over the known "
        "classes depends on d only through differences d_k − d_j, so the term ‖e‖² that every d_k shares, and with "
        "it the level of −L and min d, is never trained by the closed objective; the open objective's target share "
        "ε on the null trains that level on the known images, which is where r_0 differs from the closed model's −L."
    )


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), _details(cfg, m))


EXPERIMENT = Experiment(
    name="open_set",
    title="The closed world and a none-of-the-above component",
    claim=(
        "A consequence is the closed-world assumption. Softmax normalization guarantees that responsibilities sum "
        "to one, so some class must take full responsibility for every input. There is no “none of the above”: an "
        "out-of-distribution input, no matter how anomalous, is assigned to whichever class has the lowest "
        "distance, and the model’s confidence may be arbitrarily high. [§7.3] Objectives that support "
        "non-assignment, whether through an explicit “none of the above” component or a threshold below which no "
        "component takes responsibility, would extend implicit EM to settings where not all inputs belong to "
        "known categories. [The audit's note, not the paper's: §7.3 states no number; the +0.05 AUROC bar the "
        "verdict asks of the null component and of the threshold, and every other threshold here, are the "
        "audit's own, set with the request for this experiment.]"
    ),
    source="paper §6.3, §7.3; the thresholds (20% confident OOD inputs, +0.05 AUROC, 1 point, 5% rejected) are the "
    "audit's own: the paper states no number",
    Config=Config,
    run=run,
)
