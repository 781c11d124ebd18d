"""Small sequence models for the wind tunnels: a causal transformer, two parameter-matched MLPs, an LSTM.

Every model maps tokens (B, T) to logits (B, T, C), one row of C class logits per position; the training loop
scores the positions a task asks for. The transformer's attention goes through
:func:`implicit_em.probes.attention`, the library's explicit (probe-able) softmax attention.

The MLP sees the same tokens but one at a time (token and position embedding, then a per-position MLP): it has
no access to context, so its best possible predictor is the no-context one, and its error is the "no-context
floor" of arXiv 2512.22471. Its width is chosen so its parameter count is within 10% of the transformer's.

The prefix MLP is the context-seeing control: at position t it reads the whole prefix, flattened (one-hot tokens of
positions 0..t, zero-padded to ``max_len``), through a plain MLP: context without attention, and without any
softmax inside the network. It is parameter-matched the same way.
"""

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from implicit_em.probes import attention

__all__ = [
    "Block",
    "CausalSelfAttention",
    "CausalTransformer",
    "LSTMModel",
    "PrefixMLP",
    "TokenMLP",
    "count_parameters",
    "matched_lstm",
    "matched_mlp",
    "matched_prefix_mlp",
]


def _init_weights(module: nn.Module) -> None:
    """GPT-2 style: normal(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention computed by :func:`implicit_em.probes.attention`.

    The forward splits ``qkv(x)`` into heads, calls :meth:`attend` and merges the heads through ``proj``; a
    variant with another attention function (the audit's sigmoid and gradient-surgery arms) overrides
    :meth:`attend` only.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))  # (B, H, T, d/H)
        y = self.attend(q, k, v)  # (B, H, T, d/H)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Causal softmax attention of the heads: (B, H, T, d/H) each -> (B, H, T, d/H)."""
        return attention(q, k, v, is_causal=True)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CausalTransformer(nn.Module):
    """Small causal transformer: token + learned position embeddings, pre-norm blocks, final LayerNorm, head.

    Args:
        vocab_size: number of input tokens.
        n_classes: C, the output logits per position.
        max_len: longest sequence (learned positions).
        n_layers, n_heads, d_model: depth, heads, width.
        d_ff: hidden width of the block MLPs (default 4 d_model).
    """

    def __init__(
        self,
        vocab_size: int,
        n_classes: int,
        max_len: int,
        n_layers: int = 2,
        n_heads: int = 4,
        d_model: int = 64,
        d_ff: int | None = None,
    ) -> None:
        super().__init__()
        self.max_len = max_len
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)
        self.apply(_init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2 n_layers)
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len {self.max_len}")
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # (B, T, C)


class TokenMLP(nn.Module):
    """Per-position MLP over token + position embeddings: sees the tokens, one at a time (no context).

    Args:
        vocab_size, n_classes, max_len: as for :class:`CausalTransformer`.
        d_model: embedding width; hidden: width of the ``n_hidden`` hidden layers.
    """

    def __init__(
        self,
        vocab_size: int,
        n_classes: int,
        max_len: int,
        d_model: int = 64,
        hidden: int = 256,
        n_hidden: int = 2,
    ) -> None:
        super().__init__()
        self.max_len = max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layers: list[nn.Module] = []
        width = d_model
        for _ in range(n_hidden):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)
        self.apply(_init_weights)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len {self.max_len}")
        return self.net(self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device)))  # (B, T, C)


class PrefixMLP(nn.Module):
    r"""MLP over the flattened, zero-padded one-hot prefix: sees the context, has no attention.

    At position t the input is :math:`x_t = [\mathrm{onehot}(s_0), \ldots, \mathrm{onehot}(s_t), 0, \ldots, 0]`,
    of length ``max_len`` x ``vocab_size``, and the first layer is a linear map of it,

    .. math::  h_t = \mathrm{GELU}\Big(b + \sum_{u \le t} W_u[s_u]\Big),

    with :math:`W_u` the block of the weight matrix that reads slot u. Computed as a per-slot embedding and a
    cumulative sum over positions (exactly the flattened linear layer, in O(T) per position instead of O(T^2)).
    Then ``n_hidden - 1`` more hidden layers and a linear head. Causal by construction.

    Args:
        vocab_size, n_classes, max_len: as for :class:`CausalTransformer`.
        hidden: width of the ``n_hidden`` hidden layers.
    """

    def __init__(self, vocab_size: int, n_classes: int, max_len: int, hidden: int = 64, n_hidden: int = 2) -> None:
        super().__init__()
        self.vocab_size, self.max_len, self.hidden = vocab_size, max_len, hidden
        self.slot = nn.Embedding(max_len * vocab_size, hidden)  # W_u[s]: row u * vocab_size + s
        self.bias = nn.Parameter(torch.zeros(hidden))
        layers: list[nn.Module] = [nn.GELU()]
        for _ in range(n_hidden - 1):
            layers += [nn.Linear(hidden, hidden), nn.GELU()]
        layers.append(nn.Linear(hidden, n_classes))
        self.net = nn.Sequential(*layers)
        self.apply(_init_weights)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len {self.max_len}")
        rows = torch.arange(t, device=tokens.device) * self.vocab_size + tokens  # (B, T): slot u reads token s_u
        first = self.slot(rows).cumsum(dim=1) + self.bias  # (B, T, hidden): sum over the prefix u <= t
        return self.net(first)  # (B, T, C)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, max_len={self.max_len}, hidden={self.hidden}"


class LSTMModel(nn.Module):
    """Token embedding, a stacked LSTM, a linear head."""

    def __init__(
        self, vocab_size: int, n_classes: int, d_model: int = 64, hidden: int = 128, n_layers: int = 1
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.lstm = nn.LSTM(d_model, hidden, num_layers=n_layers, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        y, _ = self.lstm(self.tok(tokens))  # (B, T, hidden)
        return self.head(y)  # (B, T, C)


def _closest_width(count: Callable[[int], int], target: int, upper: int = 1 << 14) -> int:
    """The width w in 1..upper whose parameter count ``count(w)`` (increasing in w) is closest to target."""
    lo, hi = 1, upper
    while lo < hi:  # first w with count(w) >= target
        mid = (lo + hi) // 2
        if count(mid) < target:
            lo = mid + 1
        else:
            hi = mid
    return min((w for w in (lo - 1, lo) if w >= 1), key=lambda w: abs(count(w) - target))


def matched_mlp(
    target_params: int, vocab_size: int, n_classes: int, max_len: int, d_model: int = 64, n_hidden: int = 2
) -> TokenMLP:
    """A :class:`TokenMLP` whose parameter count is as close as possible to ``target_params``."""

    def count(w: int) -> int:
        emb = (vocab_size + max_len) * d_model
        body = (d_model + 1) * w + (n_hidden - 1) * (w + 1) * w + (w + 1) * n_classes
        return emb + body

    return TokenMLP(vocab_size, n_classes, max_len, d_model, _closest_width(count, target_params), n_hidden)


def matched_prefix_mlp(
    target_params: int, vocab_size: int, n_classes: int, max_len: int, n_hidden: int = 2
) -> PrefixMLP:
    """A :class:`PrefixMLP` whose parameter count is as close as possible to ``target_params``."""

    def count(w: int) -> int:
        return (max_len * vocab_size + 1) * w + (n_hidden - 1) * (w + 1) * w + (w + 1) * n_classes

    return PrefixMLP(vocab_size, n_classes, max_len, _closest_width(count, target_params), n_hidden)


def matched_lstm(
    target_params: int, vocab_size: int, n_classes: int, d_model: int = 64, n_layers: int = 1
) -> LSTMModel:
    """An :class:`LSTMModel` whose parameter count is as close as possible to ``target_params``."""

    def count(h: int) -> int:
        first = 4 * h * (d_model + h + 2)
        rest = (n_layers - 1) * 4 * h * (2 * h + 2)
        return vocab_size * d_model + first + rest + (h + 1) * n_classes

    return LSTMModel(vocab_size, n_classes, d_model, _closest_width(count, target_params), n_layers)
