"""``implicit-em fit`` and ``implicit-em predict``: a Gaussian mixture on the user's own data file.

``fit DATA --n-components K|auto`` fits :class:`~implicit_em.mixture.GaussianMixture` to a ``.npy``, ``.csv``,
``.tsv`` or ``.parquet`` file (``_cli_data.py``; a ``.npy`` is streamed in row batches, so memory stays flat in
N) and prints the mean log-likelihood per sample, BIC, AIC, the iterations, whether it converged and the time;
``auto`` fits every K of ``--k-range`` and keeps the lowest BIC, printing the BIC of each. ``--out MODEL`` saves
the model (``.npz`` or ``.safetensors``, ``GaussianMixture.save``), ``--json`` prints one JSON object instead.
``predict MODEL DATA`` prints the most probable component of every row (``--proba``: the responsibilities), or
writes them to ``--out FILE.npy|.csv``.

The statistics are computed in one pass of row batches after the fit (``score_samples`` per batch, summed in
float64), so they too need no memory of size N. A problem with the data, the model file or the options is one
line on stderr and exit status 2.
"""

import argparse
import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from implicit_em._cli_args import positive_int, seed
from implicit_em._cli_data import Data, DataError, read_data

__all__ = ["add_parsers", "run"]

_COMMANDS = ("fit", "predict")
_ROWS = 16_384  # rows per batch when scoring or predicting
#: Below this many values (rows x features) ``fit`` runs on one torch thread unless ``--threads`` says otherwise.
SMALL_DATA_VALUES = 1_000_000


def add_parsers(sub: Any) -> None:
    """Register ``fit`` and ``predict`` on the ``implicit-em`` subparsers ``sub``."""
    fit = sub.add_parser("fit", help="fit a Gaussian mixture to a .npy, .csv, .tsv or .parquet file")
    fit.add_argument("data", metavar="DATA", help="rows x features: .npy (streamed), .csv/.tsv, .parquet")
    fit.add_argument(
        "--n-components", required=True, type=_k_or_auto, metavar="K|auto", help="components, or auto (BIC)"
    )
    fit.add_argument("--covariance-type", default="full", choices=("full", "diag", "spherical", "tied"))
    fit.add_argument("--fitter", default="em", choices=("em", "online_em", "gd"), help="default em")
    fit.add_argument("--max-iter", type=positive_int, default=100, help="EM iterations or epochs (default 100)")
    fit.add_argument("--seed", type=seed, default=0, help="random_state (default 0)")
    fit.add_argument("--k-range", type=_k_range, default=None, metavar="A:B", help="auto's K, A to B (1:10)")
    fit.add_argument("--batch-size", type=positive_int, default=None, help="rows per batch (fitter's default)")
    fit.add_argument("--tol", type=_non_negative, default=1e-3, help="convergence tolerance (default 1e-3)")
    fit.add_argument(
        "--reg-covar", type=_non_negative, default=1e-6, help="added to each covariance's diagonal (default 1e-6)"
    )
    fit.add_argument("--n-init", type=positive_int, default=1, help="starts; the best is kept (default 1)")
    fit.add_argument(
        "--split-merge",
        type=_count,
        default=4,
        metavar="N",
        help="split-and-merge moves tried after EM converges (default 4; 0: scikit-learn's EM up to 200,000 rows; "
        "above that k-means starts from a uniform sample of 200,000 rows, scikit-learn's from every row)",
    )
    fit.add_argument("--out", default=None, metavar="MODEL", help="save the model: .npz or .safetensors")
    fit.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help=f"torch threads (default: 1 below {SMALL_DATA_VALUES:,} values, else torch's default)",
    )
    fit.add_argument(
        "--missing",
        default="raise",
        choices=("raise", "marginalize"),
        help="marginalize: empty cells and NaN are missing values, integrated out (every fitter; default raise)",
    )
    fit.add_argument("--json", action="store_true", help="print one JSON object")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    predict = sub.add_parser("predict", help="labels (or --proba responsibilities) of DATA under a saved model")
    predict.add_argument("model", metavar="MODEL", help="a model file written by fit --out")
    predict.add_argument("data", metavar="DATA", help="rows x features: .npy, .csv/.tsv, .parquet")
    predict.add_argument("--proba", action="store_true", help="responsibilities (N x K) instead of labels")
    predict.add_argument("--out", default=None, metavar="FILE", help=".npy or .csv (default: stdout)")
    predict.add_argument(
        "--missing",
        default="raise",
        choices=("raise", "marginalize"),
        help="marginalize: score rows with empty cells or NaN on their observed features (default raise)",
    )


def run(args: argparse.Namespace) -> int | None:
    """Run ``fit`` or ``predict``; None when ``args`` is another command."""
    if args.command not in _COMMANDS:
        return None
    prog = f"implicit-em {args.command}"
    try:
        return _fit(args, prog) if args.command == "fit" else _predict(args)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError) as err:  # DataError, a model file, an unwritable --out
        print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


# -- options -------------------------------------------------------------------------------------------------


def _k_or_auto(text: str) -> int | str:
    return "auto" if text == "auto" else positive_int(text)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return int(text)


def _k_range(text: str) -> range:
    low, sep, high = text.partition(":")
    try:
        a, b = int(low), int(high)
    except ValueError:
        a = b = 0
    if not sep or not 1 <= a <= b:
        raise argparse.ArgumentTypeError(f"must be A:B with 1 <= A <= B (both included), got {text!r}")
    return range(a, b + 1)


# -- fit -----------------------------------------------------------------------------------------------------


def _fit(args: argparse.Namespace, prog: str) -> int:
    # Everything the user can get wrong is checked before the mixture package (and torch) is imported.
    if args.k_range is not None and args.n_components != "auto":
        raise ValueError("--k-range chooses K for --n-components auto; with a fixed K leave it out")
    if args.out is not None:
        _check_model_path(Path(args.out))
    batch_rows = args.batch_size or _default_batch_size(args.fitter)
    missing = args.missing == "marginalize"
    data = read_data(args.data, batch_rows, seed=args.seed if args.fitter != "em" else None, missing=missing)
    ks = _components(args, data, prog)

    from implicit_em._runio import torch_threads

    with torch_threads(_threads(args.threads, data)):
        return _fit_ks(args, prog, data, ks)


def _threads(requested: int | None, data: Data) -> int | None:
    """``--threads``, or one thread on small data (None: torch's default). On digits (1,797 x 64, K = 10 diag) a
    fit took 1.2 s on one thread and 0.7 to 26.5 s on two on a loaded 2-core machine: at this size a second
    thread gains little and, when another process holds a core, spin-waits (docs/mixture.md)."""
    if requested is not None:
        return requested
    return 1 if data.n_samples * data.n_features < SMALL_DATA_VALUES else None


def _fit_ks(args: argparse.Namespace, prog: str, data: Data, ks: range) -> int:
    from implicit_em.mixture import GaussianMixture

    show = not args.quiet and _stderr_is_terminal()
    x: Any = data.rows
    results: list[dict[str, Any]] = []
    best: Any = None
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in _progress(ks, show and len(ks) > 1):
            model = GaussianMixture(
                k,
                covariance_type=args.covariance_type,
                fitter=args.fitter,
                max_iter=args.max_iter,
                random_state=args.seed,
                batch_size=args.batch_size,
                tol=args.tol,
                reg_covar=args.reg_covar,
                n_init=args.n_init,
                split_merge=args.split_merge,
                missing=args.missing,
                verbose=int(not args.quiet and len(ks) == 1),  # a bar on a terminal, a heartbeat in a log
            )
            start = time.perf_counter()
            try:  # the options were checked: what the estimator refuses now is the data (NaN, inf, overflow)
                model.fit(x)
                seconds = time.perf_counter() - start
                row = {"n_components": k, **_statistics(model, data), "n_iter": int(model.n_iter_)}
            except ValueError as err:
                raise DataError(f"{data.path}: {err}") from None
            except KeyboardInterrupt:
                _keep_interrupted(args, prog, model, k, best)
                raise
            row.update(converged=bool(model.converged_), seconds=seconds, **_split_merge_counts(model))
            results.append(row)
            if len(ks) > 1 and not args.quiet and not show:  # in a log, one line per K instead of the bar
                print(f"{prog}: K = {k}: BIC {row['bic']:.6g}, {row['n_iter']} iterations, {seconds:.2f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
            if best is None or row["bic"] < best[1]["bic"]:
                best = (model, row)
    total = time.perf_counter() - t0
    model, chosen = best
    if args.out is not None:
        try:
            model.save(args.out)
        except OSError as err:  # a disk that filled up during the fit: name the user's path, not the temporary file
            raise ValueError(f"--out {args.out}: the model could not be written ({err.strerror})") from None
    notes = sorted({f"{type(w.message).__name__}: {' '.join(str(w.message).split())}" for w in caught})
    for note in notes:
        print(f"{prog}: warning: {note}", file=sys.stderr)
    report = {
        "data": str(data.path),
        "n_samples": data.n_samples,
        "n_features": data.n_features,
        "header": data.header,
        "covariance_type": args.covariance_type,
        "fitter": args.fitter,
        "split_merge": args.split_merge,
        **chosen,
        "total_seconds": total,
        "bic_by_k": {str(r["n_components"]): r["bic"] for r in results} if args.n_components == "auto" else None,
        "model": args.out,
    }
    print(json.dumps(report) if args.json else _text(report, results))
    return 0


def _keep_interrupted(args: argparse.Namespace, prog: str, model: Any, k: int, best: Any) -> None:
    """Ctrl-C during a fit: the estimator keeps its last complete state (a converged EM model when split-and-merge
    was running); with ``--out``, save it, or the best K finished before it, and say which. Nothing fitted: say so."""
    fitted = hasattr(model, "means_")
    keep, what = (model, f"K = {k}, its last complete state") if fitted else (None, "")
    if keep is None and best is not None:
        keep, what = best[0], f"K = {best[1]['n_components']}, the best K finished before the interrupt"
    if args.out is None or keep is None:
        if keep is not None:
            print(f"{prog}: interrupted; nothing saved (no --out)", file=sys.stderr)
        return
    keep.save(args.out)
    print(f"{prog}: interrupted; saved {what} (converged: {bool(keep.converged_)}) to {args.out}", file=sys.stderr)


def _split_merge_counts(model: Any) -> dict[str, int]:
    """What split-and-merge did in the kept start: moves accepted and the EM iterations its trials cost."""
    return {
        "split_merge_accepted": int(getattr(model, "n_split_merge_accepted_", 0) or 0),
        "split_merge_iterations": int(getattr(model, "n_split_merge_iter_", 0) or 0),
    }


def _default_batch_size(fitter: str) -> int:
    """The fitter's default rows per batch, without importing the mixture package (which imports torch): the
    registry's value, read from a table kept equal to it (``tests/test_cli_fit.py`` checks that)."""
    return DEFAULT_BATCH_SIZES[fitter]


#: ``REGISTRY[fitter].default_batch_size`` of :mod:`implicit_em.mixture._fitting`, for the start-up path.
DEFAULT_BATCH_SIZES: dict[str, int] = {"em": 16_384, "online_em": 4096, "gd": 8192}


def _components(args: argparse.Namespace, data: Data, prog: str) -> range:
    """The K to fit: the one given, or ``--n-components auto``'s range. auto's default range 1..10 shrinks to the
    rows there are (with a note); an explicit ``--k-range`` or K beyond them is an error naming the way out."""
    if data.n_samples < 2:
        raise DataError(f"{data.path}: {data.n_samples} row, too few to fit a mixture (at least 2 needed)")
    if args.n_components != "auto":
        k = int(args.n_components)
        if data.n_samples < k:
            raise DataError(
                f"{data.path}: {data.n_samples} rows, too few for {k} components (at least {k} needed); "
                f"lower --n-components"
            )
        return range(k, k + 1)
    if args.k_range is not None:
        if data.n_samples < args.k_range[-1]:
            raise DataError(
                f"{data.path}: {data.n_samples} rows, too few for --k-range up to {args.k_range[-1]} components; "
                f"use --k-range 1:{data.n_samples} or less"
            )
        return args.k_range
    high = min(10, data.n_samples)
    if high < 10:
        print(
            f"{prog}: note: {data.n_samples} rows: auto tries K = 1 to {high} (one component per row at most; "
            "--k-range A:B to choose)",
            file=sys.stderr,
        )
    return range(1, high + 1)


def _statistics(model: Any, data: Data) -> dict[str, float]:
    """Mean log-likelihood per sample, BIC and AIC of ``model`` on ``data``, from one pass of row batches."""
    total = math.fsum(float(model.score_samples(batch).sum(dtype=np.float64)) for batch in data.batches(_ROWS))
    n, p = data.n_samples, model._n_parameters()
    return {"log_likelihood": total / n, "bic": -2 * total + p * math.log(n), "aic": -2 * total + 2 * p}


def _text(report: dict[str, Any], results: list[dict[str, Any]]) -> str:
    lines = [f"data: {report['data']} ({report['n_samples']} rows x {report['n_features']} features)"]
    if report["header"] is not None:
        lines.append(f"columns: {', '.join(report['header'])}")
    if report["bic_by_k"] is not None:
        lines.append(f"BIC by K ({report['covariance_type']} covariances, fitter {report['fitter']}):")
        for r in results:
            mark = "  <- lowest" if r["n_components"] == report["n_components"] else ""
            lines.append(f"  K = {r['n_components']:<3} BIC = {r['bic']:<14.6g} {r['seconds']:.2f} s{mark}")
    lines += [
        f"components (K)           {report['n_components']}",
        f"log-likelihood / sample  {report['log_likelihood']:.6f}",
        f"BIC                      {report['bic']:.6g}",
        f"AIC                      {report['aic']:.6g}",
        f"iterations               {report['n_iter']}",
        f"converged                {'yes' if report['converged'] else 'no'}",
        f"split-and-merge          {_split_merge_line(report)}",
        f"time                     {report['seconds']:.2f} s"
        + (f" (all K: {report['total_seconds']:.2f} s)" if report["bic_by_k"] is not None else ""),
    ]
    if report["model"] is not None:
        lines.append(f"model                    {report['model']}")
    return "\n".join(lines)


def _split_merge_line(report: dict[str, Any]) -> str:
    if report["fitter"] == "gd" or report["split_merge"] == 0:
        return "off" + (" (gd)" if report["fitter"] == "gd" else " (--split-merge 0)")
    accepted, iterations = report["split_merge_accepted"], report["split_merge_iterations"]
    return (
        f"{accepted} of up to {report['split_merge']} moves accepted, {iterations} EM iterations in trials "
        "(--split-merge 0 to skip)"
    )


def _progress(ks: range, show: bool) -> Iterator[int]:
    if not show:
        yield from ks
        return
    from tqdm import tqdm

    with tqdm(ks, desc="GaussianMixture over K", unit="K", file=sys.stderr) as bar:
        yield from bar


def _stderr_is_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def _check_model_path(path: Path) -> None:
    """Refuse, before any fitting, a ``--out`` that could not be written: a wrong suffix, a directory of that
    name, a missing or read-only folder."""
    if path.suffix.lower() not in (".npz", ".safetensors"):  # mixture._io.SUFFIXES (the test checks they agree)
        raise ValueError(f"--out {path}: a model file name ends in .npz or .safetensors")
    if path.is_dir():
        raise ValueError(f"--out {path}: is a directory; give the model file's name inside it")
    if not path.parent.is_dir():
        raise ValueError(f"--out {path}: the directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"--out {path}: the directory {path.parent} is not writable")
    _try_create(path)


def _try_create(path: Path) -> None:
    """Create and remove a file beside ``path``: ``os.access`` says yes to root on a read-only or virtual file
    system (``/sys``, ``/proc``, a read-only mount), where only a real creation fails. Nothing is left behind."""
    probe = path.parent / f".{path.name}.{os.getpid()}.check"
    try:
        probe.open("xb").close()
    except OSError as err:
        raise ValueError(f"--out {path}: cannot create a file in {path.parent} ({err.strerror})") from None
    probe.unlink(missing_ok=True)


# -- predict -------------------------------------------------------------------------------------------------


def _predict(args: argparse.Namespace) -> int:
    from implicit_em._model_file import read_mixture  # numpy only: predict never imports torch

    out = Path(args.out) if args.out is not None else None
    if out is not None and (out.suffix.lower() not in (".npy", ".csv") or not out.parent.is_dir()):
        raise ValueError(f"--out {out}: expected a .npy or .csv file in an existing directory")
    model = read_mixture(args.model)
    missing = args.missing == "marginalize"
    data = read_data(args.data, _ROWS, missing=missing)
    if data.n_features != model.n_features_in_:
        raise DataError(
            f"{data.path} has {data.n_features} features, but the model {args.model} expects {model.n_features_in_}"
        )
    method = model.predict_proba if args.proba else model.predict
    parts = (method(batch) for batch in (data.batches(_ROWS) if missing else _finite_batches(data)))
    if out is None:
        for part in parts:
            sys.stdout.write("".join(_line(row) for row in part))
        return 0
    result = np.concatenate(list(parts))
    _write_result(out, result, model.n_components)
    return 0


def _finite_batches(data: Data) -> Iterator[Any]:
    """``data``'s batches in file order; a NaN or inf raises :class:`DataError` naming its row and column (row 1 is
    the first data row; a text file's line numbers are given by the reader)."""
    import numpy as np

    start = 0
    for batch in data.batches(_ROWS):
        bad = ~np.isfinite(batch)
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            value = batch[row, col]
            raise DataError(
                f"{data.path}: row {start + row + 1}, column {col + 1} is {float(value)}; predict needs finite values "
                "(remove or impute that row, or --missing marginalize)"
            )
        start += len(batch)
        yield batch


def _line(row: Any) -> str:
    """A label, or a row of responsibilities as comma-separated shortest round-trip floats."""
    return f"{int(row)}\n" if np.ndim(row) == 0 else ",".join(repr(float(v)) for v in row) + "\n"


def _write_result(out: Path, result: np.ndarray, k: int) -> None:
    from implicit_em._runio import write_bytes_atomic, write_text_atomic

    if out.suffix.lower() == ".npy":
        buffer = io.BytesIO()
        np.save(buffer, result, allow_pickle=False)
        write_bytes_atomic(out, buffer.getvalue())
        return
    header = "component" if result.ndim == 1 else ",".join(f"component_{j}" for j in range(k))
    write_text_atomic(out, header + "\n" + "".join(_line(row) for row in result))
