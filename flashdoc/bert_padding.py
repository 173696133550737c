"""flash-attn's padding helpers under flash-attn's module name, for code that pairs them with the varlen functions.

    from flashdoc.bert_padding import pad_input, unpad_input   # was: from flash_attn.bert_padding import ...

``unpad_input`` gathers the real tokens of a padded batch, ``(batch, seqlen, ...)``, into the packed layout that
``flash_attn_varlen_func`` takes, with the indices and ``cu_seqlens`` that describe it; ``pad_input`` scatters a
packed result back, zeros at the padding. They are PyTorch gathers and scatters, differentiable, on whatever
device the tensors are. ``unpad_input`` returns the longest length as an int, so it waits for the GPU once, as
flash-attn's does. ``mask_layout`` is the part both the helpers and the transformers integration need: where a
padding mask's tokens are and how long each row is.
"""

import torch
import torch.nn.functional as F

from ._validation import check_int, host_readable

# flash-attn's names; mask_layout is flashdoc's own, shared with the transformers integration
__all__ = ["index_first_axis", "index_put_first_axis", "pad_input", "unpad_input"]


def mask_layout(attention_mask: torch.Tensor) -> tuple:
    """(indices, cu_seqlens, max_seqlen, lengths) of a (batch, seqlen) mask, nonzero at the tokens that count:
    the tokens' positions in the flattened (batch x seqlen) axis (int64), the cumulative lengths (int32,
    ``(batch + 1,)``, from 0), the longest row's length (an int: read from the device) and each row's (int32)."""
    mask = attention_mask.bool()
    lengths = mask.sum(-1, dtype=torch.int32)
    indices = mask.flatten().nonzero().flatten()
    cu_seqlens = F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, int(lengths.max()) if lengths.numel() else 0, lengths


def _check_hidden_states(hidden_states, dims: str, min_dims: int) -> None:
    if not isinstance(hidden_states, torch.Tensor):
        raise TypeError(f"hidden_states must be a torch.Tensor of shape {dims}, got {type(hidden_states).__name__}")
    if hidden_states.dim() < min_dims:
        raise ValueError(f"hidden_states must have shape {dims}, got {tuple(hidden_states.shape)}")


def _check_mask(name: str, mask, hidden_states: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (batch, seqlen), got {type(mask).__name__}")
    if mask.dim() != 2 or tuple(mask.shape) != tuple(hidden_states.shape[:2]):
        raise ValueError(
            f"{name} must have shape (batch, seqlen) = {tuple(hidden_states.shape[:2])}, hidden_states' first two "
            f"dimensions, got {tuple(mask.shape)}"
        )
    if mask.is_floating_point() or mask.is_complex():  # an additive mask (0 and -inf) would read as all tokens
        raise TypeError(
            f"{name} must be bool or integer (nonzero marks a token), got {mask.dtype}; pass {name}.bool() for a "
            "0/1 mask"
        )


def index_first_axis(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The rows ``indices`` of ``tensor``'s first axis: ``tensor[indices]``, differentiable."""
    return tensor.index_select(0, indices)


def index_put_first_axis(values: torch.Tensor, indices: torch.Tensor, first_axis_dim: int) -> torch.Tensor:
    """A tensor of ``first_axis_dim`` rows, zeros but for ``values`` at rows ``indices``, differentiable."""
    out = values.new_zeros(first_axis_dim, *values.shape[1:])
    return out.index_copy(0, indices.long(), values)  # int32 indices too, as flash-attn takes them


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor = None):
    """The tokens of a padded batch, packed one sequence after another.

    Args:
        hidden_states: (batch, seqlen, ...).
        attention_mask: (batch, seqlen), bool or integer, nonzero at real tokens (flash-attn also takes a float 0/1
            mask; here a float mask is refused, since an additive one of 0 and -inf would count every token).
        unused_mask: (batch, seqlen), optional, nonzero at tokens allocated to a sequence but not used yet; they
            are packed with their sequence (``cu_seqlens`` and ``max_seqlen`` count them) and left out of
            ``seqused``, as in flash-attn.

    Returns:
        hidden_states: (total, ...), the packed tokens.
        indices: (total,), their positions in the flattened (batch x seqlen) axis.
        cu_seqlens: (batch + 1,) int32, the cumulative lengths.
        max_seqlen: int, the longest length.
        seqused: (batch,) int32, each sequence's count of real tokens.
    """
    _check_hidden_states(hidden_states, "(batch, seqlen, ...)", 2)
    _check_mask("attention_mask", attention_mask, hidden_states)
    real = attention_mask.bool()
    if unused_mask is None:
        indices, cu_seqlens, max_seqlen, seqused = mask_layout(real)
    else:
        _check_mask("unused_mask", unused_mask, hidden_states)
        indices, cu_seqlens, max_seqlen, _ = mask_layout(real | unused_mask.bool())
        seqused = real.sum(-1, dtype=torch.int32)
    packed = index_first_axis(hidden_states.flatten(0, 1), indices)
    return packed, indices, cu_seqlens, max_seqlen, seqused


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """``unpad_input``'s inverse: packed ``hidden_states`` (total, ...) back to (batch, seqlen, ...), zeros at the
    positions ``indices`` does not name. Indices outside the batch are refused on CPU tensors, where reading them
    costs nothing; on a GPU they stop the scatter with a device-side assert, as in flash-attn."""
    _check_hidden_states(hidden_states, "(total, ...)", 1)
    if not isinstance(indices, torch.Tensor) or indices.dim() != 1 or indices.is_floating_point():
        raise TypeError(
            "indices must be a 1-D integer torch.Tensor (the one unpad_input returned), got "
            + (
                f"shape {tuple(indices.shape)}, {indices.dtype}"
                if isinstance(indices, torch.Tensor)
                else type(indices).__name__
            )
        )
    check_int(batch, "batch")
    check_int(seqlen, "seqlen")
    if hidden_states.shape[0] != indices.shape[0]:
        raise ValueError(
            f"hidden_states has {hidden_states.shape[0]} tokens but indices names {indices.shape[0]}; pass the "
            "indices unpad_input returned with these tokens"
        )
    if indices.numel() and host_readable(indices):
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= batch * seqlen:
            raise ValueError(
                f"indices run from {low} to {high} but batch x seqlen = {batch} x {seqlen} holds positions 0 to "
                f"{batch * seqlen - 1}; pass the batch and seqlen of the mask unpad_input was given"
            )
    out = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return out.view(batch, seqlen, *hidden_states.shape[1:])
