"""The probes' attention core shared by the adapters: one repeat_kv, one choice of path, no import cycle."""

import pytest
import torch
from torch import Tensor

from implicit_em.probes.attention import repeat_kv


def _sdpa_gqa_reference(x: Tensor, n_rep: int) -> Tensor:
    """The F.sdpa adapter's former repeat (probes/_torch_mha.py at b4f3b95): repeat_interleave on dim -3."""
    return x.repeat_interleave(n_rep, dim=-3)


def _hf_reference(x: Tensor, n_rep: int) -> Tensor:
    """The Hugging Face adapter's former repeat_kv (probes/_hf.py at b4f3b95), 4-D only."""
    if n_rep == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


@pytest.mark.parametrize("n_rep", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(3, 2, 5, 4), (2, 5, 3), (2, 3, 2, 4, 5)])
def test_repeat_kv_equals_both_former_repeats_with_their_gradients(shape: tuple[int, ...], n_rep: int) -> None:
    references = [_sdpa_gqa_reference] + ([_hf_reference] if len(shape) == 4 else [])
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    got = repeat_kv(x, n_rep)
    upstream = torch.randn_like(got)
    (grad,) = torch.autograd.grad(got, x, upstream)
    for reference in references:
        expected = reference(x, n_rep)
        (expected_grad,) = torch.autograd.grad(expected, x, upstream)
        assert torch.equal(got, expected) and torch.equal(grad, expected_grad), reference.__name__


def test_repeat_kv_groups_consecutive_query_heads() -> None:
    """Closed form: with 2 key/value heads and 3 query heads per group, query head h reads kv head h // 3."""
    x = torch.arange(2.0).view(1, 2, 1, 1)  # (B, Hkv, S, D) = (1, 2, 1, 1)
    assert repeat_kv(x, 3).flatten().tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert repeat_kv(x, 1) is x
