"""tools/quick_audit_time.py: the worker seconds of a run and the least wall time any schedule could take."""

import json
from pathlib import Path

from _scripts import benchmark_script


def _run(tmp_path: Path, seconds: dict[str, float], jobs: int) -> Path:
    state = {
        "size": "quick",
        "seed": 0,
        "provenance": {"commit": "abc", "dirty": False},
        "environment": {"audit_jobs": {"jobs": jobs, "threads_per_job": 1}, "loadavg": [2.0, 1.5, 1.0]},
        "experiments": {n: {"seconds": s} for n, s in seconds.items()} | {"not_run": {"verdict": "ERROR"}},
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(state))
    return path


def test_the_bound_is_the_mean_load_or_the_slowest_experiment(tmp_path: Path) -> None:
    script = benchmark_script("quick_audit_time")
    spread = script.breakdown(_run(tmp_path, {"a": 30.0, "b": 50.0, "c": 40.0}, jobs=2))
    assert spread["worker_seconds_total"] == 120.0 and spread["least_wall_s"] == 60.0  # 120 s over 2 workers
    assert list(spread["worker_seconds"]) == ["b", "c", "a"] and spread["experiments"] == 3  # slowest first
    skewed = script.breakdown(_run(tmp_path, {"a": 10.0, "b": 100.0}, jobs=2))
    assert skewed["least_wall_s"] == 100.0  # one experiment runs on one worker: it bounds the wall time
    assert script.breakdown(_run(tmp_path, {"a": 10.0, "b": 100.0}, jobs=1))["least_wall_s"] == 110.0
