"""Split-and-merge moves: the merge is moment matching, and a move takes EM out of a local optimum."""

import numpy as np
import torch
from torch.testing import assert_close

from implicit_em import gaussian
from implicit_em.mixture import GaussianMixture, _stats
from implicit_em.mixture._split_merge import Split, apply_move


def _four_blobs(seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0], [8.0, 8.0]])
    return np.vstack([c + rng.randn(500, 2) for c in centres])


def test_merge_matches_the_first_two_moments_of_the_pair() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 2, 2, generator=g, dtype=torch.float64)
    cov = a @ a.mT + 0.5 * torch.eye(2, dtype=torch.float64)
    w = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    mu = torch.randn(3, 2, generator=g, dtype=torch.float64)
    params = _stats.MixtureParams(w, mu, cov, gaussian.precisions_cholesky(cov, "full", on_singular="ridge"))
    split = Split(
        torch.tensor([0.4, 0.6], dtype=torch.float64),
        mu[2] + torch.tensor([[1.0, 0.0], [-1.0, 0.0]]),
        torch.stack([torch.eye(2, dtype=torch.float64)] * 2),
    )
    moved = apply_move(params, (0, 1, 2, split), "full")
    assert_close(moved.weights.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert_close(moved.weights[0], w[0] + w[1])
    pair_mean = (w[0] * mu[0] + w[1] * mu[1]) / (w[0] + w[1])
    assert_close(moved.means[0], pair_mean)
    second = sum(w[i] * (cov[i] + torch.outer(mu[i], mu[i])) for i in (0, 1)) / (w[0] + w[1])
    assert_close(moved.covariances[0] + torch.outer(pair_mean, pair_mean), second)
    assert_close(moved.weights[1:], w[2] * torch.tensor([0.4, 0.6], dtype=torch.float64))


def test_split_and_merge_escapes_a_two_in_one_local_optimum() -> None:
    x = _four_blobs()
    # two components start in one blob, one component between the two top blobs: EM keeps this shape
    start = {
        "means_init": np.array([[-0.5, 0.0], [0.5, 0.0], [8.0, 0.0], [4.0, 8.0]]),
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(2)] * 4),
    }
    stuck = GaussianMixture(4, split_merge=0, **start).fit(x)
    moved = GaussianMixture(4, split_merge=4, **start).fit(x)
    assert moved.converged_ and moved.n_split_merge_accepted_ >= 1
    assert moved.lower_bound_ > stuck.lower_bound_ + 0.1
    found = np.sort(np.round(moved.means_ / 8), axis=0)
    np.testing.assert_array_equal(found, np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
