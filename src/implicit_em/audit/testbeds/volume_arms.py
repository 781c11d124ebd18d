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

import dataclasses
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
    "Spec",
    "Trace",
    "effective_rank",
    "encode",
    "exp_information",
    "init_params",
    "kmeans_ari",
    "log_responsibilities",
    "log_volume",
    "make_data",
    "mixture_loss",
    "optimizer",
    "siamese_loss",
    "siamese_optimizer",
    "spread",
    "stack_data",
    "total_variance",
    "train_mixture",
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


# --- the scale-sensitive testbed (the deciding one since the evidence pass) ------------------------------------------
#
# R replicate encoders are trained at once, every parameter carrying a leading replicate axis, on the paper's own
# distance objective without its volume term, L⁻ = −log Σ_j (1/K) exp(−½‖f(x) − μ_j‖²) (§2.2, §3.4, §6.2), with K
# learnt prototypes μ_j. L⁻ ≥ 0, with 0 only where every input maps onto one point: the collapse §6.2 describes is
# its optimum, and its value depends on the features' scale, so what a mechanism does to the scale is seen by the
# loss. Replicates never mix: each one's loss is a separate term of the summed loss, and AdamW updates every
# entry from its own gradient.


def stack_data(sets: list[Data]) -> Data:
    """R data sets, one per replicate, as one :class:`Data` whose tensors carry a leading replicate axis."""
    return Data(*(torch.stack([getattr(d, f) for d in sets]) for f in ("x_train", "y_train", "x_test", "y_test")))


@dataclass(frozen=True)
class Spec:
    """One arm of the scale-sensitive testbed: the mechanisms it adds to the bare encoder (all off: ``none``)."""

    decay: float = 0.0  # AdamW's decoupled weight decay on the encoder's weight matrices (not biases, gains, μ)
    layernorm: str = ""  # "": none; "gain": LayerNorm on the output features with a learnt gain and bias; "nogain"
    residual: int = 0  # residual blocks: 0 the bare MLP, 1 z = x + g₁(x), 2 y = x + g₁(x), z = y + g₂(y)
    volume: float = 0.0  # weight of the volume term −log_volume(z) (the positive control)
    init: str = "init"  # the name of the init stream (another name: a placebo, ``none`` from other draws)

    def __post_init__(self) -> None:
        if self.layernorm not in ("", "gain", "nogain") or self.residual not in (0, 1, 2) or self.decay < 0:
            raise ValueError(f"not an arm: {self}")


def _uniform(shape: tuple[int, ...], fan_in: int, gen: torch.Generator) -> Tensor:
    return (torch.rand(shape, generator=gen, dtype=F64) * 2 - 1) / math.sqrt(fan_in)


def _block(r: int, d: int, hidden: int, gen: torch.Generator) -> dict[str, Tensor]:
    """One MLP block per replicate, torch.nn.Linear's default initialisation."""
    return {
        "W1": _uniform((r, hidden, d), d, gen),
        "b1": _uniform((r, hidden), d, gen),
        "W2": _uniform((r, d, hidden), hidden, gen),
        "b2": _uniform((r, d), hidden, gen),
    }


def _mlp(p: dict[str, Tensor], x: Tensor, tag: str = "") -> Tensor:
    """W₂ relu(W₁x + b₁) + b₂ per replicate: x (R, N, D) → (R, N, D)."""
    h = torch.relu(torch.baddbmm(p["b1" + tag].unsqueeze(1), x, p["W1" + tag].transpose(1, 2)))
    return torch.baddbmm(p["b2" + tag].unsqueeze(1), h, p["W2" + tag].transpose(1, 2))


def encode(spec: Spec, p: dict[str, Tensor], x: Tensor) -> Tensor:
    """The features z, (R, N, D), of inputs x, (R, N, D), or (N, D) shared by the replicates."""
    x = x if x.dim() == 3 else x.expand(p["W1"].shape[0], *x.shape)
    z = _mlp(p, x) + (x if spec.residual else 0)
    if spec.residual == 2:
        z = z + _mlp(p, z, "_2")
    if spec.layernorm:
        z = F.layer_norm(z, z.shape[-1:])
        if spec.layernorm == "gain":
            z = z * p["gain"].unsqueeze(1) + p["bias"].unsqueeze(1)
    return z


def init_params(spec: Spec, x_train: Tensor, r: int, k: int, hidden: int, gen: torch.Generator) -> dict[str, Tensor]:
    """Block 1, then block 2, from ``gen`` in that order, so the arms of one replicate share W₁, W₂ (a placebo draws
    from another stream); each block's output layer is rescaled so its output starts with mean variance 1 per
    replicate; the K prototypes start at the features of K training inputs drawn from ``gen`` after the blocks."""
    d = x_train.shape[-1]
    p = _block(r, d, hidden, gen)
    second = {k + "_2": v for k, v in _block(r, d, hidden, gen).items()}
    x = x_train if x_train.dim() == 3 else x_train.expand(r, *x_train.shape)
    p["W2"] = p["W2"] / _mlp(p, x).var(1).mean(1).sqrt()[:, None, None]
    if spec.residual == 2:
        p.update(second)
        y = x + _mlp(p, x)
        p["W2_2"] = p["W2_2"] / _mlp(p, y, "_2").var(1).mean(1).sqrt()[:, None, None]
    if spec.layernorm == "gain":
        p["gain"], p["bias"] = torch.ones(r, d, dtype=F64), torch.zeros(r, d, dtype=F64)
    pick = torch.stack([torch.randperm(x.shape[1], generator=gen)[:k] for _ in range(r)])
    with torch.no_grad():
        z = encode(spec, p, x)
    p["mu"] = torch.gather(z, 1, pick.unsqueeze(-1).expand(r, k, d))
    return {name: v.clone().requires_grad_(True) for name, v in p.items()}


def total_variance(z: Tensor) -> Tensor:
    """tr Cov(z) per replicate, (R,): the mean squared distance of the features to their mean (×N/(N−1))."""
    return z.var(1).sum(-1)


def log_volume(z: Tensor) -> Tensor:
    """½ log det(Cov(z) + 10⁻⁶ I)/D per replicate, (R,): the log of the features' geometric-mean spread."""
    zc = z - z.mean(1, keepdim=True)
    cov = zc.transpose(1, 2) @ zc / (z.shape[1] - 1)
    return 0.5 * torch.logdet(cov + 1e-6 * torch.eye(z.shape[-1], dtype=z.dtype)) / z.shape[-1]


def log_responsibilities(z: Tensor, mu: Tensor) -> Tensor:
    """log r_nj = log softmax_j(−½‖z_n − μ_j‖²), (R, N, K), equal weights 1/K."""
    return torch.log_softmax(-0.5 * torch.cdist(z, mu) ** 2, -1)


def mixture_loss(spec: Spec, p: dict[str, Tensor], x: Tensor) -> Tensor:
    """Per replicate, (R,): mean_n L⁻ = mean_n −log Σ_j (1/K) exp(−½‖z_n − μ_j‖²), minus ``volume`` × the log
    volume for the positive control (the volume's D dimensions at the weight ``volume``·D)."""
    z, mu = encode(spec, p, x), p["mu"]
    e = -0.5 * torch.cdist(z, mu) ** 2
    loss = -(torch.logsumexp(e, -1) - math.log(mu.shape[1])).mean(1)
    return loss - spec.volume * z.shape[-1] * log_volume(z) if spec.volume else loss


def exp_information(z: Tensor, mu: Tensor) -> Tensor:
    """exp I(input; component) per replicate, (R,): 1 when the responsibilities are the same for every input
    (trivialised), K when each input belongs to one component and the components are used equally."""
    lr = log_responsibilities(z, mu)
    r = lr.exp()
    marg = r.mean(1, keepdim=True)
    return (torch.special.xlogy(r, r).sum(-1).mean(1) - torch.special.xlogy(marg, marg).sum(-1).squeeze(1)).exp()


@dataclass(frozen=True)
class Trace:
    """Held-out measures at the snapshot steps, per replicate: (T,) steps and (R, T) values."""

    steps: list[int]
    total_variance: Tensor
    log_volume: Tensor
    exp_information: Tensor
    loss: Tensor


def optimizer(spec: Spec, p: dict[str, Tensor], lr: float) -> torch.optim.Optimizer:
    """AdamW, decaying only the encoder's weight matrices (W₁, W₂ of each block) at ``spec.decay``."""
    decayed = [v for name, v in p.items() if name.startswith("W")]
    rest = [v for name, v in p.items() if not name.startswith("W")]
    return torch.optim.AdamW([{"params": decayed, "weight_decay": spec.decay}, {"params": rest, "weight_decay": 0}], lr)


def train_mixture(
    spec: Spec, data: Data, r: int, k: int, hidden: int, steps: int, lr: float, eval_every: int, init: int
) -> Trace:
    """Full-batch AdamW (step ``lr``) on L⁻ of R replicates from the ``init`` stream, on ``data`` with (N, D) inputs
    shared by the replicates or (R, N, D) inputs, one set each (:func:`stack_data`); held-out snapshots at step 0,
    every ``eval_every`` steps and at the end (a replicate that diverges reads NaN from then on)."""
    p = init_params(spec, data.x_train, r, k, hidden, torch.Generator().manual_seed(init))
    opt = optimizer(spec, p, lr)
    at: list[int] = []
    rows: list[list[Tensor]] = []
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                z = encode(spec, p, data.x_test)
                at.append(step)
                rows.append([total_variance(z), log_volume(z), exp_information(z, p["mu"])])
                rows[-1].append(mixture_loss(dataclasses.replace(spec, volume=0.0), p, data.x_test))
        if step == steps:
            break
        opt.zero_grad()
        mixture_loss(spec, p, data.x_train).sum().backward()
        opt.step()
    tv, lv, ei, ls = (torch.stack(col, 1) for col in zip(*rows, strict=True))
    return Trace(at, tv, lv, ei, ls)
