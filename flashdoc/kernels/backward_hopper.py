"""The backward on Hopper (H100, H200): dK/dV and dQ kernels written in Gluon, warp-specialised like
``forward_hopper``.

``backward.py``'s kernels are the portable ones. These do the same work with the same tiles' arithmetic, in the
same order, so their gradients match the portable kernels' (perf/gluon_bwd.py checks that they are bit-identical
on the H200) and stay deterministic: each gradient element is written by one program, with no atomics (unlike
FlashAttention-3, whose dQ is accumulated with atomic adds). What changes is who does what inside a program:

- a *producer* partition issues the TMA copies: the tiles the program keeps for its whole life, then a ring of
  STAGES shared-memory slots through which it streams the others, guarded by "ready" and "empty" mbarriers;
- N_CONSUMERS *consumer* warpgroups of 4 warps each own a slice of the kept tiles and their fp32 accumulators,
  and run the portable kernel's step on every streamed tile. Each issues the two products that need only the
  tiles in shared memory together and waits for the first only, so the second runs on the tensor cores while
  the first one's exponentials run on the CUDA cores.

dK/dV: one program = N_CONSUMERS x BLOCK_N keys of one (batch, kv head); consumer c keeps keys
[start_n + c * BLOCK_N, + BLOCK_N) and streams BLOCK_M query rows of Q and dO at a time, over every query head
of its GQA group, computing the transposed step (keys x queries): S^T = K Q^T, P^T = exp2(S^T * scale - lse),
dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q. Under the causal mask each consumer
skips, while still releasing in order, the query tiles that see none of its keys.

dQ: the forward's skeleton. One program = N_CONSUMERS x BLOCK_M query rows of one (batch, head); each consumer
keeps its rows' Q and dO and streams BLOCK_N keys of K and V at a time: dQ += dS K.

Same inputs as ``backward.bwd_dkdv`` and ``backward.bwd_dq`` (GQA, both causal alignments, any lengths), head
dim 64 or 128, fp16/bf16. ``backward`` sends the calls these kernels take here (``supports_dkdv``,
``supports_dq``); ``FLASHDOC_HOPPER=0`` keeps them on the portable kernels, like the forward.
"""

import torch
import triton

from . import LOG2E
from .forward import MAX_GRID_Y
from .forward_hopper import GLUON, descriptor, gluon_runs

if GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, \
        warpgroup_mma, warpgroup_mma_wait

    from .forward_hopper import _key_range, _keys_seen

# --8<-- [start:hopper_bwd_configs]
# (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS) per (head dim, causal), chosen with perf/gluon_bwd.py on the H200
# (perf/NOTES.md, session 11). dK/dV: BLOCK_N keys per consumer, BLOCK_M query rows per streamed tile. dQ:
# BLOCK_M query rows per consumer, BLOCK_N keys per streamed tile. Two consumers, so that each thread has 240
# registers: dK/dV holds two 64 x d fp32 accumulators (three consumers spilled 1.6-4.6 KB at d = 128 and ran at
# 0.28-0.47x the portable kernel's speed). A key that is missing stays on the portable kernel, which measured as
# fast there (d = 64 without the mask: the Gluon kernels ran at 0.88-1.01x).
HOPPER_DKDV_CONFIGS = {
    (64, True): (64, 64, 2, 2),
    (128, False): (64, 64, 2, 2),
    (128, True): (64, 64, 2, 2),
}
HOPPER_DQ_CONFIGS = {
    (64, True): (64, 128, 2, 2),
    (128, False): (64, 128, 2, 2),
    (128, True): (64, 128, 2, 2),
}
# --8<-- [end:hopper_bwd_configs]


def _takes(table, q: torch.Tensor, causal: bool) -> bool:
    """``forward_hopper.gluon_runs``, a tuned config in table, and few enough (batch, head) pairs for the grid's
    second axis (more go to the portable kernels' 1-D grid)."""
    return (q.shape[3], causal) in table and q.shape[0] * q.shape[2] <= MAX_GRID_Y and gluon_runs(q)


def supports_dkdv(q: torch.Tensor, causal: bool) -> bool:
    """Whether the Hopper dK/dV kernel takes this backward call (``_takes`` with its table)."""
    return _takes(HOPPER_DKDV_CONFIGS, q, causal)


def supports_dq(q: torch.Tensor, causal: bool) -> bool:
    """Whether the Hopper dQ kernel takes this backward call (``_takes`` with its table)."""
    return _takes(HOPPER_DQ_CONFIGS, q, causal)


if GLUON:
    # dK/dV (the producer streams Q and dO; each consumer keeps its keys' K and V) ----------------------------------
    @gluon.jit
    def _key_block(KEYS: gl.constexpr, BLOCK_M: gl.constexpr, n_heads, group_size, seqlen_q, causal_offset,
                   IS_CAUSAL: gl.constexpr):
        """This dK/dV program's KEYS keys of one (batch, kv head), and the query tiles [lo, hi) that see any of
        them. Grid: (key blocks, batch * kv heads). Returns off_b, off_hk, start_n, lo, hi."""
        pid_n = gl.program_id(0)
        pid_bhk = gl.program_id(1)
        if IS_CAUSAL:
            pid_n = gl.num_programs(0) - 1 - pid_n  # the first keys are seen by the most query rows: launch them first
        n_kv_heads = n_heads // group_size
        off_b = pid_bhk // n_kv_heads
        off_hk = pid_bhk % n_kv_heads
        start_n = pid_n * KEYS
        hi = gl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M
        if IS_CAUSAL:
            lo = gl.minimum(gl.maximum(start_n - causal_offset, 0) // BLOCK_M * BLOCK_M, hi)
        else:
            lo = 0
        return off_b, off_hk, start_n, lo, hi

    @gluon.jit
    def _query_range(first, lo, hi, causal_offset, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                     BLOCK_N: gl.constexpr):
        """The query tiles that BLOCK_N keys from ``first`` on need, within the program's [lo, hi): masked
        [my_lo, full_lo), unmasked [full_lo, hi). Query rows i see key j when j <= i + causal_offset: tiles before
        my_lo see none of these keys, tiles from full_lo on see all of them; the ragged last tile needs no mask
        (its padded rows get P = 0)."""
        if IS_CAUSAL:
            my_lo = gl.maximum(gl.minimum(gl.maximum(first - causal_offset, 0) // BLOCK_M * BLOCK_M, hi), lo)
            full_lo = gl.minimum(gl.cdiv(gl.maximum(first + BLOCK_N - 1 - causal_offset, 0), BLOCK_M) * BLOCK_M, hi)
            full_lo = gl.maximum(full_lo, my_lo)
        else:
            my_lo = lo
            full_lo = lo
        return my_lo, full_lo

    @gluon.jit
    def _load_resident(a_desc, b_desc, a_smem, b_smem, ready, off_b, row0, off_h):
        """The tiles each consumer keeps for the whole program (K and V for dK/dV, Q and dO for dQ): rows row0 +
        c * rows of head off_h for consumer c, both landing on one barrier."""
        ROWS: gl.constexpr = a_desc.block_type.shape[1]
        N_CONSUMERS: gl.constexpr = a_smem.shape[0]
        mbarrier.expect(ready, N_CONSUMERS * (a_desc.block_type.nbytes + b_desc.block_type.nbytes))
        for c in gl.static_range(N_CONSUMERS):
            tma.async_copy_global_to_shared(a_desc, [off_b, row0 + c * ROWS, off_h, 0], ready, a_smem.index(c))
            tma.async_copy_global_to_shared(b_desc, [off_b, row0 + c * ROWS, off_h, 0], ready, b_smem.index(c))

    @gluon.jit
    def _producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready, qdo_empty,
                  off_b, off_hk, start_n, lo, hi, group_size, STAGES: gl.constexpr):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        _load_resident(k_desc, v_desc, k_smem, v_smem, kv_ready, off_b, start_n, off_hk)
        n_m = gl.cdiv(hi - lo, BLOCK_M)
        for g in range(group_size):
            off_h = off_hk * group_size + g
            for j in range(n_m):
                it = g * n_m + j
                s = it % STAGES
                mbarrier.wait(qdo_empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(qdo_ready.index(s), q_desc.block_type.nbytes + do_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(q_desc, [off_b, lo + j * BLOCK_M, off_h, 0], qdo_ready.index(s),
                                                q_smem.index(s))
                tma.async_copy_global_to_shared(do_desc, [off_b, lo + j * BLOCK_M, off_h, 0], qdo_ready.index(s),
                                                do_smem.index(s))

    @gluon.jit
    def _release_skipped(ready, empty, it0, n, STAGES: gl.constexpr):
        """Release the n streamed tiles from the ring's it0-th on that this consumer does not need, in order, each
        once it has landed (an early arrival would count towards the slot's previous use). The forward's consumer
        does the same with its loop written out; this form (a count, not an end) kept ptxas's spills at d = 128
        causal to 316 bytes instead of 408, and the kernel 10% faster."""
        for t in range(n):
            it = it0 + t
            mbarrier.wait(ready.index(it % STAGES), (it // STAGES) & 1)
            mbarrier.arrive(empty.index(it % STAGES), count=1)

    # --8<-- [start:hopper_bwd_step]
    @gluon.jit
    def _tiles(dk, dv, k, v, q_smem, do_smem, qdo_ready, qdo_empty, lse2_base, delta_base, offs_n, seqlen_q,
               causal_offset, qk_scale, it0, m_lo, m_hi, MASKED: gl.constexpr, BLOCK_M: gl.constexpr,
               BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr, s_layout: gl.constexpr,
               p_layout: gl.constexpr):
        """The portable ``_attn_bwd_dkdv_inner`` for one consumer: query tiles [m_lo, m_hi), the ring's it0-th first."""
        dtype: gl.constexpr = q_smem.dtype
        offs_m0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
        for start_m in range(m_lo, m_hi, BLOCK_M):
            it = it0 + (start_m - m_lo) // BLOCK_M
            s = it % STAGES
            mbarrier.wait(qdo_ready.index(s), (it // STAGES) & 1)
            q = q_smem.index(s).reshape([BLOCK_M, BLOCK_D])
            do = do_smem.index(s).reshape([BLOCK_M, BLOCK_D])
            offs_m = start_m + offs_m0
            # rows past seqlen_q: lse = inf makes P exactly 0 (their Q and dO tiles read as zeros)
            lse2 = gl.load(lse2_base + offs_m, mask=offs_m < seqlen_q, other=float("inf"))
            delta = gl.load(delta_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
            # both products that need only the resident tiles and the streamed ones go out together: dP^T runs on the
            # tensor cores while P^T's exponentials run on the CUDA cores
            qkT = warpgroup_mma(k, q.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dpT = warpgroup_mma(v, do.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qkT = warpgroup_mma_wait(1, deps=(qkT, ))
            pT = gl.exp2(qkT * qk_scale - lse2[None, :])
            if MASKED:
                pT = gl.where(offs_n[:, None] <= offs_m[None, :] + causal_offset, pT, 0.0)
            dv = warpgroup_mma(gl.convert_layout(pT.to(dtype), p_layout), do, dv, is_async=True)
            dpT, dv = warpgroup_mma_wait(0, deps=(dpT, dv))
            dsT = pT * (dpT - delta[None, :])
            dk = warpgroup_mma(gl.convert_layout(dsT.to(dtype), p_layout), q, dk, is_async=True)
            dk = warpgroup_mma_wait(0, deps=(dk, ))
            mbarrier.arrive(qdo_empty.index(s), count=1)  # one arrival per warpgroup: this slot may be refilled
        return dk, dv
    # --8<-- [end:hopper_bwd_step]

    @gluon.jit
    def _consumer(dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready, qdo_empty,
                  off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset, softmax_scale, qk_scale,
                  SUB: gl.constexpr, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  BLOCK_D: gl.constexpr, STAGES: gl.constexpr):
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_M, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        first = start_n + SUB * BLOCK_N  # this warpgroup's first key
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
            dk, dv = _tiles(dk, dv, k, v, q_smem, do_smem, qdo_ready, qdo_empty, LSE2 + row, DELTA + row, offs_n,
                            seqlen_q, causal_offset, qk_scale, it0 + (my_lo - lo) // BLOCK_M, my_lo, full_lo, True,
                            BLOCK_M, BLOCK_N, BLOCK_D, STAGES, s_layout, p_layout)
            dk, dv = _tiles(dk, dv, k, v, q_smem, do_smem, qdo_ready, qdo_empty, LSE2 + row, DELTA + row, offs_n,
                            seqlen_q, causal_offset, qk_scale, it0 + (full_lo - lo) // BLOCK_M, full_lo, hi, False,
                            BLOCK_M, BLOCK_N, BLOCK_D, STAGES, s_layout, p_layout)
        # every product of this warpgroup has completed: its K and V tiles' shared memory takes dK and dV
        k.store((dk * softmax_scale).to(dtype))
        v.store(dv.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dk_desc, [off_b, first, off_hk, 0], k_tile)
        tma.async_copy_shared_to_global(dv_desc, [off_b, first, off_hk, 0], v_tile)
        tma.store_wait(0)

    @gluon.jit(do_not_specialize=["n_heads", "group_size", "seqlen_q", "seqlen_k", "causal_offset"])
    def _attn_bwd_dkdv_hopper(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE2, DELTA, n_heads, group_size,
                              seqlen_q, seqlen_k, causal_offset, softmax_scale, qk_scale, IS_CAUSAL: gl.constexpr,
                              STAGES: gl.constexpr, N_CONSUMERS: gl.constexpr):
        """Grid: (key tiles of N_CONSUMERS * BLOCK_N, batch * kv heads). LSE2: the LSE in log2 units, DELTA:
        rowsum(dO * O) (``backward.bwd_preprocess``), both (batch, heads, seqlen_q)."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
        dtype: gl.constexpr = q_desc.dtype
        off_b, off_hk, start_n, lo, hi = _key_block(N_CONSUMERS * BLOCK_N, BLOCK_M, n_heads, group_size, seqlen_q,
                                                    causal_offset, IS_CAUSAL)

        k_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_N, 1, BLOCK_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_N, 1, BLOCK_D], v_desc.layout)
        q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_M, 1, BLOCK_D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_M, 1, BLOCK_D], do_desc.layout)
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        qdo_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        qdo_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(qdo_ready.index(i), count=1)
            mbarrier.init(qdo_empty.index(i), count=N_CONSUMERS)

        if N_CONSUMERS == 2:
            gl.warp_specialize([
                (_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, group_size, STAGES)),
                (_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset,
                             softmax_scale, qk_scale, 0, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
                (_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset,
                             softmax_scale, qk_scale, 1, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
            ], [4, 4], [240, 240])
        else:
            gl.warp_specialize([
                (_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, group_size, STAGES)),
                (_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset,
                             softmax_scale, qk_scale, 0, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
                (_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset,
                             softmax_scale, qk_scale, 1, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
                (_consumer, (dk_desc, dv_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, kv_ready, qdo_ready,
                             qdo_empty, off_b, off_hk, start_n, lo, hi, n_heads, group_size, seqlen_q, causal_offset,
                             softmax_scale, qk_scale, 2, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
            ], [4, 4, 4], [160, 160, 160])


    # dQ: the forward's skeleton (the producer streams K and V; each consumer keeps its query rows' Q and dO) ------

    @gluon.jit
    def _dq_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready,
                     kv_empty, off_b, off_h, off_hk, row0, hi, STAGES: gl.constexpr):
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        _load_resident(q_desc, do_desc, q_smem, do_smem, qdo_ready, off_b, row0, off_h)
        for j in range(gl.cdiv(hi, BLOCK_N)):
            s = j % STAGES
            mbarrier.wait(kv_empty.index(s), ((j // STAGES) & 1) ^ 1)
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [off_b, j * BLOCK_N, off_hk, 0], k_ready.index(s), k_smem.index(s))
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [off_b, j * BLOCK_N, off_hk, 0], v_ready.index(s), v_smem.index(s))

    @gluon.jit
    def _dq_tiles(dq, q, do, lse2, delta, k_smem, v_smem, k_ready, v_ready, kv_empty, offs_m, seqlen_k, causal_offset,
                  qk_scale, lo, hi, MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr, s_layout: gl.constexpr,
                  p_layout: gl.constexpr):
        """The portable ``_attn_bwd_dq_inner`` for one consumer: key/value tiles [lo, hi) from the ring."""
        dtype: gl.constexpr = k_smem.dtype
        offs_n0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
        for start_n in range(lo, hi, BLOCK_N):
            j = start_n // BLOCK_N
            s = j % STAGES
            phase = (j // STAGES) & 1
            mbarrier.wait(k_ready.index(s), phase)
            k = k_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            qk = warpgroup_mma(q, k.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(s), phase)
            v = v_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            dp = warpgroup_mma(do, v.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qk = warpgroup_mma_wait(1, deps=(qk, ))  # dP may still be running during the exponentials
            p = gl.exp2(qk * qk_scale - lse2[:, None])
            if MASKED:
                offs_n = start_n + offs_n0
                keep = offs_n[None, :] < seqlen_k
                if IS_CAUSAL:
                    keep = keep & (offs_n[None, :] <= offs_m[:, None] + causal_offset)
                p = gl.where(keep, p, 0.0)
            dp = warpgroup_mma_wait(0, deps=(dp, ))
            ds = p * (dp - delta[:, None])
            dq = warpgroup_mma(gl.convert_layout(ds.to(dtype), p_layout), k, dq, is_async=True)
            dq = warpgroup_mma_wait(0, deps=(dq, ))
            mbarrier.arrive(kv_empty.index(s), count=1)
        return dq

    @gluon.jit
    def _dq_consumer(dq_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready, kv_empty,
                     off_b, off_h, pid_bh, row0, hi, seqlen_q, seqlen_k, causal_offset, softmax_scale, qk_scale,
                     SUB: gl.constexpr, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                     BLOCK_D: gl.constexpr, STAGES: gl.constexpr):
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        first = row0 + SUB * BLOCK_M
        offs_m = first + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        row = pid_bh.to(gl.int64) * seqlen_q + offs_m
        lse2 = gl.load(LSE2 + row, mask=offs_m < seqlen_q, other=float("inf"))
        delta = gl.load(DELTA + row, mask=offs_m < seqlen_q, other=0.0)
        full_hi, my_hi = _key_range(first, seqlen_k, causal_offset, IS_CAUSAL, BLOCK_M, BLOCK_N)
        q_tile = q_smem.index(SUB)
        q = q_tile.reshape([BLOCK_M, BLOCK_D])
        do = do_smem.index(SUB).reshape([BLOCK_M, BLOCK_D])
        dq = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)
        mbarrier.wait(qdo_ready, 0)
        dq = _dq_tiles(dq, q, do, lse2, delta, k_smem, v_smem, k_ready, v_ready, kv_empty, offs_m, seqlen_k,
                       causal_offset, qk_scale, 0, full_hi, False, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES,
                       s_layout, p_layout)
        dq = _dq_tiles(dq, q, do, lse2, delta, k_smem, v_smem, k_ready, v_ready, kv_empty, offs_m, seqlen_k,
                       causal_offset, qk_scale, full_hi, my_hi, True, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES,
                       s_layout, p_layout)
        # every product of this warpgroup has completed: its query tile's shared memory takes dQ
        q.store((dq * softmax_scale).to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dq_desc, [off_b, first, off_h, 0], q_tile)
        _release_skipped(k_ready, kv_empty, gl.cdiv(my_hi, BLOCK_N), gl.cdiv(hi, BLOCK_N) - gl.cdiv(my_hi, BLOCK_N),
                         STAGES)
        tma.store_wait(0)

    @gluon.jit(do_not_specialize=["n_heads", "group_size", "seqlen_q", "seqlen_k", "causal_offset"])
    def _attn_bwd_dq_hopper(q_desc, do_desc, k_desc, v_desc, dq_desc, LSE2, DELTA, n_heads, group_size, seqlen_q,
                            seqlen_k, causal_offset, softmax_scale, qk_scale, IS_CAUSAL: gl.constexpr,
                            STAGES: gl.constexpr, N_CONSUMERS: gl.constexpr):
        """Grid: (query tiles of N_CONSUMERS * BLOCK_M, batch * heads)."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
        dtype: gl.constexpr = q_desc.dtype
        tile = gl.program_id(0)
        pid_bh = gl.program_id(1)
        if IS_CAUSAL:
            tile = gl.num_programs(0) - 1 - tile  # the last query rows see the most keys: launch them first
        off_b = pid_bh // n_heads
        off_h = pid_bh % n_heads
        off_hk = off_h // group_size
        row0 = tile * (N_CONSUMERS * BLOCK_M)
        hi = _keys_seen(row0, N_CONSUMERS * BLOCK_M, seqlen_k, causal_offset, IS_CAUSAL)

        q_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_M, 1, BLOCK_D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_M, 1, BLOCK_D], do_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], v_desc.layout)
        qdo_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(qdo_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(kv_empty.index(i), count=N_CONSUMERS)

        if N_CONSUMERS == 2:
            gl.warp_specialize([
                (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready,
                                v_ready, kv_empty, off_b, off_h, off_hk, row0, hi, STAGES)),
                (_dq_consumer, (dq_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready,
                                kv_empty, off_b, off_h, pid_bh, row0, hi, seqlen_q, seqlen_k, causal_offset,
                                softmax_scale, qk_scale, 0, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
                (_dq_consumer, (dq_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready,
                                kv_empty, off_b, off_h, pid_bh, row0, hi, seqlen_q, seqlen_k, causal_offset,
                                softmax_scale, qk_scale, 1, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
            ], [4, 4], [240, 240])
        else:
            gl.warp_specialize([
                (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready,
                                v_ready, kv_empty, off_b, off_h, off_hk, row0, hi, STAGES)),
                (_dq_consumer, (dq_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready,
                                kv_empty, off_b, off_h, pid_bh, row0, hi, seqlen_q, seqlen_k, causal_offset,
                                softmax_scale, qk_scale, 0, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
                (_dq_consumer, (dq_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready,
                                kv_empty, off_b, off_h, pid_bh, row0, hi, seqlen_q, seqlen_k, causal_offset,
                                softmax_scale, qk_scale, 1, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
                (_dq_consumer, (dq_desc, LSE2, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_ready, k_ready, v_ready,
                                kv_empty, off_b, off_h, pid_bh, row0, hi, seqlen_q, seqlen_k, causal_offset,
                                softmax_scale, qk_scale, 2, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D, STAGES)),
            ], [4, 4, 4], [160, 160, 160])


def bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, softmax_scale: float, causal: bool, bottom_right: bool,
                    config=None):
    """``backward.bwd_dkdv`` on Hopper (dk, dv written in place; lse2, delta from ``backward.bwd_preprocess``).
    config: (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS), default ``HOPPER_DKDV_CONFIGS[head_dim, causal]``."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    block_m, block_n, stages, consumers = config or HOPPER_DKDV_CONFIGS[head_dim, causal]
    grid = (triton.cdiv(seqlen_k, consumers * block_n), batch * n_kv_heads)
    _attn_bwd_dkdv_hopper[grid](descriptor(q, block_m), descriptor(dout, block_m), descriptor(k, block_n),
                                descriptor(v, block_n), descriptor(dk, block_n), descriptor(dv, block_n), lse2,
                                delta, n_heads, n_heads // n_kv_heads, seqlen_q, seqlen_k,
                                seqlen_k - seqlen_q if bottom_right else 0, softmax_scale, softmax_scale * LOG2E,
                                IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, num_warps=4)


def bwd_dq_hopper(q, k, v, dout, dq, lse2, delta, softmax_scale: float, causal: bool, bottom_right: bool,
                  config=None):
    """``backward.bwd_dq`` on Hopper (dq written in place). config: (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS),
    default ``HOPPER_DQ_CONFIGS[head_dim, causal]``."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    block_m, block_n, stages, consumers = config or HOPPER_DQ_CONFIGS[head_dim, causal]
    grid = (triton.cdiv(seqlen_q, consumers * block_m), batch * n_heads)
    _attn_bwd_dq_hopper[grid](descriptor(q, block_m), descriptor(dout, block_m), descriptor(k, block_n),
                              descriptor(v, block_n), descriptor(dq, block_m), lse2, delta, n_heads,
                              n_heads // n_kv_heads, seqlen_q, seqlen_k, seqlen_k - seqlen_q if bottom_right else 0,
                              softmax_scale, softmax_scale * LOG2E, IS_CAUSAL=causal, STAGES=stages,
                              N_CONSUMERS=consumers, num_warps=4)
