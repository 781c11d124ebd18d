"""gd's certified stop: its plateau ends the fit only when one exact EM step from the end gains less than ``tol``.

The control: the same fit without the certificate (the plateau rule alone) stops short on a slow start, which the
certificate catches. The certificate itself (``_em.em_step_gain``) is checked against EM: zero at EM's fixed point,
and equal to what the estimator's own EM step gains from a point that is not one.
"""

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from implicit_em import GaussianMixture
from implicit_em.mixture._data import DataSource
from implicit_em.mixture._em import em_step_gain
from implicit_em.mixture._fitting import REGISTRY
from implicit_em.mixture._settings import FitSettings
from implicit_em.mixture._stats import MixtureParams


def _data() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate(
        [rng.normal(0, 1, (1500, 2)), rng.normal(5, 0.5, (1500, 2)), rng.normal([0, 6], 1, (1000, 2))]
    )


@pytest.fixture
def plateau_rule_only() -> Iterator[None]:
    """The estimator's gd schedule without the certificate: the plateau rule alone (the control)."""
    schedule: dict[str, Any] = REGISTRY["gd"].schedule  # type: ignore[attr-defined]
    schedule["certify"] = False
    try:
        yield
    finally:
        schedule["certify"] = True


def _gd(x: np.ndarray) -> GaussianMixture:
    """A slow gd (small learning rate, random start): its running objective flattens long before the optimum.

    Here the certified fit stops at epoch 94; ``max_iter`` leaves room so that a machine whose float32 sums round
    differently still stops on the certificate rather than at the cap (CI's machine reached 100 unconverged).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GaussianMixture(3, fitter="gd", random_state=0, learning_rate=1e-3, init_params="random", max_iter=400)
        return model.fit(x)


def _em_optimum(x: np.ndarray) -> float:
    return float(GaussianMixture(3, random_state=0, split_merge=0, tol=1e-8, max_iter=1000).fit(x).score(x))


def test_the_plateau_rule_alone_stops_short_control(plateau_rule_only: None) -> None:
    x = _data()
    gd = _gd(x)
    assert gd.converged_ and gd.certificates_ == []
    assert _em_optimum(x) - gd.score(x) > 0.005  # the control fails: stopped 0.01 nats short


def test_the_certificate_carries_the_fit_to_the_optimum() -> None:
    x = _data()
    gd = _gd(x)
    assert gd.converged_
    gains = [gain for _, gain in gd.certificates_]
    assert gains[-1] < gd.tol and any(g >= gd.tol for g in gains[:-1])  # it refused at least one plateau
    assert _em_optimum(x) - gd.score(x) < 0.002


def _params(model: GaussianMixture) -> MixtureParams:
    return MixtureParams(
        *(torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (model.weights_, model.means_,
                                                                       model.covariances_, model.precisions_cholesky_))
    )  # fmt: skip


def test_em_step_gain_is_zero_at_ems_fixed_point_and_ems_own_gain_elsewhere() -> None:
    x = _data()
    data = DataSource(x, torch.device("cpu"), torch.float64)
    settings = FitSettings.from_params(GaussianMixture(3).get_params())
    shift = torch.from_numpy(x.mean(0))
    fixed = GaussianMixture(3, random_state=0, split_merge=0, tol=1e-12, max_iter=5000).fit(x)
    before, gain = em_step_gain(data, _params(fixed), settings, shift)
    assert before == pytest.approx(fixed.score(x), abs=1e-10)
    assert abs(gain) < 1e-9
    early = GaussianMixture(3, random_state=0, split_merge=0, max_iter=2, init_params="random")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        early.fit(x)
    before, gain = em_step_gain(data, _params(early), settings, shift)
    one_more = GaussianMixture(
        3,
        split_merge=0,
        max_iter=1,
        weights_init=early.weights_,
        means_init=early.means_,
        precisions_init=early.precisions_,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one_more.fit(x)
    assert gain > 1e-3
    assert before + gain == pytest.approx(one_more.score(x), abs=1e-10)
