"""Reading .csv/.tsv: pyarrow's reader (when installed) and the csv module's give the same numbers and header,
bitwise; wherever pyarrow refuses a file, or finds a missing or non-finite value, the csv module's reader answers,
so every error still names its line and column."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from implicit_em import _cli_data

pytest.importorskip("pyarrow")


def _both(path: Path, delimiter: str = ",") -> tuple[_cli_data.Data | None, _cli_data.Data]:
    return _cli_data._read_text_arrow(path, delimiter), _cli_data._read_text(path, delimiter)


def _same(fast: _cli_data.Data | None, slow: _cli_data.Data) -> None:
    assert fast is not None, "pyarrow's reader fell back where it should read"
    assert fast.header == slow.header and fast.rows.dtype == slow.rows.dtype == np.float64
    np.testing.assert_array_equal(fast.rows, slow.rows)  # bitwise: both parse to the correctly rounded double
    assert fast.rows.tobytes() == slow.rows.tobytes()


FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=40, deadline=None)
@given(
    x=arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 6)), elements=FINITE),
    fmt=st.sampled_from(["repr", "%.17g", "%.3f", "%.6e"]),
    header=st.booleans(),
)
def test_both_readers_give_the_same_numbers(tmp_path_factory: pytest.TempPathFactory, x: np.ndarray, fmt: str,
                                            header: bool) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("csv") / "x.csv"
    cell = repr if fmt == "repr" else (lambda v: fmt % v)
    lines = [",".join(f"col {j}" for j in range(x.shape[1]))] if header else []
    lines += [",".join(cell(float(v)) for v in row) for row in x]
    path.write_text("\n".join(lines) + "\n")
    _same(*_both(path))


def test_tabs_quotes_blank_lines_integers_and_a_byte_order_mark(tmp_path: Path) -> None:
    tsv = tmp_path / "x.tsv"
    tsv.write_text("a\tb\n1\t2\n\n3.5\t-4e-3\n")
    _same(*_both(tsv, "\t"))
    quoted = tmp_path / "q.csv"
    quoted.write_text('"x","y"\n"1.25","2"\n3,"4"\n')
    _same(*_both(quoted))
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffa,b\n1,2\n".encode())
    fast, slow = _both(bom)
    assert slow.header == ["a", "b"]
    if fast is not None:  # pyarrow skips the mark or falls back: either way the same result
        _same(fast, slow)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n3,oops\n", "line 3, column 2: 'oops' is not a number"),
        ("a,b\n1,nan\n", "line 2, column 2: 'nan' is not a finite number"),
        ("a,b\n1,inf\n", "line 2, column 2: 'inf' is not a finite number"),
        ("a,b\n1,\n", "line 2, column 2: '' is not a number"),
        ("a,b\n1,2\n3\n", "line 3 has 1 fields, expected 2 (ragged rows)"),
        ("1,1e999\n", "line 1, column 2: '1e999' is not a finite number"),
    ],
)
def test_what_pyarrow_refuses_is_read_again_and_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert _cli_data._read_text_arrow(path, ",") is None
    with pytest.raises(_cli_data.DataError, match=re.escape(message)):
        _cli_data.read_data(path)


def test_read_data_uses_pyarrow_and_keeps_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.csv"
    path.write_text("u,v\n1,2\n3,4\n")
    calls: list[Path] = []
    slow = _cli_data._read_text
    monkeypatch.setattr(_cli_data, "_read_text", lambda p, d: calls.append(p) or slow(p, d))
    data = _cli_data.read_data(path)
    assert calls == [] and data.header == ["u", "v"] and data.rows.tolist() == [[1.0, 2.0], [3.0, 4.0]]
