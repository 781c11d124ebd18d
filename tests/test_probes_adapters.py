"""The probes' attention core shared by the adapters: one repeat_kv, one choice of path, no import cycle."""

import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.probes import AttentionProbe
from implicit_em.probes.attention import _observed_attention, attend, repeat_kv

PROBES = Path(__file__).resolve().parents[1] / "src" / "implicit_em" / "probes"
PACKAGE = "implicit_em.probes"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of implicit_em.probes it imports anywhere (top level, in functions, TYPE_CHECKING).

    ``from implicit_em.probes import x`` is an import of the submodule x when x is one, else of the package.
    """
    modules = {path.stem: path for path in PROBES.glob("*.py")}
    name = {stem: PACKAGE if stem == "__init__" else f"{PACKAGE}.{stem}" for stem in modules}
    graph: dict[str, set[str]] = {}
    for stem, path in modules.items():
        edges = graph.setdefault(name[stem], set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name.startswith(PACKAGE))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from .x import y
                    base = ".".join([PACKAGE, *([base] if base else [])])
                if not base.startswith(PACKAGE):
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    edges.add(sub if base == PACKAGE and alias.name in modules else base)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``graph`` as a path [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_probes_import_graph_has_no_cycle() -> None:
    graph = _import_graph()
    assert f"{PACKAGE}._torch_mha" in graph and f"{PACKAGE}._capture" in graph
    assert _cycle(graph) is None, _cycle(graph)


@pytest.mark.parametrize("adapter", ["_torch_mha", "_hf"])
def test_adapters_import_only_the_attention_core(adapter: str) -> None:
    assert _import_graph()[f"{PACKAGE}.{adapter}"] == {f"{PACKAGE}.attention"}
    assert _import_graph()[f"{PACKAGE}._capture"] >= {f"{PACKAGE}.{adapter}", f"{PACKAGE}.attention"}


def test_cycle_finder_finds_a_cycle() -> None:
    """The check above is not vacuous: the former capture <-> _torch_mha pair is reported."""
    former = {"capture": {"_torch_mha", "attention"}, "_torch_mha": {"attention", "capture"}, "attention": set()}
    assert _cycle(former) == ["_torch_mha", "capture", "_torch_mha"]


def _sdpa_gqa_reference(x: Tensor, n_rep: int) -> Tensor:
    """The F.sdpa adapter's former repeat (probes/_torch_mha.py at b4f3b95): repeat_interleave on dim -3."""
    return x.repeat_interleave(n_rep, dim=-3)


def _hf_reference(x: Tensor, n_rep: int) -> Tensor:
    """The Hugging Face adapter's former repeat_kv (probes/_hf.py at b4f3b95), 4-D only."""
    if n_rep == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


@pytest.mark.parametrize("n_rep", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(3, 2, 5, 4), (2, 5, 3), (2, 3, 2, 4, 5)])
def test_repeat_kv_equals_both_former_repeats_with_their_gradients(shape: tuple[int, ...], n_rep: int) -> None:
    references = [_sdpa_gqa_reference] + ([_hf_reference] if len(shape) == 4 else [])
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    got = repeat_kv(x, n_rep)
    upstream = torch.randn_like(got)
    (grad,) = torch.autograd.grad(got, x, upstream)
    for reference in references:
        expected = reference(x, n_rep)
        (expected_grad,) = torch.autograd.grad(expected, x, upstream)
        assert torch.equal(got, expected) and torch.equal(grad, expected_grad), reference.__name__


def test_repeat_kv_groups_consecutive_query_heads() -> None:
    """Closed form: with 2 key/value heads and 3 query heads per group, query head h reads kv head h // 3."""
    x = torch.arange(2.0).view(1, 2, 1, 1)  # (B, Hkv, S, D) = (1, 2, 1, 1)
    assert repeat_kv(x, 3).flatten().tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert repeat_kv(x, 1) is x


# ---- _observed_attention: the one place that chooses explicit, fused plus shadow, or split and concatenate ----


class _Calls:
    """An adapter's two paths around attend and sdpa, recording (path, batch, mask batch, dropout) per call."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, int | None, float]] = []

    def explicit(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> tuple[Tensor, Tensor]:
        self.log.append(("explicit", q.shape[0], None if mask is None else mask.shape[0], p))
        return attend(q, k, v, mask, p)

    def fused(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> Tensor:
        self.log.append(("fused", q.shape[0], None if mask is None else mask.shape[0], p))
        return F.scaled_dot_product_attention(q, k, v, mask, p)


def _inputs(b: int = 3) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    q, k, v = (torch.randn(b, 2, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.rand(b, 1, 5, 5) > 0.3
    mask[..., 0] = True  # every query row attends to something
    return q, k, v, mask


def test_without_a_sub_batch_the_explicit_path_computes_the_whole_call() -> None:
    calls, (q, k, v, mask) = _Calls(), _inputs()
    with AttentionProbe(mode="summary", summary_batch=None):
        output, weights = _observed_attention(q, k, v, mask, 0.0, calls.explicit, calls.fused)
    assert calls.log == [("explicit", 3, 3, 0.0)]
    expected, expected_weights = attend(q, k, v, mask)
    assert weights is not None and torch.equal(weights, expected_weights) and torch.equal(output, expected)


def test_sub_batch_without_dropout_is_the_fused_call_plus_a_shadow_of_the_first_sequences() -> None:
    calls, (q, k, v, mask) = _Calls(), _inputs()
    upstream = torch.randn(3, 2, 5, 4, dtype=torch.float64)
    with AttentionProbe(mode="summary", summary_batch=1) as probe:
        output, weights = _observed_attention(q, k, v, mask, 0.0, calls.explicit, calls.fused)
        output.backward(upstream)  # a backward, as a training step runs (autograd.grad would skip the shadow)
    grads = [x.grad for x in (q, k, v)]
    assert calls.log == [("fused", 3, 3, 0.0), ("explicit", 1, 1, 0.0)]
    assert weights is None
    expected = F.scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(output, expected)  # the fused kernel's output and gradients, bit for bit
    for got, want in zip(grads, torch.autograd.grad(expected, (q, k, v), upstream), strict=True):
        assert torch.equal(got, want)
    assert probe.check_laws()["routing_law"] <= 1e-12  # the shadow read the upstream gradient of sequence 0


def test_sub_batch_with_dropout_splits_the_call_and_concatenates() -> None:
    calls, (q, k, v, mask) = _Calls(), _inputs()
    with AttentionProbe(mode="summary", summary_batch=2):
        torch.manual_seed(5)
        output, weights = _observed_attention(q, k, v, mask, 0.25, calls.explicit, calls.fused)
    assert calls.log == [("explicit", 2, 2, 0.25), ("fused", 1, 1, 0.25)]  # the observed sequences draw first
    assert weights is None
    torch.manual_seed(5)
    head = attend(q[:2], k[:2], v[:2], mask[:2], 0.25)[0]
    tail = F.scaled_dot_product_attention(q[2:], k[2:], v[2:], mask[2:], 0.25)
    assert torch.equal(output, torch.cat((head, tail)))


def test_a_mask_that_broadcasts_over_the_batch_goes_to_both_parts_whole() -> None:
    calls, (q, k, v, _) = _Calls(), _inputs()
    shared = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    with AttentionProbe(mode="summary", summary_batch=1):
        _observed_attention(q, k, v, shared, 0.0, calls.explicit, calls.fused)
        _observed_attention(q, k, v, shared, 0.5, calls.explicit, calls.fused)
    assert [mask_batch for *_, mask_batch, _ in calls.log] == [1, 1, 1, 1]
    assert [batch for _, batch, *_ in calls.log] == [3, 1, 1, 2]
