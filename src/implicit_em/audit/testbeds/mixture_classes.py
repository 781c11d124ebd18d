r"""The prior-free likelihood's ends from the starts a user would use, by EM and by four kinds of gradient descent,
each classified against EM's end from the same start: ``same_optimum``'s deciding arm.

The objective is the mean log-likelihood of a full-covariance Gaussian mixture, no prior (``mixture_ends``'s θ and
its exact Hessian, with every prior strength 0). From every start: EM (``mixture_ends.em_step``, the library's
E-step and the exact M-step, no ridge) to its own fixed point, and gradient ascent on θ (float64) in four variants,
:data:`VARIANTS`: full batch or mini-batches, a fixed step η or one halved after every quarter of the budget's
steps. Each run stops at its declared budget, when the full-data ‖∇‖ falls to ``stop_tol``, at the boundary, or on
a non-finite value. An end is

- at the **boundary** when a weight is below ``(D + 1)/N`` (fewer rows' worth of responsibility than a covariance
  needs) or a covariance's least eigenvalue (in the data's rms variance) below ``cov_floor``;
- **certified** when gradient descent's end, polished by Newton steps with the exact Hessian (its eigenvalues below
  ``curv_floor`` in size dropped, so a saddle's flat directions do not block it; each step must lower ‖∇‖), or where
  they stall by ``mixture_ends.lbfgs``, reaches ‖∇‖ ≤ gtol off the boundary, and the polish moved it less than half
  the θ gap from its point to the nearest other distinct stationary point found (the end is nearer its point than
  any other: the polish located the point, it did not choose one); EM's end when its own step is ≤ ``em_step_tol``;
- else **unconverged**.

Two certified ends are classified by ``mixture_ends.classify`` (the Hessian bound of the same point); where they are
not the same point and an end's Hessian is degenerate, they are another stationary point if either end is a saddle,
else the flat end locates nothing and the pair counts as unconverged. Every end's Hessian's extreme eigenvalues are
kept (a maximum, a saddle, or degenerate).
"""

import itertools
import math
from typing import Any, Protocol

import torch

import implicit_em.audit.testbeds.mixture_ends as ends
from implicit_em.audit.metrics import Metrics

__all__ = [
    "AGREE",
    "ARM",
    "CLASSES",
    "COUNTS",
    "DECIDED",
    "ELSEWHERE",
    "EM_GRAD",
    "EM_STATUS",
    "PAIRS",
    "SADDLE",
    "SHARES",
    "VARIANTS",
    "ClassSettings",
    "at_boundary",
    "descend",
    "distinct_points",
    "em_end",
    "gd_end",
    "locate",
    "pair_class",
    "polish",
    "put_classes",
    "run_arm",
    "shares",
    "value_and_gradient",
]

#: The four gradient-descent variants, in the order of every per-variant list.
VARIANTS = (
    "full batch, fixed step",
    "full batch, decaying step",
    "mini-batch, fixed step",
    "mini-batch, decaying step",
)
#: The classes of a (start, variant) pair: gradient descent's end against EM's end from the same start.
CLASSES = (
    "same point",
    "another stationary point",
    "boundary",
    "EM at the boundary",
    "both at the boundary",
    "unconverged",
)
DECIDED = CLASSES[:4]  # the pairs the rule reads: both ends classified, not both at the boundary
ELSEWHERE = CLASSES[1:4]  # gradient descent and EM end at different places


class ClassSettings(ends.SameRule, Protocol):
    """What the arm reads from a claim's config besides :class:`~mixture_ends.SameRule`."""

    @property
    def step(self) -> float: ...  # η × the largest |eigenvalue| of the Hessian over the starts
    @property
    def steps(self) -> int: ...  # every run's budget, steps
    @property
    def batch_size(self) -> int: ...
    @property
    def stop_tol(self) -> float: ...  # a run stops once the full-data ‖∇‖ is at most this
    @property
    def check_every(self) -> int: ...  # full-batch steps between two checks of the boundary
    @property
    def newton_max(self) -> int: ...
    @property
    def lbfgs_max_evals(self) -> int: ...
    @property
    def cov_floor(self) -> float: ...  # a covariance's least eigenvalue, in the data's rms variance
    @property
    def em_step_tol(self) -> float: ...
    @property
    def em_max_iter(self) -> int: ...
    @property
    def em_block(self) -> int: ...
    @property
    def hessian_chunk(self) -> int: ...


# -- the objective's value and gradient for many θ at once ---------------------------------------------------------


def _parts(thetas: torch.Tensor, k: int, d: int) -> tuple[torch.Tensor, ...]:
    """θ (R, P) as logits (R, K), means (R, K, D), log-diagonals (R, K, D), W (R, K, D, D) upper triangular."""
    r = len(thetas)
    logits = thetas[:, :k]
    means = thetas[:, k : k + k * d].reshape(r, k, d)
    logdiag = thetas[:, k + k * d : k + 2 * k * d].reshape(r, k, d)
    rows, cols = torch.triu_indices(d, d, 1)
    w = torch.diag_embed(torch.exp(logdiag))
    w[:, :, rows, cols] = thetas[:, k + 2 * k * d :].reshape(r, k, len(rows))
    return logits, means, logdiag, w


def value_and_gradient(thetas: torch.Tensor, phi: torch.Tensor, k: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The mean log-likelihood of rows φ (n, F) (``mixture_ends.Problem.phi``) and its gradient in θ, for R
    parameter vectors at once (R, P), float64: one product φ Aᵀ for all, then Fisher's identity, the gradient of
    :math:`\sum_k [N_k(\log π_k + \sum_i \log W_{ii}) - \tfrac12 \operatorname{tr} W^\top C_k W]/n` with the
    responsibility-weighted statistics (N_k, Σ r u, Σ r u uᵀ) held fixed (checked against autograd in the tests)."""
    logits, means, logdiag, w = _parts(thetas, k, d)
    r, f = len(thetas), phi.shape[1]
    prec = w @ w.mT
    pm = (prec @ means[..., None])[..., 0]
    tri_r, tri_c = torch.triu_indices(d, d)
    quad = -0.5 * prec[:, :, tri_r, tri_c] * torch.where(tri_r == tri_c, 1.0, 2.0).double()
    logpi = torch.log_softmax(logits, 1)
    const = logpi + logdiag.sum(-1) - 0.5 * d * math.log(2 * math.pi) - 0.5 * (pm * means).sum(-1)
    a = torch.cat([quad, pm, const[..., None]], -1).reshape(r * k, f)
    scores = phi @ a.T  # (n, R·K), turned into the responsibilities in place (one exp, few temporaries)
    joint = scores.view(len(phi), r, k)
    top = joint.amax(2, keepdim=True)
    total = joint.sub_(top).exp_().sum(2, keepdim=True)
    joint.div_(total)
    lse = total.log_().add_(top)
    t = (scores.T @ phi).reshape(r, k, f) / len(phi)
    q = len(tri_r)
    nk, s1 = t[..., q + d], t[..., q : q + d]
    s2 = torch.zeros(r, k, d, d, dtype=thetas.dtype)
    s2[:, :, tri_r, tri_c] = t[..., :q]
    s2[:, :, tri_c, tri_r] = t[..., :q]
    outer = s1[..., :, None] * means[..., None, :]
    scatter = s2 - outer - outer.mT + nk[..., None, None] * means[..., :, None] * means[..., None, :]
    g_w = -scatter @ w  # the gradient in W of −½ tr(Wᵀ C W)
    diag, (rows, cols) = torch.arange(d), torch.triu_indices(d, d, 1)
    grad = torch.cat(
        [
            nk - logpi.exp(),
            (prec @ (s1 - nk[..., None] * means)[..., None])[..., 0].reshape(r, -1),
            (nk[..., None] + w[:, :, diag, diag] * g_w[:, :, diag, diag]).reshape(r, -1),
            g_w[:, :, rows, cols].reshape(r, -1),
        ],
        1,
    )
    return lse.mean(0)[:, 0], grad


def at_boundary(thetas: torch.Tensor, k: int, d: int, n: int, cov_floor: float) -> torch.Tensor:
    """Per θ (R, P): a weight below (D + 1)/n, or a covariance whose least eigenvalue (standardised units: the
    data's rms variance is 1) is below ``cov_floor`` (its precision's largest above 1/cov_floor), or non-finite."""
    finite = torch.isfinite(thetas).all(1)
    safe = torch.where(finite[:, None], thetas, 0.0)
    logits, _, _, w = _parts(safe, k, d)
    weights = torch.softmax(logits, 1)
    prec_top = torch.linalg.eigvalsh(w @ w.mT)[..., -1].amax(1)
    return ~finite | ~torch.isfinite(prec_top) | (weights.amin(1) < (d + 1) / n) | (prec_top > 1 / cov_floor)


# -- gradient ascent, many runs at once ----------------------------------------------------------------------------


def _check(
    thetas: torch.Tensor, phi: torch.Tensor, k: int, d: int, cfg: ClassSettings, boundary: bool
) -> tuple[torch.Tensor, list[str]]:
    """(the full-data gradient (R, P), why each run stops now: "" to go on, else its reason; the boundary is read
    only if ``boundary``)."""
    value, grad = value_and_gradient(thetas, phi, k, d)
    small = (grad.norm(dim=1) <= cfg.stop_tol).tolist()
    edge = at_boundary(thetas, k, d, len(phi), cfg.cov_floor).tolist() if boundary else [False] * len(thetas)
    bad = (~(torch.isfinite(value) & torch.isfinite(grad).all(1))).tolist()
    return grad, [
        "diverged" if b else "boundary" if e else "stop_tol" if m else ""
        for m, e, b in zip(small, edge, bad, strict=True)
    ]


def descend(
    thetas: torch.Tensor,
    phi: torch.Tensor,
    k: int,
    d: int,
    variant: str,
    eta: float,
    cfg: ClassSettings,
    order: torch.Generator,
) -> tuple[torch.Tensor, list[int], list[str]]:
    """Gradient ascent on the mean log-likelihood from every θ (R, P) in one ``variant`` (:data:`VARIANTS`), step
    η = ``eta`` (fixed), or η halved after every quarter of the budget (decaying: η, η/2, η/4, η/8): each run until
    its full-data ‖∇‖ ≤ ``stop_tol``, the boundary, a non-finite value, or the budget of ``steps`` steps (full
    batch, or mini-batches of ``batch_size`` rows drawn without replacement, in passes over the data in one order,
    ``order``'s, that the runs share). The full-data checks come every step (full batch; the boundary every
    ``check_every`` steps) or before every pass. Returns (θ at the ends, steps taken, why each run stopped:
    stop_tol, boundary, diverged or budget)."""
    full, decaying = variant.startswith("full"), "decaying" in variant
    n = len(phi)
    per_pass = 1 if full else math.ceil(n / cfg.batch_size)
    budget = cfg.steps
    thetas, taken, why = thetas.clone(), [0] * len(thetas), ["budget"] * len(thetas)
    live, rows = list(range(len(thetas))), torch.arange(n)
    for t in range(budget + 1):
        if t % per_pass == 0 or t == budget:
            grad, now = _check(thetas[live], phi, k, d, cfg, not full or t % cfg.check_every == 0 or t == budget)
            now = now if t else [""] * len(now)  # no run stops before its first step
            for i, reason in zip(live, now, strict=True):
                why[i] = reason or why[i]
            grad, live = grad[[not r for r in now]], [i for i, r in zip(live, now, strict=True) if not r]
            rows = rows if full else torch.randperm(n, generator=order)
        if t == budget or not live:
            break
        if not full:
            batch = rows[(t % per_pass) * cfg.batch_size : (t % per_pass + 1) * cfg.batch_size]
            grad = value_and_gradient(thetas[live], phi[batch], k, d)[1]
        thetas[live] += eta * 0.5 ** min(4 * t // budget, 3) * grad if decaying else eta * grad
        for i in live:
            taken[i] += 1
    return thetas, taken, why


def _newton(theta: torch.Tensor, pr: ends.Problem, cfg: ClassSettings) -> tuple[torch.Tensor, float, int]:
    """Newton steps from θ with the exact Hessian on the directions that change the mixture, its eigenvalues of
    size below ``curv_floor`` dropped (a pseudo-inverse: flat directions, such as the weights among identical
    components, stay put), while ‖∇‖ > gtol, at most ``newton_max``, each taken only if it lowers ‖∇‖ (the
    reference form's): it converges to the stationary point of any kind (a saddle too) whose quadratic region
    holds θ. Returns (θ, ‖∇‖, steps)."""
    q = ends.gauge_basis(pr.k, pr.d)
    norm, done = float(ends.gradient(theta, pr)[1].norm()), 0
    while norm > cfg.gtol and done < cfg.newton_max:
        lam, vec = torch.linalg.eigh(q.T @ ends.hessian(theta, pr, cfg.hessian_chunk) @ q)
        keep = lam.abs() >= cfg.curv_floor
        g = q.T @ ends.gradient(theta, pr)[1]
        candidate = theta - q @ (vec[:, keep] @ ((vec[:, keep].T @ g) / lam[keep]))
        norm_new = float(ends.gradient(candidate, pr)[1].norm())
        if not norm_new < norm:
            break
        theta, norm, done = candidate, norm_new, done + 1
    return theta, norm, done


def polish(theta: torch.Tensor, pr: ends.Problem, cfg: ClassSettings) -> tuple[torch.Tensor, float, str, float]:
    """Gradient descent's end polished to the certificate: Newton steps (:func:`_newton`), and where they stall
    above gtol, ``mixture_ends.lbfgs`` from the same end (L-BFGS rounds, then Newton steps while the Hessian is
    negative definite: an ascent method, to the maximum nearby). Returns (θ, ‖∇‖, what polished it: "Newton ×s"
    or "L-BFGS ×e + Newton ×s" (s steps, e evaluations), the distance moved from the end)."""
    polished, norm, done = _newton(theta, pr, cfg)
    how = f"Newton ×{done}"
    if norm > cfg.gtol:
        polished, norm, evals, newton = ends.lbfgs(
            theta, pr, cfg.gtol, cfg.lbfgs_max_evals, cfg.hessian_chunk, cfg.newton_max
        )
        how = f"L-BFGS ×{evals} + Newton ×{newton}"
    return polished, norm, how, float((polished - theta).norm())


def em_end(data: Any, start: Any, pr: ends.Problem, cfg: ClassSettings) -> dict[str, Any]:
    """EM (``mixture_ends.em_step``, no ridge) from ``start`` until its step (the largest change of θ in one
    iteration) is ≤ ``em_step_tol`` (certified), the boundary (read every ``em_block`` iterations; a covariance
    that cannot be factorised is at it), or ``em_max_iter`` (unconverged)."""
    params, done, step, status = start, 0, math.inf, "unconverged"
    n = len(pr.u)
    while done < cfg.em_max_iter:
        try:
            for _ in range(cfg.em_block - 1):
                params = ends.em_step(data, params, pr)
            before, params = params, ends.em_step(data, params, pr)
        except (RuntimeError, ValueError):  # a singular covariance: the Cholesky factor fails
            status = "boundary"
            break
        done += cfg.em_block
        diff = ends.pack(params, pr) - ends.pack(before, pr)
        diff[: pr.k] -= diff[: pr.k].mean()
        step = float(diff.abs().max())
        if bool(at_boundary(ends.pack(params, pr)[None], pr.k, pr.d, n, cfg.cov_floor)[0]):
            status = "boundary"
            break
        if step <= cfg.em_step_tol:
            status = "certified"
            break
    theta = ends.pack(params, pr)
    return {"params": params, "theta": theta, "status": status, "iterations": done, "step": step}


# -- one end and one pair --------------------------------------------------------------------------------------------


def _end(theta: torch.Tensor, pr: ends.Problem, status: str, cfg: ClassSettings) -> dict[str, Any]:
    """An end's record: its status, ‖∇‖, objective, curvature (least, largest, least |λ|; at certified ends only),
    smallest weight and least covariance eigenvalue (standardised)."""
    if not bool(torch.isfinite(theta).all()):
        nan = math.nan
        record = {"status": status, "theta": theta, "grad": nan, "curv": [nan] * 3, "ll": nan}
        return record | {"least_weight": nan, "least_var": nan}
    curv = ends.curvature(theta, pr, cfg.hessian_chunk) if status == "certified" else (math.nan,) * 3
    logits, _, _, w = _parts(theta[None], pr.k, pr.d)
    return {
        "status": status,
        "theta": theta,
        "grad": float(ends.gradient(theta, pr)[1].norm()),
        "curv": list(curv),
        "ll": float(ends.mean_loglik_direct(theta, pr.u, pr.k, pr.d)),
        "least_weight": float(torch.softmax(logits[0], 0).min()),
        "least_var": float(1 / torch.linalg.eigvalsh(w[0] @ w[0].mT)[:, -1].max()),
    }


def gd_end(theta: torch.Tensor, why: str, pr: ends.Problem, cfg: ClassSettings) -> dict[str, Any]:
    """Gradient descent's end: at the boundary, unconverged if it diverged, else polished (:func:`polish`) and
    certified when the polish reaches gtol off the boundary (provisionally: :func:`locate` reads its move), else
    unconverged (``grad_before``: ‖∇‖ where the run stopped, before the polish)."""
    n = len(pr.u)
    finite = bool(torch.isfinite(theta).all())
    before = {"why": why, "polish": "none", "move": 0.0}
    before["grad_before"] = float(ends.gradient(theta, pr)[1].norm()) if finite else math.nan
    if why == "boundary" or (finite and bool(at_boundary(theta[None], pr.k, pr.d, n, cfg.cov_floor)[0])):
        return _end(theta, pr, "boundary", cfg) | before
    if not finite or why == "diverged":
        return _end(theta, pr, "unconverged", cfg) | before
    polished, norm, how, move = polish(theta, pr, cfg)
    ok = norm <= cfg.gtol and not bool(at_boundary(polished[None], pr.k, pr.d, n, cfg.cov_floor)[0])
    end = _end(polished if ok else theta, pr, "certified" if ok else "unconverged", cfg)
    return end | before | {"polish": how, "move": move}


def pair_class(gd: dict[str, Any], em: dict[str, Any], pr: ends.Problem, cfg: ClassSettings) -> str:
    """Gradient descent's end against EM's end from the same start (:data:`CLASSES`): two certified ends by
    ``mixture_ends.classify``, where "slow region" (not the same point, an end degenerate) counts as another
    stationary point when either end is a saddle (largest eigenvalue ≥ ``curv_floor``), else as unconverged."""
    statuses = (gd["status"], em["status"])
    if "unconverged" in statuses:
        return "unconverged"
    if statuses == ("boundary", "boundary"):
        return "both at the boundary"
    if statuses != ("certified", "certified"):
        return "boundary" if gd["status"] == "boundary" else "EM at the boundary"
    a, b = ends.unpack(gd["theta"], pr), ends.unpack(em["theta"], pr)
    kind = ends.classify(ends.theta_gap(a, b, pr), abs(gd["ll"] - em["ll"]), em["ll"], gd["curv"], em["curv"], cfg)
    if kind == "slow region":  # a degenerate end locates nothing, unless it is a saddle: then it is no maximum
        saddle = max(gd["curv"][1], em["curv"][1]) >= cfg.curv_floor
        return "another stationary point" if saddle else "unconverged"
    return kind if kind == "same point" else "another stationary point"


# -- the arm: every start, the two planted controls --------------------------------------------------------------


def _variant_ends(
    thetas: torch.Tensor, pr: ends.Problem, variant: str, eta: float, cfg: ClassSettings, order: torch.Generator
) -> list[dict[str, Any]]:
    """One variant from every θ (R, P): its ends (:func:`gd_end`) with the steps each run took."""
    out, taken, why = descend(thetas, pr.phi, pr.k, pr.d, variant, eta, cfg, order)
    return [gd_end(out[i], why[i], pr, cfg) | {"steps": taken[i]} for i in range(len(out))]


def _em_record(data: Any, start: Any, pr: ends.Problem, cfg: ClassSettings) -> dict[str, Any]:
    """EM's end from ``start`` (:func:`em_end`) as an end's record, with its iterations and last step."""
    e = em_end(data, start, pr, cfg)
    return _end(e["theta"], pr, e["status"], cfg) | {"iterations": e["iterations"], "step": e["step"]}


def _same(a: dict[str, Any], b: dict[str, Any], pr: ends.Problem, cfg: ClassSettings) -> tuple[bool, float]:
    """Whether two certified ends are one point (``mixture_ends.classify``), and their θ gap."""
    gap = ends.theta_gap(ends.unpack(a["theta"], pr), ends.unpack(b["theta"], pr), pr)
    return ends.classify(gap, abs(a["ll"] - b["ll"]), b["ll"], a["curv"], b["curv"], cfg) == "same point", gap


def distinct_points(points: list[dict[str, Any]], pr: ends.Problem, cfg: ClassSettings) -> list[dict[str, Any]]:
    """One end for every distinct certified point among the ends ``points``, in their order."""
    distinct: list[dict[str, Any]] = []
    for p in points:
        if p["status"] == "certified" and not any(_same(p, q, pr, cfg)[0] for q in distinct):
            distinct.append(p)
    return distinct


def locate(end: dict[str, Any], distinct: list[dict[str, Any]], pr: ends.Problem, cfg: ClassSettings) -> Any:
    """A polished end stays certified only where gradient descent's end is nearer its point than any other distinct
    stationary point found (``distinct``): the polish's move below half the θ gap from its point to the nearest
    other one (∞ if none), so the polish located the point the run was at, it did not choose one. Adds ``reach``:
    the move over that half gap (0 for an end that was not polished)."""
    if end["status"] != "certified" or not end["move"]:
        return end | {"reach": 0.0}
    nearest = min((gap for same, gap in (_same(end, q, pr, cfg) for q in distinct) if not same), default=math.inf)
    reach = end["move"] / (nearest / 2)
    return end | {"reach": reach, "status": "certified" if reach < 1 else "unconverged"}


def run_arm(data: Any, x: Any, starts: list[Any], pr: ends.Problem, cfg: ClassSettings, seed: int) -> dict[str, Any]:
    """EM and every variant from every start, and the planted controls: the saddle (K copies of the one-Gaussian
    fit: gradient 0, a positive eigenvalue) and EM's end from the first start where it is certified. The step is
    η = ``step`` / L, L the largest |eigenvalue| of the Hessian over the starts (the textbook 1/L); the mini-batch
    orders come from ``seeds.torch_generator(seed, "same_optimum classes", "order", variant)``. Returns EM's ends
    (``em``), per variant gradient descent's ends (``gd``) and their classes (``classes``), and the controls: the
    saddle's EM end (``saddle_em``) and per variant its end with its class against it (``saddle``), and per variant
    the class of the end from EM's certified end against it (``agree``, empty when no EM end is certified)."""
    from implicit_em.audit import seeds

    em = [_em_record(data, s, pr, cfg) for s in starts]
    ref = next((i for i, e in enumerate(em) if e["status"] == "certified"), None)
    planted = ends.one_gaussian_point(x, pr.k, 0.0, 0.0)
    saddle_em = _em_record(data, planted, pr, cfg)
    thetas = [ends.pack(s, pr) for s in starts]
    top = max(max(abs(c[0]), abs(c[1])) for c in (ends.curvature(t, pr, cfg.hessian_chunk) for t in thetas))
    thetas += [ends.pack(planted, pr)] + ([] if ref is None else [em[ref]["theta"]])
    every = []
    for v, variant in enumerate(VARIANTS):
        order = seeds.torch_generator(seed, "same_optimum classes", "order", v)
        every.append(_variant_ends(torch.stack(thetas), pr, variant, cfg.step / top, cfg, order))
    distinct = distinct_points([*em, saddle_em, *(g for runs in every for g in runs)], pr, cfg)
    gd, classes, saddle, agree = [], [], [], []
    for runs in ([locate(g, distinct, pr, cfg) for g in runs] for runs in every):
        gd.append(runs[: len(starts)])
        classes.append([pair_class(g, e, pr, cfg) for g, e in zip(runs[: len(starts)], em, strict=True)])
        saddle.append(runs[len(starts)] | {"class": pair_class(runs[len(starts)], saddle_em, pr, cfg)})
        agree += [] if ref is None else [pair_class(runs[-1], em[ref], pr, cfg)]
    apart = ref is not None and saddle_em["status"] == "certified" and not _same(saddle_em, em[ref], pr, cfg)[0]
    typed = sum(e["status"] == "certified" and e["curv"][1] >= cfg.curv_floor for e in [saddle_em, *saddle])
    return {
        "em": em,
        "gd": gd,
        "classes": classes,
        "saddle_em": saddle_em | {"told apart": apart},
        "saddle": saddle,
        "saddle_typed": typed if apart else 0,
        "separation": min((_same(a, b, pr, cfg)[1] for a, b in itertools.combinations(distinct, 2)), default=math.inf),
        "distinct": [p["ll"] for p in distinct],
        "agree": agree,
        "ref": ref,
        "eta": cfg.step / top,
    }


# -- the arm's metrics --------------------------------------------------------------------------------------------

ARM = "deciding arm (prior-free likelihood)"
PAIRS = f"{ARM}: class of gradient descent's end against EM's, per variant and start"
COUNTS = f"{ARM}: pairs per class, all variants"
SHARES = f"{ARM}: decided pairs, and the same point and elsewhere as shares of them"
SADDLE = "control: planted saddle (K copies of the one-Gaussian fit), ends certified, typed a saddle and told apart"
EM_GRAD = f"{ARM}: ‖∇‖ at EM's end, per start"
AGREE = "control: from EM's certified end, variants that end at the same point"
EM_STATUS = f"{ARM}: EM's end per start: certified, boundary or unconverged"


def shares(classes: list[list[str]]) -> tuple[int, int, int, int]:
    """(pairs, decided pairs, same point, elsewhere) over every variant's classes."""
    flat = [c for per_variant in classes for c in per_variant]
    decided = [c for c in flat if c in DECIDED]
    return len(flat), len(decided), decided.count("same point"), sum(c in ELSEWHERE for c in decided)


def _per_variant(r: dict[str, Any], entry: str) -> dict[str, list[Any]]:
    return {variant: [g[entry] for g in r["gd"][v]] for v, variant in enumerate(VARIANTS)}


def _gd_values(r: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """Gradient descent's per-variant, per-start metrics (:func:`put_classes`): key → (value, unit)."""
    return {
        f"{ARM}: why each run stopped, per variant and start": (_per_variant(r, "why"), "class"),
        f"{ARM}: steps taken, per variant and start": (_per_variant(r, "steps"), "steps"),
        f"{ARM}: ‖∇‖ where gradient descent stopped, per variant and start": (
            _per_variant(r, "grad_before"),
            "gradient norm",
        ),
        f"{ARM}: what polished gradient descent's end, per variant and start": (_per_variant(r, "polish"), "text"),
        f"{ARM}: the polish's move, per variant and start": (_per_variant(r, "move"), "θ units"),
        f"{ARM}: ‖∇‖ at gradient descent's end (polished if certified), per variant and start": (
            _per_variant(r, "grad"),
            "gradient norm",
        ),
        f"{ARM}: Hessian's eigenvalues at gradient descent's certified end, per variant and start": (
            _per_variant(r, "curv"),
            "curvature",
        ),
        f"{ARM}: log-likelihood at gradient descent's end, per variant and start (nats/sample, standardised)": (
            _per_variant(r, "ll"),
            "nats/sample",
        ),
        f"{ARM}: smallest weight at gradient descent's end, per variant and start": (
            _per_variant(r, "least_weight"),
            "fraction",
        ),
    }


def put_classes(m: Metrics, r: dict[str, Any], kinds: list[str]) -> None:
    """Declare the arm's metrics in ``m`` (``r``: :func:`run_arm`'s record; ``kinds``: each start's kind)."""
    total, decided, same, elsewhere = shares(r["classes"])
    flat = [c for per_variant in r["classes"] for c in per_variant]
    values: dict[str, tuple[Any, str]] = {
        f"{ARM}: the starts' kinds": (kinds, "names"),
        f"{ARM}: step η (1/L, L the largest |eigenvalue| of the Hessian over the starts)": (r["eta"], "learning rate"),
        EM_STATUS: ([e["status"] for e in r["em"]], "class"),
        f"{ARM}: EM's iterations, per start": ([e["iterations"] for e in r["em"]], "iterations"),
        f"{ARM}: EM's last step (largest change of θ), per start": ([e["step"] for e in r["em"]], "θ units"),
        EM_GRAD: ([e["grad"] for e in r["em"]], "gradient norm"),
        f"{ARM}: Hessian's eigenvalues (least, largest, least |λ|) at EM's end, per start": (
            [e["curv"] for e in r["em"]],
            "curvature",
        ),
        f"{ARM}: log-likelihood at EM's end, per start (nats/sample, standardised)": (
            [e["ll"] for e in r["em"]],
            "nats/sample",
        ),
        f"{ARM}: smallest weight at EM's end, per start": ([e["least_weight"] for e in r["em"]], "fraction"),
        PAIRS: (dict(zip(VARIANTS, r["classes"], strict=True)), "class"),
        COUNTS: ({c: flat.count(c) for c in CLASSES}, "count"),
        SHARES: ([decided / total, same / max(decided, 1), elsewhere / max(decided, 1)], "fraction"),
        **_gd_values(r),
        f"{ARM}: the smallest θ gap between distinct certified points": (r["separation"], "θ units"),
        f"{ARM}: log-likelihood at every distinct certified point (nats/sample, standardised)": (
            r["distinct"],
            "nats/sample",
        ),
        f"{ARM}: the polish's move over half the gap from its point to the nearest other, per variant and start": (
            _per_variant(r, "reach"),
            "ratio",
        ),
        SADDLE: (r["saddle_typed"], "count"),
        f"{SADDLE}: EM's end's status, told apart from EM's first certified end, Hessian's eigenvalues": (
            [r["saddle_em"]["status"], r["saddle_em"]["told apart"], r["saddle_em"]["curv"]],
            "mixed",
        ),
        f"{SADDLE}: per variant, its end's class against EM's there, the polish's move, Hessian's eigenvalues": (
            [[s["class"], s["move"], s["curv"]] for s in r["saddle"]],
            "mixed",
        ),
        AGREE: (r["agree"].count("same point") if r["agree"] else 0, "count"),
        f"{AGREE}: per variant": (r["agree"], "class"),
    }
    for key, (value, unit) in values.items():
        m.put(key, value, unit, key.removesuffix(f" ({unit})"))
