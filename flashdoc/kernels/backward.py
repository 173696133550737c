"""FlashAttention-2 backward: preprocess, then dK/dV and dQ in two kernels that recompute P from the LSE.

No N x N matrix is ever stored. Each gradient element is written by exactly one program, with no atomics, so
the gradients are bit-identical from run to run. On Hopper, a call that does not ask for determinism runs a fused
kernel instead where one measured faster (``fused_dq_runs``): 5 matrix products per tile pair instead of 7, with
dQ added across key blocks in an order that varies from run to run, as flash-attn's default does. Q, K, V, dO and the
gradients move through tensor descriptors (TMA on Hopper), like the forward: no address arithmetic, no masks
on tiles, and the K/V (or Q/dO) tiles a program keeps go straight to shared memory, sparing registers.
"""

import inspect

import torch
import triton
import triton.language as tl

from . import INTERPRET, LOG2E, backward_hopper
from .common import (
    all_configs,
    block_d_for,
    configs_for,
    dot_precision,
    head_desc,
    one_axis,
    program_tile,
    prune_for,
    seq_bucket,
    tile_grid,
)
from .launch import (
    aligned,
    config_key,
    distinct,
    forked_stream,
    head_tiles,
    layout,
    on_device,
    plan_cache,
    planned,
    tile_config,
    triton_plan,
)
from .mask import (
    VARIANT_FLAGS,
    Variant,
    alibi,
    dropout_keep,
    hopper_supports,
    key_block_range,
    mask_scores,
    query_block_range,
    softcap,
    softcap_grad,
    variant_args,
    variant_key,
)

# ---------------------------------------------------------------------------------------------------------------
# Tuning constants
# ---------------------------------------------------------------------------------------------------------------

# The preprocess kernel is a row reduction over O and dO: memory bound, any moderate tile does (the same on CPU).
PRE_CONFIG = triton.Config({"BLOCK_M": 64}, num_warps=4, num_stages=3)


# dK/dV and dQ get their own tiles (FlashAttention-2): each keeps one tile resident and streams the other.
# dK/dV keeps BLOCK_N keys and two fp32 (BLOCK_N, d) accumulators, streaming BLOCK_M query rows per step; dQ keeps
# BLOCK_M queries and one accumulator, streaming BLOCK_N keys per step. Safe default first; chosen by
# benchmarks/kernels/sweep.py on the H200. At d = 128 two 4-warp dK/dV programs per SM beat one 8-warp program by
# 10-20%; at d = 256 the dQ kernel with 128 query rows over 8 warps runs 3x faster than with 64. Launching
# causal tiles across heads (see common.program_tile) measured 0-6% slower here, so no config sets it. fp32 (non
# tensor-core products) gets small tiles. Under the causal mask at d = 64, 128 keys with 2 stages instead of 3
# made the whole backward (both kernels timed together, concurrently) 8-11% faster, and 3-5% faster than the pair
# the autotuner used to pick there (benchmarks/FINDINGS.md); without the mask 3 stages stay 6-10% ahead.
# Keys: (head dim, fp32?); an entry keyed (head dim, fp32?, True) replaces that one under the causal mask.
DKDV_CONFIGS = {
    (64, False): [tile_config(32, 128, 3, 4), tile_config(64, 64, 3, 4), tile_config(128, 64, 2, 4)],
    (64, False, True): [tile_config(32, 128, 2, 4), tile_config(64, 64, 3, 4), tile_config(128, 64, 2, 4)],  # causal
    (128, False): [tile_config(64, 64, 2, 4), tile_config(32, 64, 4, 4), tile_config(64, 128, 2, 8)],
    (256, False): [tile_config(64, 64, 2, 8), tile_config(32, 64, 3, 8)],
    (64, True): [tile_config(32, 64, 2, 4)],
    (128, True): [tile_config(32, 32, 2, 4)],
    (256, True): [tile_config(16, 32, 1, 4)],
}
DQ_CONFIGS = {
    (64, False): [tile_config(128, 64, 3, 8), tile_config(64, 64, 3, 4), tile_config(64, 64, 2, 4)],
    (128, False): [tile_config(128, 64, 3, 8), tile_config(128, 64, 4, 8), tile_config(64, 64, 2, 4)],
    (256, False): [tile_config(128, 32, 3, 8), tile_config(128, 32, 2, 8), tile_config(64, 16, 3, 4)],
    (64, True): [tile_config(64, 32, 2, 4)],
    (128, True): [tile_config(32, 32, 2, 4)],
    (256, True): [tile_config(32, 16, 1, 4)],
}


# ---------------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:bwd_preprocess]
@triton.jit(do_not_specialize=["n_heads", "seqlen_q"])
def _attn_bwd_preprocess(
    O,
    DO,
    LSE,
    DLSE,
    DELTA,
    LSE2,
    n_heads,
    seqlen_q,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_DLSE: tl.constexpr,
    ONE_AXIS: tl.constexpr,
):
    """delta = rowsum(dO * O) (minus dLSE when the LSE itself was used), and LSE in log2 units for exp2.
    O, DO: ``head_tiles`` descriptors."""
    pid_m, pid_bh = program_tile((seqlen_q + BLOCK_M - 1) // BLOCK_M, False, False, False, ONE_AXIS)
    off_b = pid_bh // n_heads
    off_h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o = O.load([off_b, pid_m * BLOCK_M, off_h, 0]).reshape(BLOCK_M, BLOCK_D)
    do = DO.load([off_b, pid_m * BLOCK_M, off_h, 0]).reshape(BLOCK_M, BLOCK_D)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    row = pid_bh.to(tl.int64) * seqlen_q + offs_m
    if HAS_DLSE:
        # d lse_i / d s_ij = P_ij, so an upstream dLSE just shifts delta: dS = P * (dP - (delta - dLSE))
        delta -= tl.load(DLSE + row, mask=offs_m < seqlen_q, other=0.0)
    tl.store(DELTA + row, delta, mask=offs_m < seqlen_q)
    lse = tl.load(LSE + row, mask=offs_m < seqlen_q, other=0.0)
    # rows that saw no key have lse = -inf; +inf makes their recomputed P exactly 0 (exp2(s - inf))
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    tl.store(LSE2 + row, lse2, mask=offs_m < seqlen_q)


# --8<-- [end:bwd_preprocess]


# --8<-- [start:dkdv_inner]
@triton.jit
def _scores(
    qk,
    rows,
    cols,
    cap_in,
    cap_out,
    slope,
    alibi_offset,
    SOFTCAP: tl.constexpr,
    ALIBI: tl.constexpr,
    PRECISE: tl.constexpr,
):
    """The forward's changed scores (``mask.mod_scores``) and the softcapped ones before ALiBi, which the
    tanh derivative needs (qk itself when there is no softcap)."""
    capped = qk
    if SOFTCAP:
        capped = softcap(qk, cap_in, cap_out, PRECISE)
    if ALIBI:
        return alibi(capped, rows, cols, slope, alibi_offset), capped
    return capped, capped


@triton.jit
def _attn_bwd_dkdv_inner(
    dk,
    dv,
    k,
    v,
    Q,
    DO,
    off_b,
    off_h,
    lse2_base,
    delta_base,
    offs_n,
    seqlen_q,
    left_offset,
    right_offset,
    qk_scale,
    lo,
    hi,
    cap_in,
    cap_out,
    slope,
    alibi_offset,
    seed,
    rng_offset,
    head,
    p_drop,
    drop_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
    MASKED: tl.constexpr,
    SOFTCAP: tl.constexpr,
    ALIBI: tl.constexpr,
    DROPOUT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in tl.range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        q = Q.load([off_b, start_m, off_h, 0]).reshape(BLOCK_M, BLOCK_D)  # rows past seqlen_q read as zeros
        do = DO.load([off_b, start_m, off_h, 0]).reshape(BLOCK_M, BLOCK_D)
        if MASKED:
            # padded rows: P = exp2(s - inf) = 0, so they add nothing
            lse2 = tl.load(lse2_base + offs_m, mask=offs_m < seqlen_q, other=float("inf"))
            delta = tl.load(delta_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
        else:
            lse2 = tl.load(lse2_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        # work transposed (keys x queries) so the accumulators dK, dV stay (BLOCK_N, head_dim)
        qkT = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)
        if SOFTCAP or ALIBI:
            qkT, cappedT = _scores(
                qkT,
                offs_m[None, :],
                offs_n[:, None],
                cap_in,
                cap_out,
                slope,
                alibi_offset,
                SOFTCAP,
                ALIBI,
                DOT_PRECISION == "ieee",
            )
        pT = tl.math.exp2(qkT * qk_scale - lse2[None, :])
        if MASKED:
            pT = mask_scores(
                pT, offs_m[None, :], offs_n[:, None], 0, left_offset, right_offset, 0.0, False, IS_CAUSAL, IS_LOCAL
            )
        if DROPOUT:
            # the forward's mask, regenerated: dV sees the kept probabilities, scaled; dP only through them
            keepT = dropout_keep(seed, rng_offset, head, offs_m[None, :], offs_n[:, None], p_drop)
            dv = tl.dot(tl.where(keepT, pT * drop_scale, 0.0).to(do.dtype), do, dv, input_precision=DOT_PRECISION)
        else:
            dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
        dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
        if DROPOUT:
            dpT = tl.where(keepT, dpT * drop_scale, 0.0)
        dsT = pT * (dpT - delta[None, :])
        if SOFTCAP:
            dsT = dsT * softcap_grad(cappedT, cap_in)
        dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision=DOT_PRECISION)
    return dk, dv


# --8<-- [end:dkdv_inner]


# --8<-- [start:bwd_dkdv]
@triton.jit(
    do_not_specialize=[
        "n_heads",
        "group_size",
        "seqlen_q",
        "seqlen_k",
        "right_offset",
        "SEQ_BUCKET",
        "left_offset",
        "alibi_offset",
    ]
)
def _attn_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    LSE2,
    DELTA,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    n_heads,
    group_size,
    seqlen_q,
    seqlen_k,
    right_offset,
    softmax_scale,
    qk_scale,
    SEQ_BUCKET,
    left_offset,
    cap_in,
    cap_out,
    SLOPES,
    alibi_offset,
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
    ONE_AXIS: tl.constexpr,
    IS_LOCAL: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    ALIBI: tl.constexpr = False,
    DROPOUT: tl.constexpr = False,
):
    """One program = BLOCK_N keys of one (batch, kv head); it streams every query row (of every query head
    in its GQA group) that sees them. Grid: ``tile_grid(seqlen_k, "BLOCK_N", B * H_kv, IS_CAUSAL)``.
    Q, DO, DK, DV: ``head_tiles`` descriptors; K, V: (batch, seqlen_k, kv heads, head_dim) tensors, whose tiles
    stay resident and are read through 2-D descriptors of one head (see ``_attn_fwd``). The variant arguments
    are the forward's."""
    # causal: the first key tiles are the costliest
    pid_n, pid_bhk = program_tile((seqlen_k + BLOCK_N - 1) // BLOCK_N, IS_CAUSAL, False, ACROSS_HEADS, ONE_AXIS)
    n_kv_heads = n_heads // group_size
    off_b = pid_bhk // n_kv_heads
    off_hk = pid_bhk % n_kv_heads
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = head_desc(
        K + off_b.to(tl.int64) * stride_kb + off_hk * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N, BLOCK_D
    ).load([start_n, 0])
    v = head_desc(
        V + off_b.to(tl.int64) * stride_vb + off_hk * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N, BLOCK_D
    ).load([start_n, 0])
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    seed = tl.load(RNG) if DROPOUT else None
    rng_offset = tl.load(RNG + 1) if DROPOUT else None

    # Rows before `lo` see none of these keys; rows in [full_lo, full_hi) see all of them (no mask); the rest
    # straddle the band's edges or pass seqlen_q (mask.query_block_range).
    lo, full_lo, full_hi, hi = query_block_range(
        start_n, seqlen_q, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    for g in range(group_size):
        off_h = off_hk * group_size + g
        lse2_base = LSE2 + (off_b.to(tl.int64) * n_heads + off_h) * seqlen_q
        delta_base = DELTA + (off_b.to(tl.int64) * n_heads + off_h) * seqlen_q
        head = off_b * n_heads + off_h
        slope = tl.load(SLOPES + head) if ALIBI else None
        # diagonal tiles (masked), full tiles (no mask), then the far edge and the ragged last tile (masked)
        dk, dv = _attn_bwd_dkdv_inner(
            dk,
            dv,
            k,
            v,
            Q,
            DO,
            off_b,
            off_h,
            lse2_base,
            delta_base,
            offs_n,
            seqlen_q,
            left_offset,
            right_offset,
            qk_scale,
            lo,
            full_lo,
            cap_in,
            cap_out,
            slope,
            alibi_offset,
            seed,
            rng_offset,
            head,
            p_drop,
            drop_scale,
            BLOCK_M,
            BLOCK_D,
            IS_CAUSAL,
            IS_LOCAL,
            True,
            SOFTCAP,
            ALIBI,
            DROPOUT,
            DOT_PRECISION,
        )
        dk, dv = _attn_bwd_dkdv_inner(
            dk,
            dv,
            k,
            v,
            Q,
            DO,
            off_b,
            off_h,
            lse2_base,
            delta_base,
            offs_n,
            seqlen_q,
            left_offset,
            right_offset,
            qk_scale,
            full_lo,
            full_hi,
            cap_in,
            cap_out,
            slope,
            alibi_offset,
            seed,
            rng_offset,
            head,
            p_drop,
            drop_scale,
            BLOCK_M,
            BLOCK_D,
            IS_CAUSAL,
            IS_LOCAL,
            False,
            SOFTCAP,
            ALIBI,
            DROPOUT,
            DOT_PRECISION,
        )
        dk, dv = _attn_bwd_dkdv_inner(
            dk,
            dv,
            k,
            v,
            Q,
            DO,
            off_b,
            off_h,
            lse2_base,
            delta_base,
            offs_n,
            seqlen_q,
            left_offset,
            right_offset,
            qk_scale,
            tl.maximum(full_hi, full_lo),
            hi,
            cap_in,
            cap_out,
            slope,
            alibi_offset,
            seed,
            rng_offset,
            head,
            p_drop,
            drop_scale,
            BLOCK_M,
            BLOCK_D,
            IS_CAUSAL,
            IS_LOCAL,
            True,
            SOFTCAP,
            ALIBI,
            DROPOUT,
            DOT_PRECISION,
        )

    dk *= softmax_scale  # S = scale * Q K^T, so dK = scale * dS^T Q
    # rows past seqlen_k and columns past head_dim are not written
    DK.store([off_b, start_n, off_hk, 0], dk.to(DK.dtype).reshape(1, BLOCK_N, 1, BLOCK_D))
    DV.store([off_b, start_n, off_hk, 0], dv.to(DV.dtype).reshape(1, BLOCK_N, 1, BLOCK_D))


# --8<-- [end:bwd_dkdv]


# --8<-- [start:dq_inner]
@triton.jit
def _attn_bwd_dq_inner(
    dq,
    q,
    do,
    lse2,
    delta,
    K,
    V,
    off_b,
    off_hk,
    offs_m,
    seqlen_k,
    left_offset,
    right_offset,
    qk_scale,
    lo,
    hi,
    cap_in,
    cap_out,
    slope,
    alibi_offset,
    seed,
    rng_offset,
    head,
    p_drop,
    drop_scale,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
    MASKED: tl.constexpr,
    SOFTCAP: tl.constexpr,
    ALIBI: tl.constexpr,
    DROPOUT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = K.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)  # rows past seqlen_k read as zeros
        v = V.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SOFTCAP or ALIBI:
            qk, capped = _scores(
                qk,
                offs_m[:, None],
                (start_n + offs_n0)[None, :],
                cap_in,
                cap_out,
                slope,
                alibi_offset,
                SOFTCAP,
                ALIBI,
                DOT_PRECISION == "ieee",
            )
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASKED:
            p = mask_scores(
                p,
                offs_m[:, None],
                (start_n + offs_n0)[None, :],
                seqlen_k,
                left_offset,
                right_offset,
                0.0,
                True,
                IS_CAUSAL,
                IS_LOCAL,
            )
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
        if DROPOUT:
            keep = dropout_keep(seed, rng_offset, head, offs_m[:, None], (start_n + offs_n0)[None, :], p_drop)
            dp = tl.where(keep, dp * drop_scale, 0.0)
        ds = p * (dp - delta[:, None])
        if SOFTCAP:
            ds = ds * softcap_grad(capped, cap_in)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PRECISION)
    return dq


# --8<-- [end:dq_inner]


# --8<-- [start:bwd_dq]
@triton.jit(
    do_not_specialize=[
        "n_heads",
        "group_size",
        "seqlen_q",
        "seqlen_k",
        "right_offset",
        "SEQ_BUCKET",
        "left_offset",
        "alibi_offset",
    ]
)
def _attn_bwd_dq(
    Q,
    K,
    V,
    DO,
    DQ,
    LSE2,
    DELTA,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_dob,
    stride_dos,
    stride_doh,
    n_heads,
    group_size,
    seqlen_q,
    seqlen_k,
    right_offset,
    softmax_scale,
    qk_scale,
    SEQ_BUCKET,
    left_offset,
    cap_in,
    cap_out,
    SLOPES,
    alibi_offset,
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
    ONE_AXIS: tl.constexpr,
    IS_LOCAL: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    ALIBI: tl.constexpr = False,
    DROPOUT: tl.constexpr = False,
):
    """One program = BLOCK_M query rows of one (batch, head), streaming the keys they see, like the forward.
    Grid: ``tile_grid(seqlen_q, "BLOCK_M", B * H, IS_CAUSAL)``. K, V, DQ: ``head_tiles`` descriptors; Q, DO:
    (batch, seqlen_q, heads, head_dim) tensors, resident, read through 2-D descriptors of one head."""
    pid_m, pid_bh = program_tile((seqlen_q + BLOCK_M - 1) // BLOCK_M, IS_CAUSAL, True, ACROSS_HEADS, ONE_AXIS)
    off_b = pid_bh // n_heads
    off_h = pid_bh % n_heads
    off_hk = off_h // group_size
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = head_desc(
        Q + off_b.to(tl.int64) * stride_qb + off_h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M, BLOCK_D
    ).load([start_m, 0])
    do = head_desc(
        DO + off_b.to(tl.int64) * stride_dob + off_h * stride_doh, seqlen_q, stride_dos, HEAD_DIM, BLOCK_M, BLOCK_D
    ).load([start_m, 0])
    row = pid_bh.to(tl.int64) * seqlen_q + offs_m
    lse2 = tl.load(LSE2 + row, mask=offs_m < seqlen_q, other=float("inf"))
    delta = tl.load(DELTA + row, mask=offs_m < seqlen_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    slope = tl.load(SLOPES + pid_bh) if ALIBI else None
    seed = tl.load(RNG) if DROPOUT else None
    rng_offset = tl.load(RNG + 1) if DROPOUT else None
    lo, full_lo, full_hi, hi = key_block_range(
        start_m, seqlen_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    if IS_LOCAL:
        dq = _attn_bwd_dq_inner(
            dq,
            q,
            do,
            lse2,
            delta,
            K,
            V,
            off_b,
            off_hk,
            offs_m,
            seqlen_k,
            left_offset,
            right_offset,
            qk_scale,
            lo,
            full_lo,
            cap_in,
            cap_out,
            slope,
            alibi_offset,
            seed,
            rng_offset,
            pid_bh,
            p_drop,
            drop_scale,
            BLOCK_N,
            BLOCK_D,
            IS_CAUSAL,
            IS_LOCAL,
            True,
            SOFTCAP,
            ALIBI,
            DROPOUT,
            DOT_PRECISION,
        )
    dq = _attn_bwd_dq_inner(
        dq,
        q,
        do,
        lse2,
        delta,
        K,
        V,
        off_b,
        off_hk,
        offs_m,
        seqlen_k,
        left_offset,
        right_offset,
        qk_scale,
        full_lo,
        full_hi,
        cap_in,
        cap_out,
        slope,
        alibi_offset,
        seed,
        rng_offset,
        pid_bh,
        p_drop,
        drop_scale,
        BLOCK_N,
        BLOCK_D,
        IS_CAUSAL,
        IS_LOCAL,
        False,
        SOFTCAP,
        ALIBI,
        DROPOUT,
        DOT_PRECISION,
    )
    dq = _attn_bwd_dq_inner(
        dq,
        q,
        do,
        lse2,
        delta,
        K,
        V,
        off_b,
        off_hk,
        offs_m,
        seqlen_k,
        left_offset,
        right_offset,
        qk_scale,
        full_hi,
        hi,
        cap_in,
        cap_out,
        slope,
        alibi_offset,
        seed,
        rng_offset,
        pid_bh,
        p_drop,
        drop_scale,
        BLOCK_N,
        BLOCK_D,
        IS_CAUSAL,
        IS_LOCAL,
        True,
        SOFTCAP,
        ALIBI,
        DROPOUT,
        DOT_PRECISION,
    )
    dq *= softmax_scale
    DQ.store([off_b, start_m, off_h, 0], dq.to(DQ.dtype).reshape(1, BLOCK_M, 1, BLOCK_D))


# --8<-- [end:bwd_dq]


_attn_bwd_dkdv_tuned = (
    None
    if INTERPRET
    else triton.autotune(
        configs=all_configs(DKDV_CONFIGS),
        key=["SEQ_BUCKET", "HEAD_DIM", *VARIANT_FLAGS],
        prune_configs_by={"early_config_prune": prune_for(DKDV_CONFIGS)},
    )(_attn_bwd_dkdv)
)
_attn_bwd_dq_tuned = (
    None
    if INTERPRET
    else triton.autotune(
        configs=all_configs(DQ_CONFIGS),
        key=["SEQ_BUCKET", "HEAD_DIM", *VARIANT_FLAGS],
        prune_configs_by={"early_config_prune": prune_for(DQ_CONFIGS)},
    )(_attn_bwd_dq)
)


# ---------------------------------------------------------------------------------------------------------------
# Launch functions
# ---------------------------------------------------------------------------------------------------------------


def bwd_configs_for(head_dim: int, dtype, causal: bool = False) -> list:
    """(dK/dV config, dQ config) pairs that together cover every config either autotuner may pick for this head
    dim, dtype and mask; the first pair is the default."""
    dkdv = configs_for(DKDV_CONFIGS, block_d_for(head_dim), dtype, causal)
    dq = configs_for(DQ_CONFIGS, block_d_for(head_dim), dtype, causal)
    return [(dkdv[min(i, len(dkdv) - 1)], dq[min(i, len(dq) - 1)]) for i in range(max(len(dkdv), len(dq)))]


def bwd_preprocess(dout, out, lse, dlse):
    """delta (B, H, Sq) and the LSE in log2 units, both fp32, from O, dO (B, Sq, H, D) and the LSE (B, H, Sq).
    This and the two launchers below run inside ``on_device`` (``attn_bwd`` enters it)."""
    batch, seqlen_q, n_heads, head_dim = out.shape
    delta = torch.empty((batch, n_heads, seqlen_q), device=out.device, dtype=torch.float32)
    lse2 = torch.empty_like(delta)
    objects = (out, dout, lse, dlse, delta, lse2)
    key = (layout(out), layout(dout), aligned(lse), None if dlse is None else aligned(dlse), out.device)
    plan = planned(_preprocess_plans, key, lambda: _preprocess_plan(distinct(objects)))
    plan(objects)
    return delta, lse2


_preprocess_plans = plan_cache()


def _preprocess_plan(objects):
    """``bwd_preprocess``'s launch for the layout of ``objects`` (out, dout, lse, dlse or None, delta, lse2)."""
    out, dout, lse, dlse, delta, lse2 = objects
    batch, seqlen_q, n_heads, head_dim = out.shape
    args = (
        head_tiles(out, "BLOCK_M"),
        head_tiles(dout, "BLOCK_M"),
        lse,
        dlse if dlse is not None else lse,
        delta,
        lse2,
        n_heads,
        seqlen_q,
    )
    meta = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d_for(head_dim),
        HAS_DLSE=dlse is not None,
        ONE_AXIS=one_axis(seqlen_q, batch * n_heads, False),
    )
    grid = tile_grid(seqlen_q, "BLOCK_M", batch * n_heads, False)
    return triton_plan(_attn_bwd_preprocess, None, grid, args, meta, PRE_CONFIG, PRE_CONFIG, objects)


def _common_args(q, k, softmax_scale, band_args, flags):
    """Arguments and compile-time constants shared by the dK/dV and dQ kernels (after their tensors and
    strides), and whether the band has a right edge (the causal launch order). band_args, flags: the call's
    ``mask.variant_args``."""
    n_heads, head_dim = q.shape[2], q.shape[3]
    seqlen_q, seqlen_k, n_kv_heads = q.shape[1], k.shape[1], k.shape[2]
    scalars = (
        n_heads,
        n_heads // n_kv_heads,
        seqlen_q,
        seqlen_k,
        band_args.right_offset,
        softmax_scale,
        softmax_scale * LOG2E,
        seq_bucket(max(seqlen_q, seqlen_k)),
        *band_args[1:],
    )
    meta = dict(HEAD_DIM=head_dim, BLOCK_D=block_d_for(head_dim), **flags, DOT_PRECISION=dot_precision(q.dtype))
    return scalars, meta, flags["IS_CAUSAL"]


def _portable_plan(plans, make, objects, softmax_scale, causal, bottom_right, config, variant):
    """The plan of a portable backward launch (``bwd_dkdv``'s or ``bwd_dq``'s) for a call on ``objects``
    (its tensors, then the variant's per-call slopes and rng): ``make(objects, band_args, flags)`` makes it."""
    q, k = objects[0], objects[1]
    band_args, flags = variant_args(variant, q, k.shape[1], softmax_scale, causal, bottom_right)
    objects = (*objects, band_args.slopes, band_args.rng)
    key = (
        *map(layout, objects[:-2]),
        *map(aligned, objects[:-2]),
        q.device,
        softmax_scale,
        causal,
        bottom_right,
        variant_key(variant, band_args),
        config_key(config),
    )
    return planned(plans, key, lambda: make(distinct(objects), band_args, flags, softmax_scale, config)), objects


def bwd_dkdv(
    q,
    k,
    v,
    dout,
    dk,
    dv,
    lse2,
    delta,
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    config=None,
    variant: Variant = None,
):
    """Launch the dK/dV kernel (dk, dv written in place). config: a ``triton.Config`` instead of autotuning; it
    also keeps the call here. Without one, the calls ``backward_hopper`` supports go to its kernel."""
    variant = variant or Variant()
    if config is None and hopper_supports(backward_hopper.supports_dkdv, q, causal, variant):
        backward_hopper.bwd_dkdv_hopper(
            q, k, v, dout, dk, dv, lse2, delta, softmax_scale, causal, bottom_right, **variant.hopper_kwargs()
        )
        return
    plan, objects = _portable_plan(
        _dkdv_plans,
        _dkdv_plan,
        (q, k, v, dout, dk, dv, lse2, delta),
        softmax_scale,
        causal,
        bottom_right,
        config,
        variant,
    )
    plan(objects)


_dkdv_plans = plan_cache()


def _dkdv_plan(objects, band_args, flags, softmax_scale, config):
    q, k, v, dout, dk, dv, lse2, delta, _, _ = objects
    scalars, meta, causal = _common_args(q, k, softmax_scale, band_args, flags)
    args = (
        head_tiles(q, "BLOCK_M"),
        k,
        v,
        head_tiles(dout, "BLOCK_M"),
        head_tiles(dk, "BLOCK_N"),
        head_tiles(dv, "BLOCK_N"),
        lse2,
        delta,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        *scalars,
    )
    seqlen, n_heads = k.shape[1], k.shape[0] * k.shape[2]  # key tiles x (batch, kv head)
    meta["ONE_AXIS"] = one_axis(seqlen, n_heads, causal)
    grid = tile_grid(seqlen, "BLOCK_N", n_heads, causal)
    default = configs_for(DKDV_CONFIGS, meta["BLOCK_D"], q.dtype, causal)[0]
    return triton_plan(_attn_bwd_dkdv, _attn_bwd_dkdv_tuned, grid, args, meta, config, default, objects)


def bwd_dq(
    q,
    k,
    v,
    dout,
    dq,
    lse2,
    delta,
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    config=None,
    variant: Variant = None,
):
    """Launch the dQ kernel (dq written in place). config: as in ``bwd_dkdv``, and so is the routing to
    ``backward_hopper``."""
    variant = variant or Variant()
    if config is None and hopper_supports(backward_hopper.supports_dq, q, causal, variant):
        backward_hopper.bwd_dq_hopper(
            q, k, v, dout, dq, lse2, delta, softmax_scale, causal, bottom_right, **variant.hopper_kwargs()
        )
        return
    plan, objects = _portable_plan(
        _dq_plans, _dq_plan, (q, k, v, dout, dq, lse2, delta), softmax_scale, causal, bottom_right, config, variant
    )
    plan(objects)


_dq_plans = plan_cache()


def _dq_plan(objects, band_args, flags, softmax_scale, config):
    q, k, v, dout, dq, lse2, delta, _, _ = objects
    scalars, meta, causal = _common_args(q, k, softmax_scale, band_args, flags)
    args = (
        q,
        head_tiles(k, "BLOCK_N"),
        head_tiles(v, "BLOCK_N"),
        dout,
        head_tiles(dq, "BLOCK_M"),
        lse2,
        delta,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        dout.stride(0),
        dout.stride(1),
        dout.stride(2),
        *scalars,
    )
    seqlen, n_heads = q.shape[1], q.shape[0] * q.shape[2]  # query tiles x (batch, head)
    meta["ONE_AXIS"] = one_axis(seqlen, n_heads, causal)
    grid = tile_grid(seqlen, "BLOCK_M", n_heads, causal)
    default = configs_for(DQ_CONFIGS, meta["BLOCK_D"], q.dtype, causal)[0]
    return triton_plan(_attn_bwd_dq, _attn_bwd_dq_tuned, grid, args, meta, config, default, objects)


def fused_dq_runs(q, k, causal: bool, deterministic: bool, variant: Variant = None) -> bool:
    """Whether a backward call runs the fused dK/dV/dQ kernel (``backward_hopper``): the call does not ask for
    determinism, nor does ``torch.use_deterministic_algorithms``, and the fused kernel takes its shapes and
    variant."""
    variant = variant or Variant()
    if deterministic or torch.are_deterministic_algorithms_enabled():
        return False
    if variant.is_plain():
        return backward_hopper.supports_fused_dq(q, k, causal)
    takes_variants = "window_size" in inspect.signature(backward_hopper.supports_fused_dq).parameters
    return (
        variant.dropout_p == 0.0
        and takes_variants
        and backward_hopper.supports_fused_dq(
            q,
            k,
            causal,
            window_size=tuple(variant.window_size),
            softcap=variant.softcap,
            alibi=variant.alibi_slopes is not None,
        )
    )


# The forward's FLOPs (4 B H Sq Sk d) from which the backward runs dQ on a second stream: about half a millisecond
# of backward on an H200, where the fork's host time is a few percent of the call.
OVERLAP_MIN_FLOPS = 1e11


def _overlap_pays(q, k) -> bool:
    batch, seqlen_q, n_heads, head_dim = q.shape
    return 4 * batch * n_heads * seqlen_q * k.shape[1] * head_dim >= OVERLAP_MIN_FLOPS


def attn_bwd(
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
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    config=None,
    deterministic: bool = True,
    variant: Variant = None,
):
    """Launch preprocess, dK/dV and dQ. Shapes as in ``attn_fwd``; dq/dk/dv are written in place.

    config: a (dK/dV ``triton.Config``, dQ ``triton.Config``) pair instead of autotuning (the split kernels).
    deterministic: False lets ``fused_dq_runs`` choose the fused kernel, whose dq varies in its last bits from
    run to run. variant: the forward's (``mask.Variant``), with the same dropout rng.
    """
    variant = variant or Variant()
    dkdv_config, dq_config = config if config is not None else (None, None)
    with on_device(q.device):
        delta, lse2 = bwd_preprocess(dout, out, lse, dlse)
        if config is None and fused_dq_runs(q, k, causal, deterministic, variant):
            dq_acc = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
            backward_hopper.bwd_dkdv_hopper(
                q,
                k,
                v,
                dout,
                dk,
                dv,
                lse2,
                delta,
                softmax_scale,
                causal,
                bottom_right,
                dq_acc=dq_acc,
                **variant.hopper_kwargs(),
            )
            torch.mul(dq_acc, softmax_scale, out=dq)  # S = scale * Q K^T, so dQ = scale * dS K
            return
        # dK/dV and dQ read the same tensors and write different ones: the dQ kernel runs on a second stream,
        # so each kernel's last, ragged wave of programs overlaps the other's work (1-5% faster at 2k-4k tokens,
        # benchmarks/FINDINGS.md). Forking and joining the streams costs host time, so small calls, whose GPU
        # work is too short to overlap anything, stay on one stream.
        dq_stream = forked_stream(enabled=_overlap_pays(q, k))
        bwd_dkdv(q, k, v, dout, dk, dv, lse2, delta, softmax_scale, causal, bottom_right, dkdv_config, variant)
        with dq_stream:
            bwd_dq(q, k, v, dout, dq, lse2, delta, softmax_scale, causal, bottom_right, dq_config, variant)
        dq_stream.join()
