"""Run I/O shared by the claims audit (``experiments/runner.py``) and the wind tunnel (``windtunnel/train.py``).

A low-level module: it imports only the standard library and torch, never the rest of the package, so both
layers can use it without importing each other.

- atomic writes: :func:`write_text_atomic`, :func:`write_bytes_atomic`, :func:`write_json_atomic`,
  :func:`save_torch_atomic` write a
  temporary file next to the target and :func:`os.replace` it, so a reader (or a killed run) never sees half a
  file;
- what a run records about where it ran: :func:`package_version`, :func:`versions`, :func:`environment`;
- run control: :func:`torch_threads` (torch's intra-op threads inside a block), :class:`DeferSignals`
  (SIGINT and SIGTERM held until a step ends) and :class:`NoteInterrupts` (SIGINT and SIGTERM raise
  KeyboardInterrupt and are remembered, so code that swallows the exception cannot hide them).
"""

import importlib.metadata
import json
import os
import pickle
import platform
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "DeferSignals",
    "NoteInterrupts",
    "environment",
    "load_torch_weights_only",
    "package_version",
    "save_torch_atomic",
    "temporary_path",
    "torch_threads",
    "versions",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]

# ---------------------------------------------------------------------------------------------- atomic writes


def temporary_path(path: Path) -> Path:
    """``name.ext`` -> ``name.ext.tmp``, in the same folder (so :func:`os.replace` stays on one file system): where
    the atomic writes stage a file, and where a reader may find the last write if it was cut short."""
    return path.with_suffix(path.suffix + ".tmp")


_tmp_path = temporary_path


def _open_fresh(tmp: Path, binary: bool = False) -> IO[Any]:
    """Open ``tmp`` as a new file (UTF-8 text or binary): a leftover, or a symlink planted there, is removed first
    and never followed."""
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    return os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")


@contextmanager
def _staged(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """A fresh temporary file next to ``path``, moved onto ``path`` with :func:`os.replace` when the block ends.

    ``path`` being a directory is refused before anything is written, and if writing or the move fails the
    temporary file is removed, so a failed write leaves nothing behind (the error still reaches the caller)."""
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(f"{path} is a directory, not a file name")
    tmp = _tmp_path(path)
    try:
        with _open_fresh(tmp, binary=binary) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and :func:`os.replace`. A symlink at ``path`` is
    replaced by the file, not followed, so a run folder from elsewhere cannot point a write outside itself."""
    with _staged(path) as f:
        f.write(text)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and :func:`os.replace`, as :func:`write_text_atomic`."""
    with _staged(path, binary=True) as f:
        f.write(data)


def write_json_atomic(obj: Any, path: Path, indent: int = 2) -> None:
    """``json.dumps(obj, indent=indent)`` written atomically to ``path`` (no trailing newline)."""
    write_text_atomic(path, json.dumps(obj, indent=indent))


def save_torch_atomic(obj: Any, path: Path) -> None:
    """:func:`torch.save` to a temporary file, then :func:`os.replace` onto ``path``."""
    with _staged(path, binary=True) as f:
        torch.save(obj, f)


# ---------------------------------------------------------------------------------------------- environment


def load_torch_weights_only(
    path: Path, *, what: str, start_over: str, error: type[Exception] = ValueError, map_location: Any = "cpu"
) -> Any:
    """Read ``path`` with ``torch.load(weights_only=True)``, which imports and calls nothing from the file.

    A file that would import or call a Python object when unpickled is refused, naming the object (nothing was
    executed); an empty, truncated or unreadable one is named with its size. Both raise ``error`` with ``what``
    (e.g. "wind-tunnel checkpoint") and end with ``start_over``; neither repeats torch's advice to load the file
    with ``weights_only=False``, which would run a crafted file's code.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols: the errors below say enough
            return torch.load(path, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as e:
        named = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if named:  # the weights-only unpickler stopped before importing or calling anything
            raise error(
                f"the {what} {path} is refused: it would import and call {named.group(1)} when unpickled, and a "
                f"{what} holds only tensors and plain values (a crafted file can run code); nothing was executed. "
                f"If you did not write it, {start_over}"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(e))
        kind, message = "UnpicklingError", detail.group(1) if detail else "not a pickle"
    except Exception as e:  # empty (EOFError), truncated (RuntimeError from the zip reader), unreadable (OSError)
        kind, message = type(e).__name__, (str(e).strip().splitlines() or ["no data"])[0]
    size = path.stat().st_size if path.is_file() else 0
    raise error(
        f"the {what} {path} cannot be read ({size} bytes; {kind}: {message[:200]}): it is empty, truncated or not "
        f"a {what}. {start_over}"
    )


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name`` from its metadata (nothing imported), None if absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_version() -> str:
    """The installed version of implicit-em, read from its metadata (without importing the package)."""
    return distribution_version("implicit-em") or "unknown"  # "unknown": a source tree that was never installed


def versions() -> dict[str, str]:
    """Python, torch and implicit-em versions (the wind tunnel's ``metrics.json`` records these)."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "implicit_em": package_version(),
    }


def environment() -> dict[str, Any]:
    """Versions, platform, CPU count, torch threads, load average and date (the audit's ``results.json``)."""
    return {
        "implicit_em": package_version(),
        "torch": torch.__version__,
        "numpy": distribution_version("numpy"),
        "scikit-learn": distribution_version("scikit-learn"),
        "transformers": distribution_version("transformers"),  # None when not installed
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


# ---------------------------------------------------------------------------------------------- run control


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block (``None``: left as they are) and restored after it.

    Small runs use one thread: a second thread only spin-waits when another process holds a core (57–100×
    slower, measured). BLAS threads are not touched, so numpy and scikit-learn results do not change.
    """
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class DeferSignals:
    """Hold SIGINT and SIGTERM until the end of the current step, so a checkpoint is always at a step boundary.

    Inside the block a signal only sets :attr:`received`; the loop checks it, saves, and then ends the run.
    Without this, Ctrl-C between drawing a batch and the optimiser step would save a data-generator state that
    no longer matches the model, and the resumed run would differ from an uninterrupted one. Outside the main
    thread (where handlers cannot be installed) it does nothing.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "DeferSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class NoteInterrupts:
    """Inside the block SIGINT and SIGTERM raise KeyboardInterrupt, as Python's default does for SIGINT, and are
    remembered in :attr:`received` (the first signal's number), so the caller knows of the interrupt even when the
    code it ran swallowed the KeyboardInterrupt (a library's ``except BaseException``) or turned it into another
    exception. While :attr:`hold` is true a signal is only remembered: the caller sets it to save its state
    without being interrupted again. The previous handlers are restored on exit. Outside the main thread (where
    handlers cannot be installed) it installs nothing and ``received`` stays None.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.hold = False
        self._old: dict[int, Any] = {}

    @property
    def name(self) -> str | None:
        """The received signal's name (``"SIGINT"``, ``"SIGTERM"``), None if none arrived."""
        return None if self.received is None else signal.Signals(self.received).name

    def __enter__(self) -> "NoteInterrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum
        if not self.hold:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._old.clear()
