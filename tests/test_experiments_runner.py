"""The audit runner: results.json with provenance, resume by config and code hash, the report, the CLI."""

import dataclasses
import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import implicit_em.audit as ex
from implicit_em.audit import Context, Experiment, Result, criterion, run_audit
from implicit_em.audit import provenance as prov
from implicit_em.audit.runner import RunFolderError
from implicit_em.report import write_report


@dataclasses.dataclass(frozen=True)
class SpyConfig:
    seed: int = 0
    size: str = "quick"

    @classmethod
    def quick(cls) -> "SpyConfig":
        return cls()

    @classmethod
    def full(cls) -> "SpyConfig":
        return cls(size="full")


def _spy(run: Any, name: str = "spy") -> Experiment[SpyConfig]:
    return Experiment(name, name, "a claim", "nowhere", SpyConfig, run)


# A tiny experiment in a module of its own, so that its code hash is that of a file the test can edit.
_FAKE = """
from dataclasses import dataclass

from implicit_em.audit.core import Context, Experiment, Result, criterion

CALLS = []
QUICK_TOL = 1.0


@dataclass(frozen=True)
class Config:
    seed: int = 0
    tol: float = 1.0  # the threshold

    @classmethod
    def quick(cls):
        return cls(tol=QUICK_TOL)

    @classmethod
    def full(cls):
        return cls(tol=2.0)


def run(cfg, ctx):
    CALLS.append(cfg)
    c = criterion("x", 0.5 + cfg.seed, "<=", cfg.tol)
    return Result("SUPPORTED" if c.passed else "REFUTED", f"run {len(CALLS)}", {"x": 0.5 + cfg.seed}, [c])


EXPERIMENT = Experiment("fake", "A fake claim", "a claim", "a test", Config, run)
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake experiment module, imported from a file under tmp_path, as the only registered experiment."""
    path = tmp_path / "fake_claim_module.py"
    path.write_text(_FAKE)
    spec = importlib.util.spec_from_file_location("fake_claim_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fake_claim_module", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(ex, "EXPERIMENTS", [module.EXPERIMENT])
    yield module


def _results(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "results.json").read_text()))


# --- resume ----------------------------------------------------------------------------------------------------


def test_resume_keeps_an_experiment_whose_hashes_match(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    first = _results(out)["experiments"]["fake"]
    run_audit(out)
    assert len(fake.CALLS) == 1
    assert _results(out)["experiments"]["fake"] == first
    assert "fake: SUPPORTED (kept: same config, code and library versions)" in capsys.readouterr().err


def test_resume_reruns_an_experiment_whose_config_changed(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    before = _results(out)["experiments"]["fake"]
    monkeypatch.setattr(fake, "QUICK_TOL", 0.25)  # a threshold changes; the code does not
    run_audit(out)
    after = _results(out)["experiments"]["fake"]
    assert len(fake.CALLS) == 2
    assert "its config changed: tol 1.0 → 0.25" in capsys.readouterr().err
    assert after["config_hash"] != before["config_hash"] and after["code_hash"] == before["code_hash"]
    assert (before["verdict"], after["verdict"]) == ("SUPPORTED", "REFUTED")
    assert after["criteria"][0]["threshold"] == 0.25


def test_resume_reruns_an_experiment_whose_code_changed(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    before = _results(out)["experiments"]["fake"]
    path = Path(fake.__file__ or "")
    path.write_text(path.read_text() + "\n# a comment: prose, not code\n")
    run_audit(out)
    assert len(fake.CALLS) == 1  # kept: a comment does not change what runs
    path.write_text(path.read_text() + "\nEXTRA = 1\n")
    run_audit(out)
    after = _results(out)["experiments"]["fake"]
    assert len(fake.CALLS) == 2
    assert "its code changed: fake_claim_module" in capsys.readouterr().err
    assert after["code_hash"] != before["code_hash"] and after["config_hash"] == before["config_hash"]
    assert after["code_files"]["fake_claim_module"] != before["code_files"]["fake_claim_module"]


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda rec: rec["versions"].__setitem__("torch", "0.0.1"), "library versions changed: torch 0.0.1 →"),
        (lambda rec: rec.pop("code_hash"), "no config or code hash recorded"),
        (lambda rec: rec.__setitem__("verdict", "ERROR"), "it ended in ERROR"),
    ],
)
def test_resume_reruns_a_record_of_other_versions_an_older_format_or_an_error(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper: Any, reason: str
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    state = _results(out)
    tamper(state["experiments"]["fake"])
    (out / "results.json").write_text(json.dumps(state))
    run_audit(out)
    assert len(fake.CALLS) == 2
    assert reason in capsys.readouterr().err


def test_force_reruns_and_a_new_seed_is_refused_unless_forced(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    run_audit(out, force=True)
    assert "fake ... (forced)" in capsys.readouterr().err
    with pytest.raises(RunFolderError, match=r"holds a quick run with seed 0 .* use another --out"):
        run_audit(out, seed=1)
    run_audit(out, seed=1, force=True)
    assert "kept in" in capsys.readouterr().err
    assert [c.seed for c in fake.CALLS] == [0, 0, 1]
    assert _results(out)["experiments"]["fake"]["config"] == {"seed": 1, "tol": 1.0}
    (kept,) = (out / "previous").iterdir()
    assert kept.name.startswith("quick-seed0-") and _results(kept)["seed"] == 0


# --- provenance -------------------------------------------------------------------------------------------------


def test_results_json_records_provenance(fake: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_audit(out, quick=False, seed=3)
    state = _results(out)
    p, env, rec = state["provenance"], state["environment"], state["experiments"]["fake"]
    assert p["command"] == sys.argv
    assert p["implicit_em"] == env["implicit_em"]
    git = prov.git_state()
    if git is None:
        assert (p["commit"], p["dirty"], p["source"]) == (None, None, "package metadata")
    else:
        assert re.fullmatch(r"[0-9a-f]{40}", p["commit"]) and isinstance(p["dirty"], bool) and p["source"] == "git"
    for key in ("torch", "numpy", "scikit-learn", "transformers", "python", "platform", "torch_threads"):
        assert key in env
    assert env["numpy"] == importlib.metadata.version("numpy")
    cfg = fake.Config.full()
    cfg = dataclasses.replace(cfg, seed=3)
    assert rec["config"] == {"seed": 3, "tol": 2.0}
    assert rec["config_hash"] == prov.config_hash(cfg)
    assert rec["code_files"] == prov.code_files("fake_claim_module")
    assert rec["code_hash"] == prov.code_hash(rec["code_files"])
    assert (rec["commit"], rec["dirty"]) == (p["commit"], p["dirty"])
    assert rec["versions"] == {k: env[k] for k in ("torch", "numpy", "scikit-learn", "transformers", "python")}


def test_code_files_follow_the_library_imports_transitively() -> None:
    files = prov.code_files("implicit_em.audit.claims.same_optimum")
    # its own file, the protocol, and what `from implicit_em.mixture import GaussianMixture` and `_stats` bring
    for name in ("implicit_em.audit.claims.same_optimum", "implicit_em.audit.core", "implicit_em.mixture"):
        assert name in files
    assert "implicit_em.mixture._stats" in files and "implicit_em.mixture._gd" in files
    # neither the registry, nor another experiment, nor the package's top-level re-exports
    for name in ("implicit_em.audit", "implicit_em.audit.claims.theorem1", "implicit_em", "implicit_em.cli"):
        assert name not in files
    path = Path(sys.modules["implicit_em.audit.claims.same_optimum"].__file__ or "")
    import hashlib

    expected = hashlib.sha256(prov.code_text(path.read_bytes()).encode()).hexdigest()
    assert files["implicit_em.audit.claims.same_optimum"] == expected


def test_relative_imports_are_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "implicit_em"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "__init__.py").write_text("from .a import f\n")
    (pkg / "sub" / "a.py").write_text("from ..b import g\n")
    (pkg / "b.py").write_text("g = 1\n")
    monkeypatch.setattr(prov, "_ROOT", pkg)
    mod = ModuleType("implicit_em.sub")
    mod.__file__ = str(pkg / "sub" / "__init__.py")
    monkeypatch.setitem(sys.modules, "implicit_em.sub", mod)
    assert set(prov.code_files("implicit_em.sub")) == {"implicit_em.sub", "implicit_em.sub.a", "implicit_em.b"}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_state_reads_the_commit_and_the_dirty_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    pkg = repo / "src" / "implicit_em"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    monkeypatch.setattr(prov, "_ROOT", pkg)
    assert prov.git_state() is None  # not a git checkout at all

    def git(*args: str) -> str:
        cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    assert prov.git_state() is None  # a checkout, but the package is not tracked in it
    git("add", ".")
    git("commit", "-q", "-m", "c")
    assert prov.git_state() == {"commit": git("rev-parse", "HEAD"), "dirty": False}
    (pkg / "__init__.py").write_text("x = 2\n")
    assert prov.git_state() == {"commit": git("rev-parse", "HEAD"), "dirty": True}
    git("checkout", "-q", "--", ".")
    (repo / "README").write_text("outside the package\n")
    assert prov.git_state() == {"commit": git("rev-parse", "HEAD"), "dirty": False}


def test_git_state_is_none_when_git_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("git")

    monkeypatch.setattr(prov.subprocess, "run", no_git)
    assert prov.git_state() is None


# --- the runner with real experiments ----------------------------------------------------------------------------


def test_runner_writes_results_and_report_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    state = run_audit(out, only=["theorem1"], progress=False)
    assert state["experiments"]["theorem1"]["verdict"] == "VERIFIED"
    saved = _results(out)
    assert saved["experiments"]["theorem1"]["claim"].startswith("For any objective")
    html = (out / "report.html").read_text()
    assert "Theorem 1" in html and "data:image/png;base64," in html and "VERIFIED" in html
    first = saved["experiments"]["theorem1"]["seconds"]
    again = run_audit(out, only=["theorem1"], progress=True)  # resumes: kept, not rerun
    assert again["experiments"]["theorem1"]["seconds"] == first
    assert "kept: same config, code and library versions" in capsys.readouterr().err
    assert write_report(out).exists()


def test_report_shows_criteria_and_provenance(fake: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_audit(out, progress=False)
    html = (out / "report.html").read_text()
    p = _results(out)["provenance"]
    assert "<th>criterion</th>" in html  # the criteria table: measured, comparison, threshold, met
    row = '<td>x</td><td class="num">0.5</td><td class="cmp">≤</td><td class="num">1</td>'
    assert '<tr class="pass">' + row + '<td class="mark" aria-label="met">✓</td></tr>' in html
    assert "versions" in html and "numpy" in html and "scikit-learn" in html
    assert (p["commit"][:12] if p["commit"] else "not a git checkout") in html
    assert "config " + _results(out)["experiments"]["fake"]["config_hash"][:12] in html


def test_runner_records_a_failing_experiment_as_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(cfg: SpyConfig, ctx: Context) -> Result:
        raise RuntimeError("deliberate")

    monkeypatch.setattr(ex, "EXPERIMENTS", [_spy(boom, "boom")])
    state = run_audit(tmp_path / "run", progress=False)
    rec = state["experiments"]["boom"]
    assert rec["verdict"] == "ERROR" and "deliberate" in rec["summary"] and "Traceback" in rec["details"]


def test_a_config_that_cannot_be_built_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass(frozen=True)
    class Broken(SpyConfig):
        @classmethod
        def quick(cls) -> "Broken":
            raise ValueError("no quick size")

    def run(cfg: Any, ctx: Context) -> Result:
        raise AssertionError("must not run")

    monkeypatch.setattr(ex, "EXPERIMENTS", [Experiment("broken", "b", "c", "s", Broken, run)])
    rec = run_audit(tmp_path / "run", progress=False)["experiments"]["broken"]
    assert rec["verdict"] == "ERROR" and "no quick size" in rec["summary"]


def test_runner_uses_one_thread_for_the_quick_size_and_restores_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    seen: list[int] = []

    def spy(cfg: SpyConfig, ctx: Context) -> Result:
        seen.append(torch.get_num_threads())
        return Result("SUPPORTED", "spy", {"threads": seen[-1]})

    before = torch.get_num_threads()
    monkeypatch.setattr(ex, "EXPERIMENTS", [_spy(spy)])
    run_audit(tmp_path / "q", progress=False)
    run_audit(tmp_path / "t", progress=False, threads=2, quick=False)
    assert seen == [1, 2]
    assert torch.get_num_threads() == before


# --- the CLI ---------------------------------------------------------------------------------------------------


def test_cli_audit_lists_and_runs_one_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from implicit_em.cli import main

    assert main(["audit", "--list"]) == 0
    assert "theorem1" in capsys.readouterr().out
    assert main(["audit", "--only", "theorem1", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "VERIFIED  theorem1" in out and "report.html" in out
    assert main(["report", str(tmp_path / "a")]) == 0


def test_cli_audit_passes_size_and_seed_into_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from implicit_em.cli import main

    seen: list[SpyConfig] = []

    def spy(cfg: SpyConfig, ctx: Context) -> Result:
        seen.append(cfg)
        return Result("SUPPORTED", "spy", {}, [criterion("n", 0, "==", 0)])

    monkeypatch.setattr(ex, "EXPERIMENTS", [_spy(spy)])
    assert main(["audit", "--out", str(tmp_path / "a")]) == 0
    assert main(["audit", "--full", "--out", str(tmp_path / "b")]) == 0
    assert main(["audit", "--quick", "--seed", "2", "--out", str(tmp_path / "c")]) == 0
    assert seen == [SpyConfig(0, "quick"), SpyConfig(0, "full"), SpyConfig(2, "quick")]


# --- interrupts (issue 11) ----------------------------------------------------------------------------------------
# A library call inside an experiment may swallow the KeyboardInterrupt of a Ctrl-C (GaussianMixture.fit once did)
# or turn it into another exception. The runner notes the signal itself, so neither ends up recorded.


def _interrupting(kind: str) -> Any:
    """An experiment that receives SIGINT mid-run and swallows it, converts it to RuntimeError, or lets it go."""
    import os
    import signal

    def run(cfg: SpyConfig, ctx: Context) -> Result:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes: give it some
                sum(range(100))
        except KeyboardInterrupt:
            if kind == "swallow":
                return Result("SUPPORTED", "finished anyway, with other numbers", {"x": -1.0})
            if kind == "convert":
                raise RuntimeError("a library turned the interrupt into this") from None
            raise
        return Result("SUPPORTED", "the interrupt never arrived", {"x": 0.0})

    return run


def _ok(cfg: SpyConfig, ctx: Context) -> Result:
    return Result("SUPPORTED", "fine", {"x": 1.0})


@pytest.mark.parametrize("kind", ["swallow", "convert", "propagate"])
def test_an_interrupted_experiment_is_never_recorded_and_the_rerun_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    import signal

    calls: list[str] = []

    def first(cfg: SpyConfig, ctx: Context) -> Result:
        calls.append("first")
        return _ok(cfg, ctx)

    interrupting = _interrupting(kind)

    def second(cfg: SpyConfig, ctx: Context) -> Result:
        calls.append("second")
        return interrupting(cfg, ctx) if calls.count("second") == 1 else _ok(cfg, ctx)

    monkeypatch.setattr(ex, "EXPERIMENTS", [_spy(first, "first"), _spy(second, "second")])
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_audit(out, progress=False)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    saved = _results(out)["experiments"]
    assert list(saved) == ["first"]  # completed experiments only: the interrupted one is neither a result nor ERROR
    state = run_audit(out, progress=False)
    assert calls == ["first", "second", "second"]  # the rerun keeps the first and runs the second again
    assert {n: e["verdict"] for n, e in state["experiments"].items()} == {"first": "SUPPORTED", "second": "SUPPORTED"}
    assert state["experiments"]["second"]["metrics"] == {"x": 1.0}


def test_sigterm_during_an_experiment_is_an_interrupt_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    def run(cfg: SpyConfig, ctx: Context) -> Result:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                sum(range(100))
        except BaseException:  # swallows everything, as a careless library might
            pass
        return Result("SUPPORTED", "finished anyway", {})

    monkeypatch.setattr(ex, "EXPERIMENTS", [_spy(run, "term")])
    seen: list[int] = []

    def ours(signum: int, frame: Any) -> None:  # not the default, which would end the test process
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            run_audit(tmp_path / "run", progress=False)
        assert seen == [] and signal.getsignal(signal.SIGTERM) is ours  # the runner's handler, then ours again
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert _results(tmp_path / "run")["experiments"] == {}


# --- an unreadable results.json (issue 11) ------------------------------------------------------------------------


def _truncate(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def test_a_truncated_results_json_is_recovered_from_the_atomic_writes_tmp(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    path = out / "results.json"
    (out / "results.json.tmp").write_text(path.read_text())  # the last complete write, staged
    _truncate(path)
    run_audit(out)
    assert len(fake.CALLS) == 1  # kept, not rerun
    assert "recovered the run from" in capsys.readouterr().err
    assert _results(out)["experiments"]["fake"]["verdict"] == "SUPPORTED"
    assert not (out / "results.json.tmp").exists()


@pytest.mark.parametrize("tmp", [None, "", '{"size": "quick", "experiments": {"fake": {"name": "fake"'])
def test_a_truncated_results_json_without_a_usable_tmp_says_how_to_start_over(
    fake: ModuleType, tmp_path: Path, tmp: str | None
) -> None:
    out = tmp_path / "run"
    run_audit(out)
    path = out / "results.json"
    _truncate(path)
    if tmp is not None:
        (out / "results.json.tmp").write_text(tmp)
    with pytest.raises(ValueError, match=r"results\.json: not valid JSON \(truncated\?\).*--force.*delete.*--out") as e:
        run_audit(out)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    state = run_audit(out, force=True)  # starts over
    assert len(fake.CALLS) == 2 and state["experiments"]["fake"]["verdict"] == "SUPPORTED"


def test_a_partial_tmp_of_a_first_write_is_ignored(fake: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json.tmp").write_text('{"size": "qu')  # killed while writing the very first results.json
    assert run_audit(out, progress=False)["experiments"]["fake"]["verdict"] == "SUPPORTED"


def test_a_symlinked_report_or_tmp_is_replaced_not_followed(fake: ModuleType, tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.html").symlink_to(outside)
    (out / "results.json.tmp").symlink_to(outside)
    run_audit(out, progress=False)
    assert outside.read_text() == "keep me"
    assert not (out / "report.html").is_symlink() and "Claims audit" in (out / "report.html").read_text()


# --- progress --------------------------------------------------------------------------------------------------


class _Terminal:
    """A text stream that says it is a terminal, as stderr does in an interactive shell."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    @property
    def text(self) -> str:
        return "".join(self.parts)


def test_a_terminal_gets_a_progress_bar_over_the_experiments_with_elapsed_time(
    fake: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from implicit_em.audit import runner

    term = _Terminal()
    monkeypatch.setattr(runner.sys, "stderr", term)
    run_audit(tmp_path / "run", progress=True)
    text = term.text
    assert "\r" in text  # redrawn in place: a bar, not lines
    assert re.search(r"1/1 \[\d+:\d\d<", text), text  # count and elapsed time, as tqdm draws them
    assert "[1/1] fake ... (not run yet)" in text  # the log lines are written above the bar
    assert "SUPPORTED in" in text


def test_a_log_gets_lines_with_the_elapsed_time_and_no_bar(
    fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_audit(tmp_path / "run", progress=True)  # capsys's stderr is not a terminal
    err = capsys.readouterr().err
    assert "\r" not in err
    assert re.search(r"^\[0:\d\d\] \[1/1\] fake \.\.\. \(not run yet\)$", err, re.M), err
    assert re.search(r"^\[0:\d\d\] audit finished$", err, re.M), err


def test_no_progress_prints_nothing(fake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_audit(tmp_path / "run", progress=False)
    assert capsys.readouterr().err == ""
