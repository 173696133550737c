"""Prototype, not yet run on a GPU: the Hopper dK/dV kernel for head dims over 128 (d = 256), in Gluon.

Written in session 12 when no H200 time was left, compiled for sm_90 here (no spills beyond 76-132 bytes, 224 KiB
of shared memory), and kept out of flashdoc until an H200 run has checked and timed it, as session 10's
prototypes were. perf/gluon_bwd.py runs it for head dims over 128:

    python3 perf/gluon_bwd.py --check --bench --head-dims 256 --kernels dkdv --dkdv-configs 64,64,2,2   # H200
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python perf/gluon_bwd.py --aot --head-dims 256 --dkdv-configs 64,64,2,2

Why it exists: at d = 256 the backward is the worst row against SDPA-flash (benchmark v13: forward+backward
1.15x, target 1.5x), and it runs the portable kernels, because ``backward_hopper``'s dK/dV consumer keeps two
BLOCK_N x d fp32 accumulators: at d = 256 and 64 keys that is 256 registers a thread, more than one has.

If it wins: move it into flashdoc/kernels/backward_hopper.py, send head dims over 128 to it from
``bwd_dkdv_hopper``, add (256, causal) keys to ``HOPPER_DKDV_CONFIGS`` (and to ``HOPPER_DQ_CONFIGS``, whose
kernel compiles at d = 256 with (64, 32, 2, 2): 192 KiB, no spills), extend ``perf/code_hash.py``'s list, and
run the GPU suite (its every-config test needs a d = 256 case) and the benchmark.
"""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_wait

from flashdoc.kernels import LOG2E
from flashdoc.kernels.backward_hopper import _key_block, _query_range
from flashdoc.kernels.forward_hopper import descriptor

# dK/dV of head dims over this go to the wide kernel: two 64-key fp32 accumulators of more columns do not fit one
# warpgroup's registers.
MAX_NARROW_HEAD_DIM = 128

# dK/dV at d = 256 (the producer streams Q and dO in column halves; the consumers share one block of keys) ------
# Two 64 x 256 fp32 accumulators would take 256 registers a thread in one warpgroup, more than a thread has. So
# the two consumers share the program's BLOCK_N keys: consumer c owns columns [c * COLS, + COLS) of dK and dV
# (COLS = head_dim / 2: 64 + 64 registers a thread), and on each streamed tile it computes S^T and dP^T for
# query rows [c * BLOCK_M / 2, + BLOCK_M / 2) only. The two exchange their P^T and dS^T through shared memory,
# as FlashAttention-3's backward does, and each then updates its columns with both halves. Every tile is kept
# as two column halves (descriptors of COLS columns), so no product needs a column slice of shared memory.


@gluon.jit
def _wide_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                   qdo_empty, off_b, off_hk, start_n, lo, hi, group_size, STAGES: gl.constexpr):
    """``_producer`` with each tile in two column halves: half h of ring slot s is q_smem.index(2 * s + h)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
    COLS: gl.constexpr = q_desc.block_type.shape[3]
    mbarrier.expect(kv_ready, 2 * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
    for h in gl.static_range(2):
        tma.async_copy_global_to_shared(k_desc, [off_b, start_n, off_hk, h * COLS], kv_ready, k_smem.index(h))
        tma.async_copy_global_to_shared(v_desc, [off_b, start_n, off_hk, h * COLS], kv_ready, v_smem.index(h))
    n_m = gl.cdiv(hi - lo, BLOCK_M)
    for g in range(group_size):
        off_h = off_hk * group_size + g
        for j in range(n_m):
            it = g * n_m + j
            s = it % STAGES
            mbarrier.wait(qdo_empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(qdo_ready.index(s), 2 * (q_desc.block_type.nbytes + do_desc.block_type.nbytes))
            for h in gl.static_range(2):
                tma.async_copy_global_to_shared(q_desc, [off_b, lo + j * BLOCK_M, off_h, h * COLS],
                                                qdo_ready.index(s), q_smem.index(2 * s + h))
                tma.async_copy_global_to_shared(do_desc, [off_b, lo + j * BLOCK_M, off_h, h * COLS],
                                                qdo_ready.index(s), do_smem.index(2 * s + h))

@gluon.jit
def _wide_tiles(dk, dv, k_smem, v_smem, q_smem, do_smem, pT_smem, dsT_smem, qdo_ready, qdo_empty, ps_ready,
                ps_empty, lse2_base, delta_base, offs_n, seqlen_q, causal_offset, qk_scale, it0, m_lo, m_hi,
                SUB: gl.constexpr, MASKED: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                COLS: gl.constexpr, STAGES: gl.constexpr, s_layout: gl.constexpr):
    """``_tiles`` for one of the two consumers sharing the keys: query tiles [m_lo, m_hi), the ring's it0-th
    first. Exchange buffer b (of 2) holds both consumers' P^T and dS^T: pT_smem.index(2 * b + c)."""
    dtype: gl.constexpr = q_smem.dtype
    ROWS: gl.constexpr = BLOCK_M // 2  # query rows whose S^T and dP^T this consumer computes
    k0 = k_smem.index(0).reshape([BLOCK_N, COLS])
    k1 = k_smem.index(1).reshape([BLOCK_N, COLS])
    v0 = v_smem.index(0).reshape([BLOCK_N, COLS])
    v1 = v_smem.index(1).reshape([BLOCK_N, COLS])
    offs_m0 = SUB * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([BLOCK_N, ROWS], gl.float32, layout=s_layout)
    for start_m in range(m_lo, m_hi, BLOCK_M):
        it = it0 + (start_m - m_lo) // BLOCK_M
        s = it % STAGES
        b = it % 2
        mbarrier.wait(qdo_ready.index(s), (it // STAGES) & 1)
        q0 = q_smem.index(2 * s).reshape([BLOCK_M, COLS])
        q1 = q_smem.index(2 * s + 1).reshape([BLOCK_M, COLS])
        do0 = do_smem.index(2 * s).reshape([BLOCK_M, COLS])
        do1 = do_smem.index(2 * s + 1).reshape([BLOCK_M, COLS])
        offs_m = start_m + offs_m0
        # rows past seqlen_q: lse = inf makes P exactly 0 (their Q and dO tiles read as zeros)
        lse2 = gl.load(lse2_base + offs_m, mask=offs_m < seqlen_q, other=float("inf"))
        delta = gl.load(delta_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
        # S^T and dP^T of my rows, each summed over both column halves; dP^T runs during the exponentials
        qkT = warpgroup_mma(k0, q0.slice(SUB * ROWS, ROWS).permute((1, 0)), zero_s, use_acc=False,
                            is_async=True)
        qkT = warpgroup_mma(k1, q1.slice(SUB * ROWS, ROWS).permute((1, 0)), qkT, is_async=True)
        dpT = warpgroup_mma(v0, do0.slice(SUB * ROWS, ROWS).permute((1, 0)), zero_s, use_acc=False,
                            is_async=True)
        dpT = warpgroup_mma(v1, do1.slice(SUB * ROWS, ROWS).permute((1, 0)), dpT, is_async=True)
        qkT = warpgroup_mma_wait(2, deps=(qkT, ))
        pT = gl.exp2(qkT * qk_scale - lse2[None, :])
        if MASKED:
            pT = gl.where(offs_n[:, None] <= offs_m[None, :] + causal_offset, pT, 0.0)
        dpT = warpgroup_mma_wait(0, deps=(dpT, ))
        dsT = pT * (dpT - delta[None, :])
        # hand my halves of P^T and dS^T over once both consumers have finished with this buffer's last use
        mbarrier.wait(ps_empty.index(b), ((it // 2) & 1) ^ 1)
        pT_smem.index(2 * b + SUB).store(pT.to(dtype))
        dsT_smem.index(2 * b + SUB).store(dsT.to(dtype))
        fence_async_shared()
        mbarrier.arrive(ps_ready.index(b), count=1)
        mbarrier.wait(ps_ready.index(b), (it // 2) & 1)
        # my columns of dV and dK, from both consumers' rows
        q_mine = q_smem.index(2 * s + SUB).reshape([BLOCK_M, COLS])
        do_mine = do_smem.index(2 * s + SUB).reshape([BLOCK_M, COLS])
        dv = warpgroup_mma(pT_smem.index(2 * b), do_mine.slice(0, ROWS), dv, is_async=True)
        dv = warpgroup_mma(pT_smem.index(2 * b + 1), do_mine.slice(ROWS, ROWS), dv, is_async=True)
        dk = warpgroup_mma(dsT_smem.index(2 * b), q_mine.slice(0, ROWS), dk, is_async=True)
        dk = warpgroup_mma(dsT_smem.index(2 * b + 1), q_mine.slice(ROWS, ROWS), dk, is_async=True)
        dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
        mbarrier.arrive(ps_empty.index(b), count=1)
        mbarrier.arrive(qdo_empty.index(s), count=1)
    return dk, dv

@gluon.jit
def _wide_consumer(dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, pT_smem, dsT_smem, kv_ready,
                   qdo_ready, qdo_empty, ps_ready, ps_empty, done, off_b, off_hk, start_n, lo, hi, n_heads,
                   group_size, seqlen_q, causal_offset, softmax_scale, qk_scale, SUB: gl.constexpr,
                   IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, COLS: gl.constexpr,
                   STAGES: gl.constexpr):
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M // 2, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, COLS, 16])
    offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([BLOCK_N, COLS], gl.float32, layout=o_layout)
    dv = gl.zeros([BLOCK_N, COLS], gl.float32, layout=o_layout)
    # both consumers need every query tile the program streams (its lo is their my_lo); from full_lo on, unmasked
    _, full_lo = _query_range(start_n, lo, hi, causal_offset, IS_CAUSAL, BLOCK_M, BLOCK_N)
    n_m = gl.cdiv(hi - lo, BLOCK_M)
    mbarrier.wait(kv_ready, 0)
    for g in range(group_size):
        off_h = off_hk * group_size + g
        row = (off_b.to(gl.int64) * n_heads + off_h) * seqlen_q
        it0 = g * n_m
        dk, dv = _wide_tiles(dk, dv, k_smem, v_smem, q_smem, do_smem, pT_smem, dsT_smem, qdo_ready, qdo_empty,
                             ps_ready, ps_empty, LSE2 + row, DELTA + row, offs_n, seqlen_q, causal_offset,
                             qk_scale, it0, lo, full_lo, SUB, True, BLOCK_M, BLOCK_N, COLS, STAGES, s_layout)
        dk, dv = _wide_tiles(dk, dv, k_smem, v_smem, q_smem, do_smem, pT_smem, dsT_smem, qdo_ready, qdo_empty,
                             ps_ready, ps_empty, LSE2 + row, DELTA + row, offs_n, seqlen_q, causal_offset,
                             qk_scale, it0 + (full_lo - lo) // BLOCK_M, full_lo, hi, SUB, False, BLOCK_M,
                             BLOCK_N, COLS, STAGES, s_layout)
    # both consumers read both halves of K and V to the end: wait for the other before overwriting mine
    mbarrier.arrive(done, count=1)
    mbarrier.wait(done, 0)
    k_tile = k_smem.index(SUB)
    v_tile = v_smem.index(SUB)
    k_tile.reshape([BLOCK_N, COLS]).store((dk * softmax_scale).to(dtype))
    v_tile.reshape([BLOCK_N, COLS]).store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [off_b, start_n, off_hk, SUB * COLS], k_tile)
    tma.async_copy_shared_to_global(dv_desc, [off_b, start_n, off_hk, SUB * COLS], v_tile)
    tma.store_wait(0)

@gluon.jit(do_not_specialize=["n_heads", "group_size", "seqlen_q", "seqlen_k", "causal_offset"])
def _attn_bwd_dkdv_hopper_wide(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE2, DELTA, n_heads,
                               group_size, seqlen_q, seqlen_k, causal_offset, softmax_scale, qk_scale,
                               IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """``_attn_bwd_dkdv_hopper`` for head dims over 128, every descriptor in tiles of half the head dim.
    Grid: (key tiles of BLOCK_N, batch * kv heads)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
    COLS: gl.constexpr = q_desc.block_type.shape[3]
    dtype: gl.constexpr = q_desc.dtype
    off_b, off_hk, start_n, lo, hi = _key_block(BLOCK_N, BLOCK_M, n_heads, group_size, seqlen_q, causal_offset,
                                                IS_CAUSAL)

    k_smem = gl.allocate_shared_memory(dtype, [2, 1, BLOCK_N, 1, COLS], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, 1, BLOCK_N, 1, COLS], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, 1, BLOCK_M, 1, COLS], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, 1, BLOCK_M, 1, COLS], do_desc.layout)
    x_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M // 2], dtype)
    pT_smem = gl.allocate_shared_memory(dtype, [4, BLOCK_N, BLOCK_M // 2], x_layout)
    dsT_smem = gl.allocate_shared_memory(dtype, [4, BLOCK_N, BLOCK_M // 2], x_layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qdo_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qdo_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ps_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ps_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(done, count=2)
    for i in gl.static_range(STAGES):
        mbarrier.init(qdo_ready.index(i), count=1)
        mbarrier.init(qdo_empty.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(ps_ready.index(i), count=2)
        mbarrier.init(ps_empty.index(i), count=2)

    gl.warp_specialize([
        (_wide_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                          qdo_empty, off_b, off_hk, start_n, lo, hi, group_size, STAGES)),
        (_wide_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, pT_smem, dsT_smem,
                          kv_ready, qdo_ready, qdo_empty, ps_ready, ps_empty, done, off_b, off_hk, start_n, lo,
                          hi, n_heads, group_size, seqlen_q, causal_offset, softmax_scale, qk_scale, 0,
                          IS_CAUSAL, BLOCK_M, BLOCK_N, COLS, STAGES)),
        (_wide_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, pT_smem, dsT_smem,
                          kv_ready, qdo_ready, qdo_empty, ps_ready, ps_empty, done, off_b, off_hk, start_n, lo,
                          hi, n_heads, group_size, seqlen_q, causal_offset, softmax_scale, qk_scale, 1,
                          IS_CAUSAL, BLOCK_M, BLOCK_N, COLS, STAGES)),
    ], [4, 4], [240, 240])


def bwd_dkdv_wide(q, k, v, dout, dk, dv, lse2, delta, softmax_scale: float, causal: bool, bottom_right: bool,
                  config):
    """``backward_hopper.bwd_dkdv_hopper`` for head dims over 128. config: (BLOCK_M, BLOCK_N, STAGES, 2): BLOCK_M
    query rows per streamed tile (half of them per consumer), BLOCK_N keys per program, shared by both consumers."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    block_m, block_n, stages, consumers = config
    assert consumers == 2, "the wide dK/dV kernel splits the head dim between exactly 2 consumers"
    cols = head_dim // 2
    grid = (triton.cdiv(seqlen_k, block_n), batch * n_kv_heads)
    _attn_bwd_dkdv_hopper_wide[grid](descriptor(q, block_m, cols), descriptor(dout, block_m, cols),
                                     descriptor(k, block_n, cols), descriptor(v, block_n, cols),
                                     descriptor(dk, block_n, cols), descriptor(dv, block_n, cols), lse2, delta,
                                     n_heads, n_heads // n_kv_heads, seqlen_q, seqlen_k,
                                     seqlen_k - seqlen_q if bottom_right else 0, softmax_scale,
                                     softmax_scale * LOG2E, IS_CAUSAL=causal, STAGES=stages, num_warps=4)
