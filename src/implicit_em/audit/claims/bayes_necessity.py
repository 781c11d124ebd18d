r"""Is Bayesian structure a necessary consequence of the LSE objective? The independent-sigmoid control.

Claim (paper §1 and §1.3): the Bayesian behaviour of trained transformers (uncertainty tracking that matches
the exact posterior in the wind tunnels of Agarwal et al.) is "forced by the geometry of the loss rather than
emergent", a "necessary consequence" of log-sum-exp objectives. The referee's major comment 3
(review-implicit-em) calls this "a central overclaim": the gradient identity constrains per-step dynamics,
not where training ends. Paper §6.1 supplies the control: with independent sigmoids "responsibilities do not
exist" and such systems "do not perform mixture inference".

Method (the library's Bayesian wind tunnel, :mod:`implicit_em.windtunnel`, bijection task without replacement,
exact posterior, metrics in bits). Five models are trained under identical conditions (same data stream, seed,
optimiser and steps), each over ``n_seeds`` training seeds:

(a) ``softmax``: the causal transformer with softmax cross-entropy (the LSE objective: output gradient r - t);
(b) ``sigmoid``: the same transformer with independent per-class sigmoid BCE (``loss="sigmoid"``). What this
    removes is the normalisation *of the output*: no partition function over the classes, so no output
    responsibilities and no competition between classes in the loss. What remains is the softmax *attention*
    inside the network (a normalisation over keys, the "conditional regime" of §4.2, where by §5.3 "the
    variational reading stops at the loss level"). Its predictive distribution is sigmoid(z) renormalised;
(c) ``prefix_mlp``: the parameter-matched context-seeing MLP (:class:`~implicit_em.windtunnel.models.PrefixMLP`,
    the flattened one-hot prefix), softmax CE: context without attention, the fair architectural control;
(d) ``prefix_mlp_sigmoid``: the same MLP with independent sigmoid BCE: no softmax anywhere, neither in the
    network nor in the loss (reported next to the verdict, not part of it);
(e) ``token_mlp``: the parameter-matched token MLP, which sees each token alone (no context). Its best possible
    predictor is the uniform one, so its number is the no-context floor *by construction*; it is the negative
    control that shows the tracking bar cannot be passed without context. It runs on the first
    ``token_mlp_seeds`` (1) training seeds only: a step costs two thirds of a transformer step, for a number
    fixed in advance.

For each: per-sample entropy MAE and KL(Bayes || model) against the exact posterior (bits), their mean and range
over the training seeds, and per-position mean entropy curves; next to them the exact no-context floor (the
uniform predictor's error, computed from the task, :meth:`BijectionTask.no_context_mae`; on this task it is the
same number for the entropy MAE and for the KL). KL is needed besides the entropy MAE: without replacement
H_Bayes(t) = log2(V - t + 1) depends on the position alone, so a model that knew only the position could match
every entropy while predicting the wrong values; the KL cannot be met that way. On (b) we verify, on the
evaluation batch, at initialisation and after training, that its output objective has no responsibility law: the
gradient with respect to the logits does not sum to zero across classes (softmax CE: exactly zero), the
cross-class Hessian :math:`\partial^2 \ell / \partial z_j \partial z_k` (j != k) is identically zero (no
competition; softmax: :math:`-r_j r_k`), and the residual against the constrained law
:math:`\partial\ell/\partial d = t - r` (:func:`implicit_em.laws.identity_residual`) is reported.

Verdict rule (thresholds in ``Config`` with their sources, each comparison in ``Result.criteria``; MAE and KL are
means over the training seeds, their ranges are reported):

- a model *tracks the posterior* if its entropy MAE and its KL are both <= ``learned_fraction`` (0.1) x the
  no-context floor;
- the sigmoid transformer is *as good as* the softmax one if MAE_sigmoid <= ``ratio_tol`` (2) x MAE_softmax and
  KL_sigmoid <= ``ratio_tol`` x KL_softmax;
- gates (the testbed can decide; role ``gate``): the sigmoid objective really lacks the law (mean
  |sum_c dl/dz_c| at initialisation >= 0.1), and the token MLP (no context) does not pass the tracking bar (its
  KL > the bar); if either fails the verdict is UNDECIDED;
- identities (role ``identity``: reported, not counted as evidence; a failed one raises, so the run is recorded as
  ERROR): the sigmoid objective's off-diagonal Hessian is exactly 0 and the softmax CE gradient sums to 0 within
  1e-12. Both hold on correct code whatever the model, the data or the training: independent BCE is a sum of
  per-class terms, so ∂²ℓ/∂z_j∂z_k = 0 for j != k, and softmax CE's gradient r − t sums to 1 − 1 = 0 for every
  logit vector. They say the objectives are the formulas they claim to be, not anything about training.

REFUTED (as a necessity claim) if the sigmoid transformer tracks the posterior and is as good as softmax (or softmax
fails where sigmoid succeeds): an objective without output normalisation yields the same Bayesian behaviour, so
the loss's LSE law is not necessary for it. SUPPORTED if softmax tracks the posterior and sigmoid does not.
PARTIAL if both track it but sigmoid is clearly worse (output normalisation helps but is not necessary).
UNDECIDED if neither tracks it (the size is too small to decide) or a gate failed.

Issue 25: before it, the two identities were controls of the verdict (a failure gave PARTIAL), and a failed control
or neither transformer tracking gave PARTIAL, which now reads "a weaker reading holds"; those outcomes never
occurred (every recorded run before issue 25, quick and full, is REFUTED with every control met), so no recorded
verdict changes. Under issue 25 the quick size was rerun at seeds 0–4 and the full size at seed 0 (docs/audit.md).

Reported beside the verdict, not part of it: the sigmoid transformer seed by seed (on how many seeds it tracks,
its per-seed ratios to softmax) and every model's entropy MAE at 3/4 of the steps next to its final one (was it
still learning when the schedule ended?). Every model gets the same steps, so the verdict is about what each
objective reaches within the budget, not where it ends. These two reports were added after the first full-size
run, whose verdict rested on one sigmoid seed that was still learning; they change neither the rule nor the verdict.

The rule before issue 10 read "as good as" as MAE_sigmoid <= max(2 x MAE_softmax, MAE_softmax + 0.05 bits), used
the entropy MAE alone, and set the tracking bar at 0.1 x min(floor, token-MLP MAE). The absolute 0.05 bits was
larger than the effect measured (both MAEs near 0.03 bits at full size), so it would have passed a sigmoid model
nearly 3x worse; and the token MLP is the floor by construction, so min(floor, MLP) added nothing. That rule was
wrong; its verdict on the same numbers is still computed and shown (``old_rule_verdict``) beside the new one.
"""

import dataclasses
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.audit.core import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    gate,
    gated,
    identity,
    pyplot,
)
from implicit_em.laws import identity_residual
from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.tasks import Batch, BijectionTask
from implicit_em.windtunnel.train import TrainResult, build_model, build_tasks, train

__all__ = ["EXPERIMENT", "Config", "run"]

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

# the rule before issue 10 (superseded; its verdict is still computed and shown, see the module docstring)
_OLD_RATIO_TOL = 2.0
_OLD_ABS_TOL = 0.05  # bits


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_symbols: int = 6  # V; L = V - 1 key-value pairs
    n_layers: int = 1
    n_heads: int = 2
    d_model: int = 32
    d_ff: int = 64
    steps: int = 1200
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    eval_size: int = 512
    n_seeds: int = 1  # training seeds seed, seed + 1, ...
    token_mlp_seeds: int = 1  # the no-context control is the floor by construction: its first seed(s) only
    device: str = "cpu"
    threads: int | None = 1  # 2 threads on 2 shared cores spin-wait: 57x slower under load (measured)
    n_hessian_rows: int = 16  # rows on which the cross-class Hessian is computed exactly
    # verdict thresholds, fixed from the claim before any run (module docstring):
    # "tracks the posterior": MAE and KL <= learned_fraction x the no-context floor. Paper §5.3 (and companion
    # notes §A): small transformers match the posterior "to within 1e-3 - 1e-4 bits, while capacity-matched MLPs
    # fail catastrophically"; one order of magnitude below the no-context floor is the weakest reading of tracking.
    learned_fraction: float = 0.1
    # "as good as": MAE_sigmoid <= ratio_tol x MAE_softmax and KL_sigmoid <= ratio_tol x KL_softmax. Companion
    # notes §A: reports of the same architecture and loss differ by 2.3x (3e-3 vs 7e-3 bits), so a factor 2 lies
    # inside the spread of reruns of one recipe; removing a *necessary* ingredient should cost far more.
    ratio_tol: float = 2.0
    min_init_grad_sum: float = 0.1  # the sigmoid control must break sum_c dl/dz_c = 0 at least this much
    softmax_sum_tol: float = 1e-12  # softmax CE's gradient sums to zero to this (float64 round-off)

    @classmethod
    def quick(cls) -> "Config":
        """V = 6, one layer, d_model 32, 1,200 steps, one training seed (the runner's seed)."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """V = 20 (the companion paper's setting) with the wind tunnel's quick architecture (2 layers, 4 heads,
        d_model 64), three training seeds, 8,000 steps at lr 3e-3 (about 30 minutes on one core, unloaded).

        Budget (measured on one thread): a transformer step takes 28 ms, a prefix-MLP step 3 ms, a token-MLP step
        19 ms, so four models over three seeds plus the token MLP once cost about 0.21 s per step. Before issue 10
        the full size ran 8,000 steps at lr 1e-3 over two seeds with three models (1205 s). Issue 10 first cut
        the steps to 2,000 to fit 10 minutes, and chose the learning rate 3e-3 on the softmax transformer alone
        (seed 0, 2,000 steps: MAE 0.073 bits at lr 1e-3, 0.041 at 3e-3, bar 0.111; the sigmoid and MLP runs were
        not looked at in choosing it). At 2,000 steps one sigmoid seed had not converged (MAE 0.42 -> 0.25 bits
        over its last 1,000 steps) and alone decided the verdict (SUPPORTED, while the quick size is REFUTED at
        three seeds): a verdict of the budget, not of the objective. The 8,000 steps of the earlier full size are
        restored here (the rule is unchanged); the 2,000-step numbers and verdict stay in docs/audit.md.
        """
        return cls(
            n_symbols=20, n_layers=2, n_heads=4, d_model=64, d_ff=256, steps=8000, lr=3e-3, warmup_steps=200,
            eval_size=2048, n_seeds=3, device="auto",
        )  # fmt: skip


def _windtunnel_config(cfg: Config, model: str, loss: str, seed: int) -> WindTunnelConfig:
    return WindTunnelConfig(
        task="bijection", n_symbols=cfg.n_symbols, model=model, loss=loss, n_layers=cfg.n_layers,
        n_heads=cfg.n_heads, d_model=cfg.d_model, d_ff=cfg.d_ff, steps=cfg.steps, batch_size=cfg.batch_size,
        lr=cfg.lr, warmup_steps=cfg.warmup_steps, seed=seed, eval_every=max(1, cfg.steps // 4),
        eval_size=cfg.eval_size, eval_seed=10_000 + seed, checkpoint_every=cfg.steps, threads=cfg.threads,
        device=cfg.device,
    )  # fmt: skip


def _train_and_load(wcfg: WindTunnelConfig, run_dir: Path) -> tuple[TrainResult, nn.Module, nn.Module]:
    """Train, then return the result, the trained model (from the checkpoint) and the same model at initialisation."""
    result = train(wcfg, run_dir, progress=False)
    task, _ = build_tasks(wcfg)
    initial, _ = build_model(wcfg, task, task.seq_len())  # build_model seeds itself: the run's initialisation
    trained, _ = build_model(wcfg, task, task.seq_len())
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True, map_location="cpu")
    trained.load_state_dict(state["model"])
    return result, trained.cpu().eval(), initial.cpu().eval()


def _output_objective(loss: str) -> Any:
    """The per-position output loss as a function of distances d = -z and class-index targets."""
    if loss == "softmax":
        return constrained_cross_entropy
    return lambda d, t: independent_sigmoid_bce(-d, t)


@torch.no_grad()
def _logits(model: nn.Module, batch: Batch) -> Tensor:
    return model(batch.tokens)[:, batch.positions].double()  # (B, P, C)


def _law_checks(model: nn.Module, batch: Batch, loss: str, n_rows: int) -> dict[str, float]:
    r"""The output objective's gradient structure on ``batch``, in float64.

    ``grad_sum_mean`` / ``grad_sum_max``: mean and max over positions of :math:`|\sum_c \partial\ell/\partial z_c|`;
    ``law_residual``: max :math:`|\partial\ell/\partial d - (t - \mathrm{softmax}(z))|`;
    ``hessian_offdiag_max``: max :math:`|\partial^2\ell/\partial z_j\partial z_k|`, j != k, on ``n_rows`` rows.
    """
    assert batch.labels is not None
    z = _logits(model, batch).reshape(-1, batch.posterior.shape[-1])  # (B·P, C)
    labels = batch.labels.reshape(-1)
    objective = _output_objective(loss)
    z_ = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(-z_, labels).sum(), z_)  # dl/dz, (B·P, C)
    sums = grad.sum(dim=-1).abs()
    residual = identity_residual(objective, -z, "constrained", target=labels)
    offdiag = 0.0
    for i in range(min(n_rows, z.shape[0])):
        hess = torch.autograd.functional.hessian(
            lambda zi, y=labels[i : i + 1]: objective(-zi[None], y).sum(), z[i]
        )  # (C, C)
        offdiag = max(offdiag, float((hess - torch.diag(torch.diagonal(hess))).abs().max()))
    return {
        "grad_sum_mean": float(sums.mean()),
        "grad_sum_max": float(sums.max()),
        "law_residual": float(residual),
        "hessian_offdiag_max": offdiag,
    }


def _bar(cfg: Config, m: dict[str, Any]) -> float:
    """The tracking bar: ``learned_fraction`` x the exact no-context floor (bits)."""
    return cfg.learned_fraction * m["floor_mae"]


def _criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    """The verdict's comparisons, in the order :func:`_decide` reads them: softmax tracks (MAE, KL), sigmoid
    tracks (MAE, KL), sigmoid as good as softmax (MAE, KL), then the controls: a gate (the sigmoid objective lacks
    the law at initialisation), two identities (no cross-class Hessian for the sigmoids, softmax gradients summing
    to 0) and a gate (the no-context token MLP fails the bar)."""
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


def _decide(cfg: Config, m: dict[str, Any]) -> tuple[Verdict, str]:
    """The verdict and its summary; a failed identity raises, a failed gate gives UNDECIDED (module docstring)."""
    crit = _criteria(cfg, m)
    verdict, summary = _rule(cfg, m, crit)
    return gated(verdict, crit), summary


def _rule(cfg: Config, m: dict[str, Any], crit: list[Criterion]) -> tuple[Verdict, str]:
    """The verdict rule of the module docstring on the tests and gates of ``crit`` (identities are not read here;
    :func:`_decide` passes the verdict through :func:`gated`, which raises on a failed one)."""
    c = [x.passed for x in crit]
    sm_ok, sg_ok, as_good = all(c[0:2]), all(c[2:4]), all(c[4:6])
    gates_ok = all(x.passed for x in crit if x.role == "gate")
    numbers, seeds = _numbers(m), _per_seed(cfg, m)
    ratios = (
        f"sigmoid/softmax {m['sigmoid_over_softmax_mae']:.2f}x in entropy MAE and {m['sigmoid_over_softmax_kl']:.2f}x "
        f"in KL (bar {cfg.ratio_tol:g}x)"
    )
    removed = (
        "independent sigmoids at the output (no partition function over the classes, so no output "
        "responsibilities; the softmax attention inside the transformer remains)"
    )
    if not gates_ok:
        failed = ", ".join(x.metric for x in crit if x.role == "gate" and not x.passed)
        return "UNDECIDED", f"A gate failed ({failed}), so the comparison does not decide; {numbers}."
    if sg_ok and (as_good or not sm_ok):
        return "REFUTED", (
            f"{removed.capitalize()} track the exact posterior as well as softmax CE does: {ratios}; {seeds}. With "
            f"no softmax anywhere (prefix MLP, sigmoid BCE) the tracking bar is "
            f"{_passes(cfg, m, 'prefix_mlp_sigmoid')}; {numbers}."
        )
    if sm_ok and not sg_ok:
        return "SUPPORTED", (
            f"Softmax CE tracks the posterior and {removed}, averaged over the seeds, do not (MAE "
            f"{m['sigmoid_mae']:.4f}, KL {m['sigmoid_kl']:.4f}, bar {_bar(cfg, m):.4f} on both): {ratios}; {seeds}; "
            f"{numbers}."
        )
    if sm_ok and sg_ok:
        return "PARTIAL", (
            f"Both track the posterior but {removed} are clearly worse ({ratios}): output normalisation helps but is "
            f"not necessary; {seeds}; {numbers}."
        )
    return "UNDECIDED", f"Neither transformer tracks the posterior at this size: too small to decide; {numbers}."


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
    seeds, control = len(m["seeds"]), len(m["token_mlp_mae_per_seed"])
    parts = [f"{LABELS[name]} {m[f'{name}_mae']:.4f} / {m[f'{name}_kl']:.4f}" for name, _, _ in RUNS]
    return (
        f"entropy MAE / KL in bits (mean of {seeds} seed{'s' if seeds > 1 else ''}), no-context floor "
        f"{m['floor_mae']:.4f} for both: " + ", ".join(parts) + f" (the token MLP sees no context, so it is the "
        f"floor by construction; {control} seed{'s' if control > 1 else ''})"
    )


def _old_rule_verdict(cfg: Config, m: dict[str, Any]) -> Verdict:
    """The verdict under the superseded rule (entropy MAE only, bar 0.1 x min(floor, token MLP), "as good as"
    with the absolute 0.05 bits), on the same numbers: shown beside the new verdict, never used."""
    sm, sg = m["softmax_mae"], m["sigmoid_mae"]
    bar = cfg.learned_fraction * min(m["floor_mae"], m["token_mlp_mae"])
    sm_ok, sg_ok = sm <= bar, sg <= bar
    as_good = sg <= max(_OLD_RATIO_TOL * sm, sm + _OLD_ABS_TOL)
    if not all(c.passed for c in _criteria(cfg, m)[6:9]):
        return "PARTIAL"
    if sg_ok and (as_good or not sm_ok):
        return "REFUTED"
    if sm_ok and not sg_ok:
        return "SUPPORTED"
    return "PARTIAL"


def _figures(ctx: Context, m: dict[str, Any], curves: dict[str, list[float]], bar: float) -> list[str]:
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
        ax.axhline(bar, color="k", ls="--", lw=1, label="tracking bar (0.1 x floor)")
        for i, v in enumerate(values):
            ax.text(i, max(v, 1e-6), f"{v:.4f}", ha="center", va="bottom", fontsize=7)
        ticks = [LABELS[n].replace(", ", "\n").replace(" (", "\n(") for n in names] + ["no-context\nfloor"]
        ax.set_xticks(list(x), ticks, fontsize=7)
        ax.set(ylabel=f"{label} (bits)", title=f"{label}, V = {m['n_symbols']}")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Error against the exact posterior: mean and range over seeds {m['seeds']}", fontsize=9)
    fig.tight_layout()
    bar_figure = ctx.save_figure(fig, "bayes_necessity_mae", dpi=100)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    t = range(1, len(curves["bayes"]) + 1)
    ax.plot(t, curves["bayes"], "k-", lw=3, alpha=0.5, label="exact posterior")
    for (name, _, _), marker in zip(RUNS, ("o--", "s:", "d-.", "v:", "^-"), strict=True):
        ax.plot(t, curves[name], marker, ms=4, label=LABELS[name])
    title = f"Per-position entropy (seed {m['seeds'][0]})"
    ax.set(xlabel="key position t", ylabel="mean predictive entropy (bits)", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    curve_figure = ctx.save_figure(fig, "bayes_necessity_curves", dpi=100)
    return [bar_figure, curve_figure]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _summaries(mae: dict[str, list[float]], kl: dict[str, list[float]]) -> dict[str, Any]:
    """Seed means, per-seed values and ranges of every model's MAE and KL, and the sigmoid/softmax ratios."""
    m: dict[str, Any] = {}
    for name in mae:
        for stat, values in (("mae", mae[name]), ("kl", kl[name])):
            m[f"{name}_{stat}"] = _mean(values)
            m[f"{name}_{stat}_per_seed"] = values
            m[f"{name}_{stat}_range"] = [min(values), max(values)]
    for stat, by_model in (("mae", mae), ("kl", kl)):
        sg, sm = by_model["sigmoid"], by_model["softmax"]
        m[f"sigmoid_over_softmax_{stat}"] = _mean(sg) / max(_mean(sm), 1e-12)
        m[f"sigmoid_over_softmax_{stat}_per_seed"] = [a / max(b, 1e-12) for a, b in zip(sg, sm, strict=True)]
    return m


def run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    mae: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}
    kl: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}
    late: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}  # MAE at 3/4 of the steps: still learning?
    curves: dict[str, list[float]] = {}
    checks: dict[str, dict[str, float]] = {}
    sigmoid_sum_error: list[float] = []
    n_params: dict[str, int] = {}
    run_seconds: dict[str, float] = {name: 0.0 for name, _, _ in RUNS}
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(seeds):
            for name, model_kind, loss in RUNS:
                if name == "token_mlp" and i >= cfg.token_mlp_seeds:
                    continue
                t0 = time.perf_counter()
                wcfg = _windtunnel_config(cfg, model_kind, loss, seed)
                result, trained, initial = _train_and_load(wcfg, Path(tmp) / f"{name}-{seed}")
                metrics = result.metrics["eval"]
                mae[name].append(metrics.entropy_mae_per_sample)
                kl[name].append(metrics.kl)
                late[name].append(result.history[-2]["entropy_mae_per_sample"] if len(result.history) > 1 else math.nan)
                n_params[name] = result.n_params
                if name == "sigmoid" and metrics.sigmoid_sum_error is not None:
                    sigmoid_sum_error.append(metrics.sigmoid_sum_error)
                if seed == seeds[0]:
                    curves[name] = metrics.curves.entropy_model
                    curves["bayes"] = metrics.curves.entropy_bayes
                    if model_kind == "transformer":
                        eval_batch = BijectionTask(cfg.n_symbols).sample(
                            cfg.eval_size, torch.Generator().manual_seed(wcfg.eval_seed)
                        )
                        checks[f"{name}_init"] = _law_checks(initial, eval_batch, loss, cfg.n_hessian_rows)
                        checks[f"{name}_trained"] = _law_checks(trained, eval_batch, loss, cfg.n_hessian_rows)
                run_seconds[name] += time.perf_counter() - t0

    m: dict[str, Any] = {
        "n_symbols": cfg.n_symbols,
        "seeds": seeds,
        "steps": cfg.steps,
        "floor_mae": BijectionTask(cfg.n_symbols).no_context_mae(),
        **_summaries(mae, kl),
        **{f"{name}_params": n for name, n in n_params.items()},
        **{f"{name}_seconds": s for name, s in run_seconds.items()},
        **{f"{name}_mae_at_three_quarters_per_seed": v for name, v in late.items()},
        "sigmoid_sum_error": _mean(sigmoid_sum_error) if sigmoid_sum_error else math.nan,
    }
    for key, values in checks.items():
        loss_name, when = key.split("_")
        for stat, v in values.items():
            m[f"{loss_name}_{when}_{stat}"] = v
    m["softmax_grad_sum_max"] = max(m["softmax_init_grad_sum_max"], m["softmax_trained_grad_sum_max"])
    m["sigmoid_hessian_offdiag_max"] = max(
        m["sigmoid_init_hessian_offdiag_max"], m["sigmoid_trained_hessian_offdiag_max"]
    )
    criteria = _criteria(cfg, m)
    verdict, summary = _decide(cfg, m)
    m["old_rule_verdict"] = _old_rule_verdict(cfg, m)
    figures = _figures(ctx, m, curves, _bar(cfg, m))
    m["wall_s"] = time.perf_counter() - start
    return Result(verdict, summary, m, criteria, figures, _details(cfg, m, verdict))


def _details(cfg: Config, m: dict[str, Any], verdict: Verdict) -> str:
    spread = "; ".join(
        f"{LABELS[name]}: MAE {m[f'{name}_mae_range'][0]:.4f}-{m[f'{name}_mae_range'][1]:.4f}, "
        f"KL {m[f'{name}_kl_range'][0]:.4f}-{m[f'{name}_kl_range'][1]:.4f}"
        for name, _, _ in RUNS
    )
    ratios = ", ".join(f"{r:.2f}" for r in m["sigmoid_over_softmax_mae_per_seed"])
    late = "; ".join(
        f"{LABELS[name]} "
        + ", ".join(
            f"{a:.4f} -> {b:.4f}"
            for a, b in zip(m[f"{name}_mae_at_three_quarters_per_seed"], m[f"{name}_mae_per_seed"], strict=True)
        )
        for name, _, _ in RUNS
    )
    sentences = [
        f"Bijection wind tunnel, V = {cfg.n_symbols} without replacement; transformer {cfg.n_layers} layer(s), "
        f"{cfg.n_heads} heads, d_model {cfg.d_model} ({m['softmax_params']} parameters); prefix MLP "
        f"{m['prefix_mlp_params']} and token MLP {m['token_mlp_params']} parameters (matched within 10%); "
        f"{cfg.steps} AdamW steps, batch {cfg.batch_size}, lr {cfg.lr}; training seeds {m['seeds']}; evaluation "
        f"on {cfg.eval_size} fixed sequences per seed.",
        f"Range over seeds: {spread}; sigmoid/softmax MAE per seed: {ratios}.",
        "Every model gets the same steps, so a model that learns more slowly may be measured before it has converged: "
        "the verdict is about what each objective reaches within this budget. Entropy MAE at 3/4 of the steps -> "
        f"at the end, per seed: {late}.",
        f"Tracking bar {_bar(cfg, m):.4f} bits (0.1 x floor) on both the entropy MAE and the KL: the KL is needed "
        "because without replacement the Bayes entropy depends on the position alone, so matching entropies does "
        "not require the context.",
        "What the sigmoid transformer removes is the output normalisation: no partition function over the classes, "
        "hence no output responsibilities; the softmax attention over keys inside it remains.",
        "The prefix MLP (flattened one-hot prefix, no attention) with sigmoid BCE has no softmax anywhere, in the "
        f"network or the loss: MAE {m['prefix_mlp_sigmoid_mae']:.4f}, KL {m['prefix_mlp_sigmoid_kl']:.4f} bits "
        f"(with softmax CE: {m['prefix_mlp_mae']:.4f}, {m['prefix_mlp_kl']:.4f}); reported, not part of the "
        "verdict.",
        "The token MLP sees each token alone, so its number is the no-context floor by construction (MAE "
        f"{m['token_mlp_mae']:.4f}, KL {m['token_mlp_kl']:.4f}, floor {m['floor_mae']:.4f}): it is the negative "
        "control, not a fair architectural comparison (the prefix MLP is).",
        "Output-layer law on the sigmoid transformer (first seed): mean |sum_c dl/dz_c| = "
        f"{m['sigmoid_init_grad_sum_mean']:.3f} at initialisation and {m['sigmoid_trained_grad_sum_mean']:.4f} "
        f"after training (softmax: {m['softmax_grad_sum_max']:.1e} max); cross-class Hessian max "
        f"{m['sigmoid_hessian_offdiag_max']:.1e} (softmax {m['softmax_trained_hessian_offdiag_max']:.3f}); "
        f"residual against t - softmax(z): {m['sigmoid_init_law_residual']:.3f} at init, "
        f"{m['sigmoid_trained_law_residual']:.4f} trained. The zero cross-class Hessian of the sigmoids and the "
        "zero gradient sum of softmax CE are identities (they hold for any logits): reported, not counted as "
        "evidence.",
        "The objective never couples the classes; only at its optimum do the sigmoids approach the posterior, "
        "which on this task (uniform over unused values) makes sigmoid(z) and softmax(z) nearly equal, so the "
        "trained residual is small for a reason outside the objective.",
        "Independent BCE is, like cross-entropy, a proper scoring rule whose population optimum is the posterior "
        "(class by class): the architecture-agnostic endpoint statement the paper cites for cross-entropy in §5.3.",
        f"Superseded rule (absolute 0.05 bits, MAE only): {m['old_rule_verdict']}; this rule: {verdict}.",
        "Scope: the abstract limits the claim to the training-time gradient dynamics, which this experiment does "
        "not test; it tests the necessity reading of §1 and §1.3 that the referee (major comment 3) disputes.",
    ]
    return " ".join(sentences) + (_QUICK_NOTE if _is_quick(cfg) else "")


_QUICK_NOTE = " Quick size: one training seed, V = 6; the full size repeats it at V = 20 over three seeds."


def _is_quick(cfg: Config) -> bool:
    """Whether ``cfg`` is the quick size (at any seed)."""
    return dataclasses.replace(cfg, seed=0) == Config.quick()


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
