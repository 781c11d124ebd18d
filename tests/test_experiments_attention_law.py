"""The attention-law experiment (paper §4.2, referee major comment 2), run at its quick size."""

from pathlib import Path

import pytest
import torch

from implicit_em.experiments import EXPERIMENTS, Context, Result
from implicit_em.experiments.attention_law import EXPERIMENT, Config, theorem1_fit


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    figures = tmp_path_factory.mktemp("run") / "figures"
    threads = torch.get_num_threads()
    res = EXPERIMENT.run(Config.quick(), Context(figures.parent))
    assert torch.get_num_threads() == threads  # run() works single-threaded and restores the setting
    return res, figures


def test_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


def test_exact_laws_hold_in_float64(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["value_law_rel_residual_max"] <= 1e-12
    assert m["w_v_law_rel_residual_max"] <= 1e-12
    assert m["routing_law_rel_residual_max"] <= 1e-12


def test_score_gradient_is_not_the_responsibility(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["theorem1_rel_residual_min"] >= 0.5
    assert len(m["theorem1_rel_residual_per_head"]) == m["heads_checked"] == 4


def test_verdict_follows_thresholds(result: tuple[Result, Path]) -> None:
    res = result[0]
    m, crit = res.metrics, {c.metric: c for c in res.criteria}
    laws = crit["max relative residual of the value, W_V and routing laws"]
    laws_hold = max(m["value_law_rel_residual_max"], m["w_v_law_rel_residual_max"], m["routing_law_rel_residual_max"])
    assert laws.measured == laws_hold and laws.threshold == Config.quick().law_tol
    assert laws.passed and laws_hold <= laws.threshold
    t1 = crit["theorem1_rel_residual_max"]
    assert t1.threshold == Config.quick().theorem1_tol
    assert m["theorem1_rel_residual_max"] > t1.threshold and not t1.passed
    assert res.verdict == "PARTIAL"


def test_model_trained(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["train_loss_last5"][0] < m["train_loss_first5"][0] - 0.2
    assert m["train_loss_last5"][0] > m["bayes_loss"] - 0.05  # cannot beat the posterior by more than noise


def test_figure_written(result: tuple[Result, Path]) -> None:
    res, figures = result
    assert res.figures == ["figures/attention_law.png"]
    assert (figures / "attention_law.png").stat().st_size > 10_000


def test_theorem1_fit_is_exact_for_a_multiple_of_alpha() -> None:
    alpha = torch.softmax(torch.randn(2, 3, 4, 5, dtype=torch.float64), dim=-1)
    c = torch.randn(2, 3, 4, 1, dtype=torch.float64)
    fit, rel = theorem1_fit(-c * alpha, alpha)
    torch.testing.assert_close(fit, -c * alpha, rtol=1e-12, atol=1e-14)
    assert float(rel.max()) < 1e-12


def test_theorem1_fit_fails_for_a_zero_sum_gradient() -> None:
    # A routing-law gradient sums to zero over keys; a multiple of alpha sums to c: the fit cannot be exact.
    alpha = torch.softmax(torch.randn(2, 1, 3, 6, dtype=torch.float64), dim=-1)
    b = torch.randn(2, 1, 3, 6, dtype=torch.float64)
    g = alpha * (b - (alpha * b).sum(-1, keepdim=True))
    _, rel = theorem1_fit(g, alpha)
    assert float(rel.min()) > 0.1
