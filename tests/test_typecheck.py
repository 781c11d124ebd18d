"""The test-time type checker is on: jaxtyping shapes are enforced in the mixture engine, the probes and the
diagnostics (``--jaxtyping-packages`` in pyproject.toml), ints pass for floats, and ``unchecked()`` turns it off."""

import pytest
import torch
from jaxtyping import TypeCheckError

from _typecheck import unchecked
from implicit_em import diagnostics
from implicit_em.mixture import _em, _stats
from implicit_em.probes import _laws, attention

F64 = torch.float64


def test_mixture_engine_shapes_are_checked() -> None:
    with pytest.raises(TypeCheckError):
        _stats.log_normalize(torch.zeros(3, dtype=F64))  # (K, N) expected
    x, means = torch.zeros(5, 2, dtype=F64), torch.zeros(3, 4, dtype=F64)  # D = 2 against D = 4
    with pytest.raises(TypeCheckError):
        _em._estimate_log_gaussian_prob(x, means, torch.ones(3, 4, dtype=F64), "diag")


def test_mixture_engine_accepts_its_shapes() -> None:
    resp, log_norm = _stats.log_normalize(torch.zeros(3, 5, dtype=F64))
    torch.testing.assert_close(resp, torch.full((3, 5), 1 / 3, dtype=F64), rtol=1e-15, atol=0)
    assert log_norm.shape == (5,)


def test_probe_shapes_are_checked() -> None:
    q, k, v = torch.zeros(2, 4, 8), torch.zeros(2, 5, 7), torch.zeros(2, 5, 3)  # E = 8 against E = 7
    with pytest.raises(TypeCheckError):
        attention(q, k, v)
    with pytest.raises(TypeCheckError):
        _laws.per_head_max(torch.zeros(3))  # (B, H, ...) expected


def test_diagnostics_shapes_are_checked() -> None:
    with pytest.raises(TypeCheckError):
        diagnostics.component_usage(torch.zeros(()))  # (..., K) expected
    with pytest.raises(TypeCheckError):
        diagnostics.component_usage(torch.zeros(4, 3, dtype=torch.long))  # responsibilities are floats


def test_ints_pass_for_floats() -> None:
    """PEP 484's numeric tower, as mypy reads ``float``: ``dropout_p=0`` and ``scale=1`` are fine."""
    q = torch.randn(1, 2, 3, 4, dtype=F64)
    torch.testing.assert_close(attention(q, q, q, dropout_p=0, scale=1), attention(q, q, q, scale=1.0), rtol=0, atol=0)


def test_unchecked_runs_as_a_users_program() -> None:
    """With the checker off, the library's own check answers: sdpa's ValueError naming both shapes."""
    q, k = torch.zeros(2, 4, 8), torch.zeros(2, 5, 7)
    with unchecked(), pytest.raises(ValueError, match=r"\(2, 4, 8\) and \(2, 5, 7\)"):
        attention(q, k, k)
    with pytest.raises(TypeCheckError):  # and back on after the block
        attention(q, k, k)
