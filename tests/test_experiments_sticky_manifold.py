"""sticky_manifold: the subspaces against independent float64 oracles (the one head's and the testbed's), the planted
heads and models, the batched Adam arm, the verdict rule on planted outcomes (a non-tracking deciding arm is
UNDECIDED, run end to end), the measures' validation (its statistics on synthetic measures, the own-position
control, the checkpoints of one run), a planted effect carried through the whole run, and the quick run's
consistency."""

import dataclasses
import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch

import implicit_em.audit.claims.sticky_manifold as sm
from implicit_em.audit import EXPERIMENTS
from implicit_em.audit.claims.sticky_manifold import (
    EXPERIMENT,
    MEASURES,
    Config,
    Sticky,
    criteria,
    summary,
    verdict,
)
from implicit_em.audit.claims.sticky_sculpting import Config as SculptingConfig
from implicit_em.audit.core import Context, Result
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import manifold_validation, sticky_fits
from implicit_em.audit.testbeds.manifold import mean_cos2, random_mean_cos2
from implicit_em.audit.testbeds.manifold_validation import (
    OwnPositionAttention,
    Validation,
    checkpoint_run,
    own_position,
    validity,
)
from implicit_em.audit.testbeds.one_head import init_head, stack_inits, train_runs
from implicit_em.audit.testbeds.sticky_manifold import (
    ShuffledLabels,
    context_readout_subspace,
    mean_value_jacobian,
    paired,
    planted_controls,
    planted_testbed_model,
    readout_subspace,
    shuffle_labels,
    shuffled_labels,
    subspace_scores,
    symbol_mean_basis,
    train_online_adam,
    transformer_scores,
    transformer_value_subspace,
    value_subspace,
)
from implicit_em.windtunnel.sticky import FitResult, StickyTestbed, fit

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
    o = cfg.onehead
    ours = (o.stay, o.noise, o.init_std, o.sgd_lr, o.sgd_steps)
    theirs = (sc.chain.stay, sc.chain.noise, sc.training.init_std, sc.training.lr, sc.training.steps)
    assert ours == theirs == (0.8, 3.0, 0.1, 0.01, 1000)
    assert Config.full().onehead.n_inits >= 10 and o.n_inits >= 10  # the one head: paired over >= 10 inits


def test_the_deciding_arm_is_the_shared_testbed_with_its_recipe_and_gates() -> None:
    """Only the means (from the seed), the budget and the gates come from Config; the recipe is the testbed's."""
    for cfg, steps in ((Config.quick(), StickyTestbed().steps), (Config.full(), StickyTestbed.full().steps)):
        tb = dataclasses.replace(cfg, seed=4).testbed()
        assert tb == dataclasses.replace(StickyTestbed(), means_seed=4, steps=steps)
        assert (tb.track_fraction, tb.plateau_window, tb.plateau_tol) == (0.1, 0.2, 0.25)  # issue 25's gates
    assert Config.quick().queries() == [7, 15, 23, 31]
    seeds = {sm._init_seed(dataclasses.replace(Config.full(), seed=s), i) for s in range(5) for i in range(5)}
    assert len(seeds) == 25  # every init of every seed has its own stream


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
    params = stack_inits([3, 4], 1, 0.3)
    before = params["W_O"].detach().sum(dim=-1).clone()
    x, y = torch.randn(2, 16, 20, generator=_gen(1)), torch.randint(0, 8, (2, 16), generator=_gen(2))
    train_runs(params, x, y, 0.5, 20, 5)
    assert float((params["W_O"].detach() - stack_inits([3, 4], 1, 0.3)["W_O"].detach()).abs().max()) > 1e-2
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
    params = stack_inits([1, 2, 3], 1, 0.1)
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
    batched = stack_inits([7, 8, 9], 1, 0.5)
    curve = train_online_adam(batched, pool_x, pool_y, order, 1e-2, x_eval, y_eval, eval_every=2)
    assert curve.shape == (1 + 3, 3)
    for r, seed in enumerate((7, 8, 9)):
        alone = {k: v[None].detach().clone().requires_grad_(True) for k, v in init_head(seed, 0.5).items()}
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


# --- the testbed's measures ------------------------------------------------------------------------------------


def test_context_readout_of_a_linear_causal_model_is_the_centred_column_space() -> None:
    """Known answer: z_t = sum_{j <= t} x_j W has dz_t/dx_j = Wᵀ for every j <= t, so the read-out is col(W P)."""
    g = _gen(21)
    w = torch.randn(20, 8, generator=g, dtype=F64)
    x = torch.randn(3, 12, 20, generator=g, dtype=F64)
    got = context_readout_subspace(lambda x: (x @ w).cumsum(dim=1), x, [3, 11], 7)
    m = w @ (torch.eye(8, dtype=F64) - 1 / 8)
    torch.testing.assert_close(_projector(got), m @ torch.linalg.pinv(m), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="no earlier input"):
        context_readout_subspace(lambda x: (x @ w).cumsum(dim=1), x, [0], 7)
    with pytest.raises(ValueError, match="rank below"):  # a read-out of rank 3 has no 7-d principal subspace
        context_readout_subspace(lambda x: (x @ w[:, :4]).cumsum(dim=1), x, [5], 7)


def test_the_exact_bayes_filter_reads_only_the_mean_span() -> None:
    tb = StickyTestbed(means_seed=2, length=12)
    held = tb.sample(16, _gen(3))
    basis = symbol_mean_basis(tb.means)

    def bayes(x: torch.Tensor) -> torch.Tensor:
        return (sm.forward_filter(tb.log_likelihood(x), tb.transition) @ tb.transition).log()

    got = context_readout_subspace(bayes, held.x.double(), [5, 11], 7)
    assert mean_cos2(got, basis) == pytest.approx(1.0, abs=1e-12)


def test_mean_value_jacobian_matches_autograd_token_by_token() -> None:
    """Independent oracle: torch.autograd.functional.jacobian of the first layer's value map at each position."""
    tb = StickyTestbed(length=6)
    model = tb.model(5)
    with torch.no_grad():  # move the LayerNorm and the positions off their init so that they matter
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=_gen(int(p.numel()))))
    x = tb.sample(2, _gen(6)).x
    block = model.blocks[0]
    jacs = []
    for b in range(2):
        for t in range(6):
            pos = model.pos.weight[t].detach()

            def value(v: torch.Tensor, pos: torch.Tensor = pos) -> torch.Tensor:
                return block.attn.W_V(block.ln1(model.inp(v) + pos))  # type: ignore[operator, union-attr]

            jacs.append(torch.autograd.functional.jacobian(value, x[b, t]))
    oracle = torch.stack(jacs).double().mean(dim=0)
    torch.testing.assert_close(mean_value_jacobian(model, x), oracle, rtol=1e-5, atol=1e-6)
    sub = transformer_value_subspace(model, x, 7)
    torch.testing.assert_close(_projector(sub), _projector(value_subspace(oracle.T, x.reshape(-1, 20), 7)),
                               rtol=0, atol=1e-4)  # fmt: skip  # float32 Jacobians


def test_planted_testbed_models_score_one_and_zero_and_the_init_near_chance() -> None:
    tb = StickyTestbed(means_seed=7)
    held = tb.sample(16, _gen(8))
    basis = symbol_mean_basis(tb.means)
    model = tb.model(9)
    q = Config.quick().queries()
    inside = transformer_scores(planted_testbed_model(model, basis, True), basis, held.x, q)
    outside = transformer_scores(planted_testbed_model(model, basis, False), basis, held.x, q)
    assert min(inside.values()) > 1 - 1e-9 and max(outside.values()) < 1e-9
    init = transformer_scores(model, basis, held.x, q)
    assert all(0.2 < v < 0.6 for v in init.values())  # a random init is near chance (0.35), far from 0 and 1
    assert torch.equal(model.inp.weight, tb.model(9).inp.weight)  # planting copies; the model is untouched


def test_shuffled_labels_keep_the_inputs_and_take_another_windows_labels() -> None:
    tb = StickyTestbed(length=16, batch_size=4)
    shuffled = shuffled_labels(tb, 3)
    assert isinstance(shuffled, StickyTestbed) and shuffled.length == 16 and shuffled.batch_size == 4
    for (x, y), (xs, ys) in zip(tb.batches(2), shuffled.batches(2), strict=False):
        assert torch.equal(x, xs)  # the same inputs, the same stream
        assert torch.equal(ys[1:], y[:-1]) and torch.equal(ys[0], y[-1])  # window b learns window b - 1's labels
        break


# --- the deciding rule ---------------------------------------------------------------------------------------


def _decide(m: dict[str, Any], cfg: Config) -> tuple[str, str]:
    """The verdict and the summary, as ``run`` composes them."""
    v = verdict(cfg, m, criteria(cfg, m))
    return v, summary(cfg, m, v)


_VALID = {  # a validation that both measures pass: ranked by KL, aligned only near the tracking bar
    "validation_readout_rho": 0.95,
    "validation_value_rho": 0.9,
    "validation_readout_aligned_kl_max_in_bars": 1.2,
    "validation_value_aligned_kl_max_in_bars": 1.5,
}


def _testbed_planted(trained: float, d_mean: float, d_sd: float, **over: float) -> dict[str, float]:
    """Testbed metrics with both measures alike: the trained arm's (mean, paired gain, sd); init at 0.35."""
    m = {"aligned_threshold": 0.675, "n_runs": 3.0, "n_shuffled": 1.0}
    m.update(planted_in_readout=1.0, planted_in_value=1.0, planted_out_readout=0.0, planted_out_value=0.0)
    m.update(bayes_readout=1.0, trained_track_ratio_max=0.06, trained_plateau_in_bars_max=0.7)
    m.update(_VALID)
    for arm, (t, d, sd) in {"trained": (trained, d_mean, d_sd), "shuffled": (0.40, 0.05, 0.03)}.items():
        for x in MEASURES:
            m.update({f"{arm}_{x}_init_mean": 0.35, f"{arm}_{x}_trained_mean": t, f"{arm}_{x}_d_mean": d})
            m.update({f"{arm}_{x}_d_sd": sd, f"{arm}_{x}_d_in_sd": d / sd})
    m.update(over)
    return m


def test_the_deciding_rule_on_planted_outcomes() -> None:
    cfg = Config.quick()
    assert _decide(_testbed_planted(0.9, 0.55, 0.05), cfg)[0] == "SUPPORTED"
    partial = _decide(_testbed_planted(0.6, 0.25, 0.05), cfg)
    assert partial[0] == "PARTIAL" and "not aligned" in partial[1]
    assert _decide(_testbed_planted(0.4, 0.05, 0.05), cfg)[0] == "REFUTED"
    assert _decide(_testbed_planted(0.9, 0.55, 0.05, trained_value_trained_mean=0.5), cfg)[0] == "PARTIAL"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trained_track_ratio_max", 0.5),  # an init that does not track the posterior
        ("trained_plateau_in_bars_max", 3.0),  # still improving at the end
        ("trained_plateau_in_bars_max", math.inf),  # too few checkpoints to tell
        ("shuffled_readout_trained_mean", 0.8),  # training without the labels' signal would pass
        ("shuffled_value_trained_mean", 0.7),
        ("validation_readout_rho", 0.5),  # the read-out does not rank the models by their KL
        ("validation_value_aligned_kl_max_in_bars", 2.5),  # the value PCs read aligned where arm B sits
        ("validation_readout_aligned_kl_max_in_bars", 12.0),
        ("validation_value_rho", math.nan),  # too few models to rank
    ],
)
@pytest.mark.parametrize("effect", [(0.9, 0.55, 0.05), (0.4, 0.05, 0.05), (0.6, 0.25, 0.05)])
def test_a_failed_gate_is_undecided_whatever_the_angles(
    key: str, value: float, effect: tuple[float, float, float]
) -> None:
    verdict, summary = _decide(_testbed_planted(*effect, **{key: value}), Config.quick())
    assert verdict == "UNDECIDED" and summary.startswith("Undecided: a gate failed")


def test_a_failed_identity_raises() -> None:
    with pytest.raises(AssertionError, match="identities failed"):
        _decide(_testbed_planted(0.9, 0.55, 0.05, planted_out_value=0.3), Config.quick())


def _small(**over: Any) -> Config:
    """A small deciding arm: 2 inits, 1 shuffled, 16 held-out windows (the one head is not run by _testbed)."""
    return dataclasses.replace(Config.quick(), sticky=Sticky(n_inits=2, eval_size=16, **over))


def _validated(cfg: Config, ctx: Context, m: Any, records: dict[str, Any]) -> dict[str, Any]:
    """The measures' validation on the records of ``sm._testbed``, as ``measure`` runs it."""
    inits = [sm._init_seed(cfg, i) for i in range(cfg.sticky.n_inits)]
    tb, held, basis = records["tb"], records["held"], records["basis"]
    return manifold_validation.measure(m, ctx, tb, held, inits, cfg.queries(), basis, cfg.validation)


def test_a_non_tracking_deciding_arm_is_undecided_end_to_end(tmp_path: Path) -> None:
    """The deciding arm replaced by one that cannot track (60 steps of the recipe): the verdict is UNDECIDED by
    the tracking gate, whatever the angles say (on the old rule the same run read PARTIAL or REFUTED)."""
    cfg = _small(steps=60)
    m, records = sm._testbed(cfg, Context(tmp_path))
    _validated(cfg, Context(tmp_path), m, records)
    assert m["validation_steps"][0] == 0 and m["validation_steps"][-1] == 60  # the run never reached 0.12
    assert m["trained_track_ratio_max"] > cfg.sticky.track_fraction
    verdict, _ = _decide(m, cfg)
    assert verdict == "UNDECIDED"
    assert next(c.metric for c in criteria(cfg, m) if c.role == "gate" and not c.passed).startswith("trained: max")
    assert len(records["runs"]["trained"]) == 2 and len(records["runs"]["shuffled"]) == 1


@pytest.mark.parametrize(("inside", "expected"), [(True, "SUPPORTED"), (False, "REFUTED")])
def test_a_planted_effect_carries_through_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inside: bool, expected: str
) -> None:
    """Planted effect: 'training' that tracks (a flat KL history under the bar) and moves the input embedding into
    the mean span (SUPPORTED) or out of it (REFUTED); the shuffled-label arm stays at its init."""

    def planted_fit(bed: StickyTestbed, model: torch.nn.Module, seed: int, **kw: Any) -> FitResult:
        if not isinstance(bed, ShuffledLabels):
            basis = symbol_mean_basis(bed.means)
            model.load_state_dict(planted_testbed_model(model, basis, inside).state_dict())
        return FitResult([0.01] * 10, list(range(10, 110, 10)), 1.0, 0.0)

    monkeypatch.setattr(sticky_fits, "fit", planted_fit)  # the shared fits train through it
    cfg = _small()
    m, _ = sm._testbed(cfg, Context(tmp_path))
    m.update(_VALID)  # the validation is tested on its own (below); here the planted angles decide
    assert _decide(m, cfg)[0] == expected
    if inside:
        assert min(m["trained_readout_trained_mean"], m["trained_value_trained_mean"]) > 1 - 1e-9


def test_the_shuffled_arm_trains_through_the_shared_fit() -> None:
    """The negative control runs the testbed's own ``fit``; on the real labels the stream is the testbed's."""
    tb = dataclasses.replace(StickyTestbed(length=8, batch_size=8, eval_size=8, eval_every=5), steps=10)
    a, b = tb.model(1), tb.model(1)
    fit(tb, a, 1)
    fit(shuffled_labels(tb, 0), b, 1)
    assert not torch.equal(a.head.weight, b.head.weight)  # different labels, different training


# --- the quick run ---------------------------------------------------------------------------------------------


def test_quick_run_is_consistent(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    m, cfg = res.metrics, Config.quick()
    assert res.verdict == _decide(m, cfg)[0]
    assert [c.metric for c in res.criteria] == [c.metric for c in criteria(cfg, m)]
    assert all(c.passed for c in res.criteria if c.role == "identity")
    for arm in ("trained", "shuffled"):
        for x in MEASURES:
            n = len(m[f"{arm}_{x}_per_run"])
            # in float64 here; the per-run values were measured in float32 or float64, so equal to float32's rounding
            d = torch.tensor(m[f"{arm}_{x}_per_run"], dtype=torch.float64) - torch.tensor(
                m[f"init_{x}_per_run"][:n], dtype=torch.float64
            )
            assert m[f"{arm}_{x}_d_mean"] == pytest.approx(float(d.mean()), rel=1e-6)
    assert len(m["trained_kl_per_run"]) == cfg.sticky.n_inits
    assert m["trained_track_ratio_max"] == pytest.approx(max(m["trained_kl_per_run"]) / m["no_context_kl"])
    assert m["aligned_threshold"] == pytest.approx(0.35 + 0.5 * 0.65)
    assert set(res.metrics.declared) == set(m)  # every metric declared with its unit and label
    # the reported one head: its controls and its own consistency
    assert min(m["onehead_planted_in_readout"], m["onehead_planted_in_value"]) >= 1 - 1e-9
    assert max(m["onehead_planted_out_readout"], m["onehead_planted_out_value"]) <= 1e-9
    assert m["onehead_random_heads_z"] <= 4.0
    for x in MEASURES:
        d = torch.tensor(m[f"onehead_adam_{x}_per_run"]) - torch.tensor(m[f"onehead_init_{x}_per_run"])
        assert len(d) == cfg.onehead.n_inits and m[f"onehead_adam_{x}_d_mean"] == pytest.approx(float(d.mean()))
    assert m["onehead_bayes_heldout_loss"] < m["onehead_no_context_heldout_loss"] < math.log(8)
    assert all((run_dir / f).is_file() for f in res.figures) and len(res.figures) == 3
    # the measures' validation: the run's checkpoints from its init to its end (the shared fit of init 0)
    steps, kl = m["validation_steps"], m["validation_kl_per_checkpoint"]
    assert steps[0] == 0 and steps[-1] == cfg.testbed().steps and steps == sorted(set(steps))
    assert kl[0] == m["validation_inits_kl_per_run"][0] and kl[-1] == m["trained_kl_per_run"][0]
    n_kept = len(steps) - 2  # between the init and the end: the first crossing of each level
    assert 1 <= n_kept <= len(cfg.validation.levels)
    for x in MEASURES:
        assert m[f"validation_{x}_per_checkpoint"][0] == m[f"init_{x}_per_run"][0]  # the same model, the same data
        assert m[f"validation_{x}_per_checkpoint"][-1] == m[f"trained_{x}_per_run"][0]
        bars = [k / m["tracking_bar"] for k in kl] + [m["validation_control_kl_ratio"] / cfg.sticky.track_fraction]
        stats = validity(bars, [*m[f"validation_{x}_per_checkpoint"], m[f"validation_control_{x}"]],
                         m["aligned_threshold"], len(steps))  # fmt: skip
        assert stats["rho"] == pytest.approx(m[f"validation_{x}_rho"])
        assert stats["aligned_kl_max_in_bars"] == pytest.approx(m[f"validation_{x}_aligned_kl_max_in_bars"])
    assert math.isnan(m["validation_control_readout"]) and m["validation_control_kl_ratio"] > 0.5  # no context
    gates = [c.metric for c in res.criteria if c.role == "gate" and c.metric.startswith("validation")]
    assert len(gates) == 4


# --- the measures' validation --------------------------------------------------------------------------------------

_BARS = [22.0, 15.0, 9.0, 6.0, 4.0, 3.0, 2.4, 1.9, 1.4, 1.1, 0.6, 10.0]  # KL / tracking bar: 11 checkpoints, control


def _gates(stats: dict[str, float]) -> list[bool]:
    m = {f"validation_{x}_{k}": v for x in MEASURES for k, v in stats.items()}
    return [c.passed for c in manifold_validation.gates(Metrics(m), Validation())]


def test_a_measure_monotone_in_kl_passes_the_validation() -> None:
    scores = [0.35, 0.40, 0.45, 0.50, 0.55, 0.58, 0.62, 0.70, 0.85, 0.95, 0.999, 0.44]
    stats = validity(_BARS, scores, 0.675, 11)
    assert stats["rho"] == pytest.approx(1.0)
    assert stats["aligned_kl_max_in_bars"] == 1.9 and stats["first_aligned_kl_in_bars"] == 1.9
    assert all(_gates(stats))


def test_a_measure_that_saturates_above_the_tracking_bar_fails_the_validation() -> None:
    """Arm B's case: aligned (and ordered) long before the model tracks; and the control aligned at 10 bars."""
    scores = [0.35, 0.90, 0.99, 0.995, 0.997, 0.998, 0.9985, 0.999, 0.9992, 0.9994, 0.9995, 0.99]
    stats = validity(_BARS, scores, 0.675, 11)
    assert stats["rho"] > 0.7  # it even ranks the models by KL ...
    assert stats["aligned_kl_max_in_bars"] == 15.0 and stats["first_aligned_kl_in_bars"] == 15.0
    assert _gates(stats) == [True, False, True, False]  # ... and still fails: aligned at 15 tracking bars


def test_a_measure_that_does_not_rank_by_kl_fails_the_validation() -> None:
    scores = [0.60, 0.35, 0.62, 0.40, 0.58, 0.45, 0.50, 0.38, 0.61, 0.42, 0.66, 0.55]  # never aligned, unordered
    stats = validity(_BARS, scores, 0.675, 11)
    assert stats["rho"] < 0.7 and stats["aligned_kl_max_in_bars"] == 0.0
    assert math.isnan(stats["first_aligned_kl_in_bars"])
    assert _gates(stats) == [False, True, False, True]


def test_an_undefined_score_is_left_out_of_the_ranking() -> None:
    scores = [0.35, 0.40, 0.45, 0.50, 0.55, 0.58, 0.62, 0.70, 0.85, 0.95, 0.999]
    with_nan = validity(_BARS, [*scores, math.nan], 0.675, 11)
    assert with_nan == validity(_BARS[:11], scores, 0.675, 11)


def test_the_own_position_control_reads_no_earlier_position_and_keeps_its_weights() -> None:
    tb = dataclasses.replace(StickyTestbed(length=12, batch_size=8, eval_size=8, eval_every=5), steps=6)
    base = tb.model(3)
    model = own_position(tb.model(3))
    assert all(isinstance(b.attn, OwnPositionAttention) for b in model.blocks)
    assert model.state_dict().keys() == base.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), base.state_dict().values(), strict=True))
    x = tb.sample(4, _gen(5)).x
    moved = x.clone()
    moved[:, :6] += torch.randn(4, 6, 20, generator=_gen(6))
    with torch.no_grad():
        torch.testing.assert_close(model(moved)[:, 6:], model(x)[:, 6:], rtol=0, atol=0)
        assert not torch.allclose(base(moved)[:, 6:], base(x)[:, 6:])  # the full attention does read them
    layer = cast(OwnPositionAttention, model.blocks[0].attn)
    w_q, w_v = layer.W_Q.weight.detach().clone(), layer.W_V.weight.detach().clone()
    fit(tb, model, 3)
    assert torch.equal(layer.W_Q.weight, w_q)  # one unmasked score: no gradient reaches W_Q
    assert not torch.equal(layer.W_V.weight, w_v)
    basis = symbol_mean_basis(tb.means)
    scores = manifold_validation._own_scores(model, basis, x, [5, 11])
    assert math.isnan(scores["readout"]) and 0.0 <= scores["value"] <= 1.0
    with pytest.raises(AssertionError, match="reads an earlier position"):
        manifold_validation._own_scores(base, basis, x, [5, 11])


def test_the_checkpoints_are_the_prefix_of_the_plain_run(tmp_path: Path) -> None:
    """Each checkpoint is the model the testbed's own fit reaches at that step (the probe only reads), kept the
    first time its KL falls to a level; the run stops once the last level is crossed; the cache returns the same."""
    tb = dataclasses.replace(StickyTestbed(length=16, batch_size=16, eval_size=16), steps=80)
    held = tb.eval_batch(4)
    v = Validation(levels=(1.5, 1.0, 0.9), probe_every=5)
    run = checkpoint_run(Context(tmp_path), tb, 2, held, v)
    steps = [c["step"] for c in run["checkpoints"]]
    assert steps[0] == 0 and steps == sorted(set(steps)) and all(s % 5 == 0 for s in steps) and len(steps) >= 2
    nc = tb.no_context_kl_bits(held)
    probe = dict(zip(run["probe_steps"], run["probe_kl"], strict=True))
    plain: dict[int, dict[str, torch.Tensor]] = {0: tb.model(2).state_dict()}

    def record(step: int, net: torch.nn.Module) -> None:  # the plain run, read at the kept steps only
        if step + 1 in steps:
            plain[step + 1] = {k: t.detach().clone() for k, t in net.state_dict().items()}

    fit(tb, tb.model(2), 2, steps=steps[-1], eval_batch=held, on_step=record)
    for c in run["checkpoints"]:
        if c["step"]:
            earlier = min(k for s, k in probe.items() if s < c["step"])
            assert any(c["kl"] <= lv * nc < earlier for lv in v.levels)  # a level crossed here for the first time
        for name, value in plain[c["step"]].items():
            torch.testing.assert_close(c["state"][name], value, rtol=0, atol=0)
        model = tb.model(2)
        model.load_state_dict(c["state"])
        assert c["kl"] == tb.kl_bits(model, held)
    if min(run["probe_kl"]) <= min(v.levels) * nc:
        assert run["probe_steps"][-1] == steps[-1] < tb.steps  # stopped at the last crossing
    again = checkpoint_run(Context(tmp_path), tb, 2, held, v)
    assert [c["step"] for c in again["checkpoints"]] == steps
