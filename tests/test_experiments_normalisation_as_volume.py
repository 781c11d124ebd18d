"""The normalisation_as_volume experiment: the collapse criterion on synthetic trajectories, the scale-sensitive
testbed (its loss against a float64 reference, shared starts, replicates that never mix, decay on the weight
matrices only), the rule on planted outcomes (a mechanism that prevents collapse flips the verdict, a non-marginal
``none`` or a failed control gives UNDECIDED), the previous setting's rule, and the real pipeline."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from implicit_em.audit.claims import normalisation_as_volume as nav
from implicit_em.audit.core import Context, Result, torch_threads
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import volume_arms as va

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread() -> object:
    """As the audit's runner runs the claims: one torch thread (two on a busy 2-core machine crawl)."""
    with torch_threads(1):
        yield


def _metrics(res: Result) -> Metrics:
    assert isinstance(res.metrics, Metrics)
    return res.metrics


def _data(r: int = 2, n: int = 40, seed: int = 0) -> va.Data:
    return va.stack_data([va.make_data(n, n, 8, 4, 2.0, torch.Generator().manual_seed(seed + i)) for i in range(r)])


# --- the collapse criterion -----------------------------------------------------------------------------------------


def test_the_collapse_criterion_on_synthetic_trajectories() -> None:
    steps = [0, 10, 20, 30, 40]
    ratio = torch.tensor(
        [
            [1.0, 0.5, 0.04, 0.01, 0.01],  # collapses at 20
            [1.0, 0.3, 0.2, 0.1, 0.06],  # shrinks, never under the bar: censored at the budget
            [1.0, 0.5, 0.05, 0.2, 0.3],  # touches the bar exactly at 20 (at or under counts), then recovers
            [1.0, 0.5, math.nan, math.nan, math.nan],  # diverges: never collapses
            [1.0, 1.2, 1.5, 2.0, 0.01],  # collapses at the last snapshot
        ],
        dtype=F64,
    )
    times, hit = nav.censored_times(ratio, steps, 0.05)
    assert times == [20.0, 40.0, 20.0, 40.0, 40.0]
    assert hit == [True, False, True, False, True]


def test_the_paired_effect() -> None:
    e = nav.effect([5.0, 7.0, 9.0], [1.0, 1.0, 1.0])
    assert e["mean"] == pytest.approx(6.0) and e["se"] == pytest.approx(2.0 / math.sqrt(3))
    assert nav.effect([3.0, 3.0], [1.0, 1.0]) == {"mean": 2.0, "se": 0.0}


# --- the testbed ----------------------------------------------------------------------------------------------------


def test_the_mixture_loss_against_a_float64_reference() -> None:
    data = _data()
    for spec in (va.Spec(), va.Spec(layernorm="gain"), va.Spec(residual=2), va.Spec(volume=1.0)):
        p = va.init_params(spec, data.x_train, 2, 4, 16, torch.Generator().manual_seed(1))
        loss = va.mixture_loss(spec, p, data.x_train).detach().numpy()
        with torch.no_grad():
            z, mu = va.encode(spec, p, data.x_train).numpy(), p["mu"].numpy()
        d2 = ((z[:, :, None, :] - mu[:, None, :, :]) ** 2).sum(-1)  # (R, N, K)
        ref = -np.log(np.exp(-0.5 * d2).mean(-1)).mean(1)
        if spec.volume:
            cov = np.stack([np.cov(zr.T) for zr in z])
            ref -= 0.5 * np.linalg.slogdet(cov + 1e-6 * np.eye(8))[1]
        np.testing.assert_allclose(loss, ref, rtol=1e-10)
    # L⁻ ≥ 0, with 0 at total collapse (every input and every prototype on one point)
    p = va.init_params(va.Spec(), data.x_train, 2, 4, 16, torch.Generator().manual_seed(1))
    assert (va.mixture_loss(va.Spec(), p, data.x_train) >= 0).all()
    with torch.no_grad():
        p["W2"].zero_()
        p["mu"].copy_(p["b2"].unsqueeze(1).expand_as(p["mu"]))
    torch.testing.assert_close(va.mixture_loss(va.Spec(), p, data.x_train), torch.zeros(2, dtype=F64))
    with torch.no_grad():
        assert va.exp_information(va.encode(va.Spec(), p, data.x_test), p["mu"]).tolist() == pytest.approx([1.0, 1.0])


def test_the_arms_share_their_start_and_the_placebo_does_not() -> None:
    data = _data()
    x = data.x_train
    specs = [va.Spec(), va.Spec(decay=0.1), va.Spec(layernorm="nogain"), va.Spec(layernorm="gain"), va.Spec(residual=1)]
    ps = [va.init_params(s, x, 2, 4, 16, torch.Generator().manual_seed(3)) for s in [*specs, va.Spec(residual=2)]]
    for p in ps[1:]:
        for name in ("W1", "b1", "W2", "b2"):
            torch.testing.assert_close(p[name], ps[0][name], rtol=0, atol=0)
    with torch.no_grad():
        assert va.encode(va.Spec(), ps[0], x).var(1).mean(1).tolist() == pytest.approx([1.0, 1.0])
        z = va.encode(va.Spec(layernorm="nogain"), ps[2], x)
        assert z.mean(-1).abs().max() < 1e-12 and z.var(-1, unbiased=False).mean() == pytest.approx(1.0, rel=1e-4)
        torch.testing.assert_close(va.encode(va.Spec(residual=1), ps[4], x), x + va.encode(va.Spec(), ps[0], x))
    other = va.init_params(va.Spec(), x, 2, 4, 16, torch.Generator().manual_seed(4))
    assert not torch.equal(other["W1"], ps[0]["W1"])
    arms = nav.arms(nav.Config())
    assert arms["placebo"][2].init != "init" and all(
        s.init == "init" for a, (_, _, s) in arms.items() if a != "placebo"
    )
    with pytest.raises(ValueError, match="not an arm"):
        va.Spec(layernorm="batch")


def test_replicates_never_mix() -> None:
    """Replacing replicate 1's data (and so its whole trajectory) leaves replicate 0's trajectory bitwise equal."""
    a, b = _data(2, seed=0), _data(2, seed=10)
    mixed = va.Data(
        *(torch.stack([getattr(a, f)[0], getattr(b, f)[1]]) for f in ("x_train", "y_train", "x_test", "y_test"))
    )
    for spec in (va.Spec(decay=0.1), va.Spec(layernorm="gain"), va.Spec(volume=1.0)):
        t1 = va.train_mixture(spec, a, 2, 4, 16, 30, 1e-2, 10, 5)
        t2 = va.train_mixture(spec, mixed, 2, 4, 16, 30, 1e-2, 10, 5)
        torch.testing.assert_close(t1.total_variance[0], t2.total_variance[0], rtol=0, atol=0)
        assert not torch.equal(t1.total_variance[1], t2.total_variance[1])


def test_only_the_encoders_weight_matrices_decay() -> None:
    data = _data()
    spec = va.Spec(decay=0.3, layernorm="gain", residual=2)
    p = va.init_params(spec, data.x_train, 2, 4, 16, torch.Generator().manual_seed(0))
    groups = va.optimizer(spec, p, 1e-3).param_groups
    decayed = {n for n, v in p.items() for g in groups if g["weight_decay"] > 0 for q in g["params"] if q is v}
    assert decayed == {"W1", "W2", "W1_2", "W2_2"} and groups[0]["weight_decay"] == 0.3


# --- the rule on planted outcomes -----------------------------------------------------------------------------------

STEPS = list(range(0, 110, 10))


def _trace(times: list[float | None]) -> va.Trace:
    """Replicates whose variance ratio falls under the collapse bar at the given steps (None: never)."""
    rows = [[1.0 if t is None or s < t else 0.01 for s in STEPS] for t in times]
    tv = torch.tensor(rows, dtype=F64)
    return va.Trace(STEPS, tv, torch.zeros_like(tv), torch.ones_like(tv), torch.zeros_like(tv))


NONE: list[float | None] = [20, 30, 40, 50, None, None, 60, None]  # collapses in 5 of 8: at the margin


def _fake(planted: dict[str, list[float | None]]) -> object:
    def fake(cfg: nav.Config) -> dict[str, va.Trace]:
        return {a: _trace(planted.get(a, NONE)) for a in nav.arms(cfg)}

    return fake


NEVER: list[float | None] = [None] * 8
LATER: list[float | None] = [t + 20 if t is not None else None for t in NONE]  # delays every collapse by 20 steps
SOONER: list[float | None] = [10.0] * 8
STABLE = {a: NEVER for a in nav.arms(nav.Config()) if a not in ("none", "placebo")}
TINY = dataclasses.replace(nav.Config.quick(), old=nav.Old(n=40, steps=20, eval_every=10, replicates=0))


@pytest.mark.parametrize(
    ("planted", "verdict", "reading"),
    [
        ({"volume": NEVER}, "REFUTED", ["no delay"] * 3),
        (STABLE, "SUPPORTED", ["stabilises"] * 3),  # a planted mechanism that prevents collapse flips the verdict
        (
            {"volume": NEVER, "residual 1 block": NEVER, "residual 2 blocks": NEVER},
            "PARTIAL",
            ["no delay"] * 2 + ["stabilises"],
        ),
        ({**STABLE, "weight_decay 1": SOONER}, "PARTIAL", ["delays at some dose", "stabilises", "stabilises"]),
        ({**STABLE, "layernorm without gain": LATER}, "PARTIAL", ["stabilises", "delays at some dose", "stabilises"]),
        ({**STABLE, "volume": NONE}, "UNDECIDED", ["stabilises"] * 3),  # the positive control fails
        ({**STABLE, "placebo": NEVER}, "UNDECIDED", ["stabilises"] * 3),  # the negative control delays
        ({**STABLE, "none": NEVER}, "UNDECIDED", ["no delay"] * 3),  # none does not collapse: not marginal
        ({**STABLE, "none": [20] * 8, "placebo": [20] * 8}, "UNDECIDED", ["stabilises"] * 3),  # always collapses
    ],
)
def test_planted_outcomes_move_the_verdict(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    planted: dict[str, list[float | None]],
    verdict: str,
    reading: list[str],
) -> None:
    monkeypatch.setattr(nav, "_train_all", _fake(planted))
    res = nav.run(TINY, Context(tmp_path))
    assert res.verdict == verdict, res.summary
    assert list(nav.readings(TINY, _metrics(res)).values()) == reading
    if verdict == "UNDECIDED":
        assert res.summary.startswith("cannot decide: gate:")
    assert _metrics(res).undeclared() == []


def test_the_gates_read_the_margin_and_the_controls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nav, "_train_all", _fake({"volume": NEVER, "none": NEVER}))
    res = nav.run(TINY, Context(tmp_path))
    gates = {c.metric: c.passed for c in res.criteria if c.role == "gate"}
    assert list(gates.values()) == [False, True, False, True]  # not marginal (share 0); volume cannot delay
    assert res.metrics["per arm"]["none"]["collapse share"] == 0.0


def test_the_previous_settings_rule() -> None:
    steps = [0, 200, 400, 600]
    assert nav._old_state(steps, [0.8, 0.5, 0.2, 0.05]) == "collapsed"
    assert nav._old_state(steps, [0.8, 0.8, 0.8, 0.8]) == "prevented"
    assert nav._old_state(steps, [0.8, 0.8, 1.0, 0.7]) == "partial"  # still falling: 0.7 < 0.8 × 1.0
    assert nav._old_state(steps, [0.8, 0.8, 0.8, 0.2]) == "partial"


# --- the real pipeline ----------------------------------------------------------------------------------------------

SMALL = dataclasses.replace(nav.Config.quick(), replicates=8, old=nav.Old(n=60, steps=40, eval_every=10))


def test_a_none_arm_that_does_not_collapse_makes_the_verdict_undecided(tmp_path: Path) -> None:
    """The real pipeline at a budget too short for any collapse (the pilot's first ones come after 200 steps)."""
    res = nav.run(dataclasses.replace(SMALL, steps=100, replicates=4), Context(tmp_path))
    assert res.metrics["per arm"]["none"]["collapse share"] == 0.0
    assert not res.criteria[0].passed and res.verdict == "UNDECIDED"


def test_mechanisms_made_to_prevent_collapse_flip_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pipeline with every mechanism arm given the volume term (a planted prevention): each one delays
    collapse at every dose, and the verdict is SUPPORTED (the gates hold at this size)."""
    arms = nav.arms

    def planted(cfg: nav.Config) -> dict[str, tuple[str, int, va.Spec]]:
        out = arms(cfg)
        return {
            a: (m, d, dataclasses.replace(s, volume=1.0) if m in nav.MECHANISMS else s) for a, (m, d, s) in out.items()
        }

    monkeypatch.setattr(nav, "arms", planted)
    res = nav.run(SMALL, Context(tmp_path))
    assert res.verdict == "SUPPORTED", res.summary
    assert set(nav.readings(SMALL, _metrics(res)).values()) == {"stabilises"}


def test_quick_run_follows_the_rule(tmp_path: Path) -> None:
    cfg = nav.Config.quick()
    res = nav.run(cfg, Context(tmp_path))
    per = res.metrics["per arm"]
    assert per["volume"]["collapse share"] == 0.0  # the volume term prevents collapse
    assert res.verdict == nav.verdict(cfg, _metrics(res), res.criteria)
    assert res.metrics["old SimSiam reading"]["replicates"] == 1
    assert _metrics(res).undeclared() == []
    assert (tmp_path / res.figures[0]).stat().st_size > 1000
