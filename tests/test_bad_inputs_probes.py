"""The bad-input battery of the probes, the diagnostics, the distance layers and the objectives' public functions.

A clear error is a ``ValueError`` or ``TypeError`` that names the argument and the problem; a fit is a call that
must keep working (and its check holds). Each row runs as in a user's program: with the test-time shape checker
off (``_typecheck.unchecked``), so that the library's own checks are what the row sees.
"""

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import implicit_em
from _battery import Case, ids
from _typecheck import unchecked
from implicit_em import objectives as O
from implicit_em.diagnostics import (
    Monitor,
    component_usage,
    dead_components,
    dominance,
    drift,
    effective_components,
    metric_collapse,
    min_variance,
    relative_change,
    responsibility_histograms,
    singularity,
    two_timescale,
    usage_entropy,
)
from implicit_em.distances import GaussianComponents, Prototypes
from implicit_em.probes import AttentionProbe, HeadProbe, attention, hopfield_residual

NAN, INF = float("nan"), float("inf")


def _user(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with the test-time type checker off, as in a user's program."""

    def run() -> Any:
        with unchecked():
            return call()

    return run


def _d(n: int = 4, k: int = 3, bad: float | None = None) -> Tensor:
    d = torch.rand(n, k, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    if bad is not None:
        d[1, 2] = bad
    return d


def _x(n: int = 5, dim: int = 3, bad: float | None = None, dtype: torch.dtype = torch.float64) -> Tensor:
    x = torch.randn(n, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(dtype)
    if bad is not None:
        x[2, 1] = bad
    return x


def _finite(t: Any) -> bool:
    return isinstance(t, Tensor) and bool(torch.isfinite(t).all())


def _rows_sum_to_one(r: Tensor) -> bool:
    return _finite(r) and torch.allclose(r.sum(-1), torch.ones((), dtype=r.dtype))


_IDX = torch.tensor([0, 1, 2, 0])


# ---------------------------------------------------------------------------------------------- Prototypes


def _prototypes(k: int = 4, dim: int = 3, bad: float | None = None) -> Prototypes:
    layer = Prototypes(k, dim, dtype=torch.float64)
    if bad is not None:
        with torch.no_grad():
            layer.prototypes[0, 0] = bad
    return layer


def _prototypes_unchecked_nan() -> Tensor:
    implicit_em.set_validate_args(False)  # the autouse fixture of conftest.py switches it back on
    return _prototypes()(_x(bad=NAN))


def _prototypes_grad_matches() -> bool:
    layer = _prototypes()
    x = _x().requires_grad_(True)
    layer(x).sum().backward()
    expected = 2 * (x[:, None] - layer.prototypes).sum(1).detach()  # d/dx sum_k ||x - m_k||^2
    return x.grad is not None and torch.allclose(x.grad, expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------- HeadProbe


def _head(regime: str = "constrained", target: Any = None, **kw: Any) -> Tensor:
    probe = HeadProbe(regime=regime, kind="logits", **kw)  # type: ignore[arg-type]
    z = torch.randn(3, 4, dtype=torch.float64, requires_grad=True, generator=torch.Generator().manual_seed(2))
    F.cross_entropy(probe(z), torch.tensor([0, 1, 3])).backward()
    return probe.responsibilities(target)


def _head_on(module: nn.Module, x: Tensor) -> Any:
    with HeadProbe(module) as probe:
        module(x)
    return probe.value


class _TupleHead(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x, x


class _DictHead(nn.Module):
    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"logits": x}


class _TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(3, 5), nn.Linear(5, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


def _head_residual_on_a_module() -> float:
    model = _TwoLayers().double()
    x = _x()
    with HeadProbe(model.head, regime="constrained", kind="logits") as probe:
        F.cross_entropy(model(x), torch.tensor([0, 1, 2, 3, 0])).backward()
    return probe.residual(target=torch.tensor([0, 1, 2, 3, 0]))


# ---------------------------------------------------------------------------------------------- Monitor


def _monitor_line(**values: Any) -> Any:
    """The JSON line of one ``Monitor.log`` call, parsed by a strict parser (no NaN, no Infinity)."""
    path = _tmp() / "log.jsonl"
    with Monitor(path) as monitor:
        monitor.log(0, **values)

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(path.read_text().splitlines()[-1], parse_constant=refuse)


_TMP: list[Path] = []


@pytest.fixture(autouse=True)
def _tmp_dir(tmp_path: Path) -> Any:
    _TMP.append(tmp_path)
    yield
    _TMP.clear()


def _tmp() -> Path:
    return _TMP[-1]


# ---------------------------------------------------------------------------------------------- attention

_Q = torch.randn(1, 2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
_K = torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
_V = torch.randn(1, 2, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))


def _like_sdpa(**kw: Any) -> bool:
    ours = attention(_Q, _K, _V, **kw)
    theirs = F.scaled_dot_product_attention(_Q, _K, _V, **kw)
    return torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12, equal_nan=True)


def _nan_like_sdpa() -> bool:
    q = _Q.clone()
    q[0, 0, 1, 2] = NAN
    ours, theirs = attention(q, _K, _V), F.scaled_dot_product_attention(q, _K, _V)
    return bool(torch.equal(ours.isnan(), theirs.isnan())) and bool(ours.isnan().any())


CASES = [
    # --- Prototypes (finding 6) --------------------------------------------------------------------------------
    Case("Prototypes x NaN", _user(lambda: _prototypes()(_x(bad=NAN))), ValueError, r"x contains NaN or inf"),
    Case("Prototypes x +inf", _user(lambda: _prototypes()(_x(bad=INF))), ValueError, r"x contains NaN or inf"),
    Case("Prototypes x -inf", _user(lambda: _prototypes()(_x(bad=-INF))), ValueError, r"x contains NaN or inf"),
    Case("Prototypes NaN prototypes", _user(lambda: _prototypes(bad=NAN)(_x())), ValueError, "prototypes contain"),
    Case("Prototypes wrong D", _user(lambda: _prototypes()(_x(dim=4))), ValueError, "x has 4 features but the pro"),
    Case("Prototypes scalar x", _user(lambda: _prototypes()(torch.tensor(1.0))), ValueError, r"x must have shape \("),
    Case("Prototypes x a list", _user(lambda: _prototypes()([[1.0, 2.0, 3.0]])), TypeError, "x must be a torch.Tensor"),
    Case("Prototypes x numpy", _user(lambda: _prototypes()(np.zeros((2, 3)))), TypeError, "x must be a torch.Tensor"),
    Case("Prototypes x int", _user(lambda: _prototypes()(torch.ones(2, 3, dtype=torch.long))), ValueError, "x must be"),
    Case("Prototypes x bool", _user(lambda: _prototypes()(torch.ones(2, 3, dtype=torch.bool))), ValueError, "floating"),
    Case("Prototypes K = 0", _user(lambda: Prototypes(0, 3)), ValueError, "need n_components >= 1"),
    Case("Prototypes K = 2.5", _user(lambda: Prototypes(2.5, 3)), TypeError, "n_components must be an integer"),  # type: ignore[arg-type]
    Case("Prototypes D = '3'", _user(lambda: Prototypes(2, "3")), TypeError, "n_features must be an integer"),  # type: ignore[arg-type]
    Case("Prototypes K = True", _user(lambda: Prototypes(True, 3)), TypeError, "n_components must be an integer"),
    Case("Prototypes fit", _user(lambda: _prototypes()(_x())), check=lambda d: _finite(d) and d.shape == (5, 4)),
    Case(
        "Prototypes batch dims",
        _user(lambda: _prototypes()(torch.randn(2, 5, 3, dtype=torch.float64))),
        check=lambda d: d.shape == (2, 5, 4),
    ),
    Case(
        "Prototypes empty batch",
        _user(lambda: _prototypes()(torch.zeros(0, 3, dtype=torch.float64))),
        check=lambda d: d.shape == (0, 4),
    ),
    Case(
        "Prototypes float32 x",
        _user(lambda: Prototypes(4, 3)(_x(dtype=torch.float32))),
        check=lambda d: d.dtype == torch.float32,
    ),
    Case(
        "Prototypes numpy int K",
        _user(lambda: Prototypes(np.int64(4), 3)),
        check=lambda m: m.prototypes.shape == (4, 3),
    ),
    Case("Prototypes gradient", _user(_prototypes_grad_matches), check=bool),
    Case(
        "Prototypes float16 overflow passes",
        _user(lambda: Prototypes(2, 3, dtype=torch.float16)(torch.full((2, 3), 300.0, dtype=torch.float16))),
        check=lambda d: d.dtype == torch.float16,
    ),
    Case("Prototypes checks off: NaN passes", _user(_prototypes_unchecked_nan), check=lambda d: bool(d.isnan().any())),
    # --- objectives ---------------------------------------------------------------------------------------------
    Case("lse NaN", _user(lambda: O.lse(_d(bad=NAN))), ValueError, "d contains NaN"),
    Case("lse -inf", _user(lambda: O.lse(_d(bad=-INF))), ValueError, "d contains -inf"),
    Case("lse row all +inf", _user(lambda: O.lse(torch.full((2, 3), INF))), ValueError, "every distance is \\+inf"),
    Case("lse int", _user(lambda: O.lse(torch.ones(2, 3, dtype=torch.long))), ValueError, "d must be a floating"),
    Case("lse list", _user(lambda: O.lse([[1.0, 2.0]])), TypeError, "d must be a torch.Tensor"),
    Case("lse scalar", _user(lambda: O.lse(torch.tensor(1.0))), ValueError, "at least one dimension"),
    Case("lse K = 0", _user(lambda: O.lse(torch.zeros(2, 0))), ValueError, "K = 0 components"),
    Case("lse dim out of range", _user(lambda: O.lse(_d(), dim=5)), ValueError, "dim=5 is out of range"),
    Case("lse +inf component fits", _user(lambda: O.lse(_d(bad=INF))), check=_finite),
    Case(
        "lse float16 fits", _user(lambda: O.lse(_d().half())), check=lambda v: v.dtype == torch.float16 and _finite(v)
    ),
    Case("responsibilities NaN", _user(lambda: O.responsibilities(_d(bad=NAN))), ValueError, "d contains NaN"),
    Case(
        "responsibilities +inf fits",
        _user(lambda: O.responsibilities(_d(bad=INF))),
        check=lambda r: _rows_sum_to_one(r) and r[1, 2] == 0,
    ),
    Case(
        "responsibilities log_weights NaN",
        _user(lambda: O.responsibilities(_d(), torch.tensor([0.0, NAN, 0.0]))),
        ValueError,
        "log_weights contains NaN",
    ),
    Case(
        "responsibilities log_weights length",
        _user(lambda: O.responsibilities(_d(), torch.zeros(4))),
        ValueError,
        "log_weights has 4 entries",
    ),
    Case(
        "responsibilities log_weights list",
        _user(lambda: O.responsibilities(_d(), [0.0, 0.0, 0.0])),
        TypeError,
        "log_weights must be a torch",
    ),
    Case(
        "responsibilities log_weights all -inf",
        _user(lambda: O.responsibilities(_d(), torch.full((3,), -INF))),
        ValueError,
        "zero weight",
    ),
    Case(
        "responsibilities fit",
        _user(lambda: O.responsibilities(_d(), torch.log_softmax(torch.zeros(3), 0))),
        check=_rows_sum_to_one,
    ),
    Case("mixture_nll NaN", _user(lambda: O.mixture_nll(_d(bad=NAN))), ValueError, "d contains NaN"),
    Case(
        "mixture_nll broadcast weights",
        _user(lambda: O.mixture_nll(_d(), torch.zeros(2, 3))),
        ValueError,
        "does not broadcast",
    ),
    Case("mixture_nll fit", _user(lambda: O.mixture_nll(_d())), check=_finite),
    Case("softmin_bounds NaN", _user(lambda: O.softmin_bounds(_d(bad=NAN))), ValueError, "d contains NaN"),
    Case("softmin_bounds fit", _user(lambda: O.softmin_bounds(_d())), check=lambda lu: bool((lu[0] <= lu[1]).all())),
    Case("CE NaN", _user(lambda: O.constrained_cross_entropy(_d(bad=NAN), _IDX)), ValueError, "d contains NaN"),
    Case(
        "CE target out of range",
        _user(lambda: O.constrained_cross_entropy(_d(), torch.tensor([0, 1, 2, 3]))),
        ValueError,
        r"target out of range \[0, 3\)",
    ),
    Case(
        "CE target negative",
        _user(lambda: O.constrained_cross_entropy(_d(), torch.tensor([0, 1, 2, -1]))),
        ValueError,
        "target out of range",
    ),
    Case(
        "CE target shape",
        _user(lambda: O.constrained_cross_entropy(_d(), torch.tensor([0, 1]))),
        ValueError,
        "target must have shape \\(4,\\)",
    ),
    Case(
        "CE soft target shape",
        _user(lambda: O.constrained_cross_entropy(_d(), torch.zeros(4))),
        ValueError,
        "soft target must have d's shape",
    ),
    Case(
        "CE soft target NaN",
        _user(lambda: O.constrained_cross_entropy(_d(), torch.full((4, 3), NAN))),
        ValueError,
        "target contains NaN",
    ),
    Case(
        "CE target a list",
        _user(lambda: O.constrained_cross_entropy(_d(), [0, 1, 2, 0])),
        TypeError,
        "target must be a torch.Tensor",
    ),
    Case(
        "CE label_smoothing NaN",
        _user(lambda: O.constrained_cross_entropy(_d(), _IDX, label_smoothing=NAN)),
        ValueError,
        "label_smoothing must lie in",
    ),
    Case(
        "CE label_smoothing 2",
        _user(lambda: O.constrained_cross_entropy(_d(), _IDX, label_smoothing=2.0)),
        ValueError,
        "label_smoothing must lie in",
    ),
    Case(
        "CE fit = F.cross_entropy",
        _user(lambda: O.constrained_cross_entropy(_d(), _IDX, label_smoothing=0.1)),
        check=lambda v: torch.allclose(
            v, F.cross_entropy(-_d(), _IDX, reduction="none", label_smoothing=0.1), rtol=1e-12, atol=1e-12
        ),
    ),
    Case(
        "CE impossible class fits",
        _user(lambda: O.constrained_cross_entropy(_d(bad=INF), _IDX, label_smoothing=0.0)),
        check=_finite,
    ),
    Case("correntropy NaN", _user(lambda: O.correntropy(_d(bad=NAN), 1.0)), ValueError, "d contains NaN"),
    Case("correntropy sigma 0", _user(lambda: O.correntropy(_d(), 0.0)), ValueError, "sigma must be > 0"),
    Case("correntropy sigma NaN", _user(lambda: O.correntropy(_d(), NAN)), ValueError, "sigma must be > 0"),
    Case(
        "correntropy sigma text", _user(lambda: O.correntropy(_d(), "1")), TypeError, "sigma must be a positive number"
    ),  # type: ignore[arg-type]
    Case(
        "correntropy int d",
        _user(lambda: O.correntropy(torch.ones(2, 3, dtype=torch.long), 1.0)),
        ValueError,
        "d must be a floating",
    ),
    Case("correntropy far outlier fits", _user(lambda: O.correntropy(_d(bad=INF), 1.0)), check=_finite),
    Case(
        "sigmoid BCE NaN",
        _user(lambda: O.independent_sigmoid_bce(_d(bad=NAN), _IDX)),
        ValueError,
        "z contains NaN or inf",
    ),
    Case(
        "sigmoid BCE targets a list",
        _user(lambda: O.independent_sigmoid_bce(_d(), [0, 1, 2, 0])),
        TypeError,
        "targets must be a torch.Tensor",
    ),
    Case(
        "sigmoid BCE target NaN",
        _user(lambda: O.independent_sigmoid_bce(_d(), torch.full((4, 3), NAN))),
        ValueError,
        "target contains NaN",
    ),
    Case("sigmoid BCE fit", _user(lambda: O.independent_sigmoid_bce(_d(), _IDX)), check=_finite),
    Case(
        "GaussianComponents x NaN",
        _user(lambda: GaussianComponents(2, 3)(_x(bad=NAN, dtype=torch.float32))),
        ValueError,
        "x contains NaN or inf",
    ),
    Case(
        "GaussianComponents wrong D",
        _user(lambda: GaussianComponents(2, 3)(torch.randn(4, 2))),
        ValueError,
        r"x must have shape \(\.\.\., D\) with D = 3",
    ),
    # --- HeadProbe (finding 5) ----------------------------------------------------------------------------------
    Case(
        "HeadProbe on nn.LSTM",
        _user(lambda: HeadProbe(nn.LSTM(3, 4)).__enter__()),
        TypeError,
        "LSTM returns a tuple; it watches a module that returns one tensor",
    ),
    Case("HeadProbe on nn.GRU", _user(lambda: HeadProbe(nn.GRU(3, 4)).__enter__()), TypeError, "GRU returns a tuple"),
    Case(
        "HeadProbe on nn.MultiheadAttention",
        _user(lambda: HeadProbe(nn.MultiheadAttention(4, 1)).__enter__()),
        TypeError,
        "MultiheadAttention returns a tuple",
    ),
    Case(
        "HeadProbe on a tuple output",
        _user(lambda: _head_on(_TupleHead(), _x())),
        TypeError,
        "_TupleHead returned a tuple",
    ),
    Case(
        "HeadProbe on a dict output", _user(lambda: _head_on(_DictHead(), _x())), TypeError, "_DictHead returned a dict"
    ),
    Case(
        "HeadProbe module a function",
        _user(lambda: HeadProbe(lambda x: x)),
        TypeError,
        "module must be a torch.nn.Module",
    ),  # type: ignore[arg-type]
    Case(
        "HeadProbe watch a list",
        _user(lambda: HeadProbe()([1.0, 2.0])),
        TypeError,
        "HeadProbe watches one tensor.*got a list",
    ),
    Case(
        "HeadProbe watch a scalar", _user(lambda: HeadProbe()(torch.tensor(1.0))), ValueError, "needs a component dim"
    ),
    Case("HeadProbe regime", _user(lambda: HeadProbe(regime="supervised")), ValueError, "regime must be one of"),  # type: ignore[arg-type]
    Case("HeadProbe kind", _user(lambda: HeadProbe(kind="scores")), ValueError, "kind must be 'distances' or"),  # type: ignore[arg-type]
    Case(
        "HeadProbe reduction 'avg'", _user(lambda: HeadProbe(reduction="avg")), ValueError, "reduction must be 'mean'"
    ),  # type: ignore[arg-type]
    Case(
        "HeadProbe reduction 0",
        _user(lambda: HeadProbe(reduction=0.0)),
        ValueError,
        "reduction must be a positive finite",
    ),
    Case(
        "HeadProbe reduction -1",
        _user(lambda: HeadProbe(reduction=-1.0)),
        ValueError,
        "reduction must be a positive finite",
    ),
    Case(
        "HeadProbe reduction NaN",
        _user(lambda: HeadProbe(reduction=NAN)),
        ValueError,
        "reduction must be a positive finite",
    ),
    Case(
        "HeadProbe reduction True",
        _user(lambda: HeadProbe(reduction=True)),
        TypeError,
        "reduction must be 'mean', 'sum' or a number, got bool",
    ),
    Case(
        "HeadProbe log_weights a list",
        _user(lambda: HeadProbe(log_weights=[0.0, 0.0])),
        TypeError,
        "log_weights must be a torch.Tensor",
    ),  # type: ignore[arg-type]
    Case("HeadProbe nothing watched", _user(lambda: HeadProbe().distances()), RuntimeError, "nothing watched yet"),
    Case("HeadProbe no target", _user(lambda: _head()), ValueError, "the constrained regime needs target"),
    Case(
        "HeadProbe target out of range",
        _user(lambda: _head(target=torch.tensor([0, 1, 4]))),
        ValueError,
        r"class-index target must hold integers in \[0, 4\)",
    ),
    Case(
        "HeadProbe target negative",
        _user(lambda: _head(target=torch.tensor([0, -1, 3]))),
        ValueError,
        "class-index target must hold integers",
    ),
    Case(
        "HeadProbe target float indices",
        _user(lambda: _head(target=torch.tensor([0.0, 1.0, 3.0]))),
        ValueError,
        "class-index target must hold integers",
    ),
    Case(
        "HeadProbe target shape",
        _user(lambda: _head(target=torch.tensor([0, 1]))),
        ValueError,
        r"target must have shape \(3,\) or \(3, 4\)",
    ),
    Case("HeadProbe target a list", _user(lambda: _head(target=[0, 1, 3])), TypeError, "target must be a torch.Tensor"),
    Case("HeadProbe fit: indices", _user(lambda: _head(target=torch.tensor([0, 1, 3]))), check=_rows_sum_to_one),
    Case(
        "HeadProbe fit: soft targets",
        _user(lambda: _head(target=F.one_hot(torch.tensor([0, 1, 3]), 4).double())),
        check=_rows_sum_to_one,
    ),
    Case(
        "HeadProbe fit: reduction 3",
        _user(lambda: _head(target=torch.tensor([0, 1, 3]), reduction=3)),
        check=_rows_sum_to_one,
    ),
    Case("HeadProbe fit: module residual", _user(_head_residual_on_a_module), check=lambda r: r < 1e-12),
    # --- attention and AttentionProbe ---------------------------------------------------------------------------
    Case(
        "attention E differs",
        _user(lambda: attention(_Q, _K[..., :3], _V)),
        ValueError,
        "query and key must share the last",
    ),
    Case(
        "attention 1-D inputs",
        _user(lambda: attention(torch.randn(4), torch.randn(4), torch.randn(4))),
        ValueError,
        r"query, key and value need shape \(\.\.\., T, E\)",
    ),
    Case(
        "attention mask shape",
        _user(lambda: attention(_Q, _K, _V, attn_mask=torch.ones(4, 4, dtype=torch.bool))),
        ValueError,
        r"attn_mask of shape \(4, 4\) does not broadcast to the scores",
    ),
    Case(
        "attention float mask shape",
        _user(lambda: attention(_Q, _K, _V, attn_mask=torch.zeros(2, 3, 4, dtype=torch.float64))),
        ValueError,
        "attn_mask of shape",
    ),
    Case(
        "attention mask and causal",
        _user(lambda: attention(_Q, _K, _V, attn_mask=torch.ones(3, 5, dtype=torch.bool), is_causal=True)),
        ValueError,
        "either attn_mask or is_causal",
    ),
    Case(
        "attention dropout 2",
        _user(lambda: attention(_Q, _K, _V, dropout_p=2.0)),
        ValueError,
        r"dropout_p must lie in \(0, 1\)",
    ),
    Case("attention = sdpa", _user(lambda: _like_sdpa()), check=bool),
    Case(
        "attention = sdpa, mask",
        _user(lambda: _like_sdpa(attn_mask=torch.rand(3, 5, generator=torch.Generator().manual_seed(6)) > 0.3)),
        check=bool,
    ),
    Case("attention = sdpa, causal", _user(lambda: _like_sdpa(is_causal=True)), check=bool),
    Case("attention NaN propagates as in sdpa", _user(_nan_like_sdpa), check=bool),
    Case(
        "AttentionProbe model a string",
        _user(lambda: AttentionProbe("model")),
        TypeError,
        "model must be a torch.nn.Module",
    ),  # type: ignore[arg-type]
    Case("AttentionProbe mode", _user(lambda: AttentionProbe(None, mode="all")), ValueError, "mode must be 'full' or"),  # type: ignore[arg-type]
    Case(
        "AttentionProbe every 0", _user(lambda: AttentionProbe(None, every=0)), ValueError, "every must be a positive"
    ),
    Case(
        "AttentionProbe summary_batch 0",
        _user(lambda: AttentionProbe(None, mode="summary", summary_batch=0)),
        ValueError,
        "summary_batch must be",
    ),
    Case(
        "AttentionProbe no sites",
        _user(lambda: AttentionProbe(nn.Linear(2, 2))),
        ValueError,
        "found no attention module",
    ),
    Case(
        "AttentionProbe unknown site",
        _user(lambda: AttentionProbe(nn.Linear(2, 2), sites=["nope"])),
        ValueError,
        "no module named 'nope'",
    ),
    Case(
        "hopfield_residual shapes",
        _user(lambda: hopfield_residual(_Q, _K[..., :3], torch.zeros(1, 2, 3, 5), 1.0)),
        ValueError,
        "query and key must share",
    ),
    Case(
        "hopfield_residual scores shape",
        _user(lambda: hopfield_residual(_Q, _K, torch.zeros(1, 2, 3, 4), 1.0)),
        ValueError,
        r"scores must have shape \(1, 2, 3, 5\)",
    ),
    Case(
        "hopfield_residual fit",
        _user(lambda: hopfield_residual(_Q, _K, torch.matmul(_Q, _K.mT) * 0.5, 0.5)),
        check=lambda r: r.shape == (2,) and bool((r < 1e-12).all()),
    ),
    # --- diagnostics and the Monitor (finding 7) ----------------------------------------------------------------
    Case(
        "Monitor NaN is null",
        _user(lambda: _monitor_line(loss=NAN)),
        check=lambda line: line == {"step": 0, "loss": None},
    ),
    Case(
        "Monitor inf tensor is null",
        _user(lambda: _monitor_line(v=torch.tensor([1.0, INF, -INF]))),
        check=lambda line: line["v"] == [1.0, None, None],
    ),
    Case(
        "Monitor nested dict",
        _user(lambda: _monitor_line(stats={"a": NAN, "b": [1, NAN]})),
        check=lambda line: line["stats"] == {"a": None, "b": [1, None]},
    ),
    Case(
        "Monitor numpy values",
        _user(lambda: _monitor_line(a=np.float64(0.5), b=np.arange(2))),
        check=lambda line: line["a"] == 0.5 and line["b"] == [0, 1],
    ),
    Case(
        "Monitor strings and bools",
        _user(lambda: _monitor_line(phase="warmup", done=False, none=None)),
        check=lambda line: line["phase"] == "warmup" and line["done"] is False,
    ),
    Case("Monitor a set", _user(lambda: Monitor().log(0, tags={"a"})), TypeError, "Monitor.log: tags is set"),
    Case(
        "Monitor an object",
        _user(lambda: Monitor().log(0, model=nn.Linear(1, 1))),
        TypeError,
        "Monitor.log: model is Linear",
    ),
    Case(
        "Monitor step 1.5", _user(lambda: Monitor().log(1.5, loss=1.0)), TypeError, "step must be an integer, got float"
    ),  # type: ignore[arg-type]
    Case(
        "Monitor step '3'",
        _user(lambda: Monitor().log_responsibilities("3", torch.full((2, 2), 0.5))),
        TypeError,
        "step must be an integer, got str",
    ),  # type: ignore[arg-type]
    Case(
        "Monitor path a folder",
        _user(lambda: Monitor(_tmp())),
        ValueError,
        "is a folder; Monitor needs a JSON-lines file",
    ),
    Case(
        "Monitor records NaN in memory",
        _user(lambda: Monitor().log(0, loss=NAN)),
        check=lambda r: math.isnan(r["loss"]),
    ),
    Case(
        "component_usage 0-dim",
        _user(lambda: component_usage(torch.tensor(1.0))),
        ValueError,
        "responsibilities need a component dim",
    ),
    Case(
        "component_usage a list",
        _user(lambda: component_usage([[0.5, 0.5]])),
        TypeError,
        "responsibilities must be a torch.Tensor",
    ),
    Case(
        "component_usage fit",
        _user(lambda: component_usage(torch.full((4, 2), 0.5))),
        check=lambda u: torch.equal(u, torch.full((2,), 0.5)),
    ),
    Case(
        "usage_entropy uniform = log K",
        _user(lambda: usage_entropy(torch.full((4,), 0.25))),
        check=lambda h: abs(float(h) - math.log(4)) < 1e-6,
    ),
    Case(
        "effective_components one-hot = 1",
        _user(lambda: effective_components(torch.tensor([1.0, 0.0]))),
        check=lambda e: float(e) == 1.0,
    ),
    Case(
        "histograms bins 0",
        _user(lambda: responsibility_histograms(torch.rand(3, 2), 0)),
        ValueError,
        "bins must be positive",
    ),
    Case(
        "histograms bins 2.5",
        _user(lambda: responsibility_histograms(torch.rand(3, 2), 2.5)),
        TypeError,
        "bins must be an integer",
    ),  # type: ignore[arg-type]
    Case(
        "histograms fit",
        _user(lambda: responsibility_histograms(torch.full((3, 2), 0.5), 4)),
        check=lambda h: h.shape == (2, 4) and float(h[0, 2]) == 3.0,
    ),
    Case(
        "relative_change shapes",
        _user(lambda: relative_change(torch.ones(3), torch.ones(4))),
        ValueError,
        "shapes differ",
    ),
    Case(
        "relative_change from zero is inf",
        _user(lambda: relative_change(torch.zeros(3), torch.ones(3))),
        check=lambda v: math.isinf(float(v)),
    ),
    Case(
        "drift not (K, D)",
        _user(lambda: drift(torch.ones(3), torch.ones(3))),
        ValueError,
        r"drift needs two \(K, D\) tensors",
    ),
    Case(
        "two_timescale shapes",
        _user(lambda: two_timescale(torch.ones(3), torch.ones(4), torch.ones(3), torch.ones(3))),
        ValueError,
        "shapes differ",
    ),
    Case(
        "min_variance type",
        _user(lambda: min_variance(torch.ones(2, 3), "nope")),
        ValueError,
        "covariance_type must be",
    ),
    Case(
        "min_variance full of (K, D)",
        _user(lambda: min_variance(torch.ones(2, 3), "full")),
        ValueError,
        r"full whitening must have shape \(K, D, D\)",
    ),
    Case(
        "min_variance diag of (K,)",
        _user(lambda: min_variance(torch.ones(3), "diag")),
        ValueError,
        r"diag whitening must have shape \(K, D\)",
    ),
    Case(
        "min_variance fit",
        _user(lambda: min_variance(torch.full((2, 3), 2.0), "diag")),
        check=lambda v: torch.equal(v, torch.full((2,), 0.25)),
    ),
    Case("dominance 1-D history", _user(lambda: dominance(torch.ones(3))), ValueError, r"a history is \(steps, K\)"),
    Case(
        "dominance step labels",
        _user(lambda: dominance(torch.ones(3, 2), steps=[0, 1])),
        ValueError,
        "2 step labels for 3 history rows",
    ),
    Case(
        "dead_components patience 0",
        _user(lambda: dead_components(torch.ones(3, 2), patience=0)),
        ValueError,
        "patience must be a positive integer",
    ),
    Case(
        "metric_collapse window 0",
        _user(lambda: metric_collapse(torch.ones(8, 2), window=0)),
        ValueError,
        "window must be a positive integer",
    ),
    Case(
        "metric_collapse window -1",
        _user(lambda: metric_collapse(torch.ones(8, 2), window=-1)),
        ValueError,
        "window must be a positive integer",
    ),
    Case(
        "singularity fit",
        _user(lambda: singularity(torch.tensor([[1.0, 1.0], [1.0, 1e-9]]))),
        check=lambda f: f is not None and f.step == 1 and f.components == (1,),
    ),
    Case(
        "dominance fit",
        _user(lambda: dominance(torch.tensor([[0.5, 0.5], [0.95, 0.05]]))),
        check=lambda f: f is not None and f.step == 1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_battery(case: Case) -> None:
    case.check_it()
