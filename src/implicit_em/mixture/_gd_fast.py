r"""gd's step in float32 without autograd or a per-batch solve: the fast path of ``_gd.gd_step``.

The same algorithm as :func:`~implicit_em.mixture._gd.accumulate_gradient` (the gradient of the mean NLL with
respect to the score matrix is −φRᵀ/B, the E-step statistics, carried to the parameters), computed with less
work per step:

- **no standardisation of the batch.** The parameters live in standardised coordinates u = S⁻¹(x − shift)
  (S = C, diag(s) or s·I, see ``_gd.feature_scale``). With L = S⁻¹ the component in x-coordinates has
  Λₓ = Lᵀ Λᵤ L and mₓ = S mᵤ (x − shift = S u), so φ(x − shift)ᵀ Aₓ = φ(u)ᵀ Aᵤ: the batch goes into the
  features as it is, and the chain rule maps Λ's and m's gradients back (dΛᵤ = L dΛₓ Lᵀ, dmᵤ = Sᵀ dmₓ):
  K products of D×D matrices per step instead of a triangular solve of every row.
- **the fused E-step of** :mod:`~implicit_em.mixture._fused`: circulant quadratic features into a reused
  buffer, the two GEMMs with ``out=``; the score matrix is permuted to the circulant order and the statistics
  back (:func:`~implicit_em.mixture._fused.circulant_order`).
- **an analytic backward** (:func:`score_matrix_vjp`) from the score matrix to the parameters of
  :class:`~implicit_em.distances.GaussianComponents` and the logits, in float64, instead of an autograd graph
  built and walked every step (equal to autograd to 1e-10 in float64: tests/test_mixture_gd_speed.py).

The score matrix and the gradients are formed in float64 from the float32 parameters and cast: the E-step
GEMMs run in float32 as EM's do. The objective returned is the same as the old step's (the log-density of u;
``gd_step`` subtracts log|det S|).
"""

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn

from implicit_em.distances import GaussianComponents
from implicit_em.mixture._fused import SUB_CHUNK, _Workspace, circulant_order

__all__ = ["FastStep"]


def _dense_whitening(c: GaussianComponents) -> Tensor:
    """W of the components in float64 as dense lower-triangular matrices: (K, D, D), or (D, D) for "tied"."""
    w = c.whitening().detach().double()
    if c.covariance_type == "diag":
        return torch.diag_embed(w)
    if c.covariance_type == "spherical":
        return w[:, None, None] * torch.eye(c.n_features, dtype=torch.float64, device=w.device)
    return w


def _offsets(c: GaussianComponents, logits: Tensor, volume: bool) -> Float[Tensor, " k"]:
    """log π_j (+ log|det W_j| − D/2 log 2π with the volume term), float64."""
    offsets = torch.log_softmax(logits.detach().double(), dim=0)
    if not volume:
        return offsets
    return offsets + (c.log_det().detach().double() - 0.5 * c.n_features * math.log(2 * math.pi))


def _standardising_maps(scale: float | Tensor, d: int, device: torch.device) -> tuple[Tensor | None, Tensor | None]:
    """(L = S⁻¹, S) as (D, D) float64 matrices for a scalar, per-feature or triangular scale (None, None: 1)."""
    if not isinstance(scale, Tensor):
        if scale == 1.0:
            return None, None
        s = torch.full((d,), float(scale), dtype=torch.float64, device=device)
    else:
        s = scale.to(dtype=torch.float64, device=device)
    if s.dim() == 2:
        eye = torch.eye(d, dtype=torch.float64, device=device)
        return torch.linalg.solve_triangular(s, eye, upper=False), s
    return torch.diag(1.0 / s), torch.diag(s)


def _score_layout(d: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Where each column of Aᵀ in the circulant order comes from in Z = [vec Λ (D²), Λm (D), const] and its
    coefficient: −Λ_ab for the pair a < b (x_a x_b appears twice in xᵀΛx), −½Λ_aa, then 1, 1."""
    rows, cols = torch.triu_indices(d, d)
    q = rows.numel()
    src = torch.cat([rows * d + cols, d * d + torch.arange(d + 1)])  # quadratic_features' order
    coef = torch.cat([torch.where(rows == cols, -0.5, -1.0).double(), torch.ones(d + 1, dtype=torch.float64)])
    order = circulant_order(d)
    assert order.numel() == q + d + 1
    return src[order].to(device), coef[order].to(device)


class FastStep:
    r"""Buffers and fixed matrices of gd's float32 step for one fit (or one ``partial_fit`` step); ``dtype`` is
    the compute dtype of the E-step (the data's), whatever the parameters' (the estimator keeps them in float64).

    :meth:`score_matrix_t` forms Aₓᵀ (K, P) for the current parameters (float64 arithmetic, cast to the
    compute dtype); :meth:`statistics` is the E-step of a batch in original coordinates (float64 (K, P)
    statistics in the circulant order, and Σ log p); :meth:`set_gradient` turns statistics summed over
    ``rows`` rows into every parameter's ``.grad`` (the mean NLL's gradient), ready for the optimiser.

    The backward, written out: with G the gradient of Λₓ (the quadratic columns give −g for a < b and −½g on
    the diagonal; Λm and −½mᵀΛm give g_lin mᵀ − ½ g_const m mᵀ), dmₓ = Λₓ(g_lin − g_const mₓ) and dmᵤ = Sᵀdmₓ;
    Λₓ = WₓᵀWₓ with Wₓ = Wᵤ L gives dWₓ = Wₓ(G + Gᵀ) and dWᵤ = dWₓ Lᵀ; W's diagonal is exp(log_diag)
    (exp(log_scale) I for "spherical"), and the log-determinant (volume term) and log_softmax take the
    constant column's gradient. Works in any dtype (float64 is what the tests compare with autograd).
    """

    def __init__(
        self,
        components: GaussianComponents,
        logits: nn.Parameter,
        shift: Tensor,
        scale: float | Tensor,
        rows: int,
        dtype: torch.dtype,
    ) -> None:
        self.components, self.logits = components, logits
        d, k = components.n_features, components.n_components
        device = components.means.device
        self.ws = _Workspace(max(1, min(rows, SUB_CHUNK)), d, k, dtype, device)
        self.shift = shift.to(dtype=dtype, device=device)
        self.to_u, self.from_u = _standardising_maps(scale, d, device)
        #: G = S⁻¹S⁻ᵀ: tr(Pₓ) = ‖Wᵤ S⁻¹‖²_F, so reg_covar's penalty adds reg·π_j·W_j G to dW (None: G = I)
        self.gram = None if self.to_u is None else self.to_u @ self.to_u.mT
        self.src, self.coef = _score_layout(d, device)
        self._w = self._wx = self._lam = self._mx = torch.empty(0)

    def score_matrix_t(self, volume: bool) -> Float[Tensor, "k p"]:
        """Aₓᵀ (K, P) in the circulant order and the compute dtype: φ(x − shift)ᵀ Aₓ = log π − e(u)."""
        c = self.components
        k, d = c.n_components, c.n_features
        self._w = w = _dense_whitening(c)
        self._wx = wx = w if self.to_u is None else w @ self.to_u  # Wₓ = Wᵤ L
        self._lam = lam = wx.mT @ wx
        m = c.means.detach().double()
        self._mx = m_x = m if self.from_u is None else m @ self.from_u.mT  # mₓ = S mᵤ (rows)
        lam_k = lam.expand(k, d, d)
        lin = (lam_k @ m_x[:, :, None])[:, :, 0]  # (K, D)
        const = _offsets(c, self.logits, volume) - 0.5 * (lin * m_x).sum(-1)
        z = torch.cat([lam_k.reshape(k, d * d), lin, const[:, None]], dim=1)  # (K, D² + D + 1)
        return z.index_select(1, self.src).mul_(self.coef).to(self.ws.stats.dtype)

    @torch.no_grad()
    def statistics(
        self, x: Float[Tensor, "b d"], a_t: Float[Tensor, "k p"], weights: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """R φ(x − shift) summed over the rows of x, (K, P) float64 in the circulant order, and Σ log p(u).

        One thread of Python with torch's intra-op threads: splitting a 4096-row batch between two Python
        threads as ``_fused.fused_pass_summary`` does was measured no faster here (0.88 against 0.75 ms at
        D = K = 16, 2 threads), the hand-off costing what the skinny GEMMs gain."""
        x = x.to(a_t.dtype)
        k, p = a_t.shape
        s = torch.zeros(k, p, dtype=torch.float64, device=a_t.device)
        loglik = torch.zeros((), dtype=torch.float64, device=a_t.device)
        self.ws.add(x, a_t, self.shift, s, loglik, weights)  # weights: each row's statistics and log p scaled
        return s, loglik

    @torch.no_grad()
    def set_gradient(self, s: Float[Tensor, "k p"], rows: float, volume: bool, reg_covar: float = 0.0) -> None:
        """``.grad`` of every parameter: the gradient of the mean NLL of ``rows`` rows whose summed statistics
        (circulant order, :meth:`statistics` under the last :meth:`score_matrix_t`) are ``s``, plus (when
        ``reg_covar`` > 0 and ``volume``) that of reg_covar's penalty ½·reg·Σ_j sg(π_j)·tr(P_j), the gradient
        of ``_gd._reg_covar_backward`` added to dW before it is split into the parameters (no separate pass
        over them)."""
        c = self.components
        pi = torch.softmax(self.logits.detach().double(), dim=0)
        k, d = c.n_components, c.n_features
        g_z = torch.zeros(k, d * d + d + 1, dtype=torch.float64, device=s.device)
        g_z.index_add_(1, self.src, s * self.coef, alpha=-1.0 / rows)  # dL/dZ: dL/dAᵀ = −s / rows
        g_lin, g_const, m_x = g_z[:, d * d : -1], g_z[:, -1], self._mx
        g_lam = g_z[:, : d * d].view(k, d, d)
        outer = m_x[:, :, None] * m_x[:, None, :]  # (K, D, D)
        g_lam += g_lin[:, :, None] * m_x[:, None, :] - (0.5 * g_const[:, None, None]) * outer
        g_mx = (self._lam.expand(k, d, d) @ (g_lin - g_const[:, None] * m_x)[:, :, None])[:, :, 0]
        grads = {"means": g_mx if self.from_u is None else g_mx @ self.from_u}
        sym = g_lam + g_lam.mT
        if c.covariance_type == "tied":
            sym = sym.sum(0)
        g_w = self._wx @ sym  # dWₓ
        if self.to_u is not None:
            g_w = g_w @ self.to_u.mT  # dWᵤ
        if reg_covar > 0 and volume:  # + reg·π_j·W_j G (tied: Σπ = 1); only W's diagonal counts for diag, spherical
            pen = self._w if self.gram is None else self._w @ self.gram
            g_w = g_w + (reg_covar if c.covariance_type == "tied" else reg_covar * pi[:, None, None]) * pen
        g_w_diag = torch.diagonal(g_w, dim1=-2, dim2=-1) * torch.diagonal(self._w, dim1=-2, dim2=-1)  # d log W_dd
        g_off = g_const if volume else None
        if c.covariance_type in ("full", "tied"):
            grads["lower"] = g_w.tril(-1)
            tied = c.covariance_type == "tied"
            grads["log_diag"] = g_w_diag if g_off is None else g_w_diag + (g_off.sum() if tied else g_off[:, None])
        elif c.covariance_type == "diag":
            grads["log_diag"] = g_w_diag if g_off is None else g_w_diag + g_off[:, None]
        else:
            g_scale = g_w_diag.sum(-1)
            grads["log_scale"] = g_scale if g_off is None else g_scale + d * g_off
        for name, p in c.named_parameters():
            p.grad = grads[name].to(p.dtype)
        self.logits.grad = (g_const - pi * g_const.sum()).to(self.logits.dtype)
