"""Online EM and gradient descent (implicit EM): they reach batch EM's held-out likelihood; the volume term
prevents metric collapse; every input kind gives the same fit."""

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from torch.utils.data import DataLoader, TensorDataset

from implicit_em.mixture import GaussianMixture

TYPES = ["full", "tied", "diag", "spherical"]


def _known_mixture(cov_type: str, seed: int = 0, n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Train and held-out samples from a fixed 3-component mixture of the given covariance type."""
    rng = np.random.RandomState(seed)
    truth = SkGaussianMixture(3, covariance_type=cov_type, random_state=seed)
    truth.weights_ = np.array([0.5, 0.3, 0.2])
    truth.means_ = rng.randn(3, 2) * 4
    a = rng.randn(3, 2, 2)
    full = a @ a.transpose(0, 2, 1) + 0.3 * np.eye(2)
    diag = np.diagonal(full, axis1=1, axis2=2).copy()
    truth.covariances_ = {"full": full, "tied": full[0], "diag": diag, "spherical": diag.mean(1)}[cov_type]
    x, _ = truth.sample(n + 2000)
    rng.shuffle(x)
    return x[:n], x[n:]


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
@pytest.mark.parametrize("cov_type", TYPES)
def test_stochastic_fitters_reach_sklearn_em_held_out_likelihood(cov_type: str, fitter: str) -> None:
    train, test = _known_mixture(cov_type)
    ref = SkGaussianMixture(3, covariance_type=cov_type, random_state=0).fit(train).score(test)
    ours = GaussianMixture(3, covariance_type=cov_type, fitter=fitter, random_state=0, batch_size=256, split_merge=0)
    ours.fit(train)
    assert abs(ours.score(test) - ref) < 0.01
    assert ours.converged_


def test_partial_fit_online_em_on_a_stream_approaches_batch_em() -> None:
    train, test = _known_mixture("full", seed=1, n=6000)
    ref = SkGaussianMixture(3, random_state=0).fit(train).score(test)
    gm = GaussianMixture(3, random_state=0, fitter="online_em")
    for _ in range(3):
        for start in range(0, len(train), 500):
            gm.partial_fit(train[start : start + 500])
    assert abs(gm.score(test) - ref) < 0.02  # stochastic: no exact EM iteration at the end
    assert gm.n_iter_ == 36 and len(gm.history_) == 36


def test_partial_fit_gradient_steps_improve_the_likelihood() -> None:
    train, test = _known_mixture("diag", seed=2)
    gm = GaussianMixture(
        3, covariance_type="diag", random_state=0, fitter="gd", learning_rate=0.05, init_params="random"
    )
    gm.partial_fit(train[:500])
    before = gm.score(test)
    for _ in range(20):
        for start in range(0, len(train), 500):
            gm.partial_fit(train[start : start + 500])
    assert gm.score(test) > before + 0.1


def test_without_volume_the_metric_collapses() -> None:
    # One Gaussian; the distance-only objective log Σ π exp(-½‖W(x-μ)‖²) is maximised by W → 0: log|det W|
    # falls every epoch without bound and the objective keeps improving.
    rng = np.random.RandomState(0)
    x = rng.randn(2000, 2) @ np.array([[2.0, 0.0], [0.5, 1.0]])
    gm = GaussianMixture(
        1, fitter="gd", volume=False, tol=0.0, max_iter=30, learning_rate=0.05, random_state=0, batch_size=200
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it cannot converge: that is the point
        gm.fit(x)
    objective = [h["loglik"] for h in gm.history_]
    assert all(b > a for a, b in itertools.pairwise(objective))
    log_det_w = np.log(np.diag(gm.precisions_cholesky_[0])).sum()
    start = np.log(np.diag(np.linalg.cholesky(np.linalg.inv(np.cov(x.T))))).sum()
    assert log_det_w < start - 5
    assert gm.covariances_[0].trace() > 100 * np.cov(x.T).trace()
    assert not gm.converged_


def test_with_volume_gradient_descent_converges_to_the_data_covariance() -> None:
    rng = np.random.RandomState(0)
    x = rng.randn(2000, 2) @ np.array([[2.0, 0.0], [0.5, 1.0]])
    gm = GaussianMixture(
        1,
        fitter="gd",
        tol=1e-6,
        max_iter=300,
        learning_rate=0.05,  # the start is 16x too narrow: at 0.02 Adam is still 3% short when it plateaus
        random_state=0,
        means_init=[[1.0, -1.0]],
        precisions_init=4 * np.eye(2)[None],
        batch_size=500,
    ).fit(x)
    np.testing.assert_allclose(gm.covariances_[0], np.cov(x.T, bias=True), rtol=0.02, atol=0.02)
    np.testing.assert_allclose(gm.means_[0], x.mean(0), atol=0.02)


def test_every_input_kind_gives_the_same_em_fit(tmp_path: Path) -> None:
    train, _ = _known_mixture("full", seed=3, n=3000)
    kw = {"n_components": 3, "random_state": 0, "batch_size": 512}
    ref = GaussianMixture(**kw).fit(train)
    mm = np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="w+", shape=train.shape)
    mm[:] = train
    mm.flush()
    loader = DataLoader(TensorDataset(torch.from_numpy(train)), batch_size=700)
    for x in (
        torch.from_numpy(train),
        np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="r", shape=train.shape),
        loader,
    ):
        got = GaussianMixture(**kw).fit(x)
        np.testing.assert_allclose(got.means_, ref.means_, rtol=1e-8, atol=1e-8)
        assert got.n_iter_ == ref.n_iter_
    scores = ref.score_samples(torch.from_numpy(train))
    assert isinstance(scores, torch.Tensor)
    np.testing.assert_allclose(scores.numpy(), ref.score_samples(train), rtol=1e-12)


def test_float32_fit_is_close_to_float64_fit() -> None:
    train, test = _known_mixture("full", seed=4)
    a = GaussianMixture(3, random_state=0).fit(train)
    b = GaussianMixture(3, random_state=0, dtype="float32").fit(train)
    assert abs(a.score(test) - b.score(test)) < 1e-4


@pytest.mark.parametrize("volume", [True, False])
@pytest.mark.parametrize("cov_type", TYPES)
def test_gd_gradient_from_responsibilities_equals_autograd_through_components(cov_type: str, volume: bool) -> None:
    """The fast step (gradient = −φ Rᵀ / B on the score matrix, then autograd to the parameters) equals plain
    autograd through GaussianComponents and mixture_nll, in float64, for every parameter and covariance type."""
    from implicit_em import gaussian
    from implicit_em.mixture import _stats
    from implicit_em.mixture._gd import accumulate_gradient, batch_loss, make_state

    g = torch.Generator().manual_seed(3)
    k, d = 4, 3
    a = torch.randn(k, d, d, generator=g, dtype=torch.float64)
    full = a @ a.mT / d + 0.3 * torch.eye(d, dtype=torch.float64)
    cov = {
        "full": full,
        "tied": full[0],
        "diag": torch.diagonal(full, dim1=-2, dim2=-1).clone(),
        "spherical": torch.diagonal(full, dim1=-2, dim2=-1).mean(1),
    }[cov_type]
    weights = torch.softmax(torch.randn(k, generator=g, dtype=torch.float64), 0)
    means = torch.randn(k, d, generator=g, dtype=torch.float64)
    params = _stats.MixtureParams(weights, means, cov, gaussian.precisions_cholesky(cov, cov_type, on_singular="ridge"))
    x = torch.randn(50, d, generator=g, dtype=torch.float64) * 2
    shift, scale = torch.zeros(d, dtype=torch.float64), 1.0

    ref_state = make_state(params, cov_type, shift, scale, 0.01, "adam")
    loss = batch_loss(ref_state, x, volume)
    loss.backward()
    fast_state = make_state(params, cov_type, shift, scale, 0.01, "adam")
    log_norm = accumulate_gradient(fast_state, x, volume)

    assert abs(float(-log_norm.mean()) - float(loss.detach())) < 1e-12
    ref_params = [*ref_state.components.parameters(), ref_state.logits]
    fast_params = [*fast_state.components.parameters(), fast_state.logits]
    for p_ref, p_fast in zip(ref_params, fast_params, strict=True):
        assert p_ref.grad is not None and p_fast.grad is not None
        torch.testing.assert_close(p_fast.grad, p_ref.grad, rtol=0.0, atol=1e-10)


@pytest.mark.parametrize("schedule", ["estimator", "before issue 14"])
def test_gd_halves_the_learning_rate_on_plateaus_before_it_stops(
    monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    from implicit_em.mixture._fitting import REGISTRY
    from implicit_em.mixture._gd import LR_HALVINGS

    if schedule != "estimator":
        monkeypatch.setattr(REGISTRY["gd"], "schedule", {})
    halvings = REGISTRY["gd"].schedule.get("lr_halvings", LR_HALVINGS)  # type: ignore[attr-defined]
    assert halvings == (1 if schedule == "estimator" else 3)
    train, _ = _known_mixture("full", seed=1)
    gm = GaussianMixture(3, fitter="gd", random_state=0, batch_size=256, learning_rate=0.02).fit(train)
    assert gm.converged_
    lr = gm._gd_state.optimizer.param_groups[0]["lr"]
    assert lr == 0.02 / 2**halvings  # converged at the first plateau after that many halvings, not before
