"""Fault injection for the audit: a child process running ``implicit-em audit`` is SIGKILLed at a random (seeded)
moment, or sent SIGINT while an experiment that swallows the interrupt runs; the same command then resumes, and
its results equal an uninterrupted run's: the same verdicts and metrics, no duplicate, partial or interrupted
records. The experiments are the fast stand-ins of ``tests/_audit_child.py``; the reference run is in-process.

Each quick test starts two children (about 4 s of imports each on a loaded 2-core machine); the other seeds and
the ``convert`` variant are marked slow.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

import _audit_child
import implicit_em.audit as ex
from implicit_em.audit import Experiment, run_audit

_TESTS = Path(__file__).resolve().parent
_SRC = _TESTS.parent / "src"
_NAMES = [e.name for e in _audit_child.EXPERIMENTS]
_COMPARED = ("name", "verdict", "summary", "metrics", "criteria", "config", "config_hash", "code_hash", "code_files")
_RUN_SECONDS = 4 * 6 * 0.05  # the registry's sleeping time: experiments x steps x pause


def _command(out: Path, *extra: str) -> list[str]:
    code = (
        f"import sys; sys.path[:0] = [{str(_SRC)!r}, {str(_TESTS)!r}]; import _audit_child; "
        "sys.exit(_audit_child.main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, "audit", "--out", str(out), *extra]


def _start(out: Path, *extra: str) -> subprocess.Popen[str]:
    # a session of its own, so that a test can see whether any of its processes (the workers) outlive it
    return subprocess.Popen(
        _command(out, *extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _wait_for(stream: IO[str], marker: str, timeout: float = 60.0) -> list[str]:
    """Lines of ``stream`` up to and including the first that contains ``marker``."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            raise AssertionError(f"the child ended before printing {marker!r}: {lines!r}")
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} within {timeout} s: {lines!r}")


def _resume(out: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(_command(out), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys in results.json: {keys}"
    return dict(pairs)


def _records(out: Path) -> dict[str, Any]:
    """The experiments of ``out/results.json``, parsed strictly (no duplicate key anywhere)."""
    state = json.loads((out / "results.json").read_text(), object_pairs_hook=_no_duplicates)
    return dict(state["experiments"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The records of an uninterrupted run, in this process."""
    out = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ex, "EXPERIMENTS", list(_audit_child.EXPERIMENTS))
        run_audit(out, progress=False)
    records = _records(out)
    assert list(records) == _NAMES and all(r["verdict"] in ("SUPPORTED", "REFUTED") for r in records.values())
    return records


def _assert_equal_to(reference: dict[str, Any], out: Path) -> None:
    records = _records(out)
    assert list(records) == _NAMES  # every experiment once, in order
    for name, rec in records.items():
        assert set(rec) == set(reference[name]), f"{name}: a partial record"
        assert {k: rec[k] for k in _COMPARED} == {k: reference[name][k] for k in _COMPARED}, name
    assert not (out / "results.json.tmp").exists()


def _kill_at_random_and_resume(seed: int, tmp_path: Path, reference: dict[str, Any]) -> None:
    rng = random.Random(seed)
    out = tmp_path / "run"
    child = _start(out)
    assert child.stderr is not None
    try:
        _wait_for(child.stderr, "[1/4]")  # imports done, the first experiment starting
        time.sleep(rng.uniform(0.0, 1.2 * _RUN_SECONDS))  # sometimes after the end: then nothing is lost
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        child.stderr.close()
    if (out / "results.json").exists():  # whatever the kill left is complete records only
        kept = _records(out)
        assert list(kept) == _NAMES[: len(kept)]
        for name, rec in kept.items():
            assert {k: rec[k] for k in _COMPARED} == {k: reference[name][k] for k in _COMPARED}
    _resume(out)
    _assert_equal_to(reference, out)


def test_sigkill_at_a_random_moment_then_resume_equals_an_uninterrupted_run(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    _kill_at_random_and_resume(0, tmp_path, reference)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_sigkill_at_more_random_moments(seed: int, tmp_path: Path, reference: dict[str, Any]) -> None:
    _kill_at_random_and_resume(seed, tmp_path, reference)


def _interrupt_and_resume(target: str, tmp_path: Path, reference: dict[str, Any]) -> None:
    out = tmp_path / "run"
    child = _start(out)
    assert child.stderr is not None
    try:
        _wait_for(child.stderr, f"{target} ... (not run yet)")
        time.sleep(0.1)  # a few of its steps in
        child.send_signal(signal.SIGINT)
        rest = child.stderr.read()
    finally:
        status = child.wait(timeout=60)
        child.stderr.close()
    assert status == 130, rest
    assert f"interrupted (SIGINT) during {target}" in rest and "Traceback" not in rest
    before = _NAMES[: _NAMES.index(target)]
    assert list(_records(out)) == before  # the interrupted experiment is neither a result nor an ERROR
    done = _resume(out)
    for name in before:
        assert f"{name}: SUPPORTED (kept" in done.stderr or f"{name}: REFUTED (kept" in done.stderr
    assert f"{target} ... (not run yet)" in done.stderr
    _assert_equal_to(reference, out)


def test_sigint_during_an_experiment_that_swallows_it_is_not_recorded_and_the_resume_completes(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    _interrupt_and_resume("swallow", tmp_path, reference)


def test_sigint_during_an_experiment_that_converts_it_is_not_recorded(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    _interrupt_and_resume("convert", tmp_path, reference)


def test_two_jobs_record_what_one_job_records(
    tmp_path: Path, reference: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    import implicit_em.audit.runner as runner

    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ex, "EXPERIMENTS", list(_audit_child.EXPERIMENTS))
        # the known seconds of a fresh folder: omega is the slowest, convert next, alpha and swallow unknown (0)
        mp.setattr(runner, "_QUICK_SECONDS", {"omega": 2.0, "convert": 1.0})
        state = run_audit(out, progress=True, jobs=2)
    _assert_equal_to(reference, out)  # the same records, in registry order
    assert state["environment"]["audit_jobs"] == {"jobs": 2, "threads_per_job": 1}
    started = [
        line.split("] ", 2)[-1].split(" ...")[0] for line in capsys.readouterr().err.splitlines() if " ... (" in line
    ]
    # the slow lane starts with the slowest, the fast lane with the fastest (ties in registry order: swallow last);
    # which lane frees first decides the order of the other two
    assert started[:2] == ["omega", "swallow"]
    assert sorted(started) == ["alpha", "convert", "omega", "swallow"]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigint_during_a_parallel_run_stops_the_workers_saves_what_finished_and_resumes(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    out = tmp_path / "run"
    child = _start(out, "--jobs", "2")
    assert child.stderr is not None
    try:
        # two run at once; the third starts when one of them has finished and been saved
        _wait_for(child.stderr, "convert ... (not run yet)")
        time.sleep(0.1)
        child.send_signal(signal.SIGINT)
        rest = child.stderr.read()
    finally:
        status = child.wait(timeout=60)
        child.stderr.close()
    assert status == 130, rest
    assert "interrupted (SIGINT) during " in rest and "Traceback" not in rest
    deadline = time.monotonic() + 10
    while _group_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(child.pid), "a worker process outlived the interrupted audit"
    kept = _records(out)
    assert kept and len(kept) < len(_NAMES) and list(kept) == [n for n in _NAMES if n in kept]
    for name, rec in kept.items():
        assert {k: rec[k] for k in _COMPARED} == {k: reference[name][k] for k in _COMPARED}, name
    done = subprocess.run(_command(out, "--jobs", "2"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    _assert_equal_to(reference, out)


def test_jobs_needs_experiments_a_worker_can_receive(tmp_path: Path) -> None:
    def closure(cfg: _audit_child.Config, ctx: Any) -> Any:  # a local function does not pickle
        return _audit_child._walk("omega", cfg, "raise")

    local = [_audit_child._experiment("alpha"), Experiment("omega", "Omega", "c", "s", _audit_child.Config, closure)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ex, "EXPERIMENTS", local)
        with pytest.raises(TypeError, match="omega: jobs > 1 runs each experiment in a worker process"):
            run_audit(tmp_path / "run", progress=False, jobs=2)
