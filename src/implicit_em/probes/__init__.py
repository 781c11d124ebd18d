"""Probes: read responsibilities and attention quantities out of gradients.

Public: the names below and :mod:`implicit_em.probes.attention` (the probe-able attention function and its
pieces). Internal: the probes' own modules (``_head``, ``_capture``, ``_laws``, ``_verdict``) and the framework adapters
(``_torch_mha``, ``_hf``).
"""

from implicit_em.laws import routing_law, value_law
from implicit_em.probes._capture import AttentionProbe
from implicit_em.probes._head import HeadProbe
from implicit_em.probes._laws import hopfield_residual
from implicit_em.probes._verdict import LawVerdict
from implicit_em.probes.attention import attention

__all__ = [
    "AttentionProbe",
    "HeadProbe",
    "LawVerdict",
    "attention",
    "hopfield_residual",
    "routing_law",
    "value_law",
]
