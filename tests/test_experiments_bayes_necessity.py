"""The bayes_necessity experiment at its quick size: verdict follows the thresholds, the law checks are exact."""

from pathlib import Path

import pytest

from implicit_em.experiments import EXPERIMENTS
from implicit_em.experiments._base import Context, Result
from implicit_em.experiments.bayes_necessity import EXPERIMENT, Config, _decide
from implicit_em.windtunnel.tasks import bijection_no_context_mae


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    figure_dir = tmp_path_factory.mktemp("run") / "figures"
    return EXPERIMENT.run(Config.quick(), Context(figure_dir.parent)), figure_dir


def test_is_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS
    assert "necessary consequences of the geometry" in EXPERIMENT.claim


def test_verdict_follows_metrics_and_thresholds(result: tuple[Result, Path]) -> None:
    res, _ = result
    verdict, summary = _decide(Config.quick(), res.metrics)
    assert res.verdict == verdict and res.summary == summary
    m, crit = res.metrics, {c.metric: c for c in res.criteria}
    cfg = Config.quick()
    tracks = crit["sigmoid_mae (tracks the posterior)"].threshold
    as_good = crit["sigmoid_mae (as good as softmax)"].threshold
    assert tracks == pytest.approx(cfg.learned_fraction * min(m["floor_mae"], m["mlp_mae"]), rel=1e-15)
    assert as_good == pytest.approx(max(cfg.ratio_tol * m["softmax_mae"], m["softmax_mae"] + cfg.abs_tol), rel=1e-15)
    if res.verdict == "REFUTED":
        assert m["sigmoid_mae"] <= tracks
        assert m["sigmoid_mae"] <= as_good or m["softmax_mae"] > tracks
    if res.verdict == "SUPPORTED":
        assert m["softmax_mae"] <= tracks < m["sigmoid_mae"]


def test_floor_is_the_exact_no_context_mae_and_the_mlp_sits_on_it(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["floor_mae"] == bijection_no_context_mae(Config.quick().n_symbols)
    assert abs(m["mlp_mae"] - m["floor_mae"]) < 0.01  # no context: the matched MLP cannot beat the floor
    assert m["softmax_mae"] < 0.5 * m["floor_mae"]  # the quick transformer does learn the task


def test_softmax_gradient_is_responsibility_law_and_sigmoid_is_not(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    for when in ("init", "trained"):
        assert m[f"softmax_{when}_grad_sum_max"] < 1e-12  # sum_c (r_c - t_c) = 0 exactly, float64
        assert m[f"softmax_{when}_law_residual"] < 1e-12
        assert m[f"sigmoid_{when}_hessian_offdiag_max"] == 0.0  # independent sigmoids: no cross-class coupling
    assert m["softmax_trained_hessian_offdiag_max"] > 0.0
    # at initialisation sigmoid(z) ~ 1/2 for all V classes: the gradient sums to about V/2 - 1
    assert m["sigmoid_init_grad_sum_mean"] == pytest.approx(Config.quick().n_symbols / 2 - 1, abs=0.3)
    assert m["sigmoid_init_law_residual"] > 0.1


def test_figures_exist(result: tuple[Result, Path]) -> None:
    res, figure_dir = result
    assert len(res.figures) == 2
    for rel in res.figures:
        assert (figure_dir.parent / rel).is_file()


def test_decide_covers_the_other_outcomes() -> None:
    cfg = Config.quick()
    base = {
        "floor_mae": 0.7, "mlp_mae": 0.7, "sigmoid_init_grad_sum_mean": 2.0,
        "sigmoid_hessian_offdiag_max": 0.0, "softmax_grad_sum_max": 0.0,
    }  # fmt: skip
    assert _decide(cfg, {**base, "softmax_mae": 0.01, "sigmoid_mae": 0.5})[0] == "SUPPORTED"
    assert _decide(cfg, {**base, "softmax_mae": 0.3, "sigmoid_mae": 0.4})[0] == "PARTIAL"
    assert _decide(cfg, {**base, "softmax_mae": 0.001, "sigmoid_mae": 0.06})[0] == "PARTIAL"  # both learn, 60x
    assert _decide(cfg, {**base, "softmax_mae": 0.01, "sigmoid_mae": 0.015})[0] == "REFUTED"
    assert (
        _decide(cfg, {**base, "sigmoid_init_grad_sum_mean": 0.0, "softmax_mae": 0.01, "sigmoid_mae": 0.01})[0]
        == "PARTIAL"
    )
