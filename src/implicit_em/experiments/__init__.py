"""The former name of :mod:`implicit_em.audit`, kept for one release: it re-exports the audit's public API and
warns. Import :mod:`implicit_em.audit` instead."""

import warnings

from implicit_em.audit import *  # noqa: F403
from implicit_em.audit import __all__ as __all__

warnings.warn(
    "implicit_em.experiments is now implicit_em.audit (the claims are in implicit_em.audit.claims); "
    "the old name will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
