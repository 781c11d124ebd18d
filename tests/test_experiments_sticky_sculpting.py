"""The sticky_sculpting experiment at its quick size: verdict follows the 2σ rule, the baseline is exact."""

import math
from pathlib import Path

import pytest
import torch

from implicit_em.experiments import EXPERIMENTS
from implicit_em.experiments._base import Context, Result
from implicit_em.experiments.sticky_sculpting import EXPERIMENT, Config, _decide, _init, single_head_logits


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    figure_dir = tmp_path_factory.mktemp("run") / "figures"
    return EXPERIMENT.run(Config.quick(), Context(figure_dir.parent)), figure_dir


def test_is_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


def test_verdict_follows_the_two_sigma_rule(result: tuple[Result, Path]) -> None:
    res, _ = result
    m, (posterior,) = res.metrics, res.criteria
    assert posterior.metric == "kl_improvement" and posterior.comparison == ">"
    assert posterior.threshold == pytest.approx(2.0 * m["kl_init_std"])
    assert m["kl_improvement"] == pytest.approx(m["kl_init_mean"] - m["kl_trained_mean"])
    expected = "PARTIAL" if m["kl_improvement"] > posterior.threshold else "REFUTED"
    assert res.verdict == expected  # SUPPORTED is unreachable: the manifold half is untested
    assert res.verdict == _decide(m, 2.0)[0]


def test_baseline_is_near_the_uniform_predictor(result: tuple[Result, Path]) -> None:
    """At N(0, 0.1^2) init the logits are tiny, so KL(Bayes || model) is close to KL(Bayes || uniform) < 3 bits."""
    m = result[0].metrics
    assert 0.0 < m["kl_init_mean"] < 3.0
    assert m["minimum_loss"] < m["final_train_loss_mean"] <= m["uniform_loss"] + 1e-3
    assert m["uniform_loss"] == pytest.approx(math.log(8))


def test_single_head_is_causal() -> None:
    params = _init(0, 0.1)
    x = torch.randn(6, 20)
    y = x.clone()
    y[4:] += 1.0  # changing the future must not change earlier outputs
    torch.testing.assert_close(single_head_logits(params, x)[:4], single_head_logits(params, y)[:4])


def test_figure_exists(result: tuple[Result, Path]) -> None:
    res, figure_dir = result
    assert (figure_dir.parent / res.figures[0]).is_file()
