"""The theorem1 experiment: Theorem 1 and the sign §4.1 prints, each measured by autograd against both laws, with
controls that the check must fail."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from implicit_em.audit.claims import theorem1
from implicit_em.audit.core import Context
from implicit_em.objectives import lse

F64 = torch.float64
SMALL = dataclasses.replace(theorem1.Config.quick(), components=(2, 10), rows=32, spreads=(0.1, 10.0))
REPO = Path(__file__).resolve().parents[1]


def _paper_file(name: str) -> Path:
    """paper/<name> of the shared folder beside the checkout (skip when this checkout has none)."""
    for base in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        if (base / "paper" / name).exists():
            return base / "paper" / name
    pytest.skip(f"no shared/paper/{name} beside this checkout")


# --- the measurement on closed-form cases ---------------------------------------------------------------------


@pytest.mark.parametrize(("d", "r_max"), [([0.0, 0.0], 0.5), ([0.0, math.log(3.0)], 0.75)])
def test_each_form_matches_its_sign_and_misses_the_other_by_twice_r(d: list[float], r_max: float) -> None:
    x = torch.tensor([d], dtype=F64)  # r = (1/2, 1/2) and (3/4, 1/4)
    maximised, minimised = theorem1._maximised(None), theorem1._minimised(None)
    assert theorem1._miss(maximised, x, None, -1.0) < 1e-15  # Theorem 1: −r
    assert theorem1._miss(minimised, x, None, +1.0) < 1e-15  # §4.1 as printed: +r
    # the other sign misses by max |r + r| = 2 max r
    assert theorem1._miss(maximised, x, None, +1.0) == pytest.approx(2 * r_max, rel=1e-14)
    assert theorem1._miss(minimised, x, None, -1.0) == pytest.approx(2 * r_max, rel=1e-14)


def test_the_unnormalised_control_misses_both_laws_by_its_known_amount() -> None:
    d, log_w = torch.tensor([[1.0, 1.0]], dtype=F64), torch.log(torch.tensor([0.5, 0.5], dtype=F64))
    control = theorem1._unnormalised(log_w)  # gradient π e^{−d} = e^{−1}/2 per component; r = 1/2
    assert theorem1._miss(control, d, log_w, +1.0) == pytest.approx(0.5 * (1 - math.exp(-1)), rel=1e-14)
    assert theorem1._miss(control, d, log_w, -1.0) == pytest.approx(0.5 * (1 + math.exp(-1)), rel=1e-14)


# --- the experiment ---------------------------------------------------------------------------------------------


def test_quick_run_measures_minus_r_for_l_and_plus_r_for_l_minus(tmp_path: Path) -> None:
    cfg = theorem1.Config.quick()
    res = theorem1.run(cfg, Context(tmp_path))
    m = res.metrics
    assert m["max_residual_float64"] < 1e-12
    assert m["measured sign of ∂L/∂d (cases: -1 / +1 / neither)"] == [m["cases"], 0, 0]
    assert m["measured sign of ∂L⁻/∂d (cases: -1 / +1 / neither)"] == [0, m["cases"], 0]
    # the wrong sign misses by 2·max r per case, and max r ≥ 1/K in every row
    assert m["L_minus vs -r, min absolute"] >= 2 / max(cfg.components) * (1 - 1e-6)
    thresholds = [c.threshold for c in res.criteria]
    assert thresholds == [cfg.max_scaled_residual] * 2 + [cfg.wrong_law_min_scaled] * 3
    assert all(c.passed for c in res.criteria) and res.verdict == "VERIFIED"
    assert [c.role for c in res.criteria] == ["identity"] * 3 + ["gate"] * 2  # algebra: nothing here is a test
    assert res.summary.startswith("Verified, not tested on data")
    assert len(res.figures) == 1 and (tmp_path / res.figures[0]).stat().st_size > 1000


def test_a_minimisation_form_with_gradient_minus_r_fails_the_printed_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted: if L⁻ had the sign the review says the paper prints, the printed +r would fail, and a failed identity
    is no verdict: the run raises, naming the printed law and the review's reading, not Theorem 1."""

    def wrong_sign(d: torch.Tensor, log_w: torch.Tensor | None = None) -> torch.Tensor:
        return lse(d if log_w is None else d - log_w)  # gradient −r

    monkeypatch.setattr(theorem1, "mixture_nll", wrong_sign)
    with pytest.raises(AssertionError, match="identities failed") as caught:
        theorem1.run(SMALL, Context(tmp_path))
    assert "§4.1 as printed" in str(caught.value) and "review comment 4" in str(caught.value)
    assert "Theorem 1:" not in str(caught.value)


def test_an_lse_whose_gradient_is_not_minus_r_is_a_bug_not_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(theorem1, "lse", lambda x: 1.001 * torch.logsumexp(-x, dim=-1))  # gradient −1.001 r
    with pytest.raises(AssertionError, match="identities failed") as caught:
        theorem1.run(SMALL, Context(tmp_path))
    assert "Theorem 1:" in str(caught.value) and "§4.1 as printed" not in str(caught.value)


def test_a_check_that_cannot_fail_gives_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A residual that is always 0 passes every law, the wrong ones too: the controls catch it."""
    monkeypatch.setattr(theorem1, "identity_residual", lambda *args, **kwargs: torch.zeros(()))
    with pytest.raises(RuntimeError, match="cannot fail"):
        theorem1.run(SMALL, Context(tmp_path))


# --- the texts it quotes ------------------------------------------------------------------------------------------


def test_review_comment_4_is_quoted_exactly() -> None:
    review = json.loads(_paper_file("review-implicit-em").read_text())
    comment = review["referee_report"]["major_comments"][3]
    assert comment["section"] == "§4.1, Eq. (6)"
    assert comment["comment"] == theorem1.REVIEW_COMMENT_4


def test_section_4_1_is_quoted_as_printed_with_plus_r() -> None:
    paper = _paper_file("implicit-em-paper.md").read_text()
    assert theorem1.PAPER_4_1 in paper
    assert theorem1.PRINTED_SIGN_4_1 == +1 and "=+r_{j}$" in theorem1.PAPER_4_1


def test_no_text_says_the_paper_prints_minus_r_or_that_the_review_is_right() -> None:
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "src").rglob("*.py")]
    for path in files:
        text = path.read_text().lower()
        for phrase in ("the review is right", "prints −r", "prints -r", "prints :math:`-r", "printed −r"):
            assert phrase not in text, (path, phrase)
