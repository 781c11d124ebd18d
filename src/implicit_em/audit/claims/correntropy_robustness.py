r"""Correntropy ignores far outliers and forgoes the assignment structure; the LSE does not (paper §4.4, §7.1).

Claim (paper §4.4, after the correntropy objective :math:`L=\sum_{j}(1-\exp(-d_j^2/\sigma^2))`): "Exponentiation
converts distances to likelihoods; normalization converts likelihoods to responsibilities. With both, implicit EM
follows necessarily; with exponentiation alone, the model gains robustness but forgoes the assignment structure."
§7.1: "Correntropy assumes outliers should be ignored." That independent sigmoids ignore outliers too is a reading
of the audit's request, not the paper's (§6.1 says only that "A point can be equally close to all prototypes or far
from all of them"): it is measured with C1's rule and reported beside the verdict.

Method. Five clusters on a ring with 20% outliers at a gap Δ beyond it (units of the kernel width σ = √2·s), for each
Δ in ``gaps`` and once without outliers (:mod:`implicit_em.audit.testbeds.ring_outliers`). K = 5 prototypes are fitted
from the same starts, step and steps by full-batch gradient descent on the LSE (:func:`~implicit_em.objectives.
mixture_nll` of :math:`\|x - m_j\|^2/\sigma^2`), correntropy (:func:`~implicit_em.objectives.correntropy` of
:math:`\|x - m_j\|`, same σ) and independent sigmoids (:func:`~implicit_em.objectives.independent_sigmoid_bce` of
:math:`c - \|x - m_j\|^2/\sigma^2`, every target 1). Per fit: the outlier-induced shift (mean distance of each
prototype from the fit without outliers, units of s) and the duplicate rate. At each objective's fit without outliers,
each outlier's gradient mass :math:`\sum_j\|\partial\ell/\partial m_j\|` by autograd, against the closed forms
:math:`w_j\,2(m_j - x)/\sigma^2` with :math:`w_j = r_j`, :math:`\exp(-\|x-m_j\|^2/\sigma^2)`, :math:`\sigma(d_j - c)`.

Rule, on the median over ``n_seeds`` seeds: C1 correntropy ignores far outliers: at every gap ≥ 4σ its shift is ≤ 0.1
standard errors of a cluster mean and its per-outlier gradient mass at the farthest gap is ≤ 1e-6 of that at the
nearest; C2 the LSE does not: far shift ≥ 1 SE and a gradient mass that does not fall; C3 without outliers
correntropy's duplicate rate exceeds the LSE's by ≥ 0.1 (mean over seeds). SUPPORTED if C1–C3 hold; REFUTED if C1
fails; PARTIAL otherwise. Identities (reported, not evidence; a failed one raises): each closed form against autograd
to 1e-10 relative. Controls, which must come out as stated or the run raises: near outliers (Δ ≤ 1σ) move correntropy
by more than C1's bar; planted wrong closed forms miss autograd by ≥ 1e-6. History: ``docs/claims/
correntropy_robustness.md``.
"""

import math
from dataclasses import dataclass, field

import torch

from implicit_em.audit import seeds, stats
from implicit_em.audit.core import Context, Criterion, Experiment, Result, Verdict, criterion, gated, identity
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.plots import pyplot
from implicit_em.audit.testbeds import ring_outliers as ring
from implicit_em.audit.testbeds.measured import Measured
from implicit_em.audit.testbeds.ring_outliers import Descent, Ring

__all__ = ["EXPERIMENT", "Config", "criteria", "figures", "measure", "run", "summary", "verdict"]

F64 = torch.float64
OBJECTIVES = ring.OBJECTIVES  # the LSE, correntropy, independent sigmoids
C1, C2, C3 = (
    "C1 correntropy ignores far outliers",
    "C2 the LSE does not",
    "C3 correntropy forgoes the assignment structure",
)
SHIFTS = "shift (units of s), per gap, per seed"
SHIFT_SPREAD = "shift (units of s), per gap: median [min, max] over seeds"
MASS = "per-outlier gradient mass, per gap: median over seeds"
DUPLICATES = "duplicate rate, per condition: mean over seeds"
CLOSED = "closed form vs autograd, max relative miss"
PLANTED = "planted closed form vs autograd, min relative miss"
SIGMOID_READING = "independent-sigmoid reading (the issue's, not the paper's)"  # the recorded key, kept

# The paper's words (module docstring), as printed in paper/implicit-em-paper.md.
PAPER_4_4 = (
    "This clarifies the design space. Exponentiation converts distances to likelihoods; normalization converts "
    "likelihoods to responsibilities. With both, implicit EM follows necessarily; with exponentiation alone, the model "
    "gains robustness but forgoes the assignment structure."
)
PAPER_7_1 = "Correntropy assumes outliers should be ignored."
PAPER_6_1 = "A point can be equally close to all prototypes or far from all of them"


@dataclass(frozen=True)
class Config:
    """Sizes and thresholds; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    n_seeds: int = 5  # data sets and starts; every criterion is judged on their median
    data: Ring = field(default_factory=Ring)  # 5 clusters of 40 (s = 0.5) on a ring of radius 3, 20% outliers
    gaps: tuple[float, ...] = (0.5, 1.0, 4.0, 16.0)  # outliers' distance beyond the ring, units of σ = √2·s
    descent: Descent = field(default_factory=Descent)  # 1000 full-batch steps of 0.25, every fit
    sigmoid_bias: float = 2.0  # c: σ(c − d) = ½ at d = c, ‖x − m‖ = 2 s, a cluster's 2-sd radius
    # thresholds (module docstring), the audit's own: the paper gives no number
    far_gap: float = 4.0  # "far": kernel weight at the nearest centre ≤ e^{−16} ≈ 1e-7
    near_gap: float = 1.0  # the control: outliers within 1σ must move correntropy
    ignore_shift_se: float = 0.1  # C1: shift ≤ 0.1 SE of a cluster mean, a tenth of the fit's own sampling noise
    move_shift_se: float = 1.0  # C2: shift ≥ 1 SE
    vanishing_ratio: float = 1e-6  # C1: per-outlier gradient mass, farthest / nearest gap
    duplicate_excess: float = 0.1  # C3: half a duplicate in five prototypes
    closed_form_rel: float = 1e-10  # the identities: float64 round-off (exp of arguments up to ~600: ≈ 600·eps)
    planted_rel: float = 1e-6  # a planted closed form must miss by more than this

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(n_seeds=20, gaps=(0.5, 1.0, 2.0, 4.0, 8.0, 16.0), descent=Descent(steps=3000))

    @property
    def kernel_width(self) -> float:
        return self.data.kernel_width

    @property
    def standard_error(self) -> float:
        """The standard error of a cluster mean, units of s."""
        return 1.0 / math.sqrt(self.data.per_cluster)


def _mean(values: list[float]) -> float:
    """The mean as recorded before (left-to-right sum / n; not bitwise ``stats.mean`` for 8 values or more)."""
    return sum(values) / len(values)


def _ratio(a: float, b: float) -> float:
    """a / b, NaN (which fails every criterion) when b is 0."""
    return a / b if b > 0 else math.nan


def measure(cfg: Config, ctx: Context) -> Measured:
    """The fits, their shifts and descriptions, and the gradients on the outliers (module docstring)."""
    if not any(g >= cfg.far_gap for g in cfg.gaps) or not any(g <= cfg.near_gap for g in cfg.gaps):
        raise ValueError(f"gaps {cfg.gaps} need one ≥ far_gap {cfg.far_gap} and one ≤ near_gap {cfg.near_gap}")
    data_seeds = [seeds.derive(cfg.seed, "data", i) for i in range(cfg.n_seeds)]  # data and starts of replicate i
    datas = [ring.draw(cfg.data, s) for s in data_seeds]
    fits, grad_norm = ring.fit_all(cfg.data, datas, cfg.gaps, cfg.descent, cfg.sigmoid_bias)
    s, n, per = cfg.data.cluster_std, len(data_seeds), 1 + len(cfg.gaps)
    shift = {  # objective -> gap -> per seed, units of s
        o: [[float((f[i, 1 + g] - f[i, 0]).norm(dim=-1).mean()) / s for i in range(n)] for g in range(per - 1)]
        for o, f in fits.items()
    }
    described = {  # objective -> condition -> per seed
        o: [[ring.describe(f[i, c], datas[i].centres, s) for i in range(n)] for c in range(per)]
        for o, f in fits.items()
    }
    mass, share, closed_rel, planted_rel = ring.outlier_gradients(cfg.data, datas, fits, cfg.gaps, cfg.sigmoid_bias)
    m = Measured()
    m.drawn = {"data": datas[0], "fits": fits}
    m.put("gaps (units of σ)", list(cfg.gaps), "σ units", "outlier gaps beyond the ring")
    m.put("kernel width σ", cfg.kernel_width, "data units", "kernel width σ = √2·s")
    m.put(
        "standard error of a cluster mean (units of s)",
        cfg.standard_error,
        "data std",
        "standard error of a cluster mean, s/√n (units of the cluster std s)",
    )
    m.put("seeds", data_seeds, "seed ids", "the data sets' and starts' seeds")
    m.put(
        SHIFT_SPREAD,
        {o: [[stats.median(v), min(v), max(v)] for v in shift[o]] for o in OBJECTIVES},
        "data std",
        "outlier-induced shift per gap, median [min, max] over seeds (units of the cluster std s)",
    )
    m.put(SHIFTS, shift, "data std", "outlier-induced shift per gap, per seed (units of the cluster std s)")
    _put_described(m, cfg, described)
    m.put(
        MASS,
        {o: [stats.median(v) for v in mass[o]] for o in OBJECTIVES},
        "gradient norm",
        "per-outlier gradient mass Σ_j ‖∂ℓ/∂m_j‖ per gap, median over seeds",
    )
    m.put(
        "outliers' share of the gradient mass, per gap: median over seeds",
        {o: [stats.median(v) for v in share[o]] for o in OBJECTIVES},
        "fraction",
        "outliers' share of the gradient mass at the fit without them, per gap, median over seeds",
    )
    m.put(CLOSED, closed_rel, "relative", "closed-form gradient vs autograd, max relative miss (identity)")
    m.put(PLANTED, planted_rel, "relative", "planted wrong closed form vs autograd, min relative miss (control)")
    m.put("final gradient norm, max over fits", grad_norm, "gradient norm", "final gradient norm, max over fits")
    return m


def _put_described(m: Metrics, cfg: Config, described: dict[str, list[list[dict[str, float]]]]) -> None:
    """Centre error, coverage and duplicate rate per condition (none, then the gaps)."""
    error = {o: [stats.median([d["centre error"] for d in c]) for c in described[o]] for o in OBJECTIVES}
    m.put(
        "centre error (units of s), per condition (none, gaps...): median over seeds",
        error,
        "data std",
        "centre error per condition (none, then the gaps), median over seeds (units of the cluster std s)",
    )
    pairs = [zip(described["correntropy"][1 + g], described["lse"][1 + g], strict=True) for g in range(len(cfg.gaps))]
    ratio = [stats.median([a["centre error"] / b["centre error"] for a, b in p]) for p in pairs]
    m.put(
        "centre error ratio correntropy / LSE, per gap: median over seeds",
        ratio,
        "ratio",
        "centre error, correntropy / LSE, per gap, median over seeds",
    )
    coverage = {o: [_mean([d["coverage"] for d in c]) for c in described[o]] for o in OBJECTIVES}
    m.put(
        "coverage, per condition: mean over seeds",
        coverage,
        "fraction",
        "share of centres with a prototype within s, per condition, mean over seeds",
    )
    dup = {o: [_mean([d["duplicates"] for d in c]) for c in described[o]] for o in OBJECTIVES}
    m.put(DUPLICATES, dup, "fraction", "duplicate rate (K − distinct sites)/K per condition, mean over seeds")


def _ignores(cfg: Config, m: Metrics, objective: str) -> list[Criterion]:
    """C1's rule for ``objective``: its far shift is below the bar and its gradient on an outlier vanishes."""
    med = [row[0] for row in m[SHIFT_SPREAD][objective]]
    far = [i for i, g in enumerate(cfg.gaps) if g >= cfg.far_gap]
    mass = m[MASS][objective]
    return [
        criterion(
            f"{objective}: shift at the far gaps, max over gaps of the median over seeds (units of s)",
            max(med[i] for i in far),
            "<=",
            cfg.ignore_shift_se * cfg.standard_error,
        ),
        criterion(
            f"{objective}: per-outlier gradient mass, farthest / nearest gap (medians)",
            _ratio(mass[-1], mass[0]),
            "<=",
            cfg.vanishing_ratio,
        ),
    ]


def _controls(cfg: Config, m: Metrics) -> list[Criterion]:
    """Near outliers must move correntropy; planted closed forms must miss autograd. Raises if one does not."""
    near = [i for i, g in enumerate(cfg.gaps) if g <= cfg.near_gap]
    controls = [
        criterion(
            "control, near outliers: correntropy's shift at gaps ≤ near_gap, min over gaps of the median (s)",
            min(m[SHIFT_SPREAD]["correntropy"][i][0] for i in near),
            ">",
            cfg.ignore_shift_se * cfg.standard_error,
        ),
        *(
            criterion(f"control, {o}'s planted closed form vs autograd, min relative miss", rel, ">=", cfg.planted_rel)
            for o, rel in m[PLANTED].items()
        ),
    ]
    broken = [c for c in controls if not c.passed]
    if broken:
        raise RuntimeError(
            "a control passed, so the check cannot fail and gives no verdict: "
            + "; ".join(f"{c.metric} = {c.measured:.3g} (must be {c.comparison} {c.threshold:g})" for c in broken)
        )
    return controls


def criteria(cfg: Config, m: Metrics) -> list[Criterion]:
    """C1–C3, the identities, the controls (raise if one fails) and the independent-sigmoid reading's C1 rule."""
    controls = _controls(cfg, m)
    far = [i for i, g in enumerate(cfg.gaps) if g >= cfg.far_gap]
    lse_shift, lse_mass = [row[0] for row in m[SHIFT_SPREAD]["lse"]], m[MASS]["lse"]
    c2 = [
        criterion(
            "lse: shift at the far gaps, min over gaps of the median over seeds (units of s)",
            min(lse_shift[i] for i in far),
            ">=",
            cfg.move_shift_se * cfg.standard_error,
        ),
        criterion(
            "lse: per-outlier gradient mass, farthest / nearest gap (medians)",
            _ratio(lse_mass[-1], lse_mass[0]),
            ">=",
            1.0,
        ),
    ]
    dup = {o: m[DUPLICATES][o][0] for o in OBJECTIVES}
    c3 = criterion(
        "duplicate rate without outliers, correntropy − LSE (mean over seeds)",
        dup["correntropy"] - dup["lse"],
        ">=",
        cfg.duplicate_excess,
    )
    identities = [
        identity(f"{o}: closed-form gradient vs autograd, max relative miss", m[CLOSED][o], "<=", cfg.closed_form_rel)
        for o in OBJECTIVES
    ]
    return [*_ignores(cfg, m, "correntropy"), *c2, c3, *identities, *controls, *_ignores(cfg, m, "sigmoid")]


def _holds(criteria: list[Criterion], prefix: str) -> bool:
    """Whether every test criterion whose metric starts with ``prefix`` passed."""
    return all(c.passed for c in criteria if c.role == "test" and c.metric.startswith(prefix))


def _parts(criteria: list[Criterion]) -> dict[str, bool]:
    return {C1: _holds(criteria, "correntropy:"), C2: _holds(criteria, "lse:"), C3: _holds(criteria, "duplicate rate")}


def verdict(cfg: Config, m: Metrics, criteria: list[Criterion]) -> Verdict:
    """REFUTED if C1 fails; SUPPORTED if C1–C3 hold; PARTIAL otherwise (a failed identity raises)."""
    parts = _parts(criteria)
    v: Verdict = "REFUTED" if not parts[C1] else ("SUPPORTED" if all(parts.values()) else "PARTIAL")
    return gated(v, criteria)


def _put_readings(m: Metrics, criteria: list[Criterion]) -> None:
    """Which parts of the claim held, and the independent-sigmoid reading (C1's rule on the sigmoid objective)."""
    reading = "supported" if _holds(criteria, "sigmoid:") else "contradicted"
    m.put(
        SIGMOID_READING,
        reading,
        "verdict",
        "independent sigmoids ignore far outliers (the audit's reading, not the paper's)",
    )
    m.put("parts", _parts(criteria), "yes/no", "parts of the claim: which held")


def summary(cfg: Config, m: Metrics, verdict: Verdict) -> str:
    med = {o: [row[0] for row in m[SHIFT_SPREAD][o]] for o in OBJECTIVES}
    far = [i for i, g in enumerate(cfg.gaps) if g >= cfg.far_gap]
    dup = {o: m[DUPLICATES][o][0] for o in OBJECTIVES}
    return (
        f"At outlier gaps ≥ {cfg.far_gap:g}σ the outliers shift correntropy's prototypes by ≤ "
        f"{max(med['correntropy'][i] for i in far):.1e} s (median over {len(m['seeds'])} seeds; C1 bar "
        f"{cfg.ignore_shift_se * cfg.standard_error:.3g} s) and the LSE's by ≥ {min(med['lse'][i] for i in far):.2g} s "
        f"(C2 bar {cfg.move_shift_se * cfg.standard_error:.3g} s); duplicate rate without outliers: correntropy "
        f"{dup['correntropy']:.2f}, LSE {dup['lse']:.2f} (mean over seeds). Parts: "
        + ", ".join(f"{k} {'holds' if v else 'fails'}" for k, v in m["parts"].items())
        + f". Independent sigmoids (the audit's reading, not the paper's): far shift ≥ "
        f"{min(med['sigmoid'][i] for i in far):.2g} s, duplicate rate {dup['sigmoid']:.2f}: the reading is "
        f"{m[SIGMOID_READING]}. Identities (reported, not counted as evidence): every closed-form gradient matches "
        f"autograd to {max(m[CLOSED].values()):.1e} relative."
    )


def figures(cfg: Config, m: Measured, ctx: Context) -> list[str]:
    """(a) the first seed's fits with outliers at the first far gap; (b) shift against gap, median and min–max over
    seeds; (c) per-outlier gradient mass against gap: the closed form on a dense sweep, autograd's medians."""
    plt = pyplot()
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.8))
    data, fits = m.drawn["data"], m.drawn["fits"]
    colors = {"lse": "C0", "correntropy": "C3", "sigmoid": "C2"}
    g_far = next(i for i, g in enumerate(cfg.gaps) if g >= cfg.far_gap)
    out = ring.outliers(cfg.data, data, cfg.gaps[g_far])
    a.scatter(*data.inliers.T, s=5, color="0.6", label="inliers")
    a.scatter(*out.T, s=8, marker="^", color="0.3", label=f"outliers, gap {cfg.gaps[g_far]:g}σ")
    a.scatter(*data.starts.T, s=60, facecolors="none", edgecolors="k", label="starts")
    for objective, color in colors.items():
        a.scatter(*fits[objective][0, 1 + g_far].T, s=70, marker="x", color=color, label=f"{objective}, with outliers")
        a.scatter(*fits[objective][0, 0].T, s=25, marker="o", color=color, alpha=0.6)
    a.set_aspect("equal")
    a.set_title("first seed: fits with (x) and without (o) outliers", fontsize=9)
    a.legend(fontsize=6.5, loc="lower left")
    floor = 1e-12
    for objective, color in colors.items():
        spread = m[SHIFT_SPREAD][objective]
        b.plot(cfg.gaps, [max(row[0], floor) for row in spread], "o-", color=color, label=objective)
        b.fill_between(
            cfg.gaps,
            [max(row[1], floor) for row in spread],
            [max(row[2], floor) for row in spread],
            color=color,
            alpha=0.2,
        )
    b.axhline(cfg.ignore_shift_se * cfg.standard_error, color="k", ls=":", label="C1: ignores (0.1 SE)")
    b.axhline(cfg.move_shift_se * cfg.standard_error, color="k", ls="--", label="C2: moves (1 SE)")
    b.axvline(cfg.far_gap, color="0.5", lw=0.8)
    b.set(xscale="log", yscale="log", xlabel="outlier gap beyond the ring (units of σ)")
    b.set_ylabel(f"outlier-induced shift (units of s; {floor:g} shown for 0)")
    b.set_title("shift: median and min–max over seeds", fontsize=9)
    b.legend(fontsize=7)
    sweep = torch.logspace(-1, math.log10(max(cfg.gaps)), 60, dtype=F64).tolist()
    for objective, color in colors.items():
        m0 = fits[objective][0, 0]
        closed = [
            float(
                ring.closed_mass(
                    objective, m0, ring.outliers(cfg.data, data, g), cfg.kernel_width, cfg.sigmoid_bias
                ).median()
            )
            for g in sweep
        ]
        c.plot(
            sweep, [max(v, 1e-300) for v in closed], "-", color=color, label=f"{objective}: closed form (first seed)"
        )
        c.plot(cfg.gaps, [max(v, 1e-300) for v in m[MASS][objective]], "o", color=color, ms=5)
    c.plot([], [], "ko", ms=5, label="autograd, median over seeds")
    c.set(xscale="log", yscale="log", ylim=(1e-120, 1e3), xlabel="outlier gap beyond the ring (units of σ)")
    c.set_ylabel("per-outlier gradient mass Σ_j ‖∂ℓ/∂m_j‖ (median)")
    c.set_title("gradient on an outlier", fontsize=9)
    c.legend(fontsize=7)
    fig.tight_layout()
    return [ctx.save_figure(fig, "correntropy_robustness")]


DETAILS = (
    "Same data, starts, step size and steps for the three objectives; the shift compares each fit with the fit from "
    "the same start without the outliers, so it measures what the outliers did and nothing else (the centre error "
    "mixes that with where each objective lands without them: duplicates, local optima). The closed forms say why: "
    "the LSE's gradient per outlier is r_j·2(m_j − x)/σ², whose size grows with the distance (an outlier is assigned "
    "to its nearest prototype and pulls it: §6.3's closed world); correntropy's is exp(−d²/σ²)·2(m − x)/σ², which "
    "vanishes; the independent sigmoids' is σ(d − c)·2(m − x)/σ², which tends to 2(m − x)/σ² on every prototype, and "
    "with every target 1 each prototype minimises the same convex function. So the robustness comes from the bounded, "
    "unnormalised kernel, not from the absence of a partition function alone."
)


def run(cfg: Config, ctx: Context) -> Result:
    m = measure(cfg, ctx)
    crit = criteria(cfg, m)
    _put_readings(m, crit)
    v = verdict(cfg, m, crit)
    return Result(v, summary(cfg, m, v), m, crit, figures(cfg, m, ctx), DETAILS)


EXPERIMENT = Experiment(
    name="correntropy_robustness",
    title="Correntropy ignores far outliers and forgoes assignment; the LSE does not",
    claim="§4.4: 'Exponentiation converts distances to likelihoods; normalization converts likelihoods to "
    "responsibilities. With both, implicit EM follows necessarily; with exponentiation alone, the model gains "
    "robustness but forgoes the assignment structure.' (for L=∑_j (1−exp(−d_j²/σ²))); §7.1: 'Correntropy assumes "
    "outliers should be ignored.'",
    source="paper §4.4, §7.1 (and §7.2); independent sigmoids ignoring outliers is the audit's reading (§6.1 does "
    "not say it), measured and reported beside the verdict",
    Config=Config,
    run=run,
)
