"""The attention probe: capture scores, weights, values and their gradients per layer and head (paper §4.2).

Module hooks cannot see the pre-softmax scores: they never leave the attention function. So the probe routes
attention through the library's explicit function (:func:`implicit_em.probes.attention.attend`), reached in
three ways:

* modules that call :func:`implicit_em.probes.attention` themselves (nothing to patch);
* modules that call ``torch.nn.functional.scaled_dot_product_attention``, among them
  ``torch.nn.MultiheadAttention`` and ``TransformerEncoderLayer``: a patch of that function scoped to the
  probed modules' forward (``probes/_torch_mha.py``);
* Hugging Face ``transformers`` models: an entry in ``AttentionInterface`` and ``AttentionMaskInterface``
  (``probes/_hf.py``).

Gradients are read by tensor hooks on the output, the scores and the values; a call is *committed* when its
output gradient arrives, so the extra forward of activation checkpointing leaves no stray record.

Summary mode observes a sub-batch (``summary_batch``, the first sequence by default): the adapters let the
model's own fused kernel compute the call and recompute only those sequences explicitly beside it
(:func:`implicit_em.probes.attention._observed_attention` decides, for both adapters; with attention dropout the
call is split instead), so a captured step costs little more than an unprobed one and its results are the
model's. Imports go one way: this module uses the adapters, the adapters use only ``probes/attention.py``.
"""

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import torch
from torch import Tensor, nn

from implicit_em.laws import value_law
from implicit_em.probes import _hf, _torch_mha
from implicit_em.probes._laws import hopfield_residual, per_head_max, per_head_norm, routing_law_residual
from implicit_em.probes._verdict import LawVerdict, hopfield_scale, law_scales, relative
from implicit_em.probes.attention import _active_observer, _set_observer

Mode = Literal["full", "summary"]

#: Full-mode cache keys per site (TransformerLens names; shapes B batch, H selected heads, T queries, S keys).
FULL_KEYS = {
    "hook_q": "queries (B, H, T, E)",
    "hook_k": "keys (B, H, S, E)",
    "hook_v": "values (B, H, S, Dv) (TransformerLens orders v as batch, pos, head, d_head; here head first)",
    "hook_attn_scores": "scores s after scale and mask, -inf where masked (B, H, T, S)",
    "hook_pattern": "weights alpha = softmax(s), before dropout (B, H, T, S)",
    "hook_dropout_keep": "dropout multiplier Bernoulli(1-p)/(1-p), only with dropout (B, H, T, S)",
    "hook_z": "per-head output o (B, H, T, Dv)",
    "hook_z_grad": "upstream gradient u = dl/do (B, H, T, Dv)",
    "hook_attn_scores_grad": "dl/ds (B, H, T, S)",
    "hook_v_grad": "dl/dv (B, H, S, Dv)",
}
#: Summary-mode cache keys per site, each a (H,) tensor for the last sampled step, computed on the observed
#: sequences (the first ``summary_batch`` of the batch; all of them with ``summary_batch=None``).
SUMMARY_KEYS = {
    "entropy": "mean attention entropy over valid query rows of the observed sequences (nats)",
    "max_weight": "mean of max_j alpha_ij over valid query rows of the observed sequences",
    "upstream_norm": "||u|| over the observed sequences",
    "score_grad_norm": "||dl/ds|| over the observed sequences",
    "value_grad_norm": "||dl/dv|| over the observed sequences",
    "routing_law": "max |dl/ds - routing law| over the observed sequences (with laws=True)",
    "value_law": "max |dl/dv - value law| over the observed sequences (with laws=True)",
}


def _as4d(x: Tensor) -> Tensor:
    """View (..., T, X) as (B, H, T, X): no head dim means one head; extra leading dims fold into B."""
    if x.dim() == 2:
        return x[None, None]
    if x.dim() == 3:
        return x[:, None]
    return x.reshape(-1, *x.shape[-3:]) if x.dim() > 4 else x


@dataclass
class _Record:
    """One attention call at one site; tensors are detached (B, H, T, X) views, head-selected."""

    site: str
    step: int
    scale: float
    masked: bool = False  # an attn_mask was given: some query rows may have no key
    rows: int | None = None  # observe only the first `rows` entries of dim 0 (the batch); None: all
    fwd: dict[str, Tensor] = field(default_factory=dict)
    grad: dict[str, Tensor] = field(default_factory=dict)
    expect: set[str] = field(default_factory=set)
    handles: list[Any] = field(default_factory=list)


class AttentionProbe:
    """Capture attention quantities of selected layers and heads around a normal forward and backward.

    Example::

        with AttentionProbe(model, layers=[0, 1], heads=[0]) as probe:
            loss = loss_fn(model(x), y)
            loss.backward()
        probe.check_laws()          # {"routing_law": ..., "value_law": ..., "hopfield": ..., "layers": {...}}
        probe.check_laws().passed   # and the verdict against the dtype's tolerance (a LawVerdict)
        probe.cache["blocks.0.attn.hook_pattern"]   # (B, H, T, S)

    Args:
        model: the model whose attention sites are probed. Sites are found in module order: in a Hugging Face
            model, the modules that call its attention interface (whose ``forward`` looks the function up in
            ``ALL_ATTENTION_FUNCTIONS``: ``BertSelfAttention``, ``T5Attention``, ``LlamaAttention``...); in
            other models every ``nn.MultiheadAttention`` and any other module whose class name ends in
            ``Attention`` (the outermost of nested ones). With
            ``model=None`` every call of :func:`implicit_em.probes.attention` in the block is captured, named
            ``calls.<n>.attn`` in call order.
        layers: site indices (``blocks.<i>.attn`` is the i-th site) or module names; ``None`` for all.
        heads: head indices to keep; ``None`` for all.
        mode: ``"full"`` keeps the tensors of the last committed call per site (see ``FULL_KEYS``);
            ``"summary"`` keeps per-head statistics only (see ``SUMMARY_KEYS``), no T x S tensors.
        every: capture only every ``every``-th forward of ``model`` (other steps run the model's own attention
            kernel untouched).
        laws: in summary mode, also compute the law residuals (costs about one attention backward).
        sites: explicit module names to probe instead of the automatic discovery.
        summary_batch: in summary mode, observe only the first ``summary_batch`` sequences of each captured
            call (dim 0 of 4-D (B, H, T, E) attention inputs; calls with fewer dims are observed whole).
            Through the ``F.scaled_dot_product_attention`` and Hugging Face adapters the model's fused kernel
            computes the call and the first n sequences are recomputed explicitly beside it, reading the model's
            upstream gradient (outputs and gradients bit-identical to the unprobed model); with attention
            dropout the call is split instead (n explicit, B - n fused, concatenated). The statistics and law
            residuals are those of the first n sequences (an estimate of the batch's per-head statistics; the
            laws are exact identities, checked on them). ``attention()`` calls run explicitly for the whole
            batch as always; only what the probe reads is restricted. ``None`` observes the whole batch. Full
            mode always observes the whole batch.
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        layers: Sequence[int | str] | None = None,
        heads: Sequence[int] | None = None,
        mode: Mode = "full",
        every: int = 1,
        laws: bool = True,
        sites: Sequence[str] | None = None,
        summary_batch: int | None = 1,
    ) -> None:
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (or None), got {type(model).__name__}")
        if mode not in ("full", "summary"):
            raise ValueError(f"mode must be 'full' or 'summary', got {mode!r}")
        if every < 1:
            raise ValueError(f"every must be a positive integer, got {every}")
        if summary_batch is not None and (isinstance(summary_batch, bool) or summary_batch < 1):
            raise ValueError(f"summary_batch must be a positive integer or None, got {summary_batch!r}")
        self.model = model
        self.mode: Mode = mode
        self.every = every
        self.laws = laws
        self.summary_batch = summary_batch if mode == "summary" else None  # full mode observes the whole batch
        self.heads = None if heads is None else torch.as_tensor(list(heads), dtype=torch.long)
        self.step = 0
        self.sites: dict[str, str] = {}  # site name -> module name
        self._site_of: dict[int, str] = {}  # id(module) -> site name
        self._modules: dict[str, nn.Module] = {}
        self._is_hf = model is not None and _hf.is_hf_model(model)
        if model is not None:
            self._find_sites(model, layers, sites)
        self._stack: list[str] = []
        self._calls = 0
        self._site_calls: dict[str, int] = {}
        self._active = False
        self._handles: list[Any] = []
        self._committed: dict[str, _Record] = {}
        self._pending: dict[str, _Record] = {}
        self._stats: dict[str, dict[str, Tensor]] = {}
        self._hf_state: Any = None
        self._calls_before = 0  # calls recorded before the current forward of the model
        self._callers: dict[int, nn.Module] = {}  # modules that called HF's attention function, not being sites
        self._scales: dict[str, dict[str, Tensor]] = {}  # summary mode: the laws' scales per site (_verdict.py)
        #: one line per call the probe skipped because it was empty (a batch, a query or a key sequence of length 0)
        self.skipped: list[str] = []

    # ---- discovery -----------------------------------------------------------------------------------
    def _find_sites(self, model: nn.Module, layers: Sequence[int | str] | None, names: Sequence[str] | None) -> None:
        found: list[tuple[str, nn.Module]] = []
        if names is not None:
            modules = dict(model.named_modules())
            for name in names:
                if name not in modules:
                    raise ValueError(f"no module named {name!r} in the model")
                found.append((name, modules[name]))
        elif self._is_hf:
            found = _hf.attention_sites(model)
        else:
            for name, module in model.named_modules():
                if any(name.startswith(f"{outer}.") or outer == "" for outer, _ in found):
                    continue
                if isinstance(module, nn.MultiheadAttention) or type(module).__name__.endswith("Attention"):
                    found.append((name, module))
        if not found:
            raise ValueError(
                f"found no attention module in {type(model).__name__}; pass sites=[module names] explicitly"
            )
        all_sites = {f"blocks.{i}.attn": (name, module) for i, (name, module) in enumerate(found)}
        chosen = list(all_sites) if layers is None else [self._resolve_layer(layer, all_sites) for layer in layers]
        for site in chosen:
            name, module = all_sites[site]
            self.sites[site] = name
            self._site_of[id(module)] = site
            self._modules[site] = module

    @staticmethod
    def _resolve_layer(layer: int | str, all_sites: dict[str, tuple[str, nn.Module]]) -> str:
        keys = list(all_sites)
        if isinstance(layer, int):
            if not -len(keys) <= layer < len(keys):
                raise ValueError(f"layer {layer} out of range: the model has {len(keys)} attention sites")
            return keys[layer]
        if layer in all_sites:
            return layer
        for site, (name, _) in all_sites.items():
            if name == layer:
                return site
        raise ValueError(f"unknown layer {layer!r}; sites are {[n for n, _ in all_sites.values()]}")

    # ---- context -------------------------------------------------------------------------------------
    def __enter__(self) -> "AttentionProbe":
        if _active_observer() is not None:
            raise RuntimeError("another AttentionProbe is already active; probes do not nest")
        self._committed.clear()
        self._pending.clear()
        self.skipped.clear()
        self._stats.clear()
        self._scales.clear()
        try:
            if self.model is not None:
                self._handles.append(self.model.register_forward_pre_hook(self._count_step))
                if self._is_hf:
                    self._handles.append(self.model.register_forward_hook(self._check_captured))
                    self._hf_state = _hf.enable(self.model)
                else:
                    for site, module in self._modules.items():
                        self._handles.extend(_torch_mha.install(self, module, site))
            _set_observer(self)
            self._active = True
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._teardown()

    def _teardown(self) -> None:
        if _active_observer() is self:
            _set_observer(None)
        self._active = False
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for record in (*self._pending.values(), *self._committed.values()):
            for handle in record.handles:
                handle.remove()
            record.handles.clear()
        if self._hf_state is not None:
            assert self.model is not None
            _hf.disable(self.model, self._hf_state)
            self._hf_state = None
        self._stack.clear()

    def _count_step(self, module: nn.Module, args: Any) -> None:
        self.step += 1
        self._calls_before = sum(self._site_calls.values())
        self._callers.clear()

    def _check_captured(self, module: nn.Module, args: Any, output: Any) -> None:
        """After a sampled forward of an HF model: warn when no probed site recorded a call."""
        if self._active and self.sampled and sum(self._site_calls.values()) == self._calls_before:
            warnings.warn(self._nothing_captured(), RuntimeWarning, stacklevel=2)

    def _nothing_captured(self) -> str:
        """Why nothing was captured: the sites looked at and the modules that did call the attention function."""
        model = self.model
        assert model is not None
        looked = ", ".join(self.sites.values()) or "none"
        text = f"{type(model).__name__}: the forward reached none of the probed sites ({looked}); nothing was captured"
        names = [name for name, module in model.named_modules() if id(module) in self._callers]
        if names:
            return (
                f"{text}. The attention function was called by {', '.join(names)}: pass layers= or sites= to probe them"
            )
        return f"{text}. No module called the probe's attention function: these sites compute attention another way"

    def note_caller(self, module: nn.Module) -> None:
        """Adapters report a module that called the attention function without being a probed site."""
        self._callers[id(module)] = module

    # ---- what adapters ask ---------------------------------------------------------------------------
    @property
    def sampled(self) -> bool:
        """Whether the current step is captured (``every``-th forward of the model)."""
        return self.model is None or (self.step - 1) % self.every == 0

    def site_of(self, module: nn.Module) -> str | None:
        """The site name of a probed module, or None."""
        return self._site_of.get(id(module))

    def capturing(self, site: str | None) -> bool:
        return self._active and site is not None and self.sampled

    def sub_batch(self, query: Tensor, key: Tensor, value: Tensor) -> int | None:
        """How many leading sequences of a captured call to observe, or None for the whole call.

        A number n only when the probe observes a sub-batch (summary mode, ``summary_batch`` set), query, key
        and value are 4-D (B, H, T, E) with the same batch B, and n < B. Adapters then split the call.
        """
        n = self.summary_batch
        if n is None or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
            return None
        batch = query.shape[0]
        return n if n < batch and key.shape[0] == batch and value.shape[0] == batch else None

    def calls_at(self, site: str) -> int:
        """How many calls the probe has recorded at ``site`` (adapters use it to notice a missed capture)."""
        return self._site_calls.get(site, 0)

    def enter_site(self, site: str) -> None:
        self._stack.append(site)

    def exit_site(self, site: str) -> None:
        if self._stack and self._stack[-1] == site:
            self._stack.pop()

    # ---- the observer --------------------------------------------------------------------------------
    def observe_call(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        scores: Tensor,
        weights: Tensor,
        keep: Tensor | None,
        output: Tensor,
        scale: float,
        site: str | None,
        masked: bool = False,
    ) -> None:
        """Record one call of :func:`implicit_em.probes.attention.attend`."""
        if site is None:
            if self.model is None:
                site = f"calls.{self._calls}.attn"
                self._calls += 1
            elif self._stack:
                site = self._stack[-1]
        if not self.capturing(site):
            return
        assert site is not None
        self._site_calls[site] = self._site_calls.get(site, 0) + 1
        if weights.numel() == 0:  # no query, no key or no sequence: no responsibility to read, no law to check
            note = f"{site}: skipped an empty call at step {self.step} (attention weights {tuple(weights.shape)})"
            self.skipped.append(note)
            warnings.warn(f"AttentionProbe {note}", RuntimeWarning, stacklevel=2)
            return
        a4, v4 = _as4d(weights), _as4d(value)
        if v4.shape[:2] != a4.shape[:2]:
            raise ValueError(
                "the probe needs values with the weights' batch and head dims, got values "
                f"{tuple(value.shape)} for weights {tuple(weights.shape)}; expand them (repeat_kv for grouped-query "
                "attention)"
            )
        n = self.summary_batch
        rows = n if n is not None and weights.dim() == 4 and n < a4.shape[0] else None  # a sub-batch of a 4-D call
        record = _Record(site=site, step=self.step, scale=scale, masked=masked, rows=rows)
        fwd = {"hook_pattern": a4, "hook_v": v4}
        if keep is not None:
            fwd["hook_dropout_keep"] = _as4d(keep)
        if self.mode == "full":
            fwd.update(hook_q=_as4d(query), hook_k=_as4d(key), hook_attn_scores=_as4d(scores), hook_z=_as4d(output))
        record.fwd = {name: self._select(_rows(t.detach(), rows)) for name, t in fwd.items()}
        for name, tensor in (("hook_z", output), ("hook_attn_scores", scores), ("hook_v", value)):
            if tensor.requires_grad:
                record.expect.add(name)
                record.handles.append(tensor.register_hook(self._grad_hook(record, name)))
        self._pending[site] = record
        if not record.expect:  # no gradient will come (no_grad, or nothing requires grad)
            self._finish(record)

    def _select(self, x: Tensor) -> Tensor:
        return x if self.heads is None else x.index_select(1, self.heads.to(x.device))

    def _grad_hook(self, record: _Record, name: str) -> Callable[[Tensor], None]:
        def hook(grad: Tensor) -> None:
            grad4 = self._select(_rows(_as4d(grad), record.rows))
            # autograd may reuse its buffers: full mode keeps its own copy (index_select already copied)
            record.grad[name] = grad4.clone() if self.mode == "full" and self.heads is None else grad4
            if name == "hook_z":  # the output gradient arrives first: this call is on the backward path
                self._committed[record.site] = record
                if self._pending.get(record.site) is record:
                    del self._pending[record.site]
            if set(record.grad) >= record.expect:
                self._finish(record)

        return hook

    def _finish(self, record: _Record) -> None:
        for handle in record.handles:
            handle.remove()
        record.handles.clear()
        if self.mode == "summary":
            with torch.no_grad():
                self._stats[record.site] = _summary_stats(record, self.laws)
                if self.laws and "hook_z" in record.grad:
                    self._scales[record.site] = _record_scales(record)
            record.fwd, record.grad = {}, {}  # summary mode keeps statistics, not tensors

    # ---- results -------------------------------------------------------------------------------------
    def _records(self) -> dict[str, _Record]:
        records = dict(self._pending)
        records.update(self._committed)
        return dict(sorted(records.items(), key=lambda kv: _site_order(kv[0])))

    @property
    def cache(self) -> dict[str, Tensor]:
        """Detached tensors keyed ``<site>.<name>``; names in ``FULL_KEYS`` (summary mode: ``SUMMARY_KEYS``)."""
        out: dict[str, Tensor] = {}
        if self.mode == "summary":
            for site, stats in sorted(self._stats.items(), key=lambda kv: _site_order(kv[0])):
                out.update({f"{site}.{name}": value for name, value in stats.items()})
            return out
        for site, record in self._records().items():
            out.update({f"{site}.{name}": t for name, t in record.fwd.items()})
            out.update({f"{site}.{name}_grad": t for name, t in record.grad.items()})
        return out

    def summary(self) -> dict[str, dict[str, Tensor]]:
        """Per-site, per-head statistics (``SUMMARY_KEYS``); in full mode computed from the stored tensors."""
        if self.mode == "summary":
            return {site: dict(stats) for site, stats in self._stats.items()}
        with torch.no_grad():
            return {site: _summary_stats(record, True) for site, record in self._records().items()}

    def check_laws(self) -> LawVerdict:
        """Max residuals of the routing law, the value law and (full mode) the Hopfield identity, and the verdict.

        Returns:
            a :class:`~implicit_em.probes.LawVerdict`: as a dict, ``{"routing_law": float, "value_law": float,
            "hopfield": float, "layers": {site: {...}}}``, each value the max absolute difference between
            autograd's gradient and the law over selected heads (as always); its attributes hold the dtype, the
            tolerance ``FACTOR * torch.finfo(dtype).eps`` on residual / scale, and ``passed`` per site, per law
            and overall (``probes/_verdict.py`` says how the scales and the factor were chosen).
        """
        per_layer: dict[str, dict[str, float]] = {}
        ratios: dict[str, dict[str, float]] = {}
        dtypes: list[torch.dtype] = []
        records = self._records() if self.mode == "full" else {}
        for site, stats in self.summary().items():
            laws: dict[str, Tensor] = {law: stats[law] for law in ("routing_law", "value_law") if law in stats}
            if self.mode == "full":
                record = records[site]
                f = record.fwd
                laws["hopfield"] = hopfield_residual(f["hook_q"], f["hook_k"], f["hook_attn_scores"], record.scale)
                with torch.no_grad():
                    scales = _record_scales(record) if "hook_z" in record.grad else {}
                    scales["hopfield"] = hopfield_scale(f["hook_k"], f["hook_attn_scores"])
            else:
                scales = self._scales.get(site, {})
            per_layer[site] = {law: float(value.max()) for law, value in laws.items()}
            ratios[site] = {law: relative(value, scales[law]) for law, value in laws.items() if law in scales}
            dtypes.append(stats["entropy"].dtype)
        if not any("routing_law" in row or "value_law" in row for row in per_layer.values()):
            if self.mode == "summary" and not self.laws:
                raise RuntimeError("this probe was made with laws=False: summary mode computed no law residuals")
            if not per_layer and self.skipped:
                raise RuntimeError(
                    f"every captured call was empty (a batch or a sequence of length 0), so there is no law to check: "
                    f"{self.skipped[0]}" + (f" and {len(self.skipped) - 1} more" if len(self.skipped) > 1 else "")
                )
            if not per_layer and self.model is not None:
                looked = ", ".join(self.sites.values())
                raise RuntimeError(
                    f"no attention call was captured at the probed sites ({looked}): the forward did not reach "
                    "them (see the RuntimeWarning the probe gave, which names the modules that did compute attention)"
                )
            raise RuntimeError(
                "no gradients reached the probe: run the forward and loss.backward() inside the `with` block "
                "(in summary mode with laws=True, on a sampled step)"
            )
        dtype = max(dtypes, key=lambda d: torch.finfo(d).eps)
        return LawVerdict(per_layer, ratios, dtype)


def _rows(x: Tensor, rows: int | None) -> Tensor:
    """The first ``rows`` entries of dim 0 (a view), or ``x`` itself."""
    return x if rows is None else x[:rows]


def _site_order(site: str) -> tuple[str, int]:
    kind, index, _ = site.split(".")
    return kind, int(index)


def _record_scales(record: _Record) -> dict[str, Tensor]:
    """The routing and value laws' scales per head of a record with its upstream gradient (``_verdict.py``)."""
    f = record.fwd
    return law_scales(f["hook_pattern"], f["hook_v"], record.grad["hook_z"], f.get("hook_dropout_keep"))


def _summary_stats(record: _Record, laws: bool) -> dict[str, Tensor]:
    """Per-head statistics of one record (fused reductions over B, T and S)."""
    a = record.fwd["hook_pattern"]  # (B, H, T, S)
    if record.masked:  # a.sum(-1) is 1 on rows that attend to something, 0 on fully masked rows
        rows = a.sum(dim=-1).sum(dim=(0, 2)).clamp_min(1.0)  # (H,)
    else:
        rows = torch.full((a.shape[1],), float(a.shape[0] * a.shape[2]), dtype=a.dtype, device=a.device)
    # a log a with 0 log 0 = 0: log of a clamped at the smallest normal number (xlogy is ~8x slower on CPU)
    a_log_a = a.clamp_min(torch.finfo(a.dtype).tiny).log_().mul_(a)
    stats = {
        "entropy": -a_log_a.sum(dim=-1).sum(dim=(0, 2)) / rows,
        "max_weight": a.amax(dim=-1).sum(dim=(0, 2)) / rows,
    }
    del a_log_a
    g = record.grad
    for name, stat in (
        ("hook_z", "upstream_norm"),
        ("hook_attn_scores", "score_grad_norm"),
        ("hook_v", "value_grad_norm"),
    ):
        if name in g:
            stats[stat] = per_head_norm(g[name])
    if laws and "hook_z" in g:
        keep = record.fwd.get("hook_dropout_keep")
        u, v = g["hook_z"], record.fwd["hook_v"]
        if "hook_attn_scores" in g:
            stats["routing_law"] = routing_law_residual(g["hook_attn_scores"], a, v, u, keep)
        if "hook_v" in g:
            stats["value_law"] = per_head_max(g["hook_v"] - value_law(a, u, keep))
    return stats
