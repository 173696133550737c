"""Paged decode on Hopper, in Gluon: a tile of keys over several small pages, filled by one TMA box a page and read
by one product.

``decode._split_kv`` (Triton) reads a tile over pages smaller than the tile with an address a row. Triton returns
every TMA box as a tensor of its own, so four boxes a 64-key tile over pages of 16 meant four products or a trip
through registers, and both ran slower than the addresses (benchmarks/FINDINGS.md). Gluon places each box where it
wants: the boxes of a tile land at consecutive 16-row offsets of one shared buffer, under one barrier that expects
all their bytes, and one product reads the whole tile. Compiled for sm_90, a 128-key tile over pages of 16 is eight
4-D bulk copies into the slices of one buffer, with no shared store of their own.

The kernel takes the plain decode step and no more (``decode.hopper_takes`` says which calls): one query a
sequence, no mask beyond each sequence's length (no window, softcap, ALiBi or left padding), up to ``BLOCK_M``
query heads a KV head, head dims of 64 and 128, pages that divide the tile. ``decode.decode_attention`` launches
it in place of ``_split_kv`` under the same split heuristic and the same merge: each program (sequence x KV head,
split) stacks its group's query heads in the first rows of a 64-row tile (one warpgroup's product), streams its
split's run of tiles with ``STAGES - 1`` in flight, and writes what ``_split_kv`` writes, a partial output and
log-sum-exp a split for ``_merge_splits``, or with one split the output and log-sum-exp themselves.

``benchmarks/kernels/gluon_paged_decode.py`` times it against the Triton kernel under other tile configs, checks
it over more shapes, and compiles it for sm_90 without a GPU.
"""

import torch

from .hopper_common import GLUON, descriptor

# One warpgroup's product: the group's query heads in the first rows, zeros below.
BLOCK_M = 64
# Head dims whose rows are one 16-byte-aligned box row and whose two tiles in flight fit shared memory.
HEAD_DIMS = (64, 128)


def box_rows(page_size: int, block_n: int) -> int:
    """Rows of one TMA box: a page, or a tile where a page holds whole tiles (a contiguous cache is one page)."""
    return min(page_size, block_n)


def descriptors(k_cache: torch.Tensor, v_cache: torch.Tensor, block_n: int) -> tuple:
    """The kernel's host descriptors over the caches (pages, page_size, Hk, D): one box a page, of one KV head."""
    rows = box_rows(k_cache.shape[1], block_n)
    return descriptor(k_cache, rows), descriptor(v_cache, rows)


if GLUON:
    from .hopper_common import (
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        thread_barrier,
        tma_load,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    ROWS = gl.constexpr(BLOCK_M)

    @gluon.jit
    def _issue(
        k_desc,
        v_desc,
        k_smem,
        v_smem,
        k_bar,
        v_bar,
        table_row,
        max_pages,
        tile,
        off_hk,
        PAGE_SIZE: gl.constexpr,
        BLOCK_N: gl.constexpr,
    ):
        """Start the copies of tile ``tile`` of one KV head's keys and values into ``k_smem`` and ``v_smem`` ([1,
        BLOCK_N, 1, D]): one box a page the tile spans (or one box of a page that holds the tile), each into its
        rows of the buffer, counted on ``k_bar`` and ``v_bar``. Each page's table entry is read once for both. A
        last tile that runs past the table's ``max_pages`` pages copies the last page again for its rows past the
        end: they lie past the sequence, so their scores are masked and their values zeroed."""
        BOX: gl.constexpr = k_desc.block_type.shape[1]
        mbarrier.expect(k_bar, (BLOCK_N // BOX) * k_desc.block_type.nbytes)
        mbarrier.expect(v_bar, (BLOCK_N // BOX) * v_desc.block_type.nbytes)
        for j in gl.static_range(BLOCK_N // BOX):
            pos = tile * BLOCK_N + j * BOX
            page = gl.load(table_row + gl.minimum(pos // PAGE_SIZE, max_pages - 1))
            tma_load(k_desc, [page, pos % PAGE_SIZE, off_hk, 0], k_bar, k_smem.slice(j * BOX, BOX, dim=1))
            tma_load(v_desc, [page, pos % PAGE_SIZE, off_hk, 0], v_bar, v_smem.slice(j * BOX, BOX, dim=1))

    @gluon.jit
    def _paged_decode(
        Q,
        k_desc,
        v_desc,
        BLOCK_TABLE,
        CACHE_SEQLENS,
        O_PART,
        LSE_PART,
        O,
        LSE,
        stride_qb,
        stride_qh,
        stride_ob,
        stride_oh,
        stride_tb,
        max_pages,
        n_kv_heads,
        n_rows,
        cache_seqlen_const,
        seqlen_new,
        qk_scale,
        GROUP: gl.constexpr,
        PAGE_SIZE: gl.constexpr,
        BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr,
        SPLIT: gl.constexpr,
        SEQLENS_TENSOR: gl.constexpr,
    ):
        BLOCK_D: gl.constexpr = k_desc.block_type.shape[3]
        dtype: gl.constexpr = k_desc.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_D, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # 16-byte loads of a row

        pid_bh = gl.program_id(0)
        split = gl.program_id(1)
        num_splits = gl.num_programs(1)
        off_b = pid_bh // n_kv_heads
        off_hk = pid_bh % n_kv_heads
        if SEQLENS_TENSOR:
            seqlen_k = gl.load(CACHE_SEQLENS + off_b).to(gl.int32) + seqlen_new
        else:
            seqlen_k = cache_seqlen_const + seqlen_new
        seqlen_k = gl.minimum(seqlen_k, max_pages * PAGE_SIZE)  # as _split_kv: never past the table's pages
        n_tiles = (seqlen_k + BLOCK_N - 1) // BLOCK_N
        per_split = (n_tiles + num_splits - 1) // num_splits
        first = split * per_split
        count = gl.maximum(gl.minimum(first + per_split, n_tiles) - first, 0)
        table_row = BLOCK_TABLE + off_b * stride_tb

        rows = gl.arange(0, ROWS, gl.SliceLayout(1, rows_layout))
        cols = gl.arange(0, BLOCK_D, gl.SliceLayout(0, rows_layout))
        q_ptrs = Q + off_b * stride_qb + (off_hk * GROUP + rows)[:, None] * stride_qh + cols[None, :]
        # q K^T reads q from shared memory, as the forward does. Held in registers across the loop as that
        # product's A operand, q got the same registers from ptxas (CUDA 12.8 and 12.9) as P, the second
        # product's A operand, which is written inside the loop: every tile after a program's first then
        # multiplied the last tile's probabilities with K instead of q
        q_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_D], dtype)
        q_smem = gl.allocate_shared_memory(dtype, [ROWS, BLOCK_D], q_shared)
        q_smem.store(gl.load(q_ptrs, mask=(rows < GROUP)[:, None], other=0.0))
        fence_async_shared()
        thread_barrier()

        smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([1, BLOCK_N, 1, BLOCK_D], dtype)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], smem_layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], smem_layout)
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
        for i in gl.static_range(STAGES - 1):
            if i < count:
                _issue(k_desc, v_desc, k_smem.index(i), v_smem.index(i), k_ready.index(i), v_ready.index(i),
                       table_row, max_pages, first + i, off_hk, PAGE_SIZE, BLOCK_N)  # fmt: skip

        m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, s_layout))
        acc = gl.zeros([ROWS, BLOCK_D], gl.float32, o_layout)
        zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        key_cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        for it in range(count):
            # the stage tile it + STAGES - 1 goes into was read by the last iteration, whose products every warp
            # has waited for: the barrier makes sure all of them have, before a copy overwrites it
            ahead = it + STAGES - 1
            if ahead < count:
                thread_barrier()
                st = ahead % STAGES
                _issue(k_desc, v_desc, k_smem.index(st), v_smem.index(st), k_ready.index(st), v_ready.index(st),
                       table_row, max_pages, first + ahead, off_hk, PAGE_SIZE, BLOCK_N)  # fmt: skip
            s = it % STAGES
            phase = (it // STAGES) & 1
            tile = first + it
            mbarrier.wait(k_ready.index(s), phase)
            k = k_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            qk = warpgroup_mma(q_smem, k.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qk = warpgroup_mma_wait(0, deps=(qk,))
            qk = gl.where((tile * BLOCK_N + key_cols < seqlen_k)[None, :], qk * qk_scale, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(qk, 1))
            p = gl.exp2(qk - m_new[:, None])
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha + gl.sum(p, 1)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
            p = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(s), phase)
            v = v_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            if (tile + 1) * BLOCK_N > seqlen_k:  # rows past the sequence may hold NaN, and 0 x NaN is NaN
                key_rows = tile * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(1, rows_layout))
                v_rows = v.load(rows_layout)
                v.store(gl.where((key_rows < seqlen_k)[:, None], v_rows, gl.zeros_like(v_rows)))
                fence_async_shared()
                thread_barrier()
            acc = warpgroup_mma(p, v, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            m_i = m_new

        # a split with no tile writes zeros and LSE = -inf, which the merge weighs 0
        l_safe = gl.where(l_i == 0.0, 1.0, l_i)
        lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_safe)) * 0.6931471805599453)
        out = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
        out = gl.convert_layout(out, rows_layout)
        lse = gl.convert_layout(lse, gl.SliceLayout(1, rows_layout))
        head_row = off_b * n_kv_heads * GROUP + off_hk * GROUP + rows  # b * H + h (one query a sequence)
        if SPLIT:
            # partials as the merge reads them: row (b, h) of split s at s * n_rows + b * H + h
            part_row = split * n_rows + head_row
            gl.store(LSE_PART + part_row, lse, mask=rows < GROUP)
            gl.store(O_PART + part_row[:, None] * BLOCK_D + cols[None, :], out, mask=(rows < GROUP)[:, None])
        else:
            # one split: the output (B, 1, H, D) and LSE (B, H, 1) directly, with no merge
            gl.store(LSE + head_row, lse, mask=rows < GROUP)
            o_ptrs = O + off_b * stride_ob + (off_hk * GROUP + rows)[:, None] * stride_oh + cols[None, :]
            gl.store(o_ptrs, out.to(dtype), mask=(rows < GROUP)[:, None])
