"""Variable-length batches: sequences of different lengths packed one after another along one token axis.

Layout: q (total_q, heads, head_dim), k and v (total_k, kv heads, head_dim); sequence b is rows
``cu_seqlens[b]:cu_seqlens[b + 1]`` of each. The kernels here are the forward, dK/dV and dQ kernels of
``forward.py`` and ``backward.py`` around the same inner loops (``_attn_fwd_inner``, ``_attn_bwd_dkdv_inner``,
``_attn_bwd_dq_inner``): only the outer part differs, in three ways.

1. **Which tile a program computes.** A padded grid (batch x max_seqlen tiles, as flash-attn's Triton backend
   launches) spends most of its programs on nothing when lengths vary. Here the grid holds a bound on the real
   number of tiles that the host knows from shapes alone (``tile_bound``), and each program finds its
   (sequence, head, tile) by a prefix sum over the sequences' tile counts, in chunks, inside the kernel
   (``find_tile``), the way flash-attn's Hopper ``VarlenDynamicPersistentTileScheduler`` finds a tile with a
   warp-wide prefix sum. Programs past the real count return at once. Nothing reads cu_seqlens on the host: no
   synchronisation, so CUDA graphs and torch.compile keep working.
2. **In which order.** Sequences go longest first (sorted on the device, ``schedule``), each sequence's heads
   one after another and, within a head, its tiles heaviest first under a causal mask (as ``program_tile``
   orders the dense kernels'): the programs that run longest start first and the last wave holds the
   shortest ones, while programs launched together share one sequence's keys and values in L2.
3. **Where the tile's rows are.** The inner loops take positions in the packed token axis: the band's offsets,
   ALiBi's offset and the key (or query) end are shifted by the sequence's start (``mask.py``'s rules are
   differences of positions, so a shift leaves them unchanged), and the ranges of tiles to visit are computed
   per sequence, then shifted. Streamed tiles read through descriptors over the whole packed tensor: a tile
   running past its sequence's end reads the next sequence's rows, which the masked (ragged) iterations mask
   out. Resident tiles and every store go through descriptors of one sequence and head (``common.head_desc``)
   whose shape is the sequence's length, so no store ever writes into a neighbour.

The dropout mask's Philox counter takes the packed row and column and the head, so it names each element of
the whole batch once: ``mask.dropout_mask(rng, 1, heads, total_q, total_k, p)[0, :, q_rows, k_rows]`` is one
sequence's mask. The backward's preprocess is the dense one on the (1, total_q, heads, head_dim) view.

On Hopper the forward calls that the dense Hopper forward would take run on it instead (``varlen_fwd_hopper``:
``forward_hopper``'s kernel with VARLEN): its persistent programs claim items of (sequence, head, query rows) in
the same longest-first order, found by the same search on the device; TMA loads from the packed tensors at each
sequence's rows, the mask bounds keys by each sequence's length, and the output leaves through masked register
stores, as FlashAttention-3's varlen forward does. Likewise the backward's dK/dV and dQ kernels run on
``backward_hopper``'s where the dense Hopper backward would take the call (``gluon_varlen_bwd``,
``varlen_bwd_dkdv_hopper``, ``varlen_bwd_dq_hopper``): the split kernels with VARLEN, each program finding its
(sequence, head, block) with the same search, query rows past a sequence's end masked by an infinite LSE, keys
past it by the mask in dQ, and every gradient tile leaving through masked stores; they recompute from the
output and the LSE that either forward writes in this module's layout.
"""

import torch
import triton
import triton.language as tl

from . import INTERPRET, LOG2E, backward_hopper, forward_hopper
from .backward import DKDV_CONFIGS, DQ_CONFIGS, _attn_bwd_dkdv_inner, _attn_bwd_dq_inner, bwd_preprocess
from .common import (
    all_configs,
    block_d_for,
    configs_for,
    dot_precision,
    find_item,
    head_desc,
    prune_for,
    seq_bucket,
)
from .forward import FWD_CONFIGS, _attn_fwd_inner
from .hopper_common import consumers_of, packed_descriptor, rows_descriptor, score_scales
from .launch import (
    aligned,
    distinct,
    forked_stream,
    gluon_plan,
    head_tiles,
    launch,
    layout,
    on_device,
    plan_cache,
    planned,
)
from .mask import VARIANT_FLAGS, Variant, hopper_supports, key_block_range, query_block_range

# Sequences whose tile counts one step of the in-kernel prefix sum covers: a batch of up to CHUNK sequences
# finds every program's tile in one step.
CHUNK = 64


# ---------------------------------------------------------------------------------------------------------------
# Host side: the schedule and the grid
# ---------------------------------------------------------------------------------------------------------------


def schedule(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The sequences' indices, longest first (int32, on cu_seqlens' device): device-side tensor ops, no sync."""
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    return torch.argsort(lengths, descending=True, stable=True).to(torch.int32)


def tile_bound(total: int, n_seqs: int, block: int) -> int:
    """An upper bound on sum_b cdiv(len_b, block) over n_seqs lengths summing to total, from these two alone:
    each cdiv adds at most block - 1 to its length before the division."""
    return (total + n_seqs * (block - 1)) // block


def varlen_grid(total: int, n_seqs: int, n_heads: int, block: str):
    """The 1-D launch grid: a program per (tile, head) slot up to ``tile_bound``; ``block`` the meta-parameter
    giving the tile's length."""

    def grid(meta):
        return (n_heads * tile_bound(total, n_seqs, meta[block]),)

    return grid


class Band:
    """The compile-time flags and the window's sides for a varlen call. The offsets themselves depend on each
    sequence's lengths and are computed in the kernel; as flash-attn's varlen does, a side at least as wide as
    max_seqlen_k is unbounded."""

    def __init__(self, causal: bool, window_size, max_seqlen_k: int):
        left, right = window_size
        left = -1 if left >= max_seqlen_k else left
        right = -1 if right >= max_seqlen_k else right
        if causal:
            right = 0
        self.is_causal, self.is_local = right >= 0, left >= 0
        self.left = left if self.is_local else None
        self.right = right if self.is_causal else 0


def variant_args(variant: Variant, band: Band, n_seqs: int, n_heads: int, softmax_scale: float):
    """(runtime arguments from the window's left side onwards, compile-time flags) of the varlen kernels; None
    where a feature is off, as in ``mask.variant_args``."""
    softcap, slopes, p_drop = variant.softcap, variant.alibi_slopes, variant.dropout_p
    if slopes is not None:  # divided by the scale, like the scores the kernels hold (see mask.mod_scores)
        slopes = (slopes.float() / softmax_scale).expand(n_seqs, n_heads).contiguous()
    args = (
        band.left,
        band.right,
        softmax_scale / softcap if softcap else None,
        softcap / softmax_scale if softcap else None,
        slopes,
        variant.rng if p_drop else None,
        p_drop if p_drop else None,
        1.0 / (1.0 - p_drop) if p_drop else None,
    )
    flags = dict(
        IS_CAUSAL=band.is_causal,
        IS_LOCAL=band.is_local,
        SOFTCAP=bool(softcap),
        ALIBI=slopes is not None,
        DROPOUT=bool(p_drop),
    )
    return args, flags


# ---------------------------------------------------------------------------------------------------------------
# Kernel side: a program's tile and its sequence
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:find_tile]
@triton.jit
def find_tile(pid, ORDER, CU, n_seqs, n_heads, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    """(sequence, head, tile) of program ``pid``, sequence -1 past the real number of tiles.

    Programs are numbered sequence by sequence in ORDER (the ``schedule``), each sequence holding n_heads x
    cdiv(length, BLOCK) of them, head by head. A running prefix sum of these counts, CHUNK sequences a step,
    finds the sequence whose range holds pid; it stops at the first step that passes pid."""
    seq = -1
    local = 0
    before = 0  # programs of the sequences in the steps done so far
    start = 0
    while (start < n_seqs) & (before <= pid):
        offs = start + tl.arange(0, CHUNK)
        b = tl.load(ORDER + offs, mask=offs < n_seqs, other=0)
        length = tl.load(CU + b + 1, mask=offs < n_seqs, other=0) - tl.load(CU + b, mask=offs < n_seqs, other=0)
        count = (length + BLOCK - 1) // BLOCK * n_heads
        end = before + tl.cumsum(count, 0)  # programs up to and including each sequence
        hit = (pid >= end - count) & (pid < end)  # at most one, and only where count > 0
        seq = tl.maximum(seq, tl.max(tl.where(hit, b, -1), 0))
        local = tl.maximum(local, tl.max(tl.where(hit, pid - (end - count), 0), 0))
        before += tl.sum(count, 0)
        start += CHUNK
    seq_start = tl.load(CU + seq, mask=seq >= 0, other=0)
    n_tiles = tl.maximum((tl.load(CU + seq + 1, mask=seq >= 0, other=0) - seq_start + BLOCK - 1) // BLOCK, 1)
    return seq, local // n_tiles, local % n_tiles


# --8<-- [end:find_tile]


@triton.jit
def sequence(CU_Q, CU_K, seq):
    """(q start, q length, k start, k length) of a sequence."""
    q_start = tl.load(CU_Q + seq)
    k_start = tl.load(CU_K + seq)
    return q_start, tl.load(CU_Q + seq + 1) - q_start, k_start, tl.load(CU_K + seq + 1) - k_start


# ---------------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------------

_NO_SPECIALIZE = ["n_seqs", "n_heads", "group_size", "total_q", "window_left", "window_right", "SEQ_BUCKET"]


# --8<-- [start:varlen_fwd]
@triton.jit(do_not_specialize=_NO_SPECIALIZE)
def _varlen_fwd(
    Q,
    K,
    V,
    O,
    LSE,
    CU_Q,
    CU_K,
    ORDER,
    stride_qs,
    stride_qh,
    stride_os,
    stride_oh,
    n_seqs,
    n_heads,
    group_size,
    total_q,
    qk_scale,
    SEQ_BUCKET,  # only read by the autotuner's key
    window_left,
    window_right,
    cap_in,
    cap_out,
    SLOPES,
    RNG,
    p_drop,
    drop_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACROSS_HEADS: tl.constexpr,  # the dense configs' launch order; the varlen order is the schedule's
    CHUNK: tl.constexpr,
    IS_LOCAL: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    ALIBI: tl.constexpr = False,
    DROPOUT: tl.constexpr = False,
):
    """One program = one tile of BLOCK_M query rows of one (sequence, head). Q, O: (total_q, heads, head_dim)
    tensors; K, V: ``head_tiles`` descriptors over the (1, total_k, kv heads, head_dim) views; LSE: (heads,
    total_q) fp32; ORDER: the ``schedule`` of the key lengths (a tile's cost follows its keys). SLOPES: (batch,
    heads) fp32 slopes over the softmax scale."""
    seq, off_h, tile = find_tile(tl.program_id(0), ORDER, CU_Q, n_seqs, n_heads, BLOCK_M, CHUNK)
    if seq < 0:
        return
    q_start, len_q, k_start, len_k = sequence(CU_Q, CU_K, seq)
    if IS_CAUSAL:  # the last query tiles see most keys: they go first
        tile = (len_q + BLOCK_M - 1) // BLOCK_M - 1 - tile
    off_hk = off_h // group_size
    diag = len_k - len_q  # bottom-right alignment in each sequence (mask.band)
    left_offset = diag - window_left if IS_LOCAL else None
    right_offset = diag + window_right
    shift = k_start - q_start  # packed key position - packed query position, for the same (i, j)
    offs_m = q_start + tile * BLOCK_M + tl.arange(0, BLOCK_M)
    q = head_desc(
        Q + q_start.to(tl.int64) * stride_qs + off_h * stride_qh, len_q, stride_qs, HEAD_DIM, BLOCK_M, BLOCK_D
    ).load([tile * BLOCK_M, 0])

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    slope = tl.load(SLOPES + seq * n_heads + off_h) if ALIBI else None
    seed = tl.load(RNG) if DROPOUT else None
    rng_offset = tl.load(RNG + 1) if DROPOUT else None
    lo, full_lo, full_hi, hi = key_block_range(
        tile * BLOCK_M, len_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    # the same three ranges as the dense forward's, in packed key positions
    bounds = (k_start + lo, k_start + full_lo, k_start + full_hi, k_start + hi)
    left_offset = left_offset + shift if IS_LOCAL else None
    right_offset = right_offset + shift
    alibi_offset = diag + shift if ALIBI else None
    for part in tl.static_range(3):
        if part != 0 or IS_LOCAL:
            acc, l_i, m_i = _attn_fwd_inner(
                acc,
                l_i,
                m_i,
                q,
                K,
                V,
                0,
                off_hk,
                offs_m,
                k_start + len_k,
                left_offset,
                right_offset,
                qk_scale,
                bounds[part],
                bounds[part + 1],
                cap_in,
                cap_out,
                slope,
                alibi_offset,
                seed,
                rng_offset,
                off_h,
                p_drop,
                BLOCK_N,
                BLOCK_D,
                IS_CAUSAL,
                IS_LOCAL,
                part != 1,
                SOFTCAP,
                ALIBI,
                DROPOUT,
                DOT_PRECISION,
            )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if DROPOUT:
        acc = acc * (drop_scale / l_safe)[:, None]
    else:
        acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    tl.store(LSE + off_h.to(tl.int64) * total_q + offs_m, lse, mask=offs_m < q_start + len_q)
    # a descriptor of this sequence alone: rows past its end are not written
    head_desc(
        O + q_start.to(tl.int64) * stride_os + off_h * stride_oh, len_q, stride_os, HEAD_DIM, BLOCK_M, BLOCK_D
    ).store([tile * BLOCK_M, 0], acc.to(O.dtype.element_ty))


# --8<-- [end:varlen_fwd]


# --8<-- [start:varlen_dkdv]
@triton.jit(do_not_specialize=_NO_SPECIALIZE)
def _varlen_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    LSE2,
    DELTA,
    CU_Q,
    CU_K,
    ORDER,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_dks,
    stride_dkh,
    stride_dvs,
    stride_dvh,
    n_seqs,
    n_heads,
    group_size,
    total_q,
    softmax_scale,
    qk_scale,
    SEQ_BUCKET,
    window_left,
    window_right,
    cap_in,
    cap_out,
    SLOPES,
    RNG,
    p_drop,
    drop_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACROSS_HEADS: tl.constexpr,
    CHUNK: tl.constexpr,
    IS_LOCAL: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    ALIBI: tl.constexpr = False,
    DROPOUT: tl.constexpr = False,
):
    """One program = BLOCK_N keys of one (sequence, kv head), streaming every query row of its GQA group that
    sees them. Q, DO: ``head_tiles`` descriptors over the (1, total_q, heads, head_dim) views; K, V, DK, DV:
    (total_k, kv heads, head_dim) tensors; LSE2, DELTA: (heads, total_q) fp32; ORDER: the ``schedule`` of the
    query lengths. The first key tiles are the costliest under a causal mask, and go first as they come."""
    n_kv_heads = n_heads // group_size
    seq, off_hk, tile = find_tile(tl.program_id(0), ORDER, CU_K, n_seqs, n_kv_heads, BLOCK_N, CHUNK)
    if seq < 0:
        return
    q_start, len_q, k_start, len_k = sequence(CU_Q, CU_K, seq)
    diag = len_k - len_q  # bottom-right alignment in each sequence (mask.band)
    left_offset = diag - window_left if IS_LOCAL else None
    right_offset = diag + window_right
    start_n = tile * BLOCK_N
    offs_n = k_start + start_n + tl.arange(0, BLOCK_N)
    k_base = K + k_start.to(tl.int64) * stride_ks + off_hk * stride_kh
    v_base = V + k_start.to(tl.int64) * stride_vs + off_hk * stride_vh
    k = head_desc(k_base, len_k, stride_ks, HEAD_DIM, BLOCK_N, BLOCK_D).load([start_n, 0])
    v = head_desc(v_base, len_k, stride_vs, HEAD_DIM, BLOCK_N, BLOCK_D).load([start_n, 0])
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    seed = tl.load(RNG) if DROPOUT else None
    rng_offset = tl.load(RNG + 1) if DROPOUT else None
    lo, full_lo, full_hi, hi = query_block_range(
        start_n, len_q, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    bounds = (
        q_start + lo,
        q_start + full_lo,
        q_start + full_lo,
        q_start + full_hi,
        q_start + tl.maximum(full_hi, full_lo),
        q_start + hi,
    )
    shift = k_start - q_start
    left_offset = left_offset + shift if IS_LOCAL else None
    right_offset = right_offset + shift
    alibi_offset = diag + shift if ALIBI else None
    for g in range(group_size):
        off_h = off_hk * group_size + g
        lse2_base = LSE2 + off_h.to(tl.int64) * total_q
        delta_base = DELTA + off_h.to(tl.int64) * total_q
        slope = tl.load(SLOPES + seq * n_heads + off_h) if ALIBI else None
        # diagonal tiles (masked), full tiles (no mask), then the far edge and the ragged last tile (masked)
        for part in tl.static_range(3):
            dk, dv = _attn_bwd_dkdv_inner(
                dk,
                dv,
                k,
                v,
                Q,
                DO,
                0,
                off_h,
                lse2_base,
                delta_base,
                offs_n,
                q_start + len_q,
                left_offset,
                right_offset,
                qk_scale,
                bounds[2 * part],
                bounds[2 * part + 1],
                cap_in,
                cap_out,
                slope,
                alibi_offset,
                seed,
                rng_offset,
                off_h,
                p_drop,
                drop_scale,
                BLOCK_M,
                BLOCK_D,
                IS_CAUSAL,
                IS_LOCAL,
                part != 1,
                SOFTCAP,
                ALIBI,
                DROPOUT,
                DOT_PRECISION,
            )

    dk *= softmax_scale  # S = scale * Q K^T, so dK = scale * dS^T Q
    # descriptors of this sequence alone: key rows past its end are not written
    dk_base = DK + k_start.to(tl.int64) * stride_dks + off_hk * stride_dkh
    dv_base = DV + k_start.to(tl.int64) * stride_dvs + off_hk * stride_dvh
    head_desc(dk_base, len_k, stride_dks, HEAD_DIM, BLOCK_N, BLOCK_D).store([start_n, 0], dk.to(DK.dtype.element_ty))
    head_desc(dv_base, len_k, stride_dvs, HEAD_DIM, BLOCK_N, BLOCK_D).store([start_n, 0], dv.to(DV.dtype.element_ty))


# --8<-- [end:varlen_dkdv]


# --8<-- [start:varlen_dq]
@triton.jit(do_not_specialize=_NO_SPECIALIZE)
def _varlen_bwd_dq(
    Q,
    K,
    V,
    DO,
    DQ,
    LSE2,
    DELTA,
    CU_Q,
    CU_K,
    ORDER,
    stride_qs,
    stride_qh,
    stride_dos,
    stride_doh,
    stride_dqs,
    stride_dqh,
    n_seqs,
    n_heads,
    group_size,
    total_q,
    softmax_scale,
    qk_scale,
    SEQ_BUCKET,
    window_left,
    window_right,
    cap_in,
    cap_out,
    SLOPES,
    RNG,
    p_drop,
    drop_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACROSS_HEADS: tl.constexpr,
    CHUNK: tl.constexpr,
    IS_LOCAL: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    ALIBI: tl.constexpr = False,
    DROPOUT: tl.constexpr = False,
):
    """One program = BLOCK_M query rows of one (sequence, head), streaming the keys they see, like the forward.
    Q, DO, DQ: (total_q, heads, head_dim) tensors; K, V: ``head_tiles`` descriptors over the (1, total_k, kv
    heads, head_dim) views; ORDER: the ``schedule`` of the key lengths."""
    seq, off_h, tile = find_tile(tl.program_id(0), ORDER, CU_Q, n_seqs, n_heads, BLOCK_M, CHUNK)
    if seq < 0:
        return
    q_start, len_q, k_start, len_k = sequence(CU_Q, CU_K, seq)
    if IS_CAUSAL:
        tile = (len_q + BLOCK_M - 1) // BLOCK_M - 1 - tile
    off_hk = off_h // group_size
    diag = len_k - len_q  # bottom-right alignment in each sequence (mask.band)
    left_offset = diag - window_left if IS_LOCAL else None
    right_offset = diag + window_right
    start_m = tile * BLOCK_M
    offs_m = q_start + start_m + tl.arange(0, BLOCK_M)
    q_base = Q + q_start.to(tl.int64) * stride_qs + off_h * stride_qh
    do_base = DO + q_start.to(tl.int64) * stride_dos + off_h * stride_doh
    q = head_desc(q_base, len_q, stride_qs, HEAD_DIM, BLOCK_M, BLOCK_D).load([start_m, 0])
    do = head_desc(do_base, len_q, stride_dos, HEAD_DIM, BLOCK_M, BLOCK_D).load([start_m, 0])
    row = off_h.to(tl.int64) * total_q + offs_m
    in_seq = offs_m < q_start + len_q
    lse2 = tl.load(LSE2 + row, mask=in_seq, other=float("inf"))
    delta = tl.load(DELTA + row, mask=in_seq, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    slope = tl.load(SLOPES + seq * n_heads + off_h) if ALIBI else None
    seed = tl.load(RNG) if DROPOUT else None
    rng_offset = tl.load(RNG + 1) if DROPOUT else None
    lo, full_lo, full_hi, hi = key_block_range(
        start_m, len_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    bounds = (k_start + lo, k_start + full_lo, k_start + full_hi, k_start + hi)
    shift = k_start - q_start
    left_offset = left_offset + shift if IS_LOCAL else None
    right_offset = right_offset + shift
    alibi_offset = diag + shift if ALIBI else None
    for part in tl.static_range(3):
        if part != 0 or IS_LOCAL:
            dq = _attn_bwd_dq_inner(
                dq,
                q,
                do,
                lse2,
                delta,
                K,
                V,
                0,
                off_hk,
                offs_m,
                k_start + len_k,
                left_offset,
                right_offset,
                qk_scale,
                bounds[part],
                bounds[part + 1],
                cap_in,
                cap_out,
                slope,
                alibi_offset,
                seed,
                rng_offset,
                off_h,
                p_drop,
                drop_scale,
                BLOCK_N,
                BLOCK_D,
                IS_CAUSAL,
                IS_LOCAL,
                part != 1,
                SOFTCAP,
                ALIBI,
                DROPOUT,
                DOT_PRECISION,
            )
    dq *= softmax_scale
    dq_base = DQ + q_start.to(tl.int64) * stride_dqs + off_h * stride_dqh
    head_desc(dq_base, len_q, stride_dqs, HEAD_DIM, BLOCK_M, BLOCK_D).store([start_m, 0], dq.to(DQ.dtype.element_ty))


# --8<-- [end:varlen_dq]


def _tuned(kernel, table):
    return (
        None
        if INTERPRET
        else triton.autotune(
            configs=all_configs(table),
            key=["SEQ_BUCKET", "HEAD_DIM", *VARIANT_FLAGS],  # the autotuner adds the tensors' dtypes to the key
            prune_configs_by={"early_config_prune": prune_for(table)},
        )(kernel)
    )


_varlen_fwd_tuned = _tuned(_varlen_fwd, FWD_CONFIGS)
_varlen_bwd_dkdv_tuned = _tuned(_varlen_bwd_dkdv, DKDV_CONFIGS)
_varlen_bwd_dq_tuned = _tuned(_varlen_bwd_dq, DQ_CONFIGS)


# ---------------------------------------------------------------------------------------------------------------
# Launch functions
# ---------------------------------------------------------------------------------------------------------------


def _packed(t: torch.Tensor, block_rows: str):
    """A ``head_tiles`` descriptor over a packed (total, heads, head_dim) tensor seen as one sequence."""
    return head_tiles(t.unsqueeze(0), block_rows)


def _common(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, softmax_scale, causal, variant):
    n_seqs, n_heads, head_dim = cu_seqlens_q.shape[0] - 1, q.shape[1], q.shape[2]
    band = Band(causal, variant.window_size, max_seqlen_k)
    tail, flags = variant_args(variant, band, n_seqs, n_heads, softmax_scale)
    meta = dict(HEAD_DIM=head_dim, BLOCK_D=block_d_for(head_dim), **flags, DOT_PRECISION=dot_precision(q.dtype))
    meta["CHUNK"] = CHUNK
    sizes = (n_seqs, n_heads, n_heads // k.shape[1], q.shape[0])
    return sizes, seq_bucket(max(max_seqlen_q, max_seqlen_k, 1)), tail, meta


def gluon_varlen(q: torch.Tensor, causal: bool, variant: Variant) -> bool:
    """Whether ``varlen_fwd`` runs a call on the Hopper forward: wherever the dense Hopper forward would take it
    (``forward_hopper.supports``: a Hopper GPU, fp16/bf16, a head dim with a tuned config; windows and softcap,
    not ALiBi or dropout). On an H200 it ran 1.03x the dense forward's rate on the same tokens (1.14x causal),
    where this module's portable forward ran 0.77-0.83x."""
    return hopper_supports(forward_hopper.supports, q, causal, variant)


def varlen_fwd(
    q,
    k,
    v,
    out,
    lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    config=None,
    variant: Variant = None,
):
    """Launch the varlen forward. q, out: (total_q, H, D); k, v: (total_k, Hk, D); lse: (H, total_q) fp32;
    cu_seqlens_*: (B + 1,) int32 on q's device. variant and config as in ``forward.attn_fwd``: the calls
    ``gluon_varlen`` picks go to ``varlen_fwd_hopper``, unless a config keeps them here."""
    variant = variant or Variant()
    if config is None and gluon_varlen(q, causal, variant):
        with on_device(q.device):
            varlen_fwd_hopper(
                q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, softmax_scale, causal, variant
            )
        return
    sizes, bucket, tail, meta = _common(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, softmax_scale, causal, variant)
    n_seqs, n_heads, _, total_q = sizes
    args = (
        q,
        _packed(k, "BLOCK_N"),
        _packed(v, "BLOCK_N"),
        out,
        lse,
        cu_seqlens_q,
        cu_seqlens_k,
        schedule(cu_seqlens_k),
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        *sizes,
        softmax_scale * LOG2E,
        bucket,
        *tail,
    )
    with on_device(q.device):
        launch(
            _varlen_fwd,
            _varlen_fwd_tuned,
            varlen_grid(total_q, n_seqs, n_heads, "BLOCK_M"),
            args,
            meta,
            config,
            configs_for(FWD_CONFIGS, meta["BLOCK_D"], q.dtype, meta["IS_CAUSAL"])[0],
        )


# A sliding window's right edge where it has none: past every key of any sequence that fits in memory, and far
# enough from int32's end that no offset computed from it overflows. (The Hopper kernels' left edge comes with a
# right one, as ``hopper_common.mask`` arranges for dense calls.)
UNBOUNDED_RIGHT = 1 << 30


def _hopper_band(band: Band) -> tuple:
    """(IS_CAUSAL, right_offset, left_offset) of the Hopper kernels for a varlen call's band: the offsets from
    each sequence's bottom-right diagonal, which the kernels add to their own (a left edge without a right one
    runs the causal kernels, their right edge past every key)."""
    is_causal, right = band.is_causal, band.right
    if band.is_local and not is_causal:
        is_causal, right = True, UNBOUNDED_RIGHT
    return is_causal, right, -band.left if band.is_local else 0


def varlen_fwd_hopper(
    q,
    k,
    v,
    out,
    lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    variant: Variant = None,
    config=None,
):
    """``varlen_fwd`` on the Hopper forward (``forward_hopper._attn_fwd_hopper`` with VARLEN; ``gluon_varlen``
    said yes). Shapes as in ``varlen_fwd``; config as ``forward_hopper.attn_fwd_hopper`` takes it, default the
    dense call's. Runs inside ``launch.on_device``. Like ``varlen_fwd``, reads nothing on the host."""
    variant = variant or Variant()
    band = Band(causal, variant.window_size, max_seqlen_k)
    counter = torch.zeros(1, device=q.device, dtype=torch.int32)  # the next work item to claim
    objects = (q, k, v, out, lse, counter, cu_seqlens_q, cu_seqlens_k, schedule(cu_seqlens_k))
    key = (
        *map(layout, (q, k, v, out)),
        aligned(out),
        aligned(lse),
        aligned(cu_seqlens_q),
        aligned(cu_seqlens_k),
        cu_seqlens_q.shape[0],
        q.device,
        softmax_scale,
        band.is_causal,
        band.is_local,
        band.left,
        band.right,
        variant.softcap,
        config,
    )
    plan = planned(_hopper_plans, key, lambda: _hopper_plan(distinct(objects), band, softmax_scale, variant, config))
    plan(objects)


_hopper_plans = plan_cache()


def _hopper_plan(objects, band: Band, softmax_scale: float, variant: Variant, config):
    """``varlen_fwd_hopper``'s launch for the layout of ``objects`` (q, k, v, out, lse, counter, cu_seqlens_q,
    cu_seqlens_k, the schedule)."""
    q, k, v, out, lse, counter, cu_seqlens_q, cu_seqlens_k, order = objects
    total_q, n_heads, head_dim = q.shape
    n_seqs = cu_seqlens_q.shape[0] - 1
    is_causal, right, left = _hopper_band(band)
    config = forward_hopper.table_config((head_dim, is_causal), band.is_local, config)
    block_m, block_n, stages, _, persistent = config
    consumers = consumers_of(config, "the Hopper varlen forward")
    total = n_heads * tile_bound(total_q, n_seqs, consumers * block_m)  # the items' count is on the device
    grid = (min(total, forward_hopper._sm_count(q.device.index)) if persistent else total,)
    qk_scale, softcap_scale = score_scales(variant.softcap, softmax_scale)
    return gluon_plan(
        forward_hopper._attn_fwd_hopper,
        grid,
        (
            packed_descriptor(q, block_m),
            packed_descriptor(k, block_n),
            packed_descriptor(v, block_n),
            packed_descriptor(out, block_m),
            lse,
            counter,
            0,  # n_tiles, per sequence in the kernel
            total,
            1,  # section: the order is the schedule's
            n_heads,
            n_heads // k.shape[1],
            0,  # seqlen_q and seqlen_k, per sequence in the kernel
            0,
            right,  # the band's offsets from each sequence's bottom-right diagonal (mask.band)
            qk_scale,
            left,
            softcap_scale,
            out,
            out.stride(0),
            out.stride(1),
            cu_seqlens_q,
            cu_seqlens_k,
            order,
            n_seqs,
            total_q,
        ),
        dict(
            IS_CAUSAL=is_causal,
            IS_LOCAL=band.is_local,
            SOFTCAP=variant.softcap > 0,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            STAGES=stages,
            N_CONSUMERS=consumers,
            O_IN_Q=head_dim > forward_hopper.MAX_SEPARATE_O_HEAD_DIM,
            VARLEN=True,
            BOUNDED_EXPONENT=forward_hopper.bounded(head_dim, variant.softcap, q.dtype),
        ),
        4,
        objects,
    )


def gluon_varlen_bwd(q: torch.Tensor, causal: bool, variant: Variant) -> tuple:
    """(dK/dV, dQ): whether ``varlen_bwd`` runs each kernel of a call on the Hopper backward: where the dense
    Hopper backward would take it (``backward_hopper.supports_dkdv`` and ``supports_dq`` on the packed tensors
    seen as one batch: a Hopper GPU, fp16/bf16, a head dim with a tuned config; windows and softcap, not ALiBi or
    dropout). Never the fused dK/dV/dQ kernel: its dQ adds every key block's share with atomics, where the split
    kernels write each gradient element once."""
    q1 = q.unsqueeze(0)
    return (
        hopper_supports(backward_hopper.supports_dkdv, q1, causal, variant),
        hopper_supports(backward_hopper.supports_dq, q1, causal, variant),
    )


def varlen_bwd(
    dout,
    q,
    k,
    v,
    out,
    lse,
    dlse,
    dq,
    dk,
    dv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    config=None,
    variant: Variant = None,
):
    """Launch the preprocess (the dense one, on the packed views), dK/dV and dQ. Shapes as in ``varlen_fwd``;
    dlse: None or (H, total_q); dq, dk, dv written in place. config: a (dK/dV, dQ) ``triton.Config`` pair
    instead of autotuning, on the portable kernels; without one, the kernels ``gluon_varlen_bwd`` picks run on
    the Hopper backward (``varlen_bwd_dkdv_hopper``, ``varlen_bwd_dq_hopper``). Each gradient element is written
    by one program: deterministic."""
    variant = variant or Variant()
    sizes, bucket, tail, meta = _common(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, softmax_scale, causal, variant)
    n_seqs, n_heads, group_size, total_q = sizes
    dkdv_config, dq_config = config if config is not None else (None, None)
    dkdv_hopper, dq_hopper = gluon_varlen_bwd(q, causal, variant) if config is None else (False, False)
    scalars = (*sizes, softmax_scale, softmax_scale * LOG2E, bucket, *tail)
    with on_device(q.device):
        delta, lse2 = bwd_preprocess(dout.unsqueeze(0), out.unsqueeze(0), lse.unsqueeze(0), dlse)
        # key blocks cost as many steps as their sequence has queries, query tiles as many as it has keys
        order_q, order_k = schedule(cu_seqlens_q), schedule(cu_seqlens_k)
        hopper = (lse2, delta, cu_seqlens_q, cu_seqlens_k)
        # as in the dense backward, the dQ kernel runs on a second stream, overlapping the dK/dV kernel's tail
        dq_stream = forked_stream()
        if dkdv_hopper:
            varlen_bwd_dkdv_hopper(
                q, k, v, dout, dk, dv, *hopper, order_q, max_seqlen_k, softmax_scale, causal, variant
            )
        else:
            dkdv_args = (
                _packed(q, "BLOCK_M"),
                k,
                v,
                _packed(dout, "BLOCK_M"),
                dk,
                dv,
                lse2,
                delta,
                cu_seqlens_q,
                cu_seqlens_k,
                order_q,
                k.stride(0),
                k.stride(1),
                v.stride(0),
                v.stride(1),
                dk.stride(0),
                dk.stride(1),
                dv.stride(0),
                dv.stride(1),
                *scalars,
            )
            launch(
                _varlen_bwd_dkdv,
                _varlen_bwd_dkdv_tuned,
                varlen_grid(k.shape[0], n_seqs, n_heads // group_size, "BLOCK_N"),
                dkdv_args,
                meta,
                dkdv_config,
                configs_for(DKDV_CONFIGS, meta["BLOCK_D"], q.dtype, meta["IS_CAUSAL"])[0],
            )
        with dq_stream:
            if dq_hopper:
                varlen_bwd_dq_hopper(q, k, v, dout, dq, *hopper, order_k, max_seqlen_k, softmax_scale, causal, variant)
            else:
                dq_args = (
                    q,
                    _packed(k, "BLOCK_N"),
                    _packed(v, "BLOCK_N"),
                    dout,
                    dq,
                    lse2,
                    delta,
                    cu_seqlens_q,
                    cu_seqlens_k,
                    order_k,
                    q.stride(0),
                    q.stride(1),
                    dout.stride(0),
                    dout.stride(1),
                    dq.stride(0),
                    dq.stride(1),
                    *scalars,
                )
                launch(
                    _varlen_bwd_dq,
                    _varlen_bwd_dq_tuned,
                    varlen_grid(total_q, n_seqs, n_heads, "BLOCK_M"),
                    dq_args,
                    meta,
                    dq_config,
                    configs_for(DQ_CONFIGS, meta["BLOCK_D"], q.dtype, meta["IS_CAUSAL"])[0],
                )
        dq_stream.join()


def _bwd_key(band: Band, softmax_scale: float, variant: Variant, config, *tensors) -> tuple:
    """What a Hopper varlen backward plan depends on besides its tensors' data: the tensors' layouts (pointers'
    alignment, which Triton specialises on, for those passed as pointers), the band, scale, softcap and config."""
    return (
        *map(layout, tensors),
        *map(aligned, tensors),
        tensors[0].device,
        softmax_scale,
        band.is_causal,
        band.is_local,
        band.left,
        band.right,
        variant.softcap,
        config,
    )


@triton.jit
def _item_table(ITEMS, ORDER, CU, n_seqs, n_units, ROWS: tl.constexpr, CHUNK: tl.constexpr):
    """ITEMS[2 i], ITEMS[2 i + 1] = (seq, local) of varlen work item i = this program's id (``find_item``; seq =
    -1 past the last item)."""
    i = tl.program_id(0)
    zero = i * 0  # (the search carries these through its loop: tensors, not constants)
    seq, local, _, _ = find_item(i, tl.arange(0, CHUNK), ORDER, CU, n_seqs, n_units, ROWS, zero, zero)
    tl.store(ITEMS + 2 * i, seq)
    tl.store(ITEMS + 2 * i + 1, local)


ITEM_TABLE_CONFIG = triton.Config({}, num_warps=4, num_stages=1)


def item_table(order, cu_seqlens, n_units: int, rows: int, n_programs: int) -> torch.Tensor:
    """(seq, local) of each of n_programs varlen work items, as an int32 (n_programs, 2) table on the device: the
    Hopper backward kernels' programs read theirs from it. Items are numbered as ``find_tile`` numbers the
    portable kernels' programs (sequences in ``order``, n_units x cdiv(length, rows) items each). The search
    runs in this small kernel rather than at the top of the warp-specialised ones (``backward_hopper._packed_item``
    says why); nothing reads the table on the host."""
    items = torch.empty(n_programs, 2, dtype=torch.int32, device=order.device)
    n_seqs = cu_seqlens.shape[0] - 1
    meta = dict(ROWS=rows, CHUNK=CHUNK)
    args = (items, order, cu_seqlens, n_seqs, n_units)
    launch(_item_table, None, lambda _: (n_programs,), args, meta, ITEM_TABLE_CONFIG, ITEM_TABLE_CONFIG)
    return items


def padded_rows(t: torch.Tensor, cu_seqlens: torch.Tensor, block: int) -> torch.Tensor:
    """t (m, heads, total) with sequence b's columns moved to start at (cu_seqlens[b] + b block) // block x
    block (``backward_hopper._lse_start``), a multiple of block, in an (m, heads, n) buffer of zeros that holds
    them all; on the device, reading nothing on the host. A TMA tile of a sequence's rows then starts on 16
    bytes, which one at cu_seqlens[b] need not."""
    total = t.shape[2]
    n_seqs = cu_seqlens.shape[0] - 1
    n = -(-(total + n_seqs * block) // block) * block
    rows = torch.arange(total, device=t.device)
    seq = torch.searchsorted(cu_seqlens[1:], rows.to(cu_seqlens.dtype), right=True)
    starts = (cu_seqlens[:-1] + torch.arange(n_seqs, device=t.device, dtype=cu_seqlens.dtype) * block) // block * block
    out = t.new_zeros(t.shape[0], t.shape[1], n)
    out[:, :, rows - cu_seqlens[seq] + starts[seq]] = t
    return out


def varlen_bwd_dkdv_hopper(
    q,
    k,
    v,
    dout,
    dk,
    dv,
    lse2,
    delta,
    cu_seqlens_q,
    cu_seqlens_k,
    order,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    variant: Variant = None,
    config=None,
):
    """``varlen_bwd``'s dK/dV on the Hopper dK/dV kernels (``backward_hopper._attn_bwd_dkdv_hopper``, or its wide
    form past ``MAX_NARROW_HEAD_DIM``, with VARLEN; ``gluon_varlen_bwd`` said yes). lse2, delta: (1, H, total_q)
    from ``bwd_preprocess``; order: the ``schedule`` of the query lengths. config as
    ``backward_hopper.bwd_dkdv_hopper`` takes it, default the dense call's. Runs inside ``launch.on_device``;
    reads nothing on the host."""
    variant = variant or Variant()
    band = Band(causal, variant.window_size, max_seqlen_k)
    key = forward_hopper.table_key(q, causal, variant.window_size)
    config = config or backward_hopper.HOPPER_DKDV_CONFIGS[key]
    # the producer copies each streamed tile's LSE and delta rows into the ring with its Q and dO, by TMA, whose
    # tiles start on 16 bytes: each sequence's rows move to a start that is (``padded_rows``)
    # (both in one buffer: one index computation for the two)
    padded = padded_rows(torch.cat((lse2, delta)), cu_seqlens_q, config[0])
    rows = (rows_descriptor(padded[0:1], config[0]), rows_descriptor(padded[1:2], config[0]))
    # items: (sequence, kv head, key block); the wide kernel's two consumers share one block of keys
    block_m, block_n, _, consumers = config
    keys = block_n if q.shape[-1] > backward_hopper.MAX_NARROW_HEAD_DIM else consumers * block_n
    n_programs = k.shape[1] * tile_bound(k.shape[0], cu_seqlens_k.shape[0] - 1, keys)
    items = item_table(order, cu_seqlens_k, k.shape[1], keys, n_programs)
    objects = (q, k, v, dout, dk, dv, *rows, cu_seqlens_q, cu_seqlens_k, items)
    plan = planned(
        _dkdv_hopper_plans,
        _bwd_key(band, softmax_scale, variant, config, q, k, v, dout, dk, dv, cu_seqlens_q, cu_seqlens_k),
        lambda: _dkdv_hopper_plan(distinct(objects), band, softmax_scale, variant, config),
    )
    plan(objects)


_dkdv_hopper_plans = plan_cache()


def _dkdv_hopper_plan(objects, band: Band, softmax_scale: float, variant: Variant, config):
    """``varlen_bwd_dkdv_hopper``'s launch for the layout of ``objects`` (q, k, v, dout, dk, dv, the LSE's and
    delta's ``rows_descriptor``s, cu_seqlens_q, cu_seqlens_k, the ``item_table``)."""
    q, k, v, dout, dk, dv, lse2_rows, delta_rows, cu_seqlens_q, cu_seqlens_k, items = objects
    total_q, n_heads, head_dim = q.shape
    n_kv_heads = k.shape[1]
    n_seqs = cu_seqlens_q.shape[0] - 1
    is_causal, right, left = _hopper_band(band)
    qk_scale, softcap_scale = score_scales(variant.softcap, softmax_scale)
    block_m, block_n, stages, _ = config
    consumers, wide = backward_hopper.dkdv_consumers(config, head_dim)
    grid = (items.shape[0],)  # a program per item: (sequence, kv head, key block)
    rest = (
        lse2_rows,
        delta_rows,
        n_heads,
        n_heads // n_kv_heads,
        0,  # seqlen_q and seqlen_k, per sequence in the kernel
        0,
        right,
        softmax_scale,
        qk_scale,
        left,
        softcap_scale,
        dk,
        dv,
        dk.stride(0),
        dk.stride(1),
        dv.stride(0),
        dv.stride(1),
        cu_seqlens_q,
        cu_seqlens_k,
        items,
        n_seqs,
        total_q,
    )
    constexprs = dict(IS_CAUSAL=is_causal, IS_LOCAL=band.is_local, SOFTCAP=variant.softcap > 0, STAGES=stages)
    if wide:
        cols = head_dim // 2
        descriptors = (
            packed_descriptor(t, rows, cols)
            for t, rows in ((q, block_m), (dout, block_m), (k, block_n), (v, block_n), (dk, block_n), (dv, block_n))
        )
        return gluon_plan(
            backward_hopper._attn_bwd_dkdv_hopper_wide,
            grid,
            (*descriptors, *rest),
            dict(**constexprs, VARLEN=True),
            4,
            objects,
        )
    dk_desc = packed_descriptor(dk, block_n)  # (unread: dK and dV leave by masked stores)
    descriptors = (
        packed_descriptor(q, block_m),
        packed_descriptor(dout, block_m),
        packed_descriptor(k, block_n),
        packed_descriptor(v, block_n),
        dk_desc,
        packed_descriptor(dv, block_n),
        dk_desc,  # dq_desc: the fused kernel's, unread
    )
    return gluon_plan(
        backward_hopper._attn_bwd_dkdv_hopper,
        grid,
        (*descriptors, *rest),
        dict(**constexprs, N_CONSUMERS=consumers, VARLEN=True),
        4,
        objects,
    )


def varlen_bwd_dq_hopper(
    q,
    k,
    v,
    dout,
    dq,
    lse2,
    delta,
    cu_seqlens_q,
    cu_seqlens_k,
    order,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    variant: Variant = None,
    config=None,
):
    """``varlen_bwd``'s dQ on the Hopper dQ kernel (``backward_hopper._attn_bwd_dq_hopper`` with VARLEN;
    ``gluon_varlen_bwd`` said yes). order: the ``schedule`` of the key lengths; the rest as in
    ``varlen_bwd_dkdv_hopper``, config as ``backward_hopper.bwd_dq_hopper`` takes it."""
    variant = variant or Variant()
    band = Band(causal, variant.window_size, max_seqlen_k)
    config = config or backward_hopper.HOPPER_DQ_CONFIGS[forward_hopper.table_key(q, causal, variant.window_size)]
    block_m, _, _, consumers = config
    n_programs = q.shape[1] * tile_bound(q.shape[0], cu_seqlens_q.shape[0] - 1, consumers * block_m)
    items = item_table(order, cu_seqlens_q, q.shape[1], consumers * block_m, n_programs)
    objects = (q, k, v, dout, dq, lse2, delta, cu_seqlens_q, cu_seqlens_k, items)
    plan = planned(
        _dq_hopper_plans,
        _bwd_key(band, softmax_scale, variant, config, q, k, v, dout, dq, lse2, delta, cu_seqlens_q, cu_seqlens_k),
        lambda: _dq_hopper_plan(distinct(objects), band, softmax_scale, variant, config),
    )
    plan(objects)


_dq_hopper_plans = plan_cache()


def _dq_hopper_plan(objects, band: Band, softmax_scale: float, variant: Variant, config):
    """``varlen_bwd_dq_hopper``'s launch for the layout of ``objects`` (q, k, v, dout, dq, lse2, delta,
    cu_seqlens_q, cu_seqlens_k, the ``item_table``)."""
    q, k, v, dout, dq, lse2, delta, cu_seqlens_q, cu_seqlens_k, items = objects
    total_q, n_heads, head_dim = q.shape
    n_seqs = cu_seqlens_q.shape[0] - 1
    is_causal, right, left = _hopper_band(band)
    qk_scale, softcap_scale = score_scales(variant.softcap, softmax_scale)
    block_m, block_n, stages, _ = config
    consumers = consumers_of(config, "the varlen dQ kernel")
    grid = (items.shape[0],)  # a program per item: (sequence, head, query rows)
    return gluon_plan(
        backward_hopper._attn_bwd_dq_hopper,
        grid,
        (
            packed_descriptor(q, block_m),
            packed_descriptor(dout, block_m),
            packed_descriptor(k, block_n),
            packed_descriptor(v, block_n),
            packed_descriptor(dq, block_m),  # (unread: dQ leaves by masked stores)
            lse2,
            delta,
            n_heads,
            n_heads // k.shape[1],
            0,  # seqlen_q and seqlen_k, per sequence in the kernel
            0,
            right,
            softmax_scale,
            qk_scale,
            left,
            softcap_scale,
            dq,
            dq.stride(0),
            dq.stride(1),
            cu_seqlens_q,
            cu_seqlens_k,
            items,
            n_seqs,
            total_q,
        ),
        dict(
            IS_CAUSAL=is_causal,
            IS_LOCAL=band.is_local,
            SOFTCAP=variant.softcap > 0,
            STAGES=stages,
            N_CONSUMERS=consumers,
            VARLEN=True,
        ),
        4,
        objects,
    )
