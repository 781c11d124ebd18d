"""Data sources for the mixture fitters: arrays, tensors, memmaps, and iterables of batches.

Every fitter reads data through :class:`DataSource.batches`, which yields float tensors of shape (B, D) on the
compute device. In-memory arrays and tensors are sliced (optionally in a shuffled order); a ``np.memmap`` is read
one contiguous block at a time so memory does not grow with N; an iterable (a list of arrays, a generator
factory, a ``torch.utils.data.DataLoader``) is iterated once per pass and must be re-iterable.
"""

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor


def _as_tensor(batch: Any) -> Tensor:
    if isinstance(batch, list | tuple):  # DataLoader over a TensorDataset yields [x] or (x, y)
        if len(batch) == 0:
            raise ValueError("got an empty batch tuple from the data iterable")
        batch = batch[0]
    if isinstance(batch, Tensor):
        return batch
    return torch.from_numpy(np.asarray(batch))


def check_batch(x: Tensor, n_features: int | None) -> None:
    """Raise ValueError for a batch that is not 2-D, not real, has the wrong width, or holds NaN/inf."""
    if x.dim() != 2:
        raise ValueError(
            f"Expected 2D array, got {x.dim()}D array of shape {tuple(x.shape)} instead; reshape your data "
            "with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample"
        )
    if x.is_complex() or not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64, torch.int16)):
        raise ValueError(f"X must hold real numbers, got dtype {x.dtype}")
    if n_features is not None and x.shape[1] != n_features:
        raise ValueError(f"X has {x.shape[1]} features, but the model expects {n_features} features")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("Input X contains NaN or infinity (inf); remove or impute those rows")


class DataSource:
    """A uniform view of X for the fitters (see module docstring)."""

    def __init__(self, x: Any, device: torch.device, dtype: torch.dtype, n_features: int | None = None) -> None:
        self.device = device
        self.dtype = dtype
        self.kind: str
        self._data: Any
        if isinstance(x, Tensor):
            self.kind, self._data = "tensor", x
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
            self.n_samples = int(self._data.shape[0])
            check_batch(self._chunk(0, 0), n_features)  # shape and dtype, no values read
            self.n_features = int(self._data.shape[1])
        self._checked = False
        if self.kind == "tensor":  # convert and check once, not in every pass
            self._data = self._data.to(device=device, dtype=dtype)
            check_batch(self._data, n_features)
            self._checked = True

    def _chunk(self, start: int, stop: int) -> Tensor:
        part = self._data[start:stop]
        t = torch.from_numpy(np.array(part)) if self.kind == "memmap" else part  # a copy: memmaps may be read-only
        return t.to(device=self.device, dtype=self.dtype, non_blocking=True)

    def batches(
        self, batch_size: int, generator: torch.Generator | None = None, check: bool = True
    ) -> Iterator[Tensor]:
        """One pass over the data in batches of ``batch_size`` rows (shuffled when a generator is given).

        Tensors are permuted row-wise; memmaps visit contiguous blocks in a random order; iterables are
        used in their own order. ``check`` validates every batch (finite, right width).
        """
        if self.kind == "iterable":
            seen = 0
            for raw in self._data:
                x = _as_tensor(raw)
                if check:
                    check_batch(x, self.n_features)
                if self.n_features is None:
                    self.n_features = int(x.shape[1])
                seen += int(x.shape[0])
                yield x.to(device=self.device, dtype=self.dtype)
            self.n_samples = seen
            return
        n = int(self.n_samples or 0)
        check = check and not self._checked
        starts = torch.arange(0, n, batch_size)
        if generator is not None and self.kind == "tensor":
            perm = torch.randperm(n, generator=generator).to(self._data.device)
            for s in starts.tolist():
                x = self._data[perm[s : s + batch_size]].to(device=self.device, dtype=self.dtype)
                if check:
                    check_batch(x, self.n_features)
                yield x
            return
        if generator is not None:
            starts = starts[torch.randperm(len(starts), generator=generator)]
        for s in starts.tolist():
            x = self._chunk(s, s + batch_size)
            if check:
                check_batch(x, self.n_features)
            yield x

    def sample(self, max_rows: int, rng: np.random.RandomState) -> Tensor:
        """All rows if N ≤ max_rows, else a uniform random subset of max_rows rows (one pass for iterables)."""
        if self.kind != "iterable" and int(self.n_samples or 0) <= max_rows:
            return self._chunk(0, int(self.n_samples or 0))
        if self.kind != "iterable":
            idx = np.sort(rng.choice(int(self.n_samples or 0), size=max_rows, replace=False))
            rows = self._data[torch.from_numpy(idx)] if self.kind == "tensor" else torch.from_numpy(self._data[idx])
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
