"""Figures of the audit: matplotlib on the non-interactive Agg backend. The runner's :class:`~.core.Context` saves
them (``ctx.save_figure``); a claim only draws."""

from types import ModuleType

__all__ = ["pyplot"]


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (the audit only saves figures)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
