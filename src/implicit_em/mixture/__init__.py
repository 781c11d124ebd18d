"""Gaussian mixtures fitted three ways: batch EM, online EM, gradient descent (implicit EM).

The public API is the estimator, :class:`GaussianMixture` (as ``sklearn.mixture``), and the warning it gives when
``reg_covar`` dominates a feature's variance, :class:`RegCovarWarning`. Its machinery is internal, in
underscored modules: the fitters (``_em``: batch EM, the float64 reference; ``_online_em``; ``_gd``), the
quadratic-feature E/M engine (``_stats``), initialisation (``_init``), split-and-merge (``_split_merge``),
``torch.distributed`` sums (``_distributed``), the fitter registry (``_fitting``), the data adapter (``_data``) and
the input checks (``_validation``).
"""

from implicit_em.mixture._gaussian_mixture import GaussianMixture
from implicit_em.mixture._validation import RegCovarWarning

__all__ = ["GaussianMixture", "RegCovarWarning"]
