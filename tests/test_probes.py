"""The library attention function, the attention probe on it (case a), the laws, and the head probe."""

import runpy
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from _typecheck import unchecked
from implicit_em import objectives
from implicit_em.probes import AttentionProbe, HeadProbe, attention, hopfield_residual, routing_law, value_law
from implicit_em.probes.attention import _active_observer, dropout_keep

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-10  # the bound for the laws in float64


def _qkv(b: int = 2, h: int = 3, t: int = 5, s: int = 6, e: int = 4, ev: int = 7) -> tuple[Tensor, Tensor, Tensor]:
    def leaf(*shape: int) -> Tensor:
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    return leaf(b, h, t, e), leaf(b, h, s, e), leaf(b, h, s, ev)


def _masks(t: int = 5, s: int = 6) -> dict[str, dict[str, Any]]:
    boolean = torch.rand(2, 1, t, s) > 0.4
    boolean[0, 0, 1] = False  # one fully masked query row: sdpa gives zero weights there
    return {
        "none": {},
        "causal": {"is_causal": True},
        "bool": {"attn_mask": boolean},
        "float": {"attn_mask": torch.randn(t, s, dtype=torch.float64)},
    }


class TinyAttention(nn.Module):
    """A hand-written self-attention block that calls the library's attention function."""

    def __init__(self, d_model: int = 8, n_heads: int = 2) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, dtype=torch.float64)
        self.out = nn.Linear(d_model, d_model, dtype=torch.float64)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)  # (B, H, T, c/H)
        return self.out(attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))


class TinyModel(nn.Module):
    def __init__(self, n_layers: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(TinyAttention() for _ in range(n_layers))

    def forward(self, x: Tensor, use_checkpoint: bool | None = None) -> Tensor:
        for block in self.blocks:
            x = x + (block(x) if use_checkpoint is None else checkpoint(block, x, use_reentrant=use_checkpoint))
        return x


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_attention_matches_sdpa(mask: str) -> None:
    q, k, v = _qkv()
    kwargs = _masks()[mask]
    torch.testing.assert_close(attention(q, k, v, **kwargs), F.scaled_dot_product_attention(q, k, v, **kwargs))


def test_attention_fully_masked_row_has_zero_output_and_finite_gradients() -> None:
    q, k, v = _qkv()
    mask = torch.ones(5, 6, dtype=torch.bool)
    mask[2] = False
    out = attention(q, k, v, attn_mask=mask)
    out.sum().backward()
    assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2]))
    assert all(t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in (q, k, v))


def test_attention_refuses_mask_with_is_causal() -> None:
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        attention(q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.bool), is_causal=True)


def test_dropout_multiplier_is_drawn_as_f_dropout_draws_it() -> None:
    weights = torch.rand(3, 4, 5, dtype=torch.float64)
    torch.manual_seed(3)
    expected = F.dropout(weights, p=0.3)
    torch.manual_seed(3)
    assert torch.equal(weights * dropout_keep(weights, 0.3), expected)


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_laws_hold_against_autograd_on_the_attention_function(mask: str) -> None:
    q, k, v = _qkv()
    with AttentionProbe() as probe:
        out = attention(q, k, v, **_masks()[mask])
        (out.sin() * torch.randn_like(out)).sum().backward()
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL and laws["hopfield"] <= TOL
    assert set(laws["layers"]) == {"calls.0.attn"}


def test_score_gradient_rows_sum_to_zero() -> None:
    """Routing only redistributes: sum_j dl/ds_ij = 0 (a consequence of the routing law)."""
    q, k, v = _qkv()
    with AttentionProbe() as probe:
        attention(q, k, v, is_causal=True).pow(2).sum().backward()
    grad_s = probe.cache["calls.0.attn.hook_attn_scores_grad"]
    torch.testing.assert_close(grad_s.sum(-1), torch.zeros_like(grad_s.sum(-1)), atol=TOL, rtol=0)


def test_dropout_aware_laws_hold() -> None:
    q, k, v = _qkv()
    with AttentionProbe() as probe:
        out = attention(q, k, v, dropout_p=0.4)
        out.pow(2).sum().backward()
    assert "calls.0.attn.hook_dropout_keep" in probe.cache
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


def test_law_functions_match_autograd_directly() -> None:
    s = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 3, 5, 6, dtype=torch.float64, requires_grad=True)
    u = torch.randn(2, 3, 4, 6, dtype=torch.float64)
    a = torch.softmax(s, -1)
    grad_s, grad_v = torch.autograd.grad((a @ v * u).sum(), (s, v))
    torch.testing.assert_close(routing_law(a.detach(), v.detach(), u), grad_s, atol=TOL, rtol=0)
    torch.testing.assert_close(value_law(a.detach(), u), grad_v, atol=TOL, rtol=0)


def test_hopfield_readout_is_gradient_of_log_partition_closed_form() -> None:
    """One key: grad_q log exp(scale q.k) / scale = k exactly, and the read-out with values = keys is k."""
    q = torch.randn(1, 1, 1, 3, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 3, dtype=torch.float64)
    scores = (q @ k.transpose(-2, -1)) * 0.5
    assert float(hopfield_residual(q, k, scores, 0.5).max()) <= TOL


def test_probe_leaves_outputs_and_gradients_bit_identical() -> None:
    model, x = TinyModel(), torch.randn(3, 5, 8, dtype=torch.float64)
    out = model(x)
    out.pow(2).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    with AttentionProbe(model):
        probed = model(x)
        probed.pow(2).sum().backward()
    assert torch.equal(out, probed)
    assert all(p.grad is not None and torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))


def test_probe_names_sites_and_selects_layers_and_heads() -> None:
    model = TinyModel(n_layers=3)
    with AttentionProbe(model, layers=[0, "blocks.2"], heads=[1]) as probe:
        model(torch.randn(2, 5, 8, dtype=torch.float64)).sum().backward()
    assert probe.sites == {"blocks.0.attn": "blocks.0", "blocks.2.attn": "blocks.2"}
    assert probe.cache["blocks.2.attn.hook_pattern"].shape == (2, 1, 5, 5)
    assert "blocks.1.attn.hook_pattern" not in probe.cache
    assert probe.check_laws()["routing_law"] <= TOL


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_commits_one_record_per_site(reentrant: bool) -> None:
    model, x = TinyModel(), torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    with AttentionProbe(model) as probe:
        model(x, use_checkpoint=reentrant).pow(2).sum().backward()
    laws = probe.check_laws()
    assert set(laws["layers"]) == {"blocks.0.attn", "blocks.1.attn"}
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL


def test_summary_mode_keeps_per_head_statistics_only() -> None:
    model, x = TinyModel(), torch.randn(2, 5, 8, dtype=torch.float64)
    with AttentionProbe(model, mode="full") as full:
        model(x).pow(2).sum().backward()
    with AttentionProbe(model, mode="summary", summary_batch=None) as summary:  # observe the whole batch
        model(x).pow(2).sum().backward()
    assert all(t.shape == (2,) for t in summary.cache.values())  # (H,), no T x S tensors
    for site, stats in summary.summary().items():
        for name, value in stats.items():
            torch.testing.assert_close(value, full.summary()[site][name], atol=TOL, rtol=0)
    assert summary.check_laws()["routing_law"] <= TOL


def test_summary_entropy_closed_form() -> None:
    """Equal scores: entropy log S and max weight 1/S on every row."""
    q = torch.zeros(1, 1, 3, 4, dtype=torch.float64)
    with AttentionProbe(mode="summary") as probe:
        attention(q, torch.randn(1, 1, 5, 4, dtype=torch.float64), torch.randn(1, 1, 5, 2, dtype=torch.float64))
    stats = probe.summary()["calls.0.attn"]
    torch.testing.assert_close(stats["entropy"], torch.log(torch.tensor([5.0], dtype=torch.float64)))
    torch.testing.assert_close(stats["max_weight"], torch.tensor([0.2], dtype=torch.float64))


def test_every_n_samples_only_some_forwards() -> None:
    model, x = TinyModel(), torch.randn(2, 5, 8, dtype=torch.float64)
    seen = []
    with AttentionProbe(model, mode="summary", every=3) as probe:
        for _ in range(6):
            model(x).sum().backward()
            seen.append(probe.calls_at("blocks.0.attn"))
    assert seen == [1, 1, 1, 2, 2, 2]


def test_probe_removes_every_hook_and_the_observer() -> None:
    model = TinyModel()
    with pytest.raises(KeyError), AttentionProbe(model):
        raise KeyError("error inside the block")
    assert _active_observer() is None
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_probe_errors_are_clear() -> None:
    with unchecked(), pytest.raises(ValueError, match="mode"):  # the annotation's Literal excludes it
        AttentionProbe(mode="everything")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        AttentionProbe(TinyModel(), layers=[5])
    with pytest.raises(ValueError, match="no attention module"):
        AttentionProbe(nn.Linear(2, 2))
    with AttentionProbe(TinyModel()) as probe, pytest.raises(RuntimeError, match="already active"):
        AttentionProbe().__enter__()
    with AttentionProbe() as probe:
        q, k, v = (t.detach() for t in _qkv())
        attention(q, k, v)
    with pytest.raises(RuntimeError, match="no gradients"):
        probe.check_laws()


# ---- head probe -------------------------------------------------------------------------------------------


def _distances(n: int = 6, k: int = 4) -> Tensor:
    return (torch.randn(n, k, dtype=torch.float64) * 2).requires_grad_(True)


def test_head_probe_unsupervised_regime_recovers_responsibilities() -> None:
    d, log_weights = _distances(), torch.log_softmax(torch.randn(4, dtype=torch.float64), 0)
    probe = HeadProbe(regime="unsupervised", log_weights=log_weights)
    objectives.mixture_nll(probe(d), log_weights).mean().backward()
    torch.testing.assert_close(probe.responsibilities(), objectives.responsibilities(d.detach(), log_weights))
    assert probe.residual() <= TOL


@pytest.mark.parametrize("soft", [False, True])
def test_head_probe_constrained_regime_recovers_responsibilities(soft: bool) -> None:
    d = _distances()
    target = torch.softmax(torch.randn(6, 4, dtype=torch.float64), -1) if soft else torch.randint(0, 4, (6,))
    probe = HeadProbe(regime="constrained", reduction="sum")
    objectives.constrained_cross_entropy(probe(d), target).sum().backward()
    assert probe.residual(target) <= TOL


def test_head_probe_lse_regime_on_logits_of_a_module() -> None:
    head = nn.Linear(3, 4, dtype=torch.float64)
    x = torch.randn(6, 3, dtype=torch.float64)
    with HeadProbe(head, regime="lse", kind="logits") as probe:
        z = head(x)
        torch.logsumexp(z, -1).mean().backward()  # L = lse(-d) with d = -z
    torch.testing.assert_close(probe.responsibilities(), torch.softmax(z.detach(), -1), atol=TOL, rtol=0)
    assert not head._forward_hooks


def test_head_probe_leaves_gradients_bit_identical() -> None:
    head, x, y = nn.Linear(3, 4, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64), torch.arange(6) % 4
    F.cross_entropy(head(x), y).backward()
    expected = head.weight.grad.clone()  # type: ignore[union-attr]
    head.zero_grad()
    with HeadProbe(head, regime="constrained", kind="logits") as probe:
        F.cross_entropy(head(x), y).backward()
    assert head.weight.grad is not None and torch.equal(head.weight.grad, expected)
    assert probe.residual(y) <= TOL


def test_head_probe_errors_are_clear() -> None:
    with unchecked(), pytest.raises(ValueError, match="regime"):  # the annotation's Literal excludes it
        HeadProbe(regime="supervised")  # type: ignore[arg-type]
    probe = HeadProbe(regime="constrained")
    with pytest.raises(RuntimeError, match="nothing watched"):
        probe.distances()
    objectives.constrained_cross_entropy(probe(_distances()), torch.zeros(6, dtype=torch.long)).mean().backward()
    with pytest.raises(ValueError, match="needs target"):
        probe.responsibilities()
    with pytest.raises(ValueError, match="target must have shape"):
        probe.responsibilities(torch.zeros(5, dtype=torch.long))


def test_example_quick_mode_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = runpy.run_path(str(ROOT / "examples" / "probe_transformer.py"))
    config = example["Config"].quick()
    config = example["Config"](**{**config.__dict__, "out": str(tmp_path / "log.jsonl")})
    example["report"](example["run"](config), config)
    printed = capsys.readouterr().out
    assert "routing_law" in printed and "ratio" in printed
    assert (tmp_path / "log.jsonl").read_text().count("\n") > config.steps


def test_summary_routing_residual_equals_the_law_written_out() -> None:
    from implicit_em.probes._laws import per_head_max, routing_law_residual

    a = torch.softmax(torch.randn(2, 3, 4, 5, dtype=torch.float64), -1)
    v, u, g = (torch.randn(2, 3, *shape, dtype=torch.float64) for shape in ((5, 6), (4, 6), (4, 5)))
    keep = (torch.rand(2, 3, 4, 5) > 0.3).double() / 0.7
    for k in (None, keep):
        expected = per_head_max(g - routing_law(a, v, u, k))
        torch.testing.assert_close(routing_law_residual(g, a, v, u, k), expected, atol=TOL, rtol=0)


def test_summary_statistics_skip_fully_masked_rows() -> None:
    q, k, v = _qkv(b=1, h=1, t=3, s=4)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False], [True, True, True, True]])
    with AttentionProbe(mode="summary") as probe:
        attention(q, k, v, attn_mask=mask).sum().backward()
    stats = probe.summary()["calls.0.attn"]
    a = torch.softmax((q @ k.transpose(-2, -1) / 2).masked_fill(~mask, float("-inf")), -1)[0, 0].detach()
    rows = [0, 2]  # row 1 has no key: excluded from the mean
    entropy = -(a[rows] * a[rows].log()).nan_to_num().sum(-1).mean()
    torch.testing.assert_close(stats["entropy"], entropy[None], atol=TOL, rtol=0)
    torch.testing.assert_close(stats["max_weight"], a[rows].amax(-1).mean()[None], atol=TOL, rtol=0)


@given(
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    t=st.integers(1, 5),
    s=st.integers(1, 5),
    e=st.integers(1, 4),
    mask_seed=st.integers(0, 2**16),
)
def test_laws_hold_for_random_shapes_and_masks(b: int, h: int, t: int, s: int, e: int, mask_seed: int) -> None:
    generator = torch.Generator().manual_seed(mask_seed)
    q, k, v = (torch.randn(b, h, n, e, dtype=torch.float64, generator=generator) for n in (t, s, s))
    for x in (q, k, v):
        x.requires_grad_(True)
    mask = torch.rand(b, 1, t, s, generator=generator) > 0.3
    with AttentionProbe() as probe:
        out = attention(q, k, v, attn_mask=mask)
        (out * torch.randn(out.shape, dtype=torch.float64, generator=generator)).sum().backward()
    laws = probe.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL and laws["hopfield"] <= TOL


def test_summary_without_laws_says_so() -> None:
    q, k, v = _qkv()
    with AttentionProbe(mode="summary", laws=False) as probe:
        attention(q, k, v).sum().backward()
    assert "routing_law" not in probe.summary()["calls.0.attn"]
    with pytest.raises(RuntimeError, match="laws=False"):
        probe.check_laws()


def test_law_check_is_sensitive_to_a_wrong_value() -> None:
    """Negative control: the residuals are exactly 0 to ~1e-15 on a true model, and large once v is off by 1%."""
    q, k, v = _qkv()
    with AttentionProbe() as probe:
        attention(q, k, v, is_causal=True).sin().sum().backward()
    assert probe.check_laws()["routing_law"] <= TOL
    probe.cache["calls.0.attn.hook_v"].mul_(1.01)  # the cache holds the probe's own tensors
    laws = probe.check_laws()
    assert laws["routing_law"] > 1e-4 and laws["value_law"] <= TOL  # the value law does not involve v


def test_summary_sub_batch_on_the_attention_function() -> None:
    """attention() runs explicitly for the whole batch (bit-identical results); the probe reads the first n."""
    model, x = TinyModel(), torch.randn(4, 5, 8, dtype=torch.float64)
    out = model(x)
    out.pow(2).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    with AttentionProbe(model, mode="summary", summary_batch=2) as sub:
        probed = model(x)
        probed.pow(2).sum().backward()
    assert torch.equal(out, probed)
    assert all(p.grad is not None and torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))
    laws = sub.check_laws()
    assert laws["routing_law"] <= TOL and laws["value_law"] <= TOL
    with AttentionProbe(model, mode="full") as full:  # the sum loss makes each sequence's gradients its own
        model(x[:2]).pow(2).sum().backward()
    expected = full.summary()
    for site, stats in sub.summary().items():
        assert set(stats) == set(expected[site])
        for name, value in stats.items():
            torch.testing.assert_close(value, expected[site][name], atol=1e-12, rtol=0, msg=f"{site}.{name}")


def test_summary_sub_batch_leaves_calls_without_a_head_dim_whole() -> None:
    """Only 4-D (B, H, T, E) calls have a batch dim the probe splits; a 3-D call is observed whole."""
    q, k, v = (t[:, 0] for t in _qkv(b=3))  # (B, T, E)
    stats = []
    for n in (1, None):
        with AttentionProbe(mode="summary", summary_batch=n) as probe:
            attention(q, k, v, is_causal=True).pow(2).sum().backward()
        stats.append(probe.summary()["calls.0.attn"])
    for name, value in stats[1].items():
        assert torch.equal(stats[0][name], value), name


def test_summary_batch_must_be_positive() -> None:
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="summary_batch"):
            AttentionProbe(mode="summary", summary_batch=bad)


@pytest.mark.parametrize("attach", ["module", "tensor"])
def test_head_probe_on_a_module_returning_a_tuple_says_what_it_can_watch(attach: str) -> None:
    lstm = nn.LSTM(4, 3, batch_first=True)
    x = torch.randn(2, 5, 4)
    if attach == "module":  # refused when attached: nn.LSTM returns (output, (h, c))
        with pytest.raises(TypeError, match=r"LSTM returns a tuple.*one tensor of logits or distances"):
            HeadProbe(lstm).__enter__()
    else:  # a module of unknown output type is checked at its first forward
        wrapper = nn.Sequential(lstm)  # its output is LSTM's tuple
        with (
            unchecked(),
            HeadProbe(wrapper) as probe,
            pytest.raises(TypeError, match=r"one tensor of logits.*Sequential returned a tuple"),
        ):
            wrapper(x)
        assert not probe._handles and not wrapper._forward_hooks  # no hook left behind
