"""The Lightning callback: the probe's metrics reach the trainer's loggers, and only on global rank zero.

On the code before this change the callback needed a Monitor and never called a logger: the CSV file had no
probe column and the fake non-zero rank probed and logged anyway.
"""

import csv
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from implicit_em.diagnostics import Monitor
from implicit_em.probes import attention

lightning = pytest.importorskip("lightning")
from implicit_em.diagnostics.lightning import MonitorCallback, probe_metrics  # noqa: E402


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(4, 4, dtype=torch.float64) for _ in range(3))

    def forward(self, x: Tensor) -> Tensor:
        return attention(self.q(x)[:, None], self.k(x)[:, None], self.v(x)[:, None], is_causal=True)[:, 0]


class _Module(lightning.LightningModule):  # type: ignore[misc,name-defined]
    def __init__(self) -> None:
        super().__init__()
        self.net = _Attention()

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path: Path, callback: MonitorCallback, logger: Any) -> None:
    data = torch.utils.data.TensorDataset(torch.randn(8, 5, 4, dtype=torch.float64))
    trainer = lightning.Trainer(
        max_steps=4,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[callback],
        default_root_dir=tmp_path,
    )
    trainer.fit(_Module(), torch.utils.data.DataLoader(data, batch_size=2))


def test_metrics_reach_the_csv_logger(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="run")
    _fit(tmp_path, MonitorCallback(every=2), logger)
    rows = list(csv.DictReader(open(Path(logger.log_dir) / "metrics.csv")))
    probed = [r for r in rows if r.get("implicit_em/routing_law")]
    assert [int(r["step"]) for r in probed] == [0, 2]
    for column in ("implicit_em/value_law", "implicit_em/laws_passed", "implicit_em/blocks.0.attn.entropy"):
        assert all(r[column] != "" for r in probed), column
    assert all(
        float(r["implicit_em/routing_law"]) <= 1e-10 and float(r["implicit_em/laws_passed"]) == 1.0 for r in probed
    )


def test_the_monitor_path_still_records(tmp_path: Path) -> None:
    monitor = Monitor(tmp_path / "log.jsonl")
    _fit(tmp_path, MonitorCallback(monitor, every=2), False)
    monitor.close()
    laws = [r for r in monitor.records if "routing_law" in r]
    assert [r["step"] for r in laws] == [0, 2] and len([r for r in monitor.records if "loss" in r]) == 4


class _Logger:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append((metrics, step))


@pytest.mark.parametrize("rank_zero", [True, False])
def test_only_global_rank_zero_probes_and_logs(rank_zero: bool) -> None:
    module, x = _Attention(), torch.randn(2, 5, 4, dtype=torch.float64)
    logger, monitor = _Logger(), Monitor()
    trainer = SimpleNamespace(global_step=0, is_global_zero=rank_zero, loggers=[logger])
    callback = MonitorCallback(monitor)
    callback.on_train_batch_start(trainer, module, None, 0)
    loss = module(x).pow(2).mean()
    loss.backward()
    callback.on_before_optimizer_step(trainer, module, None)
    callback.on_train_batch_end(trainer, module, {"loss": loss}, None, 0)
    if rank_zero:
        assert len(logger.calls) == 1 and logger.calls[0][1] == 0 and "implicit_em/routing_law" in logger.calls[0][0]
        assert len(monitor.records) == 2
    else:
        assert logger.calls == [] and monitor.records == []


def test_probe_metrics_are_scalars_named_per_site() -> None:
    from implicit_em.probes import AttentionProbe

    module, x = _Attention(), torch.randn(2, 5, 4, dtype=torch.float64)
    with AttentionProbe(module, mode="summary") as probe:
        module(x).sum().backward()
    metrics = probe_metrics(probe, prefix="p/")
    assert set(metrics) == {
        "p/routing_law", "p/value_law", "p/laws_passed", "p/blocks.0.attn.entropy", "p/blocks.0.attn.max_weight",
        "p/blocks.0.attn.routing_law", "p/blocks.0.attn.value_law",
    }  # fmt: skip
    assert all(isinstance(v, float) for v in metrics.values()) and metrics["p/laws_passed"] == 1.0
