"""Data sources for the mixture fitters: arrays, tensors, memmaps, and iterables of batches.

Every fitter reads data through :class:`DataSource.batches`, which yields float tensors of shape (B, D) on the
compute device. In-memory arrays and tensors are sliced (optionally in a shuffled order); a ``np.memmap`` is read
one contiguous block at a time so memory does not grow with N; an iterable (a list or tuple of 2-D arrays or
tensors, a ``torch.utils.data.DataLoader``, any re-iterable object) is iterated once per pass and must be
re-iterable. A tensor that requires grad is read detached: nothing computed from it carries a graph.

Values are checked (``_validation.check_values``: no NaN or inf, N·max|X|² within the compute dtype) once for
an in-memory array and per batch for memmaps and streams, before the cast to the compute dtype, by one reduction
without a temporary copy of the data.
"""

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from scipy.sparse import issparse
from torch import Tensor

from implicit_em.mixture._validation import check_magnitude, check_real_dtype, check_values

_MODEL_WIDTH = "the model expects"


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
    """Whether X is a list or tuple of 2-D arrays or tensors: a stream of batches, each (B, D).

    Unambiguous: a list of rows (sklearn's array-like) has 1-D rows, and a list of 2-D arrays cannot be a
    2-D array. A list that mixes 2-D batches with anything else raises ValueError.
    """
    if not isinstance(x, list | tuple) or len(x) == 0:
        return False
    two_d = [getattr(b, "ndim", None) == 2 and not issparse(b) for b in x]
    if all(two_d):
        return True
    if any(two_d):
        raise ValueError(
            "X is a list mixing 2-D batches with other elements; pass a list of 2-D arrays or tensors (batches of "
            "rows, each of shape (B, D)), or one 2-D array"
        )
    return False


def tensor_output(x: Any) -> bool:
    """Whether results for X are tensors: for a tensor and for a stream, except a list of numpy batches."""
    if isinstance(x, Tensor):
        return True
    if isinstance(x, list | tuple):
        return is_batch_list(x) and any(isinstance(b, Tensor) for b in x)
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
    ) -> None:
        self.device = device
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
        if self.kind == "tensor":  # check and convert once, not in every pass; checked before the cast
            check_values("X", self._data, self.n_samples or 0, dtype)
            self._data = self._data.to(device=device, dtype=dtype)
            self._checked = True

    def _chunk(self, start: int, stop: int, check: bool = False) -> Tensor:
        part = self._data[start:stop]
        if self.kind == "memmap":
            part = np.array(part)  # a copy: memmaps may be read-only
            if check:
                check_values("X", part, self.n_samples or 0, self.dtype)
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
            seen, peak = 0, 0.0
            for raw in self._data:
                x = _as_tensor(raw)
                if check:
                    check_batch(x, self.n_features, self._expected)
                if self.n_features is None:
                    self.n_features, self._expected = int(x.shape[1]), "the first batch has"
                seen += int(x.shape[0])
                if check:  # the largest value so far against the rows so far: N·max|X|² as a whole array
                    peak = max(peak, check_values("X", x, seen, self.dtype))
                    check_magnitude("X", peak, seen, self.dtype)
                yield x.to(device=self.device, dtype=self.dtype)
            self.n_samples = seen
            return
        n = int(self.n_samples or 0)
        check = check and not self._checked
        starts = torch.arange(0, n, batch_size)
        if generator is not None and self.kind == "tensor":
            perm = torch.randperm(n, generator=generator).to(self._data.device)
            for s in starts.tolist():
                yield self._data[perm[s : s + batch_size]].to(device=self.device, dtype=self.dtype)
            return
        if generator is not None:
            starts = starts[torch.randperm(len(starts), generator=generator)]
        for s in starts.tolist():
            yield self._chunk(s, s + batch_size, check=check)

    def sample(self, max_rows: int, rng: np.random.RandomState) -> Tensor:
        """All rows if N ≤ max_rows, else a uniform random subset of max_rows rows (one pass for iterables)."""
        if self.kind != "iterable" and int(self.n_samples or 0) <= max_rows:
            return self._chunk(0, int(self.n_samples or 0), check=True)
        if self.kind != "iterable":
            idx = np.sort(rng.choice(int(self.n_samples or 0), size=max_rows, replace=False))
            if self.kind == "tensor":
                rows = self._data[torch.from_numpy(idx)]
            else:  # a memmap's sample is checked as its batches are (k-means reads it first)
                part = self._data[idx]
                check_values("X", part, int(self.n_samples or 0), self.dtype)
                rows = torch.from_numpy(part)
            return rows.to(device=self.device, dtype=self.dtype)
        # keys from a generator seeded by rng's state without drawing from rng: a stream that fits in max_rows
        # then leaves rng exactly where an in-memory array leaves it, so the k-means start is the same
        key_rng = np.random.RandomState(int(rng.get_state()[1][0]))  # type: ignore[index]
        keep: Tensor | None = None
        keys: Tensor | None = None
        where: Tensor | None = None
        seen = 0
        for x in self.batches(0):
            k = torch.from_numpy(key_rng.uniform(size=x.shape[0])).to(x.device)
            pos = torch.arange(seen, seen + x.shape[0], device=x.device)
            seen += x.shape[0]
            cand = x if keep is None else torch.cat([keep, x])
            cand_keys = k if keys is None else torch.cat([keys, k])
            cand_pos = pos if where is None else torch.cat([where, pos])
            order = torch.argsort(cand_keys)[:max_rows]
            keep, keys, where = cand[order], cand_keys[order], cand_pos[order]
        if keep is None or where is None:
            raise ValueError("the data iterable yielded no batches")
        return keep[torch.argsort(where)]  # in stream order: all rows, when N <= max_rows, as an array would be
