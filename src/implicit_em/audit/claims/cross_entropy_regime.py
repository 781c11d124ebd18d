r"""Cross-entropy as the constrained regime: the label clamps one responsibility, the rest still compete (§4.3).

Claim (paper §4.3): with :math:`\ell = d_y + \log\sum_k \exp(-d_k)` "the label acts as a clamp", and
"competition among incorrect classes remains intact ... the classes with highest :math:`r_j` are penalized most
strongly. The repulsion is responsibility-weighted rather than uniform." In symbols:
:math:`\partial\ell/\partial d_k = 1[k=y] - r_k`, and with soft targets :math:`t` (label smoothing)
:math:`t_k - r_k`.

Method. A distance-based classifier, a linear embedding followed by :class:`implicit_em.distances.Prototypes`
(logits :math:`z = -d`, squared Euclidean distances to one prototype per class), trained in float64 with Adam on
scikit-learn's bundled 8×8 digits (no download; a stratified 75/25 split, standardised pixels) with
:func:`implicit_em.objectives.constrained_cross_entropy`, in two arms: hard labels and label smoothing.
At every step :class:`implicit_em.probes.HeadProbe` reads the responsibilities out of the gradient at d
(:math:`r = t - N\,\partial\ell/\partial d`) and compares them with :math:`\mathrm{softmax}(-d)` (the law
residual). The competition part is measured on the wrong classes: the repulsive gradient mass
:math:`\sum_{k\ne y} r_k = 1 - r_y` and the share of it that lands on the top competitor,
:math:`\max_{k\ne y} r_k / (1 - r_y)` (uniform repulsion would give :math:`1/(K-1)`), and the effective number
of competitors :math:`\exp H(r_{-y}/(1-r_y))` (uniform: K − 1 = 9).

Verdict. SUPPORTED if the law residual (both arms, every step, float64) is at most ``law_tol`` (1e-10), held-out
accuracy exceeds ``min_accuracy`` (0.8) and, over the last epoch, the median top-competitor share is at least
``min_top_share_ratio`` (2) times uniform. REFUTED if the law residual fails; PARTIAL if the law holds but the
model does not learn or the repulsion is not concentrated.
"""

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.audit.core import Context, Experiment, Result, Verdict, criterion, pyplot, torch_threads
from implicit_em.audit.testbeds.classifier import DistanceClassifier
from implicit_em.objectives import constrained_cross_entropy
from implicit_em.probes import HeadProbe

__all__ = ["EXPERIMENT", "Config", "DistanceClassifier", "competition", "run"]

HARD = "hard labels"


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds of the run; ``quick()`` for tests and demos, ``full()`` for the audit."""

    seed: int = 0  # splits and initialisations seed, seed + 1, ...
    epochs: int = 15
    batch_size: int = 64
    embed_dim: int = 16
    lr: float = 5e-3
    label_smoothing: float = 0.1  # the second arm
    seeds: int = 1  # independent splits and initialisations (seed, seed + 1, ...)
    # verdict thresholds (module docstring): the law holds to float64 round-off; the classifier "learns" above 0.8
    # held-out accuracy; the repulsion is "concentrated" if the top competitor's median share is ≥ 2× uniform
    law_tol: float = 1e-10
    min_accuracy: float = 0.8
    min_top_share_ratio: float = 2.0

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(epochs=60, seeds=5)


def _digits(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Standardised float64 digits: x_train, y_train, x_test, y_test (stratified 75/25 split)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, stratify=y, random_state=seed)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0) + 1e-3  # constant border pixels have std 0
    as_x = lambda a: torch.as_tensor((a - mean) / std, dtype=torch.float64)  # noqa: E731
    as_y = lambda a: torch.as_tensor(a, dtype=torch.long)  # noqa: E731
    return as_x(x_tr), as_y(y_tr), as_x(x_te), as_y(y_te)


def competition(r: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per row: wrong-class mass :math:`1 - r_y`, top-competitor share, effective number of competitors.

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


def _train_arm(cfg: Config, data: tuple[Tensor, Tensor, Tensor, Tensor], seed: int, smoothing: float) -> dict[str, Any]:
    """Train one arm; the law residual at every step and the competition statistics per epoch."""
    x_tr, y_tr, x_te, y_te = data
    k = int(y_tr.max()) + 1
    torch.manual_seed(seed)
    model = DistanceClassifier(x_tr.shape[1], k, cfg.embed_dim).double()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(seed)
    hist: dict[str, Any] = {"residual": [], "accuracy": [], "mass": [], "top_share": [], "n_eff": [], "attract": []}
    last_shares: list[Tensor] = []
    for epoch in range(cfg.epochs):
        worst, mass, top, n_eff, attract = 0.0, [], [], [], []
        for idx in torch.randperm(len(y_tr), generator=gen).split(cfg.batch_size):
            x, y = x_tr[idx], y_tr[idx]
            t = nn.functional.one_hot(y, k).double() * (1.0 - smoothing) + smoothing / k  # soft target
            with HeadProbe(regime="constrained", kind="distances", reduction="mean") as probe:
                d = probe(model(x))
                loss = constrained_cross_entropy(d, y, label_smoothing=smoothing).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
            worst = max(worst, probe.residual(target=t))  # max |(t − N ∂ℓ/∂d) − softmax(−d)|
            r = probe.responsibilities(target=t)  # read from the gradient, not from the forward
            m, s, n = competition(r, y)
            mass.append(m)
            top.append(s)
            n_eff.append(n)
            wrong = t < t.amax(dim=1, keepdim=True)  # (N, K): the wrong classes
            attract.append((r < t)[wrong].double())  # wrong classes the step pulls closer (smoothing only)
            opt.step()
        with torch.no_grad():
            acc = float((model(x_te).argmin(dim=1) == y_te).double().mean())
        hist["residual"].append(worst)
        hist["accuracy"].append(acc)
        hist["mass"].append(float(torch.cat(mass).mean()))
        hist["top_share"].append(float(torch.cat(top).median()))
        hist["n_eff"].append(float(torch.cat(n_eff).median()))
        hist["attract"].append(float(torch.cat(attract).mean()))
        if epoch == 0:
            hist["first_shares"] = torch.cat(top)
        last_shares = top
    hist["last_shares"] = torch.cat(last_shares)
    return hist


def _figure(ctx: Context, arms: dict[str, dict[str, Any]], cfg: Config, k: int) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(1, 4, figsize=(19, 4.2))
    epochs = range(1, cfg.epochs + 1)
    for i, (name, h) in enumerate(arms.items()):
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
    ax[2].axhline(1 / (k - 1), color="k", ls=":", lw=0.8)
    ax[2].set(xlabel="epoch", title="wrong-class mass and top-competitor share\n(dotted: uniform 1/(K−1))")
    bins = [i / 40 for i in range(41)]
    first = arms[HARD]
    ax[3].hist(first["first_shares"].numpy(), bins=bins, alpha=0.5, label="epoch 1", density=True)
    ax[3].hist(first["last_shares"].numpy(), bins=bins, alpha=0.5, label=f"epoch {cfg.epochs}", density=True)
    ax[3].axvline(1 / (k - 1), color="k", ls=":", lw=0.8, label="uniform")
    ax[3].set(
        xlabel="max_{k≠y} r_k / (1 − r_y)",
        ylabel="density",
        title="top competitor's share of the repulsion (hard)",
    )
    for a in ax:
        a.legend(fontsize=7)
    fig.suptitle("Cross-entropy on a prototype classifier (digits): the constrained regime, first seed")
    fig.tight_layout()
    return ctx.save_figure(fig, "cross_entropy_regime", dpi=100)


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(1):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    t0 = time.perf_counter()
    arms_of_seed: list[dict[str, dict[str, Any]]] = []
    for s in range(cfg.seeds):
        data = _digits(cfg.seed + s)
        arms_of_seed.append(
            {
                HARD: _train_arm(cfg, data, cfg.seed + s, 0.0),
                f"label smoothing {cfg.label_smoothing}": _train_arm(cfg, data, cfg.seed + s, cfg.label_smoothing),
            }
        )
    k = 10
    all_arms = [h for arms in arms_of_seed for h in arms.values()]
    hard = [arms[HARD] for arms in arms_of_seed]
    smoothed = [h for arms in arms_of_seed for name, h in arms.items() if name != HARD]
    residual = max(max(h["residual"]) for h in all_arms)
    accuracy = min(h["accuracy"][-1] for h in all_arms)
    top_share = min(h["top_share"][-1] for h in hard)  # hard labels: the wrong-class gradient is exactly r_k
    uniform = 1.0 / (k - 1)
    criteria = [
        criterion("law_residual_max", residual, "<=", cfg.law_tol),
        criterion("test_accuracy_min", accuracy, ">", cfg.min_accuracy),
        criterion("top_share_median_last_epoch_min", top_share, ">=", cfg.min_top_share_ratio * uniform),
    ]
    law_holds, learns, concentrated = (c.passed for c in criteria)
    verdict: Verdict
    if not law_holds:
        verdict = "REFUTED"
        summary = f"responsibilities read from the gradient differ from softmax(−d) by {residual:.1e} in float64"
    elif learns and concentrated:
        verdict = "SUPPORTED"
        summary = (
            f"∂ℓ/∂d = t − r holds to {residual:.1e} at every step (hard and smoothed targets); the classifier learns "
            f"(held-out accuracy ≥ {accuracy:.3f}) and the repulsion stays concentrated: in the last epoch the top "
            f"competitor takes a median {top_share:.2f} of the wrong-class gradient (uniform {uniform:.2f})"
        )
    else:
        verdict = "PARTIAL"
        summary = (
            f"the law holds ({residual:.1e}) but accuracy {accuracy:.3f} (threshold {cfg.min_accuracy}) or top "
            f"share {top_share:.2f} (threshold {cfg.min_top_share_ratio * uniform:.2f}) misses its threshold"
        )
    metrics: dict[str, Any] = {
        "law_residual_max": residual,
        "test_accuracy_min": accuracy,
        "test_accuracy_hard_per_seed": [h["accuracy"][-1] for h in hard],
        "test_accuracy_smoothed_per_seed": [h["accuracy"][-1] for h in smoothed],
        "accuracy_per_epoch_hard_seed0": hard[0]["accuracy"],
        "law_residual_per_epoch_hard_seed0": hard[0]["residual"],
        "wrong_class_mass_per_epoch_hard_seed0": hard[0]["mass"],
        "top_share_median_per_epoch_hard_seed0": hard[0]["top_share"],
        "top_share_median_last_epoch_min": top_share,
        "top_share_uniform": uniform,
        "n_effective_competitors_median_last_epoch_hard": statistics.median(h["n_eff"][-1] for h in hard),
        "n_effective_competitors_uniform": k - 1,
        "smoothed_wrong_classes_attracted_last_epoch": statistics.mean(h["attract"][-1] for h in smoothed),
        "smoothed_wrong_class_mass_last_epoch": statistics.mean(h["mass"][-1] for h in smoothed),
        "smoothed_wrong_class_mass_target": cfg.label_smoothing * (k - 1) / k,
        "seconds": time.perf_counter() - t0,
    }
    details = (
        f"Config: {asdict(cfg)}. Digits: 1347 training and 450 held-out images, 10 classes. Model: Linear(64 → "
        f"{cfg.embed_dim}) then squared Euclidean distances to 10 prototypes; logits z = −d; float64 throughout. "
        "The law residual is the head probe's max |(t − N ∂ℓ/∂d) − softmax(−d)| over every minibatch of every "
        "epoch; with label smoothing t = (1 − ε) onehot + ε/K. The competition statistics are read from the "
        "gradient-derived responsibilities before each step. Note that 'each wrong class receives gradient "
        "proportional to its share' is the law itself; the measured content is that the wrong-class mass is "
        f"concentrated (uniform share would be 1/{k - 1}, {k - 1} effective competitors) and that it persists "
        "while 1 − r_y shrinks over training. These statistics use the hard-label arm, where the wrong-class "
        "gradient is exactly r_k; with label smoothing it is r_k − ε/K, so wrong classes with r_k < ε/K are pulled "
        "closer, not pushed away (the share of such entries is reported)."
    )
    return Result(verdict, summary, metrics, criteria, [_figure(ctx, arms_of_seed[0], cfg, k)], details)


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
