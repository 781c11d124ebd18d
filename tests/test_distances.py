"""Tests of implicit_em.distances and the Gaussian energies: oracles scipy, sklearn, slogdet and autograd."""

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import multivariate_normal
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from implicit_em.distances import (
    GaussianComponents,
    MahalanobisUnit,
    Prototypes,
    _check_gaussian_args,
    gaussian_energies,
    gaussian_mixture_log_likelihood,
    whiten,
)
from implicit_em.gaussian import COVARIANCE_TYPES, precisions_cholesky
from implicit_em.objectives import lse, mixture_nll

F64 = torch.float64


@contextmanager
def shape_error(match: str) -> Iterator[None]:
    """The library's ValueError naming the shapes, or the test-time jaxtyping check (a TypeError) that sees the
    mismatch in the annotations first; the library's own message is then checked on its private checker."""
    with pytest.raises((ValueError, TypeError)) as info:
        yield
    if type(info.value) is ValueError:
        assert re.search(match, str(info.value))


def _random_spd(k: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(k, d, d, generator=g, dtype=F64)
    return a @ a.mT + 0.5 * torch.eye(d, dtype=F64)


def _random_covariances(covariance_type: str, k: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    if covariance_type == "full":
        return _random_spd(k, d, seed)
    if covariance_type == "tied":
        return _random_spd(1, d, seed)[0]
    if covariance_type == "diag":
        return torch.rand(k, d, generator=g, dtype=F64) * 2 + 0.1
    return torch.rand(k, generator=g, dtype=F64) * 2 + 0.1


def _dense_covariance(covariances: torch.Tensor, covariance_type: str, j: int, d: int) -> np.ndarray:
    if covariance_type == "full":
        return covariances[j].numpy()
    if covariance_type == "tied":
        return covariances.numpy()
    if covariance_type == "diag":
        return np.diag(covariances[j].numpy())
    return covariances[j].item() * np.eye(d)


# -- MahalanobisUnit -----------------------------------------------------------------------------------------


def test_mahalanobis_unit_is_relu_plus_relu_of_minus() -> None:
    unit = MahalanobisUnit(5, 3, dtype=F64)
    x = torch.randn(7, 5, dtype=F64)
    z = unit.linear(x)
    torch.testing.assert_close(unit(x), torch.relu(z) + torch.relu(-z), rtol=0, atol=0)


def test_mahalanobis_units_from_all_principal_axes_give_the_mahalanobis_distance() -> None:
    d = 4
    cov = _random_spd(1, d, seed=3)[0]
    mean = torch.randn(d, dtype=F64)
    eigenvalues, eigenvectors = torch.linalg.eigh(cov)
    unit = MahalanobisUnit.from_gaussian(mean, eigenvectors.T, eigenvalues)
    x = torch.randn(11, d, dtype=F64)
    diff = x - mean
    expected = torch.einsum("ni,ij,nj->n", diff, torch.linalg.inv(cov), diff)
    torch.testing.assert_close(unit(x).square().sum(-1), expected, rtol=1e-10, atol=1e-12)


def test_mahalanobis_unit_single_axis_and_errors() -> None:
    unit = MahalanobisUnit.from_gaussian(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), 4.0)
    torch.testing.assert_close(unit(torch.tensor([[3.0, 5.0]])), torch.tensor([[1.0]]))  # |3 - 1| / sqrt(4)
    with pytest.raises(ValueError, match="eigenvalues must be > 0"):
        MahalanobisUnit.from_gaussian(torch.zeros(2), torch.tensor([1.0, 0.0]), 0.0)
    with pytest.raises(ValueError, match="disagree on D"):
        MahalanobisUnit.from_gaussian(torch.zeros(3), torch.tensor([1.0, 0.0]), 1.0)


# -- Prototypes ----------------------------------------------------------------------------------------------


def test_prototypes_equal_squared_cdist() -> None:
    layer = Prototypes(6, 3, dtype=F64)
    x = torch.randn(2, 9, 3, dtype=F64)
    torch.testing.assert_close(layer(x), torch.cdist(x, layer.prototypes.expand(2, 6, 3)).square())
    assert "n_components=6, n_features=3" in repr(layer)
    with shape_error("x has 4 features but the prototypes have 3"):
        layer(torch.randn(5, 4, dtype=F64))


# -- GaussianComponents: log-density ------------------------------------------------------------------------------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_energy_is_minus_scipy_log_density(covariance_type: str) -> None:
    k, d = 3, 4
    means = torch.randn(k, d, dtype=F64)
    covariances = _random_covariances(covariance_type, k, d, seed=1)
    comps = GaussianComponents.from_covariances(means, covariances, covariance_type)  # type: ignore[arg-type]
    x = torch.randn(20, d, dtype=F64) * 2
    out = comps(x)
    for j in range(k):
        ref = multivariate_normal(means[j].numpy(), _dense_covariance(covariances, covariance_type, j, d)).logpdf(
            x.numpy()
        )
        np.testing.assert_allclose(-out.energy[:, j].detach().numpy(), ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.energy, out.distance - out.log_det + 0.5 * d * math.log(2 * math.pi))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_mixture_log_likelihood_equals_sklearn_score_samples(covariance_type: str) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-2, 1, (60, 3)), rng.normal(2, 0.5, (60, 3))])
    sk = SkGaussianMixture(3, covariance_type=covariance_type, random_state=0).fit(x)
    comps = GaussianComponents.from_precisions_cholesky(
        torch.from_numpy(sk.means_), torch.from_numpy(sk.precisions_cholesky_), covariance_type
    )
    log_w = torch.from_numpy(np.log(sk.weights_))
    xt = torch.from_numpy(x)
    ours = -mixture_nll(comps(xt).energy, log_w).detach()
    np.testing.assert_allclose(ours.numpy(), sk.score_samples(x), rtol=1e-10, atol=1e-10)
    whitening = comps.whitening().detach()
    via_function = gaussian_mixture_log_likelihood(xt, log_w, comps.means.detach(), whitening, covariance_type)
    np.testing.assert_allclose(via_function.numpy(), sk.score_samples(x), rtol=1e-10, atol=1e-10)
    # sklearn-shaped views round-trip
    np.testing.assert_allclose(comps.covariances().detach().numpy(), sk.covariances_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(comps.precisions().detach().numpy(), sk.precisions_, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(comps.precisions_cholesky().detach().numpy(), sk.precisions_cholesky_, rtol=1e-12)


def test_precisions_cholesky_matches_sklearn_helper() -> None:
    from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

    cov = _random_spd(3, 5, seed=4)
    ours = precisions_cholesky(cov, "full").numpy()
    np.testing.assert_allclose(ours, _compute_precision_cholesky(cov.numpy(), "full"), rtol=1e-10, atol=1e-12)


# -- log|det W| ---------------------------------------------------------------------------------------------------


@given(st.integers(0, 10_000), st.integers(1, 5))
def test_every_parametrisation_gives_the_same_log_det(seed: int, d: int) -> None:
    g = torch.Generator().manual_seed(seed)
    scale = torch.rand(1, generator=g, dtype=F64) + 0.2
    variances = torch.full((1, d), float(scale) ** 2, dtype=F64)
    covs = {
        "spherical": variances[:, 0],
        "diag": variances,
        "full": torch.diag_embed(variances),
        "tied": torch.diag_embed(variances)[0],
    }
    log_dets = [
        GaussianComponents.from_covariances(torch.zeros(1, d, dtype=F64), c, t).log_det() for t, c in covs.items()
    ]
    for ld in log_dets[1:]:
        torch.testing.assert_close(ld, log_dets[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(log_dets[0], torch.full((1,), -d * math.log(float(scale)), dtype=F64))


@pytest.mark.parametrize("covariance_type", ["full", "tied"])
def test_triangular_log_det_equals_slogdet(covariance_type: str) -> None:
    comps = GaussianComponents(4, 5, covariance_type, dtype=F64)  # type: ignore[arg-type]
    with torch.no_grad():
        comps.log_diag.normal_()
        comps.lower.normal_()
    w = comps.whitening()
    expected = torch.linalg.slogdet(w).logabsdet.expand(4)
    torch.testing.assert_close(comps.log_det(), expected, rtol=1e-12, atol=1e-12)


# -- the volume-term gradient --------------------------------------------------------------------------------


def test_volume_term_gradient_matches_autograd() -> None:
    # Affine form z_j = W_j x + b_j, e_j = ½‖z_j‖² − log|det W_j|, L = log Σ_j exp(−e_j):
    # ∂L/∂W_j = r_j (W_j^{−T} − z_j xᵀ),  ∂L/∂b_j = −r_j z_j (paper §3.4), for a general invertible W.
    k, d = 3, 4
    w = (torch.randn(k, d, d, dtype=F64) + 2 * torch.eye(d, dtype=F64)).requires_grad_(True)
    b = torch.randn(k, d, dtype=F64, requires_grad=True)
    x = torch.randn(d, dtype=F64)
    z = torch.einsum("kij,j->ki", w, x) + b
    energy = 0.5 * z.square().sum(-1) - torch.linalg.slogdet(w).logabsdet
    big_l = lse(energy)
    grad_w, grad_b = torch.autograd.grad(big_l, (w, b))
    r = torch.softmax(-energy, -1).detach()
    zd = z.detach()
    expected_w = r[:, None, None] * (torch.linalg.inv(w.detach()).mT - zd[:, :, None] * x[None, None, :])
    torch.testing.assert_close(grad_w, expected_w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad_b, -r[:, None] * zd, rtol=1e-10, atol=1e-12)
    # The same law through the library's mean parametrisation, b_j = −W_j μ_j:
    means = -torch.linalg.solve(w.detach(), b.detach().unsqueeze(-1)).squeeze(-1)
    w2 = w.detach().clone().requires_grad_(True)
    lib_l = lse(gaussian_energies(x, means, w2, "full") - 0.5 * d * math.log(2 * math.pi))
    (grad_w2,) = torch.autograd.grad(lib_l, w2)
    torch.testing.assert_close(lib_l, big_l.detach(), rtol=1e-12, atol=1e-12)
    z2 = whiten(x, means, w.detach(), "full")
    expected_w2 = r[:, None, None] * (torch.linalg.inv(w.detach()).mT - z2[:, :, None] * (x - means)[:, None, :])
    torch.testing.assert_close(grad_w2, expected_w2, rtol=1e-10, atol=1e-12)


def test_without_volume_the_objective_prefers_a_shrinking_metric() -> None:
    # Metric collapse: scaling W by s < 1 always raises the distance-only objective, never the exact one.
    comps = GaussianComponents(2, 3, "full", dtype=F64)
    x = torch.randn(50, 3, dtype=F64)
    out = comps(x)
    no_volume = [lse(s**2 * out.distance).mean() for s in (1.0, 0.1, 0.01)]
    assert no_volume[0] < no_volume[1] < no_volume[2] <= math.log(2)  # supremum log K, reached as W -> 0
    with torch.no_grad():
        exact = []
        for s in (1.0, 0.1, 0.01):
            comps.log_diag.fill_(math.log(s))
            exact.append(lse(comps(x).energy).mean())
    assert exact[0] > exact[1] > exact[2]


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_gradcheck_gaussian_components(covariance_type: str) -> None:
    comps = GaussianComponents(2, 3, covariance_type, dtype=F64)  # type: ignore[arg-type]
    x = torch.randn(5, 3, dtype=F64)
    params = tuple(comps.parameters())
    names = [n for n, _ in comps.named_parameters()]

    def f(*ps: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(comps, dict(zip(names, ps, strict=True)), (x,))
        return lse(out.energy)

    assert torch.autograd.gradcheck(f, tuple(p.detach().requires_grad_(True) for p in params))


# -- dtypes, shapes, errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gaussian_components_follow_the_input_dtype(dtype: torch.dtype) -> None:
    comps = GaussianComponents(3, 2, "diag", dtype=dtype)
    out = comps(torch.randn(4, 5, 2, dtype=dtype))
    assert out.energy.shape == (4, 5, 3) and out.energy.dtype == dtype and out.log_det.shape == (3,)


def test_gaussian_errors_name_the_problem() -> None:
    comps = GaussianComponents(3, 2, "full", dtype=F64)
    with shape_error("D = 2"):
        comps(torch.randn(4, 3, dtype=F64))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., D\) with D = 2"):
        _check_gaussian_args(torch.zeros(4, 3), torch.zeros(3, 2), torch.zeros(3, 2, 2), "full")
    with pytest.raises(ValueError, match="NaN or inf"):
        comps(torch.tensor([[0.0, math.nan]], dtype=F64))
    with pytest.raises((ValueError, TypeError), match="covariance_type"):
        GaussianComponents(3, 2, "banana")  # type: ignore[arg-type]
    bad = _random_spd(3, 2, seed=0)
    bad[1] = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=F64)  # singular
    with pytest.raises(ValueError, match=r"component\(s\) \[1\] is not positive definite"):
        GaussianComponents.from_covariances(torch.zeros(3, 2, dtype=F64), bad)
    with pytest.raises(ValueError, match="variances must be > 0"):
        GaussianComponents.from_covariances(torch.zeros(3, 2, dtype=F64), torch.zeros(3, 2, dtype=F64), "diag")
    with pytest.raises(ValueError, match="upper-triangular"):
        comps.set_parameters_(torch.zeros(3, 2, dtype=F64), torch.ones(3, 2, 2, dtype=F64))
    with pytest.raises(ValueError, match=r"shape \(3, 2, 2\)"):
        comps.set_parameters_(torch.zeros(3, 2, dtype=F64), torch.ones(3, 2, dtype=F64))
    with pytest.raises(ValueError, match="singular whitening"):
        gaussian_energies(
            torch.zeros(1, 2, dtype=F64), torch.zeros(1, 2, dtype=F64), torch.zeros(1, 2, dtype=F64), "diag"
        )
    with pytest.raises(ValueError, match=r"whitening must have shape \(2, 2\)"):
        gaussian_energies(torch.zeros(1, 2, dtype=F64), torch.zeros(2, 2, dtype=F64), torch.ones(2, dtype=F64), "diag")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_prototypes_refuse_non_finite_inputs_by_name(bad: float) -> None:
    layer = Prototypes(4, 3, dtype=F64)
    x = torch.randn(5, 3, dtype=F64)
    x[2, 1] = bad
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        layer(x)
    with torch.no_grad():
        layer.prototypes[1, 0] = bad
    with pytest.raises(ValueError, match="prototypes contain NaN or inf"):
        layer(torch.randn(5, 3, dtype=F64))


def test_prototypes_check_is_not_in_the_graph() -> None:
    layer = Prototypes(4, 3, dtype=F64)
    x = torch.randn(5, 3, dtype=F64, requires_grad=True)
    out = layer(x)
    torch.testing.assert_close(out, ((x[:, None] - layer.prototypes) ** 2).sum(-1), rtol=1e-12, atol=1e-12)
    assert (
        out.grad_fn is not None and out.grad_fn.name() == "SumBackward1"
    )  # the distance itself: the check adds no node
