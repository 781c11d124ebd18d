"""``GaussianMixture``: a scikit-learn estimator fitted by batch EM, online EM or gradient descent.

Follows ``sklearn/mixture/_base.py``: ``__init__`` only stores its arguments; ``fit`` checks them, draws every
random number from one ``random_state``, keeps the best of ``n_init`` starts, warns if it did not converge.
The three fitters share one parametrisation (sklearn's ``weights_``, ``means_``, ``precisions_cholesky_``) and
one scoring path (``_stats.weighted_log_prob``: log π_j + log N(x; μ_j, Σ_j) as one matrix product), and are
reached through one interface (``_fitting.py``: the settings, the fitter registry, the history recorder).
"""

import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.sparse import issparse
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import Tensor

from implicit_em import gaussian
from implicit_em.gaussian import COVARIANCE_TYPES
from implicit_em.mixture import _checkpoint, _distributed, _interrupt, _missing, _starts, _stats, _validation
from implicit_em.mixture._data import IN_BATCHES, DataSource, is_batch_list, tensor_output
from implicit_em.mixture._em import FitResult
from implicit_em.mixture._fitting import FITTERS, REGISTRY, History
from implicit_em.mixture._init import INIT_PARAMS, initial_assignment
from implicit_em.mixture._settings import CHUNK as _CHUNK
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._split_merge import fit_split_merge
from implicit_em.mixture._stats import MixtureParams

_MISSING = ("raise", "marginalize")
_INIT_SAMPLE = 200_000  # rows k-means sees when N is larger (or X is an iterable: one pass draws them)
_SPLIT_MERGE_SAMPLE = 50_000  # rows split-and-merge proposals are scored on when N is larger


def _dtype(name: Any, x: Any) -> torch.dtype:
    if name is None:
        if isinstance(x, Tensor) and x.dtype in (torch.float32, torch.float64):
            return x.dtype
        if isinstance(x, np.ndarray) and x.dtype == np.float32:
            return torch.float32
        return torch.float64
    if isinstance(name, torch.dtype):
        return name
    if name in ("float32", "float64"):
        return getattr(torch, name)
    raise ValueError(f"dtype must be None, 'float32' or 'float64', got {name!r}")


class GaussianMixture(DensityMixin, BaseEstimator):
    """Gaussian mixture model with scikit-learn's interface, fitted three ways.

    Parameters with sklearn's names and meanings: n_components, covariance_type, tol, reg_covar, max_iter,
    n_init, init_params, weights_init, means_init, precisions_init, warm_start, random_state, verbose. Ours:

    - fitter: "em" (batch EM, the reference), "online_em" (Cappé–Moulines stochastic EM on mini-batches, then
      one exact EM iteration), "gd" (Adam/SGD on the exact negative log-likelihood: implicit EM);
    - volume: keep the log-det term (True); False gives the distance-only objective ("gd" only): collapse;
    - batch_size: mini-batch rows for "online_em" (default 4096) and "gd" (8192); chunk rows for "em";
    - learning_rate, optimizer ("adam" or "sgd"): for "gd" (the initial rate, halved on each plateau; a "gd"
      epoch is whole passes of at least 64 steps, in whitened coordinates, ending at the last epoch's mean
      iterate, with reg_covar as the penalty ½·reg·Σ_j π_j tr(Σ_j⁻¹) (π held fixed), whose stationary points are
      EM's fixed points at that reg_covar: ``_gd.fit_gd``);
    - split_merge: after "em" or "online_em" converge, try up to this many split-and-merge moves (merge the two
      most overlapping components, split the least Gaussian one, rerun EM, keep it if the likelihood rises;
      ``_split_merge.py``). Default 4; 0 gives exactly sklearn's result (moves run only after convergence) for
      N <= 200,000 rows; above that the k-means start is fitted on a uniform sample of 200,000 rows where sklearn
      fits it on every row, so the same seed starts elsewhere (on 1e6 rows it can end in another optimum);
    - missing: "raise" (default: a NaN in X is an error, as sklearn's) or "marginalize": a NaN is a missing
      value, integrated out (Ghahramani & Jordan, 1994; ``_missing.py``): each row's responsibilities and
      likelihood are those of its observed features, EM and online EM use the expected statistics of the missing
      ones, and "gd" steps on the observed-data likelihood (by Fisher's identity, the same statistics). Every
      fitter, ``partial_fit``, streams, memmaps and process groups; computed in float64; the start is drawn on
      the sample with each NaN replaced by its feature's mean; split-and-merge does not run on data with missing
      values. Data without a NaN give the complete-data fit, bitwise;
    - device, dtype: where and in what precision to compute (default: X's device and float dtype);
    - checkpoint: None, or a file path: ``fit`` writes its state there every ``checkpoint_every`` units of
      ``max_iter`` (EM iterations, or epochs for "online_em" and "gd") and when interrupted, and the same call
      after a crash resumes from it, ending with the parameters of a fit that was never stopped (bitwise on
      CPU). A checkpoint of another call (other parameters, data or fitter) or an unreadable file raises
      ValueError; delete it to start over. It is removed when ``fit`` completes (``_checkpoint.py``;
      ``partial_fit`` does not use it). In a ``torch.distributed`` process group each process writes its own
      file, PATH with ``.rank{r}of{W}`` before the suffix, and they resume together or raise together;
    - checkpoint_every: iterations (epochs) between checkpoints, >= 1 (default 1).

    Ctrl-C (SIGINT) stops ``fit`` at the next safe point: for "em" the next chunk of the E-step pass (the pass
    is dropped: the parameters are those of the last complete iteration), for "online_em" and "gd" the end of
    the mini-batch step in progress (the parameters include the steps of the unfinished epoch). The last
    complete state becomes the fitted state (``converged_ = False``, ``n_iter_`` the complete iterations or
    epochs, so ``warm_start=True`` continues from there; with ``n_init > 1``, the start that was running), a
    checkpoint is written if one is set, and ``KeyboardInterrupt`` is raised. ``partial_fit`` completes its
    step first. In a process group every process stops in the same iteration and raises (``_interrupt.py``).

    ``max_iter`` bounds EM iterations, or epochs for "online_em" and "gd". X may be a numpy array, a torch
    tensor (one that requires grad is read detached: results carry no graph), a ``np.memmap`` (read in blocks),
    or a re-iterable of batches: a list or tuple of 2-D arrays or tensors, a ``DataLoader``; for an iterable the
    k-means initialisation takes one extra pass (a uniform sample of at most 200,000 rows). Bad input raises
    ValueError naming the argument (``_validation.py``): NaN or inf, complex values, values so large that
    N·max|X|² overflows the compute dtype, a user start that is not finite or (precisions) not positive
    definite. When ``reg_covar`` exceeds a tenth of a feature's (nonzero) variance, fitting warns with
    :class:`~implicit_em.mixture.RegCovarWarning`: the floor, not the data, then sets that feature's spread.
    Learned attributes, as sklearn's: weights_, means_, covariances_, precisions_, precisions_cholesky_
    (sklearn's shapes; numpy float32 when the fit's dtype is float32, as sklearn keeps a float32 X's dtype,
    else float64), converged_, n_iter_, lower_bound_, lower_bounds_, n_features_in_. ``n_iter_`` counts the
    units of ``max_iter`` of the one run that produced the parameters, so ``n_iter_ <= max_iter``: for "em" its
    EM iterations (the first run, or the EM run after the last accepted split-and-merge move), for "online_em"
    its stochastic epochs (the exact EM iteration after them is not counted), for "gd" its epochs.
    ``lower_bounds_`` (list of floats, length ``n_iter_``): that run's lower bound after each unit; for "em"
    the mean log-likelihood before each M-step, ending at ``lower_bound_`` (sklearn's), for "online_em" and
    "gd" each epoch's running mean (``lower_bound_`` is an exact pass afterwards). ``partial_fit`` adds one to
    ``n_iter_`` and one entry to ``lower_bounds_`` per step. A ``warm_start`` refit with "em" compares its
    first iteration with ``lower_bound_``, as sklearn does. Ours: n_split_merge_iter_ (EM iterations of all
    split-and-merge trials of the kept start), n_split_merge_accepted_, and history_: a list of dicts (per EM
    iteration or epoch, trials included and marked ``"split_merge": True``) with the mean train
    log-likelihood, seconds and component usage. ``certificates_`` ("gd"; empty for the EM fitters): (epoch,
    gain) for each plateau where the fit tested whether one exact EM step from its end gains less than ``tol``
    (the stop it certifies; the epochs of a resumed fit's earlier run are not listed). ``predict_proba`` and
    ``score_samples`` return float32 when X and the parameters are float32, else float64 (computed in float64
    either way). Every difference from sklearn that remains is listed in docs/mixture.md, "Differences from
    scikit-learn".
    """

    n_features_in_: int
    _shift: Tensor  # the data mean the quadratic features are centred on (float64)
    _scale: float  # the scalar data scale gradient descent standardises by

    def __init__(
        self,
        n_components: int = 1,
        *,
        covariance_type: str = "full",
        tol: float = 1e-3,
        reg_covar: float = 1e-6,
        max_iter: int = 100,
        n_init: int = 1,
        init_params: str = "kmeans",
        weights_init: Any = None,
        means_init: Any = None,
        precisions_init: Any = None,
        random_state: Any = None,
        warm_start: bool = False,
        verbose: int = 0,
        verbose_interval: int = 10,
        fitter: str = "em",
        volume: bool = True,
        batch_size: int | None = None,
        learning_rate: float = 0.01,
        optimizer: str = "adam",
        split_merge: int = 4,
        device: Any = None,
        dtype: Any = None,
        checkpoint: Any = None,
        checkpoint_every: int = 1,
        missing: str = "raise",
    ) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.tol = tol
        self.reg_covar = reg_covar
        self.max_iter = max_iter
        self.n_init = n_init
        self.init_params = init_params
        self.weights_init = weights_init
        self.means_init = means_init
        self.precisions_init = precisions_init
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.verbose_interval = verbose_interval
        self.fitter = fitter
        self.volume = volume
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.split_merge = split_merge
        self.device = device
        self.dtype = dtype
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.missing = missing

    # -- checks --------------------------------------------------------------------------------------------------

    def _check_parameters(self) -> None:
        checks = [
            (
                isinstance(self.n_components, int | np.integer) and self.n_components >= 1,
                "n_components",
                ">= 1",
            ),
            (self.covariance_type in COVARIANCE_TYPES, "covariance_type", f"one of {COVARIANCE_TYPES}"),
            (isinstance(self.tol, int | float) and self.tol >= 0, "tol", ">= 0"),
            (isinstance(self.reg_covar, int | float) and self.reg_covar >= 0, "reg_covar", ">= 0"),
            (isinstance(self.max_iter, int | np.integer) and self.max_iter >= 0, "max_iter", ">= 0"),
            (isinstance(self.n_init, int | np.integer) and self.n_init >= 1, "n_init", ">= 1"),
            (self.init_params in INIT_PARAMS, "init_params", f"one of {INIT_PARAMS}"),
            (self.missing in _MISSING, "missing", f"one of {_MISSING}"),
            (self.fitter in FITTERS, "fitter", f"one of {FITTERS}"),
            (self.optimizer in ("adam", "sgd"), "optimizer", "'adam' or 'sgd'"),
            (
                self.batch_size is None or (isinstance(self.batch_size, int) and self.batch_size >= 1),
                "batch_size",
                "None or >= 1",
            ),
            (isinstance(self.learning_rate, int | float) and self.learning_rate > 0, "learning_rate", "> 0"),
            (isinstance(self.split_merge, int | np.integer) and self.split_merge >= 0, "split_merge", ">= 0"),
            (
                isinstance(self.verbose_interval, int | np.integer) and self.verbose_interval >= 1,
                "verbose_interval",
                ">= 1",
            ),
        ]
        for ok, name, what in checks:
            if not ok:
                raise ValueError(
                    f"The '{name}' parameter of GaussianMixture must be {what}. Got {getattr(self, name)!r}"
                )
        if not self.volume and self.fitter != "gd":
            raise ValueError("volume=False is a gradient-descent objective; use fitter='gd'")
        _validation.check_finite_parameter("reg_covar", self.reg_covar)
        _validation.check_finite_parameter("learning_rate", self.learning_rate)
        if self.device is not None:
            _validation.check_device(self.device)

    def _source(self, x: Any, reset: bool, sample_weight: Any = None) -> DataSource:
        """Validate X (sklearn's rules for plain arrays) and wrap it, with its rows' weights (see :meth:`fit`). A
        warm-start refit keeps the fitted width."""
        warm = reset and self.warm_start and hasattr(self, "converged_")
        width = _input_width(x)
        if warm and width is not None:
            _validation.check_warm_start_width(width, int(self.n_features_in_))
        marginalize = getattr(self, "missing", "raise") == "marginalize"
        if (isinstance(x, np.ndarray) and not isinstance(x, np.memmap)) or (
            not isinstance(x, Tensor | np.ndarray) and not _is_batches(x)
        ):
            x = validate_data(
                self,
                x,
                reset=reset and not warm,
                dtype=[np.float64, np.float32],
                ensure_min_samples=2 if reset else 1,
                ensure_all_finite="allow-nan" if marginalize else True,
            )
        elif not reset:
            check_is_fitted(self)
        device = (
            _validation.check_device(self.device)
            if self.device is not None
            else (x.device if isinstance(x, Tensor) else torch.device("cpu"))
        )
        n_features = None if reset and not warm else int(self.n_features_in_)
        expected = "warm_start=True continues the previous fit, which has" if warm else "the model expects"
        # a stream, a memmap or a process group may hold a NaN anywhere (and every process must take the same path)
        missing = marginalize and (_is_batches(x) or isinstance(x, np.memmap) or _distributed.active() or _has_nan(x))
        dtype = _dtype(self.dtype, x)
        if missing and dtype != torch.float64:
            if self.dtype is not None:
                raise ValueError(
                    f'missing="marginalize" computes in float64; dtype={self.dtype!r} cannot hold its statistics '
                    "(leave dtype=None or pass 'float64')"
                )
            dtype = torch.float64
        source = DataSource(x, device, dtype, n_features, expected, sample_weight, missing=missing)
        if reset and source.n_features is not None:
            self.n_features_in_ = source.n_features
        return source

    # -- fitting -------------------------------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> "GaussianMixture":
        """Estimate the parameters (best of ``n_init`` starts) and return self.

        ``sample_weight`` (N,), optional: a finite, non-negative weight per row of X (an array, tensor or memmap),
        not all zero. Row i counts w_i times in every statistic and in the log-likelihood, so an integer weight
        equals repeating the row and a zero weight equals removing it (from the same start: the k-means start
        draws differently on weighted and repeated rows); the start uses the weights too (k-means, k-means++
        and the M-step from the initial responsibilities; "random_from_data" draws rows in proportion to their
        weight). Every fitter: "online_em" averages each mini-batch step over Σ w, "gd" steps on Σ w log p / (B w̄),
        w̄ the mean weight of all rows (an unbiased estimate of the weighted mean log-likelihood). In a process group
        each process passes its own rows' weights. Split-and-merge proposes moves from an unweighted sample and
        accepts them on the weighted likelihood. For a stream, ``sample_weight="in_batches"``: every batch is a pair
        (x, w), as a DataLoader over ``TensorDataset(X, w)`` yields.
        """
        self._fit(X, sample_weight)
        return self

    def fit_predict(self, X: Any, y: Any = None, sample_weight: Any = None) -> Any:
        """Fit, then the most probable component of every sample (equal to ``fit(X).predict(X)``)."""
        return self._fit(X, sample_weight).predict(X)

    def _fit(self, X: Any, sample_weight: Any = None) -> "GaussianMixture":
        group = _distributed.active()
        rejected: Exception | None = None
        try:  # in a process group every process learns whether any rejected its arguments or its shard
            self._check_parameters()
            path = _checkpoint.check_options(self.checkpoint, self.checkpoint_every)
            settings = FitSettings.from_params(self.get_params(deep=False))
            fitter = REGISTRY[settings.fitter]
            data = self._source(X, reset=True, sample_weight=sample_weight)
            if data.missing and not self.volume:
                raise ValueError(
                    'missing="marginalize" integrates missing values out of the likelihood; volume=False has none'
                )
        except (ValueError, TypeError) as error:
            if not group:
                raise
            rejected = error
        if group:  # one all-reduce; raises on every process if any rejected
            _distributed.agree_on_error(rejected)
        if group and not fitter.distributed:  # every registered fitter runs in a process group
            raise NotImplementedError(f'fitter="{self.fitter}" does not run in a torch.distributed process group')
        if group:  # this process's rows in the global row index: sampling and the stochastic epochs are global
            data.join_group()
        n_total = data.layout[1] if data.layout is not None else data.n_samples
        if n_total is not None and n_total < self.n_components:
            raise ValueError(
                f"Expected n_samples >= n_components but got n_components = {self.n_components}, n_samples = {n_total}"
            )
        rng = check_random_state(self.random_state)
        if group:  # rank 0's generator on every process: every process draws what the single process draws
            rng = _distributed.sync_rng(rng, data.device)
        do_init = not (self.warm_start and hasattr(self, "converged_"))
        ckpt = self._open_checkpoint(path, X, data, do_init, sample_weight)
        saved = ckpt.load() if ckpt is not None else None
        with _interrupt.deferred():  # a SIGINT waits for the fitters' next safe point (module _interrupt)
            if saved is not None:
                progress = _checkpoint.Progress.restore(saved, rng)
                if saved.get("n_split_merge_accepted") is not None:
                    self.n_split_merge_accepted_ = int(saved["n_split_merge_accepted"])
            else:
                progress = _checkpoint.Progress(rng, *self._start_shift_scale(data, rng, do_init, group))
            self._shift, self._scale = progress.shift, progress.scale
            if data.n_features is not None:
                self.n_features_in_ = data.n_features
            starts = _starts.Starts(self, fitter, settings, data, progress, ckpt, do_init)
            best, best_history = starts.run(self.n_init if do_init else 1, saved)
            if not best.converged and self.max_iter > 0:
                _warn_not_converged()
            self._keep(best, best_history, data.dtype)
            if group and _distributed.any_stop(_interrupt.requested(), data.device):  # every process ends alike
                _interrupt.clear()
                raise KeyboardInterrupt
            if ckpt is not None and not _interrupt.requested():  # an interrupt now keeps it for the rerun
                ckpt.remove()
        return self

    def _start_shift_scale(
        self, data: DataSource, rng: np.random.RandomState, do_init: bool, group: bool
    ) -> tuple[Tensor, float]:
        shift, scale = self._shift_scale(data, rng) if do_init else (self._shift, self._scale)
        if group:  # rank 0's shift and scale everywhere: the statistics must share one coordinate system
            shift = _distributed.broadcast_tensor(shift)
            scale = float(_distributed.broadcast_tensor(torch.tensor(scale, dtype=torch.float64)))
        return shift, scale

    def _keep(self, result: FitResult, history: list[dict[str, Any]], dtype: torch.dtype) -> None:
        """Make ``result`` (one run: ``n_iter`` <= max_iter, its ``lower_bounds``) the fitted state, with the
        parameters in ``dtype``; ``history`` is the kept start's, split-and-merge trials included."""
        self._set_params(result.params, dtype)
        self.converged_ = bool(result.converged and not result.interrupted)
        self.n_iter_ = int(result.n_iter)
        self.lower_bound_ = float(result.lower_bound)
        self.lower_bounds_ = [float(b) for b in result.lower_bounds]
        self.certificates_ = [(int(e), float(g)) for e, g in result.certificates]
        self.n_split_merge_iter_ = sum(1 for h in history if h.get("split_merge", False))
        self.history_ = history

    def _open_checkpoint(
        self, path: Path | None, x: Any, data: DataSource, do_init: bool, sample_weight: Any = None
    ) -> _checkpoint.Checkpoint | None:
        if path is None:
            return None
        start = (
            "init"
            if do_init
            else _checkpoint.start_identity(
                self.weights_, self.means_, self.covariances_, self.precisions_cholesky_, self._shift, self._scale
            )
        )
        identity = _checkpoint.fit_identity(self.get_params(deep=False), x, _is_batches(x), start)
        if data.weights is not None:  # another call's weights are another fit
            identity["sample_weight"] = _checkpoint.start_identity(data.weights.cpu().numpy())
        elif data.stream_weighted:  # the stream's fingerprint covers its x; the weights come with each batch
            identity["sample_weight"] = IN_BATCHES
        kind = _checkpoint.GroupCheckpoint if _distributed.active() else _checkpoint.Checkpoint  # a file per process
        return kind(path, int(self.checkpoint_every), identity, data.device)

    def _shift_scale(self, data: DataSource, rng: np.random.RandomState) -> tuple[Tensor, float]:
        sample, weights = data.weighted_sample(_INIT_SAMPLE, rng)  # draws from rng only when N > _INIT_SAMPLE
        sample = sample.double()
        if data.missing:  # each feature's observed values
            shift, var = _missing.nan_moments(sample, weights)
        elif weights is None:
            shift = sample.mean(0)
            var = sample.var(0, unbiased=False)
        else:  # the rows as the weights count them (a removed row must not set gd's coordinates)
            w = weights.double().to(sample.device)[:, None] / weights.double().sum()
            shift = (w * sample).sum(0)
            var = (w * (sample - shift) ** 2).sum(0)
        scale = float(var.mean().sqrt()) if sample.shape[0] > 1 else 1.0
        if sample.shape[0] > 1:
            _validation.warn_if_reg_covar_dominates(float(self.reg_covar), var)
        return shift, scale if math.isfinite(scale) and scale > 0 else 1.0

    def _initial_params(self, data: DataSource, rng: np.random.RandomState, shift: Tensor) -> MixtureParams:
        """sklearn's ``_initialize``: an M-step from the initial responsibilities, then the user's overrides."""
        k, d = int(self.n_components), int(data.n_features or 0)  # n_components may be a numpy integer
        need_resp = self.weights_init is None or self.means_init is None or self.precisions_init is None
        params: MixtureParams | None = None
        group = data.layout is not None  # a process group: every process holds the same global sample
        if need_resp:
            x, w = data.weighted_sample(_INIT_SAMPLE, rng)
            if data.missing:  # k-means on the sample with each missing value at its feature's mean
                x = _missing.fill(x, shift)
            if group:  # rank 0 starts from the global sample, as the single process would; every process gets it
                params = self._sample_params(x, k, rng, shift, data.dtype, w) if _distributed.rank() == 0 else None
                params = _distributed.broadcast_params(params or _zero_params(k, d, self.covariance_type, x))
                _distributed.sync_rng(rng, data.device, into=True)  # k-means drew from rank 0's generator only
            else:
                params = self._sample_params(x, k, rng, shift, data.dtype, w)
        return self._apply_user_init(params, k, d, data.dtype, data.device)

    def _sample_params(
        self,
        x: Tensor,
        k: int,
        rng: np.random.RandomState,
        shift: Tensor,
        dtype: torch.dtype,
        weights: Tensor | None = None,
    ) -> MixtureParams:
        """The initial responsibilities of the sample x (``init_params``, drawn from rng), then an M-step, each
        row counted ``weights`` times when given."""
        assign = initial_assignment(x, k, self.init_params, rng, weights)
        summary = None
        for start in range(0, x.shape[0], _CHUNK):
            resp = assign.rows(start, start + _CHUNK, k, x.dtype)
            w = None if weights is None else weights[start : start + _CHUNK]
            part = _stats.summarize_resp(x[start : start + _CHUNK], resp, shift, w)
            summary = part if summary is None else summary + part
        assert summary is not None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # floor for empty k-means clusters is expected
            params = _stats.from_summaries(summary, shift, self.reg_covar, self.covariance_type, dtype)
        weights = (summary.nk + 10 * torch.finfo(torch.float64).eps) / summary.n  # sklearn: nk / n_samples
        if self.covariance_type == "tied" and assign.labels is not None and bool((assign.labels < 0).any()):
            params = params._replace(**_sklearn_tied_init(x, params.means, summary.nk, self.reg_covar))
        return params._replace(weights=weights.to(dtype))

    def _apply_user_init(
        self, params: MixtureParams | None, k: int, d: int, dtype: torch.dtype, device: torch.device
    ) -> MixtureParams:
        def as_t(v: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(v)).to(device=device, dtype=dtype)

        if self.weights_init is not None:
            w = as_t(_validation.check_weights_init(self.weights_init, k))
        else:
            assert params is not None
            w = params.weights
        if self.means_init is not None:
            mu = as_t(_validation.check_means_init(self.means_init, k, d))
        else:
            assert params is not None
            mu = params.means
        if self.precisions_init is not None:
            shape = gaussian.parameter_shape(self.covariance_type, k, d)
            prec = as_t(_validation.check_precisions_init(self.precisions_init, self.covariance_type, shape))
            prec_chol = gaussian.precisions_cholesky_from_precisions(prec.double(), self.covariance_type).to(dtype)
            cov = gaussian.covariances_from_precisions_cholesky(prec_chol, self.covariance_type)
        else:
            assert params is not None
            prec_chol, cov = params.precisions_cholesky, params.covariances
        return MixtureParams(w, mu, cov, prec_chol)

    def _split_merge(
        self,
        settings: FitSettings,
        data: DataSource,
        result: FitResult,
        rng: np.random.RandomState,
        shift: Tensor,
        history: History,
    ) -> FitResult:
        seed = int(rng.get_state()[1][0])  # type: ignore[index]
        sample = data.sample(_SPLIT_MERGE_SAMPLE, np.random.RandomState(seed))  # global in a process group
        best, self.n_split_merge_accepted_ = fit_split_merge(
            data, result, sample, settings, shift=shift, batch_size=_CHUNK, callback=history.split_merge
        )
        return best

    def partial_fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> "GaussianMixture":
        """One online-EM step ("em", "online_em") or one gradient step ("gd") on the batch X.

        The first call initialises from X with ``init_params`` (X should then hold at least n_components rows).
        ``sample_weight`` (N,), optional, as in :meth:`fit`: the step's statistics (or gradient) are the batch's
        weighted means.
        """
        first = not hasattr(self, "converged_")
        self._check_parameters()
        _checkpoint.check_options(self.checkpoint, self.checkpoint_every)
        settings = FitSettings.from_params(self.get_params(deep=False))
        fitter = REGISTRY[settings.fitter]
        data = self._source(X, reset=first, sample_weight=sample_weight)
        parts = list(data.weighted_batches(1 << 30))
        x = torch.cat([p[0] if isinstance(p, tuple) else p for p in parts])
        weights = data.weights if not data.stream_weighted else torch.cat([p[1] for p in parts if isinstance(p, tuple)])
        if first:
            if x.shape[0] < self.n_components:
                raise ValueError(
                    f"Expected n_samples >= n_components but got n_components = {self.n_components}, "
                    f"n_samples = {x.shape[0]}"
                )
            rng = check_random_state(self.random_state)
            self._shift, self._scale = self._shift_scale(data, rng)
            self._set_params(self._initial_params(data, rng, self._shift), data.dtype)
            self.converged_, self.n_iter_, self.history_ = False, 0, []
            self.lower_bounds_, self.n_split_merge_iter_ = [], 0
        params = self._params(data.dtype, data.device)
        t0 = time.perf_counter()
        state = getattr(self, fitter.state_attr, None)
        with _interrupt.deferred():  # the step (in place for "gd") and its bookkeeping complete, then a SIGINT
            state, new, loglik = fitter.partial_step(
                state, x, params, settings, shift=self._shift, scale=self._scale, weights=weights
            )
            setattr(self, fitter.state_attr, state)
            self._set_params(new, data.dtype)
            self.n_iter_ += 1
            self.lower_bound_ = loglik
            self.lower_bounds_ = [*getattr(self, "lower_bounds_", []), float(loglik)]
            History(self.history_).epoch(len(self.history_) + 1, loglik, time.perf_counter() - t0, new.weights)
        return self

    # -- parameters ----------------------------------------------------------------------------------------------

    def _set_params(self, params: MixtureParams, dtype: torch.dtype) -> None:
        """Store ``params`` as sklearn's numpy attributes in the fit's ``dtype``: float32 stays float32 (as
        sklearn keeps a float32 X's dtype), anything else is float64. ``precisions_`` is formed from the
        Cholesky factor in float64, then cast."""
        w, mu, cov, pc = (t.detach().double().cpu().numpy() for t in params)
        if self.covariance_type == "full":
            prec = pc @ np.transpose(pc, (0, 2, 1))
        elif self.covariance_type == "tied":
            prec = pc @ pc.T
        else:
            prec = pc**2
        out = np.float32 if dtype == torch.float32 else np.float64
        self.weights_, self.means_ = w.astype(out, copy=False), mu.astype(out, copy=False)
        self.covariances_, self.precisions_cholesky_ = cov.astype(out, copy=False), pc.astype(out, copy=False)
        self.precisions_ = prec.astype(out, copy=False)

    def _params(self, dtype: torch.dtype, device: torch.device) -> MixtureParams:
        def t(a: np.ndarray) -> Tensor:
            return torch.from_numpy(np.asarray(a, dtype=np.float64)).to(device=device, dtype=dtype)

        return MixtureParams(t(self.weights_), t(self.means_), t(self.covariances_), t(self.precisions_cholesky_))

    # -- scoring -------------------------------------------------------------------------------------------------

    def _weighted_log_prob(self, X: Any) -> tuple[Tensor, bool, torch.dtype]:
        """log π_j + log N(x_i; μ_j, Σ_j), (N, K), computed in float64; whether results are tensors; and the
        dtype of the returned arrays: float32 when X's compute dtype and the parameters are both float32, else
        float64 (sklearn's type promotion of X and the parameters). A row with a missing value
        (``missing="marginalize"``) scores over its observed features."""
        data = self._scoring_source(X)
        logp = self._source_log_prob(data)[0]
        single = data.dtype == torch.float32 and np.asarray(self.means_).dtype == np.float32
        return logp, tensor_output(X), torch.float32 if single else torch.float64

    def _scoring_source(self, X: Any, sample_weight: Any = None) -> DataSource:
        check_is_fitted(self)
        return self._source(X, reset=False, sample_weight=sample_weight)

    def _source_log_prob(self, data: DataSource) -> tuple[Tensor, Tensor | None]:
        """:meth:`_weighted_log_prob` of every row of ``data`` in order, chunk by chunk, and the rows' weights
        when a stream's batches carry them (float64, (N,); else None)."""
        params = self._params(torch.float64 if data.dtype == torch.float64 else data.dtype, data.device)
        shift = getattr(self, "_shift", torch.from_numpy(np.asarray(self.means_, dtype=np.float64).mean(0)))
        shift = shift.to(data.device)
        a = _stats.score_matrix(params, self.covariance_type, shift)
        logps, ws = [], []
        for batch in data.weighted_batches(_CHUNK):
            x, w = batch if isinstance(batch, tuple) else (batch, None)
            if data.missing and _missing.has_nan(x):
                logps.append(_missing.batch_log_prob(x, params, self.covariance_type).to(x.dtype))
            else:
                logps.append(_stats.weighted_log_prob(x, a, shift))
            ws.append(w)
        if not logps:
            return torch.zeros(0, self.n_components, dtype=data.dtype), None
        weights = torch.cat([w for w in ws if w is not None]) if data.stream_weighted else None
        return torch.cat(logps), weights

    def score_samples(self, X: Any) -> Any:
        """log p(x) of every sample, (N,), in the parameters' dtype (float64 for float64 X)."""
        logp, as_tensor, dtype = self._weighted_log_prob(X)
        return _out(_stats.log_normalize(logp.T)[1].to(dtype), as_tensor)

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """Mean log-likelihood per sample (weighted by ``sample_weight``, as in :meth:`fit`, when given; for a
        stream of (x, w) batches ``sample_weight="in_batches"``)."""
        return self._mean_log_likelihood(X, sample_weight)[0]

    def _mean_log_likelihood(self, X: Any, sample_weight: Any = None) -> tuple[float, float]:
        """(mean log p(x), N) in one pass: X may be a stream, whose N is known only after it. With
        ``sample_weight``: the weighted mean and N = Σ w (the rows the weights stand for)."""
        stream_weights = isinstance(sample_weight, str) and sample_weight == IN_BATCHES
        logp, w = self._source_log_prob(self._scoring_source(X, IN_BATCHES if stream_weights else None))
        if logp.shape[0] == 0:
            raise ValueError("X holds no samples; the log-likelihood of no data is undefined")
        log_p = _stats.log_normalize(logp.T)[1].double()
        if sample_weight is None:
            return float(log_p.mean()), float(logp.shape[0])
        if _is_batches(X) and not stream_weights:
            raise ValueError(
                "sample_weight as one array needs X in memory (an array, a tensor or a memmap); for a stream, "
                f'yield (x, w) batches and pass sample_weight="{IN_BATCHES}"'
            )
        if w is None:
            w = torch.from_numpy(_validation.check_sample_weight(sample_weight, int(logp.shape[0]))).to(log_p.device)
        total = float(w.sum())
        return float(_stats.weighted_sum(log_p, w)) / total, total

    def predict(self, X: Any) -> Any:
        """The most probable component of every sample, (N,)."""
        logp, as_tensor, _ = self._weighted_log_prob(X)
        return _out(logp.argmax(1), as_tensor)

    def predict_proba(self, X: Any) -> Any:
        """Responsibilities, (N, K), in the parameters' dtype (float64 for float64 X)."""
        logp, as_tensor, dtype = self._weighted_log_prob(X)
        return _out(torch.softmax(logp, dim=1).to(dtype), as_tensor)

    def _n_parameters(self) -> int:
        k, d = self.means_.shape
        cov = {"full": k * d * (d + 1) / 2, "diag": k * d, "tied": d * (d + 1) / 2, "spherical": k}
        return int(cov[self.covariance_type] + d * k + k - 1)

    def bic(self, X: Any, sample_weight: Any = None) -> float:
        """Bayesian information criterion: -2 log L + p log N (lower is better); X may be a stream. With
        ``sample_weight``: log L = Σ w log p(x) and N = Σ w, as for the rows the weights stand for."""
        mean, n = self._mean_log_likelihood(X, sample_weight)
        return -2 * mean * n + self._n_parameters() * math.log(n)

    def aic(self, X: Any, sample_weight: Any = None) -> float:
        """Akaike information criterion: -2 log L + 2 p (lower is better); X may be a stream; ``sample_weight``
        as in :meth:`bic`."""
        mean, n = self._mean_log_likelihood(X, sample_weight)
        return -2 * mean * n + 2 * self._n_parameters()

    def sample(self, n_samples: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Draw n_samples points and their component labels (sklearn's order: grouped by component)."""
        check_is_fitted(self)
        if n_samples < 1:
            raise ValueError(f"Invalid value for 'n_samples': {n_samples}. It must be at least one.")
        rng = check_random_state(self.random_state)
        # float64 draws whatever the parameters' dtype, as sklearn's sample returns
        weights, means, covs = (
            np.asarray(a, dtype=np.float64) for a in (self.weights_, self.means_, self.covariances_)
        )
        counts = rng.multinomial(n_samples, weights)
        d = means.shape[1]
        if self.covariance_type == "full":
            xs = [rng.multivariate_normal(m, c, int(n)) for m, c, n in zip(means, covs, counts, strict=True)]
        elif self.covariance_type == "tied":
            xs = [rng.multivariate_normal(m, covs, int(n)) for m, n in zip(means, counts, strict=True)]
        else:
            cov = covs if self.covariance_type == "diag" else covs[:, None] * np.ones(d)
            xs = [m + rng.standard_normal((int(n), d)) * np.sqrt(c) for m, c, n in zip(means, cov, counts, strict=True)]
        labels = np.concatenate([np.full(n, j, dtype=int) for j, n in enumerate(counts)])
        return np.vstack(xs), labels

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to ``path``: ``.npz`` or ``.safetensors``, no pickle (``mixture/_io.py``)."""
        from implicit_em.mixture import _io

        return _io.save(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "GaussianMixture":
        """A fitted model read from a file :meth:`save` wrote; its scores equal the saved model's bitwise."""
        from implicit_em.mixture import _io

        return _io.load(cls, path)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = getattr(self, "missing", "raise") == "marginalize"
        return tags


def _sklearn_tied_init(x: Tensor, means: Tensor, nk: Tensor, reg_covar: float) -> dict[str, Tensor]:
    """sklearn's tied covariance when some rows have no responsibility ("k-means++", "random_from_data"):
    (XᵀX − Σ_j N_j μ_j μ_jᵀ) / Σ_j N_j sums xxᵀ over *all* rows, so it is not the within-cluster scatter; kept
    for identical starts."""
    xd, mu, nk = x.double(), means.double(), nk.double() + 10 * torch.finfo(torch.float64).eps
    cov = (xd.T @ xd - (nk[:, None] * mu).T @ mu) / nk.sum()
    cov = cov + reg_covar * torch.eye(x.shape[1], dtype=cov.dtype, device=cov.device)
    prec_chol = gaussian.precisions_cholesky(cov, "tied", on_singular="ridge")
    return {"covariances": cov.to(means.dtype), "precisions_cholesky": prec_chol.to(means.dtype)}


def _zero_params(k: int, d: int, covariance_type: str, like: Tensor) -> MixtureParams:
    """Zero parameters of the right shapes: what a process receives rank 0's start into."""
    shape = gaussian.parameter_shape(covariance_type, k, d)
    w, mu, cov = (torch.zeros(s, dtype=like.dtype, device=like.device) for s in ((k,), (k, d), shape))
    return MixtureParams(w, mu, cov, cov.clone())


def _warn_not_converged() -> None:
    """scikit-learn's warning for a fit whose best start did not converge (stacklevel: the caller of ``fit``)."""
    warnings.warn(
        "Best performing initialization did not converge. Try different init parameters, or increase "
        "max_iter, tol, or check for degenerate data.",
        ConvergenceWarning,
        stacklevel=4,
    )


def _has_nan(x: Any) -> bool:
    """Whether X (an array or tensor held in memory; never a stream or a memmap) holds a NaN."""
    if isinstance(x, Tensor):
        return bool(torch.isnan(x.detach()).any()) if x.is_floating_point() else False
    if isinstance(x, np.memmap) or _is_batches(x) or issparse(x):
        return False
    try:
        array = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        return False  # not numbers: the usual validation names the problem
    return bool(np.isnan(array).any())


def _is_batches(x: Any) -> bool:
    """An iterable of batches (DataLoader, custom re-iterable, a list or tuple of 2-D arrays or tensors); arrays,
    lists of rows and sparse matrices are not."""
    if issparse(x):
        return False
    if isinstance(x, list | tuple):
        return is_batch_list(x)
    return (
        not isinstance(x, Tensor | np.ndarray | str | bytes) and hasattr(x, "__iter__") and not hasattr(x, "__array__")
    )


def _input_width(x: Any) -> int | None:
    """X's number of features when it can be read without converting X (None for a stream or a ragged list)."""
    if isinstance(x, list | tuple) and is_batch_list(x):
        x = x[0]
    shape = getattr(x, "shape", None)
    if shape is not None:
        return int(shape[1]) if len(shape) == 2 else None
    if isinstance(x, list | tuple) and x and isinstance(x[0], list | tuple | np.ndarray):
        return len(x[0])
    return None


def _out(t: Tensor, as_tensor: bool) -> Any:
    return t if as_tensor else t.cpu().numpy()
