"""The report of a run folder: it embeds only PNG files inside the folder, and never writes through a symlink."""

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from implicit_em.report import write_report

_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16  # PNG's signature; enough for the check, not a viewable image


def _run_folder(tmp_path: Path, figures: list[str]) -> Path:
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    record = {"name": "exp", "title": "An experiment", "verdict": "SUPPORTED", "summary": "s", "figures": figures}
    (run / "results.json").write_text(json.dumps({"size": "quick", "seed": 0, "experiments": {"exp": record}}))
    return run


def _embedded(html: str) -> int:
    return html.count("data:image/png;base64,")


def test_a_png_inside_the_run_folder_is_embedded(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, ["figures/a.png", "figures/link.png"])
    (run / "figures" / "a.png").write_bytes(_PNG)
    (run / "figures" / "link.png").symlink_to(run / "figures" / "a.png")  # a symlink that stays inside
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        html = write_report(run).read_text()
    assert _embedded(html) == 2 and "not embedded" not in html


def _outside_png(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.png"
    secret.write_bytes(_PNG + b"SECRET")
    return secret


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("/etc/passwd", "not a .png file"),
        ("../secret.png", "outside the run folder"),
        ("figures/../../secret.png", "outside the run folder"),
        ("ABSOLUTE", "outside the run folder"),
        ("figures/out.png", "outside the run folder"),  # a symlink out of the folder
        ("figures/fake.png", "not a PNG file"),  # text named .png
        ("figures/none.png", "missing"),
        ("figures", "not a .png file"),
    ],
)
def test_a_figure_that_is_not_a_png_inside_the_folder_is_skipped_with_a_note(
    tmp_path: Path, entry: str, why: str
) -> None:
    secret = _outside_png(tmp_path)
    entry = str(secret) if entry == "ABSOLUTE" else entry
    run = _run_folder(tmp_path, [entry])
    (run / "figures" / "out.png").symlink_to(secret)
    (run / "figures" / "fake.png").write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.warns(UserWarning, match=f"figure .* of exp not embedded: {why}"):
        html = write_report(run).read_text()
    assert _embedded(html) == 0
    assert f"figure not embedded ({why}" in html
    assert "root:x:0" not in html and "SECRET" not in html


def test_report_html_that_is_a_symlink_is_replaced_not_written_through(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, [])
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (run / "report.html").symlink_to(precious)
    write_report(run)
    assert precious.read_text() == "keep me"
    assert not (run / "report.html").is_symlink()


def test_texts_of_a_record_are_escaped(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, [])
    state: dict[str, Any] = json.loads((run / "results.json").read_text())
    state["experiments"]["exp"]["summary"] = "<script>alert(1)</script>"
    state["experiments"]["exp"]["name"] = "x' onmouseover='alert(1)"
    (run / "results.json").write_text(json.dumps(state))
    html = write_report(run).read_text()
    assert "<script>alert" not in html and "' onmouseover='" not in html


@pytest.mark.skipif(os.geteuid() == 0, reason="root may read any file")
def test_an_unreadable_results_json_is_one_line(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, [])
    (run / "results.json").chmod(0)
    with pytest.raises(ValueError, match=r"results\.json: cannot be read"):
        write_report(run)


@pytest.mark.parametrize("cut", ['{"experiments": {"a": {"b": 1}', '{"experiments": {"a": [1, 2]\n', '{"a": "xy'])
def test_a_file_cut_anywhere_reads_as_truncated(tmp_path: Path, cut: str) -> None:
    """Also when the cut falls just after a "}" or "]" (the check used to look only at the last character, so a
    results.json halved at such a point read as a plain syntax error, depending on where its middle fell)."""
    from implicit_em.report._results import ResultsError, read_results

    (tmp_path / "results.json").write_text(cut)
    with pytest.raises(ResultsError, match=r"not valid JSON \(truncated\?\)"):
        read_results(tmp_path / "results.json")
    (tmp_path / "results.json").write_text('{"a": 1,, "b": 2}')  # a syntax error mid-file is not called truncated
    with pytest.raises(ResultsError, match=r"not valid JSON: Expecting property name"):
        read_results(tmp_path / "results.json")
