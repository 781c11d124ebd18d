"""implicit-em: gradient descent as implicit EM in distance-based models."""

from implicit_em import probes

__all__ = ["probes"]
__version__ = "0.1.0"
