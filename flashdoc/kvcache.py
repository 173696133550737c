"""``flash_attn_with_kvcache``: attention for decoding, with flash-attn's signature, over a contiguous or paged
KV cache that it appends the new keys and values to in place.

Two layers, as in ``interface.py``: a ``torch.library`` op, ``flashdoc::fwd_kvcache``, that declares the two
caches it writes and has a fake implementation (so ``torch.compile`` traces through it), and the public
function that validates, defaults and calls it. There is no backward: decoding runs without gradients.

No host synchronisation: nothing reads a device tensor on the host (the split count and the launch grids
follow from shapes), so a decode step can be captured in a CUDA graph. The one exception is opt-in:
``FLASHDOC_DEBUG_CHECKS=1`` in the environment checks the device values (sequence lengths against the cache,
block-table entries, batch indices) on the host before each call, which synchronises. On CPU tensors, whose
values the host reads for free, those checks always run.
"""

import contextlib
from typing import Optional

import torch

from . import _validation
from ._config import switch
from ._validation import (
    _validate_device,
    _validate_scale_and_causal,
    _validate_tensor,
    check_alibi_slopes,
    check_bool,
    check_dtype,
    check_int,
    validate_window_and_softcap,
)
from .interface import raise_when_differentiated
from .kernels import INTERPRET
from .kernels.decode import MAX_SPLITS, append_kv, decode_attention

__all__ = ["flash_attn_with_kvcache"]

# Checks that read device values on the host (and so synchronise): off unless asked for.
DEBUG_CHECKS = switch("FLASHDOC_DEBUG_CHECKS")

# Page sizes are multiples of this (vLLM's smallest block is 16 tokens); a tile of keys never needs fewer.
PAGE_MULTIPLE = 16
INDEX_DTYPES = (torch.int32, torch.int64)


# --8<-- [start:custom_op]
torch.library.define(
    "flashdoc::fwd_kvcache",
    "(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, Tensor? rotary_cos, "
    "Tensor? rotary_sin, Tensor? cache_seqlens, int cache_seqlen_const, Tensor? cache_batch_idx, "
    "Tensor? cache_leftpad, Tensor? block_table, float softmax_scale, bool causal, int window_left, "
    "int window_right, float softcap, bool rotary_interleaved, Tensor? alibi_slopes, int num_splits) "
    "-> (Tensor, Tensor)",
)


@torch.library.impl("flashdoc::fwd_kvcache", ("cuda", "cpu"))
def _fwd_kvcache(
    q,
    k_cache,
    v_cache,
    k,
    v,
    rotary_cos,
    rotary_sin,
    cache_seqlens,
    cache_seqlen_const,
    cache_batch_idx,
    cache_leftpad,
    block_table,
    softmax_scale,
    causal,
    window_left,
    window_right,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
):
    """Append k, v to the caches (rotated), then attend. Returns out (B, Sq, H, D) and lse (B, H, Sq) fp32."""
    batch, seqlen_q, n_heads, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, n_heads, seqlen_q), dtype=torch.float32, device=q.device)
    # Triton's interpreter computes bf16 arithmetic wrongly: on the CPU, run bf16 through fp32 copies and write
    # the caches and the output back. fp16 and fp32 are exact there.
    upcast = INTERPRET and q.dtype == torch.bfloat16
    kc, vc = (k_cache.float(), v_cache.float()) if upcast else (k_cache, v_cache)
    q_, k_, v_ = (t.float() if upcast and t is not None else t for t in (q, k, v))
    seqlen_new = 0 if k is None else k.shape[1]
    q_rot = torch.empty(q_.shape, dtype=q_.dtype, device=q.device) if rotary_cos is not None else None
    q_pos_per_row = causal or window_left >= 0 or window_right >= 0
    append_kv(
        q_,
        k_,
        v_,
        q_rot,
        kc,
        vc,
        cache_seqlens,
        cache_seqlen_const,
        cache_batch_idx,
        block_table,
        rotary_cos,
        rotary_sin,
        rotary_interleaved,
        q_pos_per_row,
    )
    out_ = torch.empty(q_.shape, dtype=torch.float32, device=q.device) if upcast else out
    decode_attention(
        q_rot if q_rot is not None else q_,
        kc,
        vc,
        out_,
        lse,
        cache_seqlens,
        cache_seqlen_const,
        seqlen_new,
        cache_batch_idx,
        block_table,
        softmax_scale,
        causal,
        (window_left, window_right),
        softcap,
        alibi_slopes,
        num_splits,
        cache_leftpad=cache_leftpad,
    )
    if upcast:
        out.copy_(out_)
        if seqlen_new:
            k_cache.copy_(kc), v_cache.copy_(vc)
    return out, lse


@torch.library.register_fake("flashdoc::fwd_kvcache")
def _(
    q,
    k_cache,
    v_cache,
    k,
    v,
    rotary_cos,
    rotary_sin,
    cache_seqlens,
    cache_seqlen_const,
    cache_batch_idx,
    cache_leftpad,
    block_table,
    softmax_scale,
    causal,
    window_left,
    window_right,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


# --8<-- [end:custom_op]


_fwd_kvcache_op = torch.ops.flashdoc.fwd_kvcache.default


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------


def _check_index(t, name: str, shape: tuple, device, dtypes=INDEX_DTYPES, shape_text: str = "") -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} has dtype {t.dtype}; allowed: {allowed}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape_text or shape}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must be on one device")
    if t.dim() and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a unit last stride (call .contiguous() on it)")


def _check_seqlens_int(cache_seqlens, seqlen_new: int, capacity: int) -> None:
    """An int cache_seqlens: the same length for every sequence, which with the new tokens must fit the cache."""
    check_int(cache_seqlens, "cache_seqlens")
    if cache_seqlens + seqlen_new > capacity:
        raise ValueError(
            f"cache_seqlens ({cache_seqlens}) + new tokens ({seqlen_new}) = "
            f"{cache_seqlens + seqlen_new} exceeds the cache's {capacity} tokens per sequence"
        )


def _validate(
    q,
    k_cache,
    v_cache,
    k,
    v,
    rotary_cos,
    rotary_sin,
    cache_seqlens,
    cache_batch_idx,
    cache_leftpad,
    block_table,
    softmax_scale,
    causal,
    window_size,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
    return_softmax_lse,
) -> int:
    """Check every argument; return the cache's capacity in tokens per sequence."""
    _validate_tensor(q, "q")
    _validate_tensor(k_cache, "k_cache", q, "q")
    _validate_tensor(v_cache, "v_cache", q, "q")
    _validate_device(q, "q")
    batch, seqlen_q, n_heads, head_dim = q.shape
    if batch < 1 or seqlen_q < 1 or n_heads < 1:
        raise ValueError(
            f"q must have batch, seqlen and heads >= 1, got shape {tuple(q.shape)}; layout is "
            "(batch, seqlen_q, nheads, headdim)"
        )
    if head_dim % 8 != 0 or not 8 <= head_dim <= 256:
        raise ValueError(f"head_dim is {head_dim}; allowed: a multiple of 8 from 8 to 256")
    if k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if _one_memory(k_cache, v_cache):
        raise ValueError(
            "k_cache and v_cache are the same memory (one tensor, or two views that start at one address): "
            "the keys and values need caches of their own, e.g. torch.empty_like(k_cache) for v_cache"
        )
    n_slots, cache_len, n_kv_heads, cache_dim = k_cache.shape
    if cache_dim != head_dim:
        raise ValueError(f"k_cache has head_dim {cache_dim} but q has {head_dim}")
    if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
        raise ValueError(f"q heads ({n_heads}) must be a multiple of k_cache heads ({n_kv_heads}) (GQA/MQA)")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(
                f"{name} must have a unit last stride: it is written in place, so it cannot be copied into one"
            )
        # An expanded cache's rows share memory, so appending new keys to one sequence would overwrite the others'.
        if k is not None and any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape)):
            raise ValueError(
                f"{name} has a zero stride (shape {tuple(t.shape)}, strides {t.stride()}): an expanded view whose "
                "rows share memory cannot take appended k and v; pass a cache with its own memory (.contiguous())"
            )
    paged = block_table is not None
    if paged:
        if cache_batch_idx is not None:
            raise ValueError(
                "cache_batch_idx cannot be combined with block_table: a paged cache names each "
                "sequence's pages in its block_table row"
            )
        if not isinstance(block_table, torch.Tensor):
            raise TypeError(
                f"block_table must be a torch.Tensor (batch, max_blocks_per_seq), got {type(block_table).__name__}"
            )
        if block_table.dim() != 2:
            raise ValueError(
                f"block_table must be a 2-D tensor (batch, max_blocks_per_seq), got {tuple(block_table.shape)}"
            )
        _check_index(
            block_table,
            "block_table",
            (batch, block_table.shape[1]),
            q.device,
            (torch.int32,),
            f"(batch={batch}, max_blocks_per_seq)",
        )
        if block_table.shape[1] < 1:
            raise ValueError("block_table must list at least one page per sequence, got max_blocks_per_seq = 0")
        if cache_len % PAGE_MULTIPLE != 0:
            raise ValueError(
                f"page_size (k_cache.shape[1] with a block_table) is {cache_len}; allowed: a "
                f"multiple of {PAGE_MULTIPLE}"
            )
        capacity = block_table.shape[1] * cache_len
        if cache_leftpad is not None:
            raise ValueError(
                "cache_leftpad cannot be combined with block_table (nor can it in flash-attn): a paged cache's "
                "sequences start at their first page; leave the padding out of the block table instead"
            )
    else:
        capacity = cache_len
        if cache_leftpad is not None:
            _check_index(cache_leftpad, "cache_leftpad", (batch,), q.device, (torch.int32,), f"(batch={batch},)")
        if cache_batch_idx is not None:
            _check_index(
                cache_batch_idx, "cache_batch_idx", (batch,), q.device, (torch.int32, torch.int64), f"(batch={batch},)"
            )
        elif n_slots < batch:
            raise ValueError(
                f"k_cache holds {n_slots} sequences but q has batch {batch}; pass cache_batch_idx "
                "to pick which cache rows the batch uses"
            )
    if (k is None) != (v is None):
        given, missing = ("k", "v") if k is not None else ("v", "k")
        raise ValueError(f"{given} was given without {missing}: pass both new keys and values, or neither")
    seqlen_new = 0
    if k is not None:
        _validate_tensor(k, "k", q, "q")
        _validate_tensor(v, "v", q, "q")
        if tuple(k.shape) != tuple(v.shape):
            raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        if k.shape[0] != batch or k.shape[2] != n_kv_heads or k.shape[3] != head_dim:
            raise ValueError(
                f"k must have shape (batch={batch}, seqlen_new, nheads_k={n_kv_heads}, "
                f"headdim={head_dim}), got {tuple(k.shape)}"
            )
        seqlen_new = k.shape[1]
        if seqlen_new > capacity:
            raise ValueError(f"k has {seqlen_new} new tokens but the cache holds {capacity} per sequence")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens is required when k and v are given: it says where to append them")
    if cache_seqlens is not None:
        if isinstance(cache_seqlens, torch.Tensor):
            _check_index(cache_seqlens, "cache_seqlens", (batch,), q.device, INDEX_DTYPES, f"(batch={batch},)")
        else:
            _check_seqlens_int(cache_seqlens, seqlen_new, capacity)
    if rotary_cos is not None or rotary_sin is not None:
        if rotary_cos is None or rotary_sin is None:
            raise ValueError("rotary_cos and rotary_sin must be given together")
        if k is None:
            raise ValueError("rotary_cos/rotary_sin apply to q and the new k: they need k and v")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor (seqlen_ro, rotary_dim / 2), got {type(t).__name__}")
            check_dtype(t, name)
            if t.dim() != 2:
                raise ValueError(f"{name} must be a 2-D tensor (seqlen_ro, rotary_dim / 2), got {tuple(t.shape)}")
            if t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it to {q.device}")
            if t.stride(-1) != 1:
                raise ValueError(f"{name} must have a unit last stride (call .contiguous() on it)")
        if rotary_cos.shape != rotary_sin.shape:
            raise ValueError(
                f"rotary_cos and rotary_sin must have one shape, got {tuple(rotary_cos.shape)} and "
                f"{tuple(rotary_sin.shape)}"
            )
        if rotary_cos.stride() != rotary_sin.stride():
            raise ValueError(
                f"rotary_cos and rotary_sin must have one layout (the kernel reads both at one row stride), got "
                f"strides {rotary_cos.stride()} and {rotary_sin.stride()}: call .contiguous() on both"
            )
        rotary_dim = 2 * rotary_cos.shape[1]
        if rotary_dim % 16 != 0 or rotary_dim > head_dim or rotary_dim == 0:
            raise ValueError(
                f"rotary_dim (2 x rotary_cos.shape[1]) is {rotary_dim}; allowed: a multiple of 16 "
                f"up to head_dim ({head_dim})"
            )
        if rotary_cos.shape[0] < capacity:
            raise ValueError(
                f"rotary_cos has {rotary_cos.shape[0]} positions but the cache holds {capacity}: "
                "it needs one row per cache position"
            )
    check_bool(rotary_interleaved, "rotary_interleaved")
    _validate_scale_and_causal(softmax_scale, causal, "softmax_scale", "causal")
    validate_window_and_softcap(window_size, softcap)
    check_int(num_splits, "num_splits")
    if num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits is {num_splits}; allowed: 0 (choose automatically) to {MAX_SPLITS}")
    if alibi_slopes is not None:
        check_alibi_slopes(alibi_slopes, q, batch, n_heads)
    check_bool(return_softmax_lse, "return_softmax_lse")
    return capacity


# Calls whose arguments passed ``_validate``, keyed by ``_signature``, and the cache capacity each gave. A decode
# loop makes the same call at every step, and checking it again took about as long as the kernels at small
# batches; the checks read only what the signature holds, so a call with the same signature passes them too.
_validated = {}


def _one_memory(k_cache, v_cache) -> bool:
    """Whether the caches start at one address of one storage: passed as both, each appended value would overwrite
    its key. Compared through the storage, not data_ptr(), which is 0 for every fake tensor; skipped while
    torch.compile traces (the eager call checks it)."""
    if torch.compiler.is_compiling() or k_cache.numel() == 0:
        return False
    same_storage = k_cache.untyped_storage()._cdata == v_cache.untyped_storage()._cdata
    return same_storage and k_cache.storage_offset() == v_cache.storage_offset()


def _tensor_signature(t):
    """What ``_validate`` reads of a tensor argument (None for None); TypeError for anything but a plain tensor."""
    if t is None:
        return None
    if type(t) is not torch.Tensor:
        raise TypeError
    return t.shape, t.stride(), t.dtype, t.device


def _signature(arguments: dict):
    """Everything ``_validate``'s verdict depends on, as a key of ``_validated``: each tensor's type, shape,
    strides, dtype and device, and each other argument's type and value, except an int cache_seqlens's value,
    which changes from step to step and is checked on every call (``_check_seqlens_int``), and whether the two
    caches are one memory (``_one_memory``: views of one shape and strides may or may not be). None when a call
    cannot be keyed (a tensor subclass, or a nested or sparse tensor, whose shape or strides torch refuses to give
    with a RuntimeError: no valid call passes one, and ``_validate`` names it), and while torch.compile traces the
    call."""
    if torch.compiler.is_compiling():
        return None
    try:
        signature = tuple(_argument_signature(name, value) for name, value in arguments.items())
        return (*signature, _one_memory(arguments["k_cache"], arguments["v_cache"]))
    except (TypeError, RuntimeError):
        return None


def _argument_signature(name: str, value):
    if name == "cache_seqlens" and type(value) is int:
        return int
    if value is None or isinstance(value, torch.Tensor):
        return _tensor_signature(value)
    if type(value) in (tuple, list):  # window_size
        return (type(value), *((type(x), x) for x in value))
    return type(value), value


def _check_device_values(
    k_cache, cache_seqlens, seqlen_new, cache_batch_idx, cache_leftpad, block_table, capacity
) -> None:
    """The checks that need device values, read on the host: with FLASHDOC_DEBUG_CHECKS=1 (a synchronisation on a
    GPU), and always on CPU tensors (``_validation.host_readable``)."""
    if cache_leftpad is not None:
        lengths = (
            cache_seqlens.tolist()
            if isinstance(cache_seqlens, torch.Tensor)
            else [capacity if cache_seqlens is None else cache_seqlens] * cache_leftpad.shape[0]
        )
        bad = [(b, p, n) for b, (p, n) in enumerate(zip(cache_leftpad.tolist(), lengths)) if not 0 <= p <= n]
        if bad:
            b, p, n = bad[0]
            raise ValueError(
                f"cache_leftpad[{b}] is {p}; allowed: 0 to that sequence's cache length, cache_seqlens[{b}] = {n}"
            )
    if isinstance(cache_seqlens, torch.Tensor):
        lengths = cache_seqlens.tolist()
        bad = [(b, n) for b, n in enumerate(lengths) if n < 0 or n + seqlen_new > capacity]
        if bad:
            b, n = bad[0]
            raise ValueError(
                f"cache_seqlens[{b}] ({n}) + new tokens ({seqlen_new}) = {n + seqlen_new} is outside "
                f"the cache's 0..{capacity} tokens per sequence"
            )
    if cache_batch_idx is not None:
        idx = cache_batch_idx.tolist()
        if any(not 0 <= i < k_cache.shape[0] for i in idx):
            raise ValueError(f"cache_batch_idx has entries outside 0..{k_cache.shape[0] - 1}: {idx}")
    if block_table is not None:
        page_size = k_cache.shape[1]
        lengths = (
            cache_seqlens.tolist()
            if isinstance(cache_seqlens, torch.Tensor)
            else [capacity if cache_seqlens is None else cache_seqlens] * block_table.shape[0]
        )
        for b, row in enumerate(block_table.tolist()):
            used = -(-(lengths[b] + seqlen_new) // page_size)
            if any(not 0 <= p < k_cache.shape[0] for p in row[:used]):
                raise ValueError(
                    f"block_table[{b}] names pages outside 0..{k_cache.shape[0] - 1} among its first "
                    f"{used}: {row[:used]}"
                )


# ---------------------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------------------


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Attention of a few new queries against a KV cache, for decoding, as flash-attn's function of that name.

    If k and v are given, they are first written into the caches *in place*, at positions
    ``cache_seqlens[b], cache_seqlens[b] + 1, ...`` of each sequence b (rotated first when rotary_cos and
    rotary_sin are given), and the queries then attend to the cache including them. This is one decode step:
    no cache copy, no concatenation.

    Query i of sequence b is at key position ``i + seqlen_k - seqlen_q``, where ``seqlen_k = cache_seqlens[b]``
    + the new tokens: the causal mask and the window are aligned to the bottom-right corner, as flash-attn does.
    With seqlen_q = 2 and seqlen_k = 5, causal (1 = kept):

        1 1 1 1 0
        1 1 1 1 1

    Args:
        q: (batch, seqlen_q, nheads, headdim), float16, bfloat16 or float32; headdim a multiple of 8, from 8
            to 256.
        k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k, headdim) without a block_table, or
            (num_blocks, page_size, nheads_k, headdim) with one (a paged cache; page_size a multiple of 16).
            nheads must be a multiple of nheads_k (GQA/MQA). Written in place when k and v are given.
        k, v: (batch, seqlen_new, nheads_k, headdim), optional: new keys and values to append.
        rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), optional: rotary embedding applied to q and to the
            new k (needs k and v), at positions cache_seqlens[b] + i. Queries all rotate at cache_seqlens[b]
            unless the attention is causal or windowed (then each at its own position), as in flash-attn.
            rotary_dim is a multiple of 16, at most headdim; seqlen_ro covers the cache.
        cache_seqlens: an int, or (batch,) int32/int64: tokens already in each sequence's cache (None: the
            cache is full, and k must be None).
        cache_batch_idx: (batch,) int32/int64, optional: the cache row that sequence b uses (contiguous caches);
            default 0..batch-1.
        cache_leftpad: (batch,) int32, optional (contiguous caches only): sequence b's keys start at position
            cache_leftpad[b] of its cache, as in a left-padded batch; the positions before it are never read.
            cache_seqlens counts from position 0 (the padding included), so new keys still land at
            cache_seqlens[b] and rotate at that position, while causal and window masks and ALiBi count the keys
            from cache_leftpad[b], as in flash-attn.
        block_table: (batch, max_blocks_per_seq) int32, optional: page ``block_table[b, j]`` holds positions
            ``j * page_size`` to ``(j + 1) * page_size - 1`` of sequence b.
        softmax_scale: multiplies q @ k^T before the softmax; default headdim ** -0.5.
        causal: mask keys after each query's position (bottom-right aligned).
        window_size: (left, right): query at key position p sees keys from p - left to p + right; -1 for no
            limit on that side. ``causal=True`` sets right to 0.
        softcap: when > 0, scores become ``softcap * tanh(score / softcap)`` before the softmax.
        rotary_interleaved: True: rotate dimension pairs (0, 1), (2, 3), ... (GPT-J); False: pairs
            (0, rotary_dim / 2), (1, rotary_dim / 2 + 1), ... (GPT-NeoX).
        alibi_slopes: (nheads,) or (batch, nheads) float32, optional: ALiBi, a bias of
            ``-slope * |i + seqlen_k - seqlen_q - j|`` added to the score of query i and key j (after softcap).
        num_splits: how many parts each sequence's keys are cut into, attended in parallel and merged by their
            log-sum-exp (FlashDecoding). 0 chooses from the shapes (as many splits as fill one wave of
            programs, else flash-attn's heuristic); 1 never splits. Any value gives the same result up to
            rounding.
        return_softmax_lse: also return the log-sum-exp of each row of scaled (capped, biased) scores.

    Returns:
        out: (batch, seqlen_q, nheads, headdim), q's dtype.
        lse: with return_softmax_lse, (batch, nheads, seqlen_q), float32, natural log (-inf for a query that sees
            no key; its output is zero).

    Nothing here synchronises with the GPU (a decode step can be captured in a CUDA graph), so values on the
    device are not checked. A cache_seqlens[b] + seqlen_new past the cache's capacity is masked: the caches are
    never read or written outside their bounds (nor are rotary_cos and rotary_sin: a position past their rows is
    left unrotated), but the result is meaningless. A negative cache_seqlens[b], a cache_batch_idx
    entry outside the cache's batch, or a block_table entry outside its pages is used as given, and reads and
    writes memory outside the caches. Set FLASHDOC_DEBUG_CHECKS=1 before importing flashdoc to check all of
    them on the host at every call (which waits for the GPU). CPU tensors, which cost nothing to read, are
    always checked.
    """
    # every parameter by name, in the signature's order (torch.compile cannot trace locals())
    arguments = dict(
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        k=k,
        v=v,
        rotary_cos=rotary_cos,
        rotary_sin=rotary_sin,
        cache_seqlens=cache_seqlens,
        cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad,
        block_table=block_table,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window_size,
        softcap=softcap,
        rotary_interleaved=rotary_interleaved,
        alibi_slopes=alibi_slopes,
        num_splits=num_splits,
        return_softmax_lse=return_softmax_lse,
    )
    signature = _signature(arguments)
    try:
        capacity = _validated.get(signature)
    except TypeError:  # an unhashable argument, which no valid call passes: _validate says which
        signature = capacity = None
    checked_before = capacity is not None
    if not checked_before:
        capacity = _validate(**arguments)
        if signature is not None:
            _validated[signature] = capacity
    seqlen_new = 0 if k is None else k.shape[1]
    if checked_before and type(cache_seqlens) is int:
        _check_seqlens_int(cache_seqlens, seqlen_new, capacity)
    if DEBUG_CHECKS or _validation.host_readable(q, cache_seqlens, cache_batch_idx, cache_leftpad, block_table):
        _check_device_values(k_cache, cache_seqlens, seqlen_new, cache_batch_idx, cache_leftpad, block_table, capacity)
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    window_left, window_right = window_size
    seqlens_tensor: Optional[torch.Tensor] = cache_seqlens if isinstance(cache_seqlens, torch.Tensor) else None
    seqlen_const = capacity if cache_seqlens is None else (0 if seqlens_tensor is not None else cache_seqlens)
    q, k, v = (t if t is None or t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    grad_asked = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v))
    with torch.no_grad() if grad_asked else contextlib.nullcontext():
        out, lse = _fwd_kvcache_op(
            q,
            k_cache,
            v_cache,
            k,
            v,
            rotary_cos,
            rotary_sin,
            seqlens_tensor,
            seqlen_const,
            cache_batch_idx,
            cache_leftpad,
            block_table,
            float(softmax_scale),
            causal,
            window_left,
            window_right,
            float(softcap),
            rotary_interleaved,
            alibi_slopes,
            num_splits,
        )
    if grad_asked:  # a decode step has no backward: say so when one reaches it, not with an empty q.grad
        out, lse = raise_when_differentiated(
            b"flash_attn_with_kvcache has no backward (a decode step computes no gradients): call it under "
            b"torch.no_grad(), or use flash_attn_func where gradients are needed",
            (out, lse),
        )
    return (out, lse) if return_softmax_lse else out
