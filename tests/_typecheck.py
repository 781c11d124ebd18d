"""The test run's runtime type checker, named last in ``--jaxtyping-packages`` (pyproject.toml).

beartype with PEP 484's implicit numeric tower: an ``int`` passes where ``float`` is annotated (and a ``float`` or
``int`` where ``complex`` is), which is how mypy reads the same annotations. Plain ``beartype.beartype`` rejects
``attention(q, k, v, dropout_p=0)`` or ``GaussianMixture(tol=0)``, which the library accepts.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from beartype import BeartypeConf, beartype
from jaxtyping import config

typechecker = beartype(conf=BeartypeConf(is_pep484_tower=True))


@contextmanager
def unchecked() -> Iterator[None]:
    """The checker off inside the block, as in a user's program: for tests of the library's own ``ValueError`` on
    an argument its annotations exclude (a mode outside its ``Literal``, a tensor of the wrong rank)."""
    previous = config.jaxtyping_disable
    config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        config.update("jaxtyping_disable", previous)
