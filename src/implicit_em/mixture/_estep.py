r"""The E-step of the EM fitters, in one place: which back-end computes it is decided here, once.

The E-step of a Gaussian mixture on quadratic features (``_stats``) is two matrix products per chunk of rows:
the log-joint scores Aᵀφ (K, B) and, after the softmax over components, the statistics Rφᵀ (K, P), summed in
float64 into a :class:`~implicit_em.mixture._stats.Summary` (pomegranate's ``summarize``; the M-step is
``_stats.from_summaries``). Two back-ends compute it, chosen by the compute dtype alone (:func:`fused`):

- **float64: the reference**, :func:`~implicit_em.mixture._stats.summarize` chunk by chunk, bitwise what sklearn
  fidelity, the golden fits and the audit's records were computed with;
- **float32: the fused pass** of :mod:`~implicit_em.mixture._fused` (circulant features into reused buffers,
  oneDNN's GEMM, worker threads over a pass), equal to the reference to float32 round-off.

Three shapes of work use them: a pass over all the data (:func:`pass_summary`: batch EM's iteration;
:func:`pass_loglik`: the exact log-likelihood a stochastic fit ends with, without the statistics product), and
one mini-batch at a time with buffers kept for the fit (:class:`Summarizer`: online EM's steps). gd's float32
step (``_gd_fast.FastStep``) runs the same fused workspace inside its analytic backward; scoring
(``predict``, ``score_samples``) needs per-row outputs and uses ``_stats.weighted_log_prob``.
"""

from collections.abc import Iterable

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em.mixture._fused import Batch, BatchSummarizer, fused_pass_loglik, fused_pass_summary
from implicit_em.mixture._stats import Summary, log_normalize, summarize, weighted_log_prob, weighted_sum

__all__ = ["Summarizer", "fused", "pass_loglik", "pass_summary"]


def fused(dtype: torch.dtype) -> bool:
    """Whether the E-step in this compute dtype runs on the fused back-end (float32) or the float64 reference."""
    return dtype == torch.float32


def pass_summary(
    batches: Iterable[Batch], a: Float[Tensor, "p k"], shift: Float[Tensor, " d"], lookahead: bool = True
) -> Summary | None:
    """The summed statistics (float64) of every row of ``batches`` under the score matrix ``a`` (P, K) of
    :func:`~implicit_em.mixture._stats.score_matrix`, in ``a``'s dtype; None when there were no batches.
    A batch is (B, D) rows, or a pair (rows, their weights (B,)): a weighted row counts that many times.
    ``lookahead=False``: a batch's work is done before the next is drawn (a stream reusing its buffer)."""
    if fused(a.dtype):
        return fused_pass_summary(batches, a, shift, lookahead=lookahead)
    total: Summary | None = None
    for batch in batches:
        x, w = batch if isinstance(batch, tuple) else (batch, None)
        part, _ = summarize(x, a, shift, w)
        total = part if total is None else total + part
    return total


def pass_loglik(
    batches: Iterable[Batch], a: Float[Tensor, "p k"], shift: Float[Tensor, " d"], lookahead: bool = True
) -> tuple[float, float]:
    """Σ log p(x_i) over every row of ``batches`` (summed in float64) and the number of rows: the pass of
    :func:`pass_summary` without the statistics (weighted batches: Σ w log p and Σ w)."""
    if fused(a.dtype):
        return fused_pass_loglik(batches, a, shift, lookahead=lookahead)
    total, n = 0.0, 0.0
    for batch in batches:
        x, w = batch if isinstance(batch, tuple) else (batch, None)
        log_p = log_normalize(weighted_log_prob(x, a, shift).T)[1]
        total += float(log_p.double().sum() if w is None else weighted_sum(log_p, w))
        n += x.shape[0] if w is None else float(w.double().sum())
    return total, n


class Summarizer:
    """The statistics of one batch at a time (online EM's mini-batches), with the fused back-end's buffers
    allocated once for batches of up to ``rows`` rows and kept from call to call."""

    def __init__(self, rows: int, n_features: int, n_components: int, dtype: torch.dtype, device: torch.device):
        self._fused = BatchSummarizer(rows, n_features, n_components, dtype, device) if fused(dtype) else None

    def __call__(
        self,
        x: Float[Tensor, "b d"],
        a: Float[Tensor, "p k"],
        shift: Float[Tensor, " d"],
        weights: Float[Tensor, " b"] | None = None,
    ) -> Summary:
        """The summed statistics (float64) of the rows of x (each counted ``weights`` times) under the score
        matrix a (P, K)."""
        if self._fused is None:
            return summarize(x, a, shift, weights)[0]
        return self._fused(x, a, shift, weights)

    @classmethod
    def for_batch(cls, x: Float[Tensor, "b d"], a: Float[Tensor, "p k"]) -> "Summarizer":
        """One for the single batch x (``partial_fit``'s step, which keeps no buffers between calls)."""
        return cls(x.shape[0], x.shape[1], a.shape[1], a.dtype, a.device)
