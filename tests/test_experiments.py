"""The claims audit's protocol (criteria, configs, context, registry) and the quick mode of the lead's experiments
(the other experiments have their own test files; the runner has test_experiments_runner.py)."""

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from implicit_em.audit import (
    EXPERIMENTS,
    Context,
    Experiment,
    Result,
    criterion,
    gate,
    gated,
    identity,
    select,
)
from implicit_em.audit.claims import theorem1
from implicit_em.audit.core import roles
from implicit_em.audit.provenance import code_files, config_dict, config_hash


def _ctx(tmp_path: Path) -> Context:
    return Context(tmp_path)


# --- criteria ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("comparison", "passing", "failing"),
    [("<=", 2.0, 2.5), (">=", 2.0, 1.5), ("<", 1.5, 2.0), (">", 2.5, 2.0), ("==", 2.0, 2.0000001)],
)
def test_criterion_passes_and_fails_by_its_comparison(comparison: Any, passing: float, failing: float) -> None:
    ok = criterion("m", passing, comparison, 2.0)
    bad = criterion("m", failing, comparison, 2.0)
    assert ok.passed and not bad.passed
    assert (ok.metric, ok.comparison, ok.threshold, ok.measured) == ("m", comparison, 2.0, passing)


@pytest.mark.parametrize("comparison", ["<=", ">=", "<", ">", "=="])
def test_a_nan_measurement_fails_every_comparison(comparison: Any) -> None:
    assert not criterion("m", math.nan, comparison, 0.0).passed


def test_criterion_rejects_an_unknown_comparison() -> None:
    with pytest.raises(ValueError, match="comparison"):
        criterion("m", 1.0, "~", 1.0)  # type: ignore[arg-type]


def test_criteria_are_recorded_in_the_result_as_json() -> None:
    res = Result("REFUTED", "s", {"x": 3.0}, [criterion("x", 3.0, "<=", 1.0), criterion("y", math.inf, ">", 0)])
    d = json.loads(json.dumps(res.to_dict()))
    assert d["criteria"] == [
        {"metric": "x", "comparison": "<=", "threshold": 1.0, "measured": 3.0, "passed": False, "role": "test"},
        {"metric": "y", "comparison": ">", "threshold": 0.0, "measured": "inf", "passed": True, "role": "test"},
    ]


def test_a_failed_gate_makes_any_verdict_undecided_and_a_held_one_leaves_it() -> None:
    held, failed = gate("tracks", 0.05, "<=", 0.1), gate("plateau", 0.2, "<=", 0.05)
    assert (held.role, failed.role, held.passed, failed.passed) == ("gate", "gate", True, False)
    tests = [criterion("ratio", 3.0, ">=", 2.0)]
    for verdict in ("SUPPORTED", "PARTIAL", "REFUTED"):
        assert gated(verdict, [held, *tests]) == verdict
        assert gated(verdict, [held, failed, *tests]) == "UNDECIDED"
    assert gated("REFUTED", [criterion("ratio", 0.0, ">=", 2.0)]) == "REFUTED"  # a failed test is not a gate
    assert gated("ERROR", [failed]) == "ERROR"


def test_a_failed_identity_is_a_bug_not_a_verdict() -> None:
    holds, broken = identity("sum of r", 1e-17, "<=", 1e-12), identity("sum of grads", 0.3, "<=", 1e-12)
    assert holds.role == "identity" and holds.passed and not broken.passed
    assert gated("VERIFIED", [holds]) == "VERIFIED"
    with pytest.raises(AssertionError, match="sum of grads"):
        gated("VERIFIED", [holds, broken])


def test_evidence_comes_from_tests_only() -> None:
    """SUPPORTED, PARTIAL and REFUTED rest on at least one test; identities and gates alone give VERIFIED (or
    UNDECIDED when a gate failed); VERIFIED with a test among the criteria says less than the rule measured."""
    law, power = identity("law residual", 1e-16, "<=", 1e-12), gate("planted error caught", 5.0, ">", 1.0)
    for verdict in ("SUPPORTED", "PARTIAL", "REFUTED"):
        with pytest.raises(ValueError, match="VERIFIED"):
            gated(verdict, [law, power])  # type: ignore[arg-type]
        assert gated(verdict, [law, power, criterion("learns", 0.9, ">=", 0.5)]) == verdict  # type: ignore[arg-type]
    assert gated("VERIFIED", [law, power]) == "VERIFIED"
    assert gated("VERIFIED", [law, gate("planted error caught", 0.5, ">", 1.0)]) == "UNDECIDED"
    with pytest.raises(ValueError, match="1 of these criteria are tests"):
        gated("VERIFIED", [law, criterion("learns", 0.9, ">=", 0.5)])
    counts = roles([law, power, criterion("learns", 0.9, ">=", 0.5)])
    assert counts == {"test": 1, "gate": 1, "identity": 1}


def test_criterion_rejects_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="role"):
        criterion("m", 1.0, "<=", 1.0, role="hint")  # type: ignore[arg-type]


def test_result_rejects_an_unknown_verdict_and_makes_json_safe() -> None:
    with pytest.raises(ValueError, match="verdict"):
        Result("MAYBE", "", {})  # type: ignore[arg-type]
    d = Result("PARTIAL", "s", {"x": float("nan"), "y": [1.0, float("inf")]}).to_dict()
    json.dumps(d)
    assert d["metrics"] == {"x": "nan", "y": [1.0, "inf"]}


# --- configs and the registry -------------------------------------------------------------------------------------


def test_registry_lists_the_experiments_in_report_order() -> None:
    assert [e.name for e in EXPERIMENTS] == [
        "theorem1",
        "gd_vs_em_step",
        "same_optimum",
        "specialisation",
        "volume_collapse",
        "attention_law",
        "cross_entropy_regime",
        "bayes_necessity",
        "sticky_sculpting",
        "foundations",
        "correntropy_robustness",
        "open_set",
        "mixing_weight_escape",
        "normalisation_as_volume",
        "sticky_manifold",
        "advantage_ablation",
        "two_timescale",
        "normalisation_necessity",
    ]
    for e in EXPERIMENTS:
        assert e.claim and e.source and callable(e.run)
    with pytest.raises(ValueError, match="unknown experiment"):
        select(EXPERIMENTS, ["no_such_claim"])
    assert [e.name for e in select(EXPERIMENTS, ["volume_collapse", "theorem1"])] == ["theorem1", "volume_collapse"]


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_config_sizes_are_frozen_distinct_and_json(exp: Experiment[Any]) -> None:
    quick, full = exp.Config.quick(), exp.Config.full()
    assert quick != full  # full() is a different size, not the default again
    for cfg in (quick, full):
        assert cfg.seed == 0
        with pytest.raises(dataclasses.FrozenInstanceError):
            cfg.seed = 1  # type: ignore[misc]
        assert json.loads(json.dumps(config_dict(cfg))) == config_dict(cfg)
        assert len(config_hash(cfg)) == 64
    assert config_hash(quick) != config_hash(full)


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_the_seed_goes_into_the_resolved_config(exp: Experiment[Any]) -> None:
    cfg = exp.config(quick=True, seed=7)
    assert cfg.seed == 7
    assert dataclasses.replace(cfg, seed=0) == exp.Config.quick()
    assert exp.config(quick=False, seed=2) == dataclasses.replace(exp.Config.full(), seed=2)


def test_config_hash_is_sha256_of_canonical_json_and_changes_with_a_threshold() -> None:
    import hashlib

    @dataclasses.dataclass(frozen=True)
    class Tiny:
        seed: int = 0
        tol: float = 0.5
        sizes: tuple[int, ...] = (1, 2)

    expected = hashlib.sha256(b'{"seed":0,"sizes":[1,2],"tol":0.5}').hexdigest()  # sorted keys, no spaces
    assert config_hash(Tiny()) == expected
    base = theorem1.Config.quick()
    assert config_hash(base) == config_hash(theorem1.Config.quick())
    assert config_hash(dataclasses.replace(base, max_scaled_residual=15.0)) != config_hash(base)


def test_an_experiment_needs_a_frozen_config_with_a_seed() -> None:
    @dataclasses.dataclass
    class Mutable:
        seed: int = 0

    @dataclasses.dataclass(frozen=True)
    class NoSeed:
        n: int = 0

        @classmethod
        def quick(cls) -> "NoSeed":
            return cls()

        @classmethod
        def full(cls) -> "NoSeed":
            return cls()

    def run(cfg: Any, ctx: Context) -> Result:
        return Result("SUPPORTED", "", {})

    with pytest.raises(TypeError, match="frozen dataclass"):
        Experiment("x", "x", "c", "s", Mutable, run)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="seed"):
        Experiment("x", "x", "c", "s", NoSeed, run)  # type: ignore[type-var]


# --- the context ---------------------------------------------------------------------------------------------------


def test_save_figure_writes_a_png_inside_the_run_folder_and_closes_it(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    ctx = Context(tmp_path / "run")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    rel = ctx.save_figure(fig, "line")
    assert rel == "figures/line.png"
    data = (tmp_path / "run" / rel).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)  # closed
    assert ctx.save_figure(plt.figure(), "named.png") == "figures/named.png"


@pytest.mark.parametrize("name", ["../escape", "sub/x", ""])
def test_save_figure_refuses_a_name_that_leaves_the_figures_folder(tmp_path: Path, name: str) -> None:
    import matplotlib.pyplot as plt

    fig = plt.figure()
    with pytest.raises(ValueError, match="plain file name"):
        Context(tmp_path).save_figure(fig, name)
    plt.close(fig)


# --- each experiment's own tests: tests/test_experiments_<name>.py ---------------------------------------------


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_no_experiment_hashes_the_registry(exp: Experiment[Any]) -> None:
    """`from implicit_em.audit import _helper` would put the registry (experiments/__init__.py) and through it
    every other experiment into the code hash, so adding any experiment would make a resume rerun this one
    (mixing_weight_escape did until its import was written `import implicit_em.audit.testbeds.escape as esc`).
    Importing another experiment's module for what it computes (sticky_manifold from sticky_sculpting) is fine."""
    files = code_files(exp.run.__module__)
    assert exp.run.__module__ in files  # the walk found the module itself, so the checks below can fail
    assert "implicit_em.audit" not in files
    assert "implicit_em.audit.runner" not in files
