"""The probe adapters give what they gave before the refactor of issue 9 part 5, bit for bit.

``_probes_golden_cases.py`` runs nn.MultiheadAttention (every mask; full mode, summary mode on the whole batch
and on sub-batches; attention dropout), grouped-query sdpa modules, a probed forward that captures nothing (its
warning) and two Hugging Face models built from tiny configs (GPT-2 and a grouped-query Llama; padded and not;
the same modes; the weights returned to the model) under two source trees in fresh interpreters: this
checkout's ``src`` and ``src`` of ``ORIGINAL``, the commit before the refactor, taken from git. The captured
tensors, law residuals, model outputs, parameter gradients and the warning's text and place must be equal
(``torch.equal``). Without git or without that commit in the history the test is skipped.
"""

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).with_name("_probes_golden_cases.py")
ORIGINAL = "b4f3b95b268853a6123a09db9b2b73e06d522317"  # main before the probe adapters were refactored
HAS_HF = importlib.util.find_spec("transformers") is not None


def _original_src(dest: Path) -> Path:
    """Extract ``src/`` of ``ORIGINAL`` into ``dest``; skip the test if git or the commit is not there."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the repository history")
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{ORIGINAL}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"commit {ORIGINAL[:7]} is not in this repository's history")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ORIGINAL, "src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(results of the original tree, results of this tree), each from its own interpreter, run side by side."""
    tmp = tmp_path_factory.mktemp("probes_golden")
    trees = {"original": _original_src(tmp / "original"), "current": ROOT / "src"}
    procs = {}
    for name, src in trees.items():
        env = {**os.environ, "PYTHONPATH": str(src)}
        cmd = [sys.executable, str(CASES), str(tmp / f"{name}.pt")]
        procs[name] = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for name, proc in procs.items():
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name} tree failed:\n{output.decode()}"
    original, current = (torch.load(tmp / f"{name}.pt", weights_only=True) for name in trees)
    return original, current


def test_both_runs_cover_every_adapter_path(runs: tuple[dict[str, Tensor], dict[str, Tensor]]) -> None:
    """Both runs covered the same cases, among them every adapter path."""
    original, current = runs
    assert set(current) == set(original)
    cases = {key.split("/out")[0] for key in original if key.endswith("/out")}
    for prefix in ("mha/", "mha_dropout/", "gqa6x2/"):
        assert any(case.startswith(prefix) for case in cases), prefix
    assert "warning/0/message" in original and "warning/1/message" not in original  # exactly one warning
    if HAS_HF:
        assert any(case.startswith("gpt2/") for case in cases) and any(case.startswith("llama_gqa/") for case in cases)


HF_ONLY = pytest.mark.skipif(not HAS_HF, reason="transformers is not installed")


@pytest.mark.parametrize("part", ["out", "grad", "cache", "laws", "warning", pytest.param("attentions", marks=HF_ONLY)])
def test_adapters_give_the_original_results_bit_for_bit(
    runs: tuple[dict[str, Tensor], dict[str, Tensor]], part: str
) -> None:
    original, current = runs
    keys = [key for key in original if f"/{part}/" in key or key.endswith(f"/{part}") or key.startswith(f"{part}/")]
    assert keys, f"no {part} results"
    differ = [key for key in keys if not torch.equal(current[key], original[key])]
    assert not differ, f"{len(differ)} of {len(keys)} differ, e.g. {differ[:5]}"
