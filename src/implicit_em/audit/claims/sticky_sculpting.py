r"""Does training on the sticky Markov chain bring the model to the Bayes posterior? The skeptic's test, posterior half.

Claim (review of arXiv 2512.22473, "Gradient Dynamics of Attention"): the paper says the attention dynamics
"sculpt the low-dimensional manifolds identified in our companion work", supported only by qualitative
specialisation in the sticky Markov-chain simulations (its §4). The skeptic's test: re-run the sticky chain, compute
"the average posterior approximation error (KL(posterior || true Bayesian update))" and the principal angles of the
value space to the companion's manifold basis; "if either quantity fails to improve over a random-initialization
baseline by >2σ, the sculpting claim does not hold". This is the KL half; the angles are ``sticky_manifold``.

Deciding arm (docs/claims/sticky_sculpting.md: the derivation, the pilot, the history): the shared sticky testbed
(a model class that can represent the filter) with ``sticky_manifold``'s testbed, inits, controls and held-out
windows exactly, so both claims read the same cached fits; each init is compared with itself at random init.

Rule: tests: mean d > ``sigmas`` x sd(d), d = KL(init) - KL(trained) over inits (the skeptic's rule), and every
init tracks (KL <= ``track_fraction`` x the no-context KL, the testbed's bar). PARTIAL if both hold (the posterior
half; SUPPORTED is not reachable here), REFUTED if either fails. Gates (UNDECIDED if one fails): the setting needs
context (no-context KL >= ``context_ratio`` x ``target_kl``), the exact window-``positive_window`` Bayes filter
meets the bar, every init has plateaued, and the other-window-label control fails the tracking test. Reported: the
companion's one head (no positions; the paper's SGD) and its best fit in its class against the 0.03-bit target.
"""

import dataclasses
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.audit import seeds
from implicit_em.audit.core import Comparison, Context, Criterion, Experiment, Result, Role, Verdict, criterion, gated
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import one_head as oh
from implicit_em.audit.testbeds import sticky_fits
from implicit_em.audit.testbeds.measured import Measured
from implicit_em.audit.testbeds.sticky_manifold import shared_design
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.sticky import StickyTestbed, forward_filter, plateau_drop
from implicit_em.windtunnel.tasks import StickyMarkovTask

__all__ = [
    "EXPERIMENT",
    "Chain",
    "Config",
    "OneHead",
    "Rule",
    "Sticky",
    "Training",
    "criteria",
    "details",
    "figures",
    "measure",
    "paired_metrics",
    "run",
    "sticky_window_posterior",
    "summary",
    "verdict",
]

PAPER_STAY, PAPER_NOISE = 0.3, 1.0  # Agarwal, Dalal & Misra, arXiv 2512.22473: the paper's chain


@dataclass(frozen=True)
class Sticky:
    """The deciding arm: ``sticky_manifold``'s testbed, budget, inits, controls and gates, exactly (the same fits)."""

    steps: int = 2000  # StickyTestbed()'s quick budget (3,000 full)
    n_inits: int = 3  # paired inits, each with its own stream (sticky_manifold's)
    n_shuffled: int = 1  # other-window-label controls, from the first inits
    eval_size: int = 256  # held-out windows of the seed
    track_fraction: float = 0.1  # the testbed's tracking bar: KL <= 0.1 x the no-context KL (test 2)
    plateau_window: float = 0.2  # the testbed's plateau gate: the last fifth of the checkpoints ...
    plateau_tol: float = 0.25  # ... lowers the KL by at most a quarter of the tracking bar


@dataclass(frozen=True)
class Chain:
    """The one head's sticky chain (reported arm; chosen from the exact posterior, the page)."""

    stay: float = oh.STAY  # paper: 0.3, where the no-context predictor is < 0.012 bits from Bayes at any noise
    noise: float = oh.NOISE  # paper: 1; the largest KL(Bayes || no-context) of the scan at stay 0.8 (0.40 bits)
    scale_inputs: bool = True  # the model reads x / noise: the paper's unit noise around means shrunk by 1/noise
    length: int = 250  # T of every training and held-out sequence (paper: 2000; each run costs T^2)


@dataclass(frozen=True)
class Training:
    """The paper's optimiser and initialisation for the one head (Agarwal, Dalal & Misra, arXiv 2512.22473)."""

    steps: int = oh.SGD_STEPS
    lr: float = oh.SGD_LR
    init_std: float = oh.INIT_STD


@dataclass(frozen=True)
class OneHead:
    """The one head's sizes and its best fit within its class (Adam on the exact posterior, soft targets)."""

    n_inits: int = 6  # random initialisations, each trained on every training sequence
    n_sequences: int = 2  # training sequences (same chain and means, fresh draws)
    n_heldout: int = 2  # held-out sequences every run is evaluated on
    fit_steps: int = 300  # best fit: Adam steps on the held-out sequences' exact posterior (pilot: 1,000 gain < 0.01)
    fit_lr: float = 0.03


@dataclass(frozen=True)
class Rule:
    """The verdict's thresholds, fixed before the runs (the tracking bar is ``Sticky.track_fraction``)."""

    target_kl: float = 0.03  # bits: the one head's target; and the context gate's unit (bayes_necessity's 0.028-0.045)
    context_ratio: float = 10.0  # the no-context predictor >= 10 x target_kl from Bayes (the setting needs context)
    sigmas: float = 2.0  # the review's "improve over a random-initialization baseline by >2σ" (paired σ)
    windows: tuple[int, ...] = (2, 4, 8)  # exact controls: Bayes filters over the last k inputs (k = 1: no context)
    positive_window: int = 8  # the positive control: a filter over 8 inputs must meet the bar


@dataclass(frozen=True)
class Config:
    """The deciding testbed, the reported one head, and the thresholds, fixed before the deciding runs."""

    seed: int = 0  # the testbed's means, inits and streams; the one head's means, sequences and inits
    sticky: Sticky = field(default_factory=Sticky)
    rule: Rule = field(default_factory=Rule)
    chain: Chain = field(default_factory=Chain)
    training: Training = field(default_factory=Training)
    onehead: OneHead = field(default_factory=OneHead)

    @classmethod
    def quick(cls) -> "Config":
        """Testbed: 3 inits and 1 control at 2,000 steps; one head: 6 inits x 2 sequences of T = 250."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """Testbed: 5 inits and 2 controls at 3,000 steps; one head: 10 inits x 3 sequences of T = 500, 4 held out."""
        return cls(
            sticky=Sticky(steps=StickyTestbed.full().steps, n_inits=5, n_shuffled=2),
            chain=Chain(length=500),
            onehead=OneHead(n_inits=10, n_sequences=3, n_heldout=4),
        )

    def testbed(self) -> StickyTestbed:
        """The testbed: the recipe's defaults, the seed's means, this budget and these gates (sticky_manifold's)."""
        s = self.sticky
        return dataclasses.replace(
            StickyTestbed(), means_seed=self.seed, steps=s.steps, eval_size=s.eval_size,
            track_fraction=s.track_fraction, plateau_window=s.plateau_window, plateau_tol=s.plateau_tol,
        )  # fmt: skip

    def ladder(self) -> list[int]:
        """The windows of the exact controls, k = 1 (no context) first."""
        return sorted({1, self.rule.positive_window, *self.rule.windows})


def _sd(x: Tensor) -> float:
    return float(x.std(unbiased=True)) if x.numel() > 1 else 0.0  # torch's std: not bitwise stats.sd (numpy)


def paired_metrics(kl_init: Tensor, kl_trained: Tensor) -> dict[str, float]:
    """Paired statistics from per-run KLs (R,): d = init - trained, its mean, sd and se, and the gap closed."""
    d = kl_init - kl_trained
    sd = _sd(d)
    return {
        "kl_init_mean": float(kl_init.mean()),
        "kl_trained_mean": float(kl_trained.mean()),
        "kl_trained_max": float(kl_trained.max()),
        "d_mean": float(d.mean()),
        "d_sd": sd,
        "d_se": sd / math.sqrt(d.numel()),
        "d_in_sd": float(d.mean()) / sd if sd > 0 else math.copysign(math.inf, float(d.mean())),
        "gap_closed": float(d.mean()) / float(kl_init.mean()),
        "n_runs": float(d.numel()),
    }


_PAIRED = {
    "kl_init_mean": ("bits", "KL(Bayes ‖ model) at random init, mean (held out)"),
    "kl_trained_mean": ("bits", "KL(Bayes ‖ model) after training, mean (held out)"),
    "kl_trained_max": ("bits", "KL(Bayes ‖ model) after training, worst run (held out)"),
    "d_mean": ("bits", "paired improvement d = KL(init) − KL(trained), mean"),
    "d_sd": ("bits", "paired improvement d, SD (the rule's σ)"),
    "d_se": ("bits", "paired improvement d, standard error"),
    "d_in_sd": ("SDs", "paired improvement d, mean / SD"),
    "gap_closed": ("fraction", "share of the gap to the posterior closed (mean d / mean KL at init)"),
    "n_runs": ("count", "paired runs"),
}


def _put_paired(m: Metrics, prefix: str, what: str, kl_init: Tensor, kl_trained: Tensor) -> None:
    for key, value in paired_metrics(kl_init, kl_trained).items():
        m.put(f"{prefix}{key}", value, _PAIRED[key][0], f"{what}: {_PAIRED[key][1]}")
    m.put(f"{prefix}kl_init_per_run", kl_init.tolist(), "bits", f"{what}: KL(Bayes ‖ model) at init, per run")
    m.put(f"{prefix}kl_trained_per_run", kl_trained.tolist(), "bits", f"{what}: KL(Bayes ‖ model) trained, per run")


def sticky_window_posterior(tb: StickyTestbed, x: Tensor, k: int) -> Tensor:
    """The testbed's Bayes predictive from the last ``k`` inputs only, (B, T, C) float64: the forward filter over
    x_{t-k+1..t} from a uniform prior, times A (a flat likelihood before the window's start changes nothing: A is
    doubly stochastic). ``k = 1`` is the no-context predictor; ``k >= T`` the full filter."""
    if k < 1:
        raise ValueError(f"the window must hold at least one input, got {k}")
    log_lik = tb.log_likelihood(x)  # (B, T, C)
    b, t, c = log_lik.shape
    padded = torch.cat([torch.zeros(b, k - 1, c, dtype=log_lik.dtype), log_lik], dim=1)
    windows = padded.unfold(1, k, 1).permute(0, 1, 3, 2).reshape(b * t, k, c)  # window t ends at input t
    return (forward_filter(windows, tb.transition)[:, -1] @ tb.transition).reshape(b, t, c)


def _testbed_fits(cfg: Config, ctx: Context, m: Metrics) -> dict[str, list]:
    """The deciding arm: every init at random init and trained (the shared cached fits), the controls, the exact
    predictors, all on the seed's held-out windows."""
    tb = cfg.testbed()
    held, inits, controls = shared_design(tb, cfg.seed, cfg.sticky.n_inits, cfg.sticky.n_shuffled)
    nc = m.put("kl_no_context", tb.no_context_kl_bits(held), "bits", "testbed: KL(Bayes ‖ no-context predictor)")
    m.put("tracking_bar", tb.tracking_bar(held), "bits", "testbed: tracking bar, track_fraction x no-context KL")
    m.put("plateau_bar", tb.plateau_bar(held), "bits", "testbed: plateau allowance, plateau_tol x the tracking bar")
    for k in cfg.ladder():
        m.put(f"kl_window_{k}", float(kl_bits(held.posterior, sticky_window_posterior(tb, held.x, k)).mean()),
              "bits", f"testbed: KL(Bayes ‖ Bayes filter over the last {k} inputs)")  # fmt: skip
    m.put("kl_positive_control", m[f"kl_window_{cfg.rule.positive_window}"], "bits",
          f"testbed, positive control: KL of the window-{cfg.rule.positive_window} filter")  # fmt: skip
    runs: dict[str, list] = {"init": [], "trained": [], "history": [], "steps": [], "drop": [], "control": []}
    for s in inits:
        runs["init"].append(tb.kl_bits(tb.model(s), held))
        _, res = sticky_fits.trained(ctx, tb, s, held)
        runs["trained"].append(res.kl_history[-1])
        runs["history"].append(res.kl_history)
        runs["steps"].append(res.steps)
        runs["drop"].append(plateau_drop(res.kl_history, tb.plateau_window))
    for s, bed in zip(inits, controls, strict=False):  # control i from init i
        _, res = sticky_fits.trained(ctx, bed, s, held)
        runs["control"].append(res.kl_history[-1])
        runs["history"].append(res.kl_history)
    m.put("track_ratio_max", max(runs["trained"]) / nc, "ratio", "testbed: worst init's KL / no-context KL")
    m.put("control_track_ratio_min", min(runs["control"]) / nc, "ratio",
          "testbed, other-window-label control: best control's KL / no-context KL")  # fmt: skip
    m.put("plateau_in_bars_max", max(d / m["plateau_bar"] if d == d else math.inf for d in runs["drop"]), "ratio",
          "testbed: worst init's last-fifth KL drop / plateau allowance")  # fmt: skip
    return runs


def _onehead_fit(cfg: Config, x: Tensor, post: Tensor) -> Tensor:
    """The head's best fit within its class: Adam on the exact posterior of ``x`` (H, T, D) itself (soft targets,
    every init at once), returning each init's KL on ``x`` in bits (R,): in-sample, so optimistic for any training."""
    o = cfg.onehead
    params = oh.stack_inits([seeds.derive(cfg.seed, "init", i) for i in range(o.n_inits)], 1, cfg.training.init_std)
    opt = torch.optim.Adam(list(params.values()), lr=o.fit_lr)
    target = post.float()[None]  # (1, H, T, C)
    for _ in range(o.fit_steps):
        logp = F.log_softmax(oh.single_head_logits({k: v[:, None] for k, v in params.items()}, x.float()[None]), -1)
        loss = -(target * logp).sum(-1).mean(dim=(1, 2))  # (R,): cross-entropy to the posterior = KL + const
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
    return oh.kl_runs(params, x, post)


def _onehead(cfg: Config, m: Metrics) -> None:
    """The reported one head: its chain's exact controls, the paper's SGD from random inits (paired, held out),
    its best fit within its class, and the paper's own chain (no training)."""
    c, o, t = cfg.chain, cfg.onehead, cfg.training
    task = StickyMarkovTask(length=c.length, stay=c.stay, noise=c.noise, means_seed=cfg.seed)
    train = [task.sample(seeds.torch_generator(cfg.seed, "train-sequence", s)) for s in range(o.n_sequences)]
    held = [task.sample(seeds.torch_generator(cfg.seed, "held-sequence", h)) for h in range(o.n_heldout)]
    scale = c.noise if c.scale_inputs else 1.0
    x_held, post = torch.stack([s.inputs for s in held]) / scale, torch.stack([s.posterior for s in held])
    m.put("onehead_kl_no_context", float(kl_bits(post, torch.stack([oh.no_context_posterior(task, s) for s in held]))
          .mean()), "bits", "one head's chain: KL(Bayes ‖ no-context predictor), held out")  # fmt: skip
    for k in (k for k in cfg.ladder() if k > 1):
        windowed = torch.stack([oh.window_posterior(task, s, k) for s in held])
        m.put(f"onehead_kl_window_{k}", float(kl_bits(post, windowed).mean()), "bits",
              f"one head's chain: KL(Bayes ‖ Bayes filter over the last {k} inputs), held out")  # fmt: skip
    x_train = torch.stack([s.inputs.float() for s in train]).repeat(o.n_inits, 1, 1) / scale  # run r = i * S + s
    y_train = torch.stack([s.targets for s in train]).repeat(o.n_inits, 1)
    params = oh.stack_inits([seeds.derive(cfg.seed, "init", i) for i in range(o.n_inits)], o.n_sequences, t.init_std)
    kl_init = oh.kl_runs(params, x_held, post)
    curves = oh.train_runs(params, x_train, y_train, t.lr, t.steps, max(1, t.steps // 20))
    _put_paired(m, "onehead_", "one head, paper's SGD", kl_init, oh.kl_runs(params, x_held, post))
    m.put("onehead_train_loss_final", float(curves[-1].mean()), "nats", "one head: training cross-entropy at the end")
    fit = _onehead_fit(cfg, x_held, post)
    m.put("onehead_best_fit_kl", float(fit.min()), "bits",
          "one head, best fit in its class: min over inits of KL on the sequences it was fitted to")  # fmt: skip
    m.put("onehead_best_fit_per_run", fit.tolist(), "bits", "one head, best fit: KL per init (in-sample)")
    m.put("onehead_represents", bool(fit.min() <= cfg.rule.target_kl), "yes/no",
          "one head: its best fit meets the 0.03-bit target (else it cannot represent the filter)")  # fmt: skip
    old = m["onehead_d_mean"] > cfg.rule.sigmas * m["onehead_d_sd"]
    old = old and m["onehead_kl_trained_mean"] <= cfg.rule.target_kl
    m.put("onehead_old_rule", "PARTIAL" if old else "REFUTED", "verdict", "one head: the superseded rule's reading")
    paper = StickyMarkovTask(length=2000, stay=PAPER_STAY, noise=PAPER_NOISE, means_seed=cfg.seed)
    seq = paper.sample(seeds.torch_generator(cfg.seed, "paper-sequence"))
    m.put("paper_setting_kl_no_context", float(kl_bits(seq.posterior, oh.no_context_posterior(paper, seq)).mean()),
          "bits", "paper's chain (stay 0.3, noise 1): KL(Bayes ‖ no-context predictor)")  # fmt: skip


def measure(cfg: Config, ctx: Context) -> Measured:
    """The deciding testbed (shared fits), then the one head (reported); module docstring."""
    start = time.perf_counter()
    m = Measured()
    runs = _testbed_fits(cfg, ctx, m)
    kl_init, kl_trained = (torch.tensor(runs[k], dtype=torch.float64) for k in ("init", "trained"))
    _put_paired(m, "", "testbed", kl_init, kl_trained)
    m.put("d_per_run", (kl_init - kl_trained).tolist(), "bits", "testbed: paired improvement d, per init")
    m.put("control_kl_per_run", runs["control"], "bits", "testbed, other-window-label control: KL, per control")
    m.put("control_d_per_run", [runs["init"][i] - k for i, k in enumerate(runs["control"])], "bits",
          "testbed, control: KL(init) − KL(control), per control (its own init)")  # fmt: skip
    m.put("plateau_drop_per_run", runs["drop"], "bits", "testbed: last-fifth KL drop, per init")
    old = m["d_mean"] > cfg.rule.sigmas * m["d_sd"] and m["kl_trained_mean"] <= cfg.rule.target_kl
    m.put("old_target_verdict", "PARTIAL" if old else "REFUTED", "verdict",
          "testbed: the verdict with the superseded 0.03-bit target in place of the bar, reported")  # fmt: skip
    m.drawn.update(runs)
    _onehead(cfg, m)
    m.put("wall_s", time.perf_counter() - start, "s", "wall time of the measurement")
    return m


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """Gates: context, positive control, plateau, the control fails; tests: the paired > 2σ gain, tracking."""
    r, frac, k = cfg.rule, cfg.sticky.track_fraction, cfg.rule.positive_window
    rows: list[tuple[Role, str, float, Comparison, float]] = [
        ("gate", "testbed: KL(Bayes || no-context) / target_kl (the setting needs context)",
         m["kl_no_context"] / r.target_kl, ">=", r.context_ratio),
        ("gate", f"testbed: KL(Bayes || window-{k} filter), bits (the positive control meets the bar)",
         m["kl_positive_control"], "<=", m["tracking_bar"]),
        ("gate", "testbed: max over inits of the last-fifth KL drop / plateau allowance",
         m["plateau_in_bars_max"], "<=", 1.0),
        ("gate", "other-window-label control: min KL / no-context KL (it fails the tracking test)",
         m["control_track_ratio_min"], ">", frac),
        ("test", "testbed: mean paired improvement d = KL(init) - KL(trained), bits", m["d_mean"], ">",
         r.sigmas * m["d_sd"]),
        ("test", "testbed: max over inits of KL(trained) / KL(no-context)", m["track_ratio_max"], "<=", frac),
    ]  # fmt: skip
    return [criterion(name, value, op, thr, role=role) for role, name, value, op, thr in rows]


def verdict(cfg: Config, m: Metrics, crit: list[Criterion]) -> Verdict:
    """PARTIAL if both tests hold (the posterior half met), REFUTED if either fails; UNDECIDED if a gate fails."""
    improved, tracked = (c for c in crit if c.role == "test")
    return gated("PARTIAL" if improved.passed and tracked.passed else "REFUTED", crit)


def summary(cfg: Config, m: Metrics, v: Verdict) -> str:
    frac = cfg.sticky.track_fraction
    numbers = (
        f"on the shared sticky testbed ({m['n_runs']:.0f} inits) KL(Bayes || model) {m['kl_init_mean']:.3f} bits at "
        f"random init, {m['kl_trained_mean']:.4f} trained (worst {m['kl_trained_max']:.4f}, {m['track_ratio_max']:.3f} "
        f"of the no-context {m['kl_no_context']:.3f}; bar {frac:g}); paired improvement {m['d_mean']:.4f} ± "
        f"{m['d_sd']:.4f} bits ({m['d_in_sd']:.1f}σ); the other-window-label control {m['control_track_ratio_min']:.2f}"
        f" of no-context; the one head (reported) {m['onehead_kl_trained_mean']:.3f} bits after the paper's SGD, best"
        f" fit in its class {m['onehead_best_fit_kl']:.3f} (target {cfg.rule.target_kl:g}"
        f"{'' if m['onehead_represents'] else ': it cannot represent the filter'})"
    )
    if v == "UNDECIDED":
        failed = ", ".join(c.metric for c in criteria(cfg, m) if c.role == "gate" and not c.passed)
        return f"Undecided: a gate failed ({failed}), so the tests are not read: {numbers}."
    if v == "PARTIAL":
        return f"Posterior part met: {numbers}. The manifold part is sticky_manifold's."
    improved, tracked = (c.passed for c in criteria(cfg, m) if c.role == "test")
    why = [] if improved else [f"does not improve by > {cfg.rule.sigmas:g}σ of the paired differences"]
    why += [] if tracked else [f"does not reach the posterior ({m['track_ratio_max']:.3f} > {frac:g} of no-context)"]
    return f"Posterior part not met: training {' and '.join(why)}: {numbers}. The manifold part is not tested here."


def details(cfg: Config, m: Metrics) -> str:
    """The setting, the controls and the one head, in words (shown under the verdict)."""
    tb, r, c, t, o = cfg.testbed(), cfg.rule, cfg.chain, cfg.training, cfg.onehead

    def nums(key: str, f: str = ".4f") -> str:
        return ", ".join(f"{v:{f}}" for v in (m[key] if isinstance(m[key], list) else [m[key]]))

    return (
        f"Deciding arm, the shared sticky testbed (sticky_manifold's fits): stay {tb.stay:g}, noise {tb.noise:g}, T = "
        f"{tb.length}, a {tb.n_layers}-layer transformer with learned positions, labels sampled from the chain, Adam "
        f"lr {tb.lr:g} {tb.schedule}, {tb.steps} steps; {cfg.sticky.n_inits} inits, each against itself at random "
        f"init on the same {tb.eval_size} held-out windows: KL at init {nums('kl_init_per_run')}, trained "
        f"{nums('kl_trained_per_run')} bits. Exact controls, the Bayes filters over the "
        f"last k = {', '.join(map(str, cfg.ladder()))} inputs {', '.join(nums(f'kl_window_{k}') for k in cfg.ladder())}"
        f" bits (k = 1: no context; k = {r.positive_window}: the positive control; bar {m['tracking_bar']:.4f}). "
        f"Other-window-label control(s): KL {nums('control_kl_per_run', '.3f')} bits (d against their init "
        f"{nums('control_d_per_run', '+.3f')}). Worst last-fifth drop {m['plateau_in_bars_max']:.2f} of the "
        f"allowance. With the superseded target (mean KL <= {r.target_kl:g} bits) in place of the bar the rule reads "
        f"{m['old_target_verdict']}. One head (reported; no positions, no residual, no MLP): stay {c.stay:g}, noise "
        f"{c.noise:g} (paper {PAPER_STAY:g}, {PAPER_NOISE:g}, where no-context is "
        f"{m['paper_setting_kl_no_context']:.4f} bits from Bayes), {o.n_inits} inits x {o.n_sequences} sequences of "
        f"T = {c.length}; the paper's SGD (lr {t.lr:g}, {t.steps} steps): KL {m['onehead_kl_init_mean']:.3f} -> "
        f"{m['onehead_kl_trained_mean']:.3f} bits (d {m['onehead_d_mean']:.4f} ± {m['onehead_d_sd']:.4f}; training "
        f"loss {m['onehead_train_loss_final']:.3f} nats); no-context {m['onehead_kl_no_context']:.3f}, windows "
        f"{', '.join(nums(f'onehead_kl_window_{k}') for k in cfg.ladder() if k > 1)}; the superseded rule reads "
        f"{m['onehead_old_rule']}. Its best fit (Adam lr {o.fit_lr:g}, {o.fit_steps} steps on the exact posterior of "
        f"the held-out sequences themselves, best of {o.n_inits} inits) {m['onehead_best_fit_kl']:.3f} bits against "
        f"the {r.target_kl:g}-bit target: it {'reaches' if m['onehead_represents'] else 'cannot represent'} the filter."
    )


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """The testbed's per-init KL (init, trained, control) against the exact controls, its training histories, and
    the one head's runs with its best fit."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    for i, key in enumerate(("kl_init_per_run", "kl_trained_per_run", "control_kl_per_run")):
        ax.plot([i] * len(m[key]), m[key], "o^x"[i], ms=6)
    for j, k in enumerate(cfg.ladder()):
        ax.axhline(m[f"kl_window_{k}"], color=f"C{j + 2}", ls="--", lw=1, label=f"Bayes filter, last {k} inputs")
    ax.axhline(m["tracking_bar"], color="k", lw=2, alpha=0.4, label=f"bar: {cfg.sticky.track_fraction:g} × no-context")
    ax.set_xticks(range(3), ["random init", "trained", "other-window labels"], fontsize=8)
    ax.set(yscale="log", ylabel="KL(Bayes ‖ predictor), bits (held out)", title="Sticky testbed (deciding)")
    ax.legend(fontsize=7)
    ax = axes[1]
    n, labels = len(m["kl_trained_per_run"]), {0: "trained", len(m["kl_trained_per_run"]): "other-window labels"}
    for j, h in enumerate(m.drawn["history"]):
        ax.plot(m.drawn["steps"][0], h, color="C1" if j < n else "C2", lw=1, label=labels.get(j))
    ax.axhline(m["kl_no_context"], color="k", ls="--", lw=1, label="no-context predictor")
    ax.axhline(m["tracking_bar"], color="k", ls=":", lw=1, label="tracking bar")
    ax.set(yscale="log", xlabel="step", ylabel="held-out KL, bits", title="Sticky testbed: training (per init)")
    ax.legend(fontsize=7)
    ax = axes[2]
    for i, key in enumerate(("onehead_kl_init_per_run", "onehead_kl_trained_per_run", "onehead_best_fit_per_run")):
        ax.plot([i] * len(m[key]), m[key], "os^"[i], ms=5, mfc="none")
    ax.axhline(m["onehead_kl_no_context"], color="C2", ls="--", lw=1, label="no-context predictor")
    ax.axhline(cfg.rule.target_kl, color="k", lw=2, alpha=0.4, label=f"target {cfg.rule.target_kl:g} bits")
    ax.set_xticks(range(3), ["random init", "paper's SGD", "best fit"], fontsize=8)
    ax.set(yscale="log", ylabel="KL(Bayes ‖ head), bits", title="One head (reported, no positions)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [ctx.save_figure(fig, "sticky_sculpting", dpi=100)]


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), details(cfg, m))


EXPERIMENT = Experiment(
    name="sticky_sculpting",
    title="Sticky Markov chain: does training bring the model to the Bayes posterior, beyond its random init?",
    claim=(
        "the central claim that these dynamics 'sculpt the low-dimensional manifolds identified in our companion "
        "work' is supported only by qualitative specialization in the sticky Markov-chain simulations (§4)."
    ),
    source=(
        "review-gradient-dynamics-of-attention: skeptic's load-bearing attack and concrete test, posterior "
        "half (arXiv 2512.22473 §4.2); decided on the shared sticky testbed"
    ),
    Config=Config,
    run=run,
)
