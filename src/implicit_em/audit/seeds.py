"""One derivation for every random stream of the audit: the run's seed and a path of names.

    seeds.derive(seed, "replicate", 3)        # an int for torch.manual_seed, numpy or scikit-learn
    seeds.generator(seed, "data")             # a numpy Generator
    seeds.torch_generator(seed, "init", 0)    # a torch Generator

The path is hashed into :class:`numpy.random.SeedSequence`'s entropy together with ``seed``, so two different
paths, or the same path under two seeds, give independent streams: ``--seed 0`` and ``--seed 1`` never share one
(as ``seed + i`` did, where seed 0's second replicate was seed 1's first).
"""

import hashlib

import numpy as np
import torch

__all__ = ["derive", "generator", "sequence", "torch_generator"]


def _word(part: str | int) -> int:
    """A path part as a 32-bit word: an int as itself (checked), a name through sha256 (stable across runs)."""
    if isinstance(part, bool) or not isinstance(part, int | str):
        raise TypeError(f"a seed path holds names and non-negative ints, got {type(part).__name__} {part!r}")
    if isinstance(part, int):
        if not 0 <= part < 2**32:
            raise ValueError(f"a seed path's int must lie in [0, 2**32), got {part}")
        return part
    return int.from_bytes(hashlib.sha256(part.encode()).digest()[:4], "little")


def sequence(seed: int, *path: str | int) -> np.random.SeedSequence:
    """The :class:`~numpy.random.SeedSequence` of ``path`` under ``seed``. Names and ints alternate freely; a name
    and an int never collide because every name is tagged (``[seed, 1, name, 0, int, ...]``)."""
    entropy = [_word(seed)]
    for part in path:
        entropy += [1 if isinstance(part, str) else 0, _word(part)]
    return np.random.SeedSequence(entropy)


def derive(seed: int, *path: str | int) -> int:
    """A seed in [0, 2**31) for the stream ``path`` under ``seed`` (for ``torch.manual_seed``, numpy, sklearn)."""
    return int(sequence(seed, *path).generate_state(1, dtype=np.uint32)[0] >> 1)


def generator(seed: int, *path: str | int) -> np.random.Generator:
    """A numpy :class:`~numpy.random.Generator` on the stream ``path`` under ``seed``."""
    return np.random.default_rng(sequence(seed, *path))


def torch_generator(seed: int, *path: str | int) -> torch.Generator:
    """A CPU :class:`torch.Generator` seeded with :func:`derive`."""
    return torch.Generator().manual_seed(derive(seed, *path))
