"""Render ``results.json`` of an audit run as one self-contained ``report.html`` (figures embedded as base64).

A run folder may come from elsewhere, so the report trusts nothing in it: ``results.json`` is read and checked by
:func:`~implicit_em.report.read_results` (a corrupt file is a one-line :class:`~implicit_em.report.ResultsError`),
every text is HTML-escaped, and a figure is embedded only if it is a PNG file (by its suffix and PNG's signature
bytes) inside the run folder once symlinks and ``..`` are resolved. Any other entry of ``figures`` (``/etc/passwd``,
``../x.png``, a symlink out of the folder, a text file named ``.png``) is skipped with a visible note in the report
and a :class:`UserWarning`. ``report.html`` is written atomically and replaces, never follows, a symlink there.
"""

import base64
import html
import warnings
from pathlib import Path
from typing import Any

from implicit_em._runio import write_text_atomic
from implicit_em.report._results import check_results, read_results

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

_COLOURS = {"SUPPORTED": "#1a7f37", "PARTIAL": "#9a6700", "REFUTED": "#cf222e", "ERROR": "#6e7781"}

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #1f2328;
       line-height: 1.45; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2.5rem; border-bottom: 1px solid #d0d7de; padding-bottom: 0.3rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.92rem; }
td, th { border: 1px solid #d0d7de; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
blockquote { margin: 0.6rem 0; padding: 0.3rem 0.9rem; border-left: 4px solid #d0d7de; color: #57606a; }
.badge { display: inline-block; color: white; border-radius: 0.8rem; padding: 0.05rem 0.6rem; font-weight: 600;
         font-size: 0.85rem; }
img { max-width: 100%; border: 1px solid #d0d7de; margin: 0.4rem 0; }
pre { background: #f6f8fa; padding: 0.6rem; overflow-x: auto; font-size: 0.85rem; white-space: pre-wrap; }
.muted { color: #57606a; font-size: 0.9rem; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
"""

_VERSIONS = ("torch", "numpy", "scikit-learn", "transformers", "python")


def _badge(verdict: str) -> str:
    colour = _COLOURS.get(verdict, "#6e7781")
    return f'<span class="badge" style="background:{colour}">{html.escape(verdict)}</span>'


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        shown = ", ".join(_fmt(v) for v in value[:12])
        return f"[{shown}{', …' if len(value) > 12 else ''}]"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    return str(value)


def _table(rows: dict[str, Any], header: tuple[str, str]) -> str:
    if not rows:
        return ""
    body = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows.items())
    return f"<table><tr><th>{header[0]}</th><th>{header[1]}</th></tr>{body}</table>"


def _criteria(criteria: list[dict[str, Any]]) -> str:
    """The comparisons the verdict was computed from: metric, comparison, threshold, measured, pass/fail."""
    if not criteria:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(str(c.get('metric')))}</td><td>{html.escape(str(c.get('comparison')))}</td>"
        f"<td>{html.escape(_fmt(c.get('threshold')))}</td><td>{html.escape(_fmt(c.get('measured')))}</td>"
        f"<td class='{'pass' if c.get('passed') else 'fail'}'>{'pass' if c.get('passed') else 'fail'}</td></tr>"
        for c in criteria
    )
    head = "<tr><th>criterion (metric)</th><th>comparison</th><th>threshold</th><th>measured</th><th></th></tr>"
    return f"<table>{head}{rows}</table>"


def _commit(commit: Any, dirty: Any) -> str:
    if not commit:
        return "not a git checkout"
    return f"{str(commit)[:12]}{' (dirty)' if dirty else ''}"


def _provenance(results: dict[str, Any]) -> str:
    """The header: package version and commit, the command line, library versions."""
    prov, env = results.get("provenance", {}), results.get("environment", {})
    if not prov and not env:
        return ""
    rows = {
        "implicit_em": prov.get("implicit_em", env.get("implicit_em")),
        "commit": _commit(prov.get("commit"), prov.get("dirty")),
        "command": " ".join(str(a) for a in prov.get("command", [])),
        "versions": ", ".join(f"{k} {env.get(k)}" for k in _VERSIONS if k in env),
        "platform": f"{env.get('platform')}, torch threads {env.get('torch_threads')}",
    }
    return _table(rows, ("provenance", ""))


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
    return f"<p class='muted'>{html.escape(' · '.join(parts))}</p>" if parts else ""


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


def _figure(run_dir: Path, rel: str, experiment: str) -> str:
    data, why = _png_inside(run_dir, rel)
    if data is None:
        warnings.warn(f"report: figure {rel!r} of {experiment} not embedded: {why}", UserWarning, stacklevel=3)
        return f'<p class="muted">figure not embedded ({html.escape(why)}): {html.escape(rel)}</p>'
    encoded = base64.b64encode(data).decode("ascii")
    return f'<img alt="{html.escape(rel)}" src="data:image/png;base64,{encoded}">'


def render(results: dict[str, Any], run_dir: Path) -> str:
    """The report's HTML for a results dict (as in ``results.json``) whose figures live under ``run_dir``.

    Raises:
        ResultsError: ``results`` does not have the shape of a ``results.json`` (see :mod:`._results`).
    """
    results = check_results(results, "results")
    run_dir = Path(run_dir)
    exps: list[dict[str, Any]] = list(results.get("experiments", {}).values())
    counts = {v: sum(e.get("verdict") == v for e in exps) for v in _COLOURS}
    env = results.get("environment", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>implicit-em claims audit</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Claims audit</h1>",
        "<p class='muted'>“Gradient Descent as Implicit EM in Distance-Based Neural Models” and its reviews, each "
        "claim tested by an experiment that ends in a verdict decided by the numbers shown. "
        f"Size: <b>{html.escape(str(results.get('size')))}</b>, seed {html.escape(str(results.get('seed')))}.</p>",
        _provenance(results),
        "<p>" + " ".join(f"{_badge(v)} {n}" for v, n in counts.items() if n) + "</p>",
        "<table><tr><th>experiment</th><th>source</th><th>verdict</th><th>summary</th></tr>",
    ]
    for e in exps:
        parts.append(
            f"<tr><td><a href='#{html.escape(e['name'])}'>{html.escape(e.get('title', e['name']))}</a></td>"
            f"<td>{html.escape(e.get('source', ''))}</td><td>{_badge(e.get('verdict', 'ERROR'))}</td>"
            f"<td>{html.escape(e.get('summary', ''))}</td></tr>"
        )
    parts.append("</table>")
    for e in exps:
        parts += [
            f"<h2 id='{html.escape(e['name'])}'>{html.escape(e.get('title', e['name']))} "
            f"{_badge(e.get('verdict', ''))}</h2>",
            f"<p class='muted'>{html.escape(e.get('source', ''))} · experiment <code>{html.escape(e['name'])}</code>"
            f" · {float(e.get('seconds', 0.0)):.1f} s</p>",
            f"<blockquote>{html.escape(e.get('claim', ''))}</blockquote>",
            f"<p><b>Verdict.</b> {html.escape(e.get('summary', ''))}</p>",
            _criteria(e.get("criteria", [])),
            _table(e.get("metrics", {}), ("measured", "value")),
            _table(e.get("thresholds", {}), ("threshold", "value")),  # results.json before criteria existed
            _table(e.get("config", {}), ("config", "value")),
            _run_line(e, results),
            *(_figure(run_dir, f, e["name"]) for f in e.get("figures", [])),
        ]
        if e.get("details"):
            parts.append(f"<pre>{html.escape(e['details'])}</pre>")
    parts.append("<h2>Environment</h2>" + _table(env, ("", "")))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


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
