"""Reading a user's data file for ``implicit-em fit`` and ``predict``: ``.npy``, ``.csv``, ``.tsv``, ``.parquet``.

- ``.npy``: opened with ``np.load(mmap_mode="r", allow_pickle=False)`` (the header is checked, nothing is
  loaded, an object array is refused) and streamed as row batches (:class:`NpyRows`): each batch is read into a
  fresh buffer, so memory stays flat in N. The estimator takes the stream as an iterable of batches.
- ``.csv`` / ``.tsv``: read into a float64 array. A first row with a cell that does not parse as a number is a
  header (its cells name the columns). Every other row must have as many cells, each a finite number. With pyarrow
  installed (the ``parquet`` extra) its multithreaded CSV reader reads the rows (:func:`_read_text_arrow`; on
  1e6 x 8, 1.06x pyarrow's own time, 15x faster than the csv module: ``benchmarks/csv_read.py``); wherever it
  refuses a file or finds a missing or non-finite value, the csv module reads it again and names the line and
  column (:func:`_read_text`): the same numbers either way (both parse to the correctly rounded double), the same
  errors.
- ``.parquet``: read with pyarrow (``pip install 'implicit-em[parquet]'``); every column must be integer or
  floating point without missing values.

Every problem raises :class:`DataError` (a ValueError) whose one-line message names the file and, for text
files, the line and column.
"""

import csv
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SUFFIXES", "Data", "DataError", "NpyRows", "read_data"]

SUFFIXES = (".npy", ".csv", ".tsv", ".parquet")


class DataError(ValueError):
    """A data file that cannot be used, with a one-line message naming it."""


@dataclass
class Data:
    """The rows of a data file: an in-memory (N, D) array, or a stream of (B, D) batches for ``.npy``."""

    path: Path
    rows: "np.ndarray | NpyRows"
    header: list[str] | None = None

    @property
    def n_samples(self) -> int:
        return int(self.rows.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.rows.shape[1])

    def batches(self, batch_rows: int) -> Iterator[np.ndarray]:
        """The rows in file order, ``batch_rows`` at a time (a stream keeps its own batch size)."""
        if isinstance(self.rows, NpyRows):
            yield from self.rows.in_order()
            return
        for start in range(0, self.n_samples, batch_rows):
            yield self.rows[start : start + batch_rows]


class NpyRows:
    """A re-iterable stream of row batches of a 2-D ``.npy`` file, (B, D) each, read with plain file reads.

    A memory map would keep every page it touched resident (RSS growing with N), so the map only validates the
    header; each pass then reads ``batch_rows`` rows at a time into a new buffer. With a ``seed`` each pass
    visits the blocks in a new random order (as the estimator does for an in-memory memmap), for the
    mini-batch fitters; :meth:`in_order` is one pass in file order.
    """

    def __init__(self, path: Path, batch_rows: int, seed: int | None = None) -> None:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        self.path, self.batch_rows, self.seed = path, batch_rows, seed
        self.shape: tuple[int, ...] = tuple(int(s) for s in mapped.shape)
        self.dtype = mapped.dtype
        self._offset = int(mapped.offset)
        self._fortran = bool(mapped.flags.f_contiguous and not mapped.flags.c_contiguous)
        self._passes = 0
        del mapped

    def __iter__(self) -> Iterator[np.ndarray]:
        starts = np.arange(0, self.shape[0], self.batch_rows)
        if self.seed is not None:
            np.random.RandomState([self.seed, self._passes]).shuffle(starts)
        self._passes += 1
        return self._read(starts)

    def in_order(self) -> Iterator[np.ndarray]:
        return self._read(np.arange(0, self.shape[0], self.batch_rows))

    def _read(self, starts: np.ndarray) -> Iterator[np.ndarray]:
        n, d = self.shape
        if self._fortran:  # columns are contiguous: rows cannot be read as blocks, so read them through the map
            mapped = np.load(self.path, mmap_mode="r", allow_pickle=False)
            for start in starts.tolist():
                yield _native(np.ascontiguousarray(mapped[start : start + self.batch_rows]))
            return
        row_bytes = d * self.dtype.itemsize
        with self.path.open("rb") as f:
            for start in starts.tolist():
                rows = min(self.batch_rows, n - start)
                out = np.empty((rows, d), dtype=self.dtype)
                f.seek(self._offset + start * row_bytes)
                if f.readinto(out.data.cast("B")) != rows * row_bytes:
                    raise DataError(f"{self.path}: the file ended before row {start + rows} (truncated?)")
                yield _native(out)


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in native byte order (torch reads no other)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def read_data(
    path: str | os.PathLike[str], batch_rows: int = 16_384, seed: int | None = None, missing: bool = False
) -> Data:
    """The data file at ``path``, checked: 2-D, numeric, finite (streams: finite is checked as they are read).

    ``missing``: an empty cell, a null or NaN is a missing value, kept as NaN (``fit --missing marginalize``); the
    file is then read into memory (a ``.npy`` too), and an infinite value is still refused."""
    source = Path(path)
    suffix = source.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(
            f"{source}: unsupported data file type {suffix or '(no suffix)'!r}; use .npy, .csv, .tsv or .parquet"
        )
    if not source.is_file():
        raise DataError(f"{source}: no such file" + (" (it is a directory)" if source.is_dir() else ""))
    if suffix == ".npy":
        data = Data(source, _open_npy(source, batch_rows, seed))
        if missing:
            data = Data(source, np.concatenate(list(data.batches(batch_rows))) if data.n_samples else data.rows)
            _no_inf(data)
    elif suffix == ".parquet":
        data = _read_parquet(source, missing)
    else:
        delimiter = "\t" if suffix == ".tsv" else ","
        data = _read_text_arrow(source, delimiter, missing) or _read_text(source, delimiter, missing)
    if data.n_samples == 0:
        raise DataError(f"{source}: no rows of data")
    if data.n_features == 0:
        raise DataError(f"{source}: rows with no columns")
    return data


def _open_npy(path: Path, batch_rows: int, seed: int | None) -> NpyRows:
    try:
        rows = NpyRows(path, batch_rows, seed)
    except ValueError as err:  # an object array (pickle), a bad header, a file shorter than its header says
        raise DataError(f"{path}: not a readable numeric .npy file ({' '.join(str(err).split())})") from None
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if rows.dtype.kind not in "fiu":
        raise DataError(f"{path}: holds {rows.dtype} values; expected integer or floating point numbers")
    if len(rows.shape) != 2:
        hint = "; save X.reshape(-1, 1) for a single feature" if len(rows.shape) == 1 else ""
        raise DataError(f"{path}: a {len(rows.shape)}-D array of shape {rows.shape}; expected rows x features{hint}")
    return rows


def _no_inf(data: Data) -> None:
    """Refuse an infinite value (a missing one is NaN), naming its row and column."""
    rows = np.asarray(data.rows)
    if np.isinf(rows).any():
        row, column = (int(i[0]) for i in np.nonzero(np.isinf(rows)))
        raise DataError(f"{data.path}: row {row + 1}, column {column + 1} is infinite")


def _read_text(path: Path, delimiter: str, missing: bool = False) -> Data:
    """A delimited text file as float64 (N, D), with its header if the first row is not all numbers (``missing``:
    an empty cell or NaN is kept as NaN)."""
    header: list[str] | None = None
    values: list[list[float]] = []
    width: int | None = None
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=delimiter)
            for cells in reader:
                if not cells or all(not c.strip() for c in cells):
                    continue  # blank lines (a trailing newline)
                line = reader.line_num
                if width is not None and len(cells) != width:
                    raise DataError(f"{path}: line {line} has {len(cells)} fields, expected {width} (ragged rows)")
                numbers = [math.nan if missing and not c.strip() else _number(c) for c in cells]
                if width is None and header is None and not values and any(v is None for v in numbers):
                    header, width = [c.strip() for c in cells], len(cells)
                    continue
                width = len(cells)
                for column, (cell, value) in enumerate(zip(cells, numbers, strict=True), start=1):
                    if value is None or (not math.isfinite(value) and not (missing and math.isnan(value))):
                        what = "not a finite number" if value is not None else "not a number"
                        raise DataError(f"{path}: line {line}, column {column}: {cell.strip()[:40]!r} is {what}")
                values.append(numbers)  # type: ignore[arg-type]  # every cell was checked above
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise DataError(f"{path}: not readable as delimited text ({err})") from None
    return Data(path, np.array(values, dtype=np.float64).reshape(len(values), width or 0), header)


def _read_text_arrow(path: Path, delimiter: str, missing: bool = False) -> Data | None:
    """The text file read by pyarrow's CSV reader, or None where it is not installed or the file needs the careful
    reader: a first row that cannot be told apart cheaply, a refused cell (ragged rows, a cell pyarrow does not
    parse as a double), a missing or non-finite value. The header rule is :func:`_read_text`'s, on the first
    non-blank row, read with the csv module."""
    try:
        from pyarrow import ArrowException, float64
        from pyarrow import csv as pa_csv
    except ImportError:
        return None
    header: list[str] | None = None
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            first = next((cells for cells in csv.reader(f, delimiter=delimiter) if any(c.strip() for c in cells)), None)
    except (UnicodeDecodeError, csv.Error):
        return None  # the careful reader names the problem
    if first is None:
        return None
    if any(_number(c) is None for c in first if c.strip() or not missing):  # an empty cell: missing, not a name
        header = [c.strip() for c in first]
    names = [f"c{i}" for i in range(len(first))]
    try:
        table = pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=names, skip_rows=1 if header is not None else 0),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter),
            convert_options=pa_csv.ConvertOptions(column_types=dict.fromkeys(names, float64())),
        )
    except (ArrowException, OSError):
        return None
    if any(column.null_count for column in table.columns) and not missing:
        return None
    if not table.num_columns:
        return None
    rows = np.column_stack([column.to_numpy() for column in table.columns])  # a null is NaN in a float64 column
    if not np.isfinite(rows).all() and not (missing and not np.isinf(rows).any()):
        return None
    return Data(path, np.ascontiguousarray(rows, dtype=np.float64), header)


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _read_parquet(path: Path, missing: bool = False) -> Data:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"{path}: reading .parquet needs pyarrow: pip install 'implicit-em[parquet]' (or save the data as .npy "
            "or .csv)"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow's ArrowInvalid, OSError: a truncated or foreign file
        raise DataError(f"{path}: not a readable parquet file ({' '.join(str(err).split())[:200]})") from None
    columns: list[np.ndarray] = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise DataError(f"{path}: column {name!r} has type {column.type}; expected integer or floating point")
        if column.null_count and not missing:
            raise DataError(
                f"{path}: column {name!r} has {column.null_count} missing values; remove or impute them, or fit with "
                "--missing marginalize"
            )
        values = column.to_numpy()
        columns.append(values.astype(np.float64) if column.null_count else values)  # a null: NaN
    dtype = np.float32 if columns and all(c.dtype == np.float32 for c in columns) else np.float64
    rows = np.column_stack(columns).astype(dtype, copy=False) if columns else np.zeros((table.num_rows, 0))
    bad = np.isinf(rows) if missing else ~np.isfinite(rows)
    if bad.any():
        row, column = (int(i[0]) for i in np.nonzero(bad))
        raise DataError(f"{path}: row {row + 1}, column {table.column_names[column]!r} is not a finite number")
    return Data(path, rows, list(table.column_names))
