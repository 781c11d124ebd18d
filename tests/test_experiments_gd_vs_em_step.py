"""gd_vs_em_step: the review's one-step test swept over the imbalance, Xu & Jordan's block preconditioner along an
EM run, and the verdict rule, each against a known answer or a planted failure."""

import dataclasses
import itertools
import math
from pathlib import Path

import pytest
import torch
from torch import Tensor

from implicit_em import gaussian
from implicit_em.audit import EXPERIMENTS, Context, Result, criterion
from implicit_em.audit.claims import gd_vs_em_step as g
from implicit_em.audit.claims.gd_vs_em_step import EXPERIMENT, Config, Sweep, XuJordan
from implicit_em.audit.core import Role
from implicit_em.audit.testbeds import gradient_em as ge
from implicit_em.audit.testbeds.measured import Measured
from implicit_em.distances import gaussian_energies, gaussian_mixture_log_likelihood
from implicit_em.mixture._em import _estimate_gaussian_parameters
from implicit_em.objectives import responsibilities

F64 = torch.float64
TINY = Config(sweep=Sweep(n=200, weights=(0.5, 0.51, 0.7), iterations=20), xu_jordan=XuJordan(n=300, iterations=8))
START = Config().sweep.start


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    return EXPERIMENT.run(Config.quick(), Context(run_dir)), run_dir


def _theta(seed: int, n: int = 400) -> tuple[Tensor, dict[str, Tensor]]:
    """Data from the planted mixture and a random valid θ = (α, m, Σ) that is not an EM fixed point."""
    x = ge.planted_mixture(seed, n)
    gen = torch.Generator().manual_seed(seed + 10)
    a = torch.randn(4, 3, 3, generator=gen, dtype=F64) / 2
    theta = {
        "alpha": torch.softmax(torch.randn(4, generator=gen, dtype=F64), 0),
        "means": torch.randn(4, 3, generator=gen, dtype=F64),
        "covs": a @ a.mT + 0.5 * torch.eye(3, dtype=F64),
    }
    return x, theta


def _gradient(x: Tensor, theta: dict[str, Tensor]) -> dict[str, Tensor]:
    leaves = {b: t.clone().requires_grad_(True) for b, t in theta.items()}
    grads = torch.autograd.grad(ge.gmm_loglik(x, *leaves.values()), list(leaves.values()))
    return dict(zip(leaves, grads, strict=True))


def test_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


# --- the 1-D sweep ------------------------------------------------------------------------------------------------


def test_sweep_data_mirror_the_same_draws() -> None:
    u = torch.randn(100, generator=torch.Generator().manual_seed(3), dtype=F64)
    x = ge.sweep_data(u, 100, 0.7)
    torch.testing.assert_close(x[:70], -2.0 + u[:70], rtol=0, atol=0)
    torch.testing.assert_close(x[70:], 2.0 - u[:30], rtol=0, atol=0)
    balanced = ge.sweep_data(u, 100, 0.5)
    assert torch.equal(balanced.sort().values, (-balanced).sort().values)  # symmetric about 0
    s = ge.em_step_1d(balanced, torch.tensor(START, dtype=F64), 1.0)[1]
    assert abs(float(s[0] - s[1])) < 1e-12 and abs(float(s.sum()) - 100) < 1e-12
    s_off = ge.em_step_1d(x, torch.tensor(START, dtype=F64), 1.0)[1]
    assert float(s_off[0] - s_off[1]) > 10  # the 0.7 sample is not balanced
    with pytest.raises(ValueError, match="n₁"):
        ge.sweep_data(u, 100, 0.3)


def test_gradient_step_is_the_reviews_formula() -> None:
    # review: one GD step is μ_j ← (1 − η S_j/σ²) μ_j + (η/σ²) Σ_i r_ij x_i, with r from an explicit softmax
    gen = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(30, generator=gen, dtype=F64) - 1, torch.randn(20, generator=gen, dtype=F64) + 2])
    mu, sigma, eta = torch.tensor([-0.3, 1.1], dtype=F64), 1.3, 0.01
    w = torch.exp(-((x[:, None] - mu) ** 2) / (2 * sigma**2))
    r = w / w.sum(1, keepdim=True)
    s = r.sum(0)
    review = (1 - eta * s / sigma**2) * mu + eta / sigma**2 * (r * x[:, None]).sum(0)
    step = ge.single_step(x, mu, sigma)
    torch.testing.assert_close(mu + eta * step["ascent"], review, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(step["mu_em"], (r * x[:, None]).sum(0) / s, rtol=1e-13, atol=1e-13)
    assert step["per_rel"] < 1e-13  # η_j = σ²/S_j is EM exactly
    assert step["best_rel"] > 1e-3  # S₁ ≠ S₂: no single η is
    assert abs(step["best_rel"] - step["closed_form"]) < 1e-12


def test_best_single_error_closed_form() -> None:
    # symmetric steps δ = (a, −a) with imbalance ε = (S₁ − S₂)/(S₁ + S₂): error ε / √(1 + ε²)
    err = ge.best_single_error(torch.tensor([600.0, 400.0], dtype=F64), torch.tensor([0.3, -0.3], dtype=F64))
    assert float(err) == pytest.approx(0.2 / math.sqrt(1.04), rel=1e-14)
    assert float(ge.best_single_error(torch.tensor([500.0, 500.0]), torch.tensor([0.3, -0.1]))) == 0.0
    assert float(ge.best_single_error(torch.tensor([600.0, 400.0]), torch.tensor([0.3, 0.0]))) == 0.0


def test_sweep_numbers_follow_the_closed_form(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    measured, closed = m["sweep: best single step relative error"], m["sweep: closed form |sin∠(g, δ)|"]
    assert max(abs(a - b) for a, b in zip(measured, closed, strict=True)) < 1e-12
    assert max(m["sweep: per-component steps σ²/S_j relative error"]) < 1e-12
    # near balance the steps are nearly symmetric, so the error is the imbalance itself (first order)
    imbalance = m["sweep: imbalance (S₁ − S₂)/(S₁ + S₂)"]
    for i in (1, 2):
        assert measured[i] / imbalance[i] == pytest.approx(1.0, rel=0.01)
    fails = [e for e, w in zip(measured, m["sweep: weight w of the −2 cluster"], strict=True) if w != 0.5]
    assert m["best single step: max relative error, imbalanced"] == max(fails)


def test_balanced_control_one_eta_reproduces_step_and_path(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert m["sweep: weight w of the −2 cluster"][0] == 0.5
    assert m["balanced: |S₁ − S₂| / n"] < 1e-12
    assert m["balanced: best single step relative error"] < 1e-12
    assert m["balanced: max gap between EM and GD paths"] < 1e-12
    assert m["sweep: best single η"][0] == pytest.approx(2 / Config.quick().sweep.n, rel=1e-12)  # σ²/S with S = n/2
    gaps = m["sweep: max gap between EM and GD paths"]
    assert min(gaps[1:]) > 1e-4  # off balance the paths part


# --- Xu & Jordan ----------------------------------------------------------------------------------------------------


def test_loglik_is_the_librarys_and_its_gradients_are_xu_jordans() -> None:
    x, th = _theta(0)
    whitening = gaussian.precisions_cholesky(th["covs"], "full").mT
    lib = gaussian_mixture_log_likelihood(x, th["alpha"].log(), th["means"], whitening, "full").sum()
    torch.testing.assert_close(ge.gmm_loglik(x, th["alpha"], th["means"], th["covs"]), lib, rtol=1e-13, atol=0)
    grad = _gradient(x, th)
    h = responsibilities(gaussian_energies(x, th["means"], whitening, "full"), th["alpha"].log())
    nk = h.sum(0)
    torch.testing.assert_close(grad["alpha"], nk / th["alpha"], rtol=1e-12, atol=0)  # ∂ℓ/∂α_j = N_j/α_j
    inv = torch.linalg.inv(th["covs"])
    diff = x[None] - th["means"][:, None]  # (K, N, D)
    scatter = torch.einsum("nk,kna,knb->kab", h, diff, diff)
    g_cov = 0.5 * inv @ (scatter - nk[:, None, None] * th["covs"]) @ inv  # Xu & Jordan 1996
    torch.testing.assert_close(grad["covs"], g_cov, rtol=1e-10, atol=1e-10)


def test_em_update_is_the_librarys_m_step() -> None:
    x, th = _theta(1)
    em = ge.em_update(x, th["alpha"], th["means"], th["covs"])
    whitening = gaussian.precisions_cholesky(th["covs"], "full").mT
    h = responsibilities(gaussian_energies(x, th["means"], whitening, "full"), th["alpha"].log())
    nk, means, covs = _estimate_gaussian_parameters(x, h, 0.0, "full")
    torch.testing.assert_close(em["nk"], nk, rtol=1e-12, atol=0)
    torch.testing.assert_close(em["means"], means, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(em["covs"], covs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(em["alpha"], nk / x.shape[0], rtol=1e-12, atol=0)


def test_preconditioned_step_is_em_and_wrong_preconditioners_miss() -> None:
    x, th = _theta(2)
    n = x.shape[0]
    em = ge.em_update(x, th["alpha"], th["means"], th["covs"])
    grad = _gradient(x, th)
    pre = ge.preconditioned(th, grad, em["nk"], n)
    dm = em["means"] - th["means"]
    usual = pre["covs_old"] - dm[:, :, None] * dm[:, None, :]
    assert ge.rel(pre["alpha"], em["alpha"], th["alpha"]) < 1e-10
    assert ge.rel(pre["means"], em["means"], th["means"]) < 1e-10
    assert ge.rel(pre["covs_old"], em["covs_old"], th["covs"]) < 1e-10
    assert ge.rel(usual, em["covs"], th["covs"]) < 1e-10
    # wrong preconditioners: one shared count N/K for the means (a single step size), diag(α)/N without −ααᵀ,
    # the old-means covariance step taken for the usual one
    shared = ge.preconditioned(th, grad, torch.full_like(em["nk"], n / 4), n)
    assert ge.rel(shared["means"], em["means"], th["means"]) > 0.05
    no_projection = th["alpha"] + th["alpha"] * grad["alpha"] / n
    assert ge.rel(no_projection, em["alpha"], th["alpha"]) > 0.5
    assert ge.rel(pre["covs_old"], em["covs"], th["covs"]) > 1e-3


def _xu_jordan(cfg: Config) -> list[dict[str, float]]:
    x = ge.planted_mixture(cfg.seed + 1, cfg.xu_jordan.n)
    return ge.xu_jordan_run(x, cfg.seed + 2, cfg.xu_jordan.iterations, cfg.xu_jordan.min_step)


def test_xu_jordan_run_checks_every_iterate_above_the_floor() -> None:
    rows = _xu_jordan(TINY)
    assert len(rows) == TINY.xu_jordan.iterations
    assert all(row["smallest block step"] >= TINY.xu_jordan.min_step for row in rows)
    assert all(row[b] < 1e-10 for row in rows for b in ge.BLOCKS)
    assert min(row["identity: means"] for row in rows) > 1.0
    loglik = [row["loglik per sample"] for row in rows]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(loglik))  # EM never decreases ℓ
    floor = rows[3]["smallest block step"] * 1.0001
    stopped = _xu_jordan(dataclasses.replace(TINY, xu_jordan=dataclasses.replace(TINY.xu_jordan, min_step=floor)))
    assert len(stopped) < len(rows)  # the floor ends the run


# --- the verdict ------------------------------------------------------------------------------------------------

# the closed form, the miss, the preconditioned steps (identities); the three controls (gates)
ROLES: tuple[Role, ...] = ("identity", "identity", "identity", "gate", "gate", "gate")


@pytest.mark.parametrize(
    ("passed", "expected"),
    [
        ((True,) * 6, "VERIFIED"),
        ((True, True, True, False, True, True), "UNDECIDED"),  # the planted match failed: the miss could not vanish
        ((True, True, True, True, True, False), "UNDECIDED"),  # a wrong preconditioner matched: the check is blind
    ],
)
def test_verdict_rule(passed: tuple[bool, ...], expected: str) -> None:
    criteria = [
        criterion(f"c{i}", 0.0 if p else 2.0, "<", 1.0, role=r)
        for i, (p, r) in enumerate(zip(passed, ROLES, strict=True))
    ]
    assert g.verdict(TINY, Measured(), criteria) == expected


@pytest.mark.parametrize("broken", [0, 1, 2])
def test_a_failed_identity_is_a_bug_not_a_verdict(broken: int) -> None:
    criteria = [criterion(f"c{i}", 2.0 if i == broken else 0.0, "<", 1.0, role=r) for i, r in enumerate(ROLES)]
    with pytest.raises(AssertionError, match=f"c{broken}"):
        g.verdict(TINY, Measured(), criteria)


def test_verdict_follows_the_recorded_criteria(result: tuple[Result, Path]) -> None:
    res, _ = result
    cfg = Config.quick()
    assert [c.threshold for c in res.criteria] == [
        cfg.preconditioned_tol,
        cfg.single_step_tol,
        cfg.preconditioned_tol,
        cfg.preconditioned_tol,
        cfg.preconditioned_tol,
        cfg.control_min_miss,
    ]
    assert tuple(c.role for c in res.criteria) == ROLES  # algebra given the data: nothing here is a test
    assert all(c.passed for c in res.criteria) and res.verdict == "VERIFIED"
    assert res.verdict == g.verdict(cfg, Measured(), res.criteria)
    assert res.summary.startswith("Verified, not tested on data")
    m = res.metrics
    assert res.criteria[1].measured == m["best single step: max relative error, imbalanced"]
    assert res.criteria[1].measured > 0.3  # the sweep's worst miss, reported: ~40% of EM's update
    assert res.criteria[2].measured == m["preconditioned: max relative error"]


def test_every_metric_is_declared_with_a_unit(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert isinstance(m, Measured) and m.undeclared() == []
    assert m.declared["sweep: imbalance (S₁ − S₂)/(S₁ + S₂)"].unit == "ratio"  # a ratio, not a number of samples
    assert not any("first design" in k or "previous rule" in k for k in m)  # superseded rules: docs/claims


def test_planted_failures_raise_or_leave_the_checks_unread(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = g.run(TINY, Context(tmp_path))
    assert all(c.passed for c in base.criteria) and base.verdict == "VERIFIED"
    # a wrong means preconditioner (one shared count N/K): the Xu–Jordan identity fails, a bug, not a verdict
    right = ge.preconditioned
    monkeypatch.setattr(
        ge, "preconditioned", lambda th, gr, nk, n: right(th, gr, torch.full_like(nk, n / nk.numel()), n)
    )
    with pytest.raises(AssertionError, match="preconditioned steps") as caught:
        g.run(TINY, Context(tmp_path))
    assert "closed form" not in str(caught.value)
    monkeypatch.setattr(ge, "preconditioned", right)
    # a wrong closed form (1% off): the single step's law fails
    closed = ge.best_single_error
    monkeypatch.setattr(ge, "best_single_error", lambda s, d: 1.01 * closed(s, d))
    with pytest.raises(AssertionError, match="closed form"):
        g.run(TINY, Context(tmp_path))
    monkeypatch.setattr(ge, "best_single_error", closed)
    # an asymmetric start breaks the planted match at w = 0.5: the miss could not vanish, so nothing is read
    asymmetric = dataclasses.replace(TINY, sweep=dataclasses.replace(TINY.sweep, start=(-0.5, 0.6)))
    broken = g.run(asymmetric, Context(tmp_path))
    assert not broken.criteria[3].passed and broken.verdict == "UNDECIDED"
    assert broken.summary.endswith("are not read.")


def test_figure_written(result: tuple[Result, Path]) -> None:
    res, run_dir = result
    assert res.figures == ["figures/gd_vs_em_step.png"]
    assert (run_dir / res.figures[0]).stat().st_size > 20_000
