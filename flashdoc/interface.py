"""Public API: ``flash_attn_func`` (flash-attn layout), ``flash_attn_varlen_func`` (packed sequences of different
lengths) and ``scaled_dot_product_attention`` (PyTorch layout).

Three layers, as in flash-attn's ``flash_attn_interface.py``:

1. ``torch.library`` custom ops, ``flashdoc::fwd`` and ``flashdoc::bwd`` (``varlen_fwd`` and ``varlen_bwd`` for
   packed sequences), each with a fake implementation
   that only allocates outputs, so ``torch.compile(fullgraph=True)`` traces through them without a graph break;
2. autograd: a ``torch.autograd.Function`` that calls the forward op and, in its backward, the backward op;
3. friendly public functions that validate, default the scale and pick the causal alignment.
"""

import functools
from typing import Optional

import torch

from ._validation import (
    FLASH_NAMES,
    SDPA_NAMES,
    Names,
    check_bool,
    validate_attention_inputs,
    validate_dropout,
    validate_variant_options,
    validate_varlen_inputs,
)
from .kernels import INTERPRET
from .kernels.backward import attn_bwd
from .kernels.decode import decode_attention, fits_one_tile
from .kernels.forward import attn_fwd
from .kernels.launch import descriptor_ready, distinct
from .kernels.mask import Variant, draw_rng
from .kernels.varlen import varlen_bwd, varlen_fwd

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "scaled_dot_product_attention"]


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
    # (an expanded view along the sequence, stride 0, is copied as well, so a descriptor never sees a zero stride)
    if t.stride(1) != 0 and descriptor_ready(t):
        return t
    return t.contiguous()


def _cpu_upcast(*ts):
    # Triton's interpreter computes bf16 arithmetic and tl.dot wrongly (error ~1e10 on a 16x16 product);
    # on the CPU, run bf16 through fp32 and cast the results back. fp16 and fp32 are exact there.
    if INTERPRET and ts[0].dtype == torch.bfloat16:
        return tuple(None if t is None else t.float() for t in ts), True
    return ts, False


def _pad_head_dim(*ts):
    """Tensors whose head_dim is not a multiple of 8, zero-padded to one (as flash-attn does): the kernels'
    tensor descriptors need 16-byte rows. Zero columns add nothing to q.k and give zero output columns."""
    pad = -ts[0].shape[-1] % 8
    return ts if pad == 0 else tuple(None if t is None else torch.nn.functional.pad(t, (0, pad)) for t in ts)


def _variant(window_size_left, window_size_right, softcap, alibi_slopes, dropout_p, rng_state) -> Variant:
    return Variant((window_size_left, window_size_right), softcap, alibi_slopes, dropout_p, rng_state)


def _forward_into(out, q, k, v, run) -> None:
    """``run(q_, k_, v_, out_)`` on the kernels' form of the inputs (head dim padded to a multiple of 8, unit last
    stride, bf16 upcast on the CPU), with its output landing in ``out``: written in place where the form is out's
    own, else computed in a copy and sliced and cast back."""
    q_, k_, v_ = _pad_head_dim(q, k, v)
    (q_, k_, v_), upcast = _cpu_upcast(_unit_last_stride(q_), _unit_last_stride(k_), _unit_last_stride(v_))
    out_ = out if q_.shape[-1] == q.shape[-1] and not upcast else torch.empty_like(q_)
    run(q_, k_, v_, out_)
    if out_ is not out:
        out.copy_(out_[..., : q.shape[-1]])


def _backward_into(grads, dout, q, k, v, out, run) -> None:
    """``run(dout_, q_, k_, v_, out_, dq_, dk_, dv_)`` on the kernels' form of the tensors (as ``_forward_into``),
    with the gradients landing in ``grads`` = (dq, dk, dv)."""
    tensors = [_unit_last_stride(t) for t in _pad_head_dim(dout, q, k, v, out)]
    (dout_, q_, k_, v_, out_), upcast = _cpu_upcast(*tensors)
    copied = upcast or q_.shape[-1] != q.shape[-1]  # computed in a padded or fp32 copy, then sliced and cast back
    grads_ = tuple(torch.empty_like(t) for t in (q_, k_, v_)) if copied else grads
    run(dout_, q_, k_, v_, out_, *grads_)
    if copied:
        for g, g_ in zip(grads, grads_):
            g.copy_(g_[..., : q.shape[-1]])


# --8<-- [start:custom_ops]
# Defined with torch.library.define/impl rather than the @custom_op decorator, whose Python wrappers (and
# register_autograd) add host work to every call: on short sequences that work decides the speed. Every option is
# a flat typed argument (a window is two ints), so torch.compile(fullgraph=True) traces through the ops; dropout's
# (seed, offset) tensor is drawn outside them (``mask.draw_rng``) and given to both.
_VARIANT_SCHEMA = (
    "int window_size_left=-1, int window_size_right=-1, float softcap=0.0, "
    "Tensor? alibi_slopes=None, float dropout_p=0.0, Tensor? rng_state=None"
)
torch.library.define(
    "flashdoc::fwd",
    "(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, "
    f"bool bottom_right, {_VARIANT_SCHEMA}) -> (Tensor, Tensor)",
)
torch.library.define(
    "flashdoc::bwd",
    "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor? dlse, float softmax_scale, bool causal, bool bottom_right, bool deterministic, "
    f"{_VARIANT_SCHEMA}) -> (Tensor, Tensor, Tensor)",
)


@torch.library.impl("flashdoc::fwd", ("cuda", "cpu"))
def _flash_attn_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    window_size_left: int = -1,
    window_size_right: int = -1,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    rng_state: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (B, Sq, H, D), k and v: (B, Sk, Hk, D) -> out (B, Sq, H, D), lse (B, H, Sq) fp32, natural log."""
    out = _like(q)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device, dtype=torch.float32)
    variant = _variant(window_size_left, window_size_right, softcap, alibi_slopes, dropout_p, rng_state)
    if _is_decode_step(q, k, causal, bottom_right, variant):

        def run(q_, k_, v_, out_):
            decode_attention(
                q_,
                k_,
                v_,
                out_,
                lse,
                cache_seqlens=None,
                cache_seqlen_const=k_.shape[1],  # k and v as a full cache: each sequence holds all its keys
                seqlen_new=0,
                cache_batch_idx=None,
                block_table=None,
                softmax_scale=softmax_scale,
                causal=causal,
                window_size=tuple(variant.window_size),
                softcap=softcap,
                alibi_slopes=alibi_slopes,
                num_splits=0,
            )

    else:

        def run(q_, k_, v_, out_):
            attn_fwd(q_, k_, v_, out_, lse, softmax_scale, causal, bottom_right, variant=variant)

    _forward_into(out, q, k, v, run)
    return out, lse


def _is_decode_step(q, k, causal: bool, bottom_right: bool, variant: Variant) -> bool:
    """Whether a forward is a decode step: a few queries whose rows fit one tile per KV head, as a Hugging Face
    model's layers pass while generating. Those run on the split-KV kernel, as flash-attn 2's forward splits the
    keys there: the training kernel gives each (batch, head) one program of mostly empty query rows, too few to
    fill the GPU, and reads each KV head once per query head. The split kernel has no dropout (nor has
    flash-attn's), and it aligns masks bottom-right only."""
    top_left_mask = not bottom_right and (causal or tuple(variant.window_size) != (-1, -1))
    return variant.dropout_p == 0.0 and not top_left_mask and fits_one_tile(q.shape[2], k.shape[2], q.shape[1])


@torch.library.register_fake("flashdoc::fwd")
def _(q, k, v, softmax_scale, causal, bottom_right, *variant, **variant_kwargs):
    return _like(q), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.impl("flashdoc::bwd", ("cuda", "cpu"))
def _flash_attn_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dlse: Optional[torch.Tensor],
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    deterministic: bool,
    window_size_left: int = -1,
    window_size_right: int = -1,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    rng_state: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of the forward op: dq, dk, dv with the shapes (and layouts) of q, k, v."""
    dq, dk, dv = _like(q), _like(k), _like(v)
    dlse = None if dlse is None else dlse.float().contiguous()
    variant = _variant(window_size_left, window_size_right, softcap, alibi_slopes, dropout_p, rng_state)

    def run(dout_, q_, k_, v_, out_, dq_, dk_, dv_):
        attn_bwd(
            dout_,
            q_,
            k_,
            v_,
            out_,
            lse.contiguous(),
            dlse,
            dq_,
            dk_,
            dv_,
            softmax_scale,
            causal,
            bottom_right,
            deterministic=deterministic,
            variant=variant,
        )

    _backward_into((dq, dk, dv), dout, q, k, v, out, run)
    return dq, dk, dv


@torch.library.register_fake("flashdoc::bwd")
def _(dout, q, k, v, out, lse, dlse, softmax_scale, causal, bottom_right, deterministic, *variant, **variant_kwargs):
    return _like(q), _like(k), _like(v)


# --8<-- [end:custom_ops]


def raise_when_differentiated(message: bytes, tensors: tuple) -> tuple:
    """``tensors`` (None kept) as results whose backward raises ``message``: for values with no derivative, so
    that a backward reaching them fails by name instead of leaving gradients silently empty (the mechanism
    ``once_differentiable`` uses, with our message)."""
    error = torch._C._functions.DelayedError(message, len(tensors))
    return error(*(None if t is None else t.detach().requires_grad_() for t in tensors))


def first_order_only(backward):
    """An autograd.Function's backward that has no derivative of its own. Under ``create_graph=True`` the
    gradients it returns would otherwise be constants to autograd, and a loss built from them (a gradient
    penalty, say) would silently miss their second-order term; instead they raise when differentiated. Unlike
    ``once_differentiable``, this counts the saved inputs too, which are what a gradient penalty differentiates
    through."""

    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with torch.no_grad():
            grads = backward(ctx, *grad_outputs)
        if not torch.is_grad_enabled():  # a plain backward: nothing will differentiate these
            return grads
        tensors = (*grad_outputs, *ctx.saved_tensors)
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            return grads
        return raise_when_differentiated(
            b"flashdoc's attention has no second derivative: these gradients were taken with create_graph=True "
            b"and are being differentiated again. Use torch.nn.functional.scaled_dot_product_attention for that.",
            grads,
        )

    return wrapper


# --8<-- [start:autograd]
_fwd_op, _bwd_op = torch.ops.flashdoc.fwd.default, torch.ops.flashdoc.bwd.default


class _FlashAttention(torch.autograd.Function):
    """Autograd around the two ops, outside them (cheaper per call than an autograd kernel inside the op)."""

    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, bottom_right, deterministic, variant):
        out, lse = _fwd_op(q, k, v, softmax_scale, causal, bottom_right, *variant)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.softmax_scale, ctx.causal, ctx.bottom_right = softmax_scale, causal, bottom_right
        ctx.deterministic, ctx.variant = deterministic, variant  # dropout's rng: the backward's mask is the same
        ctx.set_materialize_grads(False)  # an unused LSE gets dlse = None, not a tensor of zeros
        return out, lse

    @staticmethod
    @first_order_only  # no double backward: a clear error instead of a silently missing term
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:  # only the LSE was used
            dout = torch.zeros_like(out)
        # dlse is None unless the caller used the returned LSE in its loss; then it is folded into delta.
        dq, dk, dv = _bwd_op(
            dout,
            q,
            k,
            v,
            out,
            lse,
            dlse,
            ctx.softmax_scale,
            ctx.causal,
            ctx.bottom_right,
            ctx.deterministic,
            *ctx.variant,
        )
        return dq, dk, dv, None, None, None, None, None


_PLAIN = (-1, -1, 0.0, None, 0.0, None)  # the ops' variant arguments for plain attention


def _variant_args(q, window_size, softcap, alibi_slopes, dropout_p) -> tuple:
    """The ops' flat variant arguments for a call (dropout's rng drawn here, outside the ops)."""
    if tuple(window_size) == (-1, -1) and softcap == 0.0 and alibi_slopes is None and dropout_p == 0.0:
        return _PLAIN
    rng = draw_rng(q.device) if dropout_p > 0.0 else None
    return (int(window_size[0]), int(window_size[1]), float(softcap), alibi_slopes, float(dropout_p), rng)


def _attention(
    q,
    k,
    v,
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    deterministic: bool,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    dropout_p=0.0,
):
    """The forward op, through autograd only when a gradient will be needed."""
    variant = _variant_args(q, window_size, softcap, alibi_slopes, dropout_p)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # distinct: torch.compile cannot trace a Function given one tensor twice, as in flash_attn_func(x, x, x)
        q, k, v = distinct((q, k, v))
        return _FlashAttention.apply(q, k, v, softmax_scale, causal, bottom_right, deterministic, variant)
    return _fwd_op(q, k, v, softmax_scale, causal, bottom_right, *variant)


# --8<-- [end:autograd]


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_lse=False,
):
    """Exact attention, flash-attn layout: ``softmax(q @ k^T * softmax_scale) @ v`` without the N x N matrix.

    The arguments, their order and their meaning are flash-attn 2's ``flash_attn_func``.

    Args:
        q: (batch, seqlen_q, nheads, headdim), float16, bfloat16 or float32, on CUDA (or CPU, interpreted).
            headdim: 1 to 256 (not a multiple of 8: zero-padded internally, as flash-attn does).
        k: (batch, seqlen_k, nheads_k, headdim); nheads must be a multiple of nheads_k (GQA/MQA).
        v: (batch, seqlen_k, nheads_k, headdim).
        dropout_p: probability of dropping each attention weight, in [0, 1); kept weights are scaled by
            1 / (1 - dropout_p). The mask comes from a counter-based random stream (Philox) seeded from torch's
            default generator for q's device, so ``torch.manual_seed`` reproduces a run; the backward
            regenerates it instead of storing it. As in flash-attn, pass 0.0 for evaluation.
        softmax_scale: multiplies q @ k^T before the softmax; default headdim ** -0.5.
        causal: mask keys after the query's position. The mask is aligned to the bottom-right corner of the
            (seqlen_q, seqlen_k) score matrix, as flash-attn >= 2.1: query i sees key j when
            j <= i + seqlen_k - seqlen_q. Rows that see no key output zeros (and get zero gradients).
            For seqlen_q = 2, seqlen_k = 5 (1 = kept):

                1 1 1 1 0
                1 1 1 1 1

            and for seqlen_q = 5, seqlen_k = 2:

                0 0
                0 0
                0 0
                1 0
                1 1
        window_size: (left, right): sliding-window (local) attention, aligned like ``causal``: query i sees
            key j when i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right; -1 means
            unbounded on that side, and so is a side at least seqlen_k wide, as in flash-attn; causal=True sets
            right = 0. A window costs in proportion to its width: key blocks outside every row's window are
            skipped.
        softcap: if > 0, scores are capped after scaling: ``softcap * tanh(score / softcap)`` (Gemma 2, Grok).
        alibi_slopes: (nheads,) or (batch, nheads), float32, on q's device: adds
            ``-slope * |i + seqlen_k - seqlen_q - j|`` to the score of query i and key j (after softcap). (With
            causal=True flash-attn's kernel adds ``slope * j`` instead, which differs by a constant per row:
            the same output, and a log-sum-exp shifted by ``slope * (i + seqlen_k - seqlen_q)``; flashdoc's is
            the log-sum-exp of the scores as stated here.)
        deterministic: as in flash-attn, False (the default) lets the backward run a fused kernel that adds
            dq's parts from different key blocks in HBM, where that is faster (on Hopper, fp16/bf16 at head dim
            64 without a window, softcap, ALiBi or dropout: non-causal calls, and causal calls whose query and
            key lengths both reach 2,048), so dq
            may differ in its last bits from run to run; True, or ``torch.use_deterministic_algorithms(True)``,
            gives bit-identical gradients on every run.
        return_attn_probs: as flash-attn, also return the log-sum-exp and the attention probabilities; these are
            never stored (that is the point of FlashAttention), so the third element is always None:
            ``(out, lse, None)``.
        return_lse: (keyword) also return the log-sum-exp: ``(out, lse)``.

    Returns:
        out: (batch, seqlen_q, nheads, headdim), q's dtype; with ``return_lse``, (out, lse); with
            ``return_attn_probs``, (out, lse, None).
        lse: (batch, nheads, seqlen_q), float32, natural log of the softmax denominator of the (capped, biased)
            scores, before dropout (``-inf`` for rows that see no key).

    Inputs may be non-contiguous (e.g. views of a packed QKV projection). A tensor is copied once when its last
    dimension does not have stride 1, when its start or other strides are not 16-byte aligned, or when its
    head_dim is not a multiple of 8 (zero-padded).

    A decode step, whose query rows per KV head (query heads per KV head x seqlen_q) number at most 64, runs on
    the split-KV kernel of ``flash_attn_with_kvcache`` when there is no dropout, as flash-attn 2's forward splits
    the keys of such calls; the backward is the same.
    """
    return _flash_attn(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        return_lse,
        FLASH_NAMES,
    )


def _flash_attn(
    q,
    k,
    v,
    dropout_p,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    deterministic,
    return_attn_probs,
    return_lse,
    names: Names,
):
    """``flash_attn_func``, with ``names`` for q, k and v in its errors: a packed function passes slices of the
    tensor it was given, and its errors name that tensor."""
    validate_attention_inputs(
        q,
        k,
        v,
        layout="bshd",
        softmax_scale=softmax_scale,
        causal=causal,
        scale_name="softmax_scale",
        causal_name="causal",
        names=names,
    )
    check_bool(deterministic, "deterministic")
    check_bool(return_lse, "return_lse")
    validate_variant_options(
        q,
        dropout_p=dropout_p,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        return_attn_probs=return_attn_probs,
        names=names,
    )
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    out, lse = _attention(
        q, k, v, float(softmax_scale), causal, True, deterministic, tuple(window_size), softcap, alibi_slopes, dropout_p
    )
    if return_attn_probs:
        return out, lse, None
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` (PyTorch layout), exact and fused.

    Args:
        query: (batch, heads, seqlen_q, head_dim), float16, bfloat16 or float32.
        key: (batch, heads_kv, seqlen_k, head_dim); heads_kv == heads unless ``enable_gqa=True``, then heads
            must be a multiple of heads_kv.
        value: (batch, heads_kv, seqlen_k, head_dim).
        attn_mask: not supported (must be None): use ``is_causal=True`` for causal masking, or
            ``torch.nn.functional.scaled_dot_product_attention`` for arbitrary masks.
        dropout_p: probability of dropping each attention weight, in [0, 1), as ``flash_attn_func``'s (and,
            as in PyTorch, applied even in eval mode: pass 0.0 there).
        is_causal: mask aligned to the top-left corner, as PyTorch: query i sees key j when j <= i.
            For seqlen_q = 2, seqlen_k = 5 (1 = kept):

                1 0 0 0 0
                1 1 0 0 0

            and for seqlen_q = 5, seqlen_k = 2 (every row sees key 0):

                1 0
                1 1
                1 1
                1 1
                1 1
        scale: multiplies query @ key^T before the softmax; default head_dim ** -0.5.
        enable_gqa: allow heads_kv < heads (grouped-query attention).

    Returns:
        out: (batch, heads, seqlen_q, head_dim), query's dtype.

    As with PyTorch's flash backend, the backward may add dq's parts in an order that varies from run to run
    (``flash_attn_func``'s ``deterministic``); ``torch.use_deterministic_algorithms(True)`` makes it bit-identical.
    """
    if attn_mask is not None:
        raise ValueError(
            "attn_mask is not supported by flashdoc.scaled_dot_product_attention; use "
            "is_causal=True for a causal mask, or torch.nn.functional.scaled_dot_product_attention "
            "for arbitrary masks"
        )
    validate_dropout(dropout_p)
    validate_attention_inputs(
        query,
        key,
        value,
        layout="bhsd",
        softmax_scale=scale,
        causal=is_causal,
        scale_name="scale",
        causal_name="is_causal",
        names=SDPA_NAMES,
    )
    check_bool(enable_gqa, "enable_gqa")
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError(
            f"query has {query.shape[1]} heads and key {key.shape[1]}; pass enable_gqa=True for grouped-query attention"
        )
    if scale is None:
        scale = query.shape[-1] ** -0.5
    # (B, H, S, D) -> (B, S, H, D) views: the kernels take strides, so nothing is copied
    out, _ = _attention(
        query.transpose(1, 2),
        key.transpose(1, 2),
        value.transpose(1, 2),
        float(scale),
        is_causal,
        False,
        deterministic=False,
        dropout_p=dropout_p,
    )
    return out.transpose(1, 2)


# --8<-- [start:varlen_ops]
# Packed sequences: the same pattern, with cu_seqlens and max_seqlen as arguments. The ops never read cu_seqlens
# on the host (no sync); max_seqlen only picks the autotuner's bucket and bounds the window, as in flash-attn.
torch.library.define(
    "flashdoc::varlen_fwd",
    "(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, "
    f"SymInt max_seqlen_k, float softmax_scale, bool causal, {_VARIANT_SCHEMA}) -> (Tensor, Tensor)",
)
torch.library.define(
    "flashdoc::varlen_bwd",
    "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? dlse, Tensor cu_seqlens_q, "
    "Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, float softmax_scale, bool causal, "
    f"{_VARIANT_SCHEMA}) -> (Tensor, Tensor, Tensor)",
)


def _varlen_lse(q: torch.Tensor) -> torch.Tensor:
    return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.impl("flashdoc::varlen_fwd", ("cuda", "cpu"))
def _varlen_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_size_left: int = -1,
    window_size_right: int = -1,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    rng_state: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (total_q, H, D), k and v: (total_k, Hk, D) -> out (total_q, H, D), lse (H, total_q) fp32."""
    out, lse = _like(q), _varlen_lse(q)
    if q.shape[0] == 0:
        return out, lse
    if k.shape[0] == 0:  # every sequence has zero keys: every row sees none
        return out.zero_(), lse.fill_(float("-inf"))
    variant = _variant(window_size_left, window_size_right, softcap, alibi_slopes, dropout_p, rng_state)

    def run(q_, k_, v_, out_):
        varlen_fwd(
            q_,
            k_,
            v_,
            out_,
            lse,
            cu_seqlens_q,
            cu_seqlens_k,
            int(max_seqlen_q),
            int(max_seqlen_k),
            softmax_scale,
            causal,
            variant=variant,
        )

    _forward_into(out, q, k, v, run)
    return out, lse


@torch.library.register_fake("flashdoc::varlen_fwd")
def _(q, k, v, *args, **kwargs):
    return _like(q), _varlen_lse(q)


@torch.library.impl("flashdoc::varlen_bwd", ("cuda", "cpu"))
def _varlen_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dlse: Optional[torch.Tensor],
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_size_left: int = -1,
    window_size_right: int = -1,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    rng_state: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of the varlen forward op: dq, dk, dv with the shapes (and layouts) of q, k, v."""
    dq, dk, dv = _like(q), _like(k), _like(v)
    if q.shape[0] == 0 or k.shape[0] == 0:  # no query sees any key: every gradient is zero
        return dq.zero_(), dk.zero_(), dv.zero_()
    dlse = None if dlse is None else dlse.float().contiguous()
    variant = _variant(window_size_left, window_size_right, softcap, alibi_slopes, dropout_p, rng_state)

    def run(dout_, q_, k_, v_, out_, dq_, dk_, dv_):
        varlen_bwd(
            dout_,
            q_,
            k_,
            v_,
            out_,
            lse.contiguous(),
            dlse,
            dq_,
            dk_,
            dv_,
            cu_seqlens_q,
            cu_seqlens_k,
            int(max_seqlen_q),
            int(max_seqlen_k),
            softmax_scale,
            causal,
            variant=variant,
        )

    _backward_into((dq, dk, dv), dout, q, k, v, out, run)
    return dq, dk, dv


@torch.library.register_fake("flashdoc::varlen_bwd")
def _(dout, q, k, v, *args, **kwargs):
    return _like(q), _like(k), _like(v)


# --8<-- [end:varlen_ops]

_varlen_fwd_op, _varlen_bwd_op = torch.ops.flashdoc.varlen_fwd.default, torch.ops.flashdoc.varlen_bwd.default


class _FlashAttentionVarlen(torch.autograd.Function):
    """Autograd around the varlen ops, as ``_FlashAttention`` around the dense ones."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, variant):
        out, lse = _varlen_fwd_op(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, *variant
        )
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.max_seqlen_q, ctx.max_seqlen_k = max_seqlen_q, max_seqlen_k
        ctx.softmax_scale, ctx.causal, ctx.variant = softmax_scale, causal, variant
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @first_order_only
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = _varlen_bwd_op(
            dout,
            q,
            k,
            v,
            out,
            lse,
            dlse,
            cu_seqlens_q,
            cu_seqlens_k,
            ctx.max_seqlen_q,
            ctx.max_seqlen_k,
            ctx.softmax_scale,
            ctx.causal,
            *ctx.variant,
        )
        return dq, dk, dv, None, None, None, None, None, None, None


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_lse=False,
):
    """Exact attention over a batch of sequences of different lengths, packed along one token axis.

    The arguments, their order and their meaning are flash-attn 2's ``flash_attn_varlen_func``; each sequence
    is attended as ``flash_attn_func`` would attend it alone, with every option of that function.

    Args:
        q: (total_q, nheads, headdim): the batch's query tokens one sequence after another; float16, bfloat16
            or float32, on CUDA (or CPU, interpreted); headdim 1 to 256.
        k: (total_k, nheads_k, headdim); nheads a multiple of nheads_k (GQA/MQA).
        v: (total_k, nheads_k, headdim).
        cu_seqlens_q: (batch + 1,) int32 on q's device: sequence b's queries are rows
            ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` of q. Starts at 0, non-decreasing, ends at total_q; a
            sequence may be empty.
        cu_seqlens_k: (batch + 1,) int32, likewise for k and v.
        max_seqlen_q: int, the longest query sequence (at least the real longest: it selects the tuned kernel
            settings).
        max_seqlen_k: int, the longest key sequence; a window side at least this wide is unbounded.
        dropout_p, softmax_scale, softcap: as in ``flash_attn_func``.
        causal: mask aligned to each sequence's own bottom-right corner: query i of sequence b sees key j when
            j <= i + len_k(b) - len_q(b). Rows that see no key (a sequence with fewer keys than queries, or
            with none) output zeros and get zero gradients.
        window_size: (left, right), aligned like ``causal`` in each sequence.
        alibi_slopes: (nheads,) or (batch, nheads) float32 on q's device, the bias
            ``-slope * |i + len_k(b) - len_q(b) - j|`` in each sequence.
        deterministic: accepted for flash-attn's signature; the varlen backward is always deterministic (each
            gradient element is written by one program, no atomics).
        return_attn_probs: also return the log-sum-exp, and None for the probabilities: ``(out, lse, None)``.
        return_lse: (keyword) also return the log-sum-exp: ``(out, lse)``.

    Returns:
        out: (total_q, nheads, headdim), q's dtype.
        lse: with ``return_lse`` or ``return_attn_probs``, (nheads, total_q) float32, as flash-attn's varlen
            returns it (``-inf`` for rows that see no key).

    Nothing here reads cu_seqlens on the host: the call never waits for the GPU, so it can be captured in a CUDA
    graph and traced by ``torch.compile(fullgraph=True)``. The kernels take the tiles of every sequence, longest
    sequences first: the portable ones launch a program a tile (up to a bound worked out from the shapes; the
    extra programs exit at once), and on Hopper persistent programs claim the tiles in that order. The checks
    that would read cu_seqlens (starts at 0, non-decreasing, ends at total_q / total_k, max_seqlen at least the
    longest length) run on CUDA tensors only with the environment variable ``FLASHDOC_DEBUG_VARLEN=1``, since
    they wait for the device (CPU tensors, which cost nothing to read, are always checked); without it, wrong
    cu_seqlens give wrong results, or make the kernels read and write outside the tensors, as in flash-attn.
    """
    return _flash_attn_varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        return_lse,
        FLASH_NAMES,
    )


def _flash_attn_varlen(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    deterministic,
    return_attn_probs,
    return_lse,
    names: Names,
):
    """``flash_attn_varlen_func``, with ``names`` for the tensors and counts in its errors (as ``_flash_attn``)."""
    validate_varlen_inputs(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale=softmax_scale,
        causal=causal,
        names=names,
    )
    check_bool(deterministic, "deterministic")
    check_bool(return_lse, "return_lse")
    validate_variant_options(
        q,
        dropout_p=dropout_p,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        return_attn_probs=return_attn_probs,
        batch=cu_seqlens_q.shape[0] - 1,
        names=names,
    )
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    variant = _variant_args(q, tuple(window_size), softcap, alibi_slopes, dropout_p)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, float(softmax_scale), causal)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # self-attention passes one cu_seqlens twice, which torch.compile cannot trace into a Function
        out, lse = _FlashAttentionVarlen.apply(*distinct(args[:5]), *args[5:], variant)
    else:
        out, lse = _varlen_fwd_op(*args, *variant)
    if return_attn_probs:
        return out, lse, None
    return (out, lse) if return_lse else out
