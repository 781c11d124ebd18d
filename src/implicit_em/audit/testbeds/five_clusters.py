r"""The five-cluster setting of ``specialisation`` (paper §4.1): data, the starts, and the three fits from a start.

Data: 2-D, five unit-variance Gaussian clusters with centres on a circle of radius 6, equal shares. A start puts the
K means at K distinct data points and gives every component one precision (the data's, or 1e-6·I's inverse for the
degenerate start ``init_params="random_from_data"`` gives) and equal weights. From a start, §4.1's distance-only
prototypes (:func:`fit_prototypes`) and the full likelihood under gradient descent or EM (:func:`fit_gaussian`);
each returns a :class:`Run`: the ARI against the true clusters at the start and at the end, and the component usage
per epoch.
"""

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["K", "Run", "Start", "data", "data_start", "degenerate_start", "fit_gaussian", "fit_prototypes"]

K = 5


def data(n: int, rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    """n points (N, 2) from the five clusters and their cluster labels (N,)."""
    angles = 2 * np.pi * np.arange(K) / K
    centres = 6 * np.stack([np.cos(angles), np.sin(angles)], 1)
    labels = rng.randint(K, size=n)
    return centres[labels] + rng.randn(n, 2), labels


@dataclass(frozen=True)
class Start:
    """A start shared by every model: means at K data points, one precision for all components, equal weights."""

    means: np.ndarray  # (K, D)
    precision: np.ndarray  # (D, D), the same for every component

    def gaussian_init(self) -> dict[str, Any]:
        """``GaussianMixture`` keyword arguments that start exactly here."""
        k = len(self.means)
        return {
            "means_init": self.means,
            "precisions_init": np.repeat(self.precision[None], k, 0),
            "weights_init": np.full(k, 1.0 / k),
        }

    def labels(self, x: np.ndarray) -> np.ndarray:
        """The start's own partition: the largest posterior (equal weights, one covariance: nearest mean in the
        start's metric)."""
        diff = x[:, None, :] - self.means[None]
        return np.einsum("nkd,de,nke->nk", diff, self.precision, diff).argmin(1)


def data_start(x: np.ndarray, seed: int) -> Start:
    """Means at K distinct random data points (drawn as ``random_from_data`` draws them), the data covariance."""
    idx = np.random.RandomState(seed).choice(len(x), K, replace=False)
    return Start(x[idx].copy(), np.linalg.inv(np.cov(x.T, bias=True)))


def degenerate_start(x: np.ndarray, seed: int, reg_covar: float = 1e-6) -> Start:
    """What ``init_params="random_from_data"`` starts from: the same means, covariance reg_covar·I each."""
    s = data_start(x, seed)
    return Start(s.means, np.eye(x.shape[1]) / reg_covar)


@dataclass(frozen=True)
class Run:
    """One model from one start: ARI at the start and the end, usage per epoch (the start's usage first)."""

    ari0: float
    ari: float
    usage: list[list[float]]  # (epochs + 1, K)

    @property
    def max_share(self) -> float:
        """The largest share any component held at any epoch."""
        return float(max(max(u) for u in self.usage))

    @property
    def min_final_share(self) -> float:
        """The smallest share at the end."""
        return float(min(self.usage[-1]))


def fit_prototypes(x: np.ndarray, truth: np.ndarray, start: Start, seed: int, epochs: int) -> Run:
    """§4.1's objective: Adam (rate 0.05) on mean −log Σ_j exp(−½‖x − m_j‖²) from the start's means, batches of 256
    in an order drawn from ``seed``; usage is the mean responsibility per component."""
    import torch
    from sklearn.metrics import adjusted_rand_score

    from implicit_em.distances import Prototypes
    from implicit_em.objectives import mixture_nll, responsibilities

    g = torch.Generator().manual_seed(seed)
    xt = torch.from_numpy(x)
    model = Prototypes(K, x.shape[1], dtype=torch.float64)
    with torch.no_grad():
        model.prototypes.copy_(torch.from_numpy(start.means))
        ari0 = float(adjusted_rand_score(truth, model(xt).argmin(1).numpy()))
        usage = [responsibilities(0.5 * model(xt)).mean(0).tolist()]
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(256):
            opt.zero_grad()
            mixture_nll(0.5 * model(xt[idx])).mean().backward()
            opt.step()
        with torch.no_grad():
            usage.append(responsibilities(0.5 * model(xt)).mean(0).tolist())
    with torch.no_grad():
        labels = model(xt).argmin(1).numpy()
    return Run(ari0, float(adjusted_rand_score(truth, labels)), usage)


def fit_gaussian(
    x: np.ndarray, truth: np.ndarray, start: Start, fitter: str, seed: int, max_iter: int
) -> tuple[Run, float]:
    """The full likelihood from the start under ``fitter`` ("gd": Adam, rate 0.05, batches of 256; or "em"), no
    split-and-merge, tol 1e-5; the run (usage: mixing weights for gd, N_j/N for EM) and the final mean
    log-likelihood per sample."""
    from sklearn.metrics import adjusted_rand_score

    from implicit_em.mixture import GaussianMixture

    kw: dict[str, Any] = {"batch_size": 256, "learning_rate": 0.05} if fitter == "gd" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a start that does not converge is a result here, not a warning
        gm = GaussianMixture(
            K,
            fitter=fitter,
            random_state=seed,
            split_merge=0,
            max_iter=max_iter,
            tol=1e-5,
            **start.gaussian_init(),
            **kw,
        ).fit(x)
    ari0 = float(adjusted_rand_score(truth, start.labels(x)))
    usage = [[1.0 / K] * K] + [list(map(float, h["usage"])) for h in gm.history_]
    return Run(ari0, float(adjusted_rand_score(truth, gm.predict(x))), usage), float(gm.score(x))
