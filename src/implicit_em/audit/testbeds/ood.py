r"""Out-of-distribution inputs on the digits' grid and the scores' ranking: natural-image patches, noise images, the
AUROC and its null spread (read by ``open_set``).

Natural-image patches are made the way the digits were (32×32 bitmaps counted in 4×4 blocks): a random 32×32
grey-level patch (ITU-R 601 luma) of scikit-learn's two bundled photographs (china.jpg, flower.jpg; no download),
scaled to [0, 1] by its own minimum and maximum, averaged in 4×4 blocks to 8×8 and rounded to the digits' integer
0–16 scale; a patch whose grey range is under 16 of 255 (flat sky) is redrawn.

The AUROC of a score :math:`s` that should be higher on OOD inputs than on known ones is
:math:`P(s_\mathrm{ood} > s_\mathrm{known}) + \tfrac12 P(s_\mathrm{ood} = s_\mathrm{known})`, Mann–Whitney's
:math:`U / (n_\mathrm{known} n_\mathrm{ood})`; a random score's has mean 1/2 and standard deviation
:math:`\sqrt{(n_1+n_2+1)/(12 n_1 n_2)}` (no ties).
"""

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.distances import NoneOfTheAbove
from implicit_em.objectives import lse

__all__ = [
    "SCORES",
    "SETS",
    "auroc",
    "distributions",
    "log_not_top",
    "natural_patches",
    "noise_images",
    "null_sd",
    "pool_numbers",
    "roc_curve",
    "scores",
]

SETS = ("unseen", "uniform", "marginal", "natural")  # the OOD pool: digits 7–9, two noise sets, natural patches
SCORES = ("msp", "null", "softmin", "min_d")  # 1 − max r (closed), r_0 (open), −L and min d (closed)

NATURAL_PATCH = 32  # natural-image patches: 32×32 grey levels, 4×4 blocks to 8×8, as the digits were made
NATURAL_MIN_RANGE = 16.0  # a patch whose grey range is under 16 of 255 (flat sky) is redrawn

_GREY: list[np.ndarray] = []  # scikit-learn's two sample photographs in grey levels, loaded once


def _photographs() -> list[np.ndarray]:
    """scikit-learn's bundled sample photographs as grey levels (H, W) in 0–255, float64 (loaded once)."""
    if not _GREY:
        from sklearn.datasets import load_sample_images

        _GREY.extend(im.astype(np.float64) @ np.array([0.299, 0.587, 0.114]) for im in load_sample_images().images)
    return _GREY


def natural_patches(seed: int, n: int) -> np.ndarray:
    """``n`` natural-image patches on the digits' 8×8 grid and integer 0–16 scale, (n, 64) float64 (module
    docstring), drawn from ``numpy.random.default_rng(seed)``."""
    grey_images = _photographs()
    rng = np.random.default_rng(seed)
    size, block = NATURAL_PATCH, NATURAL_PATCH // 8
    out: list[np.ndarray] = []
    while len(out) < n:
        grey = grey_images[int(rng.integers(len(grey_images)))]
        r, c = int(rng.integers(grey.shape[0] - size + 1)), int(rng.integers(grey.shape[1] - size + 1))
        patch = grey[r : r + size, c : c + size]
        low, high = float(patch.min()), float(patch.max())
        if high - low < NATURAL_MIN_RANGE:
            continue
        blocks = ((patch - low) / (high - low)).reshape(8, block, 8, block).mean(axis=(1, 3))
        out.append(np.rint(16.0 * blocks).ravel())
    return np.stack(out) if out else np.zeros((0, 64))


def noise_images(
    rng: np.random.Generator, x_train: np.ndarray, n_uniform: int, n_marginal: int
) -> tuple[np.ndarray, np.ndarray]:
    """Noise on the digits' pixels, (n_uniform, F) and (n_marginal, F): every pixel uniform on [0, 16], and every
    pixel p of image i drawn from pixel p of a random training image (x_train (N, F)): the per-pixel marginals with no
    digit structure. Both from ``rng``, in that order."""
    n_features = x_train.shape[1]
    uniform = rng.uniform(0.0, 16.0, size=(n_uniform, n_features))
    rows = rng.integers(0, len(x_train), size=(n_marginal, n_features))  # pixel p of image i from row rows[i, p]
    return uniform, x_train[rows, np.arange(n_features)]


def log_not_top(logits: Tensor) -> Tensor:
    """log(1 − max r) for r = softmax(logits) (..., K) -> (...), without cancellation: the logsumexp over the
    non-top entries minus the logsumexp over all."""
    top = logits.argmax(dim=-1, keepdim=True)
    others = logits.scatter(-1, top, float("-inf"))
    return torch.logsumexp(others, dim=-1) - torch.logsumexp(logits, dim=-1)


def auroc(known: Tensor | np.ndarray, ood: Tensor | np.ndarray) -> float:
    """Area under the ROC curve of a score that should be higher on ``ood`` than on ``known`` (module docstring),
    from average ranks, ties counted ½."""
    from scipy.stats import rankdata

    a, b = np.asarray(known, dtype=np.float64).ravel(), np.asarray(ood, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError(f"need scores on both sides, got {a.size} known and {b.size} OOD")
    ranks = rankdata(np.concatenate([a, b]))
    u = ranks[a.size :].sum() - b.size * (b.size + 1) / 2
    return float(u / (a.size * b.size))


def null_sd(n1: int, n2: int) -> float:
    """Standard deviation of the AUROC of a random score (Mann–Whitney under the null, no ties)."""
    return math.sqrt((n1 + n2 + 1) / (12 * n1 * n2))


def roc_curve(known: Tensor, ood: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates over every threshold (OOD = positive), each (n_known + n_ood + 1,)."""
    scores = torch.cat([known, ood]).numpy()
    labels = np.concatenate([np.zeros(len(known)), np.ones(len(ood))])
    order = np.argsort(-scores, kind="stable")
    tp, fp = np.cumsum(labels[order]), np.cumsum(1 - labels[order])
    return np.concatenate([[0.0], fp / fp[-1]]), np.concatenate([[0.0], tp / tp[-1]])


def scores(model: nn.Module, null: NoneOfTheAbove | None, x: Tensor) -> dict[str, Tensor]:
    """Per input of x (N, F): max r and r_0 as probabilities, and the OOD scores (higher = more anomalous) in log space,
    each (N,): ``msp`` log(1 − max r), ``softmin`` −L, ``min_d`` min d, and with a null ``null`` log r_0."""
    with torch.no_grad():
        d = model(x)  # (N, K)
        out = {
            "max_r": torch.softmax(-d, -1).amax(-1),
            "msp": log_not_top(-d),  # log(1 − max r), monotone in 1 − max r
            "softmin": -lse(d),
            "min_d": d.amin(-1),
        }
        if null is not None:
            log_r = torch.log_softmax(-null(d), -1)  # (N, K + 1)
            out["r0"] = log_r[:, -1].exp()
            out["null"] = log_r[:, -1]  # log r_0, monotone in r_0
    return out


def pool_numbers(
    confident_r: float, known: dict[str, dict[str, Tensor]], pool: dict[str, dict[str, Tensor]], sizes: list[int]
) -> dict[str, Any]:
    """The confident (max r > ``confident_r``, closed) and flagged (r_0 > 1/2, open) shares and each score's AUROC,
    on the whole pool and per OOD set. ``known`` and ``pool`` hold :func:`scores` of the held-out known images and of
    the pool under ``"closed"`` and ``"open"``; the pool is the sets of ``SETS`` of ``sizes`` in that order."""
    c_known, c_ood, o_known, o_ood = known["closed"], pool["closed"], known["open"], pool["open"]
    model_of = {"msp": "closed", "null": "open", "softmin": "closed", "min_d": "closed"}
    noise = slice(sizes[0], sizes[0] + sizes[1] + sizes[2])  # uniform and marginal noise
    out: dict[str, Any] = {
        "confident_share": float((c_ood["max_r"] > confident_r).double().mean()),
        "confident_share_known": float((c_known["max_r"] > confident_r).double().mean()),
        "confident_share_noise": float((c_ood["max_r"][noise] > confident_r).double().mean()),
        **{f"auroc_{s}": auroc(known[model_of[s]][s], pool[model_of[s]][s]) for s in SCORES},
        "auroc_softmin_open": auroc(o_known["softmin"], o_ood["softmin"]),
        "auroc_msp_open": auroc(o_known["msp"], o_ood["msp"]),
        "flagged_known": float((o_known["r0"] > 0.5).double().mean()),
        "flagged_ood": float((o_ood["r0"] > 0.5).double().mean()),
        "null_share_known": float(o_known["r0"].mean()),
    }
    start = 0
    for name, size in zip(SETS, sizes, strict=True):
        part = slice(start, start + size)
        start += size
        out[f"confident_share_{name}"] = float((c_ood["max_r"][part] > confident_r).double().mean())
        out[f"flagged_{name}"] = float((o_ood["r0"][part] > 0.5).double().mean())
        for s in SCORES:
            out[f"auroc_{s}_{name}"] = auroc(known[model_of[s]][s], pool[model_of[s]][s][part])
    return out


def distributions(
    known: dict[str, dict[str, Tensor]], pool: dict[str, dict[str, Tensor]], sizes: list[int]
) -> dict[str, Any]:
    """The distributions the figure draws: max r (closed) and r_0 (open) per set, and the four scores' ROC inputs."""
    parts = {
        "unseen": slice(0, sizes[0]),
        "noise": slice(sizes[0], sizes[0] + sizes[1] + sizes[2]),
        "natural": slice(sizes[0] + sizes[1] + sizes[2], None),
    }
    hist: dict[str, Any] = {}
    for key, model in (("max_r", "closed"), ("r0", "open")):
        hist[key] = {"known": known[model][key], **{n: pool[model][key][p] for n, p in parts.items()}}
    hist["roc"] = {
        label: (known[model][s], pool[model][s])
        for label, model, s in (
            ("1 − max r (closed)", "closed", "msp"),
            ("r_0 (open)", "open", "null"),
            ("−L (closed)", "closed", "softmin"),
            ("min d (closed)", "closed", "min_d"),
        )
    }
    return hist
