"""Data sources for the mixture fitters: arrays, tensors, memmaps, and iterables of batches.

Every fitter reads data through :class:`DataSource.batches`, which yields float tensors of shape (B, D) on the
compute device. In-memory arrays and tensors are sliced (optionally in a shuffled order); a ``np.memmap`` is read
one contiguous block at a time so memory does not grow with N; an iterable (a list or tuple of 2-D arrays or
tensors, a ``torch.utils.data.DataLoader``, any re-iterable object) is iterated once per pass and must be
re-iterable. A tensor that requires grad is read detached: nothing computed from it carries a graph.

Row weights (``sample_weight``) are one array beside X in memory, or, for a stream, in its batches: with
``sample_weight=IN_BATCHES`` every batch is a pair (x, w), as a DataLoader over ``TensorDataset(X, w)`` yields.

Values are checked (``_validation.check_values``: no NaN or inf, N·max|X|² within the compute dtype) once for
an in-memory array and per batch for memmaps and streams, before the cast to the compute dtype, by one reduction
without a temporary copy of the data. With ``missing=True`` (``missing="marginalize"``) a NaN is a missing value
and passes the check; a row with every feature missing, or an inf, does not.
"""

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from scipy.sparse import issparse
from torch import Tensor

from implicit_em.mixture import _distributed
from implicit_em.mixture._validation import check_magnitude, check_real_dtype, check_sample_weight, check_values

_MODEL_WIDTH = "the model expects"

#: ``sample_weight`` for a stream whose batches carry their rows' weights: each batch is a pair (x (B, D), w (B,))
IN_BATCHES = "in_batches"


def _as_tensor(batch: Any) -> Tensor:
    if isinstance(batch, list | tuple):  # DataLoader over a TensorDataset yields [x] or (x, y)
        if len(batch) == 0:
            raise ValueError("got an empty batch tuple from the data iterable")
        batch = batch[0]
    if isinstance(batch, Tensor):
        return batch.detach()
    array = np.asarray(batch)
    check_real_dtype("X", array.dtype)  # complex or object: a clear error, not torch's
    return torch.from_numpy(array)


def is_batch_list(x: Any) -> bool:
    """Whether X is a list or tuple of 2-D arrays or tensors, or of pairs (x, w) of them with their weights: a
    stream of batches, each (B, D).

    Unambiguous: a list of rows (sklearn's array-like) has 1-D rows, and a list of 2-D arrays cannot be a
    2-D array. A list that mixes 2-D batches with anything else raises ValueError.
    """
    if not isinstance(x, list | tuple) or len(x) == 0:
        return False
    two_d = [_batch_x(b) is not None for b in x]
    if all(two_d):
        return True
    if any(two_d):
        raise ValueError(
            "X is a list mixing 2-D batches with other elements; pass a list of 2-D arrays or tensors (batches of "
            "rows, each of shape (B, D)), or one 2-D array"
        )
    return False


def _batch_x(b: Any) -> Any:
    """The x of a list's element that is a batch (a 2-D array or tensor, or a pair (x, w) led by one), or None."""
    if isinstance(b, list | tuple) and len(b) == 2:
        b = b[0]
    return b if getattr(b, "ndim", None) == 2 and not issparse(b) else None


def tensor_output(x: Any) -> bool:
    """Whether results for X are tensors: for a tensor and for a stream, except a list of numpy batches."""
    if isinstance(x, Tensor):
        return True
    if isinstance(x, list | tuple):
        return is_batch_list(x) and any(isinstance(_batch_x(b), Tensor) for b in x)
    return not isinstance(x, np.ndarray) and hasattr(x, "__iter__") and not hasattr(x, "__array__")


def check_batch(x: Tensor, n_features: int | None, expected: str = _MODEL_WIDTH) -> None:
    """Raise ValueError for a batch that is not 2-D, not real, or has the wrong width (``expected`` says whose
    width: "the model expects"); its values are :func:`~implicit_em.mixture._validation.check_values`'s."""
    if x.dim() != 2:
        raise ValueError(
            f"Expected 2D array, got {x.dim()}D array of shape {tuple(x.shape)} instead; reshape your data "
            "with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample"
        )
    check_real_dtype("X", x.dtype)
    if n_features is not None and x.shape[1] != n_features:
        raise ValueError(f"X has {x.shape[1]} features, but {expected} {n_features} features")


class DataSource:
    """A uniform view of X for the fitters (see module docstring)."""

    def __init__(
        self,
        x: Any,
        device: torch.device,
        dtype: torch.dtype,
        n_features: int | None = None,
        expected: str = _MODEL_WIDTH,
        sample_weight: Any = None,
        missing: bool = False,
    ) -> None:
        self.device = device
        #: whether a NaN is a missing value (``missing="marginalize"``): allowed in the data, and the E-step
        #: integrates it out (``_missing``); the compute dtype is then float64
        self.missing = missing
        self.dtype = dtype
        self.kind: str
        self._data: Any
        self._expected = expected  # whose width n_features is, for the error message
        if isinstance(x, Tensor):
            self.kind, self._data = "tensor", x.detach()
        elif isinstance(x, np.memmap):
            self.kind, self._data = "memmap", x
        elif isinstance(x, np.ndarray):
            self.kind, self._data = "tensor", torch.from_numpy(np.ascontiguousarray(x))
        elif isinstance(x, Iterable) and not isinstance(x, str | bytes):
            if iter(x) is x:
                raise ValueError(
                    "X is a one-shot iterator; pass a re-iterable object (a list of batches or a DataLoader), "
                    "since EM needs several passes"
                )
            self.kind, self._data = "iterable", x
        else:
            raise ValueError(f"X must be an array, a tensor, a memmap or an iterable of batches, got {type(x)}")
        self.n_samples: int | None = None
        self.n_features = n_features
        if self.kind != "iterable":
            if self._data.ndim != 2:
                raise ValueError(
                    f"Expected 2D array, got {self._data.ndim}D array of shape {tuple(self._data.shape)} instead; "
                    "reshape your data with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a "
                    "single sample"
                )
            check_real_dtype("X", self._data.dtype)  # before any cast: complex would lose its imaginary part
            if n_features is not None and self._data.shape[1] != n_features:
                raise ValueError(f"X has {self._data.shape[1]} features, but {expected} {n_features} features")
            self.n_samples = int(self._data.shape[0])
            self.n_features = int(self._data.shape[1])
        self._checked = False
        self.layout: tuple[int, int] | None = None  # in a process group: (first global row, global rows)
        if self.kind == "tensor":  # check and convert once, not in every pass; checked before the cast
            check_values("X", self._data, self.n_samples or 0, dtype, missing)
            self._data = self._data.to(device=device, dtype=dtype)
            self._checked = True
        #: one float64 weight per row (``sample_weight``) of X in memory, or None: every row counts once
        self.weights: Tensor | None = None
        #: whether the stream's batches are (x, w) pairs (``sample_weight=IN_BATCHES``)
        self.stream_weighted = False
        if isinstance(sample_weight, str) and sample_weight == IN_BATCHES:
            if self.kind != "iterable":
                raise ValueError(
                    f'sample_weight="{IN_BATCHES}" reads the weights from a stream\'s batches, but X is in memory; '
                    "pass its weights as one array of shape (N,)"
                )
            self.stream_weighted = True
        elif sample_weight is not None:
            if self.kind == "iterable":
                raise ValueError(
                    "sample_weight as one array needs X in memory (an array, a tensor or a memmap); for a stream, "
                    f'yield (x, w) batches (a DataLoader over TensorDataset(X, w)), sample_weight="{IN_BATCHES}"'
                )
            w = check_sample_weight(sample_weight, self.n_samples)
            self.weights = torch.from_numpy(w).to(device)

    @property
    def weighted(self) -> bool:
        """Whether the rows carry weights (an array beside X, or in a stream's batches)."""
        return self.weights is not None or self.stream_weighted

    def weight_sum(self) -> float | None:
        """Σ w over this process's rows (one pass for a weighted stream), or None for unweighted data."""
        if self.weights is not None:
            return float(self.weights.double().sum())
        if not self.stream_weighted:
            return None
        return math.fsum(float(w.sum()) for _, w in self._stream() if w is not None)

    def _chunk(self, start: int, stop: int, check: bool = False) -> Tensor:
        part = self._data[start:stop]
        if self.kind == "memmap":
            part = np.array(part)  # a copy: memmaps may be read-only
            if check:
                check_values("X", part, self.n_samples or 0, self.dtype, self.missing, start)
            part = torch.from_numpy(part)
        return part.to(device=self.device, dtype=self.dtype, non_blocking=True)

    def batches(
        self, batch_size: int, generator: torch.Generator | None = None, check: bool = True
    ) -> Iterator[Tensor]:
        """One pass over the data in batches of ``batch_size`` rows (shuffled when a generator is given).

        Tensors are permuted row-wise; memmaps visit contiguous blocks in a random order; iterables are
        used in their own order. ``check`` validates every batch (finite, right width).
        """
        if self.kind == "iterable":
            for x, _ in self._stream(check):
                yield x
            return
        n = int(self.n_samples or 0)
        check = check and not self._checked
        starts = torch.arange(0, n, batch_size)
        if generator is not None and self.kind == "tensor":
            perm = torch.randperm(n, generator=generator).to(self._data.device)
            for s in starts.tolist():  # index_select: the rows advanced indexing copies, 4-5x faster on CPU
                yield self._data.index_select(0, perm[s : s + batch_size]).to(device=self.device, dtype=self.dtype)
            return
        if generator is not None:
            starts = starts[torch.randperm(len(starts), generator=generator)]
        for s in starts.tolist():
            yield self._chunk(s, s + batch_size, check=check)

    def _stream(self, check: bool = True) -> Iterator[tuple[Tensor, Tensor | None]]:
        """One pass over a stream: its batches on the compute device, each with its rows' weights (float64, on
        the device) when the batches carry them, else None; ``check`` validates every batch (finite, right width,
        weights as :func:`check_sample_weight` asks of the whole pass). Counts the rows (``n_samples``)."""
        seen, peak, mass = 0, 0.0, 0.0
        for raw in self._data:
            if self.stream_weighted:
                if not isinstance(raw, list | tuple) or len(raw) != 2:
                    raise ValueError(
                        f'with sample_weight="{IN_BATCHES}" every batch must be a pair (x, w), got '
                        f"{type(raw).__name__}" + (f" of length {len(raw)}" if isinstance(raw, list | tuple) else "")
                    )
                raw, raw_w = raw
            x = _as_tensor(raw)
            if check:
                check_batch(x, self.n_features, self._expected)
            if self.n_features is None:
                self.n_features, self._expected = int(x.shape[1]), "the first batch has"
            seen += int(x.shape[0])
            if check:  # the largest value so far against the rows so far: N·max|X|² as a whole array
                peak = max(peak, check_values("X", x, seen, self.dtype, self.missing, seen - int(x.shape[0])))
                check_magnitude("X", peak, seen, self.dtype)
            w = None
            if self.stream_weighted:
                w_np = _batch_weights(raw_w, int(x.shape[0]), seen - int(x.shape[0]))
                mass += float(w_np.sum())
                w = torch.from_numpy(w_np).to(self.device)
            yield x.to(device=self.device, dtype=self.dtype), w
        if self.stream_weighted and seen > 0 and mass == 0:
            raise ValueError("sample_weight is zero for every row; at least one row must have a positive weight")
        self.n_samples = seen

    def weighted_batches(self, batch_size: int) -> Iterator[Tensor | tuple[Tensor, Tensor]]:
        """:meth:`batches` in their order, each as (x, its rows' weights) when the data are weighted."""
        if self.stream_weighted:
            yield from self._stream()  # type: ignore[misc]  # every w is a tensor here
            return
        if self.weights is None:
            yield from self.batches(batch_size)
            return
        for start, x in zip(range(0, int(self.n_samples or 0), batch_size), self.batches(batch_size), strict=True):
            yield x, self.weights[start : start + batch_size]

    def join_group(self) -> None:
        """Place this process's rows in the global row index of a process group (rank order): sets ``layout``
        to (first global row, global rows). A stream is counted by one pass (which also validates it). From
        then on :meth:`sample` and :meth:`step_batches` are global, and collective: every process calls them."""
        if self.n_samples is None:
            for _ in self.batches(0):
                pass
        counts = _distributed.all_gather_counts(int(self.n_samples or 0), self.device)
        widths = _distributed.all_gather_counts(-1 if self.n_features is None else self.n_features, self.device)
        if self.n_features is None and max(widths) > 0:  # a process whose stream was empty: the others' width
            self.n_features = max(widths)
        rank = _distributed.rank()
        self.layout = (sum(counts[:rank]), sum(counts))

    def step_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Tensor]:
        """The mini-batches of one epoch of a stochastic fitter: :meth:`batches` shuffled by ``generator``, or in
        a process group this process's rows of the global batches (collective: see :meth:`_group_batches`)."""
        if self.layout is None:
            return self.batches(batch_size, generator=generator)
        return self._group_batches(batch_size, generator)

    def weighted_step_batches(
        self, batch_size: int, generator: torch.Generator
    ) -> Iterator[tuple[Tensor, Tensor | None]]:
        """:meth:`step_batches` as (x, its rows' weights or None): the same draws from ``generator`` and the same
        batches, so unit weights give an unweighted fit's steps."""
        if not self.weighted:
            for x in self.step_batches(batch_size, generator):
                yield x, None
            return
        if self.stream_weighted:  # its own order; in a process group then empty batches for ever
            for x, w in self._stream():
                if self.layout is None or x.shape[0] > 0:
                    yield x, w
            if self.layout is not None:
                empty = torch.zeros(0, int(self.n_features or 0), device=self.device, dtype=self.dtype)
                while True:
                    yield empty, torch.zeros(0, dtype=torch.float64, device=self.device)
            return
        if self.layout is not None:  # the global batches' rows on this process, with their weights
            yield from self._group_weighted_batches(batch_size, generator)
            return
        n, w = int(self.n_samples or 0), self.weights
        assert w is not None
        starts = torch.arange(0, n, batch_size)
        if self.kind == "tensor":
            perm = torch.randperm(n, generator=generator).to(self._data.device)
            for s in starts.tolist():
                idx = perm[s : s + batch_size]
                yield self._data.index_select(0, idx).to(device=self.device, dtype=self.dtype), w[idx.to(w.device)]
            return
        for s in starts[torch.randperm(len(starts), generator=generator)].tolist():
            yield self._chunk(s, s + batch_size, check=not self._checked), w[s : s + batch_size]

    def _group_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Tensor]:
        """An array, tensor or memmap: the global batches the single process draws from the concatenated data
        (``torch.randperm`` of the global rows from the shared generator, ``batch_size`` at a time), each
        restricted to this process's rows (possibly none: a (0, D) batch), in the permutation's order. A stream
        (never shuffled): its own batches, then empty ones for ever; a global step is every process's next
        batch, and the caller stops when the all-reduced row count is zero."""
        assert self.layout is not None
        d = int(self.n_features or 0)
        empty = torch.zeros(0, d, device=self.device, dtype=self.dtype)
        if self.kind == "iterable":
            for x in self.batches(batch_size):
                if x.shape[0] > 0:
                    yield x
            while True:
                yield empty
        for mine in self._group_indices(batch_size, generator):
            yield self._rows(mine) if mine.size else empty

    def _group_indices(self, batch_size: int, generator: torch.Generator) -> Iterator[np.ndarray]:
        """In memory: per global batch (``torch.randperm`` of the global rows from the shared generator,
        ``batch_size`` at a time) the local indices of this process's rows in it, in the permutation's order."""
        assert self.layout is not None
        offset, total = self.layout
        n = int(self.n_samples or 0)
        perm = torch.randperm(total, generator=generator)
        for s in range(0, total, batch_size):
            p = perm[s : s + batch_size]
            yield (p[(p >= offset) & (p < offset + n)] - offset).numpy()

    def _group_weighted_batches(
        self, batch_size: int, generator: torch.Generator
    ) -> Iterator[tuple[Tensor, Tensor | None]]:
        """:meth:`_group_batches` of weighted rows (in memory: a stream carries no weights), each batch with its
        rows' weights: the same global batches, so unit weights give the unweighted steps."""
        assert self.weights is not None
        w = self.weights
        empty = torch.zeros(0, int(self.n_features or 0), device=self.device, dtype=self.dtype)
        for mine in self._group_indices(batch_size, generator):
            yield (self._rows(mine) if mine.size else empty), w[torch.from_numpy(mine).to(w.device)]

    def _rows(self, idx: np.ndarray) -> Tensor:
        """The rows at local indices ``idx`` (an array, tensor or memmap), in that order, checked if a memmap."""
        if self.kind == "tensor":
            rows = self._data.index_select(0, torch.from_numpy(idx).to(self._data.device))  # as in batches()
        else:
            part = self._data[idx]
            check_values("X", part, int(self.n_samples or 0), self.dtype, self.missing)
            rows = torch.from_numpy(np.ascontiguousarray(part))
        return rows.to(device=self.device, dtype=self.dtype)

    def _group_sample(self, max_rows: int, rng: np.random.RandomState) -> tuple[Tensor, Tensor | None]:
        """The sample :meth:`sample` draws from the concatenated shards, on every process (collective; every
        process's ``rng`` in the same state): the global indices are drawn as the single process draws them,
        each process reads those in its row range, and the rows (and their weights, for weighted data) are
        gathered in rank order (= global order)."""
        assert self.layout is not None
        offset, total = self.layout
        n = int(self.n_samples or 0)
        d = int(self.n_features or 0)
        if self.kind != "iterable":
            if total <= max_rows:
                local, mine = self._chunk(0, n, check=True), np.arange(n)
            else:
                idx = np.sort(rng.choice(total, size=max_rows, replace=False))
                mine = idx[(idx >= offset) & (idx < offset + n)] - offset
                local = self._rows(mine)
            w = None if self.weights is None else self.weights[torch.from_numpy(mine).to(self.weights.device)]
            return _distributed.all_gather_rows(local), None if w is None else _distributed.all_gather_rows(w)
        key_rng = np.random.RandomState(int(rng.get_state()[1][0]))  # type: ignore[index]
        for start in range(0, offset, 1 << 20):  # the keys of the rows before this shard, drawn and dropped
            key_rng.uniform(size=min(1 << 20, offset - start))
        if n > 0:
            keep, keys, where, kept_w = self._stream_sample(max_rows, key_rng, offset)
        else:
            keep = torch.zeros(0, d, device=self.device, dtype=self.dtype)
            keys = torch.zeros(0, dtype=torch.float64, device=self.device)
            where = torch.zeros(0, dtype=torch.int64, device=self.device)
            kept_w = torch.zeros(0, dtype=torch.float64, device=self.device) if self.stream_weighted else None
        keep, keys, where = (_distributed.all_gather_rows(t) for t in (keep, keys, where))
        order = torch.argsort(keys)[:max_rows]
        keep, where = keep[order], where[order]
        back = torch.argsort(where)
        if kept_w is None:
            return keep[back], None
        return keep[back], _distributed.all_gather_rows(kept_w)[order][back]

    def sample(self, max_rows: int, rng: np.random.RandomState) -> Tensor:
        """All rows if N ≤ max_rows, else a uniform random subset of max_rows rows (one pass for iterables).

        In a process group (after :meth:`join_group`) the sample of the concatenated shards, the same on every
        process and equal to the single process's sample of the concatenated data."""
        return self.weighted_sample(max_rows, rng)[0]

    def weighted_sample(self, max_rows: int, rng: np.random.RandomState) -> tuple[Tensor, Tensor | None]:
        """:meth:`sample` and the weights of its rows (None when the data are unweighted)."""
        if self.layout is not None:
            return self._group_sample(max_rows, rng)
        if self.kind != "iterable" and int(self.n_samples or 0) <= max_rows:
            return self._chunk(0, int(self.n_samples or 0), check=True), self.weights
        if self.kind != "iterable":
            idx = np.sort(rng.choice(int(self.n_samples or 0), size=max_rows, replace=False))
            w = None if self.weights is None else self.weights[torch.from_numpy(idx).to(self.weights.device)]
            if self.kind == "tensor":
                rows = self._data[torch.from_numpy(idx)]
            else:  # a memmap's sample is checked as its batches are (k-means reads it first)
                part = self._data[idx]
                check_values("X", part, int(self.n_samples or 0), self.dtype, self.missing)
                rows = torch.from_numpy(part)
            return rows.to(device=self.device, dtype=self.dtype), w
        # keys from a generator seeded by rng's state without drawing from rng: a stream that fits in max_rows
        # then leaves rng exactly where an in-memory array leaves it, so the k-means start is the same
        key_rng = np.random.RandomState(int(rng.get_state()[1][0]))  # type: ignore[index]
        keep, _, where, kept_w = self._stream_sample(max_rows, key_rng, 0)
        back = torch.argsort(where)  # in stream order: all rows, when N <= max_rows, as an array would be
        return keep[back], None if kept_w is None else kept_w[back]

    def _stream_sample(
        self, max_rows: int, key_rng: np.random.RandomState, offset: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """One pass over a stream: the ``max_rows`` rows with the smallest keys (uniform draws of ``key_rng``,
        one per row in stream order), their keys, their positions (``offset`` plus the row's place in the
        stream) and their weights (None for an unweighted stream); the rows are not in stream order."""
        keep: Tensor | None = None
        keys: Tensor | None = None
        where: Tensor | None = None
        kept_w: Tensor | None = None
        seen = 0
        for x, w in self._stream():
            k = torch.from_numpy(key_rng.uniform(size=x.shape[0])).to(x.device)
            pos = torch.arange(offset + seen, offset + seen + x.shape[0], device=x.device)
            seen += x.shape[0]
            cand = x if keep is None else torch.cat([keep, x])
            cand_keys = k if keys is None else torch.cat([keys, k])
            cand_pos = pos if where is None else torch.cat([where, pos])
            order = torch.argsort(cand_keys)[:max_rows]
            keep, keys, where = cand[order], cand_keys[order], cand_pos[order]
            if w is not None:
                kept_w = (w if kept_w is None else torch.cat([kept_w, w]))[order]
        if keep is None or keys is None or where is None:
            raise ValueError("the data iterable yielded no batches")
        return keep, keys, where, kept_w


def _batch_weights(raw: Any, rows: int, first_row: int) -> np.ndarray:
    """A stream batch's weights as float64 (B,): one finite, non-negative number per row of its x (the error
    names the stream's row, counted from ``first_row``)."""
    if isinstance(raw, Tensor):
        raw = raw.detach().cpu().numpy()
    try:
        w = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"a batch's sample_weight must be numbers, got {type(raw).__name__}") from error
    if w.ndim != 1 or w.shape[0] != rows:
        raise ValueError(f"a batch's sample_weight must have shape ({rows},), one weight per row of x, got {w.shape}")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"sample_weight must be finite and non-negative, got {w[i]:g} at row {first_row + i} of X")
    return w
