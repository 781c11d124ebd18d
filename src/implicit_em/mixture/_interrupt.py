"""Ctrl-C during a fit: held to the next safe point, then raised to the caller with the last complete state.

A fit that is interrupted must neither lose what it computed nor go on as if nothing happened. Inside
:func:`deferred` a SIGINT only sets a flag (Python's default handler would raise ``KeyboardInterrupt`` between any
two bytecodes, for instance halfway through an optimiser step that updates parameters in place). The fitters call
:func:`check` at their safe points, where every piece of their state belongs to one complete unit of work:

- batch EM between the chunks of a pass (the pass is abandoned; the parameters are those of the last complete
  iteration, which the pass had not changed) and between iterations;
- online EM and gradient descent after every mini-batch step, and between epochs.

:func:`check` raises ``KeyboardInterrupt``; the fitter turns it into :class:`FitInterrupted`, a
``KeyboardInterrupt`` that carries the last complete result, so callers that do not know about it (the audit's
experiments) still stop, and ``GaussianMixture`` keeps that result as its fitted state before re-raising. A
``KeyboardInterrupt`` raised by other code (a data iterable, a callback, a custom signal handler) takes the same
path from wherever it was raised. A signal that arrives after the last safe point is raised when the outermost
:func:`deferred` block ends, so an interrupt is never swallowed.

In a ``torch.distributed`` process group a SIGINT reaches one process, and a process that stopped alone would
leave the others waiting in a collective. There the flag is not acted on locally: batch EM adds it to the
all-reduce of its statistics (:func:`implicit_em.mixture._distributed.all_reduce_pass`), so every process learns
of it in the same iteration and all of them stop there, with the same parameters, and raise.

The handler is installed only in the main thread and only over Python's default handler: a program with its
own SIGINT handler (or one that ignores SIGINT) keeps it.
"""

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FitInterrupted", "check", "clear", "deferred", "requested"]


class FitInterrupted(KeyboardInterrupt):
    """A fit stopped by an interrupt at a safe point.

    ``result`` is the last complete :class:`~implicit_em.mixture._em.FitResult` (its ``interrupted`` is True),
    ``state`` what ``partial_fit`` would continue from (the fitter's state, or None), ``snapshot`` the fitter's
    resumable state at that point (the dict a checkpoint stores; None where the fitter cannot resume from it).
    """

    def __init__(self, result: Any, state: Any = None, snapshot: dict[str, Any] | None = None) -> None:
        super().__init__("fit interrupted")
        self.result = result
        self.state = state
        self.snapshot = snapshot


class _Flag:
    depth = 0  # nesting of deferred() blocks in the main thread
    pending = False  # a SIGINT arrived and no safe point has acted on it yet
    previous: Any = None  # the handler to restore (None: ours is not installed)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _handler(signum: int, frame: Any) -> None:
    _Flag.pending = True


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT until the next safe point inside the block (nested blocks share the outermost one).

    On leaving the outermost block the previous handler is restored; a signal still pending then raises
    ``KeyboardInterrupt`` (unless one is already on its way out).
    """
    if not _main_thread():
        yield
        return
    outermost = _Flag.depth == 0
    if outermost:
        _Flag.pending = False
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            _Flag.previous = signal.signal(signal.SIGINT, _handler)
    _Flag.depth += 1
    interrupted = False
    try:
        yield
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        _Flag.depth -= 1
        if outermost:
            if _Flag.previous is not None:
                signal.signal(signal.SIGINT, _Flag.previous)  # restored first: a later signal raises at once
                _Flag.previous = None
            pending, _Flag.pending = _Flag.pending, False
            if pending and not interrupted:
                raise KeyboardInterrupt  # arrived after the last safe point: not swallowed


def requested() -> bool:
    """True when a SIGINT is waiting for a safe point (in the main thread's fit)."""
    return _main_thread() and _Flag.pending


def clear() -> None:
    """Mark the pending SIGINT as acted on."""
    if _main_thread():
        _Flag.pending = False


def check() -> None:
    """A safe point: raise ``KeyboardInterrupt`` if a SIGINT is waiting (and mark it acted on)."""
    if requested():
        clear()
        raise KeyboardInterrupt
