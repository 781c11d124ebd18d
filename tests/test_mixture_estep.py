"""The E-step's one dispatch (``mixture/_estep.py``): which back-end runs is decided by the compute dtype alone,
float64 is the reference bitwise, float32 the fused pass to round-off, and every fitter goes through it."""

import pytest
import torch
from torch.testing import assert_close

from implicit_em.mixture import GaussianMixture, _estep, _fused, _stats
from implicit_em.mixture._settings import DEFAULT_BATCH_SIZE, FitSettings
from test_mixture_stats import _random_params as _params


def _data(n: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * 2 + 1


def _reference(batches: list[torch.Tensor], a: torch.Tensor, shift: torch.Tensor) -> _stats.Summary:
    parts = [_stats.summarize(x, a, shift)[0] for x in batches]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


@pytest.mark.parametrize("cov_type", ["full", "diag", "tied", "spherical"])
def test_float64_passes_are_the_reference_bitwise(cov_type: str) -> None:
    x = _data(1000, 3)
    p, shift = _params(cov_type, 4, 3), x[:40].mean(0)
    a = _stats.score_matrix(p, cov_type, shift)
    batches = [x[i : i + 300] for i in range(0, 1000, 300)]
    got, want = _estep.pass_summary(batches, a, shift), _reference(batches, a, shift)
    assert got is not None
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    total, n = _estep.pass_loglik(batches, a, shift)
    assert n == 1000 and total == pytest.approx(float(want.loglik), rel=1e-14)
    one = _estep.Summarizer(300, 3, 4, torch.float64, x.device)
    for g, w in zip(one(x[:300], a, shift), _stats.summarize(x[:300], a, shift)[0], strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("cov_type", ["full", "diag"])
def test_float32_passes_are_the_fused_pass(cov_type: str) -> None:
    x = _data(1000, 3).float()
    p, shift = _params(cov_type, 4, 3), x[:40].double().mean(0)
    a = _stats.score_matrix(p, cov_type, shift).float()
    batches = [x[i : i + 300] for i in range(0, 1000, 300)]
    got = _estep.pass_summary(batches, a, shift.float())
    fused = _fused.fused_pass_summary(batches, a, shift.float())
    assert got is not None and fused is not None
    for g, f in zip(got, fused, strict=True):
        assert torch.equal(g, f)
    assert _estep.pass_loglik(batches, a, shift.float()) == _fused.fused_pass_loglik(batches, a, shift.float())
    # and the fused pass is the float64 reference to float32 round-off
    ref = _reference([b.double() for b in batches], a.double(), shift)
    assert_close(got.nk, ref.nk, rtol=1e-5, atol=1e-3)
    assert_close(got.loglik, ref.loglik, rtol=1e-5, atol=0.0)


def test_the_dispatch_is_the_compute_dtype_alone() -> None:
    assert _estep.fused(torch.float32)
    assert not _estep.fused(torch.float64)
    x, a = torch.zeros(5, 2), torch.zeros(6, 3)
    assert _estep.Summarizer.for_batch(x, a)._fused is not None
    assert _estep.Summarizer.for_batch(x.double(), a.double())._fused is None


def test_no_batches_give_no_summary_and_no_rows() -> None:
    a, shift = torch.zeros(6, 3, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    assert _estep.pass_summary([], a, shift) is None
    assert _estep.pass_loglik([], a, shift) == (0.0, 0)


def test_the_settings_defaults_are_the_estimators() -> None:
    """A direct call of an algorithm with ``FitSettings()`` runs what ``GaussianMixture()`` runs (split-and-merge
    and verbosity aside, which only the estimator does)."""
    params = GaussianMixture().get_params()
    settings = FitSettings()
    for name in ("fitter", "covariance_type", "tol", "reg_covar", "max_iter", "learning_rate", "optimizer", "volume"):
        assert getattr(settings, name) == params[name], name
    assert settings.batch_size == DEFAULT_BATCH_SIZE[params["fitter"]]
    assert FitSettings.from_params(params) == FitSettings(split_merge=params["split_merge"])
