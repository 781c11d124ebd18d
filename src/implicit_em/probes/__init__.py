"""Probes: read responsibilities and attention quantities out of gradients."""

from implicit_em.laws import routing_law, value_law
from implicit_em.probes._capture import AttentionProbe
from implicit_em.probes._head import HeadProbe
from implicit_em.probes._laws import hopfield_residual
from implicit_em.probes.attention import attention

__all__ = ["AttentionProbe", "HeadProbe", "attention", "hopfield_residual", "routing_law", "value_law"]
