"""Public API: ``flash_attn_func`` (flash-attn layout) and ``scaled_dot_product_attention`` (PyTorch layout).

Three layers, as in flash-attn's ``flash_attn_interface.py``:

1. two ``torch.library`` custom ops, ``flashdoc::fwd`` and ``flashdoc::bwd``, each with a fake implementation
   that only allocates outputs, so ``torch.compile(fullgraph=True)`` traces through them without a graph break;
2. autograd: a ``torch.autograd.Function`` that calls the forward op and, in its backward, the backward op;
3. friendly public functions that validate, default the scale and pick the causal alignment.
"""

from typing import Optional

import torch

from ._validation import refuse_dropout, validate_attention_inputs, validate_flash_attn_options
from .kernels import INTERPRET
from .kernels.backward import attn_bwd
from .kernels.forward import attn_fwd

__all__ = ["flash_attn_func", "scaled_dot_product_attention"]


def _like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor with t's shape, dtype, device and (when t is dense) its memory layout, so that
    an SDPA-layout input gets an SDPA-layout output. Used by the real ops and their fakes alike."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    return torch.empty_like(t)


def _unit_last_stride(t: torch.Tensor) -> torch.Tensor:
    """The kernels read head_dim with stride 1, and their tensor descriptors (TMA on Hopper) need a 16-byte
    aligned start and 16-byte multiples for the other strides. Any other layout is copied once here; views of
    a packed QKV projection and SDPA's transposes pass as they are."""
    size = t.element_size()
    aligned = t.data_ptr() % 16 == 0 and all((st * size) % 16 == 0 for st in t.stride()[:-1])
    return t if t.stride(-1) == 1 and t.stride(1) != 0 and aligned else t.contiguous()


def _cpu_upcast(*ts):
    # Triton's interpreter computes bf16 arithmetic and tl.dot wrongly (error ~1e10 on a 16x16 product);
    # on the CPU, run bf16 through fp32 and cast the results back. fp16 and fp32 are exact there.
    if INTERPRET and ts[0].dtype == torch.bfloat16:
        return tuple(None if t is None else t.float() for t in ts), True
    return ts, False


# --8<-- [start:custom_ops]
# Defined with torch.library.define/impl rather than the @custom_op decorator, whose Python wrappers (and
# register_autograd) add host work to every call: on short sequences that work decides the speed.
torch.library.define("flashdoc::fwd", "(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, "
                     "bool bottom_right) -> (Tensor, Tensor)")
torch.library.define("flashdoc::bwd", "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
                     "Tensor? dlse, float softmax_scale, bool causal, bool bottom_right, bool deterministic) -> "
                     "(Tensor, Tensor, Tensor)")


@torch.library.impl("flashdoc::fwd", ("cuda", "cpu"))
def _flash_attn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                        bottom_right: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (B, Sq, H, D), k and v: (B, Sk, Hk, D) -> out (B, Sq, H, D), lse (B, H, Sq) fp32, natural log."""
    out = _like(q)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device, dtype=torch.float32)
    (q_, k_, v_), upcast = _cpu_upcast(_unit_last_stride(q), _unit_last_stride(k), _unit_last_stride(v))
    out_ = torch.empty_like(out, dtype=torch.float32) if upcast else out
    attn_fwd(q_, k_, v_, out_, lse, softmax_scale, causal, bottom_right)
    if upcast:
        out.copy_(out_)
    return out, lse


@torch.library.register_fake("flashdoc::fwd")
def _(q, k, v, softmax_scale, causal, bottom_right):
    return _like(q), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.impl("flashdoc::bwd", ("cuda", "cpu"))
def _flash_attn_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         out: torch.Tensor, lse: torch.Tensor, dlse: Optional[torch.Tensor], softmax_scale: float,
                         causal: bool, bottom_right: bool, deterministic: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of the forward op: dq, dk, dv with the shapes (and layouts) of q, k, v."""
    dq, dk, dv = _like(q), _like(k), _like(v)
    tensors = [_unit_last_stride(t) for t in (dout, q, k, v, out)]
    (dout_, q_, k_, v_, out_), upcast = _cpu_upcast(*tensors)
    dlse = None if dlse is None else dlse.float().contiguous()
    if upcast:
        dq_, dk_, dv_ = (torch.empty_like(t, dtype=torch.float32) for t in (dq, dk, dv))
    else:
        dq_, dk_, dv_ = dq, dk, dv
    attn_bwd(dout_, q_, k_, v_, out_, lse.contiguous(), dlse, dq_, dk_, dv_, softmax_scale, causal, bottom_right,
             deterministic=deterministic)
    if upcast:
        dq.copy_(dq_), dk.copy_(dk_), dv.copy_(dv_)
    return dq, dk, dv


@torch.library.register_fake("flashdoc::bwd")
def _(dout, q, k, v, out, lse, dlse, softmax_scale, causal, bottom_right, deterministic):
    return _like(q), _like(k), _like(v)
# --8<-- [end:custom_ops]


# --8<-- [start:autograd]
_fwd_op, _bwd_op = torch.ops.flashdoc.fwd.default, torch.ops.flashdoc.bwd.default


class _FlashAttention(torch.autograd.Function):
    """Autograd around the two ops, outside them (cheaper per call than an autograd kernel inside the op)."""

    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, bottom_right, deterministic):
        out, lse = _fwd_op(q, k, v, softmax_scale, causal, bottom_right)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.softmax_scale, ctx.causal, ctx.bottom_right = softmax_scale, causal, bottom_right
        ctx.deterministic = deterministic
        ctx.set_materialize_grads(False)  # an unused LSE gets dlse = None, not a tensor of zeros
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward: a clear error instead of a wrong one
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:  # only the LSE was used
            dout = torch.zeros_like(out)
        # dlse is None unless the caller used the returned LSE in its loss; then it is folded into delta.
        dq, dk, dv = _bwd_op(dout, q, k, v, out, lse, dlse, ctx.softmax_scale, ctx.causal, ctx.bottom_right,
                             ctx.deterministic)
        return dq, dk, dv, None, None, None, None


def _attention(q, k, v, softmax_scale: float, causal: bool, bottom_right: bool, deterministic: bool):
    """The forward op, through autograd only when a gradient will be needed."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _FlashAttention.apply(q, k, v, softmax_scale, causal, bottom_right, deterministic)
    return _fwd_op(q, k, v, softmax_scale, causal, bottom_right)
# --8<-- [end:autograd]


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, deterministic=False, return_lse=False, *,
                    dropout_p=0.0, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, return_attn_probs=False):
    """Exact attention, flash-attn layout: ``softmax(q @ k^T * softmax_scale) @ v`` without the N x N matrix.

    The arguments after v start as in FlashAttention-3's ``flash_attn_func`` (softmax_scale, then causal);
    flash-attn 2 puts dropout_p first, so calls written for it should pass them by keyword. Its other options
    are accepted as keywords at their defaults and refused otherwise.

    Args:
        q: (batch, seqlen_q, nheads, headdim), float16, bfloat16 or float32, on CUDA (or CPU, interpreted).
        k: (batch, seqlen_k, nheads_k, headdim); nheads must be a multiple of nheads_k (GQA/MQA).
        v: (batch, seqlen_k, nheads_k, headdim).
        softmax_scale: multiplies q @ k^T before the softmax; default headdim ** -0.5.
        causal: mask keys after the query's position. The mask is aligned to the bottom-right corner of the
            (seqlen_q, seqlen_k) score matrix, as flash-attn >= 2.1: query i sees key j when
            j <= i + seqlen_k - seqlen_q. Rows that see no key output zeros (and get zero gradients).
            For seqlen_q = 2, seqlen_k = 5 (1 = kept)::

                1 1 1 1 0
                1 1 1 1 1

            and for seqlen_q = 5, seqlen_k = 2::

                0 0
                0 0
                0 0
                1 0
                1 1
        deterministic: as in flash-attn, False (the default) lets the backward run a fused kernel that adds
            dq's parts from different key blocks in HBM, where that is faster (on Hopper: head dim 64, causal
            calls from 2,048 tokens), so dq may differ in its last bits from run to run; True, or
            ``torch.use_deterministic_algorithms(True)``, gives bit-identical gradients on every run.
        return_lse: also return the log-sum-exp of each row of scaled scores.
        dropout_p, window_size, softcap, alibi_slopes, return_attn_probs: flash-attn 2's options, accepted only
            at their defaults (0.0, (-1, -1), 0.0, None, False): no dropout, no sliding window, no score
            capping, no ALiBi bias; ``return_lse`` gives the log-sum-exp instead of the probabilities.

    Returns:
        out: (batch, seqlen_q, nheads, headdim), q's dtype; and, with ``return_lse``, lse: (batch, nheads,
        seqlen_q), float32, natural log (``-inf`` for rows that see no key).

    Inputs may be non-contiguous (e.g. views of a packed QKV projection); a tensor whose last dimension does
    not have stride 1 is copied once with ``.contiguous()``.
    """
    validate_attention_inputs(q, k, v, layout="bshd", softmax_scale=softmax_scale, causal=causal,
                              scale_name="softmax_scale", causal_name="causal")
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    validate_flash_attn_options(dropout_p=dropout_p, window_size=window_size, softcap=softcap,
                                alibi_slopes=alibi_slopes, return_attn_probs=return_attn_probs)
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    out, lse = _attention(q, k, v, float(softmax_scale), causal, True, deterministic)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` (PyTorch layout), exact and fused.

    Args:
        query: (batch, heads, seqlen_q, head_dim), float16, bfloat16 or float32.
        key: (batch, heads_kv, seqlen_k, head_dim); heads_kv == heads unless ``enable_gqa=True``, then heads
            must be a multiple of heads_kv.
        value: (batch, heads_kv, seqlen_k, head_dim).
        attn_mask: not supported yet (must be None): use ``is_causal=True`` for causal masking, or
            ``torch.nn.functional.scaled_dot_product_attention`` for arbitrary masks.
        dropout_p: not supported yet (must be 0.0): use torch's SDPA for attention dropout.
        is_causal: mask aligned to the top-left corner, as PyTorch: query i sees key j when j <= i.
            For seqlen_q = 2, seqlen_k = 5 (1 = kept)::

                1 0 0 0 0
                1 1 0 0 0

            and for seqlen_q = 5, seqlen_k = 2 (every row sees key 0)::

                1 0
                1 1
                1 1
                1 1
                1 1
        scale: multiplies query @ key^T before the softmax; default head_dim ** -0.5.
        enable_gqa: allow heads_kv < heads (grouped-query attention).

    Returns:
        (batch, heads, seqlen_q, head_dim), query's dtype.

    As with PyTorch's flash backend, the backward may add dq's parts in an order that varies from run to run
    (``flash_attn_func``'s ``deterministic``); ``torch.use_deterministic_algorithms(True)`` makes it bit-identical.
    """
    if attn_mask is not None:
        raise ValueError("attn_mask is not supported yet by flashdoc.scaled_dot_product_attention; use "
                         "is_causal=True for a causal mask, or torch.nn.functional.scaled_dot_product_attention "
                         "for arbitrary masks")
    refuse_dropout(dropout_p)
    validate_attention_inputs(query, key, value, layout="bhsd", softmax_scale=scale, causal=is_causal,
                              scale_name="scale", causal_name="is_causal", names=("query", "key", "value"))
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool, got {type(enable_gqa).__name__}")
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError(f"query has {query.shape[1]} heads and key {key.shape[1]}; pass enable_gqa=True for "
                         "grouped-query attention")
    if scale is None:
        scale = query.shape[-1] ** -0.5
    # (B, H, S, D) -> (B, S, H, D) views: the kernels take strides, so nothing is copied
    out, _ = _attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), float(scale),
                        is_causal, False, deterministic=False)
    return out.transpose(1, 2)
