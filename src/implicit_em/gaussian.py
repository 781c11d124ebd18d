r"""The Gaussian of paper §3.4 in one place: covariance types, parameter shapes, and the conversions between
covariances, precisions and their Cholesky factors.

Component j has mean :math:`\mu_j`, covariance :math:`\Sigma_j` and precision :math:`\Lambda_j = \Sigma_j^{-1}`.
Following scikit-learn, the precision is stored through its upper-triangular Cholesky factor :math:`U_j`,

.. math::  \Lambda_j = U_j U_j^\top, \qquad W_j = U_j^\top, \qquad z_j = W_j (x - \mu_j),
           \qquad \Sigma_j = (W_j^\top W_j)^{-1},

where :math:`W_j` is the library's (lower-triangular) whitening. Every such parameter (covariances, precisions,
U, W) has one shape per ``covariance_type`` (sklearn's names), :func:`parameter_shape`:

- ``"full"``: (K, D, D), one matrix per component;
- ``"tied"``: (D, D), one matrix shared by all components;
- ``"diag"``: (K, D), the diagonal of each matrix;
- ``"spherical"``: (K,), one scalar per component (the matrix is that scalar times I).

These are the module-level helpers of sklearn's ``sklearn/mixture/_gaussian_mixture.py``
(``_compute_precision_cholesky``, ``_compute_precision_cholesky_from_precisions``, ``_compute_log_det_cholesky``)
in torch. The energies built on them are :func:`implicit_em.distances.gaussian_energies`; the mixture engine is
:mod:`implicit_em.mixture`. Outputs follow the input's dtype and device. An unknown ``covariance_type`` raises
``ValueError``.
"""

import warnings
from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor

from implicit_em._checks import check_finite, check_floating

__all__ = [
    "COVARIANCE_TYPES",
    "CovarianceType",
    "OnSingular",
    "Shaped",
    "check_covariance_type",
    "covariances_from_precisions_cholesky",
    "full_matrices",
    "full_precisions",
    "log_det",
    "parameter_shape",
    "precisions",
    "precisions_cholesky",
    "precisions_cholesky_from_precisions",
]

CovarianceType = Literal["full", "tied", "diag", "spherical"]
COVARIANCE_TYPES: tuple[str, ...] = ("full", "tied", "diag", "spherical")
OnSingular = Literal["raise", "ridge"]

#: A parameter in the shape of its covariance type: full (K, D, D), tied (D, D), diag (K, D), spherical (K,).
Shaped = Float[Tensor, "k d d"] | Float[Tensor, "d d"] | Float[Tensor, "k d"] | Float[Tensor, " k"]


def check_covariance_type(covariance_type: str) -> None:
    """Raise ``ValueError`` unless ``covariance_type`` is one of :data:`COVARIANCE_TYPES`."""
    if covariance_type not in COVARIANCE_TYPES:
        raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {covariance_type!r}")


def parameter_shape(covariance_type: str, n_components: int, n_features: int) -> tuple[int, ...]:
    """The shape of a covariance, precision, precision Cholesky factor or whitening of this type.

    full (K, D, D), tied (D, D), diag (K, D), spherical (K,), for K = ``n_components``, D = ``n_features``.
    """
    check_covariance_type(covariance_type)
    k, d = n_components, n_features
    return {"full": (k, d, d), "tied": (d, d), "diag": (k, d), "spherical": (k,)}[covariance_type]


def precisions_cholesky(covariances: Shaped, covariance_type: str, on_singular: OnSingular = "raise") -> Shaped:
    r"""Precision Cholesky factors U from covariances (sklearn's ``_compute_precision_cholesky``).

    .. math::  \Sigma = L L^\top, \qquad U = L^{-\top}, \qquad \Lambda = \Sigma^{-1} = U U^\top

    for full and tied (U upper-triangular, from a triangular solve, never a general inverse), and
    :math:`U = 1/\sqrt{\sigma^2}` elementwise for diag and spherical.

    Args:
        covariances: in the shape of ``covariance_type`` (:func:`parameter_shape`).
        covariance_type: one of :data:`COVARIANCE_TYPES`.
        on_singular: what happens to a covariance that is not numerically positive definite.
            ``"raise"`` (for user input): ``ValueError`` naming the components; the covariances are first
            checked to be floating point, finite (when value checks are on), square, and for diag and
            spherical positive. ``"ridge"`` (the fitters' M-step, where a collapsing component must not stop
            the fit): add a ridge to the diagonal, starting at 1e-10·max|diag Σ| and growing tenfold, until the
            Cholesky factorisation succeeds, with a ``RuntimeWarning`` for each ridge; no other checks.
    Returns:
        U, in the shape of ``covariances``.
    """
    check_covariance_type(covariance_type)
    if on_singular not in ("raise", "ridge"):
        raise ValueError(f"on_singular must be 'raise' or 'ridge', got {on_singular!r}")
    if on_singular == "raise":
        check_floating("covariances", covariances)
        check_finite("covariances", covariances)
    if covariance_type in ("diag", "spherical"):
        if on_singular == "raise" and not bool((covariances > 0).all()):
            raise ValueError("variances must be > 0 (degenerate covariance); add a ridge such as reg_covar")
        return covariances.rsqrt()
    eye = torch.eye(covariances.shape[-1], dtype=covariances.dtype, device=covariances.device)
    if on_singular == "raise":
        chol = _cholesky_or_raise(covariances, covariance_type)
    else:
        chol, info = torch.linalg.cholesky_ex(covariances)
        ridge = 1e-10 * torch.diagonal(covariances, dim1=-2, dim2=-1).abs().amax().clamp(min=1e-12)
        while bool((info > 0).any()):
            warnings.warn(
                f"covariance not positive definite; adding {float(ridge):.3g} to its diagonal "
                "(increase reg_covar to avoid this)",
                RuntimeWarning,
                stacklevel=3,  # our caller's caller: the fitter that called _stats.from_summaries
            )
            covariances = covariances + ridge * eye
            ridge = ridge * 10
            chol, info = torch.linalg.cholesky_ex(covariances)
    inv = torch.linalg.solve_triangular(chol, eye.expand_as(chol), upper=False)  # L⁻¹, lower-triangular
    return torch.triu(inv.mT).contiguous()


def _cholesky_or_raise(covariances: Tensor, covariance_type: str) -> Tensor:
    """L with Σ = L Lᵀ, or ``ValueError`` naming the components whose Σ is not positive definite."""
    if covariances.shape[-1] != covariances.shape[-2]:
        raise ValueError(f"covariances must be square matrices, got {tuple(covariances.shape)}")
    chol, info = torch.linalg.cholesky_ex(covariances)
    if bool((info != 0).any()):
        bad = torch.nonzero(info.reshape(-1)).flatten().tolist()
        raise ValueError(
            f"covariance {'' if covariance_type == 'tied' else f'of component(s) {bad} '}is not positive "
            "definite (degenerate covariance); add a ridge such as reg_covar"
        )
    return chol


def covariances_from_precisions_cholesky(precisions_cholesky: Shaped, covariance_type: str) -> Shaped:
    r"""Covariances from precision Cholesky factors, the inverse of :func:`precisions_cholesky`.

    .. math::  \Sigma = (U U^\top)^{-1} = U^{-\top} U^{-1}

    with :math:`U^{-1}` from a triangular solve (full, tied); :math:`\sigma^2 = 1/U^2` (diag, spherical).
    Returns the covariances in the shape of ``precisions_cholesky``.
    """
    check_covariance_type(covariance_type)
    u = precisions_cholesky
    if covariance_type in ("diag", "spherical"):
        return 1.0 / u**2
    eye = torch.eye(u.shape[-1], dtype=u.dtype, device=u.device)
    u_inv = torch.linalg.solve_triangular(u, eye.expand_as(u), upper=True)  # U⁻¹
    return u_inv.mT @ u_inv


def precisions_cholesky_from_precisions(precisions: Shaped, covariance_type: str) -> Shaped:
    r"""Upper-triangular U with :math:`\Lambda = U U^\top` (sklearn's ``_compute_precision_cholesky_from_precisions``).

    With J the exchange matrix (reversal of rows or columns), :math:`J \Lambda J = L L^\top` gives
    :math:`U = J L J`, upper-triangular: a Cholesky factorisation of the flipped matrix, flipped back
    (full, tied). :math:`U = \sqrt{\Lambda}` elementwise (diag, spherical).
    """
    check_covariance_type(covariance_type)
    if covariance_type in ("diag", "spherical"):
        return torch.sqrt(precisions)
    flipped = torch.flip(precisions, dims=(-2, -1))
    chol = torch.linalg.cholesky(flipped)
    return torch.flip(chol, dims=(-2, -1))


def precisions(precisions_cholesky: Shaped, covariance_type: str) -> Shaped:
    r"""Precisions :math:`\Lambda = U U^\top = W^\top W` (full, tied) or :math:`U^2` (diag, spherical),
    sklearn's ``precisions_``, in the shape of ``precisions_cholesky``."""
    check_covariance_type(covariance_type)
    u = precisions_cholesky
    return u @ u.mT if covariance_type in ("full", "tied") else u**2


def full_matrices(matrices: Shaped, covariance_type: str, n_components: int, n_features: int) -> Float[Tensor, "k d d"]:
    """Any parameter of this type (covariances or precisions) as K dense D×D matrices, (K, D, D).

    full: returned as it is; tied: the one matrix expanded (a view, no copy); diag: ``diag_embed``;
    spherical: the scalar times I.
    """
    check_covariance_type(covariance_type)
    if covariance_type == "full":
        return matrices
    if covariance_type == "tied":
        return matrices.expand(n_components, n_features, n_features)
    if covariance_type == "diag":
        return torch.diag_embed(matrices)
    return matrices[:, None, None] * torch.eye(n_features, dtype=matrices.dtype, device=matrices.device)


def full_precisions(
    precisions_cholesky: Shaped, covariance_type: str, n_components: int, n_features: int
) -> Float[Tensor, "k d d"]:
    r""":math:`\Lambda_j = U_j U_j^\top` as (K, D, D) dense matrices for any covariance type."""
    return full_matrices(precisions(precisions_cholesky, covariance_type), covariance_type, n_components, n_features)


def log_det(
    factor: Shaped, covariance_type: str, n_features: int, *, triangular: bool = False
) -> Float[Tensor, " k"] | Float[Tensor, ""]:
    r"""log|det F_j| of a whitening :math:`W_j` or a precision Cholesky factor :math:`U_j = W_j^\top`.

    .. math::  \log|\det F| = \sum_i \log|F_{ii}| \quad \text{(F triangular or diagonal)}, \qquad
               \log|\det (f I_D)| = D \log|f| \quad \text{(spherical)}

    Since :math:`\det U = \det U^\top`, a whitening and its precision Cholesky factor have the same value, and
    :math:`\log \mathcal N(x; \mu, \Sigma)` contains :math:`+\log|\det W| = -\tfrac12 \log\det\Sigma` (the
    factor one half of sklearn's ``_compute_log_det_cholesky`` is already in the square root of U).

    Args:
        factor: W or U in the shape of ``covariance_type``.
        covariance_type: one of :data:`COVARIANCE_TYPES`.
        n_features: D (the spherical case needs it).
        triangular: full and tied only. True: F is triangular (a Cholesky factor, or the whitening of
            :class:`~implicit_em.distances.GaussianComponents`), so the sum of log-diagonals is O(D).
            False (default): F is any invertible matrix, via :func:`torch.linalg.slogdet` (O(D³)).
    Returns:
        (K,), or a 0-dim tensor for tied (one factor shared by all components).
    """
    check_covariance_type(covariance_type)
    if covariance_type in ("full", "tied"):
        if not triangular:
            return torch.linalg.slogdet(factor).logabsdet
        return torch.diagonal(factor, dim1=-2, dim2=-1).abs().log().sum(dim=-1)
    if covariance_type == "diag":
        return factor.abs().log().sum(dim=-1)
    return n_features * factor.abs().log()
