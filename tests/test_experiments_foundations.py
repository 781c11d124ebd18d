"""The foundations experiment: four identities of the paper checked in float64, each with planted errors its check
must catch; known answers for the checks' statistics, and planted library errors that break one identity."""

import dataclasses
from pathlib import Path

import pytest
import torch

from implicit_em.audit.claims import foundations as fd
from implicit_em.audit.core import Context, torch_threads
from implicit_em.audit.testbeds import identities as ids
from implicit_em.audit.testbeds.measured import Measured

EPS = torch.finfo(torch.float64).eps
SMALL = dataclasses.replace(
    fd.Config.quick(), draws=2, components=(2, 10), rows=16, spreads=(1e-3, 30.0), dims=(2, 5), keys=(1, 8)
)
REPO = Path(__file__).resolve().parents[1]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _by_name(measures: list[ids.Measure]) -> dict[str, ids.Measure]:
    return {m.name: m for m in measures}


def _paper() -> str:
    for base in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        path = base / "paper" / "implicit-em-paper.md"
        if path.exists():
            return path.read_text()
    pytest.skip("no shared/paper/implicit-em-paper.md beside this checkout")


# --- the checks' statistics on known answers -----------------------------------------------------------------------


def test_violation_is_the_distance_outside_the_interval() -> None:
    value = torch.tensor([1.0, 2.5, 4.0], dtype=torch.float64)
    lower, upper = torch.full((3,), 2.0, dtype=torch.float64), torch.full((3,), 3.0, dtype=torch.float64)
    assert ids.violation(value, lower, upper) == 1.0  # 1 below the lower bound (4 is 1 above the upper)
    assert ids.violation(value[1:2], lower[1:2], upper[1:2]) == 0.0


def test_softmin_controls_miss_by_their_closed_form_at_equal_distances() -> None:
    """With d ≈ 0 (spread 1e-3, unit eps·log K), equal distances give: without log K the lower bound is off by log K
    (1/eps units); at temperature τ by (τ − 1) log K ((τ − 1)/eps units)."""
    cfg = dataclasses.replace(SMALL, components=(10,), spreads=(1e-3,))
    m = ids.softmin(cfg, _gen())
    laws = [x for x in m if x.role == "law"]
    no_log_k, temperature = (x.value for x in m if x.role == "control")
    assert all(x.value <= 1.0 for x in laws)  # the bounds hold and are attained to within one unit
    assert no_log_k == pytest.approx(1 / EPS, rel=1e-9)
    assert temperature == pytest.approx((cfg.temperature_error - 1) / EPS, rel=1e-9)


def test_label_smoothing_controls_miss_by_their_closed_form() -> None:
    """The hard-label law misses t − r by ε(1 − 1/K) on the label; mass ε/(K − 1) on the wrong classes misses by
    ε/K there (unit eps with |d| ≤ 1)."""
    cfg = dataclasses.replace(SMALL, components=(10,), spreads=(1e-3,), smoothings=(0.1,))
    m = ids.label_smoothing(cfg, _gen())
    hard, wrong = (x.value for x in m if x.role == "control")
    assert hard == pytest.approx(0.1 * (1 - 1 / 10) / EPS, rel=1e-9)
    assert wrong == pytest.approx(0.1 / 10 / EPS, rel=1e-9)
    assert all(x.value <= cfg.max_units for x in m if x.role == "law")


def test_mahalanobis_relu_identity_is_exact_and_the_units_sum_to_the_mahalanobis_distance() -> None:
    m = _by_name(ids.mahalanobis(SMALL, _gen()))
    relu = next(x for name, x in m.items() if name.startswith("relu"))
    assert relu.value == 0.0
    total = next(x for name, x in m.items() if name.startswith("Σ over the D axes"))
    assert total.value < 1e-12
    assert all(x.value > 1e-3 for x in m.values() if x.role == "control" and "relative" in x.name)


def test_hopfield_read_out_with_one_key_is_that_key() -> None:
    cfg = dataclasses.replace(SMALL, keys=(1,))
    m = ids.hopfield(cfg, _gen())
    assert m[0].value <= 1.0  # the law: α = 1 and the gradient is k
    uniform = next(x for x in m if x.name.startswith("control, uniform"))
    assert uniform.value == 0.0  # with S = 1 uniform weights are α: this control cannot be caught here


def test_judge_takes_the_worst_draw_for_laws_and_the_best_for_controls() -> None:
    law = fd._judge(ids.Measure("law", 1.0, 16.0, "law"), [1.0, 20.0])
    control = fd._judge(ids.Measure("ctl", 100.0, 16.0, "control"), [100.0, 10.0])
    assert law.measured == 20.0 and not law.passed and law.role == "identity"
    assert control.measured == 10.0 and not control.passed and control.role == "gate"  # not caught in draw 2


# --- the experiment -------------------------------------------------------------------------------------------------


def test_quick_run_every_identity_holds_and_every_control_is_caught(tmp_path: Path) -> None:
    cfg = fd.Config.quick()
    with torch_threads(1):  # as the audit runs the quick size
        res = fd.run(cfg, Context(tmp_path))
    for name in fd.IDENTITIES:
        assert res.metrics[f"{name} ({fd.SECTIONS[name]}) holds"]
        assert all(len(v) == cfg.draws for v in res.metrics[f"{name}: per draw"].values())
    controls = [c for c in res.criteria if ": control," in c.metric]
    assert len(controls) == 9 and all(c.measured > 1e6 * c.threshold for c in controls)
    laws = [c for c in res.criteria if ": control," not in c.metric]
    assert all(c.passed and c.role == "identity" for c in laws)
    assert res.verdict == "VERIFIED"
    assert len(res.figures) == 1 and (tmp_path / res.figures[0]).stat().st_size > 1000


def test_a_planted_lse_error_breaks_the_softmin_identity_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong lse is a bug: the softmin identities fail and the run raises, naming them and no other identity."""
    monkeypatch.setattr(ids, "lse", lambda d: 1.001 * torch.logsumexp(-d, dim=-1))
    with pytest.raises(AssertionError, match="identities failed") as caught:
        fd.run(SMALL, Context(tmp_path))
    broken = str(caught.value).split(": ", 1)[1]
    assert "softmin: " in broken
    assert not any(f"{name}: " in broken for name in ("mahalanobis", "hopfield", "label_smoothing"))


def test_a_planted_smoothing_error_breaks_the_label_smoothing_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = ids.constrained_cross_entropy

    def smoothed_too_little(d: torch.Tensor, y: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
        return wrong(d, y, label_smoothing=0.9 * label_smoothing)

    monkeypatch.setattr(ids, "constrained_cross_entropy", smoothed_too_little)
    with pytest.raises(AssertionError, match="identities failed") as caught:
        fd.run(SMALL, Context(tmp_path))
    broken = str(caught.value).split(": ", 1)[1]
    assert "label_smoothing: " in broken and "softmin: " not in broken


def test_the_laws_are_identities_and_the_controls_are_tests(tmp_path: Path) -> None:
    """Every law check is recorded with role "identity" (reported, not counted); the planted-error controls are
    gates (the checks could fail); nothing is a test, the verdict is VERIFIED and the summary says it is a
    verification, not evidence from data."""
    res = fd.run(SMALL, Context(tmp_path))
    roles = {c.metric: c.role for c in res.criteria}
    controls = [m for m in roles if ": control," in m]
    assert controls and all(roles[m] == "gate" for m in controls)
    laws = [m for m in roles if m not in controls]
    assert len(laws) == 13 and all(roles[m] == "identity" for m in laws)
    assert {m.split(": ", 1)[0] for m in laws} == set(fd.IDENTITIES)
    assert res.verdict == "VERIFIED" and res.summary.startswith("Verified, not tested on data")


def test_a_check_that_cannot_fail_gives_no_verdict(tmp_path: Path) -> None:
    """With one key per query uniform weights equal α, so the uniform-weight control cannot be caught."""
    with pytest.raises(RuntimeError, match="hopfield: a planted error passed"):
        fd.run(dataclasses.replace(SMALL, keys=(1,)), Context(tmp_path))


def test_every_metric_is_declared_and_no_superseded_rule_is_computed(tmp_path: Path) -> None:
    res = fd.run(SMALL, Context(tmp_path))
    assert isinstance(res.metrics, Measured) and res.metrics.undeclared() == []
    assert not any("first unit" in key for key in res.metrics)
    assert not any(
        "first unit" in name for per_draw in res.metrics.values() if isinstance(per_draw, dict) for name in per_draw
    )


# --- the texts it quotes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(fd.PAPER))
def test_the_paper_is_quoted_as_printed(key: str) -> None:
    assert fd.PAPER[key] in _paper()
