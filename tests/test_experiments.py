"""The claims audit: the runner, the report, the CLI, and the quick mode of the lead's experiments (the other
experiments have their own test files)."""

import json
from pathlib import Path

import pytest

from implicit_em.experiments import (
    EXPERIMENTS,
    Context,
    Result,
    gd_vs_em_step,
    run_audit,
    same_optimum,
    select,
    theorem1,
    volume_collapse,
)
from implicit_em.report import write_report


def _ctx(tmp_path: Path) -> Context:
    return Context(quick=True, seed=0, figure_dir=tmp_path / "figures")


def _figures_exist(result: Result, tmp_path: Path) -> None:
    assert result.figures
    for rel in result.figures:
        assert (tmp_path / rel).stat().st_size > 1000


def test_registry_discovers_experiments_in_order_with_unique_names() -> None:
    names = [e.name for e in EXPERIMENTS]
    assert len(names) == len(set(names))
    assert names[:5] == ["theorem1", "gd_vs_em_step", "same_optimum", "specialisation", "volume_collapse"]
    for e in EXPERIMENTS:
        assert e.claim and e.source and callable(e.run)
    with pytest.raises(ValueError, match="unknown experiment"):
        select(EXPERIMENTS, ["no_such_claim"])


def test_result_rejects_an_unknown_verdict_and_makes_json_safe() -> None:
    with pytest.raises(ValueError, match="verdict"):
        Result("MAYBE", "", {})  # type: ignore[arg-type]
    d = Result("PARTIAL", "s", {"x": float("nan"), "y": [1.0, float("inf")]}).to_dict()
    json.dumps(d)
    assert d["metrics"] == {"x": "nan", "y": [1.0, "inf"]}


def test_theorem1_holds_to_round_off_in_both_dtypes(tmp_path: Path) -> None:
    r = theorem1.run(_ctx(tmp_path))
    m = r.metrics
    assert r.verdict == "SUPPORTED"
    assert m["max_residual_float64"] < 1e-12
    assert m["max_scaled_residual_float32 (eps·max|d| units)"] <= 16
    assert m["L_minus_gradient_minus_plus_r"] < 1e-12  # the minimisation form has gradient +r
    assert m["L_minus_gradient_minus_minus_r (≈ 2·max r)"] > 1.0  # and not the printed −r
    _figures_exist(r, tmp_path)


def test_gd_step_is_not_em_step_but_preconditioned_gd_is(tmp_path: Path) -> None:
    r = gd_vs_em_step.run(_ctx(tmp_path))
    m = r.metrics
    s1, s2 = m["S_j (soft counts)"]
    assert abs(s1 - s2) > 10  # unequal soft counts, the review's condition
    assert m["best single step: relative error vs EM update"] > 1e-3
    assert m["per-component steps: relative error vs EM update"] < 1e-12
    assert m["Xu–Jordan full covariance (D=3, K=4): relative error"] < 1e-10
    assert r.verdict == "REFUTED"
    _figures_exist(r, tmp_path)


def test_volume_term_verdict_follows_its_numbers(tmp_path: Path) -> None:
    r = volume_collapse.run(_ctx(tmp_path))
    m = r.metrics
    assert m["growth of log det Σ without volume"] > 4.6  # log 100: the metric degenerates
    assert m["with volume: relative error of Σ"] < 0.05
    # the volume grows rather than shrinks, so the claim's stated mechanism is the wrong way round
    assert m["log det Σ, no volume: last epoch"] > m["log det Σ, no volume: first epoch"]
    assert r.verdict == "PARTIAL"
    _figures_exist(r, tmp_path)


def test_em_and_gd_share_the_fixed_point(tmp_path: Path) -> None:
    r = same_optimum.run(_ctx(tmp_path))
    m = r.metrics
    assert m["|held-out em − gd|"] <= 0.01
    assert m["matched means max gap (data std)"] <= 0.1
    assert r.verdict in ("SUPPORTED", "PARTIAL")
    passes = m["passes to within 0.01 of EM's optimum"]
    assert (r.verdict == "PARTIAL") == (passes["gd"] < 0 or passes["gd"] > 2 * max(passes["em"], 1))
    _figures_exist(r, tmp_path)


def test_runner_writes_results_and_report_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    state = run_audit(out, only=["theorem1"], progress=False)
    assert state["experiments"]["theorem1"]["verdict"] == "SUPPORTED"
    saved = json.loads((out / "results.json").read_text())
    assert saved["experiments"]["theorem1"]["claim"].startswith("For any objective")
    html = (out / "report.html").read_text()
    assert "Theorem 1" in html and "data:image/png;base64," in html and "SUPPORTED" in html
    first = saved["experiments"]["theorem1"]["seconds"]
    again = run_audit(out, only=["theorem1"], progress=True)  # resumes: kept, not rerun
    assert again["experiments"]["theorem1"]["seconds"] == first
    assert "kept from the earlier run" in capsys.readouterr().err
    assert write_report(out).exists()


def test_runner_records_a_failing_experiment_as_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import implicit_em.experiments as ex

    def boom(ctx: Context) -> Result:
        raise RuntimeError("deliberate")

    broken = dataclasses.replace(ex.EXPERIMENTS[0], run=boom)
    monkeypatch.setattr(ex, "EXPERIMENTS", [broken, *ex.EXPERIMENTS[1:]])
    state = run_audit(tmp_path / "run", only=[broken.name], progress=False)
    rec = state["experiments"][broken.name]
    assert rec["verdict"] == "ERROR" and "deliberate" in rec["summary"] and "Traceback" in rec["details"]


def test_cli_audit_lists_and_runs_one_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from implicit_em.cli import main

    assert main(["audit", "--list"]) == 0
    assert "theorem1" in capsys.readouterr().out
    assert main(["audit", "--only", "theorem1", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "SUPPORTED" in out and "report.html" in out
    assert main(["report", str(tmp_path / "a")]) == 0


def test_specialisation_verdict_follows_the_rates(tmp_path: Path) -> None:
    from implicit_em.experiments import specialisation

    r = specialisation.run(_ctx(tmp_path))
    m = r.metrics
    rates = sorted((m["specialisation rate, gd"], m["specialisation rate, prototypes"]))
    expected = "SUPPORTED" if rates[0] >= 0.8 else ("PARTIAL" if rates[1] >= 0.5 else "REFUTED")
    assert r.verdict == expected
    assert all(-1.0 <= a <= 1.0 for a in m["ARI per seed, prototypes"])
    _figures_exist(r, tmp_path)


def test_runner_uses_one_thread_for_the_quick_size_and_restores_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import implicit_em.experiments as ex

    seen: list[int] = []

    def spy(ctx: Context) -> Result:
        seen.append(torch.get_num_threads())
        return Result("SUPPORTED", "spy", {"threads": seen[-1]})

    before = torch.get_num_threads()
    monkeypatch.setattr(ex, "EXPERIMENTS", [ex.Experiment("spy", "spy", "a claim", "nowhere", spy)])
    run_audit(tmp_path / "q", progress=False)
    run_audit(tmp_path / "t", progress=False, threads=2, quick=False)
    assert seen == [1, 2]
    assert torch.get_num_threads() == before


def test_cli_audit_defaults_to_the_quick_size(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import implicit_em.experiments as ex
    from implicit_em.cli import main

    sizes: list[bool] = []

    def spy(ctx: Context) -> Result:
        sizes.append(ctx.quick)
        return Result("SUPPORTED", "spy", {})

    monkeypatch.setattr(ex, "EXPERIMENTS", [ex.Experiment("spy", "spy", "a claim", "nowhere", spy)])
    assert main(["audit", "--out", str(tmp_path / "a")]) == 0
    assert main(["audit", "--full", "--out", str(tmp_path / "b")]) == 0
    assert main(["audit", "--quick", "--out", str(tmp_path / "c")]) == 0
    assert sizes == [True, False, True]
