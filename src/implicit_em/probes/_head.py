r"""The head probe: responsibilities read out of the gradient at a distances or logits tensor (paper §4).

For distances :math:`d` (N, K) and responsibilities :math:`r = \mathrm{softmax}(\log\pi - d)`, the three
regimes of the paper (§4.1 to §4.3) give the gradient of the user's own loss at :math:`d` exactly:

* ``"unsupervised"``: :math:`\ell = -\log\sum_j \pi_j e^{-d_j}` (mixture NLL, minimised):
  :math:`r = \partial\ell/\partial d`;
* ``"constrained"``: :math:`\ell = \mathrm{CE}(-d, t)` with targets :math:`t`:
  :math:`r = t - \partial\ell/\partial d`;
* ``"lse"``: :math:`L = \log\sum_j e^{-d_j}` (maximised): :math:`r = -\partial L/\partial d`.

With logits :math:`z = -d` the gradient at :math:`z` is :math:`-\partial/\partial d`. A batch loss that is the
mean over N rows scales every gradient by 1/N; ``reduction`` undoes it.
"""

import math
from types import TracebackType
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em.objectives import responsibilities

Regime = Literal["unsupervised", "constrained", "lse"]
_REGIMES = ("unsupervised", "constrained", "lse")

# Modules whose output is a tuple, refused when the probe attaches; any other module's output is checked at its
# first forward.
_TUPLE_MODULES = (nn.RNNBase, nn.MultiheadAttention)
_WATCHABLE = "one tensor of logits or distances (..., K)"


class HeadProbe:
    """Read per-sample responsibilities out of the gradient at a (N, K) distances or logits tensor.

    Either wrap the tensor in your ``forward`` (``d = probe(d)`` returns ``d`` itself, with a gradient hook),
    or give ``module`` and the probe watches that module's output. The hooks only read: outputs and
    gradients are unchanged. Use it as a context manager so that no hook outlives it.

    Example::

        with HeadProbe(model.head, regime="constrained", kind="logits") as probe:
            logits = model(x)
            F.cross_entropy(logits, y).backward()
        r = probe.responsibilities(target=y)       # (N, K), from the gradient
        probe.residual(target=y)                   # max |r - softmax(logits)|

    Args:
        module: a module whose output is the (..., K) tensor to watch (optional). It must return one tensor:
            a module returning a tuple (``nn.LSTM``, ``nn.MultiheadAttention``) is refused with a TypeError when
            the probe attaches, any other at its first forward; watch the tensor itself with ``probe(tensor)``.
        regime: ``"unsupervised"``, ``"constrained"`` or ``"lse"`` (see the module docstring).
        kind: ``"distances"`` (d) or ``"logits"`` (z = -d).
        reduction: ``"mean"`` if the loss averages over rows, ``"sum"`` if it sums, or the factor by which
            the loss was divided.
        log_weights: log mixing weights (K,), for the unsupervised regime with priors.
    """

    def __init__(
        self,
        module: nn.Module | None = None,
        regime: Regime = "unsupervised",
        kind: Literal["distances", "logits"] = "distances",
        reduction: Literal["mean", "sum"] | float = "mean",
        log_weights: Tensor | None = None,
    ) -> None:
        if regime not in _REGIMES:
            raise ValueError(f"regime must be one of {_REGIMES}, got {regime!r}")
        if kind not in ("distances", "logits"):
            raise ValueError(f"kind must be 'distances' or 'logits', got {kind!r}")
        if isinstance(reduction, str):
            if reduction not in ("mean", "sum"):
                raise ValueError(f"reduction must be 'mean', 'sum' or a number, got {reduction!r}")
        elif isinstance(reduction, bool) or not isinstance(reduction, int | float):
            raise TypeError(f"reduction must be 'mean', 'sum' or a number, got {type(reduction).__name__}")
        elif not (math.isfinite(reduction) and reduction > 0):
            raise ValueError(f"reduction must be a positive finite number (the loss's divisor), got {reduction}")
        if module is not None and not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module (or None), got {type(module).__name__}")
        if log_weights is not None and not isinstance(log_weights, Tensor):
            raise TypeError(f"log_weights must be a torch.Tensor (K,) or None, got {type(log_weights).__name__}")
        self.module = module
        self.regime: Regime = regime
        self.kind = kind
        self.reduction = reduction
        self.log_weights = log_weights
        self.value: Tensor | None = None  # the watched tensor, detached, (..., K)
        self.grad: Tensor | None = None  # its gradient, (..., K)
        self._handles: list[Any] = []

    def __enter__(self) -> "HeadProbe":
        if self.module is not None:
            if isinstance(self.module, _TUPLE_MODULES):
                raise TypeError(
                    f"HeadProbe cannot watch {type(self.module).__name__}: {type(self.module).__name__} returns a "
                    f"tuple; it watches a module that returns {_WATCHABLE}, or call probe(tensor) on that tensor"
                )
            self._handles.append(self.module.register_forward_hook(self._on_output))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_output(self, module: nn.Module, args: Any, output: Any) -> None:
        if not isinstance(output, Tensor):
            raise TypeError(
                f"HeadProbe watches a module that returns {_WATCHABLE}; {type(module).__name__} returned "
                f"{_a(output)} (call probe(tensor) on the tensor to watch instead)"
            )
        self(output)

    def __call__(self, tensor: Float[Tensor, "*batch k"]) -> Float[Tensor, "*batch k"]:
        """Watch ``tensor`` (its value now, its gradient at backward); returns ``tensor`` unchanged."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"HeadProbe watches {_WATCHABLE}; got {_a(tensor)}")
        if tensor.dim() < 1:
            raise ValueError(f"the watched tensor needs a component dim, got shape {tuple(tensor.shape)}")
        self.value = tensor.detach()
        self.grad = None
        if tensor.requires_grad:
            self._handles.append(tensor.register_hook(self._on_grad))
        return tensor

    def _on_grad(self, grad: Tensor) -> None:
        self.grad = grad.detach().clone()

    def distances(self) -> Float[Tensor, "*batch k"]:
        """The watched tensor as distances d (logits are negated)."""
        if self.value is None:
            raise RuntimeError("nothing watched yet: call probe(tensor) or run the module inside the probe")
        return self.value if self.kind == "distances" else -self.value

    def responsibilities(self, target: Tensor | None = None) -> Float[Tensor, "*batch k"]:
        """Responsibilities recovered from the gradient, shape of the watched tensor.

        Args:
            target: class indices (...,) or soft targets (..., K); required in the constrained regime.
        """
        if self.grad is None:
            raise RuntimeError("no gradient reached the probe: call loss.backward() after the forward")
        d = self.distances()
        grad_d = self.grad if self.kind == "distances" else -self.grad
        rows = d.numel() // d.shape[-1]
        scale = float(rows) if self.reduction == "mean" else 1.0 if self.reduction == "sum" else float(self.reduction)
        grad_d = grad_d * scale  # gradient of the per-row loss, summed
        if self.regime == "unsupervised":
            return grad_d
        if self.regime == "lse":
            return -grad_d
        return _soft_target(target, d) - grad_d

    def expected(self) -> Float[Tensor, "*batch k"]:
        r"""The responsibilities from the forward pass, :math:`\mathrm{softmax}(\log\pi - d)`."""
        log_weights = self.log_weights if self.regime == "unsupervised" else None
        return responsibilities(self.distances(), log_weights)

    def residual(self, target: Tensor | None = None) -> float:
        """Max |responsibilities from the gradient − softmax(log π − d)|."""
        return float((self.responsibilities(target) - self.expected()).abs().max())


def _a(value: Any) -> str:
    """'a tuple', 'a list', ... for a message."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _soft_target(target: Tensor | None, d: Tensor) -> Tensor:
    if target is None:
        raise ValueError("the constrained regime needs target (class indices or soft targets)")
    if not isinstance(target, Tensor):
        raise TypeError(f"target must be a torch.Tensor of class indices or soft targets, got {_a(target)}")
    if target.shape == d.shape and target.is_floating_point():
        return target.to(d.dtype)
    if target.shape != d.shape[:-1]:
        raise ValueError(f"target must have shape {tuple(d.shape[:-1])} or {tuple(d.shape)}, got {tuple(target.shape)}")
    k = d.shape[-1]
    if target.is_floating_point() or (target.numel() and bool((target < 0).any() | (target >= k).any())):
        shown = target.flatten()[:8].tolist()
        raise ValueError(f"class-index target must hold integers in [0, {k}), got {target.dtype} {shown}")
    return torch.nn.functional.one_hot(target.long(), k).to(d.dtype)
