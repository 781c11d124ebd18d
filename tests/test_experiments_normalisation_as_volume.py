"""The normalisation_as_volume experiment: its measures on known answers, the siamese arms and their loss against a
float64 reference, the verdict rule and gates, a non-collapsing ``none`` (UNDECIDED), planted preventions (the
verdict moves) and the quick run."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from implicit_em.audit.claims import normalisation_as_volume as nav
from implicit_em.audit.core import Context
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import volume_arms as va

F64 = torch.float64


def _data(seed: int = 0, n: int = 120) -> va.Data:
    return va.make_data(n, n, 8, 4, 1.0, torch.Generator().manual_seed(seed))


# --- the measures ---------------------------------------------------------------------------------------------------


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
    m = Metrics()
    m["mechanisms preventing collapse"] = [a for a, p in zip(nav.MECHANISMS, prevents, strict=True) if p]
    m["mechanisms collapsing"] = [a for a, c in zip(nav.MECHANISMS, collapses, strict=True) if c]
    assert nav.verdict(nav.Config(), m, []) == expected


def _arm(spreads: list[float]) -> nav.Arm:
    steps = [0, 200, 400, 600, 800][: len(spreads)]
    return nav.Arm(steps, spreads, [3.0] * len(spreads), [-0.9] * len(spreads), 0.5, 0.0)


def test_the_states_collapsed_prevented_and_partial() -> None:
    cfg = nav.Config().rule
    assert cfg.collapse_spread_max == 0.1 and cfg.prevent_spread_min == 0.3 and cfg.settle_ratio_min == 0.8
    assert _arm([0.8, 0.5, 0.2, 0.1, 0.05]).state(cfg) == "collapsed"
    assert _arm([0.8, 0.8, 0.8, 0.8, 0.8]).state(cfg) == "prevented"
    assert _arm([0.8, 0.8, 0.8, 0.8, 0.2]).state(cfg) == "partial"  # between the bars
    assert _arm([0.8, 0.8, 0.8, 1.0, 0.7]).state(cfg) == "partial"  # still falling: 0.7 < 0.8 × 1.0
    assert _arm([0.8, 0.8, 0.8, 1.0, 0.8]).state(cfg) == "prevented"  # settled at the ratio bar
    assert _arm([0.8, 0.5, 0.2, 0.1, 0.05]).collapse_step(cfg) == 600
    assert math.isnan(_arm([0.8, 0.8, 0.8, 0.8, 0.8]).collapse_step(cfg))


def _fake(states: dict[str, str]) -> object:
    """A replicate stand-in: every arm collapsed, except those in ``states`` ('prevented' or 'partial')."""
    shapes = {"collapsed": [0.8, 0.3, 0.1, 0.02, 0.01], "prevented": [0.8] * 5, "partial": [0.8, 0.7, 0.6, 0.5, 0.2]}

    def fake(cfg: nav.Config, streams: nav.Seeds) -> tuple[dict[str, nav.Arm], float]:
        arms = {arm: _arm(shapes[states.get(arm, "collapsed")]) for arm in nav.ARMS}
        return arms, 0.9

    return fake


TINY = dataclasses.replace(nav.Config.quick(), n=60, steps=40, eval_every=10, n_seeds=2)


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
    monkeypatch.setattr(nav, "replicate", _fake(planted))
    res = nav.run(TINY, Context(tmp_path))
    assert res.verdict == verdict
    assert res.metrics["mechanisms preventing collapse"] == preventing
    gates = [c for c in res.criteria if c.role == "gate"]
    assert [c.passed for c in gates] == [planted.get("none") is None, planted.get("logdet") == "prevented"]
    if verdict == "UNDECIDED":
        assert res.summary.startswith("cannot decide: gate:")


MID = dataclasses.replace(nav.Config.quick(), n=150, n_seeds=1)


def test_a_none_arm_that_does_not_collapse_makes_the_verdict_undecided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real pipeline with the ``none`` arm replaced by one without the risk (SimSiam with its predictor): the
    gate fails and the verdict is UNDECIDED, whatever the mechanisms do."""
    train = nav.train_arm
    monkeypatch.setattr(
        nav,
        "train_arm",
        lambda arm, data, cfg, streams: train("predictor" if arm == "none" else arm, data, cfg, streams),
    )
    res = nav.run(MID, Context(tmp_path))
    assert res.metrics["per arm"]["none"]["states"] == ["prevented"] * MID.n_seeds
    assert not res.criteria[0].passed and res.verdict == "UNDECIDED"


def test_mechanisms_made_to_prevent_collapse_flip_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pipeline with every mechanism arm trained with the volume term (a planted prevention): SUPPORTED;
    with only the residual arm planted: PARTIAL (the other two collapse at this size, as at quick size)."""
    train = nav.train_arm
    for planted, expected in ((nav.MECHANISMS, "SUPPORTED"), (("residual",), "PARTIAL")):
        monkeypatch.setattr(
            nav,
            "train_arm",
            lambda arm, data, cfg, streams, p=planted: train("logdet" if arm in p else arm, data, cfg, streams),
        )
        res = nav.run(MID, Context(tmp_path))
        assert res.verdict == expected, res.summary
        assert res.metrics["mechanisms preventing collapse"] == list(planted)


# --- the quick run --------------------------------------------------------------------------------------------------


def test_quick_run_gates_hold_and_the_verdict_follows_the_rule(tmp_path: Path) -> None:
    cfg = nav.Config.quick()
    res = nav.run(cfg, Context(tmp_path))
    per = res.metrics["per arm"]
    assert per["none"]["states"] == ["collapsed"] * cfg.n_seeds  # the risk is shown
    assert per["logdet"]["states"] == ["prevented"] * cfg.n_seeds  # a prevention is possible
    gates = [c for c in res.criteria if c.role == "gate"]
    assert len(gates) == 2 and all(c.passed for c in gates)
    by = {c.metric: c.passed for c in res.criteria}
    prevents = [m for m in nav.MECHANISMS if by[f"{m} prevents collapse (share of replicates)"]]
    collapses = [m for m in nav.MECHANISMS if by[f"{m} collapses (share of replicates)"]]
    assert res.metrics["mechanisms preventing collapse"] == prevents
    assert res.metrics["mechanisms collapsing"] == collapses
    assert res.verdict == nav.verdict(cfg, res.metrics, res.criteria)
    assert res.metrics.undeclared() == []
    # the collapsed none arm still reaches the objective's minimum region: its held-out loss is near −1
    assert per["none"]["held-out siamese loss"]["max"] < -0.95
    assert (tmp_path / res.figures[0]).stat().st_size > 1000
