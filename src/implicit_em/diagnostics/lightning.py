"""A PyTorch Lightning ``Callback`` that logs the attention probe through the trainer's loggers (optional extra).

Needs ``lightning`` (``pip install implicit-em[lightning]``). Around every ``every``-th training batch it opens a
summary-mode :class:`~implicit_em.probes.AttentionProbe` on the LightningModule; in ``on_before_optimizer_step``
(gradients complete and, under AMP, unscaled) it closes the probe and sends its metrics to every logger of the
trainer (``trainer.loggers``: TensorBoard, CSV, W&B, MLflow... whatever the user configured) with
``log_metrics(metrics, step)``, and, when given one, to a :class:`~implicit_em.diagnostics.Monitor`. Under
distributed training only global rank zero probes and logs (``trainer.is_global_zero``): the other ranks run
untouched, so that one process writes one record per step.

Metrics (scalars, prefix ``implicit_em/`` by default): ``routing_law`` and ``value_law`` (max residual over
sites and heads), ``laws_passed`` (1.0 or 0.0, the :class:`~implicit_em.probes.LawVerdict` against the dtype's
tolerance), and per site ``<site>.entropy``, ``<site>.max_weight`` (means over heads) and ``<site>.routing_law``,
``<site>.value_law`` (max over heads).
"""

from typing import Any

from implicit_em.diagnostics._monitor import Monitor
from implicit_em.probes import AttentionProbe

__all__ = [
    "MonitorCallback",
    "probe_metrics",
]

try:
    from lightning.pytorch import Callback
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "implicit_em.diagnostics.lightning needs PyTorch Lightning: pip install implicit-em[lightning]"
    ) from error


def probe_metrics(probe: AttentionProbe, prefix: str = "implicit_em/") -> dict[str, float]:
    """The scalars a logger receives from a closed summary-mode probe (the module docstring lists them)."""
    metrics: dict[str, float] = {}
    try:
        verdict = probe.check_laws()
    except RuntimeError:  # a forward-only step, or laws=False: no law residuals
        verdict = None
    if verdict is not None:
        metrics.update(
            {f"{prefix}{law}": float(verdict[law]) for law in ("routing_law", "value_law") if law in verdict}
        )
        metrics[f"{prefix}laws_passed"] = float(verdict.passed)
    for site, stats in probe.summary().items():
        for name in ("entropy", "max_weight"):
            if name in stats:
                metrics[f"{prefix}{site}.{name}"] = float(stats[name].mean())
        for name in ("routing_law", "value_law"):
            if name in stats:
                metrics[f"{prefix}{site}.{name}"] = float(stats[name].max())
    return metrics


class MonitorCallback(Callback):
    """Log attention diagnostics of a Lightning training run to the trainer's loggers (and a Monitor).

    Args:
        monitor: also record the probe (per-head tensors) and the loss in this Monitor; ``None`` for loggers only.
        every: probe every ``every``-th optimizer step (other steps run untouched).
        attention: open an AttentionProbe (set False to record only the loss in the Monitor).
        probe_kwargs: extra arguments for :class:`~implicit_em.probes.AttentionProbe` (``layers``, ``heads``,
            ``laws``); the mode is always ``"summary"``.
        prefix: prepended to every metric name sent to the loggers.
    """

    def __init__(
        self,
        monitor: Monitor | None = None,
        every: int = 1,
        attention: bool = True,
        probe_kwargs: dict[str, Any] | None = None,
        prefix: str = "implicit_em/",
    ) -> None:
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be a positive integer, got {every}")
        self.monitor, self.every, self.attention, self.prefix = monitor, every, attention, prefix
        self.probe_kwargs = dict(probe_kwargs or {})
        self._probe: AttentionProbe | None = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.attention and trainer.is_global_zero and trainer.global_step % self.every == 0:
            self._probe = AttentionProbe(pl_module, mode="summary", **self.probe_kwargs).__enter__()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._close(trainer, log=True)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._close(trainer, log=False)
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and self.monitor is not None and trainer.is_global_zero:
            self.monitor.log(trainer.global_step, loss=loss)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close(trainer, log=False)

    def _close(self, trainer: Any, log: bool) -> None:
        probe, self._probe = self._probe, None
        if probe is None:
            return
        probe.__exit__(None, None, None)
        if not log:
            return
        step = trainer.global_step
        metrics = probe_metrics(probe, self.prefix)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        if self.monitor is not None:
            self.monitor.log_attention(step, probe)
