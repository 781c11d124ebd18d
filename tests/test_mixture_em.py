"""Batch EM against scikit-learn, and EM as preconditioned gradient ascent (Xu & Jordan 1996)."""

import itertools
import sys
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from torch.testing import assert_close

from implicit_em import gaussian
from implicit_em.mixture import GaussianMixture, _stats

TYPES = ["full", "tied", "diag", "spherical"]
INITS = ["kmeans", "k-means++", "random", "random_from_data"]


def _blobs(seed: int = 0, n: int = 150, d: int = 3, k: int = 4) -> np.ndarray:
    rng = np.random.RandomState(seed)
    return np.vstack([rng.randn(n, d) @ rng.randn(d, d) + 4 * rng.randn(d) for _ in range(k)])


@pytest.mark.parametrize("init_params", INITS)
@pytest.mark.parametrize("cov_type", TYPES)
def test_em_follows_sklearn_from_the_same_seed(cov_type: str, init_params: str) -> None:
    x = _blobs()
    kw = {
        "n_components": 4,
        "covariance_type": cov_type,
        "init_params": init_params,
        "random_state": 1,
        "max_iter": 8,
        "tol": 0.0,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: max_iter is deliberately short
        ref = SkGaussianMixture(**kw).fit(x)
        ours = GaussianMixture(**kw).fit(x)
    assert ours.n_iter_ == ref.n_iter_ == 8
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_"):
        np.testing.assert_allclose(getattr(ours, name), getattr(ref, name), rtol=1e-6, atol=1e-6, err_msg=name)
    assert abs(ours.lower_bound_ - ref.lower_bound_) < 1e-8
    np.testing.assert_allclose(ours.score_samples(x), ref.score_samples(x), rtol=1e-8, atol=1e-8)


def test_em_follows_sklearn_to_convergence_with_user_init() -> None:
    x = _blobs(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a deliberately unfinished start
        ref0 = SkGaussianMixture(4, random_state=0, max_iter=2).fit(x)
    kw = {
        "n_components": 4,
        "weights_init": ref0.weights_,
        "means_init": ref0.means_,
        "precisions_init": ref0.precisions_,
        "tol": 1e-6,
        "max_iter": 500,
    }
    ref = SkGaussianMixture(**kw).fit(x)
    ours = GaussianMixture(**kw, split_merge=0).fit(x)  # no split-and-merge search after convergence
    assert ours.n_iter_ == ref.n_iter_ and ours.converged_ and ref.converged_
    np.testing.assert_allclose(ours.means_, ref.means_, rtol=1e-6, atol=1e-6)
    assert abs(ours.lower_bound_ - ref.lower_bound_) < 1e-8


def _loglik(x: torch.Tensor, alpha: torch.Tensor, means: torch.Tensor, covs: torch.Tensor) -> torch.Tensor:
    """ℓ = Σ_t log Σ_j α_j N(x_t; m_j, Σ_j) with α unconstrained (Xu & Jordan's gradient)."""
    dist = torch.distributions.MultivariateNormal(means, covariance_matrix=covs)
    return torch.logsumexp(torch.log(alpha) + dist.log_prob(x[:, None, :]), dim=1).sum()


def test_one_em_step_is_the_xu_jordan_preconditioned_gradient_step() -> None:
    torch.manual_seed(0)
    x = torch.from_numpy(_blobs(seed=5, n=60, d=2, k=3))
    n = x.shape[0]
    alpha = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64, requires_grad=True)
    means = (x[torch.tensor([0, 70, 150])] + 0.3).clone().requires_grad_(True)
    covs = (
        torch.eye(2, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)[:, None, None]
    ).requires_grad_(True)
    g_alpha, g_means, g_covs = torch.autograd.grad(_loglik(x, alpha, means, covs), (alpha, means, covs))
    a, m, s = alpha.detach(), means.detach(), covs.detach()
    # the EM step from our engine (reg_covar = 0)
    params = _stats.MixtureParams(a, m, s, gaussian.precisions_cholesky(s, "full", on_singular="ridge"))
    shift = torch.zeros(2, dtype=torch.float64)
    summary, _ = _stats.summarize(x, _stats.score_matrix(params, "full", shift), shift)
    new = _stats.from_summaries(summary, shift, 0.0, "full", torch.float64)
    nk = summary.nk
    # weights: α + (1/N)[diag(α) − ααᵀ] ∂ℓ/∂α
    p_alpha = (torch.diag(a) - a[:, None] * a[None, :]) / n
    assert_close(new.weights, a + p_alpha @ g_alpha, rtol=1e-10, atol=1e-12)
    # means: m_j + (Σ_j / N_j) ∂ℓ/∂m_j
    xj_means = m + torch.einsum("kab,kb->ka", s, g_means) / nk[:, None]
    assert_close(new.means, xj_means, rtol=1e-10, atol=1e-10)
    # covariances: Σ_j + (2/N_j) Σ_j G_j Σ_j is the scatter about the old means; EM's uses the new means and
    # differs by the rank-one term Δm Δmᵀ
    g_sym = 0.5 * (g_covs + g_covs.mT)
    xj_covs = s + 2 / nk[:, None, None] * s @ g_sym @ s
    dm = new.means - m
    assert_close(new.covariances, xj_covs - dm[:, :, None] * dm[:, None, :], rtol=1e-10, atol=1e-10)


def test_plain_gradient_step_on_means_is_em_only_with_a_per_component_step() -> None:
    # The review's test: with Σ_j = σ² I, μ ← μ + η ∂ℓ/∂μ equals the M-step iff η = σ²/N_j.
    x = torch.from_numpy(_blobs(seed=2, n=50, d=2, k=2))[:80]  # 50 and 30 points: N_1 ≠ N_2
    sigma2 = 1.5
    a = torch.tensor([0.5, 0.5], dtype=torch.float64)
    m = x[torch.tensor([0, 60])].clone().requires_grad_(True)
    s = sigma2 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2)
    (g,) = torch.autograd.grad(_loglik(x, a, m, s), (m,))
    params = _stats.MixtureParams(a, m.detach(), s, gaussian.precisions_cholesky(s, "full", on_singular="ridge"))
    shift = torch.zeros(2, dtype=torch.float64)
    summary, _ = _stats.summarize(x, _stats.score_matrix(params, "full", shift), shift)
    em_means = _stats.from_summaries(summary, shift, 0.0, "full", torch.float64).means
    eta = sigma2 / summary.nk
    assert_close(m.detach() + eta[:, None] * g, em_means, rtol=1e-10, atol=1e-10)
    common = m.detach() + eta.mean() * g  # one η for both components: not EM (N_1 ≠ N_2 here)
    assert (common - em_means).abs().max() > 1e-3


def test_fit_predict_equals_fit_then_predict() -> None:
    x = _blobs(seed=4)
    for fitter in ("em", "online_em", "gd"):
        kw = {"n_components": 4, "random_state": 0, "fitter": fitter, "max_iter": 5}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            labels = GaussianMixture(**kw).fit_predict(x)
            again = GaussianMixture(**kw).fit(x).predict(x)
        np.testing.assert_array_equal(labels, again)


@pytest.mark.parametrize("fitter", ["em", "online_em", "gd"])
def test_same_random_state_same_result(fitter: str) -> None:
    x = _blobs(seed=6)
    kw = {"n_components": 4, "random_state": 7, "fitter": fitter, "max_iter": 5, "n_init": 2, "init_params": "random"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = GaussianMixture(**kw).fit(x)
        b = GaussianMixture(**kw).fit(x)
    np.testing.assert_array_equal(a.means_, b.means_)
    np.testing.assert_array_equal(a.covariances_, b.covariances_)


class _InterruptAfter:
    """A re-iterable data source whose k-th pass raises KeyboardInterrupt halfway (a user pressing Ctrl-C)."""

    def __init__(self, x: np.ndarray, passes: int) -> None:
        self.x, self.passes, self.count = x, passes, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.count += 1
        for i, start in enumerate(range(0, len(self.x), 100)):
            if self.count > self.passes and i == 1:
                raise KeyboardInterrupt
            yield self.x[start : start + 100]


def test_keyboard_interrupt_keeps_the_last_complete_parameters() -> None:
    x = _blobs(seed=8)
    kw = {
        "n_components": 4,
        "random_state": 0,
        "tol": 0.0,
        "max_iter": 50,
        "means_init": x[[0, 150, 300, 450]],
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(3)] * 4),
    }
    source = _InterruptAfter(x, passes=3)
    gm = GaussianMixture(**kw)
    with pytest.raises(KeyboardInterrupt):  # the interrupt reaches the caller (issue 11)
        gm.fit(source)
    assert gm.converged_ is False
    assert gm.n_iter_ == 2  # passes 1, 2 complete; the third pass (iteration 3) was interrupted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = GaussianMixture(**{**kw, "max_iter": 2}).fit(x)
    np.testing.assert_allclose(gm.means_, ref.means_, rtol=1e-10, atol=1e-10)
    assert np.isfinite(gm.score(x))


def test_history_records_every_iteration() -> None:
    gm = GaussianMixture(3, random_state=0, tol=1e-12, max_iter=6)
    with pytest.warns(ConvergenceWarning):
        gm.fit(_blobs(k=3))
    assert len(gm.history_) == gm.n_iter_
    lls = [h["loglik"] for h in gm.history_]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(lls))  # EM never decreases the likelihood
    assert all(abs(sum(h["usage"]) - 1) < 1e-9 and h["seconds"] >= 0 for h in gm.history_)


def test_verbose_shows_a_progress_bar_with_the_log_likelihood_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with pytest.warns(ConvergenceWarning):
        GaussianMixture(2, random_state=0, verbose=1, max_iter=3, tol=0.0).fit(_blobs(k=2))
    err = capsys.readouterr().err
    assert "GaussianMixture[em]" in err and "loglik=" in err and "iter: 1/3" not in err


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("GaussianMixture[")]


def test_verbose_in_a_log_prints_lines_every_interval_and_where_it_stopped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 26: a bar in a log is one line of carriage returns, shown at the end; a log gets sklearn-like lines
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    gm = GaussianMixture(2, random_state=0, verbose=1, verbose_interval=4, max_iter=9, tol=0.0, split_merge=0)
    with pytest.warns(ConvergenceWarning):
        gm.fit(_blobs(k=2))
    lines = _lines(capsys.readouterr().err)
    assert [line.split(",")[0] for line in lines] == [
        "GaussianMixture[em] iter: 1/9",
        "GaussianMixture[em] iter: 4/9",
        "GaussianMixture[em] iter: 8/9",
        "GaussianMixture[em] iter: stopped at 9/9",
    ]
    assert f"loglik {gm.history_[3]['loglik']:.6f}" in lines[1]
    with pytest.raises(ValueError, match="verbose_interval"):
        GaussianMixture(2, verbose=1, verbose_interval=0).fit(_blobs(k=2))


def test_the_heartbeat_prints_a_line_when_the_interval_is_not_reached_in_time(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from implicit_em.mixture import _fitting

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    fit = GaussianMixture(3, random_state=0, verbose=1, verbose_interval=1000, split_merge=2)
    fit.fit(_blobs(k=3))
    quiet = _lines(capsys.readouterr().err)  # the first iteration, the stop and each trial's first iteration
    monkeypatch.setattr(_fitting, "HEARTBEAT_S", 0.0)  # every iteration is "30 s" after the last line
    fit.fit(_blobs(k=3))
    beating = _lines(capsys.readouterr().err)
    fitted = sum(not h.get("split_merge", False) for h in fit.history_)
    assert fit.n_split_merge_iter_ > 0 and len(quiet) < len(beating), (quiet, beating)
    assert len(beating) == fitted + 1 + fit.n_split_merge_iter_, beating
    assert sum("split-and-merge trial" in line for line in beating) == fit.n_split_merge_iter_


def test_warm_start_continues_from_the_previous_fit() -> None:
    x = _blobs(seed=9)
    gm = GaussianMixture(4, random_state=0, warm_start=True, split_merge=0, tol=1e-8, max_iter=3)
    with pytest.warns(ConvergenceWarning):
        gm.fit(x)
    first = gm.lower_bound_
    with pytest.warns(ConvergenceWarning):
        gm.fit(x)
    cold = GaussianMixture(4, random_state=0, split_merge=0, tol=1e-8, max_iter=6)
    with pytest.warns(ConvergenceWarning):
        cold.fit(x)
    assert gm.lower_bound_ >= first
    np.testing.assert_allclose(gm.means_, cold.means_, rtol=1e-8, atol=1e-8)  # 3 + 3 iterations = 6
