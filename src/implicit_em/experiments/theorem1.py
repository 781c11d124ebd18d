r"""Theorem 1: ∂L/∂d_j = −r_j for L = log Σ_j exp(−d_j), with no condition beyond differentiability.

Method: autograd through :func:`implicit_em.objectives.lse` on random distances of every scale (spread from 1e-3
to 1e3, which covers saturated softmaxes), K from 2 to 1000, with and without mixing weights, in float64 and
float32; the residual is max |∂L/∂d + r| (r is a probability, so the residual is absolute). In finite precision
log Σ exp(−d) carries a rounding error of about eps·|d|, which moves r by as much, so the residual is judged in
units of eps·max(1, max|d|) (eps of the dtype). The minimisation form of §4.1, L⁻ = −log Σ_j exp(−d_j), is
measured too: its gradient is +r_j (the sign the review asked for).

Verdict: SUPPORTED when every scaled residual is ≤ 16 (round-off) in both dtypes; REFUTED otherwise.
"""

from dataclasses import dataclass

import torch

from implicit_em.experiments._base import Context, Experiment, Result, criterion, pyplot
from implicit_em.laws import identity_residual
from implicit_em.objectives import lse, mixture_nll


@dataclass(frozen=True)
class Config:
    """Sizes and the threshold; ``quick()`` for tests and ``make demo``, ``full()`` for the report."""

    seed: int = 0
    components: tuple[int, ...] = (2, 10, 100)  # K of each case
    rows: int = 256  # distance rows per case
    spreads: tuple[float, ...] = (1e-3, 1e-1, 1.0, 10.0, 1e3)  # scale of the distances: up to saturated softmaxes
    # verdict threshold: round-off of log Σ exp(−d) is about eps·|d|, so the residual is judged in units of
    # eps·max(1, max|d|); 16 such units is round-off (module docstring)
    max_scaled_residual: float = 16.0

    @classmethod
    def quick(cls) -> "Config":
        return cls()

    @classmethod
    def full(cls) -> "Config":
        return cls(components=(2, 10, 100, 1000), rows=4096)


def _residual(d: torch.Tensor, log_w: torch.Tensor | None, sign: float) -> float:
    """max |∂F/∂d − sign·r| for F = lse (sign −1) or mixture_nll (sign +1), by :func:`identity_residual`."""
    if sign < 0:
        return float(identity_residual(lambda x: lse(x if log_w is None else x - log_w), d, "lse", log_weights=log_w))
    return float(identity_residual(lambda x: mixture_nll(x, log_w), d, "mixture_nll", log_weights=log_w))


def run(cfg: Config, ctx: Context) -> Result:
    plt = pyplot()
    ks, rows = cfg.components, cfg.rows
    g = torch.Generator().manual_seed(cfg.seed)
    worst: dict[str, float] = {"float64": 0.0, "float32": 0.0}
    scaled: dict[str, float] = {"float64": 0.0, "float32": 0.0}
    curves: dict[tuple[str, int], list[float]] = {}
    nll_plus = nll_minus = 0.0
    for dtype in (torch.float64, torch.float32):
        name = str(dtype).removeprefix("torch.")
        for k in ks:
            curve = []
            for spread in cfg.spreads:
                d = (torch.randn(rows, k, generator=g, dtype=torch.float64) * spread).to(dtype)
                log_w = torch.log_softmax(torch.randn(k, generator=g, dtype=torch.float64), 0).to(dtype)
                res = max(_residual(d, None, -1.0), _residual(d, log_w, -1.0))
                curve.append(res)
                worst[name] = max(worst[name], res)
                unit = torch.finfo(dtype).eps * max(1.0, float(d.abs().amax()))
                scaled[name] = max(scaled[name], res / unit)
                if dtype == torch.float64:
                    nll_plus = max(nll_plus, _residual(d, log_w, +1.0))
                    r = torch.softmax(log_w - d, -1)
                    nll_minus = max(nll_minus, float((r + r).abs().amax()))  # distance of +r from the printed −r
            curves[(name, k)] = curve
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for (name, k), curve in curves.items():
        ax.loglog(
            cfg.spreads,
            [max(c, 1e-18) for c in curve],
            marker="o",
            ls="-" if name == "float64" else "--",
            label=f"{name}, K={k}",
        )
    ax.set_xlabel("spread of the distances")
    ax.set_ylabel("max |∂L/∂d + r| (0 plotted as 1e-18)")
    ax.set_title("Theorem 1 by autograd")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    figure = ctx.save_figure(fig, "theorem1")
    ok = criterion(
        "max scaled residual, both dtypes (eps·max(1, max|d|) units)",
        max(scaled.values()),
        "<=",
        cfg.max_scaled_residual,
    )
    summary = (
        f"∂L/∂d = −r holds to round-off ({scaled['float64']:.1f} and {scaled['float32']:.1f} units of eps·max|d| in "
        f"float64 and float32; {worst['float64']:.1e} and {worst['float32']:.1e} absolute) for K up to {max(ks)} and "
        f"distance spreads 1e-3 to 1e3; the minimisation form L⁻ has gradient +r (to {nll_plus:.1e})."
    )
    return Result(
        "SUPPORTED" if ok.passed else "REFUTED",
        summary,
        {
            "max_residual_float64": worst["float64"],
            "max_residual_float32": worst["float32"],
            "max_scaled_residual_float64 (eps·max|d| units)": scaled["float64"],
            "max_scaled_residual_float32 (eps·max|d| units)": scaled["float32"],
            "L_minus_gradient_minus_plus_r": nll_plus,
            "L_minus_gradient_minus_minus_r (≈ 2·max r)": nll_minus,
            "components_tested": list(ks),
            "rows_per_case": rows,
            "cases": len(curves) * len(cfg.spreads) * 2,
        },
        [ok],
        [figure],
        details="The identity is the derivative of log-sum-exp; what the audit adds is that it holds in finite "
        "precision at every scale, including saturated softmaxes (spread 1e3), where a naive exp would overflow. "
        "At spread 1e3 the float32 residual is about 1e-4 absolute: the rounding of a log-sum-exp near 1e3, not a "
        "failure of the identity.",
    )


EXPERIMENT = Experiment(
    name="theorem1",
    title="Theorem 1: responsibilities are gradients",
    claim="For any objective of the form L=log∑_j exp(−d_j), the gradient with respect to each distance satisfies "
    "∂L/∂d_j=−r_j, where r_j is the normalized exponential—the responsibility of component j. [...] requires no "
    "conditions beyond differentiability.",
    source="paper §1.4 (One theorem), §3.1; sign of the minimisation form: paper §4.1 and review-implicit-em "
    "major comment 4",
    Config=Config,
    run=run,
)
