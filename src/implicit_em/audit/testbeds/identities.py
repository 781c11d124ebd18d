r"""Four identities of the paper, each checked two ways on random float64 cases, with the planted errors each check
must catch (the ``foundations`` claim's instrument).

A check returns, per draw of cases, one :class:`Measure` per statistic: a ``law`` (the identity, computed by the
library on one side and by numpy, scipy, torch's own functions or autograd on the other; it must stay within its
threshold) or a ``control`` (a planted error the same statistic must exceed). Residuals are in round-off units, eps
times the size of what was rounded, or relative to a linear solve or a log-density.
"""

import math
from collections.abc import Callable
from typing import Literal, NamedTuple, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from implicit_em.distances import MahalanobisUnit
from implicit_em.laws import hopfield_law
from implicit_em.objectives import constrained_cross_entropy, lse, softmin_bounds

__all__ = [
    "CHECKS",
    "EPS",
    "Cases",
    "Measure",
    "Role",
    "hopfield",
    "label_smoothing",
    "mahalanobis",
    "softmin",
    "violation",
]

F64 = torch.float64
EPS = float(torch.finfo(F64).eps)


class Cases(Protocol):
    """The cases and thresholds the checks read (the ``foundations`` claim's ``Config``)."""

    @property
    def components(self) -> tuple[int, ...]: ...  # K (soft-min bounds, label smoothing)
    @property
    def rows(self) -> int: ...  # rows (inputs, queries) per case
    @property
    def spreads(self) -> tuple[float, ...]: ...  # scale of the distances
    @property
    def dims(self) -> tuple[int, ...]: ...  # D (Mahalanobis), E (Hopfield)
    @property
    def eig_range(self) -> tuple[float, float]: ...  # covariance eigenvalues, log-uniform
    @property
    def keys(self) -> tuple[int, ...]: ...  # keys per query
    @property
    def key_scales(self) -> tuple[float, ...]: ...
    @property
    def smoothings(self) -> tuple[float, ...]: ...  # ε
    @property
    def temperature_error(self) -> float: ...  # the planted soft minimum's temperature
    @property
    def max_units(self) -> float: ...  # round-off threshold, in units
    @property
    def max_relative(self) -> float: ...  # relative threshold against a solve or a log-density


Role = Literal["law", "control"]


class Measure(NamedTuple):
    """One check on one draw: its statistic, the threshold, and its role: a ``law`` check must stay within the
    threshold (an identity), a ``control`` (a planted error) must exceed it (a test)."""

    name: str
    value: float
    threshold: float
    role: Role


Checks = Callable[[Cases, torch.Generator], list[Measure]]


# --- 1. Soft-minimum bounds (§2.2) ------------------------------------------------------------------------------------


def violation(value: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> float:
    """How far ``value`` leaves [lower, upper] at worst (0 when inside everywhere)."""
    return float(torch.clamp(torch.maximum(lower - value, value - upper), min=0.0).amax())


def softmin(cfg: Cases, g: torch.Generator) -> list[Measure]:
    worst = dict.fromkeys(("bounds", "lower attained", "upper attained", "no log K", "temperature"), 0.0)
    tau = cfg.temperature_error
    for k in cfg.components:
        for spread in cfg.spreads:
            d = torch.randn(cfg.rows, k, generator=g, dtype=F64) * spread
            equal = d[:, :1].expand(-1, k).contiguous()  # every row constant: −L = d − log K exactly
            apart = d.clone()
            apart[:, 0] = d.amin(-1) - 50.0  # one distance 50 below the rest: −L = min d − O((K−1)e^{−50})
            for x in (d, equal, apart):
                unit = EPS * max(1.0, float(x.abs().amax()), math.log(k))  # rounding of a log-sum-exp of size |d|
                soft = -lse(x)
                lower, upper = softmin_bounds(x)
                worst["bounds"] = max(worst["bounds"], violation(soft, lower, upper) / unit)
                worst["no log K"] = max(worst["no log K"], violation(soft, upper, upper) / unit)
                planted = -tau * lse(x / tau)
                worst["temperature"] = max(worst["temperature"], violation(planted, lower, upper) / unit)
                if x is equal:
                    worst["lower attained"] = max(worst["lower attained"], float((soft - lower).abs().amax()) / unit)
                if x is apart:
                    worst["upper attained"] = max(worst["upper attained"], float((soft - upper).abs().amax()) / unit)
    u = cfg.max_units
    return [
        Measure("min d − log K ≤ −L ≤ min d: worst violation (eps·max(1, |d|, log K))", worst["bounds"], u, "law"),
        Measure(
            "lower bound attained at equal distances: |−L − (min d − log K)| (units)", worst["lower attained"], u, "law"
        ),
        Measure(
            "upper bound attained with one distance 50 below: |−L − min d| (units)", worst["upper attained"], u, "law"
        ),
        Measure("control, bound without log K (min d ≤ −L): worst violation (units)", worst["no log K"], u, "control"),
        Measure(
            f"control, soft minimum at temperature {tau:g}: worst violation (units)", worst["temperature"], u, "control"
        ),
    ]


# --- 2. The Mahalanobis unit (§2.1) -----------------------------------------------------------------------------------


def _gaussian(dim: int, cfg: Cases, g: torch.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random covariance's eigenvalues (D,), eigenvectors (D, D, columns) and a mean (D,)."""
    lo, hi = (math.log(v) for v in cfg.eig_range)
    lam = torch.exp(lo + (hi - lo) * torch.rand(dim, generator=g, dtype=F64))
    vec, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=F64))
    return lam.numpy(), vec.numpy(), (3.0 * torch.randn(dim, generator=g, dtype=F64)).numpy()


def _units(mean: np.ndarray, vec: np.ndarray, lam: np.ndarray) -> MahalanobisUnit:
    """The library's units for the principal axes (columns of ``vec``) with eigenvalues ``lam``."""
    return MahalanobisUnit.from_gaussian(torch.from_numpy(mean), torch.from_numpy(vec.T.copy()), torch.from_numpy(lam))


def mahalanobis(cfg: Cases, g: torch.Generator) -> list[Measure]:
    from scipy.stats import multivariate_normal

    worst = dict.fromkeys(("unit", "sum", "density", "relu", "bias sign", "power", "directions"), 0.0)
    for dim in cfg.dims:
        lam, vec, mean = _gaussian(dim, cfg, g)
        cov = (vec * lam) @ vec.T
        x = mean + (torch.randn(cfg.rows, dim, generator=g, dtype=F64).numpy() * 2 * np.sqrt(lam)) @ vec.T
        xt = torch.from_numpy(x)
        unit = _units(mean, vec, lam)
        assert unit.bias is not None
        w, b = unit.weight.detach().numpy(), unit.bias.detach().numpy()
        # rounding of w·x + b: D·eps·(|w|·|x| + |b|) per entry (Higham's bound for a dot product of length D)
        scale = dim * EPS * (np.abs(x) @ np.abs(w).T + np.abs(b))
        oracle = np.abs((x - mean) @ vec / np.sqrt(lam))  # the paper's left side, |λ^{-1/2} vᵀ(x − μ)|, in numpy
        d = unit(xt).detach().numpy()
        worst["unit"] = max(worst["unit"], float(np.max(np.abs(d - oracle) / scale)))
        z = unit.linear(xt).detach()
        worst["relu"] = max(worst["relu"], float((torch.relu(z) + torch.relu(-z) - z.abs()).abs().amax()))
        diff = x - mean
        m2 = np.einsum("ni,ni->n", diff, np.linalg.solve(cov, diff.T).T)  # (x − μ)ᵀ Σ⁻¹ (x − μ)
        worst["sum"] = max(worst["sum"], float(np.max(np.abs((d**2).sum(-1) - m2) / m2)))
        logdens = -0.5 * (d**2).sum(-1) - 0.5 * np.linalg.slogdet(2 * np.pi * cov)[1]  # −½d² + const
        reference = multivariate_normal(mean, cov).logpdf(x)
        worst["density"] = max(
            worst["density"], float(np.max(np.abs(logdens - reference) / np.maximum(1, np.abs(reference))))
        )
        # controls
        flipped = np.abs(x @ w.T - b)
        worst["bias sign"] = max(worst["bias sign"], float(np.max(np.abs(flipped - oracle) / scale)))
        power = _units(mean, vec, lam**2)(xt).detach().numpy()  # w = λ^{-1} v
        worst["power"] = max(worst["power"], float(np.max(np.abs((power**2).sum(-1) - m2) / m2)))
        _, other, _ = _gaussian(dim, cfg, g)
        skew = _units(mean, other, lam)(xt).detach().numpy()  # Σ's eigenvalues on another covariance's axes
        worst["directions"] = max(worst["directions"], float(np.max(np.abs((skew**2).sum(-1) - m2) / m2)))
    u, rel = cfg.max_units, cfg.max_relative
    return [
        Measure("|w·x + b| vs |λ^{-1/2} vᵀ(x − μ)| (units of D·eps·(|w|·|x| + |b|))", worst["unit"], u, "law"),
        Measure("relu(z) + relu(−z) vs |z|: max abs difference", worst["relu"], 0.0, "law"),
        Measure("Σ over the D axes of d² vs (x − μ)ᵀΣ⁻¹(x − μ): max relative error", worst["sum"], rel, "law"),
        Measure("−½Σd² − ½log det 2πΣ vs scipy's log N(x; μ, Σ): max relative error", worst["density"], rel, "law"),
        Measure("control, b with the wrong sign: unit vs the formula (units)", worst["bias sign"], u, "control"),
        Measure("control, w = λ^{-1} v (wrong power): Σd² vs Mahalanobis², relative", worst["power"], rel, "control"),
        Measure(
            "control, axes of an unrelated covariance: Σd² vs Mahalanobis², relative",
            worst["directions"],
            rel,
            "control",
        ),
    ]


# --- 3. The Hopfield forward identity (§4.2) --------------------------------------------------------------------------


def hopfield(cfg: Cases, g: torch.Generator) -> list[Measure]:
    worst = dict.fromkeys(("law", "values", "uniform", "values as gradient"), 0.0)
    for dim in cfg.dims:
        for s in cfg.keys:
            for key_scale in cfg.key_scales:
                q = torch.randn(cfg.rows, dim, generator=g, dtype=F64)
                k = torch.randn(s, dim, generator=g, dtype=F64) * key_scale
                w_v = torch.randn(dim, dim, generator=g, dtype=F64) / math.sqrt(dim)
                for c in (1.0, dim**-0.5):
                    leaf = q.clone().requires_grad_(True)
                    (grad,) = torch.autograd.grad(torch.logsumexp(c * leaf @ k.T, -1).sum(), leaf)
                    grad = grad / c  # (1/c) ∇_q E = Σ_j α_j k_j
                    alpha = torch.softmax(c * q @ k.T, -1)  # (T, S)
                    # rounding: the softmax's relative error is about eps·|c q·k|, times the keys' size
                    unit = EPS * max(1.0, float((c * q @ k.T).abs().amax())) * float(k.abs().amax())
                    worst["law"] = max(worst["law"], float((grad - hopfield_law(alpha, k)).abs().amax()) / unit)
                    v = k @ w_v.T  # values v_j = W k_j
                    readout = hopfield_law(alpha, v)  # Σ_j α_j v_j
                    v_unit = unit * max(1.0, float(w_v.abs().sum(-1).amax()))
                    worst["values"] = max(worst["values"], float((readout - grad @ w_v.T).abs().amax()) / v_unit)
                    if s > 1:  # with one key, uniform weights are α
                        uniform = hopfield_law(torch.full_like(alpha, 1.0 / s), k)
                        worst["uniform"] = max(worst["uniform"], float((grad - uniform).abs().amax()) / unit)
                    worst["values as gradient"] = max(
                        worst["values as gradient"], float((grad - readout).abs().amax()) / unit
                    )
    u = cfg.max_units
    return [
        Measure(
            "(1/c)∇_q log Σ exp(c q·k) vs Σ α k, c = 1 and 1/√E (eps·max(1, |c q·k|)·max|k|)", worst["law"], u, "law"
        ),
        Measure("values v = W k: Σ α v vs W (1/c)∇_q E (units·‖W‖∞)", worst["values"], u, "law"),
        Measure("control, uniform weights for α: residual (units)", worst["uniform"], u, "control"),
        Measure(
            "control, the read-out of values v = W k as the gradient: residual (units)",
            worst["values as gradient"],
            u,
            "control",
        ),
    ]


# --- 4. Label smoothing as partial clamping (§7.3) --------------------------------------------------------------------


def _ce_grad(d: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """Autograd's ∂ℓ/∂d for the library's cross-entropy with label smoothing ε, summed over rows."""
    leaf = d.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(constrained_cross_entropy(leaf, y, label_smoothing=eps).sum(), leaf)
    return grad


def label_smoothing(cfg: Cases, g: torch.Generator) -> list[Measure]:
    keys = ("law", "torch", "clamp", "one-hot", "hard law", "wrong classes")
    worst = dict.fromkeys(keys, 0.0)
    for k in (c for c in cfg.components if c >= 2):
        for spread in cfg.spreads:
            d = torch.randn(cfg.rows, k, generator=g, dtype=F64) * spread
            y = torch.randint(0, k, (cfg.rows,), generator=g)
            onehot = F.one_hot(y, k).to(F64)
            r = torch.softmax(-d, -1)
            unit = EPS * max(1.0, float(d.abs().amax()))  # rounding of a softmax (and a loss) of size |d|
            for eps in cfg.smoothings:
                t = (1 - eps) * onehot + eps / k  # the smoothed target, built by hand
                grad = _ce_grad(d, y, eps)
                worst["law"] = max(worst["law"], float((grad - (t - r)).abs().amax()) / unit)
                ours = constrained_cross_entropy(d, y, label_smoothing=eps)
                theirs = F.cross_entropy(-d, y, reduction="none", label_smoothing=eps)
                # rounding of a loss: eps times its own size
                loss_unit = EPS * max(1.0, float(ours.abs().amax()))
                worst["torch"] = max(worst["torch"], float((ours - theirs).abs().amax()) / loss_unit)
                # t − e_y where r = e_y (the true class at 0, the rest ≥ 50: r_y = 1 − O(K e^{−50}))
                saturated = (d.abs() + 50.0) * (1 - onehot)
                residual = _ce_grad(saturated, y, eps) - (t - onehot)
                worst["one-hot"] = max(worst["one-hot"], float(residual.abs().amax()) / (EPS * float(saturated.amax())))
                if eps > 0:
                    # the partial clamp: zero gradient where r = t (d = −log t, up to a constant per row); ε = 0
                    # clamps fully, at r = e_y, which no finite d reaches
                    fixed = -torch.log(t) + d[:, :1]
                    clamp_unit = EPS * max(1.0, float(fixed.abs().amax()))  # a softmax of size |d|
                    at_t = float(_ce_grad(fixed, y, eps).abs().amax())
                    worst["clamp"] = max(worst["clamp"], at_t / clamp_unit)
                    worst["hard law"] = max(worst["hard law"], float((grad - (onehot - r)).abs().amax()) / unit)
                    spread_wrong = (1 - eps) * onehot + eps / (k - 1) * (1 - onehot)
                    worst["wrong classes"] = max(
                        worst["wrong classes"], float((grad - (spread_wrong - r)).abs().amax()) / unit
                    )
    u = cfg.max_units
    torch_name = "the library's loss vs torch's F.cross_entropy(−d, y, label_smoothing=ε) (eps·max(1, |ℓ|))"
    clamp_name = "partial clamp, ε > 0: |∂ℓ/∂d| at r = t (eps·max(1, |d|))"
    return [
        Measure("∂ℓ/∂d vs t − r, t = (1−ε)e_y + ε/K (eps·max(1, |d|))", worst["law"], u, "law"),
        Measure(torch_name, worst["torch"], u, "law"),
        Measure(clamp_name, worst["clamp"], u, "law"),
        Measure("at r = e_y the gradient is t − e_y (units of eps·max|d|)", worst["one-hot"], u, "law"),
        Measure("control, the hard-label law e_y − r on the smoothed loss (units)", worst["hard law"], u, "control"),
        Measure(
            "control, smoothing mass ε/(K−1) on the wrong classes only (units)", worst["wrong classes"], u, "control"
        ),
    ]


CHECKS: dict[str, Checks] = {
    "softmin": softmin,
    "mahalanobis": mahalanobis,
    "hopfield": hopfield,
    "label_smoothing": label_smoothing,
}
