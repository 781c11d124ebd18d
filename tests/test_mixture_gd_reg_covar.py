"""gd's reg_covar penalty: its gradient, and that gd's stationary points are EM-with-reg_covar's fixed points.

The estimator's gd adds the gradient of ½·reg·Σ_j sg(π_j)·tr(P_j) (``_gd._reg_covar_backward``); EM's M-step
adds reg·I to each covariance. At EM's fixed point the mixture NLL's gradient plus the penalty's vanishes in
every parameter, for every covariance type and every standardising scale.
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from implicit_em.mixture import GaussianMixture, _gd
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._stats import MixtureParams

COV_TYPES = ["full", "tied", "diag", "spherical"]
REG = 0.05  # large against the data's spread, so that the penalty moves the optimum far from the unregularised one


def _data() -> np.ndarray:
    rng = np.random.RandomState(0)
    a = rng.randn(60, 3) @ np.array([[1.0, 0.3, 0.0], [0.0, 0.2, 0.1], [0.0, 0.0, 0.5]]) * [1.0, 0.1, 3.0]
    offset = np.array([2.0, 0.5, -4.0])
    return np.concatenate([a, a[:40] + offset])


def _scale(data: DataSource, shift: torch.Tensor, cov_type: str, kind: str) -> _gd.Scale:
    if kind == "scalar":
        return 0.7
    scale = _gd.feature_scale(data, shift, 1.0, cov_type)
    if kind == "per feature" and isinstance(scale, torch.Tensor) and scale.dim() == 2:
        return scale.diagonal().clone()
    return scale


def _em_fixed_point(x: np.ndarray, cov_type: str, reg: float) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(
            2, covariance_type=cov_type, reg_covar=reg, tol=1e-14, max_iter=20_000, split_merge=0, random_state=0
        ).fit(x)


def _gradient(state: _gd.GDState, x: torch.Tensor, shift: torch.Tensor, scale: _gd.Scale, reg: float) -> torch.Tensor:
    """The full-batch gradient gd steps on (NLL, plus the penalty when reg > 0), flattened."""
    state.optimizer.zero_grad(set_to_none=True)
    _gd.accumulate_gradient(state, _gd._standardise(x, shift, scale), True)
    if reg > 0:
        _gd._reg_covar_backward(state, scale, reg)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in _gd._parameters(state)]
    if state.components.covariance_type in ("full", "tied"):  # the unused upper part and diagonal of `lower`
        lower = state.components.lower
        i = next(j for j, p in enumerate(_gd._parameters(state)) if p is lower)
        grads[i] = torch.tril(grads[i], diagonal=-1)
    return torch.cat([g.reshape(-1) for g in grads])


def _state(model: GaussianMixture, cov_type: str, shift: torch.Tensor, scale: _gd.Scale) -> _gd.GDState:
    params = MixtureParams(
        *(
            torch.as_tensor(np.asarray(v), dtype=torch.float64)
            for v in (model.weights_, model.means_, model.covariances_, model.precisions_cholesky_)
        )
    )
    return _gd.make_state(params, cov_type, shift, scale, 0.01, "adam")


def _case(cov_type: str, kind: str) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, _gd.Scale]:
    """The data (numpy and tensor), its shift and the scale of ``kind`` for ``cov_type`` (skips what
    feature_scale never gives)."""
    if cov_type == "spherical" and kind != "scalar":
        pytest.skip("a spherical covariance steps under one scalar scale")
    if cov_type == "diag" and kind == "triangular":
        pytest.skip("feature_scale gives a diagonal covariance per-feature scales")
    x_np = _data()
    x = torch.as_tensor(x_np)
    shift = x.mean(0)
    return x_np, x, shift, _scale(DataSource(x, torch.device("cpu"), torch.float64), shift, cov_type, kind)


@pytest.mark.parametrize("kind", ["scalar", "per feature", "triangular"])
@pytest.mark.parametrize("cov_type", COV_TYPES)
def test_em_with_reg_covar_fixed_points_are_gd_stationary_points(cov_type: str, kind: str) -> None:
    x_np, x, shift, scale = _case(cov_type, kind)
    if kind == "triangular":
        assert isinstance(scale, torch.Tensor) and scale.dim() == 2
    em = _em_fixed_point(x_np, cov_type, REG)
    state = _state(em, cov_type, shift, scale)
    with_penalty = _gradient(state, x, shift, scale, REG)
    without = _gradient(state, x, shift, scale, 0.0)
    assert float(without.abs().max()) > 1e-2  # the unregularised likelihood is not stationary there
    assert float(with_penalty.abs().max()) < 1e-8


@pytest.mark.parametrize("kind", ["scalar", "per feature", "triangular"])
@pytest.mark.parametrize("cov_type", COV_TYPES)
def test_the_penalty_gradient_equals_autograd_of_the_trace(cov_type: str, kind: str) -> None:
    # reference: ½·reg·Σ_j π_j tr(P_j), P_j = S⁻ᵀ P_u S⁻¹ by a general inverse of Sᵀ S (not the code's solve)
    x_np, _, shift, scale = _case(cov_type, kind)
    state = _state(_em_fixed_point(x_np, cov_type, REG), cov_type, shift, scale)
    params = _gd._parameters(state)
    state.optimizer.zero_grad(set_to_none=True)
    _gd._reg_covar_backward(state, scale, REG)
    got = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]

    c = state.components
    d = c.n_features
    s = scale if isinstance(scale, torch.Tensor) else torch.full((d,), float(scale), dtype=torch.float64)
    s_mat = s if s.dim() == 2 else torch.diag(s)
    gram_inv = torch.linalg.inv(s_mat.T @ s_mat)  # tr(S⁻ᵀ P S⁻¹) = tr(P (Sᵀ S)⁻¹)
    prec = c.precisions()
    if cov_type in ("diag", "spherical"):
        prec = torch.diag_embed(prec if cov_type == "diag" else prec[:, None].expand(-1, d))
    traces = (prec @ gram_inv).diagonal(dim1=-2, dim2=-1).sum(-1)
    weights = torch.softmax(state.logits, dim=0).detach()
    reference = 0.5 * REG * (traces if cov_type == "tied" else (weights * traces).sum())
    state.optimizer.zero_grad(set_to_none=True)
    reference.backward()
    for p, g in zip(params, got, strict=True):
        want = p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(g, want, rtol=1e-10, atol=1e-12)
    assert state.logits.grad is None or bool((state.logits.grad == 0).all())  # sg(π): the weights feel no force


def test_gd_at_defaults_reaches_em_with_reg_covar_where_the_floor_binds() -> None:
    # reg_covar = 0.05 exceeds the spread of feature 1 inside a component, so the regularised optimum is far
    # from the unregularised one; gd at its defaults ends at EM-with-reg_covar's fixed point (measured: means
    # 1e-9 apart). Without the penalty gd climbs the unregularised likelihood instead (measured: −1.42 against
    # EM's −3.43 per row, smallest covariance eigenvalue 3.6e-4 under the 0.05).
    x_np = _data()
    em = _em_fixed_point(x_np, "full", REG)
    gd = GaussianMixture(2, fitter="gd", reg_covar=REG, random_state=0).fit(x_np)
    assert abs(em.score(x_np) - gd.score(x_np)) <= 1e-6
    np.testing.assert_allclose(gd.means_, em.means_, atol=1e-5)
    assert float(np.linalg.eigvalsh(gd.covariances_).min()) >= REG


@pytest.mark.parametrize("schedule", ["estimator", "before issue 14"])
def test_partial_fit_steps_with_the_penalty_as_fit_does(monkeypatch: pytest.MonkeyPatch, schedule: str) -> None:
    from implicit_em.mixture._fitting import REGISTRY

    if schedule != "estimator":
        monkeypatch.setattr(REGISTRY["gd"], "schedule", {})
    calls: list[float] = []
    original = _gd._reg_covar_backward

    def recording(state: _gd.GDState, scale: _gd.Scale, reg_covar: float) -> None:
        calls.append(reg_covar)
        original(state, scale, reg_covar)

    monkeypatch.setattr(_gd, "_reg_covar_backward", recording)
    x = _data()
    gm = GaussianMixture(2, fitter="gd", reg_covar=REG, random_state=0)
    for start in range(0, 60, 20):
        gm.partial_fit(x[start : start + 20])
    assert calls == ([REG] * 3 if schedule == "estimator" else [])


def test_the_distance_only_objective_takes_no_penalty(monkeypatch: pytest.MonkeyPatch) -> None:
    # volume=False: W → 0 is that objective's optimum (metric collapse), which a pull on tr(P) would add to
    calls: list[float] = []
    monkeypatch.setattr(_gd, "_reg_covar_backward", lambda state, scale, reg: calls.append(reg))
    x = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        GaussianMixture(2, fitter="gd", volume=False, reg_covar=REG, random_state=0, max_iter=2).fit(x)
        gm = GaussianMixture(2, fitter="gd", volume=False, reg_covar=REG, random_state=0)
        gm.partial_fit(x[:20])
    assert calls == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        GaussianMixture(2, fitter="gd", reg_covar=REG, random_state=0, max_iter=1).fit(x)
    assert len(calls) == _gd.MIN_STEPS  # the likelihood: one penalty per step
