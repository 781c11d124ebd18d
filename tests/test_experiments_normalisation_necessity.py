"""The normalisation_necessity experiment: sigmoid attention in closed form, the loop equal to the wind tunnel's,
the no-softmax recorder and the causality check failing on planted faults, and the verdict rule on known metrics."""

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from implicit_em.experiments import EXPERIMENTS
from implicit_em.experiments._base import Context, Result
from implicit_em.experiments._unnormalised import (
    UnnormalisedTransformer,
    build_arm_model,
    sigmoid_attention,
    sigmoid_attention_weights,
    train_arm,
)
from implicit_em.experiments.normalisation_necessity import (
    ARMS,
    EXPERIMENT,
    NO_SOFTMAX,
    TASKS,
    Config,
    _attention_row_sums,
    _causal_leak,
    _decide,
    _eval_steps,
    _softmax_ops,
)
from implicit_em.windtunnel.config import WindTunnelConfig
from implicit_em.windtunnel.models import CausalTransformer
from implicit_em.windtunnel.tasks import BijectionTask, HMMFilteringTask, bijection_no_context_mae
from implicit_em.windtunnel.train import build_tasks, train

F64 = torch.float64
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return EXPERIMENT.run(Config.quick(), Context(run_dir)), run_dir


def _paper_text() -> str:
    for base in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        path = base / "paper" / "implicit-em-paper.md"
        if path.exists():
            return path.read_text()
    pytest.skip("no shared/paper/implicit-em-paper.md beside this checkout")


# --- sigmoid attention ------------------------------------------------------------------------------------------


def test_sigmoid_attention_weights_at_zero_scores_are_one_over_i_plus_two_and_causal() -> None:
    t = 5
    w = sigmoid_attention_weights(torch.zeros(1, t, t, dtype=F64))[0]  # sigma(-log(i + 1)) = 1 / (i + 2)
    # rtol 1e-14: exp(log(n)) is n only to a few ulp
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    expected = torch.where(j <= i, 1.0 / (i.to(F64) + 2.0), 0.0)
    torch.testing.assert_close(w, expected, rtol=1e-14, atol=0.0)
    n = torch.arange(t, dtype=F64) + 1.0
    torch.testing.assert_close(w.sum(-1), n / (n + 1.0), rtol=1e-14, atol=0.0)


def test_sigmoid_attention_equals_a_loop_and_its_weights_are_not_normalised() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=F64) for _ in range(3))  # (B, H, T, E)
    out = sigmoid_attention(q, k, v)
    ref = torch.zeros_like(out)
    for i in range(6):
        for jj in range(i + 1):
            s = (q[..., i, :] * k[..., jj, :]).sum(-1) / 2.0  # 1/sqrt(E), E = 4
            ref[..., i, :] += torch.sigmoid(s - math.log(i + 1))[..., None] * v[..., jj, :]
    torch.testing.assert_close(out, ref, rtol=1e-13, atol=1e-14)
    sums = sigmoid_attention_weights(torch.randn(6, 6, generator=g, dtype=F64) * 3).sum(-1)
    assert (sums - 1).abs().max() > 0.1  # rows are free, not on the simplex


def test_unnormalised_transformer_starts_from_the_softmax_transformers_weights_but_computes_otherwise() -> None:
    args = (10, 5, 12, 2, 2, 16, 32)
    torch.manual_seed(3)
    softmax = CausalTransformer(*args)
    torch.manual_seed(3)
    sigmoid = UnnormalisedTransformer(*args)
    a, b = softmax.state_dict(), sigmoid.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    tokens = torch.randint(0, 10, (4, 12), generator=torch.Generator().manual_seed(0))
    assert (softmax(tokens) - sigmoid(tokens)).abs().max() > 1e-4


def test_attention_row_sums_at_zero_scores_match_the_closed_form() -> None:
    model = UnnormalisedTransformer(10, 5, 8, 1, 2, 16, 32)
    nn.init.zeros_(model.blocks[0].attn.qkv.weight)  # q = k = v = bias = 0: scores 0
    t = 8
    expected = sum((i + 1) / (i + 2) for i in range(t)) / t
    tokens = torch.randint(0, 10, (3, t), generator=torch.Generator().manual_seed(0))
    assert _attention_row_sums(model, tokens) == pytest.approx(expected, rel=1e-6)
    assert math.isnan(_attention_row_sums(CausalTransformer(10, 5, 8, 1, 2, 16, 32), tokens))  # softmax: none


# --- the loop and the arms -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "loss"), [("transformer", "softmax"), ("lstm", "sigmoid"), ("prefix_mlp", "sigmoid")]
)
def test_train_arm_gives_the_wind_tunnels_numbers(model: str, loss: str) -> None:
    cfg = WindTunnelConfig.tiny(model=model, loss=loss, steps=12, eval_every=12, eval_size=32)
    expected = train(cfg, None, progress=False).metrics["eval"]
    task, _ = build_tasks(cfg)
    batch = task.sample(cfg.eval_size, torch.Generator().manual_seed(cfg.eval_seed))
    got = train_arm(build_arm_model(model, task, cfg), task, cfg, batch, (12,))
    assert got.final.kl == expected.kl and got.final.entropy_mae_per_sample == expected.entropy_mae_per_sample
    assert got.steps == [12]


def test_arms_are_parameter_matched_and_the_unknown_architecture_is_refused() -> None:
    cfg = WindTunnelConfig(n_layers=2, n_heads=2, d_model=32, d_ff=64)
    for task in (BijectionTask(10), HMMFilteringTask(8, 2, 2)):
        counts = [sum(p.numel() for p in build_arm_model(a, task, cfg).parameters()) for _, a, _, _ in ARMS]
        assert max(counts) / min(counts) < 1.1
    with pytest.raises(ValueError, match="architecture must be one of"):
        build_arm_model("mamba", BijectionTask(5), cfg)


@pytest.mark.parametrize("task", [BijectionTask(5), HMMFilteringTask(3, 2, 2)], ids=["bijection", "hmm"])
def test_the_recorder_finds_softmax_exactly_where_it_is(task: Any) -> None:
    cfg = WindTunnelConfig(n_layers=1, n_heads=2, d_model=16, d_ff=32)
    batch = task.sample(4, torch.Generator().manual_seed(0))
    found = {name: _softmax_ops(build_arm_model(a, task, cfg), batch, loss) for name, a, loss, _ in ARMS}
    for name in NO_SOFTMAX:
        assert found[name] == []
    assert "aten._softmax.default" in found["attn_bce"]  # attention normalises over keys
    assert "aten._log_softmax.default" not in found["attn_bce"]  # BCE has no partition function
    assert "aten._log_softmax.default" in found["lstm_ce"] and "aten._softmax.default" not in found["lstm_ce"]
    assert {"aten._softmax.default", "aten._log_softmax.default"} <= set(found["softmax"])


def test_the_recorder_catches_a_planted_logsumexp() -> None:
    class Planted(nn.Module):  # an LSE hidden inside an otherwise softmax-free network
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 5)

        def forward(self, tokens: Tensor) -> Tensor:
            x = self.emb(tokens)
            return x - torch.logsumexp(x, dim=-1, keepdim=True).detach() * 0.0

    task = BijectionTask(5)
    ops = _softmax_ops(Planted(), task.sample(2, torch.Generator().manual_seed(0)), "sigmoid")
    assert any("logsumexp" in op for op in ops)


def test_causal_leak_is_zero_for_the_arms_and_caught_when_planted() -> None:
    task = BijectionTask(5)
    batch = task.sample(8, torch.Generator().manual_seed(0))
    cfg = WindTunnelConfig(n_layers=1, n_heads=2, d_model=16, d_ff=32)
    for _, architecture, _, _ in ARMS:
        assert _causal_leak(build_arm_model(architecture, task, cfg).eval(), batch, task.vocab_size) <= 1e-6

    class Leaky(nn.Module):  # sees the last token everywhere
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(task.vocab_size, task.n_classes)

        def forward(self, tokens: Tensor) -> Tensor:
            return self.emb(tokens) + self.emb(tokens[:, -1:])

    assert _causal_leak(Leaky(), batch, task.vocab_size) > 1e-2


def test_eval_steps_include_three_quarters_and_the_end() -> None:
    assert _eval_steps(2000, 8) == (250, 500, 750, 1000, 1250, 1500, 1750, 2000)
    assert {120, 160} <= set(_eval_steps(160, 3))


# --- the quick run ----------------------------------------------------------------------------------------------


def test_is_registered_and_quotes_the_paper() -> None:
    assert EXPERIMENT in EXPERIMENTS
    text = " ".join(_paper_text().split())
    for fragment in EXPERIMENT.claim.split(" [...] "):
        assert fragment in text


def test_quick_run_verdict_follows_its_criteria_and_its_controls_hold(result: tuple[Result, Path]) -> None:
    res, _ = result
    cfg, m = Config.quick(), res.metrics
    assert (res.verdict, res.summary) == _decide(cfg, m)
    crit = {c.metric: c for c in res.criteria}
    for task in TASKS:
        bar = crit[f"{task}: softmax_kl (tracks the posterior)"].threshold
        assert bar == pytest.approx(cfg.learned_fraction * m[f"{task}_floor_kl"], rel=1e-15)
        for name in NO_SOFTMAX:
            c = crit[f"{task}: {name}_kl (> 2x softmax)"]
            assert c.threshold == pytest.approx(cfg.ratio_tol * m[f"{task}_softmax_kl"], rel=1e-15)
    for name in NO_SOFTMAX:
        assert m[f"{name}_softmax_ops"] == []
    assert m["softmax_softmax_op_count"] >= 4  # softmax and log-softmax, forward and backward, on both tasks
    assert m["causal_leak_max"] <= cfg.causal_tol


def test_quick_floors_are_exact_and_the_context_models_leave_them(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    cfg = Config.quick()
    # without replacement the uniform predictor's KL is log2 V - H_Bayes(t): the task's exact no-context number
    assert m["bijection_floor_kl"] == pytest.approx(bijection_no_context_mae(cfg.n_symbols), rel=1e-12)
    assert m["hmm_emission_only_kl"] < m["hmm_floor_kl"]  # reading the emission matrix beats ignoring it
    for name in ("softmax", "lstm_ce", "sigmoid_attn_bce"):  # they read the context and learn the bijection
        assert m[f"bijection_{name}_kl"] < 0.6 * m["bijection_floor_kl"]
    for task in TASKS:
        for name, _, _, _ in ARMS:
            assert m[f"{task}_{name}_kl_at_three_quarters_per_seed"] == [m[f"{task}_{name}_kl_at_three_quarters"]]
            assert m[f"{task}_{name}_curve_steps"][-1] == m[f"{task}_steps"]


def test_figures_exist(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    assert len(res.figures) == 2
    for rel in res.figures:
        assert (run_dir / rel).is_file()


# --- the rule on known metrics ---------------------------------------------------------------------------------


def _metrics(cfg: Config, kl: dict[str, dict[str, float]], drop: float = 0.0, **controls: Any) -> dict[str, Any]:
    """Synthetic seed means: ``kl[task][arm]`` (missing arms at the floor 1.0), healthy controls, given drop."""
    m: dict[str, Any] = {"seeds": [0, 1, 2], "hmm_emission_only_kl": 0.5, "causal_leak_max": 0.0}
    m.update({f"{n}_softmax_op_count": 0 for n in NO_SOFTMAX} | {"softmax_softmax_op_count": 8})
    for task in TASKS:
        m[f"{task}_floor_kl"] = 1.0
        m[f"{task}_softmax_plateau_drop"] = drop
        for name, _, _, _ in ARMS:
            m[f"{task}_{name}_kl"] = kl.get(task, {}).get(name, 1.0)
            m[f"{task}_{name}_over_softmax_kl"] = m[f"{task}_{name}_kl"] / m[f"{task}_softmax_kl"]
    m.update(controls)
    return m


def test_rule_refutes_on_a_decisive_task_only() -> None:
    cfg = Config.full()  # bar 0.1 on a floor of 1
    good = {"softmax": 0.01, "sigmoid_attn_bce": 0.05, "lstm_bce": 0.05, "prefix_mlp_bce": 0.05}
    assert _decide(cfg, _metrics(cfg, {"bijection": good, "hmm": good}))[0] == "SUPPORTED"
    close = good | {"lstm_bce": 0.019}  # 1.9x softmax
    verdict, summary = _decide(cfg, _metrics(cfg, {"bijection": close, "hmm": good}))
    assert verdict == "REFUTED" and "LSTM, BCE on the bijection (1.90x)" in summary
    untracked = close | {"softmax": 0.2}  # softmax above the bar: the bijection does not decide
    verdict, summary = _decide(cfg, _metrics(cfg, {"bijection": untracked, "hmm": good}))
    assert verdict == "PARTIAL" and "bijection: softmax not tracking" in summary and "on the hmm" in summary


def test_rule_needs_the_plateau_and_the_controls() -> None:
    cfg = Config.full()
    close = {"softmax": 0.01, "lstm_bce": 0.015}
    assert _decide(cfg, _metrics(cfg, {"bijection": close}))[0] == "REFUTED"
    assert _decide(cfg, _metrics(cfg, {"bijection": close}, drop=0.021))[0] == "PARTIAL"  # > 0.2 x bar 0.1
    assert _decide(cfg, _metrics(cfg, {"bijection": close}, drop=0.019))[0] == "REFUTED"
    for bad in ({"lstm_bce_softmax_op_count": 1}, {"softmax_softmax_op_count": 0}, {"causal_leak_max": 0.1},
                {"hmm_emission_only_kl": 0.05}):  # fmt: skip
        verdict, summary = _decide(cfg, _metrics(cfg, {"bijection": close}, **bad))
        assert verdict == "PARTIAL" and summary.startswith("A control failed")


def test_quick_config_is_the_default_and_full_is_three_seeds() -> None:
    assert Config.quick() == Config()
    full = Config.full()
    assert full.n_seeds == 3 and dataclasses.replace(full, seed=0) == full
