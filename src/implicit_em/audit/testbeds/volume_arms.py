r"""The arms and measures of ``normalisation_as_volume`` (paper §6.2, §3.4): the siamese testbed that decides
(:class:`Siamese`, :func:`train_siamese`, :func:`spread`) and, reported beside it, the mixture objective without a
log-det term (:class:`Model`, :func:`train`), on which collapse is the objective's own optimum.

The siamese testbed. An encoder :math:`f: \mathbb R^D \to \mathbb R^D` sees two views of each input
(:math:`x + \sigma\varepsilon`, fresh noise every step) and is trained on the negative cosine with a
stop-gradient, :math:`-\tfrac12[\cos(z_1, \mathrm{sg}\, z_2) + \cos(z_2, \mathrm{sg}\, z_1)]` (SimSiam's loss,
Chen & He 2021, without the predictor: their §4.2 (Table 1) failure case, which collapses). Its minimum, −1, is met by
any view-invariant map, so collapse is not required by the objective, only reached by its dynamics. The arms
(:data:`SIAMESE_ARMS`): ``none`` (2-layer ReLU MLP), ``weight_decay`` (AdamW decay on W₁, W₂), ``layernorm``
(LayerNorm without a gain on the hidden pre-activations: Linear → LN → ReLU → Linear), ``residual``
(:math:`f(x) = x + \mathrm{MLP}(x)`), ``logdet`` (``none`` plus the volume term
:math:`-\tfrac{1}{2D}\log\det(D\,\mathrm{Cov}(\hat z) + 10^{-6} I)` of the normalised features
:math:`\hat z = z/\|z\|` of both views: the positive control) and ``predictor`` (``none`` with SimSiam's linear
predictor on the online branch, beside the verdict); and, beside the verdict too (added after the deciding quick
runs, to see whether the outcome hangs on the declared strength and placement), ``weight_decay_strong`` (the same
decay at ten times the strength) and ``layernorm_features`` (the gain-free LayerNorm on the output features instead
of the hidden layer).

The mixture testbed (the experiment before issue 25):

An encoder :math:`f: \mathbb R^D \to \mathbb R^D` feeds K Gaussian components of unit covariance in feature space,

.. math::  e_j(x) = \tfrac12 \|f(x) - \mu_j\|^2, \qquad
           L^-(x) = -\log \sum_j \pi_j \exp(-e_j(x)) \quad \text{(the mixture objective, no log-det)},

with learnable means :math:`\mu_j` and log mixing weights :math:`\log\pi = \mathrm{log\_softmax}(a)`. The arms
(:data:`ARMS`) differ only in the encoder, the optimiser's weight decay and, for one arm, the volume term:

- ``none``: a 2-layer ReLU MLP, :math:`f(x) = W_2\,\mathrm{relu}(W_1 x + b_1) + b_2` (hidden width H);
- ``none_linear``: a square linear encoder :math:`f(x) = A x + b` (A a random rotation at the start);
- ``logdet_linear``: the same linear encoder trained on :math:`L^- - \log|\det A|` (§3.4's exact volume term),
  which is exactly the tied-covariance GMM negative log-likelihood in input space:
  :math:`-\log \sum_j \pi_j \mathcal N(x; A^{-1}(\mu_j - b), (A^\top A)^{-1})`;
- ``weight_decay``: ``none`` with AdamW's decoupled weight decay on :math:`W_1, W_2`;
- ``layernorm``: ``none`` followed by LayerNorm without a gain (``elementwise_affine=False``): every feature
  vector has mean 0 and variance 1 over its D coordinates, so :math:`\|f(x)\|^2 = D`;
- ``layernorm_gain``: the same with LayerNorm's learnable gain and bias (torch's default);
- ``residual``: one residual block, :math:`f(x) = x + W_2\,\mathrm{relu}(W_1 x + b_1) + b_2`.

Everything is float64. Measures on held-out inputs (:func:`feature_log_volume`, :func:`effective_components`):
the log-volume of the feature covariance per direction over its top D − 1 principal directions (LayerNorm's output
has zero variance along (1, …, 1) by construction, so the D-th direction is left out for every arm), and the
effective number of components :math:`\exp I(x; j)`.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em import gaussian
from implicit_em.distances import gaussian_energies, gaussian_mixture_log_likelihood
from implicit_em.objectives import mixture_nll, responsibilities

__all__ = [
    "ARMS",
    "LINEAR",
    "SIAMESE_ARMS",
    "Data",
    "Model",
    "Siamese",
    "SiameseSnapshot",
    "Snapshot",
    "effective_components",
    "effective_rank",
    "feature_log_volume",
    "make_data",
    "optimizer",
    "siamese_loss",
    "siamese_optimizer",
    "snapshot",
    "spread",
    "train",
    "train_siamese",
]

F64 = torch.float64
ARMS = ("none", "none_linear", "logdet_linear", "weight_decay", "layernorm", "layernorm_gain", "residual")
LINEAR = ("none_linear", "logdet_linear")


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


class Model(torch.nn.Module):
    """One arm's encoder and head (module docstring); parameters drawn from ``gen`` so arms share their start."""

    def __init__(self, arm: str, x_train: Tensor, k: int, hidden: int, gen: torch.Generator) -> None:
        super().__init__()
        if arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
        self.arm = arm
        d = x_train.shape[1]
        if arm in LINEAR:
            q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=F64))
            self.A = torch.nn.Parameter(q)  # a rotation: the features start with the inputs' unit variances
            self.b = torch.nn.Parameter(torch.zeros(d, dtype=F64))
        else:
            self.W1, self.b1 = _uniform_linear(d, hidden, gen)  # torch.nn.Linear's default initialisation
            self.W2, self.b2 = _uniform_linear(hidden, d, gen)
            if arm != "residual":  # the output layer is rescaled so the features start with mean variance 1
                with torch.no_grad():
                    self.W2.div_(self._mlp(x_train).var(0).mean().sqrt())
            if arm == "layernorm_gain":
                self.gain = torch.nn.Parameter(torch.ones(d, dtype=F64))
                self.shift = torch.nn.Parameter(torch.zeros(d, dtype=F64))
        with torch.no_grad():
            start = self.features(x_train)[torch.randperm(len(x_train), generator=gen)[:k]]
        self.mu = torch.nn.Parameter(start.clone())  # K distinct training points' features
        self.logits = torch.nn.Parameter(torch.zeros(k, dtype=F64))

    def _mlp(self, x: Tensor) -> Tensor:
        return F.linear(F.relu(F.linear(x, self.W1, self.b1)), self.W2, self.b2)

    def features(self, x: Tensor) -> Tensor:
        """f(x), (N, D)."""
        if self.arm in LINEAR:
            return F.linear(x, self.A, self.b)
        h = self._mlp(x)
        if self.arm == "residual":
            return x + h
        if self.arm == "layernorm":
            return F.layer_norm(h, h.shape[-1:])
        if self.arm == "layernorm_gain":
            return F.layer_norm(h, h.shape[-1:], self.gain, self.shift)
        return h

    def log_weights(self) -> Tensor:
        return torch.log_softmax(self.logits, dim=0)

    def energies(self, f: Tensor) -> Tensor:
        """e_j = ½‖f − μ_j‖², (N, K): the library's Gaussian energies with unit (spherical) whitening, no volume."""
        ones = torch.ones(self.mu.shape[0], dtype=f.dtype)
        return gaussian_energies(f, self.mu, ones, "spherical", volume=False)

    def loss(self, x: Tensor) -> Tensor:
        """The training objective: mean L⁻ in feature space, minus log|det A| for the ``logdet_linear`` arm."""
        nll = mixture_nll(self.energies(self.features(x)), self.log_weights()).mean()
        if self.arm == "logdet_linear":
            return nll - gaussian.log_det(self.A, "tied", self.A.shape[0])
        return nll

    def input_log_likelihood(self, x: Tensor) -> Tensor:
        """log p(x) in input space (linear arms only): the tied GMM with means A⁻¹(μ_j − b) and whitening A."""
        if self.arm not in LINEAR:
            raise ValueError(f"the input-space density is defined for the linear arms {LINEAR}, not {self.arm!r}")
        means = torch.linalg.solve(self.A, (self.mu - self.b).T).T  # (K, D)
        return gaussian_mixture_log_likelihood(x, self.log_weights(), means, self.A, "tied")


def _uniform_linear(fan_in: int, fan_out: int, gen: torch.Generator) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    bound = 1.0 / math.sqrt(fan_in)
    w = (torch.rand(fan_out, fan_in, generator=gen, dtype=F64) * 2 - 1) * bound
    b = (torch.rand(fan_out, generator=gen, dtype=F64) * 2 - 1) * bound
    return torch.nn.Parameter(w), torch.nn.Parameter(b)


def optimizer(model: Model, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW; the ``weight_decay`` arm decays the weight matrices W₁, W₂ (nanoGPT's practice: matrices, not biases),
    every other arm and parameter has none (then AdamW is Adam)."""
    decayed = [model.W1, model.W2] if model.arm == "weight_decay" else []
    rest = [p for p in model.parameters() if all(p is not q for q in decayed)]
    groups = [{"params": rest, "weight_decay": 0.0}]
    if decayed:
        groups.append({"params": decayed, "weight_decay": weight_decay})
    return torch.optim.AdamW(groups, lr=lr)


def feature_log_volume(f: Tensor) -> float:
    r"""Mean log-variance of features ``f`` (N, D) over the top D − 1 principal directions:
    :math:`\frac{1}{D-1}\sum_{i=1}^{D-1} \log \lambda_i` (eigenvalues of the covariance, descending; a log det per
    direction). 0 for unit variances, → −∞ as the features collapse onto a point."""
    eig = torch.linalg.eigvalsh(torch.cov(f.T.to(F64))).flip(0)[: f.shape[1] - 1]
    return float(eig.clamp_min(1e-300).log().mean())


def effective_components(r: Tensor) -> tuple[float, float]:
    r"""(exp I, exp H(r̄)) of responsibilities ``r`` (N, K).

    .. math::  I = H(\bar r) - \frac1N \sum_i H(r_i), \qquad \bar r = \frac1N \sum_i r_i

    the mutual information between the input and its component. exp I is 1 when every input gets the same
    responsibilities (the trivial ones, uniform or not) and K when every input is assigned with certainty and the
    components are used equally; exp H(r̄) is K for uniform responsibilities whatever the input."""
    r = r.to(F64)
    rbar = r.mean(0)
    h_bar = -torch.special.xlogy(rbar, rbar).sum()
    h_each = -torch.special.xlogy(r, r).sum(1).mean()
    return float(torch.exp(h_bar - h_each)), float(torch.exp(h_bar))


@dataclass(frozen=True)
class Snapshot:
    """Held-out measures at one step."""

    log_volume: float  # feature_log_volume of f(x_test)
    effective: float  # exp I
    effective_marginal: float  # exp H(r̄)
    objective: float  # mean held-out −L⁻ in feature space (no log-det; its supremum is 0)


def snapshot(model: Model, x: Tensor) -> Snapshot:
    with torch.no_grad():
        f = model.features(x)
        e = model.energies(f)
        eff, eff_marginal = effective_components(responsibilities(e, model.log_weights()))
        objective = float(-mixture_nll(e, model.log_weights()).mean())
        return Snapshot(feature_log_volume(f), eff, eff_marginal, objective)


def train(
    model: Model, data: Data, steps: int, lr: float, weight_decay: float, eval_every: int
) -> tuple[list[int], list[Snapshot]]:
    """Full-batch AdamW on ``model.loss`` for ``steps`` steps; held-out snapshots at step 0, every ``eval_every``
    steps and at the end."""
    opt = optimizer(model, lr, weight_decay)
    at, snaps = [0], [snapshot(model, data.x_test)]
    for step in range(1, steps + 1):
        opt.zero_grad()
        model.loss(data.x_train).backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            at.append(step)
            snaps.append(snapshot(model, data.x_test))
    return at, snaps


# --------------------------------------------------------------------------------------------------------------
# The siamese testbed (issue 25): collapse is reachable, not rewarded
# --------------------------------------------------------------------------------------------------------------

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
