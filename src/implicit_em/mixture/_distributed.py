"""EM, online EM and gradient descent over several processes or machines with ``torch.distributed``.

EM needs only sums over the data: each process computes the sufficient statistics of its own shard (``Summary``:
counts, Σ r x, Σ r x xᵀ, log-likelihood) and one ``all_reduce`` adds them, so every process takes the same M-step
and the fit equals the single-process fit on the concatenated data up to the order of floating-point sums.

Used automatically by ``GaussianMixture.fit`` when a process group is initialised with more than one process.
What the single process draws from a sample of the data (the shift and scale, the k-means start, the
split-and-merge proposals) is drawn from a *global* sample: every process seeds the same generator (rank 0's
``random_state``, :func:`sync_rng`), draws the indices the single process would draw over the global row index,
keeps those in its own row range and the rows are gathered (:func:`all_gather_rows`), so every process holds
the sample the single process draws from the concatenated shards (``DataSource.sample``). Online EM and gradient
descent take one global step per mini-batch: the global batch is the one the single process draws (a permutation
of the global row index from the shared seed), each process summarises its rows of it, and one all-reduce adds
the statistics (online EM) or the gradient with respect to the score matrix (gradient descent). Works with any
backend whose collectives accept the data's device (gloo on CPU, NCCL on CUDA).
"""

from typing import Any

import numpy as np
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


def world_size() -> int:
    """The number of processes (1 outside a process group)."""
    return torch.distributed.get_world_size() if active() else 1


def all_gather_counts(n: int, device: torch.device) -> list[int]:
    """Every process's ``n``, in rank order."""
    if not active():
        return [n]
    t = torch.tensor([n], dtype=torch.int64, device=device)
    parts = [torch.zeros_like(t) for _ in range(world_size())]
    torch.distributed.all_gather(parts, t)
    return [int(p.item()) for p in parts]


def all_gather_rows(x: Shaped[Tensor, "n ..."]) -> Shaped[Tensor, "m ..."]:
    """Every process's rows, concatenated in rank order (the processes may hold different numbers of rows; the
    trailing shape and dtype must agree). Padded to the longest, since ``all_gather`` wants equal shapes."""
    if not active():
        return x
    counts = all_gather_counts(int(x.shape[0]), x.device)
    longest = max(counts)
    padded = torch.zeros((longest, *x.shape[1:]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in counts]
    torch.distributed.all_gather(parts, padded)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)])


def sync_rng(rng: np.random.RandomState, device: torch.device, into: bool = False) -> np.random.RandomState:
    """A generator in rank 0's state of ``rng`` on every process, sent as tensors (the Mersenne Twister key,
    its position and the cached Gaussian), not pickled; every process then draws the same numbers (the global
    sample's indices, the generator seed of the stochastic fitters). Rank 0 gets ``rng`` itself back; another
    rank gets a new generator (its own ``rng``, perhaps numpy's global one, is left alone), or with
    ``into=True`` its ``rng`` set to that state (a generator the fit already owns)."""
    if not active():
        return rng
    _, key, pos, has_gauss, cached = rng.get_state()
    ints = torch.from_numpy(np.concatenate([np.asarray(key, dtype=np.int64), [pos, has_gauss]])).to(device)
    gauss = torch.tensor([cached], dtype=torch.float64, device=device)
    torch.distributed.broadcast(ints, 0)
    torch.distributed.broadcast(gauss, 0)
    if rank() == 0:
        return rng
    out = rng if into else np.random.RandomState()
    a = ints.cpu().numpy()
    out.set_state(("MT19937", a[:-2].astype(np.uint32), int(a[-2]), int(a[-1]), float(gauss[0])))
    return out


def all_reduce_sum(values: Tensor) -> Tensor:
    """The element-wise sum over every process of a float64 vector (a copy)."""
    out = values.clone()
    if active():
        torch.distributed.all_reduce(out)
    return out
