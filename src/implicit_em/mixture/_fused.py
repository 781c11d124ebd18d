r"""The fused E-step and statistics of one EM pass: the float32 path of ``_em.full_pass``.

The same computation as :func:`implicit_em.mixture._stats.summarize` chunk after chunk, with the work of a chunk
cut to a handful of tensor operations on buffers allocated once per pass:

- **features in two operations.** With x̃ = (x − shift, 1) ∈ R^{D+1}, the quadratic features are the products
  x̃_a x̃_b for a ≤ b (x̃_a · 1 = x_a and 1 · 1 = 1 exactly), P = (D+1)(D+2)/2 of them. Taken in *circulant*
  order, x̃_a x̃_{(a+o) mod (D+1)} for the offsets o = 0, …, ⌊D/2⌋, they are one broadcast product of x̃ with a
  strided window onto (x̃, x̃): the subtraction writes both copies of x̃ᵀ, the product writes φᵀ (P, B) (plus
  one small product for the last half-offset when D + 1 is even). Every feature is bitwise the one of
  :func:`~implicit_em.mixture._stats.quadratic_features_t`; only the order of the rows differs, and the score
  matrix and the statistics are permuted to match (:func:`circulant_order`). The old path took D + 3
  operations and a fresh (P, B) buffer per chunk.
- **E-step GEMM** Aᵀφᵀ (K, B) and **statistics GEMM** R φ (K, P), the second on the chunk just written, while φ
  is in cache (4096 rows: 2.4 MB in float32 at D = 16), with ``torch.mm(..., out=)`` into fixed buffers; in
  float32 on CPU the E-step GEMM is oneDNN's linear kernel instead (:func:`_onednn_linear`, the one torch's
  inductor compiles linear layers to): on this skinny shape (K = 16 rows, P = 153 inner, B = 4096 columns) it
  ran 6-20% faster than MKL's (64-69 against 53-62 GFLOP/s on one thread) and gave the same products in every
  check;
- **normalisation** :func:`~implicit_em.mixture._stats.log_normalize` over the K rows (reductions along the
  contiguous B axis; its floor keeps subnormal responsibilities out of the statistics GEMM).
- **threads.** On CPU the chunks of a batch are shared between Python threads, one per intra-op thread, each
  running torch single-threaded (see :func:`fused_pass_summary`).

A score matrix of 2D + 1 rows (``diag`` and ``spherical``) is on the diagonal features [x², x, 1] instead
(:func:`~implicit_em.mixture._stats.is_diagonal`): two operations write them into the same buffers, in their own
order, and both GEMMs shrink from (D+1)(D+2)/2 columns to 2D + 1 (2,145 against 129 at D = 64).

Statistics are summed in the compute dtype within a chunk (one GEMM of at most 4096 rows) and in float64 across
chunks, as before. The result equals ``summarize``'s to round-off: tests/test_mixture_fused.py.
"""

import collections
import contextlib
import functools
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em.mixture._stats import Summary, _unpack, is_diagonal, log_normalize, weighted_sum

__all__ = [
    "SUB_CHUNK",
    "BatchSummarizer",
    "circulant_order",
    "feature_order",
    "fused_pass_loglik",
    "fused_pass_summary",
]

#: rows per fused chunk: φ (B, P) is 2.4 MB in float32 at D = 16, within L2 and L3 with the GEMMs' operands
SUB_CHUNK = 4096


@functools.lru_cache(maxsize=32)
def _circulant_order_cpu(n_features: int) -> Tensor:
    m = n_features + 1  # x̃ = (x, 1)
    q = n_features * (n_features + 1) // 2
    pairs = [(a, (a + o) % m) for o in range((m + 1) // 2) for a in range(m)]
    if m % 2 == 0:  # the last half-offset: its first m/2 pairs are new, the rest repeat them
        pairs += [(a, a + m // 2) for a in range(m // 2)]
    order = []
    for i, j in pairs:
        u, v = min(i, j), max(i, j)
        if v < n_features:  # x_u x_v: row-major upper triangle
            order.append(u * n_features - u * (u - 1) // 2 + (v - u))
        elif u < n_features:  # x_u · 1
            order.append(q + u)
        else:  # 1 · 1
            order.append(q + n_features)
    return torch.tensor(order, dtype=torch.long)


def circulant_order(n_features: int, device: torch.device | None = None) -> Tensor:
    """Index (P,): column c of the circulant features is column ``order[c]`` of ``quadratic_features``."""
    return _circulant_order_cpu(n_features).to(device)


def feature_order(n_features: int, n_params: int, device: torch.device | None = None) -> Tensor:
    """The workspace's column order for a score matrix of ``n_params`` rows: circulant for the quadratic features,
    their own for the diagonal ones."""
    if is_diagonal(n_params, n_features):
        return torch.arange(n_params, device=device)
    return circulant_order(n_features, device)


Linear = Callable[[Tensor, Tensor], Tensor]  #: (x, w) -> x wᵀ

#: what a pass reads: a batch of rows (B, D), or a batch and its rows' weights (B,)
Batch = Tensor | tuple[Tensor, Tensor]


@functools.lru_cache(maxsize=1)
def _onednn_linear() -> Linear | None:
    """torch's oneDNN linear kernel, ``torch.ops.mkldnn._linear_pointwise`` (x, w) -> x wᵀ, or None where this
    torch build lacks it or it does not give ``torch.mm``'s product on a small check (a private op of torch's:
    the kernel inductor calls for linear layers on CPU, so it is kept, but its name may change)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        op = torch.ops.mkldnn._linear_pointwise

        def linear(x: Tensor, w: Tensor) -> Tensor:
            out: Tensor = op(x, w, None, "none", [], "")
            return out

        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(3, 37, generator=g), torch.randn(29, 37, generator=g)
        for weight in (w, w.T.contiguous().T):  # a contiguous weight and a transposed view (the E-step's)
            if not torch.allclose(linear(x, weight), x @ w.T, rtol=1e-5, atol=1e-5):
                return None
        return linear
    except Exception:  # any failure (no such op, another signature): torch.mm is the fallback
        return None


def _linear_for(dtype: torch.dtype, device: torch.device) -> Linear | None:
    """The oneDNN kernel for float32 on CPU (where it ran faster than torch.mm), else None (torch.mm)."""
    return _onednn_linear() if dtype == torch.float32 and device.type == "cpu" else None


class _Workspace:
    """Buffers of one pass, allocated once and viewed as contiguous (·, B) blocks for any B ≤ ``rows``:
    x̃ twice (2(D+1), B), φᵀ (P, B), log p (K, B), Rφ (K, P). ``diagonal``: φ is the diagonal features
    (P = 2D + 1, written straight into φᵀ)."""

    def __init__(
        self,
        rows: int,
        n_features: int,
        n_components: int,
        dtype: torch.dtype,
        device: torch.device,
        diagonal: bool = False,
    ):
        m = n_features + 1
        self.diagonal = diagonal
        self.m, self.full, self.k = m, (m + 1) // 2, n_components
        self.p = 2 * n_features + 1 if diagonal else m * (m + 1) // 2
        self.rows = rows
        self._xt = torch.empty(0 if diagonal else 2 * m * rows, dtype=dtype, device=device)
        self._phi = torch.empty(self.p * rows, dtype=dtype, device=device)
        self._logp = torch.empty(n_components * rows, dtype=dtype, device=device)
        self.stats = torch.empty(n_components, self.p, dtype=dtype, device=device)
        self._rows = 0  # the B the 1 rows of x̃ were written for
        self._linear = _linear_for(dtype, device)

    def features(self, x: Float[Tensor, "b d"], shift: Float[Tensor, " d"]) -> Float[Tensor, "p b"]:
        """φ(x − shift)ᵀ in circulant order, (P, B), in the workspace (valid until the next call)."""
        b, d = x.shape
        if self.diagonal:
            return self._diagonal_features(x, shift)
        m, full = self.m, self.full
        xt = self._xt[: 2 * m * b].view(2 * m, b)
        if self._rows != b:
            xt[d::m] = 1  # rows D and 2D + 1: the constant of x̃, both copies
            self._rows = b
        torch.sub(x.T[None].expand(2, d, b), shift[:, None], out=xt.view(2, m, b)[:, :d])  # x̃ᵀ twice
        window = xt.as_strided((full, m, b), (b, b, 1), xt.storage_offset())  # [o, a] = x̃_{a+o}, (offsets, D+1, B)
        phi_t = self._phi[: self.p * b].view(self.p, b)
        torch.mul(xt[None, :m], window, out=phi_t[: full * m].view(full, m, b))
        if m % 2 == 0:  # the last half-offset
            torch.mul(xt[: m // 2], xt[m // 2 : m], out=phi_t[full * m :])
        return phi_t

    def _diagonal_features(self, x: Float[Tensor, "b d"], shift: Float[Tensor, " d"]) -> Float[Tensor, "p b"]:
        """φ_d(x − shift)ᵀ = [x̃², x̃, 1] (2D + 1, B) in the workspace: one subtraction, one product."""
        b, d = x.shape
        phi_t = self._phi[: self.p * b].view(self.p, b)
        if self._rows != b:
            phi_t[-1] = 1
            self._rows = b
        torch.sub(x.T, shift[:, None], out=phi_t[d : 2 * d])
        torch.mul(phi_t[d : 2 * d], phi_t[d : 2 * d], out=phi_t[:d])
        return phi_t

    def scores(self, phi_t: Float[Tensor, "p b"], a_t: Float[Tensor, "k p"]) -> Float[Tensor, "k b"]:
        """The E-step GEMM Aᵀφᵀ, log πₖ p(x_i | k) (K, B): oneDNN's kernel where :func:`_linear_for` gives it, else
        ``torch.mm`` into the workspace (valid until the next call)."""
        if self._linear is not None:
            return self._linear(a_t, phi_t.T)
        return torch.mm(a_t, phi_t, out=self._logp[: self.k * phi_t.shape[1]].view(self.k, -1))

    def responsibilities(self, phi_t: Float[Tensor, "p b"], a_t: Float[Tensor, "k p"]) -> tuple[Tensor, Tensor]:
        """r (K, B) and log p(x_i) (B,) from the E-step GEMM (:func:`~implicit_em.mixture._stats.log_normalize`)."""
        return log_normalize(self.scores(phi_t, a_t))

    def statistics(self, resp: Float[Tensor, "k b"], phi_t: Float[Tensor, "p b"]) -> Float[Tensor, "k p"]:
        """R φ (K, P) of one chunk in the compute dtype (valid until the next call). ``torch.mm``'s MKL: oneDNN's
        kernel, 5% faster on this sum over the chunk's rows, had 2-3× its round-off (7.5e-7 against 2.6e-7 of the
        largest statistic over 4096 rows, float32)."""
        return torch.mm(resp, phi_t.T, out=self.stats)

    def add(
        self,
        x: Float[Tensor, "b d"],
        a_t: Float[Tensor, "k p"],
        shift: Float[Tensor, " d"],
        s: Tensor | None,
        loglik: Tensor,
        weights: Tensor | None = None,
    ) -> None:
        """Add the rows of x, in chunks of at most ``rows``, to the float64 sums s (R φ, (K, P), circulant order;
        None: no statistics GEMM) and loglik (Σ log p, 0-dim): the compute dtype within a chunk, float64 across
        chunks. ``weights`` (B,): each row counts that many times (its responsibilities are scaled before the
        statistics GEMM)."""
        for start in range(0, x.shape[0], self.rows):
            phi_t = self.features(x[start : start + self.rows], shift)
            resp, log_norm = self.responsibilities(phi_t, a_t)
            if weights is None:
                if s is not None:
                    s += self.statistics(resp, phi_t)
                loglik += log_norm.sum(dtype=torch.float64)
                continue
            w = weights[start : start + self.rows]
            if s is not None:
                s += self.statistics(resp.mul_(w.to(resp.dtype)), phi_t)
            loglik += weighted_sum(log_norm, w)


def _summary(s: Float[Tensor, "k p"], loglik: Tensor, n: float, order: Tensor, n_features: int) -> Summary:
    """The :class:`~implicit_em.mixture._stats.Summary` of float64 sums in the workspace's ``order``."""
    s_std = torch.empty_like(s)
    s_std[:, order] = s  # back to quadratic_features' column order
    nk, sx, sxx = _unpack(s_std, n_features)
    return Summary(torch.tensor(float(n), dtype=torch.float64, device=s.device), nk, sx, sxx, loglik)


class BatchSummarizer:
    """:func:`~implicit_em.mixture._stats.summarize`'s statistics of one batch at a time through the fused E-step,
    its buffers kept from call to call: online EM's mini-batch steps in float32, whose
    batches are one chunk of at most ``rows`` rows, or a few. Single-threaded in Python (torch's intra-op
    threads run the operations), as gd's step (``_gd_fast.FastStep.statistics``)."""

    def __init__(self, rows: int, n_features: int, n_components: int, dtype: torch.dtype, device: torch.device):
        self._shape = (max(1, min(rows, SUB_CHUNK)), n_features, n_components, dtype, device)
        self._ws: dict[int, tuple[_Workspace, Tensor]] = {}  # per score-matrix rows: its workspace and order
        self.n_features = n_features

    def _workspace(self, n_params: int) -> tuple[_Workspace, Tensor]:
        if n_params not in self._ws:
            rows, d, k, dtype, device = self._shape
            ws = _Workspace(rows, d, k, dtype, device, diagonal=is_diagonal(n_params, d))
            self._ws[n_params] = ws, feature_order(d, n_params, device)
        return self._ws[n_params]

    def __call__(
        self,
        x: Float[Tensor, "b d"],
        a: Float[Tensor, "p k"],
        shift: Float[Tensor, " d"],
        weights: Float[Tensor, " b"] | None = None,
    ) -> Summary:
        """The summed statistics (float64) of the rows of x (each counted ``weights`` times) under the score
        matrix a (P, K), compute dtype."""
        ws, order = self._workspace(a.shape[0])
        a_t = a[order].T.contiguous()  # (K, P): columns in the workspace's order
        s = torch.zeros(a_t.shape, dtype=torch.float64, device=a.device)
        loglik = torch.zeros((), dtype=torch.float64, device=a.device)
        ws.add(x.to(a.dtype), a_t, shift.to(a.dtype), s, loglik, weights)
        n = float(x.shape[0]) if weights is None else float(weights.double().sum())
        return _summary(s, loglik, n, order, self.n_features)


class _Sums:
    """One worker's workspace and running float64 sums: Rφ (K, P), Σ log p, rows seen."""

    def __init__(self, rows: int, a_t: Tensor, n_features: int, statistics: bool = True) -> None:
        k, p = a_t.shape
        self.a_t = a_t
        self.ws = _Workspace(rows, n_features, k, a_t.dtype, a_t.device, diagonal=is_diagonal(p, n_features))
        self.s = torch.zeros(k, p, dtype=torch.float64, device=a_t.device) if statistics else None
        self.loglik = torch.zeros((), dtype=torch.float64, device=a_t.device)
        self.n = 0.0  # rows, or their summed weights

    def add(self, x: Float[Tensor, "b d"], shift: Float[Tensor, " d"], weights: Tensor | None = None) -> None:
        self.ws.add(x, self.a_t, shift, self.s, self.loglik, weights)
        self.n += float(x.shape[0]) if weights is None else float(weights.double().sum())


def _one_thread() -> None:
    torch.set_num_threads(1)


@contextlib.contextmanager
def _one_thread_per_op() -> Iterator[None]:
    """torch's intra-op thread count at 1 while the block runs (restored after, error or not)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fused_pass_summary(
    batches: Iterable[Batch],
    a: Float[Tensor, "p k"],
    shift: Float[Tensor, " d"],
    rows: int = SUB_CHUNK,
    workers: int | None = None,
    lookahead: bool = True,
) -> Summary | None:
    """The summed statistics (float64) of every row of ``batches`` ((B, D) tensors) under the score matrix
    ``a`` (P, K) of :func:`~implicit_em.mixture._stats.score_matrix` in the compute dtype, in chunks of at most
    ``rows`` rows; None when there were no batches.

    ``workers`` (default: torch's intra-op thread count on CPU, 1 elsewhere): on CPU with more than one, each
    batch is split into that many row blocks, one per worker thread, each summing its own chunks with torch's
    intra-op threads at 1 for the pass (measured 1.36× faster than two intra-op threads on the same chunks,
    whose skinny GEMMs and short element-wise ops scale poorly); the next batch is queued while one runs. Each
    worker sums its own blocks in order in float64 and the workers' sums are added in a fixed order, so the
    result does not depend on timing (it does on ``workers``, to round-off).

    ``lookahead=False`` waits for a batch's work before the next batch is drawn from ``batches``: for a stream
    whose producer may reuse one buffer for every batch (a user's iterable), which the queued batch would race.

    A batch may be a pair (x, weights): its rows then count ``weights`` times (n is their sum).
    """
    done = _pass(batches, a, shift, rows, workers, lookahead, statistics=True)
    if done is None:
        return None
    sums, order = done
    s = functools.reduce(operator.add, (w.s for w in sums if w.s is not None))
    loglik = functools.reduce(operator.add, (w.loglik for w in sums))
    return _summary(s, loglik, sum(w.n for w in sums), order, int(shift.numel()))


def fused_pass_loglik(
    batches: Iterable[Batch], a: Float[Tensor, "p k"], shift: Float[Tensor, " d"], lookahead: bool = True
) -> tuple[float, float]:
    """Σ log p(x_i) over every row of ``batches`` (float64) and the rows: :func:`fused_pass_summary`'s pass
    without its statistics GEMM (the exact log-likelihood a stochastic fit ends with)."""
    done = _pass(batches, a, shift, SUB_CHUNK, None, lookahead, statistics=False)
    if done is None:
        return 0.0, 0.0
    sums, _ = done
    return float(functools.reduce(operator.add, (w.loglik for w in sums))), sum(w.n for w in sums)


def _pass(
    batches: Iterable[Batch],
    a: Float[Tensor, "p k"],
    shift: Float[Tensor, " d"],
    rows: int,
    workers: int | None,
    lookahead: bool,
    statistics: bool,
) -> tuple[list[_Sums], Tensor] | None:
    """The workers' sums of one pass (see :func:`fused_pass_summary`) and the circulant order, or None."""
    it = iter(batches)
    first = next(it, None)
    if first is None:
        return None
    d = (first[0] if isinstance(first, tuple) else first).shape[1]
    order = feature_order(d, a.shape[0], a.device)
    a_t, shift_c = a[order].T.contiguous(), shift.to(a.dtype)  # (K, P): columns in the workspace's order
    if workers is None:
        workers = torch.get_num_threads() if a.device.type == "cpu" else 1
    sums = [_Sums(rows, a_t, d, statistics) for _ in range(workers)]
    with contextlib.ExitStack() as stack:
        queues: list[ThreadPoolExecutor] = []  # one single-thread queue per worker: its chunks in order
        in_flight: collections.deque[list[Future[None]]] = collections.deque()
        for batch in itertools.chain((first,), it):
            x, w = batch if isinstance(batch, tuple) else (batch, None)
            x = x.to(a.dtype)
            if not queues and (workers == 1 or x.shape[0] <= rows):  # one chunk: no threads to share it
                sums[0].add(x, shift_c, w)
                continue
            if not queues:  # the first batch worth sharing
                stack.enter_context(_one_thread_per_op())
                # each worker thread sets its own thread count too: OpenMP's is per thread, and a new thread's
                # GEMMs otherwise ran on two (measured: twice the worker's wall time in CPU time)
                queues = [stack.enter_context(ThreadPoolExecutor(1, initializer=_one_thread)) for _ in sums]
            block = -(-x.shape[0] // (workers * rows)) * rows  # rows per worker, a multiple of ``rows``
            parts = [x[i * block : (i + 1) * block] for i in range(workers)]
            part_w = [None if w is None else w[i * block : (i + 1) * block] for i in range(workers)]
            in_flight.append(
                [
                    q.submit(sum_.add, part, shift_c, pw)
                    for q, sum_, part, pw in zip(queues, sums, parts, part_w, strict=True)
                ]
            )
            if len(in_flight) > int(lookahead):  # two batches at most: the next one queued while this one runs
                for job in in_flight.popleft():
                    job.result()  # raises a worker's error here
        for jobs in in_flight:
            for job in jobs:
                job.result()
    return sums, order
