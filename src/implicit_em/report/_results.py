"""Read a run folder's ``results.json``: valid JSON of the shape the runner writes, or one line saying what is wrong.

Both the report and the runner's resume read the file through :func:`read_results`, so a truncated, empty, binary
or hand-edited file gives a :class:`ResultsError` naming the file and the problem (the CLI prints it and exits 2),
never a ``JSONDecodeError`` or a ``KeyError`` from deep inside. The shape checked is what the report and the resume
rely on, and is lenient about keys older runs did not write:

- the top level is an object with ``experiments``, an object of records; ``size`` (a string), ``seed`` (an
  integer), ``provenance`` and ``environment`` (objects) when present;
- a record is an object with ``name`` and ``verdict`` (SUPPORTED, PARTIAL, REFUTED, VERIFIED, UNDECIDED or ERROR), and,
  when present, strings for its texts, a number for ``seconds``, objects for ``metrics``, ``thresholds``, ``config``,
  ``code_files`` and ``versions``, a list of objects for ``criteria`` and a list of strings for ``figures``.
"""

import json
from pathlib import Path
from typing import Any

__all__ = ["VERDICTS", "ResultsError", "check_results", "read_results"]

VERDICTS = ("SUPPORTED", "PARTIAL", "REFUTED", "VERIFIED", "UNDECIDED", "ERROR")

_TEXT = ("title", "claim", "source", "summary", "details")
_OBJECTS = ("metrics", "thresholds", "config", "code_files")
_OPTIONAL_TEXT = ("config_hash", "code_hash", "commit")  # str or null


class ResultsError(ValueError):
    """``results.json`` cannot be used; the message is one line: the file's path and what is wrong with it."""


def _kind(value: Any) -> str:
    """A JSON type's name for a message: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _record_problem(key: str, record: Any) -> str | None:
    """What is wrong with the record stored under ``key`` (None if nothing)."""
    where = f"experiments[{key!r}]"
    if not isinstance(record, dict):
        return f"{where} is {_kind(record)}, not an object"
    for field in ("name", "verdict"):
        if field not in record:
            return f"{where} has no {field!r}"
    if not isinstance(record["name"], str):
        return f"{where}.name is {_kind(record['name'])}, not a string"
    if record["verdict"] not in VERDICTS:
        return f"{where}.verdict is {record['verdict']!r}, not one of {', '.join(VERDICTS)}"
    for field in _TEXT:
        if field in record and not isinstance(record[field], str):
            return f"{where}.{field} is {_kind(record[field])}, not a string"
    for field in _OPTIONAL_TEXT:
        if record.get(field) is not None and not isinstance(record[field], str):
            return f"{where}.{field} is {_kind(record[field])}, not a string"
    if "seconds" in record and not _is_number(record["seconds"]):
        return f"{where}.seconds is {_kind(record['seconds'])}, not a number"
    for field in _OBJECTS:
        if field in record and not isinstance(record[field], dict):
            return f"{where}.{field} is {_kind(record[field])}, not an object"
    if record.get("versions") is not None and not isinstance(record["versions"], dict):
        return f"{where}.versions is {_kind(record['versions'])}, not an object"
    criteria = record.get("criteria", [])
    if not isinstance(criteria, list) or not all(isinstance(c, dict) for c in criteria):
        return f"{where}.criteria must be an array of objects"
    figures = record.get("figures", [])
    if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
        return f"{where}.figures must be an array of strings (paths)"
    return None


def _problem(obj: Any) -> str | None:
    """What is wrong with a parsed ``results.json`` (None if nothing)."""
    if not isinstance(obj, dict):
        return f"the top level is {_kind(obj)}, not an object"
    if "experiments" not in obj:
        return "no 'experiments' key (not an audit run's results.json?)"
    if not isinstance(obj["experiments"], dict):
        return f"'experiments' is {_kind(obj['experiments'])}, not an object"
    if "size" in obj and not isinstance(obj["size"], str):
        return f"'size' is {_kind(obj['size'])}, not a string"
    if "seed" in obj and not (isinstance(obj["seed"], int) and not isinstance(obj["seed"], bool)):
        return f"'seed' is {_kind(obj['seed'])}, not an integer"
    for field in ("provenance", "environment"):
        if field in obj and not isinstance(obj[field], dict):
            return f"'{field}' is {_kind(obj[field])}, not an object"
    for key, record in obj["experiments"].items():
        problem = _record_problem(key, record)
        if problem is not None:
            return problem
    return None


def check_results(obj: Any, path: str | Path) -> dict[str, Any]:
    """``obj`` (a parsed ``results.json``) if it has the right shape; else :class:`ResultsError` naming ``path``."""
    problem = _problem(obj)
    if problem is not None:
        raise ResultsError(f"{path}: {problem}")
    return dict(obj)


def _parse(data: bytes, path: Path) -> Any:
    if not data.strip():
        raise ResultsError(f"{path}: the file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ResultsError(f"{path}: not UTF-8 text (binary bytes at offset {err.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply to be a results file") from None
    except json.JSONDecodeError as err:
        # a cut-off file ends mid-way, or (cut just after a "}" or "]") fails where its text ends
        end = text.rstrip()
        truncated = " (truncated?)" if not end.endswith(("}", "]")) or err.pos >= len(end) else ""
        where = f"{err.msg} at line {err.lineno} column {err.colno}"
        raise ResultsError(f"{path}: not valid JSON{truncated}: {where}") from None


def read_results(path: str | Path) -> dict[str, Any]:
    """Parse and check ``results.json`` at ``path``; :class:`ResultsError` (one line) if it is missing or unusable."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file (is {path.parent} an audit run folder?)") from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: a folder, not a results file") from None
    except OSError as err:
        raise ResultsError(f"{path}: cannot be read ({err.strerror or err})") from None
    return check_results(_parse(data, path), path)
