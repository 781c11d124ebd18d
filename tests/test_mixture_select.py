"""MixtureSelector: every candidate's criterion is the estimator's own (the same clone, the same seed), the lowest
is kept, the planted K is found and AIC's looser penalty can choose more; it is a scikit-learn estimator (clone,
Pipeline, cross-validation scores the chosen model's log-likelihood); bad arguments are clear errors."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from implicit_em import MixtureSelector as TopLevel
from implicit_em.mixture import GaussianMixture, MixtureSelector


def _blobs(k: int = 3, n: int = 300, d: int = 2, gap: float = 8.0, seed: int = 0) -> np.ndarray:
    """k well-separated Gaussian clusters of n rows each (unit covariance, centres gap apart)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d)) * gap
    return np.concatenate([c + rng.normal(size=(n, d)) for c in centres])


def _template(**params: object) -> GaussianMixture:
    return GaussianMixture(random_state=0, split_merge=0, **params)  # type: ignore[arg-type]


def test_every_candidate_is_the_estimators_own_fit_and_the_lowest_bic_wins() -> None:
    x = _blobs()
    sel = MixtureSelector(_template(), n_components=range(1, 6)).fit(x)
    for i, k in enumerate(range(1, 6)):
        model = _template(n_components=k).fit(x)
        assert sel.results_["bic"][i] == pytest.approx(model.bic(x), rel=1e-12)
        assert sel.results_["aic"][i] == pytest.approx(model.aic(x), rel=1e-12)
        assert sel.results_["lower_bound"][i] == model.lower_bound_
    assert sel.n_components_ == 3 and sel.best_params_ == {"n_components": 3, "covariance_type": "full"}
    assert sel.best_index_ == int(np.argmin(sel.results_["bic"]))
    assert sel.best_estimator_.n_components == 3 and sel.n_features_in_ == 2
    np.testing.assert_array_equal(sel.predict(x), sel.best_estimator_.predict(x))
    assert sel.score(x) == sel.best_estimator_.score(x) and sel.bic(x) == min(sel.results_["bic"])
    assert TopLevel is MixtureSelector


def test_the_bic_table_matches_scikit_learns_at_split_merge_0() -> None:
    """split_merge=0 is scikit-learn's fit: the same starts give the same BIC per K (float64, small data)."""
    x = _blobs(n=100)
    sel = MixtureSelector(_template(), n_components=[1, 2, 3, 4]).fit(x)
    sk = [SkGaussianMixture(k, random_state=0).fit(x).bic(x) for k in (1, 2, 3, 4)]
    np.testing.assert_allclose(sel.results_["bic"], sk, rtol=1e-6)
    assert int(np.argmin(sk)) + 1 == sel.n_components_


def test_aic_penalises_less_and_can_choose_more_components() -> None:
    """Planted: two clusters that overlap (one Gaussian is a poor fit, two a good one) on few rows; the criteria
    differ only by their penalty, so AIC's K is never below BIC's, and its table is the same fits'."""
    x = _blobs(k=4, n=40, gap=2.5, seed=3)
    bic = MixtureSelector(_template(), n_components=range(1, 7)).fit(x)
    aic = MixtureSelector(_template(), n_components=range(1, 7), criterion="aic").fit(x)
    assert aic.results_["aic"] == bic.results_["aic"]
    assert aic.n_components_ >= bic.n_components_
    n, d = x.shape
    for k, b, a in zip(bic.results_["n_components"], bic.results_["bic"], bic.results_["aic"], strict=True):
        p = k * d * (d + 1) / 2 + k * d + k - 1
        assert b - a == pytest.approx(p * np.log(n) - 2 * p, rel=1e-9)


def test_covariance_types_are_searched_outer_and_the_choice_is_kept() -> None:
    """Diagonal clusters: the table has every (type, K), types outer; the choice is the table's minimum."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(size=(200, 3)) * [3.0, 0.5, 1.0] + 10 * i for i in range(2)])
    sel = MixtureSelector(_template(), n_components=[1, 2, 3], covariance_type=["full", "diag", "spherical"]).fit(x)
    assert sel.results_["covariance_type"] == ["full"] * 3 + ["diag"] * 3 + ["spherical"] * 3
    assert sel.results_["n_components"] == [1, 2, 3] * 3
    i = int(np.argmin(sel.results_["bic"]))
    assert (sel.covariance_type_, sel.n_components_) == (sel.results_["covariance_type"][i], 2)
    assert sel.covariance_type_ in ("diag", "full")  # the diagonal truth fits either; spherical is penalised
    assert sel.best_estimator_.covariance_type == sel.covariance_type_


def test_n_init_applies_to_every_k() -> None:
    """The template's n_init is every candidate's: the table's lower bounds are the best of each K's starts."""
    x = _blobs(k=4, n=60, gap=4.0, seed=2)
    one = MixtureSelector(_template(n_init=1, init_params="random"), n_components=[4]).fit(x)
    five = MixtureSelector(_template(n_init=5, init_params="random"), n_components=[4]).fit(x)
    assert five.results_["lower_bound"][0] >= one.results_["lower_bound"][0]
    assert five.best_estimator_.n_init == 5


def test_it_is_a_scikit_learn_estimator_in_a_pipeline_and_under_cross_validation() -> None:
    x = _blobs(n=80)
    pipe = make_pipeline(StandardScaler(), MixtureSelector(_template(), n_components=range(1, 5)))
    labels = pipe.fit(x).predict(x)
    assert len(set(labels.tolist())) == pipe[-1].n_components_ == 3
    scores = cross_val_score(pipe, x, cv=3)  # the chosen model's held-out mean log-likelihood per fold
    assert scores.shape == (3,) and np.isfinite(scores).all()
    copy = clone(MixtureSelector(_template(), n_components=[2, 3], criterion="aic"))
    assert copy.get_params()["criterion"] == "aic" and list(copy.get_params()["n_components"]) == [2, 3]


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"criterion": "loglik"}, ValueError, "criterion must be one of"),
        ({"n_components": []}, ValueError, "non-empty iterable of positive ints"),
        ({"n_components": [0, 1]}, ValueError, "non-empty iterable of positive ints"),
        ({"n_components": [2.5]}, ValueError, "non-empty iterable of positive ints"),
        ({"n_components": [True]}, ValueError, "non-empty iterable of positive ints"),
        ({"n_components": [2, 2]}, ValueError, "lists a K twice"),
        ({"n_components": 3}, TypeError, "iterable of ints"),
        ({"covariance_type": "ful"}, ValueError, "covariance_type must be"),
        ({"covariance_type": ["full", "full"]}, ValueError, "covariance_type must be"),
        ({"n_components": [1, 500]}, ValueError, "too few for n_components up to 500"),
        ({"estimator": SkGaussianMixture()}, TypeError, "implicit_em GaussianMixture"),
    ],
)
def test_bad_arguments_are_clear_errors(params: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        MixtureSelector(**params).fit(_blobs(n=50))  # type: ignore[arg-type]


def test_an_unfitted_selector_says_so() -> None:
    with pytest.raises(NotFittedError):
        MixtureSelector().predict(_blobs(n=10))


def test_a_stream_of_batches_is_read_like_the_array() -> None:
    """X as a list of batches (the estimator's iterable input): the same table as the array, to float round-off
    (the stream's k-means start draws the same sample when N is below the sample size)."""
    x = _blobs(n=60)
    stream = [x[i : i + 50] for i in range(0, len(x), 50)]
    whole = MixtureSelector(_template(), n_components=[2, 3]).fit(x)
    parts = MixtureSelector(_template(), n_components=[2, 3]).fit(stream)
    np.testing.assert_allclose(parts.results_["bic"], whole.results_["bic"], rtol=1e-9)
    assert parts.n_components_ == whole.n_components_ == 3
