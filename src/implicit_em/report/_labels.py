"""How the report shows a metric and a criterion: the label and unit the claim declared where it measured it
(``metric_info`` of the record, :mod:`implicit_em.audit.metrics`), never a guess from the key; and the captions of
figures.

A record written before metrics were declared, or a key its claim did not declare, shows the key as words
(``rows_per_case`` -> "rows per case") with the unit "—" and ``explicit=False``.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

__all__ = ["Label", "criterion_label", "figure_caption", "metric_label", "readable"]

_SYMBOL = re.compile(r"[A-Za-z]_[A-Za-z0-9]{1,2}")  # W_Q, e_y: a letter with a short subscript
_IDENT = re.compile(r"(?<![\w$.])[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+(?![\w$(=])")  # an identifier inside prose


@dataclass(frozen=True)
class Label:
    """How the report shows a metric: its words (may hold ``$..$`` math), its unit, a note; ``explicit`` is False
    when the claim did not declare it."""

    text: str
    unit: str
    note: str = ""
    explicit: bool = True


def readable(key: str) -> str:
    """A key as words (``rows_per_case`` -> "rows per case", ``wallS`` -> "wall S")."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key.replace("_", " "))
    return re.sub(r"\s+", " ", spaced).strip() or key


def metric_label(key: str, declared: Mapping[str, Any] | None = None) -> Label:
    """The label of metric ``key`` as its claim declared it in ``declared`` (a record's ``metric_info``)."""
    spec = (declared or {}).get(key)
    if isinstance(spec, Mapping) and spec.get("label") and spec.get("unit"):
        return Label(str(spec["label"]), str(spec["unit"]), str(spec.get("note") or ""))
    return Label(readable(key), "—", explicit=False)


def criterion_label(text: str, declared: Mapping[str, Any] | None = None) -> str:
    """A criterion's text (written by the claim, often naming a metric key): a whole declared key reads as its
    label; an identifier inside prose as its declared label, else as words; ``$..$`` math is left as it is."""
    declared = declared or {}
    if text in declared:
        return metric_label(text, declared).text

    def words(match: re.Match[str]) -> str:
        ident = match.group(0)
        if ident in declared:
            return metric_label(ident, declared).text
        if _SYMBOL.fullmatch(ident):  # a subscripted symbol: W_Q, e_y
            base, sub = ident.split("_")
            return f"${base}_{{{sub}}}$"
        return readable(ident)

    parts = re.split(r"(\$[^$]*\$)", text)  # odd parts are math: untouched
    return "".join(part if i % 2 else _IDENT.sub(words, part) for i, part in enumerate(parts))


_CAPTIONS: dict[str, str] = {
    "theorem1": "Which gradient law autograd measures: the residual of each law, in eps·max|d| units, for the "
    "right laws (worst case) and the wrong ones (best case).",
    "gd_vs_em_step": "GD against EM steps: the best single learning rate's error as the clusters become "
    "imbalanced, the per-component steps, and the Xu–Jordan preconditioned step.",
    "same_optimum": "Every fitter (EM, online EM, gd) scored after every pass, from the same starts.",
    "same_optimum_gaps": "How far gd's path strays from EM's, against the controls (gd with another order, EM "
    "from another start).",
    "specialisation": "Adjusted Rand index and component shares per start, for prototypes, gd and EM.",
    "volume_collapse": "log det Σ over training with and without the volume term, and the error of Σ with it.",
    "attention_law": "Attention gradient laws: residual of each law and of its control, per head and per part.",
    "cross_entropy_regime": "Cross-entropy regime: the law's residual, accuracy and the top competitor's share "
    "of the wrong-class push over training, per arm (hard labels, smoothing, shuffled labels, sigmoids) and for "
    "the uniform-logit control.",
    "bayes_necessity_curves": "Wind tunnel: KL to the Bayes posterior over training, per model.",
    "bayes_necessity_mae": "Wind tunnel: entropy MAE per model (bits).",
    "sticky_sculpting": "Sticky testbed (deciding): KL to the Bayes filter of each init at random initialisation "
    "and after training, against the tracking bar, beside the other-window-label control; the companion's one head "
    "(reported) and its best fit within its class.",
    "foundations": "Foundations: soft-minimum bounds, the Mahalanobis unit and the Hopfield identity.",
    "correntropy_robustness": "Correntropy against squared error with outliers: the fits, the shift of the "
    "means over seeds, and the gradient on an outlier.",
    "open_set": "Open-set recognition: AUROC of each score per OOD kind, and the shares flagged.",
    "mixing_weight_escape": "Mixing weights escaping from a bad start: the weights over training per fitter.",
    "normalisation_as_volume": "Normalisation as volume: when and how often the features collapse under each "
    "mechanism and dose, against the arm without one (the distance objective without its volume term), with the "
    "volume-term and placebo controls.",
    "sticky_manifold": "Sticky testbed (deciding): alignment of the context read-out and the layer-1 value PCs with "
    "the symbol-mean span (mean cos² of principal angles) at init, after training and with shuffled labels; the "
    "held-out KL of every init against the tracking bar.",
    "sticky_manifold_validation": "The manifold measures' validation: both measures against KL / no-context for "
    "checkpoints of one run, an own-position control, random and trained inits and the shuffled-label model, with "
    "the tracking, twice-tracking and aligned bars.",
    "sticky_manifold_onehead": "The companion's one-head setting (reported, cannot represent the filter): "
    "alignment of the read-out and value subspaces with the symbol-mean span, and the value signature against "
    "Bayes.",
    "advantage_ablation": "Advantage ablation: KL and value signature of each arm (A-D) on both tasks.",
    "two_timescale": "Two time scales: distance of A, V, W_V and W_QK from their end points over training.",
    "normalisation_necessity_kl": "Normalisation necessity: KL to Bayes per architecture, on the three tasks.",
    "normalisation_necessity_curves": "Normalisation necessity: KL to Bayes over training, per architecture.",
}


def figure_caption(experiment: str, path: str) -> str:
    """A caption for the figure at ``path`` (relative to the run folder); its readable name when none is set."""
    stem = PurePosixPath(path.replace("\\", "/")).stem
    return _CAPTIONS.get(stem) or f"{readable(experiment)}: {readable(stem)}"
