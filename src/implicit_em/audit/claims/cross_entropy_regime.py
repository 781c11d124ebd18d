r"""Cross-entropy as the constrained regime: the label clamps one responsibility, the rest still compete (§4.3).

Claim (paper §4.3): with :math:`\ell = d_y + \log\sum_k \exp(-d_k)` "the label acts as a clamp", and
"competition among incorrect classes remains intact ... the classes with highest :math:`r_j` are penalized most
strongly. The repulsion is responsibility-weighted rather than uniform." In symbols:
:math:`\partial\ell/\partial d_k = 1[k=y] - r_k`, and with soft targets :math:`t` (label smoothing) :math:`t_k - r_k`.

Method. The prototype classifier of :mod:`implicit_em.audit.testbeds.classifier` (logits :math:`z = -d`) on the
digits (a stratified 75/25 split per seed, pixels standardised one by one), trained with
:func:`implicit_em.objectives.constrained_cross_entropy` in two arms from one initialisation: hard labels and label
smoothing. At every step :class:`implicit_em.probes.HeadProbe` reads the responsibilities out of the gradient at d
(:math:`r = t - N\,\partial\ell/\partial d`) and compares them with :math:`\mathrm{softmax}(-d)` (the law residual).
The competition is measured on the wrong classes of the hard arm, where the wrong-class gradient is exactly
:math:`r_k`: the repulsive mass :math:`1 - r_y`, the share of it the top competitor takes,
:math:`\max_{k\ne y} r_k / (1 - r_y)` (uniform: :math:`1/(K-1)`), and the effective number of competitors
:math:`\exp H(r_{-y}/(1-r_y))` (uniform: K − 1 = 9).

Rule. SUPPORTED if the law residual (both arms, every step, float64) is at most ``law_tol``, the held-out accuracy
exceeds ``min_accuracy`` and, in the last epoch, the median top-competitor share is at least
``min_top_share_ratio`` times uniform; REFUTED if the law residual fails; PARTIAL if the law holds but the model does
not learn or the repulsion is not concentrated. Reported beside: in the smoothed arm the wrong classes with
:math:`r_k < \varepsilon/K` are pulled closer, not pushed away (their share). History:
``docs/claims/cross_entropy_regime.md``.
"""

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.audit import seeds, stats
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gated
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import classifier
from implicit_em.audit.testbeds.classifier import Training
from implicit_em.audit.testbeds.measured import Measured
from implicit_em.objectives import constrained_cross_entropy
from implicit_em.probes import HeadProbe

__all__ = ["EXPERIMENT", "Config", "competition", "criteria", "figures", "measure", "run", "summary", "verdict"]

HARD = "hard labels"
K = 10  # the digits' classes


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds of the run; ``quick()`` for tests and demos, ``full()`` for the audit."""

    seed: int = 0
    n_seeds: int = 1  # independent splits and initialisations
    train: Training = field(default_factory=Training)  # 15 epochs of Adam (lr 5e-3, batches of 64), D = 16
    label_smoothing: float = 0.1  # ε of the second arm
    # thresholds (module docstring), the audit's own: the law holds to float64 round-off; the classifier "learns"
    # above 0.8 held-out accuracy; the repulsion is "concentrated" if the top competitor's median share is ≥ 2×
    # uniform (the paper gives no number)
    law_tol: float = 1e-10
    min_accuracy: float = 0.8
    min_top_share_ratio: float = 2.0

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n_seeds=5, train=Training(epochs=60))


def _digits(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Standardised float64 digits: x_train (1347, 64), y_train, x_test (450, 64), y_test."""
    x, y = classifier.digits()
    x_tr, x_te, y_tr, y_te = classifier.split(x, y, seed)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0) + 1e-3  # constant border pixels have std 0
    as_x = lambda a: torch.as_tensor((a - mean) / std, dtype=torch.float64)  # noqa: E731
    as_y = lambda a: torch.as_tensor(a, dtype=torch.long)  # noqa: E731
    return as_x(x_tr), as_y(y_tr), as_x(x_te), as_y(y_te)


def competition(r: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per row of r (N, K): wrong-class mass :math:`1 - r_y` (N,), top-competitor share and effective number of
    competitors (N', rows with mass > 0).

    Shares are those of :math:`r_{-y} / (1 - r_y)`, the gradient's repulsion spread over the wrong classes. Rows
    whose wrong-class mass underflowed to 0 (no repulsion at all) are dropped from the shares.
    """
    # r read from a smoothed gradient carries rounding of order 1e-17, which may be slightly negative: clamp
    wrong = r.clamp_min(0.0).scatter(1, y[:, None], 0.0)  # (N, K): r with the true class zeroed
    mass = wrong.sum(dim=1)  # 1 - r_y, computed without cancellation
    alive = mass > 0
    wrong, mass_alive = wrong[alive], mass[alive]
    share = wrong / mass_alive[:, None]
    entropy = -(share * share.clamp_min(torch.finfo(share.dtype).tiny).log()).sum(dim=1)
    return mass, share.amax(dim=1), entropy.exp()


class _Arm:
    """One arm's training record: the law residual at every step, the competition statistics per epoch."""

    def __init__(self, cfg: Config, data: tuple[Tensor, Tensor, Tensor, Tensor], init: int, smoothing: float):
        self.data, self.smoothing = data, smoothing
        self.model = classifier.make_classifier(init, data[0].shape[1], K, cfg.train.embed_dim)
        self.hist: dict[str, Any] = {k: [] for k in ("residual", "accuracy", "mass", "top_share", "n_eff", "attract")}
        self.epoch: dict[str, Any] = {"worst": 0.0, "mass": [], "top": [], "n_eff": [], "attract": []}

    def backward(self, idx: Tensor) -> None:
        x, y = self.data[0][idx], self.data[1][idx]
        t = nn.functional.one_hot(y, K).double() * (1.0 - self.smoothing) + self.smoothing / K  # soft target
        with HeadProbe(regime="constrained", kind="distances", reduction="mean") as probe:
            d = probe(self.model(x))
            constrained_cross_entropy(d, y, label_smoothing=self.smoothing).mean().backward()
        e = self.epoch
        e["worst"] = max(e["worst"], probe.residual(target=t))  # max |(t − N ∂ℓ/∂d) − softmax(−d)|
        r = probe.responsibilities(target=t)  # read from the gradient, not from the forward
        for key, value in zip(("mass", "top", "n_eff"), competition(r, y), strict=True):
            e[key].append(value)
        wrong = t < t.amax(dim=1, keepdim=True)  # (N, K): the wrong classes
        e["attract"].append((r < t)[wrong].double())  # wrong classes the step pulls closer (smoothing only)

    def end_epoch(self, epoch: int) -> None:
        e, h = self.epoch, self.hist
        h["residual"].append(e["worst"])
        h["accuracy"].append(classifier.accuracy(self.model, self.data[2], self.data[3]))
        h["mass"].append(float(torch.cat(e["mass"]).mean()))
        h["top_share"].append(float(torch.cat(e["top"]).median()))
        h["n_eff"].append(float(torch.cat(e["n_eff"]).median()))
        h["attract"].append(float(torch.cat(e["attract"]).mean()))
        if epoch == 0:
            h["first_shares"] = torch.cat(e["top"])
        h["last_shares"] = torch.cat(e["top"])
        self.epoch = {"worst": 0.0, "mass": [], "top": [], "n_eff": [], "attract": []}


def _train_arm(
    cfg: Config, data: tuple[Tensor, Tensor, Tensor, Tensor], init: int, order: int, smoothing: float
) -> dict[str, Any]:
    """Train one arm (Adam, the testbed's loop) from the initialisation seed ``init`` in the batch order ``order``;
    its history."""
    arm = _Arm(cfg, data, init, smoothing)
    opt = torch.optim.Adam(arm.model.parameters(), lr=cfg.train.lr)
    classifier.train(opt, len(data[1]), cfg.train, order, arm.backward, arm.end_epoch)
    return arm.hist


def measure(cfg: Config, ctx: Context) -> Measured:
    """Both arms at every seed; the law residual, accuracy and the competition statistics."""
    t0 = time.perf_counter()
    arms_of_seed: list[dict[str, dict[str, Any]]] = []
    for s in range(cfg.n_seeds):
        data = _digits(seeds.derive(cfg.seed, "split", s))
        init, order = seeds.derive(cfg.seed, "init", s), seeds.derive(cfg.seed, "batches", s)  # both arms alike
        arms_of_seed.append(
            {
                HARD: _train_arm(cfg, data, init, order, 0.0),
                f"label smoothing {cfg.label_smoothing}": _train_arm(cfg, data, init, order, cfg.label_smoothing),
            }
        )
    all_arms = [h for arms in arms_of_seed for h in arms.values()]
    hard = [arms[HARD] for arms in arms_of_seed]
    smoothed = [h for arms in arms_of_seed for name, h in arms.items() if name != HARD]
    m = Measured()
    m.drawn = arms_of_seed[0]
    m.put("law_residual_max", max(max(h["residual"]) for h in all_arms), "absolute", "|∂ℓ/∂d − (t − r)| max")
    m.put("test_accuracy_min", min(h["accuracy"][-1] for h in all_arms), "accuracy", "held-out accuracy, min")
    per_seed = [h["accuracy"][-1] for h in hard]
    m.put("test_accuracy_hard_per_seed", per_seed, "accuracy", "held-out accuracy (hard targets) per seed")
    per_seed = [h["accuracy"][-1] for h in smoothed]
    m.put("test_accuracy_smoothed_per_seed", per_seed, "accuracy", "held-out accuracy (smoothed targets) per seed")
    _put_first_seed(m, hard[0])
    uniform = 1.0 / (K - 1)
    # hard labels: the wrong-class gradient is exactly r_k
    top = min(h["top_share"][-1] for h in hard)
    m.put(
        "top_share_median_last_epoch_min",
        top,
        "fraction",
        "top competitor's share of the wrong-class gradient, median in the last epoch, min over seeds",
    )
    m.put("top_share_uniform", uniform, "fraction", "top competitor's share under uniform repulsion, 1/(K − 1)")
    n_eff = stats.median([h["n_eff"][-1] for h in hard])
    m.put(
        "n_effective_competitors_median_last_epoch_hard",
        n_eff,
        "classes",
        "effective competitors, median in the last epoch (hard targets)",
    )
    m.put("n_effective_competitors_uniform", K - 1, "classes", "effective competitors under uniform repulsion")
    _put_smoothed(m, cfg, smoothed)
    m.put("seconds", time.perf_counter() - t0, "s", "run time")
    return m


def _put_first_seed(m: Metrics, h: dict[str, Any]) -> None:
    """The first seed's hard-arm histories, per epoch."""
    m.put(
        "accuracy_per_epoch_hard_seed0",
        h["accuracy"],
        "accuracy",
        "held-out accuracy per epoch (hard targets), first seed",
    )
    m.put(
        "law_residual_per_epoch_hard_seed0",
        h["residual"],
        "absolute",
        "|∂ℓ/∂d − (t − r)| max per epoch (hard targets), first seed",
    )
    m.put(
        "wrong_class_mass_per_epoch_hard_seed0",
        h["mass"],
        "fraction",
        "wrong-class mass 1 − r_y, mean per epoch (hard targets), first seed",
    )
    m.put(
        "top_share_median_per_epoch_hard_seed0",
        h["top_share"],
        "fraction",
        "top competitor's share of the wrong-class gradient, median per epoch (hard targets), first seed",
    )


def _put_smoothed(m: Metrics, cfg: Config, smoothed: list[dict[str, Any]]) -> None:
    """The smoothed arm's last epoch: the wrong classes pulled closer and the wrong-class mass against its target."""
    attracted = statistics.mean(h["attract"][-1] for h in smoothed)
    m.put(
        "smoothed_wrong_classes_attracted_last_epoch",
        attracted,
        "fraction",
        "smoothed targets: share of wrong classes pulled closer (r_k < ε/K), last epoch",
    )
    mass = statistics.mean(h["mass"][-1] for h in smoothed)
    m.put("smoothed_wrong_class_mass_last_epoch", mass, "fraction", "smoothed targets: wrong-class mass, last epoch")
    target = cfg.label_smoothing * (K - 1) / K
    m.put(
        "smoothed_wrong_class_mass_target",
        target,
        "fraction",
        "smoothed targets: wrong-class mass of the target, ε(K − 1)/K",
    )


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """The law, the classifier learning, and the repulsion's concentration (module docstring)."""
    return [
        criterion("law_residual_max", m["law_residual_max"], "<=", cfg.law_tol),
        criterion("test_accuracy_min", m["test_accuracy_min"], ">", cfg.min_accuracy),
        criterion(
            "top_share_median_last_epoch_min",
            m["top_share_median_last_epoch_min"],
            ">=",
            cfg.min_top_share_ratio * m["top_share_uniform"],
        ),
    ]


def verdict(cfg: Config, m: Metrics, criteria: list[Criterion]) -> Verdict:
    """REFUTED if the law fails; SUPPORTED if the model learns and the repulsion is concentrated; else PARTIAL."""
    law_holds, learns, concentrated = (c.passed for c in criteria)
    v: Verdict = "REFUTED" if not law_holds else ("SUPPORTED" if learns and concentrated else "PARTIAL")
    return gated(v, criteria)


def summary(cfg: Config, m: Metrics, verdict: Verdict) -> str:
    residual, accuracy, top = m["law_residual_max"], m["test_accuracy_min"], m["top_share_median_last_epoch_min"]
    uniform = m["top_share_uniform"]
    if verdict == "REFUTED":
        return f"responsibilities read from the gradient differ from softmax(−d) by {residual:.1e} in float64"
    if verdict == "SUPPORTED":
        return (
            f"∂ℓ/∂d = t − r holds to {residual:.1e} at every step (hard and smoothed targets); the classifier learns "
            f"(held-out accuracy ≥ {accuracy:.3f}) and the repulsion stays concentrated: in the last epoch the top "
            f"competitor takes a median {top:.2f} of the wrong-class gradient (uniform {uniform:.2f})"
        )
    return (
        f"the law holds ({residual:.1e}) but accuracy {accuracy:.3f} (threshold {cfg.min_accuracy}) or top "
        f"share {top:.2f} (threshold {cfg.min_top_share_ratio * uniform:.2f}) misses its threshold"
    )


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """Accuracy, law residual, wrong-class mass and top share per epoch, and the top share's histogram (first seed)."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 4, figsize=(19, 4.2))
    epochs = range(1, cfg.train.epochs + 1)
    for i, (name, h) in enumerate(m.drawn.items()):
        ax[0].plot(epochs, h["accuracy"], "o-", ms=3, color=f"C{i}", label=name)
        floor = [max(r, 1e-18) for r in h["residual"]]  # log axis: an exact 0 is drawn at 1e-18
        ax[1].semilogy(epochs, floor, "o-", ms=3, color=f"C{i}", label=name)
        ax[2].plot(epochs, h["mass"], "o-", ms=3, color=f"C{i}", label=f"{name}: mean 1 − r_y")
        if name == HARD:  # with soft targets the wrong-class gradient is r_k − t_k, not r_k
            ax[2].plot(epochs, h["top_share"], "s--", ms=3, color=f"C{i}", label=f"{name}: median top share")
    ax[0].axhline(cfg.min_accuracy, color="k", ls=":", lw=0.8)
    ax[0].set(xlabel="epoch", ylabel="held-out accuracy", title="accuracy (dotted: threshold)")
    ax[1].axhline(cfg.law_tol, color="k", ls=":", lw=0.8)
    ax[1].set(xlabel="epoch", ylabel="max |r_grad − softmax(−d)|", title="law residual per epoch (float64)")
    ax[2].axhline(1 / (K - 1), color="k", ls=":", lw=0.8)
    ax[2].set(xlabel="epoch", title="wrong-class mass and top-competitor share\n(dotted: uniform 1/(K−1))")
    bins = [i / 40 for i in range(41)]
    first = m.drawn[HARD]
    ax[3].hist(first["first_shares"].numpy(), bins=bins, alpha=0.5, label="epoch 1", density=True)
    ax[3].hist(first["last_shares"].numpy(), bins=bins, alpha=0.5, label=f"epoch {cfg.train.epochs}", density=True)
    ax[3].axvline(1 / (K - 1), color="k", ls=":", lw=0.8, label="uniform")
    ax[3].set(
        xlabel="max_{k≠y} r_k / (1 − r_y)", ylabel="density", title="top competitor's share of the repulsion (hard)"
    )
    for a in ax:
        a.legend(fontsize=7)
    fig.suptitle("Cross-entropy on a prototype classifier (digits): the constrained regime, first seed")
    fig.tight_layout()
    return [ctx.save_figure(fig, "cross_entropy_regime", dpi=100)]


def _details(cfg: Config) -> str:
    return (
        f"Config: {asdict(cfg)}. Digits: 1347 training and 450 held-out images, 10 classes. Model: Linear(64 → "
        f"{cfg.train.embed_dim}) then squared Euclidean distances to 10 prototypes; logits z = −d; float64 "
        "throughout. The law residual is the head probe's max |(t − N ∂ℓ/∂d) − softmax(−d)| over every minibatch of "
        "every epoch; with label smoothing t = (1 − ε) onehot + ε/K. The competition statistics are read from the "
        "gradient-derived responsibilities before each step. Note that 'each wrong class receives gradient "
        "proportional to its share' is the law itself; the measured content is that the wrong-class mass is "
        f"concentrated (uniform share would be 1/{K - 1}, {K - 1} effective competitors) and that it persists "
        "while 1 − r_y shrinks over training. These statistics use the hard-label arm, where the wrong-class "
        "gradient is exactly r_k; with label smoothing it is r_k − ε/K, so wrong classes with r_k < ε/K are pulled "
        "closer, not pushed away (the share of such entries is reported)."
    )


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), _details(cfg))


EXPERIMENT = Experiment(
    name="cross_entropy_regime",
    title="Cross-entropy: the label clamps one responsibility, competition persists among the rest",
    claim=(
        "The label acts as a clamp. In unsupervised mixture learning, responsibilities are entirely latent, "
        "determined only by the data. In cross-entropy, the label declares that the correct class should have "
        "responsibility 1, and the gradient corrects any deviation from this target. If the correct class already "
        "dominates ($r_{y}\\approx 1$), the gradient is small. If incorrect classes hold probability mass "
        "($r_{y}<1$), the gradient is large. Competition among "
        "incorrect classes remains intact. When the model misclassifies, the responsibility mass is distributed "
        "among wrong answers, and each receives gradient signal proportional to its share: the classes with "
        "highest $r_{j}$ are penalized most strongly. The repulsion is responsibility-weighted rather than uniform."
    ),
    source="paper §4.3",
    Config=Config,
    run=run,
)
