r"""Is Bayesian structure a necessary consequence of the LSE objective? The independent-sigmoid control.

Claim (paper §1 and §1.3): the Bayesian behaviour of trained transformers (uncertainty tracking that matches the
exact posterior in the wind tunnels of Agarwal et al.) is "forced by the geometry of the loss rather than emergent",
a "necessary consequence" of log-sum-exp objectives. The referee (major comment 3) calls this an overclaim; paper
§6.1 supplies the control: with independent sigmoids "responsibilities do not exist".

Method. The bijection wind tunnel (without replacement, exact posterior, bits). Five parameter-matched models, same
data stream, optimiser and steps, over ``n_seeds`` training seeds: the causal transformer with softmax CE
(``softmax``); the same with independent per-class sigmoid BCE (``sigmoid``: no partition function over the classes,
the softmax attention kept; its predictive is sigmoid(z) renormalised); the prefix MLP with softmax CE
(``prefix_mlp``, context without attention) and with BCE (``prefix_mlp_sigmoid``, no softmax anywhere; reported);
the token MLP (``token_mlp``, no context: the no-context floor by construction; the negative control, first
``token_mlp_seeds`` seeds only). Measured: entropy MAE and KL(Bayes || model), seed means and ranges, the MAE at 3/4
of the steps, and on the first seed the output objective's gradient structure (testbeds.unnormalised.law_checks).
KL is needed besides the MAE: the Bayes entropy depends on the position alone, so matching entropies is not tracking.

Rule (thresholds in ``Config``). A model tracks the posterior if its MAE and KL are both <= ``learned_fraction`` x
the no-context floor; the sigmoid transformer is as good as softmax if both are <= ``ratio_tol`` x softmax's.
REFUTED if the sigmoid transformer tracks and is as good as softmax (or softmax fails where it succeeds); SUPPORTED
if softmax tracks and sigmoid does not; PARTIAL if both track but sigmoid is clearly worse; UNDECIDED if neither
tracks. Gates (UNDECIDED when one fails): the sigmoid objective breaks the law at initialisation (mean
|sum_c dl/dz_c| >= ``min_init_grad_sum``) and the token MLP does not pass the tracking bar. Identities (reported, a
failure raises): the BCE cross-class Hessian is exactly 0 and softmax CE's gradient sums to 0. History:
docs/claims/bayes_necessity.md.
"""

import dataclasses
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from implicit_em.audit import seeds, stats
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gate, gated, identity
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds.unnormalised import Network, law_checks, train_and_load
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.tasks import BijectionTask

__all__ = ["EXPERIMENT", "RUNS", "Config", "criteria", "details", "figures", "measure", "run", "summary", "verdict"]

# (name, wind-tunnel model, loss), in the report's order
RUNS = (
    ("softmax", "transformer", "softmax"),
    ("sigmoid", "transformer", "sigmoid"),
    ("prefix_mlp", "prefix_mlp", "softmax"),
    ("prefix_mlp_sigmoid", "prefix_mlp", "sigmoid"),
    ("token_mlp", "mlp", "softmax"),
)
LABELS = {
    "softmax": "transformer, softmax CE",
    "sigmoid": "transformer, sigmoid BCE",
    "prefix_mlp": "prefix MLP, softmax CE",
    "prefix_mlp_sigmoid": "prefix MLP, sigmoid BCE",
    "token_mlp": "token MLP (no context)",
}
_LAW_STATS = {  # law_checks' keys: (unit, words)
    "grad_sum_mean": ("absolute", "mean |Σ_c ∂ℓ/∂z_c| over positions"),
    "grad_sum_max": ("absolute", "max |Σ_c ∂ℓ/∂z_c| over positions"),
    "law_residual": ("absolute", "max |∂ℓ/∂d − (t − softmax(z))|"),
    "hessian_offdiag_max": ("absolute", "max |∂²ℓ/∂z_j∂z_k|, j ≠ k"),
}


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_seeds: int = 1  # training seeds, each an independent data stream
    n_symbols: int = 6  # V; L = V - 1 key-value pairs
    network: Network = field(default_factory=Network)
    steps: int = 1200
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    eval_size: int = 512
    token_mlp_seeds: int = 1  # the no-context control is the floor by construction: its first seed(s) only
    device: str = "cpu"
    n_hessian_rows: int = 16  # rows on which the cross-class Hessian is computed exactly
    # "tracks the posterior": MAE and KL <= learned_fraction x the no-context floor. Paper §5.3 (and companion
    # notes §A): small transformers match the posterior "to within 1e-3 - 1e-4 bits, while capacity-matched MLPs
    # fail catastrophically"; one order of magnitude below the no-context floor is the weakest reading of tracking.
    learned_fraction: float = 0.1
    # "as good as": MAE_sigmoid <= ratio_tol x MAE_softmax and KL_sigmoid <= ratio_tol x KL_softmax. Companion
    # notes §A: reports of the same architecture and loss differ by 2.3x (3e-3 vs 7e-3 bits), so a factor 2 lies
    # inside the spread of reruns of one recipe; removing a *necessary* ingredient should cost far more.
    ratio_tol: float = 2.0
    # the sigmoid control must break sum_c dl/dz_c = 0 at least this much at initialisation (it is about V/2 - 1)
    min_init_grad_sum: float = 0.1
    softmax_sum_tol: float = 1e-12  # softmax CE's gradient sums to zero to this (float64 round-off)

    @classmethod
    def quick(cls) -> "Config":
        """V = 6, one layer, d_model 32, 1,200 steps, one training seed (the runner's seed)."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """V = 20 (the companion paper's setting) with the wind tunnel's quick architecture (2 layers, 4 heads,
        d_model 64), three training seeds, 8,000 steps at lr 3e-3 (about 30 minutes on one core, unloaded; a
        transformer step takes 28 ms, a prefix-MLP step 3 ms, a token-MLP step 19 ms)."""
        return cls(
            n_seeds=3, n_symbols=20, network=Network(n_layers=2, n_heads=4, d_model=64, d_ff=256), steps=8000,
            lr=3e-3, warmup_steps=200, eval_size=2048, device="auto",
        )  # fmt: skip


class _Measured(Metrics):
    """The metrics, and the first seed's per-position entropy curves the figure draws (not metrics: the record
    keeps the numbers the verdict and the summary read)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.curves: dict[str, list[float]] = {}


def _train_seeds(cfg: Config) -> list[int]:
    """The torch seeds of the training replicates: each seeds a model's initial weights and its batch stream."""
    return [seeds.derive(cfg.seed, "train", i) for i in range(cfg.n_seeds)]


def _windtunnel_config(cfg: Config, model: str, loss: str, replicate: int) -> WindTunnelConfig:
    """One model's wind-tunnel run at training replicate ``replicate`` (its own evaluation set too)."""
    net, seed, eval_seed = cfg.network, _train_seeds(cfg)[replicate], seeds.derive(cfg.seed, "eval", replicate)
    return WindTunnelConfig(
        task="bijection", n_symbols=cfg.n_symbols, model=model, loss=loss, n_layers=net.n_layers,
        n_heads=net.n_heads, d_model=net.d_model, d_ff=net.d_ff, steps=cfg.steps, batch_size=cfg.batch_size,
        lr=cfg.lr, warmup_steps=cfg.warmup_steps, seed=seed, eval_every=max(1, cfg.steps // 4),
        eval_size=cfg.eval_size, eval_seed=eval_seed, checkpoint_every=cfg.steps, device=cfg.device,
    )  # fmt: skip


def measure(cfg: Config, ctx: Context) -> Metrics:
    """Train every model at every training seed (the token MLP at its first seeds); the law checks and the
    entropy curves on the first seed."""
    train_seeds = _train_seeds(cfg)
    mae: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}
    kl: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}
    late: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}  # MAE at 3/4 of the steps: still learning?
    seconds: dict[str, float] = {name: 0.0 for name, _, _ in RUNS}
    m, sum_errors = _Measured(), []
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(train_seeds):
            for name, model_kind, loss in RUNS:
                if name == "token_mlp" and i >= cfg.token_mlp_seeds:
                    continue
                t0 = time.perf_counter()
                wcfg = _windtunnel_config(cfg, model_kind, loss, i)
                result, trained, initial = train_and_load(wcfg, Path(tmp) / f"{name}-{seed}")
                metrics = result.metrics["eval"]
                mae[name].append(metrics.entropy_mae_per_sample)
                kl[name].append(metrics.kl)
                late[name].append(result.history[-2]["entropy_mae_per_sample"] if len(result.history) > 1 else math.nan)
                m.put(f"{name}_params", result.n_params, "count", f"{LABELS[name]}: parameters")
                if name == "sigmoid" and metrics.sigmoid_sum_error is not None:
                    sum_errors.append(metrics.sigmoid_sum_error)
                if seed == train_seeds[0]:
                    m.curves[name], m.curves["bayes"] = metrics.curves.entropy_model, metrics.curves.entropy_bayes
                    if model_kind == "transformer":
                        _put_law_checks(cfg, m, name, loss, wcfg.eval_seed, {"init": initial, "trained": trained})
                seconds[name] += time.perf_counter() - t0
    m.put("n_symbols", cfg.n_symbols, "count", "symbols V")
    m.put("seeds", train_seeds, "seed ids", "training seeds")
    m.put("steps", cfg.steps, "steps", "training steps")
    m.put("floor_mae", BijectionTask(cfg.n_symbols).no_context_mae(), "bits", "no-context floor (MAE and KL)")
    _put_summaries(m, mae, kl)
    for name, _, _ in RUNS:
        m.put(f"{name}_seconds", seconds[name], "s", f"{LABELS[name]}: training and checks, over the seeds")
        m.put(f"{name}_mae_at_three_quarters_per_seed", late[name], "bits", f"{LABELS[name]}: MAE at 3/4 of the steps")
    sum_error = stats.mean(sum_errors) if sum_errors else math.nan
    m.put("sigmoid_sum_error", sum_error, "absolute", "transformer, sigmoid BCE: mean |Σ_c σ(z_c) − 1| (raw outputs)")
    both = max(m["softmax_init_grad_sum_max"], m["softmax_trained_grad_sum_max"])
    m.put("softmax_grad_sum_max", both, "absolute", "transformer, softmax CE: max |Σ_c ∂ℓ/∂z_c|, init and trained")
    both = max(m["sigmoid_init_hessian_offdiag_max"], m["sigmoid_trained_hessian_offdiag_max"])
    m.put("sigmoid_hessian_offdiag_max", both, "absolute", "transformer, sigmoid BCE: max cross-class Hessian entry")
    return m


def _put_law_checks(cfg: Config, m: Metrics, name: str, loss: str, eval_seed: int, models: dict[str, Any]) -> None:
    """The output objective's gradient structure of transformer ``name`` at initialisation and trained, on its
    evaluation set, as ``{name}_{init|trained}_{stat}``."""
    eval_batch = BijectionTask(cfg.n_symbols).sample(cfg.eval_size, torch.Generator().manual_seed(eval_seed))
    for when, model in models.items():
        for stat, value in law_checks(model, eval_batch, loss, cfg.n_hessian_rows).items():
            unit, words = _LAW_STATS[stat]
            state = "at initialisation" if when == "init" else "trained"
            m.put(f"{name}_{when}_{stat}", value, unit, f"{LABELS[name]}, {state}: {words}")


def _put_summaries(m: Metrics, mae: dict[str, list[float]], kl: dict[str, list[float]]) -> None:
    """Seed means, per-seed values and ranges of every model's MAE and KL, and the sigmoid/softmax ratios."""
    words = {"mae": "entropy MAE", "kl": "KL(Bayes ‖ model)"}
    for name in mae:
        for stat, values in (("mae", mae[name]), ("kl", kl[name])):
            label = f"{LABELS[name]}: {words[stat]}"
            m.put(f"{name}_{stat}", stats.mean(values), "bits", f"{label}, seed mean")
            m.put(f"{name}_{stat}_per_seed", values, "bits", f"{label} per seed")
            m.put(f"{name}_{stat}_range", [min(values), max(values)], "bits", f"{label} [min, max] over seeds")
    for stat, by_model in (("mae", mae), ("kl", kl)):
        sg, sm = by_model["sigmoid"], by_model["softmax"]
        label = f"transformer, sigmoid BCE over softmax CE: {words[stat]}"
        m.put(f"sigmoid_over_softmax_{stat}", stats.mean(sg) / max(stats.mean(sm), 1e-12), "ratio", label)
        per_seed = [a / max(b, 1e-12) for a, b in zip(sg, sm, strict=True)]
        m.put(f"sigmoid_over_softmax_{stat}_per_seed", per_seed, "ratio", f"{label}, per seed")


def _bar(cfg: Config, m: dict[str, Any]) -> float:
    """The tracking bar: ``learned_fraction`` x the exact no-context floor (bits)."""
    return cfg.learned_fraction * m["floor_mae"]


def criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    """Softmax tracks (MAE, KL), sigmoid tracks (MAE, KL), sigmoid as good as softmax (MAE, KL); a gate (the
    sigmoid objective lacks the law at initialisation), two identities (no cross-class Hessian for the sigmoids,
    softmax gradients summing to 0) and a gate (the no-context token MLP fails the bar)."""
    bar = _bar(cfg, m)
    return [
        criterion("softmax_mae (tracks the posterior)", m["softmax_mae"], "<=", bar),
        criterion("softmax_kl (tracks the posterior)", m["softmax_kl"], "<=", bar),
        criterion("sigmoid_mae (tracks the posterior)", m["sigmoid_mae"], "<=", bar),
        criterion("sigmoid_kl (tracks the posterior)", m["sigmoid_kl"], "<=", bar),
        criterion("sigmoid_mae (as good as softmax)", m["sigmoid_mae"], "<=", cfg.ratio_tol * m["softmax_mae"]),
        criterion("sigmoid_kl (as good as softmax)", m["sigmoid_kl"], "<=", cfg.ratio_tol * m["softmax_kl"]),
        gate("sigmoid_init_grad_sum_mean", m["sigmoid_init_grad_sum_mean"], ">=", cfg.min_init_grad_sum),
        identity("sigmoid_hessian_offdiag_max", m["sigmoid_hessian_offdiag_max"], "==", 0.0),
        identity("softmax_grad_sum_max", m["softmax_grad_sum_max"], "<=", cfg.softmax_sum_tol),
        gate("token_mlp_kl (negative control: no context fails the bar)", m["token_mlp_kl"], ">", bar),
    ]


def _readings(crit: list[Criterion]) -> tuple[bool, bool, bool]:
    """(softmax tracks, sigmoid tracks, sigmoid as good as softmax), each on both MAE and KL."""
    held = {c.metric: c.passed for c in crit}
    sm_ok = held["softmax_mae (tracks the posterior)"] and held["softmax_kl (tracks the posterior)"]
    sg_ok = held["sigmoid_mae (tracks the posterior)"] and held["sigmoid_kl (tracks the posterior)"]
    return sm_ok, sg_ok, held["sigmoid_mae (as good as softmax)"] and held["sigmoid_kl (as good as softmax)"]


def verdict(cfg: Config, m: dict[str, Any], crit: list[Criterion]) -> Verdict:
    """The rule of the module docstring, through :func:`gated` (a failed gate: UNDECIDED; a failed identity
    raises)."""
    sm_ok, sg_ok, as_good = _readings(crit)
    if sg_ok and (as_good or not sm_ok):
        rule: Verdict = "REFUTED"
    else:
        rule = "SUPPORTED" if sm_ok and not sg_ok else "PARTIAL" if sm_ok and sg_ok else "UNDECIDED"
    return gated(rule, crit)


def summary(cfg: Config, m: dict[str, Any], verdict: Verdict) -> str:
    """The verdict in words, with the ratios, the seeds and every model's numbers."""
    crit = criteria(cfg, m)
    numbers, by_seed = _numbers(m), _per_seed(cfg, m)
    ratios = (
        f"sigmoid/softmax {m['sigmoid_over_softmax_mae']:.2f}x in entropy MAE and {m['sigmoid_over_softmax_kl']:.2f}x "
        f"in KL (bar {cfg.ratio_tol:g}x)"
    )
    removed = (
        "independent sigmoids at the output (no partition function over the classes, so no output "
        "responsibilities; the softmax attention inside the transformer remains)"
    )
    failed = [x.metric for x in crit if x.role == "gate" and not x.passed]
    if failed:
        return f"A gate failed ({', '.join(failed)}), so the comparison does not decide; {numbers}."
    if verdict == "REFUTED":
        return (
            f"{removed.capitalize()} track the exact posterior as well as softmax CE does: {ratios}; {by_seed}. With "
            f"no softmax anywhere (prefix MLP, sigmoid BCE) the tracking bar is "
            f"{_passes(cfg, m, 'prefix_mlp_sigmoid')}; {numbers}."
        )
    if verdict == "SUPPORTED":
        return (
            f"Softmax CE tracks the posterior and {removed}, averaged over the seeds, do not (MAE "
            f"{m['sigmoid_mae']:.4f}, KL {m['sigmoid_kl']:.4f}, bar {_bar(cfg, m):.4f} on both): {ratios}; {by_seed}; "
            f"{numbers}."
        )
    if verdict == "PARTIAL":
        return (
            f"Both track the posterior but {removed} are clearly worse ({ratios}): output normalisation helps but is "
            f"not necessary; {by_seed}; {numbers}."
        )
    return f"Neither transformer tracks the posterior at this size: too small to decide; {numbers}."


def _per_seed(cfg: Config, m: dict[str, Any]) -> str:
    """The sigmoid transformer seed by seed: how many seeds track, and its ratios to softmax (reported only)."""
    bar, n = _bar(cfg, m), len(m["sigmoid_mae_per_seed"])
    pairs = zip(m["sigmoid_mae_per_seed"], m["sigmoid_kl_per_seed"], strict=True)
    tracking = sum(a <= bar and b <= bar for a, b in pairs)
    mae = ", ".join(f"{r:.2f}" for r in m["sigmoid_over_softmax_mae_per_seed"])
    kl = ", ".join(f"{r:.2f}" for r in m["sigmoid_over_softmax_kl_per_seed"])
    return f"seed by seed the sigmoid transformer tracks on {tracking} of {n}, ratios MAE {mae}, KL {kl}"


def _passes(cfg: Config, m: dict[str, Any], name: str) -> str:
    """Whether model ``name`` meets the tracking bar (MAE and KL), in words."""
    ok = m[f"{name}_mae"] <= _bar(cfg, m) and m[f"{name}_kl"] <= _bar(cfg, m)
    return "met" if ok else "not met"


def _numbers(m: dict[str, Any]) -> str:
    """Every model's entropy MAE / KL next to the no-context floor, in bits, seed means."""
    n, control = len(m["seeds"]), len(m["token_mlp_mae_per_seed"])
    parts = [f"{LABELS[name]} {m[f'{name}_mae']:.4f} / {m[f'{name}_kl']:.4f}" for name, _, _ in RUNS]
    return (
        f"entropy MAE / KL in bits (mean of {n} seed{'s' if n > 1 else ''}), no-context floor "
        f"{m['floor_mae']:.4f} for both: " + ", ".join(parts) + f" (the token MLP sees no context, so it is the "
        f"floor by construction; {control} seed{'s' if control > 1 else ''})"
    )


def figures(cfg: Config, m: dict[str, Any], ctx: Context) -> list[str]:
    """Every model's MAE and KL (seed mean and range) against the floor and the bar; the per-position entropy of
    the first seed's models against the exact posterior's."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    names = [name for name, _, _ in RUNS]
    x = range(len(names) + 1)
    for ax, stat, label in zip(axes, ("mae", "kl"), ("per-sample entropy MAE", "KL(Bayes || model)"), strict=True):
        values = [m[f"{n}_{stat}"] for n in names] + [m["floor_mae"]]
        lows = [v - min(m[f"{n}_{stat}_per_seed"]) for v, n in zip(values, names, strict=False)] + [0.0]
        highs = [max(m[f"{n}_{stat}_per_seed"]) - v for v, n in zip(values, names, strict=False)] + [0.0]
        colors = ["C0", "C1", "C2", "C3", "C4", "0.6"]
        ax.bar(x, [max(v, 1e-6) for v in values], yerr=[lows, highs], color=colors, capsize=3)
        ax.set_yscale("log")
        ax.axhline(_bar(cfg, m), color="k", ls="--", lw=1, label="tracking bar (0.1 x floor)")
        for i, v in enumerate(values):
            ax.text(i, max(v, 1e-6), f"{v:.4f}", ha="center", va="bottom", fontsize=7)
        ticks = [LABELS[n].replace(", ", "\n").replace(" (", "\n(") for n in names] + ["no-context\nfloor"]
        ax.set_xticks(list(x), ticks, fontsize=7)
        ax.set(ylabel=f"{label} (bits)", title=f"{label}, V = {m['n_symbols']}")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Error against the exact posterior: mean and range over seeds {m['seeds']}", fontsize=9)
    fig.tight_layout()
    bar_figure = ctx.save_figure(fig, "bayes_necessity_mae", dpi=100)

    curves: dict[str, list[float]] = getattr(m, "curves", {})
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    t = range(1, len(curves["bayes"]) + 1)
    ax.plot(t, curves["bayes"], "k-", lw=3, alpha=0.5, label="exact posterior")
    for (name, _, _), marker in zip(RUNS, ("o--", "s:", "d-.", "v:", "^-"), strict=True):
        ax.plot(t, curves[name], marker, ms=4, label=LABELS[name])
    ax.set(xlabel="key position t", ylabel="mean predictive entropy (bits)", title=f"Per-position entropy (seed "
           f"{m['seeds'][0]})")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [bar_figure, ctx.save_figure(fig, "bayes_necessity_curves", dpi=100)]


def details(cfg: Config, m: dict[str, Any]) -> str:
    """The setting, the spread over seeds, the controls and the scope, in words."""
    net = cfg.network
    spread = "; ".join(
        f"{LABELS[name]}: MAE {m[f'{name}_mae_range'][0]:.4f}-{m[f'{name}_mae_range'][1]:.4f}, "
        f"KL {m[f'{name}_kl_range'][0]:.4f}-{m[f'{name}_kl_range'][1]:.4f}"
        for name, _, _ in RUNS
    )
    late = "; ".join(
        f"{LABELS[name]} "
        + ", ".join(
            f"{a:.4f} -> {b:.4f}"
            for a, b in zip(m[f"{name}_mae_at_three_quarters_per_seed"], m[f"{name}_mae_per_seed"], strict=True)
        )
        for name, _, _ in RUNS
    )
    sentences = [
        f"Bijection wind tunnel, V = {cfg.n_symbols} without replacement; transformer {net.n_layers} layer(s), "
        f"{net.n_heads} heads, d_model {net.d_model} ({m['softmax_params']} parameters); prefix MLP "
        f"{m['prefix_mlp_params']} and token MLP {m['token_mlp_params']} parameters (matched within 10%); "
        f"{cfg.steps} AdamW steps, batch {cfg.batch_size}, lr {cfg.lr}; training seeds {m['seeds']}; evaluation "
        f"on {cfg.eval_size} fixed sequences per seed.",
        f"Range over seeds: {spread}. Every model gets the same steps, so the verdict is about what each objective "
        f"reaches within this budget; entropy MAE at 3/4 of the steps -> at the end, per seed: {late}.",
        "Output-layer law on the sigmoid transformer (first seed): mean |sum_c dl/dz_c| = "
        f"{m['sigmoid_init_grad_sum_mean']:.3f} at initialisation and {m['sigmoid_trained_grad_sum_mean']:.4f} "
        f"after training (softmax: {m['softmax_grad_sum_max']:.1e} max); cross-class Hessian max "
        f"{m['sigmoid_hessian_offdiag_max']:.1e} (softmax {m['softmax_trained_hessian_offdiag_max']:.3f}); "
        f"residual against t - softmax(z): {m['sigmoid_init_law_residual']:.3f} at init, "
        f"{m['sigmoid_trained_law_residual']:.4f} trained. The zero Hessian and the zero gradient sum are identities "
        "(they hold for any logits): reported, not counted as evidence. Only at its optimum do the sigmoids approach "
        "the posterior, so the trained residual is small for a reason outside the objective.",
        "Independent BCE is, like cross-entropy, a proper scoring rule whose population optimum is the posterior "
        "(class by class). Scope: the abstract limits the claim to the training-time gradient dynamics, which this "
        "does not test; it tests the necessity reading of §1 and §1.3 that the referee (major comment 3) disputes.",
    ]
    if dataclasses.replace(cfg, seed=0) == Config.quick():
        sentences.append("Quick size: one training seed, V = 6; the full size repeats it at V = 20 over three seeds.")
    return " ".join(sentences)


def run(cfg: Config, ctx: Context) -> Result:
    """Measure, judge, describe and draw (the order of the module)."""
    start = time.perf_counter()
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    v = verdict(cfg, m, crit)
    text, pictures = summary(cfg, m, v), figures(cfg, m, ctx)
    m.put("wall_s", time.perf_counter() - start, "s", "wall time")
    return Result(v, text, m, crit, pictures, details(cfg, m))


EXPERIMENT = Experiment(
    name="bayes_necessity",
    title="Bayesian structure without the LSE law: softmax vs independent sigmoids in the wind tunnel",
    claim=(
        "We argue that such behaviors are neither emergent nor accidental, but are necessary consequences of the "
        "geometry of common objective functions. [...] On this account, the Bayesian structure observed by "
        "Agarwal et al. (2025b) is forced by the geometry of the loss rather than emergent."
    ),
    source=(
        "paper §1 and §1.3 (control: §6.1, independent sigmoids); review-implicit-em: referee major comment 3 "
        "(\"The conclusion that Bayesian structure in trained transformers is 'a necessary consequence of the "
        "objective geometry' is unsupported.\")"
    ),
    Config=Config,
    run=run,
)
