"""Test-wide settings: small hypothesis budgets for the quick run, float64 references, strict shapes.

The foundation modules, the mixture engine, the probes and the diagnostics are type-checked at test time with
jaxtyping + beartype (see ``addopts`` in pyproject.toml: ``--jaxtyping-packages``; the checker is
``tests/_typecheck.py``), so a shape or dtype annotation that lies fails the tests. ``_typecheck.unchecked()``
switches the checker off for a test of the library's own ``ValueError`` on an argument its annotation excludes.
"""

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "quick", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


@pytest.fixture(autouse=True)
def _restore_validation() -> object:
    """Tests that switch value checks off must not leak that into other tests."""
    import implicit_em

    yield
    implicit_em.set_validate_args(True)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _python_default_sigint() -> object:
    """Every test runs over Python's default SIGINT handler, whatever the session started with, and the handler
    found is put back after. A shell that starts the suite as a background job without job control (``cmd &``,
    ``nohup``) makes SIGINT ignored, and Python then installs no handler: the interrupt tests (which deliver real
    SIGINTs, in this process and in children, which inherit an ignored signal) would test nothing there."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before if before is not None else signal.SIG_DFL)


def long_entries() -> list[str]:
    """The entries of ``tests/long_tests.txt``: the tests ``make test`` leaves out and CI runs."""
    text = (Path(__file__).parent / "long_tests.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``long`` each test named in ``tests/long_tests.txt``, directly or through its module's fixture."""
    tests, fixtures = set(), set()
    for entry in long_entries():
        path, _, name = entry.partition("::")
        if name.startswith("fixture:"):
            fixtures.add((path, name.removeprefix("fixture:")))
        else:
            tests.add(entry)
    for item in items:
        path, _, rest = item.nodeid.partition("::")
        base = f"{path}::{rest.split('[')[0]}"
        if base in tests or any((path, f) in fixtures for f in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.long)
