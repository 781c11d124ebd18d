"""Wind-tunnel training loop: schedule, losses, reproducibility, checkpoint/resume, run directory, CLI."""

import dataclasses
import importlib
import json
import math
import os
import signal
import threading
from pathlib import Path

import pytest
import torch

from implicit_em.windtunnel.__main__ import main
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.tasks import Batch, BijectionTask, HMMFilteringTask
from implicit_em.windtunnel.train import learning_rate, resolve_device, train, windtunnel_loss


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]


def test_learning_rate_warms_up_then_follows_the_cosine() -> None:
    c = WindTunnelConfig(steps=110, warmup_steps=10, lr=1e-3, min_lr=1e-5)
    assert learning_rate(0, c) == pytest.approx(1e-4)
    assert learning_rate(9, c) == pytest.approx(1e-3)
    assert learning_rate(10, c) == pytest.approx(1e-3)
    assert learning_rate(60, c) == pytest.approx(1e-5 + 0.5 * (1e-3 - 1e-5))
    assert learning_rate(110, c) == pytest.approx(1e-5)


def test_config_rejects_unknown_options() -> None:
    with pytest.raises(ValueError, match="loss"):
        WindTunnelConfig(loss="hinge")
    with pytest.raises(ValueError, match="model"):
        WindTunnelConfig(model="cnn")
    with pytest.raises(ValueError, match="task"):
        WindTunnelConfig(task="copy")


def test_softmax_loss_with_soft_targets_is_cross_entropy() -> None:
    batch = HMMFilteringTask(n_obs=3).sample(4, torch.Generator().manual_seed(0))
    logits = torch.randn(4, 3, 5, dtype=torch.float64)
    expected = torch.nn.functional.cross_entropy(
        logits.reshape(-1, 5), batch.posterior.reshape(-1, 5), reduction="mean"
    )
    torch.testing.assert_close(windtunnel_loss(logits, batch, "softmax"), expected)


def test_sigmoid_loss_is_independent_bce_summed_over_classes() -> None:
    batch = BijectionTask(4).sample(2, torch.Generator().manual_seed(0))
    logits = torch.randn(2, 3, 4, dtype=torch.float64)
    target = torch.nn.functional.one_hot(batch.labels, 4).double()
    p = torch.sigmoid(logits)
    expected = -(target * p.log() + (1 - target) * (1 - p).log()).sum(-1).mean()
    torch.testing.assert_close(windtunnel_loss(logits, batch, "sigmoid"), expected)


def test_sigmoid_loss_minimiser_is_the_posterior() -> None:
    """Independent BCE is proper per class: its minimiser over logits puts sigmoid(z_c) = p_c."""
    batch = HMMFilteringTask(n_obs=2).sample(1, torch.Generator().manual_seed(3))
    z = torch.zeros_like(batch.posterior, requires_grad=True)
    opt = torch.optim.LBFGS([z], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-15)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = windtunnel_loss(z, batch, "sigmoid")
        loss.backward()
        return loss

    opt.step(closure)
    torch.testing.assert_close(torch.sigmoid(z.detach()), batch.posterior, atol=1e-6, rtol=0)


@pytest.mark.parametrize("task", ["bijection", "hmm"])
def test_same_seed_same_numbers(task: str, tmp_path: Path) -> None:
    c = WindTunnelConfig.tiny(task=task)
    a = train(c, tmp_path / "a", progress=False)
    b = train(c, tmp_path / "b", progress=False)
    timing = ("elapsed_s", "cpu_s")
    numbers = [[{k: v for k, v in h.items() if k not in timing} for h in r.history] for r in (a, b)]
    assert numbers[0] == numbers[1] and len(numbers[0]) == 2
    for k, v in _weights(tmp_path / "a").items():
        torch.testing.assert_close(v, _weights(tmp_path / "b")[k], rtol=0, atol=0)


def test_resume_after_interruption_equals_uninterrupted_run(tmp_path: Path) -> None:
    c = WindTunnelConfig.tiny(steps=30, checkpoint_every=5, eval_every=10)
    straight = train(c, tmp_path / "straight", progress=False)
    stopped = train(c, tmp_path / "resumed", progress=False, stop_after=15)
    assert stopped.steps_done == 15 and not stopped.complete
    resumed = train(c, tmp_path / "resumed", progress=False)
    assert resumed.complete and resumed.steps_done == 30
    for k, v in _weights(tmp_path / "straight").items():
        torch.testing.assert_close(v, _weights(tmp_path / "resumed")[k], rtol=0, atol=0)
    assert [h["kl"] for h in straight.history] == [h["kl"] for h in resumed.history]


def test_resume_refuses_a_different_config(tmp_path: Path) -> None:
    train(WindTunnelConfig.tiny(steps=5), tmp_path, progress=False)
    with pytest.raises(ValueError, match="different configuration"):
        train(WindTunnelConfig.tiny(steps=5, lr=0.5), tmp_path, progress=False)


def test_run_directory_holds_config_metrics_and_png(tmp_path: Path) -> None:
    result = train(WindTunnelConfig.tiny(task="hmm"), tmp_path, progress=False)
    config = json.loads((tmp_path / "config.json").read_text())
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert WindTunnelConfig.from_dict(config) == result.config
    assert set(metrics["final"]) == {"K=4", "K=6"}
    for m in metrics["final"].values():
        assert len(m["curves"]["entropy_bayes"]) == int(m["curves"] and len(m["curves"]["kl"]))
        assert m["kl"] >= 0 and m["entropy_mae_mean_curve"] <= m["entropy_mae_per_sample"] + 1e-12
        assert m["sigmoid_sum_error"] is None  # softmax run
    baselines = metrics["oracle"]["K=4"]
    assert baselines["emission_only"]["kl"] < baselines["uniform"]["kl"]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert metrics["loadavg_start"] and metrics["versions"]["torch"] == torch.__version__


@pytest.mark.parametrize("model", ["mlp", "prefix_mlp", "lstm"])
def test_matched_models_train_and_report_reference_size(model: str, tmp_path: Path) -> None:
    result = train(WindTunnelConfig.tiny(model=model), tmp_path, progress=False)
    ref = result.extra["reference_transformer_params"]
    assert abs(result.n_params - ref) / ref < 0.10


def test_quick_smoke_transformer_learns_bijection_and_mlp_sits_at_floor(tmp_path: Path) -> None:
    """A few hundred steps on V = 5: the transformer beats the no-context floor, the MLP stays on it."""
    common = dict(n_symbols=5, d_model=32, d_ff=64, n_heads=2, n_layers=2, batch_size=64, lr=3e-3)
    c = WindTunnelConfig.tiny(steps=400, warmup_steps=20, eval_every=400, eval_size=512, **common)
    floor = BijectionTask(5).no_context_mae()
    tr = train(c, tmp_path / "t", progress=False).metrics["eval"]
    mlp = train(WindTunnelConfig.tiny(steps=400, model="mlp", eval_every=400, eval_size=512, **common),
                tmp_path / "m", progress=False).metrics["eval"]  # fmt: skip
    assert tr.kl < 0.5 * floor
    assert mlp.entropy_mae_per_sample == pytest.approx(floor, abs=0.05)


def test_cli_oracle_prints_the_computed_floors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracle", "--n-symbols", "20"]) == 0
    out = json.loads(capsys.readouterr().out)["no_context_entropy_mae_bits"]
    assert math.isclose(out["replacement=False"], 1.107, abs_tol=5e-4)
    assert math.isclose(out["replacement=True"], 1.849, abs_tol=5e-4)


def test_cli_train_tiny_writes_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--preset", "tiny", "--out", str(tmp_path), "--no-progress", "--steps", "6", "--loss", "sigmoid"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["steps"] == 6
    assert printed["final"]["eval"]["sigmoid_sum_error"] >= 0
    assert json.loads((tmp_path / "config.json").read_text())["loss"] == "sigmoid"


def test_cli_summarize_collects_final_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train(WindTunnelConfig.tiny(steps=4), tmp_path / "run", progress=False)
    assert main(["summarize", str(tmp_path / "run"), "--out", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())["run"]
    assert summary["steps_done"] == 4 and "curves" not in summary["final"]["eval"]
    assert summary["final"]["eval"]["kl"] >= 0 and summary["oracle"]["no_context_entropy_mae"] > 0


def test_device_auto_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    result = train(WindTunnelConfig.tiny(steps=3, device="auto"), tmp_path, progress=False)
    assert result.extra["device"] == "cpu"


def test_sigint_mid_run_checkpoints_at_a_step_boundary_and_resumes_exactly(tmp_path: Path) -> None:
    """Ctrl-C during training: metrics and checkpoint are written, and resuming matches an uninterrupted run."""
    c = WindTunnelConfig.tiny(steps=100_000, checkpoint_every=10_000, eval_every=10_000)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        train(c, tmp_path / "a", progress=False)
    timer.join()
    stopped_at = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)["step"]
    assert 0 < stopped_at < c.steps
    assert not json.loads((tmp_path / "a" / "metrics.json").read_text())["complete"]
    resumed = train(c, tmp_path / "a", progress=False, stop_after=stopped_at + 7)
    straight = train(c, tmp_path / "b", progress=False, stop_after=stopped_at + 7)
    assert resumed.steps_done == straight.steps_done == stopped_at + 7
    for k, v in _weights(tmp_path / "a").items():
        torch.testing.assert_close(v, _weights(tmp_path / "b")[k], rtol=0, atol=0)


@pytest.mark.parametrize("soft", [False, True])
def test_losses_equal_the_library_objectives(soft: bool) -> None:
    """Two paths, one answer: the wind-tunnel losses are the library's constrained CE (d = -z) and sigmoid BCE."""
    from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce

    task = HMMFilteringTask(n_obs=3) if soft else BijectionTask(5)
    batch = task.sample(4, torch.Generator().manual_seed(1))
    logits = torch.randn(*batch.posterior.shape, dtype=torch.float64)
    target = batch.posterior if soft else batch.labels
    ce = constrained_cross_entropy(-logits, target).mean()
    bce = independent_sigmoid_bce(logits, target).mean()
    torch.testing.assert_close(windtunnel_loss(logits, batch, "softmax"), ce, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(windtunnel_loss(logits, batch, "sigmoid"), bce, rtol=1e-12, atol=1e-12)


def _restated_loss(logits: torch.Tensor, batch: Batch, loss: str) -> torch.Tensor:
    """The wind-tunnel loss as train.py wrote it out before it called the library's objectives."""
    if batch.labels is not None:
        target = torch.nn.functional.one_hot(batch.labels, logits.shape[-1]).to(logits.dtype)
    else:
        target = batch.posterior.to(logits.dtype)
    if loss == "softmax":
        return -(target * torch.log_softmax(logits, dim=-1)).sum(dim=-1).mean()
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none").sum(dim=-1).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("loss", ["softmax", "sigmoid"])
@pytest.mark.parametrize("soft", [False, True])
def test_loss_and_gradient_equal_the_restated_formula_bit_for_bit(soft: bool, loss: str, dtype: torch.dtype) -> None:
    """Old == new: calling the library's objectives changes no bit of the loss or of its gradient."""
    task = HMMFilteringTask(n_obs=3) if soft else BijectionTask(5)
    batch = task.sample(8, torch.Generator().manual_seed(2))
    logits = (3 * torch.randn(*batch.posterior.shape, dtype=torch.float64)).to(dtype)
    grads = []
    for f in (windtunnel_loss, _restated_loss):
        z = logits.clone().requires_grad_(True)
        value = f(z, batch, loss)
        value.backward()
        grads.append((value.detach(), z.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=0)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=0, atol=0)


def test_training_module_re_exports_the_config_and_uses_the_plots_module() -> None:
    """WindTunnelConfig lives in windtunnel/config.py and plot_curves in windtunnel/plots.py; train uses them."""
    from implicit_em.windtunnel import config, plots

    train_module = importlib.import_module("implicit_em.windtunnel.train")  # the package's `train` is the function
    assert train_module.WindTunnelConfig is config.WindTunnelConfig is WindTunnelConfig
    assert train_module.plot_curves is plots.plot_curves
    assert [f.name for f in dataclasses.fields(WindTunnelConfig)][:3] == ["task", "n_symbols", "replacement"]
