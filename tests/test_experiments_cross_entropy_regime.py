"""The cross-entropy (constrained regime) experiment (paper §4.3), run at its quick size."""

from pathlib import Path

import pytest
import torch

from implicit_em.audit import EXPERIMENTS, Context, Result
from implicit_em.audit.claims.cross_entropy_regime import EXPERIMENT, Config, competition
from implicit_em.audit.core import torch_threads
from implicit_em.objectives import constrained_cross_entropy


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    figures = tmp_path_factory.mktemp("run") / "figures"
    with torch_threads(1):  # as the audit's runner runs the quick size
        res = EXPERIMENT.run(Config.quick(), Context(figures.parent))
    return res, figures


def test_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


def test_every_metric_is_declared(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert not m.undeclared() and set(m.declared) == set(m)  # type: ignore[attr-defined]


def test_law_is_exact_in_float64_at_every_step(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["law_residual_max"] <= 1e-13
    assert max(m["law_residual_per_epoch_hard_seed0"]) <= 1e-13


def test_verdict_follows_the_stated_rule(result: tuple[Result, Path]) -> None:
    res = result[0]
    m, crit = res.metrics, {c.metric: c for c in res.criteria}
    cfg = Config.quick()
    assert crit["law_residual_max"].threshold == cfg.law_tol
    assert crit["test_accuracy_min"].threshold == cfg.min_accuracy
    assert crit["top_share_median_last_epoch_min"].threshold == cfg.min_top_share_ratio * m["top_share_uniform"]
    law, learns, concentrated = (
        crit[k].passed for k in ("law_residual_max", "test_accuracy_min", "top_share_median_last_epoch_min")
    )
    # the module docstring's rule, applied to the recorded criteria (whatever the numbers came out as)
    expected = "REFUTED" if not law else ("SUPPORTED" if learns and concentrated else "PARTIAL")
    assert res.verdict == expected


def test_the_law_check_fails_on_an_objective_without_responsibilities() -> None:
    # negative control: the experiment's residual (HeadProbe, constrained regime) is O(1) for independent sigmoids,
    # so the check that the experiment passes at 1e-16 is one that an objective without normalisation fails
    from implicit_em.objectives import independent_sigmoid_bce
    from implicit_em.probes import HeadProbe

    g = torch.Generator().manual_seed(0)
    d = torch.randn(64, 10, generator=g, dtype=torch.float64) * 3
    y = torch.randint(10, (64,), generator=g)
    t = torch.nn.functional.one_hot(y, 10).double()
    for loss_fn, bound in (
        (lambda d: independent_sigmoid_bce(-d, y), None),
        (lambda d: constrained_cross_entropy(d, y), 1e-14),
    ):
        with HeadProbe(regime="constrained", kind="distances", reduction="mean") as probe:
            dd = probe(d.clone().requires_grad_(True))
            loss_fn(dd).mean().backward()
        residual = probe.residual(target=t)
        if bound is None:
            assert residual > 0.1
        else:
            assert residual <= bound


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
