r"""Bayesian wind tunnels: tasks whose posterior predictive is known exactly (arXiv 2512.22471 and 2512.22473).

Each task is a seeded generator of batches. A batch carries the tokens, the positions where the model
predicts, and the exact posterior predictive at each of them, computed in float64, so a trained model can be
measured in bits against the right answer.

Bijection elimination (2512.22471, task 1). Each sequence draws a fresh uniform permutation :math:`\pi` of
V symbols. Keys are tokens 0..V-1, values V..2V-1; the sequence is
:math:`k_1, \pi(k_1)+V, k_2, \pi(k_2)+V, \ldots` and at every key position the model predicts the value. The
posterior of :math:`\pi(k_t)` is a delta when :math:`k_t` was seen before, otherwise uniform over the values
not yet used. Without replacement (L = V - 1 pairs) :math:`H_{Bayes}(t) = \log_2(V - t + 1)` bits.

HMM filtering (2512.22471, task 2). A fresh 5-state, 5-symbol HMM per sequence, its matrices spelled out as
probability tokens, then (OBS, o_t) pairs; the target at o_t is the filtering posterior
:math:`p(s_t \mid o_{1:t})` from the forward algorithm in log space on the rounded matrices.

Sticky Markov chain (2512.22473). A ring of 8 symbols observed through Gaussian noise; the Bayes predictive is
a forward filter, and the minimum achievable loss is the conditional entropy of the transition matrix.
"""

import math
from typing import Any, NamedTuple

import torch
from jaxtyping import Float, Int
from torch import Tensor

from implicit_em.windtunnel.metrics import evaluate_predictions

__all__ = [
    "Batch",
    "BijectionTask",
    "HMMFilteringTask",
    "StickyMarkovTask",
    "StickySequence",
    "bijection_entropy_without_replacement",
    "bijection_no_context_mae",
    "bijection_posterior",
    "hmm_forward_filter",
    "round_stochastic_rows",
    "sticky_transition_matrix",
]


class Batch(NamedTuple):
    """One batch of a wind-tunnel task.

    Attributes:
        tokens: input tokens, shape (B, T), int64.
        positions: the P positions (same for every sequence) whose output is scored, shape (P,), int64.
        posterior: exact posterior predictive at those positions, shape (B, P, C), float64.
        labels: the sampled class at each scored position, shape (B, P), or None for soft-target tasks.
    """

    tokens: Tensor
    positions: Tensor
    posterior: Tensor
    labels: Tensor | None


def _check_generator(generator: torch.Generator | None) -> torch.Generator:
    if generator is None:
        return torch.Generator().manual_seed(torch.seed() % 2**63)
    return generator


def _uniform_permutations(batch_size: int, n: int, generator: torch.Generator) -> Tensor:
    """Uniform random permutations of 0..n-1, one per row, shape (B, n)."""
    return torch.argsort(torch.rand(batch_size, n, generator=generator), dim=1)


# ---------------------------------------------------------------------------------------------- bijection


def bijection_posterior(keys: Int[Tensor, "b l"], values: Int[Tensor, "b l"], n_symbols: int) -> Tensor:
    """Exact posterior of the value at each key position of a bijection sequence, shape (B, L, V), float64.

    A key seen earlier in the sequence fixes its value (a delta). A new key's value is uniform over the values
    not used so far: the map is a bijection, so the used values are exactly those of the distinct keys seen.
    """
    if keys.shape != values.shape or keys.dim() != 2:
        raise ValueError(f"keys and values must both be (B, L), got {tuple(keys.shape)} and {tuple(values.shape)}")
    seen = (keys[:, :, None] == keys[:, None, :]).tril(diagonal=-1).any(dim=2)  # (B, L): key repeats an earlier one
    onehot = torch.nn.functional.one_hot(values, n_symbols).to(torch.float64)  # (B, L, V)
    used = (onehot.cumsum(dim=1) - onehot) > 0  # (B, L, V): value shown before position t
    free = (~used).to(torch.float64)
    uniform = free / free.sum(dim=2, keepdim=True)
    return torch.where(seen[:, :, None], onehot, uniform)


def bijection_entropy_without_replacement(n_symbols: int, n_pairs: int | None = None) -> Tensor:
    """Closed form :math:`H_{Bayes}(t) = \\log_2(V - t + 1)` bits for t = 1..L (keys without replacement)."""
    n_pairs = n_symbols - 1 if n_pairs is None else n_pairs
    t = torch.arange(1, n_pairs + 1, dtype=torch.float64)
    return torch.log2(n_symbols - t + 1)


def bijection_no_context_mae(n_symbols: int, n_pairs: int | None = None, replacement: bool = False) -> float:
    r"""Exact expected entropy MAE (bits) of the predictor that ignores context (uniform over all V values).

    The uniform predictor has entropy :math:`\log_2 V \ge H_{Bayes}(t)`, so the per-sample and mean-curve
    protocols agree: the MAE is :math:`\frac1L \sum_t (\log_2 V - E[H_{Bayes}(t)])`. Without replacement
    :math:`H_{Bayes}(t) = \log_2(V-t+1)`. With replacement a dynamic programme over m, the number of distinct
    keys seen, gives the expectation: a repeat (probability m/V) has entropy 0, a new key :math:`\log_2(V-m)`.
    For V = 20, L = 19 this gives 1.1073 bits without replacement and 1.8490 bits with (the notes print
    1.848).
    """
    if n_symbols < 2:
        raise ValueError(f"n_symbols must be >= 2, got {n_symbols}")
    n_pairs = n_symbols - 1 if n_pairs is None else n_pairs
    log_v = math.log2(n_symbols)
    if not replacement:
        if n_pairs > n_symbols:
            raise ValueError(f"without replacement n_pairs must be <= n_symbols, got {n_pairs} > {n_symbols}")
        return float((log_v - bijection_entropy_without_replacement(n_symbols, n_pairs)).mean())
    p_m = [1.0] + [0.0] * n_symbols  # distribution of the number of distinct keys seen before step t
    total = 0.0
    for _ in range(n_pairs):
        expected_h = sum(p * (n_symbols - m) / n_symbols * math.log2(n_symbols - m) for m, p in enumerate(p_m) if p)
        total += log_v - expected_h
        nxt = [0.0] * (n_symbols + 1)
        for m, p in enumerate(p_m):
            if p:
                nxt[m] += p * m / n_symbols
                if m < n_symbols:
                    nxt[m + 1] += p * (n_symbols - m) / n_symbols
        p_m = nxt
    return total / n_pairs


class BijectionTask:
    """Bijection elimination with V symbols and L key-value pairs (default L = V - 1).

    Args:
        n_symbols: V, the number of keys and of values (vocabulary 2V).
        n_pairs: L, pairs per sequence; defaults to V - 1.
        replacement: draw keys with replacement (repeats must be detected) instead of without.
    """

    def __init__(self, n_symbols: int = 20, n_pairs: int | None = None, replacement: bool = False) -> None:
        if n_symbols < 2:
            raise ValueError(f"n_symbols must be >= 2, got {n_symbols}")
        n_pairs = n_symbols - 1 if n_pairs is None else n_pairs
        if n_pairs < 1 or (not replacement and n_pairs > n_symbols):
            raise ValueError(f"n_pairs must be in 1..{n_symbols} without replacement (>= 1 with), got {n_pairs}")
        self.n_symbols = n_symbols
        self.n_pairs = n_pairs
        self.replacement = replacement

    @property
    def vocab_size(self) -> int:
        return 2 * self.n_symbols

    @property
    def n_classes(self) -> int:
        return self.n_symbols

    def seq_len(self) -> int:
        return 2 * self.n_pairs

    def no_context_mae(self) -> float:
        """Entropy MAE in bits of the uniform, context-free predictor (the MLP floor), computed exactly."""
        return bijection_no_context_mae(self.n_symbols, self.n_pairs, self.replacement)

    def oracle_numbers(self, eval_batches: dict[str, Batch] | None = None) -> dict[str, Any]:
        """Reference predictor, computed, never typed in: the no-context oracle's entropy MAE, exactly.

        ``eval_batches`` is not needed (the number is exact); it is taken so every task is called the same way.
        """
        return {"no_context_entropy_mae": self.no_context_mae()}

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Draw ``batch_size`` sequences; every key position is scored."""
        g = _check_generator(generator)
        v, n = self.n_symbols, self.n_pairs
        perm = _uniform_permutations(batch_size, v, g)  # (B, V): pi
        if self.replacement:
            keys = torch.randint(0, v, (batch_size, n), generator=g)  # (B, L)
        else:
            keys = _uniform_permutations(batch_size, v, g)[:, :n]  # (B, L)
        values = perm.gather(1, keys)  # (B, L)
        tokens = torch.stack((keys, values + v), dim=2).reshape(batch_size, 2 * n)  # (B, 2L)
        positions = torch.arange(0, 2 * n, 2)
        return Batch(tokens, positions, bijection_posterior(keys, values, v), values)

    def __repr__(self) -> str:
        return f"BijectionTask(n_symbols={self.n_symbols}, n_pairs={self.n_pairs}, replacement={self.replacement})"


# ---------------------------------------------------------------------------------------------- HMM filtering

_PROB_MIN_HUNDREDTHS = 5  # probability tokens 0.05 .. 1.00, i.e. 96 tokens


def _token_probability(tokens: Tensor) -> Tensor:
    """Probability token -> probability (float64): token i stands for (i + 5) / 100."""
    return (tokens.double() + _PROB_MIN_HUNDREDTHS) / 100


def round_stochastic_rows(p: Float[Tensor, "*batch s"], floor: float = 0.05) -> Tensor:
    """Floor rows at ``floor``, renormalise, round to hundredths keeping each row's sum at exactly 1.

    Rounding is largest-remainder; an entry that renormalisation pushed below the floor is raised back to it
    by taking one hundredth at a time from the row's largest entry. Returns integer hundredths (int64).
    """
    floor_h = round(floor * 100)
    if p.shape[-1] * floor_h > 100:
        raise ValueError(f"a floor of {floor} is impossible with {p.shape[-1]} entries per row")
    q = torch.clamp(p, min=floor)
    q = q / q.sum(dim=-1, keepdim=True)
    scaled = q * 100
    h = torch.floor(scaled).to(torch.int64)
    short = 100 - h.sum(dim=-1, keepdim=True)  # how many hundredths to hand out, per row
    rank = torch.argsort(torch.argsort(scaled - h, dim=-1, descending=True), dim=-1)  # rank of the remainder
    h = h + (rank < short).to(torch.int64)
    for _ in range(p.shape[-1] * floor_h):  # bounded: each pass raises every too-small row by one hundredth
        low = h.min(dim=-1, keepdim=True)
        need = low.values < floor_h
        if not need.any():
            break
        hi = h.argmax(dim=-1, keepdim=True)
        h = h.scatter_add(-1, low.indices, need.to(torch.int64))
        h = h.scatter_add(-1, hi, -need.to(torch.int64))
    return h


def hmm_forward_filter(
    log_transition: Float[Tensor, "b s s"],
    log_emission: Float[Tensor, "b s o"],
    observations: Int[Tensor, "b k"],
    log_initial: Float[Tensor, "b s"] | None = None,
) -> Tensor:
    r"""Filtering posteriors :math:`p(s_t \mid o_{1:t})` by the forward algorithm in log space, (B, K, S).

    .. math::  \log\alpha_t(j) = \log E_{j,o_t} + \mathrm{logsumexp}_i(\log\alpha_{t-1}(i) + \log A_{ij})

    with :math:`\alpha_1(j) \propto \pi_j E_{j,o_1}`; each step is normalised, so the recursion returns
    posteriors directly. ``log_initial`` defaults to the uniform distribution.
    """
    b, s, _ = log_transition.shape
    if log_initial is None:
        log_initial = torch.full((b, s), -math.log(s), dtype=log_transition.dtype)
    batch_index = torch.arange(b)
    out = []
    log_alpha = log_initial
    for t in range(observations.shape[1]):
        if t > 0:
            log_alpha = torch.logsumexp(log_alpha[:, :, None] + log_transition, dim=1)  # (B, S)
        log_alpha = log_alpha + log_emission[batch_index, :, observations[:, t]]  # (B, S)
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=1, keepdim=True)
        out.append(log_alpha)
    return torch.stack(out, dim=1).exp()


def _sample_categorical(probs: Tensor, generator: torch.Generator) -> Tensor:
    """One draw per row of ``probs`` (B, S) by inverting the CDF."""
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)
    return (probs.cumsum(dim=1) < u).sum(dim=1).clamp(max=probs.shape[1] - 1)


class HMMFilteringTask:
    """HMM filtering with a fresh HMM per sequence, its matrices spelled out as tokens.

    Tokens: probability tokens 0..95 for 0.05..1.00; markers TRANS, EMIT, SEP, OBS; observation symbols.
    Sequence: the 52-token header (TRANS, the 25 transition entries row by row, EMIT, the 25 emission
    entries), then SEP, then (OBS, o_t) for t = 1..K. The model predicts at every o_t token; the target is the soft
    filtering posterior over the hidden states.

    Args:
        n_obs: K, the number of observations per sequence (20 to train; 30 and 50 test length generalisation).
        n_states, n_symbols: S and the number of observation symbols (5 and 5 in the paper).
        floor: the floor on matrix entries before rounding (0.05).
    """

    n_prob_tokens = 96

    def __init__(self, n_obs: int = 20, n_states: int = 5, n_symbols: int = 5, floor: float = 0.05) -> None:
        if n_obs < 1:
            raise ValueError(f"n_obs must be >= 1, got {n_obs}")
        if n_states < 2 or n_symbols < 2:
            raise ValueError(f"need at least 2 states and 2 symbols, got {n_states} and {n_symbols}")
        if max(n_states, n_symbols) * floor > 1:
            raise ValueError(f"floor {floor} is impossible with rows of {max(n_states, n_symbols)} entries")
        self.n_obs = n_obs
        self.n_states = n_states
        self.n_symbols = n_symbols
        self.floor = floor
        self.trans_token = self.n_prob_tokens
        self.emit_token = self.n_prob_tokens + 1
        self.sep_token = self.n_prob_tokens + 2
        self.obs_token = self.n_prob_tokens + 3
        self.symbol_offset = self.n_prob_tokens + 4

    @property
    def vocab_size(self) -> int:
        return self.symbol_offset + self.n_symbols

    @property
    def n_classes(self) -> int:
        return self.n_states

    @property
    def header_len(self) -> int:
        return 2 + self.n_states * self.n_states + self.n_states * self.n_symbols

    def seq_len(self, n_obs: int | None = None) -> int:
        return self.header_len + 1 + 2 * (self.n_obs if n_obs is None else n_obs)

    def with_length(self, n_obs: int) -> "HMMFilteringTask":
        """The same task with K = ``n_obs`` observations (for length generalisation)."""
        return HMMFilteringTask(n_obs, self.n_states, self.n_symbols, self.floor)

    def _random_rows(self, batch_size: int, n_rows: int, n_cols: int, g: torch.Generator) -> Tensor:
        e = -torch.log(torch.rand(batch_size, n_rows, n_cols, generator=g, dtype=torch.float64))  # Dirichlet(1)
        return round_stochastic_rows(e / e.sum(dim=-1, keepdim=True), self.floor)  # hundredths

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        g = _check_generator(generator)
        s, o, k = self.n_states, self.n_symbols, self.n_obs
        trans_h = self._random_rows(batch_size, s, s, g)  # (B, S, S) hundredths
        emit_h = self._random_rows(batch_size, s, o, g)  # (B, S, O)
        transition, emission = trans_h.double() / 100, emit_h.double() / 100
        state = torch.randint(0, s, (batch_size,), generator=g)
        batch_index = torch.arange(batch_size)
        obs = []
        for t in range(k):
            if t > 0:
                state = _sample_categorical(transition[batch_index, state], g)
            obs.append(_sample_categorical(emission[batch_index, state], g))
        observations = torch.stack(obs, dim=1)  # (B, K)
        posterior = hmm_forward_filter(transition.log(), emission.log(), observations)  # (B, K, S)

        def col(token: int) -> Tensor:
            return torch.full((batch_size, 1), token, dtype=torch.int64)

        body = torch.stack((col(self.obs_token).expand(-1, k), observations + self.symbol_offset), dim=2)
        tokens = torch.cat(
            (
                col(self.trans_token),
                trans_h.reshape(batch_size, -1) - _PROB_MIN_HUNDREDTHS,
                col(self.emit_token),
                emit_h.reshape(batch_size, -1) - _PROB_MIN_HUNDREDTHS,
                col(self.sep_token),
                body.reshape(batch_size, 2 * k),
            ),
            dim=1,
        )
        positions = torch.arange(self.header_len + 2, self.seq_len(), 2)  # the o_t tokens
        return Batch(tokens, positions, posterior, None)

    def decode_matrices(self, tokens: Int[Tensor, "b t"]) -> tuple[Tensor, Tensor]:
        """Transition (B, S, S) and emission (B, S, O) matrices read back from the header tokens (float64)."""
        s, o = self.n_states, self.n_symbols
        trans = _token_probability(tokens[:, 1 : 1 + s * s]).reshape(-1, s, s)
        emit = _token_probability(tokens[:, 2 + s * s : 2 + s * s + s * o]).reshape(-1, s, o)
        return trans, emit

    def emission_only_posterior(self, batch: Batch) -> Tensor:
        """Baseline p(s_t | o_t) with a uniform prior (ignores the transitions and the past), (B, K, S).

        It is the best a model can do that reads only the emission matrix and the current symbol: the yardstick
        a transformer must beat to show it filters.
        """
        _, emit = self.decode_matrices(batch.tokens)
        obs = batch.tokens[:, batch.positions] - self.symbol_offset  # (B, K)
        lik = emit.transpose(1, 2).gather(1, obs[:, :, None].expand(-1, -1, self.n_states))  # (B, K, S)
        return lik / lik.sum(dim=-1, keepdim=True)

    def oracle_numbers(self, eval_batches: dict[str, Batch] | None = None) -> dict[str, Any]:
        """Reference predictors, computed, never typed in: on each evaluation set, the uniform predictor and the
        emission-only predictor p(s_t | o_t), as ``{name: {predictor: {"entropy_mae_per_sample", "kl"}}}``."""
        out: dict[str, Any] = {}
        for name, b in (eval_batches or {}).items():
            uniform = torch.full_like(b.posterior, 1.0 / self.n_states)
            out[name] = {}
            for label, p in (("uniform", uniform), ("emission_only", self.emission_only_posterior(b))):
                m = evaluate_predictions(p, b.posterior)
                out[name][label] = {"entropy_mae_per_sample": m.entropy_mae_per_sample, "kl": m.kl}
        return out

    def __repr__(self) -> str:
        return f"HMMFilteringTask(n_obs={self.n_obs}, n_states={self.n_states}, n_symbols={self.n_symbols})"


# ---------------------------------------------------------------------------------------------- sticky chain


def sticky_transition_matrix(n_symbols: int = 8, stay: float = 0.3) -> Tensor:
    """Ring transition matrix: ``stay`` on the diagonal, the rest proportional to 1/circular distance."""
    if n_symbols < 2 or not 0.0 <= stay < 1.0:
        raise ValueError(f"need n_symbols >= 2 and 0 <= stay < 1, got {n_symbols} and {stay}")
    i = torch.arange(n_symbols)
    dist = (i[:, None] - i[None, :]).abs()
    dist = torch.minimum(dist, n_symbols - dist).to(torch.float64)
    off = torch.where(dist > 0, 1.0 / dist.clamp(min=1), torch.zeros_like(dist))
    off = off / off.sum(dim=1, keepdim=True) * (1.0 - stay)
    return off + stay * torch.eye(n_symbols, dtype=torch.float64)


class StickySequence(NamedTuple):
    """A sticky-chain sequence: inputs x (T, D), next-symbol targets y (T,), y_0, Bayes predictive (T, C)."""

    inputs: Tensor
    targets: Tensor
    initial: Tensor
    posterior: Tensor


class StickyMarkovTask:
    r"""The sticky Markov chain of 2512.22473: x_t = mu_{y_{t-1}} + eps_t, predict y_t.

    The Bayes predictive :math:`p(y_t \mid x_{1:t}) = \sum_s p(y_{t-1} = s \mid x_{1:t}) A_{s, y_t}` comes from
    a forward filter with Gaussian emissions; :meth:`minimum_loss` is the row-averaged conditional entropy of A,
    the loss of a predictor that knows y_{t-1} exactly (nats).

    Args:
        n_symbols, n_features, stay, length, noise: 8, 20, 0.3, T = 2000 and the noise standard deviation (1).
        means_seed: seed of the fixed 8 x 20 Gaussian mean matrix mu.
    """

    def __init__(
        self,
        n_symbols: int = 8,
        n_features: int = 20,
        stay: float = 0.3,
        length: int = 2000,
        noise: float = 1.0,
        means_seed: int = 0,
    ) -> None:
        if length < 1 or n_features < 1 or noise <= 0:
            raise ValueError(f"need length >= 1, n_features >= 1, noise > 0; got {length}, {n_features}, {noise}")
        self.transition = sticky_transition_matrix(n_symbols, stay)
        self.means = torch.randn(
            n_symbols, n_features, generator=torch.Generator().manual_seed(means_seed), dtype=torch.float64
        )
        self.length = length
        self.noise = noise

    def minimum_loss(self) -> float:
        """Row-averaged conditional entropy of the transition matrix, in nats."""
        a = self.transition
        return float(-(a * a.log()).sum(dim=1).mean())

    def sample(self, generator: torch.Generator | None = None) -> StickySequence:
        g = _check_generator(generator)
        n, d = self.means.shape
        y = [int(torch.randint(0, n, (1,), generator=g))]
        for _ in range(self.length):
            y.append(int(_sample_categorical(self.transition[y[-1]][None], g)))
        ys = torch.tensor(y)
        eps = torch.randn(self.length, d, generator=g, dtype=torch.float64) * self.noise
        x = self.means[ys[:-1]] + eps  # x_t observes y_{t-1}
        log_lik = -0.5 * ((x[:, None, :] - self.means[None]) ** 2).sum(-1) / self.noise**2  # (T, C)
        log_emission = log_lik[None].transpose(1, 2)  # (1, C, T): the "symbol" of step t is t itself
        filt = hmm_forward_filter(self.transition.log()[None], log_emission, torch.arange(self.length)[None])[0]
        return StickySequence(x, ys[1:], ys[0], filt @ self.transition)

    def __repr__(self) -> str:
        n = self.transition.shape[0]
        return f"StickyMarkovTask(n_symbols={n}, length={self.length}, noise={self.noise})"
