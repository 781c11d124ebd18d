"""two_timescale: the τ measure on planted paths, the censoring rule, the batched sampler and optimiser, the
transformer read-out, the speed-ups, and the quick run's consistency."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from implicit_em.experiments import EXPERIMENTS
from implicit_em.experiments._base import Context, Result
from implicit_em.experiments._two_timescale import (
    StackedAdam,
    planted_path,
    relative_distances,
    sample_sticky,
    stabilisation_times,
    transformer_state,
)
from implicit_em.experiments.sticky_sculpting import _init, single_head_logits, window_posterior
from implicit_em.experiments.two_timescale import (
    ARMS,
    EXPERIMENT,
    Config,
    _decide,
    _em_specific,
    _head_state,
    _ordering,
    _speed_ups,
)
from implicit_em.windtunnel.models import CausalTransformer
from implicit_em.windtunnel.tasks import BijectionTask, StickyMarkovTask, StickySequence

F64 = torch.float64


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return EXPERIMENT.run(Config.quick(), Context(run_dir)), run_dir


def test_is_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


def test_stabilisation_time_known_answer() -> None:
    steps = torch.tensor([0, 10, 20, 30, 40, 50])
    delta = torch.tensor([[1.0, 0.01], [0.5, 0.01], [0.04, 0.01], [0.06, 0.01], [0.03, 0.01], [0.0, 0.0]], dtype=F64)
    # run 0 leaves the band at step 30 for the last time: τ = 40; run 1 is inside from the start: τ = 0
    assert stabilisation_times(delta, steps, 0.05).tolist() == [40, 0]
    # a quantity that only settles at the end is censored at the last step
    assert stabilisation_times(torch.tensor([[1.0], [0.5], [0.0]], dtype=F64), steps[:3], 0.05).tolist() == [20]


@pytest.mark.parametrize(("scale", "start"), [(30.0, 1.0), (100.0, 3.0), (400.0, 0.5)])
def test_tau_recovers_a_planted_path_exactly(scale: float, start: float) -> None:
    steps = torch.arange(0, 2001, 20)
    path, tau = planted_path(steps, scale, start, torch.Generator().manual_seed(1))
    measured = int(stabilisation_times(relative_distances(path), steps, 0.05)[0])
    assert measured == tau
    # the closed form: δ_s = start (e^{-s/scale} - e^{-S/scale}) < 0.05 from s = -scale log(0.05/start + e^{-S/scale})
    expected = -scale * math.log(0.05 / start + math.exp(-2000 / scale))
    assert expected <= tau < expected + 20


def test_relative_distance_is_scale_free_and_rejects_a_zero_end() -> None:
    path = torch.randn(5, 2, 3, 4, generator=torch.Generator().manual_seed(0), dtype=F64)
    torch.testing.assert_close(relative_distances(7.0 * path), relative_distances(path))
    assert torch.all(relative_distances(path)[-1] == 0)
    with pytest.raises(ValueError, match="zero"):
        relative_distances(torch.zeros(3, 1, 2))


def test_ordering_reads_censored_times_as_later_than_the_run() -> None:
    cfg = Config.quick()
    cases = {  # (τ_A, τ_V, δ_A(0)) -> outcome, last step 100
        (20, 60, 1.0): "supports",
        (40, 60, 1.0): "fails",  # 40 > 0.5 x 60
        (20, 100, 1.0): "supports",  # V censored, τ_A <= 0.5 x the last step
        (70, 100, 1.0): "undecided",  # V censored, τ_V might be > 140
        (100, 30, 1.0): "fails",  # A censored, V settled
        (100, 100, 1.0): "undecided",  # nothing settled
        (0, 60, 0.01): "fails",  # A never moved
    }
    t = {"tau_A": [k[0] for k in cases], "tau_V": [k[1] for k in cases], "delta0_A": [k[2] for k in cases]}
    assert _ordering(t, 100, cfg) == list(cases.values())


def test_decide_needs_both_settings_for_a_verdict() -> None:
    assert _decide({"sticky": "holds", "wind_tunnel": "holds"}, True, True) == "SUPPORTED"
    assert _decide({"sticky": "holds", "wind_tunnel": "holds"}, True, False) == "PARTIAL"
    assert _decide({"sticky": "fails", "wind_tunnel": "fails"}, True, True) == "REFUTED"
    assert _decide({"sticky": "fails", "wind_tunnel": "undecided"}, True, False) == "PARTIAL"
    assert _decide({"sticky": "holds", "wind_tunnel": "holds"}, False, True) == "PARTIAL"  # control failed


def test_batched_sampler_draws_the_tasks_chain_and_its_posterior() -> None:
    task = StickyMarkovTask(length=40, stay=0.8, noise=3.0, means_seed=2)
    x, y, post = sample_sticky(task, 3, torch.Generator().manual_seed(0))
    assert x.shape == (3, 40, 20) and y.shape == (3, 40) and post.shape == (3, 40, 8)
    for b in range(3):  # the posterior is the task's exact filter of these inputs (an independent code path)
        seq = StickySequence(x[b], y[b], torch.tensor(0), post[b])
        torch.testing.assert_close(window_posterior(task, seq, 40), post[b])
    # the chain: empirical stay frequency over many sequences matches the transition matrix's diagonal
    _, yy, _ = sample_sticky(task, 400, torch.Generator().manual_seed(1))
    stay = float((yy[:, 1:] == yy[:, :-1]).double().mean())
    assert stay == pytest.approx(0.8, abs=0.01)


def test_stacked_adam_equals_torch_adam_on_each_run_alone() -> None:
    x, y = torch.randn(12, 20, dtype=F64), torch.randint(0, 8, (12,))  # float64: compare to round-off
    lrs = {"W_Q": [0.01, 0.1], "W_K": [0.01, 0.1], "W_V": [0.1, 0.01], "W_O": [0.01, 0.01]}
    stacked = {k: torch.stack([v.detach(), v.detach()]).double() for k, v in _init(3, 0.5).items()}
    opt = StackedAdam(stacked, {k: torch.tensor(v, dtype=F64) for k, v in lrs.items()})
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(single_head_logits({k: v.requires_grad_(True) for k, v in
                                                 stacked.items()}, x[None].expand(2, -1, -1)).reshape(-1, 8),
                                                 y.repeat(2), reduction="sum")  # fmt: skip
        grads = torch.autograd.grad(loss, list(stacked.values()))
        opt.step(dict(zip(stacked, grads, strict=True)))
    for r in range(2):
        alone = {k: v.detach().double().requires_grad_(True) for k, v in _init(3, 0.5).items()}
        torch_opt = torch.optim.Adam([{"params": [alone[k]], "lr": lrs[k][r]} for k in alone])
        for _ in range(5):
            torch_opt.zero_grad()
            torch.nn.functional.cross_entropy(single_head_logits(alone, x), y, reduction="sum").backward()
            torch_opt.step()
        for k in alone:
            torch.testing.assert_close(stacked[k][r], alone[k].detach(), rtol=1e-12, atol=1e-12)


def test_head_state_reproduces_the_heads_output() -> None:
    params = {k: v.detach()[None] for k, v in _init(0, 0.5).items()}  # one run
    x = torch.randn(2, 9, 20)
    state = _head_state(params, x)
    out = state["A"] @ state["V"] @ params["W_O"][:, None]  # (1, 2, 9, 8)
    torch.testing.assert_close(out[0], single_head_logits({k: v[0] for k, v in params.items()}, x))
    assert torch.all(state["A"].triu(1) == 0)  # causal
    torch.testing.assert_close(state["W_QK"][0], params["W_Q"][0] @ params["W_K"][0].T)


def test_transformer_state_is_the_models_forward_pass() -> None:
    task = BijectionTask(6)
    torch.manual_seed(0)
    model = CausalTransformer(task.vocab_size, task.n_classes, task.seq_len(), 2, 2, 16, 32)
    tokens = task.sample(4, torch.Generator().manual_seed(0)).tokens
    with torch.no_grad():
        state = transformer_state(model, tokens)
        torch.testing.assert_close(state["logits"], model(tokens))
    a = state["A"]  # (layers, B, H, T, T)
    assert a.shape == (2, 4, 2, 10, 10) and torch.all(a.triu(1) == 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 2, 10))
    # the per-head bilinear form gives the scores up to the bias terms: check with the biases zeroed
    block = model.blocks[0]
    with torch.no_grad():
        block.attn.qkv.bias.zero_()  # type: ignore[union-attr, operator]
        h = block.ln1(model.tok(tokens) + model.pos(torch.arange(10)))  # type: ignore[operator]
        s = torch.einsum("bid,hde,bje->bhij", h, transformer_state(model, tokens)["W_QK"][0], h) / math.sqrt(8)
        expected = torch.softmax(s.masked_fill(torch.ones(10, 10).triu(1).bool(), -math.inf), dim=-1)
        torch.testing.assert_close(transformer_state(model, tokens)["A"][0], expected)


def test_speed_ups_known_answer_and_censoring() -> None:
    cfg = dataclasses.replace(Config.quick(), n_seeds=1)
    steps = torch.arange(0, 101, 10)
    fall = torch.clamp(1.0 - steps.double() / 80, min=0.0)  # the baseline reaches its floor at step 80
    curves = [
        1.0 + fall,  # baseline
        1.0 + torch.clamp(1.0 - steps.double() / 40, min=0.0),  # twice as fast
        1.0 + torch.clamp(1.0 - steps.double() / 20, min=0.0),  # four times
        2.0 - 0.5 * steps.double() / 100,  # never gets there: censored
        1.0 + fall,  # the same as the baseline
    ]
    su = _speed_ups(torch.stack(curves, dim=1), steps, cfg)
    torch.testing.assert_close(su["speed_up"][0], torch.tensor([1.0, 2.0, 4.0, 0.8, 1.0], dtype=F64))
    assert su["censored"][0].tolist() == [False, False, False, True, False]
    # W_V (2x) against the better of W_Q/W_K (4x) and W_O (censored): d = -2
    em = _em_specific(su["speed_up"], cfg)
    assert em["best_other"] == "W_Q/W_K x10" and em["d_mean"] == pytest.approx(-2.0)
    assert list(ARMS)[:2] == ["baseline", "W_V x10"]


def test_quick_run_is_consistent(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    m, cfg = res.metrics, Config.quick()
    assert m["planted_tau_miss"] == 0 and m["planted_rule_errors"] == 0  # the control behaved
    for name, last in (("sticky", cfg.sticky_steps), ("wind_tunnel", cfg.wt_steps)):
        for q in ("A", "V", "W_V", "W_QK"):
            taus = m[f"{name}_tau_{q}"]
            assert len(taus) == cfg.n_seeds and all(0 <= t <= last and t % cfg.snap_every == 0 for t in taus)
            assert m[f"{name}_censored"][q] == [t == last for t in taus]
        t = {k: m[f"{name}_{k}"] for k in ("tau_A", "tau_V", "delta0_A")}
        assert m[f"{name}_outcomes"] == _ordering(t, last, cfg)
        assert all(d0 > 0.1 for d0 in m[f"{name}_delta0_A"])  # training moved the attention
        assert all(g > 0 for g in m[f"{name}_train_minus_bayes_nats"])  # online: no run beats Bayes
    states = {name: m[f"{name}_state"] for name in ("sticky", "wind_tunnel")}
    assert res.verdict == _decide(states, True, m["em_specific"])
    assert m["speed_up_per_seed"]["baseline"] == [1.0] * cfg.n_seeds
    # KL(Bayes || head) > 0: the head does not reproduce the exact filter
    assert all(k > 0 for k in m["sticky_heldout_kl_bits"])
    assert (run_dir / res.figures[0]).is_file()
