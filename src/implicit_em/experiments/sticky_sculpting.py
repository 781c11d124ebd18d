r"""Does training on the sticky Markov chain move the model towards the Bayes posterior? The skeptic's test.

Claim (review of arXiv 2512.22473, "Gradient Dynamics of Attention"): the paper says the attention dynamics
"sculpt the low-dimensional manifolds identified in our companion work", supported only by qualitative
specialisation in the sticky Markov-chain simulations (its §4). The skeptic's concrete test: re-run the sticky
chain, then compare (i) KL(posterior || model) and (ii) principal angles between the learned value space and the
companion paper's manifold basis with a random-initialisation baseline; if either fails to improve by > 2σ, the
sculpting claim does not hold.

Method (companion notes §B): :class:`implicit_em.windtunnel.StickyMarkovTask` (8 symbols on a ring, stay 0.3,
x_t = mu_{y_{t-1}} + eps_t in D = 20, target y_t), one causal attention head with no residual and no MLP:
logits = softmax_causal((x W_Q)(x W_K)^T / sqrt(10)) (x W_V) W_O with W_Q, W_K 20x10, W_V 20x15, W_O 15x8, init
N(0, 0.1^2); the paper's optimiser: full-batch SGD, lr 0.01, 1000 steps on one training sequence. For each of
``n_seeds`` initialisations: KL(p_Bayes || p_model) in bits, averaged over the positions of a held-out sequence
(same chain and means, fresh draw), for the random initialisation (the baseline) and after training. The exact
p_Bayes(y_t | x_1..t) is the task's forward filter.

Verdict rule: improvement = mean KL(init) - mean KL(trained); σ = standard deviation over seeds of the
random-initialisation KL (the baseline's spread). The posterior part holds if improvement > 2σ. The manifold
part cannot be run: neither the paper nor companion-notes.md defines a manifold basis for the sticky chain (the
companion's value-manifold signatures are stated for the wind tunnels and production LLMs), so it is reported as
not tested. REFUTED if the posterior part fails (the skeptic's rule: either failing refutes the sculpting claim);
PARTIAL if it holds (the posterior half is met, the manifold half is untested). SUPPORTED is not reachable here.
"""

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from implicit_em.experiments._base import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    pyplot,
    torch_threads,
)
from implicit_em.probes.attention import attention
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.tasks import StickyMarkovTask, StickySequence

SHAPES = {"W_Q": (20, 10), "W_K": (20, 10), "W_V": (20, 15), "W_O": (15, 8)}


@dataclass(frozen=True)
class Config:
    """The paper's model and optimiser; ``quick()`` shortens the sequence, ``full()`` is the paper's T = 2000."""

    seed: int = 0  # the chain's means and sequences; initialisations seed, seed + 1, ...
    length: int = 500  # T of the training and the held-out sequence
    steps: int = 1000  # full-batch SGD steps (paper: 1000)
    lr: float = 0.01  # paper: 0.01
    init_std: float = 0.1  # paper: N(0, 0.1^2)
    n_seeds: int = 3
    sigmas: float = 2.0  # verdict threshold: the skeptic's "> 2σ" (review's concrete test)
    log_every: int = 50

    @classmethod
    def quick(cls) -> "Config":
        """About 10 s on one core: T = 500, three initialisations."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """The paper's T = 2000 and five seeds (measured: 173 s on one core; PARTIAL, 12.7σ, 7.6% of the gap)."""
        return cls(length=2000, n_seeds=5)


def _init(seed: int, std: float) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {name: (torch.randn(*shape, generator=g) * std).requires_grad_(True) for name, shape in SHAPES.items()}


def single_head_logits(params: dict[str, Tensor], x: Float[Tensor, "t d"]) -> Float[Tensor, "t c"]:
    r"""One causal attention head, no residual, no MLP: :math:`\mathrm{softmax}(QK^\top/\sqrt{10}) V W_O`."""
    q, k, v = x @ params["W_Q"], x @ params["W_K"], x @ params["W_V"]  # (T, 10), (T, 10), (T, 15)
    return attention(q, k, v, is_causal=True) @ params["W_O"]  # (T, 8)


@torch.no_grad()
def _kl(params: dict[str, Tensor], seq: StickySequence) -> float:
    """Mean over positions of KL(p_Bayes || p_model), bits."""
    p_model = torch.softmax(single_head_logits(params, seq.inputs.float()).double(), dim=-1)
    return float(kl_bits(seq.posterior, p_model).mean())


def _train(params: dict[str, Tensor], seq: StickySequence, cfg: Config) -> list[float]:
    """Full-batch SGD on the cross-entropy of one sequence; returns the loss every ``log_every`` steps (nats)."""
    opt = torch.optim.SGD(list(params.values()), lr=cfg.lr)
    x, losses = seq.inputs.float(), []
    for step in range(cfg.steps):
        loss = F.cross_entropy(single_head_logits(params, x), seq.targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            losses.append(float(loss.detach()))
    return losses


def _std(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / max(1, len(xs) - 1))


def _criteria(m: dict[str, float], sigmas: float) -> list[Criterion]:
    """The posterior part of the skeptic's test: improvement > sigmas × the baseline's spread over seeds."""
    return [criterion("kl_improvement", m["kl_improvement"], ">", sigmas * m["kl_init_std"])]


def _decide(m: dict[str, float], sigmas: float) -> tuple[Verdict, str]:
    improvement = m["kl_improvement"]
    (posterior,) = _criteria(m, sigmas)
    numbers = (
        f"KL(Bayes || model) on a held-out sequence {m['kl_init_mean']:.4f} bits at random initialisation, "
        f"{m['kl_trained_mean']:.4f} after training: improvement {improvement:.4f} bits = "
        f"{m['kl_improvement_in_sigma']:.1f}σ of the baseline (need > {sigmas:g}σ); "
        f"{100 * m['kl_gap_closed']:.1f}% of the way to the posterior; against the pooled spread of init and "
        f"trained KL it is {m['kl_improvement_in_pooled_sigma']:.1f}σ"
    )
    if posterior.passed:
        return "PARTIAL", (
            f"Posterior part met: {numbers}. The manifold-angle part is not tested: no manifold basis for the sticky "
            "chain is defined in the paper or the companion notes."
        )
    return "REFUTED", f"Posterior part not met at the paper's settings: {numbers}. The manifold part is not tested."


def _figure(ctx: Context, m: dict[str, float], init: list[float], trained: list[float], curves: list[list[float]],
            cfg: Config, minimum_loss: float) -> str:  # fmt: skip
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    seeds = range(len(init))
    ax.set_xticks(list(seeds))
    ax.plot(seeds, init, "o", label="random initialisation")
    ax.plot(seeds, trained, "s", label="after training")
    band = m["kl_init_mean"] - cfg.sigmas * m["kl_init_std"]
    ax.axhline(m["kl_init_mean"], color="C0", lw=1)
    ax.axhline(band, color="C0", ls="--", lw=1, label=f"baseline mean - {cfg.sigmas:g}σ")
    ax.set(xlabel="seed", ylabel="KL(Bayes ‖ model), bits (held out)", title="Posterior error per seed")
    ax.legend(fontsize=8)
    ax = axes[1]
    steps = [min(i * cfg.log_every, cfg.steps - 1) for i in range(len(curves[0]))]
    for c in curves:
        ax.plot(steps, c, lw=1)
    ax.axhline(math.log(8), color="0.5", ls=":", label="log 8 (uniform)")
    ax.axhline(minimum_loss, color="k", ls="--", label="minimum loss (knows y_{t-1})")
    ax.set(xlabel="SGD step", ylabel="training cross-entropy (nats)", title=f"Full-batch SGD, lr {cfg.lr:g}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return ctx.save_figure(fig, "sticky_sculpting", dpi=100)


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(1):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    task = StickyMarkovTask(length=cfg.length, means_seed=cfg.seed)
    train_seq = task.sample(torch.Generator().manual_seed(cfg.seed))
    held_out = task.sample(torch.Generator().manual_seed(cfg.seed + 1_000))
    init_kl, trained_kl, train_kl, final_loss, curves = [], [], [], [], []
    for i in range(cfg.n_seeds):
        params = _init(cfg.seed + i, cfg.init_std)
        init_kl.append(_kl(params, held_out))
        curves.append(_train(params, train_seq, cfg))
        trained_kl.append(_kl(params, held_out))
        train_kl.append(_kl(params, train_seq))
        final_loss.append(curves[-1][-1])
    n = cfg.n_seeds
    m: dict[str, float] = {
        "kl_init_mean": sum(init_kl) / n,
        "kl_init_std": _std(init_kl),
        "kl_trained_mean": sum(trained_kl) / n,
        "kl_trained_std": _std(trained_kl),
        "kl_trained_on_training_sequence_mean": sum(train_kl) / n,
        "final_train_loss_mean": sum(final_loss) / n,
        "minimum_loss": task.minimum_loss(),
        "uniform_loss": math.log(8),
    }
    m["kl_improvement"] = m["kl_init_mean"] - m["kl_trained_mean"]
    m["kl_improvement_in_sigma"] = m["kl_improvement"] / m["kl_init_std"] if m["kl_init_std"] > 0 else math.inf
    m["kl_gap_closed"] = m["kl_improvement"] / m["kl_init_mean"]
    # a stricter reading of "2σ": the spread of a difference of one init draw and one trained draw
    pooled = math.hypot(m["kl_init_std"], m["kl_trained_std"])
    m["kl_improvement_in_pooled_sigma"] = m["kl_improvement"] / pooled if pooled > 0 else math.inf
    verdict, summary = _decide(m, cfg.sigmas)
    figure = _figure(ctx, m, init_kl, trained_kl, curves, cfg, task.minimum_loss())
    metrics = {
        **m, "kl_init_per_seed": init_kl, "kl_trained_per_seed": trained_kl, "length": cfg.length,
        "steps": cfg.steps, "lr": cfg.lr, "n_seeds": n, "manifold_angle_part": "not tested (no basis defined)",
        "wall_s": time.perf_counter() - start,
    }  # fmt: skip
    details = (
        f"One training sequence of T = {cfg.length} (seed {cfg.seed}), a held-out sequence of the same length; "
        f"{n} initialisations; full-batch SGD lr {cfg.lr:g} for {cfg.steps} steps, as in the paper. Final training "
        f"loss {m['final_train_loss_mean']:.3f} nats against log 8 = {math.log(8):.3f} and the minimum "
        f"{m['minimum_loss']:.3f}: at the paper's settings the model is far from converged (companion notes §B say "
        "so too), so a small KL improvement reflects the optimiser budget as much as the dynamics. KL on the training "
        f"sequence itself: {m['kl_trained_on_training_sequence_mean']:.4f} bits. σ is the spread of the "
        "random-initialisation baseline over seeds; with few seeds it is itself uncertain. The trained KL varies "
        "far more across seeds than the baseline, so the stricter pooled-σ reading can fail where the stated rule "
        "passes (measured at the full size: 12.7σ by the rule, 0.95σ pooled; one seed drove most of the gain)."
    )
    return Result(verdict, summary, metrics, _criteria(m, cfg.sigmas), [figure], details)


EXPERIMENT = Experiment(
    name="sticky_sculpting",
    title="Sticky Markov chain: does training approach the Bayes posterior beyond a random-init baseline?",
    claim=(
        "the central claim that these dynamics 'sculpt the low-dimensional manifolds identified in our companion "
        "work' is supported only by qualitative specialization in the sticky Markov-chain simulations (§4)."
    ),
    source=(
        "review-gradient-dynamics-of-attention.json: skeptic's load-bearing attack and concrete test "
        "(arXiv 2512.22473 §4.2)"
    ),
    Config=Config,
    run=run,
)
