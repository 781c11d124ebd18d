r"""EM and gradient descent on the same mixture objective: same fixed points, same path? (paper §4.1)

Claim (paper §4.1, of gradient descent on :math:`L = -\log\sum_j \exp(-d_j)`): "This regime optimizes the same
objective as classical EM on mixture models, with the same responsibilities governing both the fixed points and
the path toward them." Bounded by §3.2: "the gradient is the responsibility-weighted update direction (Fisher’s
identity), and the EM step is that same gradient under a positive-definite preconditioner (Xu and Jordan,
1996)—the two methods share update structure, though not trajectories (Zhang et al., 2020)." Two halves:

- fixed points (§4.1's "the same responsibilities governing both the fixed points"): decided by a certified
  comparison (issue 25 §4), below;
- path (§4.1's "and the path toward them", read with §3.2's "share update structure, though not trajectories"):
  the paper claims the update structure, which is analytic (Fisher's identity and the Xu–Jordan preconditioner),
  and disclaims the trajectories. So the path half is checked as two identities at points of EM's and gd's
  paths (reported, not counted as evidence), and the per-pass trajectory gap is reported as what §3.2 says it is
  (different), not as a test: a claim the paper does not make is not tested.

Data: a known full-covariance mixture (quick: K = 4, D = 2, N = 5000; full: K = 8, D = 8, N = 50,000), held-out
data, ``n_starts`` starts away from the optimum: k-means++ seeds, then one hard assignment's cells (every row to
its nearest seed; each cell's share of the rows, mean and covariance + reg_covar as a component), pulled halfway
toward the data mean (every mean moved half its distance to it, the between-cell spread that loses added to every
covariance, so the start keeps the data's mean and covariance; weights unchanged). Issue 25's fifth session; the
earlier starts (the cells themselves; K data rows) are kept as ``Config.starts`` values ("Objective and starts").

Certified arms (deciding), from every start. θ = (K logits, standardised means (μ − shift)/scale, log-diagonal and
off-diagonal of the precision's upper Cholesky factor in standardised units). The objective is the float64 mean
log-likelihood plus (1/N) × the log-density of a prior worth one pseudo-sample on every parameter of every
component (issue 25's fifth session; "Objective and starts" below): a Wishart (ν = D + 2, scale matrix I/s², s the
data's rms std) on every precision, a normal N(x̄, (κ P_j)⁻¹), κ = 1, on every mean (x̄ the data mean), and a
symmetric Dirichlet with α − 1 = 1 on the weights:
(1/N) Σ_j [log π_j + ½ log|s² P_j| (the Wishart's (ν − D − 1)/2 = ½) + ½ log|s² P_j| (the mean prior's normaliser)
− ½ tr(s² P_j) − ½ κ (μ_j − x̄)ᵀ P_j (μ_j − x̄)]. It keeps the objective bounded (without the Wishart a component on
≤ D points has an unbounded likelihood: the pilot, below), makes every maximiser interior (no direction of ascent
to a weight 0, a precision 0 or ∞), and EM maximises it exactly: the prior does not touch the responsibilities,
and the M-step is closed-form, π_j = (N_j + α − 1)/(N + K(α − 1)), μ_j = (Σ_n r_nj x_n + κ x̄)/(N_j + κ),
Σ_j = (C_j + s² I)/(N_j + 2) with C_j = Σ_n r_nj (x_n − μ_j)(x_n − μ_j)ᵀ + κ (μ_j − x̄)(μ_j − x̄)ᵀ (the normal–Wishart
MAP step of Fraley and Raftery, 2007, with a Dirichlet on the weights). So it is an objective both methods optimise,
with the same E-step, as §4.1 requires. (a) Full-batch L-BFGS
(strong-Wolfe) until ‖∇_θ‖ ≤ 1e-8; where its line search stalls near 1e-8 (round-off of the objective's changes),
Newton steps with the exact Hessian, only while it is negative definite and each lowers ‖∇‖. (b) EM (the library's
E-step statistics, ``full_pass``, and that M-step) until its own step, the largest change of θ in one iteration, is
≤ 1e-12. At each end: ‖∇‖ and the eigenvalues λ of the exact Hessian (float64, on the directions that change the
mixture: the common logit shift dropped): the smallest, the largest and the least |λ|.

When two ends are one point (declared from first principles before the deciding runs). In the quadratic model an end
with ‖∇‖ ≤ gtol lies within gtol / min|λ| of its stationary point (‖θ − θ*‖ = ‖H⁻¹∇‖), so two ends of one stationary
point lie within gtol (1/min|λ_a| + 1/min|λ_b|) of each other in θ (Euclidean, logits centred, after the Hungarian
matching of the components by their means), and their objectives differ by ≲ gtol² / min|λ|. "Same point": θ gap ≤
10 × that radius (10 for the cubic remainder) and |Δ objective| ≤ 1e-9 × |objective|. Otherwise: "slow region" if an
end is degenerate (min|λ| < 1e-6: its radius, ≥ 1e-2 θ units, locates nothing; a tiny gradient on a flat ridge is
not a stationary point found), "another optimum" if both are strict maxima (largest λ ≤ −1e-6), "another stationary
point" if both are non-degenerate and one is a saddle.

Rule (declared before the deciding runs). Gate (else UNDECIDED): a start decides when L-BFGS's end is certified (‖∇‖
≤ 1e-8), EM's is (its step ≤ 1e-12) and neither end is degenerate (min|λ| ≥ 1e-6: a slow region locates no
stationary point); a start that does not is UNDECIDED-gated and reported with the reason; at least 3 of the 5 starts
must decide. Tests at the deciding starts, the fixed points shared: (i) ‖∇‖ ≤ 1e-8 at EM's certified fixed point
(EM's end is a stationary point of gradient descent; not assumed by EM's certificate, which is its step); (ii) EM
run on from L-BFGS's certified end, to its own certificate, stays at the same point (θ gap and |Δ objective| within
the bound above, L-BFGS's Hessian for both radii). Controls: (c1) the practical arm's end (Adam stopped by its
plateau rule, where the earlier REFUTED came from) fails the certificate (‖∇‖ of the likelihood it was given); (c2)
a planted stationary point that is no optimum, K copies of the one-Gaussian fit (gradient exactly 0, a
saddle: splitting two copies gains on multimodal data), is certified, told apart from EM's end and not called
an optimum (largest λ > −1e-6): a small gradient alone certifies no optimum, the Hessian must tell; (c3) EM gains
more than 0.01 nats/sample from every start. Identities (reported, not evidence): Fisher's identity and Xu–Jordan
along the paths (below); the matching finds EM's end under reversed labels to be the same point. SUPPORTED: (i),
(ii) and the controls hold; PARTIAL: (i) and (ii) hold with a failed control (they may hold vacuously); REFUTED: (i)
or (ii) fails (a certified end of one method is not a fixed point of the other).

Reported, not deciding: whether from the same start L-BFGS and EM reach the same point (L-BFGS's basin is its
line search's, not gradient descent's, and which fixed point a start leads to is a path matter, which §3.2
disclaims); where the practical arm stopped (its ‖∇‖ and Hessian, and the class of L-BFGS's certified end from
there against EM's end from the same start: the issue's "slow region" against "another optimum"); L-BFGS from a
merge/split of EM's end at start 0 (another basin where there is one).

Practical arm (the issue-10 experiment, reported beside the verdict, not deciding): from each start batch EM
(one iteration per pass), online EM and gradient descent (``fit_gd``: Adam on mini-batches, the library's plateau
schedule, tol 1e-5, at most ``passes`` epochs; also with another mini-batch order and at half the rate), all
scored after every pass by the library's exact full-data mean log-likelihood; EM run on from gd's end (the
issue-10 fixed-point test), per-pass path gaps, route, pace, and the verdict the issue-10 rule gives on it.

Pilot (issue 25; seeds 100 and 101 at the quick size and 100 at the full size, disjoint from the deciding seeds
0–4; records in /work/runs/i25-same-optimum/pilot, not kept in the repository). A first session's draft (reg_covar
0, no prior; every start had to be certified; "same point" within issue 10's 0.01 nats / 0.1 std; the same point
from every start a deciding test; control c2 a merge/split of EM's end) showed: torch's L-BFGS stalls near
‖∇‖ ≈ 1e-8 (hence the Newton polish); an autograd Hessian costs about 60 s at the full size (hence the exact
outer-product form, checked against autograd in the tests). The pilot of this version's rule on that draft gave,
quick: every end certified at ‖∇‖ ≤ 7e-15, the two ends the same point at 6 of 6 starts (θ gap ≤ 1e-12), the
merge/split control went back to EM's optimum at seed 101 (no power) and at seed 100 ended with largest eigenvalue
−4e-8 (flat); full (seed 100): L-BFGS stalled at ‖∇‖ 4e-4–7e-4 at 4 of 5 starts, on components of weight
1e-4–1e-3 (6–50 of 50,000 rows, a singular covariance in 8 dimensions: the likelihood without a floor is
unbounded there), and EM needed the library's jitter at one start (its end ‖∇‖ 8e-5, smallest eigenvalue −3e5).
Chosen on it, before any deciding run: the Wishart prior (a bounded objective both methods optimise exactly),
gating per start (the brief's "that start is UNDECIDED-gated"), c2 as a planted stationary point that is certain to
be one. This version's own pilot (quick seeds 100 and 101, run
before the deciding runs) is reported in docs/audit.md's rule-change list.

Earlier rules. Issue 10: one k-means start (already EM's optimum at the full size) and "passes to come within
0.01 nats of EM's final value" were replaced by the practical arm's fixed-point and path tests. Issue 25: those
tests decided on where Adam stopped (plateau tol 1e-5 or the 60-pass cap, ‖∇‖ never checked): REFUTED at the
full size came from 2 of 5 starts where Adam stopped on a starved component, and at 3 of 5 EM gained only
0.002–0.003 nats yet moved the means 0.35–0.43 std (a flat ridge). They are still computed, on the practical arm,
and their verdict is reported ("verdict under the issue-10 rule"). The first session's draft of this rule (above,
under Pilot) was never run on a deciding seed as an audit run; its test file, which runs the quick size at seed 0,
was run once before this version was written and reported that one of the draft's three controls failed there
(which one was not read); nothing else of seeds 0–4 was seen before the deciding runs. Two changes from the draft
are of reading, not of the pilot: the same point from every start is reported, not a test (L-BFGS's basin is not
gradient descent's, and which fixed point a start reaches is the trajectory §3.2 disclaims), and "same point" is
the Hessian bound above instead of issue 10's 0.01 nats / 0.1 std, which two distinct optima can meet.

Starts (issue 25's third and fourth sessions). The first deciding runs of this rule started from K distinct data
rows as means, the data's covariance and equal weights (``starts="data rows"``, kept): at the full size they
starve components (full seed 0: EM's fixed point has a component of weight 2.6e-185 at 3 of 5 starts, 4 of 5
starts gated as slow regions, UNDECIDED; seed 1 SUPPORTED), so the full size was not seed-stable. Declared before
any deciding run at the new starts, with the rule, the gates and every threshold unchanged: k-means++ seeds, then
one hard assignment's cells, at both sizes. Chosen on a pilot (``benchmarks/same_optimum_start_pilot.py``, quick
seeds 100 and 101, full seed 100) that read only EM's certified fixed point from each start: at full seed 100 no
component starves (EM's smallest weight 0.069 at every start) and every start stays away from the optimum (EM
gains 0.06–0.57 nats/sample; quick: 0.018–0.17, above control c3's 0.01).

Objective and starts (issue 25's fifth session; declared, with its pilot, before any deciding run of it; the rule,
the gates and every threshold unchanged). At the k-means++ cells and the Wishart-only objective (c5c98db) the full
size did not decide: PARTIAL, UNDECIDED, UNDECIDED, UNDECIDED, PARTIAL at seeds 0–4, from two defects of the setting.
(a) UNDECIDED at seeds 1–3: at 3 of 5 starts L-BFGS is not certified (‖∇‖ 3e-4–2e-3): it drains a component (smallest
weight at its end 2e-6–5e-6 where EM's end from the same start keeps 0.016–0.04). With no prior on the weights a
draining component is a stationary point at infinity in θ (the logit goes to −∞, and with ν = D + 1 the Wishart term
−½ tr(s² P_j) also rewards the emptied component's precision going to 0), so L-BFGS can climb toward the boundary for
ever. (b) PARTIAL at seeds 0 and 4: control c3 fails, a k-means++ start is already at EM's optimum on this
well-separated data (EM gains 1e-5 and 1.1e-4 nats/sample). Fixes, chosen from first principles and checked on a
pilot: (a) the rest of a prior worth one pseudo-sample per component (the objective above: the Dirichlet's log π_j,
the normal prior on the mean and the log-determinant of ν = D + 2 and of that normal prior), so the objective goes to
−∞ at every boundary of θ a component can drain toward and every stationary point is interior; each term's curvature
is at least about one pseudo-sample / N (≈ 2e-5 at the full size, above the degenerate-end floor 1e-6) on a component
with few rows, where the likelihood's vanishes; EM's M-step stays exact (above), so the objective is still one both
methods optimise with the same E-step; (b) the starts pulled halfway toward the data mean, away from the optimum by
construction, with every component broad (each covariance gains ¾ of the between-cell spread), so none starts
starved. Pilot (``benchmarks/same_optimum_prior_pilot.py full SEED STARTS``, full seeds 100, 101 and 102, disjoint
from the deciding seeds; records in /work/runs/i25-same3/pilot), reading only the gate quantities and c3's EM gain
(not tests i and ii); 1,017 s of certified arms in all. The pulled starts with the priors: 14 of 15 starts decide (5,
5 and 4 of 5 per seed; gate ≥ 3); L-BFGS's ‖∇‖ 3.1e-14–1.7e-9 at the deciding ones and EM's step ≤ 6.1e-14 at every
start; at both ends of every deciding start the Hessian is negative definite (largest eigenvalue ≤ −4.5e-4) with
least |λ| 4.5e-4–2.2e-3, and the smallest weight is 0.024–0.069; c3's EM gain 3.3–5.5 nats/sample (bar 0.01). The one
start that does not decide (seed 102, start 1): L-BFGS stops uncertified (‖∇‖ 1.2e-3, three rounds without halving
it, 19 s) where a component has drained to the Dirichlet's floor (weight 2.4e-5), a saddle (largest λ +3.7e-5) with
least |λ| 6e-7; EM from the same start keeps 0.068. The k-means++ cells with the priors, at seed 101 only (the other
seeds' runs were stopped for the machine's slots): 4 of 5 decide (start 3: L-BFGS stops at ‖∇‖ 0.10 without draining,
smallest weight 0.021), c3's gain 0.019–0.25. Chosen: both fixes. The earlier settings stay selectable
(``starts="k-means++"`` or ``"data rows"``, ``weight_prior = mean_prior = wishart_dof = 0``; EM's M-step there equals
the earlier one up to round-off, its formula reordered). After the pilot, before any deciding run, a unit test (1,500
rows, a data-row start, the priors) showed torch's strong-Wolfe search extrapolating into an overflow (inf − inf) and
L-BFGS's rounds ending on NaN, which the Hessian cannot take (an ERROR run): a round that ends on a non-finite
objective is now undone and counts as a round without progress (the start is then gated, "L-BFGS not certified"). It
never acts where a round ends finite, as every one of the pilot's did, so the pilot's numbers are this code's. A
second mend tried on pilot seed 102 (non-finite trial steps as +∞, a fresh history after every stalled round) was
rejected: 3 of 5 starts decided there instead of 4.
"""

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
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
)

__all__ = [
    "EXPERIMENT",
    "Config",
    "Problem",
    "cells",
    "classify",
    "compare_ends",
    "curvature",
    "decide",
    "decide_issue10",
    "em_fixed_point",
    "em_path",
    "em_polish",
    "em_step",
    "fisher_and_xu_jordan",
    "gauge_basis",
    "gd_path",
    "gradient",
    "hessian",
    "identity_sizes",
    "lbfgs",
    "matched_gap",
    "mean_loglik",
    "mean_loglik_direct",
    "n_params",
    "objective",
    "objective_direct",
    "off_path",
    "one_gaussian_point",
    "online_em_path",
    "pack",
    "passes_to",
    "path_gap",
    "path_identities",
    "penalty",
    "planted_start",
    "problem",
    "run",
    "same_radius",
    "score",
    "shrunk",
    "theta_gap",
    "unpack",
    "value",
]

COVARIANCE = "full"
REG_COVAR = 1e-6  # the library's default


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0  # truth and data (seed, seed + 1), starts and mini-batch orders (seed + 2, ...)
    k: int = 4  # components of the true mixture and of every fit
    d: int = 2  # dimension
    n: int = 5000  # training samples (and n // 2 held out)
    n_starts: int = 5  # starts away from the optimum (issue 10 asked for at least 3; issue 25: 5, see min_decided)
    # how the starts are made (``STARTS``): k-means++ seeds, then one hard assignment's cells (issue 25's fix,
    # declared with its pilot before its deciding runs); "data rows", issue 25's first starts, starve components
    # at the full size (docs/audit.md) and are kept for the tests and for comparison
    starts: str = "k-means++ pulled halfway"
    passes: int = 60  # passes over the data every fitter gets (EM iterations, epochs)
    batch_size: int = 256  # mini-batch rows of online EM and gd
    learning_rate: float = 0.01  # gd's initial Adam rate (the library's default), halved on plateaus
    tol: float = 1e-5  # gd's plateau rule (as in the earlier version of this experiment)
    polish_iter: int = 1000  # EM iterations run from gd's end (and from the start) in the fixed-point test
    polish_tol: float = 1e-9  # their stopping rule, |Δ mean log-likelihood|
    # verdict thresholds (module docstring). Fixed points: the tolerance of the earlier version of this
    # experiment, 0.01 nats/sample and 0.1 data standard deviations, now asked of EM run on from gd's end.
    fixed_gain_max: float = 0.01
    fixed_move_max: float = 0.1
    # Path: the same two tolerances asked at every pass instead of only at the end (a path is "the same" to the
    # precision the end points are), floored by gd's own path noise (control iii).
    path_gap_max: float = 0.01
    path_means_max: float = 0.1
    # issue 25: the certified arms. The certificate ‖∇_θ‖ ≤ 1e-8 is the issue's (float64 round-off of the
    # gradient is ~1e-13 here, so it is reachable); the same bar certifies EM's fixed point (a property of the
    # point, not of the method). Where the two ends are one stationary point (module docstring, from first
    # principles): in the quadratic model an end with ‖∇‖ ≤ gtol lies within gtol / min|λ| of its stationary
    # point (λ: the Hessian's eigenvalues on the directions that change the mixture), so two ends of one point lie
    # within the sum of their radii; ``same_factor`` 10 covers the model's cubic remainder. Their log-likelihoods
    # then differ by ≲ gtol² / min|λ| (~1e-14), so |Δ| ≤ 1e-9 relative is the second condition (the brief's
    # bound; far above round-off, far below any distinct optimum's gap). An end with min|λ| < 1e-6 is degenerate:
    # its radius, 1e-2 θ units and growing, locates nothing ("slow region", a gate); a strict maximum has its
    # largest eigenvalue ≤ −1e-6.
    gtol: float = 1e-8
    curv_floor: float = 1e-6
    lbfgs_max_evals: int = 20_000  # budgets, not rules: an end that misses the certificate makes it UNDECIDED
    newton_max: int = 20  # Newton steps after L-BFGS stalls (its line search stops near 1e-8: round-off)
    # EM is certified by its own rule, its step: one iteration changes θ by at most 1e-12 (EM's step is its
    # preconditioned gradient, so at a shared fixed point ‖∇‖ is then of that order; whether ‖∇‖ ≤ gtol there
    # is the test, not assumed). reg_covar 0: the likelihood both methods share.
    em_step_tol: float = 1e-12
    em_reg_covar: float = 0.0
    em_max_iter: int = 20_000
    em_block: int = 50  # EM iterations between two checks of its certificate
    hessian_chunk: int = 2000  # rows per block of the Hessian's outer products (memory only)
    identity_passes: tuple[int, ...] = (0, 1, 2, 5)  # points of EM's and gd's paths where §3.2's identities are checked
    identity_tol: float = 1e-8  # float64 identities (residuals ~1e-13 expected; a bug gives O(1))
    same_factor: float = 10.0  # the Hessian radius's safety factor (above)
    same_ll_rel: float = 1e-9  # |Δ log-likelihood| / |log-likelihood| of one point (above)
    # A start decides when both its ends are certified and neither is degenerate (issue 25: a start where L-BFGS
    # misses the bar is UNDECIDED-gated); the experiment decides on at least 3 such starts (issue 10's minimum).
    min_decided: int = 3
    # The certified arms' objective: the mean log-likelihood with a Wishart prior (ν = D + 1, scale s⁻²·I) on
    # every precision, worth ``prior`` pseudo-samples of the data's spread: EM's M-step Σ_j = S_j + prior·s²/N_j·I.
    # Without it the likelihood is unbounded (a component on ≤ D points has a singular covariance); the pilot
    # (module docstring) showed what that does at the full size.
    prior: float = 1.0
    # Issue 25's fifth session (module docstring, "Objective and starts"): the rest of a prior worth one
    # pseudo-sample per component, so the objective's maximisers are interior and a draining component is no
    # longer a direction of ascent to infinity. ``weight_prior`` α − 1 of a symmetric Dirichlet on the weights
    # (M-step π_j = (N_j + α − 1)/(N + K(α − 1))); ``mean_prior`` κ of a normal prior N(data mean, (κ P_j)⁻¹) on every
    # mean (M-step μ_j = (Σ r x + κ x̄)/(N_j + κ)); ``wishart_dof`` ν − D − 1 of the precisions' Wishart (1: ν = D + 2,
    # Fraley and Raftery's; 0 was issue 25's earlier ν = D + 1). All 0: the objective of the earlier runs.
    weight_prior: float = 1.0
    mean_prior: float = 1.0
    wishart_dof: float = 1.0

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(k=8, d=8, n=50_000, n_starts=5, batch_size=1024)


# -- data and starts ---------------------------------------------------------------------------------------------


def _truth(k: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    means = rng.randn(k, d) * 3
    a = rng.randn(k, d, d) / np.sqrt(d)
    covs = a @ a.transpose(0, 2, 1) + 0.2 * np.eye(d)
    weights = rng.dirichlet(5 * np.ones(k))
    return weights, means, covs


def _draw(weights: np.ndarray, means: np.ndarray, covs: np.ndarray, n: int, rng: np.random.RandomState) -> np.ndarray:
    z = rng.choice(len(weights), size=n, p=weights)
    chol = np.linalg.cholesky(covs)
    return means[z] + np.einsum("nab,nb->na", chol[z], rng.randn(n, means.shape[1]))


def _params(weights: np.ndarray, means: np.ndarray, covs: np.ndarray) -> Any:
    from implicit_em import gaussian
    from implicit_em.mixture._stats import MixtureParams

    covs_t = torch.from_numpy(np.ascontiguousarray(covs))
    return MixtureParams(
        torch.from_numpy(weights), torch.from_numpy(means), covs_t, gaussian.precisions_cholesky(covs_t, COVARIANCE)
    )


def _data_row_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """Issue 25's first starts (``starts="data rows"``): K distinct data rows as means, the data's covariance
    (+ reg_covar) for every component, equal weights. At the full size they starve components (docs/audit.md)."""
    d = x.shape[1]
    means = x[rng.choice(len(x), size=k, replace=False)].copy()
    cov = np.cov(x, rowvar=False, bias=True).reshape(d, d) + REG_COVAR * np.eye(d)
    return _params(np.full(k, 1.0 / k), means, np.broadcast_to(cov, (k, d, d)).copy())


def cells(x: np.ndarray, centers: np.ndarray) -> Any:
    """One hard assignment: every row to its nearest centre; each cell's share of the rows, mean and covariance
    (+ reg_covar). A centre that is a row of ``x`` keeps at least that row."""
    k, d = centers.shape
    labels = ((x[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)
    weights = np.bincount(labels, minlength=k) / len(x)
    means = np.stack([x[labels == j].mean(0) for j in range(k)])
    covs = np.stack([np.cov(x[labels == j], rowvar=False, bias=True).reshape(d, d) for j in range(k)])
    return _params(weights, means, covs + REG_COVAR * np.eye(d))


def _kmeanspp_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """The starts (issue 25's fix, declared before its deciding runs): k-means++ seeds (scikit-learn's
    ``kmeans_plusplus``, its own seed drawn from ``rng``), then one hard assignment's cells (``cells``)."""
    from sklearn.cluster import kmeans_plusplus

    centers, _ = kmeans_plusplus(x, k, random_state=rng.randint(2**31 - 1))
    return cells(x, centers)


def shrunk(params: Any, t: float) -> Any:
    """A start pulled toward the data: every mean moved to x̄ + t (μ_j − x̄) (x̄ = Σ_j π_j μ_j, the data mean for
    cells), and the between-component spread it loses, (1 − t²) Σ_j π_j (μ_j − x̄)(μ_j − x̄)ᵀ, added to every
    covariance, so the start keeps the data's mean and covariance; weights unchanged."""
    from implicit_em import gaussian
    from implicit_em.mixture._stats import MixtureParams

    w, mu = params.weights.double(), params.means.double()
    centre = w @ mu
    dev = mu - centre
    between = torch.einsum("k,ka,kb->ab", w, dev, dev)
    covs = params.covariances.double() + (1 - t * t) * between
    return MixtureParams(w.clone(), centre + t * dev, covs, gaussian.precisions_cholesky(covs, COVARIANCE))


def _shrunk_kmeanspp_start(x: np.ndarray, k: int, rng: np.random.RandomState) -> Any:
    """k-means++ cells (:func:`_kmeanspp_start`) pulled halfway toward the data (:func:`shrunk`, t = 1/2)."""
    return shrunk(_kmeanspp_start(x, k, rng), 0.5)


STARTS = {
    "k-means++": _kmeanspp_start,
    "data rows": _data_row_start,
    "k-means++ pulled halfway": _shrunk_kmeanspp_start,
}


def _start(x: np.ndarray, k: int, rng: np.random.RandomState, starts: str = "k-means++") -> Any:
    """One start away from the optimum, of the kind ``starts`` names (``STARTS``)."""
    if starts not in STARTS:
        raise ValueError(f"starts must be one of {tuple(STARTS)}, got {starts!r}")
    return STARTS[starts](x, k, rng)


def _shift_scale(x: Tensor) -> tuple[Tensor, float]:
    """The centre and scalar scale ``GaussianMixture`` gives its fitters (the data mean, the rms std)."""
    return x.mean(0), float(x.var(0, unbiased=False).mean().sqrt())


# -- the three fitters, read after every pass ------------------------------------------------------------------


def em_path(data: Any, start: Any, shift: Tensor, passes: int) -> list[Any]:
    """Batch EM: the parameters after 0, 1, ..., ``passes`` iterations (EM carries no state between them)."""
    from implicit_em.mixture._em import fit_em
    from implicit_em.mixture._settings import FitSettings

    one = FitSettings(covariance_type=COVARIANCE, reg_covar=REG_COVAR, tol=0.0, max_iter=1)
    path = [start]
    for _ in range(passes):
        path.append(fit_em(data, path[-1], one, shift=shift).params)
    return path


def online_em_path(data: Any, start: Any, shift: Tensor, passes: int, batch_size: int, seed: int) -> list[Any]:
    """Online EM: the parameters after 0, 1, ..., ``passes`` epochs of one continuous run (the running statistics
    and the step count carried from epoch to epoch; no final exact EM iteration)."""
    from implicit_em.mixture._online_em import fit_online_em
    from implicit_em.mixture._settings import FitSettings

    one = FitSettings(covariance_type=COVARIANCE, reg_covar=REG_COVAR, tol=0.0, max_iter=1, batch_size=batch_size)
    generator = torch.Generator().manual_seed(seed)
    path, state = [start], None
    for _ in range(passes):
        result, state = fit_online_em(
            data, path[-1], one, shift=shift, generator=generator, state=state, final_em_steps=0
        )
        path.append(result.params)
    return path


def gd_path(
    data: Any,
    start: Any,
    shift: Tensor,
    scale: float,
    passes: int,
    batch_size: int,
    learning_rate: float,
    tol: float,
    seed: int,
) -> tuple[list[Any], int]:
    """Gradient descent (``fit_gd``, Adam, the library's plateau schedule): the parameters after 0, 1, ...
    epochs, read by its callback, and held at its end point after it converges; returns them and the epochs run."""
    from implicit_em.mixture._gd import fit_gd, make_state, state_params
    from implicit_em.mixture._settings import FitSettings

    state = make_state(start, COVARIANCE, shift, scale, learning_rate, "adam")
    path = [start]

    def after_epoch(epoch: int, loglik: float, seconds: float, usage: Tensor) -> None:
        path.append(state_params(state, COVARIANCE, shift, scale))

    settings = FitSettings(  # reg_covar 0: no penalty, as fit_gd's schedule before issue 14
        covariance_type=COVARIANCE,
        reg_covar=0.0,
        tol=tol,
        max_iter=passes,
        batch_size=batch_size,
        learning_rate=learning_rate,
    )
    result, _ = fit_gd(
        data,
        start,
        settings,
        shift=shift,
        scale=scale,
        generator=torch.Generator().manual_seed(seed),
        state=state,
        callback=after_epoch,
    )
    epochs = len(path) - 1
    return path + [path[-1]] * (passes - epochs), int(result.n_iter)


# -- one scorer, the fixed-point test, the path gap -----------------------------------------------------------


def score(data: Any, params: Any, shift: Tensor) -> float:
    """The exact mean log-likelihood per sample of all of ``data`` under ``params``: the one scorer."""
    from implicit_em.mixture._fitting import _mean_loglik

    return float(_mean_loglik(data, params, COVARIANCE, shift))


def em_polish(
    data: Any, params: Any, shift: Tensor, max_iter: int, tol: float, reg_covar: float = REG_COVAR
) -> tuple[float, float, Any]:
    """Run EM from ``params`` until |Δ| < tol: (log-likelihood gained, largest mean moved, the end point).

    Both are zero at an EM fixed point. The move is in the data's units (components keep their labels under EM).
    """
    from implicit_em.mixture._em import fit_em
    from implicit_em.mixture._settings import FitSettings

    settings = FitSettings(covariance_type=COVARIANCE, reg_covar=reg_covar, tol=tol, max_iter=max_iter)
    end = fit_em(data, params, settings, shift=shift).params
    gain = score(data, end, shift) - score(data, params, shift)
    move = float((end.means - params.means).norm(dim=1).max())
    return gain, move, end


def matched_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Largest distance between the means of a and b (K, D) after the Hungarian matching of their components."""
    from scipy.optimize import linear_sum_assignment

    dist = np.linalg.norm(a[:, None] - b[None], axis=-1)
    rows, cols = linear_sum_assignment(dist)
    return float(dist[rows, cols].max())


def path_gap(
    ll_a: list[float], ll_b: list[float], mu_a: list[np.ndarray], mu_b: list[np.ndarray], match: bool
) -> tuple[float, float]:
    """(largest |Δ log-likelihood|, largest mean distance) over passes 1..P of two trajectories; component by
    component (same start, same labels) or, with ``match``, after the Hungarian matching at every pass."""
    if len(ll_a) != len(ll_b) or len(mu_a) != len(mu_b) or len(ll_a) != len(mu_a):
        raise ValueError(f"trajectories of different lengths: {len(ll_a)}, {len(ll_b)}, {len(mu_a)}, {len(mu_b)}")
    gap = max(abs(a - b) for a, b in zip(ll_a[1:], ll_b[1:], strict=True))
    if match:
        means = max(matched_gap(a, b) for a, b in zip(mu_a[1:], mu_b[1:], strict=True))
    else:
        means = max(float(np.linalg.norm(a - b, axis=-1).max()) for a, b in zip(mu_a[1:], mu_b[1:], strict=True))
    return float(gap), means


def off_path(points: list[np.ndarray], path: list[np.ndarray]) -> float:
    """Largest distance from any of ``points`` to the polyline through ``path`` (all K means as one vector):
    how far a trajectory strays from another one's route, whatever its pace."""
    route = [p.ravel() for p in path]
    worst = 0.0
    for q in (p.ravel() for p in points):
        best = math.inf
        for a, b in itertools.pairwise(route):
            ab = b - a
            t = float(np.clip(np.dot(q - a, ab) / max(float(np.dot(ab, ab)), 1e-300), 0.0, 1.0))
            best = min(best, float(np.linalg.norm(q - a - t * ab)))
        worst = max(worst, best)
    return worst


def passes_to(curve: list[float], target: float, tol: float) -> int:
    """The first pass p ≥ 1 whose log-likelihood is within tol of target (-1 if none)."""
    return next((p for p, v in enumerate(curve) if p >= 1 and v >= target - tol), -1)


def decide_issue10(fixed: bool, path: bool, controls: bool) -> Verdict:
    """The issue-10 rule (replaced by issue 25, still computed on the practical arm): SUPPORTED if both halves
    hold and the controls pass, PARTIAL if one half holds (or both with a failed control), REFUTED if neither."""
    if fixed and path:
        return "SUPPORTED" if controls else "PARTIAL"
    return "PARTIAL" if fixed or path else "REFUTED"


def decide(shared: bool, controls: bool) -> Verdict:
    """The rule of the module docstring (before the gates; the path half's claim is an identity, reported, not
    counted): ``shared``, every certified end of one method is a fixed point of the other (tests i and ii).
    REFUTED if it fails; SUPPORTED if it holds and the controls pass; PARTIAL if it holds with a failed control
    (it may then hold vacuously)."""
    if not shared:
        return "REFUTED"
    return "SUPPORTED" if controls else "PARTIAL"


# -- the certified arms: one parametrisation, its exact gradient and Hessian, L-BFGS and EM to stationarity ---


@dataclass(frozen=True)
class Problem:
    """The data in standardised coordinates u = (x − shift) / scale (the scalar scale of ``_shift_scale``), its
    quadratic features φ(u) = [u_a u_b (a ≤ b), u, 1] (the fast objective is one product φ A), and K, D."""

    u: Tensor
    phi: Tensor
    k: int
    d: int
    shift: Tensor
    scale: float
    prior: float = 1.0  # the Wishart prior's strength on every precision, in pseudo-samples (module docstring)
    weight_prior: float = 0.0  # α − 1 of the symmetric Dirichlet prior on the weights (pseudo-rows per component)
    mean_prior: float = 0.0  # κ of the normal prior μ_j | P_j ~ N(data mean, (κ P_j)⁻¹) on every mean
    logdet: float = 0.0  # the coefficient c of Σ_j log|P_j| / 2: ν − D − 1 of the Wishart, + 1 with a mean prior


def problem(
    x: np.ndarray, k: int, prior: float = 1.0, weight_prior: float = 0.0, mean_prior: float = 0.0, logdet: float = 0.0
) -> Problem:
    """The :class:`Problem` of data ``x`` (N, D) for a K-component fit, with the priors' strengths (defaults: issue
    25's earlier objective, the Wishart with ν = D + 1 alone; the experiment's are :func:`_problem`'s)."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    shift, scale = _shift_scale(xt)
    u = (xt - shift) / scale
    rows, cols = torch.triu_indices(u.shape[1], u.shape[1])
    phi = torch.cat([u[:, rows] * u[:, cols], u, torch.ones(len(u), 1, dtype=torch.float64)], 1)
    return Problem(u, phi, k, u.shape[1], shift, scale, prior, weight_prior, mean_prior, logdet)


def _problem(x: np.ndarray, cfg: Config) -> Problem:
    """The :class:`Problem` of the config's objective (its priors' strengths)."""
    logdet = cfg.wishart_dof + (1.0 if cfg.mean_prior else 0.0)  # the mean prior's normaliser adds ½ log|P_j|
    return problem(x, cfg.k, cfg.prior, cfg.weight_prior, cfg.mean_prior, logdet)


def n_params(k: int, d: int) -> int:
    """The length of θ: K logits, K·D means, K·D log-diagonals and K·D(D−1)/2 off-diagonals of W."""
    return k + 2 * k * d + k * d * (d - 1) // 2


def _parts(theta: Tensor, k: int, d: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """θ as (logits (K,), means (K, D), log diag W (K, D), W (K, D, D) upper triangular, precision W Wᵀ)."""
    logits = theta[:k]
    means = theta[k : k + k * d].reshape(k, d)
    logdiag = theta[k + k * d : k + 2 * k * d].reshape(k, d)
    off = theta[k + 2 * k * d :].reshape(k, d * (d - 1) // 2)
    rows, cols = torch.triu_indices(d, d, 1)
    w = torch.diag_embed(torch.exp(logdiag))
    if d > 1:
        w = w.index_put((torch.arange(k)[:, None], rows[None], cols[None]), off)
    return logits, means, logdiag, w


def pack(params: Any, pr: Problem) -> Tensor:
    r"""The unconstrained θ of sklearn-shaped parameters, in standardised coordinates: logits log π (centred; the
    softmax ignores a common shift, a direction the Hessian drops), means (μ − shift)/scale, and the precision's
    upper Cholesky factor W = scale · precisions_cholesky (Λ_u = W Wᵀ) as log-diagonal and off-diagonal."""
    logits = torch.log(params.weights.double())
    w = params.precisions_cholesky.double() * pr.scale
    rows, cols = torch.triu_indices(pr.d, pr.d, 1)
    return torch.cat(
        [
            logits - logits.mean(),
            ((params.means.double() - pr.shift) / pr.scale).reshape(-1),
            torch.log(torch.diagonal(w, dim1=-2, dim2=-1)).reshape(-1),
            w[:, rows, cols].reshape(-1),
        ]
    )


def unpack(theta: Tensor, pr: Problem) -> Any:
    """The sklearn-shaped :class:`~implicit_em.mixture._stats.MixtureParams` of θ (original coordinates)."""
    from implicit_em import gaussian
    from implicit_em.mixture._stats import MixtureParams

    logits, means, _, w = _parts(theta.detach(), pr.k, pr.d)
    prec_chol = w / pr.scale
    cov = gaussian.covariances_from_precisions_cholesky(prec_chol, COVARIANCE)
    return MixtureParams(torch.softmax(logits, 0), means * pr.scale + pr.shift, cov, prec_chol)


def _log_prob(theta: Tensor, u: Tensor, k: int, d: int) -> Tensor:
    """log π_k + log N(u_n; μ_k, (W_k W_kᵀ)⁻¹), (N, K), computed directly from (u − μ) W (the reference form)."""
    logits, means, logdiag, w = _parts(theta, k, d)
    y = torch.einsum("nd,kde->nke", u, w) - torch.einsum("kd,kde->ke", means, w)
    const = torch.log_softmax(logits, 0) + logdiag.sum(1) - 0.5 * d * math.log(2 * math.pi)
    return const - 0.5 * (y * y).sum(-1)


def mean_loglik_direct(theta: Tensor, u: Tensor, k: int, d: int) -> Tensor:
    """The mean log-likelihood of standardised data u under θ (the reference form, used for the certificate)."""
    return torch.logsumexp(_log_prob(theta, u, k, d), 1).mean()


def mean_loglik(theta: Tensor, pr: Problem) -> Tensor:
    """The same mean log-likelihood as one product φ(u) A(θ) (about 10x faster; what L-BFGS runs on). In the data's
    own units the mean log-likelihood is this minus D·log(scale)."""
    k, d = pr.k, pr.d
    logits, means, logdiag, w = _parts(theta, k, d)
    prec = w @ w.mT
    prec_mean = (prec @ means[:, :, None])[..., 0]
    rows, cols = torch.triu_indices(d, d)
    quad = -0.5 * prec[:, rows, cols] * torch.where(rows == cols, 1.0, 2.0).double()
    const = torch.log_softmax(logits, 0) + logdiag.sum(1) - 0.5 * d * math.log(2 * math.pi)
    const = const - 0.5 * (prec_mean * means).sum(1)
    a = torch.cat([quad, prec_mean, const[:, None]], 1)
    return torch.logsumexp(pr.phi @ a.T, 1).mean()


def _prior_terms(logits: Tensor, means: Tensor, logdiag: Tensor, w: Tensor, pr: Problem) -> Tensor:
    r"""N × the priors' log-density (up to a constant), in standardised units (Λ_j = W_j W_jᵀ = s² P_j, the data
    mean at 0): :math:`(α-1)\sum_j \log π_j + c\sum_j \tfrac12\log|Λ_j| - \tfrac{\text{prior}}{2}\sum_j
    \operatorname{tr}Λ_j - \tfrac{κ}{2}\sum_j μ_j^\top Λ_j μ_j` (½ log|Λ_j| = Σ_i log W_j,ii)."""
    total = -0.5 * pr.prior * (w * w).sum()
    if pr.weight_prior:
        total = total + pr.weight_prior * torch.log_softmax(logits, 0).sum()
    if pr.logdet:
        total = total + pr.logdet * logdiag.sum()
    if pr.mean_prior:
        total = total - 0.5 * pr.mean_prior * (torch.einsum("kd,kde->ke", means, w) ** 2).sum()
    return total


def penalty(theta: Tensor, pr: Problem) -> Tensor:
    r"""Minus the priors' term per sample (:func:`_prior_terms` / N): the objective is the mean log-likelihood
    minus this. With the defaults of issue 25's first rule, the Wishart prior alone,
    :math:`\tfrac{\text{prior}}{2N}\sum_j \operatorname{tr}(s^2 P_j) = \tfrac{\text{prior}}{2N}\sum_j
    \lVert W_j\rVert_F^2` (P_j the precision in the data's units, s the scale)."""
    logits, means, logdiag, w = _parts(theta, pr.k, pr.d)
    return -_prior_terms(logits, means, logdiag, w, pr) / len(pr.u)


def objective(theta: Tensor, pr: Problem) -> Tensor:
    """The objective both certified arms maximise: the mean log-likelihood (fast form) minus :func:`penalty`."""
    return mean_loglik(theta, pr) - penalty(theta, pr)


def objective_direct(theta: Tensor, pr: Problem) -> Tensor:
    """:func:`objective` with the reference form of the log-likelihood (the certificate's)."""
    return mean_loglik_direct(theta, pr.u, pr.k, pr.d) - penalty(theta, pr)


def gradient(theta: Tensor, pr: Problem, direct: bool = True, penalised: bool = True) -> tuple[float, Tensor]:
    """(objective, its gradient ∇_θ) by autograd, float64; ``direct`` uses the reference form; ``penalised``
    False: of the mean log-likelihood alone (what the practical arm's Adam is given)."""
    t = theta.detach().clone().requires_grad_(True)
    f = mean_loglik_direct(t, pr.u, pr.k, pr.d) if direct else mean_loglik(t, pr)
    if penalised:
        f = f - penalty(t, pr)
    (g,) = torch.autograd.grad(f, t)
    return float(f.detach()), g


def gauge_basis(k: int, d: int) -> Tensor:
    """An orthonormal basis (P, P − 1) of θ's directions that change the mixture: all but a common logit shift."""
    p = n_params(k, d)
    ones = torch.zeros(p, 1, dtype=torch.float64)
    ones[:k] = 1 / math.sqrt(k)
    q, _ = torch.linalg.qr(torch.cat([ones, torch.eye(p, dtype=torch.float64)], 1))
    return q[:, 1:p]


def hessian(theta: Tensor, pr: Problem, chunk: int = 2000) -> Tensor:
    r"""The exact Hessian (P, P) of the objective (mean log-likelihood minus the prior's term) in θ, float64, in
    O(N K P²) instead of autograd's O(N K P² D) per direction: with a_nk = log π_k + log N(u_n; θ_k), r_nk its
    responsibilities, v_nk = ∇a_nk,

    .. math:: N H = \nabla^2_\theta \textstyle\sum_k [N_k a_k(\text{stats})] + \sum_{n,k} r_{nk}
              (v_{nk} - \bar v_n)(v_{nk} - \bar v_n)^\top,\quad \bar v_n = \sum_k r_{nk} v_{nk},

    the first term (and the prior's) by autograd on the responsibility-weighted statistics (N_k, Σ r u, Σ r u uᵀ)
    held fixed, the second from the per-sample gradients v_nk written out. ``tests`` check it against
    ``torch.func.hessian``.
    """
    k, d = pr.k, pr.d
    p = n_params(k, d)
    theta = theta.detach()
    logits, means, _, w = _parts(theta, k, d)
    pi = torch.softmax(logits, 0)
    # slots of component j's block in θ: its means, log-diagonals, off-diagonals
    rows, cols = torch.triu_indices(d, d, 1)
    slots = torch.stack(
        [
            torch.cat(
                [
                    k + j * d + torch.arange(d),
                    k + k * d + j * d + torch.arange(d),
                    k + 2 * k * d + j * (d * (d - 1) // 2) + torch.arange(d * (d - 1) // 2),
                ]
            )
            for j in range(k)
        ]
    )
    outer = torch.zeros(p, p, dtype=torch.float64)
    nk = torch.zeros(k, dtype=torch.float64)
    s1 = torch.zeros(k, d, dtype=torch.float64)
    s2 = torch.zeros(k, d, d, dtype=torch.float64)
    eye = torch.eye(k, dtype=torch.float64)
    diag = torch.diagonal(w, dim1=-2, dim2=-1)
    for i in range(0, len(pr.u), chunk):
        u = pr.u[i : i + chunk]
        r = torch.softmax(_log_prob(theta, u, k, d), 1)  # (n, K)
        nk += r.sum(0)
        s1 += r.T @ u
        s2 += torch.einsum("nk,na,nb->kab", r, u, u)
        z = u[:, None, :] - means[None]  # (n, K, D)
        y = torch.einsum("nkd,kde->nke", z, w)  # (n, K, D): (u − μ_k)ᵀ W_k
        block = torch.cat(
            [
                torch.einsum("kde,nke->nkd", w, y),  # ∂a/∂μ = W y
                1 - diag[None] * z * y,  # ∂a/∂log W_ii = 1 − W_ii z_i y_i
                -(z[:, :, rows] * y[:, :, cols]),  # ∂a/∂W_ij = −z_i y_j (i < j)
            ],
            2,
        )
        v = torch.zeros(len(u), k, p, dtype=torch.float64)
        v[:, :, :k] = eye - pi
        v.scatter_(2, slots[None].expand(len(u), -1, -1), block)
        centred = (v - torch.einsum("nk,nkp->np", r, v)[:, None]) * r.sqrt()[..., None]
        flat = centred.reshape(-1, p)
        outer += flat.T @ flat

    def weighted(t: Tensor) -> Tensor:
        lg, mu, ld, ww = _parts(t, k, d)
        scatter = s2 - s1[:, :, None] * mu[:, None, :] - mu[:, :, None] * s1[:, None, :]
        scatter = scatter + nk[:, None, None] * mu[:, :, None] * mu[:, None, :]
        quad = torch.einsum("kab,kac,kbc->k", scatter, ww, ww)  # tr(Wᵀ C W)
        prior = _prior_terms(lg, mu, ld, ww, pr)  # the priors' term (−N × penalty)
        return (nk * (torch.log_softmax(lg, 0) + ld.sum(1)) - 0.5 * quad).sum() + prior

    second = torch.func.hessian(weighted)(theta)
    return (second + outer) / len(pr.u)


def curvature(theta: Tensor, pr: Problem, chunk: int = 2000) -> tuple[float, float, float]:
    """The extreme eigenvalues (smallest, largest) of the Hessian on the directions that change the mixture (the
    common logit shift dropped), and the smallest |eigenvalue|. A strict local maximum has the first two negative;
    a stationary point is non-degenerate (located by a small gradient: ‖θ − θ*‖ ≲ ‖∇‖ / min|λ|) when the third is
    not ~0."""
    q = gauge_basis(pr.k, pr.d)
    eig = torch.linalg.eigvalsh(q.T @ hessian(theta, pr, chunk) @ q)
    return float(eig[0]), float(eig[-1]), float(eig.abs().min())


def lbfgs(
    theta: Tensor, pr: Problem, gtol: float, max_evals: int, chunk: int = 2000, newton_max: int = 20
) -> tuple[Tensor, float, int, int]:
    """Full-batch float64 L-BFGS (strong-Wolfe line search) on −objective from θ until the certificate
    ‖∇‖ ≤ gtol (the reference form's gradient), ``max_evals`` evaluations, or three rounds without progress (a
    round that ends on a non-finite objective is undone and counts as one: issue 25's fifth session); then,
    where it stalls above gtol (its line search stops once the objective's changes reach round-off, near 1e-8),
    Newton steps with the exact Hessian, taken only while it is negative definite and each lowers ‖∇‖.
    Returns (θ, ‖∇‖, L-BFGS evaluations, Newton steps)."""
    t = theta.detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [t],
        lr=1.0,
        max_iter=200,
        history_size=50,
        tolerance_grad=0.0,
        tolerance_change=0.0,
        line_search_fn="strong_wolfe",
    )
    evals = 0

    def closure() -> Tensor:
        nonlocal evals
        evals += 1
        opt.zero_grad()
        loss = -objective(t, pr)
        loss.backward()
        return loss

    norm = float(gradient(t, pr)[1].norm())
    stalled = 0
    while norm > gtol and evals < max_evals and stalled < 3:
        before = t.detach().clone()
        opt.step(closure)
        norm_new = float(gradient(t, pr)[1].norm())
        if not math.isfinite(norm_new):  # a round that ends where the objective overflows: back to its start
            with torch.no_grad():
                t.copy_(before)
            norm_new = norm
        stalled = stalled + 1 if norm_new > 0.5 * norm else 0
        norm = norm_new
    theta, newton = t.detach(), 0
    q = gauge_basis(pr.k, pr.d)
    while norm > gtol and newton < newton_max:
        h = q.T @ hessian(theta, pr, chunk) @ q
        if float(torch.linalg.eigvalsh(h)[-1]) >= 0:
            break
        g = gradient(theta, pr)[1]
        candidate = theta - q @ torch.linalg.solve(h, q.T @ g)
        norm_new = float(gradient(candidate, pr)[1].norm())
        if not norm_new < norm:
            break
        theta, norm, newton = candidate, norm_new, newton + 1
    return theta, norm, evals, newton


def _lbfgs(theta: Tensor, pr: Problem, cfg: Config) -> tuple[Tensor, float, int, int]:
    """:func:`lbfgs` with the config's certificate and budgets (looked up at call time, so tests can replace it)."""
    return lbfgs(theta, pr, cfg.gtol, cfg.lbfgs_max_evals, cfg.hessian_chunk, cfg.newton_max)


def em_step(data: Any, params: Any, pr: Problem, reg_covar: float = 0.0) -> Any:
    """One EM iteration on the objective: the library's E-step statistics (``full_pass``, float64) and the
    M-step of the likelihood with the Wishart prior on every precision, Σ_j = S_j + (prior·s² / N_j) I (S_j the
    responsibility-weighted scatter, s the scale), means and weights as ever. ``reg_covar`` > 0 adds reg_covar·I
    besides (the library's ridge: EM then has other fixed points, a planted effect in the tests)."""
    from implicit_em import gaussian
    from implicit_em.mixture._em import full_pass
    from implicit_em.mixture._fitting import CHUNK
    from implicit_em.mixture._stats import MixtureParams

    summary = full_pass(data, params, COVARIANCE, pr.shift, CHUNK)
    nk = summary.nk
    centred = summary.sx / (nk + pr.mean_prior)[:, None]  # the data mean (the shift) is the means' prior centre
    scatter = summary.sxx - (nk + pr.mean_prior)[:, None, None] * centred[:, :, None] * centred[:, None, :]
    eye = torch.eye(pr.d, dtype=torch.float64)
    cov = (scatter + pr.prior * pr.scale**2 * eye) / (nk + pr.logdet)[:, None, None] + reg_covar * eye
    prec_chol = gaussian.precisions_cholesky(cov, COVARIANCE)
    weights = (nk + pr.weight_prior) / (nk.sum() + pr.k * pr.weight_prior)
    return MixtureParams(weights, centred + pr.shift, cov, prec_chol)


def em_fixed_point(
    data: Any, start: Any, pr: Problem, step_tol: float, max_iter: int, block: int, reg_covar: float = 0.0
) -> tuple[Any, float, int, float]:
    """EM (:func:`em_step`) from ``start`` to its own fixed point: until one iteration changes θ by at most
    ``step_tol`` (checked every ``block`` iterations) or ``max_iter``. Returns (parameters, ‖∇‖ of the objective
    there, iterations, EM's last step)."""
    params, done, step = start, 0, math.inf
    while step > step_tol and done < max_iter:
        for _ in range(block - 1):
            params = em_step(data, params, pr, reg_covar)
        before = params
        params = em_step(data, before, pr, reg_covar)
        done += block
        step = _theta_change(pack(params, pr), pack(before, pr), pr.k)
    return params, float(gradient(pack(params, pr), pr)[1].norm()), done, step


def value(params: Any, pr: Problem) -> float:
    """The objective at sklearn-shaped parameters (float64, reference form)."""
    return float(objective_direct(pack(params, pr), pr))


def _theta_change(a: Tensor, b: Tensor, k: int) -> float:
    """The largest change of θ between a and b, the common logit shift removed."""
    diff = a - b
    diff[:k] -= diff[:k].mean()
    return float(diff.abs().max())


def compare_ends(a: Any, b: Any, data: Any, shift: Tensor, std: float) -> tuple[float, float]:
    """(largest matched means distance in data std, |Δ mean log-likelihood| in nats/sample) of two ends."""
    gap = matched_gap(a.means.numpy() / std, b.means.numpy() / std)
    return gap, abs(score(data, a, shift) - score(data, b, shift))


def theta_gap(a: Any, b: Any, pr: Problem) -> float:
    """The Euclidean distance in θ (logits centred: the common shift removed) between two ends after the Hungarian
    matching of their components by their standardised means: the distance the Hessian bound
    ‖θ − θ*‖ ≲ ‖∇‖ / min|λ| speaks of."""
    from scipy.optimize import linear_sum_assignment

    mu_a, mu_b = a.means.numpy() / pr.scale, b.means.numpy() / pr.scale
    _, cols = linear_sum_assignment(np.linalg.norm(mu_a[:, None] - mu_b[None], axis=-1))
    ta, tb = _permuted(pack(a, pr), pr, np.arange(pr.k)), _permuted(pack(b, pr), pr, cols)
    return float((ta - tb).norm())


def _permuted(theta: Tensor, pr: Problem, order: np.ndarray) -> Tensor:
    """θ with its components in ``order`` (logits centred)."""
    k, d = pr.k, pr.d
    m = d * (d - 1) // 2
    idx = torch.as_tensor(order, dtype=torch.long)
    logits = theta[:k][idx]
    means = theta[k : k + k * d].reshape(k, d)[idx].reshape(-1)
    logdiag = theta[k + k * d : k + 2 * k * d].reshape(k, d)[idx].reshape(-1)
    off = theta[k + 2 * k * d :].reshape(k, m)[idx].reshape(-1)
    return torch.cat([logits - logits.mean(), means, logdiag, off])


def same_radius(gtol: float, floor: float, *smallest: float) -> float:
    """The distance in θ within which two ends certified at ‖∇‖ ≤ gtol are one stationary point: each lies within
    gtol / min|λ| of its stationary point (the quadratic model), so the two within the sum; min|λ| floored at
    ``floor`` (below it an end is degenerate and locates nothing)."""
    return sum(gtol / max(abs(x), floor) for x in smallest)


def classify(
    gap: float, dll: float, ll: float, curv_a: tuple[float, float, float], curv_b: tuple[float, float, float], cfg: Any
) -> str:
    """The module docstring's classes of two certified ends: "same point" (θ gap ≤ ``same_factor`` × the Hessian
    radius and |Δ log-likelihood| ≤ ``same_ll_rel`` × |log-likelihood|), else "slow region" (an end degenerate:
    min|λ| < ``curv_floor``), "another optimum" (both strict maxima, largest eigenvalue ≤ −``curv_floor``) or
    "another stationary point" (both non-degenerate, one a saddle)."""
    radius = cfg.same_factor * same_radius(cfg.gtol, cfg.curv_floor, curv_a[2], curv_b[2])
    if gap <= radius and dll <= cfg.same_ll_rel * abs(ll):
        return "same point"
    if min(curv_a[2], curv_b[2]) < cfg.curv_floor:
        return "slow region"
    if max(curv_a[1], curv_b[1]) <= -cfg.curv_floor:
        return "another optimum"
    return "another stationary point"


def one_gaussian_point(x: np.ndarray, k: int, prior: float = 1.0, logdet: float = 0.0) -> Any:
    """A planted stationary point that is no optimum: K copies of the one-Gaussian fit (the data's mean, its
    biased covariance plus the prior's ridge K·prior·s²/N, equal weights). Its gradient is exactly zero (every
    responsibility is 1/K, every component at EM's M-step of the data's moments), the Hessian's logit block is zero
    (identical components), and splitting two copies gains on multimodal data (a positive eigenvalue): a certified
    ‖∇‖ that the Hessian must not call an optimum."""
    from implicit_em import gaussian
    from implicit_em.mixture._stats import MixtureParams

    mean = torch.from_numpy(x.mean(0)).double()
    cov = torch.from_numpy(np.cov(x, rowvar=False, bias=True).reshape(x.shape[1], x.shape[1])).double()
    scale2 = float(x.var(0).mean())  # the scale² of _shift_scale
    nk = len(x) / k  # every component's responsibility mass
    cov = (nk * cov + prior * scale2 * torch.eye(x.shape[1], dtype=torch.float64)) / (nk + logdet)
    covs = cov.expand(k, -1, -1).clone()
    weights = torch.full((k,), 1.0 / k, dtype=torch.float64)
    return MixtureParams(weights, mean.expand(k, -1).clone(), covs, gaussian.precisions_cholesky(covs, COVARIANCE))


def planted_start(params: Any) -> Any:
    """A start in another basin, planted from a fit: the two components with the closest means merged into one
    (moment-matched) and the heaviest other component split in two along its principal axis (±1 std): the classic
    merge/split local optimum of a mixture, one cluster covered by two components and two by one."""
    from implicit_em import gaussian
    from implicit_em.mixture._stats import MixtureParams

    w, mu, cov = params.weights.clone(), params.means.clone(), params.covariances.clone()
    k = len(w)
    dist = torch.cdist(mu, mu) + torch.diag(torch.full((k,), math.inf, dtype=mu.dtype))
    a, b = divmod(int(torch.argmin(dist)), k)
    wa, wb = float(w[a]), float(w[b])
    m = (wa * mu[a] + wb * mu[b]) / (wa + wb)
    spread = (wa * torch.outer(mu[a] - m, mu[a] - m) + wb * torch.outer(mu[b] - m, mu[b] - m)) / (wa + wb)
    cov_m = (wa * cov[a] + wb * cov[b]) / (wa + wb) + spread
    others = [j for j in range(k) if j not in (a, b)]
    c = max(others, key=lambda j: float(w[j]))
    evals, evecs = torch.linalg.eigh(cov[c])
    offset = evecs[:, -1] * evals[-1].sqrt()
    w[a], mu[a], cov[a] = wa + wb, m, cov_m
    w[b], mu[b], cov[b] = w[c] / 2, mu[c] + offset, cov[c]
    w[c], mu[c] = w[c] / 2, mu[c] - offset
    return MixtureParams(w, mu, cov, gaussian.precisions_cholesky(cov, COVARIANCE))


def identity_sizes(data: Any, params: Any, pr: Problem) -> tuple[float, float, float, float]:
    r"""§3.2's update structure at one point, as absolute residuals and the sizes they are read against (float64):
    (max |autograd ∇_μ − Fisher's direction|, max |Fisher's direction|, max |EM's mean step − Xu–Jordan's
    preconditioned gradient|, max |EM's mean step|).

    - Fisher's identity: autograd's ∇_μ of the mean log-likelihood equals the responsibility-weighted direction
      Λ_k (Σ_n r_nk x_n − N_k μ_k) / N built from the library's E-step statistics;
    - Xu–Jordan: EM's mean step (one library EM iteration) equals that gradient under the positive-definite
      preconditioner Σ_k N / N_k.
    """
    from implicit_em import gaussian
    from implicit_em.mixture._em import full_pass
    from implicit_em.mixture._fitting import CHUNK

    summary = full_pass(data, params, COVARIANCE, pr.shift, CHUNK)
    n = float(summary.n)
    centred = params.means.double() - pr.shift
    prec = gaussian.precisions(params.precisions_cholesky.double(), COVARIANCE)
    fisher = torch.einsum("kab,kb->ka", prec, summary.sx - summary.nk[:, None] * centred) / n  # data units
    g = gradient(pack(params, pr), pr, penalised=False)[1][pr.k : pr.k + pr.k * pr.d].reshape(pr.k, pr.d) / pr.scale
    step = summary.sx / (summary.nk[:, None] + 10 * torch.finfo(torch.float64).eps) - centred  # the M-step's mean
    xu_jordan = torch.einsum("kab,kb->ka", params.covariances.double(), g) * (n / summary.nk[:, None])
    return (
        float((g - fisher).abs().max()),
        float(fisher.abs().max()),
        float((step - xu_jordan).abs().max()),
        float(step.abs().max()),
    )


def fisher_and_xu_jordan(data: Any, params: Any, pr: Problem) -> tuple[float, float]:
    """Both identities at one point, each residual relative to its own quantity's size at that point. Where the
    gradient has vanished (a fixed point) this divides round-off by round-off: read a path with
    :func:`path_identities` instead."""
    f_res, f_size, x_res, x_size = identity_sizes(data, params, pr)
    return f_res / f_size, x_res / x_size


def path_identities(data: Any, points: list[Any], pr: Problem) -> tuple[float, float]:
    """Both identities along one path (its checked points): the worst absolute residual over the points relative
    to the largest size of its quantity over them (the means gradient; EM's mean step). Issue 25's mend of the
    check: read at the same point, a path on which EM converges within the checked passes divided round-off by
    a vanished gradient (relative residuals up to 4.6 at full seed 0, with absolute ones <= 2.2e-15)."""
    sizes = [identity_sizes(data, p, pr) for p in points]
    fisher = max(s[0] for s in sizes) / max(max(s[1] for s in sizes), torch.finfo(torch.float64).tiny)
    xu_jordan = max(s[2] for s in sizes) / max(max(s[3] for s in sizes), torch.finfo(torch.float64).tiny)
    return fisher, xu_jordan


# -- the experiment --------------------------------------------------------------------------------------------


def _practical(
    cfg: Config, data: Any, test: Any, start: Any, shift: Tensor, scale: float, std: float, s: int
) -> dict[str, Any]:
    """The practical arms from one start (the issue-10 experiment, reported, not deciding): batch EM, online EM
    and mini-batch Adam (gd, gd with another order, gd at half the rate), each scored after every pass."""
    order = 1000 * (cfg.seed + 3) + 10 * s  # mini-batch orders, distinct per start and arm
    paths: dict[str, list[Any]] = {"em": em_path(data, start, shift, cfg.passes)}
    paths["online_em"] = online_em_path(data, start, shift, cfg.passes, cfg.batch_size, order)
    epochs: dict[str, int] = {}
    arms = {"gd": (cfg.learning_rate, order), "gd, other order": (cfg.learning_rate, order + 1)}
    arms["gd, half the rate"] = (cfg.learning_rate / 2, order)
    for name, (lr, seed) in arms.items():
        paths[name], epochs[name] = gd_path(data, start, shift, scale, cfg.passes, cfg.batch_size, lr, cfg.tol, seed)
    curves = {name: [score(data, p, shift) for p in path] for name, path in paths.items()}
    means = {name: [p.means.numpy() / std for p in path] for name, path in paths.items()}
    gain_gd, move_gd, polished = em_polish(data, paths["gd"][-1], shift, cfg.polish_iter, cfg.polish_tol)
    gain_online, move_online, _ = em_polish(data, paths["online_em"][-1], shift, cfg.polish_iter, cfg.polish_tol)
    one_step = em_path(data, paths["gd"][-1], shift, 1)[-1]
    gaps = {
        name: path_gap(curves["em"], curves[name], means["em"], means[name], match=False)
        for name in ("gd", "online_em", "gd, half the rate")
    }
    route = {name: off_path(means[name], means[ref]) for name, ref in (("gd", "em"), ("gd, other order", "gd"))}
    floor = path_gap(curves["gd"], curves["gd, other order"], means["gd"], means["gd, other order"], match=False)
    target = curves["em"][-1]
    return {
        "path_em": paths["em"],
        "path_gd": paths["gd"],
        "gd_end": paths["gd"][-1],
        "curves": curves,
        "means": means,
        "epochs": epochs,
        "stopped": epochs["gd"] < cfg.passes,  # gd's own plateau rule declared convergence
        "least_weight": (float(paths["gd"][-1].weights.min()), float(polished.weights.min())),
        "gain_gd": gain_gd,
        "move_gd": move_gd / std,
        "gain_online": gain_online,
        "move_online": move_online / std,
        "gain_start": curves["em"][-1] - curves["em"][0],  # EM's own P passes from the start
        "one_step_gd": float((one_step.means - paths["gd"][-1].means).abs().max()) / std,
        "gaps": gaps,
        "floor": floor,
        "route": route,
        "pace": {name: passes_to(c, target, cfg.path_gap_max) for name, c in curves.items()},
        "held_out": {name: score(test, path[-1], shift) for name, path in paths.items()},
        "end_means_gap": matched_gap(means["em"][-1], means["gd"][-1]),
    }


def _issue10_rule(runs: list[dict[str, Any]], em_vs_em: list[tuple[float, float]], cfg: Config) -> Verdict:
    """The verdict the issue-10 rule gives on the practical arm (reported beside the certified one): EM from gd's
    end gains ≤ 0.01 and moves ≤ 0.1 std (fixed points), gd's per-pass path within max(0.01, its own noise) of
    EM's (path), controls: EM gains from the start, EM–EM paths from two starts differ."""
    fixed = max(r["gain_gd"] for r in runs) <= cfg.fixed_gain_max and max(r["move_gd"] for r in runs) <= (
        cfg.fixed_move_max
    )
    path = max(r["gaps"]["gd"][0] for r in runs) <= max(cfg.path_gap_max, max(r["floor"][0] for r in runs)) and max(
        r["gaps"]["gd"][1] for r in runs
    ) <= max(cfg.path_means_max, max(r["floor"][1] for r in runs))
    controls = min(r["gain_start"] for r in runs) > cfg.fixed_gain_max and min(g[0] for g in em_vs_em) > (
        cfg.path_gap_max
    )
    return decide_issue10(fixed, path, controls)


def _practical_metrics(runs: list[dict[str, Any]], em_vs_em: list[tuple[float, float]]) -> dict[str, Any]:
    per_start = lambda f: [f(r) for r in runs]  # noqa: E731
    return {
        "EM's gain from gd's end, per start (nats/sample)": per_start(lambda r: r["gain_gd"]),
        "EM's means move from gd's end, per start (data std)": per_start(lambda r: r["move_gd"]),
        "gd stopped by its own plateau rule, per start": per_start(lambda r: r["stopped"]),
        "smallest weight at gd's end and after EM from it, per start": per_start(lambda r: r["least_weight"]),
        "one EM step from gd's end, per start (data std)": per_start(lambda r: r["one_step_gd"]),
        "EM's gain from online EM's end, per start (nats/sample)": per_start(lambda r: r["gain_online"]),
        "control: EM's gain from the start, per start (nats/sample)": per_start(lambda r: r["gain_start"]),
        "gd–EM path gap, per start (nats/sample)": per_start(lambda r: r["gaps"]["gd"][0]),
        "gd–EM means path gap, per start (data std)": per_start(lambda r: r["gaps"]["gd"][1]),
        "control: gd–gd (other mini-batch order) path gap, per start (nats/sample)": per_start(lambda r: r["floor"][0]),
        "control: gd–gd (other mini-batch order) means path gap, per start (data std)": per_start(
            lambda r: r["floor"][1]
        ),
        "control: EM–EM path gap, per pair of starts (nats/sample)": [g[0] for g in em_vs_em],
        "control: EM–EM means path gap, per pair of starts (data std)": [g[1] for g in em_vs_em],
        "gd's means off EM's route, any pace, per start (data std)": per_start(lambda r: r["route"]["gd"]),
        "control: gd (other order) off gd's route, any pace, per start (data std)": per_start(
            lambda r: r["route"]["gd, other order"]
        ),
        "gd at half the rate–EM path gap, per start (nats/sample)": per_start(
            lambda r: r["gaps"]["gd, half the rate"][0]
        ),
        "online EM–EM path gap, per start (nats/sample)": per_start(lambda r: r["gaps"]["online_em"][0]),
        "passes to within 0.01 of EM's end, per start": per_start(lambda r: r["pace"]),
        "gd epochs run (its plateau rule), per start": per_start(lambda r: r["epochs"]),
        "full-data log-likelihood at the start, per start": per_start(lambda r: r["curves"]["em"][0]),
        "EM's full-data log-likelihood after P passes, per start": per_start(lambda r: r["curves"]["em"][-1]),
        "held-out log-likelihood at the end, per start": per_start(lambda r: r["held_out"]),
        "|held-out em − gd| at the end, per start": per_start(lambda r: abs(r["held_out"]["em"] - r["held_out"]["gd"])),
        "matched means gap em–gd at the end, per start (data std)": per_start(lambda r: r["end_means_gap"]),
    }


def run(cfg: Config, ctx: Context) -> Result:
    from implicit_em.mixture._data import DataSource

    truth = _truth(cfg.k, cfg.d, cfg.seed)
    rng = np.random.RandomState(cfg.seed + 1)
    x_np, x_test_np = _draw(*truth, cfg.n, rng), _draw(*truth, cfg.n // 2, rng)
    data = DataSource(x_np, torch.device("cpu"), torch.float64)
    test = DataSource(x_test_np, torch.device("cpu"), torch.float64)
    shift, scale = _shift_scale(torch.from_numpy(x_np))
    pr = _problem(x_np, cfg)
    std = float(x_np.std())  # the unit of every means distance
    start_rng = np.random.RandomState(cfg.seed + 2)
    starts = [_start(x_np, cfg.k, start_rng, cfg.starts) for _ in range(cfg.n_starts)]

    runs: list[dict[str, Any]] = []
    for s, start in enumerate(starts):
        r = _practical(cfg, data, test, start, shift, scale, std, s)
        # the certified arms from the same start
        theta_l, grad_l, evals, newton = _lbfgs(pack(start, pr), pr, cfg)
        end_l = unpack(theta_l, pr)
        end_e, grad_e, em_iter, step_e = em_fixed_point(
            data, start, pr, cfg.em_step_tol, cfg.em_max_iter, cfg.em_block, cfg.em_reg_covar
        )
        curv_l, curv_e = curvature(theta_l, pr, cfg.hessian_chunk), curvature(pack(end_e, pr), pr, cfg.hessian_chunk)
        ll_l, ll_e = value(end_l, pr), value(end_e, pr)
        gap_means = matched_gap(end_l.means.numpy() / std, end_e.means.numpy() / std)
        gap_theta, dll = theta_gap(end_l, end_e, pr), abs(ll_l - ll_e)
        # test (ii): EM run on from L-BFGS's certified end, to its own certificate, stays at that point
        on = em_fixed_point(data, end_l, pr, cfg.em_step_tol, cfg.em_max_iter, cfg.em_block, cfg.em_reg_covar)[0]
        radius = cfg.same_factor * same_radius(cfg.gtol, cfg.curv_floor, curv_l[2], curv_l[2])
        ll_on = value(on, pr)
        stay = max(theta_gap(on, end_l, pr) / radius, abs(ll_on - ll_l) / (cfg.same_ll_rel * abs(ll_l)))
        # where the practical arm (Adam, plateau rule) stopped: its ‖∇‖ and curvature, and where L-BFGS from
        # there goes (EM's certified end from the same start, or another stationary point)
        theta_a = pack(r["gd_end"], pr)
        curv_a = curvature(theta_a, pr, cfg.hessian_chunk)
        theta_al, grad_al, _, _ = _lbfgs(theta_a, pr, cfg)
        curv_al = curvature(theta_al, pr, cfg.hessian_chunk)
        end_al = unpack(theta_al, pr)
        ll_al = value(end_al, pr)
        kind_al = classify(theta_gap(end_al, end_e, pr), abs(ll_al - ll_e), ll_e, curv_al, curv_e, cfg)
        checked = sorted({p for p in cfg.identity_passes if p <= cfg.passes})
        residuals = [path_identities(data, [r[name][p] for p in checked], pr) for name in ("path_em", "path_gd")]
        del r["path_em"], r["path_gd"]
        r.update(
            grad_lbfgs=grad_l,
            evals_lbfgs=[evals, newton],
            grad_em=grad_e,
            iter_em=em_iter,
            step_em=step_e,
            curv_lbfgs=curv_l,
            curv_em=curv_e,
            end_gap=gap_means,
            end_theta_gap=gap_theta,
            end_radius=cfg.same_factor * same_radius(cfg.gtol, cfg.curv_floor, curv_l[2], curv_e[2]),
            end_dll=dll,
            kind=classify(gap_theta, dll, ll_e, curv_l, curv_e, cfg),
            decides=(
                "L-BFGS not certified"
                if not grad_l <= cfg.gtol
                else "EM not certified"
                if not step_e <= cfg.em_step_tol
                else "degenerate end (slow region)"
                if not min(curv_l[2], curv_e[2]) >= cfg.curv_floor
                else "decides"
            ),
            stay=stay,
            gain_lbfgs=ll_on - ll_l,
            move_lbfgs=float((on.means - end_l.means).norm(dim=1).max()) / std,
            grad_practical=float(gradient(theta_a, pr, penalised=False)[1].norm()),
            curv_practical=curv_a,
            grad_practical_lbfgs=grad_al,
            curv_practical_lbfgs=curv_al,
            kind_practical=kind_al,
            ll_practical=[value(r["gd_end"], pr), ll_al],
            ll_lbfgs=ll_l,
            ll_em=ll_e,
            least_weight_certified=(float(end_l.weights.min()), float(end_e.weights.min())),
            fisher=max(x[0] for x in residuals),
            xu_jordan=max(x[1] for x in residuals),
            end_em=end_e,
        )
        runs.append(r)

    ref, curv_ref = runs[0]["end_em"], runs[0]["curv_em"]
    ll_ref = runs[0]["ll_em"]
    # control c2: a planted stationary point that is no optimum (K copies of the one-Gaussian fit)
    theta_g = pack(one_gaussian_point(x_np, cfg.k, cfg.prior, pr.logdet), pr)
    grad_g, curv_g = float(gradient(theta_g, pr)[1].norm()), curvature(theta_g, pr, cfg.hessian_chunk)
    ll_g = value(unpack(theta_g, pr), pr)
    kind_g = classify(theta_gap(unpack(theta_g, pr), ref, pr), abs(ll_g - ll_ref), ll_ref, curv_g, curv_ref, cfg)
    told_g = grad_g <= cfg.gtol and kind_g != "same point"
    # reported: L-BFGS from a merge/split of EM's certified end at start 0 (another basin, when there is one)
    theta_p, grad_p, _, _ = _lbfgs(pack(planted_start(ref), pr), pr, cfg)
    curv_p = curvature(theta_p, pr, cfg.hessian_chunk)
    end_p = unpack(theta_p, pr)
    ll_p = value(end_p, pr)
    kind_p = classify(theta_gap(end_p, ref, pr), abs(ll_p - ll_ref), ll_ref, curv_p, curv_ref, cfg)
    # identity: the Hungarian matching finds EM's end under reversed labels to be the same point
    reversed_ref = type(ref)(*(t.flip(0) for t in ref))
    em_vs_em = [
        path_gap(a["curves"]["em"], b["curves"]["em"], a["means"]["em"], b["means"]["em"], match=True)
        for a, b in itertools.combinations(runs, 2)
    ]

    decided = [r for r in runs if r["decides"] == "decides"]
    worst = lambda key: max((r[key] for r in decided), default=math.nan)  # noqa: E731
    crit: list[Criterion] = [
        gate(
            "starts that decide (both ends certified, neither degenerate)",
            len(decided),
            ">=",
            cfg.min_decided,
        ),
        criterion("‖∇‖ at EM's fixed point, worst deciding start", worst("grad_em"), "<=", cfg.gtol),
        criterion(
            "EM run on from L-BFGS's certified end: distance over the same-point bound, worst deciding start",
            worst("stay"),
            "<=",
            1.0,
        ),
        criterion(
            "control: the practical arm's end fails the certificate, least ‖∇‖",
            min(r["grad_practical"] for r in runs),
            ">",
            cfg.gtol,
        ),
        criterion(
            "control: planted stationary point (K copies of the one-Gaussian fit), certified and told apart: "
            "its Hessian's largest eigenvalue (no optimum)",
            curv_g[1] if told_g else math.nan,
            ">",
            -cfg.curv_floor,
        ),
        criterion(
            "control: EM's gain from the start, least (nats/sample)",
            min(r["gain_start"] for r in runs),
            ">",
            cfg.fixed_gain_max,
        ),
        identity(
            "Fisher's identity along EM's and gd's paths, worst relative residual",
            max(r["fisher"] for r in runs),
            "<=",
            cfg.identity_tol,
        ),
        identity(
            "Xu–Jordan preconditioned gradient = EM's mean step, worst relative residual",
            max(r["xu_jordan"] for r in runs),
            "<=",
            cfg.identity_tol,
        ),
        identity(
            "Hungarian matching: EM's end under reversed labels, θ gap",
            theta_gap(reversed_ref, ref, pr),
            "<=",
            1e-12,
        ),
    ]
    shared_ok = all(c.passed for c in crit[1:3])
    controls_ok = all(c.passed for c in crit[3:6])
    verdict = gated(decide(shared_ok, controls_ok), crit)
    old = _issue10_rule(runs, em_vs_em, cfg)

    figures = [_plot_curves(runs, ctx), _plot_gaps(runs, em_vs_em, cfg, ctx)]
    per_start = lambda f: [f(r) for r in runs]  # noqa: E731
    metrics: dict[str, Any] = {
        "L-BFGS's ‖∇‖ at its end, per start": per_start(lambda r: r["grad_lbfgs"]),
        "L-BFGS's evaluations and Newton steps after it, per start": per_start(lambda r: r["evals_lbfgs"]),
        "EM's ‖∇‖ at its fixed point, per start": per_start(lambda r: r["grad_em"]),
        "EM's iterations to the certificate, per start": per_start(lambda r: r["iter_em"]),
        "EM's last step at its fixed point (largest change of θ), per start": per_start(lambda r: r["step_em"]),
        "Hessian's eigenvalues (least, largest, least |λ|) at L-BFGS's end, per start": per_start(
            lambda r: list(r["curv_lbfgs"])
        ),
        "Hessian's eigenvalues (least, largest, least |λ|) at EM's fixed point, per start": per_start(
            lambda r: list(r["curv_em"])
        ),
        "θ gap L-BFGS–EM at the certified ends and the same-point bound, per start (θ units)": per_start(
            lambda r: [r["end_theta_gap"], r["end_radius"]]
        ),
        "matched means gap L-BFGS–EM at the certified ends, per start (data std)": per_start(lambda r: r["end_gap"]),
        "|Δ objective| L-BFGS–EM at the certified ends, per start (nats/sample)": per_start(lambda r: r["end_dll"]),
        "certified ends: same point, another optimum, another stationary point or slow region, per start": per_start(
            lambda r: r["kind"]
        ),
        "the start decides, or why not, per start": per_start(lambda r: r["decides"]),
        "objective at L-BFGS's and EM's certified ends, per start (nats/sample)": per_start(
            lambda r: [r["ll_lbfgs"], r["ll_em"]]
        ),
        "smallest weight at L-BFGS's and EM's certified ends, per start": per_start(
            lambda r: list(r["least_weight_certified"])
        ),
        "EM run on from L-BFGS's certified end: distance over the same-point bound, per start": per_start(
            lambda r: r["stay"]
        ),
        "EM's gain from L-BFGS's certified end, per start (nats/sample)": per_start(lambda r: r["gain_lbfgs"]),
        "EM's means move from L-BFGS's certified end, per start (data std)": per_start(lambda r: r["move_lbfgs"]),
        "control: ‖∇‖ at the practical arm's end (Adam, plateau rule), per start": per_start(
            lambda r: r["grad_practical"]
        ),
        "Hessian's eigenvalues (least, largest, least |λ|) at the practical arm's end, per start": per_start(
            lambda r: list(r["curv_practical"])
        ),
        "L-BFGS from the practical arm's end: ‖∇‖ there, per start": per_start(lambda r: r["grad_practical_lbfgs"]),
        "L-BFGS from the practical arm's end: Hessian's eigenvalues (least, largest, least |λ|), per start": (
            per_start(lambda r: list(r["curv_practical_lbfgs"]))
        ),
        "L-BFGS from the practical arm's end against EM's certified end, per start": per_start(
            lambda r: r["kind_practical"]
        ),
        "objective at the practical arm's end and at L-BFGS's from it, per start (nats/sample)": (
            per_start(lambda r: r["ll_practical"])
        ),
        "control: planted stationary point (one Gaussian ×K), ‖∇‖": grad_g,
        "control: planted stationary point (one Gaussian ×K), Hessian's eigenvalues (least, largest, least |λ|)": (
            list(curv_g)
        ),
        "control: planted stationary point (one Gaussian ×K) against EM's end at start 0": kind_g,
        "planted merge/split of EM's end at start 0, L-BFGS's ‖∇‖ at its end": grad_p,
        "planted merge/split of EM's end at start 0, Hessian's eigenvalues (least, largest, least |λ|)": list(curv_p),
        "planted merge/split of EM's end at start 0, against EM's end": kind_p,
        "planted merge/split of EM's end at start 0, |Δ objective| to EM's end (nats/sample)": abs(ll_p - ll_ref),
        "Fisher's identity, worst relative residual along the paths, per start": per_start(lambda r: r["fisher"]),
        "Xu–Jordan identity, worst relative residual along the paths, per start": per_start(lambda r: r["xu_jordan"]),
        "verdict under the issue-10 rule (practical arm decides)": old,
        **_practical_metrics(runs, em_vs_em),
        "K, D, N, starts, passes": [cfg.k, cfg.d, cfg.n, cfg.n_starts, cfg.passes],
    }
    return Result(
        verdict,
        _summary(verdict, shared_ok, controls_ok, crit, runs, em_vs_em, old, kind_g, kind_p, cfg),
        metrics,
        crit,
        figures,
        details=_details(cfg),
    )


def _summary(
    verdict: Verdict,
    shared_ok: bool,
    controls_ok: bool,
    crit: list[Criterion],
    runs: list[dict[str, Any]],
    em_vs_em: list[tuple[float, float]],
    old: Verdict,
    kind_g: str,
    kind_p: str,
    cfg: Config,
) -> str:
    n = len(runs)
    kinds = [r["kind"] for r in runs]
    reasons = [r["decides"] for r in runs]
    certified = (
        f"{reasons.count('decides')} of {n} starts decide (gate: at least {cfg.min_decided}; "
        + ", ".join(f"{reasons.count(k)} {k}" for k in dict.fromkeys(reasons))
        + f"). L-BFGS ends at ‖∇‖ ≤ {max(r['grad_lbfgs'] for r in runs):.1e} (bar {cfg.gtol:g}); EM's last step ≤ "
        f"{max(r['step_em'] for r in runs):.1e} (bar {cfg.em_step_tol:g}); over the {2 * n} ends the Hessian's "
        f"largest eigenvalue is at most {max(max(r['curv_lbfgs'][1], r['curv_em'][1]) for r in runs):.1e}, its "
        f"least |eigenvalue| at least {min(min(r['curv_lbfgs'][2], r['curv_em'][2]) for r in runs):.1e}. "
    )
    tally = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
    ends = (
        f"From the same start L-BFGS's and EM's ends are: {tally} (θ gap up to "
        f"{max(r['end_theta_gap'] for r in runs):.1e} against a same-point bound of at least "
        f"{min(r['end_radius'] for r in runs):.1e}; matched means gap up to {max(r['end_gap'] for r in runs):.1e} "
        f"data std; reported: which point a start leads to is a path matter). "
    )
    if verdict == "UNDECIDED":
        failed = [c.metric for c in crit if c.role == "gate" and not c.passed]
        return certified + ends + "UNDECIDED: the fixed-point half cannot be judged (" + "; ".join(failed) + " fails)."
    shared = (
        f"Fixed points {'shared' if shared_ok else 'NOT shared'} at the deciding starts: at EM's fixed points ‖∇‖ ≤ "
        f"{crit[1].measured:.1e} (bar {cfg.gtol:g}); EM run on from L-BFGS's certified end stays within "
        f"{crit[2].measured:.1e} of the same-point bound. "
    )
    practical_kinds = [r["kind_practical"] for r in runs]
    diag = ", ".join(f"{practical_kinds.count(k)} {k}" for k in dict.fromkeys(practical_kinds))
    controls = (
        f"Controls: the practical arm's end (Adam, plateau rule) has ‖∇‖ ≥ {crit[3].measured:.1e} (fails the "
        f"certificate: {'yes' if crit[3].passed else 'NO'}; L-BFGS from there, against EM's end from the same "
        f"start: {diag}); the planted stationary point (the one-Gaussian fit ×K) is certified, told apart "
        f"({kind_g}) and not called an optimum: {'yes' if crit[4].passed else 'NO'} (largest eigenvalue "
        f"{crit[4].measured:.1e}); EM gains at least {crit[5].measured:.2f} nats/sample from every start. A "
        f"merge/split of EM's end (reported) leads L-BFGS to: {kind_p}. "
    )
    path = (
        "Path: §3.2's update structure holds as identities along the paths (Fisher's identity, Xu–Jordan, worst "
        f"residuals {crit[6].measured:.1e}, {crit[7].measured:.1e}; not evidence); the trajectories, which §3.2 "
        f"disclaims, differ (per-pass gd–EM gap up to {max(r['gaps']['gd'][0] for r in runs):.3f} nats/sample, "
        f"EM–EM between starts at least {min(g[0] for g in em_vs_em):.3f}). "
    )
    practical = (
        f"Practical arm (not deciding): EM from Adam's end gains up to {max(r['gain_gd'] for r in runs):.1e} "
        f"nats/sample; the issue-10 rule on it says {old}."
    )
    tail = "" if controls_ok else " A control failed, so the fixed-point half may hold vacuously."
    return certified + shared + ends + controls + path + practical + tail


_STARTS_TEXT = {
    "k-means++": "{k} k-means++ seeds, then one hard assignment's cells (each cell's share of the rows, mean and "
    "covariance + reg_covar)",
    "k-means++ pulled halfway": "{k} k-means++ seeds, then one hard assignment's cells (each cell's share of the "
    "rows, mean and covariance + reg_covar), pulled halfway toward the data mean (every mean moved half its "
    "distance to it, the between-cell spread lost added to every covariance)",
    "data rows": "{k} distinct data rows as means with the data's covariance and equal weights",
}


def _details(cfg: Config) -> str:
    logdet = cfg.wishart_dof + (1.0 if cfg.mean_prior else 0.0)
    return (
        f"{cfg.n_starts} starts, each "
        + _STARTS_TEXT[cfg.starts].format(k=cfg.k)
        + ". Objective of the certified arms: the mean log-likelihood with a prior on every component: a Wishart "
        f"(ν = D + 1 + {cfg.wishart_dof:g}, scale s⁻²·I, worth {cfg.prior:g} pseudo-sample of the data's spread) on "
        f"its precision, a normal N(data mean, (κ P_j)⁻¹), κ = {cfg.mean_prior:g}, on its mean, and a symmetric "
        f"Dirichlet with α − 1 = {cfg.weight_prior:g} on the weights (EM's exact M-step: π_j = (N_j + α − 1)/(N + "
        "K(α − 1)), μ_j = (Σ r x + κ x̄)/(N_j + κ), Σ_j = (C_j + prior·s²·I)/(N_j + "
        f"{logdet:g}), C_j the scatter about μ_j plus κ(μ_j − x̄)(μ_j − x̄)ᵀ). Certified arms: full-batch float64 "
        "L-BFGS (strong-Wolfe line search, "
        f"history 50, at most {cfg.lbfgs_max_evals} evaluations, then Newton steps where it stalls) in θ = (logits, "
        "standardised means, log-diagonal and off-diagonal of the precision's Cholesky factor), until ‖∇_θ‖ ≤ "
        f"{cfg.gtol:g}; EM (the library's E-step statistics, the priors' M-step) until one iteration changes θ by "
        f"at most {cfg.em_step_tol:g}, checked every {cfg.em_block} iterations, at most {cfg.em_max_iter}. The "
        "Hessian is exact (float64; the common logit shift, which changes nothing, dropped). Two ends are one point "
        f"when their θ gap after the Hungarian matching is within {cfg.same_factor:g} × gtol (1/min|λ_a| + "
        f"1/min|λ_b|) and their objectives within {cfg.same_ll_rel:g} relative; an end with min|λ| < "
        f"{cfg.curv_floor:g} is degenerate (its start does not decide). Practical arm (the issue-10 experiment, "
        f"reported): {cfg.passes} passes per fitter; online EM and gd on mini-batches of {cfg.batch_size} "
        f"({math.ceil(cfg.n / cfg.batch_size)} steps per pass), gd with Adam at {cfg.learning_rate} halved on "
        "plateaus (tol 1e-5) and held at its end, scored after every pass by the library's exact full-data mean "
        "log-likelihood (no prior); EM is run on from its end with the library's reg_covar."
    )


def _plot_curves(runs: list[dict[str, Any]], ctx: Context) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.4), sharey=False, squeeze=False)
    for s, (ax, r) in enumerate(zip(axes[0], runs, strict=True)):
        end = max(c[-1] for c in r["curves"].values())
        for name, curve in r["curves"].items():
            ax.plot(range(len(curve)), curve, lw=1.2, ls="--" if "," in name else "-", label=name)
        lo = min(c[1] for c in r["curves"].values())
        ax.set_ylim(max(lo, end - 1.5), end + 0.05)
        ax.set_title(f"start {s}", fontsize=9)
        ax.set_xlabel("pass over the data")
    axes[0][0].set_ylabel("full-data mean log-likelihood")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("every fitter scored after every pass, from the same starts", fontsize=10)
    fig.tight_layout()
    return ctx.save_figure(fig, "same_optimum")


def _plot_gaps(runs: list[dict[str, Any]], em_vs_em: list[tuple[float, float]], cfg: Config, ctx: Context) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    pairs = {
        "gd − EM": ("gd", "em", "C0"),
        "gd − gd, other order": ("gd", "gd, other order", "C1"),
        "gd at half the rate − EM": ("gd, half the rate", "em", "C2"),
        "online EM − EM": ("online_em", "em", "C3"),
    }
    for label, (first, second, color) in pairs.items():
        for s, r in enumerate(runs):
            gap = np.abs(np.subtract(r["curves"][first], r["curves"][second]))[1:]
            ax.plot(range(1, len(gap) + 1), np.maximum(gap, 1e-12), color=color, lw=1, label=label if s == 0 else None)
    for i, (run_a, run_b) in enumerate(itertools.combinations(runs, 2)):
        gap = np.abs(np.subtract(run_a["curves"]["em"], run_b["curves"]["em"]))[1:]
        ax.plot(
            range(1, len(gap) + 1),
            np.maximum(gap, 1e-12),
            color="grey",
            lw=0.8,
            ls=":",
            label="EM − EM, two starts" if i == 0 else None,
        )
    ax.axhline(cfg.path_gap_max, color="k", ls="--", lw=0.8, label=f"tolerance {cfg.path_gap_max}")
    ax.set_yscale("log")
    ax.set_xlabel("pass over the data")
    ax.set_ylabel("|Δ full-data log-likelihood| (nats/sample)")
    ax.legend(fontsize=7)
    ax.set_title("path gaps per pass, every start")
    fig.tight_layout()
    return ctx.save_figure(fig, "same_optimum_gaps")


EXPERIMENT = Experiment(
    name="same_optimum",
    title="EM and gradient descent: same fixed points, same path?",
    claim="This regime optimizes the same objective as classical EM on mixture models, with the same "
    "responsibilities governing both the fixed points and the path toward them.",
    source="paper §4.1 (Unsupervised regime)",
    Config=Config,
    run=run,
)
