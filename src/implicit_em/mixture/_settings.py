"""What a fit reads from the estimator: :class:`FitSettings`, passed whole to every fitter.

``GaussianMixture.fit`` builds one from its parameters (``__init__`` only stores them, as in sklearn) and hands
it to the fitter it looks up (``_fitting.REGISTRY``), which hands it to its algorithm (``_em.fit_em``,
``_online_em.fit_online_em``, ``_gd.fit_gd``): one object instead of a dozen unpacked keywords at every call.
A caller that runs an algorithm directly (the audit's experiments, split-and-merge's trial fits) builds one
with only what differs from the defaults, which are the estimator's (``FitSettings(max_iter=1, tol=0.0)``), or
varies one it has with :func:`dataclasses.replace`.
"""

from dataclasses import dataclass
from typing import Any

__all__ = ["CHUNK", "DEFAULT_BATCH_SIZE", "MINI_BATCH", "FitSettings"]

CHUNK = 16_384  # rows per chunk of the batch E-step (φ in float32 is 10 MB at D = 16; smaller stays in cache)
MINI_BATCH = 4096  # default mini-batch rows of the stochastic fitters

#: each fitter's batch when the estimator's ``batch_size`` is None: chunk rows for batch EM; mini-batch rows for
#: online EM; 8192 for gd (half the steps of 4096 per pass, each with the same fixed cost: score matrix,
#: backward, Adam, ~0.3 ms at D = K = 16, for the same held-out log-likelihood at N = 1e6; data of at most 4096
#: rows, iris, wine, breast cancer, digits, take one full-batch step either way)
DEFAULT_BATCH_SIZE = {"em": CHUNK, "online_em": MINI_BATCH, "gd": 2 * MINI_BATCH}


@dataclass(frozen=True)
class FitSettings:
    """The estimator's parameters a fit reads, resolved once when ``fit`` (or ``partial_fit``) starts; the
    defaults are ``GaussianMixture``'s (``split_merge`` and ``verbose`` off for a direct call).

    ``batch_size`` is resolved: the user's value, else the fitter's default (:data:`DEFAULT_BATCH_SIZE`). The
    dtype and device live in the :class:`~implicit_em.mixture._data.DataSource`, which resolves them from X.
    ``max_iter`` counts EM iterations, or epochs for "online_em" and "gd".
    """

    fitter: str = "em"
    covariance_type: str = "full"
    tol: float = 1e-3
    reg_covar: float = 1e-6
    max_iter: int = 100
    batch_size: int = CHUNK
    learning_rate: float = 0.01
    optimizer: str = "adam"
    volume: bool = True
    split_merge: int = 0
    verbose: int = 0
    verbose_interval: int = 10

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> "FitSettings":
        """Settings from ``get_params()`` of a checked estimator (the fitter name must be a known one)."""
        batch_size = params["batch_size"]
        return cls(
            fitter=params["fitter"],
            covariance_type=params["covariance_type"],
            tol=params["tol"],
            reg_covar=params["reg_covar"],
            max_iter=int(params["max_iter"]),  # numpy integers too, like batch_size and split_merge
            batch_size=int(batch_size) if batch_size is not None else DEFAULT_BATCH_SIZE[params["fitter"]],
            learning_rate=params["learning_rate"],
            optimizer=params["optimizer"],
            volume=params["volume"],
            split_merge=int(params["split_merge"]),
            verbose=params["verbose"],
            verbose_interval=int(params["verbose_interval"]),
        )
