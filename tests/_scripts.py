"""Load a script of ``benchmarks/`` as a module, so that tests can call its functions."""

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def benchmark_script(name: str) -> ModuleType:
    """The module of ``benchmarks/NAME.py``, executed once per call (a fresh module each time)."""
    path = BENCHMARKS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
