"""Batch EM over several processes or machines with ``torch.distributed``.

EM needs only sums over the data: each process computes the sufficient statistics of its own shard (``Summary``:
counts, Σ r x, Σ r x xᵀ, log-likelihood) and one ``all_reduce`` adds them, so every process takes the same M-step
and the fit equals the single-process fit on the concatenated data up to the order of floating-point sums.

Used automatically by ``GaussianMixture(fitter="em").fit`` when a process group is initialised with more than one
process. Rank 0 decides what depends on a sample of the data (the shift, the initial parameters, split-and-merge
candidates) and broadcasts it. Works with any backend whose collectives accept the data's device (gloo on CPU,
NCCL on CUDA). Online EM and gradient descent take a step per mini-batch and would need the ranks to agree on
every step; they raise ``NotImplementedError`` in a process group (fit them per process, or use "em").
"""

from typing import Any

import torch
from jaxtyping import Shaped
from torch import Tensor

from implicit_em.mixture._stats import MixtureParams, Summary


def active() -> bool:
    """True inside an initialised process group of more than one process."""
    return bool(
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    return torch.distributed.get_rank() if active() else 0


def all_reduce_summary(summary: Summary) -> Summary:
    """The sum of every process's statistics (one collective on one flat float64 buffer)."""
    return all_reduce_pass(summary, False)[0]


def all_reduce_pass(summary: Summary, stop: bool) -> tuple[Summary, bool]:
    """The sum of every process's statistics, and whether any process asks to stop (an interrupt), in the same
    collective: one more element of the flat float64 buffer, so all processes stop in the same iteration."""
    if not active():
        return summary, stop
    flag = torch.tensor([float(stop)], dtype=torch.float64, device=summary.n.device)
    flat = torch.cat([*(t.reshape(-1) for t in summary), flag])
    torch.distributed.all_reduce(flat)
    out, start = [], 0
    for t in summary:
        out.append(flat[start : start + t.numel()].reshape(t.shape))
        start += t.numel()
    return Summary(*out), bool(flat[-1] > 0)


def any_stop(stop: bool, device: torch.device) -> bool:
    """Whether any process asks to stop (one all-reduce of a flag): the processes agree on how a fit ends."""
    if not active():
        return stop
    flag = torch.tensor([float(stop)], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(flag)
    return bool(flag[0] > 0)


def zero_summary(n_components: int, n_features: int, device: torch.device) -> Summary:
    """The statistics of an empty shard (a process without data still takes part in the sum)."""
    z = torch.zeros((), dtype=torch.float64, device=device)
    k, d = n_components, n_features
    return Summary(
        z,
        torch.zeros(k, dtype=torch.float64, device=device),
        torch.zeros(k, d, dtype=torch.float64, device=device),
        torch.zeros(k, d, d, dtype=torch.float64, device=device),
        z.clone(),
    )


def broadcast_tensor(t: Shaped[Tensor, "*shape"], src: int = 0) -> Shaped[Tensor, "*shape"]:
    """Rank ``src``'s tensor on every process (same shape and dtype expected everywhere)."""
    if not active():
        return t
    out = t.detach().clone().contiguous()
    torch.distributed.broadcast(out, src)
    return out


def broadcast_params(params: MixtureParams, src: int = 0) -> MixtureParams:
    """Rank ``src``'s parameters on every process."""
    return MixtureParams(*(broadcast_tensor(t, src) for t in params))


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s picklable object on every process."""
    if not active():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src)
    return box[0]


def total_count(n: int, device: torch.device) -> int:
    """The number of samples over all processes."""
    if not active():
        return n
    t = torch.tensor([float(n)], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return int(t.item())
