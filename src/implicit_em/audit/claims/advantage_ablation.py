r"""Is the advantage term of the attention gradient needed for posterior tracking and the value manifold?

Falsifier (review-gradient-dynamics-of-attention, "falsifier", of arXiv 2512.22473): "Run the sticky
Markov-chain simulation with the advantage term removed from the attention gradient while still minimizing
cross-entropy; check whether the low-dimensional manifolds required for accurate Bayesian inference still appear."
The claim it attacks (the review's key machinery): "The advantage-based routing law for attention scores
(∂L/∂s_ij equals attention weight times advantage of the dot product b_ij) together with responsibility-weighted
value updates, which together drive coupled specialization of routing and content". The implicit-EM paper states
the law as "∂L/∂s_ij = α_ij (a_ij − ā_i)" (§4.2) and calls score gradients "responsibility-gated advantages"
(§4.4); it credits the manifold-sculpting reading to Agarwal et al. (§5.3, "how cross-entropy training sculpts the
geometry", §1.2). The review's wording matches the paper's law (b_ij = u_i·v_j is the paper's a_ij).

Method. A :class:`torch.autograd.Function` around the attention softmax (:mod:`._ablation`) keeps the forward pass
and replaces the score gradient: (A) exact, α⊙(b − E_α b); (B) zero; (C) α⊙b, no baseline; (D) α_ij a_{i,π_i(j)},
the advantages permuted among the visible keys of each query row by a fixed permutation drawn from the seed.
Values, W_O and every path not through the scores keep their exact gradients; all arms share the initialisation,
the data stream, the optimiser and the number of steps. Two deciding tasks and one reported setting:

- the bijection wind tunnel, V = 20, keys without replacement (arXiv 2512.22471, as ``bayes_necessity``): the
  wind tunnel's causal transformer (2 layers, 2 heads, d_model 32) with AdamW; held-out KL(Bayes ‖ model) at the
  key positions, and the value-manifold signature of the final-layer residual (after the last block, before the
  final LayerNorm) at the key positions, where the model predicts a value, against the exact Bayes entropy;
- the sticky chain on the shared testbed :class:`implicit_em.windtunnel.sticky.StickyTestbed` (issue 25 §1; stay
  0.9, noise 3, T = 32 windows drawn fresh every step from a per-seed stream, labels sampled from the chain): a
  2-layer causal transformer with learned positions and a linear input embedding, whose attention goes through the
  same surgery (:func:`~implicit_em.audit.testbeds.ablation.ablated_sticky`); Adam lr 1e-2, warm-up then cosine;
  held-out KL over every position of 256 independent windows per seed, and ``sticky_manifold``'s manifold
  read-out (below; the residual signature at every position is reported beside it);
- reported, not deciding: the companion's literal setting (``sticky_sculpting``'s single head, no positions, no
  residual, no MLP; stay 0.8, noise 3, inputs x / 3, a pool of sequences, Adam), metrics ``onehead_*``. It cannot
  represent the filter (its output at t depends on x_t and the unordered set of the earlier inputs, while the filter
  needs their order), and with the exact gradient it ends worse than the no-context predictor, so it can show what
  the companion's model does with and without the advantage, not whether the advantage is needed to track.

Expectation stated before any run: without replacement the Bayes predictive at a key position depends only on the
set of values already shown (and the position), which a uniform average over the prefix carries; at the GPT-2
initialisation the scores are near zero, so arm B's frozen attention is near-uniform and can, in principle, solve
the bijection. So this task tests whether the advantage is *necessary*, not whether routing helps. The sticky head
has no residual: without trained scores it cannot even single out x_t.

Signature, bijection (:func:`implicit_em.audit.testbeds.manifold.value_manifold_signature`): PC1 share and |Spearman
ρ| of the PC1 coordinate with the Bayes entropy. Control: the same model at its random initialisation (identical
for every arm of a seed); a signature the untrained model already shows is not credited to training.

Signature, sticky chain (issue 25, declared before its deciding runs; until then the sticky half read the
bijection's signature, which arm A never showed there, see below): ``sticky_manifold``'s manifold read-out on the
same testbed, its measures imported unchanged (:mod:`implicit_em.audit.testbeds.sticky_manifold`). The manifold basis
is the span of the centred symbol means μ_s − μ̄ (rank 7 in R^20): everything x_t says about the hidden symbol lies
in it, and the exact Bayes predictive reads each x_j only through x_j · μ_s. Two subspaces of input space, each
compared with it by the mean cos² of their 7 principal angles (1 nested, 0 orthogonal, 7/20 = 0.35 for a random
subspace): the *context read-out*, the top-7 right singular subspace of the class-centred logit Jacobians
∂z̃_t/∂x_j over the earlier inputs j < t at the query positions t = 7, 15, 23, 31
(:func:`~implicit_em.audit.testbeds.sticky_manifold.context_readout_subspace`; the Bayes filter scores 1), and the
*value PCs*, the principal 7-subspace of the first attention layer's values pulled back through their mean
Jacobian (:func:`~implicit_em.audit.testbeds.sticky_manifold.transformer_value_subspace`). Both are read on the
model's own function: the Jacobians go through an exact-gradient copy of an ablated arm (the forward is the same
in every mode; through arm B's own backward the read-out would see no score path). An arm *shows the manifold*
when, on the means over seeds and on both measures, it is **aligned** (mean cos² >= 0.35 + 0.5 (1 − 0.35) = 0.675,
``sticky_manifold``'s bar, ``manifold_margin_fraction``) and **beyond its init** (the mean over seeds of its gain
over its seed's own random init > ``manifold_sigmas`` (2, ``sticky_manifold``'s "> 2σ") × σ_init, the sd of the
measure over ``manifold_n_inits`` (8) further random inits per seed, measured untrained: one trained model per seed
gives no paired spread of its own, so the σ is the random-initialization baseline's). Controls that can fail, as
``sticky_manifold``'s: the init spread above, and the other-window-label model (gates): ``manifold_n_shuffled`` (1)
model from the first seed's init, trained with the exact gradient on the same input stream with every window's
labels taken from another window of its batch (``sticky_manifold._ShuffledLabels``: the chain's law kept, the link
to x gone) must stay under the aligned bar on both measures, else the read-out cannot tell the manifold from
training. Identities (reported, a failure raises): planted models whose input embedding reads only span(μ) score 1
on both measures and its complement 0 (float32, 1e-6), the exact Bayes filter's read-out 1 (float64, 1e-9).

Sizes changed after a number was seen: the first quick sticky run (8 training sequences of T = 80, 200 steps)
ended with arm A at 13.3 bits held-out KL (memorised; random init 1.04), so the pool was enlarged to 32
sequences of T = 60 (150 steps). That run's verdict was REFUTED, decided by the bijection as now; the sticky task was
undecided in both. The quick size first ran one seed (250 steps of batch 64): REFUTED at seeds 0 and 1, PARTIAL at
seed 2, where B's |ρ| (0.59) fell 0.02 short of A's minus the margin; it now runs three seeds (200 steps of batch
32, set on arm A's KL alone) and decides on their means like the full size. Pilots before the first run (arm A
only, 16-64 sequences, Adam lr 1e-2) showed what ``sticky_sculpting`` reported: the head's held-out KL dips and
then rises while its training loss plateaus, and stays above the no-context predictor's; so the sticky task is
expected to be undecided (A does not track).

Verdict rule (thresholds in ``Config``, fixed before the first run; spreads over seeds reported):

- gates (issue 25), per deciding task, on arm A at *every* seed: it tracks the posterior, KL_A <=
  ``learned_fraction`` (0.1) × the exact no-context KL of that seed's held-out set (bijection: the uniform predictor;
  sticky: p(y_t | x_t)); it has plateaued, the mean held-out KL over the last fifth of the checkpoints is at most
  ``plateau_tol`` (0.25) × that tracking bar below the mean over the fifth before
  (:func:`implicit_em.windtunnel.sticky.plateau_drop`); and it shows the task's signature (means over seeds); on
  the sticky chain the other-window-label control stays under the aligned bar on both measures. A failed
  gate on either task makes the verdict UNDECIDED (:func:`~implicit_em.audit.core.gated`): the claim is
  about the sticky chain and the bijection is its check, so the audit decides only when both testbeds can;
- bijection: arm X *shows the signature* if pc1_X >= pc1_init + ``sig_margin`` and |ρ|_X >= max(``rho_min``,
  |ρ|_init + ``sig_margin``); for B and D "present" also requires pc1_X >= pc1_A − ``sig_margin`` and
  |ρ|_X >= |ρ|_A − ``sig_margin``;
- sticky chain: arm X *shows the manifold* as defined above (both measures aligned and beyond the init); for B and
  D "present" also requires each measure >= A's − ``sig_margin`` (the same "near A" as the bijection's);
- *necessary* on a task: KL_B / KL_A >= ``ratio_necessary`` (10, the issue) and KL_D / KL_A >= 10 (means over
  seeds), and neither B nor D shows the signature;
- *falsifier holds* on a task: B or D has KL within ``ratio_falsifier`` (2, the issue) of KL_A with the signature
  present.

REFUTED (the advantage is not needed) if the falsifier holds on a task; SUPPORTED if the advantage is necessary on
both tasks; PARTIAL otherwise (the ablations worse than A by between 2× and 10×), the summary says which. Arm C is
reported beside the verdict. Identities (reported, not evidence): the Function's gradients against autograd in
float64 (A equal, C − A = α⊙E_α b, D a per-row permutation of A's advantages) and arm B's query/key weights unchanged
by training (the surgery really removes the score gradient).

Before issue 25 (the rule then): a task whose arm A did not track (on the mean over seeds) was "undecided" and the
verdict PARTIAL; the sticky chain was the one-head model above, which never tracked, so the verdict was the
bijection's, read at 1,000 steps where two of three seeds' arm A missed the tracking bar on their own (0.126, 0.121,
0.068 bits against 0.111). Now the bijection trains 3,000 steps (full) and every seed must track and plateau.
The quick size now runs one seed per run (seeds 0-4 through ``--seed``, each its own verdict) at 1,000 bijection
steps (was three seeds of 200, decided on their means); the full size runs seeds 0-4 in one run (was 0-2).
Pilot for the bijection budget (arm A only, seeds 100-102, disjoint from the deciding seeds 0-4; V = 20, 2 layers,
lr 1e-2 cosine, held-out KL at 20 checkpoints; chosen on A's KL and last-fifth drop alone): 2,500 steps end at
0.010, 0.037, 0.010 bits (bar 0.111), but seed 101's last fifth still fell by 0.027 bits, at the 0.028 plateau
allowance; 4,000 steps end at 0.006 (seed 100). So 3,000 steps: about 14 ms a step on a loaded core, 3 minutes per
seed for the four arms. The sticky testbed's pilot is :data:`implicit_em.windtunnel.sticky.PILOT`.

The sticky signature's change (issue 25, after the deciding runs at aae28e4 and before any with the read-out): at
quick seeds 0-4 and full (seeds 0-4 in one run) arm A tracked and plateaued on the testbed at every seed, but its
final residual had no entropy-ordered PC1 (|ρ| 0.015-0.077 against 0.5), so the signature gate failed at every
seed: the sticky half was undecided by construction of the measurement. The read-out above replaces it as the sticky
half's signature; the bijection's signature, the KL ratios, the gates and every threshold are unchanged, and the
thresholds of the read-out are ``sticky_manifold``'s declared ones. The earlier reading is still computed and
reported (``outcome_sticky_residual_signature``). Pilot for its cost (:data:`MANIFOLD_PILOT`).

The quick bijection is reported, not deciding (issue 25 §1-§2; the setting, not the rule). With the read-out the
quick verdicts at seeds 0-4 (97cdf0b) were UNDECIDED, PARTIAL, REFUTED, REFUTED, PARTIAL: the sticky half read
*between* at every seed, as at full size, and the flips came from the quick bijection (V = 6, 1 layer, 1,000 steps),
where B ends at 0.72-0.84× A's KL (at V = 6 uniform attention suffices) while at V = 20 (full) it ends 36×: a
different task, which cannot decide for the full one. The preferred mend was the full size's task (V = 20, without
replacement) at a budget the quick run can afford, chosen on arm A alone at pilot seeds 100-102 as the full budget
was, with a margin and a cost cap declared before the pilot (``benchmarks/advantage_ablation_bijection_pilot.py``,
committed before it ran): a factor 2 under both of arm A's gates at every pilot seed (KL <= 0.05 × no-context,
last-fifth drop <= 0.5 × the plateau allowance), the first passing candidate in a declared cost order, affordable
when four arms take <= 90 s on a slot (the quick run per seed took 160-231 s, its V = 6 bijection 11-20 s). No
affordable candidate passed, not even the bare gates at every seed (:data:`QUICK_BIJECTION_PILOT`), so by the
declared fallback the quick bijection stays as it was (V = 6), reported beside the verdict with its outcome
(``outcome_bijection``, ``deciding_tasks``), and the quick verdict is the sticky testbed's alone; at full size
both tasks decide as before. The verdict rule, the gates and every threshold are unchanged.
"""

import copy
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.audit.core import (
    Context,
    Criterion,
    Experiment,
    Result,
    Verdict,
    criterion,
    gate,
    gated,
    identity,
    pyplot,
    torch_threads,
)
from implicit_em.audit.testbeds import manifold
from implicit_em.audit.testbeds.ablation import (
    AblatedStickyAttention,
    Mode,
    ablated_sticky,
    ablated_transformer,
    final_residual,
    query_key_weights,
    routed_softmax,
    row_permutations,
    single_head,
    sticky_query_key_weights,
)
from implicit_em.audit.testbeds.manifold import mean_cos2, random_mean_cos2, value_manifold_signature
from implicit_em.audit.testbeds.one_head import no_context_posterior, stack_inits
from implicit_em.audit.testbeds.sticky_manifold import (
    context_readout_subspace,
    planted_testbed_model,
    shuffled_labels,
    symbol_mean_basis,
    transformer_scores,
)
from implicit_em.windtunnel.metrics import entropy_bits, evaluate_predictions, kl_bits
from implicit_em.windtunnel.sticky import (
    StickyBatch,
    StickyTestbed,
    fit,
    forward_filter,
    plateau_change,
    plateau_drop,
)
from implicit_em.windtunnel.tasks import BijectionTask, StickyMarkovTask
from implicit_em.windtunnel.train import windtunnel_loss

__all__ = [
    "EXPERIMENT",
    "MANIFOLD_PILOT",
    "QUICK_BIJECTION_PILOT",
    "Config",
    "gradient_checks",
    "run",
]

MANIFOLD_PILOT = (
    "Arm A only (exact gradient), pilot seed 100 (disjoint from the deciding seeds 0-4), quick testbed (2,000 steps), "
    "before any deciding run with the read-out; chosen on cost alone "
    "(benchmarks/advantage_ablation_manifold_pilot.py quick 100 8): one read-out (both measures, 256 held-out "
    "windows, 4 query positions) takes about 1.1-1.3 s on a core, so 8 extra random inits per seed cost about 11 s "
    "and the other-window-label model one more fit (about 39 s quick); arm A's fit took 39 s. Seen: the seed's init "
    "0.307 (read-out) / 0.383 (value PCs), the 8 extra inits 0.31-0.50 / 0.31-0.45 (sd 0.060 / 0.047), arm A "
    "0.999 / 0.999 (KL / no-context 0.058). No ablation arm and no control was trained; no threshold was set on "
    "these numbers (the bars are sticky_manifold's)."
)

QUICK_BIJECTION_PILOT = (
    "Arm A only (exact gradient), pilot seeds 100-102 (disjoint from the deciding seeds 0-4), the full size's task "
    "(V = 20, without replacement; 2 heads, d_model 32, AdamW lr 1e-2, warm-up 50, cosine), the quick held-out set "
    "(128 sequences, 20 checkpoints); chosen on arm A's KL and last-fifth drop alone, no ablation arm trained and no "
    "signature read (benchmarks/advantage_ablation_bijection_pilot.py, declared and committed at 2f8a738 before it "
    "ran; /work/runs/i25-adv2/pilot/bijection-pilot.log). Margin: KL_A <= 0.5 × the tracking bar (0.0554 bits) and "
    "the drop <= 0.5 × the plateau allowance (0.0138 bits) at every pilot seed; affordable: 4 × arm A's time <= "
    "90 s. KL_A / no-context (bar 0.1) and drop / allowance (bar 1) at seeds 100, 101, 102, mean arm-A seconds on a "
    "loaded slot: 1 layer, batch 32, 1,000 steps 0.21, 0.23, 0.28 / 1.09, 1.17, 1.21 (7.5 s); 1,500 steps 0.14, "
    "0.17, 0.17 / 1.05, 1.23, 1.08 (13.0 s); 2,000 steps 0.11, 0.14, 0.13 / 0.81, 0.83, 0.99 (18.9 s); 2 layers, "
    "batch 32, 1,000 steps 0.15, 0.03, 0.17 / 1.41, 1.15, 1.11 (19.1 s); 1 layer, batch 64, 1,000 steps 0.15, 0.09, "
    "0.16 / 0.94, 1.11, 1.03 (19.9 s): every affordable candidate fails the bare gates at some seed. The next, 1 "
    "layer, batch 32, 3,000 steps, meets the bare gates (0.074, 0.092, 0.079 / 0.68, 0.84, 0.90) but not the margin, "
    "at 62 s a seed (about 250 s for four arms, over the cap); 2 layers, batch 32, 1,500 steps 0.094, 0.019, 0.085 / "
    "0.99, 0.85, 1.32 (43 s; fails the plateau gate at seed 102); 2 layers, batch 32, 2,000 steps at seed 100 0.074 "
    "/ 0.76 (125 s on a loaded slot). The pilot was stopped by hand there (every later candidate costs more than the "
    "cap); the full size's budget (2 layers, batch 64, 3,000 steps) took 173 s a seed for four arms in the full run "
    "at 97cdf0b."
)

ARMS: dict[str, Mode] = {"A": "exact", "B": "zero", "C": "no_baseline", "D": "permuted"}
LABELS = {"A": "A exact", "B": "B zero", "C": "C no baseline", "D": "D permuted"}
TASKS = ("bijection", "sticky")  # the deciding tasks; "onehead" (the companion's literal head) is reported
ONEHEAD = "onehead"
MEASURES = ("readout", "value")  # sticky_manifold's two subspace measures (the sticky half's signature)
SIGNATURE = {"bijection": "residual", "sticky": "subspace"}  # which signature each deciding task reads


@dataclass(frozen=True)
class Config:
    """Sizes, optimisers and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_seeds: int = 1  # training seeds seed, seed + 1, ... (initialisation, data stream, permutations)
    # bijection wind tunnel (keys without replacement)
    n_symbols: int = 6  # V; L = V - 1 pairs
    n_layers: int = 1
    n_heads: int = 2
    d_model: int = 32
    d_ff: int = 64
    steps: int = 1000  # pilot (seeds 100-102, arm A): 200-600 steps missed the plateau gate, 1,000 passed at all
    # whether the bijection decides (full) or is reported beside the sticky half's verdict (quick: V = 6 is another
    # task than the full size's V = 20, and no affordable V = 20 budget passed arm A's pilot; module docstring)
    bijection_deciding: bool = False
    batch_size: int = 32
    lr: float = 1e-2  # AdamW, weight decay 0 (so arm B's query/key weights stay exactly where they started)
    warmup_steps: int = 20
    eval_size: int = 128  # held-out sequences; the signature uses all their key positions
    n_checkpoints: int = 20  # held-out KL during training, for the plateau gate
    # sticky chain on the shared testbed (implicit_em.windtunnel.sticky; its pilot chose these)
    sticky_stay: float = 0.9
    sticky_noise: float = 3.0
    sticky_length: int = 32
    sticky_layers: int = 2
    sticky_steps: int = 2000
    sticky_batch: int = 64
    sticky_lr: float = 1e-2  # Adam, warm-up 50 then cosine to 0
    sticky_eval_size: int = 256  # held-out windows per seed
    # the companion's literal one-head setting (sticky_sculpting's head; reported, cannot represent the filter)
    onehead_stay: float = 0.8
    onehead_noise: float = 3.0
    onehead_length: int = 60  # T of every training and held-out sequence
    onehead_train_sequences: int = 32  # the training pool, full batch (first draft: 8 of T = 80; see the docstring)
    onehead_heldout: int = 2
    onehead_steps: int = 150
    onehead_lr: float = 1e-2  # Adam
    init_std: float = 0.1
    # verdict thresholds (module docstring)
    ratio_necessary: float = 10.0  # the issue: "B and D end >= 10x worse in KL"
    ratio_falsifier: float = 2.0  # the issue: "B or D come within 2x of A"
    learned_fraction: float = 0.1  # A tracks: KL <= 0.1 x no-context KL (bayes_necessity's bar; issue 25)
    plateau_window: float = 0.2  # plateau gate: the last fifth of the checkpoints against the fifth before ...
    plateau_tol: float = 0.25  # ... lowers A's mean KL by at most 0.25 x the tracking bar (the testbed's rule)
    rho_min: float = 0.5  # "orders by posterior entropy" (arXiv 2512.22471): |Spearman ρ| at least 0.5
    sig_margin: float = 0.1  # above the random init, and how far below arm A still counts as present
    grad_tol: float = 1e-12  # float64 round-off for the Function's gradient checks
    # the sticky half's manifold read-out (issue 25, declared before its deciding runs): sticky_manifold's measures,
    # its query positions and its bars, unchanged (module docstring)
    manifold_query_every: int = manifold.QUERY_EVERY  # context read-out queries t = 7, 15, 23, 31 of T = 32
    manifold_n_inits: int = 8  # extra random inits per seed (measured, not trained): the init spread σ_init
    manifold_sigmas: float = manifold.SIGMAS  # beyond init: mean paired gain over the seeds' own inits > 2 σ_init
    manifold_margin_fraction: float = manifold.MARGIN_FRACTION  # aligned: >= chance + 0.5 (1 - chance) = 0.675
    manifold_n_shuffled: int = 1  # other-window-label control models (exact gradient), from the first seeds
    manifold_planted_tol: float = manifold.PLANTED_TOL_FLOAT32  # planted float32 models score 1 or 0 up to this
    manifold_bayes_tol: float = manifold.PLANTED_TOL_FLOAT64  # the exact Bayes filter's read-out scores 1 (float64)

    @classmethod
    def quick(cls) -> "Config":
        """One seed per run (run seeds 0-4 with ``--seed``): the sticky testbed at 2,000 steps of 64 windows decides;
        the bijection, reported and not deciding, at V = 6, one layer, 1,000 steps of batch 32 (no V = 20 budget
        within ``QUICK_BIJECTION_PILOT``'s cost cap let arm A track and plateau with its margin); the one-head
        setting at T = 60, 32 sequences, 150 Adam steps."""
        return cls()

    @classmethod
    def full(cls) -> "Config":
        """Five seeds: V = 20, two layers, 3,000 steps of batch 64; the sticky testbed at 3,000 steps; the one-head
        setting at T = 100, 48 sequences, 300 steps.

        Budget (one thread, loaded machine): a bijection step at V = 20, 2 layers, d_model 32 costs about 14 ms
        (pilot), a sticky-testbed step about 15 ms, so a seed's 4 + 4 arms take about 6 minutes and the five seeds
        about 30. The bijection's steps were set on arm A's pilot alone (seeds 100-102, module docstring). The
        sticky read-out adds about 17 s a seed (13 read-outs) and one control fit (:data:`MANIFOLD_PILOT`)."""
        return cls(
            n_seeds=5, n_symbols=20, n_layers=2, steps=3000, batch_size=64, warmup_steps=50, eval_size=512,
            n_checkpoints=30, bijection_deciding=True, sticky_steps=3000, onehead_length=100,
            onehead_train_sequences=48, onehead_heldout=4, onehead_steps=300,
        )  # fmt: skip

    def deciding_tasks(self) -> tuple[str, ...]:
        """The tasks whose outcomes make the verdict: both at full size, the sticky testbed alone at quick size."""
        return TASKS if self.bijection_deciding else ("sticky",)

    def testbed(self) -> StickyTestbed:
        """The sticky testbed this config trains on."""
        return dataclasses.replace(
            StickyTestbed(), stay=self.sticky_stay, noise=self.sticky_noise, length=self.sticky_length,
            n_layers=self.sticky_layers, steps=self.sticky_steps, batch_size=self.sticky_batch, lr=self.sticky_lr,
            eval_size=self.sticky_eval_size, track_fraction=self.learned_fraction,
            plateau_window=self.plateau_window, plateau_tol=self.plateau_tol,
            eval_every=max(1, self.sticky_steps // 40),
        )  # fmt: skip

    def queries(self) -> list[int]:
        """The context read-out's query positions (each reads every earlier position), as ``sticky_manifold``."""
        return list(range(self.manifold_query_every - 1, self.sticky_length, self.manifold_query_every))


# ------------------------------------------------------------------------------------------- gradient checks


def gradient_checks(seed: int = 0, t: int = 6, e: int = 4) -> dict[str, float]:
    """Max errors, float64, of the four score gradients on a random causal head against autograd's exact one.

    ``exact_vs_autograd``: |A - autograd|; ``no_baseline_minus_exact``: |(C - A) - α⊙E_α b|; ``zero``: |B|;
    ``permuted_vs_exact``: |D/α - π(A/α)| on the visible keys (A/α is the advantage)."""
    g = torch.Generator().manual_seed(seed)
    s0 = torch.randn(2, t, t, generator=g, dtype=torch.float64)
    v = torch.randn(2, t, e, generator=g, dtype=torch.float64)
    u = torch.randn(2, t, e, generator=g, dtype=torch.float64)  # the upstream gradient dl/dy
    perm = row_permutations(t, seed)
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def grad(mode: Mode | None) -> Tensor:
        s = s0.clone().requires_grad_(True)
        alpha = (
            torch.softmax(s.masked_fill(~causal, float("-inf")), -1) if mode is None else routed_softmax(s, mode, perm)
        )
        ((alpha @ v) * u).sum().backward()
        assert s.grad is not None
        return s.grad

    ref, a, b, c, d = grad(None), grad("exact"), grad("zero"), grad("no_baseline"), grad("permuted")
    alpha = torch.softmax(s0.masked_fill(~causal, float("-inf")), -1)
    bij = u @ v.transpose(-2, -1)  # b_ij = u_i . v_j
    adv = torch.where(causal, a / alpha, 0.0)
    return {
        "exact_vs_autograd": float((a - ref).abs().max()),
        "no_baseline_minus_exact": float(((c - a) - alpha * (alpha * bij).sum(-1, keepdim=True)).abs().max()),
        "zero": float(b.abs().max()),
        "permuted_vs_exact": float(
            torch.where(causal, d / alpha - adv.gather(-1, perm.expand_as(adv)), 0.0).abs().max()
        ),
    }


# ---------------------------------------------------------------------------------------------------- bijection


def _lr(step: int, cfg: Config) -> float:
    """Linear warm-up, then cosine decay to 0 (the wind tunnel's schedule)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return 0.5 * cfg.lr * (1.0 + math.cos(math.pi * (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)))


@torch.no_grad()
def _bijection_kl(model: torch.nn.Module, tokens: Tensor, positions: Tensor, posterior: Tensor) -> float:
    model.eval()
    p = torch.softmax(model(tokens)[:, positions].double(), dim=-1)
    model.train()
    return float(kl_bits(posterior, p).mean())


@torch.no_grad()
def _bijection_measure(
    model: torch.nn.Module, tokens: Tensor, positions: Tensor, posterior: Tensor
) -> dict[str, float]:
    """Held-out KL and entropy MAE (bits) and the signature of the final residual at the key positions."""
    model.eval()
    p = torch.softmax(model(tokens)[:, positions].double(), dim=-1)  # (B, P, C)
    metrics = evaluate_predictions(p, posterior)
    residual = final_residual(model, tokens)[:, positions]  # type: ignore[arg-type]  # (B, P, D)
    sig = value_manifold_signature(residual.reshape(-1, residual.shape[-1]), entropy_bits(posterior).reshape(-1))
    model.train()
    return {"kl": metrics.kl, "mae": metrics.entropy_mae_per_sample, **sig}


def _bijection_seed(cfg: Config, seed: int, arms: dict[str, Mode] | None = None) -> dict[str, dict[str, Any]]:
    """The random-init model and the arms for one training seed: {"init": ..., "A": ..., ..., "floor": ...}.

    ``arms`` defaults to :data:`ARMS` (a test plants an ablation arm equal to A through it)."""
    task = BijectionTask(cfg.n_symbols)
    held = task.sample(cfg.eval_size, torch.Generator().manual_seed(10_000 + seed))
    every = max(1, cfg.steps // cfg.n_checkpoints)
    out: dict[str, dict[str, Any]] = {}
    for arm, mode in (ARMS if arms is None else arms).items():
        model = ablated_transformer(
            task.vocab_size, task.n_classes, task.seq_len(), cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_ff,
            mode, seed, perm_seed=20_000 + seed,
        )  # fmt: skip
        if arm == "A":
            out["init"] = _bijection_measure(model, held.tokens, held.positions, held.posterior)
        qk0 = query_key_weights(model)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
        data = torch.Generator().manual_seed(30_000 + seed)  # the same stream for every arm
        history: list[float] = []
        for step in range(cfg.steps):
            for group in opt.param_groups:
                group["lr"] = _lr(step, cfg)
            batch = task.sample(cfg.batch_size, data)
            loss = windtunnel_loss(model(batch.tokens)[:, batch.positions], batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if (step + 1) % every == 0 or step + 1 == cfg.steps:
                history.append(_bijection_kl(model, held.tokens, held.positions, held.posterior))
        out[arm] = _bijection_measure(model, held.tokens, held.positions, held.posterior)
        out[arm].update(_history_record(history, float(loss.detach()), cfg))
        qk = query_key_weights(model)
        out[arm]["qk_change"] = max(float((a - b).abs().max()) for a, b in zip(qk, qk0, strict=True))
    out["floor"] = {"kl": task.no_context_mae()}  # uniform predictor: KL = log2 V - H_Bayes = the MAE floor
    return out


def _history_record(history: list[float], final_loss: float, cfg: Config) -> dict[str, Any]:
    return {
        "final_loss": final_loss,
        "kl_history": history,
        "plateau_drop": plateau_drop(history, cfg.plateau_window),
        "plateau_change": plateau_change(history, cfg.plateau_window),
    }


# ------------------------------------------------------------------------------------------ sticky (testbed)


@torch.no_grad()
def _sticky_measure(
    tb: StickyTestbed, model: torch.nn.Module, held: StickyBatch, basis: Tensor, queries: list[int]
) -> dict[str, float]:
    """Held-out KL (bits), the residual signature of the final residual at every held-out position (reported), and
    ``sticky_manifold``'s two subspace scores (the sticky half's signature), read on the model's own function."""
    model.eval()
    p = torch.softmax(model(held.x).double(), dim=-1)
    residual = model.residual(held.x)  # type: ignore[operator]  # (B, T, D)
    model.train()
    sig = value_manifold_signature(residual.reshape(-1, residual.shape[-1]), entropy_bits(held.posterior).reshape(-1))
    with torch.enable_grad():
        scores = transformer_scores(_exact_copy(model), basis, held.x, queries)
    return {"kl": float(kl_bits(held.posterior, p).mean()), **sig, **scores}


def _exact_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose attention backward is the exact gradient. The forward is the same in every mode, so
    the copy is the same function; the context read-out differentiates the logits by the inputs, and through an
    ablated arm's own backward it would read the surgery's Jacobian (for B, none through the scores), not the
    model's."""
    exact = copy.deepcopy(model)
    for m in exact.modules():
        if isinstance(m, AblatedStickyAttention):
            m.mode, m.perm = "exact", None
    return exact


def _spread_seed(seed: int, j: int) -> int:
    """The j-th extra random init of ``seed`` (the init spread): disjoint from every deciding and pilot seed's own."""
    return 60_000 + 100 * seed + j


def _sticky_seed(cfg: Config, seed: int, arms: dict[str, Mode] | None = None, shuffled: bool = False) -> dict[str, Any]:
    """The random init and the arms on the testbed for one seed: the same init, stream and held-out windows; the
    init spread (``manifold_n_inits`` extra random inits, measured untrained); with ``shuffled`` the
    other-window-label control (the seed's init, the exact gradient, the same input stream, ``sticky_manifold``'s
    labels of another window of the batch)."""
    tb = cfg.testbed()
    held = tb.eval_batch(seed)
    basis, queries = symbol_mean_basis(tb.means), cfg.queries()
    out: dict[str, Any] = {}
    for arm, mode in (ARMS if arms is None else arms).items():
        model = ablated_sticky(tb.model(seed), mode, perm_seed=40_000 + seed)
        if arm == "A":
            out["init"] = _sticky_measure(tb, model, held, basis, queries)
        qk0 = sticky_query_key_weights(model)
        result = fit(tb, model, seed, eval_batch=held)
        out[arm] = _sticky_measure(tb, model, held, basis, queries)
        out[arm].update(_history_record(result.kl_history, result.final_loss, cfg))
        out[arm]["wall_s"] = result.wall_s
        qk = sticky_query_key_weights(model)
        out[arm]["qk_change"] = max(float((a - b).abs().max()) for a, b in zip(qk, qk0, strict=True))
    out["floor"] = {"kl": tb.no_context_kl_bits(held)}
    out["init_spread"] = [
        transformer_scores(tb.model(_spread_seed(seed, j)), basis, held.x, queries) for j in range(cfg.manifold_n_inits)
    ]
    if shuffled:
        model = tb.model(seed)
        result = fit(shuffled_labels(tb, 50_000 + seed), model, seed, eval_batch=held)
        out["shuffled"] = {
            "kl": result.kl_history[-1], "wall_s": result.wall_s, **transformer_scores(model, basis, held.x, queries)
        }  # fmt: skip
    return out


def _manifold_checks(cfg: Config) -> dict[str, float]:
    """The read-out's identities at the first seed (``sticky_manifold``'s): the seed's init with its input embedding
    planted to read only the mean span (both measures 1) or only its complement (0), float32; the exact Bayes
    filter's context read-out (1, float64)."""
    tb = cfg.testbed()
    held = tb.eval_batch(cfg.seed)
    basis, queries = symbol_mean_basis(tb.means), cfg.queries()
    m: dict[str, float] = {}
    for name, inside in (("in", True), ("out", False)):
        planted = transformer_scores(planted_testbed_model(tb.model(cfg.seed), basis, inside), basis, held.x, queries)
        m[f"planted_{name}_readout"], m[f"planted_{name}_value"] = planted["readout"], planted["value"]

    def bayes(x: Tensor) -> Tensor:  # the exact log-predictive, differentiable in x (float64)
        return (forward_filter(tb.log_likelihood(x), tb.transition) @ tb.transition).log()

    readout = context_readout_subspace(bayes, held.x.double(), queries, basis.shape[1])
    m["bayes_readout"] = mean_cos2(readout, basis)
    return m


# ------------------------------------------------------------------------- the companion's one head (reported)


@torch.no_grad()
def _onehead_measure(
    params: dict[str, Tensor], x: Tensor, posterior: Tensor, mode: Mode, perm: Tensor
) -> list[dict[str, float]]:
    """Per run r of ``params`` (R, ...): held-out KL (bits) and the signature of y = αV at every held-out position."""
    batched = {k: v[:, None] for k, v in params.items()}  # (R, 1, ...): broadcast over the H sequences
    logits, y = single_head(batched, x[None], mode, perm)  # (R, H, T, C), (R, H, T, E)
    kl = kl_bits(posterior[None].expand(logits.shape[0], -1, -1, -1), torch.softmax(logits.double(), -1))
    h = entropy_bits(posterior).reshape(-1)
    return [
        {"kl": float(kl[r].mean()), **value_manifold_signature(y[r].reshape(-1, y.shape[-1]), h)}
        for r in range(logits.shape[0])
    ]


def _onehead_all(cfg: Config) -> tuple[dict[str, list[dict[str, float]]], float]:
    """Every arm and the random init of the one-head setting over the ``n_seeds`` inits (batched), and the
    no-context KL. This is the pre-issue-25 sticky task, unchanged."""
    task = StickyMarkovTask(
        length=cfg.onehead_length, stay=cfg.onehead_stay, noise=cfg.onehead_noise, means_seed=cfg.seed
    )
    base = 1_000 * cfg.seed
    train = [task.sample(torch.Generator().manual_seed(base + 100 + s)) for s in range(cfg.onehead_train_sequences)]
    held = [task.sample(torch.Generator().manual_seed(base + 500 + h)) for h in range(cfg.onehead_heldout)]
    x = torch.stack([s.inputs.float() for s in train]) / cfg.onehead_noise  # (N, T, D): the paper's unit-noise scale
    y = torch.stack([s.targets for s in train])  # (N, T)
    x_held = torch.stack([s.inputs.float() for s in held]) / cfg.onehead_noise
    post_held = torch.stack([s.posterior for s in held])  # (H, T, C)
    no_context = float(kl_bits(post_held, torch.stack([no_context_posterior(task, s) for s in held])).mean())
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    perm = row_permutations(cfg.onehead_length, 40_000 + cfg.seed)
    out: dict[str, list[dict[str, float]]] = {}
    for arm, mode in ARMS.items():
        params = stack_inits(seeds, 1, cfg.init_std)  # (R, ...): the same inits for every arm
        if arm == "A":
            out["init"] = _onehead_measure(params, x_held, post_held, mode, perm)
        qk0 = torch.cat([params["W_Q"].detach().flatten(1), params["W_K"].detach().flatten(1)], 1).clone()
        opt = torch.optim.Adam(list(params.values()), lr=cfg.onehead_lr)
        for _ in range(cfg.onehead_steps):
            logits, _ = single_head({k: v[:, None] for k, v in params.items()}, x[None], mode, perm)  # (R, N, T, C)
            per_run = F.cross_entropy(logits.flatten(1, 2).transpose(1, 2), y.flatten()[None].expand(len(seeds), -1),
                                      reduction="none").mean(dim=1)  # fmt: skip
            opt.zero_grad(set_to_none=True)
            per_run.sum().backward()  # each run gets exactly its own gradient
            opt.step()
        out[arm] = _onehead_measure(params, x_held, post_held, mode, perm)
        qk = torch.cat([params["W_Q"].detach().flatten(1), params["W_K"].detach().flatten(1)], 1)
        for r, rec in enumerate(out[arm]):
            rec["final_loss"] = float(per_run[r].detach())
            rec["qk_change"] = float((qk[r] - qk0[r]).abs().max())
    return out, no_context


# ------------------------------------------------------------------------------------------------------ verdict


def _mean(records: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in records) / len(records)


def _sd(records: list[dict[str, Any]], key: str) -> float:
    if len(records) < 2:
        return 0.0
    mu = _mean(records, key)
    return math.sqrt(sum((r[key] - mu) ** 2 for r in records) / (len(records) - 1))


def _summarise(runs: dict[str, list[dict[str, Any]]], floors: list[float], cfg: Config) -> dict[str, float]:
    """Seed means and sds of KL, PC1 share and |ρ| for the init and every arm, the ratios to A, the floor, and the
    per-seed gate numbers of arm A (the worst seed's tracking ratio and plateau drop against its own bars)."""
    m: dict[str, float] = {"no_context_kl": sum(floors) / len(floors)}
    for name in ("init", *ARMS):
        for key in ("kl", "pc1", "pc12", "participation_ratio", "spearman_abs"):
            m[f"{name}_{key}"] = _mean(runs[name], key)
            m[f"{name}_{key}_sd"] = _sd(runs[name], key)
    for arm in ("B", "C", "D"):
        m[f"{arm}_over_A_kl"] = m[f"{arm}_kl"] / m["A_kl"] if m["A_kl"] > 0 else math.inf
        m[f"{arm}_qk_change"] = max(r["qk_change"] for r in runs[arm])
    a_runs = runs["A"]
    if "plateau_drop" in a_runs[0]:
        track = [r["kl"] / f for r, f in zip(a_runs, floors, strict=True)]
        allowance = [cfg.plateau_tol * cfg.learned_fraction * f for f in floors]
        drop_in_bars = [r["plateau_drop"] / a for r, a in zip(a_runs, allowance, strict=True)]
        m["A_track_ratio_max"] = max(track)  # the worst seed's KL_A / KL_nc (gate: <= learned_fraction)
        m["A_plateau_drop_max"] = max(r["plateau_drop"] for r in a_runs)
        m["A_plateau_in_bars_max"] = max(x if x == x else math.inf for x in drop_in_bars)  # NaN: too few points
        m["A_plateau_change_max"] = max(r["plateau_change"] for r in a_runs)
    return m


def _manifold_summary(seeds: list[dict[str, Any]], cfg: Config) -> dict[str, float]:
    """The sticky half's read-out over the seeds: each name's mean and sd of both measures, the init spread (sd over
    every extra random init of every seed), each arm's mean paired gain over its seed's own init (and the sd of
    that gain over the seeds, reported), the shuffled-label control's mean, chance and the aligned bar."""
    tb = cfg.testbed()
    chance = random_mean_cos2(tb.n_features, tb.n_symbols - 1, tb.n_symbols - 1)
    m: dict[str, float] = {
        "chance": chance, "aligned_threshold": chance + cfg.manifold_margin_fraction * (1.0 - chance),
        "n_shuffled": float(sum("shuffled" in s for s in seeds)),
    }  # fmt: skip
    for x in MEASURES:
        for name in ("init", *ARMS, "shuffled"):
            recs = [s[name] for s in seeds if name in s]
            m[f"{name}_{x}"] = _mean(recs, x) if recs else math.nan  # no control model: its gate cannot pass
            m[f"{name}_{x}_sd"] = _sd(recs, x) if recs else math.nan
        spread = [r for s in seeds for r in s["init_spread"]]
        m[f"init_spread_{x}_mean"] = _mean(spread, x) if spread else math.nan
        m[f"init_spread_{x}_sd"] = _sd(spread, x) if len(spread) > 1 else math.nan
        for arm in ARMS:
            gains = [{"d": s[arm][x] - s["init"][x]} for s in seeds]
            m[f"{arm}_{x}_gain"], m[f"{arm}_{x}_gain_sd"] = _mean(gains, "d"), _sd(gains, "d")
    return m


def _signature_criteria(task: str, m: dict[str, float], cfg: Config, signature: str) -> dict[str, Criterion]:
    """The signature's criteria (module docstring): arm A's as gates, B's and D's as criteria, and for the
    subspace signature the shuffled-label control's gates. ``residual``: PC1 share and |ρ| above the init, B and D
    near A; ``subspace``: both of ``sticky_manifold``'s measures aligned and beyond the init spread, B and D near A."""
    c: dict[str, Criterion] = {}
    if signature == "residual":
        for arm in ("A", "B", "D"):
            make = gate if arm == "A" else criterion  # A must show what the ablations are to lose
            c[f"{arm}_pc1_over_init"] = make(
                f"{task}: PC1 share {arm} (above init)", m[f"{arm}_pc1"], ">=", m["init_pc1"] + cfg.sig_margin
            )
            c[f"{arm}_rho"] = make(
                f"{task}: |ρ| {arm} (orders by entropy, above init)", m[f"{arm}_spearman_abs"], ">=",
                max(cfg.rho_min, m["init_spearman_abs"] + cfg.sig_margin),
            )  # fmt: skip
        for arm in ("B", "D"):
            c[f"{arm}_pc1_near_A"] = criterion(
                f"{task}: PC1 share {arm} (near A)", m[f"{arm}_pc1"], ">=", m["A_pc1"] - cfg.sig_margin
            )
            c[f"{arm}_rho_near_A"] = criterion(
                f"{task}: |ρ| {arm} (near A)", m[f"{arm}_spearman_abs"], ">=", m["A_spearman_abs"] - cfg.sig_margin
            )
        return c
    thr = m["aligned_threshold"]
    labels = {"readout": "context read-out", "value": "value PCs"}
    for arm in ("A", "B", "D"):
        make = gate if arm == "A" else criterion  # A must show the manifold the ablations are to keep or lose
        for x in MEASURES:
            c[f"{arm}_{x}_aligned"] = make(
                f"{task}: mean cos² to span(μ) {arm} ({labels[x]}), aligned", m[f"{arm}_{x}"], ">=", thr
            )
            c[f"{arm}_{x}_over_init"] = make(
                f"{task}: mean paired gain {arm} - init ({labels[x]}), > {cfg.manifold_sigmas:g} σ of the random inits",
                m[f"{arm}_{x}_gain"], ">", cfg.manifold_sigmas * m[f"init_spread_{x}_sd"],
            )  # fmt: skip
    for arm in ("B", "D"):
        for x in MEASURES:
            c[f"{arm}_{x}_near_A"] = criterion(
                f"{task}: mean cos² {arm} ({labels[x]}, near A)", m[f"{arm}_{x}"], ">=", m[f"A_{x}"] - cfg.sig_margin
            )
    for x in MEASURES:
        c[f"shuffled_{x}"] = gate(
            f"{task}: other-window labels, mean cos² ({labels[x]}), under the aligned bar", m[f"shuffled_{x}"], "<", thr
        )
    return c


def _task_criteria(task: str, m: dict[str, float], cfg: Config, signature: str | None = None) -> dict[str, Criterion]:
    """The comparisons one task's decision reads (module docstring), by name; the gates have role "gate".

    ``signature`` defaults to the task's (:data:`SIGNATURE`; ``residual`` for a task not named there)."""
    c = {
        "A_tracks": gate(
            f"{task}: max over seeds of KL_A / no-context KL (every seed tracks)", m["A_track_ratio_max"], "<=",
            cfg.learned_fraction,
        ),
        "A_plateau": gate(
            f"{task}: max over seeds of arm A's last-fifth KL drop / ({cfg.plateau_tol:g} × tracking bar) (plateau)",
            m["A_plateau_in_bars_max"], "<=", 1.0,
        ),
    }  # fmt: skip
    c.update(_signature_criteria(task, m, cfg, signature or SIGNATURE.get(task, "residual")))
    for arm in ("B", "D"):
        c[f"{arm}_ratio_necessary"] = criterion(
            f"{task}: KL_{arm} / KL_A (>= necessary)", m[f"{arm}_over_A_kl"], ">=", cfg.ratio_necessary
        )
        c[f"{arm}_ratio_falsifier"] = criterion(
            f"{task}: KL_{arm} / KL_A (<= falsifier)", m[f"{arm}_over_A_kl"], "<=", cfg.ratio_falsifier
        )
    c["B_frozen"] = identity(f"{task}: max |Δ W_Q, W_K| of arm B (surgery control)", m["B_qk_change"], "==", 0.0)
    return c


def _signature_parts(c: dict[str, Criterion]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The criterion suffixes that make an arm *show* the signature, and those that make it *near A*."""
    if "A_rho" in c:  # the residual signature (PC1 share, |ρ|)
        return ("pc1_over_init", "rho"), ("pc1_near_A", "rho_near_A")
    shows = tuple(f"{x}_{part}" for x in MEASURES for part in ("aligned", "over_init"))
    return shows, tuple(f"{x}_near_A" for x in MEASURES)


def _arm_signature(c: dict[str, Criterion], arm: str) -> str:
    """'present' (shows the signature and, for B and D, is near A), 'shows' (beyond the init, not near A) or
    'absent'."""
    shows_parts, near_parts = _signature_parts(c)
    if not all(c[f"{arm}_{part}"].passed for part in shows_parts):
        return "absent"
    return "present" if arm == "A" or all(c[f"{arm}_{part}"].passed for part in near_parts) else "shows"


def _task_outcome(c: dict[str, Criterion]) -> str:
    """'undecided' (a gate failed), 'necessary', 'falsifier' or 'between' for one task."""

    def present(arm: str) -> bool:
        return _arm_signature(c, arm) == "present"

    if not all(x.passed for x in c.values() if x.role == "gate"):
        return "undecided"
    if any(c[f"{a}_ratio_falsifier"].passed and present(a) for a in ("B", "D")):
        return "falsifier"
    if all(c[f"{a}_ratio_necessary"].passed and not present(a) for a in ("B", "D")):
        return "necessary"
    return "between"


def _kl_reading(m: dict[str, float], cfg: Config) -> str:
    """What the KL ratios alone say (reported beside the outcome, not deciding): 'necessary' (B and D >= 10x A),
    'falsifier' (B or D within 2x) or 'between'."""
    if min(m["B_over_A_kl"], m["D_over_A_kl"]) <= cfg.ratio_falsifier:
        return "falsifier"
    if min(m["B_over_A_kl"], m["D_over_A_kl"]) >= cfg.ratio_necessary:
        return "necessary"
    return "between"


def _decide(outcomes: dict[str, str]) -> Verdict:
    """The rule before the gates: REFUTED, SUPPORTED or PARTIAL (``gated`` turns a failed gate into UNDECIDED)."""
    if "falsifier" in outcomes.values():
        return "REFUTED"
    if all(o == "necessary" for o in outcomes.values()):
        return "SUPPORTED"
    return "PARTIAL"


def _verdict(task_criteria: dict[str, dict[str, Criterion]], extra: list[Criterion]) -> tuple[Verdict, dict[str, str]]:
    """The task outcomes and the gated verdict over every task's criteria and the identities in ``extra``."""
    outcomes = {task: _task_outcome(c) for task, c in task_criteria.items()}
    criteria = [*extra, *(c for tc in task_criteria.values() for c in tc.values())]
    return gated(_decide(outcomes), criteria), outcomes


# ------------------------------------------------------------------------------------------------------- report


def _describe(task: str, m: dict[str, float], outcome: str) -> str:
    arms = "; ".join(
        f"{LABELS[a]} {m[f'{a}_kl']:.4f} ± {m[f'{a}_kl_sd']:.4f}"
        + ("" if a == "A" else f" ({m[f'{a}_over_A_kl']:.2f}× A)")
        + f", PC1 {m[f'{a}_pc1']:.2f}, |ρ| {m[f'{a}_spearman_abs']:.2f}"
        for a in ARMS
    )
    gates = (
        f"; arm A's worst seed: KL/no-context {m['A_track_ratio_max']:.3f}, last-fifth drop "
        f"{m['A_plateau_in_bars_max']:.2f} of the plateau allowance"
        if "A_track_ratio_max" in m
        else ""
    )
    return (
        f"{task} [{outcome}]: KL in bits (mean ± sd over seeds) {arms}; random init KL {m['init_kl']:.3f}, PC1 "
        f"{m['init_pc1']:.2f}, |ρ| {m['init_spearman_abs']:.2f}; no-context {m['no_context_kl']:.3f}{gates}"
    )


def _manifold_line(m: dict[str, float], c: dict[str, Criterion], outcome: str) -> str:
    """The sticky half's signature: ``sticky_manifold``'s two measures per arm (mean over seeds)."""
    arms = "; ".join(
        f"{LABELS[a]} {m[f'{a}_readout']:.3f} / {m[f'{a}_value']:.3f}"
        + (f" ({_arm_signature(c, a)})" if a in ("A", "B", "D") else "")
        for a in ARMS
    )
    return (
        f"sticky manifold read-out [{outcome}] (sticky_manifold's measures, mean cos² of the principal angles to the "
        f"span of the centred symbol means, context read-out / value PCs, means over seeds; aligned at >= "
        f"{m['aligned_threshold']:.3f}, chance {m['chance']:.2f}): random init {m['init_readout']:.3f} / "
        f"{m['init_value']:.3f} (sd over the extra random inits {m['init_spread_readout_sd']:.3f} / "
        f"{m['init_spread_value_sd']:.3f}); {arms}; other-window labels (control, {m['n_shuffled']:.0f} model(s)) "
        f"{m['shuffled_readout']:.3f} / {m['shuffled_value']:.3f}"
    )


def _figure(
    ctx: Context,
    results: dict[str, dict[str, float]],
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    sticky_seeds: list[dict[str, Any]],
) -> str:
    plt = pyplot()
    rows = (*TASKS, ONEHEAD)
    fig, axes = plt.subplots(len(rows), 4, figsize=(20, 4 * len(rows)))
    _manifold_panel(axes[1, 3], results["sticky"], runs["sticky"], sticky_seeds)  # row 1: the sticky testbed
    axes[0, 3].axis("off")
    axes[2, 3].axis("off")
    names = ["init", *ARMS]
    titles = {"bijection": "bijection", "sticky": "sticky testbed", ONEHEAD: "one head (cannot represent the filter)"}
    for row, task in enumerate(rows):
        m, ax = results[task], axes[row, 0]
        for i, name in enumerate(names):
            kls = [r["kl"] for r in runs[task][name]]
            ax.plot([i] * len(kls), kls, "o", color=f"C{i}", alpha=0.7)
            ax.bar(i, m[f"{name}_kl"], color=f"C{i}", alpha=0.3)
        ax.axhline(m["no_context_kl"], color="k", ls="--", lw=1, label="no-context predictor")
        ax.axhline(0.1 * m["no_context_kl"], color="k", ls=":", lw=1, label="tracking bar")
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), ["random init", *(LABELS[a] for a in ARMS)], fontsize=8)
        ax.set(ylabel="held-out KL(Bayes ‖ model), bits", title=f"{titles[task]}: posterior error (dots: seeds)")
        ax.legend(fontsize=8)
        ax = axes[row, 1]
        for i, name in enumerate(names):
            recs = runs[task][name]
            ax.plot([r["pc1"] for r in recs], [r["spearman_abs"] for r in recs], "o", color=f"C{i}",
                    label="random init" if name == "init" else LABELS[name])  # fmt: skip
        ax.set(xlabel="PC1 share", ylabel="|Spearman ρ| of PC1 with the Bayes entropy", xlim=(0, 1), ylim=(0, 1),
               title=f"{titles[task]}: value-manifold signature")  # fmt: skip
        ax.legend(fontsize=8)
        ax = axes[row, 2]
        if task == ONEHEAD:
            ax.axis("off")
            continue
        for i, arm in enumerate(ARMS, start=1):
            for k, r in enumerate(runs[task][arm]):
                h = r["kl_history"]
                ax.plot([(j + 1) / len(h) for j in range(len(h))], h, color=f"C{i}", alpha=0.6, lw=1,
                        label=LABELS[arm] if k == 0 else None)  # fmt: skip
        ax.axhline(0.1 * m["no_context_kl"], color="k", ls=":", lw=1, label="tracking bar")
        ax.set_yscale("log")
        ax.set(xlabel="fraction of training", ylabel="held-out KL, bits", title=f"{titles[task]}: training curves")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return ctx.save_figure(fig, "advantage_ablation", dpi=100)


def _manifold_panel(
    ax: Any, m: dict[str, float], runs: dict[str, list[dict[str, Any]]], seeds: list[dict[str, Any]]
) -> None:
    """The sticky half's signature: both of sticky_manifold's measures per seed and arm, the extra random inits and
    the other-window-label control, against the aligned bar."""
    spread = [r for s in seeds for r in s["init_spread"]]
    ax.plot([r["readout"] for r in spread], [r["value"] for r in spread], ".", color="0.6", label="extra random inits")
    for i, name in enumerate(("init", *ARMS)):
        ax.plot([r["readout"] for r in runs[name]], [r["value"] for r in runs[name]], "o", color=f"C{i}", alpha=0.8,
                label="random init" if name == "init" else LABELS[name])  # fmt: skip
    shuffled = [s["shuffled"] for s in seeds if "shuffled" in s]
    ax.plot([r["readout"] for r in shuffled], [r["value"] for r in shuffled], "kx", label="other-window labels")
    ax.axvline(m["aligned_threshold"], color="k", alpha=0.4, lw=2)
    ax.axhline(m["aligned_threshold"], color="k", alpha=0.4, lw=2, label=f"aligned ({m['aligned_threshold']:.3f})")
    ax.set(xlim=(0, 1.05), ylim=(0, 1.05), xlabel="context read-out: mean cos² to span(μ)",
           ylabel="value PCs (layer 1, pulled back): mean cos² to span(μ)",
           title="sticky testbed: manifold read-out (sticky_manifold's)")  # fmt: skip
    ax.legend(fontsize=7)


def _manifold_identities(checks: dict[str, float], cfg: Config) -> list[Criterion]:
    tol = cfg.manifold_planted_tol
    return [
        identity("sticky: planted model reading span(μ), mean cos² (context read-out)", checks["planted_in_readout"],
                 ">=", 1 - tol),
        identity("sticky: planted model reading span(μ), mean cos² (value PCs)", checks["planted_in_value"], ">=",
                 1 - tol),
        identity("sticky: planted model reading its complement, mean cos² (context read-out)",
                 checks["planted_out_readout"], "<=", tol),
        identity("sticky: planted model reading its complement, mean cos² (value PCs)", checks["planted_out_value"],
                 "<=", tol),
        identity("sticky: the exact Bayes filter's context read-out, mean cos²", checks["bayes_readout"], ">=",
                 1 - cfg.manifold_bayes_tol),
    ]  # fmt: skip


def run(cfg: Config, ctx: Context) -> Result:
    with torch_threads(1):
        return _run(cfg, ctx)


def _run(cfg: Config, ctx: Context) -> Result:
    start = time.perf_counter()
    checks = gradient_checks(cfg.seed)
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    per_seed: dict[str, list[dict[str, Any]]] = {"bijection": [_bijection_seed(cfg, s) for s in seeds]}
    t_bij = time.perf_counter() - start
    per_seed["sticky"] = [_sticky_seed(cfg, s, shuffled=i < cfg.manifold_n_shuffled) for i, s in enumerate(seeds)]
    manifold_checks = _manifold_checks(cfg)
    t_sticky = time.perf_counter() - start - t_bij
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        t: {name: [s[name] for s in per_seed[t]] for name in ("init", *ARMS)} for t in TASKS
    }
    results = {t: _summarise(runs[t], [s["floor"]["kl"] for s in per_seed[t]], cfg) for t in TASKS}
    results["sticky"].update(_manifold_summary(per_seed["sticky"], cfg))
    runs[ONEHEAD], onehead_floor = _onehead_all(cfg)
    results[ONEHEAD] = _summarise(runs[ONEHEAD], [onehead_floor] * cfg.n_seeds, cfg)
    task_criteria = {task: _task_criteria(task, results[task], cfg) for task in TASKS}
    identities = [identity(f"Function check: {k}", v, "<=", cfg.grad_tol) for k, v in checks.items()]
    identities.append(
        identity(f"{ONEHEAD}: max |Δ W_Q, W_K| of arm B (surgery control)", results[ONEHEAD]["B_qk_change"], "==", 0.0)
    )
    identities += _manifold_identities(manifold_checks, cfg)
    deciding = cfg.deciding_tasks()
    reported = [t for t in TASKS if t not in deciding]  # read and recorded, not deciding (quick: the bijection)
    identities += [c for t in reported for c in task_criteria[t].values() if c.role == "identity"]
    verdict, outcomes = _verdict({t: task_criteria[t] for t in deciding}, identities)
    outcomes.update({t: _task_outcome(task_criteria[t]) for t in reported})
    # the sticky half read by the earlier issue-25 rule (the residual signature), reported beside the outcome
    residual_sticky = _task_criteria("sticky", results["sticky"], cfg, signature="residual")
    onehead_tracks = results[ONEHEAD]["A_kl"] <= cfg.learned_fraction * onehead_floor
    lines = ". ".join(
        _describe(t if t in deciding else f"{t}, reported (not deciding at this size)", results[t], outcomes[t])
        for t in TASKS
    )
    lines += ". " + _manifold_line(results["sticky"], task_criteria["sticky"], outcomes["sticky"])
    onehead_line = _describe("one head, reported (cannot represent the filter)", results[ONEHEAD], "not deciding")
    failed = [c.metric for t in deciding for c in task_criteria[t].values() if c.role == "gate" and not c.passed]
    on = "both tasks" if len(deciding) == 2 else f"the deciding task ({', '.join(deciding)})"
    head = {
        "REFUTED": "The falsifier holds: without the advantage term (B zero or D permuted) the posterior error comes "
        f"within {cfg.ratio_falsifier:g}× of the exact gradient's with the task's manifold signature present",
        "SUPPORTED": f"The advantage term is necessary on {on}: B and D end >= {cfg.ratio_necessary:g}× worse in "
        "KL and lack the signature that A has",
        "PARTIAL": f"Arm A tracks and has plateaued on {on}, and neither the necessity rule nor the falsifier is "
        "met on every deciding task",
        "UNDECIDED": f"Undecided: a gate failed ({'; '.join(failed)}), so the ablations are not read",
    }[verdict]
    summary = f"{head}. {lines}. {onehead_line}."
    metrics: dict[str, Any] = {f"{t}_{k}": v for t in (*TASKS, ONEHEAD) for k, v in results[t].items()}
    metrics.update({f"outcome_{t}": outcomes[t] for t in TASKS})
    metrics["deciding_tasks"] = list(deciding)
    metrics.update({f"kl_reading_{t}": _kl_reading(results[t], cfg) for t in (*TASKS, ONEHEAD)})
    metrics["onehead_A_tracks"] = "yes" if onehead_tracks else "no"
    metrics["outcome_sticky_residual_signature"] = _task_outcome(residual_sticky)  # the earlier rule's reading
    metrics.update({f"sticky_{a}_manifold": _arm_signature(task_criteria["sticky"], a) for a in ("A", "B", "D")})
    metrics.update({f"sticky_{k}": v for k, v in manifold_checks.items()})
    for x in MEASURES:
        for name in ("init", *ARMS):
            metrics[f"sticky_{name}_{x}_per_seed"] = [r[x] for r in runs["sticky"][name]]
        metrics[f"sticky_init_spread_{x}_per_seed"] = [[r[x] for r in s["init_spread"]] for s in per_seed["sticky"]]
        metrics[f"sticky_shuffled_{x}_per_seed"] = [s["shuffled"][x] for s in per_seed["sticky"] if "shuffled" in s]
    metrics["sticky_shuffled_kl_per_seed"] = [s["shuffled"]["kl"] for s in per_seed["sticky"] if "shuffled" in s]
    metrics.update({f"check_{k}": v for k, v in checks.items()})
    for t in (*TASKS, ONEHEAD):
        for name in ("init", *ARMS):
            metrics[f"{t}_{name}_kl_per_seed"] = [r["kl"] for r in runs[t][name]]
            metrics[f"{t}_{name}_pc1_per_seed"] = [r["pc1"] for r in runs[t][name]]
            metrics[f"{t}_{name}_rho_per_seed"] = [r["spearman_abs"] for r in runs[t][name]]
        for arm in ARMS:
            metrics[f"{t}_{arm}_final_loss_per_seed"] = [r["final_loss"] for r in runs[t][arm]]
    for t in TASKS:
        metrics[f"{t}_no_context_kl_per_seed"] = [s["floor"]["kl"] for s in per_seed[t]]
        for arm in ARMS:
            metrics[f"{t}_{arm}_plateau_drop_per_seed"] = [r["plateau_drop"] for r in runs[t][arm]]
            metrics[f"{t}_{arm}_plateau_change_per_seed"] = [r["plateau_change"] for r in runs[t][arm]]
        metrics[f"{t}_A_kl_history_per_seed"] = [r["kl_history"] for r in runs[t]["A"]]
    metrics["bijection_mae_per_arm"] = {a: _mean(runs["bijection"][a], "mae") for a in ("init", *ARMS)}
    metrics["bijection_wall_s"] = t_bij
    metrics["sticky_wall_s"] = t_sticky
    metrics["wall_s"] = time.perf_counter() - start
    criteria = [*identities]
    for t in deciding:
        criteria += list(task_criteria[t].values())
    tb = cfg.testbed()
    readings = {t: _kl_reading(results[t], cfg) for t in (*TASKS, ONEHEAD)}
    details = (
        f"Arms (score gradient): A exact α⊙(b − E_α b); B zero; C α⊙b (no baseline); D α_ij a_i,π_i(j), a fixed "
        f"random permutation of the visible keys of each query row, drawn from the seed. {cfg.n_seeds} seed(s) "
        f"({seeds[0]}-{seeds[-1]}), each with its own data stream. "
        f"Bijection: V = {cfg.n_symbols} without replacement, {cfg.n_layers} layer(s), {cfg.n_heads} heads, d_model "
        f"{cfg.d_model}, AdamW (weight decay 0) lr {cfg.lr:g} warm-up {cfg.warmup_steps} then cosine, "
        f"{cfg.steps} steps of batch {cfg.batch_size}, {cfg.eval_size} held-out sequences; signature of the final "
        f"residual at the key positions. Sticky testbed (implicit_em.windtunnel.sticky): stay {tb.stay:g}, noise "
        f"{tb.noise:g}, T = {tb.length}, {tb.n_layers}-layer transformer with learned positions (d_model "
        f"{tb.d_model}, {tb.n_heads} heads), labels sampled from the chain, a fresh batch of {tb.batch_size} windows "
        f"each step, Adam lr {tb.lr:g} warm-up {tb.warmup_steps} then {tb.schedule}, {tb.steps} steps, "
        f"{tb.eval_size} held-out windows per seed. Gates on arm "
        f"A at every seed: KL <= {cfg.learned_fraction:g} × no-context; the mean KL over the last "
        f"{cfg.plateau_window:g} of the checkpoints at most {cfg.plateau_tol:g} × that bar below the window before; "
        f"and on the seed means, the task's signature. Bijection: the final residual's (PC1 >= init + "
        f"{cfg.sig_margin:g}, |ρ| >= max({cfg.rho_min:g}, init + {cfg.sig_margin:g})). Sticky: sticky_manifold's "
        f"two measures (context read-out at t = {cfg.queries()}, first-layer value PCs pulled back), each aligned "
        f"(>= {results['sticky']['aligned_threshold']:.3f}) and beyond the init (mean paired gain > "
        f"{cfg.manifold_sigmas:g} × the sd over {cfg.manifold_n_inits} extra random inits per seed), with an "
        f"other-window-label control under the aligned bar on both; B and D count as keeping it when they show it "
        f"within {cfg.sig_margin:g} of A. Deciding: {', '.join(deciding)}"
        + (f" (reported, not deciding: {', '.join(reported)})" if reported else "")
        + f". Outcomes: {outcomes}; the sticky half by the earlier residual signature "
        f"(reported): {metrics['outcome_sticky_residual_signature']}; what the KL ratios alone say (not deciding): "
        f"{readings}. "
        f"Arm C (no baseline) is reported, not decided on: KL_C / KL_A = "
        f"{results['bijection']['C_over_A_kl']:.2f} (bijection), {results['sticky']['C_over_A_kl']:.2f} (sticky). "
        f"The companion's literal one-head setting (stay {cfg.onehead_stay:g}, noise {cfg.onehead_noise:g}, "
        f"T = {cfg.onehead_length}, {cfg.onehead_train_sequences} pooled sequences, Adam {cfg.onehead_steps} steps) "
        f"is reported, not deciding: it has no positions and cannot represent the filter; its arm A "
        f"{'tracks' if onehead_tracks else 'does not track'} (KL {results[ONEHEAD]['A_kl']:.3f} against the "
        f"no-context {onehead_floor:.3f} bits). Identities (float64, max error): "
        f"{', '.join(f'{k} {v:.1e}' for k, v in checks.items())}; arm B's query/key weights moved by "
        f"{results['bijection']['B_qk_change']:.1e} (bijection), {results['sticky']['B_qk_change']:.1e} (sticky) and "
        f"{results[ONEHEAD]['B_qk_change']:.1e} (one head). Read-out identities (first seed): planted models in "
        f"span(μ) {manifold_checks['planted_in_readout']:.9f} / {manifold_checks['planted_in_value']:.9f}, in its "
        f"complement {manifold_checks['planted_out_readout']:.1e} / {manifold_checks['planted_out_value']:.1e}; the "
        f"exact Bayes filter's read-out {manifold_checks['bayes_readout']:.12f}."
    )
    return Result(verdict, summary, metrics, criteria, [_figure(ctx, results, runs, per_seed["sticky"])], details)


EXPERIMENT = Experiment(
    name="advantage_ablation",
    title="Remove the advantage from the attention gradient: do posterior tracking and the value manifold survive?",
    claim=(
        "Run the sticky Markov-chain simulation with the advantage term removed from the attention gradient while "
        "still minimizing cross-entropy; check whether the low-dimensional manifolds required for accurate Bayesian "
        "inference still appear."
    ),
    source=(
        "review-gradient-dynamics-of-attention: falsifier (arXiv 2512.22473; the law as implicit-EM paper §4.2, §4.4)"
    ),
    Config=Config,
    run=run,
)
