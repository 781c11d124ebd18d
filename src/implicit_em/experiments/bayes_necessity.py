r"""Is Bayesian structure a necessary consequence of the LSE objective? The independent-sigmoid control.

Claim (paper §1 and §1.3): the Bayesian behaviour of trained transformers (uncertainty tracking that matches
the exact posterior in the wind tunnels of Agarwal et al.) is "forced by the geometry of the loss rather than
emergent", a "necessary consequence" of log-sum-exp objectives. The referee's major comment 3
(review-implicit-em.json) calls this "a central overclaim": the gradient identity constrains per-step dynamics,
not where training ends. Paper §6.1 supplies the control: with independent sigmoids "responsibilities do not
exist" and such systems "do not perform mixture inference".

Method (the library's Bayesian wind tunnel, :mod:`implicit_em.windtunnel`, bijection task without replacement,
exact posterior, metrics in bits). Three models are trained under identical conditions (same data stream, seed,
optimiser and steps):

(a) the causal transformer with softmax cross-entropy (the LSE objective: output gradient = r - t);
(b) the same transformer with independent per-class sigmoid BCE (``loss="sigmoid"``: no partition function; its
    predictive distribution is sigmoid(z) renormalised);
(c) the parameter-matched token MLP (no context: its best possible error is the no-context floor).

For each: per-sample entropy MAE against the exact posterior (bits), KL(Bayes || model) and per-position mean
entropy curves; plus the exact no-context floor. On (b) we verify, on the evaluation batch, at initialisation
and after training, that its output objective has no responsibility law: the gradient with respect to the logits
does not sum to zero across classes (softmax CE: exactly zero), the cross-class Hessian
:math:`\partial^2 \ell / \partial z_j \partial z_k` (j != k) is identically zero (no competition; softmax:
:math:`-r_j r_k`), and the residual against the constrained law :math:`\partial\ell/\partial d = t - r`
(:func:`implicit_em.laws.identity_residual`) is reported.

Verdict rule (thresholds in ``Config``, each comparison in ``Result.criteria``), with MAE averaged over training seeds:

- a model *tracks the posterior* if its MAE <= ``learned_fraction`` (0.1) x min(no-context floor, MLP MAE);
- the sigmoid model is *as good as* the softmax one if MAE_sigmoid <= max(``ratio_tol`` (2) x MAE_softmax,
  MAE_softmax + ``abs_tol`` (0.05 bits));
- precondition: the sigmoid control really lacks the law (mean |sum_c dl/dz_c| at initialisation >= 0.1, the
  off-diagonal Hessian exactly 0, and the softmax gradient sums to 0 within 1e-12); otherwise PARTIAL.

REFUTED (as a necessity claim) if the sigmoid model tracks the posterior and is as good as softmax (or softmax
fails where sigmoid succeeds): an objective without responsibilities yields the same Bayesian behaviour, so it
comes from the architecture plus a proper scoring rule, not from the LSE gradient law. SUPPORTED if softmax
tracks the posterior and sigmoid does not. PARTIAL if both track it but sigmoid is clearly worse (normalisation
helps but is not necessary), or if neither tracks it (the size is too small to decide).
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

from implicit_em.experiments._base import Context, Criterion, Experiment, Result, Verdict, criterion, pyplot
from implicit_em.laws import identity_residual
from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.tasks import Batch, BijectionTask
from implicit_em.windtunnel.train import TrainResult, build_model, build_tasks, train

RUNS = (("softmax", "transformer", "softmax"), ("sigmoid", "transformer", "sigmoid"), ("mlp", "mlp", "softmax"))


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
    device: str = "cpu"
    threads: int | None = 1  # 2 threads on 2 shared cores spin-wait: 57x slower under load (measured)
    n_hessian_rows: int = 16  # rows on which the cross-class Hessian is computed exactly
    # verdict thresholds (module docstring, the experiment's own choices)
    learned_fraction: float = 0.1  # "tracks the posterior": MAE <= this x min(floor, MLP MAE)
    ratio_tol: float = 2.0  # "as good as": MAE_sigmoid <= max(ratio_tol x MAE_softmax, MAE_softmax + abs_tol)
    abs_tol: float = 0.05  # bits
    min_init_grad_sum: float = 0.1  # the sigmoid control must break sum_c dl/dz_c = 0 at least this much
    softmax_sum_tol: float = 1e-12  # softmax CE's gradient sums to zero to this (float64)

    @classmethod
    def quick(cls) -> "Config":
        """About 10-20 s on 2 CPU cores: V = 6, one layer, d_model 32, 1,200 steps, one seed."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """The wind tunnel's quick architecture (2 layers, 4 heads, d_model 64) at V = 20, 8,000 steps, two seeds.

        On one CPU core one seed (three runs) took 598 s (softmax 0.0279, sigmoid 0.0283, MLP 1.1073 bits: REFUTED),
        so about 20 minutes for two seeds; much less on a GPU.
        """
        return cls(
            n_symbols=20, n_layers=2, n_heads=4, d_model=64, d_ff=256, steps=8000, lr=1e-3, warmup_steps=300,
            eval_size=2048, n_seeds=2, device="auto",
        )  # fmt: skip


def _windtunnel_config(cfg: Config, model: str, loss: str, seed: int) -> WindTunnelConfig:
    return WindTunnelConfig(
        task="bijection", n_symbols=cfg.n_symbols, model=model, loss=loss, n_layers=cfg.n_layers,
        n_heads=cfg.n_heads, d_model=cfg.d_model, d_ff=cfg.d_ff, steps=cfg.steps, batch_size=cfg.batch_size,
        lr=cfg.lr, warmup_steps=cfg.warmup_steps, seed=seed, eval_every=cfg.steps, eval_size=cfg.eval_size,
        eval_seed=10_000 + seed, checkpoint_every=cfg.steps, threads=cfg.threads, device=cfg.device,
    )  # fmt: skip


def _train_and_load(wcfg: WindTunnelConfig, run_dir: Path) -> tuple[TrainResult, nn.Module, nn.Module]:
    """Train, then return the result, the trained model (from the checkpoint) and the same model at initialisation."""
    result = train(wcfg, run_dir, progress=False)
    task, _ = build_tasks(wcfg)
    initial, _ = build_model(wcfg, task, task.seq_len())  # build_model seeds itself: the run's initialisation
    trained, _ = build_model(wcfg, task, task.seq_len())
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False, map_location="cpu")
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


def _criteria(cfg: Config, m: dict[str, Any]) -> list[Criterion]:
    """The verdict's comparisons: softmax and sigmoid track the posterior, sigmoid as good as softmax, and the
    three checks that the sigmoid control lacks the law while softmax has it."""
    sm, sg = m["softmax_mae"], m["sigmoid_mae"]
    bar = cfg.learned_fraction * min(m["floor_mae"], m["mlp_mae"])
    return [
        criterion("softmax_mae (tracks the posterior)", sm, "<=", bar),
        criterion("sigmoid_mae (tracks the posterior)", sg, "<=", bar),
        criterion("sigmoid_mae (as good as softmax)", sg, "<=", max(cfg.ratio_tol * sm, sm + cfg.abs_tol)),
        criterion("sigmoid_init_grad_sum_mean", m["sigmoid_init_grad_sum_mean"], ">=", cfg.min_init_grad_sum),
        criterion("sigmoid_hessian_offdiag_max", m["sigmoid_hessian_offdiag_max"], "==", 0.0),
        criterion("softmax_grad_sum_max", m["softmax_grad_sum_max"], "<=", cfg.softmax_sum_tol),
    ]


def _decide(cfg: Config, m: dict[str, Any]) -> tuple[Verdict, str]:
    floor, sm, sg, mlp = m["floor_mae"], m["softmax_mae"], m["sigmoid_mae"], m["mlp_mae"]
    sm_ok, sg_ok, as_good, *control = (c.passed for c in _criteria(cfg, m))
    control_ok = all(control)
    numbers = f"entropy MAE softmax {sm:.4f}, sigmoid {sg:.4f}, MLP {mlp:.4f}, no-context floor {floor:.4f} bits"
    if not control_ok:
        return "PARTIAL", f"The sigmoid control did not break the responsibility law as expected; {numbers}."
    if sg_ok and (as_good or not sm_ok):
        return "REFUTED", (
            f"Independent sigmoids (no normalisation, no responsibilities: gradient sums "
            f"{m['sigmoid_init_grad_sum_mean']:.2f} at init, zero cross-class coupling) track the exact posterior "
            f"as well as softmax does ({numbers}); the matched MLP stays at the floor. The Bayesian behaviour comes "
            f"from the architecture plus a proper scoring rule, not necessarily from the LSE gradient law."
        )
    if sm_ok and not sg_ok:
        return "SUPPORTED", f"Softmax tracks the posterior and independent sigmoids do not ({numbers})."
    if sm_ok and sg_ok:
        return "PARTIAL", f"Both track the posterior but sigmoid is clearly worse: normalisation helps ({numbers})."
    return "PARTIAL", f"Neither transformer tracks the posterior at this size: too small to decide ({numbers})."


def _figures(ctx: Context, m: dict[str, Any], curves: dict[str, list[float]], bar: float) -> list[str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    names = ["transformer\nsoftmax CE", "transformer\nsigmoid BCE", "matched\nMLP", "no-context\nfloor"]
    values = [m["softmax_mae"], m["sigmoid_mae"], m["mlp_mae"], m["floor_mae"]]
    ax.bar(names, [max(v, 1e-6) for v in values], color=["C0", "C1", "C2", "0.6"])
    ax.set_yscale("log")
    ax.axhline(bar, color="k", ls="--", lw=1, label="tracks-posterior bar")
    ax.legend(fontsize=8, loc="upper left")
    for i, v in enumerate(values):
        ax.text(i, max(v, 1e-6), f"{v:.4f}", ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="per-sample entropy MAE (bits)", title=f"Bijection V = {m['n_symbols']}: error vs exact posterior")
    fig.tight_layout()
    bar_figure = ctx.save_figure(fig, "bayes_necessity_mae", dpi=100)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    t = range(1, len(curves["bayes"]) + 1)
    ax.plot(t, curves["bayes"], "k-", lw=3, alpha=0.5, label="exact posterior")
    ax.plot(t, curves["softmax"], "o--", ms=4, label="transformer, softmax CE")
    ax.plot(t, curves["sigmoid"], "s:", ms=4, label="transformer, sigmoid BCE")
    ax.plot(t, curves["mlp"], "^-", ms=4, label="matched MLP")
    title = f"Per-position entropy (seed {m['seeds'][0]})"
    ax.set(xlabel="key position t", ylabel="mean predictive entropy (bits)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    curve_figure = ctx.save_figure(fig, "bayes_necessity_curves", dpi=100)
    return [bar_figure, curve_figure]


def run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    mae: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}
    kl: dict[str, list[float]] = {name: [] for name, _, _ in RUNS}
    curves: dict[str, list[float]] = {}
    checks: dict[str, dict[str, float]] = {}
    sigmoid_sum_error: list[float] = []
    n_params: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for name, model_kind, loss in RUNS:
                wcfg = _windtunnel_config(cfg, model_kind, loss, seed)
                result, trained, initial = _train_and_load(wcfg, Path(tmp) / f"{name}-{seed}")
                metrics = result.metrics["eval"]
                mae[name].append(metrics.entropy_mae_per_sample)
                kl[name].append(metrics.kl)
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

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    m: dict[str, Any] = {
        "n_symbols": cfg.n_symbols,
        "seeds": seeds,
        "steps": cfg.steps,
        "floor_mae": BijectionTask(cfg.n_symbols).no_context_mae(),
        **{f"{name}_mae": mean(mae[name]) for name in mae},
        **{f"{name}_mae_per_seed": mae[name] for name in mae},
        **{f"{name}_kl": mean(kl[name]) for name in kl},
        **{f"{name}_params": n for name, n in n_params.items()},
        "sigmoid_over_softmax_mae": mean(mae["sigmoid"]) / max(mean(mae["softmax"]), 1e-12),
        "sigmoid_sum_error": mean(sigmoid_sum_error) if sigmoid_sum_error else math.nan,
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
    figures = _figures(ctx, m, curves, cfg.learned_fraction * min(m["floor_mae"], m["mlp_mae"]))
    m["wall_s"] = time.perf_counter() - start
    details = (
        f"Bijection wind tunnel, V = {cfg.n_symbols} without replacement, transformer {cfg.n_layers} layer(s), "
        f"{cfg.n_heads} heads, d_model {cfg.d_model}; {cfg.steps} AdamW steps, batch {cfg.batch_size}, lr {cfg.lr}; "
        f"seeds {seeds}; evaluation on {cfg.eval_size} fixed sequences. Output-layer law on the sigmoid model: "
        f"mean |sum_c dl/dz_c| = {m['sigmoid_init_grad_sum_mean']:.3f} at initialisation and "
        f"{m['sigmoid_trained_grad_sum_mean']:.4f} after training (softmax: {m['softmax_grad_sum_max']:.1e} max); "
        f"cross-class Hessian max {m['sigmoid_hessian_offdiag_max']:.1e} (softmax "
        f"{m['softmax_trained_hessian_offdiag_max']:.3f}); residual against t - softmax(z): "
        f"{m['sigmoid_init_law_residual']:.3f} at init, {m['sigmoid_trained_law_residual']:.4f} trained. "
        "The objective never couples the classes; only at its optimum do the sigmoids approach the posterior, which "
        "on this task (uniform over unused values) makes sigmoid(z) and softmax(z) nearly equal, so the trained "
        "residual is small for a reason outside the objective. Independent BCE is a proper scoring rule whose "
        "population optimum is the posterior, the architecture-agnostic endpoint theorem the paper cites in §5.3. "
        "Scope: the abstract limits the claim to the training-time gradient dynamics, which this experiment does "
        "not test; it tests the necessity reading of §1 and §1.3 that the referee (major comment 3) disputes. "
        + (_QUICK_NOTE if _is_quick(cfg) else "")
    )
    return Result(verdict, summary, m, criteria, figures, details)


_QUICK_NOTE = "Quick size: one seed, small V; the full size repeats it at V = 20 over two seeds."


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
        "paper §1 and §1.3 (control: §6.1, independent sigmoids); review-implicit-em.json: referee major comment 3 "
        "(\"The conclusion that Bayesian structure in trained transformers is 'a necessary consequence of the "
        "objective geometry' is unsupported.\")"
    ),
    Config=Config,
    run=run,
)
