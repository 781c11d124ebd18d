"""The cross-entropy (constrained regime) experiment (paper §4.3), run at its quick size."""

from pathlib import Path

import pytest
import torch

from implicit_em.experiments import EXPERIMENTS, Context, Result
from implicit_em.experiments.cross_entropy_regime import EXPERIMENT, Config, competition


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    figures = tmp_path_factory.mktemp("run") / "figures"
    threads = torch.get_num_threads()
    res = EXPERIMENT.run(Config.quick(), Context(figures.parent))
    assert torch.get_num_threads() == threads  # run() works single-threaded and restores the setting
    return res, figures


def test_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


def test_law_is_exact_in_float64_at_every_step(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["law_residual_max"] <= 1e-13
    assert max(m["law_residual_per_epoch_hard_seed0"]) <= 1e-13


def test_verdict_follows_thresholds(result: tuple[Result, Path]) -> None:
    res = result[0]
    m, crit = res.metrics, {c.metric: c for c in res.criteria}
    cfg = Config.quick()
    assert crit["law_residual_max"].threshold == cfg.law_tol
    assert crit["test_accuracy_min"].threshold == cfg.min_accuracy
    assert crit["top_share_median_last_epoch_min"].threshold == cfg.min_top_share_ratio * m["top_share_uniform"]
    supported = (
        m["law_residual_max"] <= crit["law_residual_max"].threshold
        and m["test_accuracy_min"] > crit["test_accuracy_min"].threshold
        and m["top_share_median_last_epoch_min"] >= crit["top_share_median_last_epoch_min"].threshold
    )
    assert supported and all(c.passed for c in res.criteria)
    assert res.verdict == "SUPPORTED"


def test_classifier_learns_and_wrong_class_mass_shrinks(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["test_accuracy_min"] > 0.85
    mass = m["wrong_class_mass_per_epoch_hard_seed0"]
    assert mass[-1] < 0.5 * mass[0]


def test_repulsion_is_concentrated(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["top_share_median_last_epoch_min"] > 2 * m["top_share_uniform"]
    assert m["n_effective_competitors_median_last_epoch_hard"] < m["n_effective_competitors_uniform"] / 2


def test_figure_written(result: tuple[Result, Path]) -> None:
    res, figures = result
    assert res.figures == ["figures/cross_entropy_regime.png"]
    assert (figures / "cross_entropy_regime.png").stat().st_size > 10_000


def test_competition_on_a_closed_form() -> None:
    # y = 0; wrong classes hold 0.3, 0.1, 0.1: mass 0.5, top share 0.6, n_eff = exp(H(0.6, 0.2, 0.2)).
    r = torch.tensor([[0.5, 0.3, 0.1, 0.1]], dtype=torch.float64)
    mass, top, n_eff = competition(r, torch.tensor([0]))
    torch.testing.assert_close(mass, torch.tensor([0.5], dtype=torch.float64))
    torch.testing.assert_close(top, torch.tensor([0.6], dtype=torch.float64))
    h = -(0.6 * torch.log(torch.tensor(0.6)) + 0.4 * torch.log(torch.tensor(0.2))).double()
    torch.testing.assert_close(n_eff, h.exp().reshape(1), rtol=1e-6, atol=0)


def test_competition_uniform_wrong_classes() -> None:
    r = torch.tensor([[0.1, 0.3, 0.3, 0.3]], dtype=torch.float64)
    _, top, n_eff = competition(r, torch.tensor([0]))
    torch.testing.assert_close(top, torch.tensor([1 / 3], dtype=torch.float64))
    torch.testing.assert_close(n_eff, torch.tensor([3.0], dtype=torch.float64))
