"""Probes: read responsibilities and attention quantities out of gradients."""

from implicit_em.probes.attention import attention

__all__ = ["attention"]
