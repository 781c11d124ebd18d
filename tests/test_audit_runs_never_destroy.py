"""Runs never destroy each other: the three ways a run once replaced another's results, each refused now."""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import implicit_em.audit as audit
from implicit_em.audit import Context, Experiment, Result, criterion, run_audit
from implicit_em.audit.runner import RunFolderError, default_out
from implicit_em.cli import main


@dataclass(frozen=True)
class _Config:
    seed: int = 0
    size: str = "quick"

    @classmethod
    def quick(cls) -> "_Config":
        return cls()

    @classmethod
    def full(cls) -> "_Config":
        return cls(size="full")


def _run(cfg: _Config, ctx: Context) -> Result:
    return Result("SUPPORTED", f"{cfg.size} seed {cfg.seed}", {}, [criterion("n", 0, "==", 0)])


@pytest.fixture(autouse=True)
def _one_fast_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "EXPERIMENTS", [Experiment("spy", "spy", "a claim", "nowhere", _Config, _run)])


def _summary(folder: Path) -> str:
    return str(json.loads((folder / "results.json").read_text())["experiments"]["spy"]["summary"])


def test_a_second_seed_with_the_default_out_keeps_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once, ``implicit-em audit --seed 1`` wrote over the run of ``--seed 0`` (and of ``make demo``)."""
    monkeypatch.chdir(tmp_path)
    assert main(["audit"]) == 0
    assert main(["audit", "--seed", "1"]) == 0
    assert _summary(tmp_path / default_out(True, 0)) == "quick seed 0"
    assert _summary(tmp_path / default_out(True, 1)) == "quick seed 1"
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert "--out runs/demo" in makefile and "runs/demo" not in {str(default_out(q, s)) for q in (1, 0) for s in (0, 1)}


def test_a_quick_run_into_a_full_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Once, a quick run into a folder holding a full run replaced hours of full-size results."""
    out = tmp_path / "run"
    assert main(["audit", "--full", "--out", str(out)]) == 0
    before = (out / "results.json").read_bytes()
    capsys.readouterr()
    assert main(["audit", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a full run with seed 0" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert (out / "results.json").read_bytes() == before
    assert main(["audit", "--quick", "--force", "--out", str(out)]) == 0  # forced: the full run is kept aside
    (kept,) = (out / "previous").iterdir()
    assert (kept / "results.json").read_bytes() == before and _summary(out) == "quick seed 0"


_HOLD = """
import fcntl, os, sys, time
f = open(sys.argv[1], "a+"); fcntl.flock(f, fcntl.LOCK_EX); f.truncate(0); f.write(str(os.getpid())); f.flush()
print("locked", flush=True); time.sleep(60)
"""


def test_a_second_audit_into_a_folder_being_written_is_refused(tmp_path: Path) -> None:
    """Once, two audits into one folder both exited 0 and the first one's verdicts were gone from results.json."""
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out / ".audit.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderError, match=rf"another audit \(pid {holder.pid}\) is writing"):
            run_audit(out, progress=False)
        assert not (out / "results.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up: its lock file stays, its lock does not (never stale)
    assert (out / ".audit.lock").read_text() == str(holder.pid)
    run_audit(out, progress=False)
    assert _summary(out) == "quick seed 0"


def test_the_lock_is_released_after_a_run_and_after_an_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_audit(out, progress=False)
    run_audit(out, progress=False)  # the same process again: the first run let go of the folder
    with pytest.raises(RunFolderError):
        run_audit(out, seed=2, progress=False)
    run_audit(out, progress=False)  # the refused run held nothing
    assert _summary(out) == "quick seed 0"
