"""The normalisation_as_volume experiment: its measures on known answers, the siamese arms and their loss against a
float64 reference, the mixture arms kept from before issue 25 (the log-det arm as the exact tied GMM density), the
verdict rule and gates, a non-collapsing ``none`` (UNDECIDED), planted preventions (the verdict moves) and the quick
run."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from implicit_em.audit.claims import normalisation_as_volume as nav
from implicit_em.audit.core import Context
from implicit_em.audit.testbeds import volume_arms as va

F64 = torch.float64


def _data(seed: int = 0, n: int = 120) -> va.Data:
    return va.make_data(n, n, 8, 4, 1.0, torch.Generator().manual_seed(seed))


# --- the measures ---------------------------------------------------------------------------------------------------


def test_effective_components_of_trivial_and_crisp_responsibilities() -> None:
    k = 4
    uniform = torch.full((12, k), 1 / k, dtype=F64)
    same_row = torch.tensor([[0.7, 0.1, 0.1, 0.1]], dtype=F64).repeat(12, 1)
    crisp = torch.eye(k, dtype=F64).repeat(3, 1)  # every input certain, components used equally
    assert va.effective_components(uniform) == pytest.approx((1.0, k), rel=1e-12)
    eff, marginal = va.effective_components(same_row)
    assert eff == pytest.approx(1.0, rel=1e-12)  # the same responsibilities for every input carry no information
    assert marginal == pytest.approx(math.exp(-(0.7 * math.log(0.7) + 0.3 * math.log(0.1))), rel=1e-12)
    assert va.effective_components(crisp) == pytest.approx((k, k), rel=1e-12)


def test_feature_log_volume_is_the_mean_log_eigenvalue_over_the_top_d_minus_1_directions() -> None:
    gen = torch.Generator().manual_seed(3)
    f = torch.randn(500, 5, generator=gen, dtype=F64) * torch.tensor([3.0, 2.0, 1.0, 0.5, 1e-3], dtype=F64)
    eig = np.sort(np.linalg.eigvalsh(np.cov(f.numpy().T)))[::-1]
    assert va.feature_log_volume(f) == pytest.approx(float(np.mean(np.log(eig[:4]))), rel=1e-10)
    # a constant direction (LayerNorm's (1, ..., 1)) is the one left out: the volume stays finite
    ln = torch.nn.functional.layer_norm(f, (5,))
    assert math.isfinite(va.feature_log_volume(ln)) and va.feature_log_volume(ln) > -10
    assert va.feature_log_volume(0.01 * f) == pytest.approx(va.feature_log_volume(f) + 2 * math.log(0.01), rel=1e-10)


def test_spread_and_effective_rank_on_known_answers() -> None:
    gen = torch.Generator().manual_seed(4)
    d = 8
    iso = torch.randn(20000, d, generator=gen, dtype=F64)  # directions uniform on the sphere
    assert va.spread(iso) == pytest.approx(1.0, abs=0.01)
    assert va.effective_rank(iso) == pytest.approx(d, rel=0.01)
    one = torch.ones(50, d, dtype=F64) + 1e-9 * torch.randn(50, d, generator=gen, dtype=F64)
    assert va.spread(one) < 1e-8  # every input on one direction
    assert va.spread(3.0 * iso) == pytest.approx(va.spread(iso), rel=1e-12)  # scale-free
    line = torch.randn(500, 1, generator=gen, dtype=F64) * torch.ones(1, d, dtype=F64)
    assert va.effective_rank(line) == pytest.approx(1.0, abs=1e-9)
    zn = torch.nn.functional.normalize(iso[:300], dim=1).numpy()
    assert va.spread(iso[:300]) == pytest.approx(float(np.sqrt(d) * zn.std(0, ddof=1).mean()), rel=1e-12)


def test_the_siamese_arms_share_their_start_and_only_the_predictor_arm_has_a_predictor() -> None:
    data = _data()
    models = {arm: va.Siamese(arm, data.x_train, 32, torch.Generator().manual_seed(5)) for arm in va.SIAMESE_ARMS}
    for arm in ("weight_decay", "logdet", "predictor", "residual"):
        torch.testing.assert_close(models[arm].W1, models["none"].W1, rtol=0, atol=0)
        torch.testing.assert_close(models[arm].b1, models["none"].b1, rtol=0, atol=0)
    for arm in ("weight_decay", "logdet", "predictor"):
        torch.testing.assert_close(models[arm].W2, models["none"].W2, rtol=0, atol=0)
    with torch.no_grad():
        for arm in ("none", "layernorm"):
            assert float(models[arm].features(data.x_train).var(0).mean()) == pytest.approx(1.0, rel=1e-12)
        a = torch.nn.functional.linear(data.x_test, models["layernorm"].W1, models["layernorm"].b1)
        ln = torch.nn.functional.layer_norm(a, (32,))
        h = torch.relu(ln) @ models["layernorm"].W2.T + models["layernorm"].b2
        torch.testing.assert_close(models["layernorm"].features(data.x_test), h, rtol=1e-12, atol=0)
        x = data.x_test
        torch.testing.assert_close(models["residual"].features(x), x + models["residual"]._mlp_out(x), rtol=0, atol=0)
    assert all((models[a].P is None) == (a != "predictor") for a in va.SIAMESE_ARMS)
    with pytest.raises(ValueError, match="arm must be one of"):
        va.Siamese("batchnorm", data.x_train, 32, torch.Generator())


def test_the_siamese_loss_and_its_gradient_against_a_float64_reference() -> None:
    """The loss is −½[cos(p z₁, sg z₂) + cos(p z₂, sg z₁)] (numpy), and its gradient flows through the online
    branch only: the gradient equals that of ½[cos(p z₁, c₂) + ...] with c the features as constants."""
    data = _data()
    gen = torch.Generator().manual_seed(2)
    v1 = data.x_train + 0.3 * torch.randn(data.x_train.shape, generator=gen, dtype=F64)
    v2 = data.x_train + 0.3 * torch.randn(data.x_train.shape, generator=gen, dtype=F64)
    for arm in ("none", "predictor", "logdet"):
        model = va.Siamese(arm, data.x_train, 32, torch.Generator().manual_seed(3))
        loss = va.siamese_loss(model, v1, v2, 1.0)
        with torch.no_grad():
            z1, z2 = model.features(v1).numpy(), model.features(v2).numpy()
        pm = np.eye(8) if model.P is None else model.P.detach().numpy()

        def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

        ref = -0.5 * (cos(z1 @ pm.T, z2).mean() + cos(z2 @ pm.T, z1).mean())
        if arm == "logdet":
            zz = np.concatenate([z1, z2])
            zz = zz / np.linalg.norm(zz, axis=1, keepdims=True)
            ref -= 0.5 * np.linalg.slogdet(8 * np.cov(zz.T) + 1e-6 * np.eye(8))[1] / 8
        assert float(loss.detach()) == pytest.approx(float(ref), rel=1e-12)
        if arm == "none":
            (g,) = torch.autograd.grad(loss, [model.W1])
            c1, c2 = torch.tensor(z1), torch.tensor(z2)
            f1, f2 = model.features(v1), model.features(v2)
            cc = torch.nn.functional.cosine_similarity
            (g_ref,) = torch.autograd.grad(-0.5 * (cc(f1, c2).mean() + cc(f2, c1).mean()), [model.W1])
            torch.testing.assert_close(g, g_ref, rtol=1e-12, atol=1e-15)


def test_only_the_weight_decay_siamese_arm_decays_and_only_its_weight_matrices() -> None:
    data = _data()
    for arm in va.SIAMESE_ARMS:
        model = va.Siamese(arm, data.x_train, 32, torch.Generator().manual_seed(0))
        groups = va.siamese_optimizer(model, 1e-2, 0.1).param_groups
        decayed = [p for g in groups if g["weight_decay"] > 0 for p in g["params"]]
        expected = [model.W1, model.W2] if arm in ("weight_decay", "weight_decay_strong") else []
        assert len(decayed) == len(expected) and all(any(p is q for q in expected) for p in decayed)


# --- the mixture arms (before issue 25; the mixture_objective arm reports the first) ----------------------------------


def test_the_log_det_arm_is_the_tied_gmm_density_in_input_space() -> None:
    """Known answer: log p(x) = log Σ π_j N(x; A⁻¹(μ_j − b), (AᵀA)⁻¹), against scipy, and the training loss is
    −mean log p(x) − (D/2) log 2π."""
    data = _data()
    model = va.Model("logdet_linear", data.x_train, 4, 32, torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.A.mul_(torch.tensor([1.5, 0.7, 1.0, 2.0, 0.9, 1.1, 0.6, 1.3], dtype=F64))  # not a rotation
        model.b.add_(0.3)
        model.logits.copy_(torch.tensor([0.2, -0.5, 0.0, 0.9], dtype=F64))
        x, a, b, mu = data.x_test, model.A.numpy(), model.b.numpy(), model.mu.numpy()
        pi = torch.softmax(model.logits, 0).numpy()
        cov = np.linalg.inv(a.T @ a)
        dens = sum(pi[j] * multivariate_normal(np.linalg.solve(a, mu[j] - b), cov).pdf(x.numpy()) for j in range(4))
        ll = model.input_log_likelihood(x).numpy()
        np.testing.assert_allclose(ll, np.log(dens), rtol=1e-10)
        loss = model.loss(x)
        np.testing.assert_allclose(float(loss), -ll.mean() - 4 * math.log(2 * math.pi), rtol=1e-12)


def test_the_deep_arms_share_their_start_and_begin_at_unit_feature_variance() -> None:
    data = _data()
    models = {arm: va.Model(arm, data.x_train, 4, 32, torch.Generator().manual_seed(5)) for arm in va.ARMS}
    for arm in ("weight_decay", "layernorm", "layernorm_gain"):
        torch.testing.assert_close(models[arm].W1, models["none"].W1, rtol=0, atol=0)
        torch.testing.assert_close(models[arm].W2, models["none"].W2, rtol=0, atol=0)
    torch.testing.assert_close(models["none_linear"].A, models["logdet_linear"].A, rtol=0, atol=0)
    with torch.no_grad():
        var = models["none"].features(data.x_train).var(0).mean()
        norms = models["layernorm"].features(data.x_test).square().sum(1)
        v = models["layernorm"]._mlp(data.x_test).var(1, unbiased=False)
    assert float(var) == pytest.approx(1.0, rel=1e-12)
    torch.testing.assert_close(norms, 8 * v / (v + 1e-5), rtol=1e-12, atol=0)  # ‖LN(h)‖² = D·v/(v + ε), ε = 1e-5
    with pytest.raises(ValueError, match="linear arms"):
        models["none"].input_log_likelihood(data.x_test)


def test_only_the_weight_decay_arm_decays_and_only_its_weight_matrices() -> None:
    data = _data()
    for arm in ("none", "weight_decay"):
        model = va.Model(arm, data.x_train, 4, 32, torch.Generator().manual_seed(0))
        groups = va.optimizer(model, 1e-2, 0.1).param_groups
        decayed = [p for g in groups if g["weight_decay"] > 0 for p in g["params"]]
        expected = [model.W1, model.W2] if arm == "weight_decay" else []
        assert len(decayed) == len(expected) and all(any(p is q for q in expected) for p in decayed)


# --- the verdict rule -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prevents", "collapses", "expected"),
    [
        ([True, True, True], [False, False, False], "SUPPORTED"),
        ([False, True, False], [True, False, True], "PARTIAL"),
        ([False, False, False], [True, False, True], "PARTIAL"),  # one mechanism only slows the collapse
        ([False, False, False], [True, True, True], "REFUTED"),
    ],
)
def test_the_verdict_rule(prevents: list[bool], collapses: list[bool], expected: str) -> None:
    assert nav._verdict(prevents, collapses) == expected


def _arm(spreads: list[float]) -> nav._Arm:
    steps = [0, 200, 400, 600, 800][: len(spreads)]
    return nav._Arm(steps, spreads, [3.0] * len(spreads), [-0.9] * len(spreads), 0.5, 0.0)


def test_the_states_collapsed_prevented_and_partial() -> None:
    cfg = nav.Config()
    assert cfg.collapse_spread_max == 0.1 and cfg.prevent_spread_min == 0.3 and cfg.settle_ratio_min == 0.8
    assert _arm([0.8, 0.5, 0.2, 0.1, 0.05]).state(cfg) == "collapsed"
    assert _arm([0.8, 0.8, 0.8, 0.8, 0.8]).state(cfg) == "prevented"
    assert _arm([0.8, 0.8, 0.8, 0.8, 0.2]).state(cfg) == "partial"  # between the bars
    assert _arm([0.8, 0.8, 0.8, 1.0, 0.7]).state(cfg) == "partial"  # still falling: 0.7 < 0.8 × 1.0
    assert _arm([0.8, 0.8, 0.8, 1.0, 0.8]).state(cfg) == "prevented"  # settled at the ratio bar
    assert _arm([0.8, 0.5, 0.2, 0.1, 0.05]).collapse_step(cfg) == 600
    assert math.isnan(_arm([0.8, 0.8, 0.8, 0.8, 0.8]).collapse_step(cfg))


def _fake(states: dict[str, str]) -> object:
    """A _replicate stand-in: every arm collapsed, except those in ``states`` ('prevented' or 'partial')."""
    shapes = {"collapsed": [0.8, 0.3, 0.1, 0.02, 0.01], "prevented": [0.8] * 5, "partial": [0.8, 0.7, 0.6, 0.5, 0.2]}

    def fake(cfg: nav.Config, seed: int) -> tuple[dict[str, nav._Arm], nav._Mixture, float]:
        arms = {arm: _arm(shapes[states.get(arm, "collapsed")]) for arm in nav.ARMS}
        return arms, nav._Mixture(-12.0, 1.0, 0.01, "collapsed"), 0.9

    return fake


TINY = dataclasses.replace(nav.Config.quick(), n=60, steps=40, eval_every=10, replicates=2, mixture_steps=20)


@pytest.mark.parametrize(
    ("planted", "verdict", "preventing"),
    [
        ({"logdet": "prevented"}, "REFUTED", []),
        ({"logdet": "prevented", "residual": "prevented"}, "PARTIAL", ["residual"]),
        ({"logdet": "prevented", "layernorm": "partial"}, "PARTIAL", []),
        ({"logdet": "prevented", **dict.fromkeys(nav.MECHANISMS, "prevented")}, "SUPPORTED", list(nav.MECHANISMS)),
        ({**dict.fromkeys(nav.MECHANISMS, "prevented")}, "UNDECIDED", list(nav.MECHANISMS)),  # logdet collapsed
        ({"none": "prevented", "logdet": "prevented"}, "UNDECIDED", []),  # the risk is not shown
    ],
)
def test_planted_outcomes_move_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: dict[str, str], verdict: str, preventing: list[str]
) -> None:
    monkeypatch.setattr(nav, "_replicate", _fake(planted))
    res = nav.run(TINY, Context(tmp_path))
    assert res.verdict == verdict
    assert res.metrics["mechanisms preventing collapse"] == preventing
    gates = [c for c in res.criteria if c.role == "gate"]
    assert [c.passed for c in gates] == [planted.get("none") is None, planted.get("logdet") == "prevented"]
    if verdict == "UNDECIDED":
        assert res.summary.startswith("cannot decide: gate:")


MID = dataclasses.replace(nav.Config.quick(), n=150, replicates=1)


def test_a_none_arm_that_does_not_collapse_makes_the_verdict_undecided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real pipeline with the ``none`` arm replaced by one without the risk (SimSiam with its predictor): the
    gate fails and the verdict is UNDECIDED, whatever the mechanisms do."""
    train = nav._train_arm
    monkeypatch.setattr(
        nav, "_train_arm", lambda arm, data, cfg, seed: train("predictor" if arm == "none" else arm, data, cfg, seed)
    )
    res = nav.run(MID, Context(tmp_path))
    assert res.metrics["per arm"]["none"]["states"] == ["prevented"] * MID.replicates
    assert not res.criteria[0].passed and res.verdict == "UNDECIDED"


def test_mechanisms_made_to_prevent_collapse_flip_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pipeline with every mechanism arm trained with the volume term (a planted prevention): SUPPORTED;
    with only the residual arm planted: PARTIAL (the other two collapse at this size, as at quick size)."""
    train = nav._train_arm
    for planted, expected in ((nav.MECHANISMS, "SUPPORTED"), (("residual",), "PARTIAL")):
        monkeypatch.setattr(
            nav,
            "_train_arm",
            lambda arm, data, cfg, seed, p=planted: train("logdet" if arm in p else arm, data, cfg, seed),
        )
        res = nav.run(MID, Context(tmp_path))
        assert res.verdict == expected, res.summary
        assert res.metrics["mechanisms preventing collapse"] == list(planted)


# --- the quick run --------------------------------------------------------------------------------------------------


def test_quick_run_gates_hold_and_the_verdict_follows_the_rule(tmp_path: Path) -> None:
    cfg = nav.Config.quick()
    res = nav.run(cfg, Context(tmp_path))
    per = res.metrics["per arm"]
    assert per["none"]["states"] == ["collapsed"] * cfg.replicates  # the risk is shown
    assert per["logdet"]["states"] == ["prevented"] * cfg.replicates  # a prevention is possible
    gates = [c for c in res.criteria if c.role == "gate"]
    assert len(gates) == 2 and all(c.passed for c in gates)
    by = {c.metric: c.passed for c in res.criteria}
    prevents = [by[f"{m} prevents collapse (share of replicates)"] for m in nav.MECHANISMS]
    collapses = [by[f"{m} collapses (share of replicates)"] for m in nav.MECHANISMS]
    assert res.verdict == nav._verdict(prevents, collapses)
    # the objective before issue 25 collapses by its own optimum (reported, not deciding)
    old = res.metrics["mixture objective without log-det (before issue 25; not deciding)"]
    assert old["states (old C1 and C2)"] == ["collapsed"] * cfg.replicates
    # the collapsed none arm still reaches the objective's minimum region: its held-out loss is near −1
    assert per["none"]["held-out siamese loss"]["max"] < -0.95
    assert (tmp_path / res.figures[0]).stat().st_size > 1000
