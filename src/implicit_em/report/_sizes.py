"""The sizes of an experiment that cannot decide by construction, and why (what the report and the audit's closing
table say beside such a verdict).

A smoke size runs an experiment's code path, its controls and its gates, but trains too briefly for its deciding
arms to track, so its verdict is UNDECIDED whatever the claim. Declared here, with the presentation, not in the
claim's module: a claim's records hash its code, and how a size is described is not what it runs.
``tests/test_report_sizes.py`` checks each entry against the registry and the committed seed table (UNDECIDED at
every seed).
"""

__all__ = ["CANNOT_DECIDE", "cannot_decide"]

#: experiment name -> {size: why that size cannot decide}
CANNOT_DECIDE: dict[str, dict[str, str]] = {
    "two_timescale": {
        "quick": "a smoke size: the sticky testbed trains 40 of its 4,000 steps and the bijection 400 of 2,400, so "
        "neither deciding half can track the posterior; the full size decides"
    },
    "normalisation_necessity": {
        "quick": "a smoke size: 160 steps at V = 5, too few for the softmax arm to reach the tracking bar; the full "
        "size (V = 10, three seeds) decides"
    },
}


def cannot_decide(name: str, size: str) -> str:
    """Why ``size`` of experiment ``name`` cannot decide by construction, or "" where it can."""
    return CANNOT_DECIDE.get(name, {}).get(size, "")
