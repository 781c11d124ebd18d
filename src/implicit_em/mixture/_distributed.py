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

import functools
from typing import Any

import numpy as np
import torch
from jaxtyping import Float64, Shaped
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
    collective: one more element of the flat float64 buffer, so all processes stop in the same iteration.

    Σ r x xᵀ travels as its upper triangle only (:func:`pack_summary`): the buffer is about half as long
    (2,451 numbers instead of 4,417 at K = D = 16) and the sums are the same numbers, bitwise. The sum is
    :func:`sum_small`'s (one all-gather on gloo)."""
    if not active():
        return summary, stop
    return unpack_summary(sum_small(pack_summary(summary, stop)), summary)


def sum_small(flat: Float64[Tensor, " m"]) -> Float64[Tensor, " m"]:
    """The element-wise sum over every process of a short vector, the same numbers on every process.

    On gloo an ``all_gather`` and a sum in rank order, not an ``all_reduce``: gloo's ring all-reduce splits
    even a 20 KB buffer into many messages, each a wake-up of its I/O thread, and on the 2-core benchmark
    machine one all-gather of the online-EM statistics took 0.4-0.7 ms against the all-reduce's 0.5-1.5 ms
    (6 socket writes per process against 12, counted with strace). With two processes a + b = b + a, so the
    numbers are the all-reduce's, bitwise; with more, the sum in rank order, element by element, is the same on
    every process (no vectorised reduction whose order could depend on the machine). Other backends (NCCL):
    ``all_reduce``."""
    if torch.distributed.get_backend() != "gloo":
        out = flat.clone()
        torch.distributed.all_reduce(out)
        return out
    parts = [torch.empty_like(flat) for _ in range(world_size())]
    torch.distributed.all_gather(parts, flat.contiguous())
    total = parts[0]
    for part in parts[1:]:
        total += part
    return total


def pack_summary(summary: Summary, stop: bool) -> Float64[Tensor, " m"]:
    """One flat float64 buffer: n, nk (K,), sx (K·D), the upper triangle of sxx (K·D(D+1)/2, row-major), loglik
    and the stop flag. sxx is symmetric by construction (``_stats._unpack`` writes both triangles from one
    number, and sums of symmetric matrices stay symmetric), so the lower triangle carries nothing new."""
    rows, cols = _triu(summary.sx.shape[1], summary.sx.device)
    flag = torch.tensor([float(stop)], dtype=torch.float64, device=summary.n.device)
    parts = (summary.n.reshape(1), summary.nk, summary.sx.reshape(-1), summary.sxx[:, rows, cols].reshape(-1))
    return torch.cat([*(t.double() for t in parts), summary.loglik.reshape(1).double(), flag])


def unpack_summary(flat: Float64[Tensor, " m"], like: Summary) -> tuple[Summary, bool]:
    """The inverse of :func:`pack_summary`: the Summary (shapes and dtypes of ``like``) and the stop flag."""
    k, d = like.sx.shape
    rows, cols = _triu(d, flat.device)
    q = rows.numel()
    nk_end, sx_end = 1 + k, 1 + k + k * d
    upper = flat[sx_end : sx_end + k * q].reshape(k, q)
    sxx = torch.empty(k, d, d, dtype=flat.dtype, device=flat.device)
    sxx[:, rows, cols] = upper
    sxx[:, cols, rows] = upper
    out = Summary(flat[0], flat[1:nk_end], flat[nk_end:sx_end].reshape(k, d), sxx, flat[-2])
    return Summary(*(t.to(ref.dtype) for t, ref in zip(out, like, strict=True))), bool(flat[-1] > 0)


@functools.cache
def _triu(d: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The row and column indices of the upper triangle of a D × D matrix (cached: one pair per step saved)."""
    rows, cols = torch.triu_indices(d, d, device=device)
    return rows, cols


def any_stop(stop: bool, device: torch.device) -> bool:
    """Whether any process asks to stop (one all-reduce of a flag): the processes agree on how a fit ends."""
    if not active():
        return stop
    flag = torch.tensor([float(stop)], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(flag)
    return bool(flag[0] > 0)


def agree_on_error(error: BaseException | None) -> None:
    """Raise on every process if any process's ``error`` is set (one all-reduce of a flag): a check that fails
    on one process only (its shard has a NaN, its checkpoint folder is missing) must not leave the others
    waiting in their next collective. The process that failed raises its own error; the others a ValueError
    saying another process did. Outside a process group, raises ``error`` if set."""
    if not active():
        if error is not None:
            raise error
        return
    backend = torch.distributed.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    if any_stop(error is not None, device):
        if error is not None:
            raise error
        raise ValueError(
            "another process of the torch.distributed group rejected its arguments or its data (see its error); "
            "every process stops"
        )


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
