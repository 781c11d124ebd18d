"""The report in a real browser: headless Chromium loads it without console errors, shows every experiment's verdict
and every criterion, and does not widen a 390-px phone screen; a screenshot is saved.

Driven by Playwright for Python with the system's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``; Playwright's
own browser download is never used): its ``console`` and ``pageerror`` events report console errors and uncaught
exceptions as they happen, which Chromium's ``--enable-logging=stderr`` output only does in a format that changes
between versions. Skips, saying why, when Playwright or Chromium is missing (``.ci/run`` installs Chromium).
On the old report both fail (no ``section[data-experiment]``, no criteria table class; a quick run's old report was
865 px wide on a 390-px screen).
"""

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from _report_cases import results, run_folder
from implicit_em.report import write_report

_CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(_CHROMIUM is None, reason="no Chromium on PATH (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser() -> Any:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=_CHROMIUM, args=_FLAGS)
        yield b
        b.close()


def _open(browser: Any, url: str, width: int) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_load_state("load")
    return page, errors


def test_the_report_loads_cleanly_with_every_verdict_and_criterion(browser: Any, tmp_path: Path) -> None:
    report = write_report(run_folder(tmp_path, ["implicit-em", "audit", "--quick"]))
    page, errors = _open(browser, report.as_uri(), 1280)
    assert errors == []
    for e in results()["experiments"].values():
        section = page.locator(f"section[data-experiment='{e['name']}']")
        assert section.locator("h2 .badge").inner_text() == e["verdict"]
        rows = section.locator("table.criteria tbody tr")
        assert rows.count() == len(e["criteria"])
        for i, c in enumerate(e["criteria"]):
            cells = rows.nth(i).locator("td").all_inner_texts()
            assert cells[0] == c["metric"] and cells[-1] == ("✓" if c["passed"] else "✗")
    toc = page.locator("nav table.toc tbody tr")
    assert toc.count() == 2 and toc.nth(1).locator(".badge").inner_text() == "REFUTED"
    img = page.locator("figure img")
    assert img.evaluate("i => i.complete && i.naturalWidth") == 1600
    assert img.evaluate("i => i.getBoundingClientRect().width") == 1600  # natural size, inside a scrolling frame
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 0


def test_the_report_fits_a_phone_screen(browser: Any, tmp_path: Path) -> None:
    report = write_report(run_folder(tmp_path))
    page, errors = _open(browser, report.as_uri(), 390)
    assert errors == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # wide tables and figures scroll in place
    page.screenshot(path=str(tmp_path / "report-390.png"), full_page=False)


def test_the_contents_table_shows_the_full_size_records_and_links_each_claims_page(
    browser: Any, tmp_path: Path
) -> None:
    """The summary table: each claim's quick verdict beside its committed full-size record (verdict, ``*`` where the
    code differs, commit); in a checkout, the claim's heading links its page, and the link opens a file."""
    from implicit_em.report._committed import committed_full_records, full_size_cell

    full = committed_full_records()
    if full is None:
        pytest.skip("this installation has no docs/audit-full-results.json")
    checkout = tmp_path / "checkout"
    (checkout / "docs" / "claims").mkdir(parents=True)
    (checkout / "docs" / "claims" / "theorem1.md").write_text("# Theorem 1\n")
    (checkout / "runs").mkdir()
    report = write_report(run_folder(checkout / "runs"))
    page, errors = _open(browser, report.as_uri(), 1280)
    assert errors == []
    headers = page.locator("nav table.toc thead th").all_inner_texts()
    assert any("full size" in h for h in headers)
    first = page.locator("nav table.toc tbody tr").nth(0)
    theorem = results()["experiments"]["theorem1"]
    assert first.locator("td.full-size").inner_text() == full_size_cell(theorem, full["experiments"]["theorem1"])
    link = page.locator("section[data-experiment='theorem1'] a.claim-page")
    assert link.count() == 1
    target = (report.parent / link.get_attribute("href")).resolve()
    assert target == (checkout / "docs" / "claims" / "theorem1.md").resolve() and target.is_file()
    assert page.locator("section[data-experiment='open_set'] a.claim-page").count() == 0  # no page: its path only
