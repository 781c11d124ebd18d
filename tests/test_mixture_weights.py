"""``sample_weight``: an integer weight is a repeated row, a zero weight a removed row, bad weights a clear error.

References: the same estimator on the repeated (or reduced) rows, from the same start, in float64 (to 1e-12);
the float32 fused E-step against the float64 reference on the same weights; and a planted control, far-away
rows that capture a component unless their weight is zero.
"""

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch.utils.data import DataLoader, TensorDataset

from implicit_em import GaussianMixture, MixtureSelector
from implicit_em.mixture._estep import pass_summary
from implicit_em.mixture._fused import fused_pass_summary
from implicit_em.mixture._stats import MixtureParams, score_matrix

COVARIANCE_TYPES = ("full", "diag", "tied", "spherical")


def _data(n: int = 120, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    half = n // 2
    return np.concatenate([rng.normal(0, 1, (half, d)), rng.normal(4, 1.5, (n - half, d))])


def _start(x: np.ndarray, covariance_type: str) -> dict[str, Any]:
    """A fixed start (sklearn's *_init parameters), so the weighted and the repeated fits begin alike."""
    ref = GaussianMixture(2, covariance_type=covariance_type, random_state=0, split_merge=0, max_iter=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(x[::3])
    return {
        "weights_init": ref.weights_,
        "means_init": ref.means_,
        "precisions_init": ref.precisions_,
        "covariance_type": covariance_type,
        "split_merge": 0,
        "tol": 1e-12,
        "max_iter": 40,
    }


def _close(a: GaussianMixture, b: GaussianMixture, atol: float) -> None:
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=atol, err_msg=name)
    assert a.n_iter_ == b.n_iter_
    assert a.lower_bound_ == pytest.approx(b.lower_bound_, abs=atol)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_integer_weights_equal_repeated_rows(covariance_type: str) -> None:
    x = _data()
    w = np.random.default_rng(1).integers(0, 4, len(x)).astype(np.float64)
    start = _start(x, covariance_type)
    weighted = GaussianMixture(2, **start).fit(x, sample_weight=w)
    repeated = GaussianMixture(2, **start).fit(np.repeat(x, w.astype(int), axis=0))
    _close(weighted, repeated, 1e-12)
    xr = np.repeat(x, w.astype(int), axis=0)
    assert weighted.score(x, sample_weight=w) == pytest.approx(repeated.score(xr), abs=1e-12)
    assert weighted.bic(x, sample_weight=w) == pytest.approx(repeated.bic(xr), rel=1e-12)
    assert weighted.aic(x, sample_weight=w) == pytest.approx(repeated.aic(xr), rel=1e-12)


_PROPERTY_X = _data(40, 2, seed=3)
_PROPERTY_START = _start(_PROPERTY_X, "full") | {"max_iter": 15}


@given(weights=arrays(np.int64, 40, elements=st.integers(0, 3)).filter(lambda w: (w[:20] > 0).sum() >= 6))
def test_integer_weights_equal_repeated_rows_property(weights: np.ndarray) -> None:
    """Any integer weights (at least six rows kept in the first cluster: a well-posed fit; a fit collapsed
    onto a few rows amplifies round-off by its condition number, 1e-9 relative on four rows)."""
    weights[20] = max(weights[20], 1)  # and one row of the second cluster
    x = _PROPERTY_X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short fits: a ConvergenceWarning is expected and irrelevant here
        weighted = GaussianMixture(2, **_PROPERTY_START).fit(x, sample_weight=weights.astype(np.float64))
        repeated = GaussianMixture(2, **_PROPERTY_START).fit(np.repeat(x, weights, axis=0))
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
        a, b = getattr(weighted, name), getattr(repeated, name)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_zero_weight_equals_removing_the_row(covariance_type: str) -> None:
    x = _data()
    w = np.ones(len(x))
    w[::7] = 0.0
    start = _start(x, covariance_type)
    weighted = GaussianMixture(2, **start).fit(x, sample_weight=w)
    removed = GaussianMixture(2, **start).fit(x[w > 0])
    _close(weighted, removed, 1e-12)


def test_unit_weights_are_the_unweighted_fit() -> None:
    """The same start, batches and steps; only the centre the features are expanded around is summed in another
    order (the weighted mean), so the fits agree to round-off."""
    x = _data()
    for fitter in ("em", "online_em", "gd"):
        kw = {"fitter": fitter, "random_state": 0, "max_iter": 20}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = GaussianMixture(2, **kw).fit(x, sample_weight=np.ones(len(x)))
            b = GaussianMixture(2, **kw).fit(x)
        np.testing.assert_allclose(a.means_, b.means_, rtol=1e-9, atol=1e-12, err_msg=fitter)
        np.testing.assert_allclose(a.covariances_, b.covariances_, rtol=1e-9, atol=1e-12, err_msg=fitter)
        assert a.n_iter_ == b.n_iter_


def test_fused_float32_pass_matches_the_float64_reference_with_weights() -> None:
    """Weighted statistics through the fused float32 pass (threads sharing a batch) against float64."""
    rng = np.random.default_rng(2)
    x64 = torch.from_numpy(rng.normal(size=(10_000, 4)))
    w = torch.from_numpy(rng.uniform(0, 3, 10_000))
    w[::5] = 0.0
    params = MixtureParams(
        torch.tensor([0.3, 0.7], dtype=torch.float64),
        torch.from_numpy(rng.normal(size=(2, 4))),
        torch.eye(4, dtype=torch.float64).expand(2, 4, 4).clone(),
        torch.eye(4, dtype=torch.float64).expand(2, 4, 4).clone(),
    )
    shift = x64.mean(0)
    a64 = score_matrix(params, "full", shift)
    ref = pass_summary([(x64[i : i + 3000], w[i : i + 3000]) for i in range(0, 10_000, 3000)], a64, shift)
    got = fused_pass_summary([(x64.float(), w)], a64.float(), shift, rows=1024, workers=2)
    assert ref is not None and got is not None
    assert float(got.n) == pytest.approx(float(w.sum()), rel=1e-12)
    assert float(ref.n) == pytest.approx(float(w.sum()), rel=1e-12)
    for name in ("nk", "sx", "sxx", "loglik"):
        r, g = getattr(ref, name), getattr(got, name)
        torch.testing.assert_close(g, r, rtol=2e-5, atol=2e-5 * float(r.abs().max()), msg=name)


def test_partial_fit_with_integer_weights_equals_repeated_rows() -> None:
    x = _data()
    w = np.random.default_rng(4).integers(0, 3, len(x)).astype(np.float64)
    start = _start(x, "full")
    a, b = GaussianMixture(2, **start), GaussianMixture(2, **start)
    for part in (slice(0, 60), slice(60, 120)):
        a.partial_fit(x[part], sample_weight=w[part])
        b.partial_fit(np.repeat(x[part], w[part].astype(int), axis=0))
    np.testing.assert_allclose(a.means_, b.means_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.covariances_, b.covariances_, rtol=0, atol=1e-12)
    assert a.lower_bound_ == pytest.approx(b.lower_bound_, abs=1e-12)


@pytest.mark.parametrize("fitter", ["em", "online_em", "gd"])
def test_zero_weights_keep_far_rows_out_of_the_fit_planted_control(fitter: str) -> None:
    """Thirty rows at 1e3 take a component of an unweighted fit (the control); weighted zero, they take none."""
    x = np.concatenate([_data(), np.full((30, 3), 1e3) + np.random.default_rng(5).normal(size=(30, 3))])
    w = np.r_[np.ones(120), np.zeros(30)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        control = GaussianMixture(2, fitter=fitter, random_state=0, split_merge=0).fit(x)
        weighted = GaussianMixture(2, fitter=fitter, random_state=0, split_merge=0).fit(x, sample_weight=w)
    assert np.abs(control.means_).max() > 500  # the far rows captured a component: the control can fail
    assert np.abs(weighted.means_).max() < 10


def test_gd_climbs_the_weighted_likelihood_to_weighted_ems_optimum() -> None:
    """gd's weighted fit ends where weighted EM ends (its certificate is a weighted EM step)."""
    x = _data(600)
    w = np.random.default_rng(7).integers(0, 4, len(x)).astype(np.float64)
    start = _start(x, "full") | {"tol": 1e-3, "max_iter": 200}
    em = GaussianMixture(2, **(start | {"tol": 1e-10, "max_iter": 2000})).fit(x, sample_weight=w)
    gd = GaussianMixture(2, fitter="gd", random_state=0, **start).fit(x, sample_weight=w)
    assert gd.converged_ and gd.certificates_[-1][1] < 1e-3
    assert em.score(x, sample_weight=w) - gd.score(x, sample_weight=w) < 2e-3
    assert gd.lower_bound_ == pytest.approx(gd.score(x, sample_weight=w), abs=1e-9)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (-np.ones(120), "non-negative"),
        (np.zeros(120), "zero for every row"),
        (np.r_[np.nan, np.ones(119)], "NaN"),
        (np.r_[np.inf, np.ones(119)], "inf"),
        (np.ones(119), "119 weights, but X has 120 rows"),
        (np.ones((120, 1)), "1-D"),
        (["a"] * 120, "array of numbers"),
    ],
)
def test_bad_weights_are_a_clear_error(weights: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GaussianMixture(2, random_state=0).fit(_data(), sample_weight=weights)


def test_one_weight_array_beside_a_stream_is_a_clear_error_naming_in_batches() -> None:
    x, w = _data(), np.ones(120)
    with pytest.raises(ValueError, match=r'needs X in memory.*sample_weight="in_batches"'):
        GaussianMixture(2).fit([x[:60], x[60:]], sample_weight=w)
    with pytest.raises(ValueError, match="X is in memory"):
        GaussianMixture(2).fit(x, sample_weight="in_batches")


# -- a stream whose batches carry their weights: sample_weight="in_batches" -------------------------------------


def _weighted_stream(x: np.ndarray, w: np.ndarray, rows: int = 50) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x[s : s + rows], w[s : s + rows]) for s in range(0, len(x), rows)]


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_a_stream_carrying_weights_is_the_weighted_array(covariance_type: str) -> None:
    """EM on (x, w) batches equals EM on X with sample_weight, from the k-means start of both (1e-12)."""
    x = _data()
    w = np.random.default_rng(9).integers(0, 4, len(x)).astype(np.float64)
    params = {"covariance_type": covariance_type, "random_state": 0, "tol": 1e-10, "max_iter": 50}
    a = GaussianMixture(2, **params).fit(x, sample_weight=w)
    b = GaussianMixture(2, **params).fit(_weighted_stream(x, w), sample_weight="in_batches")
    _close(a, b, 1e-12)
    assert b.score(_weighted_stream(x, w), sample_weight="in_batches") == pytest.approx(
        a.score(x, sample_weight=w), abs=1e-12
    )
    assert b.bic(_weighted_stream(x, w, 7), sample_weight="in_batches") == pytest.approx(
        a.bic(x, sample_weight=w), abs=1e-9
    )


def test_a_dataloader_over_x_and_w_is_the_weighted_array() -> None:
    x = _data()
    w = np.random.default_rng(10).integers(0, 3, len(x)).astype(np.float64)
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(w)), batch_size=32)
    a = GaussianMixture(2, random_state=0, tol=1e-10).fit(x, sample_weight=w)
    b = GaussianMixture(2, random_state=0, tol=1e-10).fit(loader, sample_weight="in_batches")
    _close(a, b, 1e-12)


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_unit_weights_in_a_stream_are_the_unweighted_stream(fitter: str) -> None:
    """The stochastic fitters step on the stream's own batches: unit weights give the unweighted steps."""
    x = _data(400)
    start = _start(x, "full") | {"fitter": fitter, "max_iter": 15, "tol": 1e-6}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = GaussianMixture(2, **start).fit([x[s : s + 50] for s in range(0, 400, 50)])
        b = GaussianMixture(2, **start).fit(_weighted_stream(x, np.ones(400)), sample_weight="in_batches")
    _close(a, b, 1e-10)


@pytest.mark.parametrize("fitter", ["em", "online_em", "gd"])
def test_zero_weights_in_a_stream_keep_far_rows_out_planted_control(fitter: str) -> None:
    """As for an array: thirty far rows take a component of the unweighted stream (the control), none at weight 0."""
    x = np.concatenate([_data(), np.full((30, 3), 1e3) + np.random.default_rng(5).normal(size=(30, 3))])
    order = np.random.default_rng(11).permutation(len(x))
    x, w = x[order], np.r_[np.ones(120), np.zeros(30)][order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        control = GaussianMixture(2, fitter=fitter, random_state=0, split_merge=0).fit(
            [b for b, _ in _weighted_stream(x, w)]
        )
        weighted = GaussianMixture(2, fitter=fitter, random_state=0, split_merge=0).fit(
            _weighted_stream(x, w), sample_weight="in_batches"
        )
    assert np.abs(control.means_).max() > 500
    assert np.abs(weighted.means_).max() < 10


def test_partial_fit_on_a_stream_carrying_weights_is_the_weighted_batch() -> None:
    x = _data()
    w = np.random.default_rng(12).integers(0, 3, len(x)).astype(np.float64)
    start = _start(x, "full")
    a = GaussianMixture(2, **start).partial_fit(x, sample_weight=w)
    b = GaussianMixture(2, **start).partial_fit(_weighted_stream(x, w), sample_weight="in_batches")
    np.testing.assert_allclose(a.means_, b.means_, rtol=0, atol=1e-12)
    assert a.lower_bound_ == pytest.approx(b.lower_bound_, abs=1e-12)


class _Reiterable:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Any:
        return iter(self.items)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ((np.ones((5, 3)),), "must be a pair"),
        (np.ones((5, 3)), "must be a pair"),
        ((np.ones((5, 3)), -np.ones(5)), "finite and non-negative, got -1 at row 100"),
        ((np.ones((5, 3)), np.r_[np.nan, np.ones(4)]), "got nan at row 100"),
        ((np.ones((5, 3)), np.ones(4)), r"shape \(5,\)"),
        ((np.ones((5, 3)), np.ones((5, 1))), r"shape \(5,\)"),
    ],
)
def test_bad_weights_in_a_stream_are_a_clear_error(batch: Any, message: str) -> None:
    x = _data()
    stream = _Reiterable([*_weighted_stream(x[:100], np.ones(100)), batch])  # a DataLoader's checks: per batch
    with pytest.raises(ValueError, match=message):
        GaussianMixture(2, random_state=0).fit(stream, sample_weight="in_batches")


def test_a_stream_of_zero_weights_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="zero for every row"):
        GaussianMixture(2).fit(_weighted_stream(_data(), np.zeros(120)), sample_weight="in_batches")


def test_gd_partial_fit_steps_on_the_weighted_batch() -> None:
    """One gd step on integer weights equals one step on the repeated rows (the same batch mean gradient)."""
    x = _data()
    w = np.random.default_rng(8).integers(1, 3, len(x)).astype(np.float64)
    start = _start(x, "full")
    a = GaussianMixture(2, fitter="gd", **start).partial_fit(x, sample_weight=w)
    b = GaussianMixture(2, fitter="gd", **start).partial_fit(np.repeat(x, w.astype(int), axis=0))
    np.testing.assert_allclose(a.means_, b.means_, rtol=0, atol=1e-12)
    assert a.lower_bound_ == pytest.approx(b.lower_bound_, abs=1e-12)


def test_selector_criteria_use_the_weights() -> None:
    x = _data()
    w = np.random.default_rng(6).integers(1, 4, len(x)).astype(np.float64)
    sel = MixtureSelector(GaussianMixture(random_state=0, split_merge=0), n_components=[1, 2, 3]).fit(
        x, sample_weight=w
    )
    chosen = sel.best_estimator_
    assert sel.results_["bic"][sel.best_index_] == pytest.approx(chosen.bic(x, sample_weight=w), rel=1e-12)
    assert sel.n_components_ == 2
    assert sel.score(x, sample_weight=w) == pytest.approx(chosen.score(x, sample_weight=w))
