"""The fits of ``tests/test_mixture_checkpoint.py``, shared with the child processes it kills (which import this
file): one data set and, per fitter, settings that run several starts and (for the EM fitters) split-and-merge
trials, so that a kill can land in any stage of a fit."""

import warnings
from typing import Any

import numpy as np

from implicit_em.mixture import GaussianMixture

__all__ = ["FITS", "blobs", "fit"]

FITS: dict[str, dict[str, Any]] = {
    # 2 starts; 232 iterations in all, 180 of them in split-and-merge trials
    "em": {"n_components": 3, "n_init": 2, "init_params": "random", "random_state": 0, "tol": 1e-6, "max_iter": 60},
    # 2 starts of 4-step epochs; split-and-merge accepts a move
    "online_em": {
        "n_components": 3,
        "fitter": "online_em",
        "n_init": 2,
        "init_params": "random",
        "random_state": 0,
        "batch_size": 64,
        "tol": 1e-4,
        "max_iter": 30,
    },
    # 2 starts of 25 epochs of 4 Adam steps
    "gd": {
        "n_components": 3,
        "fitter": "gd",
        "n_init": 2,
        "init_params": "random",
        "random_state": 0,
        "batch_size": 64,
        "max_iter": 25,
        "learning_rate": 0.05,
    },
}


def blobs(seed: int = 0, n: int = 80) -> np.ndarray:
    """Three correlated blobs in 2-D, 3n rows."""
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0], [5.0, 1.0], [1.0, 5.0]])
    return np.vstack([c + rng.randn(n, 2) @ rng.randn(2, 2) * 0.8 for c in centres])[rng.permutation(3 * n)]


def fit(name: str, x: np.ndarray | None = None, **extra: Any) -> GaussianMixture:
    """``GaussianMixture(**FITS[name], **extra).fit(x)`` (default: the blobs), ConvergenceWarning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gd stops at max_iter here: a warning, not a failure
        return GaussianMixture(**{**FITS[name], **extra}).fit(blobs() if x is None else x)
