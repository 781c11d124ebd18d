r"""The siamese testbed of ``normalisation_as_volume`` (paper §6.2, §3.4): arms, loss, trainer and measures.

An encoder :math:`f: \mathbb R^D \to \mathbb R^D` sees two views of each input (:math:`x + \sigma\varepsilon`,
fresh noise every step) and is trained on the negative cosine with a stop-gradient,
:math:`-\tfrac12[\cos(z_1, \mathrm{sg}\, z_2) + \cos(z_2, \mathrm{sg}\, z_1)]` (SimSiam's loss, Chen & He 2021,
without the predictor: their §4.2 (Table 1) failure case, which collapses). Its minimum, −1, is met by any
view-invariant map, so collapse is not required by the objective, only reached by its dynamics. The arms
(:data:`SIAMESE_ARMS`): ``none`` (2-layer ReLU MLP), ``weight_decay`` (AdamW decay on W₁, W₂), ``layernorm``
(LayerNorm without a gain on the hidden pre-activations: Linear → LN → ReLU → Linear), ``residual``
(:math:`f(x) = x + \mathrm{MLP}(x)`), ``logdet`` (``none`` plus the volume term
:math:`-\tfrac{1}{2D}\log\det(D\,\mathrm{Cov}(\hat z) + 10^{-6} I)` of the normalised features
:math:`\hat z = z/\|z\|` of both views: the positive control) and ``predictor`` (``none`` with SimSiam's linear
predictor on the online branch); ``weight_decay_strong`` (the same decay at ten times the strength) and
``layernorm_features`` (the gain-free LayerNorm on the output features instead of the hidden layer).

Everything is float64. Measures on held-out inputs: :func:`spread` (SimSiam's collapse monitor) and
:func:`effective_rank` of the normalised features.
"""

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "SIAMESE_ARMS",
    "Data",
    "Siamese",
    "SiameseSnapshot",
    "effective_rank",
    "kmeans_ari",
    "make_data",
    "siamese_loss",
    "siamese_optimizer",
    "spread",
    "train_siamese",
]

F64 = torch.float64


@dataclass(frozen=True)
class Data:
    """A K-cluster tied-covariance Gaussian mixture in D dimensions, standardised with the training split."""

    x_train: Tensor  # (N, D)
    y_train: Tensor  # (N,)
    x_test: Tensor  # (N_test, D)
    y_test: Tensor  # (N_test,)


def make_data(n_train: int, n_test: int, d: int, k: int, separation: float, gen: torch.Generator) -> Data:
    """Equal-weight clusters with one covariance Σ (eigenvalues from 0.5 to 2, a random rotation) and means drawn
    from N(0, separation² Σ), so two means lie about separation·√(2D) Mahalanobis units apart."""
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=F64))
    root = q * torch.logspace(-0.5 * math.log10(2), 0.5 * math.log10(2), d, dtype=F64)  # Σ = root rootᵀ
    means = separation * torch.randn(k, d, generator=gen, dtype=F64) @ root.T
    n = n_train + n_test
    y = torch.randint(0, k, (n,), generator=gen)
    x = means[y] + torch.randn(n, d, generator=gen, dtype=F64) @ root.T
    mean, std = x[:n_train].mean(0), x[:n_train].std(0)
    x = (x - mean) / std
    return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def _uniform_linear(fan_in: int, fan_out: int, gen: torch.Generator) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    bound = 1.0 / math.sqrt(fan_in)
    w = (torch.rand(fan_out, fan_in, generator=gen, dtype=F64) * 2 - 1) * bound
    b = (torch.rand(fan_out, generator=gen, dtype=F64) * 2 - 1) * bound
    return torch.nn.Parameter(w), torch.nn.Parameter(b)


SIAMESE_ARMS = (
    "none",
    "weight_decay",
    "layernorm",
    "residual",
    "logdet",
    "predictor",
    "weight_decay_strong",
    "layernorm_features",
)


class Siamese(torch.nn.Module):
    """One siamese arm's encoder (and, for ``predictor``, its linear predictor); the weight draws come from ``gen``
    in the same order for every arm, so every arm of a replicate starts from the same W₁, W₂."""

    def __init__(self, arm: str, x_train: Tensor, hidden: int, gen: torch.Generator) -> None:
        super().__init__()
        if arm not in SIAMESE_ARMS:
            raise ValueError(f"arm must be one of {SIAMESE_ARMS}, got {arm!r}")
        self.arm = arm
        d = x_train.shape[1]
        self.W1, self.b1 = _uniform_linear(d, hidden, gen)  # torch.nn.Linear's default initialisation
        self.W2, self.b2 = _uniform_linear(hidden, d, gen)
        q = torch.eye(d, dtype=F64) + 0.3 * torch.randn(d, d, generator=gen, dtype=F64) / math.sqrt(d)
        self.P = torch.nn.Parameter(q) if arm == "predictor" else None  # near the identity, SimSiam-like
        if arm != "residual":  # the output layer is rescaled so the features start with mean variance 1
            with torch.no_grad():
                self.W2.div_(self.features(x_train).var(0).mean().sqrt())

    def _mlp_out(self, x: Tensor) -> Tensor:
        """W₂ relu(W₁x + b₁) + b₂, with the gain-free LayerNorm on W₁x + b₁ for the ``layernorm`` arm."""
        a = F.linear(x, self.W1, self.b1)
        if self.arm == "layernorm":
            a = F.layer_norm(a, a.shape[-1:])
        return F.linear(F.relu(a), self.W2, self.b2)

    def features(self, x: Tensor) -> Tensor:
        """f(x), (N, D): the MLP's output, plus x for the ``residual`` arm."""
        h = self._mlp_out(x)
        if self.arm == "layernorm_features":
            return F.layer_norm(h, h.shape[-1:])
        return x + h if self.arm == "residual" else h

    def predict(self, z: Tensor) -> Tensor:
        """The online branch's predictor: P z for the ``predictor`` arm, the identity for every other arm."""
        return z if self.P is None else z @ self.P.T


def siamese_loss(model: Siamese, v1: Tensor, v2: Tensor, volume_weight: float) -> Tensor:
    """−½[cos(p(z₁), sg z₂) + cos(p(z₂), sg z₁)], plus the volume term for the ``logdet`` arm (module docstring)."""
    z1, z2 = model.features(v1), model.features(v2)
    cos = F.cosine_similarity(model.predict(z1), z2.detach()) + F.cosine_similarity(model.predict(z2), z1.detach())
    loss = -0.5 * cos.mean()
    if model.arm == "logdet":
        zn = F.normalize(torch.cat([z1, z2]), dim=1)
        d = zn.shape[1]
        c = d * torch.cov(zn.T) + 1e-6 * torch.eye(d, dtype=zn.dtype)
        loss = loss - volume_weight * 0.5 * torch.logdet(c) / d
    return loss


def spread(z: Tensor) -> float:
    r""":math:`\sqrt D \cdot \frac1D \sum_d \mathrm{std}(\hat z_d)` of the normalised features
    :math:`\hat z = z/\|z\|` (SimSiam's collapse monitor, scaled): about 1 for directions spread over the sphere,
    0 when every input maps to the same direction."""
    zn = F.normalize(z.to(F64), dim=1)
    return float(zn.std(0).mean() * math.sqrt(z.shape[1]))


def effective_rank(z: Tensor) -> float:
    """exp of the entropy of the normalised features' covariance spectrum (eigenvalues over their sum): D for an
    isotropic cloud, 1 for a line."""
    zn = F.normalize(z.to(F64), dim=1)
    eig = torch.linalg.eigvalsh(torch.cov(zn.T)).clamp_min(0.0)
    p = eig / eig.sum()
    return float(torch.exp(-torch.special.xlogy(p, p).sum()))


@dataclass(frozen=True)
class SiameseSnapshot:
    """Held-out measures at one step."""

    spread: float
    effective_rank: float
    loss: float  # the held-out siamese loss on one pair of views (no volume term)


def siamese_optimizer(model: Siamese, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW; only the ``weight_decay`` arms decay, and only W₁, W₂ (matrices, not biases)."""
    decayed = [model.W1, model.W2] if model.arm.startswith("weight_decay") else []
    rest = [p for p in model.parameters() if all(p is not q for q in decayed)]
    groups = [{"params": rest, "weight_decay": 0.0}]
    if decayed:
        groups.append({"params": decayed, "weight_decay": weight_decay})
    return torch.optim.AdamW(groups, lr=lr)


def train_siamese(
    model: Siamese,
    data: Data,
    steps: int,
    lr: float,
    weight_decay: float,
    sigma: float,
    volume_weight: float,
    eval_every: int,
    gen: torch.Generator,
) -> tuple[list[int], list[SiameseSnapshot]]:
    """Full-batch AdamW on :func:`siamese_loss` with fresh Gaussian views (std ``sigma``) from ``gen`` every step;
    held-out snapshots at step 0, every ``eval_every`` steps and at the end."""
    opt = siamese_optimizer(model, lr, weight_decay)
    x, xt = data.x_train, data.x_test

    def snap() -> SiameseSnapshot:
        with torch.no_grad():
            z = model.features(xt)
            g = torch.Generator().manual_seed(0)
            v1 = xt + sigma * torch.randn(xt.shape, generator=g, dtype=F64)
            v2 = xt + sigma * torch.randn(xt.shape, generator=g, dtype=F64)
            return SiameseSnapshot(spread(z), effective_rank(z), float(siamese_loss(model, v1, v2, 0.0)))

    at, snaps = [0], [snap()]
    for step in range(1, steps + 1):
        v1 = x + sigma * torch.randn(x.shape, generator=gen, dtype=F64)
        v2 = x + sigma * torch.randn(x.shape, generator=gen, dtype=F64)
        opt.zero_grad()
        siamese_loss(model, v1, v2, volume_weight).backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            at.append(step)
            snaps.append(snap())
    return at, snaps


def kmeans_ari(z: Tensor, y: Tensor, k: int, seed: int) -> float:
    """ARI of k-means (``k`` clusters, 3 starts from ``random_state=seed``) on the normalised rows of ``z`` (N, D)
    against the labels ``y`` (N,)."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import adjusted_rand_score

    zn = torch.nn.functional.normalize(z, dim=1).numpy()
    with warnings.catch_warnings():  # a collapsed arm's features have fewer distinct points than K: ARI near 0
        warnings.simplefilter("ignore", ConvergenceWarning)
        labels = KMeans(k, n_init=3, random_state=seed).fit_predict(zn)
    return float(adjusted_rand_score(y.numpy(), labels))
