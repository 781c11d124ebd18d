"""Checkpoints of a ``GaussianMixture`` fit: ``GaussianMixture(checkpoint=PATH, checkpoint_every=N)``.

A long fit writes its state to ``PATH`` every ``N`` units of ``max_iter`` (EM iterations for "em", epochs for
"online_em" and "gd"), at a safe point, and also whenever it is interrupted (Ctrl-C) at the point it stopped.
If the process dies (SIGKILL, a crash, a lost machine), calling the same ``fit`` again (same estimator
parameters, same data) finds the file and continues from it; the result equals that of a fit that was never
stopped, bitwise on CPU in float64 and float32 for every fitter (each unit is recomputed from exactly the state
it started from, with the same random numbers).

What a checkpoint holds (a dict of tensors, numbers, strings, lists and dicts, nothing else): the start
(``n_init`` index) in progress and its stage, the fitter's snapshot (parameters, iteration or epoch and step,
online-EM statistics or the gradient model and its optimiser, the torch generator state), the ``history_`` so
far, the best complete start, the numpy ``RandomState`` state, the data's shift and scale, and the *identity*
of the call: every estimator parameter that changes the result, the fitter, and a fingerprint of the data
(its kind, shape, dtype and a hash of up to 1,024 evenly spaced rows; for an iterable of batches, its first
batch). It is written atomically (a temporary file, then :func:`os.replace`), so a kill during a write leaves
the previous checkpoint, and read with ``torch.load(weights_only=True)``, which cannot run code.

A checkpoint whose identity differs from the call's, or a file that cannot be read (empty, truncated, not a
checkpoint), raises ``ValueError`` naming the file and saying to delete it to start over. When ``fit``
completes, the checkpoint is removed: it marks a fit in progress, and the finished fit is in the estimator.
After a failure (an exception, an interrupt) it is kept. Split-and-merge trials are not checkpointed one by
one: a fit resumed during them runs them again from the start, from the same state, with the same result.
``partial_fit`` takes one step per call and does not use the checkpoint.

In a ``torch.distributed`` process group (:class:`GroupCheckpoint`) every process writes its own file, so a fit
over several machines needs no shared file system: process r of W writes ``PATH`` with ``.rank{r}of{W}``
before its last suffix (``fit.ckpt`` → ``fit.rank0of2.ckpt``, ``fit`` → ``fit.rank0of2``; a single process
writes ``PATH`` itself) and keeps its previous write beside it (``fit.rank0of2.ckpt.prev``). Every process holds
the same fit state (the parameters, the online-EM statistics, the gradient model and its optimiser, the epoch
position and the generators: the global batch order comes from the shared seed and the sums are all-reduced)
but its own shard, so each file's identity is its shard's fingerprint plus the rank and the world size, and each
payload carries its write number. After reading its two files, every process takes part in one all-gather of
(what it found, and per file the write number, start, stage, units done and a digest of the fit state): the fit
resumes from the latest write that every process holds with the same digest, which is at most one write back
(processes killed between two processes' writes of the same point: each write first waits for every process to
reach it, one all-reduce of a flag, so no process can be two writes ahead), and starts afresh when no process
has a file (or some hold only the first write). Anything else (a file on some processes only, no write in
common, a file of another call or an unreadable one on any process, files of another world size or a
single-process ``PATH`` beside this process's) raises the same ``ValueError`` on every process, naming the files
and saying to delete them, so that no process raises alone and leaves the others waiting in their next
collective. A single process likewise refuses to start while per-process files of ``PATH`` lie beside it.
"""

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em._runio import load_torch_weights_only, save_torch_atomic
from implicit_em.mixture import _distributed
from implicit_em.mixture._em import FitResult
from implicit_em.mixture._stats import MixtureParams

__all__ = [
    "FORMAT",
    "VERSION",
    "Checkpoint",
    "GroupCheckpoint",
    "Progress",
    "check_options",
    "fit_identity",
    "rank_path",
    "result_from_dict",
    "result_to_dict",
    "rng_from_dict",
    "rng_to_dict",
    "start_identity",
    "state_digest",
]

FORMAT = "implicit_em.mixture.GaussianMixture checkpoint"
VERSION = 1
# never change a result (warm_start does only through the start, which the identity's "start" describes)
_NOT_IDENTITY = ("verbose", "verbose_interval", "checkpoint", "checkpoint_every", "warm_start")
_ROWS = 1024  # rows of the data the fingerprint hashes
_START_OVER = "Delete the file to start this fit over"


def check_options(checkpoint: Any, checkpoint_every: Any) -> Path | None:
    """Check ``checkpoint`` (None or a file path in an existing, writable folder) and ``checkpoint_every`` (an
    int >= 1); return the path."""
    every_ok = isinstance(checkpoint_every, int | np.integer) and not isinstance(checkpoint_every, bool)
    if not every_ok or checkpoint_every < 1:
        raise ValueError(
            f"The 'checkpoint_every' parameter of GaussianMixture must be an int >= 1. Got {checkpoint_every!r}"
        )
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, str | os.PathLike):
        raise TypeError(
            "The 'checkpoint' parameter of GaussianMixture must be None or a file path (str or os.PathLike). "
            f"Got {checkpoint!r}"
        )
    path = Path(checkpoint)
    if path.is_dir():
        raise ValueError(f"The 'checkpoint' parameter of GaussianMixture must be a file path; {path} is a directory")
    if not path.parent.is_dir():
        raise ValueError(
            f"The 'checkpoint' parameter of GaussianMixture names a file in {path.parent}, which does not exist; "
            "create the directory first"
        )
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"The 'checkpoint' file {path} cannot be written: its directory is not writable")
    return path


def fit_identity(params: dict[str, Any], x: Any, batches: bool, start: str) -> dict[str, str]:
    """What makes a checkpoint belong to a call: the estimator parameters that change the result (described as
    strings), the data's fingerprint, and the start (``"init"``, or a hash of the warm-start parameters)."""
    out = {name: _describe(value) for name, value in sorted(params.items()) if name not in _NOT_IDENTITY}
    out.update({f"data {key}": value for key, value in _fingerprint(x, batches).items()})
    out["start"] = start
    return out


def start_identity(*arrays: Any) -> str:
    """The warm start's identity: a hash of the fitted parameters a warm start continues from."""
    return "warm " + _digest([_rows(a, None) for a in arrays])


def _describe(value: Any) -> str:
    if isinstance(value, np.integer | np.floating | np.bool_):
        value = value.item()
    if value is None or isinstance(value, bool | int | float | str | torch.dtype | torch.device):
        return repr(value)
    if isinstance(value, np.random.RandomState | np.random.Generator):
        return f"{type(value).__name__} instance (its state is in the checkpoint)"
    if isinstance(value, np.ndarray | Tensor | list | tuple):
        a = np.asarray(value.detach().cpu() if isinstance(value, Tensor) else value, dtype=np.float64)
        return f"array {a.shape} sha256 {_digest([a])}"
    return f"{type(value).__name__} {value!r}"


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(repr(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _fingerprint(x: Any, batches: bool) -> dict[str, str]:
    """Kind, shape, dtype and a hash of up to ``_ROWS`` evenly spaced rows (an iterable: its first batch)."""
    if batches:
        first = next(iter(x), None)
        if isinstance(first, list | tuple):  # DataLoader over a TensorDataset: [x] or (x, y)
            first = first[0] if first else None
        rows = _rows(first, None) if first is not None else np.zeros((0, 0))
        return {"kind": "iterable of batches", "first batch": f"{rows.shape} sha256 {_digest([rows])}"}
    kind = type(x).__name__
    if not isinstance(x, np.ndarray | Tensor):
        x = np.asarray(x, dtype=np.float64)
    n = int(x.shape[0])
    index = np.unique(np.linspace(0, n - 1, min(n, _ROWS)).astype(np.int64)) if n else np.zeros(0, np.int64)
    rows = _rows(x, index)
    return {"kind": kind, "shape": repr(tuple(int(s) for s in x.shape)), "dtype": str(x.dtype), "rows": _digest([rows])}


def _rows(x: Any, index: np.ndarray | None) -> np.ndarray:
    if isinstance(x, Tensor):
        t = x.detach() if index is None else x.detach()[torch.from_numpy(index).to(x.device)]
        return t.cpu().double().numpy()
    a = np.asarray(x)
    return np.asarray(a if index is None else a[index], dtype=np.float64)


def rng_to_dict(rng: np.random.RandomState) -> dict[str, Any]:
    """A ``RandomState``'s state as a tensor and numbers."""
    name, keys, pos, has_gauss, cached = rng.get_state(legacy=True)
    return {"name": name, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}  # fmt: skip


def rng_from_dict(rng: np.random.RandomState, d: dict[str, Any]) -> None:
    """Set ``rng`` to the state :func:`rng_to_dict` recorded."""
    keys = d["keys"].cpu().numpy().astype(np.uint32)
    rng.set_state((d["name"], keys, d["pos"], d["has_gauss"], d["cached_gaussian"]))


class Checkpoint:
    """The checkpoint file of one call: :meth:`load` (validated against the call's identity), :meth:`due`,
    :meth:`save` and :meth:`remove`."""

    def __init__(self, path: Path, every: int, identity: dict[str, str], device: torch.device) -> None:
        self.path, self.every, self.identity, self.device = path, int(every), identity, device

    def due(self, units: int) -> bool:
        """A periodic checkpoint is due after ``units`` iterations (epochs)."""
        return units % self.every == 0

    def save(self, payload: dict[str, Any]) -> None:
        """Write the payload with the format, version and identity, atomically."""
        save_torch_atomic({"format": FORMAT, "version": VERSION, "identity": self.identity, **payload}, self.path)

    def remove(self) -> None:
        """Delete the checkpoint (and a temporary file a killed write left)."""
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(self.path.suffix + ".tmp").unlink(missing_ok=True)

    def load(self) -> dict[str, Any] | None:
        """The checkpoint's payload, None when there is no file; ValueError when it cannot be read, belongs to
        another call, or per-process files of a process group's fit of this path lie beside it."""
        others = _rank_files(self.path)
        if others:
            raise ValueError(
                f"checkpoint {self.path}: the per-process checkpoints {', '.join(str(p) for p in others)} of a "
                "torch.distributed fit lie beside it; resume them in a process group of that size, or delete them "
                "to start this fit over"
            )
        return self._read(self.path)

    def _read(self, path: Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        payload = load_torch_weights_only(
            path, what="GaussianMixture checkpoint", start_over=f"{_START_OVER}.", map_location=self.device
        )
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError(f"{path} is not a GaussianMixture checkpoint. {_START_OVER} (or pass another path).")
        if payload.get("version") != VERSION:
            raise ValueError(
                f"checkpoint {path} has format version {payload.get('version')!r}, this library writes "
                f"{VERSION}. {_START_OVER}."
            )
        self._check_identity(payload.get("identity"), path)
        return payload

    def _check_identity(self, theirs: Any, path: Path) -> None:
        theirs = theirs if isinstance(theirs, dict) else {}
        differ = [k for k in sorted(set(theirs) | set(self.identity)) if theirs.get(k) != self.identity.get(k)]
        if differ:
            k = differ[0]
            raise ValueError(
                f"checkpoint {path} belongs to another fit: {k} is {theirs.get(k)} in the file but "
                f"{self.identity.get(k)} in this call ({len(differ)} difference(s): {', '.join(differ)}). "
                f"{_START_OVER}, or call fit with the estimator parameters and data it was written for to resume it."
            )


class GroupCheckpoint(Checkpoint):
    """The checkpoint files of one process of a ``torch.distributed`` process group: ``PATH`` with
    ``.rank{r}of{W}`` before its suffix (:func:`rank_path`) and the one before it (``.prev`` appended), each
    payload numbered (``write``: the how-manieth write of this fit), its identity the call's plus the rank and the
    world size. :meth:`load` is collective: every process resumes from the same write, starts afresh, or raises,
    together."""

    def __init__(self, path: Path, every: int, identity: dict[str, str], device: torch.device) -> None:
        self.rank, self.world, self.given, self.writes = _distributed.rank(), _distributed.world_size(), path, 0
        identity = {**identity, "rank": repr(self.rank), "world size": repr(self.world)}
        super().__init__(rank_path(path, self.rank, self.world), every, identity, device)
        self.prev = self.path.with_name(self.path.name + ".prev")

    def save(self, payload: dict[str, Any]) -> None:
        """Wait for every process to reach this write (so that none is ever two writes ahead of another), keep
        the last write as ``.prev`` (a process killed between two processes' writes leaves the others one write
        ahead: they fall back to it), then write the payload, numbered, atomically."""
        _distributed.any_stop(False, self.device)  # a barrier: one all-reduce of a flag
        self.writes += 1
        if self.path.exists():
            os.replace(self.path, self.prev)
        super().save({**payload, "write": self.writes})

    def remove(self) -> None:
        """Delete this process's files (the last, the previous and a temporary one)."""
        super().remove()
        self.prev.unlink(missing_ok=True)

    def load(self) -> dict[str, Any] | None:
        """This process's payload of the latest write every process holds with the same state (digest), None
        when that is the fresh start (no process holds a file, or some hold only the first write); otherwise
        the same ValueError on every process (one all-gather of two rows of six numbers per process)."""
        others = [p for p in _rank_files(self.given) if not p.name.endswith(f"of{self.world}{self.given.suffix}")]
        foreign = [self.given, *others] if self.given.exists() else others  # a single process's, another W's
        payloads: list[dict[str, Any] | None] = [None, None]
        error = None
        try:
            payloads = [self._read(self.path), self._read(self.prev)]
        except ValueError as err:
            error = err
        code = _FOREIGN if foreign else _BAD if error is not None else _OK
        mine = torch.tensor([[code, *_position(p)] for p in payloads], dtype=torch.int64, device=self.device)
        table = _distributed.all_gather_rows(mine).cpu().reshape(self.world, 2, 6).tolist()
        if all(rows[0][0] == _OK for rows in table):
            common = set.intersection(*(_held(rows) for rows in table))
            if common:
                self.writes = max(common)[0]
                if self.writes == 0:
                    return None  # no file anywhere, or the job died around its first write: a fresh fit
                return next(p for p in payloads if p is not None and p["write"] == self.writes)
        raise ValueError(self._disagreement(table, error, foreign))

    def _disagreement(self, table: list[list[list[int]]], error: ValueError | None, foreign: list[Path]) -> str:
        """The error every process raises: what each process found, then this process's own problem."""
        found = "; ".join(f"process {r}: {_describe_found(rows)}" for r, rows in enumerate(table))
        here = f" This process (rank {self.rank}): "
        if error is not None:
            here += str(error)
        elif foreign:
            names = ", ".join(str(p) for p in foreign)
            here += (
                f"checkpoints of another process group or a single process lie beside {self.path}: {names}; "
                "delete them too, or resume them with the number of processes that wrote them."
            )
        else:
            here += f"its files are {self.path} and {self.prev.name}."
        ok = all(rows[0][0] == _OK for rows in table)
        why = "no write that every process holds with the same state" if ok else "a process cannot use its files"
        first, last = (rank_path(self.given, r, self.world).name for r in (0, self.world - 1))
        return (
            f"the checkpoints of this {self.world}-process fit cannot be resumed together ({why}): {found}.{here} "
            f"Delete the per-process files {first} ... {last} (and their .prev) on every machine to start this fit "
            "over"
        )


_OK, _BAD, _FOREIGN = 0, 1, 2  # what a process found: the first column of the agreement table
_STAGES = ("init", "fit", "split_merge")


def rank_path(path: Path, rank: int, world: int) -> Path:
    """Process ``rank`` of ``world``'s file: ``fit.ckpt`` → ``fit.rank0of2.ckpt``, ``fit`` → ``fit.rank0of2``."""
    return path.with_name(f"{path.stem}.rank{rank}of{world}{path.suffix}")


def _rank_files(path: Path) -> list[Path]:
    """The per-process files of ``path`` (:func:`rank_path`, any rank and world size) in its directory."""
    pattern = re.compile(rf"{re.escape(path.stem)}\.rank\d+of\d+{re.escape(path.suffix)}")
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.glob(f"{path.stem}.rank*of*{path.suffix}") if pattern.fullmatch(p.name))


def _position(payload: dict[str, Any] | None) -> list[int]:
    """(write, start, stage index, units done, state digest) of a payload; -1s and 0 for none."""
    if payload is None:
        return [-1, -1, -1, -1, 0]
    run = payload.get("run") or {}
    units = run.get("n_iter", (run.get("position") or {}).get("epoch", -1))
    stage = _STAGES.index(payload["stage"]) if payload.get("stage") in _STAGES else -1
    return [int(payload.get("write", 0)), int(payload["start"]), stage, int(units), state_digest(payload)]


def _held(rows: list[list[int]]) -> set[tuple[int, int]]:
    """The (write, digest) pairs a process holds; with write 0, the fresh start, when it holds no write before
    its first (no file, or only write 1: it had none before that)."""
    held = {(row[1], row[5]) for row in rows if row[1] >= 0}
    return held | {(0, 0)} if {write for write, _ in held} <= {1} else held


def _describe_found(rows: list[list[int]]) -> str:
    """What one process found: its files' writes and points, or why it cannot use them."""
    if rows[0][0] == _BAD:
        return "a file it cannot use"
    if rows[0][0] == _FOREIGN:
        return "files of another world size beside its own"
    held = [row for row in rows if row[1] >= 0]
    if not held:
        return "no file"
    return " and ".join(f"write {row[1]} ({_point(row)}, state digest {row[5]:x})" for row in held)


def _point(row: list[int]) -> str:
    start, stage, units = row[2] + 1, row[3], row[4]
    if stage == 1:
        return f"start {start} after {units} iteration(s) or epoch(s)"
    return f"start {start} {'before its fitter' if stage == 0 else 'before split-and-merge'}"


def state_digest(payload: dict[str, Any] | None) -> int:
    """A 60-bit hash of a payload's fit state (all of it but the identity, which holds the shard's fingerprint,
    and the history, whose records hold each process's own timings): equal on every process of a group at the
    same point. 0 for none."""
    if payload is None:
        return 0
    h = hashlib.sha256()
    _hash_into(h, {k: v for k, v in payload.items() if k not in ("identity", "history", "best_history")})
    return int(h.hexdigest()[:15], 16)


def _hash_into(h: Any, value: Any) -> None:
    if isinstance(value, dict):
        for key in sorted(value, key=repr):
            h.update(repr(key).encode())
            _hash_into(h, value[key])
    elif isinstance(value, list | tuple):
        h.update(f"[{len(value)}".encode())
        for item in value:
            _hash_into(h, item)
    elif isinstance(value, Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    else:
        h.update(repr(value).encode())


def result_to_dict(result: FitResult) -> dict[str, Any]:
    """A fitter's result as tensors and numbers."""
    return {
        "params": list(result.params),
        "n_iter": int(result.n_iter),
        "lower_bound": float(result.lower_bound),
        "converged": bool(result.converged),
        "lower_bounds": [float(b) for b in result.lower_bounds],
    }


def result_from_dict(d: dict[str, Any]) -> FitResult:
    """The inverse of :func:`result_to_dict`."""
    bounds = tuple(float(b) for b in d.get("lower_bounds", ()))
    return FitResult(
        MixtureParams(*d["params"]), int(d["n_iter"]), float(d["lower_bound"]), bool(d["converged"]), False, bounds
    )


@dataclass
class Progress:
    """The state of ``fit``'s loop over its ``n_init`` starts that a checkpoint holds besides the fitter's own
    snapshot: the random state, the data's shift and scale, the torch generator, the start in progress, and the
    best complete start with its history.

    A payload's ``stage`` says where the start ``start`` is: "init" (its initial parameters are still to be
    drawn), "fit" (the fitter is running: ``run`` is its snapshot, ``history`` its records), "split_merge" (the
    fitter is done: ``result``; the split-and-merge trials run from there).
    """

    rng: np.random.RandomState
    shift: Tensor
    scale: float
    generator: torch.Generator | None = None
    start: int = 0
    best: FitResult | None = None
    best_history: list[dict[str, Any]] = field(default_factory=list)

    def payload(self, stage: str, history: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
        """The checkpoint payload at this point (``extra``: ``run``, ``result``, ``online_state``, ...)."""
        return {
            "start": self.start,
            "stage": stage,
            "rng": rng_to_dict(self.rng),
            "shift": self.shift,
            "scale": self.scale,
            "generator": None if self.generator is None else self.generator.get_state(),
            "best": None if self.best is None else result_to_dict(self.best),
            "best_history": self.best_history,
            "history": list(history or []),
            **extra,
        }

    @classmethod
    def restore(cls, payload: dict[str, Any], rng: np.random.RandomState) -> "Progress":
        """The loop's state from a payload; sets ``rng`` to the state it had."""
        rng_from_dict(rng, payload["rng"])
        generator = None
        if payload["generator"] is not None:
            generator = torch.Generator()
            generator.set_state(payload["generator"].cpu())
        best = None if payload["best"] is None else result_from_dict(payload["best"])
        shift = payload["shift"]
        return cls(rng, shift, float(payload["scale"]), generator, int(payload["start"]), best, payload["best_history"])
