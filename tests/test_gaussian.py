"""Tests of implicit_em.gaussian: each helper equals the old path it replaces (bitwise where the arithmetic is
the same) and sklearn's ``_gaussian_mixture`` helpers or slogdet in float64; both singular-covariance policies."""

import inspect
import re
import typing
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.mixture._gaussian_mixture import (
    _compute_log_det_cholesky,
    _compute_precision_cholesky,
    _compute_precision_cholesky_from_precisions,
)

from implicit_em import gaussian
from implicit_em._checks import check_finite, check_floating
from implicit_em.distances import GaussianComponents
from implicit_em.gaussian import (
    COVARIANCE_TYPES,
    CovarianceType,
    covariances_from_precisions_cholesky,
    full_matrices,
    full_precisions,
    log_det,
    parameter_shape,
    precisions,
    precisions_cholesky,
    precisions_cholesky_from_precisions,
)

F64 = torch.float64
K, D = 3, 4


# -- the old paths, verbatim from before the move (distances.precisions_cholesky_from_covariances,
# mixture/_stats.py, objectives.log_det_whitening), kept as references now that the library has one copy ------

_OLD_COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")  # objectives.py and mixture/_stats.py each had one


def _old_precisions_cholesky_raise(covariances: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """sklearn's ``_compute_precision_cholesky`` in torch: P = L⁻ᵀ for Σ = L Lᵀ (full, tied), 1/√σ² otherwise."""
    check_floating("covariances", covariances)
    check_finite("covariances", covariances)
    if covariance_type in ("full", "tied"):
        if covariances.shape[-1] != covariances.shape[-2]:
            raise ValueError(f"covariances must be square matrices, got {tuple(covariances.shape)}")
        chol, info = torch.linalg.cholesky_ex(covariances)
        if bool((info != 0).any()):
            bad = torch.nonzero(info.reshape(-1)).flatten().tolist()
            raise ValueError(
                f"covariance {'' if covariance_type == 'tied' else f'of component(s) {bad} '}is not positive "
                "definite (degenerate covariance); add a ridge such as reg_covar"
            )
        eye = torch.eye(covariances.shape[-1], dtype=covariances.dtype, device=covariances.device)
        return torch.linalg.solve_triangular(chol, eye.expand_as(chol), upper=False).mT
    if not bool((covariances > 0).all()):
        raise ValueError("variances must be > 0 (degenerate covariance); add a ridge such as reg_covar")
    return covariances.rsqrt()


def _old_full_precisions(
    precisions_cholesky: torch.Tensor, covariance_type: str, n_components: int, n_features: int
) -> torch.Tensor:
    """Λ_j = U_j U_jᵀ as (K, D, D) matrices for any covariance type (U = precisions_cholesky)."""
    u = precisions_cholesky
    if covariance_type == "full":
        return u @ u.mT
    if covariance_type == "tied":
        return (u @ u.T).expand(n_components, n_features, n_features)
    if covariance_type == "diag":
        return torch.diag_embed(u**2)
    eye = torch.eye(n_features, dtype=u.dtype, device=u.device)
    return (u**2)[:, None, None] * eye


def _old_log_det_cholesky(precisions_cholesky: torch.Tensor, covariance_type: str, n_features: int) -> torch.Tensor:
    """log|det W_j| = Σ log diag(U_j), shape (K,) or 0-dim for tied (as sklearn's _compute_log_det_cholesky)."""
    u = precisions_cholesky
    if covariance_type == "full":
        return torch.log(torch.diagonal(u, dim1=-2, dim2=-1)).sum(-1)
    if covariance_type == "tied":
        return torch.log(torch.diagonal(u)).sum()
    if covariance_type == "diag":
        return torch.log(u).sum(-1)
    return n_features * torch.log(u)


def _old_precisions_cholesky_ridge(cov: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """U with Σ⁻¹ = U Uᵀ, U upper-triangular: U = L⁻ᵀ for Σ = L Lᵀ (sklearn's ``_compute_precision_cholesky``).

    A matrix that is not numerically positive definite gets a growing ridge and a warning instead of an error.
    """
    if covariance_type in ("diag", "spherical"):
        return torch.rsqrt(cov)
    eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
    chol, info = torch.linalg.cholesky_ex(cov)
    ridge = 1e-10 * torch.diagonal(cov, dim1=-2, dim2=-1).abs().amax().clamp(min=1e-12)
    while bool((info > 0).any()):
        warnings.warn(
            f"covariance not positive definite; adding {float(ridge):.3g} to its diagonal "
            "(increase reg_covar to avoid this)",
            RuntimeWarning,
            stacklevel=3,
        )
        cov = cov + ridge * eye
        ridge = ridge * 10
        chol, info = torch.linalg.cholesky_ex(cov)
    inv = torch.linalg.solve_triangular(chol, eye.expand_as(chol), upper=False)
    return torch.triu(inv.mT).contiguous()


def _old_covariances(prec_chol: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """Σ = (U Uᵀ)⁻¹ from U, in the shape of the covariance type."""
    if covariance_type in ("diag", "spherical"):
        return 1.0 / prec_chol**2
    eye = torch.eye(prec_chol.shape[-1], dtype=prec_chol.dtype, device=prec_chol.device)
    u_inv = torch.linalg.solve_triangular(prec_chol, eye.expand_as(prec_chol), upper=True)  # U⁻¹
    return u_inv.mT @ u_inv


def _old_from_precisions(precisions: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """U from Λ (sklearn's ``_compute_precision_cholesky_from_precisions``): U = flip(chol(flip Λ)) pattern."""
    if covariance_type in ("diag", "spherical"):
        return torch.sqrt(precisions)
    flipped = torch.flip(precisions, dims=(-2, -1))
    chol = torch.linalg.cholesky(flipped)
    return torch.flip(chol, dims=(-2, -1))


def _old_log_det_whitening(whitening: torch.Tensor, covariance_type: str, n_features: int) -> torch.Tensor:
    r"""log|det W_j| for each component: (K,), or a 0-dim tensor for ``"tied"`` (one W shared by all).

    A general full W uses :func:`torch.linalg.slogdet`; diagonal and spherical W are O(D). For a triangular W
    the log-determinant is the sum of the log-diagonal (:class:`~implicit_em.distances.GaussianComponents` passes
    it precomputed). Spherical W is a scalar :math:`w` per component, :math:`\log|\det W| = D \log|w|`.
    """
    if covariance_type in ("full", "tied"):
        return torch.linalg.slogdet(whitening).logabsdet
    if covariance_type == "diag":
        return whitening.abs().log().sum(dim=-1)
    if covariance_type == "spherical":
        return n_features * whitening.abs().log()
    raise ValueError(f"covariance_type must be one of {_OLD_COVARIANCE_TYPES}, got {covariance_type!r}")


def _old_components_covariances(precisions_cholesky: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """GaussianComponents.covariances() as it was: Σ = W⁻¹ W⁻ᵀ from the whitening W = Uᵀ."""
    w = precisions_cholesky.mT if covariance_type in ("full", "tied") else precisions_cholesky
    if covariance_type in ("full", "tied"):
        eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device).expand_as(w)
        w_inv = torch.linalg.solve_triangular(w, eye, upper=False)
        return w_inv @ w_inv.mT
    return w.square().reciprocal()


def _old_components_precisions(precisions_cholesky: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """GaussianComponents.precisions() as it was: Wᵀ W or W²."""
    w = precisions_cholesky.mT if covariance_type in ("full", "tied") else precisions_cholesky
    return w.mT @ w if covariance_type in ("full", "tied") else w.square()


# -- helpers ---------------------------------------------------------------------------------------------------


@contextmanager
def value_or_type_error(match: str) -> Iterator[None]:
    """The library's ValueError, or the test-time jaxtyping/beartype check (a TypeError) that sees a wrong
    shape or an argument outside its Literal first; the message is checked when the library's own check ran."""
    with pytest.raises((ValueError, TypeError)) as info:
        yield
    if type(info.value) is ValueError:
        assert re.search(match, str(info.value))


def _covariances(covariance_type: str, k: int = K, d: int = D, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(k, d, d, generator=g, dtype=F64) / d**0.5
    full = a @ a.mT + 0.5 * torch.eye(d, dtype=F64)
    variances = torch.rand(k, d, generator=g, dtype=F64) * 2 + 0.1
    return {"full": full, "tied": full[0], "diag": variances, "spherical": variances[:, 0]}[covariance_type]


def _dense(matrices: torch.Tensor, covariance_type: str, j: int, d: int = D) -> torch.Tensor:
    """Component j's D×D matrix, written out by hand."""
    if covariance_type == "full":
        return matrices[j]
    if covariance_type == "tied":
        return matrices
    if covariance_type == "diag":
        return torch.diag(matrices[j])
    return matrices[j] * torch.eye(d, dtype=matrices.dtype)


def _sklearn_fit(covariance_type: str) -> SkGaussianMixture:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-2, 1, (40, D)), rng.normal(2, 0.5, (40, D))])
    return SkGaussianMixture(K, covariance_type=covariance_type, random_state=0).fit(x)


# -- covariance types and shapes -------------------------------------------------------------------------------


def test_covariance_types_are_sklearns_and_the_old_constants() -> None:
    assert COVARIANCE_TYPES == ("full", "tied", "diag", "spherical")
    assert typing.get_args(CovarianceType) == COVARIANCE_TYPES
    assert COVARIANCE_TYPES == _OLD_COVARIANCE_TYPES


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_parameter_shape_is_the_shape_of_sklearns_parameters(covariance_type: str) -> None:
    sk = _sklearn_fit(covariance_type)
    expected = parameter_shape(covariance_type, K, D)
    assert expected == {"full": (K, D, D), "tied": (D, D), "diag": (K, D), "spherical": (K,)}[covariance_type]
    for name in ("covariances_", "precisions_", "precisions_cholesky_"):
        assert getattr(sk, name).shape == expected, name


@pytest.mark.parametrize(
    "call",
    [
        lambda: parameter_shape("banana", K, D),
        lambda: precisions_cholesky(_covariances("full"), "banana"),
        lambda: precisions_cholesky(_covariances("full"), "banana", on_singular="ridge"),
        lambda: covariances_from_precisions_cholesky(_covariances("diag"), "banana"),
        lambda: precisions_cholesky_from_precisions(_covariances("diag"), "banana"),
        lambda: precisions(_covariances("diag"), "banana"),
        lambda: full_matrices(_covariances("diag"), "banana", K, D),
        lambda: full_precisions(_covariances("diag"), "banana", K, D),
        lambda: log_det(_covariances("diag"), "banana", D),
    ],
)
def test_an_unknown_covariance_type_raises(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=re.escape(f"covariance_type must be one of {COVARIANCE_TYPES}, got 'banana'")):
        call()


# -- precisions_cholesky: the two policies ---------------------------------------------------------------------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_raise_policy_equals_the_old_distances_path(covariance_type: str) -> None:
    cov = _covariances(covariance_type)
    new = precisions_cholesky(cov, covariance_type, on_singular="raise")
    assert torch.equal(new, _old_precisions_cholesky_raise(cov, covariance_type))  # type: ignore[arg-type]
    assert torch.equal(precisions_cholesky(cov, covariance_type), new)  # "raise" is the default


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_ridge_policy_equals_the_old_stats_path(covariance_type: str) -> None:
    cov = _covariances(covariance_type)
    new = precisions_cholesky(cov, covariance_type, on_singular="ridge")
    assert torch.equal(new, _old_precisions_cholesky_ridge(cov, covariance_type))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
@pytest.mark.parametrize("on_singular", ["raise", "ridge"])
def test_precisions_cholesky_equals_sklearn(covariance_type: str, on_singular: gaussian.OnSingular) -> None:
    cov = _covariances(covariance_type)
    ours = precisions_cholesky(cov, covariance_type, on_singular=on_singular)
    ref = _compute_precision_cholesky(cov.numpy(), covariance_type)
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-10, atol=1e-12)
    if covariance_type in ("full", "tied"):
        assert torch.equal(ours, torch.triu(ours)) and ours.is_contiguous()


def _singular_full() -> torch.Tensor:
    cov = _covariances("full")
    cov[1] = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=F64).repeat(2, 2)  # rank 1
    return cov


@pytest.mark.parametrize(
    ("covariances", "covariance_type", "match"),
    [
        (_singular_full(), "full", r"^covariance of component\(s\) \[1\] is not positive definite \(degenerate"),
        (_singular_full()[1], "tied", r"^covariance is not positive definite \(degenerate covariance\); add a ridge"),
        (torch.zeros(K, D, dtype=F64), "diag", r"^variances must be > 0 \(degenerate covariance\)"),
        (-torch.ones(K, dtype=F64), "spherical", r"^variances must be > 0"),
        (torch.full((D, D), float("nan"), dtype=F64), "tied", r"^covariances contains NaN or inf"),
    ],
)
def test_raise_policy_raises_the_old_message(covariances: torch.Tensor, covariance_type: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        precisions_cholesky(covariances, covariance_type)
    with pytest.raises(ValueError, match=match):
        _old_precisions_cholesky_raise(covariances, covariance_type)  # type: ignore[arg-type]


def test_raise_policy_rejects_non_square_matrices() -> None:
    with value_or_type_error(r"covariances must be square matrices, got \(3, 4, 2\)"):
        precisions_cholesky(torch.ones(3, 4, 2, dtype=F64), "full")
    with pytest.raises(ValueError, match=r"covariances must be square matrices, got \(3, 4, 2\)"):
        gaussian._cholesky_or_raise(torch.ones(3, 4, 2, dtype=F64), "full")


def test_an_unknown_policy_raises() -> None:
    with value_or_type_error("on_singular must be 'raise' or 'ridge', got 'clip'"):
        precisions_cholesky(_covariances("full"), "full", on_singular="clip")  # type: ignore[arg-type]


@pytest.mark.parametrize("covariance_type", ["full", "tied"])
def test_ridge_policy_warns_like_the_old_path_and_gives_the_same_factor(covariance_type: str) -> None:
    cov = _singular_full() if covariance_type == "full" else _singular_full()[1]
    with warnings.catch_warnings(record=True) as new_w:
        warnings.simplefilter("always")
        new = precisions_cholesky(cov, covariance_type, on_singular="ridge")
    with warnings.catch_warnings(record=True) as old_w:
        warnings.simplefilter("always")
        old = _old_precisions_cholesky_ridge(cov, covariance_type)
    assert torch.equal(new, old) and torch.isfinite(new).all()
    assert [str(w.message) for w in new_w] == [str(w.message) for w in old_w] != []
    assert all(w.category is RuntimeWarning for w in new_w)
    assert re.fullmatch(
        r"covariance not positive definite; adding \S+ to its diagonal \(increase reg_covar to avoid this\)",
        str(new_w[0].message),
    )


def test_ridge_warning_points_at_the_caller_of_the_m_step() -> None:
    # stacklevel=3, as in the old _stats.precision_cholesky: the warning names the caller of the function that
    # called precisions_cholesky (from_summaries' caller, a fitter). The test-time shape checks wrap every
    # function in extra frames, so the undecorated function is called here.
    raw = inspect.unwrap(precisions_cholesky)

    def m_step() -> torch.Tensor:
        return raw(_singular_full(), "full", on_singular="ridge")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        m_step()
    assert caught and {(w.filename, w.lineno) for w in caught} == {(__file__, line)}


# -- the inverse, and precisions -------------------------------------------------------------------------------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_covariances_from_precisions_cholesky_equals_the_old_paths(covariance_type: str) -> None:
    cov = _covariances(covariance_type)
    u = precisions_cholesky(cov, covariance_type)
    new = covariances_from_precisions_cholesky(u, covariance_type)
    assert torch.equal(new, _old_covariances(u, covariance_type))
    # GaussianComponents solved the lower-triangular system of W = Uᵀ instead: the same up to round-off.
    torch.testing.assert_close(new, _old_components_covariances(u, covariance_type), rtol=1e-13, atol=0)
    comps = GaussianComponents.from_precisions_cholesky(torch.zeros(K, D, dtype=F64), u, covariance_type)  # type: ignore[arg-type]
    u_c = comps.precisions_cholesky().detach()  # u through exp(log u): equal up to round-off
    assert torch.equal(comps.covariances().detach(), covariances_from_precisions_cholesky(u_c, covariance_type))
    torch.testing.assert_close(new, cov, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_precisions_cholesky_from_precisions_equals_old_path_and_sklearn(covariance_type: str) -> None:
    u = precisions_cholesky(_covariances(covariance_type), covariance_type)
    lam = precisions(u, covariance_type)
    new = precisions_cholesky_from_precisions(lam, covariance_type)
    assert torch.equal(new, _old_from_precisions(lam, covariance_type))
    ref = _compute_precision_cholesky_from_precisions(lam.numpy(), covariance_type, xp=np)
    np.testing.assert_allclose(new.numpy(), ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(new, u, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_precisions_equal_sklearn_and_the_old_components_path(covariance_type: str) -> None:
    sk = _sklearn_fit(covariance_type)
    u = torch.from_numpy(sk.precisions_cholesky_)
    np.testing.assert_allclose(precisions(u, covariance_type).numpy(), sk.precisions_, rtol=1e-12, atol=1e-12)
    comps = GaussianComponents.from_precisions_cholesky(torch.from_numpy(sk.means_), u, covariance_type)  # type: ignore[arg-type]
    u_c = comps.precisions_cholesky().detach()
    assert torch.equal(comps.precisions().detach(), _old_components_precisions(u_c, covariance_type))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_full_precisions_equal_the_old_path_and_dense_products(covariance_type: str) -> None:
    u = precisions_cholesky(_covariances(covariance_type), covariance_type)
    new = full_precisions(u, covariance_type, K, D)
    assert new.shape == (K, D, D)
    assert torch.equal(new, _old_full_precisions(u, covariance_type, K, D))
    for j in range(K):
        dense_u = _dense(u, covariance_type, j)
        torch.testing.assert_close(new[j], dense_u @ dense_u.T, rtol=1e-14, atol=0)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_full_matrices_write_out_each_component(covariance_type: str) -> None:
    cov = _covariances(covariance_type)
    full = full_matrices(cov, covariance_type, K, D)
    assert full.shape == (K, D, D)
    for j in range(K):
        assert torch.equal(full[j], _dense(cov, covariance_type, j))


# -- log|det| --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_triangular_log_det_equals_the_old_cholesky_path_and_sklearn(covariance_type: str) -> None:
    u = precisions_cholesky(_covariances(covariance_type), covariance_type)
    new = log_det(u, covariance_type, D, triangular=True)
    assert new.shape == (() if covariance_type == "tied" else (K,))
    assert torch.equal(new, _old_log_det_cholesky(u, covariance_type, D))
    ref = _compute_log_det_cholesky(u.numpy(), covariance_type, D)
    np.testing.assert_allclose(new.numpy(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_general_log_det_equals_the_old_whitening_path(covariance_type: str) -> None:
    g = torch.Generator().manual_seed(5)
    w = torch.randn(*parameter_shape(covariance_type, K, D), generator=g, dtype=F64)  # any invertible W
    new = log_det(w, covariance_type, D)
    assert torch.equal(new, _old_log_det_whitening(w, covariance_type, D))  # type: ignore[arg-type]


_ENTRY = st.floats(-3, 3, allow_nan=False, allow_infinity=False)
_DIAGONAL = st.floats(0.2, 5, allow_nan=False, allow_infinity=False) | st.floats(-5, -0.2)


@given(
    st.sampled_from(COVARIANCE_TYPES),
    st.integers(1, 4),
    st.integers(1, 3),
    st.lists(_ENTRY, min_size=48, max_size=48),
    st.lists(_DIAGONAL, min_size=12, max_size=12),
)
def test_every_parametrisation_gives_the_log_det_of_slogdet(
    covariance_type: str, d: int, k: int, entries: list[float], diagonal: list[float]
) -> None:
    # A triangular or diagonal factor with any signs on its diagonal; the dense matrix it stands for, per
    # component, through slogdet.
    off = torch.tensor(entries, dtype=F64)[: k * d * d].reshape(k, d, d)
    diag = torch.tensor(diagonal, dtype=F64)[: k * d].reshape(k, d)
    tri = torch.tril(off, diagonal=-1) + torch.diag_embed(diag)  # (K, D, D) lower-triangular
    factor = {"full": tri, "tied": tri[0].mT, "diag": diag, "spherical": diag[:, 0]}[covariance_type]
    kk = 1 if covariance_type == "tied" else k
    expected = torch.stack([torch.linalg.slogdet(_dense(factor, covariance_type, j, d)).logabsdet for j in range(kk)])
    for triangular in (True, False):
        got = log_det(factor, covariance_type, d, triangular=triangular)
        torch.testing.assert_close(got.reshape(-1), expected, rtol=1e-10, atol=1e-10)


# -- dtypes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
@pytest.mark.parametrize("on_singular", ["raise", "ridge"])
def test_outputs_follow_a_float32_input(covariance_type: str, on_singular: gaussian.OnSingular) -> None:
    cov = _covariances(covariance_type).float()
    u = precisions_cholesky(cov, covariance_type, on_singular=on_singular)
    outs = [
        u,
        covariances_from_precisions_cholesky(u, covariance_type),
        precisions(u, covariance_type),
        precisions_cholesky_from_precisions(precisions(u, covariance_type), covariance_type),
        full_precisions(u, covariance_type, K, D),
        log_det(u, covariance_type, D, triangular=True),
        log_det(u, covariance_type, D),
    ]
    assert all(t.dtype == torch.float32 for t in outs)
    # float32 round-off on well-conditioned D = 4 matrices: a few ulps of 1e-7, so 1e-5.
    u64 = precisions_cholesky(cov.double(), covariance_type, on_singular=on_singular)
    torch.testing.assert_close(u.double(), u64, rtol=1e-5, atol=1e-6)


# -- where the moved names live ------------------------------------------------------------------------------


def test_the_moved_energies_live_in_distances_and_keep_their_top_level_names() -> None:
    import implicit_em
    from implicit_em import distances, objectives

    for name in ("gaussian_energies", "gaussian_mixture_log_likelihood", "whiten"):
        assert name in distances.__all__ and not hasattr(objectives, name)
    assert implicit_em.gaussian_energies is distances.gaussian_energies
    assert implicit_em.gaussian_mixture_log_likelihood is distances.gaussian_mixture_log_likelihood
    assert not hasattr(objectives, "COVARIANCE_TYPES") and not hasattr(objectives, "log_det_whitening")
