"""``missing="marginalize"``: NaN features integrated out (Ghahramani & Jordan, 1994), checked three ways.

- against a float64 reference written here from the formulas in their *precision* form (x̂_m = μ_m − Λ_mm⁻¹ Λ_mo
  (x_o − μ_o), C = Λ_mm⁻¹, and scipy's density of the observed coordinates), row by row, where the library uses
  the covariance form by missingness pattern;
- against the complete-data fit: bitwise when nothing is missing, and converging to it as the missing rate → 0;
- EM's monotone lower bound, and clear errors for what it cannot fit.
"""

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from implicit_em import GaussianMixture
from implicit_em.mixture._missing import _patterns, _summary
from implicit_em.mixture._stats import MixtureParams

COVARIANCE_TYPES = ("full", "diag", "tied", "spherical")


def _data(n: int = 600, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.multivariate_normal([0, 0, 0], [[1, 0.6, 0.2], [0.6, 1.5, 0.3], [0.2, 0.3, 0.8]], n // 2)
    b = rng.multivariate_normal([4, 3, 5], [[0.7, -0.2, 0], [-0.2, 1, 0.4], [0, 0.4, 1.2]], n - n // 2)
    return np.concatenate([a, b])


def _hide(x: np.ndarray, rate: float, seed: int = 1) -> np.ndarray:
    """Missing completely at random, every row keeping at least one feature."""
    rng = np.random.default_rng(seed)
    out = x.copy()
    mask = rng.uniform(size=x.shape) < rate
    mask[mask.all(1), 0] = False
    out[mask] = np.nan
    return out


def _reference_summary(x: np.ndarray, w: np.ndarray, mu: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, ...]:
    """nk, Σ r x̃, Σ r (x̃ x̃ᵀ + C), Σ log p, row by row in numpy (precision form)."""
    k, d = mu.shape
    nk, sx, sxx, loglik = np.zeros(k), np.zeros((k, d)), np.zeros((k, d, d)), 0.0
    for row in x:
        o, m = ~np.isnan(row), np.isnan(row)
        logp = np.array(
            [np.log(w[j]) + multivariate_normal(mu[j][o], cov[j][np.ix_(o, o)]).logpdf(row[o]) for j in range(k)]
        )
        top = logp.max()
        r = np.exp(logp - top) / np.exp(logp - top).sum()
        loglik += top + np.log(np.exp(logp - top).sum())
        for j in range(k):
            lam = np.linalg.inv(cov[j])
            filled, c = row.copy(), np.zeros((d, d))
            if m.any():
                lmm_inv = np.linalg.inv(lam[np.ix_(m, m)])
                filled[m] = mu[j][m] - lmm_inv @ lam[np.ix_(m, o)] @ (row[o] - mu[j][o])
                c[np.ix_(m, m)] = lmm_inv
            nk[j] += r[j]
            sx[j] += r[j] * filled
            sxx[j] += r[j] * (np.outer(filled, filled) + c)
    return nk, sx, sxx, np.array(loglik)


def test_the_expected_statistics_equal_the_precision_form_reference() -> None:
    x = _hide(_data(60), 0.35)
    rng = np.random.default_rng(3)
    mu = rng.normal(2, 2, (2, 3))
    a = rng.normal(size=(2, 3, 3))
    cov = a @ a.transpose(0, 2, 1) + np.eye(3)
    w = np.array([0.35, 0.65])
    params = MixtureParams(
        torch.from_numpy(w), torch.from_numpy(mu), torch.from_numpy(cov), torch.from_numpy(np.zeros_like(cov))
    )
    got = _summary(torch.from_numpy(x), _patterns(np.isnan(x)), params, "full", torch.zeros(3, dtype=torch.float64),
                   None)  # fmt: skip
    want = _reference_summary(x, w, mu, cov)
    for ours, ref, name in zip((got.nk, got.sx, got.sxx, got.loglik), want, ("nk", "sx", "sxx", "loglik"), strict=True):
        np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-10, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_nothing_missing_is_the_complete_data_fit_bitwise(covariance_type: str) -> None:
    x = _data()
    a = GaussianMixture(2, covariance_type=covariance_type, random_state=0, missing="marginalize").fit(x)
    b = GaussianMixture(2, covariance_type=covariance_type, random_state=0).fit(x)
    for name in ("weights_", "means_", "covariances_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_parameters_converge_to_the_complete_data_fit_as_the_rate_falls(covariance_type: str) -> None:
    x = _data(2000)
    kw = {"covariance_type": covariance_type, "random_state": 0, "split_merge": 0, "tol": 1e-8, "max_iter": 500}
    complete = GaussianMixture(2, **kw).fit(x)
    order = np.argsort(complete.means_[:, 0])
    errors = []
    for rate in (0.3, 0.1, 0.01):
        fit = GaussianMixture(2, missing="marginalize", **kw).fit(_hide(x, rate))
        mine = np.argsort(fit.means_[:, 0])
        errors.append(float(np.abs(fit.means_[mine] - complete.means_[order]).max()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.02


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_the_lower_bound_never_decreases(covariance_type: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = GaussianMixture(
            2, covariance_type=covariance_type, init_params="random", random_state=0, missing="marginalize", tol=0,
            max_iter=30, reg_covar=0,
        ).fit(_hide(_data(), 0.3))  # fmt: skip
    bounds = np.array(fit.lower_bounds_)
    assert len(bounds) == 30 and (np.diff(bounds) >= -1e-10).all()


def test_scores_of_rows_with_nan_are_their_observed_marginals() -> None:
    x = _hide(_data(), 0.3)
    fit = GaussianMixture(2, random_state=0, missing="marginalize").fit(x)
    rows = x[:20]
    want = []
    for row in rows:
        o = ~np.isnan(row)
        dens = sum(
            fit.weights_[j] * multivariate_normal(fit.means_[j][o], fit.covariances_[j][np.ix_(o, o)]).pdf(row[o])
            for j in range(2)
        )
        want.append(np.log(dens))
    np.testing.assert_allclose(fit.score_samples(rows), want, rtol=1e-10)
    assert fit.predict(rows).shape == (20,) and np.isfinite(fit.predict_proba(rows)).all()


def test_what_it_cannot_fit_is_a_clear_error() -> None:
    x = _hide(_data(), 0.2)
    with pytest.raises(ValueError, match="NaN"):
        GaussianMixture(2).fit(x)  # missing="raise", the default
    with pytest.raises(ValueError, match='fitted by fitter="em", not "gd"'):
        GaussianMixture(2, fitter="gd", missing="marginalize").fit(x)
    bad = x.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"every feature missing .*row 3"):
        GaussianMixture(2, missing="marginalize").fit(bad)
    bad = x.copy()
    bad[5, 0] = np.inf
    with pytest.raises(ValueError, match="inf"):
        GaussianMixture(2, missing="marginalize").fit(bad)
    with pytest.raises(ValueError, match="missing"):
        GaussianMixture(2, missing="impute").fit(x)
