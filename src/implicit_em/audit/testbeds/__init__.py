"""What several claims train or compute, written once: trainers, settings and read-outs shared by the claims.

A testbed imports :mod:`implicit_em.audit.core`, other testbeds and the library, never a claim.
"""

from implicit_em.audit.testbeds import (
    ablation,
    classifier,
    escape,
    manifold,
    one_head,
    sticky_fits,
    sticky_manifold,
    two_timescale,
    unnormalised,
    volume_arms,
)

__all__ = [
    "ablation",
    "classifier",
    "escape",
    "manifold",
    "one_head",
    "sticky_fits",
    "sticky_manifold",
    "two_timescale",
    "unnormalised",
    "volume_arms",
]
