"""The shared geometry of the manifold experiments against scipy/numpy float64 references."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import subspace_angles
from scipy.stats import spearmanr

from implicit_em.audit.testbeds.manifold import (
    mean_cos2,
    pc_shares,
    principal_angles,
    random_mean_cos2,
    value_manifold_signature,
)


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 12), st.integers(1, 3), st.integers(1, 3), st.integers(0, 10_000))
def test_principal_angles_match_scipy(d: int, p: int, q: int, seed: int) -> None:
    g = np.random.default_rng(seed)
    a, b = g.normal(size=(d, p)), g.normal(size=(d, q))
    ours = principal_angles(torch.tensor(a), torch.tensor(b)).numpy()
    ref = np.sort(subspace_angles(a, b))  # scipy: descending
    np.testing.assert_allclose(ours, ref, atol=1e-7)


def test_nested_and_orthogonal_spans() -> None:
    e = torch.eye(6, dtype=torch.float64)
    assert mean_cos2(e[:, :2], e[:, :4] @ torch.randn(4, 4, dtype=torch.float64)) == pytest.approx(1.0)
    assert mean_cos2(e[:, :2], e[:, 2:5]) == pytest.approx(0.0, abs=1e-24)
    with pytest.raises(ValueError, match="full column rank"):
        principal_angles(torch.ones(5, 2), e[:5, :2])


def test_random_expectation_matches_monte_carlo() -> None:
    d, p, q = 20, 3, 8
    g = torch.Generator().manual_seed(0)
    fixed = torch.randn(d, q, generator=g, dtype=torch.float64)
    draws = [mean_cos2(torch.randn(d, p, generator=g, dtype=torch.float64), fixed) for _ in range(4000)]
    mc, se = float(np.mean(draws)), float(np.std(draws)) / math.sqrt(len(draws))
    assert abs(mc - random_mean_cos2(d, p, q)) < 4 * se  # 0.4 in expectation; a wrong formula (p/d) misses by 50 se


def test_signature_on_a_planted_line() -> None:
    g = torch.Generator().manual_seed(1)
    h = torch.rand(400, generator=g, dtype=torch.float64)
    direction = torch.randn(16, generator=g, dtype=torch.float64)
    x = torch.exp(h)[:, None] * direction + 0.01 * torch.randn(400, 16, generator=g, dtype=torch.float64)
    sig = value_manifold_signature(x, h)
    assert sig["pc1"] > 0.99 and sig["spearman_abs"] > 0.99 and sig["participation_ratio"] < 1.05
    iso = value_manifold_signature(torch.randn(400, 16, generator=g, dtype=torch.float64), h)
    assert iso["pc1"] < 0.15 and iso["spearman_abs"] < 0.2 and iso["participation_ratio"] > 12  # the control


def test_shares_and_rho_match_numpy() -> None:
    g = np.random.default_rng(3)
    x = g.normal(size=(50, 5)) @ g.normal(size=(5, 5))
    h = g.normal(size=50)
    xc = x - x.mean(0)
    eig = np.sort(np.linalg.eigvalsh(xc.T @ xc))[::-1]
    np.testing.assert_allclose(pc_shares(torch.tensor(x)).numpy(), eig / eig.sum(), rtol=1e-10)
    _, vecs = np.linalg.eigh(xc.T @ xc)
    ref = abs(spearmanr(xc @ vecs[:, -1], h).statistic)
    assert value_manifold_signature(torch.tensor(x), torch.tensor(h))["spearman_abs"] == pytest.approx(ref, abs=1e-12)
    xs = xc / xc.std(0, ddof=1)
    eig_s = np.sort(np.linalg.eigvalsh(xs.T @ xs))[::-1]
    np.testing.assert_allclose(pc_shares(torch.tensor(x), standardize=True).numpy(), eig_s / eig_s.sum(), rtol=1e-10)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="NaN"):
        pc_shares(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="entries"):
        value_manifold_signature(torch.randn(5, 3), torch.randn(4))
    with pytest.raises(ValueError, match="zero variance"):
        pc_shares(torch.ones(4, 3))
