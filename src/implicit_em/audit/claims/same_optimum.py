r"""EM and gradient descent on the same mixture objective: same fixed points, same path? (paper §4.1)

Claim (paper §4.1, of gradient descent on :math:`L = -\log\sum_j \exp(-d_j)`): "This regime optimizes the same
objective as classical EM on mixture models, with the same responsibilities governing both the fixed points and
the path toward them." Bounded by §3.2: "the gradient is the responsibility-weighted update direction (Fisher’s
identity), and the EM step is that same gradient under a positive-definite preconditioner (Xu and Jordan,
1996)—the two methods share update structure, though not trajectories (Zhang et al., 2020)."

Method. A known full-covariance mixture (quick K = 4, D = 2, N = 5000; full K = 8, D = 8, N = 50,000), and
``n_starts`` starts away from its optimum (k-means++ cells pulled halfway toward the data mean). The objective is the
mean log-likelihood plus a prior worth one pseudo-sample on every parameter of every component (a Wishart, a normal
prior on the mean, a Dirichlet on the weights; ``testbeds.mixture_ends``), which EM's closed-form M-step maximises
exactly. Fixed points (deciding): from every start, full-batch float64 L-BFGS (Newton steps where its line search
stalls) until ‖∇_θ‖ ≤ gtol, and EM until its own step is ≤ em_step_tol; the exact Hessian's eigenvalues at each end.
Two ends are one point when their θ gap (components matched) is within ``same_factor`` × gtol (1/min|λ_a| +
1/min|λ_b|) and their objectives within ``same_ll_rel`` relative. Gate (else UNDECIDED): a start decides when both
ends are certified and neither is degenerate (min|λ| ≥ curv_floor); at least ``min_decided`` starts must. Tests at
the deciding starts: (i) ‖∇‖ ≤ gtol at EM's fixed point; (ii) EM run on from L-BFGS's end stays within the
same-point bound. Controls: (c1) the practical arm's end (Adam stopped by its plateau rule) fails the certificate;
(c2) a planted saddle (K copies of the one-Gaussian fit, gradient 0) is certified, told apart from EM's end and
has a positive eigenvalue; (c3) EM gains more than ``start_gain_min`` from every start. SUPPORTED: (i), (ii) and
the controls hold; PARTIAL: (i) and (ii) with a failed control; REFUTED: (i) or (ii) fails. Path: §3.2 claims the
update structure and disclaims trajectories, so Fisher's identity and Xu–Jordan are checked along EM's and gd's
paths as identities, and the per-pass gaps of the practical arm (batch EM, online EM, Adam; the library's fitters
read after every pass, ``testbeds.mixture_paths``) are reported, not tested. docs/claims/same_optimum.md has the
rule's reasons, its pilots and the earlier rules with their outcomes.
"""

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import implicit_em.audit.testbeds.mixture_ends as ends
import implicit_em.audit.testbeds.mixture_paths as paths
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gate, gated, identity
from implicit_em.audit.metrics import Metrics
from implicit_em.mixture._data import DataSource

__all__ = ["EXPERIMENT", "Certificate", "Config", "Practical", "Prior", "Setting", "criteria", "figures", "measure"]
__all__ += ["run", "summary", "verdict"]


@dataclass(frozen=True)
class Setting:
    """The data and the starts."""

    k: int = 4  # components of the true mixture and of every fit
    d: int = 2  # dimension
    n: int = 5000  # training rows (and n // 2 held out)
    n_starts: int = 5  # starts away from the optimum (at least 3 must decide: ``Config.min_decided``)
    starts: str = "k-means++ pulled halfway"  # ``mixture_paths.STARTS``; the other two are the earlier starts


@dataclass(frozen=True)
class Prior:
    """The certified arms' prior, in pseudo-samples per component (all 0 but ``wishart``: the earlier objective)."""

    wishart: float = 1.0  # strength of the Wishart (scale s⁻²·I) on every precision
    dof: float = 1.0  # ν − D − 1 of that Wishart (1: ν = D + 2, Fraley and Raftery's)
    weights: float = 1.0  # α − 1 of a symmetric Dirichlet on the weights
    means: float = 1.0  # κ of the normal prior N(data mean, (κ P_j)⁻¹) on every mean


@dataclass(frozen=True)
class Certificate:
    """The certified arms, their certificates and the same-point bound (docs/claims/same_optimum.md derives them)."""

    # ‖∇_θ‖ ≤ gtol certifies an end: float64 round-off of the gradient is ~1e-13 here, so the bar is reachable
    gtol: float = 1e-8
    # min|λ| below this: a degenerate end, whose radius gtol/min|λ| ≥ 1e-2 θ units locates nothing ("slow region");
    # a strict maximum has its largest eigenvalue ≤ −curv_floor
    curv_floor: float = 1e-6
    # in the quadratic model an end lies within gtol/min|λ| of its stationary point; 10 covers the cubic remainder
    same_factor: float = 10.0
    # one point's objectives differ by ≲ gtol²/min|λ| (~1e-14): far above that, far below a distinct optimum's gap
    same_ll_rel: float = 1e-9
    em_step_tol: float = 1e-12  # EM's own certificate: one iteration changes θ by at most this
    em_reg_covar: float = 0.0  # none: EM maximises the objective both methods share
    lbfgs_max_evals: int = 20_000  # budgets, not rules: an end that misses its certificate gates its start
    newton_max: int = 20
    em_max_iter: int = 20_000
    em_block: int = 50  # EM iterations between two checks of its certificate
    hessian_chunk: int = 2000  # rows per block of the Hessian's outer products (memory only)


@dataclass(frozen=True)
class Practical:
    """The practical arm (reported): the library's batch EM, online EM and Adam, read after every pass."""

    passes: int = 60  # passes over the data every fitter gets (EM iterations, epochs)
    batch_size: int = 256  # mini-batch rows of online EM and gd
    learning_rate: float = 0.01  # gd's initial Adam rate (the library's default), halved on plateaus
    tol: float = 1e-5  # gd's plateau rule
    polish_iter: int = 1000  # EM iterations run on from gd's and online EM's ends
    polish_tol: float = 1e-9  # their stopping rule, |Δ mean log-likelihood|
    pace_tol: float = 0.01  # the pace: the first pass within this of EM's end (nats/sample)


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    setting: Setting = field(default_factory=Setting)
    prior: Prior = field(default_factory=Prior)
    certificate: Certificate = field(default_factory=Certificate)
    practical: Practical = field(default_factory=Practical)
    min_decided: int = 3  # starts that must decide (the earlier rule's minimum of three starts)
    # c3: EM must gain more than the earlier fixed-point test's tolerance (0.01 nats/sample) from every start
    start_gain_min: float = 0.01
    identity_passes: tuple[int, ...] = (0, 1, 2, 5)  # points of EM's and gd's paths where the identities are read
    identity_tol: float = 1e-8  # float64 identities: residuals ~1e-13 expected, a bug gives O(1)
    matching_tol: float = 1e-12  # one mixture under reversed labels: θ gap 0 up to round-off

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(setting=Setting(k=8, d=8, n=50_000, n_starts=5), practical=Practical(batch_size=1024))


# the metrics the criteria and the summary read back
DECIDES = "the start decides, or why not, per start"
KIND = "certified ends: same point, another optimum, another stationary point or slow region, per start"
GRAD_EM = "EM's ‖∇‖ at its fixed point, per start"
STAY = "EM run on from L-BFGS's certified end: distance over the same-point bound, per start"
GRAD_ADAM = "control: ‖∇‖ at the practical arm's end (Adam, plateau rule), per start"
SADDLE = "control: planted stationary point (one Gaussian ×K)"
GAIN = "control: EM's gain from the start, per start (nats/sample)"
CURVES = "full-data log-likelihood after every pass, per start and fitter (nats/sample)"
HESSIAN = "Hessian's eigenvalues (least, largest, least |λ|)"
MERGE = "planted merge/split of EM's end at start 0"
SADDLE_KIND, MERGE_KIND = f"{SADDLE} against EM's end at start 0", f"{MERGE}, against EM's end"
MATCHING = "Hungarian matching: EM's end at start 0 under reversed labels, θ gap"
ADAM_GAIN = "EM's gain from gd's end, per start (nats/sample)"


#: The per-start metrics: key -> (unit, the entry of :func:`_one_start`'s record it lists).
PER_START: dict[str, tuple[str, str]] = {
    "L-BFGS's ‖∇‖ at its end, per start": ("gradient norm", "grad_lbfgs"),
    "L-BFGS's evaluations and Newton steps after it, per start": ("count", "evals_lbfgs"),
    GRAD_EM: ("gradient norm", "grad_em"),
    "EM's iterations to the certificate, per start": ("iterations", "iter_em"),
    "EM's last step at its fixed point (largest change of θ), per start": ("θ units", "step_em"),
    f"{HESSIAN} at L-BFGS's end, per start": ("curvature", "curv_lbfgs"),
    f"{HESSIAN} at EM's fixed point, per start": ("curvature", "curv_em"),
    "θ gap L-BFGS–EM at the certified ends and the same-point bound, per start (θ units)": ("θ units", "end_theta_gap"),
    "matched means gap L-BFGS–EM at the certified ends, per start (data std)": ("data std", "end_gap"),
    "|Δ objective| L-BFGS–EM at the certified ends, per start (nats/sample)": ("nats/sample", "end_dll"),
    KIND: ("class", "kind"),
    DECIDES: ("class", "decides"),
    "objective at L-BFGS's and EM's certified ends, per start (nats/sample)": ("nats/sample", "ll_ends"),
    "smallest weight at L-BFGS's and EM's certified ends, per start": ("fraction", "least_weight_certified"),
    STAY: ("ratio", "stay"),
    "EM's gain from L-BFGS's certified end, per start (nats/sample)": ("nats/sample", "gain_lbfgs"),
    "EM's means move from L-BFGS's certified end, per start (data std)": ("data std", "move_lbfgs"),
    GRAD_ADAM: ("gradient norm", "grad_adam"),
    f"{HESSIAN} at the practical arm's end, per start": ("curvature", "curv_adam"),
    "L-BFGS from the practical arm's end: ‖∇‖ there, per start": ("gradient norm", "grad_from_adam"),
    f"L-BFGS from the practical arm's end: {HESSIAN}, per start": ("curvature", "curv_from_adam"),
    "L-BFGS from the practical arm's end against EM's certified end, per start": ("class", "kind_from_adam"),
    "objective at the practical arm's end and at L-BFGS's from it, per start (nats/sample)": ("nats/sample", "ll_adam"),
    "Fisher's identity, worst relative residual along the paths, per start": ("relative", "fisher"),
    "Xu–Jordan identity, worst relative residual along the paths, per start": ("relative", "xu_jordan"),
}


def _put(m: Metrics, key: str, value: Any, unit: str) -> None:
    """Declare ``key`` in ``unit``, labelled by the key without a trailing unit in parentheses."""
    m.put(key, value, unit, key.removesuffix(f" ({unit})"))


def _data(cfg: Config) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Training rows (N, D), held-out rows (N/2, D) and the starts."""
    # the earlier seed derivation, kept (seed, seed + 1, seed + 2 here; 1000 (seed + 3) + 10 s for the mini-batch
    # orders): the move to audit.seeds.derive is written but not yet pinned at seeds 0-4 (its page says so)
    s = cfg.setting
    truth = paths.truth(s.k, s.d, cfg.seed)
    rng = np.random.RandomState(cfg.seed + 1)
    x, x_test = paths.draw(*truth, s.n, rng), paths.draw(*truth, s.n // 2, rng)
    start_rng = np.random.RandomState(cfg.seed + 2)
    return x, x_test, [paths.make_start(x, s.k, start_rng, s.starts) for _ in range(s.n_starts)]


def _problem(x: np.ndarray, cfg: Config) -> ends.Problem:
    """The objective of the config's priors (the mean prior's normaliser adds ½ log|P_j|)."""
    p = cfg.prior
    return ends.problem(x, cfg.setting.k, p.wishart, p.weights, p.means, p.dof + (1.0 if p.means else 0.0))


def _one_start(cfg: Config, data: Any, test: Any, pr: ends.Problem, start: Any, s: int, std: float) -> dict[str, Any]:
    """Every arm from start ``s``: the practical arm, the certified ends, where Adam stopped and where L-BFGS goes
    from there, and the identities along EM's and gd's paths (``std``: the data's, the unit of means distances)."""
    order = 1000 * (cfg.seed + 3) + 10 * s  # mini-batch orders, distinct per start and arm
    r = paths.practical_arms(data, test, start, pr.shift, pr.scale, std, cfg.practical, (order, order + 1))
    r.update(ends.certified_ends(data, start, pr, cfg.certificate, std))
    theta_a = ends.pack(r["gd_end"], pr)  # where Adam stopped: ‖∇‖ of the likelihood it was given, curvature
    adam = ends.lbfgs_from(theta_a, pr, cfg.certificate, r["end_em"], r["curv_em"], r["ll_ends"][1])
    r.update(grad_adam=float(ends.gradient(theta_a, pr, penalised=False)[1].norm()), grad_from_adam=adam["grad"])
    r.update(curv_adam=list(ends.curvature(theta_a, pr, cfg.certificate.hessian_chunk)), curv_from_adam=adam["curv"])
    r.update(kind_from_adam=adam["kind"], ll_adam=[ends.value(r["gd_end"], pr), adam["ll"]])
    checked = sorted({p for p in cfg.identity_passes if p <= cfg.practical.passes})
    residuals = [ends.path_identities(data, [r[name][p] for p in checked], pr) for name in ("path_em", "path_gd")]
    del r["path_em"], r["path_gd"]
    return r | {"fisher": max(x[0] for x in residuals), "xu_jordan": max(x[1] for x in residuals)}


def _put_controls(m: Metrics, cfg: Config, x: np.ndarray, pr: ends.Problem, runs: list[dict[str, Any]]) -> None:
    """Control c2 (the planted saddle), L-BFGS from a merge/split of EM's end at start 0 (reported), and the
    matching's identity, each against EM's certified end at start 0."""
    ref, curv_ref, ll_ref = runs[0]["end_em"], runs[0]["curv_em"], runs[0]["ll_ends"][1]
    theta_g = ends.pack(ends.one_gaussian_point(x, cfg.setting.k, cfg.prior.wishart, pr.logdet), pr)
    curv_g = ends.curvature(theta_g, pr, cfg.certificate.hessian_chunk)
    saddle = ends.unpack(theta_g, pr)
    ll_g = ends.value(saddle, pr)
    kind_g = ends.classify(
        ends.theta_gap(saddle, ref, pr), abs(ll_g - ll_ref), ll_ref, curv_g, curv_ref, cfg.certificate
    )
    merged = ends.lbfgs_from(ends.pack(ends.planted_start(ref), pr), pr, cfg.certificate, ref, curv_ref, ll_ref)
    _put(m, f"{SADDLE}, ‖∇‖", float(ends.gradient(theta_g, pr)[1].norm()), "gradient norm")
    _put(m, f"{SADDLE}, {HESSIAN}", list(curv_g), "curvature")
    _put(m, SADDLE_KIND, kind_g, "class")
    _put(m, f"{MERGE}, L-BFGS's ‖∇‖ at its end", merged["grad"], "gradient norm")
    _put(m, f"{MERGE}, {HESSIAN}", merged["curv"], "curvature")
    _put(m, MERGE_KIND, merged["kind"], "class")
    _put(m, f"{MERGE}, |Δ objective| to EM's end (nats/sample)", abs(merged["ll"] - ll_ref), "nats/sample")
    _put(m, MATCHING, ends.theta_gap(type(ref)(*(t.flip(0) for t in ref)), ref, pr), "θ units")


def measure(cfg: Config, ctx: Context) -> Metrics:
    """Every arm from every start, the controls, and their metrics."""
    x, x_test, starts = _data(cfg)
    data, test = (DataSource(a, torch.device("cpu"), torch.float64) for a in (x, x_test))
    pr = _problem(x, cfg)
    std = float(x.std())  # the unit of every means distance
    runs = [_one_start(cfg, data, test, pr, start, s, std) for s, start in enumerate(starts)]
    m = Metrics()
    for key, (unit, entry) in PER_START.items():
        _put(m, key, [r[entry] for r in runs], unit)
    _put_controls(m, cfg, x, pr, runs)
    paths.put_practical(m, runs)
    s = cfg.setting
    _put(m, "K, D, N, starts, passes", [s.k, s.d, s.n, s.n_starts, cfg.practical.passes], "config")
    return m


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """The gate, tests (i) and (ii) at the deciding starts, controls c1–c3, and the identities."""
    deciding = [i for i, why in enumerate(m[DECIDES]) if why == "decides"]
    worst = lambda key: max((m[key][i] for i in deciding), default=math.nan)  # noqa: E731
    c = cfg.certificate
    told = m[f"{SADDLE}, ‖∇‖"] <= c.gtol and m[SADDLE_KIND] != "same point"
    return [
        gate("starts that decide (both ends certified, neither degenerate)", len(deciding), ">=", cfg.min_decided),
        criterion("‖∇‖ at EM's fixed point, worst deciding start", worst(GRAD_EM), "<=", c.gtol),
        criterion(
            "EM run on from L-BFGS's certified end: distance over the same-point bound, worst deciding start",
            worst(STAY),
            "<=",
            1.0,
        ),
        criterion("control: the practical arm's end fails the certificate, least ‖∇‖", min(m[GRAD_ADAM]), ">", c.gtol),
        criterion(
            "control: planted stationary point (K copies of the one-Gaussian fit), certified and told apart: "
            "its Hessian's largest eigenvalue (no optimum)",
            m[f"{SADDLE}, {HESSIAN}"][1] if told else math.nan,
            ">",
            -c.curv_floor,
        ),
        criterion("control: EM's gain from the start, least (nats/sample)", min(m[GAIN]), ">", cfg.start_gain_min),
        identity(
            "Fisher's identity along EM's and gd's paths, worst relative residual",
            max(m["Fisher's identity, worst relative residual along the paths, per start"]),
            "<=",
            cfg.identity_tol,
        ),
        identity(
            "Xu–Jordan preconditioned gradient = EM's mean step, worst relative residual",
            max(m["Xu–Jordan identity, worst relative residual along the paths, per start"]),
            "<=",
            cfg.identity_tol,
        ),
        identity("Hungarian matching: EM's end under reversed labels, θ gap", m[MATCHING], "<=", cfg.matching_tol),
    ]


def verdict(cfg: Config, m: Metrics, crit: list[Criterion]) -> Verdict:
    """REFUTED if a certified end of one method is not a fixed point of the other (test i or ii fails); else
    SUPPORTED if the controls hold, PARTIAL if one fails (the tests may then hold vacuously); UNDECIDED if the
    gate fails."""
    if not all(c.passed for c in crit[1:3]):
        return gated("REFUTED", crit)
    return gated("SUPPORTED" if all(c.passed for c in crit[3:6]) else "PARTIAL", crit)


def _tally(items: list[str]) -> str:
    return ", ".join(f"{items.count(k)} {k}" for k in dict.fromkeys(items))


def _summary_ends(cfg: Config, m: Metrics) -> tuple[str, str]:
    """What the certified arms reached: how many starts decide, the certificates and the curvature; the classes."""
    reasons, n = m[DECIDES], len(m[DECIDES])
    curv = m[f"{HESSIAN} at L-BFGS's end, per start"] + m[f"{HESSIAN} at EM's fixed point, per start"]
    gaps = m["θ gap L-BFGS–EM at the certified ends and the same-point bound, per start (θ units)"]
    grad = max(m["L-BFGS's ‖∇‖ at its end, per start"])
    step = max(m["EM's last step at its fixed point (largest change of θ), per start"])
    means = max(m["matched means gap L-BFGS–EM at the certified ends, per start (data std)"])
    certified = (
        f"{reasons.count('decides')} of {n} starts decide (gate: at least {cfg.min_decided}; {_tally(reasons)}). "
        f"L-BFGS ends at ‖∇‖ ≤ {grad:.1e} (bar {cfg.certificate.gtol:g}); EM's last step ≤ {step:.1e} (bar "
        f"{cfg.certificate.em_step_tol:g}); over the {2 * n} ends the Hessian's largest eigenvalue is at most "
        f"{max(c[1] for c in curv):.1e}, its least |eigenvalue| at least {min(c[2] for c in curv):.1e}. "
    )
    classes = (
        f"From the same start L-BFGS's and EM's ends are: {_tally(m[KIND])} (θ gap up to "
        f"{max(g[0] for g in gaps):.1e} against a same-point bound of at least {min(g[1] for g in gaps):.1e}; matched "
        f"means gap up to {means:.1e} data std; reported: which point a start leads to is a path matter). "
    )
    return certified, classes


def summary(cfg: Config, m: Metrics, verdict: Verdict) -> str:
    """The verdict's numbers in words."""
    c = criteria(cfg, m)
    certified, classes = _summary_ends(cfg, m)
    if verdict == "UNDECIDED":
        failed = "; ".join(x.metric for x in c if x.role == "gate" and not x.passed)
        return certified + classes + f"UNDECIDED: the fixed-point half cannot be judged ({failed} fails)."
    adam = _tally(m["L-BFGS from the practical arm's end against EM's certified end, per start"])
    shared = (
        f"Fixed points {'shared' if all(x.passed for x in c[1:3]) else 'NOT shared'} at the deciding starts: at EM's "
        f"fixed points ‖∇‖ ≤ {c[1].measured:.1e} (bar {cfg.certificate.gtol:g}); EM run on from L-BFGS's certified "
        f"end stays within {c[2].measured:.1e} of the same-point bound. "
    )
    controls = (
        f"Controls: the practical arm's end (Adam, plateau rule) has ‖∇‖ ≥ {c[3].measured:.1e} (fails the "
        f"certificate: {'yes' if c[3].passed else 'NO'}; L-BFGS from there, against EM's end from the same start: "
        f"{adam}); the planted stationary point (the one-Gaussian fit ×K) is certified, told apart "
        f"({m[SADDLE_KIND]}) and not called an optimum: "
        f"{'yes' if c[4].passed else 'NO'} (largest eigenvalue {c[4].measured:.1e}); EM gains at least "
        f"{c[5].measured:.2f} nats/sample from every start. A merge/split of EM's end (reported) leads L-BFGS to: "
        f"{m[MERGE_KIND]}. "
    )
    gd_em = max(m["gd–EM path gap, per start (nats/sample)"])
    em_em = min(m["control: EM–EM path gap, per pair of starts (nats/sample)"])
    path = (
        "Path: §3.2's update structure holds as identities along the paths (Fisher's identity, Xu–Jordan, worst "
        f"residuals {c[6].measured:.1e}, {c[7].measured:.1e}; not evidence); the trajectories, which §3.2 "
        f"disclaims, differ (per-pass gd–EM gap up to {gd_em:.3f} nats/sample, EM–EM between starts at least "
        f"{em_em:.3f}). "
    )
    practical = f"Practical arm (not deciding): EM from Adam's end gains up to {max(m[ADAM_GAIN]):.1e} nats/sample."
    tail = "" if all(x.passed for x in c[3:6]) else " A control failed, so the fixed-point half may hold vacuously."
    return certified + shared + classes + controls + path + practical + tail


def _details(cfg: Config) -> str:
    """The setting in words (shown under the verdict)."""
    s, p, c, a = cfg.setting, cfg.prior, cfg.certificate, cfg.practical
    return (
        f"{s.n_starts} starts ({s.starts}) on N = {s.n} rows of a known K = {s.k}, D = {s.d} mixture. Objective of "
        f"the certified arms: the mean log-likelihood with a Wishart (ν = D + 1 + {p.dof:g}, worth {p.wishart:g} "
        f"pseudo-sample of the data's spread) on every precision, a normal prior (κ = {p.means:g}) on every mean and "
        f"a Dirichlet (α − 1 = {p.weights:g}) on the weights; EM's M-step maximises it exactly. L-BFGS (float64, "
        f"strong-Wolfe, then Newton steps) until ‖∇_θ‖ ≤ {c.gtol:g}; EM until its step is ≤ {c.em_step_tol:g}. Two "
        f"ends are one point within {c.same_factor:g} × gtol (1/min|λ_a| + 1/min|λ_b|) in θ and {c.same_ll_rel:g} "
        f"relative in the objective; an end with min|λ| < {c.curv_floor:g} is degenerate. Practical arm (reported): "
        f"{a.passes} passes per fitter, mini-batches of {a.batch_size} ({math.ceil(s.n / a.batch_size)} steps per "
        f"pass), Adam at {a.learning_rate} halved on plateaus (tol {a.tol:g}), scored after every pass by the "
        "library's exact full-data mean log-likelihood (no prior)."
    )


def figures(cfg: Config, m: Metrics, ctx: Context) -> list[str]:
    """Every fitter's log-likelihood after every pass, per start; the per-pass gaps between fitters."""
    curves = m[CURVES]
    tolerance = cfg.practical.pace_tol
    return [
        paths.plot_curves(curves, ctx, "same_optimum"),
        paths.plot_gaps(curves, tolerance, ctx, "same_optimum_gaps"),
    ]


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    outcome = verdict(cfg, m, crit)
    return Result(outcome, summary(cfg, m, outcome), m, crit, figures(cfg, m, ctx), details=_details(cfg))


EXPERIMENT = Experiment(
    name="same_optimum",
    title="EM and gradient descent: same fixed points, same path?",
    claim="This regime optimizes the same objective as classical EM on mixture models, with the same "
    "responsibilities governing both the fixed points and the path toward them.",
    source="paper §4.1 (Unsupervised regime)",
    Config=Config,
    run=run,
)
