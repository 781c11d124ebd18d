"""Run the claims audit into a folder: ``results.json`` (rewritten after every experiment), figures, and
``report.html``.

A run can be interrupted (Ctrl-C) without losing the experiments already finished, and a second call with the
same folder, size and seed resumes: finished experiments are kept, the rest run (``force=True`` reruns all).
"""

import json
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from implicit_em._runio import environment as _environment
from implicit_em._runio import write_text_atomic as _write_atomic
from implicit_em.experiments._base import Context, Experiment, Result, torch_threads


def select(experiments: Sequence[Experiment], only: Sequence[str] | None) -> list[Experiment]:
    """The experiments named in ``only`` (all when None), in registry order; unknown names raise ValueError."""
    if not only:
        return list(experiments)
    names = {e.name for e in experiments}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; known: {sorted(names)}")
    return [e for e in experiments if e.name in only]


def run_audit(
    out_dir: str | Path,
    *,
    quick: bool = True,
    only: Sequence[str] | None = None,
    force: bool = False,
    seed: int = 0,
    progress: bool = True,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run the selected experiments, write ``results.json`` and ``report.html`` in ``out_dir``; return the
    results as a dict.

    ``threads``: torch's intra-op threads during the run (restored afterwards). Default 1 for the quick size,
    whose operations are small (with 2 threads on a busy 2-core machine they ran up to 100× slower), and torch's
    current setting for the full size.
    """
    import torch

    from implicit_em.experiments import EXPERIMENTS

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    size = "quick" if quick else "full"
    state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if state.get("size") != size or state.get("seed") != seed:
        state = {"size": size, "seed": seed, "experiments": {}}
    with torch_threads(threads or (1 if quick else torch.get_num_threads())):
        return _run(out, path, state, select(EXPERIMENTS, only), quick, seed, force, progress)


def _run(
    out: Path,
    path: Path,
    state: dict[str, Any],
    chosen: list[Experiment],
    quick: bool,
    seed: int,
    force: bool,
    progress: bool,
) -> dict[str, Any]:
    from implicit_em.report import write_report

    state["environment"] = _environment()
    ctx = Context(quick=quick, seed=seed, figure_dir=out / "figures")
    for i, exp in enumerate(chosen, 1):
        done = state["experiments"].get(exp.name)
        if done is not None and done.get("verdict") != "ERROR" and not force:
            if progress:
                print(f"[{i}/{len(chosen)}] {exp.name}: {done['verdict']} (kept from the earlier run)", file=sys.stderr)
            continue
        if progress:
            print(f"[{i}/{len(chosen)}] {exp.name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            result = exp.run(ctx)
        except KeyboardInterrupt:
            _write_atomic(path, json.dumps(state, indent=1))
            write_report(out)
            raise
        except Exception as err:  # recorded, not hidden: the report shows it as ERROR
            result = Result("ERROR", f"{type(err).__name__}: {err}", {}, details=traceback.format_exc())
        record = {
            "name": exp.name,
            "title": exp.title,
            "claim": exp.claim,
            "source": exp.source,
            "seconds": time.perf_counter() - t0,
            **result.to_dict(),
        }
        state["experiments"][exp.name] = record
        _write_atomic(path, json.dumps(state, indent=1))
        if progress:
            print(f"    {record['verdict']} in {record['seconds']:.1f} s: {record['summary']}", file=sys.stderr)
    _write_atomic(path, json.dumps(state, indent=1))
    write_report(out)
    return state
