r"""Does training on the sticky Markov chain bring the head to the Bayes posterior? The skeptic's test, posterior half.

Claim (review of arXiv 2512.22473, "Gradient Dynamics of Attention"): the paper says the attention dynamics
"sculpt the low-dimensional manifolds identified in our companion work", supported only by qualitative
specialisation in the sticky Markov-chain simulations (its §4). The skeptic's concrete test: re-run the sticky
chain, compute "the average posterior approximation error (KL(posterior || true Bayesian update))" and the
principal angles between the learned value space and the companion's manifold basis; "if either quantity fails to
improve over a random-initialization baseline by >2σ, the sculpting claim does not hold". The review asks for the
KL because it "would confirm the geometry is the same rather than some other low-dimensional attractor consistent
with cross-entropy minimization". Only the KL half is tested here; the manifold half is the separate experiment
``sticky_manifold``.

Why the earlier version was wrong (issue 10). It ran the paper's chain (stay 0.3, noise 1) and took σ as the spread
of the random-initialisation KL over seeds (0.0017 bits): near-identical N(0, 0.1²) inits barely differ, so any
training movement passed "2σ" (it reported PARTIAL at the full size: 12.7σ, yet 7.6% of the way to the posterior
and 0.95σ against the pooled spread). And in that setting the task needs almost no context: the best predictor from
x_t alone is 0.0009 bits from Bayes (exact, means seeds 0-2), so moving towards Bayes there shows a classifier of
x_t being learnt, not posterior tracking. The old rule is still applied to the new runs (``old_rule_*`` metrics),
so both outcomes are on record.

Setting, chosen before anything was trained, from the task's exact posterior. The target the verdict judges
against is ``target_kl`` = 0.03 bits per prediction: the level at which this audit already calls a trained model
posterior-tracking (``bayes_necessity``: 0.028-0.045 bits on the bijection wind tunnel), and 30x the companion's
reported transformer entropy errors (1e-3 bits). The setting must put the exact no-context predictor
p_nc(y_t | x_t) = sum_s p(y_{t-1} = s | x_t) A_{s, y_t} (uniform prior; the best predictor of y_t from x_t alone)
at least ``context_ratio`` = 10x further from Bayes than that, i.e. KL(Bayes || p_nc) >= 0.3 bits, so that a model
meeting the target must use its context. Exact values (T = 4000, means seeds 0-2): at the paper's stay 0.3 the
no-context KL stays below 0.012 bits for every noise from 1 to 6, so the stay probability has to rise; at stay 0.8
it is 0.29, 0.37, 0.40, 0.40, 0.37 bits at noise 2, 2.5, 3, 3.5, 4 (KL(Bayes || uniform) 1.46 down to 0.80). We
take stay 0.8 and noise 3 (the largest no-context KL of that scan, 13x the target; 0.39-0.41 over means seeds
0-2); the ratio is checked again on the held-out sequences at run time (a criterion). Noise 3 is applied as the
paper's unit-variance noise around means shrunk by 1/3: the model reads x_t / 3, which has the same posterior and
the paper's input scale, so the paper's lr means what it meant there. (Read unscaled, 3x larger inputs make lr 0.01
a far larger step: measured at the quick size, seed 0, the head then memorised its training sequence, training
loss 0.60 nats against the Bayes predictive's 1.43, and its held-out KL rose from 1.11 to 3.05 bits; REFUTED too.)
Sequence length: T = 250 (quick) and 500 (full) instead of the paper's 2000, since 30 runs cost T² each.

Model and optimiser (arXiv 2512.22473): :class:`implicit_em.windtunnel.StickyMarkovTask` (8 symbols on a ring,
x_t = mu_{y_{t-1}} + eps_t in D = 20, target y_t), one causal attention head with no residual and no MLP:
logits = softmax_causal((x W_Q)(x W_K)^T / sqrt(10)) (x W_V) W_O with W_Q, W_K 20x10, W_V 20x15, W_O 15x8, init
N(0, 0.1²); full-batch SGD, lr 0.01, 1000 steps on one training sequence.

Runs: ``n_inits`` random initialisations x ``n_sequences`` training sequences (same chain and means, fresh draws);
every run is evaluated on the same ``n_heldout`` held-out sequences, at its own initialisation and after training.
KL(Bayes || model) is in bits, averaged over positions and held-out sequences; p_Bayes is the task's forward filter.
Paired difference d_r = KL(init_r) - KL(trained_r); σ = the standard deviation of d_r over the runs (its standard
error is reported too); fraction of the gap closed = mean d / mean KL(init) (Bayes is at 0).

Controls, reported next to the model, all exact (no training): KL(Bayes || uniform); the no-context predictor (a
window of one input: the most any context-free predictor can close is 1 - KL_nc / KL(init) of the gap); and the
planted ladder of windowed Bayes predictors, the exact filter restarted from a uniform prior ``k`` inputs back
(k = 2, 4, 8): predictors that use a known amount of context, which show where the target sits (seed 0, four
sequences of T = 250: 0.39, 0.15, 0.06, 0.03, 0.01, 0.001 bits for k = 1, 2, 3, 4, 5, 8). The window of
``positive_window`` = 8 inputs is the positive control: it must meet the target, or the target is out of reach of
any short-memory predictor and the test cannot decide.

Verdict rule (thresholds in ``Config``, fixed before the runs):

- setting: KL(Bayes || p_nc) >= ``context_ratio`` x ``target_kl`` on the held-out sequences;
- positive control: KL(Bayes || window-8 filter) <= ``target_kl``;
- improvement (the review's "> 2σ", on the paired differences as the issue asks): mean d > ``sigmas`` x sd(d);
- posterior tracked: mean KL(Bayes || trained) <= ``target_kl`` (the fraction of the gap closed is then at least
  1 - target / KL(init), about 97%; at 5-8% of the gap the posterior part is never "met").

If the setting or the positive control fails the test cannot decide: PARTIAL, saying so. Otherwise PARTIAL if the
improvement and the target both hold (the posterior half of the skeptic's test is met; the manifold half is not
tested here, so SUPPORTED is not reachable), and REFUTED if either fails (the skeptic's rule: one failing half
refutes the sculpting claim).

Caveat: the head has no positional information. Its output at t depends on x_t and on the unordered set of the
earlier inputs (permuting x_1..x_{t-1} leaves it unchanged), while the filter needs their order (x_{t-1} first of
all). So it cannot tell which earlier input came last; how far a well-trained head gets is not measured here
(exploratory, quick size, seed 0: trained with Adam, lr 0.01, 1000 steps, on one sequence or on eight pooled, it
memorised them; held-out KL ended above its initial value).
"""

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from implicit_em.audit.core import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    pyplot,
    torch_threads,
)
from implicit_em.audit.testbeds import one_head
from implicit_em.audit.testbeds.one_head import (
    kl_own,
    kl_runs,
    no_context_posterior,
    single_head_logits,
    stack_inits,
    train_runs,
    window_posterior,
)
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.tasks import StickyMarkovTask

__all__ = [
    "EXPERIMENT",
    "Config",
    "no_context_posterior",
    "paired_metrics",
    "run",
    "single_head_logits",
    "window_posterior",
]

PAPER_STAY, PAPER_NOISE = 0.3, 1.0  # Agarwal, Dalal & Misra, arXiv 2512.22473: the paper's chain


@dataclass(frozen=True)
class Config:
    """The paper's head and optimiser on a stickier, noisier chain; thresholds fixed before the runs."""

    seed: int = 0  # the chain's means (means_seed), the sequences and the initialisations
    # setting (module docstring: chosen from the exact posterior before training)
    stay: float = one_head.STAY  # paper: 0.3, where the no-context predictor is < 0.012 bits from Bayes at any noise
    noise: float = one_head.NOISE  # paper: 1; the largest KL(Bayes || no-context) of the scan at stay 0.8 (0.40 bits)
    scale_inputs: bool = True  # the model reads x / noise: the paper's unit noise around means shrunk by 1/noise
    length: int = 250  # T of every training and held-out sequence (paper: 2000; each run costs T^2)
    n_inits: int = 6
    n_sequences: int = 2
    n_heldout: int = 2
    # the paper's optimiser and initialisation (Agarwal, Dalal & Misra, arXiv 2512.22473)
    steps: int = one_head.SGD_STEPS
    lr: float = one_head.SGD_LR
    init_std: float = one_head.INIT_STD
    # exact controls: windowed Bayes filters over the last k inputs (k = 1 is the no-context predictor)
    windows: tuple[int, ...] = (2, 4, 8)
    positive_window: int = 8  # the positive control: a filter over 8 inputs must meet the target
    # verdict thresholds
    target_kl: float = 0.03  # bits; "tracks the posterior" as in bayes_necessity (0.028-0.045 bits there)
    context_ratio: float = 10.0  # issue 10: the no-context predictor >= 10x further from Bayes than the target
    sigmas: float = 2.0  # the review's "improve over a random-initialization baseline by >2σ" (paired σ)
    log_every: int = 50

    @classmethod
    def quick(cls) -> "Config":
        """6 initialisations x 2 training sequences of T = 250 (12 paired runs), 2 held-out sequences."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """10 initialisations x 3 training sequences of T = 500 (30 paired runs), 4 held-out sequences."""
        return cls(length=500, n_inits=10, n_sequences=3, n_heldout=4)


def _sd(x: Tensor) -> float:
    return float(x.std(unbiased=True)) if x.numel() > 1 else 0.0


def paired_metrics(kl_init: Tensor, kl_trained: Tensor) -> dict[str, float]:
    """Paired statistics from per-run KLs (R,): d = init - trained, its mean, sd and se, and the gap closed."""
    d = kl_init - kl_trained
    sd = _sd(d)
    closed = d / kl_init
    return {
        "kl_init_mean": float(kl_init.mean()),
        "kl_trained_mean": float(kl_trained.mean()),
        "kl_trained_sd": _sd(kl_trained),
        "d_mean": float(d.mean()),
        "d_sd": sd,
        "d_se": sd / math.sqrt(d.numel()),
        "d_in_sd": float(d.mean()) / sd if sd > 0 else math.copysign(math.inf, float(d.mean())),
        "gap_closed": float(d.mean()) / float(kl_init.mean()),
        "gap_closed_min": float(closed.min()),
        "gap_closed_max": float(closed.max()),
        "n_runs": float(d.numel()),
    }


def _criteria(m: dict[str, float], cfg: Config) -> list[Criterion]:
    """Setting check, positive control, the paired > 2σ improvement, the posterior target (module docstring)."""
    return [
        criterion("KL(Bayes || no-context) / target_kl", m["kl_no_context"] / cfg.target_kl, ">=", cfg.context_ratio),
        criterion(
            f"KL(Bayes || window-{cfg.positive_window} filter), bits", m["kl_positive_control"], "<=", cfg.target_kl
        ),
        criterion("mean paired improvement d = KL(init) - KL(trained), bits", m["d_mean"], ">", cfg.sigmas * m["d_sd"]),
        criterion("KL(Bayes || trained), bits", m["kl_trained_mean"], "<=", cfg.target_kl),
    ]


def _decide(m: dict[str, float], cfg: Config) -> tuple[Verdict, str]:
    setting, positive, improved, tracked = _criteria(m, cfg)
    numbers = (
        f"KL(Bayes || model) on held-out sequences {m['kl_init_mean']:.4f} bits at random initialisation, "
        f"{m['kl_trained_mean']:.4f} after the paper's training (target {cfg.target_kl:g}; no-context predictor "
        f"{m['kl_no_context']:.3f}, window-{cfg.positive_window} filter {m['kl_positive_control']:.4f}); paired "
        f"improvement {m['d_mean']:.4f} ± {m['d_sd']:.4f} bits (mean ± sd over {m['n_runs']:.0f} runs, "
        f"{m['d_in_sd']:.2f}σ; se {m['d_se']:.4f}), {100 * m['gap_closed']:.1f}% of the gap to the posterior"
    )
    if not (setting.passed and positive.passed):
        return "PARTIAL", (
            f"Undecided: the setting cannot separate posterior tracking from a single-token classifier (no-context "
            f"{m['kl_no_context']:.3f} bits, need >= {cfg.context_ratio:g} x {cfg.target_kl:g}; window-"
            f"{cfg.positive_window} filter {m['kl_positive_control']:.4f}, need <= {cfg.target_kl:g}): {numbers}."
        )
    if improved.passed and tracked.passed:
        return "PARTIAL", f"Posterior part met: {numbers}. The manifold part is not tested here (sticky_manifold)."
    far = f"stays far from the posterior ({m['kl_trained_mean']:.3f} > {cfg.target_kl:g} bits)"
    if not improved.passed:
        why = f"does not improve by > {cfg.sigmas:g}σ of the paired differences" + (
            "" if tracked.passed else f" and {far}"
        )
    else:
        why = f"improves by > {cfg.sigmas:g}σ but {far}"
    return "REFUTED", f"Posterior part not met: training {why}: {numbers}. The manifold part is not tested here."


def _figure(ctx: Context, init: Tensor, trained: Tensor, curves: Tensor, m: dict[str, float], cfg: Config) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    runs = list(range(init.numel()))
    ax.plot(runs, init.tolist(), "o", ms=4, label="random initialisation")
    ax.plot(runs, trained.tolist(), "s", ms=4, mfc="none", label=f"after SGD (lr {cfg.lr:g}, {cfg.steps} steps)")
    ax.axhline(m["kl_uniform"], color="0.5", ls=":", lw=1, label="uniform")
    for i, k in enumerate((1, *cfg.windows)):
        label = "no-context predictor (window 1)" if k == 1 else f"Bayes filter over the last {k} inputs"
        ax.axhline(m[f"kl_window_{k}"], color=f"C{i + 2}", ls="--", lw=1, label=label, zorder=3)
    ax.axhline(cfg.target_kl, color="k", lw=2, alpha=0.4, label=f"target {cfg.target_kl:g} bits", zorder=2)
    ax.set_yscale("log")
    ax.set(xlabel="run (initialisation x training sequence)", ylabel="KL(Bayes ‖ predictor), bits (held out)",
           title=f"Posterior error (stay {cfg.stay:g}, noise {cfg.noise:g})")  # fmt: skip
    ax.legend(fontsize=7, loc="lower left", framealpha=0.9)
    ax = axes[1]
    steps = [min(i * cfg.log_every, cfg.steps - 1) for i in range(curves.shape[0])]
    for r in range(curves.shape[1]):
        ax.plot(steps, curves[:, r].tolist(), color="C1", lw=0.7, alpha=0.7)
    ax.axhline(math.log(8), color="0.5", ls=":", label="log 8 (uniform)")
    ax.axhline(m["no_context_train_loss"], color="C2", ls="--", lw=1, label="no-context predictor")
    ax.axhline(m["bayes_train_loss"], color="k", ls="--", lw=1, label="Bayes predictive")
    ax.set(xlabel="SGD step", ylabel="training cross-entropy (nats)", title="Training loss, every run")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return ctx.save_figure(fig, "sticky_sculpting", dpi=100)


def _cross_entropy(p: Tensor, y: Tensor) -> float:
    """Mean -log p(y_t) in nats of a predictive (..., T, C) on targets (..., T)."""
    return float(-p.gather(-1, y[..., None]).log().mean())


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(1):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    task = StickyMarkovTask(length=cfg.length, stay=cfg.stay, noise=cfg.noise, means_seed=cfg.seed)
    base = 1_000 * cfg.seed
    train_seqs = [task.sample(torch.Generator().manual_seed(base + 100 + s)) for s in range(cfg.n_sequences)]
    held = [task.sample(torch.Generator().manual_seed(base + 500 + h)) for h in range(cfg.n_heldout)]
    scale = cfg.noise if cfg.scale_inputs else 1.0
    x_held = torch.stack([s.inputs for s in held]) / scale  # (H, T, D): what the model reads
    post_held = torch.stack([s.posterior for s in held])  # (H, T, C)

    x_train = torch.stack([s.inputs.float() for s in train_seqs]).repeat(cfg.n_inits, 1, 1) / scale  # (R, T, D)
    y_train = torch.stack([s.targets for s in train_seqs]).repeat(cfg.n_inits, 1)  # (R, T); run r = i * S + s
    params = stack_inits([base + i for i in range(cfg.n_inits)], cfg.n_sequences, cfg.init_std)
    kl_init = kl_runs(params, x_held, post_held)
    kl_train_seq_init = kl_own(params, x_train, train_seqs, cfg.n_inits)
    curves = train_runs(params, x_train, y_train, cfg.lr, cfg.steps, cfg.log_every)
    kl_trained = kl_runs(params, x_held, post_held)
    kl_train_seq = kl_own(params, x_train, train_seqs, cfg.n_inits)

    m: dict[str, float] = {"kl_uniform": float(kl_bits(post_held, torch.full_like(post_held, 0.125)).mean())}
    m["kl_no_context"] = float(kl_bits(post_held, torch.stack([no_context_posterior(task, s) for s in held])).mean())
    for k in sorted({1, cfg.positive_window, *cfg.windows}):
        windowed = torch.stack([window_posterior(task, s, k) for s in held])
        m[f"kl_window_{k}"] = float(kl_bits(post_held, windowed).mean())
    m["kl_positive_control"] = m[f"kl_window_{cfg.positive_window}"]
    m.update(paired_metrics(kl_init, kl_trained))
    m["context_free_ceiling"] = 1.0 - m["kl_no_context"] / m["kl_init_mean"]  # most of the gap x_t alone can close
    m["target_gap_closed"] = 1.0 - cfg.target_kl / m["kl_init_mean"]
    # the old rule, σ = the spread of the random-init KL over initialisations, on these runs
    m["old_rule_sigma"] = _sd(kl_init.reshape(cfg.n_inits, cfg.n_sequences)[:, 0])
    m["old_rule_in_sigma"] = m["d_mean"] / m["old_rule_sigma"] if m["old_rule_sigma"] > 0 else math.inf
    m["old_rule_passed"] = float(m["d_mean"] > cfg.sigmas * m["old_rule_sigma"])
    m["bayes_train_loss"] = sum(_cross_entropy(s.posterior, s.targets) for s in train_seqs) / cfg.n_sequences
    m["no_context_train_loss"] = sum(
        _cross_entropy(no_context_posterior(task, s), s.targets) for s in train_seqs
    ) / cfg.n_sequences  # fmt: skip
    m["kl_training_sequence_init_mean"] = float(kl_train_seq_init.mean())
    m["kl_training_sequence_trained_mean"] = float(kl_train_seq.mean())
    m["initial_train_loss_mean"] = float(curves[0].mean())
    m["final_train_loss_mean"] = float(curves[-1].mean())
    # the paper's chain, exactly (no training): how much context it needs
    paper = StickyMarkovTask(length=2000, stay=PAPER_STAY, noise=PAPER_NOISE, means_seed=cfg.seed)
    paper_seq = paper.sample(torch.Generator().manual_seed(base + 900))
    m["paper_setting_kl_no_context"] = float(
        kl_bits(paper_seq.posterior, no_context_posterior(paper, paper_seq)).mean()
    )
    m["paper_setting_kl_uniform"] = float(
        kl_bits(paper_seq.posterior, torch.full_like(paper_seq.posterior, 0.125)).mean()
    )

    verdict, summary = _decide(m, cfg)
    figure = _figure(ctx, kl_init, kl_trained, curves, m, cfg)
    metrics: dict[str, Any] = {
        **m,
        "kl_init_per_run": kl_init.tolist(),
        "kl_trained_per_run": kl_trained.tolist(),
        "d_per_run": (kl_init - kl_trained).tolist(),
        "n_inits": cfg.n_inits,
        "n_sequences": cfg.n_sequences,
        "manifold_angle_part": "not tested here (experiment sticky_manifold)",
        "wall_s": time.perf_counter() - start,
    }
    ladder = ", ".join(f"{m[f'kl_window_{k}']:.4f}" for k in sorted({1, cfg.positive_window, *cfg.windows}))
    windows = ", ".join(str(k) for k in sorted({1, cfg.positive_window, *cfg.windows}))
    scaling = "The model reads x / noise: the paper's unit noise around means shrunk by 1/noise. "
    details = (
        f"Setting: stay {cfg.stay:g}, noise {cfg.noise:g} (paper: {PAPER_STAY:g}, {PAPER_NOISE:g}), chosen from the "
        f"exact posterior before training so that the no-context predictor is >= {cfg.context_ratio:g}x further "
        f"from Bayes than the {cfg.target_kl:g}-bit target; on the held-out sequences it is {m['kl_no_context']:.3f} "
        f"bits ({m['kl_no_context'] / cfg.target_kl:.0f}x), the uniform predictor {m['kl_uniform']:.3f}. At the "
        f"paper's setting the no-context predictor is {m['paper_setting_kl_no_context']:.4f} bits from Bayes (uniform "
        f"{m['paper_setting_kl_uniform']:.3f}): there the task needs almost no context. "
        f"{scaling if cfg.scale_inputs else ''}"
        f"{cfg.n_inits} initialisations x {cfg.n_sequences} training sequences of T = {cfg.length}, each run "
        f"evaluated on the same {cfg.n_heldout} held-out sequences; the paper's full-batch SGD, lr {cfg.lr:g}, "
        f"{cfg.steps} steps: training loss {m['initial_train_loss_mean']:.3f} -> {m['final_train_loss_mean']:.3f} "
        f"nats (log 8 = {math.log(8):.3f}; the no-context predictor {m['no_context_train_loss']:.3f}, Bayes "
        f"{m['bayes_train_loss']:.3f}). On the training sequences themselves KL(Bayes || model) goes "
        f"{m['kl_training_sequence_init_mean']:.4f} -> {m['kl_training_sequence_trained_mean']:.4f} bits. "
        f"Paired differences d = KL(init) - KL(trained) (held out): mean {m['d_mean']:.4f} bits, "
        f"sd {m['d_sd']:.4f}, se {m['d_se']:.4f}; per-run gap closed {100 * m['gap_closed_min']:.1f}% to "
        f"{100 * m['gap_closed_max']:.1f}%. Reaching the target means closing {100 * m['target_gap_closed']:.0f}% of "
        f"the gap; a context-free predictor can close at most {100 * m['context_free_ceiling']:.0f}%. Exact "
        f"controls, windowed Bayes filters over the last k = {windows} inputs: {ladder} bits (k = 1 is the no-context "
        f"predictor; k = {cfg.positive_window} is the positive control). The old rule (σ = spread of the random-init "
        f"KL over initialisations, {m['old_rule_sigma']:.4f} bits) gives {m['old_rule_in_sigma']:.1f}σ "
        f"({'pass' if m['old_rule_passed'] else 'fail'}). The head has no positional information: its output at t "
        "depends on x_t and the unordered set of earlier inputs, so it cannot tell which earlier input came last, "
        "the one the filter weighs most; how far a well-trained head gets is not measured. The manifold half of the "
        "skeptic's test (principal angles against the companion's manifold basis) is not tested here; it is the "
        "separate experiment sticky_manifold."
    )
    return Result(verdict, summary, metrics, _criteria(m, cfg), [figure], details)


EXPERIMENT = Experiment(
    name="sticky_sculpting",
    title="Sticky Markov chain: does training bring the head to the Bayes posterior, beyond its random init?",
    claim=(
        "the central claim that these dynamics 'sculpt the low-dimensional manifolds identified in our companion "
        "work' is supported only by qualitative specialization in the sticky Markov-chain simulations (§4)."
    ),
    source=(
        "review-gradient-dynamics-of-attention: skeptic's load-bearing attack and concrete test, posterior "
        "half (arXiv 2512.22473 §4.2)"
    ),
    Config=Config,
    run=run,
)
