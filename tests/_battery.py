"""The bad-input battery's table format, shared by ``tests/test_bad_inputs_*.py``.

Each row is one call a user might make and what it must do: raise a named exception whose message matches a
pattern (a *clear error*: it names the argument and the problem), or succeed (a *fit*: the call returns and the
row's own check holds). A new public function gets its rows in the table of its area::

    CASES = [
        Case("means_init NaN", lambda: GaussianMixture(2, means_init=M).fit(X), ValueError, "means_init.*NaN"),
        Case("float32 input fits", lambda: GaussianMixture(2).fit(X.astype(np.float32)), check=_finite_params),
    ]

    @pytest.mark.parametrize("case", CASES, ids=ids(CASES))
    def test_battery(case: Case) -> None:
        case.check_it()
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

__all__ = ["Case", "ids"]


@dataclass(frozen=True)
class Case:
    """One row: ``call()`` raises ``raises`` with a message matching ``match``, or (``raises=None``) returns a
    value for which ``check(value)`` is true."""

    name: str
    call: Callable[[], Any]
    raises: type[BaseException] | tuple[type[BaseException], ...] | None = None
    match: str | None = None
    check: Callable[[Any], bool] | None = None

    def __post_init__(self) -> None:
        if self.raises is not None and not self.match:
            raise ValueError(f"case {self.name!r}: a clear error needs a message pattern (match=...)")
        if self.raises is None and self.check is None:
            raise ValueError(f"case {self.name!r}: a call that must succeed needs a check (check=...)")

    @property
    def kind(self) -> str:
        """``"error"`` or ``"fit"``, for the battery's counts."""
        return "error" if self.raises is not None else "fit"

    def check_it(self) -> None:
        """Run the row and fail with the case's name if it does not do what the row says."""
        if self.raises is not None:
            assert self.match is not None
            with pytest.raises(self.raises) as info:
                self.call()
            assert re.search(self.match, str(info.value)), (
                f"{self.name}: message {str(info.value)!r} does not match {self.match!r}"
            )
        else:
            assert self.check is not None
            value = self.call()
            assert self.check(value), f"{self.name}: the call returned but its check failed ({value!r})"


def ids(cases: Sequence[Case]) -> list[str]:
    """pytest ids: the cases' names, which must be unique within a table."""
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate case names: {sorted(duplicates)}")
    return names
