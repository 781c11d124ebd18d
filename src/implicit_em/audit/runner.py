"""Run the claims audit into a folder: ``results.json`` (rewritten after every experiment), figures, and
``report.html``.

``results.json`` records where the results came from: ``provenance`` (the package version, the git commit of its
sources and whether they were dirty, the command line), ``environment`` (versions of torch, numpy, scikit-learn,
transformers and python, the platform, torch's threads), and per experiment its resolved config with its hash,
the hash of the code it ran (see :mod:`implicit_em.audit.provenance`), and the commit and library versions
it ran with.

A run can be interrupted (Ctrl-C, SIGTERM) without losing the experiments already finished, and a second call with
the same folder, size and seed resumes: an experiment is kept only if its config hash, code hash and library
versions match the stored ones; otherwise it is rerun with a line saying why (``force=True`` reruns all). So results
of different code are never mixed without a record of it.

Runs never destroy each other: a folder holding a run of another size or seed is refused
(:class:`RunFolderError`; with ``force=True`` that run is moved to ``previous/`` in the folder and a new one
starts), and a second audit into a folder another is writing is refused (an ``flock`` on ``.audit.lock``, which a
killed run cannot leave held).

With ``jobs`` > 1 the experiments that need running go to that many worker processes (started by ``spawn``, so none
inherits the runner's threads; each runs ``threads`` torch threads, default 1 at quick size), in two lanes: one
worker takes the slowest left (by the last run in this folder, in a fresh folder the quick audit's known seconds,
``_QUICK_SECONDS``), the others the fastest left, so the first verdict comes within seconds and experiments that
share a testbed run one after another; ``results.json`` is rewritten after each one finishes and lists them in
registry order. An experiment's numbers do not depend on the process it ran in (each seeds itself from its config): a
run with ``jobs=2`` records what ``jobs=1`` records. The workers ignore SIGINT; the runner, on an interrupt, saves
what finished, stops the workers and raises as below.

An interrupted experiment is never recorded, neither as a result nor as ERROR. The runner notes SIGINT and SIGTERM
itself while the audit runs (:class:`~implicit_em._runio.NoteInterrupts`), because code inside an experiment may
swallow the KeyboardInterrupt or turn it into another exception and then finish with other numbers: whatever the
experiment then returns or raises is dropped, the experiments finished before it are saved, and
:func:`run_audit` raises KeyboardInterrupt. A ``results.json`` that cannot be read is recovered from the atomic
write's ``results.json.tmp`` when that is a complete results file; otherwise :func:`run_audit` raises
:class:`~implicit_em.report.ResultsError` saying what is wrong and how to start over (``force=True``).
"""

import json
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from implicit_em._runio import NoteInterrupts, temporary_path
from implicit_em._runio import environment as _environment
from implicit_em._runio import write_text_atomic as _write_atomic
from implicit_em.audit import provenance as _provenance
from implicit_em.audit.core import Context, Experiment, Result, torch_threads
from implicit_em.audit.metrics import info as metric_info
from implicit_em.audit.summaries import finished_line
from implicit_em.report._results import ResultsError, read_results

__all__ = ["RunFolderError", "available_cpus", "default_out", "run_audit", "select"]


class RunFolderError(ValueError):
    """A run folder that this run may not write: it holds a run of another size or seed, or another audit is
    writing it. The message names the way out (another folder, or ``force``)."""


def default_out(quick: bool, seed: int) -> Path:
    """The run folder of a run with no ``--out``: ``runs/audit-<size>-seed<seed>``, so runs of different sizes or
    seeds never share one."""
    return Path("runs") / f"audit-{'quick' if quick else 'full'}-seed{seed}"


# library versions an experiment's result depends on: a change reruns it on resume
_VERSION_KEYS = ("torch", "numpy", "scikit-learn", "transformers", "python")


# seconds of each quick experiment on one core of a 2-core machine (quick audit, seed 0, two workers): where a
# fresh folder has no earlier run to time them by, the parallel run orders them by these. Only the order in which
# workers take experiments depends on it.
_QUICK_SECONDS = {
    "advantage_ablation": 191.4,
    "sticky_manifold": 450.0,  # with the measures' validation (one extra run to checkpoints and a control)
    "specialisation": 55.4,
    "two_timescale": 38.1,
    "bayes_necessity": 24.3,
    "same_optimum": 22.2,
    "normalisation_as_volume": 18.5,
    "sticky_sculpting": 40.0,  # with sticky_manifold's fits cached (alone it trains them: minutes)
    "normalisation_necessity": 11.7,
    "mixing_weight_escape": 8.7,
    "correntropy_robustness": 8.5,
    "attention_law": 7.0,
    "volume_collapse": 5.6,
    "open_set": 3.9,
    "gd_vs_em_step": 2.6,
    "cross_entropy_regime": 1.6,
    "foundations": 1.3,
    "theorem1": 0.7,
}

# seeds go to numpy, torch and scikit-learn; the last accepts [0, 2**32 - 1]
_MAX_SEED = 2**32 - 1


def select(experiments: Sequence[Experiment[Any]], only: Sequence[str] | None) -> list[Experiment[Any]]:
    """The experiments named in ``only`` (all when None), in registry order.

    Raises:
        TypeError: ``only`` is a string (pass a list of names) or holds something that is not a string.
        ValueError: ``only`` names no experiment (an empty list) or an unknown one.
    """
    if only is None:
        return list(experiments)
    if isinstance(only, str):
        raise TypeError(f"only must be a list of experiment names, got the string {only!r} (use [{only!r}])")
    names = {e.name for e in experiments}
    wrong = [n for n in only if not isinstance(n, str)]
    if wrong:
        raise TypeError(f"only must hold experiment names (strings), got {wrong!r}")
    if not only:
        raise ValueError(f"only names no experiment; known: {sorted(names)} (None runs them all)")
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; known: {sorted(names)}")
    return [e for e in experiments if e.name in only]


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _check_arguments(seed: Any, threads: Any, jobs: Any = 1) -> None:
    """``seed`` an integer in [0, 2**32 - 1]; ``threads`` None or a positive integer; ``jobs`` a positive
    integer."""
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"jobs must be a positive integer, got {type(jobs).__name__} {jobs!r}")
    if jobs < 1:
        raise ValueError(f"jobs must be a positive integer (worker processes), got {jobs}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed must lie in [0, 2**32 - 1], got {seed}")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise TypeError(f"threads must be a positive integer or None, got {type(threads).__name__} {threads!r}")
        if threads < 1:
            raise ValueError(f"threads must be a positive integer (or None for the default), got {threads}")


def _load_state(path: Path, force: bool, progress: bool) -> dict[str, Any]:
    """The stored run in ``path`` ({} if none); recovered from ``results.json.tmp`` if ``path`` is unreadable and
    that is a complete results file; else :class:`ResultsError` (or, with ``force``, a fresh start)."""
    tmp = temporary_path(path)
    if not path.exists() and not tmp.exists():
        return {}
    try:
        return read_results(path)
    except ResultsError as err:
        problem = str(err)
    try:
        state = read_results(tmp)
    except ResultsError:
        pass
    else:
        if progress:
            print(f"{problem}: recovered the run from {tmp}, its last complete write", file=sys.stderr)
        return state
    if not path.exists():  # only a partial .tmp: a first write that was cut short
        return {}
    if force:
        if progress:
            print(f"{problem}: starting over (force)", file=sys.stderr)
        return {}
    hint = "to start over, rerun with --force (force=True), delete the file, or use a fresh --out"
    raise ResultsError(f"{problem}; {hint}")


def run_audit(
    out_dir: str | Path,
    *,
    quick: bool = True,
    only: Sequence[str] | None = None,
    force: bool = False,
    seed: int = 0,
    progress: bool = True,
    threads: int | None = None,
    jobs: int | None = 1,
) -> dict[str, Any]:
    """Run the selected experiments, write ``results.json`` and ``report.html`` in ``out_dir``; return the
    results as a dict.

    ``seed`` goes into every experiment's ``Config``. ``threads``: torch's intra-op threads during the run
    (restored afterwards), in each worker when ``jobs`` > 1. Default 1 for the quick size, whose operations are
    small (with 2 threads on a busy 2-core machine they ran up to 100× slower), and for the full size torch's
    current setting, divided among the workers. ``jobs``: worker processes (module docstring; 1 runs every
    experiment in this process, as before); None: :func:`available_cpus`, the most that helps.

    Raises:
        TypeError: an experiment cannot be sent to a worker (``jobs`` > 1 needs a module-level ``run``).
    """
    import torch

    from implicit_em.audit import EXPERIMENTS

    jobs = available_cpus() if jobs is None else jobs
    _check_arguments(seed, threads, jobs)
    chosen = select(EXPERIMENTS, only)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {str(out)!r} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    with _FolderLock(out):
        path = out / "results.json"
        size = "quick" if quick else "full"
        state = _load_state(path, force, progress)
        if state and (state.get("size"), state.get("seed")) != (size, seed):
            _set_aside(out, state, size, seed, force, progress)
            state = {}
        state = state or {"size": size, "seed": seed, "experiments": {}}
        if jobs > 1 and len(chosen) > 1:
            per_worker = threads or (1 if quick else max(1, torch.get_num_threads() // jobs))
            return _run(out, path, state, chosen, quick, seed, force, progress, _Pool(jobs, per_worker))
        with torch_threads(threads or (1 if quick else torch.get_num_threads())):
            return _run(out, path, state, chosen, quick, seed, force, progress, None)


class _FolderLock:
    """Holds ``<out>/.audit.lock`` (an exclusive ``flock``, released when the process ends however it ends, so a
    lock left by a killed run is never stale) while the run writes the folder; a second audit into it is refused."""

    def __init__(self, out: Path) -> None:
        self.path = out / ".audit.lock"
        self.file: Any = None

    def __enter__(self) -> "_FolderLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no lock
            return self
        self.file = open(self.path, "a+")
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "?"
            self.file.close()
            raise RunFolderError(
                f"another audit (pid {holder}) is writing {self.path.parent}: wait for it to finish, or use another "
                "--out"
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(str(os.getpid()))
        self.file.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()


def _set_aside(out: Path, state: dict[str, Any], size: str, seed: int, force: bool, progress: bool) -> None:
    """A folder holding a run of another size or seed: refused, or with ``force`` that run is moved to
    ``previous/<size>-seed<seed>-<time>/`` in the folder (results, report, figures) and a new run starts."""
    old = f"a {state.get('size')} run with seed {state.get('seed')} ({len(state.get('experiments') or {})} experiments)"
    if not force:
        raise RunFolderError(
            f"{out} holds {old}; this is a {size} run with seed {seed}: use another --out (default "
            f"{default_out(size == 'quick', seed)}), or --force to start a new run there (the old one is kept in "
            f"{out / 'previous'})"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    keep = out / "previous" / f"{state.get('size')}-seed{state.get('seed')}-{stamp}"
    keep.mkdir(parents=True, exist_ok=False)
    for name in ("results.json", "report.html", "figures"):
        if (out / name).exists():
            os.replace(out / name, keep / name)
    if progress:
        print(f"{out} held {old}: kept in {keep}; starting a new {size} run with seed {seed}", file=sys.stderr)


def _provenance_now() -> dict[str, Any]:
    from implicit_em import __version__

    git = _provenance.git_state()
    return {
        "implicit_em": __version__,
        "commit": git["commit"] if git else None,
        "dirty": git["dirty"] if git else None,
        "source": "git" if git else "package metadata",
        "command": list(sys.argv),
    }


def _stale(
    done: dict[str, Any] | None,
    config: dict[str, Any],
    config_hash: str,
    code: dict[str, str],
    versions: dict[str, Any],
) -> str | None:
    """Why a stored record cannot be kept (None when it can)."""
    if done is None:
        return "not run yet"
    if done.get("verdict") == "ERROR":
        return "it ended in ERROR"
    if _provenance.code_hash(code) is None:
        return "its code has no source file to hash"
    if done.get("config_hash") is None or done.get("code_hash") is None:
        return "no config or code hash recorded (an older results.json)"
    if done.get("code_hash_scheme") != _provenance.HASH_SCHEME:
        return f"its code hash is of another scheme ({done.get('code_hash_scheme') or 'raw file bytes'})"
    if done["config_hash"] != config_hash:
        old = done.get("config", {})
        changed = [f"{k} {old.get(k)!r} → {v!r}" for k, v in config.items() if old.get(k) != v]
        changed += [f"{k} removed" for k in old if k not in config]
        return "its config changed: " + (", ".join(changed) or "hash differs")
    if done["code_hash"] != _provenance.code_hash(code):
        old_files = done.get("code_files", {})
        changed = sorted(m for m in set(old_files) | set(code) if old_files.get(m) != code.get(m))
        return "its code changed: " + (", ".join(changed) or "hash differs")
    if done.get("versions") != versions:
        old_v = done.get("versions") or {}
        changed = [f"{k} {old_v.get(k)} → {v}" for k, v in versions.items() if old_v.get(k) != v]
        return "library versions changed: " + (", ".join(changed) or "differ")
    return None


def _error(err: Exception) -> Result:
    return Result("ERROR", f"{type(err).__name__}: {err}", {}, details=traceback.format_exc())


def _clock(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) of a duration, as tqdm shows elapsed time."""
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}" if hours else f"{minutes}:{sec:02d}"


class _Progress:
    """What the audit tells its user while it runs, on ``file`` (stderr).

    On a terminal: a tqdm bar over the experiments (count, the one running, elapsed time and tqdm's estimate of
    the rest), with the log lines written above it. Elsewhere (a log file, CI): the same log lines, each
    prefixed with the elapsed time of the whole run, since a bar redrawn with carriage returns garbles a log.
    Disabled: nothing at all.
    """

    def __init__(self, total: int, enabled: bool, file: TextIO | None = None) -> None:
        self.file = sys.stderr if file is None else file
        self.enabled = enabled
        self.t0 = time.perf_counter()
        tty = enabled and bool(getattr(self.file, "isatty", lambda: False)())
        self.bar = tqdm(total=total, unit="exp", file=self.file, dynamic_ncols=True, leave=True) if tty else None

    def start(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(name)

    def write(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(line, file=self.file)
        else:
            print(f"[{_clock(time.perf_counter() - self.t0)}] {line}", file=self.file, flush=True)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_description_str("done")
            self.bar.close()
            self.bar = None
        elif self.enabled:
            print(f"[{_clock(time.perf_counter() - self.t0)}] audit finished", file=self.file, flush=True)


@dataclass(frozen=True)
class _Pool:
    """Worker processes for :func:`_run`: how many, and torch threads in each."""

    jobs: int
    threads: int


@dataclass
class _Task:
    """An experiment to run: its config, what the record needs about it, and why it runs."""

    exp: Experiment[Any]
    counter: str
    why: str
    cfg: Any
    config: dict[str, Any]
    config_hash: str
    code: dict[str, str]
    t0: float


def _run(
    out: Path,
    path: Path,
    state: dict[str, Any],
    chosen: list[Experiment[Any]],
    quick: bool,
    seed: int,
    force: bool,
    progress: bool,
    pool: _Pool | None,
) -> dict[str, Any]:
    from implicit_em.audit import EXPERIMENTS
    from implicit_em.report import write_report

    state["provenance"] = _provenance_now()
    state["environment"] = _environment()
    state["registry"] = [e.name for e in EXPERIMENTS]  # the whole audit: the report says when a run holds less
    if pool is not None:
        state["environment"]["audit_jobs"] = {"jobs": pool.jobs, "threads_per_job": pool.threads}
    versions = {k: state["environment"].get(k) for k in _VERSION_KEYS}
    ctx = Context(out)
    shown = _Progress(len(chosen), progress)
    running: list[str] = []
    with NoteInterrupts() as signals:
        try:
            if pool is None:
                _serial(path, state, chosen, ctx, quick, seed, force, versions, shown, signals, running)
            else:
                _parallel(path, state, chosen, ctx, quick, seed, force, versions, shown, signals, running, pool)
        except KeyboardInterrupt:
            signals.hold = True  # a second Ctrl-C does not cut the save short
            _write_atomic(path, json.dumps(state, indent=1))  # the experiments finished before the interrupt
            write_report(out)
            what = signals.name or "KeyboardInterrupt"
            during = f" during {', '.join(running)}" if running else ""
            shown.write(f"    interrupted ({what}){during}: not recorded; run again to resume")
            shown.close()
            raise KeyboardInterrupt(
                f"{what}{during}: the experiments finished before it are saved in {path}; run again to resume"
            ) from None
    shown.close()
    _write_atomic(path, json.dumps(state, indent=1))
    write_report(out)
    return state


def _serial(
    path: Path,
    state: dict[str, Any],
    chosen: list[Experiment[Any]],
    ctx: Context,
    quick: bool,
    seed: int,
    force: bool,
    versions: dict[str, Any],
    shown: _Progress,
    signals: NoteInterrupts,
    running: list[str],
) -> None:
    """Every experiment in this process, in registry order; ``running`` names the one under way."""
    for i, exp in enumerate(chosen, 1):
        running[:] = [exp.name]
        shown.start(exp.name)
        planned = _plan(exp, f"[{i}/{len(chosen)}]", state, quick, seed, force, versions, shown)
        record = None
        if isinstance(planned, _Task):
            shown.write(f"{planned.counter} {exp.name} ... ({planned.why})")
            result, _ = _work(exp, planned.cfg, str(ctx.run_dir))  # as a worker runs it (ERROR for an exception)
            record = _record(planned, result, time.perf_counter() - planned.t0, state, versions)
        elif planned is not None:
            record = planned
        if signals.received is not None:  # it swallowed the KeyboardInterrupt or turned it into an error
            raise KeyboardInterrupt(signals.name)
        if record is not None:
            state["experiments"][exp.name] = record
            _write_atomic(path, json.dumps(state, indent=1))
            shown.write("    " + finished_line(exp.name, record))
        shown.advance()
    running.clear()


def _parallel(
    path: Path,
    state: dict[str, Any],
    chosen: list[Experiment[Any]],
    ctx: Context,
    quick: bool,
    seed: int,
    force: bool,
    versions: dict[str, Any],
    shown: _Progress,
    signals: NoteInterrupts,
    running: list[str],
    pool: _Pool,
) -> None:
    """The experiments that need running in ``pool.jobs`` worker processes, in two lanes (module docstring)."""
    pending = _slowest_first(_tasks(state, chosen, quick, seed, force, versions, shown), state, quick)
    order = [e.name for e in chosen]
    executor = _executor(pool, len(pending))
    in_flight: dict[Future[tuple[Result, float]], _Task] = {}
    lanes: dict[Future[tuple[Result, float]], int] = {}
    try:
        while pending or in_flight:
            while pending and len(in_flight) < pool.jobs:
                # lane 0 takes the slowest left, the other lanes the fastest left: a first verdict within seconds,
                # and the slow experiments (which share testbeds) one after another in one lane
                slow_lane = 0 not in lanes.values()
                task = pending.pop(0 if slow_lane else -1)
                shown.write(f"{task.counter} {task.exp.name} ... ({task.why})")
                future = executor.submit(_work, task.exp, task.cfg, str(ctx.run_dir))
                in_flight[future] = task
                lanes[future] = 0 if slow_lane else 1
                running[:] = [t.exp.name for t in in_flight.values()]
                shown.start(", ".join(running))
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            broken = False
            for fut in sorted(done, key=lambda f: order.index(in_flight[f].exp.name)):
                lanes.pop(fut, None)
                broken = _save(fut, in_flight.pop(fut), path, state, order, versions, shown) or broken
            running[:] = [t.exp.name for t in in_flight.values()]
            if signals.received is not None:
                raise KeyboardInterrupt(signals.name)
            if broken:  # every call of a broken pool fails: a fresh one for the rest
                executor.shutdown(wait=False, cancel_futures=True)
                for task in in_flight.values():
                    pending.insert(0, task)
                in_flight.clear()
                lanes.clear()
                executor = _executor(pool, len(pending))
        running.clear()
    finally:
        processes = getattr(executor, "_processes", None) or {}  # the workers still running an experiment
        for proc in list(processes.values()):
            if proc.is_alive():
                proc.terminate()
        executor.shutdown(wait=True, cancel_futures=True)


def _tasks(
    state: dict[str, Any],
    chosen: list[Experiment[Any]],
    quick: bool,
    seed: int,
    force: bool,
    versions: dict[str, Any],
    shown: _Progress,
) -> list[_Task]:
    """The experiments that need running, each checked to pickle (a worker receives it); the records of configs
    that could not be built go into ``state``."""
    tasks: list[_Task] = []
    for i, exp in enumerate(chosen, 1):
        planned = _plan(exp, f"[{i}/{len(chosen)}]", state, quick, seed, force, versions, shown)
        if isinstance(planned, _Task):
            tasks.append(planned)
            continue
        if planned is not None:  # a config that could not be built: its ERROR record
            state["experiments"][exp.name] = planned
            shown.write(f"    {planned['verdict']}: {planned['summary']}")
        shown.advance()
    for task in tasks:
        try:
            pickle.dumps((task.exp, task.cfg))
        except Exception as err:
            raise TypeError(
                f"{task.exp.name}: jobs > 1 runs each experiment in a worker process, and this one cannot be sent "
                f"to one ({type(err).__name__}: {err}); define its run function at module level, or use jobs=1"
            ) from err
    return tasks


def _save(
    fut: "Future[tuple[Result, float]]",
    task: _Task,
    path: Path,
    state: dict[str, Any],
    order: list[str],
    versions: dict[str, Any],
    shown: _Progress,
) -> bool:
    """Record the finished ``fut`` of ``task`` in ``state`` and ``results.json``; whether its worker pool broke."""
    broken = False
    try:
        result, seconds = fut.result()
    except Exception as err:  # the worker died (killed, out of memory) or its result did not pickle
        broken = "BrokenProcessPool" in type(err).__name__
        result = _error(RuntimeError(f"its worker process failed: {type(err).__name__}: {err}"))
        seconds = time.perf_counter() - task.t0
    record = _record(task, result, seconds, state, versions)
    state["experiments"][task.exp.name] = record
    state["experiments"] = _in_order(state["experiments"], order)
    _write_atomic(path, json.dumps(state, indent=1))
    shown.write("    " + finished_line(task.exp.name, record))
    shown.advance()
    return broken


def _slowest_first(tasks: list[_Task], state: dict[str, Any], quick: bool) -> list[_Task]:
    """``tasks`` by expected seconds, slowest first: the seconds of the run last in this folder, else (quick size)
    the known quick seconds, else 0; ties in registry order (sorted is stable)."""
    last = {name: float(rec.get("seconds") or 0.0) for name, rec in state["experiments"].items()}
    known = _QUICK_SECONDS if quick else {}
    return sorted(tasks, key=lambda t: -last.get(t.exp.name, known.get(t.exp.name, 0.0)))


def _in_order(records: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """``records`` with the names of ``order`` first, in that order (the registry's), then the others."""
    first = {name: records[name] for name in order if name in records}
    return {**first, **{k: v for k, v in records.items() if k not in first}}


def _executor(pool: _Pool, tasks: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=max(1, min(pool.jobs, tasks)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_start,
        initargs=(pool.threads,),
    )


def _worker_start(threads: int) -> None:
    """A worker ignores SIGINT (the runner handles it and stops the workers) and runs ``threads`` torch threads."""
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)


def _work(exp: Experiment[Any], cfg: Any, run_dir: str) -> tuple[Result, float]:
    """Run one experiment in a worker: its result (ERROR for an exception, as in the runner) and its seconds."""
    t0 = time.perf_counter()
    try:
        result = exp.run(cfg, Context(Path(run_dir)))
    except Exception as err:  # recorded, not hidden: the report shows it as ERROR (unless it was an interrupt)
        result = _error(err)
    return result, time.perf_counter() - t0


def _plan(
    exp: Experiment[Any],
    counter: str,
    state: dict[str, Any],
    quick: bool,
    seed: int,
    force: bool,
    versions: dict[str, Any],
    shown: _Progress,
) -> "_Task | dict[str, Any] | None":
    """What to do with one experiment: None when the stored record is kept (said on ``shown``), the ERROR record
    of a config that cannot be built, or the task that runs it."""
    t0 = time.perf_counter()
    code = _provenance.code_files(exp.run.__module__)
    try:
        cfg = exp.config(quick, seed)
        config, config_hash = _provenance.config_dict(cfg), _provenance.config_hash(cfg)
    except Exception as err:  # a config that cannot be built or hashed is the experiment's error
        task = _Task(exp, counter, "", None, {}, "", code, t0)
        return _record(task, _error(err), time.perf_counter() - t0, state, versions)
    done = state["experiments"].get(exp.name)
    why = "forced" if force else _stale(done, config, config_hash, code, versions)
    if why is None and done is not None:
        shown.write(f"{counter} {exp.name}: {done['verdict']} (kept: same config, code and library versions)")
        return None
    return _Task(exp, counter, str(why), cfg, config, config_hash, code, t0)


def _record(
    task: _Task, result: Result, seconds: float, state: dict[str, Any], versions: dict[str, Any]
) -> dict[str, Any]:
    """The record of ``results.json`` for one finished experiment. ``undeclared_metrics``: the metric keys set
    without a unit and label (:mod:`implicit_em.audit.metrics`); the tests require none."""
    exp = task.exp
    record_info = metric_info(result.metrics)
    return {
        "name": exp.name,
        "title": exp.title,
        "claim": exp.claim,
        "source": exp.source,
        "seconds": seconds,
        **result.to_dict(),
        "config": task.config,
        "config_hash": task.config_hash,
        "code_hash": _provenance.code_hash(task.code),
        "code_hash_scheme": _provenance.HASH_SCHEME,
        "code_files": task.code,
        "commit": state["provenance"]["commit"],
        "dirty": state["provenance"]["dirty"],
        "versions": versions,
        "undeclared_metrics": [k for k in result.metrics if k not in record_info],
    }
