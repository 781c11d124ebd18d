"""The claims audit: one module per claim, each exposing ``EXPERIMENT`` (an :class:`Experiment`) and ``ORDER``
(its place in the report). Modules are discovered, so adding a claim is adding a file.

    from implicit_em.experiments import EXPERIMENTS, run_audit
    run_audit("audit-run", quick=True)       # results.json, figures/, report.html
"""

import importlib
import pkgutil

from implicit_em.experiments._base import VERDICTS, Context, Experiment, Result, Verdict
from implicit_em.experiments.runner import run_audit, select


def _discover() -> list[Experiment]:
    found: list[tuple[int, str, Experiment]] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "runner":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        exp = getattr(module, "EXPERIMENT", None)
        if isinstance(exp, Experiment):
            found.append((int(getattr(module, "ORDER", 100)), info.name, exp))
    return [exp for _, _, exp in sorted(found, key=lambda t: (t[0], t[1]))]


EXPERIMENTS: list[Experiment] = _discover()

__all__ = ["EXPERIMENTS", "VERDICTS", "Context", "Experiment", "Result", "Verdict", "run_audit", "select"]
