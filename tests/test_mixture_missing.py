"""``missing="marginalize"``: NaN features integrated out (Ghahramani & Jordan, 1994), checked three ways.

- against a float64 reference written here from the formulas in their *precision* form (x̂_m = μ_m − Λ_mm⁻¹ Λ_mo
  (x_o − μ_o), C = Λ_mm⁻¹, and scipy's density of the observed coordinates), row by row, where the library uses
  the covariance form by missingness pattern;
- against the complete-data fit: bitwise when nothing is missing, and converging to it as the missing rate → 0;
- EM's monotone lower bound, and clear errors for what it cannot fit.
"""

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from torch.distributions import MultivariateNormal

from implicit_em import GaussianMixture
from implicit_em.gaussian import full_precisions
from implicit_em.mixture._gd import _parameters, log_joint_matrix, make_state, missing_statistics
from implicit_em.mixture._missing import batch_summary
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
    got = batch_summary(torch.from_numpy(x), params, "full", torch.zeros(3, dtype=torch.float64))
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
    with pytest.raises(ValueError, match="volume=False"):
        GaussianMixture(2, fitter="gd", volume=False, missing="marginalize").fit(x)
    with pytest.raises(ValueError, match="float64"):
        GaussianMixture(2, dtype="float32", missing="marginalize").fit(x)
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


# -- every fitter, streams, weights, partial_fit ------------------------------------------------------------------


def _state_density(state: Any, x: np.ndarray, shift: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """−mean log p(x_o) of the rows of x under a gd state, by autograd through torch.distributions: the state's
    parameters mapped to x = shift + S u (S the (D, D) standardising matrix), each row's observed marginal."""
    c = state.components
    k, d = c.n_components, c.n_features
    lam = full_precisions(c.precisions_cholesky(), c.covariance_type, k, d)
    cov = s @ torch.linalg.inv(lam) @ s.T  # (K, D, D)
    mu = shift + c.means @ s.T
    log_w = torch.log_softmax(state.logits, dim=0)
    total = torch.zeros((), dtype=torch.float64)
    for row in torch.from_numpy(x):
        o = ~torch.isnan(row)
        terms = [log_w[j] + MultivariateNormal(mu[j][o], cov[j][o][:, o]).log_prob(row[o]) for j in range(k)]
        total = total + torch.logsumexp(torch.stack(terms), 0)
    return -total / x.shape[0]


#: the coordinates gd steps in for each covariance type (``_gd.feature_scale``): a triangular factor keeps full
#: and tied, a per-feature scale keeps diag too, spherical keeps a scalar
SCALES = [
    *((c, k) for c in COVARIANCE_TYPES for k in ("one", "scalar")),
    *((c, "per_feature") for c in ("full", "diag", "tied")),
    *((c, "triangular") for c in ("full", "tied")),
]


@pytest.mark.parametrize(("covariance_type", "scale_kind"), SCALES)
def test_gd_steps_on_the_gradient_of_the_observed_data_likelihood(covariance_type: str, scale_kind: str) -> None:
    """Fisher's identity: the expected statistics give gd's score matrix the gradient of Σ log p(x_o), checked
    against autograd through the marginal densities, in every coordinate system gd steps in."""
    x = _hide(_data(40), 0.35)
    d = x.shape[1]
    shift = torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64)
    c = torch.tensor([[1.3, 0.0, 0.0], [0.4, 0.9, 0.0], [-0.2, 0.3, 1.7]], dtype=torch.float64)
    scale: Any = {"one": 1.0, "scalar": 1.7, "per_feature": c.diagonal().clone(), "triangular": c}[scale_kind]
    eye = torch.eye(d, dtype=torch.float64)
    s = {"one": eye, "scalar": 1.7 * eye, "per_feature": torch.diag(c.diagonal()), "triangular": c}[scale_kind]
    fit = GaussianMixture(2, covariance_type=covariance_type, random_state=0, missing="marginalize", max_iter=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit.fit(x)
    params = fit._params(torch.float64, torch.device("cpu"))
    state = make_state(params, covariance_type, shift, scale, 0.01, "adam")
    stat, loglik, mass = missing_statistics(state, torch.from_numpy(x), shift, scale)
    state.optimizer.zero_grad()
    log_joint_matrix(state, True).backward(stat.mul(-1.0 / x.shape[0]))
    ours = [p.grad.clone() for p in _parameters(state)]
    state.optimizer.zero_grad()
    loss = _state_density(state, x, shift, s)
    loss.backward()
    for mine, ref in zip(ours, (p.grad for p in _parameters(state)), strict=True):
        torch.testing.assert_close(mine, ref, rtol=1e-9, atol=1e-10)
    assert abs(loglik / mass + float(loss.detach())) < 1e-10  # the objective the step reports is log p(x_o)


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_nothing_missing_is_the_complete_data_fit_bitwise_for_every_fitter(fitter: str, covariance_type: str) -> None:
    x = _data()
    kw = {"fitter": fitter, "covariance_type": covariance_type, "random_state": 0, "batch_size": 128, "max_iter": 5}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = GaussianMixture(2, missing="marginalize", **kw).fit(x)
        b = GaussianMixture(2, **kw).fit(x)
    for name in ("weights_", "means_", "covariances_", "lower_bound_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_online_em_and_gd_reach_em_s_optimum_on_data_with_missing_values(covariance_type: str) -> None:
    """From the same start, the stochastic fitters end where batch EM ends on the observed-data likelihood
    (online EM with its exact EM iteration, gd with its certified stop at tol 1e-4); the complete-data
    optimum of the same rows is far from it (control: the hidden values matter)."""
    full = _data(3000)
    x = _hide(full, 0.25)
    start = {"means_init": np.array([[0.5, 0.5, 0.5], [3.5, 2.5, 4.5]]), "random_state": 0, "split_merge": 0}
    kw = {"covariance_type": covariance_type, "missing": "marginalize", **start}
    em = GaussianMixture(2, tol=1e-8, max_iter=1000, **kw).fit(x)
    online = GaussianMixture(2, fitter="online_em", batch_size=256, tol=1e-5, max_iter=300, **kw).fit(x)
    gd = GaussianMixture(2, fitter="gd", batch_size=512, tol=1e-4, max_iter=300, **kw).fit(x)
    for fit in (online, gd):
        assert fit.converged_
        assert em.score(x) - fit.score(x) < 2e-3, (type(fit).__name__, fit.fitter, em.score(x) - fit.score(x))
    complete = GaussianMixture(2, tol=1e-8, **{**kw, "missing": "raise"}).fit(full)
    assert abs(complete.score(full) - em.score(x)) > 0.1


def test_a_stream_or_memmap_with_missing_values_fits_as_the_array(tmp_path: Any) -> None:
    x = _hide(_data(2000), 0.2)
    np.save(tmp_path / "x.npy", x)
    kw = {"random_state": 0, "missing": "marginalize", "tol": 1e-8}
    array = GaussianMixture(2, **kw).fit(x)
    stream = GaussianMixture(2, **kw).fit([x[i : i + 300] for i in range(0, len(x), 300)])
    memmap = GaussianMixture(2, **kw).fit(np.load(tmp_path / "x.npy", mmap_mode="r"))
    for other in (stream, memmap):
        assert other.n_iter_ == array.n_iter_
        for name in ("weights_", "means_", "covariances_"):
            np.testing.assert_allclose(getattr(other, name), getattr(array, name), rtol=0, atol=1e-10)
    batches = [x[i : i + 300] for i in range(0, len(x), 300)]
    assert abs(array.score(batches) - array.score(x)) < 1e-12


@pytest.mark.parametrize("fitter", ["em", "online_em", "gd"])
def test_integer_weights_on_rows_with_missing_values_equal_repeated_rows(fitter: str) -> None:
    x = _hide(_data(300), 0.3)
    w = np.random.default_rng(4).integers(0, 3, len(x)).astype(float)
    start = {"means_init": np.array([[0.5, 0.5, 0.5], [3.5, 2.5, 4.5]]), "random_state": 0, "split_merge": 0}
    kw = {"fitter": fitter, "missing": "marginalize", "batch_size": 10_000, "max_iter": 20, **start}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weighted = GaussianMixture(2, **kw).fit(x, sample_weight=w)
        repeated = GaussianMixture(2, **kw).fit(np.repeat(x, w.astype(int), axis=0))
    # one full batch per step: the weighted statistics are the repeated rows' (the start differs only in its
    # shift and scale, from the weighted moments: 1e-8 for the stochastic fitters, whose coordinates they set)
    atol = 1e-10 if fitter == "em" else 1e-8
    for name in ("weights_", "means_", "covariances_"):
        np.testing.assert_allclose(getattr(weighted, name), getattr(repeated, name), rtol=0, atol=atol)


@pytest.mark.parametrize("fitter", ["em", "gd"])
def test_partial_fit_steps_on_rows_with_missing_values(fitter: str) -> None:
    x = _hide(_data(600), 0.3)
    model = GaussianMixture(2, fitter=fitter, random_state=0, missing="marginalize").partial_fit(x[:300])
    before = model.score(x[300:])  # the mean observed-data log-likelihood of the next batch
    model.partial_fit(x[300:])
    assert model.lower_bound_ == pytest.approx(before, abs=1e-10)
    assert np.isfinite(model.means_).all() and np.isfinite(model.covariances_).all()
    assert model.score(x[300:]) > before  # the step climbs
