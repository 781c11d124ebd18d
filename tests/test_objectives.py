"""Tests of implicit_em.objectives: closed forms, the identity in every regime, stability, errors."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import implicit_em
from implicit_em._checks import check_distances
from implicit_em.laws import identity_residual
from implicit_em.objectives import (
    constrained_cross_entropy,
    correntropy,
    independent_sigmoid_bce,
    lse,
    mixture_nll,
    responsibilities,
    softmin_bounds,
)

FLOATS = st.floats(-30, 30, allow_nan=False, allow_infinity=False)
# Distances: 1 to 3 dimensions, each of size 1..6 (the last is K).
DISTANCES = arrays(np.float64, array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), elements=FLOATS)
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


def _t(a: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)


# -- closed forms --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 7])
def test_equal_distances_give_uniform_responsibilities(k: int) -> None:
    d = torch.full((3, k), 2.5, dtype=torch.float64)
    torch.testing.assert_close(responsibilities(d), torch.full((3, k), 1.0 / k, dtype=torch.float64))
    torch.testing.assert_close(lse(d), torch.full((3,), math.log(k) - 2.5, dtype=torch.float64))


def test_two_components_closed_form() -> None:
    # r = softmax(-(0, -1)) = (1, e)/(1 + e), as in equinox's attention-weights test.
    r = responsibilities(torch.tensor([0.0, -1.0], dtype=torch.float64))
    e = math.e
    torch.testing.assert_close(r, torch.tensor([1 / (1 + e), e / (1 + e)], dtype=torch.float64))


@given(DISTANCES, FLOATS)
def test_lse_shift_identity(d: np.ndarray, c: float) -> None:
    dt = _t(d)
    torch.testing.assert_close(lse(dt + c), lse(dt) - c, rtol=1e-12, atol=1e-10)


@given(DISTANCES)
def test_softmin_bounds_hold(d: np.ndarray) -> None:
    dt = _t(d)
    lower, upper = softmin_bounds(dt)
    soft_min = -lse(dt)
    assert torch.all(lower <= soft_min + 1e-12)
    assert torch.all(soft_min <= upper + 1e-12)


def test_softmin_bounds_are_tight_at_the_extremes() -> None:
    equal = torch.zeros(1, 5, dtype=torch.float64)  # lower bound attained
    torch.testing.assert_close(-lse(equal), softmin_bounds(equal)[0])
    separated = torch.tensor([[0.0, 1e3, 1e3]], dtype=torch.float64)  # upper bound attained
    torch.testing.assert_close(-lse(separated), softmin_bounds(separated)[1])


@given(DISTANCES)
def test_responsibilities_are_a_distribution(d: np.ndarray) -> None:
    r = responsibilities(_t(d))
    assert torch.all((r >= 0) & (r <= 1))
    torch.testing.assert_close(r.sum(-1), torch.ones(r.shape[:-1], dtype=r.dtype), rtol=0, atol=1e-12)


@given(DISTANCES, st.randoms(use_true_random=False))
def test_responsibilities_are_permutation_equivariant(d: np.ndarray, rnd: object) -> None:
    dt = _t(d)
    perm = torch.randperm(dt.shape[-1])
    torch.testing.assert_close(responsibilities(dt[..., perm]), responsibilities(dt)[..., perm])


def test_log_weights_shift_responsibilities_like_a_prior() -> None:
    d = torch.randn(4, 3, dtype=torch.float64)
    log_w = torch.log_softmax(torch.randn(3, dtype=torch.float64), 0)
    expected = torch.exp(log_w - d) / torch.exp(log_w - d).sum(-1, keepdim=True)
    torch.testing.assert_close(responsibilities(d, log_w), expected)
    torch.testing.assert_close(mixture_nll(d, log_w), -torch.log(torch.exp(log_w - d).sum(-1)))


# -- the identity in every regime ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@given(d=DISTANCES)
def test_grad_of_lse_is_minus_responsibilities(dtype: torch.dtype, d: np.ndarray) -> None:
    assert identity_residual(lse, _t(d, dtype), "lse") <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@given(d=DISTANCES, seed=st.integers(0, 2**16))
def test_grad_of_mixture_nll_is_plus_responsibilities(dtype: torch.dtype, d: np.ndarray, seed: int) -> None:
    dt = _t(d, dtype)
    log_w = torch.log_softmax(torch.randn(dt.shape[-1], generator=torch.Generator().manual_seed(seed)), 0)
    log_w = log_w.to(dtype)
    assert identity_residual(mixture_nll, dt, "mixture_nll") <= TOL[dtype]
    res = identity_residual(lambda x: mixture_nll(x, log_w), dt, "mixture_nll", log_weights=log_w)
    assert res <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@given(d=DISTANCES, seed=st.integers(0, 2**16))
def test_grad_of_cross_entropy_is_target_minus_responsibilities(
    dtype: torch.dtype, smoothing: float, d: np.ndarray, seed: int
) -> None:
    dt = _t(d, dtype)
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, dt.shape[-1], dt.shape[:-1], generator=g)
    soft = torch.softmax(torch.randn(dt.shape, generator=g, dtype=torch.float64), -1).to(dtype)
    for target in (index, soft):

        def ce(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return constrained_cross_entropy(x, t, label_smoothing=smoothing)

        res = identity_residual(ce, dt, "constrained", target=target, label_smoothing=smoothing)
        assert res <= TOL[dtype]


@pytest.mark.parametrize("dim", [0, 1])
def test_identity_along_another_dim(dim: int) -> None:
    d = torch.randn(5, 4, 3, dtype=torch.float64)
    assert identity_residual(lambda x: lse(x, dim=dim), d, "lse", dim=dim) <= 1e-12
    target = torch.randint(0, d.shape[dim], [s for i, s in enumerate(d.shape) if i != dim])
    res = identity_residual(lambda x, t: constrained_cross_entropy(x, t, dim=dim), d, "constrained", target, dim=dim)
    assert res <= 1e-12


def test_identity_residual_detects_a_wrong_law() -> None:
    # A sigmoid loss is not normalised: its gradient is not t - r, and the residual says so.
    d = torch.randn(6, 4, dtype=torch.float64)
    target = torch.randint(0, 4, (6,))
    res = identity_residual(lambda x, t: independent_sigmoid_bce(-x, t), d, "constrained", target=target)
    assert res > 1e-2


# -- agreement with PyTorch ----------------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_constrained_cross_entropy_equals_torch_with_indices(smoothing: float) -> None:
    d = torch.randn(2, 7, 5, dtype=torch.float64)
    target = torch.randint(0, 5, (2, 7))
    ours = constrained_cross_entropy(d, target, label_smoothing=smoothing)
    theirs = F.cross_entropy(-d.reshape(-1, 5), target.reshape(-1), reduction="none", label_smoothing=smoothing)
    torch.testing.assert_close(ours, theirs.reshape(2, 7), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_constrained_cross_entropy_equals_torch_with_soft_targets(smoothing: float) -> None:
    d = torch.randn(9, 4, dtype=torch.float64)
    t = torch.softmax(torch.randn(9, 4, dtype=torch.float64), -1)
    ours = constrained_cross_entropy(d, t, label_smoothing=smoothing)
    theirs = F.cross_entropy(-d, t, reduction="none", label_smoothing=smoothing)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_constrained_cross_entropy_class_dim_first_matches_torch() -> None:
    d = torch.randn(4, 3, 6, dtype=torch.float64)  # classes along dim 1, like torch's (N, C, d1)
    target = torch.randint(0, 3, (4, 6))
    theirs = F.cross_entropy(-d, target, reduction="none")
    torch.testing.assert_close(constrained_cross_entropy(d, target, dim=1), theirs, rtol=1e-12, atol=1e-12)


# -- non-normalised controls ---------------------------------------------------------------------------------


def test_correntropy_closed_form_and_vanishing_outlier_gradient() -> None:
    d = torch.tensor([[0.0, 1.0, 50.0]], dtype=torch.float64, requires_grad=True)
    value = correntropy(d, sigma=2.0)
    torch.testing.assert_close(value, torch.tensor([2.0 - math.exp(-0.25) - math.exp(-625.0)], dtype=torch.float64))
    (grad,) = torch.autograd.grad(value.sum(), d)
    expected = 2 * d.detach() / 4.0 * torch.exp(-d.detach().square() / 4.0)
    torch.testing.assert_close(grad, expected)
    assert grad[0, 2] < 1e-200  # the far outlier is ignored: robustness, no responsibilities


def test_sigmoid_bce_gradient_is_sigmoid_minus_target_and_not_normalised() -> None:
    z = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 5, (8,))
    (grad,) = torch.autograd.grad(independent_sigmoid_bce(z, target).sum(), z)
    torch.testing.assert_close(grad, torch.sigmoid(z.detach()) - F.one_hot(target, 5).double())
    assert (grad.sum(-1).abs() > 1e-3).any()  # softmax CE gradients sum to zero per row; these do not


def test_sigmoid_bce_equals_torch_with_multilabel_targets() -> None:
    z = torch.randn(3, 4, dtype=torch.float64)
    t = torch.randint(0, 2, (3, 4)).double()
    theirs = F.binary_cross_entropy_with_logits(z, t, reduction="none").sum(-1)
    torch.testing.assert_close(independent_sigmoid_bce(z, t), theirs)


# -- gradcheck -----------------------------------------------------------------------------------------------


def test_gradcheck_objectives() -> None:
    d = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    log_w = torch.log_softmax(torch.randn(4, dtype=torch.float64), 0).requires_grad_(True)
    target = torch.randint(0, 4, (3,))
    soft = torch.softmax(torch.randn(3, 4, dtype=torch.float64), -1)
    assert torch.autograd.gradcheck(lse, (d,))
    assert torch.autograd.gradgradcheck(lse, (d,))
    assert torch.autograd.gradcheck(mixture_nll, (d, log_w))
    assert torch.autograd.gradcheck(lambda x: responsibilities(x, log_w), (d,))
    assert torch.autograd.gradcheck(lambda x: constrained_cross_entropy(x, target, label_smoothing=0.1), (d,))
    assert torch.autograd.gradcheck(lambda x: constrained_cross_entropy(x, soft), (d,))
    assert torch.autograd.gradcheck(lambda x: correntropy(x, 1.5), (d,))
    assert torch.autograd.gradcheck(lambda x: independent_sigmoid_bce(x, target), (d,))


# -- stability -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_extreme_distances_stay_finite(dtype: torch.dtype) -> None:
    d = torch.tensor([[1e4, -1e4, 0.0], [1e4, 1e4, 1e4], [-1e4, -1e4, 3.0]], dtype=dtype, requires_grad=True)
    value = lse(d)
    (grad,) = torch.autograd.grad(value.sum(), d)
    assert value.dtype == dtype and grad.dtype == dtype
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()
    ref = torch.logsumexp(-d.detach().double(), -1)
    # Half precision spacing near 1e4 is 8 (float16) and 64 (bfloat16): compare relatively.
    torch.testing.assert_close(
        value.double(), ref, rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6, atol=0
    )
    r = responsibilities(d.detach())
    assert torch.isfinite(r).all()
    torch.testing.assert_close(r.double(), torch.softmax(-d.detach().double(), -1), atol=1e-2, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_infinite_distance_is_an_impossible_component(dtype: torch.dtype) -> None:
    d = torch.tensor([[0.0, math.inf, 1.0], [math.inf, 2.0, math.inf]], dtype=dtype, requires_grad=True)
    r = responsibilities(d.detach())
    assert r[0, 1] == 0 and r[1, 0] == 0 and r[1, 2] == 0 and r[1, 1] == 1
    (grad,) = torch.autograd.grad(lse(d).sum(), d)
    assert torch.isfinite(grad).all() and grad[0, 1] == 0
    target = torch.tensor([0, 1])
    loss = constrained_cross_entropy(d, target)
    (grad_ce,) = torch.autograd.grad(loss.sum(), d)
    assert torch.isfinite(loss).all() and torch.isfinite(grad_ce).all()
    soft = torch.tensor([[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]], dtype=dtype)
    assert torch.isfinite(constrained_cross_entropy(d.detach(), soft)).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matches_float64_reference(dtype: torch.dtype) -> None:
    d = torch.randn(64, 10, dtype=torch.float64) * 5
    for f in (lse, mixture_nll):
        torch.testing.assert_close(f(d.to(dtype)).double(), f(d), rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(responsibilities(d.to(dtype)).double(), responsibilities(d), rtol=0, atol=1e-2)


# -- errors --------------------------------------------------------------------------------------------------


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="K = 0"):
        lse(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="NaN"):
        lse(torch.tensor([[0.0, math.nan]]))
    with pytest.raises(ValueError, match="-inf"):
        responsibilities(torch.tensor([[0.0, -math.inf]]))
    with pytest.raises(ValueError, match="every distance is \\+inf"):
        responsibilities(torch.tensor([[1.0, 2.0], [math.inf, math.inf]]))
    # A scalar or an integer tensor is also refused by the annotations under the test-time type checker, so
    # the library's own messages are checked on the shared check that every objective calls.
    with pytest.raises(ValueError, match="scalar"):
        check_distances(torch.tensor(1.0), -1)
    with pytest.raises(ValueError, match="floating-point"):
        check_distances(torch.tensor([[1, 2]]), -1)
    with pytest.raises(ValueError, match="out of range"):
        lse(torch.zeros(2, 3), dim=2)
    with pytest.raises(ValueError, match="log_weights has 2 entries but d has K = 3"):
        mixture_nll(torch.zeros(2, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="zero weight"):
        mixture_nll(torch.tensor([[0.0, math.inf]]), torch.tensor([-math.inf, 0.0]))
    with pytest.raises(ValueError, match="class-index target must have shape \\(4,\\)"):
        constrained_cross_entropy(torch.zeros(4, 3), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="out of range \\[0, 3\\)"):
        constrained_cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="soft target must have d's shape"):
        constrained_cross_entropy(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="sigma must be > 0"):
        correntropy(torch.zeros(2, 3), 0.0)
    # ValueError from the library; TypeError from the test-time type checker, which sees the Literal first.
    with pytest.raises((ValueError, TypeError), match="regime"):
        identity_residual(lse, torch.zeros(2, 3), "em")  # type: ignore[arg-type]


def test_value_checks_can_be_switched_off_and_document_the_all_inf_row() -> None:
    implicit_em.set_validate_args(False)
    d = torch.tensor([[math.inf, math.inf]])
    assert lse(d).item() == -math.inf  # the documented value: log 0
    assert torch.isnan(responsibilities(d)).all()  # undefined, documented; checks on would have raised
