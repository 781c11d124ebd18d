"""The example and the benchmark run in their quick modes."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path) -> object:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_fits_three_ways() -> None:
    example = _load(ROOT / "examples" / "fit_gmm.py")
    scores = example.main(n=3000)  # type: ignore[attr-defined]
    assert set(scores) == {"em", "online_em", "gd"}
    assert abs(scores["em"] - scores["online_em"]) < 0.01
    # gradient descent has no split-and-merge search: it may stay in the k-means basin, never above EM
    assert np.isfinite(scores["gd"]) and scores["gd"] < scores["em"] + 0.01


def test_benchmark_quick_mode_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "gmm.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gmm_vs_peers.py"), "--quick", "--threads", "1", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    assert set(report["summary"]) == {"ours_em", "ours_online_em", "ours_gd", "ours_default"}
    for s in report["summary"].values():
        assert s["seconds"] > 0 and abs(s["gap_to_em_from_truth"]) < 5
    assert report["oracle"]["heldout_em_from_truth"] >= report["start"]["heldout"]
