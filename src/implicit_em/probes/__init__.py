"""Probes: read responsibilities and attention quantities out of gradients."""

from implicit_em.laws import routing_law, value_law
from implicit_em.probes.attention import attention
from implicit_em.probes.capture import AttentionProbe
from implicit_em.probes.head import HeadProbe
from implicit_em.probes.laws import hopfield_residual

__all__ = ["AttentionProbe", "HeadProbe", "attention", "hopfield_residual", "routing_law", "value_law"]
