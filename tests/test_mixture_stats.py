"""The fast E/M engine on quadratic features against float64 references (scipy, the direct M-step, the
foundation's Gaussian energies)."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import multivariate_normal
from torch.testing import assert_close

from implicit_em import gaussian
from implicit_em.distances import GaussianComponents, gaussian_energies
from implicit_em.mixture import _stats
from implicit_em.mixture._em import _estimate_gaussian_parameters, _estimate_log_gaussian_prob

TYPES = ["full", "tied", "diag", "spherical"]


def _random_params(cov_type: str, k: int = 3, d: int = 4, seed: int = 0) -> _stats.MixtureParams:
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(k, d, generator=g, dtype=torch.float64) * 2
    a = torch.randn(k, d, d, generator=g, dtype=torch.float64) / d**0.5
    full = a @ a.mT + 0.5 * torch.eye(d, dtype=torch.float64)
    cov = {
        "full": full,
        "tied": full[0],
        "diag": torch.diagonal(full, dim1=-2, dim2=-1).clone(),
        "spherical": torch.diagonal(full, dim1=-2, dim2=-1).mean(1),
    }[cov_type]
    weights = torch.softmax(torch.randn(k, generator=g, dtype=torch.float64), 0)
    return _stats.MixtureParams(weights, means, cov, gaussian.precisions_cholesky(cov, cov_type, on_singular="ridge"))


def _full_cov(p: _stats.MixtureParams, cov_type: str, j: int) -> np.ndarray:
    d = p.means.shape[1]
    c = p.covariances.numpy()
    return {
        "full": c[j] if c.ndim == 3 else c,
        "tied": c,
        "diag": np.diag(c[j]) if c.ndim == 2 else c,
        "spherical": c[j] * np.eye(d),
    }[cov_type]


def test_quadratic_features_are_the_upper_triangle_products() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    expected = torch.tensor([[1.0, 2.0, 3.0, 4.0, 6.0, 9.0, 1.0, 2.0, 3.0, 1.0]], dtype=torch.float64)
    assert_close(_stats.quadratic_features(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("cov_type", TYPES)
def test_score_matrix_matches_scipy_logpdf(cov_type: str) -> None:
    p = _random_params(cov_type)
    x = torch.randn(50, 4, dtype=torch.float64) * 3
    shift = x.mean(0)
    got = _stats.weighted_log_prob(x, _stats.score_matrix(p, cov_type, shift), shift)
    ref = np.stack(
        [
            np.log(p.weights[j].item())
            + multivariate_normal(p.means[j].numpy(), _full_cov(p, cov_type, j)).logpdf(x.numpy())
            for j in range(3)
        ],
        axis=1,
    )
    assert_close(got, torch.from_numpy(ref), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cov_type", TYPES)
def test_scoring_path_equals_gaussian_components_energies(cov_type: str) -> None:
    p = _random_params(cov_type)
    x = torch.randn(40, 4, dtype=torch.float64)
    comps = GaussianComponents.from_precisions_cholesky(p.means, p.precisions_cholesky, cov_type)  # type: ignore[arg-type]
    energies = comps(x).energy
    ours = _stats.weighted_log_prob(
        x, _stats.score_matrix(p, cov_type, torch.zeros(4, dtype=torch.float64)), torch.zeros(4, dtype=torch.float64)
    )
    assert_close(ours, torch.log(p.weights) - energies, rtol=1e-10, atol=1e-10)
    w = comps.whitening()
    assert_close(-gaussian_energies(x, p.means, w, cov_type), ours - torch.log(p.weights), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cov_type", TYPES)
def test_reference_log_prob_matches_fast_path(cov_type: str) -> None:
    p = _random_params(cov_type)
    x = torch.randn(30, 4, dtype=torch.float64)
    shift = torch.zeros(4, dtype=torch.float64)
    fast = _stats.weighted_log_prob(x, _stats.score_matrix(p, cov_type, shift), shift) - torch.log(p.weights)
    ref = _estimate_log_gaussian_prob(x, p.means, p.precisions_cholesky, cov_type)
    assert_close(fast, ref, rtol=1e-10, atol=1e-10)


def test_float32_log_likelihood_is_close_to_float64() -> None:
    # float32 on shifted quadratic features: the error per sample is a few 1e-5 nats at D = 16 (measured
    # ~1e-5); 1e-3 leaves room for other BLAS builds.
    p = _random_params("full", k=8, d=16, seed=3)
    x = torch.randn(4000, 16, dtype=torch.float64) * 2 + 5
    shift = x.mean(0)
    a = _stats.score_matrix(p, "full", shift)
    ll64 = torch.logsumexp(_stats.weighted_log_prob(x, a, shift), 1)
    ll32 = torch.logsumexp(_stats.weighted_log_prob(x.float(), a.float(), shift), 1)
    assert (ll32.double() - ll64).abs().mean() < 1e-3


def test_summaries_of_two_halves_equal_summary_of_whole() -> None:
    p = _random_params("full")
    x = torch.randn(101, 4, dtype=torch.float64)
    shift = x.mean(0)
    a = _stats.score_matrix(p, "full", shift)
    whole, _ = _stats.summarize(x, a, shift)
    first, _ = _stats.summarize(x[:40], a, shift)
    second, _ = _stats.summarize(x[40:], a, shift)
    for got, ref in zip(first + second, whole, strict=True):
        assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cov_type", TYPES)
def test_m_step_from_summaries_matches_direct_m_step(cov_type: str) -> None:
    x = torch.randn(200, 4, dtype=torch.float64) * 2 + 3
    resp = torch.softmax(torch.randn(200, 3, dtype=torch.float64), 1)
    shift = x.mean(0)
    params = _stats.from_summaries(_stats.summarize_resp(x, resp, shift), shift, 1e-6, cov_type, torch.float64)
    nk, means, cov = _estimate_gaussian_parameters(x, resp, 1e-6, cov_type)
    assert_close(params.weights, nk / nk.sum(), rtol=1e-12, atol=1e-14)
    assert_close(params.means, means, rtol=1e-10, atol=1e-12)
    assert_close(params.covariances, cov, rtol=1e-10, atol=1e-12)


@given(st.integers(1, 5), st.integers(1, 4), st.sampled_from(TYPES), st.integers(0, 100))
def test_precision_cholesky_round_trips(k: int, d: int, cov_type: str, seed: int) -> None:
    p = _random_params(cov_type, k=k, d=d, seed=seed)
    back = gaussian.covariances_from_precisions_cholesky(p.precisions_cholesky, cov_type)
    assert_close(back, p.covariances, rtol=1e-9, atol=1e-10)
    lam = gaussian.full_precisions(p.precisions_cholesky, cov_type, k, d)
    prec = lam if cov_type == "full" else lam[0] if cov_type == "tied" else torch.diagonal(lam, dim1=-2, dim2=-1)
    if cov_type == "spherical":
        prec = prec[:, 0]
    assert_close(
        gaussian.precisions_cholesky_from_precisions(prec, cov_type), p.precisions_cholesky, rtol=1e-9, atol=1e-10
    )


def test_singular_covariance_gets_a_ridge_and_a_warning() -> None:
    cov = torch.zeros(1, 3, 3, dtype=torch.float64)
    cov[0, 0, 0] = 1.0
    with pytest.warns(RuntimeWarning, match="not positive definite"):
        u = gaussian.precisions_cholesky(cov, "full", on_singular="ridge")
    assert torch.isfinite(u).all()


def test_empty_component_gets_reg_covar_and_finite_parameters() -> None:
    x = torch.randn(50, 2, dtype=torch.float64)
    resp = torch.zeros(50, 2, dtype=torch.float64)
    resp[:, 0] = 1.0
    shift = x.mean(0)
    p = _stats.from_summaries(_stats.summarize_resp(x, resp, shift), shift, 1e-3, "full", torch.float64)
    assert all(torch.isfinite(t).all() for t in p)
    assert_close(p.covariances[1], 1e-3 * torch.eye(2, dtype=torch.float64))


def test_negative_variance_from_round_off_is_floored_with_a_warning() -> None:
    cov = torch.tensor([[1.0, 0.0], [0.0, -1e-3]], dtype=torch.float64)[None]
    with pytest.warns(RuntimeWarning, match="reg_covar"):
        floored = _stats.floor_covariances(cov, "full", 1e-2)
    assert_close(torch.diagonal(floored[0]), torch.tensor([1.0, 1e-2], dtype=torch.float64))


@given(
    st.integers(1, 20),
    st.integers(1, 50),
    st.floats(0.0, 3000.0),
    st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**16),
)
def test_log_normalize_is_softmax_and_logsumexp_without_subnormals(
    k: int, n: int, spread: float, dtype: torch.dtype, seed: int
) -> None:
    """Far-away components (log-ratios of -1000 and below) give no subnormal responsibility, and the result
    equals torch's softmax / logsumexp up to the floor e^-52 (float32) or e^-425 (float64)."""
    g = torch.Generator().manual_seed(seed)
    logp = (torch.randn(k, n, generator=g, dtype=torch.float64) * spread - 20.0).to(dtype)
    resp, log_norm = _stats.log_normalize(logp.clone())
    tiny = torch.finfo(dtype).tiny
    assert bool((resp >= tiny).all()), "a responsibility is subnormal or zero"
    assert_close(log_norm, torch.logsumexp(logp, 0), rtol=1e-6 if dtype == torch.float32 else 1e-14, atol=0.0)
    assert_close(resp, torch.softmax(logp, 0), rtol=0.0, atol=1e-6 if dtype == torch.float32 else 1e-14)
    assert_close(resp.sum(0), torch.ones(n, dtype=dtype), rtol=0.0, atol=1e-5 if dtype == torch.float32 else 1e-13)


def test_log_normalize_gives_a_column_of_minus_infinity_zero_density_and_no_nan() -> None:
    logp = torch.tensor([[-torch.inf, 0.0], [-torch.inf, -1.0]])
    resp, log_norm = _stats.log_normalize(logp.clone())
    assert bool(torch.isfinite(resp).all())
    assert_close(resp[:, 0], torch.full((2,), 0.5))
    assert float(log_norm[0]) == -torch.inf
    assert_close(log_norm[1], torch.logsumexp(logp[:, 1], 0))
