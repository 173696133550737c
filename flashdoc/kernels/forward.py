"""FlashAttention forward: one fused kernel, online softmax, writes O and the log-sum-exp per row.

Layout seen by the kernel: (batch, seqlen, heads, head_dim) with arbitrary strides for the first three
dimensions and a unit stride for the last. The flash-attn API passes its tensors as they are; the SDPA API
passes transposed views of (batch, heads, seqlen, head_dim) tensors, so neither copies anything.
"""

import triton
import triton.language as tl

from . import INTERPRET, LOG2E, forward_hopper
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
    dropout_keep,
    hopper_supports,
    key_block_range,
    mask_scores,
    mod_scores,
    variant_args,
    variant_key,
)

# ---------------------------------------------------------------------------------------------------------------
# Tuning constants
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:fwd_configs]
# Autotune candidates per (padded head dim, fp32?), the safe default first (FLASHDOC_AUTOTUNE=0 takes it).
# At most three each, so a new shape's first call compiles few variants and stays well under 30 s. Chosen by
# benchmarks/kernels/sweep.py on the H200, every config timed on its own (the numbers are in benchmarks/FINDINGS.md):
# - Shared memory holds the Q tile plus `stages` K and V tiles, 2 B x d x (BLOCK_M + 2 x stages x BLOCK_N).
#   Where that allows two programs per SM (d <= 128, 64-row query tiles, <= 113 KiB each), one program's
#   softmax overlaps the other's matrix products, which beats one 128-row program of 8 warps. At d = 128 two
#   128-row programs of 4 warps each also fit, and win without a mask at every length.
# - At d = 256 a 64-row program holds a 64 x 256 fp32 accumulator in 4 warps; 128 rows over 8 warps is faster.
#   With one program per SM, launching causal tiles heaviest first across heads is faster (benchmarks/kernels/ab.py);
#   with several per SM (d <= 128) it is slower, so only these configs set it (the True).
# - fp32 inputs use full-precision (non tensor-core) products with 4-byte tiles: small tiles, one candidate.
FWD_CONFIGS = {
    (64, False): [tile_config(64, 128, 2, 4), tile_config(64, 64, 3, 4), tile_config(128, 64, 3, 4)],
    (128, False): [tile_config(64, 64, 3, 4), tile_config(128, 64, 2, 4), tile_config(128, 64, 3, 8)],
    (256, False): [tile_config(128, 64, 2, 8, True), tile_config(128, 32, 3, 8, True), tile_config(64, 32, 2, 4)],
    (64, True): [tile_config(64, 64, 2, 4)],
    (128, True): [tile_config(64, 32, 2, 4)],
    (256, True): [tile_config(32, 32, 2, 4)],
}
# --8<-- [end:fwd_configs]


# ---------------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:fwd_inner]
@triton.jit
def _attn_fwd_inner(
    acc,
    l_i,
    m_i,
    q,
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
    """Stream key/value tiles [lo, hi) past one query tile, updating the online softmax.

    m_i is the running row maximum (log2 units), l_i the running denominator, acc the unnormalised output.
    MASKED tiles may hold keys past seqlen_k or outside the band (``mask.key_block_range``); the others need no
    mask at all. Softcap and ALiBi change the scores before the mask (``mask.mod_scores``); dropout zeroes
    probabilities after the denominator has counted them.
    """
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = K.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)  # keys past seqlen_k read as zeros
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SOFTCAP or ALIBI:
            qk = mod_scores(
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
        if MASKED:
            qk = mask_scores(
                qk,
                offs_m[:, None],
                (start_n + offs_n0)[None, :],
                seqlen_k,
                left_offset,
                right_offset,
                float("-inf"),
                True,
                IS_CAUSAL,
                IS_LOCAL,
            )
        # --8<-- [start:online_softmax]
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        if MASKED:
            # a row that has seen no key yet still has m = -inf: subtract 0 so exp2 gives 0 instead of NaN
            m_ij = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)  # rescales what was accumulated under the old maximum
        l_i = l_i * alpha + tl.sum(p, 1)
        if DROPOUT:  # the softmax's denominator counts every probability; only P V sees the dropped ones
            p = tl.where(
                dropout_keep(seed, rng_offset, head, offs_m[:, None], (start_n + offs_n0)[None, :], p_drop), p, 0.0
            )
        v = V.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_ij
        # --8<-- [end:online_softmax]
    return acc, l_i, m_i


# --8<-- [end:fwd_inner]


# --8<-- [start:fwd_kernel]
# Lengths, offsets and head counts change from call to call: no specialising on their value (divisible by 16,
# equal to 1), which would compile a new variant for each. The variants' arguments (left_offset onwards) are
# None when their feature is off: Triton then compiles them as constants, so the dense and causal kernels keep
# the parameters and the machine code they had before the variants existed.
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
def _attn_fwd(
    Q,
    K,
    V,
    O,
    LSE,
    stride_qb,
    stride_qs,
    stride_qh,
    n_heads,
    group_size,
    seqlen_q,
    seqlen_k,
    right_offset,
    qk_scale,
    SEQ_BUCKET,  # only read by the autotuner's key
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
    """One program = one tile of BLOCK_M query rows of one (batch, head). Grid: ``tile_grid(seqlen_q, "BLOCK_M",
    B * H, IS_CAUSAL)``. K, V, O: ``head_tiles`` descriptors; Q: a (batch, seqlen, heads, head_dim) tensor.
    The band, softcap and ALiBi arguments are ``mask.variant_args``'; SLOPES: (batch * heads) fp32 slopes over
    the softmax scale; RNG: the (seed, offset) int64 pair dropout draws from."""
    # causal: the last query tiles see most keys
    pid_m, pid_bh = program_tile((seqlen_q + BLOCK_M - 1) // BLOCK_M, IS_CAUSAL, True, ACROSS_HEADS, ONE_AXIS)
    off_b = pid_bh // n_heads
    off_h = pid_bh % n_heads
    off_hk = off_h // group_size  # GQA/MQA: group_size query heads share one key/value head
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    # Q is read once and then feeds every Q K^T product: through a 2-D descriptor of this head, so its tile
    # keeps the shared-memory layout those products read fastest.
    q = head_desc(
        Q + off_b.to(tl.int64) * stride_qb + off_h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M, BLOCK_D
    ).load([pid_m * BLOCK_M, 0])

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    slope = tl.load(SLOPES + pid_bh) if ALIBI else None
    seed = tl.load(RNG) if DROPOUT else None
    rng_offset = tl.load(RNG + 1) if DROPOUT else None

    # Split the key range (mask.key_block_range): whole tiles every row of this query tile sees run without
    # masks; the rest (the band's edges, the ragged end of the keys) run with them.
    lo, full_lo, full_hi, hi = key_block_range(
        pid_m * BLOCK_M, seqlen_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL, tile=pid_m
    )
    if IS_LOCAL:
        acc, l_i, m_i = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
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
    acc, l_i, m_i = _attn_fwd_inner(
        acc,
        l_i,
        m_i,
        q,
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
    acc, l_i, m_i = _attn_fwd_inner(
        acc,
        l_i,
        m_i,
        q,
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

    # Rows that saw no key at all (outside the band: causal bottom-right with seqlen_q > seqlen_k, a window
    # past the keys) output zeros and LSE = -inf.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if DROPOUT:
        acc = acc * (drop_scale / l_safe)[:, None]  # kept probabilities count 1 / (1 - p)
    else:
        acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)  # log2 -> ln
    tl.store(LSE + pid_bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)
    O.store([off_b, pid_m * BLOCK_M, off_h, 0], acc.to(O.dtype).reshape(1, BLOCK_M, 1, BLOCK_D))


# --8<-- [end:fwd_kernel]


_attn_fwd_tuned = (
    None
    if INTERPRET
    else triton.autotune(
        configs=all_configs(FWD_CONFIGS),
        key=["SEQ_BUCKET", "HEAD_DIM", *VARIANT_FLAGS],  # the autotuner adds the tensors' dtypes to the key
        prune_configs_by={"early_config_prune": prune_for(FWD_CONFIGS)},
    )(_attn_fwd)
)


# ---------------------------------------------------------------------------------------------------------------
# Launch functions
# ---------------------------------------------------------------------------------------------------------------


def fwd_configs_for(head_dim: int, dtype, causal: bool = False) -> list:
    """The GPU configs the autotuner tries for this head dim, dtype and mask (first = default when not
    autotuning)."""
    return configs_for(FWD_CONFIGS, block_d_for(head_dim), dtype, causal)


def attn_fwd(
    q, k, v, out, lse, softmax_scale: float, causal: bool, bottom_right: bool, config=None, variant: Variant = None
):
    """Launch the forward kernel. q, out: (B, Sq, H, D); k, v: (B, Sk, Hk, D); lse: (B, H, Sq) fp32.

    variant: the window, softcap, ALiBi slopes and dropout of the call (``mask.Variant``; None: none of them).
    config: a ``triton.Config`` to use instead of autotuning (tests use it to check every config); it also
    keeps the call on this kernel, which otherwise goes to ``forward_hopper`` where that one applies.
    """
    variant = variant or Variant()
    if config is None and hopper_supports(forward_hopper.supports, q, causal, variant):
        with on_device(q.device):
            forward_hopper.attn_fwd_hopper(
                q, k, v, out, lse, softmax_scale, causal, bottom_right, **variant.hopper_kwargs()
            )
        return
    band_args, flags = variant_args(variant, q, k.shape[1], softmax_scale, causal, bottom_right)
    objects = (q, k, v, out, lse, band_args.slopes, band_args.rng)  # (the variant's tensors are made per call)
    key = (
        *map(layout, (q, k, v, out)),
        aligned(q),
        aligned(lse),
        q.device,
        softmax_scale,
        causal,
        bottom_right,
        variant_key(variant, band_args),
        config_key(config),
    )
    with on_device(q.device):
        plan = planned(_plans, key, lambda: _plan(distinct(objects), band_args, flags, softmax_scale, config))
        plan(objects)


_plans = plan_cache()


def _plan(objects, band_args, flags, softmax_scale, config):
    """``attn_fwd``'s launch of the portable kernel for the layout of ``objects`` (q, k, v, out, lse, and the
    variant's slopes and rng, or None)."""
    q, k, v, out, lse, _, _ = objects
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    args = (
        q,
        head_tiles(k, "BLOCK_N"),
        head_tiles(v, "BLOCK_N"),
        head_tiles(out, "BLOCK_M"),
        lse,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        n_heads,
        n_heads // n_kv_heads,
        seqlen_q,
        seqlen_k,
        band_args.right_offset,
        softmax_scale * LOG2E,
        seq_bucket(max(seqlen_q, seqlen_k)),
        *band_args[1:],
    )
    causal = flags["IS_CAUSAL"]
    meta = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d_for(head_dim),
        **flags,
        DOT_PRECISION=dot_precision(q.dtype),
        ONE_AXIS=one_axis(seqlen_q, batch * n_heads, causal),
    )
    return triton_plan(
        _attn_fwd,
        _attn_fwd_tuned,
        tile_grid(seqlen_q, "BLOCK_M", batch * n_heads, causal),
        args,
        meta,
        config,
        fwd_configs_for(head_dim, q.dtype, causal)[0],
        objects,
    )
