"""The correntropy_robustness experiment: far outliers do not move correntropy's prototypes and do move the LSE's;
closed-form gradients on hand cases; the controls; a correntropy that is secretly an LSE is refuted."""

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from implicit_em.audit.claims import correntropy_robustness as cr
from implicit_em.audit.core import Context, Result, torch_threads
from implicit_em.audit.testbeds import ring_outliers as ring

F64 = torch.float64
SMALL = dataclasses.replace(cr.Config.quick(), n_seeds=3, gaps=(1.0, 4.0), descent=ring.Descent(steps=300))
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Result:
    with torch_threads(1):  # as the audit runs the quick size (2 threads on a busy 2-core machine crawl)
        return cr.run(cr.Config.quick(), Context(tmp_path_factory.mktemp("correntropy")))


def _paper() -> str:
    for base in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        path = base / "paper" / "implicit-em-paper.md"
        if path.exists():
            return path.read_text()
    pytest.skip("no shared/paper/implicit-em-paper.md beside this checkout")


# --- known answers --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", cr.OBJECTIVES)
def test_the_gradient_on_one_point_is_its_closed_form(objective: str) -> None:
    """One prototype at the origin, points at distance ρ on the x axis: ∂ℓ/∂m = w·2(m − x)/σ² with w = 1 (LSE, K = 1),
    exp(−ρ²/σ²) (correntropy), σ(ρ²/σ² − c) (sigmoids)."""
    cfg = cr.Config.quick()
    sigma2 = cfg.kernel_width**2
    rho = torch.tensor([0.3, 1.0, 3.0, 10.0], dtype=F64)
    points = torch.stack([rho, torch.zeros_like(rho)], -1)
    got = ring.gradient_mass(objective, torch.zeros(1, 2, dtype=F64), points, cfg.kernel_width, cfg.sigmoid_bias)
    weight = {
        "lse": torch.ones_like(rho),
        "correntropy": torch.exp(-(rho**2) / sigma2),
        "sigmoid": torch.sigmoid(rho**2 / sigma2 - cfg.sigmoid_bias),
    }[objective]
    torch.testing.assert_close(got["mass"], weight * 2 * rho / sigma2, rtol=1e-13, atol=0)
    assert got["closed rel"] < 1e-13
    # the planted forms miss, except the LSE's without r_j, which is r_j = 1 when K = 1
    assert got["planted rel"] < 1e-13 if objective == "lse" else got["planted rel"] > 1e-3


def test_squared_distances_over_problems_are_the_librarys_per_problem() -> None:
    from implicit_em.distances import squared_euclidean

    g = torch.Generator().manual_seed(0)
    x, m = torch.randn(3, 7, 2, generator=g, dtype=F64), torch.randn(3, 4, 2, generator=g, dtype=F64)
    batched = ring.squared(x, m)
    for b in range(3):
        torch.testing.assert_close(batched[b], squared_euclidean(x[b], m[b]), rtol=0, atol=0)


def test_sites_link_close_prototypes_into_one() -> None:
    apart = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]], dtype=F64)
    chain = torch.tensor([[0.0, 0.0], [0.2, 0.0], [0.4, 0.0]], dtype=F64)  # single linkage: one site
    assert ring.sites(apart, 0.25) == 2 and ring.sites(chain, 0.25) == 1


def test_prototypes_on_the_centres_have_no_error_full_coverage_and_no_duplicates() -> None:
    cfg = cr.Config.quick()
    data = ring.draw(cfg.data, 0)
    s = cfg.data.cluster_std
    assert ring.describe(data.centres, data.centres, s) == {"centre error": 0.0, "coverage": 1.0, "duplicates": 0.0}
    doubled = data.centres.clone()
    doubled[1] = doubled[0]  # one centre twice, one centre uncovered
    got = ring.describe(doubled, data.centres, s)
    assert got["duplicates"] == pytest.approx(1 / 5) and got["coverage"] == pytest.approx(4 / 5)


def test_the_data_has_twenty_percent_outliers_beyond_the_ring() -> None:
    cfg = cr.Config.quick()
    data = ring.draw(cfg.data, 3)
    assert len(data.directions) / (len(data.directions) + len(data.inliers)) == pytest.approx(0.2)
    out = ring.outliers(cfg.data, data, 4.0)
    gap = torch.cdist(out, data.centres).min(1).values
    assert bool((gap >= 4.0 * cfg.kernel_width - 1e-12).all())  # at least the gap from every centre


# --- the experiment -------------------------------------------------------------------------------------------------


def test_far_outliers_leave_correntropy_where_it_was_and_move_the_lse(quick: Result) -> None:
    cfg = cr.Config.quick()
    shifts = quick.metrics["shift (units of s), per gap, per seed"]
    far = [i for i, g in enumerate(cfg.gaps) if g >= cfg.far_gap]
    assert far and all(max(shifts["correntropy"][i]) < 1e-5 for i in far)  # every seed, not only the median
    assert all(min(shifts["lse"][i]) > cfg.standard_error for i in far)
    # the planted effect the shift must see: near outliers move correntropy too
    assert max(shifts["correntropy"][0]) > 10 * cfg.ignore_shift_se * cfg.standard_error
    # the gradient on an outlier vanishes for correntropy and grows for the LSE
    mass = quick.metrics["per-outlier gradient mass, per gap: median over seeds"]
    assert mass["correntropy"][-1] < 1e-50 < mass["lse"][0] < mass["lse"][-1]
    assert max(quick.metrics["closed form vs autograd, max relative miss"].values()) < 1e-12


def test_without_normalisation_prototypes_duplicate(quick: Result) -> None:
    dup = quick.metrics["duplicate rate, per condition: mean over seeds"]
    assert dup["correntropy"][0] > dup["lse"][0]
    assert dup["sigmoid"][0] == pytest.approx(0.8)  # all five sigmoid prototypes at one point: four duplicates
    assert quick.metrics["final gradient norm, max over fits"]["correntropy"] < 1e-5
    assert len(quick.figures) == 1


def _lse_in_disguise(d: torch.Tensor, sigma: Any, dim: int = -1) -> torch.Tensor:
    return -torch.logsumexp(-(d**2) / sigma**2, dim=dim)


def test_a_correntropy_that_is_an_lse_is_refuted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: replace correntropy by the normalised objective with the same kernel, and its closed form by the
    LSE's (so the identity holds for what is computed); C1, a test, must then fail and the verdict be REFUTED."""
    real = ring.closed_form_weights

    def weights(objective: str, sq: torch.Tensor, sigma: float, bias: float, planted: bool = False) -> torch.Tensor:
        return real("lse" if objective == "correntropy" and not planted else objective, sq, sigma, bias, planted)

    monkeypatch.setattr(ring, "correntropy", _lse_in_disguise)
    monkeypatch.setattr(ring, "closed_form_weights", weights)
    with torch_threads(1):
        res = cr.run(SMALL, Context(tmp_path))
    assert not res.metrics["parts"]["C1 correntropy ignores far outliers"]
    assert res.verdict == "REFUTED"


def test_the_closed_forms_are_identities_not_evidence(quick: Result) -> None:
    """The three closed-form checks are recorded with role "identity" (reported, not counted); every other
    criterion, the fits' shifts and duplicates and the controls, is a test."""
    roles = {c.metric: c.role for c in quick.criteria}
    ids = [m for m, r in roles.items() if r == "identity"]
    assert sorted(ids) == sorted(f"{o}: closed-form gradient vs autograd, max relative miss" for o in cr.OBJECTIVES)
    assert all(r == "test" for m, r in roles.items() if m not in ids)
    assert all(c.passed for c in quick.criteria if c.role == "identity")
    assert "C4 closed forms" not in quick.metrics["parts"]  # no longer a part the verdict reads


def test_a_broken_closed_form_raises_instead_of_giving_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A closed form off by 1e-6 relative (a bug): the identity fails, and the run raises rather than returning
    PARTIAL (the rule before issue 25) or any verdict."""
    real = ring.closed_form_weights

    def off(objective: str, sq: torch.Tensor, sigma: float, bias: float, planted: bool = False) -> torch.Tensor:
        return real(objective, sq, sigma, bias, planted) * (1.0 if planted else 1.0 + 1e-6)

    monkeypatch.setattr(ring, "closed_form_weights", off)
    with torch_threads(1), pytest.raises(AssertionError, match=r"identities failed.*closed-form gradient"):
        cr.run(SMALL, Context(tmp_path))


def test_an_lse_posing_as_correntropy_is_caught_by_the_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library's correntropy replaced by an LSE, its closed form left as correntropy's: a bug, which raises."""
    monkeypatch.setattr(ring, "correntropy", _lse_in_disguise)
    with torch_threads(1), pytest.raises(AssertionError, match="correntropy: closed-form gradient"):
        cr.run(SMALL, Context(tmp_path))


def test_outliers_that_never_come_near_give_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If every 'outlier' sat far away whatever the gap, the near control could not fail: the run raises."""
    monkeypatch.setattr(ring, "outliers", lambda setting, data, gap: 1e3 * data.directions)
    with torch_threads(1), pytest.raises(RuntimeError, match="control, near outliers"):
        cr.run(SMALL, Context(tmp_path))


def test_the_gaps_must_include_a_near_and_a_far_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="near_gap"):
        cr.run(dataclasses.replace(SMALL, gaps=(4.0, 8.0)), Context(tmp_path))


def test_every_metric_is_declared(quick: Result) -> None:
    m = quick.metrics
    assert not m.undeclared() and set(m.declared) == set(m)  # type: ignore[attr-defined]


def test_the_kernel_is_the_clusters_gaussian() -> None:
    cfg = cr.Config.quick()
    assert cfg.kernel_width**2 == pytest.approx(2 * cfg.data.cluster_std**2)
    assert math.exp(-(cfg.far_gap**2)) < 1.2e-7  # 'far': the kernel weight at the nearest centre


# --- the texts it quotes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [cr.PAPER_4_4, cr.PAPER_7_1, cr.PAPER_6_1])
def test_the_paper_is_quoted_as_printed(text: str) -> None:
    assert text in _paper()
