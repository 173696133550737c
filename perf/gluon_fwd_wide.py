"""Prototype, not yet run on a GPU: forward_hopper's forward for d = 256, its output staged in the queries' shared
memory (session 12).

forward_hopper keeps separate Q and O tiles per consumer, so at d = 256 two consumers' Q and O take 128 KiB and
only 32-key tiles fit beside them (32 keys x 256 x 2 bytes x K and V x 2 stages = 64 KiB; 64-key tiles would need
256 KiB in all). FlashAttention-3 writes O through the Q tile's memory instead. Here each consumer does the same:
its epilogue writes O into its own Q tile and releases the tile to the producer only once O has left it (the
forward_hopper consumer releases it before its epilogue, so that the next item's queries load meanwhile). That
leaves room for 64-key tiles: 64 KiB of queries and a 128 KiB key/value ring.

Everything else is forward_hopper's (producer, inner loop, work items), imported from it.

    python3 perf/gluon_fwd.py --check --bench --head-dims 256 --configs 64,64,2,2,1 --o-in-q   # on the H200
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python perf/gluon_fwd.py --aot --head-dims 256 \\
        --configs 64,64,2,2,1 --o-in-q                                                        # sm_90, here

If it wins against the portable kernel and the 32-key configs: an O_IN_Q switch in forward_hopper (its code
hashes unchanged with the switch off), a (256, causal) entry in HOPPER_CONFIGS, the GPU suite, the benchmark.
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from flashdoc.kernels import LOG2E
from flashdoc.kernels.forward_hopper import (_consume, _key_range, _producer, _read_item, _sm_count, _work,
                                             descriptor)


@gluon.jit
def _consumer_o_in_q(o_desc, LSE, q_smem, k_smem, v_smem, item_smem, q_ready, q_empty, k_ready, v_ready, kv_empty,
                     n_tiles, total, n_heads, group_size, seqlen_q, seqlen_k, causal_offset, qk_scale,
                     SUB: gl.constexpr, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                     BLOCK_D: gl.constexpr, STAGES: gl.constexpr):
    """forward_hopper's ``_consumer``, its output staged in its own query tile."""
    dtype: gl.constexpr = o_desc.dtype
    N_CONSUMERS: gl.constexpr = q_smem.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    kv_it = 0
    r = 0
    mbarrier.wait(q_ready, 0)
    i = _read_item(item_smem)
    while i < total:
        pid_bh, off_b, off_h, _, row0, hi = _work(i, n_tiles, n_heads, group_size, seqlen_k, causal_offset,
                                                  IS_CAUSAL, N_CONSUMERS * BLOCK_M)
        first = row0 + SUB * BLOCK_M
        full_hi, my_hi = _key_range(first, seqlen_k, causal_offset, IS_CAUSAL, BLOCK_M, BLOCK_N)
        q_tile = q_smem.index(SUB)
        q = q_tile.reshape([BLOCK_M, BLOCK_D])
        offs_m = first + gl.arange(0, BLOCK_M, layout=row_s)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
        acc = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)
        acc, l_i, m_i = _consume(acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, kv_empty, kv_it, offs_m,
                                 seqlen_k, causal_offset, qk_scale, 0, full_hi, False, IS_CAUSAL, BLOCK_M,
                                 BLOCK_N, BLOCK_D, STAGES, s_layout, p_layout, row_o)
        acc, l_i, m_i = _consume(acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, kv_empty, kv_it, offs_m,
                                 seqlen_k, causal_offset, qk_scale, full_hi, my_hi, True, IS_CAUSAL, BLOCK_M,
                                 BLOCK_N, BLOCK_D, STAGES, s_layout, p_layout, row_o)
        l_safe = gl.where(l_i == 0.0, 1.0, l_i)
        lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_safe)) * 0.6931471805599453)
        gl.store(LSE + pid_bh.to(gl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)
        acc = acc / gl.convert_layout(l_safe, row_o)[:, None]
        # every product reading this query tile has completed (each _consume step waits for its own): O goes
        # through it, and the tile goes back to the producer once O has left
        q.store(acc.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [off_b, first, off_h, 0], q_tile)
        for j in range(gl.cdiv(my_hi, BLOCK_N), gl.cdiv(hi, BLOCK_N)):
            it = kv_it + j
            mbarrier.wait(k_ready.index(it % STAGES), (it // STAGES) & 1)
            mbarrier.arrive(kv_empty.index(it % STAGES), count=1)
        tma.store_wait(0)
        mbarrier.arrive(q_empty, count=1)
        kv_it += gl.cdiv(hi, BLOCK_N)
        r += 1
        mbarrier.wait(q_ready, r & 1)
        i = _read_item(item_smem)


@gluon.jit(do_not_specialize=["n_tiles", "total", "n_heads", "group_size", "seqlen_q", "seqlen_k", "causal_offset"])
def _attn_fwd_hopper_o_in_q(q_desc, k_desc, v_desc, o_desc, LSE, COUNTER, n_tiles, total, n_heads, group_size,
                            seqlen_q, seqlen_k, causal_offset, qk_scale, IS_CAUSAL: gl.constexpr,
                            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                            N_CONSUMERS: gl.constexpr):
    """forward_hopper's ``_attn_fwd_hopper`` with no O tiles of its own (two consumers)."""
    BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_M, 1, BLOCK_D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], v_desc.layout)
    item_smem = gl.allocate_shared_memory(gl.int32, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=N_CONSUMERS)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=N_CONSUMERS)
    gl.warp_specialize([
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, item_smem, q_ready, q_empty, k_ready, v_ready,
                     kv_empty, COUNTER, n_tiles, total, n_heads, group_size, seqlen_k, causal_offset, IS_CAUSAL,
                     BLOCK_N, STAGES)),
        (_consumer_o_in_q, (o_desc, LSE, q_smem, k_smem, v_smem, item_smem, q_ready, q_empty, k_ready, v_ready,
                            kv_empty, n_tiles, total, n_heads, group_size, seqlen_q, seqlen_k, causal_offset,
                            qk_scale, 0, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
        (_consumer_o_in_q, (o_desc, LSE, q_smem, k_smem, v_smem, item_smem, q_ready, q_empty, k_ready, v_ready,
                            kv_empty, n_tiles, total, n_heads, group_size, seqlen_q, seqlen_k, causal_offset,
                            qk_scale, 1, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
    ], [4, 4], [240, 240])


def attn_fwd_o_in_q(q, k, v, out, lse, softmax_scale: float, causal: bool, bottom_right: bool, config):
    """``forward_hopper.attn_fwd_hopper`` on this kernel. config: (BLOCK_M, BLOCK_N, STAGES, 2, PERSISTENT)."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    block_m, block_n, stages, consumers, persistent = config
    assert consumers == 2, "the prototype is written for 2 consumers"
    n_tiles = triton.cdiv(seqlen_q, consumers * block_m)
    total = n_tiles * batch * n_heads
    grid = (min(total, _sm_count(q.device.index)) if persistent else total,)
    counter = torch.zeros(1, device=q.device, dtype=torch.int32)
    _attn_fwd_hopper_o_in_q[grid](descriptor(q, block_m), descriptor(k, block_n), descriptor(v, block_n),
                                  descriptor(out, block_m), lse, counter, n_tiles, total, n_heads,
                                  n_heads // n_kv_heads, seqlen_q, seqlen_k,
                                  seqlen_k - seqlen_q if bottom_right else 0, softmax_scale * LOG2E,
                                  IS_CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages,
                                  N_CONSUMERS=consumers, num_warps=4)
