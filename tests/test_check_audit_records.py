"""tools/check_audit_records.py: a stored record is current only with this code and config."""

import copy
import functools
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from _scripts import benchmark_script
from implicit_em.audit import EXPERIMENTS
from implicit_em.audit import provenance as _provenance

# three experiments with few source files keep the test quick (hashing all eighteen takes ~10 s on a loaded core)
_SOME = [e for e in EXPERIMENTS if e.name in ("theorem1", "cross_entropy_regime", "foundations")]


def _script() -> ModuleType:
    return benchmark_script("check_audit_records")


def _results() -> dict[str, Any]:
    """Full-size seed-0 records of three experiments with this checkout's config and code hashes (a fresh copy)."""
    return copy.deepcopy(_current())


@functools.cache
def _current() -> dict[str, Any]:
    records = {}
    for exp in _SOME:
        cfg = exp.config(False, 0)
        code = _provenance.code_files(exp.run.__module__)
        records[exp.name] = {
            "verdict": "SUPPORTED",
            "config": _provenance.config_dict(cfg),
            "config_hash": _provenance.config_hash(cfg),
            "code_files": code,
            "code_hash": _provenance.code_hash(code),
            "code_hash_scheme": _provenance.HASH_SCHEME,
            "commit": "0" * 40,
            "dirty": False,
            "versions": {"torch": "an older one"},
        }
    return {"size": "full", "seed": 0, "experiments": records}


def test_records_of_this_code_are_current_and_other_versions_are_not_compared() -> None:
    rows = _script().check(_results(), _SOME)
    assert [name for name, *_ in rows] == [e.name for e in _SOME]
    assert all(why is None for *_, why in rows)


@pytest.mark.parametrize("defect", ["code", "config", "dirty", "missing"])
def test_a_stale_dirty_or_missing_record_is_named(tmp_path: Path, defect: str, capsys: Any) -> None:
    script, results = _script(), _results()
    name = _SOME[0].name
    record = results["experiments"][name]
    if defect == "code":
        module = next(iter(record["code_files"]))
        record["code_files"] = {**record["code_files"], module: "0" * 64}
        record["code_hash"] = _provenance.code_hash(record["code_files"])
    elif defect == "config":
        record["config_hash"] = "0" * 64
    elif defect == "dirty":
        record["dirty"] = True
    else:
        del results["experiments"][name]
    why = {n: w for n, _, _, w in script.check(results, _SOME)}
    assert why[name] is not None and all(w is None for n, w in why.items() if n != name)
    if defect == "code":
        assert module in why[name]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert script.main([str(path)], _SOME) == 1
    assert f"{len(_SOME) - 1} of {len(_SOME)} current" in capsys.readouterr().out
