"""The battery's row format can fail: a row whose call does not raise, raises another message, or returns a
value its check rejects fails the test."""

import pytest

from _battery import Case, ids


def _raise(message: str) -> None:
    raise ValueError(message)


def test_a_matching_error_passes() -> None:
    Case("ok", lambda: _raise("X has NaN in row 3"), ValueError, r"NaN").check_it()


@pytest.mark.parametrize(
    "case",
    [
        Case("no error", lambda: None, ValueError, "NaN"),
        Case("other message", lambda: _raise("something else"), ValueError, "NaN"),
        Case("check rejects", lambda: float("nan"), check=lambda v: v == v),
    ],
    ids=lambda c: c.name,
)
def test_a_wrong_row_fails(case: Case) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        case.check_it()


def test_rows_are_well_formed() -> None:
    with pytest.raises(ValueError, match="match"):
        Case("no pattern", lambda: None, ValueError)
    with pytest.raises(ValueError, match="check"):
        Case("no check", lambda: None)
    with pytest.raises(ValueError, match="duplicate"):
        ids([Case("a", lambda: 1, check=bool), Case("a", lambda: 1, check=bool)])
    assert Case("e", lambda: None, ValueError, "x").kind == "error"
    assert Case("f", lambda: 1, check=bool).kind == "fit"
