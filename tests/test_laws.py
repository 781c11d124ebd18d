"""Tests of implicit_em.laws: every law against autograd in float64, a negative control per law, and the pins that
the moved code computes what the old paths computed (frozen copies of the old code below, checked equal to the old
paths in the commit that moved them)."""

import math
from collections.abc import Callable

import pytest
import torch

from implicit_em.laws import (
    constrained_law,
    hopfield_law,
    identity_residual,
    lse_law,
    mixture_nll_law,
    open_set_law,
    routing_law,
    value_law,
    volume_law,
)
from implicit_em.objectives import constrained_cross_entropy, lse, mixture_nll, open_set_lse, responsibilities

TOL = 1e-12
F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _grad(loss: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Autograd's gradient of loss(x).sum() at a fresh leaf copy of x."""
    leaf = x.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(leaf).sum(), leaf)
    return grad


def _energies(x: torch.Tensor, means: torch.Tensor, w: torch.Tensor, volume: bool = True) -> torch.Tensor:
    """Gaussian energies written out (an oracle independent of the library): ½‖W_j(x−μ_j)‖² − log|det W_j| + c."""
    z = torch.einsum("kij,nkj->nki", w, x[:, None, :] - means)  # (N, K, D)
    sq = 0.5 * z.square().sum(-1)  # (N, K)
    if not volume:
        return sq
    return sq - torch.linalg.slogdet(w).logabsdet + 0.5 * x.shape[-1] * math.log(2 * math.pi)


# -- one case per law: (autograd's gradient, the law's prediction), optionally on a perturbed input ------------------
# A perturbed input is the negative control: a check that could not fail would pass it too.


def _lse_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    d = torch.randn(64, 7, generator=_gen(0), dtype=F64) * 3
    log_w = torch.log_softmax(torch.randn(7, generator=_gen(1), dtype=F64), 0)
    grad = _grad(lambda x: lse(x - log_w), d)
    return grad, lse_law(d, log_weights=log_w.flip(0) if perturb else log_w)  # perturbed: the wrong weights


def _mixture_nll_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    d = torch.randn(64, 7, generator=_gen(2), dtype=F64) * 3
    log_w = torch.log_softmax(torch.randn(7, generator=_gen(3), dtype=F64), 0)
    grad = _grad(lambda x: mixture_nll(x, log_w), d)
    return grad, mixture_nll_law(d, log_weights=log_w.flip(0) if perturb else log_w)


def _constrained_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    d = torch.randn(64, 7, generator=_gen(4), dtype=F64) * 3
    y = torch.randint(0, 7, (64,), generator=_gen(5))
    grad = _grad(lambda x: constrained_cross_entropy(x, y, label_smoothing=0.1), d)
    return grad, constrained_law(d, (y + 1) % 7 if perturb else y, label_smoothing=0.1)


def _open_set_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    d = torch.randn(64, 7, generator=_gen(16), dtype=F64) * 3
    tau = torch.randn(64, generator=_gen(17), dtype=F64) * 3 - 2  # one τ per row: a per-row ∂L/∂τ
    grad = _grad(lambda x: open_set_lse(x[:, :-1], x[:, -1]), torch.cat([d, tau[:, None]], 1))  # ∂L/∂(d, τ)
    return grad, open_set_law(d, tau + 1.0 if perturb else tau)  # perturbed: the wrong null distance


def _volume_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(48, 3, generator=_gen(6), dtype=F64)
    means = torch.randn(4, 3, generator=_gen(7), dtype=F64)
    w = torch.randn(4, 3, 3, generator=_gen(8), dtype=F64) + 3 * torch.eye(3, dtype=F64)
    grad = _grad(lambda ww: torch.logsumexp(-_energies(x, means, ww), -1), w)
    r = torch.softmax(-_energies(x, means, w), -1)
    return grad, volume_law(x, means + 0.3 * perturb, w, r)


def _attention(seed: int, keep: bool = False) -> dict[str, torch.Tensor]:
    """Scores, values, a mask multiplier and the upstream gradient of a random loss, (B, H, T, S) = (2, 3, 4, 5)."""
    g = _gen(seed)
    s = torch.randn(2, 3, 4, 5, generator=g, dtype=F64)
    v = torch.randn(2, 3, 5, 6, generator=g, dtype=F64)
    probe = torch.randn(2, 3, 4, 6, generator=g, dtype=F64)
    m = (torch.rand(2, 3, 4, 5, generator=g) > 0.3).to(F64) / 0.7 if keep else torch.ones(2, 3, 4, 5, dtype=F64)
    return {"s": s, "v": v, "probe": probe, "m": m}


def _attention_loss(s: torch.Tensor, v: torch.Tensor, probe: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ℓ = Σ probe·o + ½‖o‖², o = (m ⊙ softmax(s)) v, so u = ∂ℓ/∂o = probe + o is not constant."""
    o = (torch.softmax(s, -1) * m) @ v
    return (o * probe).sum() + 0.5 * o.square().sum()


def _upstream(a: dict[str, torch.Tensor]) -> torch.Tensor:
    return a["probe"] + (torch.softmax(a["s"], -1) * a["m"]) @ a["v"]


def _routing_case(perturb: bool, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    a = _attention(9, keep)
    grad = _grad(lambda s: _attention_loss(s, a["v"], a["probe"], a["m"]), a["s"])
    v = a["v"] * (1.3 if perturb else 1.0)  # not a shift: a shift of every v_j cancels in b - E_alpha[b]
    return grad, routing_law(torch.softmax(a["s"], -1), v, _upstream(a), a["m"] if keep else None)


def _routing_dropout_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _routing_case(perturb, keep=True)


def _value_case(perturb: bool, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    a = _attention(10, keep)
    grad = _grad(lambda v: _attention_loss(a["s"], v, a["probe"], a["m"]), a["v"])
    u = _upstream(a) + 0.3 * perturb
    return grad, value_law(torch.softmax(a["s"], -1), u, a["m"] if keep else None)


def _value_dropout_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _value_case(perturb, keep=True)


def _hopfield_case(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(11)
    q = torch.randn(2, 3, 4, 8, generator=g, dtype=F64)
    k = torch.randn(2, 3, 5, 8, generator=g, dtype=F64)
    mask = torch.randn(4, 5, generator=g, dtype=F64)  # an additive bias, independent of q
    mask[0, 1:] = float("-inf")  # and a masked-out block: row 0 sees one key only
    scale = 8**-0.5

    def scores(qq: torch.Tensor) -> torch.Tensor:
        return qq @ k.transpose(-2, -1) * scale + mask

    grad = _grad(lambda qq: torch.logsumexp(scores(qq), -1), q) / scale
    return grad, hopfield_law(torch.softmax(scores(q), -1), k + 0.3 * perturb)


CASES = {
    "lse": _lse_case,
    "mixture_nll": _mixture_nll_case,
    "constrained": _constrained_case,
    "open_set": _open_set_case,
    "volume": _volume_case,
    "routing": _routing_case,
    "routing_dropout": _routing_dropout_case,
    "value": _value_case,
    "value_dropout": _value_dropout_case,
    "hopfield": _hopfield_case,
}


@pytest.mark.parametrize("name", CASES)
def test_law_equals_autograd_in_float64(name: str) -> None:
    grad, law = CASES[name](False)
    assert grad.abs().amax() > 0.1  # the check compares something
    torch.testing.assert_close(law, grad, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", CASES)
def test_law_misses_autograd_on_a_perturbed_input(name: str) -> None:
    grad, law = CASES[name](True)
    assert (law - grad).abs().amax() > 1e-2


@pytest.mark.parametrize("name", CASES)
def test_law_with_the_wrong_sign_misses_autograd(name: str) -> None:
    grad, law = CASES[name](False)
    assert (-law - grad).abs().amax() > 1e-2


def test_volume_law_fails_without_the_volume_term() -> None:
    """Drop −log|det W| from the energies: the gradient loses r W^{-T}, and the law no longer holds."""
    x = torch.randn(48, 3, generator=_gen(6), dtype=F64)
    means = torch.randn(4, 3, generator=_gen(7), dtype=F64)
    w = torch.randn(4, 3, 3, generator=_gen(8), dtype=F64) + 3 * torch.eye(3, dtype=F64)
    grad = _grad(lambda ww: torch.logsumexp(-_energies(x, means, ww, volume=False), -1), w)
    r = torch.softmax(-_energies(x, means, w, volume=False), -1)
    law = volume_law(x, means, w, r)
    assert (law - grad).abs().amax() > 1.0
    # what is missing is exactly the volume part, Σ_i r_ij W_j^{-T}
    torch.testing.assert_close(law - grad, r.sum(0)[:, None, None] * torch.linalg.inv(w).mT, atol=TOL, rtol=TOL)


def test_routing_law_without_the_dropout_multiplier_misses_autograd_in_train_mode() -> None:
    a = _attention(9, keep=True)
    grad = _grad(lambda s: _attention_loss(s, a["v"], a["probe"], a["m"]), a["s"])
    assert (routing_law(torch.softmax(a["s"], -1), a["v"], _upstream(a)) - grad).abs().amax() > 1e-2


@pytest.mark.parametrize("dim", [0, 1])
def test_distance_laws_along_another_dim(dim: int) -> None:
    d = torch.randn(5, 4, 3, generator=_gen(12), dtype=F64)
    torch.testing.assert_close(lse_law(d, dim=dim), _grad(lambda x: lse(x, dim=dim), d), atol=TOL, rtol=0)
    torch.testing.assert_close(mixture_nll_law(d, dim=dim), -lse_law(d, dim=dim), atol=0, rtol=0)
    y = torch.randint(0, d.shape[dim], [s for i, s in enumerate(d.shape) if i != dim], generator=_gen(13))
    grad = _grad(lambda x: constrained_cross_entropy(x, y, dim=dim), d)
    torch.testing.assert_close(constrained_law(d, y, dim=dim), grad, atol=TOL, rtol=0)


def test_constrained_law_takes_soft_targets() -> None:
    d = torch.randn(16, 5, generator=_gen(14), dtype=F64)
    t = torch.softmax(torch.randn(16, 5, generator=_gen(15), dtype=F64), -1)
    grad = _grad(lambda x: constrained_cross_entropy(x, t), d)
    torch.testing.assert_close(constrained_law(d, t), grad, atol=TOL, rtol=0)
    torch.testing.assert_close(constrained_law(d, t), t - responsibilities(d), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_laws_follow_the_input_dtype(dtype: torch.dtype) -> None:
    d = torch.randn(4, 3, dtype=dtype)
    y = torch.tensor([0, 1, 2, 0])
    for out in (lse_law(d), mixture_nll_law(d), constrained_law(d, y)):
        assert out.dtype == dtype
    a = torch.softmax(torch.randn(2, 3, 4, dtype=dtype), -1)  # (B, T, S)
    v, u = torch.randn(2, 4, 5, dtype=dtype), torch.randn(2, 3, 5, dtype=dtype)  # (B, S, Dv), (B, T, Dv)
    assert routing_law(a, v, u).dtype == value_law(a, u).dtype == hopfield_law(a, v).dtype == dtype


# -- pins: the moved code computes exactly what the old paths computed -----------------------------------------------
# Frozen copies of the code each law replaced (as it stood at b4f3b95), and exact (bitwise) comparisons.


def _old_identity_residual(
    objective: Callable[..., torch.Tensor],
    d: torch.Tensor,
    regime: str = "lse",
    target: torch.Tensor | None = None,
    log_weights: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
    dim: int = -1,
) -> torch.Tensor:
    """objectives.identity_residual at b4f3b95."""
    from implicit_em.objectives import _target_distribution

    d_ = d.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = objective(d_, target) if regime == "constrained" else objective(d_)
        (grad,) = torch.autograd.grad(out.sum(), d_)
    r = responsibilities(d.detach(), None if regime == "constrained" else log_weights, dim=dim)
    if regime == "lse":
        expected = -r
    elif regime == "mixture_nll":
        expected = r
    else:
        assert target is not None
        expected = _target_distribution(target, d, dim, label_smoothing) - r
    return (grad - expected).abs().amax()


def _old_volume_residual(dtype: torch.dtype, n: int = 64, k: int = 5, d: int = 4) -> torch.Tensor:
    """cli._volume_residual at b4f3b95 (the only home of the volume law)."""
    from implicit_em import gaussian_energies

    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    means = torch.randn(k, d, generator=g, dtype=torch.float64).to(dtype)
    w = (torch.randn(k, d, d, generator=g, dtype=torch.float64) + 3 * torch.eye(d, dtype=torch.float64)).to(dtype)
    w.requires_grad_(True)
    energies = gaussian_energies(x, means, w, "full")
    (grad,) = torch.autograd.grad(lse(energies).sum(), w)
    with torch.no_grad():
        r = torch.softmax(-energies, -1)
        z = torch.einsum("kij,nkj->nki", w, x[:, None, :] - means)
        outer = torch.einsum("nk,nki,nkj->kij", r, z, x[:, None, :] - means)
        expected = r.sum(0)[:, None, None] * torch.linalg.inv(w).mT - outer
    return (grad - expected).abs().amax() / expected.abs().amax()


def _old_routing_residual(dtype: torch.dtype, t: int = 12, s: int = 12, e: int = 8) -> torch.Tensor:
    """cli._routing_residual at b4f3b95 (the routing law re-derived by hand)."""
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(t, s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True)
    v = torch.randn(s, e, generator=g, dtype=torch.float64).to(dtype)
    probe = torch.randn(t, e, generator=g, dtype=torch.float64).to(dtype)
    alpha = torch.softmax(scores, -1)
    out = alpha @ v
    loss = (out * probe).sum() + 0.5 * out.square().sum()
    (grad,) = torch.autograd.grad(loss, scores)
    with torch.no_grad():
        u = probe + out
        b = u @ v.T
        expected = alpha * (b - (alpha * b).sum(-1, keepdim=True))
    return (grad - expected).abs().amax()


def _old_theorem1_residual(d: torch.Tensor, log_w: torch.Tensor | None, sign: float) -> float:
    """experiments.theorem1._residual at b4f3b95 (a re-implementation of identity_residual)."""
    d = d.clone().requires_grad_(True)
    value = lse(d if log_w is None else d - log_w) if sign < 0 else mixture_nll(d, log_w)
    (grad,) = torch.autograd.grad(value.sum(), d)
    r = torch.softmax(-d.detach() if log_w is None else log_w - d.detach(), dim=-1)
    return float((grad - sign * r).abs().amax())


def _old_routing_law(
    weights: torch.Tensor, value: torch.Tensor, upstream: torch.Tensor, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """probes.laws.routing_law at b4f3b95."""
    b = torch.matmul(upstream, value.transpose(-2, -1))
    if keep is not None:
        b = b * keep
    return weights * (b - (weights * b).sum(dim=-1, keepdim=True))


def _old_value_law(weights: torch.Tensor, upstream: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """probes.laws.value_law at b4f3b95."""
    dropped = weights if keep is None else weights * keep
    return torch.matmul(dropped.transpose(-2, -1), upstream)


def _identity_cases(dtype: torch.dtype) -> list[tuple[Callable[..., torch.Tensor], torch.Tensor, dict[str, object]]]:
    d = (torch.randn(32, 6, generator=_gen(20), dtype=F64) * 4).to(dtype)
    log_w = torch.log_softmax(torch.randn(6, generator=_gen(21), dtype=F64), 0).to(dtype)
    y = torch.randint(0, 6, (32,), generator=_gen(22))
    soft = torch.softmax(torch.randn(32, 6, generator=_gen(23), dtype=F64), -1).to(dtype)
    return [
        (lse, d, {}),
        (lambda x: lse(x - log_w), d, {"regime": "lse", "log_weights": log_w}),
        (lambda x: mixture_nll(x, log_w), d, {"regime": "mixture_nll", "log_weights": log_w}),
        (mixture_nll, d, {"regime": "mixture_nll"}),
        (constrained_cross_entropy, d, {"regime": "constrained", "target": y}),
        (
            lambda x, t: constrained_cross_entropy(x, t, label_smoothing=0.1),
            d,
            {"regime": "constrained", "target": y, "label_smoothing": 0.1},
        ),
        (constrained_cross_entropy, d, {"regime": "constrained", "target": soft, "log_weights": log_w}),
        (lambda x: -torch.exp(-x).sum(-1), d, {}),  # a wrong objective: large residual, pinned too
        (lambda x: lse(x, dim=0), d, {"dim": 0}),
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_identity_residual_equals_the_old_objectives_version(dtype: torch.dtype) -> None:
    for objective, d, kwargs in _identity_cases(dtype):
        new = identity_residual(objective, d, **kwargs)  # type: ignore[arg-type]
        assert torch.equal(new, _old_identity_residual(objective, d, **kwargs))  # type: ignore[arg-type]


def test_identity_residual_is_exported_at_the_top_level() -> None:
    import implicit_em
    import implicit_em.laws

    assert implicit_em.identity_residual is implicit_em.laws.identity_residual
    assert "identity_residual" in implicit_em.__all__


@pytest.mark.parametrize("keep", [False, True])
def test_attention_laws_equal_the_old_probes_versions(keep: bool) -> None:
    a = _attention(30, keep)
    w, u, m = torch.softmax(a["s"], -1), _upstream(a), a["m"] if keep else None
    assert torch.equal(routing_law(w, a["v"], u, m), _old_routing_law(w, a["v"], u, m))
    assert torch.equal(value_law(w, u, m), _old_value_law(w, u, m))


def test_demo_rows_equal_the_old_cli_residuals() -> None:
    """Each row of `implicit-em demo` gives, bit for bit, the residual the old hand-written cli computed."""
    from implicit_em import correntropy, independent_sigmoid_bce
    from implicit_em.cli import law_checks

    n, k = 256, 10

    def dist(dt: torch.dtype) -> torch.Tensor:
        return (torch.randn(n, k, generator=_gen(0), dtype=F64) * 3).to(dt)

    y = torch.randint(0, k, (n,), generator=_gen(3))
    log_w = torch.log_softmax(torch.randn(k, generator=_gen(4), dtype=F64), 0)
    old: dict[str, Callable[[torch.dtype], torch.Tensor]] = {
        "LSE (Thm 1)": lambda dt: _old_identity_residual(lse, dist(dt)),
        "unsupervised (§4.1)": lambda dt: _old_identity_residual(
            lambda x: mixture_nll(x, log_w.to(dt)), dist(dt), "mixture_nll", log_weights=log_w.to(dt)
        ),
        "volume term (§3.4)": _old_volume_residual,
        "constrained (§4.3)": lambda dt: _old_identity_residual(constrained_cross_entropy, dist(dt), "constrained", y),
        "constrained, smoothed": lambda dt: _old_identity_residual(
            lambda x, t: constrained_cross_entropy(x, t, label_smoothing=0.1),
            dist(dt),
            "constrained",
            y,
            label_smoothing=0.1,
        ),
        "conditional (§4.2)": _old_routing_residual,
        "control: sigmoid BCE": lambda dt: _old_identity_residual(
            lambda x, t: independent_sigmoid_bce(-x, t), dist(dt), "constrained", y
        ),
        "control: correntropy": lambda dt: _old_identity_residual(lambda x: -correntropy(x, 1.0), dist(dt)),
    }
    checks = law_checks()
    assert [c.regime for c in checks] == list(old)
    for check in checks:
        for dt in (torch.float64, torch.float32):
            assert torch.equal(check.residual(dt), old[check.regime](dt)), (check.regime, dt)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("spread", [1e-3, 1.0, 1e3])
def test_theorem1_residual_equals_its_old_re_implementation(dtype: torch.dtype, spread: float) -> None:
    from implicit_em.audit.claims.theorem1 import _residual

    d = (torch.randn(64, 10, generator=_gen(40), dtype=F64) * spread).to(dtype)
    log_w = torch.log_softmax(torch.randn(10, generator=_gen(41), dtype=F64), 0).to(dtype)
    for lw, sign in ((None, -1.0), (log_w, -1.0), (log_w, 1.0)):
        assert _residual(d, lw, sign) == _old_theorem1_residual(d, lw, sign)
