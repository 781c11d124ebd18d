"""``implicit_em._checks.max_abs``: the one reduction behind every value check, against numpy's |x|.max()."""

import math

import numpy as np
import pytest
import torch

from implicit_em._checks import check_finite, max_abs

_N = math.nan


def _cases() -> list[tuple[str, object, float]]:
    x = np.array([[1.0, -9.0, 3.0], [2.0, 0.5, -4.0]])
    return [
        ("numpy", x, 9.0),
        ("numpy F-order", np.asfortranarray(x), 9.0),
        ("tensor", torch.from_numpy(x), 9.0),
        ("tensor view", torch.from_numpy(x)[:, ::2], 4.0),
        ("tensor transposed", torch.from_numpy(x).T, 9.0),
        ("negated view", torch.from_numpy(x)._neg_view(), 9.0),
        ("requires grad", torch.from_numpy(x).requires_grad_(True), 9.0),
        ("int tensor", torch.tensor([[-7, 3]]), 7.0),
        ("bool tensor", torch.tensor([[True, False]]), 1.0),
        ("bfloat16", torch.tensor([[-2.0, 1.0]], dtype=torch.bfloat16), 2.0),
        ("float16 numpy", x.astype(np.float16), 9.0),
        ("empty", np.zeros((0, 3)), 0.0),
        ("empty tensor", torch.zeros(0, 3), 0.0),
        ("scalar", torch.tensor(-2.5), 2.5),
    ]


@pytest.mark.parametrize(("name", "x", "expected"), _cases(), ids=[c[0] for c in _cases()])
def test_max_abs_is_the_largest_magnitude(name: str, x: object, expected: float) -> None:
    assert max_abs(x) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["numpy", "tensor", "bfloat16"])
@pytest.mark.parametrize("where", [0, 1, 5])
@pytest.mark.parametrize(("bad", "expected"), [(_N, _N), (math.inf, math.inf), (-math.inf, math.inf)])
def test_max_abs_propagates_nan_and_inf_wherever_they_are(kind: str, where: int, bad: float, expected: float) -> None:
    """NaN anywhere gives NaN (Python's max() would drop it when it comes second: taken care of), inf gives inf."""
    x = np.arange(6.0).reshape(2, 3)
    x.flat[where] = bad
    data: object = {"numpy": x, "tensor": torch.from_numpy(x), "bfloat16": torch.from_numpy(x).bfloat16()}[kind]
    got = max_abs(data)  # type: ignore[arg-type]
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_check_finite_still_raises_on_nan_and_inf() -> None:
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        check_finite("x", torch.tensor([1.0, _N]))
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        check_finite("x", torch.tensor([-math.inf, 1.0]))
    check_finite("x", torch.tensor([1.0, 2.0]))
