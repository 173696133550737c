"""flashdoc.bert_padding: flash-attn's padding helpers. unpad_input packs a padded batch as flash_attn_varlen_func
takes it and pad_input puts it back, both differentiable; unused tokens are packed but not counted as used; bad
masks get errors that name them. The round trip through the varlen kernels gives each sequence's own attention."""

import pytest
import torch
from attention_oracle import DEVICE, attention_math

import flashdoc
from flashdoc.bert_padding import index_first_axis, index_put_first_axis, mask_layout, pad_input, unpad_input


def _left_and_right_padded():
    """Lengths 3, 0, 5 and 2 in rows of 5: right padding, an empty row, a full row, left padding."""
    return torch.tensor(
        [[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1]], dtype=torch.int64, device=DEVICE
    )


def test_mask_layout_names_each_token_and_length():
    indices, cu_seqlens, max_seqlen, lengths = mask_layout(_left_and_right_padded())
    assert indices.tolist() == [0, 1, 2, 10, 11, 12, 13, 14, 18, 19]
    assert cu_seqlens.tolist() == [0, 3, 3, 8, 10] and cu_seqlens.dtype == torch.int32
    assert max_seqlen == 5 and isinstance(max_seqlen, int)
    assert lengths.tolist() == [3, 0, 5, 2] and lengths.dtype == torch.int32


def test_unpad_then_pad_is_the_identity_on_tokens_and_zero_on_padding():
    mask = _left_and_right_padded()
    hidden = torch.randn(4, 5, 3, 2, device=DEVICE, requires_grad=True)
    packed, indices, cu_seqlens, max_seqlen, seqused = unpad_input(hidden, mask)
    assert packed.shape == (10, 3, 2) and max_seqlen == 5
    assert seqused.tolist() == [3, 0, 5, 2] and cu_seqlens.tolist() == [0, 3, 3, 8, 10]
    back = pad_input(packed, indices, 4, 5)
    keep = mask.bool()[:, :, None, None]
    torch.testing.assert_close(back, torch.where(keep, hidden, 0.0), rtol=0, atol=0)
    back.sum().backward()  # gradients reach the real tokens only
    torch.testing.assert_close(hidden.grad, keep.expand_as(hidden).float(), rtol=0, atol=0)


def test_unused_tokens_are_packed_but_not_used():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]], device=DEVICE)
    unused = torch.tensor([[0, 0, 1, 0], [0, 1, 1, 0]], device=DEVICE)
    packed, indices, cu_seqlens, max_seqlen, seqused = unpad_input(torch.randn(2, 4, 8, device=DEVICE), mask, unused)
    assert indices.tolist() == [0, 1, 2, 4, 5, 6]
    assert cu_seqlens.tolist() == [0, 3, 6] and max_seqlen == 3 and seqused.tolist() == [2, 1]


def test_any_nonzero_value_marks_a_token_and_an_empty_batch_has_none():
    mask = torch.tensor([[2, 0, -1], [0, 1, 0]], device=DEVICE)  # counted as tokens: nonzero, not summed
    _, indices, cu_seqlens, max_seqlen, seqused = unpad_input(torch.randn(2, 3, 4, device=DEVICE), mask)
    assert indices.tolist() == [0, 2, 4] and cu_seqlens.tolist() == [0, 2, 3] and seqused.tolist() == [2, 1]
    packed, indices, cu_seqlens, max_seqlen, _ = unpad_input(
        torch.randn(0, 3, 4, device=DEVICE), torch.zeros(0, 3, dtype=torch.bool, device=DEVICE)
    )
    assert packed.shape == (0, 4) and cu_seqlens.tolist() == [0] and max_seqlen == 0


def test_pad_input_takes_int32_indices_as_flash_attn_does():
    values = torch.randn(2, 3, device=DEVICE)
    out = pad_input(values, torch.tensor([3, 0], dtype=torch.int32, device=DEVICE), 2, 2)
    torch.testing.assert_close(out.reshape(4, 3)[[3, 0]], values, rtol=0, atol=0)


def test_index_helpers_are_each_others_inverse():
    values = torch.randn(3, 4, device=DEVICE)
    indices = torch.tensor([5, 0, 2], device=DEVICE)
    spread = index_put_first_axis(values, indices, 6)
    assert spread[[1, 3, 4]].abs().sum() == 0
    torch.testing.assert_close(index_first_axis(spread, indices), values, rtol=0, atol=0)


def test_varlen_round_trip_attends_each_sequence_alone():
    """The usual pairing: unpad q, k and v, one varlen call, pad the output back; each sequence's rows equal
    attention over that sequence alone, and the padding rows are zeros."""
    torch.manual_seed(0)
    mask = _left_and_right_padded()
    q, k, v = (torch.randn(4, 5, 2, 16, device=DEVICE) for _ in range(3))
    (q_p, indices, cu, max_len, _), k_p, v_p = unpad_input(q, mask), unpad_input(k, mask)[0], unpad_input(v, mask)[0]
    out = pad_input(
        flashdoc.flash_attn_varlen_func(q_p, k_p, v_p, cu, cu, max_len, max_len, causal=True), indices, 4, 5
    )
    for b, row in enumerate(mask.bool()):
        if row.any():
            want, _ = attention_math(q[b : b + 1, row], k[b : b + 1, row], v[b : b + 1, row], 16**-0.5, causal=True)
            torch.testing.assert_close(out[b, row], want[0].float(), rtol=1e-5, atol=1e-5)
        assert out[b, ~row].abs().sum() == 0


@pytest.mark.parametrize(
    "make_mask,error,match",
    [
        (
            lambda: torch.ones(4, 5, device=DEVICE),
            TypeError,
            r"attention_mask must be bool or integer .* pass attention_mask.bool\(\) for a 0/1 mask",
        ),
        (
            lambda: torch.ones(4, 5, 1, dtype=torch.bool, device=DEVICE),
            ValueError,
            r"attention_mask must have shape \(batch, seqlen\) = \(4, 5\)",
        ),
        (lambda: [[1] * 5] * 4, TypeError, r"attention_mask must be a torch.Tensor"),
    ],
)
def test_unpad_input_refuses_a_bad_mask(make_mask, error, match):
    with pytest.raises(error, match=match):
        unpad_input(torch.zeros(4, 5, 8, device=DEVICE), make_mask())


def test_pad_input_refuses_indices_of_another_length():
    with pytest.raises(ValueError, match="hidden_states has 3 tokens but indices names 2"):
        pad_input(torch.zeros(3, 8, device=DEVICE), torch.tensor([0, 1], device=DEVICE), 1, 4)
