"""The shared sticky-chain testbed (issue 25 §1): shapes, the exact posterior against an independent float64 forward
filter, labels sampled from the chain, independent streams per seed, the model's named attention weights, the gates."""

import dataclasses
import math

import pytest
import torch

from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.sticky import (
    StickyTestbed,
    StickyTransformer,
    attention_layers,
    fit,
    forward_filter,
    parameter_groups,
    plateau_change,
    plateau_drop,
)
from implicit_em.windtunnel.tasks import hmm_forward_filter

SMALL = StickyTestbed(length=12, n_features=6, d_model=16, n_heads=2, d_ff=32, eval_size=64, steps=40, eval_every=10)


def test_sample_shapes_and_types() -> None:
    b = SMALL.sample(5, torch.Generator().manual_seed(0))
    assert b.x.shape == (5, 12, 6) and b.x.dtype == torch.float32
    assert b.y.shape == (5, 12) and b.y.dtype == torch.int64
    assert b.posterior.shape == (5, 12, 8) and b.posterior.dtype == torch.float64
    assert b.no_context.shape == (5, 12, 8) and b.states.shape == (5, 13)
    torch.testing.assert_close(b.posterior.sum(-1), torch.ones(5, 12, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(b.y, b.states[:, 1:])


def _reference_predictive(tb: StickyTestbed, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The Bayes predictive from the wind tunnel's own forward filter (tasks.hmm_forward_filter), and p(y_t | x_t)
    by Bayes' rule written out, both float64, one sequence at a time, from the Gaussian density itself."""
    mu, a = tb.means / tb.noise, tb.transition
    out, nc = [], []
    for seq in x.double():
        log_lik = torch.distributions.Normal(mu[None], 1.0).log_prob(seq[:, None, :]).sum(-1)  # (T, C), normalised
        emission = log_lik.T[None]  # (1, C, T): the "symbol" of step t is t
        filt = hmm_forward_filter(a.log()[None], emission, torch.arange(seq.shape[0])[None])[0]
        out.append(filt @ a)
        lik = log_lik.exp()
        nc.append((lik / lik.sum(-1, keepdim=True)) @ a)
    return torch.stack(out), torch.stack(nc)


@pytest.mark.parametrize("seed", [0, 1])
def test_posterior_is_the_exact_forward_filter_in_float64(seed: int) -> None:
    tb = dataclasses.replace(SMALL, stay=0.7, noise=2.0)
    b = tb.sample(4, torch.Generator().manual_seed(seed))
    ref, ref_nc = _reference_predictive(tb, b.x)
    # x is returned in float32; the reference reads those same values, so the comparison is float64 round-off
    b64 = tb.sample(4, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(b64.posterior, b.posterior, rtol=0, atol=0)  # deterministic per generator
    mine = forward_filter(tb.log_likelihood(b.x), tb.transition) @ tb.transition
    torch.testing.assert_close(mine, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(
        torch.softmax(tb.log_likelihood(b.x), -1) @ tb.transition, ref_nc, rtol=1e-10, atol=1e-12
    )
    # the batch's own posterior (from float64 x before the float32 cast) agrees to float32 input precision
    torch.testing.assert_close(b.posterior, ref, rtol=0, atol=1e-4)
    torch.testing.assert_close(b.no_context, ref_nc, rtol=0, atol=1e-4)


def test_first_step_posterior_is_the_no_context_one() -> None:
    b = SMALL.sample(8, torch.Generator().manual_seed(3))
    torch.testing.assert_close(b.posterior[:, 0], b.no_context[:, 0], rtol=1e-12, atol=1e-14)


def test_labels_are_samples_from_the_chain_with_the_posteriors_frequencies() -> None:
    """Over many draws the sampled y_t falls in each class as often as the Bayes predictive says it should
    (calibration), while a label set equal to the posterior's argmax would not be: the labels are samples."""
    tb = dataclasses.replace(SMALL, length=8, stay=0.8, noise=3.0)
    b = tb.sample(6000, torch.Generator().manual_seed(11))
    p = b.posterior.reshape(-1, 8)
    y = b.y.reshape(-1)
    onehot = torch.nn.functional.one_hot(y, 8).double()
    n = y.numel()
    # per class: sum of predicted probabilities vs the count of that label (binomial-ish spread)
    expected, observed = p.sum(0), onehot.sum(0)
    assert torch.all((observed - expected).abs() <= 5 * expected.sqrt())
    # binned calibration of the probability given to the realised class set: E[1{y=c}] = E[p_c]
    conf = p.max(-1).values
    hit = onehot.gather(1, p.argmax(-1, keepdim=True))[:, 0]
    for lo, hi in ((0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0)):
        sel = (conf >= lo) & (conf < hi)
        if int(sel.sum()) > 500:
            assert abs(float(hit[sel].mean() - conf[sel].mean())) <= 4 * math.sqrt(0.25 / int(sel.sum()))
    assert float(hit.mean()) < 0.99  # not the argmax: sampled labels disagree with the mode often
    assert n == 6000 * 8
    # the transitions of the sampled states follow A
    s = b.states
    counts = torch.zeros(8, 8, dtype=torch.float64)
    counts.index_put_(
        (s[:, :-1].reshape(-1), s[:, 1:].reshape(-1)),
        torch.ones(s[:, 1:].numel(), dtype=torch.float64),
        accumulate=True,
    )
    freq = counts / counts.sum(1, keepdim=True)
    assert float((freq - tb.transition).abs().max()) < 0.02


def test_streams_are_independent_per_seed_and_reproducible() -> None:
    a0 = SMALL.sample(4, SMALL.train_generator(0))
    a0_again = SMALL.sample(4, SMALL.train_generator(0))
    a1 = SMALL.sample(4, SMALL.train_generator(1))
    e0 = SMALL.eval_batch(0)
    assert torch.equal(a0.x, a0_again.x) and torch.equal(a0.y, a0_again.y)
    assert not torch.equal(a0.x, a1.x) and not torch.equal(a0.y, a1.y)
    assert not torch.equal(a0.x, e0.x[:4])
    # consecutive batches of one stream are fresh draws
    g = SMALL.train_generator(0)
    first, second = SMALL.sample(4, g), SMALL.sample(4, g)
    assert not torch.equal(first.x, second.x)
    # no seed's training stream starts where another seed's held-out stream does
    starts = {int(SMALL.train_generator(s).initial_seed()) for s in range(50)}
    starts_eval = {int(SMALL.eval_generator(s).initial_seed()) for s in range(50)}
    assert not starts & starts_eval and len(starts) == 50


def test_model_maps_inputs_to_logits_and_names_its_attention_weights() -> None:
    m = SMALL.model(0)
    assert isinstance(m, StickyTransformer)
    b = SMALL.sample(3, torch.Generator().manual_seed(0))
    assert m(b.x).shape == (3, 12, 8)
    groups = parameter_groups(m)
    assert {k: len(v) for k, v in groups.items()} == {
        "W_Q": 4,
        "W_K": 4,
        "W_V": 4,
        "W_O": 4,
        "other": len(list(m.parameters())) - 16,
    }
    ids = [id(p) for g in groups.values() for p in g]
    assert sorted(ids) == sorted(id(p) for p in m.parameters())  # a partition
    assert all(any(layer.W_V.weight is p for p in groups["W_V"]) for layer in attention_layers(m))
    # the same seed gives the same init, another seed another; the global RNG is left alone
    state = torch.random.get_rng_state()
    m2, m3 = SMALL.model(0), SMALL.model(1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), m2.parameters(), strict=True))
    assert not torch.equal(m.inp.weight, m3.inp.weight)


def test_model_is_causal() -> None:
    m = SMALL.model(0).double()
    x = torch.randn(2, 12, 6, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 7:] += 1.0
    torch.testing.assert_close(m(x)[:, :7], m(x2)[:, :7], rtol=0, atol=1e-12)
    assert not torch.allclose(m(x)[:, 7:], m(x2)[:, 7:])


def test_kl_of_the_posterior_itself_is_zero_and_the_no_context_kl_is_positive() -> None:
    b = SMALL.eval_batch(0)

    class Oracle(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return b.posterior.log()

    assert SMALL.kl_bits(Oracle(), b) == pytest.approx(0.0, abs=1e-12)
    nc = SMALL.no_context_kl_bits(b)
    assert nc == pytest.approx(float(kl_bits(b.posterior, b.no_context).mean()), rel=1e-12) and nc > 0.05
    assert SMALL.tracks(0.0, b) and not SMALL.tracks(nc, b)
    assert SMALL.tracking_bar(b) == pytest.approx(0.1 * nc)


def test_plateau_change_drop_and_gate() -> None:
    assert plateau_change([1.0, 1.0, 1.0, 1.0, 1.0]) == pytest.approx(0.0)
    assert plateau_change([4.0, 3.0, 2.0, 1.0, 0.5]) == pytest.approx(0.5)  # windows of one: 1.0 -> 0.5
    assert plateau_drop([4.0, 3.0, 2.0, 1.0, 0.5]) == pytest.approx(0.5)
    assert math.isnan(plateau_change([1.0])) and math.isnan(plateau_drop([1.0]))
    h = [1.0] * 8 + [0.5, 0.5]  # windows of two: (1.0, 1.0) -> (0.5, 0.5)
    assert plateau_change(h) == pytest.approx(0.5) and plateau_drop(h) == pytest.approx(0.5)
    b = SMALL.eval_batch(0)
    bar = SMALL.plateau_bar(b)
    assert bar == pytest.approx(0.25 * 0.1 * SMALL.no_context_kl_bits(b))
    assert SMALL.plateaued([0.3] * 8 + [0.3 - 0.5 * bar] * 2, b)
    assert not SMALL.plateaued([0.3] * 8 + [0.3 - 2 * bar] * 2, b)
    assert not SMALL.plateaued([1.0], b)


def test_fit_trains_online_and_records_the_history() -> None:
    m = SMALL.model(0)
    ev = SMALL.eval_batch(0)
    before = SMALL.kl_bits(m, ev)
    r = fit(SMALL, m, 0, eval_batch=ev)
    assert r.steps == [10, 20, 30, 40] and len(r.kl_history) == 4
    assert r.kl_history[-1] == pytest.approx(SMALL.kl_bits(m, ev))
    assert r.kl_history[-1] < before  # 40 steps move it towards Bayes
    # the same seed reproduces the run exactly
    r2 = fit(SMALL, SMALL.model(0), 0, eval_batch=ev)
    assert r2.kl_history == r.kl_history


def test_lr_schedule() -> None:
    tb = dataclasses.replace(SMALL, lr=1.0, warmup_steps=10, steps=110, schedule="constant")
    assert tb.lr_at(0) == pytest.approx(0.1) and tb.lr_at(9) == pytest.approx(1.0) and tb.lr_at(100) == 1.0
    cos = dataclasses.replace(tb, schedule="cosine")
    assert cos.lr_at(10) == pytest.approx(1.0) and cos.lr_at(60) == pytest.approx(0.5) and cos.lr_at(110) < 1e-12
