r"""A prototype classifier on scikit-learn's bundled 8×8 digits, trained with Adam in float64 on minibatches: the
constrained regime's model, read by ``cross_entropy_regime`` and ``open_set``.

The model maps an image :math:`x \in \mathbb{R}^{64}` to an embedding :math:`e = Wx + b \in \mathbb{R}^{D}` and
returns the squared Euclidean distances :math:`d_k = \|e - m_k\|^2` to one learnable prototype per class
(:class:`implicit_em.distances.Prototypes`); its logits are :math:`z = -d`. The digits (1,797 images, pixel counts
0–16, no download) are split 75/25, stratified by label; each claim standardises the pixels its own way.
"""

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.distances import NoneOfTheAbove, Prototypes
from implicit_em.objectives import constrained_cross_entropy, lse

__all__ = [
    "DistanceClassifier",
    "NullComponent",
    "Training",
    "accuracy",
    "batches",
    "digits",
    "fit",
    "make_classifier",
    "split",
    "train",
]


@dataclass(frozen=True)
class Training:
    """Adam on minibatches in float64: the classifier's size and its optimiser (shared by both classifier claims)."""

    epochs: int = 15
    batch_size: int = 64
    embed_dim: int = 16  # D, the embedding's width
    lr: float = 5e-3  # Adam, the embedding and the prototypes


@dataclass(frozen=True)
class NullComponent:
    """A "none of the above" component appended to the classifier: a learnable null distance τ."""

    lr: float = 5e-2  # Adam's rate for τ
    mass: float = 0.05  # ε, the null's target share on every training image


class DistanceClassifier(nn.Module):
    """x (N, 64) -> distances d (N, K) to one learnable prototype per class in a linear embedding."""

    def __init__(self, n_features: int, n_classes: int, embed_dim: int) -> None:
        super().__init__()
        self.embed = nn.Linear(n_features, embed_dim)
        self.prototypes = Prototypes(n_classes, embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.prototypes(self.embed(x))  # (N, K)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: images (1797, 64) of pixel counts 0–16, labels (1797,) in 0–9."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x, y


def split(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A stratified 75/25 split of (x (N, F), y (N,)): x_train, x_test, y_train, y_test (scikit-learn's order)."""
    from sklearn.model_selection import train_test_split

    parts: list[np.ndarray] = train_test_split(x, y, test_size=0.25, stratify=y, random_state=seed)
    x_tr, x_te, y_tr, y_te = parts
    return x_tr, x_te, y_tr, y_te


def make_classifier(seed: int, n_features: int, n_classes: int, embed_dim: int) -> DistanceClassifier:
    """A float64 :class:`DistanceClassifier` initialised from ``torch.manual_seed(seed)`` (torch's default init draws
    from the global generator), so two models made with one seed start equal."""
    torch.manual_seed(seed)
    return DistanceClassifier(n_features, n_classes, embed_dim).double()


def batches(n: int, batch_size: int, epochs: int, seed: int) -> Iterator[tuple[Tensor, ...]]:
    """Per epoch, the minibatches' row indices: a fresh permutation of range(n) split into ``batch_size`` pieces, all
    epochs drawn from one generator seeded ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        yield torch.randperm(n, generator=gen).split(batch_size)


def train(
    opt: torch.optim.Optimizer,
    n: int,
    training: Training,
    seed: int,
    backward: Callable[[Tensor], None],
    end_epoch: Callable[[int], None] | None = None,
) -> None:
    """The minibatch loop: per batch of row indices ``idx``, zero the gradients, ``backward(idx)`` (the claim's
    forward pass and ``loss.backward()``, reading what it records), one optimiser step; ``end_epoch(epoch)`` after
    each epoch. The batch order is :func:`batches` with ``seed``."""
    for epoch, epoch_batches in enumerate(batches(n, training.batch_size, training.epochs, seed)):
        for idx in epoch_batches:
            opt.zero_grad(set_to_none=True)
            backward(idx)
            opt.step()
        if end_epoch is not None:
            end_epoch(epoch)


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Share of rows whose nearest prototype (argmin of d, (N, K)) is the label y (N,)."""
    with torch.no_grad():
        return float((model(x).argmin(dim=1) == y).double().mean())


def fit(
    x: Tensor, y: Tensor, n_classes: int, training: Training, init: int, order: int, null: NullComponent | None = None
) -> tuple[DistanceClassifier, NoneOfTheAbove | None, dict[str, list[float]]]:
    r"""Adam on cross-entropy over the K classes of x (N, F), y (N,); or, with ``null``, over K + 1 components with
    :class:`~implicit_em.distances.NoneOfTheAbove` appended and the soft target :math:`(1-\varepsilon)e_y +
    \varepsilon e_\varnothing`, so :math:`\partial\ell/\partial\tau = \varepsilon - r_0` and τ settles where the
    null's mean share on the training images is ε. τ starts where the initial mean :math:`r_0` is about ε.
    ``init`` seeds the initialisation (:func:`make_classifier`), ``order`` the batch order (:func:`batches`).
    Returns the model, the null (or None) and per epoch the training accuracy, the null's mean share and τ."""
    model = make_classifier(init, x.shape[1], n_classes, training.embed_dim)  # equal starts for one init
    groups: list[dict[str, Any]] = [{"params": list(model.parameters()), "lr": training.lr}]
    component = None
    mass = null.mass if null is not None else 0.0
    if null is not None:
        with torch.no_grad():  # σ(−L − τ) = ε at the mean −L
            tau0 = float((-lse(model(x))).mean()) + math.log((1 - mass) / mass)
        component = NoneOfTheAbove(tau0, dtype=torch.float64)
        groups.append({"params": [component.null_distance], "lr": null.lr})
    target = torch.nn.functional.one_hot(y, n_classes + 1).double() * (1 - mass)
    target[:, n_classes] = mass  # (N, K + 1): (1 − ε) e_y + ε e_null
    hist: dict[str, list[float]] = {"train_accuracy": [], "null_share": [], "tau": []}

    def backward(idx: Tensor) -> None:
        d = model(x[idx])
        if component is None:
            constrained_cross_entropy(d, y[idx]).mean().backward()
        else:
            constrained_cross_entropy(component(d), target[idx]).mean().backward()

    def end_epoch(epoch: int) -> None:
        with torch.no_grad():
            d = model(x)
            hist["train_accuracy"].append(float((d.argmin(1) == y).double().mean()))
            if component is not None:
                hist["null_share"].append(float(component.responsibilities(d)[:, n_classes].mean()))
                hist["tau"].append(float(component.null_distance))

    train(torch.optim.Adam(groups), len(y), training, order, backward, end_epoch)
    return model, component, hist
