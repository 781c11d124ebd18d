"""The volume_collapse experiment: §3.4's prediction (W → 0 without the volume term, Σ = Σ_data with it) as the
verdict, §6.2's sentence judged separately, and the 90% threshold."""

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from implicit_em.audit.claims import volume_collapse as vc
from implicit_em.audit.core import Context, criterion
from implicit_em.audit.metrics import Metrics

TINY = dataclasses.replace(vc.Config.quick(), n=400, epochs=8, n_seeds=2)


Trace = Callable[[np.ndarray, bool, int, int], tuple[list[float], list[float], np.ndarray]]


def _fake_trace(logdets: list[float], objective: list[float]) -> Trace:
    """A stand-in for trace with known traces (the with-volume arm ends at the data covariance)."""

    def trace(x: np.ndarray, volume: bool, epochs: int, seed: int) -> tuple[list[float], list[float], np.ndarray]:
        data_cov = np.cov(x.T, bias=True)
        covs = np.stack([data_cov] * epochs)
        if volume:
            return [float(np.linalg.slogdet(data_cov)[1])] * epochs, list(objective), covs
        return list(logdets), list(objective), covs

    return trace


def test_the_thresholds_are_the_first_versions() -> None:
    rule = vc.Config().rule
    assert rule.improving_share_min == 0.9  # 72c0d7b's; the page tells why the moved 0.7 is not used
    assert rule.growth_min == rule.shrink_min == math.log(100) and rule.relative_error_max == 0.05


@pytest.mark.parametrize(
    ("a1", "a2", "a3", "a4", "expected"),
    [
        (True, True, True, True, "SUPPORTED"),
        (True, True, False, True, "PARTIAL"),
        (True, False, True, True, "PARTIAL"),
        (False, True, True, True, "REFUTED"),
        (True, True, True, False, "REFUTED"),
    ],
)
def test_the_verdict_rule_of_section_3_4(a1: bool, a2: bool, a3: bool, a4: bool, expected: str) -> None:
    crit = [criterion(f"c{i}", float(p), "==", 1.0) for i, p in enumerate((a1, a2, a3, a4, False))]
    assert vc.verdict(vc.Config(), Metrics(), crit) == expected


def test_quick_run_the_metric_expands_without_the_term_and_matches_the_data_with_it(tmp_path: Path) -> None:
    cfg = vc.Config.quick()
    res = vc.run(cfg, Context(tmp_path))
    per = res.metrics["per replicate"]
    assert len(per["growth"]) == cfg.n_seeds
    # the distance-only objective is maximised by W → 0: log det Σ rises in every replicate, by more than log 100
    assert min(per["growth"]) > math.log(100)
    # the exact energy's optimum is Σ = Σ_data (closed form): every replicate ends near it
    assert max(per["rel_err"]) < 0.05
    _, _, a3, _, b1 = res.criteria
    assert a3.threshold == 0.9 and a3.measured == pytest.approx(float(np.median(per["improving"])))
    assert res.verdict == vc.verdict(cfg, res.metrics, res.criteria)
    assert res.metrics.undeclared() == []
    assert not b1.passed and res.metrics["§6.2 sentence (judged separately)"] == "contradicted"  # Σ grew
    assert (tmp_path / res.figures[0]).stat().st_size > 1000


def test_a_no_volume_arm_trained_with_the_term_is_refuted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: if both arms carry the volume term there is no collapse, and §3.4's A1 must fail."""
    trace = vc.trace
    monkeypatch.setattr(vc, "trace", lambda x, volume, epochs, seed: trace(x, True, epochs, seed))
    res = vc.run(TINY, Context(tmp_path))
    assert not res.criteria[0].passed
    assert res.verdict == "REFUTED"


def test_a_shrinking_covariance_makes_section_6_2_hold_and_3_4_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted: the outcome §6.2 describes (log det Σ falls by log 1000) is reported as such."""
    epochs = TINY.epochs
    monkeypatch.setattr(vc, "trace", _fake_trace(list(np.linspace(0, -math.log(1000), epochs)), [-1.0] * epochs))
    res = vc.run(TINY, Context(tmp_path))
    assert res.criteria[4].passed and res.metrics["§6.2 sentence (judged separately)"] == "holds"
    assert res.verdict == "REFUTED"


@pytest.mark.parametrize(("improving_epochs", "expected"), [(7, "SUPPORTED"), (6, "PARTIAL")])
def test_the_improving_share_is_judged_at_90_percent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, improving_epochs: int, expected: str
) -> None:
    """Planted traces: log det Σ rises by log 10⁴; of the 7 epoch-to-epoch changes, 7 or 6 improve the objective
    (100% or 86%: the 0.9 threshold separates them)."""
    epochs = TINY.epochs
    steps = [1.0] * improving_epochs + [-0.1] * (epochs - 1 - improving_epochs)
    objective = list(np.cumsum([-10.0, *steps]))
    monkeypatch.setattr(vc, "trace", _fake_trace(list(np.linspace(0, 4 * math.log(10), epochs)), objective))
    res = vc.run(TINY, Context(tmp_path))
    assert res.criteria[2].measured == pytest.approx(improving_epochs / (epochs - 1))
    assert res.verdict == expected
    assert "§3.4 verdicts under each rule" not in res.metrics  # superseded rules are described on the page only
