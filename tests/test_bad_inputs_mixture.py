"""The bad-input battery of ``GaussianMixture`` (issue 11 §3, the mixture's inputs), in ``tests/_battery.py``'s rows.

Every row is one call a user might make: a *clear error* (a ValueError or TypeError whose message names the
argument and the problem, as scikit-learn's would) or a *fit* (the call succeeds and its check holds). Rows marked
``# finding`` failed on the code before this table (NaN, a silent wrong answer or a raw low-level exception):
run with ``PYTHONPATH`` pointing at that code, each of them fails. The other error rows pin the clear errors that
already existed (``tests/test_mixture_inputs.py`` has more), and the fit rows pin inputs that must keep fitting, for
each fitter where its data path differs (batch EM reads in chunks, online EM and gradient descent in shuffled
mini-batches). The peak-memory tests of the value checks follow the table.
"""

import math
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import sparse
from sklearn.exceptions import NotFittedError
from torch import Tensor

import implicit_em
from _battery import Case, ids
from implicit_em.mixture import GaussianMixture

FITTERS = ("em", "online_em", "gd")


def _blobs(n: int = 120, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    x = rng.randn(n, d)
    x[: n // 2] += 4.0
    return x


X = _blobs()
X4 = _blobs(d=4, seed=1)


def _gm(fitter: str = "em", k: int = 2, **kw: Any) -> GaussianMixture:
    return GaussianMixture(k, **{"random_state": 0, "max_iter": 20, "split_merge": 0, "fitter": fitter, **kw})


def _fit(data: Any, fitter: str = "em", k: int = 2, **kw: Any) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, message=".*did not converge")
        return _gm(fitter, k, **kw).fit(data)


def _fitted() -> GaussianMixture:
    return _fit(X)


def _loader(x: np.ndarray, batch_size: int = 50) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x)), batch_size=batch_size)


def _batches(x: np.ndarray, size: int = 50) -> list[np.ndarray]:
    return [x[s : s + size] for s in range(0, len(x), size)]


def _memmap(x: np.ndarray, tmp: str = "") -> np.memmap:
    path = Path(_TMP) / f"x{tmp}_{x.dtype}_{x.shape[0]}x{x.shape[1]}_{abs(hash(x.tobytes()))}.dat"
    m = np.memmap(path, dtype=x.dtype, mode="w+", shape=x.shape)
    m[:] = x
    m.flush()
    return np.memmap(path, dtype=x.dtype, mode="r", shape=x.shape)


_TMP = ""  # set by the module fixture below (memmaps need a directory)


@pytest.fixture(scope="module", autouse=True)
def _tmpdir(tmp_path_factory: pytest.TempPathFactory) -> None:
    global _TMP
    _TMP = str(tmp_path_factory.mktemp("memmaps"))


def _finite(gm: Any) -> bool:
    return isinstance(gm, GaussianMixture) and all(
        np.isfinite(getattr(gm, a)).all() for a in ("weights_", "means_", "covariances_", "precisions_cholesky_")
    )


def _same_fit(ref: Callable[[], GaussianMixture], rtol: float = 1e-10) -> Callable[[Any], bool]:
    """The fit equals ``ref()``'s (means, covariances, weights) to ``rtol``: two paths, one answer."""

    def check(gm: Any) -> bool:
        other = ref()
        return _finite(gm) and all(
            np.allclose(getattr(gm, a), getattr(other, a), rtol=rtol, atol=0)
            for a in ("weights_", "means_", "covariances_")
        )

    return check


def _identical_fit(ref: Callable[[], GaussianMixture]) -> Callable[[Any], bool]:
    def check(gm: Any) -> bool:
        other = ref()
        return _finite(gm) and all(
            np.array_equal(getattr(gm, a), getattr(other, a)) for a in ("weights_", "means_", "covariances_")
        )

    return check


def _complex(x: np.ndarray) -> np.ndarray:
    return x + 1j * np.ones_like(x)


def _with_nan(x: np.ndarray, value: float = np.nan) -> np.ndarray:
    y = x.copy()
    y[7, 1] = value
    return y


def _erroring(category: type[Warning], call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with warnings of ``category`` raised as errors (a warning row of the table)."""

    def run() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("error", category)
            warnings.filterwarnings("ignore", message=".*did not converge")
            return call()

    return run


def _no_warning(category: type[Warning], call: Callable[[], Any], check: Callable[[Any], bool]) -> Callable[[], Any]:
    """``call`` returns ``check``'s verdict and issued no warning of ``category``."""

    def run() -> bool:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            value = call()
        return check(value) and not any(issubclass(w.category, category) for w in seen)

    return run


def _warm_refit(data: Any) -> Any:
    gm = _gm(warm_start=True)
    gm.fit(X)
    return gm.fit(data)


def _warm_refit_keeps_model() -> bool:
    gm = _gm(warm_start=True).fit(X)
    before = gm.means_.copy()
    with pytest.raises(ValueError):
        gm.fit(X4)
    return np.array_equal(gm.means_, before) and gm.predict(X).shape == (len(X),) and gm.n_features_in_ == 3


def _needs_grad(x: np.ndarray) -> Tensor:
    return torch.from_numpy(x.copy()).requires_grad_(True)


def _no_graph_equal(method: str) -> Callable[[], bool]:
    def run() -> bool:
        gm = _fitted()
        out = getattr(gm, method)(_needs_grad(X))
        ref = getattr(gm, method)(torch.from_numpy(X.copy()))
        return isinstance(out, Tensor) and not out.requires_grad and out.grad_fn is None and torch.equal(out, ref)

    return run


def _bic_aic_equal(data: Callable[[], Any]) -> Callable[[], bool]:
    def run() -> bool:
        gm = _fitted()
        return math.isclose(gm.bic(data()), gm.bic(X), rel_tol=1e-12) and math.isclose(
            gm.aic(data()), gm.aic(X), rel_tol=1e-12
        )

    return run


def _diag(v: np.ndarray) -> np.ndarray:
    return np.stack([np.diag(r) for r in v])


_EYE2 = np.stack([np.eye(3)] * 2)
_NOT_PD = np.stack([np.eye(3), -np.eye(3)])
_NOT_SYM = np.stack([np.eye(3), np.eye(3) + np.triu(np.full((3, 3), 0.3), 1)])
_M = np.array([[0.0, 0.0, 0.0], [4.0, 4.0, 4.0]])


def _huge_scale_fits(scale: float, dtype: Any = np.float64) -> Callable[[], bool]:
    """Large but representable X (N·max|X|² below the dtype's largest value) fits as X at scale 1 does, scaled:
    EM is equivariant to the scale when reg_covar is 0 (float32: 1e-4 relative, its round-off over 20 steps)."""

    def run() -> bool:
        x = (X * scale).astype(dtype)
        big = _fit(x, reg_covar=0.0)
        ref = _fit(X.astype(dtype), reg_covar=0.0)
        tol = 1e-10 if dtype == np.float64 else 1e-4
        return _finite(big) and np.allclose(big.means_ / scale, ref.means_, rtol=tol, atol=tol)

    return run


# fmt: off
CASES: list[Case] = [
    # -- X too large for its sums of squares (findings: NaN parameters or a silent wrong answer before) ----------
    Case("X 1e153 array", lambda: _fit(X * 1e153), ValueError, r"X.*too large"),  # finding
    Case("X 1e153 tensor", lambda: _fit(torch.from_numpy(X * 1e153)), ValueError, r"X.*too large"),  # finding
    Case("X 1e153 memmap", lambda: _fit(_memmap(X * 1e153), "online_em"), ValueError, r"X.*too large"),  # finding
    Case("X 1e153 DataLoader", lambda: _fit(_loader(X * 1e153)), ValueError, r"X.*too large"),  # finding
    Case("X 1e153 gd", lambda: _fit(X * 1e153, "gd"), ValueError, r"X.*too large"),  # finding
    Case("X float32 1e18", lambda: _fit((X * 1e18).astype(np.float32)), ValueError,  # finding
         r"X.*too large.*float32.*dtype='float64'"),
    Case("X 1e39 into dtype float32", lambda: _fit(X * 1e39, dtype="float32"), ValueError,  # finding
         r"X.*too large.*float32"),
    Case("X 1e150 fits", _huge_scale_fits(1e150), check=bool),
    Case("X float32 1e16 fits", _huge_scale_fits(1e16, np.float32), check=bool),
    # -- the user's start (findings: NaN means_, or torch's _LinAlgError) ----------------------------------------
    Case("means_init NaN", lambda: _fit(X, means_init=np.array([[np.nan, 0, 0], [4, 4, 4]])), ValueError,
         r"means_init.*NaN"),  # finding
    Case("means_init inf", lambda: _fit(X, means_init=np.array([[np.inf, 0, 0], [4, 4, 4]])), ValueError,
         r"means_init.*inf"),  # finding
    Case("weights_init NaN", lambda: _fit(X, weights_init=[np.nan, 0.5]), ValueError, r"weights_init.*NaN"),  # finding
    Case("weights_init inf", lambda: _fit(X, weights_init=[np.inf, 0.5]), ValueError, r"weights_init.*inf"),
    Case("precisions_init NaN full", lambda: _fit(X, precisions_init=_EYE2 * np.nan), ValueError,
         r"precisions_init.*NaN"),  # finding
    Case("precisions_init inf diag", lambda: _fit(X, covariance_type="diag", precisions_init=np.full((2, 3), np.inf)),
         ValueError, r"precisions_init.*inf"),  # finding
    Case("precisions_init not PD full", lambda: _fit(X, precisions_init=_NOT_PD), ValueError,
         r"precisions_init.*positive.definite"),  # finding
    Case("precisions_init not PD tied", lambda: _fit(X, covariance_type="tied", precisions_init=-np.eye(3)),
         ValueError, r"precisions_init.*positive.definite"),  # finding
    Case("precisions_init not symmetric", lambda: _fit(X, precisions_init=_NOT_SYM), ValueError,
         r"precisions_init.*symmetric"),  # finding
    Case("precisions_init negative diag", lambda: _fit(X, covariance_type="diag", precisions_init=-np.ones((2, 3))),
         ValueError, r"precisions_init.*positive"),  # finding
    Case("precisions_init zero spherical", lambda: _fit(X, covariance_type="spherical", precisions_init=np.zeros(2)),
         ValueError, r"precisions_init.*positive"),  # finding
    Case("means_init not numbers", lambda: _fit(X, means_init="abc"), ValueError, r"means_init.*numbers"),  # finding
    Case("means_init shape", lambda: _fit(X, means_init=np.zeros((3, 3))), ValueError, r"means_init.*shape"),
    Case("means_init width", lambda: _fit(X, means_init=np.zeros((2, 4))), ValueError, r"means_init.*\(2, 3\)"),
    Case("weights_init sum", lambda: _fit(X, weights_init=[0.7, 0.7]), ValueError, r"weights_init.*sum to 1"),
    Case("weights_init shape", lambda: _fit(X, weights_init=[1.0]), ValueError, r"weights_init.*shape"),
    Case("weights_init negative", lambda: _fit(X, weights_init=[1.5, -0.5]), ValueError, r"weights_init.*\[0, 1\]"),
    Case("precisions_init shape", lambda: _fit(X, precisions_init=np.stack([np.eye(3)] * 3)), ValueError,
         r"precisions_init.*shape"),
    Case("all inits given fit", lambda: _fit(X, means_init=_M, weights_init=[0.5, 0.5], precisions_init=_EYE2),
         check=_finite),
    Case("means_init reversed view fit", lambda: _fit(X, means_init=_M[::-1], max_iter=0),  # finding
         check=lambda gm: np.array_equal(gm.means_, _M[::-1])),
    Case("precisions_init diag fit", lambda: _fit(X, covariance_type="diag", precisions_init=np.ones((2, 3))),
         check=_finite),
    Case("precisions_init tied fit", lambda: _fit(X, covariance_type="tied", precisions_init=2 * np.eye(3)),
         check=_finite),
    Case("precisions_init spherical fit", lambda: _fit(X, covariance_type="spherical", precisions_init=[1.0, 2.0]),
         check=_finite),
    # -- complex input (finding: the imaginary part was dropped) ------------------------------------------------
    Case("complex tensor", lambda: _fit(torch.from_numpy(_complex(X))), ValueError, r"X.*complex"),  # finding
    Case("complex memmap", lambda: _fit(_memmap(_complex(X))), ValueError, r"X.*complex"),  # finding
    Case("complex list of batches", lambda: _fit(_batches(_complex(X))), ValueError, r"X.*complex"),  # finding
    Case("complex tensor at predict", lambda: _fitted().predict(torch.from_numpy(_complex(X))), ValueError,
         r"X.*complex"),  # finding
    Case("complex array", lambda: _fit(_complex(X)), ValueError, r"Complex data not supported"),
    Case("complex DataLoader", lambda: _fit(_loader(_complex(X))), ValueError, r"X.*complex"),
    # -- a list of batches (finding: numpy's dim-3 or inhomogeneous-shape error) --------------------------------
    Case("list of batches em", lambda: _fit(_batches(X)), check=_same_fit(lambda: _fit(X))),  # finding
    Case("list of uneven batches em", lambda: _fit(_batches(X, 70)), check=_same_fit(lambda: _fit(X))),  # finding
    Case("list of batches online_em", lambda: _fit(_batches(X), "online_em"), check=_finite),  # finding
    Case("list of batches gd", lambda: _fit(_batches(X), "gd"), check=_finite),  # finding
    Case("list of tensor batches", lambda: _fit([torch.from_numpy(b) for b in _batches(X, 70)]),  # finding
         check=_same_fit(lambda: _fit(X))),
    Case("tuple of batches", lambda: _fit(tuple(_batches(X))), check=_same_fit(lambda: _fit(X))),  # finding
    Case("predict on a list of batches", lambda: _fitted().predict(_batches(X, 70)),  # finding
         check=lambda p: isinstance(p, np.ndarray) and np.array_equal(p, _fitted().predict(X))),
    Case("list mixing batches and rows", lambda: _fit([X[:50], X[50]]), ValueError, r"X.*list.*2-D"),  # finding
    Case("list of batches of two widths", lambda: _fit([X[:60], X4[60:]]), ValueError,  # finding
         r"X has 4 features.*first batch.*3"),
    Case("list of rows fits", lambda: _fit(X.tolist()), check=_identical_fit(lambda: _fit(X))),
    # -- bic/aic on a stream (finding: AttributeError) ----------------------------------------------------------
    Case("bic aic DataLoader", _bic_aic_equal(lambda: _loader(X)), check=bool),  # finding
    Case("bic aic list of batches", _bic_aic_equal(lambda: _batches(X, 70)), check=bool),  # finding
    Case("bic aic list of rows", _bic_aic_equal(lambda: X.tolist()), check=bool),  # finding
    Case("bic aic tensor", _bic_aic_equal(lambda: torch.from_numpy(X)), check=bool),
    Case("bic on an empty stream", lambda: _fitted().bic([X[:0]]), ValueError, r"X.*no samples"),  # finding
    # -- a tensor that requires grad (finding: an autograd error from an out= product) --------------------------
    *[Case(f"requires_grad fit {f}", lambda f=f: _fit(_needs_grad(X), f),  # finding
           check=_identical_fit(lambda f=f: _fit(torch.from_numpy(X), f))) for f in FITTERS],
    Case("requires_grad predict_proba", _no_graph_equal("predict_proba"), check=bool),  # finding
    Case("requires_grad score_samples", _no_graph_equal("score_samples"), check=bool),  # finding
    Case("requires_grad predict", _no_graph_equal("predict"), check=bool),  # finding
    Case("requires_grad partial_fit", lambda: _gm().partial_fit(_needs_grad(X)), check=_finite),  # finding
    Case("requires_grad DataLoader", lambda: _fit(torch.utils.data.DataLoader(_needs_grad(X), batch_size=50)),
         check=_finite),  # finding
    # -- warm_start on data of another width (finding: a torch size mismatch) ------------------------------------
    Case("warm_start wider array", lambda: _warm_refit(X4), ValueError, r"X has 4 features.*warm_start.*3"),  # finding
    Case("warm_start wider tensor", lambda: _warm_refit(torch.from_numpy(X4)), ValueError,  # finding
         r"X has 4 features.*warm_start.*3"),
    Case("warm_start wider DataLoader", lambda: _warm_refit(_loader(X4)), ValueError,  # finding
         r"X has 4 features.*warm_start.*3"),
    Case("warm_start wider list of rows", lambda: _warm_refit(X4.tolist()), ValueError,  # finding
         r"X has 4 features.*warm_start.*3"),
    Case("warm_start failed refit keeps the model", _warm_refit_keeps_model, check=bool),  # finding
    Case("warm_start same width fits", lambda: _warm_refit(_blobs(seed=3)), check=_finite),
    # -- reg_covar dominating the data's variance (finding: 32 nats moved, no warning) ---------------------------
    Case("data at 1e-8 warns", _erroring(UserWarning, lambda: _fit(X * 1e-8)), UserWarning,  # finding
         r"reg_covar=1e-06.*variance"),
    Case("data at 1e-8 warns gd", _erroring(UserWarning, lambda: _fit(X * 1e-8, "gd")), UserWarning,  # finding
         r"reg_covar=1e-06.*variance"),
    Case("data at 1e-8 warns partial_fit", _erroring(UserWarning, lambda: _gm().partial_fit(X * 1e-8)),  # finding
         UserWarning, r"reg_covar=1e-06.*variance"),
    Case("data at 1e-8 with reg_covar 1e-20 fits silently",
         _no_warning(UserWarning, lambda: _fit(X * 1e-8, reg_covar=1e-20), _finite), check=bool),
    Case("data at scale 1 fits silently", _no_warning(UserWarning, lambda: _fit(X), _finite), check=bool),
    Case("constant feature fits without the reg_covar warning",
         _no_warning(UserWarning, lambda: _fit(np.c_[X, np.full(len(X), 3.0)]), _finite), check=bool),
    # -- parameters (findings: NaN parameters, torch's RuntimeError) --------------------------------------------
    Case("reg_covar inf", lambda: _fit(X, reg_covar=np.inf), ValueError, r"reg_covar.*finite"),  # finding
    Case("learning_rate inf", lambda: _fit(X, "gd", learning_rate=np.inf), ValueError,  # finding
         r"learning_rate.*finite"),
    Case("device unknown", lambda: _fit(X, device="banana"), ValueError, r"device.*banana"),  # finding
    Case("reg_covar NaN", lambda: _fit(X, reg_covar=np.nan), ValueError, r"reg_covar"),
    Case("reg_covar negative", lambda: _fit(X, reg_covar=-1.0), ValueError, r"reg_covar"),
    Case("covariance_type unknown", lambda: _fit(X, covariance_type="banana"), ValueError, r"covariance_type"),
    Case("fitter unknown", lambda: _gm("sgd").fit(X), ValueError, r"fitter"),
    Case("n_components 0", lambda: _fit(X, k=0), ValueError, r"n_components"),
    Case("init_params unknown", lambda: _fit(X, init_params="x"), ValueError, r"init_params"),
    Case("tol negative", lambda: _fit(X, tol=-1.0), ValueError, r"tol"),
    Case("optimizer unknown", lambda: _fit(X, "gd", optimizer="lbfgs"), ValueError, r"optimizer"),
    Case("batch_size 0", lambda: _fit(X, batch_size=0), ValueError, r"batch_size"),
    Case("max_iter negative", lambda: _fit(X, max_iter=-1), ValueError, r"max_iter"),
    Case("n_init 0", lambda: _fit(X, n_init=0), ValueError, r"n_init"),
    Case("learning_rate 0", lambda: _fit(X, "gd", learning_rate=0.0), ValueError, r"learning_rate"),
    Case("dtype unknown", lambda: _fit(X, dtype="float16"), ValueError, r"dtype"),
    Case("volume False with em", lambda: _fit(X, volume=False), ValueError, r"volume=False"),
    # -- X's values, shape and kind (clear errors that existed) --------------------------------------------------
    Case("NaN array", lambda: _fit(_with_nan(X)), ValueError, r"NaN"),
    Case("inf tensor", lambda: _fit(torch.from_numpy(_with_nan(X, np.inf))), ValueError, r"X.*inf"),
    Case("-inf memmap", lambda: _fit(_memmap(_with_nan(X, -np.inf))), ValueError, r"X.*inf"),
    Case("NaN DataLoader", lambda: _fit(_loader(_with_nan(X))), ValueError, r"X.*NaN"),
    Case("NaN list of batches", lambda: _fit(_batches(_with_nan(X))), ValueError, r"X.*NaN"),  # finding
    Case("NaN at predict", lambda: _fitted().predict(_with_nan(X)), ValueError, r"NaN"),
    Case("NaN tensor at score_samples", lambda: _fitted().score_samples(torch.from_numpy(_with_nan(X))),
         ValueError, r"X.*NaN"),
    Case("1-D array", lambda: _fit(np.arange(10.0)), ValueError, r"2D"),
    Case("1-D tensor", lambda: _fit(torch.arange(10.0)), ValueError, r"2D"),
    Case("3-D array", lambda: _fit(np.zeros((4, 3, 2))), ValueError, r"dim 3"),
    Case("3-D tensor", lambda: _fit(torch.zeros(4, 3, 2)), ValueError, r"2D"),
    Case("empty array", lambda: _fit(np.zeros((0, 3))), ValueError, r"0 sample"),
    Case("fewer samples than components", lambda: _fit(X[:3], k=5), ValueError, r"n_samples >= n_components"),
    Case("fewer tensor samples than components", lambda: _fit(torch.from_numpy(X[:3]), k=5), ValueError,
         r"n_samples >= n_components"),
    Case("predict wider array", lambda: _fitted().predict(X4), ValueError, r"4 features"),
    Case("predict wider tensor", lambda: _fitted().predict(torch.from_numpy(X4)), ValueError, r"4 features"),
    Case("predict wider DataLoader", lambda: _fitted().predict(_loader(X4)), ValueError, r"4 features"),
    Case("predict before fit", lambda: _gm().predict(X), NotFittedError, r"not fitted"),
    Case("sparse X", lambda: _fit(sparse.csr_matrix(X)), TypeError, r"[Ss]parse"),
    Case("one-shot iterator", lambda: _fit(iter(_batches(X))), ValueError, r"one-shot iterator"),
    Case("generator", lambda: _fit(b for b in _batches(X)), ValueError, r"one-shot iterator"),
    Case("string X", lambda: _fit("abc"), ValueError, r"could not convert string"),
    Case("strings in rows", lambda: _fit([["a", "b"], ["c", "d"]] * 5), ValueError, r"could not convert|string"),
    Case("object batches", lambda: _fit([np.array([["a", "b"]] * 60, dtype=object)] * 2), ValueError,  # finding
         r"X must hold real numbers.*object"),
    Case("sample 0", lambda: _fitted().sample(0), ValueError, r"n_samples"),
    # -- inputs that must keep fitting ---------------------------------------------------------------------------
    *[Case(f"float32 array {f}", lambda f=f: _fit(X.astype(np.float32), f), check=_finite) for f in FITTERS],
    Case("float32 tensor", lambda: _fit(torch.from_numpy(X.astype(np.float32))), check=_finite),
    Case("int array", lambda: _fit(np.round(X * 10).astype(np.int64)), check=_finite),
    Case("int tensor", lambda: _fit(torch.from_numpy(np.round(X * 10).astype(np.int64))),
         check=_same_fit(lambda: _fit(np.round(X * 10)))),
    Case("bool tensor", lambda: _fit(torch.from_numpy(X > 2)), check=_same_fit(lambda: _fit((X > 2).astype(float)))),
    Case("uint8 tensor", lambda: _fit(torch.from_numpy((X * 10 + 50).astype(np.uint8))), check=_finite),
    Case("float16 tensor", lambda: _fit(torch.from_numpy(X.astype(np.float16))), check=_finite),
    *[Case(f"memmap {f}", lambda f=f: _fit(_memmap(X), f), check=_finite) for f in FITTERS],
    Case("memmap equals array em", lambda: _fit(_memmap(X)), check=_same_fit(lambda: _fit(X))),
    *[Case(f"DataLoader {f}", lambda f=f: _fit(_loader(X), f), check=_finite) for f in FITTERS],
    Case("DataLoader equals array em", lambda: _fit(_loader(X)), check=_same_fit(lambda: _fit(X))),
    *[Case(f"tensor {f}", lambda f=f: _fit(torch.from_numpy(X), f), check=_finite) for f in FITTERS],
    Case("tensor predict gives a tensor", lambda: _fitted().predict(torch.from_numpy(X)),
         check=lambda p: isinstance(p, Tensor) and p.shape == (len(X),)),
    Case("DataLoader predict gives a tensor", lambda: _fitted().predict(_loader(X)),
         check=lambda p: isinstance(p, Tensor) and torch.equal(p, torch.from_numpy(_fitted().predict(X)))),
    Case("Fortran-ordered array", lambda: _fit(np.asfortranarray(X)), check=_identical_fit(lambda: _fit(X))),
    Case("non-contiguous tensor", lambda: _fit(torch.from_numpy(np.c_[X, X])[:, ::2]),
         check=_same_fit(lambda: _fit(np.c_[X, X][:, ::2]))),
    *[Case(f"K == N {f}", lambda f=f: _fit(X[:4], f, k=4), check=_finite) for f in FITTERS],
    *[Case(f"one feature {f}", lambda f=f: _fit(X[:, :1], f), check=_finite) for f in FITTERS],
    Case("one feature tensor", lambda: _fit(torch.from_numpy(X[:, :1].copy())), check=_finite),
    Case("partial_fit batches", lambda: _gm().partial_fit(X[:60]).partial_fit(X[60:]), check=_finite),
    Case("list of python floats rows", lambda: _fit([[float(v) for v in r] for r in X]), check=_finite),
]
# fmt: on


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_battery(case: Case) -> None:
    case.check_it()


def test_battery_counts() -> None:
    """The table's size, for the report: clear errors and fits."""
    errors = sum(c.kind == "error" for c in CASES)
    assert errors >= 60 and len(CASES) - errors >= 40, (len(CASES), errors)


@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("pandas"), reason="pandas is not installed in this environment"
)
def test_pandas_dataframe_fits_as_its_array() -> None:
    import pandas as pd

    gm = _fit(pd.DataFrame(X, columns=["a", "b", "c"]))
    np.testing.assert_array_equal(gm.means_, _fit(X).means_)


def test_reg_covar_warning_is_a_named_user_warning() -> None:
    """The warning has its own class, so users can filter it, and says which feature and what to do."""
    from implicit_em.mixture import RegCovarWarning

    assert issubclass(RegCovarWarning, UserWarning)
    with pytest.warns(RegCovarWarning, match=r"feature 0 has variance [\d.]+e-16.*reg_covar"):
        _fit(np.c_[X[:, :1] * 1e-8, X[:, 1:]])


def test_reg_covar_warning_changes_no_number() -> None:
    """Warning is all it does: the fit at 1e-8 equals the fit with the warning filtered out, and sklearn's."""
    from sklearn.mixture import GaussianMixture as SkGaussianMixture

    x = X * 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = _fit(x)
        ref = SkGaussianMixture(2, random_state=0, max_iter=20).fit(x)
    np.testing.assert_allclose(ours.means_, ref.means_, rtol=1e-8, atol=0)
    np.testing.assert_allclose(ours.score(x), ref.score(x), rtol=1e-10)


# -- peak memory of the value checks --------------------------------------------------------------------------


def test_value_check_of_an_array_allocates_little_numpy_memory() -> None:
    """Checking a float64 array's values (finite, not too large) allocates far less than the array: tracemalloc
    sees numpy's allocations; the check reduces without a temporary copy (before: ``torch.isfinite`` built a
    bool mask and an |x| copy, 1.4x the data, which tracemalloc cannot see: the RSS test below does)."""
    x = np.random.RandomState(0).randn(400_000, 3)  # 9.6 MB
    gm = _fitted()
    tracemalloc.start()
    try:
        gm.score(x)  # validates X, then scores it chunk by chunk
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.05 * x.nbytes, peak / x.nbytes


_RSS_SCRIPT = textwrap.dedent(
    """
    import resource, sys, warnings
    import numpy as np
    from implicit_em.mixture import GaussianMixture
    kind = sys.argv[1]
    gm = GaussianMixture(1, max_iter=2, random_state=0).fit(np.random.RandomState(0).randn(100, 16))
    x = np.full((2_000_000, 16), 0.5)  # 256 MB, every page touched
    if kind == "torch":
        import torch
        x = torch.from_numpy(x)
    gm._source(x[:10], reset=False)  # warm-up: lazy imports and first allocations
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gm._source(x, reset=False)  # what predict/score do to X before the E-step: sklearn's checks, then ours
    extra = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    print(extra / x.nbytes)
    """
)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_validating_an_in_memory_array_takes_little_extra_memory(kind: str) -> None:
    """Peak resident memory of validating 256 MB of data (numpy or torch), in a fresh process, before the
    E-step: well under a tenth of the data (before: 1.37x, ``torch.isfinite``'s full-size temporaries, which
    tracemalloc does not see)."""
    src = Path(implicit_em.__file__).resolve().parents[1]  # the tree under test
    out = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, kind],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        check=True,
    )
    assert float(out.stdout.strip().splitlines()[-1]) < 0.1, out.stdout
