r"""The companion's one-head sticky setting: one causal attention head, no residual, no MLP, on the sticky Markov
chain (Agarwal, Dalal & Misra, arXiv 2512.22473): its weights, its exact predictors and its batched SGD.

Shapes: ``x`` (*b, T, 20) inputs, weights ``W_Q``, ``W_K`` (20, 10), ``W_V`` (20, 15), ``W_O`` (15, 8); R runs
are trained at once with weights stacked to (R, *shape).
"""

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from implicit_em.probes.attention import attention
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.tasks import StickyMarkovTask, StickySequence, hmm_forward_filter

__all__ = [
    "INIT_STD",
    "NOISE",
    "SGD_LR",
    "SGD_STEPS",
    "SHAPES",
    "STAY",
    "init_head",
    "kl_own",
    "kl_runs",
    "log_likelihood",
    "no_context_posterior",
    "single_head_logits",
    "stack_inits",
    "train_runs",
    "window_posterior",
]

# the companion's setting as sticky_sculpting declares it, shared by the claims that reuse it
STAY, NOISE = 0.8, 3.0  # the chain (paper: 0.3, 1; a stickier, noisier chain that needs context)
INIT_STD, SGD_LR, SGD_STEPS = 0.1, 0.01, 1000  # the paper's initialisation and full-batch SGD

SHAPES = {"W_Q": (20, 10), "W_K": (20, 10), "W_V": (20, 15), "W_O": (15, 8)}


def init_head(seed: int, std: float) -> dict[str, Tensor]:
    """One initialisation, N(0, std²) entries, as a leaf tensor per weight."""
    g = torch.Generator().manual_seed(seed)
    return {name: (torch.randn(*shape, generator=g) * std).requires_grad_(True) for name, shape in SHAPES.items()}


def single_head_logits(params: dict[str, Tensor], x: Float[Tensor, "*b t d"]) -> Float[Tensor, "*b t c"]:
    r"""One causal attention head, no residual, no MLP: :math:`\mathrm{softmax}(QK^\top/\sqrt{10}) V W_O`.

    Batched: weights of shape (*b, 20, 10) etc. with inputs (*b, T, 20), or any shapes that broadcast.
    """
    q, k, v = x @ params["W_Q"], x @ params["W_K"], x @ params["W_V"]  # (*b, T, 10), (*b, T, 10), (*b, T, 15)
    return attention(q, k, v, is_causal=True) @ params["W_O"]  # (*b, T, 8)


def log_likelihood(task: StickyMarkovTask, seq: StickySequence) -> Tensor:
    """log p(x_t | y_{t-1} = s) up to a constant, (T, C) float64: the task's Gaussian likelihood."""
    x = seq.inputs.double()
    return -0.5 * ((x[:, None, :] - task.means[None]) ** 2).sum(-1) / task.noise**2


def no_context_posterior(task: StickyMarkovTask, seq: StickySequence) -> Tensor:
    r"""The best predictor of y_t from x_t alone, (T, C) float64: :math:`p(y_{t-1} \mid x_t) A` with a uniform prior.

    The ring's transition matrix is symmetric, hence doubly stochastic, so its stationary law (and that of y_0) is
    uniform.
    """
    return torch.softmax(log_likelihood(task, seq), dim=-1) @ task.transition


def window_posterior(task: StickyMarkovTask, seq: StickySequence, k: int) -> Tensor:
    r"""Bayes predictive from the last ``k`` inputs only, (T, C): the forward filter over x_{t-k+1..t} from a
    uniform prior, times A. ``k = 1`` is :func:`no_context_posterior`; ``k >= T`` is the full filter."""
    if k < 1:
        raise ValueError(f"the window must hold at least one input, got {k}")
    log_lik = log_likelihood(task, seq)  # (T, C)
    t, c = log_lik.shape
    padded = torch.cat([torch.zeros(k - 1, c, dtype=log_lik.dtype), log_lik])  # flat likelihood before the start
    windows = padded.unfold(0, k, 1)  # (T, C, k): window t ends at input t
    log_a = task.transition.log()[None].expand(t, -1, -1)
    filt = hmm_forward_filter(log_a, windows, torch.arange(k)[None].expand(t, -1))[:, -1]  # (T, C)
    return filt @ task.transition


def stack_inits(seeds: list[int], repeats: int, std: float) -> dict[str, Tensor]:
    """Initialisations for the runs (init i, sequence s) in the order r = i * repeats + s: weights (R, *shape)."""
    inits = [init_head(s, std) for s in seeds]
    return {
        name: torch.stack([p[name].detach() for p in inits for _ in range(repeats)]).requires_grad_(True)
        for name in SHAPES
    }


@torch.no_grad()
def kl_runs(params: dict[str, Tensor], x: Tensor, posterior: Tensor) -> Tensor:
    """KL(Bayes || model) in bits for every run, averaged over held-out sequences and positions: (R,).

    ``params`` (R, ...) weights, ``x`` (H, T, D) held-out model inputs, ``posterior`` (H, T, C).
    """
    batched = {k: v[:, None] for k, v in params.items()}  # (R, 1, ...): broadcast over the H sequences
    p_model = torch.softmax(single_head_logits(batched, x.float()[None]).double(), dim=-1)  # (R, H, T, C)
    return kl_bits(posterior[None].expand_as(p_model), p_model).mean(dim=(1, 2))


@torch.no_grad()
def kl_own(params: dict[str, Tensor], x: Tensor, seqs: list[StickySequence], n_inits: int) -> Tensor:
    """KL(Bayes || model) in bits of every run on its own training sequence, (R,); ``x`` (R, T, D) model inputs."""
    p_model = torch.softmax(single_head_logits(params, x).double(), dim=-1)  # (R, T, C)
    posterior = torch.stack([s.posterior for s in seqs]).repeat(n_inits, 1, 1)
    return kl_bits(posterior, p_model).mean(dim=1)


def train_runs(params: dict[str, Tensor], x: Tensor, y: Tensor, lr: float, steps: int, log_every: int) -> Tensor:
    """Full-batch SGD of R independent runs at once; returns their losses every ``log_every`` steps, (L, R) nats.

    The objective is the sum over runs of each run's mean cross-entropy, so each run gets exactly the gradient, and
    the SGD step, it would get alone.
    """
    opt = torch.optim.SGD(list(params.values()), lr=lr)
    losses = []
    for step in range(steps):
        logits = single_head_logits(params, x)  # (R, T, C)
        per_run = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(dim=1)  # (R,)
        opt.zero_grad(set_to_none=True)
        per_run.sum().backward()
        opt.step()
        if step % log_every == 0 or step == steps - 1:
            losses.append(per_run.detach())
    return torch.stack(losses)
