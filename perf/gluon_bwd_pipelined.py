"""Prototype, not yet run on a GPU: backward_hopper's dK/dV kernel with its steps overlapped (session 12).

In ``backward_hopper._tiles`` each step waits for its dK product before the next step starts, and loads the next
tile's LSE and delta rows (global loads, an L2 round trip) only once it has begun. Here:

- every step loads the next tile's LSE and delta rows while its dK product runs (``OVERLAP`` = 0 or 1);
- with ``OVERLAP`` = 1, as in FlashAttention-3's backward, a step's dV and dK products are left running into the
  next step: the next tile's S^T and dP^T are issued behind them, one wait then completes the last step's dV and
  dK and this step's S^T, and the last step's ring slot is released only then. The register operands P^T and
  dS^T of the products in flight are carried through the loop and passed to the waits, so that they stay live
  until their product completes.

Only the tiles that need no causal mask run this way: the masked ones (a tile or two per key block) run as in
``_tiles``, which kept ptxas's spills lower (d = 128 causal: 560 bytes instead of 792). Same arithmetic in the
same order as the portable kernel, so `--check` should show 0 again. Run it with a fifth config field (OVERLAP)
in perf/gluon_bwd.py:

    python3 perf/gluon_bwd.py --check --bench --head-dims 128 64 --kernels dkdv \\
        --dkdv-configs 64,64,2,2 64,64,2,2,0 64,64,2,2,1                         # on the H200
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python perf/gluon_bwd.py --aot --head-dims 128 64 --kernels dkdv \\
        --dkdv-configs 64,64,2,2,0 64,64,2,2,1                                  # sm_90 compile here

Session 11 wrote the overlap on a branch that was lost before it ran; this is a rewrite with the row statistics'
prefetch added. If it wins, it replaces ``_tiles`` in backward_hopper (a fifth field of HOPPER_DKDV_CONFIGS if only
some keys gain), followed by the GPU suite and the benchmark.
"""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_init, warpgroup_mma_wait

from flashdoc.kernels import LOG2E
from flashdoc.kernels.backward_hopper import _key_block, _producer, _query_range, _release_skipped
from flashdoc.kernels.forward_hopper import descriptor


@gluon.jit
def _tiles_pipelined(dk, dv, k, v, q_smem, do_smem, qdo_ready, qdo_empty, lse2_base, delta_base, offs_n, seqlen_q,
                     causal_offset, qk_scale, it0, m_lo, m_hi, MASKED: gl.constexpr, PREFETCH: gl.constexpr,
                     OVERLAP: gl.constexpr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr,
                     s_layout: gl.constexpr, p_layout: gl.constexpr):
    """``backward_hopper._tiles``, with PREFETCH the next tile's row statistics loaded during this step's dK
    product, and with OVERLAP (which needs PREFETCH) each step's dV and dK products left running into the next."""
    dtype: gl.constexpr = q_smem.dtype
    offs_m0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
    if PREFETCH:
        offs_m = m_lo + offs_m0
        lse2 = gl.load(lse2_base + offs_m, mask=offs_m < seqlen_q, other=float("inf"))
        delta = gl.load(delta_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
    if OVERLAP:
        dk = warpgroup_mma_init(dk)
        dv = warpgroup_mma_init(dv)
        pT_op = gl.zeros([BLOCK_N, BLOCK_M], dtype, layout=p_layout)  # the A operands of the products in flight
        dsT_op = gl.zeros([BLOCK_N, BLOCK_M], dtype, layout=p_layout)
    for start_m in range(m_lo, m_hi, BLOCK_M):
        it = it0 + (start_m - m_lo) // BLOCK_M
        s = it % STAGES
        mbarrier.wait(qdo_ready.index(s), (it // STAGES) & 1)
        q = q_smem.index(s).reshape([BLOCK_M, BLOCK_D])
        do = do_smem.index(s).reshape([BLOCK_M, BLOCK_D])
        offs_m = start_m + offs_m0
        if not PREFETCH:
            lse2 = gl.load(lse2_base + offs_m, mask=offs_m < seqlen_q, other=float("inf"))
            delta = gl.load(delta_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
        qkT = warpgroup_mma(k, q.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpT = warpgroup_mma(v, do.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        if OVERLAP:
            # products complete in order: all but dP^T means the last step's dV and dK too, so its slot is free
            qkT, dk, dv, pT_op, dsT_op = warpgroup_mma_wait(1, deps=(qkT, dk, dv, pT_op, dsT_op))
            mbarrier.arrive(qdo_empty.index((it + STAGES - 1) % STAGES), count=1, pred=start_m > m_lo)
        else:
            qkT = warpgroup_mma_wait(1, deps=(qkT, ))
        pT = gl.exp2(qkT * qk_scale - lse2[None, :])
        if MASKED:
            pT = gl.where(offs_n[:, None] <= offs_m[None, :] + causal_offset, pT, 0.0)
        pT_op = gl.convert_layout(pT.to(dtype), p_layout)
        dv = warpgroup_mma(pT_op, do, dv, is_async=True)
        if OVERLAP:
            dpT, pT_op = warpgroup_mma_wait(1, deps=(dpT, pT_op))  # dV runs on
        else:
            dpT, dv = warpgroup_mma_wait(0, deps=(dpT, dv))
        dsT = pT * (dpT - delta[None, :])
        dsT_op = gl.convert_layout(dsT.to(dtype), p_layout)
        dk = warpgroup_mma(dsT_op, q, dk, is_async=True)
        # the next tile's rows, loaded while dK's product runs (past m_hi: a few loads nobody reads)
        if PREFETCH:
            offs_next = offs_m + BLOCK_M
            lse2 = gl.load(lse2_base + offs_next, mask=offs_next < seqlen_q, other=float("inf"))
            delta = gl.load(delta_base + offs_next, mask=offs_next < seqlen_q, other=0.0)
        if not OVERLAP:
            dk = warpgroup_mma_wait(0, deps=(dk, ))
            mbarrier.arrive(qdo_empty.index(s), count=1)
    if OVERLAP:
        dk, dv, pT_op, dsT_op = warpgroup_mma_wait(0, deps=(dk, dv, pT_op, dsT_op))
        last = it0 + (m_hi - m_lo) // BLOCK_M - 1
        mbarrier.arrive(qdo_empty.index((last + STAGES) % STAGES), count=1, pred=m_hi > m_lo)
    return dk, dv


@gluon.jit
def _consumer_pipelined(dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                        qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset,
                        softmax_scale, qk_scale, SUB: gl.constexpr, IS_CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
                        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr):
    """``backward_hopper._consumer`` running ``_tiles_pipelined``."""
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    first = start_n + SUB * BLOCK_N
    offs_n = first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    k_tile = k_smem.index(SUB)
    v_tile = v_smem.index(SUB)
    k = k_tile.reshape([BLOCK_N, BLOCK_D])
    v = v_tile.reshape([BLOCK_N, BLOCK_D])
    dk = gl.zeros([BLOCK_N, BLOCK_D], gl.float32, layout=o_layout)
    dv = gl.zeros([BLOCK_N, BLOCK_D], gl.float32, layout=o_layout)
    my_lo, full_lo = _query_range(first, lo, hi, causal_offset, IS_CAUSAL, BLOCK_M, BLOCK_N)
    n_m = gl.cdiv(hi - lo, BLOCK_M)
    mbarrier.wait(kv_ready, 0)
    for g in range(group_size):
        off_h = off_hk * group_size + g
        row = (off_b.to(gl.int64) * n_heads + off_h) * seqlen_q
        it0 = g * n_m
        _release_skipped(qdo_ready, qdo_empty, it0, (my_lo - lo) // BLOCK_M, STAGES)
        dk, dv = _tiles_pipelined(dk, dv, k, v, q_smem, do_smem, qdo_ready, qdo_empty, LSE2 + row, DELTA + row,
                                  offs_n, seqlen_q, causal_offset, qk_scale, it0 + (my_lo - lo) // BLOCK_M, my_lo,
                                  full_lo, True, False, False, BLOCK_M, BLOCK_N, BLOCK_D, STAGES, s_layout, p_layout)
        dk, dv = _tiles_pipelined(dk, dv, k, v, q_smem, do_smem, qdo_ready, qdo_empty, LSE2 + row, DELTA + row,
                                  offs_n, seqlen_q, causal_offset, qk_scale, it0 + (full_lo - lo) // BLOCK_M, full_lo,
                                  hi, False, True, OVERLAP, BLOCK_M, BLOCK_N, BLOCK_D, STAGES, s_layout, p_layout)
    k.store((dk * softmax_scale).to(dtype))
    v.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [off_b, first, off_hk, 0], k_tile)
    tma.async_copy_shared_to_global(dv_desc, [off_b, first, off_hk, 0], v_tile)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["n_heads", "group_size", "seqlen_q", "seqlen_k", "causal_offset"])
def _attn_bwd_dkdv_hopper_pipelined(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE2, DELTA, n_heads,
                                    group_size, seqlen_q, seqlen_k, causal_offset, softmax_scale, qk_scale,
                                    IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr):
    """``backward_hopper._attn_bwd_dkdv_hopper`` with two consumers running ``_tiles_pipelined``."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
    BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
    dtype: gl.constexpr = q_desc.dtype
    off_b, off_hk, start_n, lo, hi = _key_block(2 * BLOCK_N, BLOCK_M, n_heads, group_size, seqlen_q, causal_offset,
                                                IS_CAUSAL)

    k_smem = gl.allocate_shared_memory(dtype, [2, 1, BLOCK_N, 1, BLOCK_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, 1, BLOCK_N, 1, BLOCK_D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_M, 1, BLOCK_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_M, 1, BLOCK_D], do_desc.layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qdo_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qdo_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(qdo_ready.index(i), count=1)
        mbarrier.init(qdo_empty.index(i), count=2)

    gl.warp_specialize([
        (_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                     qdo_empty, off_b, off_hk, start_n, lo, hi, group_size, STAGES)),
        (_consumer_pipelined, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                               qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q,
                               causal_offset, softmax_scale, qk_scale, 0, IS_CAUSAL, OVERLAP, BLOCK_M, BLOCK_N,
                               BLOCK_D, STAGES)),
        (_consumer_pipelined, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                               qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q,
                               causal_offset, softmax_scale, qk_scale, 1, IS_CAUSAL, OVERLAP, BLOCK_M, BLOCK_N,
                               BLOCK_D, STAGES)),
    ], [4, 4], [240, 240])


def bwd_dkdv_pipelined(q, k, v, dout, dk, dv, lse2, delta, softmax_scale: float, causal: bool, bottom_right: bool,
                       config):
    """``backward_hopper.bwd_dkdv_hopper`` on this kernel. config: (BLOCK_M, BLOCK_N, STAGES, 2, OVERLAP)."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    block_m, block_n, stages, consumers, overlap = config
    assert consumers == 2, "the pipelined prototype is written for 2 consumers"
    grid = (triton.cdiv(seqlen_k, 2 * block_n), batch * n_kv_heads)
    _attn_bwd_dkdv_hopper_pipelined[grid](descriptor(q, block_m), descriptor(dout, block_m), descriptor(k, block_n),
                                          descriptor(v, block_n), descriptor(dk, block_n), descriptor(dv, block_n),
                                          lse2, delta, n_heads, n_heads // n_kv_heads, seqlen_q, seqlen_k,
                                          seqlen_k - seqlen_q if bottom_right else 0, softmax_scale,
                                          softmax_scale * LOG2E, IS_CAUSAL=causal, STAGES=stages,
                                          OVERLAP=bool(overlap), num_warps=4)
