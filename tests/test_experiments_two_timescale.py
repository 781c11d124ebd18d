"""two_timescale: the τ instrument on planted paths (exponential approach plus noise; pure noise), the ordering and
specificity rules (planted effects), the stacked optimiser against torch's, the stacked forward passes, the gates
(a non-tracking deciding arm makes the verdict UNDECIDED), the quick run's consistency, and the companion's literal
setting (its head, its groups, its streams, its readings on planted runs, the companion's own reading)."""

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from implicit_em.audit import EXPERIMENTS
from implicit_em.audit.claims.two_timescale import (
    DECIDING,
    EXPERIMENT,
    Config,
    _streams,
    criteria,
    settings,
    state,
    verdict,
)
from implicit_em.audit.core import Context, Result
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import two_timescale_companion as ttc
from implicit_em.audit.testbeds.one_head import single_head_logits
from implicit_em.audit.testbeds.two_timescale import (
    GROUPS,
    Protocol,
    StackedOptimiser,
    Trajectories,
    displacement_times,
    drift_step,
    ema,
    ema_beta,
    lr_multipliers,
    ordering,
    planted_control,
    planted_noisy_path,
    run_names,
    schedule,
    specificity,
    speed_ups,
    stack_inits,
    stacked,
    sticky_state,
    transformer_state,
)
from implicit_em.windtunnel.models import CausalTransformer
from implicit_em.windtunnel.tasks import BijectionTask

F64 = torch.float64


def _tiny() -> Config:
    """A size that runs in seconds: 2 seeds, tens of steps (nothing tracks)."""
    q = Config.quick()
    return dataclasses.replace(
        q,
        n_seeds=2,
        wind_tunnel=dataclasses.replace(q.wind_tunnel, sgd_steps=20, adam_steps=20, probe=16),
        testbed=dataclasses.replace(q.testbed, adam_steps=10, sgd_steps=10),
        one_head=dataclasses.replace(q.one_head, adam_steps=10, sgd_steps=20),
        chain=dataclasses.replace(q.chain, probe=8),
        companion=ttc.Companion(length=30, steps=20, multipliers=(10.0,)),
    )


def _named(metrics: dict[str, dict[str, object]]) -> Metrics:
    """Per-setting metrics as the record holds them: ``<setting>_adam_<key>``, with the planted controls passing."""
    return Metrics({"planted_errors": 0, **{f"{n}_adam_{k}": v for n, mm in metrics.items() for k, v in mm.items()}})


def _verdict(metrics: dict[str, dict[str, object]], cfg: Config) -> str:
    m = _named(metrics)
    return verdict(cfg, m, criteria(cfg, m))


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return EXPERIMENT.run(Config.quick(), Context(run_dir)), run_dir


def test_is_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


@pytest.mark.parametrize("scale", [30.0, 100.0, 250.0])
def test_tau_recovers_a_planted_noisy_approach(scale: float) -> None:
    cfg = Config.quick()
    steps = torch.arange(0, 1501, cfg.snap_every)
    beta = ema_beta(cfg.ema_steps)
    for path in planted_noisy_path(1500, scale, 0.05, torch.Generator().manual_seed(int(scale))):
        tau = int(displacement_times(ema(path, beta)[steps][:, None], steps)["tau"][0])
        # time to 90% of an exponential approach is scale ln 10; the average lags by about its time constant
        assert abs(tau - scale * math.log(10)) <= 0.15 * scale * math.log(10) + cfg.ema_steps + cfg.snap_every


def test_tau_is_scale_free_and_a_noise_path_is_censored() -> None:
    steps = torch.arange(0, 1001, 10)
    path, _ = planted_noisy_path(1000, 80.0, 0.05, torch.Generator().manual_seed(3))
    z = ema(path, ema_beta(10.0))[steps][:, None]
    assert torch.equal(displacement_times(7.0 * z, steps)["tau"], displacement_times(z, steps)["tau"])
    drift = drift_step(Protocol("c", "sgd", 1.0, 1000), 1000)
    for seed in range(5):  # pure noise: no approach, its "90% point" is the last average, after the drift step
        a, b = planted_noisy_path(1000, math.inf, 0.05, torch.Generator().manual_seed(seed))
        for p in (a, b):
            assert int(displacement_times(ema(p, ema_beta(10.0))[steps][:, None], steps)["tau"][0]) >= drift


def test_drift_step_of_the_schedules() -> None:
    assert drift_step(Protocol("c", "sgd", 1.0, 1000), 1000) == 900  # a constant rate: 0.9 x the run
    cosine = Protocol("a", "adam", 1.0, 1000, 0, "cosine")
    assert 590 <= drift_step(cosine, 1000) <= 610  # u + sin(pi u)/pi = 0.9 at u ~ 0.6
    assert schedule(cosine, 0, 1000) == 1.0 and schedule(cosine, 1000, 1000) == 0.0
    assert schedule(cosine, 600, 500) == 0.0  # past its budget a run no longer moves
    warm = Protocol("w", "adam", 1.0, 100, 10, "constant")
    assert schedule(warm, 4, 100) == pytest.approx(0.5) and schedule(warm, 50, 100) == 1.0


def test_ordering_needs_both_data_orders_and_reads_censoring() -> None:
    cfg = Config.quick()
    cases = {  # (τ_A, twin τ_A, τ_V, twin τ_V) -> outcome; drift step 600
        (100, 120, 400, 380): "supports",
        (100, 250, 400, 380): "undecided",  # the twin's τ_A is above half of the smaller τ_V: noise decides
        (300, 320, 200, 220): "fails",
        (100, 120, 600, 650): "supports",  # V censored in both orders, A settled early
        (400, 420, 600, 700): "undecided",  # V censored, A not early enough to conclude
        (600, 610, 200, 210): "fails",  # A censored, V settled
        (600, 700, 620, 610): "undecided",  # nothing settled
    }
    t = {"tau_A": [k[0] for k in cases], "twin_tau_A": [k[1] for k in cases], "tau_V": [k[2] for k in cases],
         "twin_tau_V": [k[3] for k in cases], "drift_step": 600}  # fmt: skip
    assert ordering(t, cfg.rule.ratio) == list(cases.values())


def test_speed_ups_known_answer_and_a_planted_w_v_only_speed_up() -> None:
    cfg = Config.quick()
    runs = ["baseline", "twin", "W_V x10", "W_O x10", "W_Q/W_K x10"]
    steps = torch.arange(0, 101, 10).double()
    ramp = [1.0 + torch.clamp(1.0 - steps / s, min=0.0) for s in (80, 80, 40, 80, 80)]  # W_V twice as fast
    n = 4
    ce = torch.stack([r + 0.001 * i for i in range(n) for r in ramp], dim=1)  # (11, n x runs)
    su = speed_ups(ce, steps.long(), n, runs, cfg.rule.reach_tol)
    torch.testing.assert_close(su["speed_up"][0], torch.tensor([1.0, 1.0, 2.0, 1.0, 1.0], dtype=F64))
    noisy = su["speed_up"] + 0.05 * torch.randn(n, len(runs), generator=torch.Generator().manual_seed(0), dtype=F64)
    assert specificity(noisy, runs, 10.0, cfg.rule.n_se)["specific"]  # the planted W_V-only speed-up is found
    same = [ramp[0], ramp[1], ramp[2], ramp[2], ramp[2]]  # the same speed-up on every group
    ce_same = torch.stack([r for _ in range(n) for r in same], 1)
    su_same = speed_ups(ce_same, steps.long(), n, runs, cfg.rule.reach_tol)["speed_up"]
    assert not specificity(su_same + 0.05 * torch.randn(n, 5, dtype=F64), runs, 10.0, cfg.rule.n_se)["specific"]
    never = speed_ups(torch.stack([ramp[0], ramp[1], 2.0 - steps / 200, ramp[3], ramp[4]], 1), steps.long(), 1,
                      runs, cfg.rule.reach_tol)  # fmt: skip
    assert never["censored"][0].tolist() == [False, False, True, False, False]
    assert float(never["speed_up"][0, 2]) == pytest.approx(0.8)  # counted at its upper bound, 80 / 100


def test_planted_controls_pass() -> None:
    c = Config.quick()
    r = c.rule
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        out = planted_control(g, c.ema_steps, c.snap_every, r.displacement, r.planted_tol, r.ratio, r.n_se)
        assert out["planted_errors"] == 0


def _metrics(track: float, plateau: float, supports: int) -> dict[str, object]:
    outcomes = ["supports"] * supports + ["fails"] * (5 - supports)
    return {"outcomes": outcomes, "track_ratio": [track] * 5, "plateau_gap_ratio": [plateau] * 5,
            "state": "holds" if supports >= 4 else "fails", "specific": {"x10": True},
            "gain_mean_se": {"x10": [1.0, 0.1]}, "vs_W_O_mean_se": {"x10": [0.8, 0.1]},
            "vs_W_QK_mean_se": {"x10": [0.9, 0.1]}}  # fmt: skip


def test_a_non_tracking_deciding_arm_makes_the_verdict_undecided() -> None:
    cfg = Config.full()
    good = {name: _metrics(0.05, 0.0, 5) for name in DECIDING}
    assert _verdict(good, cfg) == "SUPPORTED"
    for bad in (_metrics(0.5, 0.0, 5), _metrics(0.05, 0.2, 5)):  # does not track / has not plateaued
        assert _verdict({"wind_tunnel": bad, "sticky": good["sticky"]}, cfg) == "UNDECIDED"


def _planted_metrics(cfg: Config, a_first: bool, w_v_only: bool, track: float = 0.05) -> dict[str, object]:
    """A setting's metrics computed by the experiment's own rules from planted τ and speed-ups (5 seeds): A settles
    at 100 and V at 400 steps (or the reverse), in both data orders; W_V x10 twice as fast as the baseline and the
    other groups at 1x (or every group twice as fast), seed noise 0.1."""
    fast, slow = [100, 110, 90, 105, 95], [400, 410, 390, 420, 380]
    ta, tv = (fast, slow) if a_first else (slow, fast)
    t = {"tau_A": ta, "twin_tau_A": [x + 5 for x in ta], "tau_V": tv, "twin_tau_V": [x + 5 for x in tv],
         "drift_step": 600}  # fmt: skip
    outcomes = ordering(t, cfg.rule.ratio)
    runs = ["baseline", *[f"{g} x10" for g in GROUPS]]
    other = 1.0 if w_v_only else 2.0
    su = torch.tensor([1.0, 2.0, other, other], dtype=F64)
    su = su + 0.1 * torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    su[:, 0] = 1.0
    spec = specificity(su, runs, 10.0, cfg.rule.n_se)
    return {"outcomes": outcomes, "state": state(outcomes, cfg.rule), "specific": {"x10": spec["specific"]},
            "track_ratio": [track] * 5, "plateau_gap_ratio": [0.005] * 5, "gain_mean_se": {"x10": spec["gain"]},
            "vs_W_O_mean_se": {"x10": spec["vs_W_O"]}, "vs_W_QK_mean_se": {"x10": spec["vs_W_Q/W_K"]}}  # fmt: skip


def test_planted_effects_move_the_verdict_and_a_non_tracking_sticky_baseline_undecides_it() -> None:
    cfg = Config.full()
    yes = _planted_metrics(cfg, a_first=True, w_v_only=True)
    assert yes["outcomes"] == ["supports"] * 5 and yes["specific"] == {"x10": True}
    assert _verdict(dict.fromkeys(DECIDING, yes), cfg) == "SUPPORTED"
    shared = _planted_metrics(cfg, a_first=True, w_v_only=False)  # the same speed-up on every group
    assert shared["specific"] == {"x10": False}
    assert _verdict(dict.fromkeys(DECIDING, shared), cfg) == "PARTIAL"
    reverse = _planted_metrics(cfg, a_first=False, w_v_only=False)  # V settles first: the ordering fails
    assert reverse["state"] == "fails"
    assert _verdict(dict.fromkeys(DECIDING, reverse), cfg) == "REFUTED"
    # the sticky baseline above the tracking bar (its earlier full-size 0.117 of no-context): UNDECIDED, whatever
    # the planted effect
    for planted in (yes, shared, reverse):
        lost = {**planted, "track_ratio": [0.05, 0.05, 0.117, 0.05, 0.05]}
        assert _verdict({"wind_tunnel": planted, "sticky": lost}, cfg) == "UNDECIDED"
        stalled = {**planted, "plateau_gap_ratio": [0.005, 0.005, 0.005, 0.06, 0.005]}  # half-budget twin 0.06 above
        assert _verdict({"wind_tunnel": planted, "sticky": stalled}, cfg) == "UNDECIDED"


def test_a_run_too_short_to_track_is_undecided(tmp_path: Path) -> None:
    res = EXPERIMENT.run(_tiny(), Context(tmp_path))
    assert res.verdict == "UNDECIDED"
    failed = {c.metric for c in res.criteria if c.role == "gate" and not c.passed}
    assert any(m.startswith("wind_tunnel: baseline KL") for m in failed)
    assert not res.metrics["wind_tunnel_adam_tracks"]
    assert isinstance(res.metrics, Metrics) and not res.metrics.undeclared()  # every metric declared with its unit


def test_stacked_optimiser_equals_torch_per_run() -> None:
    x, y = torch.randn(12, 5, dtype=F64), torch.randint(0, 3, (12,))
    w0 = torch.randn(2, 3, 5, dtype=F64, generator=torch.Generator().manual_seed(0))
    mult = torch.ones(2, 3, 5, dtype=F64)
    mult[1, 1:] = 10.0  # run 1: rows 1-2 at 10x
    factors = [0.5, 1.0, 0.25]
    for kind in ("sgd", "adam"):
        w = w0.clone().requires_grad_(True)
        opt = StackedOptimiser({"w": w}, {"w": 0.05 * mult}, kind)
        for f in factors:
            loss = torch.stack(
                [torch.nn.functional.cross_entropy(x @ w[r].T, y, reduction="sum") for r in range(2)]
            ).sum()
            (g,) = torch.autograd.grad(loss, [w])
            opt.step({"w": g}, torch.tensor([f, f]))
        for r in range(2):
            rows = [w0[r, i].clone().requires_grad_(True) for i in range(3)]
            lrs = [0.05 * float(mult[r, i, 0]) for i in range(3)]
            cls = torch.optim.SGD if kind == "sgd" else torch.optim.Adam
            topt = cls([{"params": [p], "lr": lr} for p, lr in zip(rows, lrs, strict=True)])
            for f in factors:
                for group, lr in zip(topt.param_groups, lrs, strict=True):
                    group["lr"] = lr * f
                topt.zero_grad()
                torch.nn.functional.cross_entropy(x @ torch.stack(rows).T, y, reduction="sum").backward()
                topt.step()
            torch.testing.assert_close(w.detach()[r], torch.stack(rows).detach(), rtol=1e-12, atol=1e-12)


def test_stacked_forward_equals_each_model_and_the_state_read_outs() -> None:
    task = BijectionTask(6)
    models: list[torch.nn.Module] = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(CausalTransformer(task.vocab_size, task.n_classes, task.seq_len(), 2, 2, 16, 32))
    tokens = task.sample(4, torch.Generator().manual_seed(0)).tokens
    params = stack_inits(models)
    with torch.no_grad():
        out = stacked(models[0], lambda m, t: m(t), (None,))(params, tokens)
        read = stacked(models[0], transformer_state, (None,))(params, tokens)
        for r, m in enumerate(models):
            torch.testing.assert_close(out[r], m(tokens))
            torch.testing.assert_close(read["logits"][r], m(tokens))
    cfg = Config.quick()
    sticky = settings(cfg)["sticky"]
    model = sticky.model(0)
    x = sticky.probe[0][:3]
    with torch.no_grad():
        s = sticky_state(model, x)
        torch.testing.assert_close(s["logits"], model(x))
    assert s["A"].shape[:3] == (cfg.testbed.layers, 3, cfg.testbed.heads) and torch.all(s["A"].triu(1) == 0)


def test_lr_multipliers_address_each_group() -> None:
    cfg = Config.quick()
    built = settings(cfg)
    for setting in (built["wind_tunnel"], built["sticky"]):
        runs = run_names(setting.multipliers)
        params = stack_inits([setting.model(0) for _ in runs])
        mult = lr_multipliers(params, setting, runs)
        for r, run in enumerate(runs):
            scaled = {k: float(v[r].max()) for k, v in mult.items() if float(v[r].max()) > 1.0}
            if run in ("baseline", "twin", "half"):
                assert not scaled
                continue
            group = run.rsplit(" x", 1)[0]
            assert scaled and all(v == 10.0 for v in scaled.values())
            assert all(any(g == group for g, _ in setting.groups(k)) for k in scaled)
            if setting.name == "wind_tunnel" and group != "W_O":  # a row block of the fused qkv weight
                w = mult["blocks.0.attn.qkv.weight"][r, :, 0]
                d = cfg.wind_tunnel.d_model
                rows = slice(2 * d, 3 * d) if group == "W_V" else slice(0, 2 * d)
                assert torch.all(w[rows] == 10.0) and int((w == 10.0).sum()) == rows.stop - rows.start
    assert GROUPS == ("W_V", "W_O", "W_Q/W_K")


def test_quick_run_is_consistent(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    m, cfg = res.metrics, Config.quick()
    assert m["planted_errors"] == 0
    for name in (*DECIDING, "sticky_one_head"):
        for proto in ("sgd", "adam"):
            p = f"{name}_{proto}_"
            assert len(m[p + "tau_A"]) == cfg.n_seeds
            assert m[p + "speed_up"]["baseline"] == [1.0] * cfg.n_seeds
            t = {k: m[p + k] for k in ("tau_A", "twin_tau_A", "tau_V", "twin_tau_V", "drift_step")}
            assert m[p + "outcomes"] == ordering(t, cfg.rule.ratio)
            assert all(g > -0.05 for g in m[p + "train_minus_bayes_nats"])  # online: no run beats Bayes
    # the one-head head cannot represent the filter: it ends no better than a tenth of the way to Bayes
    assert all(r > cfg.rule.track for r in m["sticky_one_head_adam_track_ratio"])
    assert isinstance(m, Metrics) and res.verdict == verdict(cfg, m, res.criteria)
    assert isinstance(m, Metrics) and not m.undeclared()
    # a smoke size: the sticky testbed trains 40 of its 4,000 steps, cannot track, and so cannot decide
    assert not m["sticky_adam_tracks"] and res.verdict == "UNDECIDED"
    assert (run_dir / res.figures[0]).is_file()
    # the companion's literal setting, reported: its baseline's speed-up is 1 and every fraction has its orderings
    assert m["companion_speed_up"]["baseline"] == [1.0] * cfg.n_seeds
    assert set(m["companion_outcomes"]) == {"50%", "75%", "90%"}
    assert all(len(o) == cfg.n_seeds for o in m["companion_outcomes"].values())
    assert "companion's literal setting" in res.summary


def test_every_stream_is_derived_from_the_seed_and_two_seeds_share_none() -> None:
    a, b = (_streams(dataclasses.replace(Config.full(), seed=s)) for s in (0, 1))
    ints = [lambda st: set(st["models"]), lambda st: {x for pair in st["data"] for x in pair}]
    for pick in ints:
        assert not pick(a) & pick(b)  # --seed 0 and --seed 1 never share a model or data stream
    assert len(set(a["models"]) | {x for pair in a["data"] for x in pair}) == 3 * Config.full().n_seeds
    assert a["means"] != b["means"]
    for key in ("probe_wind_tunnel", "probe_sticky", "probe_sticky_one_head", "planted"):
        assert a[key].initial_seed() != b[key].initial_seed()
    again = _streams(Config.full())
    assert again["models"] == a["models"] and again["data"] == a["data"]  # deterministic


# ---------------------------------------------------------------------------------------------- the companion's setting


def test_companion_head_is_the_one_head_head_and_its_groups_are_addressed() -> None:
    params = {k: torch.randn(3, *shape, generator=torch.Generator().manual_seed(i), dtype=F64) for i, (k, shape) in
              enumerate({"W_Q": (20, 10), "W_K": (20, 10), "W_V": (20, 15), "W_O": (15, 8)}.items())}  # fmt: skip
    x = torch.randn(3, 40, 20, generator=torch.Generator().manual_seed(9), dtype=F64)
    torch.testing.assert_close(ttc.head_logits(params, x), single_head_logits(params, x), rtol=1e-12, atol=1e-12)
    runs = ttc.run_names((2.0, 10.0))
    assert runs[:2] == ["baseline", "twin"] and len(runs) == 2 + 3 * 2
    mult = ttc.group_multipliers(runs)
    for r, run in enumerate(runs):
        got = {k: float(v[r, 0, 0]) for k, v in mult.items()}
        if run in ("baseline", "twin"):
            assert set(got.values()) == {1.0}
            continue
        group, m = run.rsplit(" x", 1)
        assert got == {k: float(m) if ttc.GROUP_OF[k] == group else 1.0 for k in got}


def test_companion_streams_are_derived_and_the_pilot_shares_none_with_the_deciding_seeds() -> None:
    deciding, pilot = ttc.streams(0, [0, 1, 2, 3, 4]), ttc.streams(0, [100, 101, 102])
    pool = [lambda s: set(s["init"]), lambda s: {x for pair in s["data"] for x in pair}]
    for pick in pool:
        assert not pick(deciding) & pick(pilot)
        assert not pick(deciding) & pick(ttc.streams(1, [0, 1, 2, 3, 4]))
    assert len({x for pair in deciding["data"] for x in pair}) == 10  # a second sequence per seed: the twin's
    assert deciding["means"] == pilot["means"] and deciding["means"] != ttc.streams(1, [0])["means"]


def _planted_out(w_v_speed: float, other_speed: float, a_first: bool, n: int = 5) -> dict[str, Any]:
    """:func:`ttc.train`'s output with planted trajectories (x10 only, 1,000 steps): probe losses falling linearly
    to a floor, the baseline in 800 steps and each arm ``speed`` times sooner (seed noise 0.1 on the speed-up);
    A and V exponential approaches (scales 20 and 150 steps, or the reverse); training losses the probe's."""
    c = ttc.Companion(length=50, multipliers=(10.0,))
    runs = ttc.run_names(c.multipliers)
    g = torch.Generator().manual_seed(0)
    loss_steps, steps = torch.arange(0, 1001, 5), torch.arange(0, 1001, 10)
    speeds = {"baseline": 1.0, "twin": 1.0, "W_V x10": w_v_speed, "W_O x10": other_speed,
              "W_Q/W_K x10": other_speed}  # fmt: skip
    cols = []
    for _ in range(n):
        for r in runs:
            s = speeds[r] if r in ("baseline", "twin") else speeds[r] + 0.1 * float(torch.randn(1, generator=g))
            cols.append(1.0 + torch.clamp(1.0 - loss_steps.double() * s / 800, min=0.0))
    ce = torch.stack(cols, 1)  # (201, n x runs)
    scale = {"A": 20.0, "V": 150.0} if a_first else {"A": 150.0, "V": 20.0}
    snaps = {}
    for q in ("A", "V", "W_V", "W_QK"):
        z0 = torch.randn(2 * n, 4, 3, generator=g, dtype=F64)
        snaps[q] = torch.exp(-steps.double() / scale.get(q, 50.0))[:, None, None, None] * z0  # (101, 2n, 4, 3)
    traj = Trajectories(steps, snaps, loss_steps, ce, 0.01 * ce, ce[:-1].repeat_interleave(5, 0))  # (1000, R)
    return {"traj": traj, "final_train": ce[-1].float(), "bayes_train": torch.zeros(n * len(runs)),
            "no_context_kl": 0.001, "minimum_loss": 1.0, "note": "planted", "wall_s": 0.0, "companion": c}  # fmt: skip


@pytest.mark.parametrize(("w_v", "other", "specific"), [(2.0, 1.0, True), (2.0, 2.0, False)])
def test_companion_readings_find_a_planted_w_v_only_speed_up_and_not_a_shared_one(
    w_v: float, other: float, specific: bool
) -> None:
    rule = Config.full().rule
    out = _planted_out(w_v, other, a_first=True)
    c = out["companion"]
    assert isinstance(c, ttc.Companion)
    r = ttc.readings(out, c, rule.ratio, rule.reach_tol, rule.n_se)
    assert r["specificity"]["x10"]["specific"] is specific
    assert r["speed_up"]["baseline"] == [1.0] * 5
    assert r["em_like"][0] == pytest.approx(2.0, abs=0.15)  # the planted 2x, within the seed noise
    for f, t in r["tau"].items():  # A settles at 20 ln(1/(1-f)), V at 150 ln(1/(1-f)): A first at every fraction
        assert t["outcomes"] == ["supports"] * 5, f
    reverse = ttc.readings(_planted_out(w_v, other, a_first=False), c, rule.ratio, rule.reach_tol, rule.n_se)
    assert all(t["outcomes"] == ["fails"] * 5 for t in reverse["tau"].values())
    m = Metrics()
    ttc.put(m, r, out, c)
    assert not m.undeclared() and m["companion_specific"] == {"x10": specific}
    assert ("not W_V-specific" in ttc.summary(m, c)) is not specific


def test_the_companion_reading_known_answer() -> None:
    """Threshold = the seeds' mean final baseline loss; steps = first step below it (all steps if never); speed-up
    = steps / the mean of the steps, as ``em_vs_sgd_multiseed.py`` computes it."""
    runs = ["baseline", "W_V x10"]
    t = torch.arange(101, dtype=F64)
    curves = {  # (seed, run) -> loss; baseline finals 1.0 and 1.2: threshold 1.1
        (0, "baseline"): 2.0 - t / 100, (0, "W_V x10"): 2.0 - t / 40,
        (1, "baseline"): 2.2 - t / 100, (1, "W_V x10"): 2.2 - t / 50,
    }  # fmt: skip
    loss = torch.stack([curves[(s, r)] for s in range(2) for r in runs], 1)  # (101, 4): 100 steps, then the final
    out = ttc.companion_reading(loss, 2, runs)
    assert out["threshold"] == pytest.approx(1.1)
    assert out["steps"]["W_V x10"] == [37.0, 56.0]  # first t with 2 - t/40 < 1.1 and 2.2 - t/50 < 1.1
    assert out["steps"]["baseline"] == [91.0, 100.0]  # seed 1 never gets below 1.1 before its last step
    assert out["speed_up"]["W_V x10"] == pytest.approx(100 / 46.5)


def test_companion_training_runs_end_to_end_on_a_tiny_chain() -> None:
    c = ttc.Companion(length=24, steps=30, multipliers=(10.0,), probe_rows=6)
    out = ttc.train(c, 0, [0, 1], 10, 5, 10.0)
    runs = ttc.run_names(c.multipliers)
    traj = out["traj"]
    assert traj.probe_ce.shape == (7, 2 * len(runs)) and traj.snaps["A"].shape == (4, 4, 6, 24)
    assert torch.all(traj.snaps["A"][:, :, 0, 1:] == 0)  # the first query row sees only itself
    final = out["final_train"].reshape(2, len(runs))
    assert not torch.equal(final[:, 0], final[:, 1])  # the twin trains on its own sequence
    start = (traj.train_gap[0] + out["bayes_train"].double()).reshape(2, len(runs))
    torch.testing.assert_close(start[:, 2:], start[:, :1].expand(-1, 3))  # one initialisation, one sequence
    r = ttc.readings(out, c, 0.5, 0.01, 2.0)
    assert r["speed_up"]["baseline"] == [1.0, 1.0] and 0.0 <= out["no_context_kl"] < 0.01


def test_an_interrupted_run_resumes_from_its_cached_trainings_and_equals_an_uninterrupted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every setting's stack and every companion inner seed's stack is cached in the run folder: a run interrupted
    in its second companion seed trains, when rerun, that seed alone, and its record equals an uninterrupted run's
    bitwise."""
    import implicit_em.audit.testbeds.two_timescale as tt

    cfg = _tiny()
    whole = EXPERIMENT.run(cfg, Context(tmp_path / "whole"))
    calls: list[str] = []
    real_setting, real_seed = tt.train_setting, ttc.train_seed

    def counted_setting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append("setting")
        return real_setting(*args, **kwargs)

    def interrupted_seed(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append("companion")
        if calls.count("companion") == 2:
            raise KeyboardInterrupt
        return real_seed(*args, **kwargs)

    monkeypatch.setattr(tt, "train_setting", counted_setting)
    monkeypatch.setattr(ttc, "train_seed", interrupted_seed)
    with pytest.raises(KeyboardInterrupt):
        EXPERIMENT.run(cfg, Context(tmp_path / "resumed"))
    assert calls == ["setting"] * 6 + ["companion"] * 2
    calls.clear()
    resumed = EXPERIMENT.run(cfg, Context(tmp_path / "resumed"))
    assert calls == ["companion"]  # the six settings and the first inner seed come from the cache
    assert len(list((tmp_path / "resumed" / "testbeds").glob("two_timescale_*.pt"))) == 6 + cfg.n_seeds
    a, b = whole.to_dict(), resumed.to_dict()
    for k in ("verdict", "summary", "metrics", "criteria"):
        if k == "metrics":  # wall times are the trainings' own, measured again in the uninterrupted run
            a[k] = {m: v for m, v in a[k].items() if not m.endswith("wall_s")}
            b[k] = {m: v for m, v in b[k].items() if not m.endswith("wall_s")}
        assert a[k] == b[k], k
