"""Wind-tunnel models and metrics: shapes, causality, probe-able attention, parameter matching, bits."""

import math

import pytest
import torch
from torch import nn

from implicit_em.windtunnel.metrics import entropy_bits, evaluate_predictions, kl_bits, predictive
from implicit_em.windtunnel.models import (
    CausalSelfAttention,
    CausalTransformer,
    PrefixMLP,
    TokenMLP,
    count_parameters,
    matched_lstm,
    matched_mlp,
    matched_prefix_mlp,
)


def _transformer(**kw: int) -> CausalTransformer:
    torch.manual_seed(0)
    return CausalTransformer(vocab_size=40, n_classes=20, max_len=38, **kw)


def test_transformer_logits_shape() -> None:
    model = _transformer()
    assert model(torch.randint(0, 40, (3, 38))).shape == (3, 38, 20)


def test_transformer_is_causal() -> None:
    model = _transformer().double()
    x = torch.randint(0, 40, (2, 38))
    y = x.clone()
    y[:, 20:] = (y[:, 20:] + 7) % 40  # change only the future of position 19
    torch.testing.assert_close(model(x)[:, :20], model(y)[:, :20], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(model(x)[:, 20:], model(y)[:, 20:])


def test_attention_matches_sdpa() -> None:
    """The block's attention goes through implicit_em.probes.attention; it equals torch's fused sdpa."""
    torch.manual_seed(1)
    attn = CausalSelfAttention(16, 4).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    q, k, v = attn.qkv(x).split(16, dim=2)
    q, k, v = (z.view(2, 7, 4, 4).transpose(1, 2) for z in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attn.proj(ref.transpose(1, 2).reshape(2, 7, 16))
    torch.testing.assert_close(attn(x), expected, rtol=1e-12, atol=1e-12)


def test_transformer_rejects_too_long_input() -> None:
    with pytest.raises(ValueError, match="max_len"):
        _transformer()(torch.zeros(1, 39, dtype=torch.int64))


def test_mlp_ignores_context() -> None:
    torch.manual_seed(0)
    mlp = TokenMLP(40, 20, 38)
    x = torch.randint(0, 40, (2, 38))
    y = x.clone()
    y[:, :10] = (y[:, :10] + 3) % 40
    torch.testing.assert_close(mlp(x)[:, 10:], mlp(y)[:, 10:])


def test_prefix_mlp_is_a_linear_layer_on_the_flattened_zero_padded_one_hot_prefix() -> None:
    """Two paths, one answer: the per-slot embedding + cumsum equals Linear(onehot prefix, zero-padded)."""
    torch.manual_seed(0)
    vocab, t_max, hidden = 7, 6, 5
    mlp = PrefixMLP(vocab, 4, t_max, hidden).double()
    nn.init.normal_(mlp.bias)  # nonzero, so the test sees it
    tokens = torch.randint(0, vocab, (3, t_max))
    onehot = nn.functional.one_hot(tokens, vocab).double()  # (B, T, V)
    mask = torch.ones(t_max, t_max).tril().double()  # (T, T): slot u is visible at position t iff u <= t
    flat = (mask[None, :, :, None] * onehot[:, None, :, :]).reshape(3, t_max, t_max * vocab)  # (B, T, T·V)
    weight = mlp.slot.weight  # (T·V, hidden): row u·V + s reads slot u holding token s
    expected = mlp.net(flat @ weight + mlp.bias)
    torch.testing.assert_close(mlp(tokens), expected, rtol=1e-12, atol=1e-12)


def test_prefix_mlp_is_causal_and_sees_the_context_the_token_mlp_does_not() -> None:
    torch.manual_seed(0)
    mlp = PrefixMLP(40, 20, 38).double()
    x = torch.randint(0, 40, (2, 38))
    y = x.clone()
    y[:, :10] = (y[:, :10] + 3) % 40  # change the first ten tokens only
    assert not torch.allclose(mlp(x)[:, 10:], mlp(y)[:, 10:])  # later positions see the change (TokenMLP: equal)
    z = x.clone()
    z[:, 20:] = (z[:, 20:] + 7) % 40  # change only the future of position 19
    torch.testing.assert_close(mlp(x)[:, :20], mlp(z)[:, :20], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="max_len"):
        mlp(torch.zeros(1, 39, dtype=torch.int64))


@pytest.mark.parametrize(("d_model", "n_layers"), [(64, 2), (32, 1), (192, 6)])
def test_mlp_and_lstm_parameter_counts_within_ten_percent(d_model: int, n_layers: int) -> None:
    ref = count_parameters(
        CausalTransformer(40, 20, 38, n_layers=n_layers, n_heads=4, d_model=d_model, d_ff=4 * d_model)
    )
    mlp = matched_mlp(ref, 40, 20, 38, d_model)
    lstm = matched_lstm(ref, 40, 20, d_model)
    prefix = matched_prefix_mlp(ref, 40, 20, 38)
    assert abs(count_parameters(mlp) - ref) / ref < 0.10
    assert abs(count_parameters(lstm) - ref) / ref < 0.10
    assert abs(count_parameters(prefix) - ref) / ref < 0.10


def test_lstm_logits_shape() -> None:
    lstm = matched_lstm(10_000, 40, 20)
    assert lstm(torch.randint(0, 40, (2, 9))).shape == (2, 9, 20)


# ------------------------------------------------------------------------------------------------ metrics


def test_entropy_bits_closed_forms() -> None:
    p = torch.tensor([[0.25] * 4, [1.0, 0, 0, 0], [0.5, 0.5, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(entropy_bits(p), torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64))


def test_kl_bits_closed_form_and_zero_at_equality() -> None:
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    assert kl_bits(p, q).item() == pytest.approx(1.0)
    assert kl_bits(q, q).item() == pytest.approx(0.0, abs=1e-15)


def test_mean_curve_protocol_lets_errors_cancel() -> None:
    bayes = torch.tensor([[[0.5, 0.5]], [[0.9, 0.1]]], dtype=torch.float64)
    model = torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]]], dtype=torch.float64)  # errors of opposite sign
    m = evaluate_predictions(model, bayes)
    h = entropy_bits(torch.tensor([0.9, 0.1], dtype=torch.float64)).item()
    assert m.entropy_mae_per_sample == pytest.approx(1 - h)
    assert m.entropy_mae_mean_curve == pytest.approx(0.0, abs=1e-15)
    assert m.kl > 0


def test_uniform_predictor_scores_the_no_context_floor_on_bijection() -> None:
    from implicit_em.windtunnel.tasks import BijectionTask

    task = BijectionTask(20)
    batch = task.sample(8, torch.Generator().manual_seed(0))
    uniform = torch.full_like(batch.posterior, 1 / 20)
    m = evaluate_predictions(uniform, batch.posterior)
    assert m.entropy_mae_per_sample == pytest.approx(task.no_context_mae(), rel=1e-12)
    assert m.kl == pytest.approx(task.no_context_mae(), rel=1e-12)  # KL(U_remaining ‖ U_all) = log2 ratio
    assert m.cross_entropy == pytest.approx(math.log2(20), rel=1e-12)


def test_predictive_softmax_and_normalised_sigmoid() -> None:
    z = torch.tensor([[0.0, math.log(3.0)]])
    torch.testing.assert_close(predictive(z, "softmax"), torch.tensor([[0.25, 0.75]]))
    torch.testing.assert_close(predictive(z, "sigmoid"), torch.tensor([[0.5, 0.75]]) / 1.25)
    with pytest.raises(ValueError, match="loss"):
        predictive(z, "hinge")
