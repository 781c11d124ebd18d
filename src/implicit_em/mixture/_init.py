"""Initial responsibilities with scikit-learn's semantics (``sklearn/mixture/_base.py``).

- "kmeans": labels of ``KMeans(n_clusters=K, n_init=1, random_state=rng)``, one-hot;
- "k-means++": the K seeds of ``kmeans_plusplus`` get responsibility 1 for their own component;
- "random": rows of ``rng.uniform(size=(N, K))``, normalised;
- "random_from_data": K distinct rows drawn by ``rng.choice(N, K, replace=False)``, one-hot.

The same ``numpy.random.RandomState`` draws in the same order as in sklearn, so the same seed gives sklearn's
start. The result is a :class:`Assignment`: labels (one-hot rows, -1 for a row with no responsibility) or a dense
matrix; the M-step that turns it into parameters is ``_stats.summarize_resp``.
"""

from typing import NamedTuple

import numpy as np
import torch
from jaxtyping import Float, Int
from sklearn.cluster import KMeans, kmeans_plusplus
from torch import Tensor

INIT_PARAMS = ("kmeans", "k-means++", "random", "random_from_data")


class Assignment(NamedTuple):
    """Initial responsibilities: ``labels`` (N,) int64 with -1 meaning "no component", or ``dense`` (N, K)."""

    labels: Int[Tensor, " n"] | None
    dense: Float[Tensor, "n k"] | None

    def rows(self, start: int, stop: int, n_components: int, dtype: torch.dtype) -> Float[Tensor, "b k"]:
        """Responsibilities of rows start:stop as a dense (B, K) tensor."""
        if self.dense is not None:
            return self.dense[start:stop].to(dtype)
        assert self.labels is not None
        lab = self.labels[start:stop]
        out = torch.zeros(lab.shape[0], n_components, dtype=dtype, device=lab.device)
        hit = lab >= 0
        out[hit.nonzero().squeeze(1), lab[hit]] = 1
        return out


def initial_assignment(
    x: Float[Tensor, "n d"],
    n_components: int,
    init_params: str,
    rng: np.random.RandomState,
    weights: Float[Tensor, " n"] | None = None,
) -> Assignment:
    """Responsibilities to start EM from, drawn from ``rng`` exactly as scikit-learn draws them. With row
    ``weights``: k-means and k-means++ take them as ``sample_weight``, "random_from_data" draws rows in
    proportion to them (a row of weight zero is never a seed), "random" is unchanged (the M-step weights it)."""
    n = x.shape[0]
    w = None if weights is None else weights.detach().double().cpu().numpy()
    if init_params == "kmeans":
        x_np = x.detach().cpu().numpy()
        labels = KMeans(n_clusters=n_components, n_init=1, random_state=rng).fit(x_np, sample_weight=w).labels_
        return Assignment(torch.from_numpy(labels.astype(np.int64)).to(x.device), None)
    if init_params == "k-means++":
        _, idx = kmeans_plusplus(x.detach().cpu().numpy(), n_components, random_state=rng, sample_weight=w)
        return _one_hot_at(n, idx, x.device)
    if init_params == "random":
        dense = torch.from_numpy(rng.uniform(size=(n, n_components))).to(x.device)
        return Assignment(None, dense / dense.sum(1, keepdim=True))
    if init_params == "random_from_data":
        if w is not None:
            if int((w > 0).sum()) < n_components:
                raise ValueError(
                    f'init_params="random_from_data" needs at least n_components={n_components} rows of positive '
                    f"sample_weight, got {int((w > 0).sum())}"
                )
            return _one_hot_at(n, rng.choice(n, size=n_components, replace=False, p=w / w.sum()), x.device)
        return _one_hot_at(n, rng.choice(n, size=n_components, replace=False), x.device)
    raise ValueError(f"init_params must be one of {INIT_PARAMS}, got {init_params!r}")


def _one_hot_at(n: int, indices: np.ndarray, device: torch.device) -> Assignment:
    labels = torch.full((n,), -1, dtype=torch.int64)
    labels[torch.from_numpy(np.asarray(indices, dtype=np.int64))] = torch.arange(len(indices))
    return Assignment(labels.to(device), None)
