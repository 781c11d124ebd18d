"""``implicit-em fit`` and ``predict`` (``_cli_fit.py``, ``_cli_data.py``): the numbers equal the library's, every
data format reads the same rows, and every bad input is one line on stderr with exit status 2.

All fail on the code before the commands existed (argparse: invalid choice 'fit'). Planted bugs they catch:
reading a whole ``.npy`` into memory (the tracemalloc test), treating a numeric first row as a header (the
no-header test), BIC from the wrong N or parameter count (the equality with ``GaussianMixture.bic``).
"""

import csv
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from implicit_em import _cli_data, _cli_fit
from implicit_em.cli import main
from implicit_em.mixture import GaussianMixture


def _blobs(n: int = 240, seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0, 0.0], [5.0, 5.0, 0.0], [0.0, 6.0, 4.0]])
    return centres[rng.randint(0, 3, n)] + rng.randn(n, 3)


def _write_csv(path: Path, x: np.ndarray, header: list[str] | None, delimiter: str = ",") -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter)
        if header is not None:
            writer.writerow(header)
        writer.writerows(x.tolist())  # repr of each float: read back exactly
    return path


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["fit", *args, "--json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out)


def _reference(x: np.ndarray, k: int, **kwargs: Any) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GaussianMixture(k, random_state=0, max_iter=100, **kwargs).fit(x)


def test_fit_reports_the_library_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = _blobs()
    data = _write_csv(tmp_path / "blobs.csv", x, ["a", "b", "c"])
    out = _run_json(capsys, str(data), "--n-components", "3", "--covariance-type", "diag")
    model = _reference(x, 3, covariance_type="diag")
    assert out["header"] == ["a", "b", "c"] and (out["n_samples"], out["n_features"]) == (240, 3)
    assert out["log_likelihood"] == pytest.approx(model.score(x), rel=1e-12)
    assert out["bic"] == pytest.approx(model.bic(x), rel=1e-12)
    assert out["aic"] == pytest.approx(model.aic(x), rel=1e-12)
    assert out["n_iter"] == model.n_iter_ and out["converged"] is True and out["seconds"] > 0


def test_auto_chooses_the_lowest_bic_and_prints_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = _blobs()
    data = _write_csv(tmp_path / "blobs.csv", x, None)
    out = _run_json(capsys, str(data), "--n-components", "auto", "--k-range", "1:5")
    expected = {str(k): _reference(x, k).bic(x) for k in range(1, 6)}
    assert out["bic_by_k"] == pytest.approx(expected, rel=1e-12)
    assert out["n_components"] == 3 == int(min(expected, key=expected.__getitem__))
    assert main(["fit", str(data), "--n-components", "auto", "--k-range", "2:4"]) == 0
    text = capsys.readouterr().out
    assert all(f"K = {k} " in text for k in (2, 3, 4)) and "<- lowest" in text and "BIC by K" in text


def test_the_text_output_names_every_statistic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write_csv(tmp_path / "blobs.csv", _blobs(), ["a", "b", "c"])
    assert main(["fit", str(data), "--n-components", "2", "--out", str(tmp_path / "m.npz")]) == 0
    text = capsys.readouterr().out
    for word in ("log-likelihood / sample", "BIC", "AIC", "iterations", "converged", "time", "m.npz", "a, b, c"):
        assert word in text, word


@pytest.mark.parametrize("form", ["header", "no-header", "tsv", "npy", "parquet"])
def test_every_format_reads_the_same_rows(tmp_path: Path, form: str) -> None:
    x = _blobs(50)
    if form == "npy":
        path = tmp_path / "x.npy"
        np.save(path, x)
    elif form == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        path = tmp_path / "x.parquet"
        pq.write_table(pa.table({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2]}), path)
    else:
        header = None if form == "no-header" else ["a", "b", "c"]
        suffix, delimiter = (".tsv", "\t") if form == "tsv" else (".csv", ",")
        path = _write_csv(tmp_path / f"x{suffix}", x, header, delimiter)
    data = _cli_data.read_data(path, batch_rows=16)
    rows = np.concatenate(list(data.batches(16)))
    np.testing.assert_array_equal(rows, x)
    assert data.header == (None if form in ("no-header", "npy") else ["a", "b", "c"])


def test_a_npy_is_streamed_not_loaded(tmp_path: Path) -> None:
    """tracemalloc sees numpy's buffers: one pass over a 16 MB file allocates about one batch (160 kB) at a time."""
    import tracemalloc

    path = tmp_path / "big.npy"
    np.save(path, np.zeros((500_000, 4), dtype=np.float64))
    rows = _cli_data.read_data(path, batch_rows=5_000, seed=0).rows
    assert isinstance(rows, _cli_data.NpyRows)
    tracemalloc.start()
    seen = sum(batch.shape[0] for batch in rows)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seen == 500_000 and peak < 1_000_000  # the file is 16,000,000 bytes


def test_the_shuffled_stream_visits_every_row_once(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    x = np.arange(100.0).reshape(50, 2)
    np.save(path, x)
    stream = _cli_data.NpyRows(path, batch_rows=7, seed=3)
    first, second = (np.concatenate(list(stream)) for _ in range(2))
    assert not np.array_equal(first, x) and not np.array_equal(first, second)  # a new block order each pass
    np.testing.assert_array_equal(np.sort(first[:, 0]), x[:, 0])


def test_fit_on_a_npy_stream_matches_the_array_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = _blobs(600).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = _run_json(capsys, str(tmp_path / "x.npy"), "--n-components", "3", "--batch-size", "100")
    model = _reference(x.astype(np.float64), 3)
    assert out["log_likelihood"] == pytest.approx(model.score(x.astype(np.float64)), rel=1e-9)


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_the_mini_batch_fitters_run_on_a_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fitter: str
) -> None:
    np.save(tmp_path / "x.npy", _blobs(400))
    out = _run_json(capsys, str(tmp_path / "x.npy"), "--n-components", "3", "--fitter", fitter, "--max-iter", "5")
    assert out["fitter"] == fitter and out["n_iter"] >= 1 and np.isfinite(out["bic"])


def test_a_saved_model_predicts_what_the_fit_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = _blobs()
    data = _write_csv(tmp_path / "x.csv", x, ["a", "b", "c"])
    model_path = tmp_path / "model.safetensors"
    assert main(["fit", str(data), "--n-components", "3", "--out", str(model_path), "--quiet"]) == 0
    capsys.readouterr()
    model = GaussianMixture.load(model_path)
    assert main(["predict", str(model_path), str(data)]) == 0
    labels = np.array([int(line) for line in capsys.readouterr().out.split()])
    np.testing.assert_array_equal(labels, model.predict(x))
    assert main(["predict", str(model_path), str(data), "--proba"]) == 0
    proba = np.array([[float(v) for v in line.split(",")] for line in capsys.readouterr().out.splitlines()])
    # predict scores in numpy (no torch): the estimator's responsibilities to round-off
    np.testing.assert_allclose(proba, model.predict_proba(x), rtol=0, atol=1e-12)
    assert main(["predict", str(model_path), str(data), "--proba", "--out", str(tmp_path / "p.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy", allow_pickle=False), proba)  # the text is exact
    assert main(["predict", str(model_path), str(data), "--out", str(tmp_path / "labels.csv")]) == 0
    lines = (tmp_path / "labels.csv").read_text().splitlines()
    assert lines[0] == "component" and [int(v) for v in lines[1:]] == model.predict(x).tolist()


def test_a_bar_on_a_terminal_and_heartbeat_lines_in_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 26: in a log the fit said nothing until it ended; now lines without a bar's carriage returns
    data = _write_csv(tmp_path / "x.csv", _blobs(), None)
    assert main(["fit", str(data), "--n-components", "3"]) == 0
    err = capsys.readouterr().err  # not a terminal: lines, the first iteration's and where EM stopped
    assert "\r" not in err and "GaussianMixture[em] iter: 1/100, loglik " in err, err
    assert re.search(r"iter: stopped at \d+/100, loglik -?\d", err), err
    assert main(["fit", str(data), "--n-components", "auto", "--k-range", "2:3"]) == 0
    err = capsys.readouterr().err  # a sweep: one line per K
    assert re.search(r"K = 2: BIC .*\nimplicit-em fit: K = 3: BIC ", err) and "GaussianMixture[" not in err, err
    monkeypatch.setattr(_cli_fit, "_stderr_is_terminal", lambda: True)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(["fit", str(data), "--n-components", "3"]) == 0
    err = capsys.readouterr().err
    assert "GaussianMixture[em]" in err and "iter: 1/100" not in err  # the bar, not lines
    assert main(["fit", str(data), "--n-components", "auto", "--k-range", "2:3"]) == 0
    assert "GaussianMixture over K" in capsys.readouterr().err
    monkeypatch.setattr(_cli_fit, "_stderr_is_terminal", lambda: False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    for ks in (["3"], ["auto", "--k-range", "2:3"]):
        assert main(["fit", str(data), "--n-components", *ks, "--quiet"]) == 0
        assert capsys.readouterr().err == ""


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments, a phrase the one-line error must contain)."""
    x = _blobs(30)
    good = _write_csv(tmp / "good.csv", x, ["a", "b", "c"])
    (tmp / "ragged.csv").write_text("a,b,c\n1,2,3\n4,5\n")
    (tmp / "words.csv").write_text("a,b\n1,2\n3,oops\n")
    (tmp / "nan.csv").write_text("1,2\n3,nan\n")
    (tmp / "empty.csv").write_text("")
    (tmp / "header-only.csv").write_text("a,b\n")
    (tmp / "latin1.csv").write_bytes("a,é\n1,2\n".encode("latin-1"))
    (tmp / "data.xlsx").write_text("")
    np.save(tmp / "oned.npy", x[:, 0])
    with_inf = x.copy()
    with_inf[3, 1] = np.inf
    np.save(tmp / "inf.npy", with_inf)
    np.save(tmp / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp / "text.npy", np.array([["a", "b"], ["c", "d"]]))
    (tmp / "truncated.npy").write_bytes((tmp / "inf.npy").read_bytes()[:300])
    (tmp / "fake.parquet").write_bytes(b"not parquet")
    np.save(tmp / "two-features.npy", x[:, :2])
    model = _reference(x, 2)
    model.save(tmp / "model.npz")
    (tmp / "not-a-model.npz").write_bytes(b"PK\x03\x04 broken")
    (tmp / "dir model.npz").mkdir()
    np.save(tmp / "three.npy", x[:3])
    with_nan = x.copy()
    with_nan[17, 1] = np.nan
    np.save(tmp / "nan.npy", with_nan)
    fit = ["fit", "--n-components", "2"]
    return {
        "missing file": ([*fit, str(tmp / "nope.csv")], "no such file"),
        "bad extension": ([*fit, str(tmp / "data.xlsx")], "unsupported data file type '.xlsx'"),
        "ragged csv": ([*fit, str(tmp / "ragged.csv")], "line 3 has 2 fields, expected 3"),
        "non-numeric cell": ([*fit, str(tmp / "words.csv")], "line 3, column 2: 'oops' is not a number"),
        "nan in csv": ([*fit, str(tmp / "nan.csv")], "line 2, column 2: 'nan' is not a finite number"),
        "empty csv": ([*fit, str(tmp / "empty.csv")], "no rows of data"),
        "header only": ([*fit, str(tmp / "header-only.csv")], "no rows of data"),
        "not utf-8": ([*fit, str(tmp / "latin1.csv")], "not UTF-8 text"),
        "1-d npy": ([*fit, str(tmp / "oned.npy")], "1-D array of shape (30,)"),
        "inf in npy": ([*fit, str(tmp / "inf.npy")], "inf.npy: Input X contains NaN or infinity"),
        "object npy": ([*fit, str(tmp / "objects.npy")], "Python objects"),
        "text npy": ([*fit, str(tmp / "text.npy")], "expected integer or floating point"),
        "truncated npy": ([*fit, str(tmp / "truncated.npy")], "not a readable numeric .npy"),
        "bad parquet": ([*fit, str(tmp / "fake.parquet")], "fake.parquet: not a readable parquet file"),
        "too few rows": (["fit", "--n-components", "31", str(good)], "30 rows, too few for 31 components"),
        "k-range with fixed k": ([*fit, str(good), "--k-range", "1:3"], "--k-range chooses K for"),
        "bad k-range": (["fit", "--n-components", "auto", str(good), "--k-range", "4:2"], "must be A:B"),
        "zero components": (["fit", "--n-components", "0", str(good)], "must be a positive integer"),
        "bad model suffix": ([*fit, str(good), "--out", str(tmp / "m.pkl")], "ends in .npz or .safetensors"),
        "feature mismatch": (
            ["predict", str(tmp / "model.npz"), str(tmp / "two-features.npy")],
            "has 2 features, but the model",
        ),
        "not a model": (["predict", str(tmp / "not-a-model.npz"), str(good)], "not-a-model.npz is not a readable"),
        "missing model": (["predict", str(tmp / "none.npz"), str(good)], "no model file"),
        "bad predict out": (["predict", str(tmp / "model.npz"), str(good), "--out", str(tmp / "p.txt")], ".npy or"),
        "out is a directory": ([*fit, str(good), "--out", str(tmp / "dir model.npz")], "model.npz: is a directory"),
        "k-range beyond the rows": (
            ["fit", "--n-components", "auto", str(tmp / "three.npy"), "--k-range", "1:5"],
            "use --k-range 1:3 or less",
        ),
        "nan in predict": (["predict", str(tmp / "model.npz"), str(tmp / "nan.npy")], "row 18, column 2 is nan"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing file",
        "bad extension",
        "ragged csv",
        "non-numeric cell",
        "nan in csv",
        "empty csv",
        "header only",
        "not utf-8",
        "1-d npy",
        "inf in npy",
        "object npy",
        "text npy",
        "truncated npy",
        "bad parquet",
        "too few rows",
        "k-range with fixed k",
        "bad k-range",
        "zero components",
        "bad model suffix",
        "feature mismatch",
        "not a model",
        "missing model",
        "bad predict out",
        "out is a directory",
        "k-range beyond the rows",
        "nan in predict",
    ],
)
def test_a_bad_input_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    args, phrase = _bad_inputs(tmp_path)[case]
    try:
        status = main(args)
    except SystemExit as exit_info:  # argparse's own errors
        status = int(exit_info.code or 0)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"implicit-em {args[0]}: error:"), err
    assert phrase in err, err


def test_without_pyarrow_the_message_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(_cli_data.DataError, match=r"pip install 'implicit-em\[parquet\]'"):
        _cli_data.read_data(tmp_path / "x.parquet")


def test_the_console_command_prints_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "implicit_em.cli", "fit", str(tmp_path / "missing.npy"), "--n-components", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"implicit-em fit: error: {tmp_path / 'missing.npy'}: no such file"


def test_an_out_that_is_a_directory_is_refused_before_the_fit_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old code fitted first, then failed to rename onto the directory and left ``dir model.npz.tmp``."""
    good = _write_csv(tmp_path / "good.csv", _blobs(30), None)
    (tmp_path / "dir model.npz").mkdir()
    fitted: list[int] = []
    monkeypatch.setattr(GaussianMixture, "fit", lambda self, x, y=None: fitted.append(1) or self)
    assert main(["fit", str(good), "--n-components", "2", "--out", str(tmp_path / "dir model.npz")]) == 2
    assert fitted == [] and "is a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir model.npz", "good.csv"]


def test_an_out_where_no_file_can_be_created_is_refused_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.access`` says yes to root on /sys; only creating a file tells. Planted: creation refused (EROFS) in a
    folder ``os.access`` calls writable; and a save that fails after the fit names the user's path, not a .tmp."""
    import errno

    good = _write_csv(tmp_path / "good.csv", _blobs(30), None)
    fitted: list[int] = []
    monkeypatch.setattr(GaussianMixture, "fit", lambda self, x, y=None: fitted.append(1) or self)
    real_open = Path.open

    def read_only(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "x" in mode:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", read_only)
    assert main(["fit", str(good), "--n-components", "2", "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert fitted == [] and "cannot create a file in" in err and "Read-only file system" in err
    assert ".tmp" not in err and ".check" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv"]
    monkeypatch.setattr(Path, "open", real_open)
    monkeypatch.undo()

    def full(self: Any, path: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", f"{path}.tmp")

    monkeypatch.setattr(GaussianMixture, "save", full)
    assert main(["fit", str(good), "--n-components", "2", "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "could not be written (No space left on device)" in err and ".tmp" not in err


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from implicit_em import _runio

    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        _runio.write_bytes_atomic(tmp_path / "taken", b"x")

    def refuse(src: Any, dst: Any) -> None:
        raise PermissionError(f"cannot move onto {dst}")

    monkeypatch.setattr(_runio.os, "replace", refuse)
    with pytest.raises(PermissionError, match="cannot move"):
        _runio.write_bytes_atomic(tmp_path / "m.npz", b"x")  # the error reaches the caller ...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # ... and m.npz.tmp is gone


def test_auto_on_fewer_rows_than_its_default_range_fits_what_the_rows_allow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old code refused 3 rows with "too few for 10 components"; auto's default range now shrinks, and says so."""
    np.save(tmp_path / "three.npy", _blobs(3))
    report = _run_json(capsys, str(tmp_path / "three.npy"), "--n-components", "auto")
    assert sorted(report["bic_by_k"]) == ["1", "2", "3"]


def test_the_start_up_table_of_batch_sizes_equals_the_registry() -> None:
    from implicit_em.mixture._fitting import REGISTRY
    from implicit_em.mixture._io import SUFFIXES

    assert _cli_fit.DEFAULT_BATCH_SIZES == {name: f.default_batch_size for name, f in REGISTRY.items()}
    assert set(SUFFIXES) == {".npz", ".safetensors"}  # what _check_model_path accepts without importing _io


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["fit", "--help"],
        ["fit", "missing.npy", "--n-components", "2"],
        ["audit", "--only", ""],
        ["predict", "--help"],
        ["probe", "--help"],
        ["report", "--help"],
        ["windtunnel", "--help"],
        ["windtunnel", "oracle", "--help"],
        ["windtunnel", "summarize", "no-such-run", "--out", "s.json"],
        ["windtunnel", "bogus"],
    ],
)
def test_help_and_usage_errors_import_neither_torch_nor_the_mixture(tmp_path: Path, args: list[str]) -> None:
    """Start-up: argument parsing and input checks come before the numerical imports (on the old code every
    command imported torch, transformers' probes and the mixture package first: 2-7 s before ``--help``)."""
    assert _heavy_imports(tmp_path, args) == "heavy: []"


def _heavy_imports(tmp_path: Path, args: list[str]) -> str:
    code = (
        "import sys\n"
        "from implicit_em.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'implicit_em.mixture', 'sklearn') if m in sys.modules)\n"
        "print('heavy:', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    return next((ln for ln in done.stdout.splitlines() if ln.startswith("heavy:")), done.stdout + done.stderr)


def test_windtunnel_train_help_still_imports_torch(tmp_path: Path) -> None:
    # its options are the config's fields with each preset's value, read from windtunnel/config.py, which imports
    # torch; the check above sees torch when it is there
    assert "'torch'" in _heavy_imports(tmp_path, ["windtunnel", "train", "--help"])


def test_the_fit_options_reach_the_estimator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--tol, --reg-covar, --n-init and --split-merge are the estimator's; the numbers equal the library's fit."""
    x = _blobs(240)
    path = _write_csv(tmp_path / "x.csv", x, None)
    options = {"tol": 1e-5, "reg_covar": 1e-2, "n_init": 2, "split_merge": 0}
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    report = _run_json(capsys, str(path), "--n-components", "3", *flags)
    reference = _reference(x, 3, **options)
    assert report["log_likelihood"] == pytest.approx(reference.score(x), rel=1e-12)
    assert report["n_iter"] == reference.n_iter_ and report["split_merge_accepted"] == 0
    default = _run_json(capsys, str(path), "--n-components", "3")
    assert default["log_likelihood"] != report["log_likelihood"]  # the options changed the fit


def test_the_text_output_says_what_split_and_merge_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_csv(tmp_path / "x.csv", _blobs(240), None)
    assert main(["fit", str(path), "--n-components", "3"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("split-and-merge"))
    assert "moves accepted" in line and "EM iterations in trials" in line
    assert main(["fit", str(path), "--n-components", "3", "--split-merge", "0"]) == 0
    assert "split-and-merge          off (--split-merge 0)" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["--tol=-1", "--reg-covar=nan", "--split-merge=-2", "--n-init=0"])
def test_bad_fit_options_are_argparse_errors(tmp_path: Path, bad: str) -> None:
    path = _write_csv(tmp_path / "x.csv", _blobs(30), None)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", str(path), "--n-components", "2", bad])
    assert exit_info.value.code == 2


def test_small_data_fits_on_one_thread_unless_told(tmp_path: Path) -> None:
    small = _cli_data.read_data(_write_csv(tmp_path / "x.csv", _blobs(30), None))
    assert _cli_fit._threads(None, small) == 1
    assert _cli_fit._threads(3, small) == 3
    big = _cli_data.Data(tmp_path / "big.npy", np.empty((_cli_fit.SMALL_DATA_VALUES // 4 + 1, 4)))
    assert _cli_fit._threads(None, big) is None


def test_ctrl_c_during_a_fit_keeps_the_model_with_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimator keeps its last complete state when interrupted (a converged EM model, when split-and-merge
    was running); the command saved nothing and exited 130. Planted: fit completes, then the interrupt arrives."""
    good = _write_csv(tmp_path / "good.csv", _blobs(30), None)
    real_fit = GaussianMixture.fit

    def interrupted(self: GaussianMixture, x: Any, y: Any = None) -> GaussianMixture:
        real_fit(self, x)
        raise KeyboardInterrupt

    monkeypatch.setattr(GaussianMixture, "fit", interrupted)
    out = tmp_path / "m.npz"
    assert main(["fit", str(good), "--n-components", "2", "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert f"interrupted; saved K = 2, its last complete state (converged: True) to {out}" in err
    assert GaussianMixture.load(out).n_components == 2
    assert main(["fit", str(good), "--n-components", "2", "--quiet"]) == 130
    assert "nothing saved (no --out)" in capsys.readouterr().err

    def second_k_interrupted(self: GaussianMixture, x: Any, y: Any = None) -> GaussianMixture:
        if self.n_components == 2:
            raise KeyboardInterrupt  # before any state: the best K finished before it is kept
        return real_fit(self, x)

    monkeypatch.setattr(GaussianMixture, "fit", second_k_interrupted)
    out.unlink()
    args = ["fit", str(good), "--n-components", "auto", "--k-range", "1:3", "--out", str(out), "--quiet"]
    assert main(args) == 130
    assert "saved K = 1, the best K finished before the interrupt" in capsys.readouterr().err
    assert GaussianMixture.load(out).n_components == 1


def test_missing_values_in_a_csv_are_integrated_out_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = _blobs()
    text = ["a,b,c"] + [",".join("" if (i + j) % 7 == 0 else repr(float(v)) for j, v in enumerate(row))
                        for i, row in enumerate(x)]  # fmt: skip
    data = tmp_path / "holes.csv"
    data.write_text("\n".join(text) + "\n")
    assert main(["fit", str(data), "--n-components", "3", "--quiet"]) == 2
    assert "is not a number" in capsys.readouterr().err
    out = tmp_path / "m.npz"
    assert main(["fit", str(data), "--n-components", "3", "--missing", "marginalize", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    x_nan = x.copy()
    for i in range(len(x)):
        for j in range(x.shape[1]):
            if (i + j) % 7 == 0:
                x_nan[i, j] = np.nan
    direct = GaussianMixture(3, random_state=0, missing="marginalize").fit(x_nan)
    np.testing.assert_allclose(GaussianMixture.load(out).means_, direct.means_, rtol=1e-12)
    assert report["log_likelihood"] == pytest.approx(direct.score(x_nan), rel=1e-12)
    np.save(tmp_path / "holes.npy", x_nan)
    assert main(["fit", str(tmp_path / "holes.npy"), "--n-components", "3", "--missing", "marginalize", "--quiet"]) == 0
    capsys.readouterr()
    for fitter in ("online_em", "gd"):  # every fitter integrates the empty cells out
        gd_out = tmp_path / f"{fitter}.npz"
        args = ["--missing", "marginalize", "--fitter", fitter, "--out", str(gd_out), "--quiet", "--json"]
        assert main(["fit", str(data), "--n-components", "3", *args]) == 0
        assert json.loads(capsys.readouterr().out)["log_likelihood"] == pytest.approx(direct.score(x_nan), abs=0.05)
