"""What a claim's ``measure`` returns when its figure draws more than its metrics: the metrics, and beside them the
arrays the figure draws (``drawn``), which the record does not keep."""

from typing import Any

from implicit_em.audit.metrics import Metrics

__all__ = ["Measured"]


class Measured(Metrics):
    """:class:`~implicit_em.audit.metrics.Metrics` (recorded, each key declared with ``put``) and ``drawn``: what
    the figure needs besides them (curves, scatter points), never written to ``results.json``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drawn: dict[str, Any] = {}
