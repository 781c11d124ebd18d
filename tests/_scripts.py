"""Load a script of ``benchmarks/`` or ``tools/`` as a module, so that tests can call its functions."""

import importlib.util
from pathlib import Path
from types import ModuleType

_REPO = Path(__file__).parents[1]
BENCHMARKS = _REPO / "benchmarks"
TOOLS = _REPO / "tools"


def benchmark_script(name: str) -> ModuleType:
    """The module of ``benchmarks/NAME.py`` or, for the audit's record tools, ``tools/NAME.py``, executed once per
    call (a fresh module each time)."""
    path = BENCHMARKS / f"{name}.py"
    if not path.is_file():
        path = TOOLS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
