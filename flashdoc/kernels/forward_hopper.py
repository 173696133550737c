"""The forward on Hopper (H100, H200): warp-specialised, written in Gluon, Triton's lower-level dialect.

``forward.py``'s kernel is the portable one: it runs everywhere Triton does, and under the CPU interpreter. On
Hopper, Triton's compiler schedules it as one stream of instructions per program, so a program's softmax and
its matrix products take turns. FlashAttention-3's answer is warp specialisation, which Triton's ``tl`` does not
give on Hopper (benchmarks/FINDINGS.md) but Gluon, shipped with Triton 3.6, does: the program is split into partitions
of warps that run different code, with their own register budgets (``setmaxnreg``).

The work is cut into items of N_CONSUMERS x BLOCK_M query rows of one (batch, head). The grid is persistent, one
program per SM, and each program claims items from a global counter until none is left, causal ones heaviest
first within sections of heads sized to L2 (FlashAttention-3's longest-processing-time order), so the programs
finish together. In a program:

- a *producer* partition (one thread of it, in practice) claims the items and issues the TMA copies: an item's
  query tiles, then its key and value tiles into a ring of STAGES shared-memory buffers, each guarded by
  mbarriers ("ready" when a copy lands, "empty" when every consumer is done with it). It runs ahead into the next
  item while the consumers finish the last one. In a sliding window, whose consumers' key ranges start a tile or
  so apart, each consumer has its own query slot, loaded just before its first key tile, so that the first to
  finish an item starts the next without waiting for the last (``_publish``);
- N_CONSUMERS *consumer* warpgroups of 4 warps each own BLOCK_M query rows of the item and run the same online
  softmax as ``forward._attn_fwd_inner`` on the shared key/value tiles. They are only loosely coupled, through
  the ring, so while one does its softmax on the CUDA cores another's products run on the tensor cores. Under
  the causal mask each stops at its own last key tile.

At head dims over 128 each consumer writes its output through its own query tile's shared memory rather than
through a separate output tile (FlashAttention-3 puts its output over the value tiles instead): at d = 256 that is
what leaves room for 64-key tiles in the ring.

Sliding windows and softcap come from the masking core (``mask.py``, through ``hopper_common``): a window is the
causal kernel with the window's right edge as its diagonal and a left edge (IS_LOCAL), so an item streams only
the key tiles from its first row's first key and a window's cost grows with the window, not the length; softcap
takes a tanh of each score before the mask (``mask.hopper_supports`` sends them here; ALiBi and dropout stay on
the portable kernels). Partitions take their state grouped (``Queries``, ``Ring``, ``Work``, ``Scores``).

Same inputs, outputs and semantics as ``forward._attn_fwd`` (GQA, both causal alignments, any lengths); the head
dims with a tuned config (64, 128, 256), fp16/bf16. ``forward.attn_fwd`` sends the calls this kernel takes here
(``supports``).

With VARLEN the same partitions run packed sequences of different lengths (``varlen.varlen_fwd_hopper``): the
producer finds each claimed item's sequence on the device (``_claim_packed``) and hands it to the consumers with
the item; loads start at the sequence's rows of the packed tensors, the band and the key bound are the
sequence's own, and the output leaves through masked register stores instead of TMA (``_store_rows``). Every
varlen step sits behind a compile-time branch, so the dense kernels' machine code does not depend on it (the
hashes of ``benchmarks/kernels/code_hash.py``).
"""

import functools

import torch

from .._config import switch
from . import cdiv, gluon_support
from .common import find_item
from .hopper_common import GLUON, consumers_of, descriptor, mask, plan_options, rows_descriptor  # noqa: F401 (re-exported)
from .launch import aligned, device_index, distinct, gluon_plan, layout, plan_cache, planned
from .mask import EXPONENT_HEADROOM, bounded_exponent

# FLASHDOC_HOPPER=0 keeps every forward and backward on the portable kernels (for comparisons and debugging).
ENABLED = switch("FLASHDOC_HOPPER")


# --8<-- [start:hopper_configs]
# (BLOCK_M rows per consumer, BLOCK_N keys per tile, STAGES of the key/value ring, N_CONSUMERS, PERSISTENT: one
# program per SM taking tiles until none is left, instead of one program per tile) per (head dim, causal), chosen
# with benchmarks/kernels/gluon_fwd.py on the H200 (benchmarks/FINDINGS.md). With three consumers of 4 warps plus
# the producer's 4, each consumer thread gets 160 registers (240 with two): enough for a 64 x 128 fp32 score tile,
# its 16-bit probabilities and a 64 x d accumulator at d <= 128. At d = 256 two consumers, 64-key tiles, the output
# staged in the query tiles (MAX_SEPARATE_O_HEAD_DIM): 1.10-1.26x the portable kernel, where 32-key tiles beside
# separate output tiles ran at 0.91-1.04x.
HOPPER_CONFIGS = {
    (64, False): (64, 128, 2, 3, True),
    (64, True): (64, 128, 2, 3, True),
    (128, False): (64, 128, 2, 3, True),
    (128, True): (64, 128, 2, 3, True),
    (256, False): (64, 64, 2, 2, True),
    (256, True): (64, 64, 2, 2, True),
}
# A sliding window keeps a second mask edge live in each consumer: at d = 128 three consumers' 160 registers a thread
# spilled 384 bytes over 128-key tiles compiled for sm_90. Over 64-key tiles they spill none, and a window of 1024
# keys at 16k tokens ran 1.12x faster than two consumers over 128-key tiles at d = 128, and 1.04x faster than the
# dense config at d = 64 (benchmarks/FINDINGS.md).
# Softcap keeps the dense configs, which ran fastest with it too: at d = 128 three consumers beat two by 4-16%
# (benchmarks/FINDINGS.md).
WINDOW_CONFIGS = {
    (64, True): (64, 64, 3, 3, True),
    (128, True): (64, 64, 3, 3, True),
}
# Head dims over this write each consumer's output through its query tile (``O_IN_Q``): separate output tiles take
# shared memory that the key/value ring needs.
MAX_SEPARATE_O_HEAD_DIM = 128
# --8<-- [end:hopper_configs]
# Softcap's fixed row max (``mask.bounded_exponent``) drops the running max and the accumulator's rescaling: on the
# H200 (benchmarks/kernels/softcap_bound.py) the bf16 softcap forward went from 0.79x to 0.96x the call without
# softcap at d = 128 (0.85x to 0.92x causal) and from 0.94x to 1.04x at d = 256, but from 0.73x to 0.66x at
# d = 64 without the mask, where the tanh and the exponential, not the products, bound the loop.
BOUNDED_MIN_HEAD_DIM = 128


def bounded(head_dim: int, softcap: float, dtype: torch.dtype) -> bool:
    """The forward's BOUNDED_EXPONENT: the fixed row max where it is exact and pays."""
    return head_dim >= BOUNDED_MIN_HEAD_DIM and bounded_exponent(softcap, dtype)


@functools.cache
def _is_hopper(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index)[0] == 9


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.cache
def _l2_bytes(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).L2_cache_size


def heads_per_section(k: torch.Tensor, n_pairs: int) -> int:
    """How many of a causal launch's n_pairs (batch, head) pairs ``_causal_item`` orders together: as many as L2
    holds the keys and values of, rounded down to a power of two, as FlashAttention-3's LPT scheduler sizes them.
    (Heads of one GQA group share theirs but count once each: a section on the small side.)"""
    per_pair = 2 * k.shape[1] * k.shape[3] * k.element_size()
    fit = max(1, _l2_bytes(k.device.index) // per_pair)
    return min(1 << (fit.bit_length() - 1), n_pairs)


def gluon_runs(q: torch.Tensor) -> bool:
    """Whether the Gluon kernels (this forward, ``backward_hopper``) can take a call on q: not switched off, a
    Hopper GPU, fp16/bf16, and Gluon from a verified Triton (if not, the first such call warns)."""
    if not (
        ENABLED and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and _is_hopper(device_index(q.device))
    ):
        return False
    if not GLUON:
        gluon_support.warn_portable_fallback()
    return GLUON


def table_key(q: torch.Tensor, causal: bool, window_size=(-1, -1)) -> tuple:
    """The config tables' key for a call, (head dim, causal): a sliding window takes the causal entry. (q's last
    dimension is the head dim, in the dense layout and in the packed one of varlen calls.)"""
    return q.shape[-1], causal or tuple(window_size) != (-1, -1)


def table_config(key: tuple, is_local: bool, config=None) -> tuple:
    """The config a call runs: ``config`` if given, else for a sliding window its own entry where
    ``WINDOW_CONFIGS`` has one, else ``HOPPER_CONFIGS[key]`` (key: ``table_key``'s)."""
    if config is None and is_local:
        config = WINDOW_CONFIGS.get(key)
    return config or HOPPER_CONFIGS[key]


def supports(q: torch.Tensor, causal: bool, window_size=(-1, -1), softcap: float = 0.0, alibi: bool = False) -> bool:
    """Whether this kernel takes a forward call: ``gluon_runs``, a head dim with a tuned config, and the variants
    it has (sliding windows and softcap; ALiBi and dropout stay on the portable kernel: the masking core's
    ``hopper_supports`` never asks about dropout). Every length qualifies: causal calls of 128 tokens to 2k ran
    1.01-1.12x the portable kernel at d = 64 and 1.19-1.45x at d = 256 once the causal items ended at the last
    row; before, the short item came last and a minimum length kept calls under 1k-2k tokens on the portable
    kernel."""
    return not alibi and table_key(q, causal, window_size) in HOPPER_CONFIGS and gluon_runs(q)


if GLUON:
    from .hopper_common import (
        Ring,
        Scores,
        _causal_item,
        _first_tile,
        _in_ring,
        _key_range,
        _keys_seen,
        _release_skipped,
        _scores,
        aggregate,
        fence_async_shared,
        gl,
        gluon,
        left_edge_one_sided,
        mask_scores,
        mbarrier,
        thread_barrier,
        tma,
        tma_load,
        tma_store,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    @aggregate
    class Work:
        """A launch's work items (``_work``): ``total`` tiles of query rows, ``n_tiles`` per (batch, head), over
        n_heads query heads in GQA groups of group_size, seqlen_q queries and seqlen_k keys per head."""

        n_tiles: gl.tensor
        total: gl.tensor
        n_heads: gl.tensor
        group_size: gl.tensor
        seqlen_q: gl.tensor
        seqlen_k: gl.tensor
        VARLEN: gl.constexpr

        @gluon.constexpr_function
        def __init__(self, n_tiles, total, n_heads, group_size, seqlen_q, seqlen_k):
            self.n_tiles = n_tiles
            self.total = total
            self.n_heads = n_heads
            self.group_size = group_size
            self.seqlen_q = seqlen_q
            self.seqlen_k = seqlen_k
            self.VARLEN = gl.constexpr(False)

    @aggregate
    class Packed:
        """A varlen launch's work items (``_claim_packed``), in place of ``Work``: for each of n_seqs sequences
        packed along the token axis (sequence b's queries are rows CU_Q[b]:CU_Q[b + 1] of the total_q, its keys
        rows CU_K[b]:CU_K[b + 1]), n_heads x cdiv(its queries, rows per item) items, sequences in ORDER (longest
        first), at most ``total`` items in all (a bound from the shapes: the real count is on the device). The
        output goes to O (total_q, n_heads, head dim; row and head strides stride_os, stride_oh) by masked
        stores, so no item writes into another sequence's rows."""

        total: gl.tensor
        n_heads: gl.tensor
        group_size: gl.tensor
        CU_Q: gl.tensor
        CU_K: gl.tensor
        ORDER: gl.tensor
        n_seqs: gl.tensor
        total_q: gl.tensor
        O: gl.tensor
        stride_os: gl.tensor
        stride_oh: gl.tensor
        VARLEN: gl.constexpr

        @gluon.constexpr_function
        def __init__(self, total, n_heads, group_size, CU_Q, CU_K, ORDER, n_seqs, total_q, O, stride_os, stride_oh):
            self.total = total
            self.n_heads = n_heads
            self.group_size = group_size
            self.CU_Q = CU_Q
            self.CU_K = CU_K
            self.ORDER = ORDER
            self.n_seqs = n_seqs
            self.total_q = total_q
            self.O = O
            self.stride_os = stride_os
            self.stride_oh = stride_oh
            self.VARLEN = gl.constexpr(True)

    @aggregate
    class Queries:
        """A work item's query tiles, one per consumer (q, and o, where each consumer stages its output: q itself
        with O_IN_Q), the item number the producer publishes (item), and their barriers: ready when the producer
        has published an item and its queries have landed, empty when every consumer is done with them.

        PER_CONSUMER: item, ready and empty hold one slot per consumer, so that each consumer gets its next item
        as soon as it is done with its own queries rather than when the last consumer is (``_publish``)."""

        q: gl.shared_memory_descriptor
        o: gl.shared_memory_descriptor
        item: gl.shared_memory_descriptor
        ready: gl.shared_memory_descriptor
        empty: gl.shared_memory_descriptor
        PER_CONSUMER: gl.constexpr

        @gluon.constexpr_function
        def __init__(self, q, o, item, ready, empty, PER_CONSUMER):
            self.q = q
            self.o = o
            self.item = item
            self.ready = ready
            self.empty = empty
            self.PER_CONSUMER = gl.constexpr(PER_CONSUMER)

    @gluon.constexpr_function
    def _item_layout(num_warps):
        """The register layout of the one-element work-item buffer, in a partition of num_warps warps."""
        return gl.BlockedLayout([1], [32], [num_warps], [0])

    @gluon.jit
    def _read_item(item_smem):
        """The work item the producer last published in shared memory (a one-element buffer)."""
        return gl.max(item_smem.load(_item_layout(gl.num_warps())), 0)

    @gluon.jit
    def _claim_packed(COUNTER, work, start, before, ROWS: gl.constexpr):
        """The next work item of a varlen launch (``Packed``): (i, seq, local, start, before), i the claim or
        ``work.total`` if none is left, seq its sequence, local its place among the sequence's items (head by
        head, then tile by tile of ROWS query rows), start and before where the next claim's search starts
        (``common.find_item``, over 32 x num_warps sequences a step: FlashAttention-3's
        VarlenDynamicPersistentTileScheduler searches a warp's worth at a time so)."""
        i = gl.atomic_add(COUNTER, 1)
        offs = gl.arange(0, 32 * gl.num_warps(), layout=_item_layout(gl.num_warps()))
        seq, local, start, before = find_item(
            i, offs, work.ORDER, work.CU_Q, work.n_seqs, work.n_heads, ROWS, start, before
        )
        return gl.where(seq >= 0, i, work.total), seq, local, start, before

    @gluon.jit
    def _packed_sequence(CU_Q, CU_K, seq):
        """(query start, query count, key start, key count) of sequence seq of a varlen launch."""
        q_start = gl.load(CU_Q + seq)
        k_start = gl.load(CU_K + seq)
        return q_start, gl.load(CU_Q + seq + 1) - q_start, k_start, gl.load(CU_K + seq + 1) - k_start

    @gluon.jit
    def _sequence_band(len_q, len_k, scores):
        """``Scores`` for one sequence of a varlen launch, whose scores' offsets are those of a sequence with as
        many keys as queries: the band moved to this sequence's bottom-right diagonal (``mask.band``)."""
        diag = len_k - len_q
        return Scores(
            scores.right_offset + diag,
            scores.left_offset + diag,
            scores.qk_scale,
            scores.softcap_scale,
            scores.IS_CAUSAL,
            scores.IS_LOCAL,
            scores.SOFTCAP,
        )

    @gluon.jit
    def _publish_packed(item_smem, i, item, q_start, len_q, len_k):
        """A varlen item for the consumers, in the fields of item_smem: the claim i (``work.total``: none left),
        the item in its sequence (``_work``'s numbering) and the sequence's first query row and lengths."""
        layout: gl.constexpr = _item_layout(gl.num_warps())
        item_smem.slice(0, 1).store(gl.full([1], i, gl.int32, layout))
        item_smem.slice(1, 1).store(gl.full([1], item, gl.int32, layout))
        item_smem.slice(2, 1).store(gl.full([1], q_start, gl.int32, layout))
        item_smem.slice(3, 1).store(gl.full([1], len_q, gl.int32, layout))
        item_smem.slice(4, 1).store(gl.full([1], len_k, gl.int32, layout))

    @gluon.jit
    def _read_packed(item_smem):
        """``_publish_packed``'s fields that say which rows and keys the item has: (item, len_q, len_k)."""
        return _read_item(item_smem.slice(1, 1)), _read_item(item_smem.slice(3, 1)), _read_item(item_smem.slice(4, 1))

    @gluon.jit
    def _read_rows(item_smem):
        """``_publish_packed``'s fields that say where the item's output goes: (q_start, len_q). Read again after
        the item's products rather than held through them: registers are what the consumers run short of."""
        return _read_item(item_smem.slice(2, 1)), _read_item(item_smem.slice(3, 1))

    @gluon.constexpr_function
    def _rows_layout(block_d, num_warps):
        """A register layout of (rows, block_d) 16-bit tiles in which each thread holds 8 consecutive columns:
        16-byte stores, a row's threads side by side."""
        cols = min(32, block_d // 8)
        return gl.BlockedLayout([1, 8], [32 // cols, cols], [num_warps, 1], [1, 0])

    @gluon.jit
    def _store_rows(o_tile, work, q_start, first, len_q, off_h):
        """Rows first + [0, BLOCK_M) of a varlen item's output, from the consumer's tile o_tile (BLOCK_M, head
        dim) to work.O, those in [0, len_q) only: TMA would write a whole tile, into the next sequence's rows
        (FlashAttention-3 stores a varlen output so, from shared memory, for the same reason)."""
        BLOCK_M: gl.constexpr = o_tile.shape[0]
        BLOCK_D: gl.constexpr = o_tile.shape[1]
        layout: gl.constexpr = _rows_layout(BLOCK_D, gl.num_warps())
        o = o_tile.load(layout)
        rows = first + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, layout))
        offs = (q_start + rows).to(gl.int64)[:, None] * work.stride_os + (off_h * work.stride_oh + cols)[None, :]
        keep = ((rows >= 0) & (rows < len_q))[:, None] & (cols < BLOCK_D)[None, :]
        gl.store(work.O + offs, o, mask=keep)

    # --8<-- [start:hopper_claim]
    @gluon.jit
    def _claim(COUNTER, n_tiles, total, section, IS_CAUSAL: gl.constexpr):
        """The next work item for a program, as pid_bh * n_tiles + tile (``_work``), or ``total`` if none is left.
        Items are claimed in order: without the mask, tile by tile within a head, so that the programs running at
        one time share a few heads' keys and values in L2; causal ones in ``_causal_item``'s order."""
        i = gl.atomic_add(COUNTER, 1)
        if IS_CAUSAL:
            rank, pid_bh = _causal_item(gl.minimum(i, total - 1), n_tiles, total // n_tiles, section)
            i = gl.where(i < total, pid_bh * n_tiles + (n_tiles - 1 - rank), total)  # the last tile sees most keys
        return i

    # --8<-- [end:hopper_claim]

    # --8<-- [start:hopper_work_item]
    @gluon.jit
    def _work(
        item,
        n_tiles,
        n_heads,
        group_size,
        seqlen_q,
        seqlen_k,
        right_offset,
        IS_CAUSAL: gl.constexpr,
        BLOCK_M: gl.constexpr,
        ROWS: gl.constexpr,
    ):
        """Work item pid_bh * n_tiles + tile (``_claim``): a tile of ROWS query rows of one (batch, head). Returns the
        head indices, the first row and the key count.

        Under the causal mask the tiles end at the last query row rather than start at row 0: when ROWS does not
        divide the length, the short tile is then the first one, which sees the fewest keys, instead of the last,
        which sees them all and would cost as much as a whole tile (at 4k tokens and 192-row tiles, a 21st of the
        work, for 64 rows' worth). Its leading consumers' rows are then all negative: they compute and store
        nothing (``_skipped``). The shift is whole consumers' rows, so no consumer straddles row 0."""
        pid_bh = item // n_tiles
        tile = item % n_tiles
        off_b = pid_bh // n_heads
        off_h = pid_bh % n_heads
        off_hk = off_h // group_size  # GQA/MQA
        row0 = tile * ROWS
        if IS_CAUSAL:
            row0 -= (n_tiles * ROWS - seqlen_q) // BLOCK_M * BLOCK_M
        return pid_bh, off_b, off_h, off_hk, row0, _keys_seen(row0, ROWS, seqlen_k, right_offset, IS_CAUSAL)

    # --8<-- [end:hopper_work_item]

    @gluon.jit
    def _skipped(first, BLOCK_M: gl.constexpr):
        """Whether a consumer's BLOCK_M rows from ``first`` lie before row 0 (the first causal tile, ``_work``)."""
        return first + BLOCK_M <= 0

    @gluon.jit
    def _producer(q_desc, k_desc, v_desc, queries, ring, work, scores, COUNTER, section):
        """Claims work items from the global COUNTER (heaviest first, so the first program free takes the next:
        greedy, longest-first scheduling), publishes each with its queries, and streams its keys and values
        through the ring: in a window, only the tiles from the item's first row's first key on."""
        q_smem, item_smem, q_ready, q_empty = queries.q, queries.item, queries.ready, queries.empty
        k_smem, v_smem, k_ready, v_ready, kv_empty = ring.a, ring.b, ring.a_ready, ring.b_ready, ring.empty
        total, n_heads, group_size = work.total, work.n_heads, work.group_size
        VARLEN: gl.constexpr = work.VARLEN
        if not VARLEN:  # (a varlen item's sequence sets these)
            n_tiles, seqlen_q, seqlen_k = work.n_tiles, work.seqlen_q, work.seqlen_k
            left_offset, right_offset = scores.left_offset, scores.right_offset
        IS_CAUSAL: gl.constexpr = scores.IS_CAUSAL
        IS_LOCAL: gl.constexpr = scores.IS_LOCAL
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_smem.shape[2]
        STAGES: gl.constexpr = k_smem.shape[0]
        N_CONSUMERS: gl.constexpr = q_smem.shape[0]
        PER_CONSUMER: gl.constexpr = queries.PER_CONSUMER
        layout: gl.constexpr = _item_layout(gl.num_warps())
        kv_it = 0  # key/value tiles loaded so far, over all of this program's work items: the ring's position
        r = 0  # work items so far
        if VARLEN:
            start = 0  # the search's place in work.ORDER, and the items before it (``_claim_packed``)
            before = 0
            i, seq, local, start, before = _claim_packed(COUNTER, work, start, before, N_CONSUMERS * BLOCK_M)
        else:
            i = _claim(COUNTER, n_tiles, total, section, IS_CAUSAL)
        while i < total:
            if VARLEN:
                q_start, seqlen_q, k_start, seqlen_k = _packed_sequence(work.CU_Q, work.CU_K, seq)
                n_tiles = gl.cdiv(seqlen_q, N_CONSUMERS * BLOCK_M)
                band = _sequence_band(seqlen_q, seqlen_k, scores)
                left_offset, right_offset = band.left_offset, band.right_offset
                item = local
                if IS_CAUSAL:  # within a head, the last tile (which sees most keys) first, as ``_claim`` orders
                    item = local // n_tiles * n_tiles + (n_tiles - 1 - local % n_tiles)
            else:
                item = i
            _, off_b, off_h, off_hk, row0, hi = _work(
                item,
                n_tiles,
                n_heads,
                group_size,
                seqlen_q,
                seqlen_k,
                right_offset,
                IS_CAUSAL,
                BLOCK_M,
                N_CONSUMERS * BLOCK_M,
            )
            if not PER_CONSUMER:
                # the consumers are done with the last item's queries (a fresh barrier counts as having completed
                # the phase before its first: the first item never waits)
                mbarrier.wait(q_empty, (r & 1) ^ 1)
                if VARLEN:
                    _publish_packed(item_smem, i, item, q_start, seqlen_q, seqlen_k)
                else:
                    item_smem.store(gl.full([1], i, gl.int32, layout))
                mbarrier.expect(q_ready, N_CONSUMERS * q_desc.block_type.nbytes)
                for c in gl.static_range(N_CONSUMERS):
                    q_row = _query_row(row0, c, BLOCK_M, IS_CAUSAL)
                    if VARLEN:  # rows of the packed tensor (off_b is 0): past the sequence's end, the next one's
                        q_row += q_start
                    tma_load(q_desc, [off_b, q_row, off_h, 0], q_ready, q_smem.index(c))
            n_kv = gl.cdiv(hi, BLOCK_N)
            j0 = _first_tile(row0, seqlen_k, left_offset, right_offset, n_kv, IS_CAUSAL, IS_LOCAL, BLOCK_N)
            for j in range(j0, n_kv):
                if PER_CONSUMER:  # each consumer's queries just before the first key tile it reads
                    for c in gl.static_range(N_CONSUMERS):
                        if (
                            _publish_tile(
                                row0, c, j0, n_kv, seqlen_k, left_offset, right_offset, IS_CAUSAL, BLOCK_M, BLOCK_N
                            )
                            == j
                        ):
                            _publish(q_desc, queries, c, i, r, off_b, off_h, row0, IS_CAUSAL)
                it = kv_it + (j - j0)
                s = it % STAGES
                mbarrier.wait(kv_empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
                key_row = j * BLOCK_N
                if VARLEN:  # the keys past the sequence's end that a tile holds are masked (``_consumer``)
                    key_row += k_start
                tma_load(k_desc, [off_b, key_row, off_hk, 0], k_ready.index(s), k_smem.index(s))
                mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
                tma_load(v_desc, [off_b, key_row, off_hk, 0], v_ready.index(s), v_smem.index(s))
            if PER_CONSUMER:  # the consumers whose rows see none of the item's key tiles
                for c in gl.static_range(N_CONSUMERS):
                    if (
                        _publish_tile(
                            row0, c, j0, n_kv, seqlen_k, left_offset, right_offset, IS_CAUSAL, BLOCK_M, BLOCK_N
                        )
                        == n_kv
                    ):
                        _publish(q_desc, queries, c, i, r, off_b, off_h, row0, IS_CAUSAL)
            kv_it += n_kv - j0
            r += 1
            if VARLEN:
                i, seq, local, start, before = _claim_packed(COUNTER, work, start, before, N_CONSUMERS * BLOCK_M)
            else:
                i = _claim(COUNTER, n_tiles, total, section, IS_CAUSAL)
        # no work left: the consumers read an item past the end and stop
        if PER_CONSUMER:
            for c in gl.static_range(N_CONSUMERS):
                mbarrier.wait(q_empty.index(c), (r & 1) ^ 1)
                item_smem.slice(c, 1).store(gl.full([1], total, gl.int32, layout))
                mbarrier.arrive(q_ready.index(c), count=1)
        else:
            mbarrier.wait(q_empty, (r & 1) ^ 1)
            if VARLEN:
                item_smem.slice(0, 1).store(gl.full([1], total, gl.int32, layout))
            else:
                item_smem.store(gl.full([1], total, gl.int32, layout))
            mbarrier.arrive(q_ready, count=1)

    @gluon.jit
    def _query_row(row0, c: gl.constexpr, BLOCK_M: gl.constexpr, IS_CAUSAL: gl.constexpr):
        """The first of consumer c's query rows in the item from row0. A consumer skipped under the causal mask
        (rows before row 0) still loads a tile, from row 0: unused, but its ready barrier counts the bytes."""
        q_row = row0 + c * BLOCK_M
        if IS_CAUSAL:
            q_row = gl.maximum(q_row, 0)
        return q_row

    @gluon.jit
    def _publish_tile(
        row0,
        c: gl.constexpr,
        j0,
        n_kv,
        seqlen_k,
        left_offset,
        right_offset,
        IS_CAUSAL: gl.constexpr,
        BLOCK_M: gl.constexpr,
        BLOCK_N: gl.constexpr,
    ):
        """With per-consumer query slots (a window's items): the key tile, from the item's first j0 to its end n_kv,
        before whose loads the producer publishes consumer c's queries: the first tile the consumer reads
        (``_first_tile`` of its first row), or n_kv if it reads none of them."""
        first = _first_tile(row0 + c * BLOCK_M, seqlen_k, left_offset, right_offset, n_kv, IS_CAUSAL, True, BLOCK_N)
        return gl.maximum(first, j0)

    @gluon.jit
    def _publish(q_desc, queries, c: gl.constexpr, i, r, off_b, off_h, row0, IS_CAUSAL: gl.constexpr):
        """Hand work item i (this program's r-th) to consumer c through its own slot: once the consumer is done with
        its last item's queries, the item number and a TMA load of its query rows, which complete its ready barrier."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        mbarrier.wait(queries.empty.index(c), (r & 1) ^ 1)
        queries.item.slice(c, 1).store(gl.full([1], i, gl.int32, _item_layout(gl.num_warps())))
        mbarrier.expect(queries.ready.index(c), q_desc.block_type.nbytes)
        tma_load(
            q_desc,
            [off_b, _query_row(row0, c, BLOCK_M, IS_CAUSAL), off_h, 0],
            queries.ready.index(c),
            queries.q.index(c),
        )

    @gluon.jit
    def _release_tiles(k_ready, kv_empty, kv_base, j_from, j_to, STAGES: gl.constexpr):
        """Release key tiles [j_from, j_to) of an item whose tile 0 is the ring's kv_base-th, each once its K has
        landed. (``backward_hopper._release_skipped`` counts from the ring position instead; called here, its
        arithmetic made ptxas spill 260 bytes instead of 12 at d = 128.)"""
        for j in range(j_from, j_to):
            it = kv_base + j
            mbarrier.wait(k_ready.index(it % STAGES), (it // STAGES) & 1)
            mbarrier.arrive(kv_empty.index(it % STAGES), count=1)

    # --8<-- [start:hopper_consume]

    @gluon.jit
    def _consume(
        acc,
        l_i,
        m_i,
        q,
        ring,
        kv_it,
        offs_m,
        seqlen_k,
        scores,
        lo,
        hi,
        MASK_LEFT: gl.constexpr,
        MASK_RIGHT: gl.constexpr,
        s_layout: gl.constexpr,
        p_layout: gl.constexpr,
        row_o: gl.constexpr,
        BOUNDED: gl.constexpr = False,
    ):
        """``forward._attn_fwd_inner`` for one consumer warpgroup: key/value tiles [lo, hi) from the ring, whose
        tile 0 is the ring's kv_it-th. The scores go through ``Scores``: capped (``_scores``), then masked by the
        core's band (``mask_scores``) at the edges asked for: MASK_LEFT, the window's left edge; MASK_RIGHT, the
        causal diagonal and the keys' end. BOUNDED (softcap, ``mask.bounded_exponent``):
        m_i is a fixed offset the capped exponents cannot outgrow, so there is no running max to keep and the
        accumulator is never rescaled."""
        k_smem, v_smem, k_ready, v_ready, kv_empty = ring.a, ring.b, ring.a_ready, ring.b_ready, ring.empty
        qk_scale = scores.qk_scale
        dtype: gl.constexpr = k_smem.dtype
        BLOCK_M: gl.constexpr = q.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[2]
        BLOCK_D: gl.constexpr = k_smem.shape[4]
        STAGES: gl.constexpr = k_smem.shape[0]
        MASKED: gl.constexpr = MASK_LEFT or MASK_RIGHT
        offs_n0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
        for start_n in range(lo, hi, BLOCK_N):
            it = kv_it + start_n // BLOCK_N
            s = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(k_ready.index(s), phase)
            k = k_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            qk = warpgroup_mma(q, k.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qk = warpgroup_mma_wait(0, deps=(qk,))
            qk = _scores(qk, scores)
            if MASKED:
                offs_n = start_n + offs_n0
                cols = offs_n[None, :]
                qk = mask_scores(
                    qk,
                    offs_m[:, None],
                    cols,
                    seqlen_k,
                    scores.left_offset,
                    scores.right_offset,
                    float("-inf"),
                    MASK_RIGHT,
                    scores.IS_CAUSAL and MASK_RIGHT,
                    scores.IS_LOCAL and MASK_LEFT,
                )
            if BOUNDED:
                p = gl.exp2(qk * qk_scale - m_i[:, None])
                l_i = l_i + gl.sum(p, 1)
            else:
                m_ij = gl.maximum(m_i, gl.max(qk, 1) * qk_scale)
                if MASKED:
                    m_ij = gl.where(m_ij == float("-inf"), 0.0, m_ij)
                p = gl.exp2(qk * qk_scale - m_ij[:, None])
                alpha = gl.exp2(m_i - m_ij)
                l_i = l_i * alpha + gl.sum(p, 1)
                acc = acc * gl.convert_layout(alpha, row_o)[:, None]
                m_i = m_ij
            # the probabilities feed the next product from registers, as its A operand
            p = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(s), phase)
            acc = warpgroup_mma(p, v_smem.index(s).reshape([BLOCK_N, BLOCK_D]), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(kv_empty.index(s), count=1)  # one arrival per warpgroup: this stage may be refilled
        return acc, l_i, m_i

    # --8<-- [end:hopper_consume]

    @gluon.jit
    def _consumer(
        o_desc, LSE, queries, ring, work, scores, SUB: gl.constexpr, O_IN_Q: gl.constexpr, BOUNDED: gl.constexpr
    ):
        """Consumer warpgroup SUB: rows row0 + SUB * BLOCK_M + [0, BLOCK_M) of each work item's query tile. With
        O_IN_Q, queries.o is queries.q: the output goes out through the query tile, which is released only then.
        BOUNDED: ``_consume``'s, with m_i fixed at ``mask.bounded_exponent``'s offset."""
        q_smem, o_smem, item_smem, q_ready, q_empty = queries.q, queries.o, queries.item, queries.ready, queries.empty
        if queries.PER_CONSUMER:  # this consumer's own slot
            item_smem = item_smem.slice(SUB, 1)
            q_ready = q_ready.index(SUB)
            q_empty = q_empty.index(SUB)
        k_smem, k_ready, kv_empty = ring.a, ring.a_ready, ring.empty
        total, n_heads, group_size = work.total, work.n_heads, work.group_size
        VARLEN: gl.constexpr = work.VARLEN
        if not VARLEN:  # (a varlen item's sequence sets these)
            n_tiles, seqlen_q, seqlen_k = work.n_tiles, work.seqlen_q, work.seqlen_k
            left_offset, right_offset = scores.left_offset, scores.right_offset
        IS_CAUSAL: gl.constexpr = scores.IS_CAUSAL
        IS_LOCAL: gl.constexpr = scores.IS_LOCAL
        BLOCK_M: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[2]
        BLOCK_D: gl.constexpr = k_smem.shape[4]
        STAGES: gl.constexpr = k_smem.shape[0]
        dtype: gl.constexpr = o_desc.dtype
        N_CONSUMERS: gl.constexpr = q_smem.shape[0]
        # wgmma's accumulator layouts: 4 warps stacked along the rows, 16 rows per instruction
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_D, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

        kv_it = 0
        r = 0
        mbarrier.wait(q_ready, 0)  # the first item's queries have landed, or the producer found no work
        if VARLEN:
            i = _read_item(item_smem.slice(0, 1))
        else:
            i = _read_item(item_smem)
        while i < total:
            if VARLEN:
                item, seqlen_q, seqlen_k = _read_packed(item_smem)
                n_tiles = gl.cdiv(seqlen_q, N_CONSUMERS * BLOCK_M)
                band = _sequence_band(seqlen_q, seqlen_k, scores)
                left_offset, right_offset = band.left_offset, band.right_offset
            else:
                item = i
                band = scores
            pid_bh, off_b, off_h, _, row0, hi = _work(
                item,
                n_tiles,
                n_heads,
                group_size,
                seqlen_q,
                seqlen_k,
                right_offset,
                IS_CAUSAL,
                BLOCK_M,
                N_CONSUMERS * BLOCK_M,
            )
            first = row0 + SUB * BLOCK_M  # this warpgroup's first row
            my_lo, full_lo, full_hi, my_hi = _key_range(
                first, seqlen_k, left_offset, right_offset, IS_CAUSAL, IS_LOCAL, BLOCK_M, BLOCK_N
            )
            if IS_CAUSAL:  # rows before row 0 get no keys (bottom-right alignment would otherwise give them some)
                skipped = _skipped(first, BLOCK_M)
                full_hi = gl.where(skipped, 0, full_hi)
                my_hi = gl.where(skipped, 0, my_hi)
            else:
                skipped = False
            q = q_smem.index(SUB).reshape([BLOCK_M, BLOCK_D])  # from the descriptor's (1, BLOCK_M, 1, BLOCK_D) tile
            offs_m = first + gl.arange(0, BLOCK_M, layout=row_s)
            if BOUNDED:
                m_i = gl.full([BLOCK_M], 0.0, gl.float32, layout=row_s) + (scores.qk_scale - EXPONENT_HEADROOM)
            else:
                m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
            l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
            acc = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)
            if IS_LOCAL:
                # the ring holds the item's key tiles from its first row's first key (``_producer``): this
                # warpgroup's own may start later, and its rows' left edges need the mask up to full_lo
                lo = (
                    _first_tile(
                        row0, seqlen_k, left_offset, right_offset, gl.cdiv(hi, BLOCK_N), IS_CAUSAL, IS_LOCAL, BLOCK_N
                    )
                    * BLOCK_N
                )
                kv_base = kv_it - lo // BLOCK_N  # the ring position of key tile 0
                # each edge's tiles mask only their own edge where the core allows it: a comparison a score fewer
                left_only = left_edge_one_sided(first, full_lo, right_offset, BLOCK_N, IS_CAUSAL)
                my_lo, full_lo, full_hi, my_hi, my_end = _in_ring(lo, hi, my_lo, full_lo, full_hi, my_hi, BLOCK_N)
                _release_skipped(k_ready, kv_empty, kv_it, (my_lo - lo) // BLOCK_N, STAGES)
                if left_only:
                    acc, l_i, m_i = _consume(
                        acc,
                        l_i,
                        m_i,
                        q,
                        ring,
                        kv_base,
                        offs_m,
                        seqlen_k,
                        band,
                        my_lo,
                        full_lo,
                        True,
                        False,
                        s_layout,
                        p_layout,
                        row_o,
                        BOUNDED,
                    )
                else:
                    acc, l_i, m_i = _consume(
                        acc,
                        l_i,
                        m_i,
                        q,
                        ring,
                        kv_base,
                        offs_m,
                        seqlen_k,
                        band,
                        my_lo,
                        full_lo,
                        True,
                        True,
                        s_layout,
                        p_layout,
                        row_o,
                        BOUNDED,
                    )
            else:
                kv_base = kv_it
            acc, l_i, m_i = _consume(
                acc,
                l_i,
                m_i,
                q,
                ring,
                kv_base,
                offs_m,
                seqlen_k,
                band,
                full_lo,
                full_hi,
                False,
                False,
                s_layout,
                p_layout,
                row_o,
                BOUNDED,
            )
            acc, l_i, m_i = _consume(
                acc,
                l_i,
                m_i,
                q,
                ring,
                kv_base,
                offs_m,
                seqlen_k,
                band,
                full_hi,
                my_hi,
                False,
                True,
                s_layout,
                p_layout,
                row_o,
                BOUNDED,
            )
            if VARLEN:  # (before the producer may publish the next item)
                q_start, seqlen_q = _read_rows(item_smem)
            if not O_IN_Q:
                # every Q K^T of this item is done: the producer may load the next item's queries during the epilogue
                mbarrier.arrive(q_empty, count=1)
            # the key tiles past this warpgroup's rows are still released, in order, once loaded (an early arrival
            # would count towards the stage's previous use)
            if queries.PER_CONSUMER:
                # before the epilogue: the producer refills these stages with the next item's first tiles, which
                # the other consumers start on while this one writes its output
                _release_tiles(k_ready, kv_empty, kv_base, my_end // BLOCK_N, gl.cdiv(hi, BLOCK_N), STAGES)

            # as in forward._attn_fwd: rows that saw no key output zeros and LSE = -inf
            l_safe = gl.where(l_i == 0.0, 1.0, l_i)
            lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_safe)) * 0.6931471805599453)
            in_range = offs_m < seqlen_q
            if IS_CAUSAL:
                in_range = in_range & (offs_m >= 0)
            if VARLEN:  # LSE (n_heads, total_q), as varlen._varlen_fwd writes it
                gl.store(LSE + off_h.to(gl.int64) * work.total_q + (q_start + offs_m), lse, mask=in_range)
            else:
                gl.store(LSE + pid_bh.to(gl.int64) * seqlen_q + offs_m, lse, mask=in_range)
            acc = acc / gl.convert_layout(l_safe, row_o)[:, None]
            o_tile = o_smem.index(SUB)
            if VARLEN:
                if not skipped:
                    o_rows = o_tile.reshape([BLOCK_M, BLOCK_D])
                    o_rows.store(acc.to(dtype))
                    _store_rows(o_rows, work, q_start, first, seqlen_q, off_h)
            else:
                if not O_IN_Q:
                    tma.store_wait(0)  # the last item's output has left o_tile
                if not skipped:
                    o_tile.reshape([BLOCK_M, BLOCK_D]).store(acc.to(dtype))
                    fence_async_shared()
                    tma_store(o_desc, [off_b, first, off_h, 0], o_tile)
            if not queries.PER_CONSUMER:
                if IS_LOCAL:
                    skip_from = my_end // BLOCK_N
                else:
                    skip_from = gl.cdiv(my_hi, BLOCK_N)
                _release_tiles(k_ready, kv_empty, kv_base, skip_from, gl.cdiv(hi, BLOCK_N), STAGES)
            if O_IN_Q:
                if VARLEN:
                    thread_barrier()  # every warp has read its rows out of the query tile (``_store_rows``)
                else:
                    tma.store_wait(0)  # the output has left the query tile: the next item's queries may land in it
                mbarrier.arrive(q_empty, count=1)
            kv_it = kv_base + gl.cdiv(hi, BLOCK_N)
            r += 1
            mbarrier.wait(q_ready, r & 1)
            if VARLEN:
                i = _read_item(item_smem.slice(0, 1))
            else:
                i = _read_item(item_smem)
        if not O_IN_Q:  # (with O_IN_Q, each item's output has been waited for)
            if not VARLEN:  # (a varlen output leaves by register stores)
                tma.store_wait(0)

    # --8<-- [start:hopper_kernel]
    # Lengths, offsets and counts change from call to call: no specialising on their value.
    @gluon.jit(
        do_not_specialize=[
            "n_tiles",
            "total",
            "section",
            "n_heads",
            "group_size",
            "seqlen_q",
            "seqlen_k",
            "right_offset",
            "left_offset",
            "n_seqs",
            "total_q",
        ]
    )
    def _attn_fwd_hopper(
        q_desc,
        k_desc,
        v_desc,
        o_desc,
        LSE,
        COUNTER,
        n_tiles,
        total,
        section,
        n_heads,
        group_size,
        seqlen_q,
        seqlen_k,
        right_offset,
        qk_scale,
        left_offset,
        softcap_scale,
        O,
        stride_os,
        stride_oh,
        CU_Q,
        CU_K,
        ORDER,
        n_seqs,
        total_q,
        IS_CAUSAL: gl.constexpr,
        BLOCK_M: gl.constexpr,
        BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr,
        N_CONSUMERS: gl.constexpr,
        O_IN_Q: gl.constexpr,
        IS_LOCAL: gl.constexpr = False,
        SOFTCAP: gl.constexpr = False,
        VARLEN: gl.constexpr = False,
        BOUNDED_EXPONENT: gl.constexpr = False,
    ):
        """Work items: ``total`` tiles of N_CONSUMERS * BLOCK_M query rows (``n_tiles`` per (batch, head)), claimed
        one at a time through COUNTER (an int32 zero): one per program, or, on a persistent grid of one program per
        SM, as many as each program gets through, the producer loading an item's queries and first keys while the
        consumers finish the one before; causal ones in sections of ``section`` (batch, head) pairs
        (``_causal_item``). q/k/v/o_desc: ``descriptors``. The mask and the score change: ``Scores`` (IS_LOCAL, a
        sliding window's left edge, comes with IS_CAUSAL: ``hopper_common.mask``); BOUNDED_EXPONENT, softcap's
        fixed row max (``bounded``).

        VARLEN: packed sequences (``varlen.varlen_fwd_hopper``, ``Packed``): the descriptors are
        ``hopper_common.packed_descriptor``s, ``total`` bounds the items, right_offset and left_offset are the
        band's offsets from each sequence's own bottom-right diagonal, LSE is (heads, total_q), and O, stride_os,
        stride_oh, CU_Q, CU_K, ORDER, n_seqs and total_q are ``Packed``'s; n_tiles, section, seqlen_q and seqlen_k
        go unread. Without it those eight are None (``VARLEN_ONLY``)."""
        BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
        dtype: gl.constexpr = q_desc.dtype
        q_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_M, 1, BLOCK_D], q_desc.layout)
        if O_IN_Q:
            o_smem = q_smem  # (Q's and O's descriptors have the same tile and layout)
        else:
            o_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_M, 1, BLOCK_D], o_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, 1, BLOCK_D], v_desc.layout)
        # A window's consumers start and end their key ranges a tile or so apart: each gets its own query slot, so
        # that the first to finish an item need not wait for the last before it starts the next. The producer
        # loads the tiles before a consumer's first (at most (N_CONSUMERS - 1) x BLOCK_M keys' worth) ahead of its
        # queries, and that consumer releases them only once they are in: the ring must hold them all.
        PER_CONSUMER: gl.constexpr = IS_LOCAL and not VARLEN and (N_CONSUMERS - 1) * BLOCK_M <= STAGES * BLOCK_N
        if PER_CONSUMER:
            # (one word a consumer, in a buffer of a power of two: ``slice(c, 1)`` is consumer c's)
            item_smem = gl.allocate_shared_memory(gl.int32, [4], gl.SwizzledSharedLayout(1, 1, 1, [0]))
            q_ready = gl.allocate_shared_memory(gl.int64, [N_CONSUMERS, 1], mbarrier.MBarrierLayout())
            q_empty = gl.allocate_shared_memory(gl.int64, [N_CONSUMERS, 1], mbarrier.MBarrierLayout())
            for c in gl.static_range(N_CONSUMERS):
                mbarrier.init(q_ready.index(c), count=1)
                mbarrier.init(q_empty.index(c), count=1)
        else:
            # (a varlen item comes with its sequence's rows: ``_publish_packed``)
            item_smem = gl.allocate_shared_memory(gl.int32, [8 if VARLEN else 1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
            q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(q_ready, count=1)
            mbarrier.init(q_empty, count=N_CONSUMERS)  # every consumer releases its query tile
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(kv_empty.index(i), count=N_CONSUMERS)  # every consumer releases a stage

        queries = Queries(q_smem, o_smem, item_smem, q_ready, q_empty, PER_CONSUMER)
        ring = Ring(k_smem, v_smem, k_ready, v_ready, kv_empty)
        if VARLEN:
            work = Packed(total, n_heads, group_size, CU_Q, CU_K, ORDER, n_seqs, total_q, O, stride_os, stride_oh)
        else:
            work = Work(n_tiles, total, n_heads, group_size, seqlen_q, seqlen_k)
        scores = Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP)
        # (Gluon needs each partition written out in the list, so the two consumer counts are spelled out: in Triton
        # 3.6 a tuple assigned to a name turns its functions and constexprs into tensors)
        if N_CONSUMERS == 2:
            gl.warp_specialize(
                [
                    (_producer, (q_desc, k_desc, v_desc, queries, ring, work, scores, COUNTER, section)),
                    (_consumer, (o_desc, LSE, queries, ring, work, scores, 0, O_IN_Q, BOUNDED_EXPONENT)),
                    (_consumer, (o_desc, LSE, queries, ring, work, scores, 1, O_IN_Q, BOUNDED_EXPONENT)),
                ],
                [4, 4],
                [240, 240],
            )
        else:
            gl.warp_specialize(
                [
                    (_producer, (q_desc, k_desc, v_desc, queries, ring, work, scores, COUNTER, section)),
                    (_consumer, (o_desc, LSE, queries, ring, work, scores, 0, O_IN_Q, BOUNDED_EXPONENT)),
                    (_consumer, (o_desc, LSE, queries, ring, work, scores, 1, O_IN_Q, BOUNDED_EXPONENT)),
                    (_consumer, (o_desc, LSE, queries, ring, work, scores, 2, O_IN_Q, BOUNDED_EXPONENT)),
                ],
                [4, 4, 4],
                [160, 160, 160],
            )

    # --8<-- [end:hopper_kernel]


def descriptors(q, k, v, out, block_m: int, block_n: int):
    """``descriptor``s for the kernel: Q and O in BLOCK_M rows (one consumer's), K and V in BLOCK_N."""
    return descriptor(q, block_m), descriptor(k, block_n), descriptor(v, block_n), descriptor(out, block_m)


def attn_fwd_hopper(
    q,
    k,
    v,
    out,
    lse,
    softmax_scale: float,
    causal: bool,
    bottom_right: bool,
    config=None,
    *,
    window_size=(-1, -1),
    softcap: float = 0.0,
    alibi_slopes=None,
):
    """``forward.attn_fwd`` on Hopper (``supports`` said yes). config: (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS,
    PERSISTENT), default ``HOPPER_CONFIGS[head_dim, causal]`` (a window takes the causal entry), or for a window
    ``WINDOW_CONFIGS``' entry where it has one. window_size and softcap as ``hopper_common.mask``
    takes them; alibi_slopes must be None (``supports``). Runs inside ``launch.on_device``."""
    if alibi_slopes is not None:
        raise ValueError("the Hopper forward has no ALiBi: alibi_slopes runs on the portable kernel")
    counter = torch.zeros(1, device=q.device, dtype=torch.int32)  # the next work item to claim
    objects = (q, k, v, out, lse, counter)
    key = (
        *map(layout, (q, k, v, out)),
        aligned(lse),
        *plan_options(q.device, softmax_scale, causal, bottom_right, window_size, softcap, config),
    )
    plan = planned(
        _plans, key, lambda: _plan(distinct(objects), softmax_scale, causal, bottom_right, config, window_size, softcap)
    )
    plan(objects)


_plans = plan_cache()

# The kernel's varlen parameters (O, stride_os, stride_oh, CU_Q, CU_K, ORDER, n_seqs, total_q): None in a dense
# launch, which Triton compiles as constants, so that the dense kernels keep their parameters and code.
VARLEN_ONLY = (None,) * 8


def _plan(objects, softmax_scale, causal, bottom_right, config, window_size, softcap):
    """``attn_fwd_hopper``'s launch for the layout of ``objects`` (q, k, v, out, lse, counter)."""
    q, k, v, out, lse, counter = objects
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    m = mask(causal, window_size, softcap, softmax_scale, seqlen_q, seqlen_k, bottom_right)
    key = table_key(q, causal, window_size)
    config = table_config(key, m.is_local, config)
    block_m, block_n, stages, _, persistent = config
    consumers = consumers_of(config, "the Hopper forward")
    n_tiles = cdiv(seqlen_q, consumers * block_m)
    total = n_tiles * batch * n_heads
    # persistent: one program per SM, each taking its work items in turn
    grid = (min(total, _sm_count(q.device.index)) if persistent else total,)
    section = heads_per_section(k, batch * n_heads) if m.is_causal else 1
    return gluon_plan(
        _attn_fwd_hopper,
        grid,
        (
            *descriptors(q, k, v, out, block_m, block_n),
            lse,
            counter,
            n_tiles,
            total,
            section,
            n_heads,
            n_heads // n_kv_heads,
            seqlen_q,
            seqlen_k,
            m.right_offset,
            m.qk_scale,
            m.left_offset,
            m.softcap_scale,
            *VARLEN_ONLY,
        ),
        dict(
            **m.constexprs,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            STAGES=stages,
            N_CONSUMERS=consumers,
            O_IN_Q=head_dim > MAX_SEPARATE_O_HEAD_DIM,
            BOUNDED_EXPONENT=bounded(head_dim, softcap, q.dtype),
        ),
        4,
        objects,
    )
