r"""The certified fixed points of a Gaussian mixture's penalised log-likelihood, by two methods: full-batch L-BFGS
(with Newton steps) and EM, on one parametrisation with its exact gradient and Hessian (``same_optimum``).

θ (P = K + 2KD + KD(D−1)/2) holds K logits (softmax weights; a common shift changes nothing), the standardised means
(μ − shift)/scale, and the log-diagonal and off-diagonal of W, the upper Cholesky factor of each precision in
standardised units (Λ = W Wᵀ = s² P). The objective is

.. math:: f(θ) = \frac1N \sum_n \log \sum_j π_j \mathcal N(u_n; μ_j, Λ_j^{-1})
          + \frac1N \sum_j \big[(α-1)\log π_j + \tfrac c2 \log|Λ_j| - \tfrac{w}{2}\operatorname{tr}Λ_j
          - \tfrac κ2 μ_j^\top Λ_j μ_j\big]

(u = (x − shift)/scale; a Dirichlet α − 1 on the weights, a Wishart of strength w on every precision, a normal prior
κ on every mean, c = ν − D − 1 (+1 with a mean prior)). EM's M-step maximises it exactly (:func:`em_step`), so both
methods optimise one objective with the same E-step. An end is certified by ‖∇f‖ (L-BFGS) or EM's own step; the
exact Hessian's eigenvalues on the directions that change the mixture (:func:`curvature`) say whether it is a strict
maximum, a saddle or degenerate, and bound how far it lies from its stationary point (:func:`same_radius`).
"""

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from implicit_em import gaussian
from implicit_em.audit.testbeds.mixture_paths import COVARIANCE, matched_gap, shift_scale

__all__ = [
    "CertificateSettings",
    "Problem",
    "SameRule",
    "certified_em",
    "certified_ends",
    "certified_lbfgs",
    "classify",
    "curvature",
    "em_fixed_point",
    "em_step",
    "fisher_and_xu_jordan",
    "gauge_basis",
    "gradient",
    "hessian",
    "identity_sizes",
    "lbfgs",
    "lbfgs_from",
    "mean_loglik",
    "mean_loglik_direct",
    "n_params",
    "objective",
    "objective_direct",
    "one_gaussian_point",
    "pack",
    "parts",
    "path_identities",
    "penalty",
    "planted_start",
    "prior_terms",
    "problem",
    "same_radius",
    "theta_gap",
    "unpack",
    "value",
]


@dataclass(frozen=True)
class Problem:
    """The data in standardised coordinates u = (x − shift) / scale (the scalar scale of ``shift_scale``), its
    quadratic features φ(u) = [u_a u_b (a ≤ b), u, 1] (the fast objective is one product φ A), and K, D."""

    u: Tensor
    phi: Tensor
    k: int
    d: int
    shift: Tensor
    scale: float
    prior: float = 1.0  # the Wishart prior's strength on every precision, in pseudo-samples
    weight_prior: float = 0.0  # α − 1 of the symmetric Dirichlet prior on the weights (pseudo-rows per component)
    mean_prior: float = 0.0  # κ of the normal prior μ_j | P_j ~ N(data mean, (κ P_j)⁻¹) on every mean
    logdet: float = 0.0  # the coefficient c of Σ_j log|P_j| / 2: ν − D − 1 of the Wishart, + 1 with a mean prior


def problem(
    x: np.ndarray, k: int, prior: float = 1.0, weight_prior: float = 0.0, mean_prior: float = 0.0, logdet: float = 0.0
) -> Problem:
    """The :class:`Problem` of data ``x`` (N, D) for a K-component fit, with the priors' strengths (the defaults:
    the Wishart with ν = D + 1 alone, the objective ``same_optimum`` used before it had a prior on every
    parameter)."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    shift, scale = shift_scale(xt)
    u = (xt - shift) / scale
    rows, cols = torch.triu_indices(u.shape[1], u.shape[1])
    phi = torch.cat([u[:, rows] * u[:, cols], u, torch.ones(len(u), 1, dtype=torch.float64)], 1)
    return Problem(u, phi, k, u.shape[1], shift, scale, prior, weight_prior, mean_prior, logdet)


def n_params(k: int, d: int) -> int:
    """The length of θ: K logits, K·D means, K·D log-diagonals and K·D(D−1)/2 off-diagonals of W."""
    return k + 2 * k * d + k * d * (d - 1) // 2


def parts(theta: Tensor, k: int, d: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
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
    from implicit_em.mixture._stats import MixtureParams

    logits, means, _, w = parts(theta.detach(), pr.k, pr.d)
    prec_chol = w / pr.scale
    cov = gaussian.covariances_from_precisions_cholesky(prec_chol, COVARIANCE)
    return MixtureParams(torch.softmax(logits, 0), means * pr.scale + pr.shift, cov, prec_chol)


def _log_prob(theta: Tensor, u: Tensor, k: int, d: int) -> Tensor:
    """log π_k + log N(u_n; μ_k, (W_k W_kᵀ)⁻¹), (N, K), computed directly from (u − μ) W (the reference form)."""
    logits, means, logdiag, w = parts(theta, k, d)
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
    logits, means, logdiag, w = parts(theta, k, d)
    prec = w @ w.mT
    prec_mean = (prec @ means[:, :, None])[..., 0]
    rows, cols = torch.triu_indices(d, d)
    quad = -0.5 * prec[:, rows, cols] * torch.where(rows == cols, 1.0, 2.0).double()
    const = torch.log_softmax(logits, 0) + logdiag.sum(1) - 0.5 * d * math.log(2 * math.pi)
    const = const - 0.5 * (prec_mean * means).sum(1)
    a = torch.cat([quad, prec_mean, const[:, None]], 1)
    return torch.logsumexp(pr.phi @ a.T, 1).mean()


def prior_terms(logits: Tensor, means: Tensor, logdiag: Tensor, w: Tensor, pr: Problem) -> Tensor:
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
    minus this. With the defaults, the Wishart prior alone,
    :math:`\tfrac{\text{prior}}{2N}\sum_j \operatorname{tr}(s^2 P_j) = \tfrac{\text{prior}}{2N}\sum_j
    \lVert W_j\rVert_F^2` (P_j the precision in the data's units, s the scale)."""
    logits, means, logdiag, w = parts(theta, pr.k, pr.d)
    return -prior_terms(logits, means, logdiag, w, pr) / len(pr.u)


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


def _slots(k: int, d: int) -> Tensor:
    """(K, 2D + D(D−1)/2): the slots of component j's block in θ (its means, log-diagonals, off-diagonals)."""
    return torch.stack(
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


def _score_vectors(theta: Tensor, u: Tensor, pr: Problem, slots: Tensor) -> tuple[Tensor, Tensor]:
    """(r (n, K), v (n, K, P)) of rows u (n, D): the responsibilities and the per-sample gradients v_nk = ∇_θ a_nk,
    a_nk = log π_k + log N(u_n; θ_k)."""
    k, d = pr.k, pr.d
    p = n_params(k, d)
    logits, means, _, w = parts(theta, k, d)
    pi = torch.softmax(logits, 0)
    rows, cols = torch.triu_indices(d, d, 1)
    diag = torch.diagonal(w, dim1=-2, dim2=-1)
    r = torch.softmax(_log_prob(theta, u, k, d), 1)  # (n, K)
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
    v[:, :, :k] = torch.eye(k, dtype=torch.float64) - pi
    v.scatter_(2, slots[None].expand(len(u), -1, -1), block)
    return r, v


def _outer_and_statistics(theta: Tensor, pr: Problem, chunk: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(Σ_nk r_nk (v_nk − v̄_n)(v_nk − v̄_n)ᵀ (P, P), N_k (K,), Σ_n r_nk u_n (K, D), Σ_n r_nk u_n u_nᵀ (K, D, D)),
    accumulated over blocks of ``chunk`` rows."""
    k, d = pr.k, pr.d
    p = n_params(k, d)
    slots = _slots(k, d)
    outer = torch.zeros(p, p, dtype=torch.float64)
    nk = torch.zeros(k, dtype=torch.float64)
    s1 = torch.zeros(k, d, dtype=torch.float64)
    s2 = torch.zeros(k, d, d, dtype=torch.float64)
    for i in range(0, len(pr.u), chunk):
        u = pr.u[i : i + chunk]
        r, v = _score_vectors(theta, u, pr, slots)
        nk += r.sum(0)
        s1 += r.T @ u
        s2 += torch.einsum("nk,na,nb->kab", r, u, u)
        centred = (v - torch.einsum("nk,nkp->np", r, v)[:, None]) * r.sqrt()[..., None]
        flat = centred.reshape(-1, p)
        outer += flat.T @ flat
    return outer, nk, s1, s2


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
    theta = theta.detach()
    outer, nk, s1, s2 = _outer_and_statistics(theta, pr, chunk)

    def weighted(t: Tensor) -> Tensor:
        lg, mu, ld, ww = parts(t, k, d)
        scatter = s2 - s1[:, :, None] * mu[:, None, :] - mu[:, :, None] * s1[:, None, :]
        scatter = scatter + nk[:, None, None] * mu[:, :, None] * mu[:, None, :]
        quad = torch.einsum("kab,kac,kbc->k", scatter, ww, ww)  # tr(Wᵀ C W)
        prior = prior_terms(lg, mu, ld, ww, pr)  # the priors' term (−N × penalty)
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


def _lbfgs_rounds(theta: Tensor, pr: Problem, gtol: float, max_evals: int) -> tuple[Tensor, float, int]:
    """Rounds of torch's L-BFGS (200 iterations each, strong-Wolfe) on −objective until ‖∇‖ ≤ gtol, ``max_evals``
    evaluations, or three rounds that do not halve ‖∇‖; a round that ends on a non-finite objective (the line
    search extrapolated into an overflow) is undone and counts as one without progress. (θ, ‖∇‖, evaluations)."""
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
    return t.detach(), norm, evals


def _newton(theta: Tensor, norm: float, pr: Problem, gtol: float, chunk: int, most: int) -> tuple[Tensor, float, int]:
    """Newton steps with the exact Hessian (on the directions that change the mixture) from θ with ‖∇‖ = norm,
    while ‖∇‖ > gtol, at most ``most``, each taken only while the Hessian is negative definite and it lowers ‖∇‖.
    (θ, ‖∇‖, steps)."""
    newton = 0
    q = gauge_basis(pr.k, pr.d)
    while norm > gtol and newton < most:
        h = q.T @ hessian(theta, pr, chunk) @ q
        if float(torch.linalg.eigvalsh(h)[-1]) >= 0:
            break
        g = gradient(theta, pr)[1]
        candidate = theta - q @ torch.linalg.solve(h, q.T @ g)
        norm_new = float(gradient(candidate, pr)[1].norm())
        if not norm_new < norm:
            break
        theta, norm, newton = candidate, norm_new, newton + 1
    return theta, norm, newton


def lbfgs(
    theta: Tensor, pr: Problem, gtol: float, max_evals: int, chunk: int = 2000, newton_max: int = 20
) -> tuple[Tensor, float, int, int]:
    """Full-batch float64 L-BFGS (:func:`_lbfgs_rounds`) from θ until the certificate ‖∇‖ ≤ gtol (the reference
    form's gradient); then, where it stalls above gtol (its line search stops once the objective's changes reach
    round-off, near 1e-8), Newton steps (:func:`_newton`). Returns (θ, ‖∇‖, L-BFGS evaluations, Newton steps)."""
    theta, norm, evals = _lbfgs_rounds(theta, pr, gtol, max_evals)
    theta, norm, newton = _newton(theta, norm, pr, gtol, chunk, newton_max)
    return theta, norm, evals, newton


def em_step(data: Any, params: Any, pr: Problem, reg_covar: float = 0.0) -> Any:
    """One EM iteration on the objective: the library's E-step statistics (``full_pass``, float64) and the
    M-step of the likelihood with the Wishart prior on every precision, Σ_j = S_j + (prior·s² / N_j) I (S_j the
    responsibility-weighted scatter, s the scale), means and weights as ever. ``reg_covar`` > 0 adds reg_covar·I
    besides (the library's ridge: EM then has other fixed points, a planted effect in the tests)."""
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


class SameRule(Protocol):
    """What :func:`classify` reads from a claim's config: the certificate and the same-point bound's factors."""

    @property
    def gtol(self) -> float: ...  # the certificate ‖∇‖ ≤ gtol
    @property
    def curv_floor(self) -> float: ...  # min|λ| below which an end is degenerate
    @property
    def same_factor(self) -> float: ...  # the Hessian radius's safety factor
    @property
    def same_ll_rel(self) -> float: ...  # |Δ objective| / |objective| of one point


def same_radius(gtol: float, floor: float, *smallest: float) -> float:
    """The distance in θ within which two ends certified at ‖∇‖ ≤ gtol are one stationary point: each lies within
    gtol / min|λ| of its stationary point (the quadratic model), so the two within the sum; min|λ| floored at
    ``floor`` (below it an end is degenerate and locates nothing)."""
    return sum(gtol / max(abs(x), floor) for x in smallest)


def classify(
    gap: float,
    dll: float,
    ll: float,
    curv_a: tuple[float, float, float],
    curv_b: tuple[float, float, float],
    cfg: "SameRule",
) -> str:
    """The classes of two certified ends: "same point" (θ gap ≤ ``same_factor`` × the Hessian
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
    to the largest size of its quantity over them (the means gradient; EM's mean step). Read at the same point
    instead, a path on which EM converges within the checked passes divides round-off by a vanished gradient."""
    sizes = [identity_sizes(data, p, pr) for p in points]
    fisher = max(s[0] for s in sizes) / max(max(s[1] for s in sizes), torch.finfo(torch.float64).tiny)
    xu_jordan = max(s[2] for s in sizes) / max(max(s[3] for s in sizes), torch.finfo(torch.float64).tiny)
    return fisher, xu_jordan


# -- the certified arms from one start ---------------------------------------------------------------------------


class CertificateSettings(SameRule, Protocol):
    """What the certified arms read from a claim's config besides :class:`SameRule`: EM's certificate and the
    budgets."""

    @property
    def em_step_tol(self) -> float: ...  # EM's certificate: one iteration changes θ by at most this
    @property
    def em_reg_covar(self) -> float: ...  # a ridge on EM's covariances (0: EM maximises the objective)
    @property
    def lbfgs_max_evals(self) -> int: ...
    @property
    def newton_max(self) -> int: ...
    @property
    def em_max_iter(self) -> int: ...
    @property
    def em_block(self) -> int: ...
    @property
    def hessian_chunk(self) -> int: ...


def certified_lbfgs(theta: Tensor, pr: Problem, cfg: CertificateSettings) -> tuple[Tensor, float, int, int]:
    """:func:`lbfgs` with the config's certificate and budgets (looked up at call time: tests replace it)."""
    return lbfgs(theta, pr, cfg.gtol, cfg.lbfgs_max_evals, cfg.hessian_chunk, cfg.newton_max)


def certified_em(data: Any, start: Any, pr: Problem, cfg: CertificateSettings) -> tuple[Any, float, int, float]:
    """:func:`em_fixed_point` with the config's certificate and budgets."""
    return em_fixed_point(data, start, pr, cfg.em_step_tol, cfg.em_max_iter, cfg.em_block, cfg.em_reg_covar)


def certified_ends(data: Any, start: Any, pr: Problem, cfg: CertificateSettings, std: float) -> dict[str, Any]:
    """L-BFGS's end and EM's fixed point from one start: ‖∇‖, steps, curvature (least, largest, least |λ|), their
    θ gap and same-point bound, their class, whether the start decides (both certified, neither degenerate) or
    why not, and EM run on from L-BFGS's end (``stay``: its distance over the same-point bound). ``std`` is the
    unit of the means distances."""
    c = cfg.hessian_chunk
    theta_l, grad_l, evals, newton = certified_lbfgs(pack(start, pr), pr, cfg)
    end_l = unpack(theta_l, pr)
    end_e, grad_e, em_iter, step_e = certified_em(data, start, pr, cfg)
    curv_l, curv_e = curvature(theta_l, pr, c), curvature(pack(end_e, pr), pr, c)
    ll_l, ll_e = value(end_l, pr), value(end_e, pr)
    gap_theta, dll = theta_gap(end_l, end_e, pr), abs(ll_l - ll_e)
    on = certified_em(data, end_l, pr, cfg)[0]
    radius = cfg.same_factor * same_radius(cfg.gtol, cfg.curv_floor, curv_l[2], curv_l[2])
    ll_on = value(on, pr)
    why = "L-BFGS not certified" if not grad_l <= cfg.gtol else ""
    why = why or ("EM not certified" if not step_e <= cfg.em_step_tol else "")
    degenerate = not min(curv_l[2], curv_e[2]) >= cfg.curv_floor
    return {
        "grad_lbfgs": grad_l,
        "evals_lbfgs": [evals, newton],
        "grad_em": grad_e,
        "iter_em": em_iter,
        "step_em": step_e,
        "curv_lbfgs": list(curv_l),
        "curv_em": list(curv_e),
        "end_gap": matched_gap(end_l.means.numpy() / std, end_e.means.numpy() / std),
        "end_theta_gap": [gap_theta, cfg.same_factor * same_radius(cfg.gtol, cfg.curv_floor, curv_l[2], curv_e[2])],
        "end_dll": dll,
        "kind": classify(gap_theta, dll, ll_e, curv_l, curv_e, cfg),
        "decides": why or ("degenerate end (slow region)" if degenerate else "decides"),
        "stay": max(theta_gap(on, end_l, pr) / radius, abs(ll_on - ll_l) / (cfg.same_ll_rel * abs(ll_l))),
        "gain_lbfgs": ll_on - ll_l,
        "move_lbfgs": float((on.means - end_l.means).norm(dim=1).max()) / std,
        "ll_ends": [ll_l, ll_e],
        "least_weight_certified": [float(end_l.weights.min()), float(end_e.weights.min())],
        "end_em": end_e,
    }


def lbfgs_from(
    theta: Tensor, pr: Problem, cfg: CertificateSettings, ref: Any, curv_ref: Any, ll_ref: float
) -> dict[str, Any]:
    """L-BFGS (:func:`certified_lbfgs`) from θ, and its end against a reference end ``ref`` (its curvature and
    objective given): ‖∇‖, curvature, objective and class at L-BFGS's end."""
    theta_end, grad, _, _ = certified_lbfgs(theta, pr, cfg)
    curv = curvature(theta_end, pr, cfg.hessian_chunk)
    end = unpack(theta_end, pr)
    ll = value(end, pr)
    kind = classify(theta_gap(end, ref, pr), abs(ll - ll_ref), ll_ref, curv, curv_ref, cfg)
    return {"grad": grad, "curv": list(curv), "ll": ll, "kind": kind}
