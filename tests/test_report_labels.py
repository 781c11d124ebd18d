"""Every metric key the experiments produce has a human label and a unit; an unknown key still reads as words.

``tests/data/report_metric_keys.json`` lists the metric keys of every experiment at quick size (from
``implicit-em audit --quick``; quick and full sizes produce the same keys). Where a quick run folder is available
(``$IMPLICIT_EM_QUICK_RUN`` or ``runs/demo``, what ``make demo`` writes) the list is checked against it.
On the old code (the report showed the raw key) the module does not exist; removing one phrase (``"kl"``) or one unit
rule makes the first test fail.
"""

import json
import os
import re
from pathlib import Path

import pytest

from implicit_em.report._labels import criterion_label, figure_caption, is_explicit, metric_label, readable

_KEYS_FILE = Path(__file__).parent / "data" / "report_metric_keys.json"
_KEYS: dict[str, list[str]] = json.loads(_KEYS_FILE.read_text())
_SNAKE = re.compile(r"\b[a-z0-9]+_[a-z0-9_]+\b")


def test_every_quick_metric_key_has_an_explicit_label_and_unit() -> None:
    missing = [(e, k) for e, keys in _KEYS.items() for k in keys if not is_explicit(e, k)]
    assert not missing, f"{len(missing)} metric keys fall back to the generic label: {missing[:10]}"
    no_unit = [(e, k) for e, keys in _KEYS.items() for k in keys if metric_label(e, k).unit in ("", "—")]
    assert not no_unit


def test_no_label_of_a_snake_case_key_is_snake_case() -> None:
    shown = [metric_label(e, k).text for e, keys in _KEYS.items() for k in keys if "_" in k and " " not in k]
    assert len(shown) > 800  # most keys are identifiers
    assert not [t for t in shown if _SNAKE.search(re.sub(r"\$[^$]*\$", "", t))]


def test_the_key_list_covers_all_eighteen_experiments() -> None:
    from implicit_em.audit import EXPERIMENTS

    assert set(_KEYS) == {e.name for e in EXPERIMENTS}


def _quick_run() -> Path | None:
    for candidate in (os.environ.get("IMPLICIT_EM_QUICK_RUN"), "runs/demo"):
        if candidate and (Path(candidate) / "results.json").is_file():
            return Path(candidate)
    return None


@pytest.mark.skipif(_quick_run() is None, reason="no quick run folder ($IMPLICIT_EM_QUICK_RUN or runs/demo)")
def test_the_key_list_matches_a_quick_run() -> None:
    run = _quick_run()
    assert run is not None
    state = json.loads((run / "results.json").read_text())
    if state.get("size") != "quick":
        pytest.skip(f"{run} is a {state.get('size')} run")
    produced = {name: list(e.get("metrics", {})) for name, e in state["experiments"].items()}
    for name, keys in produced.items():
        assert keys == _KEYS[name], f"{name}: metric keys changed; regenerate {_KEYS_FILE.name} and label them"


def test_an_unknown_key_falls_back_to_words_not_snake_case() -> None:
    label = metric_label("theorem1", "brand_new_metricKey")
    assert not label.explicit and label.text == "brand new metric Key" and label.unit == "—"
    assert readable("rows_per_case") == "rows per case"


def test_a_prose_key_keeps_its_words_and_gives_its_unit() -> None:
    label = metric_label("same_optimum", "gd–EM path gap, per start (nats/sample)")
    assert (label.text, label.unit) == ("gd–EM path gap, per start", "nats/sample")
    assert metric_label("correntropy_robustness", "gaps (units of σ)").unit == "units of σ"


def test_wind_tunnel_kl_is_in_bits_and_ratios_are_ratios() -> None:
    assert metric_label("normalisation_necessity", "hmm_softmax_kl").unit == "bits"
    assert metric_label("normalisation_necessity", "hmm_lstm_ce_over_softmax_kl").unit == "ratio"
    assert metric_label("bayes_necessity", "softmax_seconds").unit == "s"


@pytest.mark.parametrize(
    ("path", "expected"),
    [("figures/theorem1.png", "Which gradient law"), ("figures/some_new_plot.png", "theorem1: some new plot")],
)
def test_figure_caption(path: str, expected: str) -> None:
    assert figure_caption("theorem1", path).startswith(expected)


def test_criteria_read_as_words_not_metric_keys() -> None:
    """Every criterion of the committed full audit reads without a snake_case key outside math and code (the old
    report showed "bijection: softmax_kl (tracks the posterior)" as written)."""
    results = json.loads((Path(__file__).parents[1] / "docs" / "audit-full-results.json").read_text())
    left = []
    for name, e in results["experiments"].items():
        for c in e["criteria"]:
            text = re.sub(r"\$[^$]*\$|[\w.]+\([^)]*\)", "", criterion_label(name, c["metric"]))  # math, code calls
            left += [(name, c["metric"], m) for m in _SNAKE.findall(text)]
    assert not left, left[:10]


def test_criterion_labels_name_the_arm_each_experiment_has() -> None:
    # bayes_necessity changes only the output (softmax attention in both transformers): never "sigmoid attention"
    text = criterion_label("bayes_necessity", "sigmoid_kl (as good as softmax)")
    assert text == "transformer, sigmoid BCE KL(Bayes ‖ model) (as good as softmax)"
    assert "attention" not in metric_label("bayes_necessity", "sigmoid_mae").text
    assert (
        criterion_label("attention_law", "W_Q, W_K: w_q_law (max over heads)")
        == "$W_{Q}$, $W_{K}$: $W_{Q}$ law (max over heads)"
    )
    code = "the library's loss vs torch's F.cross_entropy(−d, y, label_smoothing=ε)"
    assert criterion_label("foundations", code) == code  # code is left as written
    assert criterion_label("two_timescale", "wind_tunnel: fraction of seeds at a plateau") == (
        "wind tunnel: fraction of seeds at a plateau"
    )
