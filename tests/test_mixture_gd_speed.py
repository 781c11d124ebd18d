"""gd's float32 step (``mixture/_gd_fast.py``): the analytic backward against autograd, the step against the
autograd step it replaces, and which fits take it (issue 14, part 2)."""

import numpy as np
import pytest
import torch

from implicit_em import gaussian
from implicit_em.mixture import GaussianMixture, _gd, _gd_fast
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._stats import MixtureParams

TYPES = ("full", "tied", "diag", "spherical")
SCALES = ("one", "scalar", "per_feature", "triangular")


def _params(covariance_type: str, k: int = 3, d: int = 4, seed: int = 0) -> MixtureParams:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    weights = torch.rand(k, generator=g, dtype=f64) + 0.2
    means = torch.randn(k, d, generator=g, dtype=f64)
    if covariance_type in ("full", "tied"):
        a = torch.randn(k if covariance_type == "full" else 1, d, d, generator=g, dtype=f64)
        cov = a @ a.mT + 0.5 * torch.eye(d, dtype=f64)
        cov = cov if covariance_type == "full" else cov[0]
    elif covariance_type == "diag":
        cov = torch.rand(k, d, generator=g, dtype=f64) + 0.3
    else:
        cov = torch.rand(k, generator=g, dtype=f64) + 0.3
    prec_chol = gaussian.precisions_cholesky(cov, covariance_type)
    return MixtureParams(weights / weights.sum(), means, cov, prec_chol)


def _data(n: int = 60, d: int = 4, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64)
    return torch.randn(n, d, generator=g, dtype=torch.float64) @ mix + 3.0


def _scale(kind: str, x: torch.Tensor, shift: torch.Tensor, covariance_type: str) -> _gd.Scale:
    if kind == "one":
        return 1.0
    if kind == "scalar":
        return 1.7
    if kind == "per_feature":
        return x.std(0)
    return _gd.feature_scale(DataSource(x, torch.device("cpu"), torch.float64), shift, 1.0, covariance_type)


def _cases() -> list[tuple[str, bool, str]]:
    cases = []
    for cov in TYPES:
        for kind in SCALES:
            if (kind == "triangular" and cov in ("diag", "spherical")) or (cov, kind) == ("spherical", "per_feature"):
                continue  # scales make_state does not take for that type
            cases += [(cov, True, kind), (cov, False, kind)]
    return cases


def _gradients(state: _gd.GDState) -> dict[str, torch.Tensor]:
    out = {name: p.grad.clone() for name, p in state.components.named_parameters()}  # type: ignore[union-attr]
    out["logits"] = state.logits.grad.clone()  # type: ignore[union-attr]
    return out


@pytest.mark.parametrize("reg_covar", [0.0, 0.4])
@pytest.mark.parametrize(("covariance_type", "volume", "scale_kind"), _cases())
def test_fast_gradient_equals_autograd_in_float64(
    covariance_type: str, volume: bool, scale_kind: str, reg_covar: float
) -> None:
    """With reg_covar, the reference adds ``_reg_covar_backward``'s gradient (tested against autograd of the
    trace in test_mixture_gd_reg_covar.py); the fast step folds it into dW (0.4: far above the tolerance; with
    volume=False neither takes it)."""
    x = _data()
    shift = x.mean(0)
    scale = _scale(scale_kind, x, shift, covariance_type)
    state = _gd.make_state(_params(covariance_type), covariance_type, shift, scale, 0.01, "adam")
    if covariance_type in ("full", "tied"):  # entries above the diagonal of ``lower`` are unused: both must ignore them
        with torch.no_grad():
            state.components.lower.add_(torch.randn_like(state.components.lower))
    log_norm = _gd.accumulate_gradient(state, _gd._standardise(x, shift, scale), volume)  # autograd: the reference
    if reg_covar > 0 and volume:
        _gd._reg_covar_backward(state, scale, reg_covar)
    expected = _gradients(state)
    fast = _gd_fast.FastStep(state.components, state.logits, shift, scale, 4096, torch.float64)
    s, loglik = fast.statistics(x, fast.score_matrix_t(volume))
    fast.set_gradient(s, x.shape[0], volume, reg_covar)
    got = _gradients(state)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-10, atol=1e-10 * float(value.abs().max()), msg=name)
    torch.testing.assert_close(loglik, log_norm.sum(), rtol=1e-12, atol=0.0)


def test_fast_statistics_sum_chunks_of_a_batch_larger_than_the_workspace() -> None:
    x = _data(n=50)
    shift = x.mean(0)
    state = _gd.make_state(_params("full"), "full", shift, 1.0, 0.01, "adam")
    whole = _gd_fast.FastStep(state.components, state.logits, shift, 1.0, 64, torch.float64)
    chunked = _gd_fast.FastStep(state.components, state.logits, shift, 1.0, 7, torch.float64)  # 8 chunks, a short last
    a_t = whole.score_matrix_t(True)
    for got, expected in zip(chunked.statistics(x, a_t), whole.statistics(x, a_t), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reg_covar", [0.0, 0.3])
@pytest.mark.parametrize("covariance_type", TYPES)
def test_float32_gd_step_follows_the_autograd_step(covariance_type: str, reg_covar: float) -> None:
    """Three steps on float32 data (the fast step: float32 E-step, float64 parameters, fused Adam) against the
    autograd step on the same rows in float64 with the same Adam: the iterates agree to float32 round-off, with
    reg_covar's penalty too (0.3: large enough to move Adam's steps; fails if the fast step drops it)."""
    x = _data(n=200)
    shift = x.mean(0)
    scale = 1.0 if covariance_type == "spherical" else x.std(0)
    params = _params(covariance_type)
    old = _gd.make_state(params, covariance_type, shift, scale, 0.01, "adam")
    new = _gd.make_state(params._replace(means=params.means.float()), covariance_type, shift, scale, 0.01, "adam")
    assert new.optimizer.defaults["fused"] and not old.optimizer.defaults.get("fused")
    for rows in (slice(0, 64), slice(64, 128), slice(128, 200)):
        ll_old = _gd.gd_step(old, x[rows], shift, scale, True, reg_covar)
        ll_new = _gd.gd_step(new, x[rows].float(), shift, scale, True, reg_covar)
        assert abs(ll_new - ll_old) < 1e-5 * abs(ll_old)
    for p_old, p_new in zip(old.components.parameters(), new.components.parameters(), strict=True):
        assert p_new.dtype == torch.float64  # the parameters stay in the state's dtype
        torch.testing.assert_close(p_new, p_old, rtol=0.0, atol=1e-5)


def test_fit_gd_takes_the_fast_step_on_float32_data_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = _gd_fast.FastStep.set_gradient

    def counting(self: _gd_fast.FastStep, *args: object) -> None:
        calls.append(1)
        original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_gd_fast.FastStep, "set_gradient", counting)
    x = _data(n=300).numpy()
    with pytest.warns(Warning):  # ConvergenceWarning: two epochs
        GaussianMixture(2, fitter="gd", max_iter=2, batch_size=100, random_state=0).fit(x)
    assert calls == []  # float64: the autograd step, bitwise the recorded one (tests/test_mixture_fitting.py)
    with pytest.warns(Warning):  # ConvergenceWarning: two epochs
        GaussianMixture(2, fitter="gd", max_iter=2, batch_size=100, random_state=0, dtype="float32").fit(x)
    assert len(calls) >= 6  # three steps per epoch (MIN_STEPS makes whole passes: more)


def test_float32_gd_fit_ends_near_the_float64_fit() -> None:
    rng = np.random.RandomState(0)
    x = np.vstack([rng.randn(400, 3) + c for c in ([0, 0, 0], [4, 0, 0], [0, 4, 0])])
    kw = {"n_components": 3, "fitter": "gd", "random_state": 0, "max_iter": 30, "batch_size": 256}
    f64 = GaussianMixture(**kw).fit(x)  # type: ignore[arg-type]
    f32 = GaussianMixture(dtype="float32", **kw).fit(x)  # type: ignore[arg-type]
    assert abs(f32.score(x) - f64.score(x)) < 1e-3
