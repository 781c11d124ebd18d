"""Context.cached: a testbed's value is computed once per run folder and key, and read back exactly."""

from pathlib import Path

import torch

from implicit_em.audit.core import Context


def test_a_value_is_computed_once_per_key_and_read_back_exactly(tmp_path: Path) -> None:
    ctx, calls = Context(tmp_path), []

    def compute() -> dict[str, object]:
        calls.append(1)
        return {"w": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), "history": [0.5, 0.25], "n": 3}

    key = {"settings": {"steps": 10}, "seed": 1, "means": torch.arange(4.0)}
    first = ctx.cached("fit", key, compute)
    again = ctx.cached("fit", key, compute)
    assert len(calls) == 1
    assert torch.equal(first["w"], again["w"]) and again["history"] == [0.5, 0.25] and again["n"] == 3
    ctx.cached("fit", {**key, "seed": 2}, compute)
    ctx.cached("fit", {**key, "means": torch.arange(4.0) + 1}, compute)  # a tensor in the key: by its bytes
    assert len(calls) == 3
    assert len(list((tmp_path / "testbeds").glob("fit-*.pt"))) == 3
    assert not list((tmp_path / "testbeds").glob("*.tmp"))  # written atomically
