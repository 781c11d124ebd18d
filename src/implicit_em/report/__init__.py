"""HTML report of a claims-audit run folder, and the reader of its ``results.json``."""

from implicit_em.report._html import render, write_report
from implicit_em.report._results import ResultsError, read_results

__all__ = ["ResultsError", "read_results", "render", "write_report"]
