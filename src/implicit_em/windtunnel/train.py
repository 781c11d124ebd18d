"""Train a model on a wind tunnel and measure it in bits against the exact posterior.

:func:`train` reads top to bottom: build the task, the fixed evaluation sets and the model from a frozen
:class:`~implicit_em.windtunnel.config.WindTunnelConfig`, then AdamW with linear warm-up and cosine decay,
gradient clipping, periodic evaluation and periodic checkpoints, and finally the run's results. A run
directory holds::

    config.json      the resolved configuration
    checkpoint.pt    model, optimiser, data-generator state, history, running loss (resume continues from here;
                     tensors and plain values only, loaded with weights_only=True: see windtunnel/_checkpoint.py)
    metrics.json     final metrics per evaluation set, history, the no-context oracle, versions, load average
    curves.png       per-position entropy curves (model and Bayes), |ΔH| and KL per position, learning curve

Killing a run and calling :func:`train` again with the same configuration and directory continues where the
last checkpoint left off; the numbers equal those of an uninterrupted run (same seed, same thread count, CPU),
``train_loss`` history included. A loss, gradient or weight that stops being finite ends the run with
:class:`NonFiniteLossError` naming the step; the checkpoint on disk stays the last finite state.
The settings live in :mod:`~implicit_em.windtunnel.config`, the figure in :mod:`~implicit_em.windtunnel.plots`,
atomic writes, thread control and signal deferral in :mod:`implicit_em._runio`.
"""

import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from implicit_em._runio import DeferSignals, torch_threads, versions, write_json_atomic, write_text_atomic
from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce
from implicit_em.windtunnel._checkpoint import CheckpointError, Progress, restore_checkpoint, save_checkpoint
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.metrics import WindTunnelMetrics, evaluate_predictions, predictive
from implicit_em.windtunnel.models import (
    CausalTransformer,
    count_parameters,
    matched_lstm,
    matched_mlp,
    matched_prefix_mlp,
)
from implicit_em.windtunnel.plots import plot_curves
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask

__all__ = [
    "CheckpointError",
    "NonFiniteLossError",
    "TrainResult",
    "WindTunnelConfig",
    "build_model",
    "build_tasks",
    "evaluate",
    "learning_rate",
    "resolve_device",
    "train",
    "windtunnel_loss",
    "write_run",
]

logger = logging.getLogger(__name__)

Task = BijectionTask | HMMFilteringTask
_TINY = torch.finfo(torch.float64).tiny


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
    if config.model == "prefix_mlp":
        return matched_prefix_mlp(reference, task.vocab_size, task.n_classes, max_len), reference
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
        # a probability that underflowed to 0 would make the KL +inf (not JSON): floor it at the smallest normal
        # double, which changes nothing above it (a finite-logit model's KL stays finite, and huge)
        probs.append(predictive(logits.double(), loss).clamp_min(_TINY).cpu())
        sums.append(torch.sigmoid(logits.double()).sum(dim=-1).cpu())  # (b, P)
    model.train(was_training)
    metrics = evaluate_predictions(torch.cat(probs), batch.posterior)
    if loss == "sigmoid":  # how far the independent sigmoids are from a distribution on their own
        metrics = dataclasses.replace(metrics, sigmoid_sum_error=float((torch.cat(sums) - 1).abs().mean()))
    return metrics


def resolve_device(name: str) -> torch.device:
    """``auto`` is cuda when available, else cpu; anything else is passed to :class:`torch.device`.

    Raises:
        ValueError: a cuda device was asked for and CUDA is not available.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but CUDA is not available (use device 'auto' or 'cpu')")
    return device


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


def _evaluate_all(model: nn.Module, eval_batches: dict[str, Batch], loss: str) -> dict[str, WindTunnelMetrics]:
    return {name: evaluate(model, b, loss) for name, b in eval_batches.items()}


class NonFiniteLossError(FloatingPointError):
    """Training produced a non-finite loss, gradient, weight or evaluation metric; the run stopped at that step.

    ``step`` is the optimiser step that went wrong (1-based, as in the history) and ``loss`` its training loss
    (NaN when the outputs were not finite). The checkpoint on disk, if any, is the last finite state: nothing
    non-finite is ever saved, and ``metrics.json`` is not rewritten.
    """

    def __init__(self, message: str, step: int, loss: float) -> None:
        super().__init__(message)
        self.step, self.loss = step, loss


class _RunDir:
    """A run directory (or none): resume from its checkpoint, save to it, say what it kept when a run diverges."""

    def __init__(self, config: WindTunnelConfig, run_dir: str | Path | None) -> None:
        self.config = config
        self.path = Path(run_dir) if run_dir is not None else None
        self.checkpoint = self.path / "checkpoint.pt" if self.path is not None else None
        self.saved_step: int | None = None  # the step of the checkpoint on disk

    def resume(self, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> Progress:
        """Create the directory, load its checkpoint when there is one, and (re)write ``config.json``."""
        if self.path is None or self.checkpoint is None:
            return Progress()
        self.path.mkdir(parents=True, exist_ok=True)
        progress = Progress()
        if self.checkpoint.exists():
            progress = restore_checkpoint(self.checkpoint, self.config, model, optimizer, generator)
            self.saved_step = progress.step
            logger.info("resumed %s at step %d", self.path, progress.step)
        write_json_atomic(self.config.to_dict(), self.path / "config.json")
        return progress

    def save(
        self, progress: Progress, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator
    ) -> None:
        """Checkpoint the run; never save non-finite weights over the last good state."""
        if self.checkpoint is None:
            return
        if not _all_finite(model.parameters()):
            mean_loss = progress.loss_sum / max(progress.loss_n, 1)
            raise self.diverged(progress.step, "the weights are not finite", mean_loss)
        save_checkpoint(self.checkpoint, self.config, progress, model, optimizer, generator)
        self.saved_step = progress.step

    def diverged(self, at: int, what: str, loss: float) -> NonFiniteLossError:
        """The error for a run that went non-finite at step ``at``, saying which checkpoint is kept."""
        if self.checkpoint is None:
            kept = "nothing was saved (run_dir is None)"
        elif self.saved_step is None:
            kept = f"no checkpoint was written before it ({self.checkpoint})"
        else:
            kept = f"the last good checkpoint (step {self.saved_step}) is kept in {self.checkpoint}"
        message = (
            f"training diverged at step {at}: {what} (loss {loss}, lr {learning_rate(at - 1, self.config):g}); {kept}. "
            "Lower lr or grad_clip and use a fresh run_dir (--out)"
        )
        return NonFiniteLossError(message, at, loss)


def _check_run_inputs(config: Any, run_dir: Any, stop_after: Any) -> None:
    """The arguments of :func:`train` that its config does not check: types, the run directory, the device."""
    if not isinstance(config, WindTunnelConfig):
        raise TypeError(f"config must be a WindTunnelConfig, got {type(config).__name__}")
    if run_dir is not None:
        if not isinstance(run_dir, (str, os.PathLike)):
            raise TypeError(f"run_dir must be a path or None, got {type(run_dir).__name__}")
        if Path(run_dir).exists() and not Path(run_dir).is_dir():
            raise ValueError(f"run_dir {str(run_dir)!r} is not a directory")
    if stop_after is not None and (isinstance(stop_after, bool) or not isinstance(stop_after, int) or stop_after < 0):
        raise ValueError(f"stop_after must be None or an integer >= 0, got {stop_after!r}")
    resolve_device(config.device)


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
    Raises:
        CheckpointError: ``run_dir/checkpoint.pt`` is unreadable, unsafe to load, or from another configuration.
        NonFiniteLossError: the loss (or a gradient, weight or metric) stopped being finite; the last good
            checkpoint is kept.
        KeyboardInterrupt: after SIGINT or SIGTERM, once the current step is done and checkpointed.
    """
    _check_run_inputs(config, run_dir, stop_after)
    with torch_threads(config.threads):  # None leaves torch's setting as it is
        return _train(config, run_dir, progress, stop_after)


def _non_finite(metrics: dict[str, WindTunnelMetrics]) -> str:
    """The non-finite numbers among the metrics, as ``"eval.kl=nan, ..."`` (the empty string when all are finite)."""
    bad = []
    for name, m in metrics.items():
        values = {k: v for k, v in m.to_dict().items() if isinstance(v, float)}
        curves = dataclasses.asdict(m.curves)  # lists of floats, one per position
        values.update({f"curves.{k}": next((x for x in c if not math.isfinite(x)), 0.0) for k, c in curves.items()})
        bad += [f"{name}.{k}={v}" for k, v in values.items() if not math.isfinite(v)]
    return ", ".join(bad[:4])


def _all_finite(tensors: Any) -> bool:
    return bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all())  # one sync, however many tensors


def _optimiser_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, lr: float, step: int, run_dir: _RunDir
) -> float:
    """One AdamW step at rate ``lr`` on one batch, ``step`` steps having been done; the batch's loss."""
    config = run_dir.config
    for group in optimizer.param_groups:
        group["lr"] = lr
    logits = model(batch.tokens)[:, batch.positions]  # (B, P, C)
    if not _all_finite([logits]):  # the losses refuse non-finite logits: say which step it was
        raise run_dir.diverged(step + 1, "the model's outputs are not finite", math.nan)
    loss = windtunnel_loss(logits, batch, config.loss)
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        raise run_dir.diverged(step + 1, "the loss is not finite", loss_value)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip))
    if not math.isfinite(grad_norm):
        raise run_dir.diverged(step + 1, f"the gradient norm is {grad_norm}", loss_value)
    optimizer.step()
    if not _all_finite(model.parameters()):
        raise run_dir.diverged(step + 1, "the update made the weights non-finite", loss_value)
    return loss_value


def _history_record(progress: Progress, lr: float, metrics: dict[str, WindTunnelMetrics]) -> dict[str, float]:
    """One evaluation's line of the history, read on the first evaluation set."""
    first = next(iter(metrics.values()))
    wall, cpu = progress.clock()
    return {
        "step": progress.step,
        "lr": lr,
        "train_loss": progress.loss_sum / progress.loss_n,
        "entropy_mae_per_sample": first.entropy_mae_per_sample,
        "entropy_mae_mean_curve": first.entropy_mae_mean_curve,
        "kl": first.kl,
        "elapsed_s": wall,
        "cpu_s": cpu,
    }


def _train(config: WindTunnelConfig, run_dir: str | Path | None, progress: bool, stop_after: int | None) -> TrainResult:
    # the task, its fixed evaluation sets, the model and the optimiser
    task, evals = build_tasks(config)
    model, reference_params = build_model(config, task, _max_len(evals))
    device = resolve_device(config.device)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)  # draws every training batch
    eval_batches = _eval_sets(config, evals)
    load_start = os.getloadavg()

    # the run directory: resume from its checkpoint, (re)write its config
    out = _RunDir(config, run_dir)
    run = out.resume(model, optimizer, generator)

    # the loop: one optimiser step per batch, evaluation every eval_every, a checkpoint every checkpoint_every
    model.train()
    last_metrics: dict[str, WindTunnelMetrics] = {}
    bar = tqdm(total=config.steps, initial=run.step, disable=not progress, desc=f"{config.task}/{config.model}")
    run.start_clock()
    signals = DeferSignals()
    try:
        with signals:  # Ctrl-C and SIGTERM end the run at a step boundary
            stop = config.steps if stop_after is None else min(config.steps, stop_after)
            while run.step < stop and signals.received is None:
                lr = learning_rate(run.step, config)
                batch = _to_device(task.sample(config.batch_size, generator), device)
                loss_value = _optimiser_step(model, optimizer, batch, lr, run.step, out)
                run.step += 1
                run.loss_sum, run.loss_n = run.loss_sum + loss_value, run.loss_n + 1
                bar.update(1)
                if run.step % config.eval_every == 0 or run.step == config.steps:
                    last_metrics = _evaluate_all(model, eval_batches, config.loss)
                    record = _history_record(run, lr, last_metrics)
                    bad = _non_finite(last_metrics)
                    if bad:  # the weights are finite but the outputs overflow
                        raise out.diverged(run.step, f"the evaluation is not finite ({bad})", loss_value)
                    run.history.append(record)
                    run.loss_sum, run.loss_n = 0.0, 0
                    bar.set_postfix(mae=f"{record['entropy_mae_per_sample']:.4f}", kl=f"{record['kl']:.4f}")
                    logger.info("step %d: %s", run.step, record)
                if run.step % config.checkpoint_every == 0 or run.step == config.steps:
                    run.bank_clock()
                    out.save(run, model, optimizer, generator)
    except Exception as error:
        if signals.received is not None:  # an interrupt held during the failed step still reaches the caller
            raise KeyboardInterrupt from error
        raise
    finally:
        bar.close()
    run.bank_clock()
    out.save(run, model, optimizer, generator)
    if not last_metrics:  # resumed a finished run, or stopped before the first evaluation
        last_metrics = _evaluate_all(model, eval_batches, config.loss)
        if _non_finite(last_metrics):
            raise out.diverged(run.step, f"the evaluation is not finite ({_non_finite(last_metrics)})", math.nan)

    # the results: metrics.json and curves.png; then a held signal ends the run
    extra = {
        "oracle": task.oracle_numbers(eval_batches),
        "reference_transformer_params": reference_params,
        "wall_s": run.elapsed,
        "cpu_s": run.cpu,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "loadavg_start": list(load_start),
        "loadavg_end": list(os.getloadavg()),
        "versions": versions(),
        "task_repr": repr(task),
    }
    complete = run.step >= config.steps
    n_params = count_parameters(model)
    result = TrainResult(config, last_metrics, run.history, n_params, run.step, complete, out.path, extra)
    if out.path is not None:
        write_run(result, out.path)
    if signals.received is not None:  # everything is saved; now let the signal end the run
        logger.info("interrupted at step %d (signal %d); run again to resume", run.step, signals.received)
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
    # strict JSON: a NaN would be written as the bare token NaN, which JSON readers refuse (the loop stops first)
    write_text_atomic(run_dir / "metrics.json", json.dumps(summary, indent=2, allow_nan=False))
    plot_curves(result, run_dir / "curves.png")
