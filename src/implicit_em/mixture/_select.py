"""Choosing a mixture's number of components (and covariance type) by BIC or AIC: :class:`MixtureSelector`.

scikit-learn leaves this to a loop or to ``GridSearchCV`` with a scorer built from ``bic`` (its example "Gaussian
Mixture Model Selection"); scikit-learn's open request for such an estimator raised two concerns, answered here:

- *a bad start picks the wrong K*: every candidate is the template estimator with its own ``n_init`` starts, so a
  K is judged by its best start, and the whole table is kept (``results_``) for the user to read;
- *BIC inside cross-validation*: the selector is an estimator, so in a ``Pipeline`` under cross-validation it
  chooses on each training split, and its ``score`` is the chosen model's mean log-likelihood on held-out data
  (what ``GridSearchCV`` should compare), never the criterion.

Both criteria are computed for every candidate from one pass over the data (``-2 log L + p log N`` and
``-2 log L + 2p``, p the free parameters, as :meth:`GaussianMixture.bic` and :meth:`GaussianMixture.aic`).
"""

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin, MetaEstimatorMixin, clone
from sklearn.utils.validation import check_is_fitted

from implicit_em.mixture._gaussian_mixture import GaussianMixture

__all__ = ["MixtureSelector"]

_CRITERIA = ("bic", "aic")
_COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")


class MixtureSelector(MetaEstimatorMixin, DensityMixin, BaseEstimator):
    """Fit a Gaussian mixture for every candidate and keep the one with the lowest BIC (or AIC).

    Parameters:

    - estimator: the template, a :class:`GaussianMixture` (default ``GaussianMixture()``); every candidate is a
      clone of it with ``n_components`` (and ``covariance_type``) set, so its ``n_init``, ``fitter``,
      ``random_state`` and every other parameter apply to each K;
    - n_components: the candidate numbers of components, positive ints (default 1 to 10);
    - covariance_type: None (the template's), one of "full", "tied", "diag", "spherical", or a sequence of them;
    - criterion: "bic" (default) or "aic"; ties go to the earlier candidate (the smaller K, the earlier type).

    Attributes after ``fit``: ``results_``, a dict of lists with one entry per candidate in the order fitted
    (covariance types outer, K inner): ``n_components``, ``covariance_type``, ``bic``, ``aic``, ``lower_bound``,
    ``converged``, ``n_iter``; ``best_index_`` (into them), ``best_params_``, ``best_estimator_`` (the fitted
    choice), ``n_components_``, ``covariance_type_``, ``n_features_in_``. ``predict``, ``predict_proba``,
    ``score_samples``, ``score``, ``sample``, ``bic`` and ``aic`` are the chosen model's.
    """

    def __init__(
        self,
        estimator: GaussianMixture | None = None,
        n_components: Iterable[int] = range(1, 11),
        covariance_type: str | Iterable[str] | None = None,
        criterion: str = "bic",
    ) -> None:
        self.estimator = estimator
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.criterion = criterion

    def _candidates(self) -> tuple[GaussianMixture, list[int], list[str]]:
        """The template, the K and the covariance types to try, checked."""
        template = GaussianMixture() if self.estimator is None else self.estimator
        if not isinstance(template, GaussianMixture):
            raise TypeError(f"estimator must be an implicit_em GaussianMixture, got {type(template).__name__}")
        if self.criterion not in _CRITERIA:
            raise ValueError(f"criterion must be one of {_CRITERIA}, got {self.criterion!r}")
        try:
            ks = list(self.n_components)
        except TypeError:
            raise TypeError(f"n_components must be an iterable of ints, got {self.n_components!r}") from None
        bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1]
        if not ks or bad:
            raise ValueError(f"n_components must be a non-empty iterable of positive ints, got {self.n_components!r}")
        if len(set(ks)) != len(ks):
            raise ValueError(f"n_components lists a K twice: {ks}")
        types = self.covariance_type
        covs = [template.covariance_type] if types is None else [types] if isinstance(types, str) else list(types)
        unknown = [c for c in covs if c not in _COVARIANCE_TYPES]
        if not covs or unknown or len(set(covs)) != len(covs):
            raise ValueError(
                f"covariance_type must be None, one of {_COVARIANCE_TYPES} or a sequence of distinct ones, "
                f"got {self.covariance_type!r}"
            )
        return template, [int(k) for k in ks], covs

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> "MixtureSelector":
        """Fit every candidate on X and keep the one with the lowest criterion; return self. ``sample_weight``
        (as in :meth:`GaussianMixture.fit`) weights every fit and the criteria (N = Σ w)."""
        template, ks, covs = self._candidates()
        n_rows = getattr(X, "shape", (None,))[0]
        if n_rows is not None and n_rows < max(ks):
            raise ValueError(
                f"X has {n_rows} samples, too few for n_components up to {max(ks)} (at least {max(ks)} needed); "
                f"lower the largest candidate"
            )
        results: dict[str, list[Any]] = {key: [] for key in ("n_components", "covariance_type", "bic", "aic",
                                                              "lower_bound", "converged", "n_iter")}  # fmt: skip
        best: tuple[float, GaussianMixture] | None = None
        for cov in covs:
            for k in ks:
                model = clone(template).set_params(n_components=k, covariance_type=cov)
                model.fit(X, sample_weight=sample_weight)
                mean, n = model._mean_log_likelihood(X, sample_weight)
                p = model._n_parameters()
                bic, aic = -2 * mean * n + p * math.log(n), -2 * mean * n + 2 * p
                for key, value in (("n_components", k), ("covariance_type", cov), ("bic", bic), ("aic", aic),
                                   ("lower_bound", float(model.lower_bound_)), ("converged", bool(model.converged_)),
                                   ("n_iter", int(model.n_iter_))):  # fmt: skip
                    results[key].append(value)
                score = bic if self.criterion == "bic" else aic
                if best is None or score < best[0]:
                    best = (score, model)
        assert best is not None  # at least one candidate (checked above)
        scores = results[self.criterion]
        self.results_ = results
        self.best_index_ = int(np.argmin(scores))  # the first of equal scores: the same as the loop's choice
        self.best_estimator_ = best[1]
        self.n_components_ = int(results["n_components"][self.best_index_])
        self.covariance_type_ = str(results["covariance_type"][self.best_index_])
        self.best_params_ = {"n_components": self.n_components_, "covariance_type": self.covariance_type_}
        self.n_features_in_ = int(best[1].n_features_in_)
        return self

    def _chosen(self) -> GaussianMixture:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict(self, X: Any) -> Any:
        """The chosen model's most probable component of every sample."""
        return self._chosen().predict(X)

    def predict_proba(self, X: Any) -> Any:
        """The chosen model's responsibilities, (N, K)."""
        return self._chosen().predict_proba(X)

    def score_samples(self, X: Any) -> Any:
        """log p(x) of every sample under the chosen model."""
        return self._chosen().score_samples(X)

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """The chosen model's mean log-likelihood per sample (what cross-validation should compare)."""
        return self._chosen().score(X, sample_weight=sample_weight)

    def sample(self, n_samples: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Draw from the chosen model."""
        return self._chosen().sample(n_samples)

    def bic(self, X: Any, sample_weight: Any = None) -> float:
        """The chosen model's BIC on X."""
        return self._chosen().bic(X, sample_weight)

    def aic(self, X: Any, sample_weight: Any = None) -> float:
        """The chosen model's AIC on X."""
        return self._chosen().aic(X, sample_weight)
