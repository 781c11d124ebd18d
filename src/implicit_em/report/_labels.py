"""Human labels and units for metric keys, and captions for figures (the tables are in :mod:`._label_table`).

:func:`metric_label` never shows a raw snake_case key: a key the tables do not cover falls back to readable words
(``rows_per_case`` -> "rows per case") with the unit "—", and :func:`is_explicit` says whether the tables covered
it, which the tests check for every key the experiments produce.
"""

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from implicit_em.report._label_table import EXACT, PHRASES, UNITS

__all__ = ["Label", "criterion_label", "figure_caption", "is_explicit", "metric_label"]

_UNIT_IN_KEY = re.compile(r"\s*\(([^()]*\b(?:units|nats/sample|nats|bits|data std)[^()]*)\)\s*$")
_UNITS_OF = re.compile(r"\b(units of [^(),;:]+?)\)|\((rad)\b")  # "(units of σ)", "(rad, median ...)"
_IDENT = re.compile(r"(?<![\w$])[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+(?![\w$])")  # an identifier inside prose
_SYMBOL = re.compile(r"[A-Za-z]_[A-Za-z0-9]{1,2}")  # W_Q, e_y: a letter with a short subscript
_PROSE = re.compile(r"[\s'’()|/:,·−–]|[^\x00-\x7f]")  # a key written as words, not as an identifier


@dataclass(frozen=True)
class Label:
    """How the report shows a metric: its words (may hold ``$..$`` math), its unit, a note; ``explicit`` is False
    when only the fallback produced it."""

    text: str
    unit: str
    note: str = ""
    explicit: bool = True


def _unit(experiment: str, key: str) -> str | None:
    for rules in (UNITS.get(experiment, []), UNITS["*"]):
        for pattern, unit in rules:
            if re.search(pattern, key):
                return unit
    return None


def _words(experiment: str, key: str) -> tuple[str, bool]:
    """``key``'s snake_case words through the phrase tables, longest phrase first; and whether all were known."""
    table = {**PHRASES["*"], **PHRASES.get(experiment, {})}
    tokens, out, known = key.split("_"), [], True
    i = 0
    while i < len(tokens):
        for j in range(len(tokens), i, -1):
            phrase = "_".join(tokens[i:j])
            if phrase in table:
                out.append(table[phrase])
                i = j
                break
        else:
            out.append(tokens[i])
            known = known and tokens[i].isdigit()  # a bare number ("window_8") reads as itself
            i += 1
    return " ".join(w for w in out if w), known


def readable(key: str) -> str:
    """The fallback: an identifier as words (``rows_per_case`` -> "rows per case", ``wallS`` -> "wall S")."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key.replace("_", " "))
    return re.sub(r"\s+", " ", spaced).strip() or key


def metric_label(experiment: str, key: str) -> Label:
    """The label of metric ``key`` of ``experiment``: exact entry, else prose key or phrase words with a unit rule,
    else the readable fallback (``explicit=False``)."""
    if (experiment, key) in EXACT:
        text, exact_unit, note = EXACT[(experiment, key)]
        return Label(text, exact_unit, note)
    unit: str | None = _unit(experiment, key)
    if _PROSE.search(key):
        m = _UNIT_IN_KEY.search(key)
        text = _IDENT.sub(lambda i: _words(experiment, i.group(0))[0], key[: m.start()] if m else key)
        of = _UNITS_OF.search(key)
        unit = (of.group(1) or of.group(2)) if of else unit or (m.group(1) if m else None)
        return Label(text, unit or "—", explicit=unit is not None)
    text, known = _words(experiment, key)
    if known and unit is not None:
        return Label(text, unit)
    return Label(readable(key), unit or "—", explicit=False)


def criterion_label(experiment: str, text: str) -> str:
    """A criterion's text (written by the experiment, often naming a metric key: "bijection: softmax_kl (tracks
    the posterior)") with every snake_case identifier in it read through the phrase tables, or as plain words
    when they do not cover it; ``$..$`` math is left for the math filter. A whole-key criterion is labelled like
    the metric it names."""
    if (experiment, text) in EXACT or not _PROSE.search(text):
        return metric_label(experiment, text).text

    def words(match: re.Match[str]) -> str:
        ident, before, after = match.group(0), text[: match.start()], text[match.end() :]
        if before.endswith(".") or after.startswith(("(", "=")):  # code (F.cross_entropy(..., label_smoothing=ε))
            return ident
        if _SYMBOL.fullmatch(ident):  # a subscripted symbol: W_Q, e_y
            base, sub = ident.split("_")
            return f"${base}_{{{sub}}}$"
        phrase, known = _words(experiment, ident)
        return phrase if known else readable(ident)

    parts = re.split(r"(\$[^$]*\$)", text)  # odd parts are math: untouched
    out = "".join(part if i % 2 else _IDENT.sub(words, part) for i, part in enumerate(parts))
    return out.replace("::", ":")  # a phrase ending in ":" ("wind tunnel:") before the text's own colon


def is_explicit(experiment: str, key: str) -> bool:
    """Whether the label tables cover ``key`` of ``experiment`` (words and unit), not only the fallback."""
    return metric_label(experiment, key).explicit


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
    "cross_entropy_regime": "Cross-entropy regime: the law's residual, accuracy and where the wrong-class "
    "gradient goes over training.",
    "bayes_necessity_curves": "Wind tunnel: KL to the Bayes posterior over training, per model.",
    "bayes_necessity_mae": "Wind tunnel: entropy MAE per model (bits).",
    "sticky_sculpting": "Sticky Markov chain: KL to the Bayes update at init and after training, per run.",
    "foundations": "Foundations: soft-minimum bounds, the Mahalanobis unit and the Hopfield identity.",
    "correntropy_robustness": "Correntropy against squared error with outliers: the fits, the shift of the "
    "means over seeds, and the gradient on an outlier.",
    "open_set": "Open-set recognition: AUROC of each score per OOD kind, and the shares flagged.",
    "mixing_weight_escape": "Mixing weights escaping from a bad start: the weights over training per fitter.",
    "normalisation_as_volume": "Normalisation as volume: the spread of the normalised features per arm over "
    "training, their effective rank, and the k-means ARI per replicate.",
    "sticky_manifold": "Sticky testbed (deciding): alignment of the context read-out and the layer-1 value PCs with "
    "the symbol-mean span (mean cos² of principal angles) at init, after training and with shuffled labels; the "
    "held-out KL of every init against the tracking bar.",
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
