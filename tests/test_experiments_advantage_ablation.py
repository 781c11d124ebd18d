"""The advantage_ablation experiment: the score-gradient surgery against autograd in float64, the ablated models
against the originals, the decision rule on planted metrics, and the quick run's controls."""

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from implicit_em.experiments import advantage_ablation as aa
from implicit_em.experiments._ablation import (
    MODES,
    ablated_transformer,
    final_residual,
    query_key_weights,
    routed_softmax,
    row_permutations,
    single_head,
)
from implicit_em.experiments._base import Context
from implicit_em.experiments.sticky_sculpting import SHAPES, single_head_logits
from implicit_em.windtunnel.models import CausalTransformer

F64 = torch.float64
TOL = {"rtol": 1e-12, "atol": 1e-14}


def _case(seed: int, t: int = 7, e: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores (B, H, T, T), values and upstream gradients (B, H, T, E), and the causal mask, float64."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(2, 3, t, t, generator=g, dtype=F64) * 2
    v = torch.randn(2, 3, t, e, generator=g, dtype=F64)
    u = torch.randn(2, 3, t, e, generator=g, dtype=F64)
    return s, v, u, torch.ones(t, t, dtype=torch.bool).tril()


def _score_grad(s0: torch.Tensor, v: torch.Tensor, u: torch.Tensor, mode: str | None, perm: Any = None) -> Any:
    """dl/ds for l = sum(u * (alpha v)), through autograd's softmax (mode None) or routed_softmax(mode)."""
    s = s0.clone().requires_grad_(True)
    causal = torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).tril()
    alpha = torch.softmax(s.masked_fill(~causal, -math.inf), -1) if mode is None else routed_softmax(s, mode, perm)
    ((alpha @ v) * u).sum().backward()
    return s.grad, alpha.detach()


# --- the Function -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_mode_is_autograds_gradient_and_the_law(seed: int) -> None:
    s, v, u, causal = _case(seed)
    ref, alpha = _score_grad(s, v, u, None)
    got, alpha_r = _score_grad(s, v, u, "exact")
    torch.testing.assert_close(alpha_r, alpha, rtol=0, atol=0)  # the forward pass is the same
    torch.testing.assert_close(got, ref, **TOL)
    b = u @ v.transpose(-2, -1)  # b_ij = u_i . v_j
    law = alpha * (b - (alpha * b).sum(-1, keepdim=True))
    torch.testing.assert_close(got, law, **TOL)
    assert float(got.masked_select(~causal.expand_as(got)).abs().max()) == 0.0  # masked keys get nothing


@pytest.mark.parametrize("seed", [0, 1])
def test_no_baseline_differs_from_exact_by_alpha_times_the_baseline(seed: int) -> None:
    s, v, u, _ = _case(seed)
    exact, alpha = _score_grad(s, v, u, "exact")
    nob, _ = _score_grad(s, v, u, "no_baseline")
    b = u @ v.transpose(-2, -1)
    torch.testing.assert_close(nob - exact, alpha * (alpha * b).sum(-1, keepdim=True), **TOL)
    assert float((nob - exact).abs().max()) > 1e-3  # the baseline is not zero here: the arms really differ


def test_zero_mode_gives_no_score_gradient() -> None:
    s, v, u, _ = _case(0)
    grad, _ = _score_grad(s, v, u, "zero")
    assert float(grad.abs().max()) == 0.0


@pytest.mark.parametrize("seed", [0, 3])
def test_permuted_mode_permutes_the_advantages_within_each_row(seed: int) -> None:
    s, v, u, _ = _case(seed)
    perm = row_permutations(s.shape[-1], seed)
    exact, alpha = _score_grad(s, v, u, "exact")
    permuted, _ = _score_grad(s, v, u, "permuted", perm)
    adv = exact / alpha  # alpha > 0 on the visible keys; masked entries are 0/0
    adv_d = permuted / alpha
    for i in range(s.shape[-1]):
        visible = slice(0, i + 1)
        torch.testing.assert_close(adv_d[..., i, visible], adv[..., i, perm[i, visible]], **TOL)
        # the same multiset of advantages per row, so their alpha-free sum is unchanged
        torch.testing.assert_close(adv_d[..., i, visible].sum(-1), adv[..., i, visible].sum(-1), **TOL)
    assert not torch.allclose(permuted, exact)


def test_row_permutations_permute_only_the_visible_keys_and_follow_the_seed() -> None:
    t = 9
    perm = row_permutations(t, 5)
    for i in range(t):
        assert sorted(perm[i, : i + 1].tolist()) == list(range(i + 1))
        assert perm[i, i + 1 :].tolist() == list(range(i + 1, t))
    assert torch.equal(perm, row_permutations(t, 5))
    assert not torch.equal(perm, row_permutations(t, 6))


def test_routed_softmax_rejects_bad_input() -> None:
    s = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="mode must be one of"):
        routed_softmax(s, "nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs perm"):
        routed_softmax(s, "permuted")
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        routed_softmax(torch.zeros(4, 3))


# --- the models -----------------------------------------------------------------------------------------------


def test_ablated_transformer_in_exact_mode_is_the_wind_tunnels_transformer() -> None:
    tokens = torch.randint(0, 12, (3, 10), generator=torch.Generator().manual_seed(0))
    ours = ablated_transformer(12, 6, 10, 2, 2, 16, 32, "exact", seed=3, perm_seed=0).double()
    torch.manual_seed(3)
    ref = CausalTransformer(12, 6, 10, 2, 2, 16, 32).double()
    torch.testing.assert_close(ours(tokens), ref(tokens), **TOL)
    ours(tokens).square().sum().backward()
    ref(tokens).square().sum().backward()
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=name)
    x = final_residual(ours, tokens)
    torch.testing.assert_close(ref.head(ref.ln_f(x)), ref(tokens), **TOL)  # the residual before ln_f


@pytest.mark.parametrize("mode", MODES)
def test_values_and_w_o_keep_exact_gradients_in_every_mode(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    params = {k: torch.randn(*shape, generator=g, dtype=F64) * 0.3 for k, shape in SHAPES.items()}
    x = torch.randn(12, 20, generator=g, dtype=F64)
    perm = row_permutations(12, 0)

    def grads(m: str) -> dict[str, torch.Tensor]:
        p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        logits, _ = single_head(p, x, m, perm)  # type: ignore[arg-type]
        torch.nn.functional.cross_entropy(logits, torch.arange(12) % 8).backward()
        return {k: v.grad for k, v in p.items() if v.grad is not None}

    exact, ablated = grads("exact"), grads(mode)
    for name in ("W_V", "W_O"):
        torch.testing.assert_close(ablated[name], exact[name], **TOL)
    if mode == "zero":
        assert float(ablated["W_Q"].abs().max()) == 0.0 and float(ablated["W_K"].abs().max()) == 0.0
    elif mode != "exact":
        assert not torch.allclose(ablated["W_Q"], exact["W_Q"])
    logits, y = single_head(params, x, "exact")
    torch.testing.assert_close(logits, single_head_logits(params, x), **TOL)  # sticky_sculpting's head
    torch.testing.assert_close(y @ params["W_O"], logits, **TOL)


def test_zero_mode_leaves_the_transformers_query_and_key_weights_where_adam_found_them() -> None:
    model = ablated_transformer(12, 6, 10, 1, 2, 16, 32, "zero", seed=0, perm_seed=0)
    before = query_key_weights(model)
    values_before = model.blocks[0].attn.qkv.weight[32:].detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    tokens = torch.randint(0, 12, (4, 10), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        opt.zero_grad()
        model(tokens).square().mean().backward()
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(query_key_weights(model), before, strict=True))
    assert not torch.equal(model.blocks[0].attn.qkv.weight[32:], values_before)  # the value rows did train


# --- the decision rule on planted metrics --------------------------------------------------------------------


def _planted(a_kl: float, b_kl: float, d_kl: float, sig: dict[str, tuple[float, float]]) -> dict[str, float]:
    m = {"no_context_kl": 1.0, "A_kl": a_kl, "B_kl": b_kl, "D_kl": d_kl, "B_qk_change": 0.0}
    for name, (pc1, rho) in sig.items():
        m[f"{name}_pc1"], m[f"{name}_spearman_abs"] = pc1, rho
    m["B_over_A_kl"], m["D_over_A_kl"] = b_kl / a_kl, d_kl / a_kl
    return m


GOOD, FLAT = (0.6, 0.9), (0.2, 0.1)


@pytest.mark.parametrize(
    ("a_kl", "b_kl", "d_kl", "sig", "expected"),
    [
        (0.01, 0.5, 0.6, {"init": FLAT, "A": GOOD, "B": FLAT, "D": FLAT}, "necessary"),
        (0.01, 0.015, 0.6, {"init": FLAT, "A": GOOD, "B": GOOD, "D": FLAT}, "falsifier"),
        (0.01, 0.6, 0.012, {"init": FLAT, "A": GOOD, "B": FLAT, "D": (0.55, 0.85)}, "falsifier"),
        (0.01, 0.015, 0.6, {"init": FLAT, "A": GOOD, "B": FLAT, "D": FLAT}, "between"),  # close in KL, no signature
        (0.01, 0.05, 0.6, {"init": FLAT, "A": GOOD, "B": FLAT, "D": FLAT}, "between"),  # 5x: neither rule
        (0.5, 0.9, 0.9, {"init": FLAT, "A": GOOD, "B": FLAT, "D": FLAT}, "undecided"),  # A does not track
        (0.01, 0.5, 0.5, {"init": GOOD, "A": GOOD, "B": FLAT, "D": FLAT}, "undecided"),  # the init has it already
    ],
)
def test_task_outcome_on_planted_metrics(
    a_kl: float, b_kl: float, d_kl: float, sig: dict[str, tuple[float, float]], expected: str
) -> None:
    criteria = aa._task_criteria("t", _planted(a_kl, b_kl, d_kl, sig), aa.Config.quick())
    assert aa._task_outcome(criteria) == expected


def test_verdict_combines_the_tasks() -> None:
    assert aa._decide({"bijection": "falsifier", "sticky": "undecided"}, True) == "REFUTED"
    assert aa._decide({"bijection": "necessary", "sticky": "necessary"}, True) == "SUPPORTED"
    assert aa._decide({"bijection": "necessary", "sticky": "undecided"}, True) == "PARTIAL"
    assert aa._decide({"bijection": "falsifier", "sticky": "falsifier"}, False) == "PARTIAL"


# --- the quick run --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return aa.run(aa.Config.quick(), Context(tmp_path_factory.mktemp("advantage_ablation")))


def test_quick_run_controls_hold(quick: Any) -> None:
    m, cfg = quick.metrics, aa.Config.quick()
    for key in ("exact_vs_autograd", "no_baseline_minus_exact", "zero", "permuted_vs_exact"):
        assert m[f"check_{key}"] <= 1e-12
    assert m["bijection_B_qk_change"] == 0.0 and m["sticky_B_qk_change"] == 0.0  # the surgery removed the gradient
    # the random init sits near the no-context floor, and the exact gradient learns the bijection
    assert m["bijection_init_kl"] >= 0.5 * m["bijection_no_context_kl"]
    assert m["bijection_A_kl"] <= cfg.learned_fraction * m["bijection_no_context_kl"]
    # the exact no-context KL of the bijection (V = 6, L = 5): mean over t of log2 6 - log2(6 - t + 1)
    floor = sum(math.log2(6) - math.log2(6 - t + 1) for t in range(1, 6)) / 5
    assert m["bijection_no_context_kl"] == pytest.approx(floor, rel=1e-12)
    assert m["outcome_bijection"] in ("necessary", "falsifier", "between", "undecided")
    assert len(m["bijection_A_kl_per_seed"]) == cfg.n_seeds
    assert quick.figures and all(c.metric for c in quick.criteria)


def test_quick_run_arms_differ_where_the_surgery_differs(quick: Any) -> None:
    m = quick.metrics
    # same init, data and steps: if the surgery did nothing, every arm would end at A's numbers
    kls = [m[f"bijection_{a}_kl"] for a in ("A", "B", "C", "D")]
    assert len({round(k, 12) for k in kls}) == 4
    assert m["bijection_D_kl"] != pytest.approx(m["bijection_A_kl"], rel=1e-3)


def test_full_config_is_the_issue_setting() -> None:
    full = aa.Config.full()
    assert full.n_symbols == 20 and full.n_seeds >= 3
    assert (full.ratio_necessary, full.ratio_falsifier) == (10.0, 2.0)
    assert (full.stay, full.noise) == (0.8, 3.0)  # sticky_sculpting's setting where context matters


def test_claim_is_the_reviews_falsifier_as_written() -> None:
    repo = Path(__file__).resolve().parents[1]
    for base in (repo.parent / "shared", repo.parent.parent / "shared"):
        review = base / "paper" / "review-gradient-dynamics-of-attention"
        if review.exists():
            assert json.loads(review.read_text())["falsifier"] == aa.EXPERIMENT.claim
            return
    pytest.skip("no shared/paper/review-gradient-dynamics-of-attention beside this checkout")
