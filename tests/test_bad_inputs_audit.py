"""The bad-input battery of the audit's surface: the ``implicit-em`` command, :func:`run_audit` and the report.

A clear error of the command is exit status 2 with one line on stderr that names the problem and no traceback
(``_cli`` turns it into :class:`CliError` so that the row reads as an error); of the library, a ``ValueError`` or
``TypeError`` naming the argument. The fits are inputs that must keep working. Experiments are two fast stand-ins
(``spy``, ``other``), so the table runs in seconds.
"""

import dataclasses
import io
import json
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import implicit_em.audit as ex
from _battery import Case, ids
from implicit_em.audit import Context, Experiment, Result, criterion, run_audit, select
from implicit_em.cli import main
from implicit_em.report import ResultsError, read_results, render, write_report


@dataclasses.dataclass(frozen=True)
class _Config:
    seed: int = 0

    @classmethod
    def quick(cls) -> "_Config":
        return cls()

    @classmethod
    def full(cls) -> "_Config":
        return cls()


def _spy_run(cfg: _Config, ctx: Context) -> Result:
    return Result("SUPPORTED", "spy", {"seed": cfg.seed}, [criterion("seed", cfg.seed, ">=", 0)])


def _interrupted_run(cfg: _Config, ctx: Context) -> Result:
    """Receives SIGINT and swallows it, as GaussianMixture.fit once did."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            sum(range(100))
    except KeyboardInterrupt:
        pass
    return Result("SUPPORTED", "finished anyway", {})


_REGISTRY = [
    Experiment("spy", "Spy", "a claim", "nowhere", _Config, _spy_run),
    Experiment("other", "Other", "a claim", "nowhere", _Config, _spy_run),
]

_TMP: list[Path] = []  # the current test's tmp_path (the rows are built before any test runs)


@pytest.fixture(autouse=True)
def _fast_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(ex, "EXPERIMENTS", list(_REGISTRY))
    _TMP.append(tmp_path)
    yield
    _TMP.clear()


def _dir(name: str) -> Path:
    return _TMP[-1] / name


class CliError(Exception):
    """The command exited 2 with one line on stderr (the message) and no traceback."""


def _cli(*argv: str) -> tuple[int, str, str]:
    """Run ``implicit-em argv``: (status, stdout, stderr); exit status 2 raises :class:`CliError` after checking
    that stderr is one line without a traceback."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            status = main(list(argv))
        except SystemExit as e:  # argparse's errors
            status = int(e.code or 0)
    lines = err.getvalue().splitlines()
    if status == 2:
        assert len(lines) == 1, f"not one line: {lines!r}"
        assert "Traceback" not in err.getvalue()
        raise CliError(lines[0])
    return status, out.getvalue(), err.getvalue()


def _status(expected: int) -> Callable[[tuple[int, str, str]], bool]:
    return lambda outcome: outcome[0] == expected


# ---------------------------------------------------------------------------------------------- run folders


def _good_run() -> Path:
    run = _dir("good")
    run_audit(run, progress=False)
    return run


def _folder_with(content: str | bytes | None, name: str = "bad") -> Path:
    """A run folder whose results.json holds ``content`` (None: results.json is a folder)."""
    run = _dir(name)
    run.mkdir(parents=True, exist_ok=True)
    path = run / "results.json"
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return run


def _truncated() -> Path:
    run = _good_run()
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text[: len(text) // 2])
    return run


def _record(**changes: Any) -> str:
    """A results.json with one record, changed (a value of ... deletes the key)."""
    rec: dict[str, Any] = {"name": "spy", "verdict": "SUPPORTED", "summary": "s", "seconds": 0.1, "figures": []}
    for key, value in changes.items():
        if value is ...:
            del rec[key]
        else:
            rec[key] = value
    return json.dumps({"size": "quick", "seed": 0, "experiments": {"spy": rec}})


def _top(obj: Any) -> str:
    return json.dumps(obj)


def _report(content: str | bytes | None) -> tuple[int, str, str]:
    return _cli("report", str(_folder_with(content)))


def _a_file(name: str = "a_file") -> Path:
    path = _dir(name)
    path.write_text("not a folder")
    return path


def _interrupting_cli() -> tuple[int, str, str]:
    ex.EXPERIMENTS.insert(1, Experiment("interrupted", "I", "c", "s", _Config, _interrupted_run))
    out = _dir("interrupted")
    outcome = _cli("audit", "--out", str(out))
    return outcome[0], outcome[1], json.dumps(sorted(read_results(out / "results.json")["experiments"]))


def _report_note() -> str:
    run = _folder_with(_record(figures=["/etc/passwd", "../x.png"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        html = write_report(run).read_text()
    return html if len(caught) == 2 else ""


# ---------------------------------------------------------------------------------------------- the table

_ONE = "implicit-em audit: error: "

CASES = [
    # --- the command: arguments -------------------------------------------------------------------------------
    Case("--threads 0", lambda: _cli("audit", "--threads", "0"), CliError, _ONE + "argument --threads: .*positive"),
    Case("--threads -1", lambda: _cli("audit", "--threads", "-1"), CliError, "--threads: must be a positive .* -1"),
    Case("--threads x", lambda: _cli("audit", "--threads", "x"), CliError, "--threads: must be a positive .*'x'"),
    Case(
        "--jobs 0",
        lambda: _cli("audit", "--jobs", "0"),
        CliError,
        _ONE + "argument --jobs: .*positive integer or 'auto'",
    ),
    Case(
        "--jobs x",
        lambda: _cli("audit", "--jobs", "x"),
        CliError,
        "--jobs: must be a positive integer or 'auto', got 'x'",
    ),
    Case("--only ,", lambda: _cli("audit", "--only", ","), CliError, "--only: names no experiment"),
    Case("--only empty", lambda: _cli("audit", "--only", ""), CliError, "--only: names no experiment"),
    Case("--only spy,,other", lambda: _cli("audit", "--only", "spy,,other"), CliError, "--only: has an empty name"),
    Case("--only unknown", lambda: _cli("audit", "--only", "spy,nope"), CliError, r"unknown experiment.*'nope'"),
    Case("--seed -1", lambda: _cli("audit", "--seed", "-1"), CliError, r"--seed: must be an integer in \[0"),
    Case("--seed 2**32", lambda: _cli("audit", "--seed", str(2**32)), CliError, "--seed: .*4294967296"),
    Case("--seed 1.5", lambda: _cli("audit", "--seed", "1.5"), CliError, "--seed: .*'1.5'"),
    Case("--quick --full", lambda: _cli("audit", "--quick", "--full"), CliError, "not allowed with argument"),
    Case("unknown option", lambda: _cli("audit", "--bogus"), CliError, "unrecognized arguments: --bogus"),
    Case("no command", lambda: _cli(), CliError, "required: command"),
    Case("unknown command", lambda: _cli("nope"), CliError, "invalid choice: 'nope'"),
    Case("report without a folder", lambda: _cli("report"), CliError, "required: run_dir"),
    # --- the command: run folders -----------------------------------------------------------------------------
    Case("--out is a file", lambda: _cli("audit", "--out", str(_a_file())), CliError, _ONE + "out_dir .* is a file"),
    Case(
        "--out under a file",
        lambda: _cli("audit", "--out", str(_a_file() / "sub")),
        CliError,
        _ONE + ".*Not a directory",
    ),
    Case(
        "audit on a truncated results.json",
        lambda: _cli("audit", "--out", str(_truncated())),
        CliError,
        r"results\.json: not valid JSON \(truncated\?\).*--force",
    ),
    Case(
        "audit on a JSON list",
        lambda: _cli("audit", "--out", str(_folder_with("[1, 2]"))),
        CliError,
        r"results\.json: the top level is an array, not an object; to start over",
    ),
    Case("report: no such folder", lambda: _cli("report", str(_dir("nowhere"))), CliError, "no such file"),
    Case("report: empty", lambda: _report(""), CliError, r"implicit-em report: error: .*results\.json: .*empty"),
    Case("report: whitespace", lambda: _report("  \n"), CliError, "the file is empty"),
    Case("report: truncated", lambda: _cli("report", str(_truncated())), CliError, r"not valid JSON \(truncated\?\)"),
    Case("report: binary", lambda: _report(b"\x89PNG\r\n\x1a\n\xff\xfe"), CliError, "not UTF-8 text"),
    Case("report: JSON list", lambda: _report("[]"), CliError, "top level is an array"),
    Case("report: JSON string", lambda: _report('"x"'), CliError, "top level is a string"),
    Case("report: no experiments", lambda: _report(_top({"size": "quick"})), CliError, "no 'experiments' key"),
    Case("report: experiments list", lambda: _report(_top({"experiments": []})), CliError, "'experiments' is an array"),
    Case("report: seed text", lambda: _report(_top({"seed": "0", "experiments": {}})), CliError, "'seed' is a string"),
    Case("report: size number", lambda: _report(_top({"size": 1, "experiments": {}})), CliError, "'size' is a number"),
    Case(
        "report: provenance list",
        lambda: _report(_top({"provenance": [], "experiments": {}})),
        CliError,
        "'provenance' is an array",
    ),
    Case("report: record a list", lambda: _report(_top({"experiments": {"a": [1]}})), CliError, r"\['a'\] is an array"),
    Case("report: record without name", lambda: _report(_record(name=...)), CliError, "has no 'name'"),
    Case("report: record without verdict", lambda: _report(_record(verdict=...)), CliError, "has no 'verdict'"),
    Case("report: verdict unknown", lambda: _report(_record(verdict="MAYBE")), CliError, "verdict is 'MAYBE', not one"),
    Case("report: name a number", lambda: _report(_record(name=3)), CliError, "name is a number, not a string"),
    Case("report: title a list", lambda: _report(_record(title=["t"])), CliError, "title is an array, not a string"),
    Case("report: seconds text", lambda: _report(_record(seconds="abc")), CliError, "seconds is a string, not a num"),
    Case("report: seconds boolean", lambda: _report(_record(seconds=True)), CliError, "seconds is boolean"),
    Case("report: metrics a list", lambda: _report(_record(metrics=[1])), CliError, "metrics is an array, not an obj"),
    Case("report: criteria text", lambda: _report(_record(criteria="x")), CliError, "criteria must be an array of ob"),
    Case("report: criteria of numbers", lambda: _report(_record(criteria=[1])), CliError, "criteria must be an array"),
    Case("report: figures a number", lambda: _report(_record(figures=3)), CliError, "figures must be an array of str"),
    Case("report: figures of null", lambda: _report(_record(figures=[None])), CliError, "figures must be an array"),
    Case("report: code_hash number", lambda: _report(_record(code_hash=1)), CliError, "code_hash is a number"),
    Case("report: versions text", lambda: _report(_record(versions="x")), CliError, "versions is a string"),
    Case("report: results.json a folder", lambda: _report(None), CliError, r"results\.json: a folder"),
    Case("report: nested too deeply", lambda: _report("[" * 100_000), CliError, "nested too deeply"),
    # --- the command: what must keep working ------------------------------------------------------------------
    Case("audit --list", lambda: _cli("audit", "--list"), check=lambda o: o[0] == 0 and "spy" in o[1]),
    Case("audit --only spy", lambda: _cli("audit", "--only", "spy", "--out", str(_dir("a"))), check=_status(0)),
    Case("audit --only ' spy '", lambda: _cli("audit", "--only", " spy ", "--out", str(_dir("a"))), check=_status(0)),
    Case("audit --threads 1", lambda: _cli("audit", "--threads", "1", "--out", str(_dir("a"))), check=_status(0)),
    Case(
        "audit --seed max", lambda: _cli("audit", "--seed", str(2**32 - 1), "--out", str(_dir("a"))), check=_status(0)
    ),
    Case(
        "audit --force on a truncated run",
        lambda: _cli("audit", "--force", "--out", str(_truncated())),
        check=_status(0),
    ),
    Case("audit resumes", lambda: (_good_run(), _cli("audit", "--out", str(_dir("good"))))[1], check=_status(0)),
    Case(
        "audit interrupted: 130, not recorded",
        _interrupting_cli,
        check=lambda o: o[0] == 130 and o[2] == '["spy"]',
    ),
    Case("report of a good run", lambda: _cli("report", str(_good_run())), check=lambda o: o[0] == 0),
    Case(
        "report: an older record", lambda: _report(_record(seconds=..., figures=..., thresholds={})), check=_status(0)
    ),
    Case("report: nulls allowed", lambda: _report(_record(code_hash=None, versions=None)), check=_status(0)),
    Case("report: figures out of the folder noted", _report_note, check=lambda h: h.count("not embedded") == 2),
    # --- the library: run_audit, select, render ---------------------------------------------------------------
    Case("run_audit threads=0", lambda: run_audit(_dir("r"), threads=0), ValueError, "threads must be a positive"),
    Case("run_audit threads=-1", lambda: run_audit(_dir("r"), threads=-1), ValueError, "threads must be .* -1"),
    Case("run_audit threads=1.5", lambda: run_audit(_dir("r"), threads=1.5), TypeError, "threads must be .* float"),  # type: ignore[arg-type]
    Case("run_audit jobs=0", lambda: run_audit(_dir("r"), jobs=0), ValueError, "jobs must be a positive integer"),
    Case("run_audit jobs=2.0", lambda: run_audit(_dir("r"), jobs=2.0), TypeError, "jobs must be .* float"),  # type: ignore[arg-type]
    Case("run_audit threads=True", lambda: run_audit(_dir("r"), threads=True), TypeError, "threads must be .* bool"),
    Case("run_audit seed=-1", lambda: run_audit(_dir("r"), seed=-1), ValueError, r"seed must lie in \[0, 2\*\*32"),
    Case("run_audit seed=2**32", lambda: run_audit(_dir("r"), seed=2**32), ValueError, "seed must lie in"),
    Case("run_audit seed=1.5", lambda: run_audit(_dir("r"), seed=1.5), TypeError, "seed must be an integer"),  # type: ignore[arg-type]
    Case("run_audit seed='0'", lambda: run_audit(_dir("r"), seed="0"), TypeError, "seed must be an integer, got str"),  # type: ignore[arg-type]
    Case("run_audit seed=True", lambda: run_audit(_dir("r"), seed=True), TypeError, "seed must be an integer, got b"),
    Case("run_audit only=[]", lambda: run_audit(_dir("r"), only=[]), ValueError, "only names no experiment"),
    Case("run_audit only='spy'", lambda: run_audit(_dir("r"), only="spy"), TypeError, r"the string 'spy' \(use \["),
    Case("run_audit only=[1]", lambda: run_audit(_dir("r"), only=[1]), TypeError, "only must hold experiment names"),  # type: ignore[list-item]
    Case("run_audit only unknown", lambda: run_audit(_dir("r"), only=["x"]), ValueError, r"unknown experiment.*'x'"),
    Case("run_audit out_dir a file", lambda: run_audit(_a_file()), ValueError, "out_dir .* is a file, not a folder"),
    Case("run_audit on a truncated run", lambda: run_audit(_truncated()), ResultsError, "truncated.*force=True"),
    Case(
        "run_audit on a record of wrong type",
        lambda: run_audit(_folder_with(_record(metrics=1))),
        ValueError,
        "metrics",
    ),
    Case("select None", lambda: select(_REGISTRY, None), check=lambda e: [x.name for x in e] == ["spy", "other"]),
    Case("select in registry order", lambda: select(_REGISTRY, ["other", "spy"]), check=lambda e: e == _REGISTRY),
    Case(
        "run_audit seed=0 threads=None",
        lambda: run_audit(_dir("r"), progress=False),
        check=lambda s: len(s["experiments"]) == 2,
    ),
    Case("run_audit force on a truncated run", lambda: run_audit(_truncated(), force=True, progress=False), check=bool),
    Case("render a list", lambda: render([], _dir("x")), ResultsError, "results: the top level is an array"),  # type: ignore[arg-type]
    Case("render no experiments", lambda: render({}, _dir("x")), ResultsError, "no 'experiments' key"),
    Case("render a minimal run", lambda: render({"experiments": {}}, _dir("x")), check=lambda h: "Claims audit" in h),
    Case("write_report no folder", lambda: write_report(_dir("nowhere")), ResultsError, "no such file"),
    Case(
        "read_results a good run",
        lambda: read_results(_good_run() / "results.json"),
        check=lambda s: "spy" in s["experiments"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_battery(case: Case) -> None:
    case.check_it()
