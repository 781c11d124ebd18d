"""sticky_manifold: the subspaces against independent float64 oracles, the planted heads, the batched Adam arm, the
verdict rule on planted outcomes, and the quick run's internal consistency."""

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from implicit_em.experiments import EXPERIMENTS
from implicit_em.experiments._base import Context, Result
from implicit_em.experiments._manifold import mean_cos2, random_mean_cos2
from implicit_em.experiments._sticky_manifold import (
    planted_controls,
    readout_subspace,
    shuffle_labels,
    subspace_scores,
    symbol_mean_basis,
    train_online_adam,
    value_subspace,
)
from implicit_em.experiments.sticky_manifold import ARMS, EXPERIMENT, MEASURES, Config, _criteria, _decide, paired
from implicit_em.experiments.sticky_sculpting import Config as SculptingConfig
from implicit_em.experiments.sticky_sculpting import _init, _stack_inits, _train

F64 = torch.float64


def _projector(basis: torch.Tensor) -> torch.Tensor:
    return basis @ basis.T


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return EXPERIMENT.run(Config.quick(), Context(run_dir)), run_dir


def test_is_registered_and_uses_the_sculpting_setting() -> None:
    assert EXPERIMENT in EXPERIMENTS
    cfg, sc = Config.quick(), SculptingConfig()
    ours = (cfg.stay, cfg.noise, cfg.init_std, cfg.sgd_lr, cfg.sgd_steps)
    assert ours == (sc.stay, sc.noise, sc.init_std, sc.lr, sc.steps) == (0.8, 3.0, 0.1, 0.01, 1000)
    assert Config.full().n_inits >= 10 and cfg.n_inits >= 10  # the issue: paired over >= 10 inits


# --- the subspaces --------------------------------------------------------------------------------------------------


def test_symbol_mean_basis_is_the_span_of_the_centred_means() -> None:
    """Known answer: means e_1..e_8 in R^20 centre into {x in span(e_1..e_8): sum x = 0}, rank 7."""
    means = torch.eye(8, 20, dtype=F64)
    b = symbol_mean_basis(means)
    assert b.shape == (20, 7)
    torch.testing.assert_close(b.T @ b, torch.eye(7, dtype=F64), rtol=0, atol=1e-13)
    u = torch.zeros(20, 8, dtype=F64)
    u[:8] = torch.eye(8, dtype=F64) - 1 / 8  # the centred means as columns
    torch.testing.assert_close(_projector(b) @ u, u, rtol=0, atol=1e-13)
    ones = torch.zeros(20, dtype=F64)
    ones[:8] = 1.0
    assert float((b.T @ ones).abs().max()) < 1e-13 and float(b[8:].abs().max()) < 1e-13
    with pytest.raises(ValueError, match="fewer than 7"):
        symbol_mean_basis(torch.ones(8, 20, dtype=F64))


def test_readout_subspace_matches_the_pseudo_inverse_projector_and_ignores_the_logit_shift() -> None:
    g = _gen(0)
    w_v, w_o = torch.randn(20, 15, generator=g, dtype=F64), torch.randn(15, 8, generator=g, dtype=F64)
    centring = torch.eye(8, dtype=F64) - 1 / 8
    m = w_v @ w_o @ centring
    oracle = m @ torch.linalg.pinv(m)  # independent: the orthogonal projector onto col(M P)
    b = readout_subspace(w_v, w_o)
    assert b.shape == (20, 7)
    torch.testing.assert_close(_projector(b), oracle, rtol=0, atol=1e-10)
    shifted = w_o + torch.randn(15, 1, generator=g, dtype=F64)  # W_O + w 1ᵀ: every logit shifted by x W_V w
    torch.testing.assert_close(_projector(readout_subspace(w_v, shifted)), oracle, rtol=0, atol=1e-10)
    other = torch.randn(20, 7, generator=g, dtype=F64)  # the raw 8-column space moves with the shift
    assert mean_cos2(w_v @ shifted, other) != pytest.approx(mean_cos2(w_v @ w_o, other), abs=1e-6)


def test_sgd_never_changes_the_logit_shift_direction_of_w_o() -> None:
    """The docstring's reason: the logit gradient sums to zero over the 8 logits, so W_O 1 stays at its init."""
    cfg = dataclasses.replace(SculptingConfig(), steps=20, lr=0.5, log_every=5)
    params = _stack_inits([3, 4], 1, 0.3)
    before = params["W_O"].detach().sum(dim=-1).clone()
    _train(params, torch.randn(2, 16, 20, generator=_gen(1)), torch.randint(0, 8, (2, 16), generator=_gen(2)), cfg)
    assert float((params["W_O"].detach() - _stack_inits([3, 4], 1, 0.3)["W_O"].detach()).abs().max()) > 1e-2
    torch.testing.assert_close(params["W_O"].detach().sum(dim=-1), before, rtol=0, atol=1e-5)  # float32 steps


def test_value_subspace_is_w_v_times_the_top_eigenvectors_of_the_value_covariance() -> None:
    """Independent oracle: numpy's eigh of W_Vᵀ C_x W_V (C_x the inputs' scatter), pulled back through W_V."""
    g = _gen(5)
    w_v = torch.randn(20, 15, generator=g, dtype=F64)
    x = torch.randn(400, 20, generator=g, dtype=F64) * torch.linspace(0.5, 3.0, 20, dtype=F64)  # distinct spectrum
    xc = (x - x.mean(0)).numpy()
    evals, evecs = np.linalg.eigh(w_v.numpy().T @ (xc.T @ xc) @ w_v.numpy())
    top = torch.from_numpy(evecs[:, np.argsort(evals)[::-1][:7]])
    oracle = w_v @ top
    oracle_projector = oracle @ torch.linalg.pinv(oracle)
    torch.testing.assert_close(_projector(value_subspace(w_v, x, 7)), oracle_projector, rtol=0, atol=1e-10)


def test_planted_heads_score_one_and_zero_and_random_heads_score_chance() -> None:
    g = _gen(7)
    basis = symbol_mean_basis(torch.randn(8, 20, generator=g, dtype=F64))
    x = torch.randn(300, 20, generator=g, dtype=F64)
    m = planted_controls(basis, x, seed=11, n_random=2000)
    assert m["planted_in_readout"] == pytest.approx(1.0, abs=1e-12)
    assert m["planted_in_value"] == pytest.approx(1.0, abs=1e-12)
    assert m["planted_out_readout"] < 1e-24 and m["planted_out_value"] < 1e-24
    assert random_mean_cos2(20, 7, 7) == pytest.approx(0.35)
    assert m["random_heads_mean"] == pytest.approx(0.35, abs=4 * m["random_heads_se"])
    assert m["random_heads_se"] < 2e-3  # 2000 heads: the chance level is pinned to a few thousandths


def test_subspace_scores_per_run_match_the_single_head_measures() -> None:
    g = _gen(8)
    basis = symbol_mean_basis(torch.randn(8, 20, generator=g, dtype=F64))
    x = torch.randn(120, 20, generator=g)
    params = _stack_inits([1, 2, 3], 1, 0.1)
    scores = subspace_scores(params, basis, x)
    for r in range(3):
        w_v, w_o = params["W_V"][r].detach(), params["W_O"][r].detach()
        assert float(scores["readout"][r]) == pytest.approx(mean_cos2(readout_subspace(w_v, w_o), basis), abs=1e-12)
        assert float(scores["value"][r]) == pytest.approx(mean_cos2(value_subspace(w_v, x, 7), basis), abs=1e-12)


# --- the Adam arm and its negative control -----------------------------------------------------------------------


def test_online_adam_batched_equals_each_run_alone() -> None:
    """Adam is elementwise: training R runs at once, each on its own sequence order, gives each run its own path."""
    pool_x, pool_y = torch.randn(4, 12, 20, generator=_gen(1)), torch.randint(0, 8, (4, 12), generator=_gen(2))
    order = torch.randint(0, 4, (6, 3), generator=_gen(3))
    x_eval, y_eval = pool_x[:2], pool_y[:2]
    batched = _stack_inits([7, 8, 9], 1, 0.5)
    curve = train_online_adam(batched, pool_x, pool_y, order, 1e-2, x_eval, y_eval, eval_every=2)
    assert curve.shape == (1 + 3, 3)
    for r, seed in enumerate((7, 8, 9)):
        alone = {k: v[None].detach().clone().requires_grad_(True) for k, v in _init(seed, 0.5).items()}
        alone_curve = train_online_adam(alone, pool_x, pool_y, order[:, r : r + 1], 1e-2, x_eval, y_eval, 2)
        torch.testing.assert_close(curve[:, r : r + 1], alone_curve, rtol=1e-5, atol=1e-6)
        for name in alone:
            torch.testing.assert_close(batched[name][r], alone[name][0], rtol=1e-5, atol=1e-6)


def test_shuffled_labels_keep_each_sequences_labels_and_break_their_order() -> None:
    y = torch.randint(0, 8, (3, 200), generator=_gen(4))
    s = shuffle_labels(y, 0)
    assert torch.equal(s.sort(dim=1).values, y.sort(dim=1).values)
    assert float((s == y).double().mean()) < 0.5
    assert torch.equal(s, shuffle_labels(y, 0))


def test_paired_known_answer() -> None:
    init = torch.tensor([0.3, 0.4, 0.35, 0.35], dtype=F64)
    trained = torch.tensor([0.5, 0.5, 0.65, 0.55], dtype=F64)  # d = 0.2, 0.1, 0.3, 0.2
    p = paired(init, trained)
    assert p["d_mean"] == pytest.approx(0.2) and p["d_sd"] == pytest.approx(math.sqrt(0.02 / 3))
    assert p["d_se"] == pytest.approx(p["d_sd"] / 2) and p["trained_mean"] == pytest.approx(0.55)
    assert p["d_in_sd"] == pytest.approx(0.2 / math.sqrt(0.02 / 3))


# --- the verdict rule on planted outcomes ------------------------------------------------------------------------


def _planted(adam: tuple[float, float, float], sgd: float = 0.36, shuffled: float = 0.45) -> dict[str, Any]:
    """Metrics with both measures at the same values: Adam's (trained mean, d mean, d sd); init at 0.35."""
    m: dict[str, Any] = {"aligned_threshold": 0.675, "n_runs": 10.0}
    m.update(planted_in_readout=1.0, planted_in_value=1.0, planted_out_readout=0.0, planted_out_value=0.0)
    m.update(random_heads_z=1.0, adam_heldout_gain=0.3, adam_late_share=0.05)
    arms = {"adam": adam, "sgd": (sgd, sgd - 0.35, 0.05), "shuffled": (shuffled, shuffled - 0.35, 0.03)}
    for arm, (trained, d_mean, d_sd) in arms.items():
        for x in MEASURES:
            m.update({f"{arm}_{x}_init_mean": 0.35, f"{arm}_{x}_trained_mean": trained, f"{arm}_{x}_d_mean": d_mean})
            m.update({f"{arm}_{x}_d_sd": d_sd, f"{arm}_{x}_d_in_sd": d_mean / d_sd})
    for x in MEASURES:
        m.update({f"adam_vs_shuffled_{x}_d_mean": adam[0] - shuffled, f"adam_vs_shuffled_{x}_d_in_sd": 1.0})
    return m


def test_verdict_rule_on_planted_outcomes() -> None:
    cfg = Config.quick()
    assert _decide(_planted((0.8, 0.45, 0.1)), cfg)[0] == "SUPPORTED"  # improved and aligned
    partial = _decide(_planted((0.57, 0.22, 0.08)), cfg)  # improved > 2σ, under the alignment threshold
    assert partial[0] == "PARTIAL" and "not aligned" in partial[1]
    assert _decide(_planted((0.40, 0.05, 0.05)), cfg)[0] == "REFUTED"  # 1σ: not better than random init
    # aligned on average but not reliably better than the init (3 sd): REFUTED by the skeptic's rule
    assert _decide(_planted((0.7, 0.35, 0.2)), cfg)[0] == "REFUTED"
    m = _planted((0.8, 0.45, 0.1))
    m["adam_value_trained_mean"] = 0.5  # the read-out improved and aligned, the value PCs improved only
    verdict, summary = _decide(m, cfg)
    assert verdict == "PARTIAL" and "read-out: improved and aligned" in summary
    assert "value PCs: improved and not aligned" in summary


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("planted_in_readout", 0.9),
        ("planted_out_value", 0.1),
        ("random_heads_z", 9.0),
        ("shuffled_readout_trained_mean", 0.7),  # training without the labels' signal would pass: undecidable
        ("adam_heldout_gain", 0.01),
        ("adam_late_share", 0.6),
    ],
)
def test_a_failed_control_or_an_unconverged_arm_leaves_it_undecided(key: str, value: float) -> None:
    m = _planted((0.8, 0.45, 0.1))
    m[key] = value
    verdict, summary = _decide(m, Config.quick())
    assert verdict == "PARTIAL" and summary.startswith("Undecided")


# --- the quick run ---------------------------------------------------------------------------------------------


def test_quick_run_is_consistent(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    m, cfg = res.metrics, Config.quick()
    assert res.verdict == _decide(m, cfg)[0]
    assert [c.metric for c in res.criteria] == [c.metric for c in _criteria(m, cfg)]
    assert all(c.passed for c in res.criteria[:7])  # the planted heads, the chance level, the shuffled control
    for arm in ARMS[1:]:
        for x in MEASURES:
            d = torch.tensor(m[f"{arm}_{x}_per_run"]) - torch.tensor(m[f"init_{x}_per_run"])
            assert len(d) == cfg.n_inits
            assert m[f"{arm}_{x}_d_mean"] == pytest.approx(float(d.mean()))
            assert m[f"{arm}_{x}_d_sd"] == pytest.approx(float(d.std()))
    improved = res.criteria[9]
    assert improved.threshold == pytest.approx(cfg.sigmas * m["adam_readout_d_sd"])
    assert m["aligned_threshold"] == pytest.approx(0.35 + 0.5 * 0.65)
    # N(0, 0.1²) inits are Gaussian heads: their read-out subspace is uniformly random, at chance on average
    init = torch.tensor(m["init_readout_per_run"])
    assert float(init.mean()) == pytest.approx(0.35, abs=4 * m["random_heads_sd"] / math.sqrt(cfg.n_inits))
    # the decisive arm learned (held-out loss below log 8) and the references are ordered
    assert m["bayes_heldout_loss"] < m["no_context_heldout_loss"] < math.log(8)
    assert m["adam_heldout_final"] < m["adam_heldout_init"] - cfg.min_gain_nats
    assert all(0.0 <= v <= 1.0 + 1e-12 for arm in ARMS for v in m[f"{arm}_readout_per_run"])
    assert m["wall_s"] < 60 and (run_dir / res.figures[0]).is_file()
