"""Ctrl-C during ``GaussianMixture.fit`` / ``partial_fit`` (issue 11 §1): the interrupt reaches the caller, the
fit stops at a safe point, and the fitted state is the last complete one, equal to a fit that was asked to stop
there (``max_iter=k``), so ``warm_start=True`` continues to the uninterrupted result.

A SIGINT is sent with ``os.kill(os.getpid(), SIGINT)`` from a patched hook of the fit (the iteration's history
record, a chunk of the E-step, a mini-batch step), and once from outside, to a child process.
"""

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import implicit_em
from implicit_em.mixture import GaussianMixture, _estep, _fitting, _gd, _online_em
from implicit_em.mixture._fitting import History

PARAMS = ("weights_", "means_", "covariances_", "precisions_cholesky_")
SRC = str(Path(implicit_em.__file__).resolve().parents[1])  # the children import the package this test imports


@pytest.fixture(autouse=True)
def _python_default_sigint() -> Iterator[None]:
    """These tests deliver real SIGINTs: they mean something only over Python's default handler, so each runs
    over it and the handler found before is put back after (an earlier test in the same session may have left
    another one installed)."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _blobs(seed: int = 0, n: int = 80) -> np.ndarray:
    rng = np.random.RandomState(seed)
    centres = np.array([[0.0, 0.0], [5.0, 1.0], [1.0, 5.0]])
    return np.vstack([c + rng.randn(n, 2) @ rng.randn(2, 2) * 0.8 for c in centres])[rng.permutation(3 * n)]


def _kw(fitter: str, **extra: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"n_components": 3, "fitter": fitter, "random_state": 0, "tol": 0.0, "max_iter": 8}
    kw["split_merge"] = 0
    if fitter != "em":
        kw["batch_size"] = 64
    return {**kw, **extra}


def _quiet_fit(**kw: Any) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: these fits stop early on purpose
        return GaussianMixture(**kw).fit(_blobs())


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _sigint_at_record(monkeypatch: pytest.MonkeyPatch, k: int, method: str = "epoch") -> None:
    """SIGINT right after the k-th history record (``History.epoch``, or ``History.split_merge``) of the run."""
    original = getattr(History, method)
    calls = [0]

    def record(self: History, *args: Any) -> None:
        original(self, *args)
        calls[0] += 1
        if calls[0] == k:
            _sigint()

    monkeypatch.setattr(History, method, record)


def _sigint_on_call(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, k: int, after: bool = True) -> None:
    """SIGINT on the k-th call of ``module.name`` (after it has done its work, or before)."""
    original = getattr(module, name)
    calls = [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == k and not after:
            _sigint()
        out = original(*args, **kwargs)
        if calls[0] == k and after:
            _sigint()
        return out

    monkeypatch.setattr(module, name, wrapped)


def _assert_same_params(a: GaussianMixture, b: GaussianMixture) -> None:
    for name in PARAMS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name, strict=True)


def _record_step_params(monkeypatch: pytest.MonkeyPatch, fitter: str) -> list[list[np.ndarray]]:
    """The parameters after every mini-batch step of a stochastic fit (online EM's, or gradient descent's)."""
    steps: list[list[np.ndarray]] = []
    if fitter == "online_em":
        original = _online_em.online_step

        def online(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            steps.append([t.double().numpy().copy() for t in out[1]])
            return out

        monkeypatch.setattr(_online_em, "online_step", online)
    else:
        original_gd = _gd.gd_step

        def gd(state: Any, x: Any, shift: Any, scale: float, *rest: Any, **kw: Any) -> float:
            out = original_gd(state, x, shift, scale, *rest, **kw)
            steps.append([t.double().numpy().copy() for t in _gd.state_params(state, "full", shift, scale)])
            return out

        monkeypatch.setattr(_gd, "gd_step", gd)
    return steps


def _assert_params_equal_step(gm: GaussianMixture, params: list[np.ndarray]) -> None:
    for name, value in zip(PARAMS, params, strict=True):
        np.testing.assert_array_equal(getattr(gm, name), value, err_msg=name)


# -- a SIGINT after iteration k: raised, and the fit of max_iter=k is kept ------------------------------------


@pytest.mark.parametrize("fitter", ["em", "gd"])
def test_sigint_after_iteration_k_raises_and_keeps_the_max_iter_k_fit(
    fitter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _quiet_fit(**_kw(fitter, max_iter=4))
    _sigint_at_record(monkeypatch, 4)
    gm = GaussianMixture(**_kw(fitter))
    with pytest.raises(KeyboardInterrupt):
        gm.fit(_blobs())
    _assert_same_params(gm, reference)
    assert gm.n_iter_ == 4 and len(gm.history_) == 4 and gm.converged_ is False
    assert [h["loglik"] for h in gm.history_] == [h["loglik"] for h in reference.history_]
    if fitter == "em":
        assert gm.lower_bound_ == reference.lower_bound_


def test_sigint_after_epoch_k_of_online_em_keeps_the_parameters_of_epoch_k(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = _record_step_params(monkeypatch, "online_em")
    _quiet_fit(**_kw("online_em"))  # uninterrupted: 8 epochs of 4 steps (240 rows, batches of 64)
    assert len(steps) == 8 * 4
    kept = steps[4 * 4 - 1]  # after the last step of epoch 4 (max_iter=4 would add an exact EM iteration)
    _sigint_at_record(monkeypatch, 4)
    gm = GaussianMixture(**_kw("online_em"))
    with pytest.raises(KeyboardInterrupt):
        gm.fit(_blobs())
    _assert_params_equal_step(gm, kept)
    assert gm.n_iter_ == 4 and len(gm.history_) == 4 and gm.converged_ is False


def test_sigint_during_a_pass_keeps_the_last_complete_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _quiet_fit(**_kw("em", max_iter=3, batch_size=50))
    _sigint_on_call(monkeypatch, _estep, "summarize", 3 * 5 + 2)  # 5 chunks of 50 rows a pass: pass 4, chunk 2
    gm = GaussianMixture(**_kw("em", batch_size=50))
    with pytest.raises(KeyboardInterrupt):
        gm.fit(_blobs())
    _assert_same_params(gm, reference)
    assert gm.n_iter_ == 3 and gm.lower_bound_ == reference.lower_bound_


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_sigint_during_an_epoch_keeps_the_last_complete_step(fitter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = _record_step_params(monkeypatch, fitter)
    _quiet_fit(**_kw(fitter))
    per_epoch = 4 if fitter == "online_em" else 4 * math.ceil(_gd.MIN_STEPS / 4)  # gd: passes of 4 steps (issue 14)
    kept = steps[2 * per_epoch + 2 - 1]  # the second step of epoch 3
    steps.clear()
    module, name = (_online_em, "online_step") if fitter == "online_em" else (_gd, "gd_step")
    _sigint_on_call(monkeypatch, module, name, 2 * per_epoch + 2)
    gm = GaussianMixture(**_kw(fitter))
    with pytest.raises(KeyboardInterrupt):
        gm.fit(_blobs())
    _assert_params_equal_step(gm, kept)
    assert len(steps) == 2 * per_epoch + 2  # no step after the interrupted one
    assert gm.n_iter_ == 2 and len(gm.history_) == 2  # complete epochs


def test_warm_start_after_an_interrupt_reaches_the_uninterrupted_fit_bitwise(monkeypatch: pytest.MonkeyPatch) -> None:
    kw = _kw("em", tol=1e-9, max_iter=40)
    uninterrupted = _quiet_fit(**kw)
    assert uninterrupted.n_iter_ > 7
    with monkeypatch.context() as m:
        _sigint_at_record(m, 5)
        gm = GaussianMixture(**kw)
        with pytest.raises(KeyboardInterrupt):
            gm.fit(_blobs())
    gm.set_params(warm_start=True, max_iter=40 - 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm.fit(_blobs())
    _assert_same_params(gm, uninterrupted)
    assert gm.n_iter_ + 5 == uninterrupted.n_iter_ and gm.lower_bound_ == uninterrupted.lower_bound_
    assert gm.converged_ == uninterrupted.converged_


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_warm_start_after_an_interrupt_reaches_the_uninterrupted_optimum(
    fitter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stochastic fitters restart their step size (online EM's γ_t, Adam's moments) on a warm start, so the
    continuation is not the same path; it reaches the same optimum to the fitters' noise (measured: 4e-6 nats
    per sample for online EM, 0.004 for gd). Exact continuation is the checkpoint's job."""
    kw = _kw(fitter, tol=1e-5, max_iter=200)
    uninterrupted = _quiet_fit(**kw)
    with monkeypatch.context() as m:
        _sigint_at_record(m, 3)
        gm = GaussianMixture(**kw)
        with pytest.raises(KeyboardInterrupt):
            gm.fit(_blobs())
    gm.set_params(warm_start=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm.fit(_blobs())
    assert abs(gm.score(_blobs()) - uninterrupted.score(_blobs())) < 0.01


def test_sigint_in_a_later_start_stops_the_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    starts = [0]
    original = GaussianMixture._initial_params

    def counted(self: GaussianMixture, *args: Any) -> Any:
        starts[0] += 1
        return original(self, *args)

    monkeypatch.setattr(GaussianMixture, "_initial_params", counted)
    _sigint_at_record(monkeypatch, 5 + 2)  # the first start runs its 5 iterations; the second is stopped after 2
    gm = GaussianMixture(**_kw("em", n_init=3, max_iter=5, init_params="random"))
    with pytest.raises(KeyboardInterrupt):
        gm.fit(_blobs())
    assert starts[0] == 2 and gm.n_iter_ == 2 and len(gm.history_) == 2 and gm.converged_ is False


def _two_in_one() -> tuple[np.ndarray, dict[str, Any]]:
    rng = np.random.RandomState(0)
    centres = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0], [8.0, 8.0]])
    x = np.vstack([c + rng.randn(150, 2) for c in centres])
    start = {
        "means_init": np.array([[-0.5, 0.0], [0.5, 0.0], [8.0, 0.0], [4.0, 8.0]]),
        "weights_init": np.full(4, 0.25),
        "precisions_init": np.stack([np.eye(2)] * 4),
    }
    return x, start


def test_sigint_during_split_and_merge_keeps_the_best_result_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    x, start = _two_in_one()
    before_moves = GaussianMixture(4, split_merge=0, random_state=0, **start).fit(x)
    _sigint_at_record(monkeypatch, 1, method="split_merge")  # in the first trial's EM
    gm = GaussianMixture(4, split_merge=4, random_state=0, **start)
    with pytest.raises(KeyboardInterrupt):
        gm.fit(x)
    _assert_same_params(gm, before_moves)
    # n_iter_ is the kept run's (issue 13: trials are counted apart); the interrupted trial's one iteration is
    assert gm.converged_ is False and gm.n_iter_ == before_moves.n_iter_ and gm.n_split_merge_iter_ == 1


@pytest.mark.parametrize("fitter", ["online_em", "gd"])
def test_sigint_inside_a_partial_fit_step_completes_the_step(fitter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _blobs()
    kw = {"n_components": 3, "fitter": fitter, "random_state": 0}
    plain = GaussianMixture(**kw).partial_fit(x[:80]).partial_fit(x[80:160])
    plain.partial_fit(x[160:])
    gm = GaussianMixture(**kw).partial_fit(x[:80])
    name = "online_step" if fitter == "online_em" else "gd_step"  # the step, inside partial_fit's bookkeeping
    _sigint_on_call(monkeypatch, _fitting, name, 1)
    with pytest.raises(KeyboardInterrupt):
        gm.partial_fit(x[80:160])
    monkeypatch.undo()
    assert gm.n_iter_ == 2 and len(gm.history_) == 2  # the step is counted, its record kept
    gm.partial_fit(x[160:])  # continues from the model the interrupted step left, which the estimator shows
    _assert_same_params(gm, plain)


# -- a real Ctrl-C from outside --------------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import torch
    from implicit_em.mixture import GaussianMixture
    from implicit_em.mixture._fitting import History

    torch.set_num_threads(1)
    marker, out = sys.argv[1], sys.argv[2]
    rng = np.random.RandomState(0)
    x = np.vstack([c + rng.randn(200, 2) for c in ([0, 0], [5, 1], [1, 5])])
    record = History.epoch

    def slow_record(self, n, *args):
        record(self, n, *args)
        if n == 3:
            open(marker, "w").close()
        time.sleep(0.01)

    History.epoch = slow_record
    gm = GaussianMixture(3, random_state=0, tol=0.0, max_iter=100000, split_merge=0)
    try:
        gm.fit(x)
        print("RETURNED")
    except KeyboardInterrupt:
        History.epoch = record
        ref = GaussianMixture(3, random_state=0, tol=0.0, max_iter=gm.n_iter_, split_merge=0)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.fit(x)
        same = all(np.array_equal(getattr(gm, a), getattr(ref, a)) for a in ("weights_", "means_", "covariances_"))
        print("INTERRUPTED", gm.n_iter_, "SAME" if same else "DIFFERENT")
    """
)


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the child never reached iteration 3 (rc {proc.returncode}): {out} {err[-2000:]}")
        time.sleep(0.02)


def test_a_real_sigint_stops_fit_and_reaches_the_calling_program(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    marker = tmp_path / "at-iteration-3"
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marker), str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the child did not stop after SIGINT")
    assert proc.returncode == 0, err[-2000:]
    words = out.split()
    assert words[0] == "INTERRUPTED" and int(words[1]) >= 3 and words[2] == "SAME", out


# -- the audit: an interrupted experiment records no verdict ---------------------------------------------------


def test_ctrl_c_in_the_specialisation_experiment_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from implicit_em.audit.claims.specialisation import Config, run
    from implicit_em.audit.core import Context

    _sigint_at_record(monkeypatch, 3)  # in its first GaussianMixture fit
    cfg = Config(n=300, n_seeds=1, prototype_epochs=1, max_iter=20, degenerate_max_iter=5)
    with pytest.raises(KeyboardInterrupt):  # it used to finish, with other numbers, and return its verdict
        run(cfg, Context(tmp_path))
