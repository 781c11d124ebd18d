"""Gaussian mixtures fitted three ways: batch EM, online EM, gradient descent (implicit EM).

The public API is the estimator, :class:`GaussianMixture` (as ``sklearn.mixture``). Its machinery is internal, in
underscored modules: the fitters (``_em``: batch EM, the float64 reference; ``_online_em``; ``_gd``), the
quadratic-feature E/M engine (``_stats``), initialisation (``_init``), split-and-merge (``_split_merge``),
``torch.distributed`` sums (``_distributed``), the fitter registry (``_fitting``) and the data adapter (``_data``).
"""

from implicit_em.mixture._gaussian_mixture import GaussianMixture

__all__ = ["GaussianMixture"]
