"""Test-wide settings: small hypothesis budgets for the quick run, float64 references, strict shapes.

The foundation modules, the mixture engine, the probes and the diagnostics are type-checked at test time with
jaxtyping + beartype (see ``addopts`` in pyproject.toml: ``--jaxtyping-packages``; the checker is
``tests/_typecheck.py``), so a shape or dtype annotation that lies fails the tests. ``_typecheck.unchecked()``
switches the checker off for a test of the library's own ``ValueError`` on an argument its annotation excludes.
"""

import os

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
