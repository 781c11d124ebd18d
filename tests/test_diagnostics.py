"""Diagnostics: closed forms for the metrics, collapse detectors on constructed runs, the Monitor and its sinks."""

import json
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from implicit_em import objectives
from implicit_em.diagnostics import (
    Monitor,
    component_usage,
    dead_components,
    dominance,
    drift,
    effective_components,
    metric_collapse,
    min_variance,
    relative_change,
    responsibility_histograms,
    singularity,
    two_timescale,
    usage_entropy,
)
from implicit_em.distances import GaussianComponents
from implicit_em.probes import AttentionProbe, attention

# ---- metrics: closed forms --------------------------------------------------------------------------------


def test_uniform_responsibilities_give_log_k_entropy_and_k_effective_components() -> None:
    r = torch.full((7, 4), 0.25, dtype=torch.float64)
    usage = component_usage(r)
    torch.testing.assert_close(usage, torch.full((4,), 0.25, dtype=torch.float64))
    torch.testing.assert_close(usage_entropy(usage), torch.log(torch.tensor(4.0, dtype=torch.float64)))
    torch.testing.assert_close(effective_components(usage), torch.tensor(4.0, dtype=torch.float64))


def test_one_component_taking_all_mass_has_one_effective_component() -> None:
    r = torch.zeros(5, 3, dtype=torch.float64)
    r[:, 1] = 1.0
    assert float(usage_entropy(component_usage(r))) == 0.0
    assert float(effective_components(component_usage(r))) == 1.0


def test_histograms_count_each_sample_once_per_component() -> None:
    r = torch.tensor([[0.0, 1.0], [0.55, 0.45], [1.0, 0.0]], dtype=torch.float64)
    h = responsibility_histograms(r, bins=2)
    torch.testing.assert_close(h, torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64))


def test_drift_and_relative_change_closed_forms() -> None:
    before = torch.tensor([[3.0, 4.0], [1.0, 0.0]], dtype=torch.float64)
    after = torch.tensor([[3.0, 4.0], [1.0, 2.0]], dtype=torch.float64)
    torch.testing.assert_close(drift(before, after), torch.tensor([0.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(relative_change(before, after), torch.tensor(2.0 / 26**0.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="shapes differ"):
        relative_change(before, after[:1])


def test_two_timescale_ratio_is_value_change_over_pattern_change() -> None:
    a0, v0, w0 = torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 3), torch.ones(2, 2)
    m = two_timescale(a0, a0 * 1.1, v0, v0 * 1.5, w0, w0 * 3)
    torch.testing.assert_close(m.attention, torch.tensor(0.1))
    torch.testing.assert_close(m.ratio, torch.tensor(5.0))
    torch.testing.assert_close(m.w_v, torch.tensor(2.0))


@pytest.mark.parametrize("covariance_type", ["full", "tied", "diag", "spherical"])
def test_min_variance_is_smallest_covariance_eigenvalue(covariance_type: str) -> None:
    components = GaussianComponents(3, 4, covariance_type=covariance_type, dtype=torch.float64)
    with torch.no_grad():
        for p in components.parameters():
            p.add_(0.3 * torch.randn_like(p))
    cov = components.covariances()
    if covariance_type == "diag":
        expected = cov.amin(dim=-1)
    elif covariance_type == "spherical":
        expected = cov
    else:
        expected = torch.linalg.eigvalsh(cov if covariance_type == "full" else cov[None]).amin(dim=-1)
    torch.testing.assert_close(min_variance(components.whitening(), covariance_type), expected)


# ---- collapse detectors on constructed runs ------------------------------------------------------------------


def _clusters(n: int = 60) -> Tensor:
    centres = torch.tensor([[-4.0, 0.0], [0.0, 4.0], [4.0, 0.0]], dtype=torch.float64)
    return (centres[:, None] + torch.randn(3, n // 3, 2, dtype=torch.float64)).reshape(-1, 2)


def _train(
    x: Tensor, means: Tensor, volume: bool, steps: int = 40, lr: float = 0.1, fixed_means: bool = False
) -> dict[str, list[Tensor]]:
    """Adam on the mixture NLL of diagonal Gaussian components; returns per-step usage, log|det W|, min variance."""
    components = GaussianComponents(means.shape[0], x.shape[1], covariance_type="diag", dtype=torch.float64)
    with torch.no_grad():
        components.means.copy_(means)
    components.means.requires_grad_(not fixed_means)
    optimiser = torch.optim.Adam([p for p in components.parameters() if p.requires_grad], lr=lr)
    history: dict[str, list[Tensor]] = {"usage": [], "log_det": [], "min_variance": []}
    for _ in range(steps):
        energies = components(x)
        d = energies.energy if volume else energies.distance
        with torch.no_grad():
            history["usage"].append(component_usage(objectives.responsibilities(d)))
            history["log_det"].append(components.log_det().clone())
            history["min_variance"].append(min_variance(components.whitening(), "diag"))
        optimiser.zero_grad()
        objectives.mixture_nll(d).mean().backward()
        optimiser.step()
    return history


def _stacked(history: list[Tensor]) -> Tensor:
    return torch.stack(history)


CENTRES = torch.tensor([[-4.0, 0.0], [0.0, 4.0], [4.0, 0.0]], dtype=torch.float64)


def test_dominance_and_dead_components_fire_when_one_component_captures_the_data() -> None:
    far = torch.tensor([[0.0, 0.0], [60.0, 60.0], [-60.0, 60.0]], dtype=torch.float64)
    history = _train(_clusters(), far, volume=True, steps=10)
    found = dominance(_stacked(history["usage"]), steps=range(100, 110))
    assert found is not None and found.step == 100 and found.components == (0,)
    dead = dead_components(_stacked(history["usage"]), patience=3)
    assert dead is not None and dead.step == 2 and dead.components == (1, 2)


def test_a_dead_component_that_recovers_is_no_longer_named_and_a_finding_is_dated() -> None:
    dead, back = torch.tensor([0.999, 0.001]), torch.tensor([0.68, 0.32])
    assert dead_components(torch.stack([dead] * 4 + [back] * 3), patience=3) is None  # it holds 32% now
    found = dead_components(torch.stack([back] * 2 + [dead] * 5), steps=range(10, 17), patience=3)
    assert found is not None and found.components == (1,) and found.step == 14  # under the floor from step 12
    assert "for the last 5 steps (flagged at step 14)" in found.message and found.value == pytest.approx(0.001)
    again = dead_components(torch.stack([dead] * 4 + [back] + [dead] * 3), patience=3)
    assert again is not None and again.step == 7  # the run that counts is the one through the last row


def test_dominance_and_dead_components_stay_silent_on_a_healthy_run() -> None:
    history = _train(_clusters(), CENTRES, volume=True, steps=10)
    assert dominance(_stacked(history["usage"])) is None
    assert dead_components(_stacked(history["usage"])) is None


def test_metric_collapse_fires_without_the_volume_term() -> None:
    history = _train(_clusters(), CENTRES, volume=False, steps=40)
    found = metric_collapse(_stacked(history["log_det"]), drop=5.0, window=5)
    assert found is not None and found.kind == "metric_collapse" and found.value > 5.0
    assert metric_collapse(_stacked(_train(_clusters(), CENTRES, volume=True, steps=40)["log_det"])) is None


def test_singularity_fires_on_a_component_sitting_on_one_point() -> None:
    x = torch.cat([_clusters(), torch.tensor([[20.0, 20.0]], dtype=torch.float64)])
    means = torch.cat([CENTRES[:2], torch.tensor([[20.0, 20.0]], dtype=torch.float64)])
    history = _train(x, means, volume=True, steps=40, lr=0.5, fixed_means=True)
    found = singularity(_stacked(history["min_variance"]), floor=1e-6)
    assert found is not None and found.components == (2,)
    healthy = _train(_clusters(), CENTRES, volume=True, steps=40, lr=0.5)
    assert singularity(_stacked(healthy["min_variance"]), floor=1e-6) is None


def test_detectors_reject_malformed_histories() -> None:
    with pytest.raises(ValueError, match=r"\(steps, K\)"):
        dominance(torch.ones(3))
    with pytest.raises(ValueError, match="step labels"):
        dominance(torch.ones(3, 2), steps=[0, 1])


# ---- the Monitor ----------------------------------------------------------------------------------------------


def test_monitor_writes_json_lines_and_reports_findings(tmp_path: Path) -> None:
    far = torch.tensor([[0.0, 0.0], [60.0, 60.0], [-60.0, 60.0]], dtype=torch.float64)
    x = _clusters()
    with Monitor(tmp_path / "run" / "log.jsonl") as monitor:
        for step in range(5):
            r = objectives.responsibilities(((x[:, None] - far) ** 2).sum(-1) / 2)
            monitor.log_responsibilities(step, r, bins=4)
            monitor.log_components(step, means=far + step, log_det=torch.zeros(3), min_variance=torch.ones(3))
    lines = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert len(lines[0]["usage"]) == 3 and len(lines[0]["histograms"][0]) == 4
    assert "drift" in lines[3] and "drift" not in lines[1]
    kinds = {f.kind: f for f in monitor.findings()}
    assert set(kinds) == {"dominance", "dead_components"}
    assert kinds["dominance"].step == 0 and kinds["dead_components"].step == 2


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(4, 4, dtype=torch.float64) for _ in range(3))

    def forward(self, x: Tensor) -> Tensor:
        return attention(self.q(x)[:, None], self.k(x)[:, None], self.v(x)[:, None], is_causal=True)[:, 0]


def test_monitor_records_laws_and_the_two_timescale_measure() -> None:
    model, x = _Attention(), torch.randn(2, 5, 4, dtype=torch.float64)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = Monitor()
    for step in range(3):
        with AttentionProbe(model) as probe:
            loss = model(x).pow(2).mean()
            loss.backward()
        record = monitor.log_attention(step, probe, w_v={"blocks.0.attn": model.v.weight})
        optimiser.step()
        optimiser.zero_grad()
    assert record["routing_law"] <= 1e-10 and record["value_law"] <= 1e-10
    assert record["blocks.0.attn.timescale_ratio"] > 0 and record["blocks.0.attn.w_v_change"] > 0
    assert "blocks.0.attn.entropy" in record


def test_tensorboard_sink(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    with Monitor(tensorboard=tmp_path / "tb") as monitor:
        monitor.log(0, loss=1.5, usage=torch.tensor([0.5, 0.5]))
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_lightning_callback_logs_attention_and_loss(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    from implicit_em.diagnostics.lightning import MonitorCallback

    class Module(lightning.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = _Attention()

        def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(8, 5, 4, dtype=torch.float64))
    monitor = Monitor(tmp_path / "log.jsonl")
    trainer = lightning.Trainer(
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[MonitorCallback(monitor, every=2)],
        default_root_dir=tmp_path,
    )
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=2))
    monitor.close()
    laws = [r for r in monitor.records if "routing_law" in r]
    losses = [r for r in monitor.records if "loss" in r]
    assert [r["step"] for r in laws] == [0, 2] and len(losses) == 4
    assert all(r["routing_law"] <= 1e-10 for r in laws)


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_monitor_lines_are_strict_json_with_non_finite_values_as_null(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Monitor(path) as monitor:
        record = monitor.log(0, loss=float("nan"), change=torch.tensor(float("inf")), usage=torch.tensor([0.5, -1e999]))
        monitor.log_parameters(1, w=torch.zeros(3))
        monitor.log_parameters(2, w=torch.ones(3))  # relative change from zero: inf
    lines = [_strict(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"step": 0, "loss": None, "change": None, "usage": [0.5, None]}
    assert lines[2] == {"step": 2, "w_change": None}
    assert record["loss"] != record["loss"]  # in memory the value stays NaN


@pytest.mark.parametrize(
    ("r", "match"),
    [
        (torch.tensor([[0.4, 0.6], [float("nan"), 0.5]]), "contains NaN or inf"),
        (torch.full((2, 2), 4.0), "must lie in \\[0, 1\\]"),  # rows summing to 8: counts, not responsibilities
        (torch.tensor([[0.2, 0.2], [0.5, 0.5]]), "must sum to 1"),
        (torch.tensor([[1.5, -0.5]]), "must lie in \\[0, 1\\]"),
    ],
)
def test_usage_refuses_what_is_not_a_responsibility(r: Tensor, match: str) -> None:
    """Before: [0.4, nan] for a NaN row and [2.65, 1.85]-like usages for rows summing to 8, without a word."""
    with pytest.raises(ValueError, match=match):
        component_usage(r)
    with pytest.raises(ValueError, match=match):
        responsibility_histograms(r, bins=2)


def test_usage_of_no_mass_is_an_error_and_a_float32_softmax_passes() -> None:
    with pytest.raises(ValueError, match="positive sum"):
        effective_components(torch.zeros(3))  # before: NaN
    with pytest.raises(ValueError, match="contains NaN or inf"):
        usage_entropy(torch.tensor([0.5, float("nan")]))
    r = torch.softmax(torch.randn(512, 1000, generator=torch.Generator().manual_seed(0)) * 5, dim=1)  # float32
    assert float(component_usage(r).sum()) == pytest.approx(1.0, abs=1e-4)
    from implicit_em import set_validate_args

    set_validate_args(False)
    try:  # the value checks follow the library's switch, as the objectives' do
        assert component_usage(torch.full((2, 2), 4.0)).tolist() == [4.0, 4.0]
    finally:
        set_validate_args(True)
