"""A PyTorch Lightning ``Callback`` that feeds a :class:`~implicit_em.diagnostics.Monitor` (optional extra).

Needs ``lightning`` (``pip install implicit-em[lightning]``). Around every ``every``-th training batch it opens a
summary-mode :class:`~implicit_em.probes.AttentionProbe` on the LightningModule; in ``on_before_optimizer_step``
(gradients complete and, under AMP, unscaled) it closes the probe and logs the law residuals and per-head
statistics; in ``on_train_batch_end`` it logs the loss.
"""

from typing import Any

from implicit_em.diagnostics._monitor import Monitor
from implicit_em.probes import AttentionProbe

__all__ = [
    "MonitorCallback",
]

try:
    from lightning.pytorch import Callback
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "implicit_em.diagnostics.lightning needs PyTorch Lightning: pip install implicit-em[lightning]"
    ) from error


class MonitorCallback(Callback):
    """Record attention diagnostics and the loss of a Lightning training run in a Monitor.

    Args:
        monitor: where the records go.
        every: probe every ``every``-th optimizer step (other steps run untouched).
        attention: open an AttentionProbe (set False to log only the loss).
        probe_kwargs: extra arguments for :class:`~implicit_em.probes.AttentionProbe` (``layers``, ``heads``,
            ``laws``); the mode is always ``"summary"``.
    """

    def __init__(
        self, monitor: Monitor, every: int = 1, attention: bool = True, probe_kwargs: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be a positive integer, got {every}")
        self.monitor, self.every, self.attention = monitor, every, attention
        self.probe_kwargs = dict(probe_kwargs or {})
        self._probe: AttentionProbe | None = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.attention and trainer.global_step % self.every == 0:
            self._probe = AttentionProbe(pl_module, mode="summary", **self.probe_kwargs).__enter__()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._close(trainer.global_step, log=True)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._close(trainer.global_step, log=False)
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.monitor.log(trainer.global_step, loss=loss)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close(trainer.global_step, log=False)

    def _close(self, step: int, log: bool) -> None:
        probe, self._probe = self._probe, None
        if probe is None:
            return
        probe.__exit__(None, None, None)
        if log:
            self.monitor.log_attention(step, probe)
