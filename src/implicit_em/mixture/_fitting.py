"""The one interface ``GaussianMixture`` drives its three fitters through: fitters, a run's context, history.

``fit`` and ``partial_fit`` build a :class:`~implicit_em.mixture._settings.FitSettings` from the estimator's
parameters, look the fitter up by name in :data:`REGISTRY` once, and call its ``fit`` (with the settings and a
:class:`Run`) or its ``partial_step``. The algorithms stay pure functions of data, parameters and settings in
``_em.py`` (batch EM, §2.3), ``_online_em.py`` (Cappé–Moulines) and ``_gd.py`` (implicit EM, §3.4, §4.1), as
STYLE §3 asks; the classes here hand the settings to them and say what differs between them (progress unit,
default batch size, whether they shuffle, which state ``partial_fit`` continues from, whether split-and-merge
and ``torch.distributed`` apply). Every ``history_`` record is built by :func:`history_record`.
"""

import math
import sys
import time
from dataclasses import replace
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from implicit_em.mixture import _distributed, _missing, _stats
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import Callback, FitResult, SafePoint, em_step_gain, fit_em
from implicit_em.mixture._estep import pass_loglik
from implicit_em.mixture._gd import MIN_STEPS, fit_gd, gd_step, make_state, state_params
from implicit_em.mixture._online_em import fit_online_em, init_state, online_step
from implicit_em.mixture._settings import CHUNK, DEFAULT_BATCH_SIZE, FitSettings
from implicit_em.mixture._stats import MixtureParams

__all__ = [
    "CHUNK",
    "FITTERS",
    "REGISTRY",
    "BatchEM",
    "FitSettings",
    "Fitter",
    "GradientDescent",
    "History",
    "OnlineEM",
    "Run",
    "history_record",
]


def history_record(
    epoch: int, loglik: float, seconds: float, usage: Tensor, split_merge: bool = False
) -> dict[str, Any]:
    """One entry of ``history_``: iteration or epoch number, mean train log-likelihood, seconds, component usage
    (K,) as a list; ``"split_merge": True`` marks the EM iterations of split-and-merge trials."""
    record: dict[str, Any] = {
        "epoch": epoch,
        "loglik": loglik,
        "seconds": seconds,
        "usage": usage.double().cpu().numpy().tolist(),
    }
    if split_merge:
        record["split_merge"] = True
    return record


#: In a log (stderr not a terminal), a line at least this often while a fit runs, whatever verbose_interval says.
HEARTBEAT_S = 30.0


class History:
    """The ``history_`` of one start (a list of :func:`history_record` dicts) and what ``verbose`` shows of it.

    ``epoch`` is the fitters' :data:`~implicit_em.mixture._em.Callback`; ``split_merge`` is the callback of the
    split-and-merge EM runs, numbered on from the last record. With ``verbose`` (:meth:`progress`): on a terminal
    a tqdm bar with the current log-likelihood (``verbose=1``); in a log (stderr not a terminal, or
    ``verbose >= 2``, as sklearn's lines) one line at the first iteration, every ``verbose_interval``-th, at least
    every :data:`HEARTBEAT_S` seconds and where the fitter stopped, then the same for the EM iterations of the
    split-and-merge trials: a fit running under ``nohup`` or a scheduler shows it is alive and where it stands.
    """

    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.records: list[dict[str, Any]] = records if records is not None else []
        self._bar: Any = None
        self._lines: tuple[str, int, int] | None = None  # (label, total, interval) while lines are shown
        self._t0 = self._last = 0.0

    def epoch(self, epoch: int, loglik: float, seconds: float, usage: Tensor) -> None:
        self.records.append(history_record(epoch, loglik, seconds, usage))
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loglik=f"{loglik:.5f}")
        self._line(epoch, loglik, "")

    def split_merge(self, epoch: int, loglik: float, seconds: float, usage: Tensor) -> None:
        self.records.append(history_record(len(self.records) + 1, loglik, seconds, usage, split_merge=True))
        self._line(epoch, loglik, "split-and-merge trial, ")

    def _line(self, epoch: int, loglik: float, what: str, force: bool = False) -> None:
        if self._lines is None:
            return
        label, total, interval = self._lines
        now = time.perf_counter()
        if force or epoch == 1 or epoch % interval == 0 or now - self._last >= HEARTBEAT_S:
            self._last = now
            print(f"{label}: {what}{epoch}/{total}, loglik {loglik:.6f}, {now - self._t0:.1f} s", file=sys.stderr,
                  flush=True)  # fmt: skip

    def progress(self, verbose: int, total: int, fitter: str, unit: str, interval: int = 10) -> "History":
        """Show the fit's progress (when verbose) while the ``with`` block runs: a bar or lines (class doc)."""
        if not verbose:
            return self
        if verbose >= 2 or not bool(getattr(sys.stderr, "isatty", lambda: False)()):
            self._lines, self._t0 = (f"GaussianMixture[{fitter}] {unit}", total, max(1, interval)), time.perf_counter()
            self._last = self._t0
        else:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=f"GaussianMixture[{fitter}]", unit=unit)
        return self

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._lines is not None and self.records and exc[0] is None:  # the lines go on for split-and-merge
            last = self.records[-1]
            self._line(int(last["epoch"]), float(last["loglik"]), "stopped at ", force=True)


class Run(NamedTuple):
    """What one run of a fitter needs beyond the data, the start and the settings: the coordinates (``shift``,
    the stochastic fitters' ``scale``), the ``generator`` of the fitters that shuffle, the per-epoch
    ``callback``, and the checkpoint hooks (``resume``, ``on_safe_point``; see :meth:`Fitter.fit`).

    ``lower_bound``: that of the fit a ``warm_start`` refit continues; batch EM compares its first iteration
    with it, as sklearn does (so a refit of a converged fit converges in one iteration). The stochastic fitters
    compare epochs' running means, which the exact lower bound is not, and ignore it.
    """

    shift: Tensor
    scale: float
    generator: torch.Generator
    callback: Callback
    resume: dict[str, Any] | None = None
    on_safe_point: SafePoint | None = None
    lower_bound: float = -math.inf

    def hooks(self) -> dict[str, Any]:
        """The per-epoch callback and the checkpoint hooks, as the algorithms' keyword arguments."""
        return {"callback": self.callback, "resume": self.resume, "on_safe_point": self.on_safe_point}


class Fitter(Protocol):
    """What the estimator needs of a fitter. ``state`` is what ``partial_fit`` continues from, kept by the
    estimator in the attribute named ``state_attr`` (a fit that returns None leaves it as it was)."""

    unit: str  #: what ``max_iter`` counts, for the progress bar: "iter" or "epoch"
    default_batch_size: int
    shuffles: bool  #: draws a torch generator seed from ``random_state`` (batch EM draws nothing sklearn doesn't)
    state_attr: str
    split_merge: bool  #: split-and-merge moves may follow a converged fit
    distributed: bool  #: runs over a ``torch.distributed`` process group

    def fit(self, data: DataSource, params: MixtureParams, settings: FitSettings, run: Run) -> tuple[FitResult, Any]:
        """Fit from ``params``; returns the result and the state ``partial_fit`` would continue from.

        ``run.on_safe_point(units, snapshot)`` is called after every iteration (epoch) that did not converge,
        where ``snapshot()`` is the fitter's resumable state; ``run.resume`` continues from such a snapshot (or
        from the one a :class:`~implicit_em.mixture._interrupt.FitInterrupted` carries), bitwise as if never
        stopped.
        """
        ...

    def partial_step(
        self,
        state: Any,
        x: Tensor,
        params: MixtureParams,
        settings: FitSettings,
        *,
        shift: Tensor,
        scale: float,
        weights: Tensor | None = None,
    ) -> tuple[Any, MixtureParams, float]:
        """One step on the batch x (state None: start one from ``params``), its rows counted ``weights`` times
        when given (the EM fitters); returns the new state, the new parameters and the batch's mean
        log-likelihood."""
        ...


class _OnlineSteps:
    """``partial_fit`` of both EM fitters: a step of online EM on the batch."""

    state_attr = "_online_state"
    split_merge = True
    distributed = True

    def partial_step(
        self,
        state: Any,
        x: Tensor,
        params: MixtureParams,
        settings: FitSettings,
        *,
        shift: Tensor,
        scale: float,
        weights: Tensor | None = None,
    ) -> tuple[Any, MixtureParams, float]:
        state = state if state is not None else init_state(params, settings.covariance_type, shift)
        state, new, loglik = online_step(
            state,
            x,
            params,
            covariance_type=settings.covariance_type,
            reg_covar=settings.reg_covar,
            shift=shift,
            compute_dtype=x.dtype,
            weights=weights,
            missing=True,  # a NaN reached here only if the estimator's missing="marginalize" let it
        )
        return state, new, float(loglik) / (x.shape[0] if weights is None else float(weights.sum()))


class BatchEM(_OnlineSteps):
    """Batch EM (:func:`~implicit_em.mixture._em.fit_em`); ``partial_fit`` takes online-EM steps."""

    unit = "iter"
    default_batch_size = DEFAULT_BATCH_SIZE["em"]
    shuffles = False

    def fit(self, data: DataSource, params: MixtureParams, settings: FitSettings, run: Run) -> tuple[FitResult, Any]:
        return fit_em(data, params, settings, shift=run.shift, lower_bound=run.lower_bound, **run.hooks()), None


class OnlineEM(_OnlineSteps):
    """Online EM on mini-batches, then one exact EM iteration
    (:func:`~implicit_em.mixture._online_em.fit_online_em`)."""

    unit = "epoch"
    default_batch_size = DEFAULT_BATCH_SIZE["online_em"]
    shuffles = True

    def fit(self, data: DataSource, params: MixtureParams, settings: FitSettings, run: Run) -> tuple[FitResult, Any]:
        return fit_online_em(data, params, settings, shift=run.shift, generator=run.generator, **run.hooks())


class GradientDescent:
    """Mini-batch gradient descent on the exact NLL (:func:`~implicit_em.mixture._gd.fit_gd`), whose lower bound
    becomes an exact pass over the data afterwards (with the volume term; without it the objective is kept)."""

    unit = "epoch"
    default_batch_size = DEFAULT_BATCH_SIZE["gd"]
    shuffles = True
    state_attr = "_gd_state"
    split_merge = False
    distributed = True
    #: the estimator's schedule: epochs of at least MIN_STEPS steps, Adam in whitened coordinates,
    #: the last epoch's mean iterate (and reg_covar's penalty, EM's fixed points), one learning-rate halving
    #: before the plateau that stops the fit (the epoch's mean iterate already sits at the centre of the noise
    #: ball the further halvings shrank: at N = 1e6 three halvings took 11 epochs and one takes 7, for 5e-5
    #: nats of held-out log-likelihood; docs/mixture.md), and a certified stop: that plateau ends the fit only when
    #: one exact EM step from its end gains less than ``tol`` (else the learning rate is restored and it goes
    #: on; ``certificates_``); ``{}`` gives ``fit_gd``'s own defaults, the schedule
    #: before it (one pass per epoch, one scalar scale, the last iterate, no reg_covar, three halvings), which
    #: the golden fitter tests and ``benchmarks/gd_convergence.py --old`` run
    schedule: dict[str, Any] = {  # noqa: RUF012
        "min_steps": MIN_STEPS,
        "per_feature_scale": True,
        "average": True,
        "lr_halvings": 1,
        "certify": True,
    }

    def _settings(self, settings: FitSettings) -> FitSettings:
        """The settings gd runs with: reg_covar's penalty is the schedule's (the one before it had none)."""
        return settings if self.schedule else replace(settings, reg_covar=0.0)

    def fit(self, data: DataSource, params: MixtureParams, settings: FitSettings, run: Run) -> tuple[FitResult, Any]:
        schedule = dict(self.schedule)
        certify = None
        if schedule.pop("certify", False) and settings.volume:  # the distance-only objective has no EM to certify

            def certify(params: MixtureParams) -> tuple[float, float]:
                em_settings = replace(settings, batch_size=CHUNK)
                return em_step_gain(data, params, em_settings, run.shift)

        result, state = fit_gd(
            data,
            params,
            self._settings(settings),
            shift=run.shift,
            scale=run.scale,
            generator=run.generator,
            **run.hooks(),
            **schedule,
            certify=certify,
        )
        if not settings.volume:
            return result, state
        exact = _mean_loglik(data, result.params, settings.covariance_type, run.shift)
        return result._replace(lower_bound=exact), state

    def partial_step(
        self,
        state: Any,
        x: Tensor,
        params: MixtureParams,
        settings: FitSettings,
        *,
        shift: Tensor,
        scale: float,
        weights: Tensor | None = None,
    ) -> tuple[Any, MixtureParams, float]:
        if state is None:
            state = make_state(
                params, settings.covariance_type, shift, scale, settings.learning_rate, settings.optimizer
            )
        coords = state.scale if state.scale is not None else scale  # the coordinates the state steps in
        reg_covar = self._settings(settings).reg_covar  # a NaN reached here only if missing="marginalize" let it
        loglik = gd_step(state, x, shift, coords, settings.volume, reg_covar, weights=weights, missing=True)
        return state, state_params(state, settings.covariance_type, shift, coords), loglik


REGISTRY: dict[str, Fitter] = {"em": BatchEM(), "online_em": OnlineEM(), "gd": GradientDescent()}
FITTERS = tuple(REGISTRY)


def _mean_loglik(data: DataSource, params: MixtureParams, covariance_type: str, shift: Tensor) -> float:
    """The exact mean log-likelihood of the data, one chunked pass (``_estep.pass_loglik``; over every shard in
    a process group)."""
    a = _stats.score_matrix(params, covariance_type, shift).to(data.dtype)
    if data.missing:
        total, n = _missing.pass_loglik(data.weighted_batches(CHUNK), a, params, covariance_type, shift)
    else:
        total, n = pass_loglik(data.weighted_batches(CHUNK), a, shift, lookahead=data.kind != "iterable")
    if data.layout is not None:  # a process group: the sums over every process's shard
        sums = _distributed.all_reduce_sum(torch.tensor([total, float(n)], dtype=torch.float64, device=a.device))
        total, n = float(sums[0]), float(sums[1])
    return total / n if n > 0 else total
