"""The fused EM pass (``mixture/_fused.py``) against a float64 reference and against the chunked ``summarize``.

The reference statistics are the direct float64 forms: responsibilities from the foundation's Gaussian energies
(``_em._estimate_log_gaussian_prob``), then Σ r, Σ r x and Σ r x xᵀ on the shifted data. Shapes: N not a multiple
of the fused chunk nor of the batch, every covariance type, K = 1, odd and even D + 1 (the circulant features'
two cases), one and two worker threads.
"""

import time
from collections.abc import Iterator

import pytest
import torch
from torch.testing import assert_close

from implicit_em.mixture import _fused, _stats
from implicit_em.mixture._em import _estimate_log_gaussian_prob
from test_mixture_stats import _random_params as _params  # the same random parameters of every covariance type

TYPES = ["full", "tied", "diag", "spherical"]


def _data(n: int, d: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * 2 + 0.5


def _reference(x: torch.Tensor, p: _stats.MixtureParams, cov_type: str, shift: torch.Tensor) -> _stats.Summary:
    """The statistics in float64, directly: r from the Gaussian energies, then Σ r, Σ r x, Σ r x xᵀ (for diag and
    spherical at D > 1 its diagonal only: what their features hold, and all their M-step reads)."""
    logp = torch.log(p.weights) + _estimate_log_gaussian_prob(x, p.means, p.precisions_cholesky, cov_type)
    r = torch.softmax(logp, 1)  # (N, K)
    xs = x - shift
    sxx = torch.einsum("nk,na,nb->kab", r, xs, xs)
    if cov_type in ("diag", "spherical") and x.shape[1] > 1:
        sxx = torch.diag_embed(torch.diagonal(sxx, dim1=-2, dim2=-1))
    n = torch.tensor(float(x.shape[0]), dtype=torch.float64)
    return _stats.Summary(n, r.sum(0), r.T @ xs, sxx, torch.logsumexp(logp, 1).sum())


def _fused_summary(
    x: torch.Tensor, p: _stats.MixtureParams, cov_type: str, shift: torch.Tensor, dtype: torch.dtype, **kw: int
) -> _stats.Summary:
    a = _stats.score_matrix(p, cov_type, shift).to(dtype)
    batches = [x[i : i + 300].to(dtype) for i in range(0, x.shape[0], 300)]  # 1000 rows: 3 batches of 300 and 100
    out = _fused.fused_pass_summary(batches, a, shift.to(dtype), **kw)
    assert out is not None
    return out


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 16])
def test_circulant_features_are_the_quadratic_features_permuted_bitwise(d: int) -> None:
    order = _fused.circulant_order(d)
    assert sorted(order.tolist()) == list(range(d * (d + 1) // 2 + d + 1))  # a permutation of the P features
    x, shift = _data(37, d), torch.randn(d, dtype=torch.float64)
    ws = _fused._Workspace(64, d, 3, torch.float64, torch.device("cpu"))
    for rows in (37, 5, 37):  # fewer rows than the buffer, and back: the constant rows follow the view
        got = ws.features(x[:rows], shift)
        assert torch.equal(got, _stats.quadratic_features_t(x[:rows] - shift)[order])


@pytest.mark.parametrize("d", [2, 3, 16])
def test_diagonal_features_are_squares_values_and_one_bitwise_and_the_workspace_writes_them(d: int) -> None:
    x, shift = _data(37, d), torch.randn(d, dtype=torch.float64)
    xs = x - shift
    want = torch.cat([xs.T * xs.T, xs.T, torch.ones(1, 37, dtype=torch.float64)])
    assert torch.equal(_stats.diagonal_features_t(xs), want)
    assert _stats.is_diagonal(2 * d + 1, d) and not _stats.is_diagonal(d * (d + 1) // 2 + d + 1, d)
    ws = _fused._Workspace(64, d, 3, torch.float64, torch.device("cpu"), diagonal=True)
    for rows in (37, 5, 37):  # fewer rows than the buffer, and back: the constant row follows the view
        assert torch.equal(ws.features(x[:rows], shift), want[:, :rows])


@pytest.mark.parametrize("cov_type", ["diag", "spherical"])
@pytest.mark.parametrize("d", [1, 2, 7])
def test_diag_and_spherical_score_on_their_own_features_and_their_m_step_is_the_full_features_one(
    cov_type: str, d: int
) -> None:
    """The 2D + 1 diagonal features give the Gaussian log-densities of the quadratic ones, and the M-step from
    their statistics equals the M-step from the full statistics (to float64 round-off)."""
    x, p = _data(500, d), _params(cov_type, 3, d)
    shift = x[:50].mean(0)
    a = _stats.score_matrix(p, cov_type, shift)
    assert a.shape[0] == (2 * d + 1 if d > 1 else 3)
    logp = torch.log(p.weights) + _estimate_log_gaussian_prob(x, p.means, p.precisions_cholesky, cov_type)
    assert_close(_stats.weighted_log_prob(x, a, shift), logp, rtol=1e-12, atol=1e-10)
    lam = _stats.gaussian.full_precisions(p.precisions_cholesky, cov_type, 3, d)
    offsets = _stats.score_matrix(p, cov_type, shift)[-1] + 0.5 * torch.einsum(
        "ka,kab,kb->k", p.means - shift, lam, p.means - shift
    )  # the constant column: log π + log|det W| − (D/2) log 2π − ½ mᵀΛm
    full_a = _stats.quadratic_score_matrix(lam, p.means - shift, offsets)
    mine, full = _stats.summarize(x, a, shift)[0], _stats.summarize(x, full_a, shift)[0]
    for f in ("n", "nk", "sx", "loglik"):
        assert_close(getattr(mine, f), getattr(full, f), rtol=1e-12, atol=1e-9, msg=f)
    assert_close(torch.diagonal(mine.sxx, dim1=-2, dim2=-1), torch.diagonal(full.sxx, dim1=-2, dim2=-1))
    m1 = _stats.from_summaries(mine, shift, 1e-6, cov_type, torch.float64)
    m2 = _stats.from_summaries(full, shift, 1e-6, cov_type, torch.float64)
    for f, u, v in zip(_stats.MixtureParams._fields, m1, m2, strict=True):
        assert_close(u, v, rtol=1e-12, atol=1e-12, msg=f)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("cov_type", "k"), [(c, 3) for c in TYPES] + [("full", 1), ("spherical", 1)])
def test_fused_pass_equals_the_float64_reference_statistics(cov_type: str, k: int, workers: int) -> None:
    x = _data(1000, 4)
    p, shift = _params(cov_type, k, 4), x[:50].mean(0)
    got = _fused_summary(x, p, cov_type, shift, torch.float64, rows=64, workers=workers)  # 1000 = 15·64 + 40
    ref = _reference(x, p, cov_type, shift)
    for name, g, r in zip(_stats.Summary._fields, got, ref, strict=True):
        assert g.dtype == torch.float64, name
        assert_close(g, r, rtol=1e-10, atol=1e-9, msg=name)


@pytest.fixture(params=["onednn", "torch.mm"])
def e_step_gemm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both E-step GEMMs of the float32 pass: oneDNN's linear kernel (the default on CPU) and torch.mm."""
    if request.param == "torch.mm":
        monkeypatch.setattr(_fused, "_linear_for", lambda dtype, device: None)
    else:
        assert _fused._onednn_linear() is not None  # this torch build (the pinned one) has it: the test is real
    return str(request.param)


@pytest.mark.parametrize("cov_type", TYPES)
def test_fused_pass_in_float32_is_within_float32_round_off_of_the_reference(cov_type: str, e_step_gemm: str) -> None:
    x = _data(1000, 4)
    p, shift = _params(cov_type, 3, 4), x[:50].mean(0)
    got = _fused_summary(x, p, cov_type, shift, torch.float32, rows=64, workers=2)
    ref = _reference(x, p, cov_type, shift)
    for name, g, r in zip(_stats.Summary._fields, got, ref, strict=True):
        # float32 features and GEMMs over chunks of ≤ 64 rows, float64 across chunks: about one float32 ulp of
        # the largest statistic (measured ≤ 1.2e-7 of it, over the four types)
        assert_close(g, r, rtol=1e-6, atol=1e-6 * float(r.abs().max()), msg=name)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_pass_equals_summarize_chunk_by_chunk(dtype: torch.dtype) -> None:
    x = _data(1000, 5)  # D + 1 = 6 is even: the half-offset product is used
    p, shift = _params("full", 4, 5), x[:50].mean(0)
    a = _stats.score_matrix(p, "full", shift).to(dtype)
    old: _stats.Summary | None = None
    for i in range(0, 1000, 300):
        part, _ = _stats.summarize(x[i : i + 300].to(dtype), a, shift.to(dtype))
        old = part if old is None else old + part
    assert old is not None
    got = _fused_summary(x, p, "full", shift, dtype, rows=128, workers=2)
    tol = 1e-12 if dtype == torch.float64 else 2e-6  # the GEMMs sum in another order
    for name, g, r in zip(_stats.Summary._fields, got, old, strict=True):
        assert_close(g, r, rtol=tol, atol=tol * float(r.abs().max()), msg=name)


def _five_em_iterations(x: torch.Tensor, dtype: torch.dtype, fused: bool) -> _stats.MixtureParams:
    p = _params("full", 3, 4)
    shift = x[:50].mean(0).to(dtype)
    p = _stats.MixtureParams(*(t.to(dtype) for t in p))
    for _ in range(5):
        a = _stats.score_matrix(p, "full", shift).to(dtype)
        batches = [x[i : i + 300].to(dtype) for i in range(0, x.shape[0], 300)]
        if fused:
            total = _fused.fused_pass_summary(batches, a, shift, rows=64, workers=2)
        else:
            total = None
            for b in batches:
                part, _ = _stats.summarize(b, a, shift)
                total = part if total is None else total + part
        assert total is not None
        p = _stats.from_summaries(total, shift, 1e-6, "full", dtype)
    return p


# measured: ≤ 1.4e-15 (float64) and ≤ 5.3e-7 (float32) of each parameter's largest entry
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_five_em_iterations_give_the_parameters_of_the_old_pass(dtype: torch.dtype, tol: float) -> None:
    x = _data(1000, 4)
    new, old = _five_em_iterations(x, dtype, True), _five_em_iterations(x, dtype, False)
    for name, g, r in zip(_stats.MixtureParams._fields, new, old, strict=True):
        assert g.dtype == dtype, name
        assert_close(g, r, rtol=tol, atol=tol * float(r.abs().max()), msg=name)


def test_the_result_does_not_depend_on_thread_timing() -> None:
    x = _data(1000, 4)
    p, shift = _params("full", 3, 4), x[:50].mean(0)
    runs = [_fused_summary(x, p, "full", shift, torch.float32, rows=32, workers=2) for _ in range(3)]
    for run in runs[1:]:
        assert all(torch.equal(u, v) for u, v in zip(run, runs[0], strict=True))


def test_the_thread_count_is_restored_after_a_pass_and_after_an_error() -> None:
    x = _data(1000, 4)
    p, shift = _params("full", 3, 4), x[:50].mean(0)
    before = torch.get_num_threads()
    _fused_summary(x, p, "full", shift, torch.float32, rows=64, workers=2)
    assert torch.get_num_threads() == before
    a = _stats.score_matrix(p, "full", shift).float()
    bad = [x[:300].float(), x[:300, :3].float()]  # the second batch has the wrong width
    with pytest.raises(RuntimeError):
        _fused.fused_pass_summary(bad, a, shift.float(), rows=64, workers=2)
    assert torch.get_num_threads() == before


def test_no_batches_give_none() -> None:
    a = torch.zeros(15, 2)
    assert _fused.fused_pass_summary([], a, torch.zeros(4)) is None


def _reused_buffer_batches(x: torch.Tensor, size: int, log: list[int], done: list[int]) -> Iterator[torch.Tensor]:
    """x in batches written into ONE buffer (a producer that reuses its memory); log[i] is how many worker
    blocks had finished when batch i was written."""
    buf = torch.empty(size, x.shape[1], dtype=x.dtype)
    for i in range(0, x.shape[0], size):
        log.append(done[0])
        part = buf[: min(size, x.shape[0] - i)]
        part.copy_(x[i : i + size])
        yield part


def test_a_stream_that_reuses_its_buffer_is_not_read_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _data(1200, 4).float()
    p, shift = _params("full", 3, 4), x[:50].mean(0).double()
    a = _stats.score_matrix(p, "full", shift).float()
    done, slow_add = [0], _fused._Sums.add

    def add(self: _fused._Sums, xb: torch.Tensor, s: torch.Tensor, w: torch.Tensor | None = None) -> None:
        time.sleep(0.02)  # a slow worker: a producer that ran ahead would overwrite its rows meanwhile
        slow_add(self, xb, s, w)
        done[0] += 1

    monkeypatch.setattr(_fused._Sums, "add", add)
    log: list[int] = []
    got = _fused.fused_pass_summary(
        _reused_buffer_batches(x, 300, log, done), a, shift.float(), rows=64, workers=2, lookahead=False
    )
    fresh = [x[i : i + 300] for i in range(0, 1200, 300)]
    want = _fused.fused_pass_summary(fresh, a, shift.float(), rows=64, workers=2)
    assert log == [0, 2, 4, 6]  # each batch written only after both workers finished the previous one
    assert got is not None and want is not None
    assert all(torch.equal(u, v) for u, v in zip(got, want, strict=True))


def test_em_on_a_stream_does_not_read_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """full_pass asks the fused pass for no look-ahead when the data are a user's iterable."""
    from implicit_em.mixture import _em, _estep
    from implicit_em.mixture._data import DataSource

    seen: list[bool] = []
    real = _estep.fused_pass_summary

    def spy(*args: object, **kw: bool) -> object:
        seen.append(kw["lookahead"])
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_estep, "fused_pass_summary", spy)
    x = _data(600, 3).float()
    p = _params("diag", 2, 3)
    p32 = _stats.MixtureParams(*(t.float() for t in p))
    shift = x.mean(0)
    for data, lookahead in (
        (DataSource(x, torch.device("cpu"), torch.float32), True),
        (DataSource([x[:300], x[300:]], torch.device("cpu"), torch.float32), False),
    ):
        _em.full_pass(data, p32, "diag", shift, 256)
        assert seen[-1] is lookahead


@pytest.mark.parametrize(("d", "k", "rows"), [(1, 1, 7), (2, 3, 64), (5, 4, 33), (16, 16, 4096)])
def test_the_onednn_e_step_gives_the_products_of_torch_mm(d: int, k: int, rows: int) -> None:
    linear = _fused._onednn_linear()
    assert linear is not None
    g = torch.Generator().manual_seed(d)
    x, shift = torch.randn(rows, d, generator=g), torch.randn(d, generator=g)
    ws = _fused._Workspace(rows, d, k, torch.float32, torch.device("cpu"))
    assert ws._linear is linear  # float32 on CPU takes it
    phi_t = ws.features(x, shift)
    a_t = torch.randn(k, phi_t.shape[0], generator=g)
    got = linear(a_t, phi_t.T)
    want = a_t.double() @ phi_t.double()
    assert got.shape == (k, rows) and got.dtype == torch.float32
    assert_close(got.double(), want, rtol=0, atol=2e-6 * float(want.abs().max()))  # float32 products, P terms


def test_float64_and_other_devices_keep_torch_mm() -> None:
    assert _fused._linear_for(torch.float64, torch.device("cpu")) is None
    assert _fused._linear_for(torch.float32, torch.device("meta")) is None
    assert _fused._Workspace(8, 2, 2, torch.float64, torch.device("cpu"))._linear is None


@pytest.mark.parametrize("broken", ["no oneDNN", "wrong products"])
def test_a_torch_without_a_working_onednn_kernel_falls_back_to_torch_mm(
    broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if broken == "no oneDNN":
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    else:  # an op of another meaning under the same name: the check on a small product rejects it
        monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda x, w, *rest: x @ w.T + 1.0)
    _fused._onednn_linear.cache_clear()
    try:
        assert _fused._onednn_linear() is None
        x = _data(1000, 4)
        p, shift = _params("full", 3, 4), x[:50].mean(0)
        got = _fused_summary(x, p, "full", shift, torch.float32, rows=64, workers=2)
        ref = _reference(x, p, "full", shift)
        for name, g, r in zip(_stats.Summary._fields, got, ref, strict=True):
            assert_close(g, r, rtol=1e-6, atol=1e-6 * float(r.abs().max()), msg=name)
    finally:
        monkeypatch.undo()
        _fused._onednn_linear.cache_clear()
    assert _fused._onednn_linear() is not None


@pytest.mark.parametrize("cov_type", TYPES)
def test_the_batch_summarizer_gives_summarize_statistics_batch_after_batch(cov_type: str) -> None:
    """Online EM's float32 mini-batch E-step: one workspace for batches of several sizes (one chunk, several
    chunks of ``rows``, a short last batch), each equal to ``summarize`` of that batch to float32 round-off."""
    x = _data(1000, 4)
    p, shift = _params(cov_type, 3, 4), x[:50].mean(0)
    a = _stats.score_matrix(p, cov_type, shift).float()
    summarizer = _fused.BatchSummarizer(64, 4, 3, torch.float32, torch.device("cpu"))
    for lo, hi in ((0, 64), (64, 300), (300, 305), (305, 1000)):
        xb = x[lo:hi].float()
        got = summarizer(xb, a, shift.float())
        want, _ = _stats.summarize(xb, a, shift.float())
        for name, g, r in zip(_stats.Summary._fields, got, want, strict=True):
            assert g.dtype == torch.float64, name
            assert_close(g, r, rtol=2e-6, atol=2e-6 * float(r.abs().max()), msg=f"{name} of rows {lo}:{hi}")


@pytest.mark.parametrize(("dtype", "built"), [(torch.float32, 1), (torch.float64, 0)])
def test_a_float32_online_em_fit_keeps_one_summarizer_for_all_its_steps(
    dtype: torch.dtype, built: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from implicit_em.mixture import GaussianMixture, _estep

    made: list[int] = []

    class Counting(_fused.BatchSummarizer):
        def __init__(self, *args: object, **kw: object) -> None:
            made.append(1)
            super().__init__(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_estep, "BatchSummarizer", Counting)
    x = _data(2000, 3).to(dtype).numpy()
    gm = GaussianMixture(2, fitter="online_em", batch_size=100, max_iter=3, split_merge=0, random_state=0)
    gm.fit(x)
    assert gm.n_iter_ >= 1 and len(made) == built  # 20 steps an epoch, one summarizer (float32) or none


@pytest.mark.parametrize("workers", [1, 2])
def test_the_loglik_pass_is_the_summary_pass_without_its_statistics(workers: int) -> None:
    x = _data(1000, 4).float()
    p, shift = _params("full", 3, 4), x[:50].mean(0).double()
    a = _stats.score_matrix(p, "full", shift).float()
    batches = [x[i : i + 300] for i in range(0, 1000, 300)]
    done = _fused._pass(batches, a, shift.float(), 64, workers, True, statistics=False)
    assert done is not None and all(w.s is None for w in done[0])  # no statistics GEMM was run
    loglik = float(sum(w.loglik for w in done[0]))
    summary = _fused.fused_pass_summary(batches, a, shift.float(), rows=64, workers=workers)
    assert summary is not None and loglik == float(summary.loglik)  # the same E-step, bitwise
    assert_close(loglik, float(_reference(x.double(), p, "full", shift).loglik), rtol=1e-6, atol=0.0)
    assert _fused.fused_pass_loglik(batches, a, shift.float()) == (
        float(_fused.fused_pass_summary(batches, a, shift.float()).loglik),  # type: ignore[union-attr]
        1000,
    )
    assert _fused.fused_pass_loglik([], a, shift.float()) == (0.0, 0)


def test_the_exact_log_likelihood_after_a_float32_fit_is_the_float64_one_to_round_off() -> None:
    from implicit_em.mixture._data import DataSource
    from implicit_em.mixture._fitting import _mean_loglik

    x = _data(5000, 4)
    p, shift = _params("full", 3, 4), x[:50].mean(0)
    exact = _mean_loglik(DataSource(x, torch.device("cpu"), torch.float64), p, "full", shift)
    fused = _mean_loglik(DataSource(x.float(), torch.device("cpu"), torch.float32), p, "full", shift)
    assert fused != exact and abs(fused - exact) < 1e-5 * abs(exact)  # float32 E-step, float64 sums
