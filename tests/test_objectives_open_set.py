"""Tests of the open-set objective (paper §6.3, §7.3): ``append_null``, ``open_set_lse``,
``open_set_responsibilities``, the law ``open_set_law`` and the module ``NoneOfTheAbove``.

Oracles: closed forms on tiny inputs, the closed-world LSE (the null component switched off, or written as
σ(−L − τ)), autograd in float64, and a float64 reference for the low-precision dtypes."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import implicit_em
from _typecheck import unchecked
from implicit_em.distances import NoneOfTheAbove
from implicit_em.laws import lse_law, open_set_law
from implicit_em.objectives import (
    append_null,
    constrained_cross_entropy,
    lse,
    open_set_lse,
    open_set_responsibilities,
    responsibilities,
)

F64 = torch.float64
TOL = 1e-12
FLOATS = st.floats(-30, 30, allow_nan=False, allow_infinity=False)
DISTANCES = arrays(np.float64, array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), elements=FLOATS)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(F64)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _grads(d: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Autograd's gradients of Σ_rows L_∅(d, τ) with respect to d and τ."""
    d_, tau_ = d.detach().clone().requires_grad_(True), tau.detach().clone().requires_grad_(True)
    gd, gt = torch.autograd.grad(open_set_lse(d_, tau_).sum(), (d_, tau_))
    return gd, gt


# -- closed forms ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 7])
def test_null_at_the_same_distance_is_one_more_equal_component(k: int) -> None:
    d = torch.full((3, k), 2.5, dtype=F64)
    torch.testing.assert_close(open_set_lse(d, 2.5), torch.full((3,), math.log(k + 1) - 2.5, dtype=F64))
    torch.testing.assert_close(open_set_responsibilities(d, 2.5), torch.full((3, k + 1), 1 / (k + 1), dtype=F64))


def test_two_components_and_the_null_closed_form() -> None:
    # d = (0, 1), τ = 2: r = (1, e^{-1}, e^{-2}) / (1 + e^{-1} + e^{-2})
    r = open_set_responsibilities(torch.tensor([[0.0, 1.0]], dtype=F64), 2.0)
    w = torch.tensor([1.0, math.exp(-1), math.exp(-2)], dtype=F64)
    torch.testing.assert_close(r, (w / w.sum())[None], atol=1e-15, rtol=0)
    assert open_set_lse(torch.tensor([0.0, 1.0], dtype=F64), 2.0).item() == pytest.approx(math.log(w.sum()), 1e-15)


def test_an_infinite_null_distance_is_the_closed_world() -> None:
    d = torch.randn(5, 4, generator=_gen(0), dtype=F64) * 3
    torch.testing.assert_close(open_set_lse(d, math.inf), lse(d), atol=0, rtol=0)
    r = open_set_responsibilities(d, torch.tensor(math.inf, dtype=F64))
    torch.testing.assert_close(r[:, :4], responsibilities(d), atol=0, rtol=0)
    assert torch.equal(r[:, 4], torch.zeros(5, dtype=F64))


def test_a_row_no_known_component_can_explain_goes_to_the_null() -> None:
    d = torch.tensor([[math.inf, math.inf], [0.0, math.inf]], dtype=F64)
    r = open_set_responsibilities(d, 1.0)
    torch.testing.assert_close(r[0], torch.tensor([0.0, 0.0, 1.0], dtype=F64), atol=0, rtol=0)
    torch.testing.assert_close(r[1], torch.tensor([1.0, 0.0, math.exp(-1)], dtype=F64) / (1 + math.exp(-1)))
    assert open_set_lse(d, 1.0)[0].item() == -1.0


def test_no_known_component_and_no_null_is_an_error() -> None:
    with pytest.raises(ValueError, match="every distance is \\+inf"):
        open_set_lse(torch.full((2, 3), math.inf, dtype=F64), math.inf)


def test_zero_known_components_leave_the_null_alone() -> None:
    d = torch.zeros(4, 0, dtype=F64)
    assert torch.equal(open_set_responsibilities(d, 0.3), torch.ones(4, 1, dtype=F64))
    torch.testing.assert_close(open_set_lse(d, 0.3), torch.full((4,), -0.3, dtype=F64))


# -- properties -------------------------------------------------------------------------------------------------


@given(DISTANCES, FLOATS)
def test_null_responsibility_is_a_sigmoid_of_the_soft_minimum(d: np.ndarray, tau: float) -> None:
    """r_0 = σ(−L(d) − τ): the explicit null and the soft-minimum threshold of §7.3 are one rule."""
    dt = _t(d)
    r0 = open_set_responsibilities(dt, tau)[..., -1]
    torch.testing.assert_close(r0, torch.sigmoid(-lse(dt) - tau), atol=1e-12, rtol=1e-12)
    clear = (-lse(dt) - tau).abs() > 1e-9  # away from the tie r_0 = 1/2
    assert torch.equal((r0 > 0.5)[clear], (-lse(dt) > tau)[clear])


@given(DISTANCES, FLOATS, FLOATS)
def test_open_set_lse_shift_identity(d: np.ndarray, tau: float, c: float) -> None:
    dt = _t(d)
    torch.testing.assert_close(open_set_lse(dt + c, tau + c), open_set_lse(dt, tau) - c, rtol=1e-12, atol=1e-10)


@given(DISTANCES, FLOATS)
def test_open_set_lse_is_the_lse_of_the_appended_distances_and_bounds_both(d: np.ndarray, tau: float) -> None:
    dt = _t(d)
    value = open_set_lse(dt, tau)
    torch.testing.assert_close(value, torch.logaddexp(lse(dt), torch.tensor(-tau, dtype=F64)), rtol=1e-12, atol=1e-12)
    assert bool((value >= lse(dt) - 1e-12).all()) and bool((value >= -tau - 1e-12).all())
    r = open_set_responsibilities(dt, tau)
    torch.testing.assert_close(r.sum(-1), torch.ones(dt.shape[:-1], dtype=F64), atol=1e-12, rtol=0)
    assert bool((r >= 0).all()) and bool((r <= 1).all())


@given(DISTANCES, FLOATS)
def test_law_equals_autograd_and_sums_to_minus_one(d: np.ndarray, tau: float) -> None:
    dt = _t(d)
    taus = torch.full(dt.shape[:-1], tau, dtype=F64)  # one τ per row, so autograd gives the per-row gradient
    gd, gt = _grads(dt, taus)
    law = open_set_law(dt, taus)
    torch.testing.assert_close(law[..., :-1], gd, atol=TOL, rtol=TOL)
    torch.testing.assert_close(law[..., -1], gt, atol=TOL, rtol=TOL)
    torch.testing.assert_close(law.sum(-1), -torch.ones(dt.shape[:-1], dtype=F64), atol=1e-12, rtol=0)


# -- the law against autograd, with negative controls -----------------------------------------------------------------


def test_law_with_a_shared_null_distance_sums_the_null_gradient_over_rows() -> None:
    d = torch.randn(64, 7, generator=_gen(1), dtype=F64) * 3
    tau = torch.tensor(-1.5, dtype=F64)  # the null takes a fair share of the rows
    gd, gt = _grads(d, tau)
    law = open_set_law(d, tau)
    assert gt.abs() > 1.0  # the check compares something
    torch.testing.assert_close(law[:, :-1], gd, atol=TOL, rtol=TOL)
    torch.testing.assert_close(law[:, -1].sum(), gt, atol=TOL, rtol=TOL)


def test_the_closed_world_law_misses_the_open_set_gradient() -> None:
    """Negative control: −softmax(−d) over the K known components alone (Theorem 1 without the null) misses by
    r_0's share, O(1) here; so does the law evaluated at a wrong τ."""
    d = torch.randn(64, 7, generator=_gen(2), dtype=F64) * 3
    tau = torch.tensor(-1.5, dtype=F64)
    gd, _ = _grads(d, tau)
    assert (lse_law(d) - gd).abs().amax() > 0.1
    assert (open_set_law(d, tau + 1.0)[:, :-1] - gd).abs().amax() > 0.1
    assert (-open_set_law(d, tau)[:, :-1] - gd).abs().amax() > 0.1  # the wrong sign


def test_gradcheck_and_gradgradcheck() -> None:
    d = torch.randn(4, 3, generator=_gen(3), dtype=F64, requires_grad=True)
    tau = torch.randn(4, generator=_gen(4), dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(open_set_lse, (d, tau))
    assert torch.autograd.gradgradcheck(open_set_lse, (d, tau))


# -- batching, dims, numerics, dtypes ---------------------------------------------------------------------------------


def test_one_null_distance_per_row_equals_a_loop_over_rows() -> None:
    d = torch.randn(3, 5, 4, generator=_gen(5), dtype=F64)
    tau = torch.randn(3, 5, generator=_gen(6), dtype=F64)
    looped = torch.stack([torch.stack([open_set_lse(d[i, j], tau[i, j]) for j in range(5)]) for i in range(3)])
    torch.testing.assert_close(open_set_lse(d, tau), looped, atol=1e-15, rtol=0)
    broadcast = torch.randn(5, generator=_gen(7), dtype=F64)  # broadcast over the leading batch dim
    torch.testing.assert_close(open_set_lse(d, broadcast), open_set_lse(d, broadcast.expand(3, 5)), atol=0, rtol=0)


def test_components_along_another_dim() -> None:
    d = torch.randn(4, 6, generator=_gen(8), dtype=F64)
    tau = torch.randn(6, generator=_gen(9), dtype=F64)
    assert append_null(d, tau, dim=0).shape == (5, 6)
    torch.testing.assert_close(open_set_lse(d, tau, dim=0), open_set_lse(d.T, tau), atol=0, rtol=0)
    torch.testing.assert_close(open_set_responsibilities(d, tau, dim=0), open_set_responsibilities(d.T, tau).T)
    torch.testing.assert_close(open_set_law(d, tau, dim=0), open_set_law(d.T, tau).T)


def test_stable_at_large_distances() -> None:
    d = torch.tensor([[1e4, 1e4 + 1.0], [-1e4, 3.0]], dtype=torch.float32)
    value = open_set_lse(d, 1e4 + 2.0)
    expected = torch.logaddexp(lse(d.double()), torch.tensor(-(1e4 + 2.0), dtype=F64))
    assert torch.isfinite(value).all()
    torch.testing.assert_close(value.double(), expected, atol=1e-3, rtol=1e-6)
    r = open_set_responsibilities(d, 1e4 + 2.0)
    assert torch.isfinite(r).all() and r[1, 0] == 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_outputs_follow_the_input_dtype(dtype: torch.dtype) -> None:
    d = torch.randn(6, 3, generator=_gen(10), dtype=F64)
    tau = torch.tensor(0.5, dtype=F64)  # a float64 τ does not promote a low-precision d
    for fn in (open_set_lse, open_set_responsibilities, open_set_law, append_null):
        out = fn(d.to(dtype), tau)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), fn(d, tau), atol=2e-2, rtol=2e-2)


def test_bad_inputs_raise_clear_errors() -> None:
    d = torch.zeros(4, 3, dtype=F64)
    with pytest.raises(ValueError, match="does not broadcast to d's rows \\(4,\\)"):
        open_set_lse(d, torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="NaN"):
        open_set_lse(d, math.nan)
    with pytest.raises(ValueError, match="-inf"):
        open_set_responsibilities(d, -math.inf)
    with pytest.raises(ValueError, match="floating-point"):
        open_set_lse(d, torch.zeros((), dtype=torch.long))
    with unchecked():
        with pytest.raises(ValueError, match="floating-point"):
            open_set_lse(torch.zeros(4, 3, dtype=torch.long), 0.0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="scalar"):
            open_set_lse(torch.tensor(1.0, dtype=F64), 0.0)
    with pytest.raises(ValueError, match="out of range"):
        open_set_lse(d, 0.0, dim=2)


# -- the module --------------------------------------------------------------------------------------------------


def test_module_appends_a_learnable_null_and_matches_the_functions() -> None:
    null = NoneOfTheAbove(null_distance=1.5, dtype=F64)
    assert [name for name, _ in null.named_parameters()] == ["null_distance"]
    d = torch.randn(8, 4, generator=_gen(11), dtype=F64)
    out = null(d)
    assert out.shape == (8, 5) and torch.equal(out[:, :4], d) and bool((out[:, 4] == 1.5).all())
    torch.testing.assert_close(null.lse(d), open_set_lse(d, 1.5), atol=0, rtol=0)
    torch.testing.assert_close(null.responsibilities(d), open_set_responsibilities(d, 1.5), atol=0, rtol=0)
    assert "learnable=True" in repr(null)


def test_module_gradient_on_the_null_distance_is_the_law() -> None:
    """∂Σ L_∅/∂τ = −Σ r_0, and under cross-entropy over the K + 1 classes ∂Σ ℓ/∂τ = Σ (t_0 − r_0)."""
    null = NoneOfTheAbove(null_distance=0.5, dtype=F64)
    d = torch.randn(32, 4, generator=_gen(12), dtype=F64) * 2
    (g,) = torch.autograd.grad(null.lse(d).sum(), null.null_distance)
    torch.testing.assert_close(g, open_set_law(d, 0.5)[:, -1].sum(), atol=TOL, rtol=TOL)
    y = torch.randint(0, 5, (32,), generator=_gen(13))  # 4 = "none of the above"
    (g_ce,) = torch.autograd.grad(constrained_cross_entropy(null(d), y).sum(), null.null_distance)
    r0 = null.responsibilities(d)[:, -1].detach()
    torch.testing.assert_close(g_ce, ((y == 4).double() - r0).sum(), atol=TOL, rtol=TOL)


def test_a_fixed_null_is_a_buffer_and_follows_the_module_dtype() -> None:
    null = NoneOfTheAbove(null_distance=2.0, learnable=False)
    assert list(null.parameters()) == [] and "null_distance" in dict(null.named_buffers())
    assert null.double().null_distance.dtype == F64
    assert null(torch.zeros(2, 3, dtype=F64)).dtype == F64
    with pytest.raises(ValueError, match="> -inf"):
        NoneOfTheAbove(null_distance=-math.inf)


def test_exported_at_the_top_level() -> None:
    for name in ("NoneOfTheAbove", "open_set_lse", "open_set_responsibilities"):
        assert name in implicit_em.__all__ and hasattr(implicit_em, name)
