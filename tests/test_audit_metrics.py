"""Every metric a claim measures is declared where it is measured, with a unit the report shows as declared.

``tests/data/audit_metric_units.json`` holds, per experiment, the key, label and unit of every metric a quick run
declares (``python tools/audit_metric_units.py RUN_DIR`` writes it from a quick run folder). Where a quick run folder
is available (``$IMPLICIT_EM_QUICK_RUN`` or ``runs/demo``, what ``make demo`` writes) it is checked against it.
"""

import json
import os
from pathlib import Path

import pytest

from implicit_em.audit import EXPERIMENTS
from implicit_em.audit.metrics import UNITS, Metric, Metrics, info

_FILE = Path(__file__).parent / "data" / "audit_metric_units.json"
_DECLARED: dict[str, dict[str, dict[str, str]]] = json.loads(_FILE.read_text())


def test_the_list_covers_every_claim_and_every_unit_is_known() -> None:
    assert set(_DECLARED) == {e.name for e in EXPERIMENTS}
    bad = [(e, k, d["unit"]) for e, keys in _DECLARED.items() for k, d in keys.items() if d["unit"] not in UNITS]
    assert bad == []
    assert all(d["label"].strip() for keys in _DECLARED.values() for d in keys.values())


@pytest.mark.parametrize(
    ("experiment", "fragment", "unit"),
    [
        # the keys the old pattern table labelled wrongly
        ("gd_vs_em_step", "sweep: imbalance", "ratio"),  # was "samples"
        ("theorem1", "max_scaled_residual_float64", "eps units"),  # an eps-scaled residual, was "sign (±1)"
    ],
)
def test_the_keys_once_mislabelled_carry_their_declared_unit(experiment: str, fragment: str, unit: str) -> None:
    found = {k: d["unit"] for k, d in _DECLARED[experiment].items() if fragment in k}
    assert found and set(found.values()) == {unit}, found


def test_no_superseded_verdict_is_among_the_metrics() -> None:
    """A superseded rule is described on its claim's page, not computed: no metric is a verdict of an old rule."""
    old = [(e, k) for e, keys in _DECLARED.items() for k in keys if "first design" in k or "before issue" in k]
    assert old == []


def _quick_run() -> Path | None:
    for candidate in (os.environ.get("IMPLICIT_EM_QUICK_RUN"), "runs/demo"):
        if candidate and (Path(candidate) / "results.json").is_file():
            return Path(candidate)
    return None


@pytest.mark.skipif(_quick_run() is None, reason="no quick run folder ($IMPLICIT_EM_QUICK_RUN or runs/demo)")
def test_a_quick_run_declares_every_metric_as_listed() -> None:
    run = _quick_run()
    assert run is not None
    state = json.loads((run / "results.json").read_text())
    if state.get("size") != "quick":
        pytest.skip(f"{run} is a {state.get('size')} run")
    for name, e in state["experiments"].items():
        assert e.get("undeclared_metrics") == [], f"{name}: metrics set without a unit: {e.get('undeclared_metrics')}"
        units = {k: d["unit"] for k, d in e.get("metric_info", {}).items()}
        assert units == {k: d["unit"] for k, d in _DECLARED[name].items()}, f"{name}: regenerate {_FILE.name}"


def test_metrics_refuse_an_unknown_unit_and_a_second_declaration() -> None:
    m = Metrics()
    m.put("kl", 0.1, "bits", "KL to Bayes")
    with pytest.raises(ValueError, match="unknown unit 'bit'"):
        m.put("kl2", 0.1, "bit", "KL")
    with pytest.raises(ValueError, match="declared twice"):
        m.put("kl", 0.2, "nats", "KL to Bayes")
    m["raw"] = 1.0
    assert m.undeclared() == ["raw"] and info(m) == {"kl": {"label": "KL to Bayes", "unit": "bits", "note": ""}}
    with pytest.raises(ValueError, match="cannot be empty"):
        Metric(" ", "bits")


def test_the_report_shows_the_declared_label_and_never_guesses() -> None:
    from implicit_em.report._labels import criterion_label, metric_label

    declared = {"softmax_kl": {"label": "softmax: KL to Bayes", "unit": "bits", "note": ""}}
    assert (metric_label("softmax_kl", declared).text, metric_label("softmax_kl", declared).unit) == (
        "softmax: KL to Bayes",
        "bits",
    )
    undeclared = metric_label("sigmoid_kl", declared)
    assert (undeclared.text, undeclared.unit, undeclared.explicit) == ("sigmoid kl", "—", False)
    assert criterion_label("softmax_kl", declared) == "softmax: KL to Bayes"
    assert criterion_label("bijection: softmax_kl (tracks)", declared) == "bijection: softmax: KL to Bayes (tracks)"
    assert criterion_label("the W_Q law, $a_b$", declared) == "the $W_{Q}$ law, $a_b$"
