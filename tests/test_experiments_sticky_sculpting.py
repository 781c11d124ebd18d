"""sticky_sculpting: the shared design, the exact controls, the one head, and the verdict rule (planted and run)."""

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from implicit_em.audit import EXPERIMENTS
from implicit_em.audit.claims import sticky_manifold as sm
from implicit_em.audit.claims import sticky_sculpting as sculpting
from implicit_em.audit.claims.sticky_sculpting import (
    EXPERIMENT,
    PAPER_NOISE,
    PAPER_STAY,
    Config,
    Sticky,
    criteria,
    measure,
    paired_metrics,
    sticky_window_posterior,
    summary,
    verdict,
)
from implicit_em.audit.core import Context, Result, roles
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import sticky_fits
from implicit_em.audit.testbeds.one_head import (
    init_head,
    no_context_posterior,
    single_head_logits,
    stack_inits,
    train_runs,
    window_posterior,
)
from implicit_em.audit.testbeds.sticky_manifold import ShuffledLabels, shared_design, shuffled_labels
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.sticky import FitResult, StickyTestbed
from implicit_em.windtunnel.tasks import StickyMarkovTask


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return EXPERIMENT.run(Config.quick(), Context(run_dir)), run_dir


def _decide(values: dict[str, Any], cfg: Config) -> tuple[str, str]:
    """The verdict and the summary, as ``run`` composes them."""
    m = Metrics(values)
    v = verdict(cfg, m, criteria(cfg, m))
    return v, summary(cfg, m, v)


def _task(stay: float, noise: float, length: int = 300, seed: int = 0) -> StickyMarkovTask:
    return StickyMarkovTask(length=length, stay=stay, noise=noise, means_seed=seed)


def test_is_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


# --- the deciding arm: sticky_manifold's design, exactly ------------------------------------------------------------


@pytest.mark.parametrize("full", [False, True])
def test_the_deciding_design_is_sticky_manifolds(full: bool) -> None:
    """The same testbed, init seeds, controls and held-out windows as sticky_manifold, so ``sticky_fits.trained``
    returns the fits that claim made (its cache key is the testbed's settings, the init seed and the held-out
    bytes) and a run with both claims trains nothing twice."""
    ours, theirs = (Config.full(), sm.Config.full()) if full else (Config.quick(), sm.Config.quick())
    for seed in (0, 3):
        ours, theirs = dataclasses.replace(ours, seed=seed), dataclasses.replace(theirs, seed=seed)
        tb = ours.testbed()
        assert tb == theirs.testbed() and dataclasses.asdict(tb) == dataclasses.asdict(theirs.testbed())
        assert (ours.sticky.n_inits, ours.sticky.n_shuffled) == (theirs.sticky.n_inits, theirs.sticky.n_shuffled)
        held, inits, controls = shared_design(tb, seed, ours.sticky.n_inits, ours.sticky.n_shuffled)
        assert inits == [sm._init_seed(theirs, i) for i in range(theirs.sticky.n_inits)]
        assert controls == [shuffled_labels(tb, sm._shuffle_seed(theirs, i)) for i in range(theirs.sticky.n_shuffled)]
        their_held = sm._held(theirs, theirs.testbed())
        assert torch.equal(held.x, their_held.x) and torch.equal(held.y, their_held.y)


def test_the_testbed_window_filter_spans_no_context_to_bayes() -> None:
    """Known answers on the testbed's windows: k = 1 is the batch's no-context predictor, k = T the exact filter;
    more context, closer to Bayes."""
    tb = dataclasses.replace(StickyTestbed(), length=12)
    batch = tb.sample(6, torch.Generator().manual_seed(0))
    torch.testing.assert_close(sticky_window_posterior(tb, batch.x, 1), batch.no_context)
    torch.testing.assert_close(sticky_window_posterior(tb, batch.x, 12), batch.posterior)
    torch.testing.assert_close(sticky_window_posterior(tb, batch.x, 40), batch.posterior)
    kls = [float(kl_bits(batch.posterior, sticky_window_posterior(tb, batch.x, k)).mean()) for k in (1, 2, 4, 8)]
    assert kls == sorted(kls, reverse=True) and kls[0] > 10 * kls[-1]
    with pytest.raises(ValueError, match="at least one input"):
        sticky_window_posterior(tb, batch.x, 0)


# --- the reported one head: its chain, its exact controls, its head ------------------------------------------------


def test_windowed_filter_spans_no_context_to_bayes() -> None:
    """Known answers: a window of 1 is the closed-form no-context predictor, a window of T the task's own filter."""
    task = _task(0.8, 3.0, length=60)
    seq = task.sample(torch.Generator().manual_seed(3))
    torch.testing.assert_close(window_posterior(task, seq, 1), no_context_posterior(task, seq))
    torch.testing.assert_close(window_posterior(task, seq, 60), seq.posterior)
    kls = [float(kl_bits(seq.posterior, window_posterior(task, seq, k)).mean()) for k in (1, 2, 4, 8)]
    assert kls == sorted(kls, reverse=True) and kls[0] > 10 * kls[-1]  # more context, closer to Bayes


def test_setting_needs_context_and_the_paper_setting_does_not() -> None:
    """The one head's chain needs context, the paper's does not (exact posterior, no training)."""
    cfg = Config.quick()
    for stay, noise, lo, hi in ((PAPER_STAY, PAPER_NOISE, 0.0, 0.005), (cfg.chain.stay, cfg.chain.noise, 0.3, 0.6)):
        task = _task(stay, noise, length=1000)
        seq = task.sample(torch.Generator().manual_seed(1))
        kl_nc = float(kl_bits(seq.posterior, no_context_posterior(task, seq)).mean())
        assert lo < kl_nc < hi, (stay, noise, kl_nc)


def test_no_context_predictor_is_the_best_from_x_t_alone() -> None:
    """p_nc = E[p_Bayes | x_t]: any other function of x_t alone (here tempered or with a wrong prior) is farther."""
    task = _task(0.8, 3.0, length=2000)
    seq = task.sample(torch.Generator().manual_seed(2))
    p_nc = no_context_posterior(task, seq)
    best = float(kl_bits(seq.posterior, p_nc).mean())
    tempered = torch.softmax(1.3 * p_nc.log(), dim=-1)
    tilted = p_nc * torch.linspace(0.8, 1.2, 8, dtype=p_nc.dtype)
    for other in (tempered, tilted / tilted.sum(-1, keepdim=True)):
        assert float(kl_bits(seq.posterior, other).mean()) > best


def test_batched_training_equals_runs_alone() -> None:
    """Training R runs at once gives each run exactly the SGD trajectory it has alone."""
    x, y = torch.randn(3, 12, 20), torch.randint(0, 8, (3, 12))
    batched = stack_inits([7, 8, 9], 1, 0.5)
    train_runs(batched, x, y, 0.01, 5, 1)
    for r, seed in enumerate((7, 8, 9)):
        alone = {k: v[None].detach().clone().requires_grad_(True) for k, v in init_head(seed, 0.5).items()}
        train_runs(alone, x[r : r + 1], y[r : r + 1], 0.01, 5, 1)
        for name in alone:
            torch.testing.assert_close(batched[name][r], alone[name][0], rtol=1e-5, atol=1e-6)


def test_head_is_causal_and_blind_to_the_order_of_the_past() -> None:
    """Why the one head cannot represent the filter: its output at t ignores the order of x_1..x_{t-1}."""
    params = {k: v.detach() for k, v in init_head(0, 0.5).items()}
    x = torch.randn(8, 20)
    future = x.clone()
    future[5:] += 1.0  # changing the future must not change earlier outputs
    torch.testing.assert_close(single_head_logits(params, x)[:5], single_head_logits(params, future)[:5])
    shuffled = x.clone()
    shuffled[:6] = x[torch.tensor([3, 0, 5, 1, 4, 2])]  # permute x_1..x_6, keep x_7 at its place
    torch.testing.assert_close(single_head_logits(params, shuffled)[6], single_head_logits(params, x)[6])
    assert not torch.allclose(single_head_logits(params, shuffled)[5], single_head_logits(params, x)[5])


def test_paired_metrics_known_answer() -> None:
    init = torch.tensor([1.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    trained = torch.tensor([0.5, 0.7, 1.5, 1.3], dtype=torch.float64)  # d = 0.5, 0.3, 0.5, 0.7
    m = paired_metrics(init, trained)
    assert m["d_mean"] == pytest.approx(0.5) and m["d_sd"] == pytest.approx(math.sqrt(0.08 / 3))
    assert m["d_se"] == pytest.approx(m["d_sd"] / 2) and m["gap_closed"] == pytest.approx(0.5 / 1.5)
    assert m["kl_trained_max"] == 1.5 and m["n_runs"] == 4


# --- the rule --------------------------------------------------------------------------------------------------------


def _planted(**over: Any) -> dict[str, Any]:
    """A tracking testbed with every gate passing (the quick run's scale), then ``over``."""
    m = {
        "kl_no_context": 0.74, "tracking_bar": 0.074, "kl_positive_control": 0.005, "plateau_in_bars_max": 0.7,
        "control_track_ratio_min": 2.1, "kl_init_mean": 1.6, "kl_trained_mean": 0.045, "kl_trained_max": 0.05,
        "d_mean": 1.55, "d_sd": 0.01, "d_in_sd": 155.0, "n_runs": 3.0, "track_ratio_max": 0.05 / 0.74,
        "onehead_kl_trained_mean": 1.0, "onehead_best_fit_kl": 0.16, "onehead_represents": False,
    }  # fmt: skip
    m.update(over)
    return m


def test_the_rule_on_planted_outcomes() -> None:
    """PARTIAL only when the gain beats 2σ and every init tracks; REFUTED when either fails; each gate, failed,
    gives UNDECIDED whatever the tests say."""
    cfg = Config.quick()
    met = _decide(_planted(), cfg)
    assert met[0] == "PARTIAL" and met[1].startswith("Posterior part met") and "cannot represent" in met[1]
    far = _decide(_planted(track_ratio_max=0.3), cfg)  # a gain of 150σ that stops short of the posterior
    assert far[0] == "REFUTED" and "does not reach the posterior" in far[1] and "does not improve" not in far[1]
    noisy = _decide(_planted(d_sd=0.9), cfg)  # at the posterior, but not reliably beyond init
    assert noisy[0] == "REFUTED" and "does not improve" in noisy[1]
    assert "does not improve" in _decide(_planted(d_mean=0.0, track_ratio_max=2.0), cfg)[1]
    gates = {
        "the setting needs context": {"kl_no_context": 0.2},
        "positive control": {"kl_positive_control": 0.08},
        "plateau": {"plateau_in_bars_max": 1.5},
        "fails the tracking test": {"control_track_ratio_min": 0.05},
    }
    for name, over in gates.items():
        for tests in ({}, {"track_ratio_max": 0.3}):  # whether the tests pass or not
            v, text = _decide(_planted(**over, **tests), cfg)
            assert v == "UNDECIDED" and text.startswith("Undecided") and name in text, (name, tests)
    assert roles(criteria(cfg, Metrics(_planted()))) == {"test": 2, "gate": 4, "identity": 0}


def _small() -> Config:
    """A small deciding arm: 2 inits and 1 control on 16 held-out windows."""
    return dataclasses.replace(Config.quick(), sticky=Sticky(steps=20, n_inits=2, eval_size=16))


@pytest.mark.parametrize(
    ("arm", "control", "expected"),
    [
        ("tracks", "real", "PARTIAL"),  # a model at the posterior, a control that learns nothing
        ("init", "real", "REFUTED"),  # a non-learning arm: it stays at its init (d = 0, far from Bayes)
        ("tracks", "tracks", "UNDECIDED"),  # a control that passes the test: the test could not have failed
        ("falling", "real", "UNDECIDED"),  # still falling over the last fifth: not plateaued
    ],
)
def test_planted_fits_carry_through_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, arm: str, control: str, expected: str
) -> None:
    """The shared fits replaced by planted ones (no training): the KL history they report is what the rule reads."""

    def planted_fit(bed: StickyTestbed, model: torch.nn.Module, seed: int, **kw: Any) -> FitResult:
        kind = control if isinstance(bed, ShuffledLabels) else arm
        at_init = bed.kl_bits(model, kw["eval_batch"])  # the model is left at its init
        history = {"tracks": [0.02] * 10, "init": [at_init] * 10, "real": [at_init] * 10,
                   "falling": [0.5 - 0.05 * i for i in range(10)]}[kind]  # fmt: skip
        return FitResult(history, list(range(10, 110, 10)), 1.0, 0.0)

    def no_head(cfg: Config, m: Metrics) -> None:  # the reported one head is not what is tested here
        for key, value in _planted().items():
            if key.startswith("onehead_"):
                m.put(key, value, "value" if key != "onehead_represents" else "yes/no", key)

    monkeypatch.setattr(sticky_fits, "fit", planted_fit)
    monkeypatch.setattr(sculpting, "_onehead", no_head)
    cfg = _small()
    m = measure(cfg, Context(tmp_path))
    v, text = _decide(m, cfg)
    assert v == expected, text
    if arm == "init":
        assert m["d_per_run"] == [0.0, 0.0] and m["kl_trained_mean"] == pytest.approx(m["kl_init_mean"])


# --- the quick run -----------------------------------------------------------------------------------------------


def test_quick_run_is_consistent(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    m, cfg = res.metrics, Config.quick()
    assert isinstance(m, Metrics)  # as measured, with its declarations
    assert res.verdict == _decide(m, cfg)[0] and roles(res.criteria) == {"test": 2, "gate": 4, "identity": 0}
    assert [c.metric for c in res.criteria] == [c.metric for c in criteria(cfg, m)]
    assert set(m.declared) == set(m)  # every metric declared with its unit and label
    d = torch.tensor(m["d_per_run"], dtype=torch.float64)
    assert len(d) == cfg.sticky.n_inits and len(m["control_kl_per_run"]) == cfg.sticky.n_shuffled
    torch.testing.assert_close(d, torch.tensor(m["kl_init_per_run"], dtype=torch.float64)
                               - torch.tensor(m["kl_trained_per_run"], dtype=torch.float64))  # fmt: skip
    improved, tracked = (c for c in res.criteria if c.role == "test")
    assert improved.measured == pytest.approx(float(d.mean())) and improved.threshold == pytest.approx(
        2 * float(d.std())
    )
    assert tracked.measured == pytest.approx(max(m["kl_trained_per_run"]) / m["kl_no_context"])
    assert m["tracking_bar"] == pytest.approx(cfg.sticky.track_fraction * m["kl_no_context"])
    assert m["kl_window_1"] == pytest.approx(m["kl_no_context"])  # window 1 is the no-context predictor
    assert m["kl_window_1"] > m["kl_window_2"] > m["kl_window_4"] > m["kl_window_8"]
    # the trained KL is the cached model's: reload it and measure again
    tb = cfg.testbed()
    held, inits, _ = shared_design(tb, cfg.seed, cfg.sticky.n_inits, cfg.sticky.n_shuffled)
    model, _ = sticky_fits.trained(Context(run_dir), tb, inits[0], held)
    assert tb.kl_bits(model, held) == pytest.approx(m["kl_trained_per_run"][0], rel=1e-9)
    assert len(list((run_dir / "testbeds").glob("sticky_fit-*.pt"))) == cfg.sticky.n_inits + cfg.sticky.n_shuffled
    # the reported one head: its best fit (in-sample) beats the paper's SGD and reads against the target
    assert m["onehead_best_fit_kl"] == min(m["onehead_best_fit_per_run"]) < m["onehead_kl_trained_mean"]
    assert m["onehead_represents"] == (m["onehead_best_fit_kl"] <= cfg.rule.target_kl)
    assert (run_dir / res.figures[0]).is_file()
