"""The report's content, read with the standard library's HTML parser (no browser needed).

Checks what a reader needs: the header (commit and dirty flag, the command, versions, date), a linked table of
contents with every verdict, each criterion as "measured ≤ threshold ✓/✗", labelled metrics with units, math
converted, figures with alt text at natural size linking to the image, and a viewport for narrow screens. Every
test fails on the old string-concatenation report (no header command for a run without argv, no TOC criteria
column, raw ``$W_{Q}$``, raw keys, no viewport).
"""

import json
import re
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from _report_cases import run_folder
from implicit_em.report import render, write_report
from implicit_em.report._committed import committed_full_records, committed_seed_rows, seed_cell


class _Page(HTMLParser):
    """Elements (tag, attrs) in order, and the text inside each element with an id or a class of interest."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.rows: list[list[str]] = []  # text of the cells of every table row
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def _page(tmp_path: Path, command: list[str] | None = None) -> _Page:
    return _parse(write_report(run_folder(tmp_path, command)).read_text())


def test_the_header_shows_commit_dirty_command_versions_and_date(tmp_path: Path) -> None:
    page = _page(tmp_path, ["implicit-em", "audit", "--quick", "--seed", "3"])
    rows = {r[0]: r[1] for r in page.rows if len(r) == 2}
    assert rows["commit"].startswith("0123456789ab (dirty")
    assert rows["command"] == "implicit-em audit --quick --seed 3"
    assert "torch 2.13.0" in rows["versions"] and "python 3.11.7" in rows["versions"]
    assert rows["date"] == "2026-12-01 17:54 UTC"
    assert "seed 3" in rows["run"] and "torch threads 1" in rows["run"]


def test_a_run_without_its_command_line_shows_the_equivalent_one_and_says_so(tmp_path: Path) -> None:
    rows = {r[0]: r[1] for r in _page(tmp_path).rows if len(r) == 2}
    assert rows["command"].startswith("implicit-em audit --quick --seed 3 (reconstructed")


def test_the_contents_link_every_experiment_with_its_verdict_and_criteria_met(tmp_path: Path) -> None:
    page = _page(tmp_path)
    ids = {a["id"] for _, a in page.elements if "id" in a}
    links = [a["href"] for t, a in page.elements if t == "a" and a.get("href", "").startswith("#exp-")]
    assert links == ["#exp-theorem1", "#exp-open_set"] and {h[1:] for h in links} <= ids
    toc = [r for r in page.rows if len(r) == 10 and r[0] in ("1", "2")]
    assert [(r[2], r[5]) for r in toc] == [("SUPPORTED", "1 / 1"), ("REFUTED", "1 / 2")]
    assert [tuple(r[6:9]) for r in toc] == [("1", "0", "0"), ("2", "0", "0")]  # tests, gates, identities
    # and the committed seed table's row: the quick verdicts at seeds 0 to 4 and whether they agree
    seeds = committed_seed_rows()
    assert seeds is not None
    assert [r[4] for r in toc] == [seed_cell(seeds["theorem1"]), seed_cell(seeds["open_set"])]
    # beside this run's verdict, the committed full-size record (a clone holds docs/audit-full-results.json): its
    # verdict and commit, * where its code hash is not this run's (these fake records have none)
    full = committed_full_records()
    assert full is not None
    for r, name in zip(toc, ("theorem1", "open_set"), strict=True):
        ref = full["experiments"][name]
        assert r[3] == f"{ref['verdict']}* @{ref['commit'][:7]}"


def test_each_criterion_reads_measured_comparison_threshold_and_a_mark(tmp_path: Path) -> None:
    rows = [r for r in _page(tmp_path).rows if len(r) == 5 and r[-1] in ("✓", "✗")]
    assert rows == [
        ["max |∂L/∂d + r| (eps units)", "1", "≤", "16", "✓"],
        ["C2: AUROC gain of r₀", "-0.1", "≥", "0.05", "✗"],
        ["accuracy gap", "0.006", "<", "0.02", "✓"],
    ]


def test_metrics_show_labels_and_units_not_keys(tmp_path: Path) -> None:
    rows = {r[0]: (r[1], r[2]) for r in _page(tmp_path).rows if len(r) == 3}
    assert rows["max |∂L/∂d + r|, float64"] == ("2.5e-13", "absolute")
    assert rows["rows per case"] == ("256", "count")
    assert rows["brand new metric key"] == ("3", "—")  # unknown: readable words, no unit claimed
    assert not any("_" in label for label in rows)


def test_math_is_converted_and_no_raw_tex_is_left(tmp_path: Path) -> None:
    html = write_report(run_folder(tmp_path)).read_text()
    assert "$W_{Q}$" not in html and "\\partial" not in html
    assert '<span class="math">W<sub>Q</sub></span>' in html
    assert "∂L/∂d<sub>j</sub>=−r<sub>j</sub>" in html


def test_figures_have_alt_text_a_caption_natural_size_and_a_link(tmp_path: Path) -> None:
    page = _page(tmp_path)
    imgs = [a for t, a in page.elements if t == "img"]
    assert len(imgs) == 1
    assert imgs[0]["alt"].startswith("Figure of theorem1: Which gradient law")
    assert (imgs[0]["width"], imgs[0]["height"]) == ("1600", "40")
    assert [a["href"] for t, a in page.elements if t == "a" and a.get("href", "").endswith(".png")] == [
        "figures/theorem1.png"
    ]
    assert any("Which gradient law autograd measures" in t for t in page.text)


def test_the_page_is_made_for_narrow_screens(tmp_path: Path) -> None:
    page = _page(tmp_path)
    metas = [a for t, a in page.elements if t == "meta" and a.get("name") == "viewport"]
    assert metas and "width=device-width" in metas[0]["content"]
    tables = sum(t == "table" for t, _ in page.elements)
    scrolled = sum(t == "div" and a.get("class") == "scroll" for t, a in page.elements)
    assert tables == scrolled  # every table sits in a frame that scrolls sideways instead of widening the page


def test_the_committed_full_audit_renders_every_verdict_and_criterion() -> None:
    state: dict[str, Any] = json.loads(Path("docs/audit-full-results.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # its figures are not committed: each is noted as missing
        html = render(state, Path("docs"))
    page = _parse(html)
    marks = [r for r in page.rows if len(r) == 5 and r[-1] in ("✓", "✗")]
    # the report lists an experiment's tests and gates, then its identities apart (issue 25 §6)
    expected = [
        c
        for e in state["experiments"].values()
        for c in sorted(e["criteria"], key=lambda c: c.get("role", "test") == "identity")
    ]
    assert len(marks) == len(expected) and [m[-1] == "✓" for m in marks] == [c["passed"] for c in expected]
    sections = [a for t, a in page.elements if t == "section"]
    assert [(a["data-experiment"], a["data-verdict"]) for a in sections] == [
        (e["name"], e["verdict"]) for e in state["experiments"].values()
    ]
    labels = [r[0] for r in page.rows if len(r) == 3 and r[0] != "metric"]
    assert len(labels) == sum(len(e["metrics"]) for e in state["experiments"].values())
    assert not [x for x in labels if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", x)]


def test_an_undecided_verdict_names_its_failed_gate_and_identities_are_not_counted(tmp_path: Path) -> None:
    """UNDECIDED shows as its own badge with the gate that failed; identities are listed apart, outside the count."""
    res = json.loads((run_folder(tmp_path) / "results.json").read_text())
    res["experiments"]["open_set"]["verdict"] = "UNDECIDED"
    res["experiments"]["open_set"]["criteria"] = [
        {**res["experiments"]["open_set"]["criteria"][1], "role": "test"},
        {
            "metric": "arm A tracks",
            "comparison": "<=",
            "threshold": 0.1,
            "measured": 0.3,
            "passed": False,
            "role": "gate",
        },
        {
            "metric": "Σ r = 1",
            "comparison": "<=",
            "threshold": 1e-12,
            "measured": 1e-17,
            "passed": True,
            "role": "identity",
        },
    ]
    page = _parse(render(res, tmp_path / "run"))
    text = "".join(page.text)
    toc = [r for r in page.rows if len(r) == 10 and r[0] == "2"]
    assert [(r[2], r[5]) for r in toc] == [("UNDECIDED", "1 / 2")]  # the identity is not a check
    assert tuple(toc[0][6:9]) == ("1", "1", "1")  # but it is counted as an identity
    assert "Undecided: the gate “arm A tracks” did not hold" in text
    assert ["gate arm A tracks", "0.3", "≤", "0.1", "✗"] in page.rows
    assert ["Σ r = 1", "1e-17", "≤", "1e-12", "✓"] in page.rows
    assert 'class="badge undecided"' in render(res, tmp_path / "run")


def test_an_incomplete_run_says_so_and_names_what_is_missing(tmp_path: Path) -> None:
    res = json.loads((run_folder(tmp_path) / "results.json").read_text())
    res["registry"] = ["theorem1", "gd_vs_em_step", "open_set", "two_timescale"]
    text = " ".join("".join(_parse(render(res, tmp_path / "run")).text).split())
    assert "Incomplete run: 2 of 4 experiments. Not in this run: gd_vs_em_step, two_timescale" in text
    res["registry"] = ["theorem1", "open_set"]
    assert "Incomplete run" not in "".join(_parse(render(res, tmp_path / "run")).text)


def test_a_refuted_verdict_that_passed_every_check_explains_why(tmp_path: Path) -> None:
    res = json.loads((run_folder(tmp_path) / "results.json").read_text())
    note = "Every check passed and the verdict is REFUTED"
    assert note not in render(res, tmp_path / "run")  # open_set failed one of its checks
    for c in res["experiments"]["open_set"]["criteria"]:
        c["passed"] = True
    assert note in render(res, tmp_path / "run")


def test_a_seed_table_row_reads_in_one_cell() -> None:
    stable = {"verdicts": dict.fromkeys("01234", "PARTIAL"), "stability": "stable"}
    flips = {"verdicts": {"0": "PARTIAL", "1": "PARTIAL", "2": "PARTIAL", "3": "SUPPORTED", "4": "PARTIAL"},
             "stability": "flips"}  # fmt: skip
    assert seed_cell(stable) == "stable: PARTIAL ×5"
    assert seed_cell(flips) == "flips: PARTIAL ×4, SUPPORTED (seed 3)"
