"""The same_optimum experiment (paper §4.1): its per-pass drivers reproduce the library's fits, its one scorer is
``GaussianMixture.score``, its gap measures and fixed-point test give known answers, and the quick run decides
by its stated rule."""

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from implicit_em.experiments import EXPERIMENTS, Context, Result
from implicit_em.experiments import same_optimum as so
from implicit_em.mixture import GaussianMixture
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._online_em import fit_online_em


@pytest.fixture(scope="module")
def problem() -> dict[str, Any]:
    """A small mixture, its data source, the fitters' shift and scale, and one start away from the optimum."""
    x = so._draw(*so._truth(3, 2, 0), 1500, np.random.RandomState(1))
    shift, scale = so._shift_scale(torch.from_numpy(x))
    start = so._start(x, 3, np.random.RandomState(2))
    return {
        "x": x,
        "data": DataSource(x, torch.device("cpu"), torch.float64),
        "shift": shift,
        "scale": scale,
        "start": start,
    }


def _init(start: Any) -> dict[str, Any]:
    """The start as the estimator's user initialisation."""
    precisions = torch.linalg.inv(start.covariances).numpy()
    return {"weights_init": start.weights.numpy(), "means_init": start.means.numpy(), "precisions_init": precisions}


# --- the start and the scorer ------------------------------------------------------------------------------------


def test_starts_are_distinct_data_rows_with_the_data_covariance(problem: dict[str, Any]) -> None:
    x, start = problem["x"], problem["start"]
    rows = [int(np.flatnonzero((x == m).all(1))[0]) for m in start.means.numpy()]  # each mean is a row of x
    assert len(set(rows)) == 3
    cov = np.cov(x, rowvar=False, bias=True) + so.REG_COVAR * np.eye(2)
    np.testing.assert_allclose(start.covariances.numpy(), np.broadcast_to(cov, (3, 2, 2)), rtol=1e-12)
    np.testing.assert_allclose(start.weights.numpy(), 1 / 3)
    prec = start.precisions_cholesky @ start.precisions_cholesky.mT
    np.testing.assert_allclose((prec @ start.covariances).numpy(), np.broadcast_to(np.eye(2), (3, 2, 2)), atol=1e-10)
    other = so._start(x, 3, np.random.RandomState(3))
    assert not torch.equal(other.means, start.means)


def test_the_scorer_is_the_estimators_score(problem: dict[str, Any]) -> None:
    x = problem["x"]
    gm = GaussianMixture(3, random_state=0, split_merge=0, max_iter=3).fit(x)
    params = gm._params(torch.float64, torch.device("cpu"))
    assert so.score(problem["data"], params, problem["shift"]) == pytest.approx(gm.score(x), abs=1e-12)
    assert so.score(problem["data"], problem["start"], problem["shift"]) < gm.score(x) - 0.1


# --- the per-pass drivers are the library's fitters --------------------------------------------------------------


def test_em_path_is_the_estimators_em_after_every_pass(problem: dict[str, Any]) -> None:
    path = so.em_path(problem["data"], problem["start"], problem["shift"], 4)
    assert len(path) == 5 and path[0] is problem["start"]
    for p in (1, 4):
        gm = GaussianMixture(3, max_iter=p, tol=0.0, split_merge=0, **_init(problem["start"]))
        with pytest.warns(Warning):  # not converged: max_iter reached
            gm.fit(problem["x"])
        np.testing.assert_allclose(path[p].means.numpy(), gm.means_, rtol=0, atol=1e-10)
        np.testing.assert_allclose(path[p].covariances.numpy(), gm.covariances_, rtol=0, atol=1e-10)


def test_online_em_path_is_one_continuous_run(problem: dict[str, Any]) -> None:
    d, start, shift = problem["data"], problem["start"], problem["shift"]
    path = so.online_em_path(d, start, shift, 3, 128, seed=7)
    whole, _ = fit_online_em(
        d,
        start,
        covariance_type="full",
        reg_covar=so.REG_COVAR,
        tol=0.0,
        max_iter=3,
        shift=shift,
        batch_size=128,
        generator=torch.Generator().manual_seed(7),
        final_em_steps=0,
    )
    torch.testing.assert_close(path[-1].means, whole.params.means, rtol=0, atol=1e-12)
    torch.testing.assert_close(path[-1].covariances, whole.params.covariances, rtol=0, atol=1e-12)
    assert not torch.allclose(path[1].means, path[2].means)  # it moves every pass


def test_gd_path_reads_the_estimators_gd_after_every_epoch(
    problem: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # gd_path calls fit_gd with its own defaults: the estimator's gd schedule before issue 14 (schedule {})
    from implicit_em.mixture._fitting import REGISTRY

    monkeypatch.setattr(REGISTRY["gd"], "schedule", {})
    d, start, shift, scale = problem["data"], problem["start"], problem["shift"], problem["scale"]
    seed = int(np.random.RandomState(5).randint(2**31 - 1))  # the generator seed GaussianMixture draws first
    path, epochs = so.gd_path(d, start, shift, scale, 4, 128, 0.01, 1e-5, seed)
    assert len(path) == 5 and epochs == 4
    for p in (1, 4):
        gm = GaussianMixture(3, fitter="gd", max_iter=p, tol=1e-5, batch_size=128, random_state=5, **_init(start))
        with pytest.warns(Warning):
            gm.fit(problem["x"])
        np.testing.assert_allclose(path[p].means.numpy(), gm.means_, rtol=0, atol=1e-9)
        np.testing.assert_allclose(path[p].covariances.numpy(), gm.covariances_, rtol=0, atol=1e-9)


def test_gd_path_is_held_at_its_end_after_it_stops(problem: dict[str, Any]) -> None:
    d, start, shift, scale = problem["data"], problem["start"], problem["shift"], problem["scale"]
    path, epochs = so.gd_path(d, start, shift, scale, 6, 1500, 0.01, 10.0, seed=0)  # tol 10: stops at once
    assert epochs < 6 and len(path) == 7
    assert all(p is path[epochs] for p in path[epochs:])


# --- the fixed-point test and the gap measures -------------------------------------------------------------------


def test_em_polish_is_zero_at_an_em_fixed_point_and_large_at_the_start(problem: dict[str, Any]) -> None:
    d, start, shift = problem["data"], problem["start"], problem["shift"]
    gain0, move0, optimum = so.em_polish(d, start, shift, 2000, 1e-12)
    assert gain0 > 0.1 and move0 > 0.1  # a planted non-fixed point: the start
    gain, move, _ = so.em_polish(d, optimum, shift, 2000, 1e-12)
    assert abs(gain) < 1e-8 and move < 1e-4


def test_path_gap_known_answers() -> None:
    ll = [0.0, 1.0, 2.0, 3.0]
    mu = [np.array([[0.0, 0.0], [1.0, 1.0]]) + p for p in range(4)]
    assert so.path_gap(ll, ll, mu, mu, match=False) == (0.0, 0.0)
    bumped = [100.0, 1.0, 2.25, 3.0]  # pass 0 (the shared start) does not count
    assert so.path_gap(ll, bumped, mu, mu, match=False)[0] == pytest.approx(0.25)
    swapped = [m[::-1] for m in mu]  # the same means under other labels
    assert so.path_gap(ll, ll, mu, swapped, match=True)[1] == pytest.approx(0.0)
    assert so.path_gap(ll, ll, mu, swapped, match=False)[1] == pytest.approx(np.sqrt(2))
    with pytest.raises(ValueError, match="lengths"):
        so.path_gap(ll, ll[:3], mu, mu, match=False)


def test_off_path_ignores_pace_but_not_route() -> None:
    route = [np.array([[t, 0.0]]) for t in (0.0, 1.0, 3.0)]
    slow = [np.array([[t, 0.0]]) for t in np.linspace(0.0, 3.0, 13)]  # the same route, another pace
    assert so.off_path(slow, route) == pytest.approx(0.0, abs=1e-12)
    detour = [*slow, np.array([[2.0, 0.5]])]
    assert so.off_path(detour, route) == pytest.approx(0.5)
    assert so.off_path(route, [route[0], route[0]]) == pytest.approx(3.0)  # a route that goes nowhere


def test_passes_to_and_the_verdict_rule() -> None:
    assert so.passes_to([-5.0, -1.0, -0.005, 0.0], 0.0, 0.01) == 2
    assert so.passes_to([0.0, -1.0, -1.0], 0.0, 0.01) == -1  # pass 0 does not count
    table = {
        (fixed, path, controls): so.decide(fixed, path, controls)
        for fixed, path, controls in itertools.product((True, False), repeat=3)
    }
    assert table[(True, True, True)] == "SUPPORTED"
    assert table[(True, True, False)] == "PARTIAL"
    assert {table[(True, False, c)] for c in (True, False)} == {"PARTIAL"}
    assert {table[(False, True, c)] for c in (True, False)} == {"PARTIAL"}
    assert {table[(False, False, c)] for c in (True, False)} == {"REFUTED"}


# --- the quick run -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return so.EXPERIMENT.run(so.Config.quick(), Context(run_dir)), run_dir


def test_registered() -> None:
    assert so.EXPERIMENT in EXPERIMENTS


def test_the_starts_are_away_from_the_optimum(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    cfg = so.Config.quick()
    assert len(m["control: EM's gain from the start, per start (nats/sample)"]) == cfg.n_starts >= 3
    assert min(m["control: EM's gain from the start, per start (nats/sample)"]) > 10 * cfg.fixed_gain_max


def test_the_verdict_follows_the_criteria(result: tuple[Result, Path]) -> None:
    res, cfg = result[0], so.Config.quick()
    m, c = res.metrics, res.criteria
    assert [x.threshold for x in c[:2]] == [cfg.fixed_gain_max, cfg.fixed_move_max]
    floor = max(m["control: gd–gd (other mini-batch order) path gap, per start (nats/sample)"])
    assert c[2].threshold == max(cfg.path_gap_max, floor)
    assert c[2].measured == max(m["gd–EM path gap, per start (nats/sample)"])
    assert c[0].measured == max(m["EM's gain from gd's end, per start (nats/sample)"])
    assert c[5].measured == min(m["control: EM–EM path gap, per pair of starts (nats/sample)"])
    fixed, path = c[0].passed and c[1].passed, c[2].passed and c[3].passed
    assert res.verdict == so.decide(fixed, path, c[4].passed and c[5].passed)
    assert all(x.passed for x in c[4:])  # both controls have power at the quick size


def test_figures_written(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    assert len(res.figures) == 2
    for rel in res.figures:
        assert (run_dir / rel).stat().st_size > 1000
