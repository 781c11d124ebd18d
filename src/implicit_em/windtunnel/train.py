"""Train a model on a wind tunnel and measure it in bits against the exact posterior.

One function, :func:`train`, reads top to bottom: build the task and the model from a frozen
:class:`WindTunnelConfig`, then AdamW with linear warm-up and cosine decay, gradient clipping, periodic
evaluation on a fixed evaluation set, and periodic checkpoints. A run directory holds::

    config.json      the resolved configuration
    checkpoint.pt    model, optimiser, data-generator state, history (resume continues from here)
    metrics.json     final metrics per evaluation set, history, the no-context oracle, versions, load average
    curves.png       per-position entropy curves (model and Bayes), |ΔH| and KL per position, learning curve

Killing a run and calling :func:`train` again with the same configuration and directory continues where the
last checkpoint left off; the numbers equal those of an uninterrupted run (same seed, same thread count, CPU).
"""

import dataclasses
import json
import logging
import math
import os
import platform
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce
from implicit_em.windtunnel.metrics import WindTunnelMetrics, evaluate_predictions, predictive
from implicit_em.windtunnel.models import CausalTransformer, count_parameters, matched_lstm, matched_mlp
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask

logger = logging.getLogger(__name__)

TASKS = ("bijection", "hmm")
MODELS = ("transformer", "mlp", "lstm")
LOSSES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class WindTunnelConfig:
    """Every setting of a wind-tunnel run, with its default."""

    # task
    task: str = "bijection"  # "bijection" or "hmm"
    n_symbols: int = 20  # bijection: V (keys and values); L = V - 1 pairs
    replacement: bool = False  # bijection: keys drawn with replacement
    n_obs: int = 20  # hmm: training length K
    test_lengths: tuple[int, ...] = (30, 50)  # hmm: extra evaluation lengths (length generalisation)
    # model
    model: str = "transformer"  # "transformer", "mlp" (parameter-matched, no context) or "lstm" (matched)
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 64
    d_ff: int = 256
    loss: str = "softmax"  # "softmax" cross-entropy or independent per-class "sigmoid" BCE
    # optimisation
    steps: int = 6000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-5  # end of the cosine
    warmup_steps: int = 300
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    # evaluation and checkpoints
    eval_every: int = 1000
    eval_size: int = 2048
    eval_seed: int = 12345  # the evaluation set is the same for every training seed
    checkpoint_every: int = 500
    threads: int | None = None  # torch.set_num_threads in the training process (None: leave as is)
    device: str = "auto"  # "auto" (cuda when available, else cpu), "cpu", "cuda", "cuda:1", ...

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        for name in ("steps", "batch_size", "eval_every", "eval_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.lr <= 0 or self.min_lr < 0 or self.grad_clip <= 0:
            raise ValueError("need warmup_steps >= 0, lr > 0, min_lr >= 0, grad_clip > 0")

    @classmethod
    def quick(cls, **overrides: Any) -> "WindTunnelConfig":
        """CPU setting, about 10 minutes on 2 cores (see docs/windtunnel.md for the measured numbers)."""
        task = overrides.get("task", cls.task)
        base: dict[str, Any] = {"steps": 20000, "batch_size": 64, "lr": 1e-3, "eval_every": 2000}
        if task == "hmm":
            base.update(steps=5000, batch_size=32, n_layers=3, eval_every=1000, eval_size=1024)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def full(cls, **overrides: Any) -> "WindTunnelConfig":
        """The papers' sizes (GPU): 6 layers, 6 heads, d_model 192 on bijection; 9, 8, 256 on HMM."""
        task = overrides.get("task", cls.task)
        base: dict[str, Any] = dict(
            n_layers=6, n_heads=6, d_model=192, d_ff=768, batch_size=128, steps=100_000, lr=3e-4,
            warmup_steps=2000, eval_every=5000, checkpoint_every=5000, eval_size=8192,
        )  # fmt: skip
        if task == "hmm":
            base.update(n_layers=9, n_heads=8, d_model=256, d_ff=1024)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def tiny(cls, **overrides: Any) -> "WindTunnelConfig":
        """Seconds: for tests only."""
        base: dict[str, Any] = dict(
            n_symbols=5, n_obs=4, test_lengths=(6,), n_layers=1, n_heads=2, d_model=16, d_ff=32, steps=20,
            batch_size=16, warmup_steps=5, eval_every=10, eval_size=64, checkpoint_every=5, threads=1,
        )  # fmt: skip
        base.update(overrides)
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WindTunnelConfig":
        d = dict(d)
        d["test_lengths"] = tuple(d.get("test_lengths", ()))
        return cls(**d)


Task = BijectionTask | HMMFilteringTask


@dataclass
class TrainResult:
    """What :func:`train` returns; the same numbers are in ``run_dir/metrics.json``."""

    config: WindTunnelConfig
    metrics: dict[str, WindTunnelMetrics]  # one per evaluation set ("eval", or "K=20", "K=30", ...)
    history: list[dict[str, float]]
    n_params: int
    steps_done: int
    complete: bool
    run_dir: Path | None
    extra: dict[str, Any] = field(default_factory=dict)


def build_tasks(config: WindTunnelConfig) -> tuple[Task, dict[str, Task]]:
    """The training task and the evaluation tasks, by name."""
    if config.task == "bijection":
        task = BijectionTask(config.n_symbols, replacement=config.replacement)
        return task, {"eval": task}
    hmm = HMMFilteringTask(config.n_obs)
    lengths = dict.fromkeys((config.n_obs, *config.test_lengths))
    return hmm, {f"K={k}": hmm.with_length(k) for k in lengths}


def _max_len(evals: dict[str, Task]) -> int:
    return max(t.seq_len() for t in evals.values())


def build_model(config: WindTunnelConfig, task: Task, max_len: int) -> tuple[nn.Module, int]:
    """The model, and the transformer parameter count it was matched to."""
    torch.manual_seed(config.seed)
    transformer = CausalTransformer(
        task.vocab_size, task.n_classes, max_len, config.n_layers, config.n_heads, config.d_model, config.d_ff
    )
    reference = count_parameters(transformer)
    if config.model == "transformer":
        return transformer, reference
    torch.manual_seed(config.seed)
    if config.model == "mlp":
        return matched_mlp(reference, task.vocab_size, task.n_classes, max_len, config.d_model), reference
    return matched_lstm(reference, task.vocab_size, task.n_classes, config.d_model), reference


def learning_rate(step: int, config: WindTunnelConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``steps``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1.0 + math.cos(math.pi * progress))


def windtunnel_loss(logits: Tensor, batch: Batch, loss: str = "softmax") -> Tensor:
    r"""Mean loss over the scored positions; ``logits`` z are (B, P, C) at ``batch.positions``.

    ``softmax``: :func:`~implicit_em.objectives.constrained_cross_entropy` with d = -z (paper §4.3), against the
    sampled label (bijection) or the soft posterior (HMM). ``sigmoid``: independent per-class BCE,
    :func:`~implicit_em.objectives.independent_sigmoid_bce`, against the one-hot label or the soft posterior,
    summed over classes. Both are averaged over the B x P positions; they equal, bit for bit (value and
    gradient), the formulas this module wrote out before (tested), so recorded runs stay reproducible.
    """
    target = batch.labels if batch.labels is not None else batch.posterior
    if loss == "softmax":
        return constrained_cross_entropy(-logits, target).mean()
    if loss == "sigmoid":
        return independent_sigmoid_bce(logits, target).mean()
    raise ValueError(f"loss must be 'softmax' or 'sigmoid', got {loss!r}")


@torch.no_grad()
def evaluate(model: nn.Module, batch: Batch, loss: str, chunk: int = 512) -> WindTunnelMetrics:
    """Metrics of ``model`` on a fixed batch against its exact posterior."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs, sums = [], []
    for i in range(0, batch.tokens.shape[0], chunk):
        logits = model(batch.tokens[i : i + chunk].to(device))[:, batch.positions.to(device)]  # (b, P, C)
        probs.append(predictive(logits.double(), loss).cpu())
        sums.append(torch.sigmoid(logits.double()).sum(dim=-1).cpu())  # (b, P)
    model.train(was_training)
    metrics = evaluate_predictions(torch.cat(probs), batch.posterior)
    if loss == "sigmoid":  # how far the independent sigmoids are from a distribution on their own
        metrics = dataclasses.replace(metrics, sigmoid_sum_error=float((torch.cat(sums) - 1).abs().mean()))
    return metrics


def resolve_device(name: str) -> torch.device:
    """``auto`` is cuda when available, else cpu; anything else is passed to :class:`torch.device`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _to_device(batch: Batch, device: torch.device) -> Batch:
    if device.type == "cpu":
        return batch
    labels = batch.labels.to(device) if batch.labels is not None else None
    return Batch(batch.tokens.to(device), batch.positions.to(device), batch.posterior.to(device), labels)


def _eval_sets(config: WindTunnelConfig, evals: dict[str, Task]) -> dict[str, Batch]:
    out = {}
    for i, (name, task) in enumerate(evals.items()):
        out[name] = task.sample(config.eval_size, torch.Generator().manual_seed(config.eval_seed + i))
    return out


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _write_json(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    import implicit_em

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "implicit_em": implicit_em.__version__,
    }


class _DeferSignals:
    """Hold SIGINT and SIGTERM until the end of the current step, so a checkpoint is always at a step boundary.

    Without this, Ctrl-C between drawing a batch and the optimiser step would save a data-generator state that
    no longer matches the model, and the resumed run would differ from an uninterrupted one.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_DeferSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def oracle_numbers(config: WindTunnelConfig, eval_batches: dict[str, Batch] | None = None) -> dict[str, Any]:
    """Reference predictors, computed, never typed in.

    Bijection: the no-context oracle (entropy MAE of the uniform predictor over all V values), exactly.
    HMM: on each evaluation set, the uniform predictor and the emission-only predictor p(s_t | o_t).
    """
    if config.task == "bijection":
        task = BijectionTask(config.n_symbols, replacement=config.replacement)
        return {"no_context_entropy_mae": task.no_context_mae()}
    out: dict[str, Any] = {}
    hmm = HMMFilteringTask(config.n_obs)
    for name, b in (eval_batches or {}).items():
        uniform = torch.full_like(b.posterior, 1.0 / hmm.n_states)
        out[name] = {}
        for label, p in (("uniform", uniform), ("emission_only", hmm.emission_only_posterior(b))):
            m = evaluate_predictions(p, b.posterior)
            out[name][label] = {"entropy_mae_per_sample": m.entropy_mae_per_sample, "kl": m.kl}
    return out


def train(
    config: WindTunnelConfig,
    run_dir: str | Path | None = None,
    progress: bool = True,
    stop_after: int | None = None,
) -> TrainResult:
    """Train and evaluate; resume from ``run_dir/checkpoint.pt`` when it exists.

    Args:
        config: the run's settings.
        run_dir: where config, checkpoint, metrics and figures go (None: keep nothing on disk).
        progress: show a tqdm progress bar.
        stop_after: stop (with a checkpoint) once this many steps are done, as if the run had been killed;
            used to test resuming.
    Returns:
        the final metrics per evaluation set (or the latest, if stopped early), history and sizes.
    """
    threads_before = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _train(config, run_dir, progress, stop_after)
    finally:
        torch.set_num_threads(threads_before)


def _train(config: WindTunnelConfig, run_dir: str | Path | None, progress: bool, stop_after: int | None) -> TrainResult:
    run_path = Path(run_dir) if run_dir is not None else None
    task, evals = build_tasks(config)
    model, reference_params = build_model(config, task, _max_len(evals))
    device = resolve_device(config.device)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    eval_batches = _eval_sets(config, evals)
    history: list[dict[str, float]] = []
    step, elapsed, cpu = 0, 0.0, 0.0
    load_start = os.getloadavg()

    ckpt_path = run_path / "checkpoint.pt" if run_path is not None else None
    if run_path is not None:
        run_path.mkdir(parents=True, exist_ok=True)
        config_path = run_path / "config.json"
        if ckpt_path is not None and ckpt_path.exists():
            state = torch.load(ckpt_path, weights_only=False, map_location="cpu")
            if WindTunnelConfig.from_dict(state["config"]) != config:  # fields added later take defaults
                raise ValueError(f"{ckpt_path} was written by a different configuration; use a fresh run_dir")
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            generator.set_state(state["generator"])
            history, step, elapsed = state["history"], state["step"], state["elapsed"]
            cpu = state.get("cpu", 0.0)
            logger.info("resumed %s at step %d", run_path, step)
        _write_json(config.to_dict(), config_path)

    def checkpoint() -> None:
        if ckpt_path is not None:
            _save_atomic(
                {
                    "config": config.to_dict(),
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "generator": generator.get_state(),
                    "history": history,
                    "step": step,
                    "elapsed": elapsed,
                    "cpu": cpu,
                },
                ckpt_path,
            )

    model.train()
    last_metrics: dict[str, WindTunnelMetrics] = {}
    bar = tqdm(total=config.steps, initial=step, disable=not progress, desc=f"{config.task}/{config.model}")
    loss_sum, loss_n = 0.0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    with _DeferSignals() as signals:
        while step < config.steps and (stop_after is None or step < stop_after) and signals.received is None:
            lr = learning_rate(step, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = _to_device(task.sample(config.batch_size, generator), device)
            logits = model(batch.tokens)[:, batch.positions]  # (B, P, C)
            loss = windtunnel_loss(logits, batch, config.loss)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            bar.update(1)
            if step % config.eval_every == 0 or step == config.steps:
                last_metrics = {name: evaluate(model, b, config.loss) for name, b in eval_batches.items()}
                first = next(iter(last_metrics.values()))
                record = {
                    "step": step,
                    "lr": lr,
                    "train_loss": loss_sum / loss_n,
                    "entropy_mae_per_sample": first.entropy_mae_per_sample,
                    "entropy_mae_mean_curve": first.entropy_mae_mean_curve,
                    "kl": first.kl,
                    "elapsed_s": elapsed + time.perf_counter() - t0,
                    "cpu_s": cpu + time.process_time() - c0,
                }
                history.append(record)
                loss_sum, loss_n = 0.0, 0
                bar.set_postfix(mae=f"{first.entropy_mae_per_sample:.4f}", kl=f"{first.kl:.4f}")
                logger.info("step %d: %s", step, record)
            if step % config.checkpoint_every == 0 or step == config.steps:
                elapsed, t0 = elapsed + time.perf_counter() - t0, time.perf_counter()
                cpu, c0 = cpu + time.process_time() - c0, time.process_time()
                checkpoint()
    bar.close()
    elapsed += time.perf_counter() - t0
    cpu += time.process_time() - c0
    checkpoint()
    if not last_metrics:  # resumed a finished run, or stopped before the first evaluation
        last_metrics = {name: evaluate(model, b, config.loss) for name, b in eval_batches.items()}

    complete = step >= config.steps
    extra = {
        "oracle": oracle_numbers(config, eval_batches),
        "reference_transformer_params": reference_params,
        "wall_s": elapsed,
        "cpu_s": cpu,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "loadavg_start": list(load_start),
        "loadavg_end": list(os.getloadavg()),
        "versions": _versions(),
        "task_repr": repr(task),
    }
    result = TrainResult(config, last_metrics, history, count_parameters(model), step, complete, run_path, extra)
    if run_path is not None:
        write_run(result, run_path)
    if signals.received is not None:  # everything is saved; now let the signal end the run
        logger.info("interrupted at step %d (signal %d); run again to resume", step, signals.received)
        raise KeyboardInterrupt
    return result


def write_run(result: TrainResult, run_dir: Path) -> None:
    """Write ``metrics.json`` and ``curves.png`` for a finished (or stopped) run."""
    summary = {
        "config": result.config.to_dict(),
        "n_params": result.n_params,
        "steps_done": result.steps_done,
        "complete": result.complete,
        "final": {name: m.to_dict() for name, m in result.metrics.items()},
        "history": result.history,
        **result.extra,
    }
    _write_json(summary, run_dir / "metrics.json")
    plot_curves(result, run_dir / "curves.png")


def plot_curves(result: TrainResult, path: Path) -> None:
    """Per-position entropy curves, |ΔH| and KL per position (log scale), and the learning curve, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result.metrics)
    fig, axes = plt.subplots(2, n + 1, figsize=(4.2 * (n + 1), 6.5), squeeze=False)
    for i, (name, m) in enumerate(result.metrics.items()):
        c = m.curves
        t = range(1, len(c.entropy_bayes) + 1)
        ax = axes[0, i]
        ax.plot(t, c.entropy_bayes, "k-", lw=2, label="Bayes")
        ax.plot(t, c.entropy_model, "o--", ms=3, label=result.config.model)
        ax.set(title=f"{name}: mean entropy", xlabel="position", ylabel="bits")
        ax.legend()
        ax = axes[1, i]
        ax.semilogy(t, [max(v, 1e-8) for v in c.abs_entropy_error], label="|ΔH| per sample")
        ax.semilogy(t, [max(v, 1e-8) for v in c.kl], label="KL(Bayes‖model)")
        ax.set(title=f"{name}: errors", xlabel="position", ylabel="bits")
        ax.legend()
    if result.history:
        steps = [h["step"] for h in result.history]
        ax = axes[0, n]
        ax.semilogy(steps, [h["entropy_mae_per_sample"] for h in result.history], label="entropy MAE (per sample)")
        ax.semilogy(steps, [max(h["kl"], 1e-8) for h in result.history], label="KL")
        ax.set(title="learning curve (first eval set)", xlabel="step", ylabel="bits")
        ax.legend()
    axes[1, n].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
