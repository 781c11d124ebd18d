"""Argument types shared by the ``implicit-em`` subcommands: a bad value is argparse's one-line error, status 2."""

import argparse

__all__ = ["jobs", "positive_int", "seed"]


def positive_int(text: str) -> int:
    """An integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def seed(text: str) -> int:
    """A seed numpy, torch and scikit-learn all accept: an integer in [0, 2**32 - 1]."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**32 - 1], got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**32 - 1], got {value}")
    return value


def jobs(text: str) -> int | None:
    """A number of worker processes: a positive integer, or ``auto`` (None: one per CPU this process may use)."""
    if text == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'auto', got {text!r}") from None
