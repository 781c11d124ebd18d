"""The cross-entropy (constrained regime) experiment (paper §4.3): the quick run's verdict and roles, planted effects
through the rule (the uniform-logit control and the smoothed arm as the deciding arm, controls that pass), a
classifier that does not learn (UNDECIDED), a broken law (raises), and the measures on known answers."""

import dataclasses
from pathlib import Path

import pytest
import torch

from implicit_em.audit import EXPERIMENTS, Context, Result
from implicit_em.audit.claims import cross_entropy_regime as ce
from implicit_em.audit.claims.cross_entropy_regime import EXPERIMENT, Config, competition
from implicit_em.audit.core import roles, torch_threads
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds.classifier import Training
from implicit_em.objectives import constrained_cross_entropy, independent_sigmoid_bce
from implicit_em.probes import HeadProbe

TINY = Config(train=Training(epochs=1))  # one epoch: a second of training, for end-to-end runs of the rule


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    figures = tmp_path_factory.mktemp("run") / "figures"
    with torch_threads(1):  # as the audit's runner runs the quick size
        res = EXPERIMENT.run(Config.quick(), Context(figures.parent))
    return res, figures


def _planted(res: Result, **values: float) -> str:
    """The rule's verdict on the quick run's metrics with ``values`` planted in place of the measured ones."""
    m = Metrics({**res.metrics, **values})
    cfg = Config.quick()
    return ce.verdict(cfg, m, ce.criteria(cfg, m))


def test_registered() -> None:
    assert EXPERIMENT in EXPERIMENTS


def test_every_metric_is_declared(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    assert not m.undeclared() and set(m.declared) == set(m)  # type: ignore[attr-defined]


def test_quick_run_is_supported_with_two_tests_four_gates_and_the_law_as_identity(result: tuple[Result, Path]) -> None:
    res = result[0]
    assert roles(res.criteria) == {"test": 2, "gate": 4, "identity": 1}
    crit = {c.metric: c for c in res.criteria}
    assert crit["law_residual_max"].role == "identity" and crit["law_residual_max"].measured <= 1e-13
    cfg = Config.quick()
    assert crit[ce.STRONG].threshold == cfg.majority_share
    assert crit[ce.WEAK].threshold == pytest.approx(cfg.min_top_share_ratio / 9)
    assert all(c.passed for c in res.criteria)  # every gate held at quick seed 0 (the page's table)
    assert res.verdict == "SUPPORTED"


def test_the_uniform_logit_control_as_the_deciding_arm_is_refuted(result: tuple[Result, Path]) -> None:
    res = result[0]
    tempered = res.metrics["top_share_tempered_max"]
    assert tempered < 2 / 9  # the hard arm's logits × 0.01: same accuracy, near-uniform push
    assert _planted(res, top_share_median_last_epoch_min=tempered) == "REFUTED"


def test_the_smoothed_arm_as_the_deciding_arm_is_partial(result: tuple[Result, Path]) -> None:
    res = result[0]
    smoothed = res.metrics["top_share_last_epoch_smoothed_per_seed"][0]
    assert 2 / 9 < smoothed < 0.5  # label smoothing flattens the competition below the majority bar
    assert _planted(res, top_share_median_last_epoch_min=smoothed) == "PARTIAL"


@pytest.mark.parametrize(
    "key, value",
    [
        ("test_accuracy_shuffled_max", 0.9),  # the learning bar could not fail
        ("top_share_tempered_max", 0.5),  # the concentration bars could not fail
        ("law_residual_sigmoid_min", 0.0),  # the law check could not fail
    ],
)
def test_a_control_that_passes_makes_it_undecided(result: tuple[Result, Path], key: str, value: float) -> None:
    assert _planted(result[0], **{key: value}) == "UNDECIDED"


def test_a_classifier_that_does_not_learn_is_undecided(result: tuple[Result, Path]) -> None:
    res = result[0]
    assert _planted(res, test_accuracy_hard_min=res.metrics["test_accuracy_shuffled_max"]) == "UNDECIDED"
    # end to end: a learning rate too small to move the classifier; its push is concentrated anyway (random
    # distances), so only the learning gate stands between this run and SUPPORTED
    with torch_threads(1):
        m = ce.measure(dataclasses.replace(TINY, train=Training(epochs=1, lr=1e-9)), Context(Path(".")))
    crit = ce.criteria(TINY, m)
    assert m["test_accuracy_hard_min"] < 0.3
    assert {c.metric: c.passed for c in crit}[ce.STRONG]
    assert ce.verdict(TINY, m, crit) == "UNDECIDED"


def test_a_broken_law_raises(result: tuple[Result, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AssertionError, match="law_residual_max"):
        _planted(result[0], law_residual_max=1e-3)
    # end to end: cross-entropy with a planted extra gradient of 1e-3 on every distance
    monkeypatch.setattr(
        ce, "constrained_cross_entropy", lambda d, y, **kw: constrained_cross_entropy(d, y, **kw) + 1e-3 * d.sum(dim=1)
    )
    with torch_threads(1), pytest.raises(AssertionError, match="law_residual_max"):
        m = ce.measure(TINY, Context(Path(".")))
        ce.verdict(TINY, m, ce.criteria(TINY, m))


def test_sigmoids_push_with_the_softmax_shares_of_their_own_logits(result: tuple[Result, Path]) -> None:
    m = result[0].metrics
    (sig,), (soft,) = m["top_share_last_epoch_sigmoid_per_seed"], m["top_share_last_epoch_sigmoid_softmax_per_seed"]
    assert abs(sig - soft) < 0.05  # σ(z) ≈ exp(z) on very negative wrong logits
    assert sig > 0.5 and m["top_share_last_epoch_shuffled_per_seed"][0] < 0.5


def test_the_probe_reads_the_sigmoid_push_and_its_law_residual_is_large() -> None:
    # what the run relies on: for independent sigmoids the head probe's "responsibilities" are σ(−d), the push
    # itself, and the law check against softmax(−d) fails by O(1), while it holds for cross-entropy
    g = torch.Generator().manual_seed(0)
    d = torch.rand(64, 10, generator=g, dtype=torch.float64) * 8
    y = torch.randint(10, (64,), generator=g)
    t = torch.nn.functional.one_hot(y, 10).double()
    probes = []
    for loss_fn in (lambda d: independent_sigmoid_bce(-d, y), lambda d: constrained_cross_entropy(d, y)):
        with HeadProbe(regime="constrained", kind="distances", reduction="mean") as probe:
            loss_fn(probe(d.clone().requires_grad_(True))).mean().backward()
        probes.append(probe)
    sigmoids, softmax = probes
    torch.testing.assert_close(sigmoids.responsibilities(target=t), torch.sigmoid(-d), rtol=0, atol=1e-14)
    assert sigmoids.residual(target=t) > 0.1
    assert softmax.residual(target=t) <= 1e-14


def test_figure_written(result: tuple[Result, Path]) -> None:
    res, figures = result
    assert res.figures == ["figures/cross_entropy_regime.png"]
    assert (figures / "cross_entropy_regime.png").stat().st_size > 10_000


def test_competition_on_a_closed_form() -> None:
    # y = 0; wrong classes hold 0.3, 0.1, 0.1: mass 0.5, top share 0.6, n_eff = exp(H(0.6, 0.2, 0.2)).
    r = torch.tensor([[0.5, 0.3, 0.1, 0.1]], dtype=torch.float64)
    mass, top, n_eff = competition(r, torch.tensor([0]))
    torch.testing.assert_close(mass, torch.tensor([0.5], dtype=torch.float64))
    torch.testing.assert_close(top, torch.tensor([0.6], dtype=torch.float64))
    h = -(0.6 * torch.log(torch.tensor(0.6)) + 0.4 * torch.log(torch.tensor(0.2))).double()
    torch.testing.assert_close(n_eff, h.exp().reshape(1), rtol=1e-6, atol=0)


def test_competition_uniform_wrong_classes() -> None:
    r = torch.tensor([[0.1, 0.3, 0.3, 0.3]], dtype=torch.float64)
    _, top, n_eff = competition(r, torch.tensor([0]))
    torch.testing.assert_close(top, torch.tensor([1 / 3], dtype=torch.float64))
    torch.testing.assert_close(n_eff, torch.tensor([3.0], dtype=torch.float64))
