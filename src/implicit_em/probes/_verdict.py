r"""The verdict of :meth:`AttentionProbe.check_laws`: residuals, a tolerance that knows the dtype, pass or fail.

A residual r = max |autograd − law| is an absolute number: it grows with the loss's scale (a loss times 1e6 has
gradients and rounding errors 1e6 times larger) and a wrong law can hide under an absolute tolerance when the
gradients are small. So each law's residual is compared with the rounding error it can have, per head:

.. math::  \frac{r_h}{\text{scale}_h} \le \text{factor} \cdot \varepsilon_{\text{dtype}}

with :math:`\varepsilon` = ``torch.finfo(dtype).eps`` of the recorded tensors and the scales bounds on the
magnitude of what each law sums (B batch, H heads, T queries, S keys; u = dl/do, m the dropout multiplier):

* routing law, :math:`\alpha_{ij}(b_{ij} - \sum_k \alpha_{ik} b_{ik})` with :math:`b_{ij} = u_i \cdot v_j`:
  scale :math:`\max_i \|u_i\| \max_j \|v_j\| \max m` (Cauchy–Schwarz bounds every :math:`|b_{ij}|`);
* value law, :math:`\sum_i \tilde\alpha_{ij} u_i`: scale :math:`\max_j \sum_i \tilde\alpha_{ij} \max_i \|u_i\|`;
* Hopfield identity, :math:`\sum_j \alpha_j k_j`: scale :math:`\max_j \|k_j\| \max(1, \max |s|)` (an error
  :math:`\delta` in the scores moves the read-out by about :math:`\delta \|k\|`, and the rounding error of a
  score is relative to its size).

``FACTOR`` was chosen from measurements (``benchmarks/probe_matrix.py``, docs/probes.md "The verdict"): the
largest residual / scale over ten Hugging Face families was 1.40 eps in float64, 1.15 in float32, 0.96 in
bfloat16 and 0.88 in float16, and at most 0.44 eps on ``nn.MultiheadAttention`` (dropout 0.2) and
``attention()``; 16 leaves a margin above 10 over the largest seen, while a value off by 1% (the tests' negative
control) exceeds it more than 100-fold in float32 and float64.
"""

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

#: The stated factor: a law passes when residual / scale <= FACTOR * torch.finfo(dtype).eps (see the docstring).
FACTOR = 16.0

LAWS = ("routing_law", "value_law", "hopfield")


def tolerance(dtype: torch.dtype, factor: float = FACTOR) -> float:
    """The relative tolerance of the laws for tensors of ``dtype``: ``factor * torch.finfo(dtype).eps``."""
    return factor * torch.finfo(dtype).eps


def _row_norm_max(x: Float[Tensor, "b h n d"]) -> Float[Tensor, " h"]:
    """max over batch and rows of the Euclidean norm of each row, per head, shape (H,)."""
    return x.square().sum(dim=-1).sqrt().amax(dim=(0, 2))


def law_scales(
    weights: Float[Tensor, "b h t s"],
    value: Float[Tensor, "b h s dv"],
    upstream: Float[Tensor, "b h t dv"],
    keep: Float[Tensor, "b h t s"] | None = None,
) -> dict[str, Tensor]:
    """The scales of the routing and value laws per head (the module docstring defines them), each (H,)."""
    u = _row_norm_max(upstream)
    tilde = weights if keep is None else weights * keep
    routing = u * _row_norm_max(value)
    if keep is not None:
        routing = routing * keep.amax(dim=(0, 2, 3))
    return {"routing_law": routing, "value_law": tilde.sum(dim=-2).amax(dim=(0, 2)) * u}


def hopfield_scale(key: Float[Tensor, "b h s e"], scores: Float[Tensor, "b h t s"]) -> Float[Tensor, " h"]:
    """The scale of the Hopfield identity per head, max ||k_j|| max(1, max |s|) over finite scores, (H,)."""
    finite = torch.where(torch.isfinite(scores), scores.abs(), torch.zeros_like(scores))
    return _row_norm_max(key) * finite.amax(dim=(0, 2, 3)).clamp_min(1.0)


def relative(residual: Tensor, scale: Tensor) -> float:
    """max over heads of residual / scale; a zero scale gives 0 for a zero residual and inf otherwise."""
    ratio = torch.where(scale > 0, residual / scale.clamp_min(torch.finfo(scale.dtype).tiny), residual * float("inf"))
    return float(torch.nan_to_num(ratio, nan=0.0).max())


class LawVerdict(dict[str, Any]):
    """What :meth:`~implicit_em.probes.AttentionProbe.check_laws` returns: the residuals and the verdict.

    As a dict it is the result ``check_laws`` always gave: ``"routing_law"``, ``"value_law"``, ``"hopfield"``
    (max absolute residual over sites and heads, each present when measured) and ``"layers"`` ({site: {law:
    residual}}). The verdict is in attributes:

    Attributes:
        dtype: the dtype of the recorded attention (the least precise one when sites differ).
        factor: the stated factor; ``tolerance = factor * torch.finfo(dtype).eps``.
        tolerance: the relative tolerance every law is held to.
        relative: {site: {law: max over heads of residual / scale}}, the numbers compared with ``tolerance``.
        layer_passed: {site: {law: relative <= tolerance}}.
        law_passed: {law: passed at every site where it was measured}.
        passed: every measured law passed at every site.
    """

    def __init__(
        self,
        layers: Mapping[str, Mapping[str, float]],
        relative: Mapping[str, Mapping[str, float]],
        dtype: torch.dtype,
        factor: float = FACTOR,
    ) -> None:
        super().__init__()
        for law in LAWS:
            values = [row[law] for row in layers.values() if law in row]
            if values:
                self[law] = max(values)
        self["layers"] = {site: dict(row) for site, row in layers.items()}
        self.dtype, self.factor = dtype, factor
        self.tolerance = tolerance(dtype, factor)
        self.relative = {site: dict(row) for site, row in relative.items()}
        self.layer_passed = {
            site: {law: value <= self.tolerance for law, value in row.items()} for site, row in self.relative.items()
        }
        self.law_passed = {
            law: all(row[law] for row in self.layer_passed.values() if law in row)
            for law in LAWS
            if any(law in row for row in self.layer_passed.values())
        }
        self.passed = all(self.law_passed.values())

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready values: the residuals, the dtype (its name), tolerance and verdicts."""
        return {
            **{key: value for key, value in self.items()},
            "dtype": str(self.dtype).removeprefix("torch."),
            "factor": self.factor,
            "tolerance": self.tolerance,
            "relative": self.relative,
            "layer_passed": self.layer_passed,
            "law_passed": self.law_passed,
            "passed": self.passed,
        }
