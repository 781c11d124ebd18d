"""``GaussianMixture.fit``'s loop over its ``n_init`` starts: resumable from a checkpoint, stopped by Ctrl-C.

Each start draws its initial parameters (sklearn's ``_initialize``, on the estimator), runs the fitter (which
calls back at every safe point, where :class:`Starts` writes the periodic checkpoint) and, for the EM fitters
once converged, the split-and-merge trials; the best start is kept. What the loop carries between starts is a
:class:`~implicit_em.mixture._checkpoint.Progress`; a checkpoint payload says which start it was in and at what
stage, so :meth:`Starts.run` can take up any start where it stopped. An interrupt
(:class:`~implicit_em.mixture._interrupt.FitInterrupted`) makes the last complete state the fitted state,
writes a checkpoint of it, and propagates.
"""

import math
from collections.abc import Callable
from typing import Any

import torch

from implicit_em.mixture import _checkpoint, _distributed
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import FitResult
from implicit_em.mixture._fitting import Fitter, History, Run
from implicit_em.mixture._interrupt import FitInterrupted
from implicit_em.mixture._online_em import OnlineState
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._stats import MixtureParams, Summary

__all__ = ["Starts"]


class Starts:
    """The starts of one ``fit`` of ``estimator`` (a ``GaussianMixture``) on ``data``."""

    def __init__(
        self,
        estimator: Any,
        fitter: Fitter,
        settings: FitSettings,
        data: DataSource,
        progress: _checkpoint.Progress,
        ckpt: _checkpoint.Checkpoint | None,
        do_init: bool,
    ) -> None:
        self.est, self.fitter, self.settings, self.data = estimator, fitter, settings, data
        self.progress, self.ckpt, self.do_init = progress, ckpt, do_init

    def run(self, n_starts: int, saved: dict[str, Any] | None) -> tuple[FitResult, list[dict[str, Any]]]:
        """The best of the starts from ``progress.start`` on (the first one from ``saved``, a checkpoint
        payload, when given) and its history."""
        progress = self.progress
        for _ in range(progress.start, n_starts):
            result, records = self.one(saved)
            saved = None
            if progress.best is None or result.lower_bound > progress.best.lower_bound:
                progress.best, progress.best_history = result, records
            progress.start += 1
            if self.ckpt is not None and progress.start < n_starts:
                self.ckpt.save(self.payload("init"))
        assert progress.best is not None
        return progress.best, progress.best_history

    def one(self, saved: dict[str, Any] | None) -> tuple[FitResult, list[dict[str, Any]]]:
        """One start (initial parameters, the fitter, split-and-merge), or its rest from the payload ``saved``."""
        stage = saved["stage"] if saved is not None else "init"
        history = History(list(saved["history"]) if saved is not None else None)
        try:
            if stage == "split_merge":
                assert saved is not None
                result = _checkpoint.result_from_dict(saved["result"])
                if saved.get("online_state") is not None:
                    state = saved["online_state"]
                    self.est._online_state = OnlineState(Summary(*state["stats"]), int(state["step"]))
            else:
                resume = saved["run"] if saved is not None and stage == "fit" else None
                params = MixtureParams(*resume["params"]) if resume is not None else self.initial_params()
                result = self.fit(params, history, resume)
            # split-and-merge proposes its moves from a sample of complete rows: not on data with missing values
            if self.settings.split_merge > 0 and self.fitter.split_merge and result.converged and not self.data.missing:
                if self.ckpt is not None:
                    self.ckpt.save(self.payload("split_merge", history, result=_checkpoint.result_to_dict(result)))
                progress = self.progress
                result = self.est._split_merge(self.settings, self.data, result, progress.rng, progress.shift, history)
        except FitInterrupted as stop:
            if self.ckpt is not None and stop.snapshot is not None:
                self.ckpt.save(self.payload("fit", history, run=stop.snapshot))
            if stop.state is not None:
                setattr(self.est, self.fitter.state_attr, stop.state)
            kept = stop.result if stop.result.lower_bounds else _with_lower_bounds(stop.result, history)
            self.est._keep(kept, history.records, self.data.dtype)
            raise
        return result, history.records

    def initial_params(self) -> MixtureParams:
        """A start's initial parameters (in a process group, rank 0's from the global sample, on every process);
        the first start also seeds the generator of the fitters that shuffle, after its draws, so "em" draws
        exactly what sklearn draws (in a process group every process draws the same seed)."""
        est, data, rng, shift = self.est, self.data, self.progress.rng, self.progress.shift
        # in a process group every process takes part: the global sample is gathered, rank 0's start broadcast
        params = est._initial_params(data, rng, shift) if self.do_init else est._params(data.dtype, data.device)
        if self.progress.generator is None:
            seed = int(rng.randint(2**31 - 1)) if self.fitter.shuffles else 0
            self.progress.generator = torch.Generator().manual_seed(seed)
        return params

    def fit(self, params: MixtureParams, history: History, resume: dict[str, Any] | None) -> FitResult:
        """The fitter from ``params`` (or from its snapshot ``resume``), with a checkpoint at its safe points."""
        settings, fitter, progress, ckpt = self.settings, self.fitter, self.progress, self.ckpt
        hook = None
        if ckpt is not None:

            def hook(units: int, snapshot: Callable[[], dict[str, Any]]) -> None:
                if ckpt.due(units):
                    ckpt.save(self.payload("fit", history, run=snapshot()))

        assert progress.generator is not None
        verbose = settings.verbose if _distributed.rank() == 0 else 0
        with history.progress(verbose, settings.max_iter, settings.fitter, fitter.unit, settings.verbose_interval):
            run = Run(
                progress.shift,
                progress.scale,
                progress.generator,
                history.epoch,
                resume,
                hook,
                -math.inf if self.do_init else float(self.est.lower_bound_),  # sklearn's warm start
            )
            result, state = fitter.fit(self.data, params, settings, run)
        if state is not None:
            setattr(self.est, fitter.state_attr, state)
        return _with_lower_bounds(result, history)

    def payload(self, stage: str, history: History | None = None, **extra: Any) -> dict[str, Any]:
        """The checkpoint payload now: the progress, the estimator's ``n_split_merge_accepted_`` and, at the
        split-and-merge stage, the online-EM state ``partial_fit`` would continue from."""
        accepted = getattr(self.est, "n_split_merge_accepted_", None)
        state = getattr(self.est, self.fitter.state_attr, None) if stage == "split_merge" else None
        online = {"stats": list(state.stats), "step": state.step} if isinstance(state, OnlineState) else None
        records = history.records if history is not None else None
        return self.progress.payload(stage, records, n_split_merge_accepted=accepted, online_state=online, **extra)


def _with_lower_bounds(result: FitResult, history: History) -> FitResult:
    """``result`` with the lower bounds of its ``n_iter`` units: the log-likelihood of the start's first
    ``n_iter`` history records (the fitter's own; online EM's exact iteration and split-and-merge trials come
    after them). For "em" each is the mean log-likelihood before that iteration's M-step, as sklearn's
    ``lower_bounds_``; for "online_em" and "gd" the epoch's running mean, which the stopping rule compares."""
    records = history.records[: result.n_iter]
    return result._replace(lower_bounds=tuple(float(h["loglik"]) for h in records))
