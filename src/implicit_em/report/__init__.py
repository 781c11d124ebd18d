"""HTML report of a claims-audit run folder."""

from implicit_em.report._html import render, write_report

__all__ = ["render", "write_report"]
