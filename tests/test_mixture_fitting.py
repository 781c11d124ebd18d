"""The fitter dispatch of ``GaussianMixture``: results pinned bitwise to the code before the refactor.

``tests/data/fitter_reference.npz`` was recorded by running this file as a script
(``python tests/test_mixture_fitting.py``) on commit b4f3b95, before the settings object, the fitter interface
and the history recorder existed (``_run_fitter``, ``_split_merge`` and ``partial_fit`` each dispatched on the
fitter name and built their own history records). It holds, per case, the fitted parameters, ``n_iter_``,
``converged_``, ``lower_bound_``, ``n_split_merge_accepted_`` and every ``history_`` record except its seconds
(the keys of each record in order, epoch, loglik, usage). These are golden numbers: a regression guard that
the move changed no behaviour, compared exactly (float64, not a tolerance).
"""

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from implicit_em.mixture import GaussianMixture

REFERENCE = Path(__file__).parent / "data" / "fitter_reference.npz"
TYPES = ("full", "tied", "diag", "spherical")


def _three_blobs(seed: int = 0, n: int = 80) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0], [5.0, 1.0], [1.0, 5.0]])
    return np.vstack([c + rng.randn(n, 2) @ rng.randn(2, 2) * 0.8 for c in centres])[rng.permutation(3 * n)]


def _four_blobs(seed: int = 0, n: int = 150) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0], [8.0, 8.0]])
    return np.vstack([c + rng.randn(n, 2) for c in centres])


def _two_in_one() -> dict[str, np.ndarray]:
    """A start EM keeps: two components in one blob, one between two blobs (split-and-merge moves it)."""
    return {
        "means_init": np.array([[-0.5, 0.0], [0.5, 0.0], [8.0, 0.0], [4.0, 8.0]]),
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(2)] * 4),
    }


class _InterruptAfter:
    """A re-iterable source whose pass after the first ``passes`` raises KeyboardInterrupt halfway."""

    def __init__(self, x: np.ndarray, passes: int) -> None:
        self.x, self.passes, self.count = x, passes, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.count += 1
        for i, start in enumerate(range(0, len(self.x), 60)):
            if self.count > self.passes and i == 1:
                raise KeyboardInterrupt
            yield self.x[start : start + 60]


def _fit(**kw: object) -> GaussianMixture:
    return GaussianMixture(**kw).fit(_three_blobs())  # type: ignore[arg-type]


def _partial(fit_first: bool, **kw: object) -> GaussianMixture:
    x = _three_blobs(seed=1)
    gm = GaussianMixture(**kw)  # type: ignore[arg-type]
    if fit_first:
        gm.fit(x)
    for start in range(0, len(x), 80):
        gm.partial_fit(x[start : start + 80])
    return gm


def _warm_start() -> GaussianMixture:
    gm = GaussianMixture(3, random_state=0, warm_start=True, split_merge=0, tol=1e-8, max_iter=3)
    return gm.fit(_three_blobs()).fit(_three_blobs())


def _cases() -> dict[str, Callable[[], GaussianMixture]]:
    cases: dict[str, Callable[[], GaussianMixture]] = {}
    for fitter in ("em", "online_em", "gd"):
        for cov in TYPES:
            batch = None if fitter == "em" else 64
            cases[f"fit-{fitter}-{cov}"] = lambda f=fitter, c=cov, b=batch: _fit(
                n_components=3, covariance_type=c, fitter=f, batch_size=b, random_state=0
            )
        cases[f"partial-{fitter}"] = lambda f=fitter: _partial(False, n_components=3, fitter=f, random_state=0)
        cases[f"fit-then-partial-{fitter}"] = lambda f=fitter: _partial(
            True, n_components=3, fitter=f, random_state=0, max_iter=5, batch_size=64
        )
    cases["fit-em-chunked"] = lambda: _fit(n_components=3, batch_size=50, random_state=0)
    cases["fit-em-float32"] = lambda: _fit(n_components=3, dtype="float32", random_state=0)
    cases["fit-em-max-iter-0"] = lambda: _fit(n_components=3, max_iter=0, random_state=0)
    cases["fit-em-n-init"] = lambda: _fit(n_components=3, n_init=3, init_params="random", random_state=2)
    cases["fit-online-em-n-init"] = lambda: _fit(
        n_components=3, fitter="online_em", n_init=3, init_params="random", random_state=2, batch_size=64
    )
    cases["fit-gd-n-init"] = lambda: _fit(
        n_components=3, fitter="gd", n_init=2, init_params="random", random_state=2, batch_size=64, max_iter=15
    )
    cases["fit-gd-sgd"] = lambda: _fit(
        n_components=3, fitter="gd", optimizer="sgd", learning_rate=0.005, random_state=0, max_iter=40
    )
    cases["fit-gd-no-volume"] = lambda: _fit(
        n_components=3, covariance_type="diag", fitter="gd", volume=False, random_state=0, max_iter=20
    )
    for fitter in ("em", "online_em"):
        cases[f"split-merge-{fitter}"] = lambda f=fitter: GaussianMixture(
            4, fitter=f, split_merge=4, batch_size=None if f == "em" else 100, random_state=0, **_two_in_one()
        ).fit(_four_blobs())
    cases["warm-start-em"] = _warm_start
    cases["interrupted-em"] = lambda: GaussianMixture(
        3,
        random_state=0,
        tol=0.0,
        max_iter=50,
        means_init=np.array([[0.5, 0.5], [4.0, 1.0], [1.0, 4.0]]),
        weights_init=np.full(3, 1 / 3),
        precisions_init=np.stack([np.eye(2)] * 3),
    ).fit(_InterruptAfter(_three_blobs(), passes=3))
    return cases


CASES = _cases()


def _record(gm: GaussianMixture) -> dict[str, np.ndarray]:
    out = {
        name: np.asarray(getattr(gm, name))
        for name in ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_")
    }
    out["n_iter_"] = np.asarray(gm.n_iter_)
    out["converged_"] = np.asarray(gm.converged_)
    out["lower_bound_"] = np.asarray(gm.lower_bound_)
    out["n_split_merge_accepted_"] = np.asarray(getattr(gm, "n_split_merge_accepted_", -1))
    out["history_keys"] = np.asarray([",".join(h) for h in gm.history_], dtype=str)
    out["history_epoch"] = np.asarray([h["epoch"] for h in gm.history_], dtype=np.int64)
    out["history_loglik"] = np.asarray([h["loglik"] for h in gm.history_], dtype=np.float64)
    out["history_usage"] = np.asarray([h["usage"] for h in gm.history_], dtype=np.float64)
    out["history_split_merge"] = np.asarray([h.get("split_merge", False) for h in gm.history_], dtype=bool)
    return out


def _run(name: str) -> dict[str, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: several cases stop early on purpose
        return _record(CASES[name]())


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_reproduces_the_code_before_the_refactor_bitwise(case: str) -> None:
    with np.load(REFERENCE) as ref:
        expected = {key.split("/", 1)[1]: ref[key] for key in ref.files if key.startswith(case + "/")}
    got = _run(case)
    assert sorted(got) == sorted(expected)
    for key, value in got.items():
        assert value.dtype == expected[key].dtype, key
        np.testing.assert_array_equal(value, expected[key], err_msg=f"{case}: {key}", strict=True)


if __name__ == "__main__":  # record the reference (only on the code the reference is meant to pin)
    arrays = {f"{name}/{key}": value for name in sorted(CASES) for key, value in _run(name).items()}
    REFERENCE.parent.mkdir(exist_ok=True)
    np.savez_compressed(REFERENCE, **arrays)
    print(f"wrote {len(arrays)} arrays for {len(CASES)} cases to {REFERENCE}", file=sys.stderr)
