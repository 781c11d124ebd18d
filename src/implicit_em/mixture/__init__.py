"""Gaussian mixtures fitted three ways: batch EM, online EM, gradient descent (implicit EM).

The public API is the estimator, :class:`GaussianMixture` (as ``sklearn.mixture``), the selector of its number of
components and covariance type by BIC or AIC, :class:`MixtureSelector` (``_select``), and the warning the estimator
gives when ``reg_covar`` dominates a feature's variance, :class:`RegCovarWarning`. Its machinery is internal, in
underscored modules (every one is named here; ``tests/test_mixture_layout.py`` checks it):

- the estimator: ``_gaussian_mixture`` (parameters, ``fit``, ``predict``, scoring), its loop over the ``n_init``
  starts (``_starts``), the input checks (``_validation``), saving and loading (``_io``);
- the fitters behind one interface (``_fitting``: registry, a run's context, history and progress), each taking
  the fit's settings whole (``_settings``): batch EM (``_em``; on rows with missing values ``_missing``), online
  EM (``_online_em``), gradient descent: implicit EM (``_gd``, its float32 fast step ``_gd_fast``), and where a
  stochastic fit stands inside its epochs (``_epochs``);
- the E-step, its back-end chosen in one place (``_estep``), on the E/M engine on quadratic features (``_stats``:
  the float64 reference, the M-step) and its fused float32 pass (``_fused``); initialisation (``_init``);
  split-and-merge (``_split_merge``);
- data: arrays, tensors, memmaps and batch iterables (``_data``); ``torch.distributed`` sums (``_distributed``);
- stopping and resuming: checkpoints (``_checkpoint``), Ctrl-C held to a safe point (``_interrupt``).
"""

from implicit_em.mixture._gaussian_mixture import GaussianMixture
from implicit_em.mixture._select import MixtureSelector
from implicit_em.mixture._validation import RegCovarWarning

__all__ = ["GaussianMixture", "MixtureSelector", "RegCovarWarning"]
