"""Wind-tunnel tasks: exact posteriors against brute force and closed forms (arXiv 2512.22471 and 2512.22473)."""

import itertools
import math

import numpy as np
import pytest
import torch

from implicit_em.windtunnel.metrics import entropy_bits, evaluate_predictions
from implicit_em.windtunnel.tasks import (
    BijectionTask,
    HMMFilteringTask,
    StickyMarkovTask,
    bijection_entropy_without_replacement,
    bijection_no_context_mae,
    hmm_forward_filter,
    round_stochastic_rows,
    sticky_transition_matrix,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _brute_force_bijection_posterior(keys: list[int], values: list[int], v: int) -> np.ndarray:
    """Enumerate all V! permutations; keep those consistent with the pairs shown so far; average the value."""
    out = np.zeros((len(keys), v))
    perms = list(itertools.permutations(range(v)))
    for t, k in enumerate(keys):
        consistent = [p for p in perms if all(p[keys[s]] == values[s] for s in range(t))]
        for p in consistent:
            out[t, p[k]] += 1.0 / len(consistent)
    return out


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("v", [3, 4, 5])
def test_bijection_posterior_matches_enumeration_of_permutations(v: int, replacement: bool) -> None:
    task = BijectionTask(v, n_pairs=v if not replacement else v + 2, replacement=replacement)
    batch = task.sample(6, _gen(v))
    keys, values = batch.tokens[:, 0::2], batch.tokens[:, 1::2] - v
    for b in range(6):
        expected = _brute_force_bijection_posterior(keys[b].tolist(), values[b].tolist(), v)
        np.testing.assert_allclose(batch.posterior[b].numpy(), expected, atol=1e-12)


def test_bijection_tokens_and_labels_are_consistent() -> None:
    task = BijectionTask(6)
    batch = task.sample(8, _gen())
    keys, values = batch.tokens[:, 0::2], batch.tokens[:, 1::2]
    assert keys.max() < 6 and values.min() >= 6
    torch.testing.assert_close(values - 6, batch.labels)
    assert (keys.sort(dim=1).values[:, 1:] != keys.sort(dim=1).values[:, :-1]).all()  # no repeated key
    torch.testing.assert_close(batch.positions, torch.arange(0, 10, 2))
    # the label always has positive posterior mass
    assert (batch.posterior.gather(2, batch.labels[:, :, None]) > 0).all()


def test_bijection_entropy_without_replacement_is_log2_of_remaining_values() -> None:
    v = 7
    batch = BijectionTask(v).sample(5, _gen())
    h = entropy_bits(batch.posterior)  # (B, L)
    closed = bijection_entropy_without_replacement(v)
    torch.testing.assert_close(h, closed.expand_as(h), rtol=1e-12, atol=1e-12)
    assert closed[0] == pytest.approx(math.log2(7)) and closed[-1] == pytest.approx(1.0)


def test_bijection_with_replacement_repeats_have_zero_entropy() -> None:
    batch = BijectionTask(5, n_pairs=12, replacement=True).sample(10, _gen(3))
    keys = batch.tokens[:, 0::2]
    h = entropy_bits(batch.posterior)
    repeat = (keys[:, :, None] == keys[:, None, :]).tril(diagonal=-1).any(dim=2)
    assert repeat.any()
    assert torch.all(h[repeat].abs() < 1e-12)
    assert torch.all(h[~repeat] > 0.0) or torch.all(h[~repeat] >= 0.0)


def test_no_context_oracle_values_of_the_notes() -> None:
    assert bijection_no_context_mae(20) == pytest.approx(1.107, abs=5e-4)
    # the notes print 1.848; the exact expectation is 1.84904 (a Monte Carlo test below confirms it)
    assert bijection_no_context_mae(20, replacement=True) == pytest.approx(1.849, abs=5e-4)


@pytest.mark.parametrize("replacement", [False, True])
def test_no_context_oracle_matches_monte_carlo(replacement: bool) -> None:
    v = 20
    batch = BijectionTask(v, replacement=replacement).sample(20000, _gen(1))
    mae = (math.log2(v) - entropy_bits(batch.posterior)).abs().mean().item()
    # standard error of the mean is below 2e-3 bits at this size
    assert mae == pytest.approx(bijection_no_context_mae(v, replacement=replacement), abs=6e-3)


def test_bijection_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="n_symbols"):
        BijectionTask(1)
    with pytest.raises(ValueError, match="n_pairs"):
        BijectionTask(4, n_pairs=5)


def test_bijection_sampling_is_reproducible() -> None:
    a, b = BijectionTask(8).sample(4, _gen(7)), BijectionTask(8).sample(4, _gen(7))
    torch.testing.assert_close(a.tokens, b.tokens)


# ------------------------------------------------------------------------------------------------ HMM


def _naive_filter(transition: np.ndarray, emission: np.ndarray, obs: list[int]) -> np.ndarray:
    """p(s_t | o_1..t) by summing the joint over every state path (probability space, float64)."""
    s = transition.shape[0]
    out = np.zeros((len(obs), s))
    for t in range(len(obs)):
        for path in itertools.product(range(s), repeat=t + 1):
            p = 1.0 / s * emission[path[0], obs[0]]
            for u in range(1, t + 1):
                p *= transition[path[u - 1], path[u]] * emission[path[u], obs[u]]
            out[t, path[-1]] += p
        out[t] /= out[t].sum()
    return out


def _decode_header(task: HMMFilteringTask, tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    s, o = task.n_states, task.n_symbols
    assert tokens[0] == task.trans_token and tokens[1 + s * s] == task.emit_token
    trans = (tokens[1 : 1 + s * s].double() + 5) / 100
    emit = (tokens[2 + s * s : 2 + s * s + s * o].double() + 5) / 100
    return trans.reshape(s, s).numpy(), emit.reshape(s, o).numpy()


def test_hmm_posterior_matches_naive_filter_on_the_spelled_out_matrices() -> None:
    task = HMMFilteringTask(n_obs=4)
    batch = task.sample(5, _gen(2))
    for b in range(5):
        trans, emit = _decode_header(task, batch.tokens[b])
        obs = (batch.tokens[b, batch.positions] - task.symbol_offset).tolist()
        np.testing.assert_allclose(batch.posterior[b].numpy(), _naive_filter(trans, emit, obs), rtol=1e-10)


def test_decode_matrices_and_emission_only_baseline() -> None:
    task = HMMFilteringTask(n_obs=5)
    batch = task.sample(4, _gen(6))
    trans, emit = task.decode_matrices(batch.tokens)
    for b in range(4):
        t_ref, e_ref = _decode_header(task, batch.tokens[b])
        np.testing.assert_allclose(trans[b].numpy(), t_ref, rtol=1e-15)
        np.testing.assert_allclose(emit[b].numpy(), e_ref, rtol=1e-15)
    baseline = task.emission_only_posterior(batch)
    # with a uniform initial state, the first filtering posterior is exactly Bayes' rule on o_1
    torch.testing.assert_close(baseline[:, 0], batch.posterior[:, 0], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(baseline[:, 1:], batch.posterior[:, 1:])


def test_hmm_sequence_layout() -> None:
    task = HMMFilteringTask(n_obs=6)
    batch = task.sample(3, _gen())
    assert task.header_len == 52 and batch.tokens.shape == (3, 52 + 1 + 12)
    assert task.vocab_size == 96 + 4 + 5 and int(batch.tokens.max()) < task.vocab_size
    assert (batch.tokens[:, 52] == task.sep_token).all()
    assert (batch.tokens[:, batch.positions - 1] == task.obs_token).all()
    assert (batch.tokens[:, batch.positions] >= task.symbol_offset).all()
    assert batch.labels is None and batch.posterior.shape == (3, 6, 5)


def test_hmm_matrices_are_rounded_floored_and_stochastic() -> None:
    task = HMMFilteringTask(n_obs=2)
    batch = task.sample(200, _gen(5))
    for b in range(0, 200, 20):
        trans, emit = _decode_header(task, batch.tokens[b])
        for m in (trans, emit):
            np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-12)
            assert m.min() >= 0.05 - 1e-12 and m.max() <= 1.0


def test_round_stochastic_rows_keeps_sums_and_floor() -> None:
    p = torch.tensor([[0.001, 0.001, 0.001, 0.001, 0.996], [0.2, 0.2, 0.2, 0.2, 0.2], [0.333, 0.333, 0.334, 0, 0]])
    h = round_stochastic_rows(p.double())
    assert (h.sum(dim=1) == 100).all() and (h >= 5).all()
    assert h[1].tolist() == [20, 20, 20, 20, 20]


def test_forward_filter_one_step_is_bayes_rule() -> None:
    trans = torch.full((1, 2, 2), 0.5, dtype=torch.float64)
    emit = torch.tensor([[[0.9, 0.1], [0.2, 0.8]]], dtype=torch.float64)
    post = hmm_forward_filter(trans.log(), emit.log(), torch.tensor([[0]]))
    torch.testing.assert_close(post[0, 0], torch.tensor([0.9 / 1.1, 0.2 / 1.1], dtype=torch.float64))


# ------------------------------------------------------------------------------------------------ sticky chain


def test_sticky_transition_matrix_shape_of_the_paper() -> None:
    a = sticky_transition_matrix(8, 0.3)
    torch.testing.assert_close(a.sum(dim=1), torch.ones(8, dtype=torch.float64))
    torch.testing.assert_close(a.diagonal(), torch.full((8,), 0.3, dtype=torch.float64))
    # off-diagonal proportional to 1/circular distance: distance 1 is twice distance 2, four times distance 4
    assert a[0, 1] == pytest.approx(2 * a[0, 2]) and a[0, 1] == pytest.approx(4 * a[0, 4])
    assert a[0, 1] == pytest.approx(a[0, 7])


def test_sticky_minimum_loss_is_conditional_entropy() -> None:
    task = StickyMarkovTask()
    a = task.transition.numpy()
    expected = float(np.mean([-(row * np.log(row)).sum() for row in a]))
    assert task.minimum_loss() == pytest.approx(expected, rel=1e-12)
    assert 0 < task.minimum_loss() < math.log(8)


def test_sticky_bayes_predictive_approaches_minimum_loss_when_noise_is_small() -> None:
    task = StickyMarkovTask(length=400, noise=0.05)
    seq = task.sample(_gen(4))
    assert seq.inputs.shape == (400, 20) and seq.targets.shape == (400,)
    torch.testing.assert_close(seq.posterior.sum(dim=1), torch.ones(400, dtype=torch.float64))
    # almost noiseless inputs reveal y_{t-1}: the predictive is the transition row of the previous symbol
    prev = torch.cat((seq.initial[None], seq.targets[:-1]))
    torch.testing.assert_close(seq.posterior, task.transition[prev], atol=1e-8, rtol=0)


def test_sticky_predictive_is_bayes_under_noise() -> None:
    """With noise, the predictive equals a naive filter over y_{t-1} written with explicit Gaussian densities."""
    task = StickyMarkovTask(length=6, noise=3.0, n_features=3)
    seq = task.sample(_gen(8))
    a, mu = task.transition.numpy(), task.means.numpy()
    lik = np.exp(-0.5 * ((seq.inputs.numpy()[:, None, :] - mu[None]) ** 2).sum(-1) / 9.0)  # (T, C)
    belief = np.full(8, 1 / 8)  # p(y_0)
    for t in range(6):
        if t > 0:
            belief = belief @ a  # p(y_{t-1} | x_1..t-1)
        belief = belief * lik[t]
        belief /= belief.sum()
        np.testing.assert_allclose(seq.posterior[t].numpy(), belief @ a, rtol=1e-9)


def test_bijection_oracle_is_the_exact_no_context_mae() -> None:
    task = BijectionTask(5, replacement=True)
    assert task.oracle_numbers() == {"no_context_entropy_mae": bijection_no_context_mae(5, 4, replacement=True)}


def test_hmm_oracles_are_the_uniform_and_emission_only_predictors_on_each_set() -> None:
    task = HMMFilteringTask(n_obs=4)
    batches = {"K=4": task.sample(16, torch.Generator().manual_seed(0))}
    batches["K=6"] = task.with_length(6).sample(16, torch.Generator().manual_seed(1))
    out = task.oracle_numbers(batches)
    assert list(out) == ["K=4", "K=6"]
    for name, b in batches.items():
        uniform = evaluate_predictions(torch.full_like(b.posterior, 0.2), b.posterior)
        emission = evaluate_predictions(task.emission_only_posterior(b), b.posterior)
        assert out[name]["uniform"] == {"entropy_mae_per_sample": uniform.entropy_mae_per_sample, "kl": uniform.kl}
        assert out[name]["emission_only"] == {
            "entropy_mae_per_sample": emission.entropy_mae_per_sample,
            "kl": emission.kl,
        }
        assert out[name]["emission_only"]["kl"] < out[name]["uniform"]["kl"]
