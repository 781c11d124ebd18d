"""Render ``results.json`` of an audit run as one self-contained ``report.html`` (figures embedded as base64).

The page is the Jinja2 template ``templates/report.html.j2`` (autoescape on: every text from ``results.json`` is
escaped unless it went through :func:`~implicit_em.report._math.tex_to_html`, which escapes first); this module
only turns a results dict into the template's context: human labels and units for metrics
(:mod:`~implicit_em.report._labels`), each criterion as "measured ≤ threshold ✓", the header (commit, command,
versions, date) and the figures.

A run folder may come from elsewhere, so the report trusts nothing in it: ``results.json`` is read and checked by
:func:`~implicit_em.report.read_results` (a corrupt file is a one-line :class:`~implicit_em.report.ResultsError`),
and a figure is embedded only if it is a PNG file (by its suffix and PNG's signature bytes) inside the run folder
once symlinks and ``..`` are resolved. Any other entry of ``figures`` (``/etc/passwd``, ``../x.png``, a symlink out
of the folder, a text file named ``.png``) is skipped with a visible note in the report and a :class:`UserWarning`.
``report.html`` is written atomically and replaces, never follows, a symlink there.

Figures keep their natural pixel size (one image pixel per CSS pixel, so matplotlib's 10 pt text at 100-110 dpi
stays about 14-15 px high) in a frame that scrolls sideways when the figure is wider than the page, and each links
to its PNG in the run folder for the full-size view.
"""

import base64
import os
import re
import shlex
import struct
import warnings
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from implicit_em._runio import write_text_atomic
from implicit_em.report._committed import committed_full_records, committed_seed_rows, full_size_cell, seed_cell
from implicit_em.report._labels import criterion_label, figure_caption, metric_label
from implicit_em.report._math import tex_to_html
from implicit_em.report._results import VERDICTS, check_results, read_results
from implicit_em.report._sizes import cannot_decide

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_VERSIONS = ("torch", "numpy", "scikit-learn", "transformers", "python")
_SYMBOL = {"<=": "≤", ">=": "≥", "<": "<", ">": ">", "==": "="}


def _fmt(value: Any) -> str:
    """A value as a reader sees it: floats to 4 significant digits, booleans as yes/no, short lists shown."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "none"
    if isinstance(value, list):
        shown = ", ".join(_fmt(v) for v in value[:12])
        return f"[{shown}{', …' if len(value) > 12 else ''}]"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    return str(value)


def _anchor(name: str) -> str:
    """An HTML id for experiment ``name``: letters, digits, ``-`` and ``_`` only."""
    return "exp-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def _commit(commit: Any, dirty: Any) -> str:
    if not commit:
        return "not a git checkout"
    return f"{str(commit)[:12]}{' (dirty: uncommitted changes)' if dirty else ' (clean)'}"


def _command(results: dict[str, Any]) -> tuple[str, str]:
    """The command line that produced the run, and a note when it is reconstructed rather than recorded."""
    argv = results.get("provenance", {}).get("command")
    if isinstance(argv, list) and argv:
        return shlex.join(str(a) for a in argv), ""
    size, seed = results.get("size", "quick"), results.get("seed", 0)
    return f"implicit-em audit --{size} --seed {seed}", "reconstructed from size and seed: the run did not record it"


def _header(results: dict[str, Any]) -> dict[str, Any]:
    """What the page's header shows: run settings, command, commit, versions, platform and date."""
    prov, env = results.get("provenance", {}), results.get("environment", {})
    command, note = _command(results)
    return {
        "size": results.get("size", "?"),
        "seed": results.get("seed", "?"),
        "threads": env.get("torch_threads", "?"),
        "command": command,
        "command_note": note,
        "commit": _commit(prov.get("commit"), prov.get("dirty")),
        "package": prov.get("implicit_em", env.get("implicit_em", "?")),
        "versions": ", ".join(f"{k} {env[k]}" for k in _VERSIONS if k in env),
        "platform": env.get("platform", ""),
        "date": env.get("date", ""),
    }


def _criteria(criteria: list[dict[str, Any]], declared: Any = None) -> list[dict[str, Any]]:
    """Each criterion as "measured ≤ threshold" with whether it held, its metric keys read as words, and its role
    (``test``, ``gate`` or ``identity``; records written before roles existed read as tests)."""
    return [
        {
            "metric": criterion_label(str(c.get("metric", "")), declared if isinstance(declared, dict) else None),
            "measured": _fmt(c.get("measured")),
            "comparison": _SYMBOL.get(str(c.get("comparison")), str(c.get("comparison"))),
            "threshold": _fmt(c.get("threshold")),
            "passed": bool(c.get("passed")),
            "role": str(c.get("role", "test")),
        }
        for c in criteria
    ]


def _metrics(metrics: dict[str, Any], declared: Any = None) -> list[dict[str, str]]:
    """Each metric with the label and unit its claim declared (``metric_info`` of the record); a key the record does
    not declare (a record written before metrics were declared) shows as words with the unit "—"."""
    declared = declared if isinstance(declared, dict) else None
    rows = []
    for key, value in metrics.items():
        label = metric_label(str(key), declared)
        rows.append({"label": label.text, "unit": label.unit, "note": label.note, "key": key, "value": _fmt(value)})
    return rows


def _run_line(e: dict[str, Any], results: dict[str, Any]) -> str:
    """Config and code hashes of one experiment, and its commit when it differs from the run's."""
    parts = []
    if e.get("config_hash"):
        parts.append(f"config {str(e['config_hash'])[:12]}")
    if e.get("code_hash"):
        parts.append(f"code {str(e['code_hash'])[:12]}")
    prov = results.get("provenance", {})
    if "commit" in e and (e.get("commit"), e.get("dirty")) != (prov.get("commit"), prov.get("dirty")):
        parts.append(f"ran at commit {_commit(e.get('commit'), e.get('dirty'))}, kept from an earlier invocation")
    return " · ".join(parts)


def _png_inside(run_dir: Path, rel: str) -> tuple[bytes | None, str]:
    """The bytes of figure ``rel`` if it is a PNG file inside ``run_dir`` (after resolving), else why not."""
    if Path(rel).suffix.lower() != ".png":
        return None, "not a .png file"
    root = run_dir.resolve()
    path = (run_dir / rel).resolve()
    if not path.is_relative_to(root):
        return None, "outside the run folder"
    if not path.is_file():
        return None, "missing"
    with path.open("rb") as f:  # read once: what is checked is what is embedded
        data = f.read()
    if not data.startswith(_PNG_SIGNATURE):
        return None, "not a PNG file (no PNG signature)"
    return data, ""


def _png_size(data: bytes) -> tuple[int, int] | None:
    """Width and height in pixels from the PNG's IHDR chunk (None if it is too short to hold one)."""
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _figure(run_dir: Path, rel: str, experiment: str) -> dict[str, Any]:
    caption = figure_caption(experiment, rel)
    data, why = _png_inside(run_dir, rel)
    if data is None:
        warnings.warn(f"report: figure {rel!r} of {experiment} not embedded: {why}", UserWarning, stacklevel=4)
        return {"skipped": why, "path": rel, "caption": caption}
    size = _png_size(data)
    return {
        "src": "data:image/png;base64," + base64.b64encode(data).decode("ascii"),
        "href": quote(Path(rel).as_posix()),
        "width": size[0] if size else None,
        "height": size[1] if size else None,
        "caption": caption,
        "alt": f"Figure of {experiment}: {caption}",
        "path": rel,
        "skipped": "",
    }


def _claim_page(run_dir: Path, name: str) -> tuple[str, str]:
    """The claim's page in the repository (``docs/claims/<name>.md``: its setting, rule and history) and a link to
    it relative to the run folder when the folder lies in a checkout holding it (else no link, only the path)."""
    page = f"docs/claims/{name}.md"
    for root in run_dir.resolve().parents:
        if (root / page).is_file():
            return page, quote(os.path.relpath(root / page, run_dir.resolve()).replace(os.sep, "/"))
    return page, ""


def _full_size(e: dict[str, Any], results: dict[str, Any], full: dict[str, Any] | None) -> str:
    """The committed full-size record's verdict and commit for a run of another size (``*``: its code hash is not
    this run's), or a dash."""
    ref = (full or {}).get("experiments", {}).get(e.get("name"))
    if results.get("size") == "full" or ref is None:
        return "—"
    return full_size_cell(e, ref)


def _seeds(e: dict[str, Any], rows: dict[str, dict[str, Any]] | None) -> str:
    """The committed seed table's cell for the claim (its quick verdicts at seeds 0 to 4), or a dash."""
    row = (rows or {}).get(str(e.get("name")))
    return seed_cell(row) if row is not None else "—"


def _experiment(
    e: dict[str, Any],
    results: dict[str, Any],
    run_dir: Path,
    full: dict[str, Any] | None = None,
    seed_rows: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    every = _criteria(e.get("criteria", []), e.get("metric_info"))
    criteria = [c for c in every if c["role"] != "identity"]  # what the verdict reads: tests and gates
    return {
        "name": e["name"],
        "anchor": _anchor(e["name"]),
        "title": e.get("title", e["name"]),
        "verdict": e.get("verdict", "ERROR"),
        "source": e.get("source", ""),
        "claim": e.get("claim", ""),
        "summary": e.get("summary", ""),
        "seconds": float(e.get("seconds", 0.0)),
        "full_size": _full_size(e, results, full),
        "seeds": _seeds(e, seed_rows),
        "cannot_decide": cannot_decide(str(e["name"]), str(results.get("size"))),
        "criteria": criteria,
        "identities": [c for c in every if c["role"] == "identity"],
        "passed": sum(c["passed"] for c in criteria),
        "tests": sum(c["role"] == "test" for c in criteria),
        "gates": sum(c["role"] == "gate" for c in criteria),
        "gates_failed": [c["metric"] for c in criteria if c["role"] == "gate" and not c["passed"]],
        "metrics": _metrics(e.get("metrics", {}), e.get("metric_info")),
        "thresholds": [(k, _fmt(v)) for k, v in e.get("thresholds", {}).items()],  # before criteria existed
        "config": [(k, _fmt(v)) for k, v in e.get("config", {}).items()],
        "run_line": _run_line(e, results),
        "figures": [_figure(run_dir, f, e["name"]) for f in e.get("figures", [])],
        "details": e.get("details", ""),
        **dict(zip(("page", "page_href"), _claim_page(run_dir, str(e["name"])), strict=True)),
    }


@cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("implicit_em.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tex"] = tex_to_html
    return env


def render(results: dict[str, Any], run_dir: Path) -> str:
    """The report's HTML for a results dict (as in ``results.json``) whose figures live under ``run_dir``.

    Raises:
        ResultsError: ``results`` does not have the shape of a ``results.json`` (see :mod:`._results`).
    """
    results = check_results(results, "results")
    run_dir = Path(run_dir)
    full = committed_full_records() if results.get("size") != "full" else None
    seed_rows = committed_seed_rows()
    exps = [_experiment(e, results, run_dir, full, seed_rows) for e in results.get("experiments", {}).values()]
    counts = [(v, sum(e["verdict"] == v for e in exps)) for v in VERDICTS]
    registry = results.get("registry")
    missing = [n for n in registry if n not in results.get("experiments", {})] if isinstance(registry, list) else []
    return (
        _templates()
        .get_template("report.html.j2")
        .render(
            header=_header(results),
            experiments=exps,
            missing=missing,
            n_registry=len(registry) if isinstance(registry, list) else len(exps),
            counts=[(v, n) for v, n in counts if n],
            full_commit=str((full or {}).get("provenance", {}).get("commit") or "")[:7],
            seed_table=seed_rows is not None,
            environment=[(k, _fmt(v)) for k, v in results.get("environment", {}).items()],
        )
    )


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` from ``results.json`` in ``run_dir``; returns its path.

    Raises:
        ResultsError: ``results.json`` is missing, not JSON, or not of the runner's shape (one line naming it).
    """
    run = Path(run_dir)
    results = read_results(run / "results.json")
    out = run / "report.html"
    write_text_atomic(out, render(results, run))
    return out
