"""The normalisation_as_volume experiment: its measures on known answers, the log-det arm as the exact tied GMM
density, the verdict rule, and the quick run's controls (the no-volume arms collapse, the log-det arm does not)."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from implicit_em.experiments import _volume_arms as va
from implicit_em.experiments import normalisation_as_volume as nav
from implicit_em.experiments._base import Context

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


# --- the arms -------------------------------------------------------------------------------------------------------


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
    ("controls", "prevents", "expected", "at_least_one"),
    [
        ([True, True, True], [True, True, True], "SUPPORTED", "SUPPORTED"),
        ([True, True, True], [False, True, False], "PARTIAL", "SUPPORTED"),
        ([True, True, True], [False, False, False], "REFUTED", "REFUTED"),
        ([False, True, True], [False, False, False], "PARTIAL", "PARTIAL"),  # the positive control did not collapse
        ([True, True, False], [True, True, True], "PARTIAL", "PARTIAL"),  # the log-det rescue failed
    ],
)
def test_the_verdict_rule(controls: list[bool], prevents: list[bool], expected: str, at_least_one: str) -> None:
    assert nav._verdict(controls, prevents) == expected
    assert nav._verdict_at_least_one(controls, prevents) == at_least_one


def _arm(log_volume: float, effective: float) -> nav._Arm:
    return nav._Arm([0, 10], [0.0, log_volume], [3.0, effective], [3.0, 3.0], [-5.0, -1.0], 0.5, math.nan, 0.0)


def test_collapse_needs_both_the_volume_and_the_responsibilities() -> None:
    cfg = nav.Config()
    assert _arm(-10.0, 1.0).state(cfg) == "collapsed"
    assert _arm(-10.0, 3.9).state(cfg) == "partial"  # K points: the volume is gone, the assignments are not
    assert _arm(0.0, 1.0).state(cfg) == "partial"
    assert _arm(0.0, 3.0).state(cfg) == "prevented"
    assert _arm(-10.0, 1.0).collapse_step(cfg) == 10 and math.isnan(_arm(0.0, 3.0).collapse_step(cfg))
    assert cfg.collapse_log_volume_max == math.log(1e-2) and cfg.trivial_effective_max == 1.5


TINY = dataclasses.replace(nav.Config.quick(), n=60, steps=20, eval_every=10, replicates=2)


def test_a_planted_preventing_mechanism_moves_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: replicates whose no-volume arms collapse and whose residual arm keeps its volume and assignments;
    the residual criterion must pass, the other two fail, and the rule give PARTIAL (1 of 3)."""

    def fake(cfg: nav.Config, seed: int) -> tuple[dict[str, nav._Arm], tuple[float, float]]:
        arms = {arm: _arm(-12.0, 1.0) for arm in va.ARMS}
        arms["logdet_linear"] = arms["residual"] = _arm(0.2, 3.0)
        return arms, (-10.0, 0.5)

    monkeypatch.setattr(nav, "_replicate", fake)
    res = nav.run(TINY, Context(tmp_path))
    passed = {c.metric.split(" ")[0]: c.passed for c in res.criteria}
    assert passed == {
        "control:": True,
        "weight_decay": False,
        "layernorm": False,
        "residual": True,
        "layernorm_gain": False,
    }
    assert res.verdict == "PARTIAL" and res.metrics["mechanisms preventing collapse"] == ["residual"]
    assert res.metrics["cost of the preventing arms"] == {"residual": "no cost in cluster recovery"}


def test_a_positive_control_that_does_not_collapse_cannot_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control of the design: the 'none' arm trained with the log-det term (linear) does not collapse,
    so the experiment must say it cannot decide."""
    train = nav._train_arm
    monkeypatch.setattr(
        nav,
        "_train_arm",
        lambda arm, data, cfg, seed: train("logdet_linear" if arm == "none" else arm, data, cfg, seed),
    )
    res = nav.run(TINY, Context(tmp_path))
    assert not res.criteria[0].passed and res.verdict == "PARTIAL"
    assert res.summary.startswith("cannot decide: control(s) none")


# --- the quick run --------------------------------------------------------------------------------------------------


def test_quick_run_the_no_volume_arms_collapse_and_the_log_det_arm_does_not(tmp_path: Path) -> None:
    cfg = nav.Config.quick()
    res = nav.run(cfg, Context(tmp_path))
    per = res.metrics["per arm"]
    assert per["none"]["states"] == per["none_linear"]["states"] == ["collapsed"] * cfg.replicates
    assert per["logdet_linear"]["states"] == ["prevented"] * cfg.replicates
    # the log-det arm is the tied GMM: its held-out log-likelihood is EM's to within 0.25 nats per input
    em = res.metrics["EM reference (sklearn tied GMM): held-out log-likelihood"]["median"]
    assert abs(per["logdet_linear"]["held-out input log-likelihood"]["median"] - em) < 0.25
    # without the term the linear arm's density is lost (A → 0): far below EM's
    assert per["none_linear"]["held-out input log-likelihood"]["max"] < em - 10
    # the objective rewards the collapse: the collapsed arm's held-out −L⁻ is nearer its supremum 0
    assert (
        per["none"]["held-out feature objective −L⁻"]["median"]
        > per["logdet_linear"]["held-out feature objective −L⁻"]["median"]
    )
    controls = [c.passed for c in res.criteria[:3]]
    prevents = [c.passed for c in res.criteria[3:6]]
    assert all(controls) and res.verdict == nav._verdict(controls, prevents)
    assert (tmp_path / res.figures[0]).stat().st_size > 1000
