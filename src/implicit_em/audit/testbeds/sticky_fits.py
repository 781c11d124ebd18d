"""The sticky testbed's trained models, trained once per run folder and shared by every claim that reads them.

:func:`trained` is :func:`implicit_em.windtunnel.sticky.fit` of ``bed.model(init_seed)`` on the stream of
``init_seed``, checked against ``held``; its weights and history are kept in the run folder
(:meth:`~implicit_em.audit.core.Context.cached`), keyed by the testbed's settings (its class too, so the
shuffled-label control is its own key), the init seed, the held-out batch's bytes and the hash of the code that
trains. A claim that asks for a fit another claim already made reads it instead of training it again: the numbers
are those of training it (the weights are stored exactly).
"""

import dataclasses
import hashlib

from torch import nn

from implicit_em.audit import provenance
from implicit_em.audit.core import Context
from implicit_em.windtunnel.sticky import FitResult, StickyBatch, StickyTestbed, fit

__all__ = ["trained"]


def _batch_digest(held: StickyBatch) -> str:
    h = hashlib.sha256()
    for t in (held.x, held.y):
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def trained(ctx: Context, bed: StickyTestbed, init_seed: int, held: StickyBatch) -> tuple[nn.Module, FitResult]:
    """``bed.model(init_seed)`` trained by ``fit(bed, model, init_seed, eval_batch=held)``, and its
    :class:`~implicit_em.windtunnel.sticky.FitResult` (``wall_s`` is the time of the run that trained it)."""
    key = {
        "testbed": type(bed).__qualname__,
        "settings": dataclasses.asdict(bed),
        "init_seed": init_seed,
        "held": _batch_digest(held),
        "code": provenance.code_hash(provenance.code_files(__name__)),
    }

    def train() -> dict[str, object]:
        model = bed.model(init_seed)
        res = fit(bed, model, init_seed, eval_batch=held)
        return {"state": model.state_dict(), "kl_history": res.kl_history, "steps": res.steps,
                "final_loss": res.final_loss, "wall_s": res.wall_s}  # fmt: skip

    value = ctx.cached("sticky_fit", key, train)
    model = bed.model(init_seed)
    model.load_state_dict(value["state"])
    res = FitResult(list(value["kl_history"]), list(value["steps"]), float(value["final_loss"]), float(value["wall_s"]))
    return model, res
