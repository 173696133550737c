"""The backward on Hopper (H100, H200): dK/dV and dQ kernels written in Gluon, warp-specialised like
``forward_hopper``.

``backward.py``'s kernels are the portable ones. These do the same work with the same tiles' arithmetic, in the
same order, so their gradients match the portable kernels' (benchmarks/kernels/gluon_bwd.py checks that they
are bit-identical on the H200) and stay deterministic: each gradient element is written by one program, with no
atomics. What changes is who does what inside a program:

- a *producer* partition issues the TMA copies: the tiles the program keeps for its whole life, then a ring of
  STAGES shared-memory slots through which it streams the others, guarded by "ready" and "empty" mbarriers;
- N_CONSUMERS *consumer* warpgroups of 4 warps each own a slice of the kept tiles and their fp32 accumulators,
  and run the portable kernel's step on every streamed tile. Each issues the two products that need only the
  tiles in shared memory together and waits for the first only, so the second runs on the tensor cores while
  the first one's exponentials run on the CUDA cores.

dK/dV: one program = N_CONSUMERS x BLOCK_N keys of one (batch, kv head); consumer c keeps keys [start_n + c *
BLOCK_N, + BLOCK_N) and streams BLOCK_M query rows of Q and dO at a time (with their rows of the LSE and delta,
which the producer copies into the same ring slot), over every query head of its GQA group, computing the transposed
step (keys x queries): S^T = K Q^T, P^T = exp2(S^T * scale - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T -
delta), dK += dS^T Q. Under the causal mask each consumer skips, while still releasing in order, the query tiles
that see none of its keys.

dK/dV for head dims over 128 (the *wide* kernel): two consumers cannot each keep BLOCK_N keys' two d-column fp32
accumulators at d = 256 (256 registers a thread), so they share one program's keys and split the head dim: each
computes S^T and dP^T for half of the streamed rows, they swap P^T and dS^T through shared memory, and each
updates its half of dK's and dV's columns with both halves. S^T = K Q^T is two chained products over the two
column halves, the same k-steps in the same order as one product: its gradients too came out bit-identical to
the portable kernel's on the H200.

Fused dK/dV/dQ (head dim 64, calls that do not ask for determinism, causal ones from ``FUSED_DQ_MIN_SEQLEN`` tokens;
``backward.fused_dq_runs``): the dK/dV kernel also computes dQ = dS K, FlashAttention-3's way. Both consumers
stream the same query tiles (under the mask from the first that sees any of the program's keys, each masking to
zeros the tiles that see none of its own), so each step one of them (in turn) computes the tile's dQ from both
consumers' dS^T tiles in shared memory and adds it into an fp32 buffer with a TMA reduce-add; the programs of
other key blocks add into the same rows in an order that varies from run to run, and so does dQ's rounding.
Five products per step instead of the split kernels' seven.

dQ: the forward's skeleton. One program = N_CONSUMERS x BLOCK_M query rows of one (batch, head); each consumer
keeps its rows' Q and dO and streams BLOCK_N keys of K and V at a time: dQ += dS K.

Sliding windows and softcap (``hopper_common``, on the masking core): a dK/dV program streams only the query
tiles whose windows reach its keys and masks each of them in one loop; the dQ kernel streams the key tiles from
its first row's first key, like the forward; softcap recomputes the cap and multiplies dS by its derivative. The
fused kernel takes neither (``supports_fused_dq``).

Same inputs as ``backward.bwd_dkdv`` and ``backward.bwd_dq`` (GQA, both causal alignments, any lengths), the
head dims with a tuned config (64, 128, 256), fp16/bf16. ``backward`` sends the calls these kernels take here
(``supports_dkdv``, ``supports_dq``); ``FLASHDOC_HOPPER=0`` keeps them on the portable kernels, like the forward.

With VARLEN the split kernels (dK/dV narrow and wide, and dQ; not the fused one) run packed sequences of different
lengths (``varlen.varlen_bwd_dkdv_hopper``, ``varlen_bwd_dq_hopper``), as the forward's VARLEN does: a 1-D grid bounds
the items from the shapes alone, each program finds its (sequence, head, block) on the device (``_packed_item``:
``varlen.item_table``) and those past the last run an empty one; loads start at the sequence's rows of the packed
tensors, the band is the sequence's own (``forward_hopper._sequence_band``), streamed query rows past its end get an
infinite LSE (P = 0), dQ masks the keys past it, and every gradient tile leaves by masked register stores from shared
memory (``_store_packed``), since a TMA store would write into the next sequence's rows. The varlen steps sit behind
compile-time branches: the dense kernels' machine code does not depend on them (``benchmarks/kernels/code_hash.py``).
"""

import torch

from . import cdiv, forward_hopper
from .common import MAX_GRID_Y
from .forward_hopper import gluon_runs
from .hopper_common import CONSUMER_COUNTS, GLUON, consumers_of, descriptor, mask, plan_options, rows_descriptor
from .launch import aligned, distinct, gluon_plan, layout, plan_cache, planned

if GLUON:
    from .forward_hopper import _packed_sequence, _rows_layout, _sequence_band
    from .hopper_common import (
        Ring,
        Scores,
        _causal_item,
        _first_tile,
        _in_ring,
        _key_range,
        _keys_seen,
        _query_end,
        _release_skipped,
        _scores,
        _scores_grad,
        aggregate,
        fence_async_shared,
        gl,
        gluon,
        mask_scores,
        mbarrier,
        tma,
        tma_load,
        tma_reduce_add,
        tma_store,
        warpgroup_mma,
        warpgroup_mma_wait,
    )


# Causal calls at these head dims hand out their tiles as the forward does, in L2-sized sections of heads, costliest
# first (``_grid``). Measured on the H200: at d = 256 the wide dK/dV kernel +10% at 8-16k and dQ +3-8%; at d <= 128
# dK/dV lost 9-12% and dQ 2-5%, so they keep their own order. (The fused kernel has its own sections, below.)
SECTIONED_HEAD_DIMS = frozenset({256})

# --8<-- [start:hopper_bwd_configs]
# Chosen with benchmarks/kernels/gluon_bwd.py on the H200 (benchmarks/FINDINGS.md), per (head dim, causal).
# dK/dV: (BLOCK_M query rows per streamed tile, BLOCK_N keys per consumer, STAGES, N_CONSUMERS). Two consumers, so
# that each thread has 240 registers for its two 64 x d fp32 accumulators (three spilled 1.6-4.6 KB at d = 128 and
# ran at 0.28-0.47x the portable kernel's speed). Head dims over 128 run the wide kernel: its two consumers share
# BLOCK_N keys, each owning half of dK's and dV's columns (1.4-1.75x the portable kernel at d = 256).
# dQ: (BLOCK_M query rows per consumer, BLOCK_N keys per streamed tile, STAGES, N_CONSUMERS).
# A key that is missing stays on the portable kernels, which measured as fast there (d = 64 without the mask:
# dK/dV 0.89-0.98x, dQ 0.98-1.02x).
HOPPER_DKDV_CONFIGS = {
    (64, True): (64, 64, 2, 2),
    (128, False): (64, 64, 2, 2),
    (128, True): (64, 64, 2, 2),
    (256, False): (64, 64, 2, 2),
    (256, True): (64, 64, 2, 2),
}
HOPPER_DQ_CONFIGS = {
    (64, True): (64, 128, 2, 2),
    (128, False): (64, 128, 2, 2),
    (128, True): (64, 128, 2, 2),
    (256, False): (64, 32, 2, 2),
    (256, True): (64, 32, 2, 2),
}
# The fused backward (``backward.fused_dq_runs``): the dK/dV kernel also computes dQ, adding each step's tile into
# fp32 HBM with TMA reduce-adds, per (head dim, causal) (benchmarks/kernels/fused_dq.py on the H200,
# benchmarks/FINDINGS.md: d = 64 1.07-1.20x the split kernels' speed without the mask, 1.06-1.09x under it from
# 4k tokens; leaving
# each step's dQ products in flight into the next step made ptxas spill and lost 5-7%. With the LSE rows
# in the ring, against the split kernels still loading them: 1.19-1.26x and 1.15-1.22x from 2k).
FUSED_DQ_CONFIGS = {(64, False): (64, 64, 2, 2), (64, True): (64, 64, 2, 2)}
# Under the mask every consumer streams every query tile from its program's first (the ones that see none of its
# keys masked to zeros), and the fp32 dQ buffer is zeroed and scaled per call: at short lengths that costs as much as
# the two saved products (both with the LSE rows in the ring, backward alone, bf16: 0.90x the split
# kernels at 512 tokens, 0.98x at 1k, 1.07x at 2k, 1.11x at 4k; before the ring: 0.93x, 0.97x, 1.02x,
# 1.06x). So the fused kernel takes causal calls whose query and key lengths both reach this.
FUSED_DQ_MIN_SEQLEN = {(64, True): 2048}
# Causal fused programs in ``forward_hopper._causal_item``'s order, in sections of this many (batch, kv head) pairs,
# costliest key blocks first, so that the last programs to start are light ones rather than the last pairs' heaviest
# (the plain grid's order). Backward alone, bf16, against the plain grid: sections of 4 pairs 1.02-1.03x
# at 4k-16k; of 1 pair 1.00-1.03x; of 8 (what ``heads_per_section`` picks at 16k) 1.00-1.03x.
FUSED_DQ_SECTIONS = {(64, True): 4}
# dK/dV of head dims over this run the wide kernel: two BLOCK_N x d fp32 accumulators of more columns do not fit
# in one warpgroup's registers.
MAX_NARROW_HEAD_DIM = 128
# --8<-- [end:hopper_bwd_configs]


def _takes(table, q: torch.Tensor, causal: bool, window_size=(-1, -1), alibi: bool = False) -> bool:
    """``forward_hopper.gluon_runs``, a tuned config in table (``forward_hopper.table_key``: a window takes the
    causal entry), few enough (batch, head) pairs for the grid's second axis (more go to the portable kernels' 1-D
    grid), and no ALiBi (which the portable kernels have)."""
    return (
        not alibi
        and forward_hopper.table_key(q, causal, window_size) in table
        and q.shape[0] * q.shape[2] <= MAX_GRID_Y
        and gluon_runs(q)
    )


def supports_dkdv(
    q: torch.Tensor, causal: bool, window_size=(-1, -1), softcap: float = 0.0, alibi: bool = False
) -> bool:
    """Whether the Hopper dK/dV kernel takes this backward call (``_takes`` with its table; sliding windows and
    softcap included)."""
    return _takes(HOPPER_DKDV_CONFIGS, q, causal, window_size, alibi)


def supports_fused_dq(
    q: torch.Tensor, k: torch.Tensor, causal: bool, window_size=(-1, -1), softcap: float = 0.0, alibi: bool = False
) -> bool:
    """Whether the fused dK/dV/dQ kernel takes this backward call (``_takes`` with ``FUSED_DQ_CONFIGS``, and
    both lengths at least ``FUSED_DQ_MIN_SEQLEN``'s). Not with a window or softcap: those calls run the split
    kernels (``supports_dkdv``, ``supports_dq``)."""
    min_seqlen = FUSED_DQ_MIN_SEQLEN.get((q.shape[3], causal), 0)
    return (
        tuple(window_size) == (-1, -1)
        and not softcap
        and min(q.shape[1], k.shape[1]) >= min_seqlen
        and _takes(FUSED_DQ_CONFIGS, q, causal, window_size, alibi)
    )


def supports_dq(q: torch.Tensor, causal: bool, window_size=(-1, -1), softcap: float = 0.0, alibi: bool = False) -> bool:
    """Whether the Hopper dQ kernel takes this backward call (``_takes`` with its table; sliding windows and
    softcap included)."""
    return _takes(HOPPER_DQ_CONFIGS, q, causal, window_size, alibi)


if GLUON:
    # A window's dK/dV consumer with at most this many query tiles past the diagonal masks them in its first loop:
    # timed alone, the left-edge loop lengthened programs at windows of 128 and 256 keys and shortened them from
    # 1,024 up (eight 64-row tiles are a 512-key window's, where the two timed even)
    NARROW_WINDOW_TILES = gl.constexpr(8)

    # The partitions' state, grouped (``hopper_common.Scores`` and ``Ring`` too) --------------------------------------
    @aggregate
    class QueryRing:
        """The dK/dV kernels' ring of streamed query tiles: per slot, Q and dO (q, do; the wide kernel keeps each in
        two column halves, slot s's half h at 2 * s + h) and the tile's rows of the LSE and delta (lse2, delta),
        one "ready" barrier for all four and one "empty" barrier."""

        q: gl.shared_memory_descriptor
        do: gl.shared_memory_descriptor
        lse2: gl.shared_memory_descriptor
        delta: gl.shared_memory_descriptor
        ready: gl.shared_memory_descriptor
        empty: gl.shared_memory_descriptor

        @gluon.constexpr_function
        def __init__(self, q, do, lse2, delta, ready, empty):
            self.q = q
            self.do = do
            self.lse2 = lse2
            self.delta = delta
            self.ready = ready
            self.empty = empty

    @aggregate
    class KeyBlock:
        """A dK/dV program's keys, from start_n, of (batch off_b, kv head off_hk), and the query tiles [lo, hi) that
        see any of them (``_key_block``), over the GQA group's group_size query heads."""

        off_b: gl.tensor
        off_hk: gl.tensor
        start_n: gl.tensor
        lo: gl.tensor
        hi: gl.tensor
        group_size: gl.tensor
        seqlen_q: gl.tensor
        seqlen_k: gl.tensor
        VARLEN: gl.constexpr

        @gluon.constexpr_function
        def __init__(self, off_b, off_hk, start_n, lo, hi, group_size, seqlen_q, seqlen_k):
            self.off_b = off_b
            self.off_hk = off_hk
            self.start_n = start_n
            self.lo = lo
            self.hi = hi
            self.group_size = group_size
            self.seqlen_q = seqlen_q
            self.seqlen_k = seqlen_k
            self.VARLEN = gl.constexpr(False)

    @aggregate
    class PackedKeyBlock:
        """``KeyBlock`` for one sequence of a varlen launch (off_b 0, seqlen_q and seqlen_k the sequence's
        lengths, start_n, lo and hi counted from its first key and query), with where its rows start in the
        packed tensors (q_start, k_start), where they start in the LSE's and delta's rows (lse_start:
        ``_lse_start``), and where dK and dV go: DK, DV (total_k, kv heads, head dim) with their row and head
        strides, written by masked stores (``_store_packed``)."""

        off_b: gl.tensor
        off_hk: gl.tensor
        start_n: gl.tensor
        lo: gl.tensor
        hi: gl.tensor
        group_size: gl.tensor
        seqlen_q: gl.tensor
        seqlen_k: gl.tensor
        q_start: gl.tensor
        k_start: gl.tensor
        lse_start: gl.tensor
        DK: gl.tensor
        DV: gl.tensor
        stride_dks: gl.tensor
        stride_dkh: gl.tensor
        stride_dvs: gl.tensor
        stride_dvh: gl.tensor
        VARLEN: gl.constexpr

        @gluon.constexpr_function
        def __init__(
            self,
            off_b,
            off_hk,
            start_n,
            lo,
            hi,
            group_size,
            seqlen_q,
            seqlen_k,
            q_start,
            k_start,
            lse_start,
            DK,
            DV,
            stride_dks,
            stride_dkh,
            stride_dvs,
            stride_dvh,
        ):
            self.off_b = off_b
            self.off_hk = off_hk
            self.start_n = start_n
            self.lo = lo
            self.hi = hi
            self.group_size = group_size
            self.seqlen_q = seqlen_q
            self.seqlen_k = seqlen_k
            self.q_start = q_start
            self.k_start = k_start
            self.lse_start = lse_start
            self.DK = DK
            self.DV = DV
            self.stride_dks = stride_dks
            self.stride_dkh = stride_dkh
            self.stride_dvs = stride_dvs
            self.stride_dvh = stride_dvh
            self.VARLEN = gl.constexpr(True)

    @aggregate
    class FusedDQ:
        """The fused kernel's dQ state: the fp32 dQ descriptor its TMA reduce-adds go to, each consumer's dS^T tile
        (ds) and fp32 dQ tile (dq), and the barriers ordering a step's dS^T writes and reads (written: one arrival
        per consumer, free: one)."""

        desc: tma.tensor_descriptor
        ds: gl.shared_memory_descriptor
        dq: gl.shared_memory_descriptor
        written: gl.shared_memory_descriptor
        free: gl.shared_memory_descriptor

        @gluon.constexpr_function
        def __init__(self, desc, ds, dq, written, free):
            self.desc = desc
            self.ds = ds
            self.dq = dq
            self.written = written
            self.free = free

    @aggregate
    class Exchange:
        """The wide dK/dV kernel's two exchange buffers, each holding both consumers' P^T and dS^T halves (pT, dsT:
        buffer b's consumer c at 2 * b + c), with their barriers (ready: both halves written, empty: both read),
        and done: both consumers have finished reading K and V."""

        pT: gl.shared_memory_descriptor
        dsT: gl.shared_memory_descriptor
        ready: gl.shared_memory_descriptor
        empty: gl.shared_memory_descriptor
        done: gl.shared_memory_descriptor

        @gluon.constexpr_function
        def __init__(self, pT, dsT, ready, empty, done):
            self.pT = pT
            self.dsT = dsT
            self.ready = ready
            self.empty = empty
            self.done = done

    # dK/dV (the producer streams Q and dO; each consumer keeps its keys' K and V) ----------------------------------
    @gluon.jit
    def _key_block(
        KEYS: gl.constexpr,
        BLOCK_M: gl.constexpr,
        n_heads,
        group_size,
        seqlen_q,
        seqlen_k,
        right_offset,
        IS_CAUSAL: gl.constexpr,
        SECTION: gl.constexpr,
        left_offset=0,
        IS_LOCAL: gl.constexpr = False,
    ):
        """This dK/dV program's KEYS keys of one (batch, kv head), and the query tiles [lo, hi) that see any of
        them. Grid: (key blocks, batch * kv heads); with SECTION (causal only), one axis of key blocks x pairs in
        ``forward_hopper._causal_item``'s order: sections of SECTION pairs, costliest key blocks first. In a window
        (``hopper_common``), the query tiles end where the rows' windows have left the keys. Returns off_b, off_hk,
        start_n, lo, hi."""
        if SECTION > 0:
            n_blocks = gl.cdiv(seqlen_k, KEYS)
            # rank 0 is the costliest block: the first keys are seen by every query row
            pid_n, pid_bhk = _causal_item(gl.program_id(0), n_blocks, gl.num_programs(0) // n_blocks, SECTION)
        else:
            pid_n = gl.program_id(0)
            pid_bhk = gl.program_id(1)
            if IS_CAUSAL:
                pid_n = gl.num_programs(0) - 1 - pid_n  # lightest first: the last keys are seen by the fewest rows
        n_kv_heads = n_heads // group_size
        off_b = pid_bhk // n_kv_heads
        off_hk = pid_bhk % n_kv_heads
        start_n = pid_n * KEYS
        lo, hi = _query_tiles(start_n, KEYS, BLOCK_M, seqlen_q, right_offset, left_offset, IS_CAUSAL, IS_LOCAL)
        return off_b, off_hk, start_n, lo, hi

    @gluon.jit
    def _query_tiles(
        start_n,
        KEYS: gl.constexpr,
        BLOCK_M: gl.constexpr,
        seqlen_q,
        right_offset,
        left_offset,
        IS_CAUSAL: gl.constexpr,
        IS_LOCAL: gl.constexpr,
    ):
        """The query tiles [lo, hi) of BLOCK_M rows that see any of the KEYS keys from start_n (``_key_block``)."""
        hi = gl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M
        if IS_CAUSAL:
            lo = gl.minimum(gl.maximum(start_n - right_offset, 0) // BLOCK_M * BLOCK_M, hi)
        else:
            lo = 0
        if IS_LOCAL:
            hi = gl.maximum(
                _query_end(start_n, KEYS, hi, seqlen_q, left_offset, right_offset, IS_CAUSAL, IS_LOCAL, BLOCK_M), lo
            )
        return lo, hi

    @gluon.jit
    def _packed_item(ITEMS):
        """(seq, local): this varlen program's sequence (-1 past the last item) and its place among that
        sequence's items, from the table ``varlen.item_table`` wrote (``common.find_item``'s answers, one pair
        per program). The search runs in that small kernel rather than here, on the default warps before
        ``warp_specialize``, where its reductions would need shared-memory scratch of their own."""
        pid = gl.program_id(0)
        return gl.load(ITEMS + 2 * pid), gl.load(ITEMS + 2 * pid + 1)

    @gluon.jit
    def _found_sequence(CU_Q, CU_K, seq):
        """(seq, query count, key count, query start, key start) of the sequence ``_packed_item`` found; past the
        last item (seq < 0) an empty one, of sequence 0 with no queries and no keys, so that the program streams
        and stores nothing. It still runs its partitions: the worker warps start with the kernel and wait for
        the default warps to hand them their partition, which a return before ``warp_specialize`` never does."""
        found = seq >= 0
        seq = gl.maximum(seq, 0)
        q_start, len_q, k_start, len_k = _packed_sequence(CU_Q, CU_K, seq)
        return seq, gl.where(found, len_q, 0), gl.where(found, len_k, 0), q_start, k_start

    @gluon.jit
    def _packed_key_block(
        ITEMS,
        CU_Q,
        CU_K,
        scores,
        group_size,
        DK,
        DV,
        stride_dks,
        stride_dkh,
        stride_dvs,
        stride_dvh,
        KEYS: gl.constexpr,
        BLOCK_M: gl.constexpr,
    ):
        """(``PackedKeyBlock``, the sequence's band) of this varlen dK/dV program: its item (``_packed_item``), a
        block of KEYS keys of one kv head of one sequence, and the query tiles that see any of them."""
        seq, local = _packed_item(ITEMS)
        seq, len_q, len_k, q_start, k_start = _found_sequence(CU_Q, CU_K, seq)
        band = _sequence_band(len_q, len_k, scores)
        # (under the mask, the first keys, seen by the most query rows, go first)
        n_blocks = gl.maximum(gl.cdiv(len_k, KEYS), 1)
        off_hk = local // n_blocks
        start_n = local % n_blocks * KEYS
        lo, hi = _query_tiles(
            start_n, KEYS, BLOCK_M, len_q, band.right_offset, band.left_offset, scores.IS_CAUSAL, scores.IS_LOCAL
        )
        block = PackedKeyBlock(
            gl.to_tensor(0),  # off_b: one batch of packed rows
            off_hk,
            start_n,
            lo,
            hi,
            group_size,
            len_q,
            len_k,
            q_start,
            k_start,
            _lse_start(q_start, seq, BLOCK_M),
            DK,
            DV,
            stride_dks,
            stride_dkh,
            stride_dvs,
            stride_dvh,
        )
        return block, band

    @gluon.jit
    def _store_packed(tile, PTR, stride_s, stride_h, start, first, length, off_h, col0):
        """Rows first + [0, ROWS) of a varlen gradient tile (ROWS, COLS) in shared memory to PTR (a packed (total,
        heads, head dim) tensor; row and head strides stride_s, stride_h) at rows start + row, head off_h,
        columns col0 + [0, COLS): rows in [0, length) only. A TMA store of the whole tile would write into the
        next sequence's rows (``forward_hopper._store_rows`` stores a varlen output so)."""
        ROWS: gl.constexpr = tile.shape[0]
        COLS: gl.constexpr = tile.shape[1]
        layout: gl.constexpr = _rows_layout(COLS, gl.num_warps())
        x = tile.load(layout)
        rows = first + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
        offs = (start + rows).to(gl.int64)[:, None] * stride_s + (off_h * stride_h + col0 + cols)[None, :]
        keep = (rows < length)[:, None] & (cols < COLS)[None, :]
        gl.store(PTR + offs, x, mask=keep)

    @gluon.jit
    def _query_range(
        first, lo, hi, right_offset, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr
    ):
        """The query tiles that BLOCK_N keys from ``first`` on need, within the program's [lo, hi): masked
        [my_lo, full_lo), unmasked [full_lo, hi). Query rows i see key j when j <= i + right_offset: tiles before
        my_lo see none of these keys, tiles from full_lo on see all of them; the ragged last tile needs no mask
        (its padded rows get P = 0)."""
        if IS_CAUSAL:
            my_lo = gl.maximum(gl.minimum(gl.maximum(first - right_offset, 0) // BLOCK_M * BLOCK_M, hi), lo)
            full_lo = gl.minimum(gl.cdiv(gl.maximum(first + BLOCK_N - 1 - right_offset, 0), BLOCK_M) * BLOCK_M, hi)
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
            tma_load(a_desc, [off_b, row0 + c * ROWS, off_h, 0], ready, a_smem.index(c))
            tma_load(b_desc, [off_b, row0 + c * ROWS, off_h, 0], ready, b_smem.index(c))

    @gluon.jit
    def _lse_start(q_start, seq, BLOCK_M: gl.constexpr):
        """Where sequence seq's rows start in a varlen dK/dV launch's LSE and delta (``varlen.padded_rows``): at a
        multiple of BLOCK_M, since a TMA tile must start on 16 bytes and q_start need not (FlashAttention-3 pads
        its varlen LSE and dPsum so). Sequence b's rows start at (q_start + b BLOCK_M) // BLOCK_M * BLOCK_M, which
        leaves each sequence room for all its rows before the next one's."""
        return (q_start + seq * BLOCK_M) // BLOCK_M * BLOCK_M

    @gluon.jit
    def _streamed_rows(block):
        """Where a dK/dV program's loads start: its keys' row, its first streamed query row, and that row's column
        in the LSE and delta. A varlen block's rows are those of the packed tensors (off_b is 0; past the
        sequence's end, the next one's), and its LSE and delta rows start at ``_lse_start``."""
        key_row = block.start_n
        q_row = block.lo
        lse_col = block.lo
        if block.VARLEN:
            key_row += block.k_start
            q_row += block.q_start
            lse_col += block.lse_start
        return key_row, q_row, lse_col

    @gluon.jit
    def _load_rows(lse2_desc, delta_desc, lse2_dst, delta_dst, ready, row, start_m):
        """One streamed tile's rows of the LSE and delta (``rows_descriptor``s), from query start_m of (batch,
        head) row, into a ring slot, arriving on the slot's barrier with its Q and dO."""
        tma_load(lse2_desc, [row, start_m], ready, lse2_dst)
        tma_load(delta_desc, [row, start_m], ready, delta_dst)

    @gluon.jit
    def _producer(q_desc, do_desc, k_desc, v_desc, LSE2, DELTA, ring, k_smem, v_smem, kv_ready, block, n_heads):
        """Each ring slot gets a tile of Q and dO and the tile's rows of the LSE and delta (LSE2 and DELTA:
        ``rows_descriptor``s)."""
        q_smem, do_smem, lse2_smem, delta_smem = ring.q, ring.do, ring.lse2, ring.delta
        qdo_ready, qdo_empty = ring.ready, ring.empty
        off_b, off_hk, lo, hi, group_size = (
            block.off_b,
            block.off_hk,
            block.lo,
            block.hi,
            block.group_size,
        )
        STAGES: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        key_row, q_row, lse_col = _streamed_rows(block)
        _load_resident(k_desc, v_desc, k_smem, v_smem, kv_ready, off_b, key_row, off_hk)
        n_m = gl.cdiv(hi - lo, BLOCK_M)
        nbytes: gl.constexpr = (
            q_desc.block_type.nbytes + do_desc.block_type.nbytes + LSE2.block_type.nbytes + DELTA.block_type.nbytes
        )
        for g in range(group_size):
            off_h = off_hk * group_size + g
            for j in range(n_m):
                it = g * n_m + j
                s = it % STAGES
                mbarrier.wait(qdo_empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(qdo_ready.index(s), nbytes)
                tma_load(q_desc, [off_b, q_row + j * BLOCK_M, off_h, 0], qdo_ready.index(s), q_smem.index(s))
                tma_load(do_desc, [off_b, q_row + j * BLOCK_M, off_h, 0], qdo_ready.index(s), do_smem.index(s))
                _load_rows(
                    LSE2,
                    DELTA,
                    lse2_smem.index(s),
                    delta_smem.index(s),
                    qdo_ready.index(s),
                    off_b * n_heads + off_h,
                    lse_col + j * BLOCK_M,
                )

    # --8<-- [start:hopper_bwd_step]
    @gluon.jit
    def _slot_rows(lse2_smem, delta_smem, s, first: gl.constexpr, offs_m, seqlen_q):
        """The LSE and delta of query rows offs_m, the slot's rows from first on, from ring slot s (``_load_rows``).
        Rows past seqlen_q get lse = inf, which makes P exactly 0 (their Q and dO tiles read as zeros)."""
        BLOCK_M: gl.constexpr = lse2_smem.shape[2]
        ROWS: gl.constexpr = offs_m.shape[0]
        lse2 = gl.where(
            offs_m < seqlen_q,
            lse2_smem.index(s).reshape([BLOCK_M]).slice(first, ROWS).load(offs_m.type.layout),
            float("inf"),
        )
        delta = delta_smem.index(s).reshape([BLOCK_M]).slice(first, ROWS).load(offs_m.type.layout)
        return lse2, delta

    @gluon.jit
    def _tiles(
        dk,
        dv,
        k,
        v,
        q_smem,
        do_smem,
        qdo_ready,
        qdo_empty,
        lse2_smem,
        delta_smem,
        offs_n,
        seqlen_q,
        scores,
        it0,
        m_lo,
        m_hi,
        MASKED: gl.constexpr,
        BLOCK_M: gl.constexpr,
        BLOCK_N: gl.constexpr,
        BLOCK_D: gl.constexpr,
        STAGES: gl.constexpr,
        s_layout: gl.constexpr,
        p_layout: gl.constexpr,
        o_layout: gl.constexpr,
        dq_desc,
        ds_smem,
        k_smem,
        dq_smem,
        ds_written,
        ds_free,
        off_b,
        off_h,
        SUB: gl.constexpr,
        FUSED_DQ: gl.constexpr,
        seqlen_k,
        RAGGED_KEYS: gl.constexpr,
        RIGHT_EDGE: gl.constexpr = True,
    ):
        """The portable ``_attn_bwd_dkdv_inner`` for one consumer: query tiles [m_lo, m_hi), the ring's it0-th first.
        Each ring slot holds the tile's Q and dO and its rows of the LSE and delta (lse2_smem, delta_smem), which
        the producer copies with TMA: loaded from global memory by each consumer at the top of every step, they
        held the exponentials up (Nsight Compute).

        FUSED_DQ (every consumer streams the same query tiles in step): each step also adds its query tile's dQ
        share from all consumers' keys, dS K, into fp32 HBM. Each consumer writes its dS^T tile to
        ds_smem.index(SUB); consumer it % N_CONSUMERS computes the step's dQ tile from all of them and adds it
        with a TMA reduce-add from its own dq_smem tile. ds_written (one arrival per consumer a step) and ds_free
        (one) order the dS^T tiles' writes and reads.

        The scores go through ``Scores`` (``hopper_common``): capped, masked in the MASKED tiles by the core's band
        (without RIGHT_EDGE by its left edge alone), and with SOFTCAP dS^T takes the cap's derivative."""
        qk_scale = scores.qk_scale
        dtype: gl.constexpr = q_smem.dtype
        offs_m0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
        if FUSED_DQ:
            N_CONSUMERS: gl.constexpr = ds_smem.shape[0]
            zero_dq = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)
        for start_m in range(m_lo, m_hi, BLOCK_M):
            it = it0 + (start_m - m_lo) // BLOCK_M
            s = it % STAGES
            mbarrier.wait(qdo_ready.index(s), (it // STAGES) & 1)
            q = q_smem.index(s).reshape([BLOCK_M, BLOCK_D])
            do = do_smem.index(s).reshape([BLOCK_M, BLOCK_D])
            offs_m = start_m + offs_m0
            lse2, delta = _slot_rows(lse2_smem, delta_smem, s, 0, offs_m, seqlen_q)
            # both products that need only the resident tiles and the streamed ones go out together: dP^T runs on the
            # tensor cores while P^T's exponentials run on the CUDA cores
            qkT = warpgroup_mma(k, q.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dpT = warpgroup_mma(v, do.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qkT = warpgroup_mma_wait(1, deps=(qkT,))
            qkT = _scores(qkT, scores)
            pT = gl.exp2(qkT * qk_scale - lse2[None, :])
            if MASKED:
                cols = offs_n[:, None]
                if RAGGED_KEYS:  # (a consumer whose keys run past seqlen_k masks every tile: ``_consumer``)
                    pT = mask_scores(
                        pT,
                        offs_m[None, :],
                        cols,
                        seqlen_k,
                        scores.left_offset,
                        scores.right_offset,
                        0.0,
                        True,
                        scores.IS_CAUSAL,
                        scores.IS_LOCAL,
                    )
                else:  # (without the causal mask no tile is masked: the edge is written out all the same)
                    pT = mask_scores(
                        pT,
                        offs_m[None, :],
                        cols,
                        seqlen_k,
                        scores.left_offset,
                        scores.right_offset,
                        0.0,
                        False,
                        RIGHT_EDGE,
                        scores.IS_LOCAL,
                    )
            dv = warpgroup_mma(gl.convert_layout(pT.to(dtype), p_layout), do, dv, is_async=True)
            # softcap's derivative goes into P^T now, for dS^T = P^T (dP^T - delta): then the capped scores need
            # not live on through the wait (kept apart, they made ptxas spill 916 bytes at d = 128)
            pT = _scores_grad(pT, qkT, scores)
            dpT, dv = warpgroup_mma_wait(0, deps=(dpT, dv))
            dsT = pT * (dpT - delta[None, :])
            if FUSED_DQ:
                # dS^T goes through shared memory, where the step's dQ product reads it (after the previous step's
                # dQ product has read what was there)
                mbarrier.wait(ds_free, (it - 1) & 1, pred=it > 0)
                ds_lo = dsT.to(dtype)
                ds_smem.index(SUB).store(ds_lo)
                fence_async_shared()
                mbarrier.arrive(ds_written, count=1)
                dk = warpgroup_mma(gl.convert_layout(ds_lo, p_layout), q, dk, is_async=True)
                if it % N_CONSUMERS == SUB:
                    # this step's dQ tile, dS K over every consumer's keys: chained products, dS^T read transposed
                    mbarrier.wait(ds_written, it & 1)
                    dq = warpgroup_mma(
                        ds_smem.index(0).permute((1, 0)),
                        k_smem.index(0).reshape([BLOCK_N, BLOCK_D]),
                        zero_dq,
                        use_acc=False,
                        is_async=True,
                    )
                    for c in gl.static_range(1, N_CONSUMERS):
                        dq = warpgroup_mma(
                            ds_smem.index(c).permute((1, 0)),
                            k_smem.index(c).reshape([BLOCK_N, BLOCK_D]),
                            dq,
                            is_async=True,
                        )
                    dq = warpgroup_mma_wait(0, deps=(dq,))  # (and dK, issued before)
                    mbarrier.arrive(ds_free, count=1)  # every dS^T tile may be rewritten
                    # added into HBM by a TMA reduce-add that runs on while this consumer goes on; the previous one
                    # must have read dq_smem before it is reused
                    tma.store_wait(0)
                    dq_smem.index(SUB).reshape([BLOCK_M, BLOCK_D]).store(dq)
                    fence_async_shared()
                    tma_reduce_add(dq_desc, [off_b, start_m, off_h, 0], dq_smem.index(SUB))
            else:
                dk = warpgroup_mma(gl.convert_layout(dsT.to(dtype), p_layout), q, dk, is_async=True)
            dk = warpgroup_mma_wait(0, deps=(dk,))
            mbarrier.arrive(qdo_empty.index(s), count=1)  # one arrival per warpgroup: this slot may be refilled
        return dk, dv

    # --8<-- [end:hopper_bwd_step]

    @gluon.jit
    def _consumer(
        dk_desc,
        dv_desc,
        ring,
        k_smem,
        v_smem,
        kv_ready,
        block,
        scores,
        softmax_scale,
        fused,
        SUB: gl.constexpr,
        FUSED_DQ: gl.constexpr,
        RAGGED_KEYS: gl.constexpr,
    ):
        q_smem, do_smem, lse2_smem, delta_smem = ring.q, ring.do, ring.lse2, ring.delta
        qdo_ready, qdo_empty = ring.ready, ring.empty
        off_b, off_hk, start_n, lo, hi, group_size = (
            block.off_b,
            block.off_hk,
            block.start_n,
            block.lo,
            block.hi,
            block.group_size,
        )
        seqlen_q, seqlen_k, right_offset = block.seqlen_q, block.seqlen_k, scores.right_offset
        dq_desc, ds_smem, dq_smem, ds_written, ds_free = fused.desc, fused.ds, fused.dq, fused.written, fused.free
        IS_CAUSAL: gl.constexpr = scores.IS_CAUSAL
        IS_LOCAL: gl.constexpr = scores.IS_LOCAL
        STAGES: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[2]
        BLOCK_D: gl.constexpr = k_smem.shape[4]
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_D, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        first = start_n + SUB * BLOCK_N  # this warpgroup's first key
        offs_n = first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        k_tile = k_smem.index(SUB)
        v_tile = v_smem.index(SUB)
        k = k_tile.reshape([BLOCK_N, BLOCK_D])
        v = v_tile.reshape([BLOCK_N, BLOCK_D])
        dk = gl.zeros([BLOCK_N, BLOCK_D], gl.float32, layout=o_layout)
        dv = gl.zeros([BLOCK_N, BLOCK_D], gl.float32, layout=o_layout)
        my_lo, full_lo = _query_range(first, lo, hi, right_offset, IS_CAUSAL, BLOCK_M, BLOCK_N)
        if RAGGED_KEYS:
            # Keys past seqlen_k read as zeros, so their scores are 0; where all of a row's scores lie below about
            # -88 (its LSE does), exp(0 - LSE) overflows to inf, and the dQ product multiplies that by the key's zero
            # row: NaN. So a consumer whose keys run past seqlen_k masks every tile, as the dQ kernel masks its
            # ragged key tile. (A constexpr: with the mask's loop live in every program, the fused kernel spilled and
            # lost 4% at d = 64 without the mask, on lengths that have no such keys.)
            if first + BLOCK_N > seqlen_k:
                full_lo = hi
        if IS_LOCAL:  # past my_hi the rows' windows have left these keys: skipped
            my_hi = gl.maximum(
                _query_end(
                    first, BLOCK_N, hi, seqlen_q, scores.left_offset, right_offset, IS_CAUSAL, IS_LOCAL, BLOCK_M
                ),
                full_lo,
            )
        n_m = gl.cdiv(hi - lo, BLOCK_M)
        mbarrier.wait(kv_ready, 0)
        if FUSED_DQ:
            # K and V as register operands: S^T's and dP^T's products then read only Q and dO from shared memory,
            # which the dQ tiles' traffic keeps busy (2-3% faster at d = 64; the split kernel's speed did not move)
            kv_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
            k_op = k.load(kv_layout)
            v_op = v.load(kv_layout)
        else:
            k_op = k
            v_op = v
        for g in range(group_size):
            off_h = off_hk * group_size + g
            it0 = g * n_m
            if FUSED_DQ:
                # every consumer streams every query tile, so that one dQ tile per step covers all their keys: the
                # tiles that see none of this consumer's keys are masked to zeros instead of skipped
                start = lo
            else:
                start = my_lo
            _release_skipped(qdo_ready, qdo_empty, it0, (start - lo) // BLOCK_M, STAGES)
            # a capped window masks both edges on every tile in one loop: with the left-edge loop below as well,
            # ptxas spilled 576 bytes at d = 128 against 276, and the step ran about 1% slower
            ONE_MASKED_LOOP: gl.constexpr = IS_LOCAL and scores.SOFTCAP
            if ONE_MASKED_LOOP:
                masked_hi = my_hi
            else:
                masked_hi = full_lo
                if IS_LOCAL:
                    # a narrow window leaves a consumer few tiles past the diagonal: there the single masked loop
                    # costs less than starting and draining a second one (the left-edge loop below then runs none)
                    if my_hi - full_lo <= NARROW_WINDOW_TILES * BLOCK_M:
                        masked_hi = my_hi
            dk, dv = _tiles(
                dk,
                dv,
                k_op,
                v_op,
                q_smem,
                do_smem,
                qdo_ready,
                qdo_empty,
                lse2_smem,
                delta_smem,
                offs_n,
                seqlen_q,
                scores,
                it0 + (start - lo) // BLOCK_M,
                start,
                masked_hi,
                True,
                BLOCK_M,
                BLOCK_N,
                BLOCK_D,
                STAGES,
                s_layout,
                p_layout,
                o_layout,
                dq_desc,
                ds_smem,
                k_smem,
                dq_smem,
                ds_written,
                ds_free,
                off_b,
                off_h,
                SUB,
                FUSED_DQ,
                seqlen_k,
                RAGGED_KEYS,
            )
            if not ONE_MASKED_LOOP:
                # the tiles from full_lo on lie past the diagonal for all of this consumer's keys: causal's, up to hi,
                # unmasked; a window's, up to my_hi, masked on its left edge only (an unmasked loop between two
                # masked ones made ptxas spill 680 bytes at d = 128: benchmarks/kernels/code_hash.py --variants)
                if IS_LOCAL:
                    rest_hi = my_hi
                else:
                    rest_hi = hi
                dk, dv = _tiles(
                    dk,
                    dv,
                    k_op,
                    v_op,
                    q_smem,
                    do_smem,
                    qdo_ready,
                    qdo_empty,
                    lse2_smem,
                    delta_smem,
                    offs_n,
                    seqlen_q,
                    scores,
                    it0 + (masked_hi - lo) // BLOCK_M,
                    masked_hi,
                    rest_hi,
                    IS_LOCAL,
                    BLOCK_M,
                    BLOCK_N,
                    BLOCK_D,
                    STAGES,
                    s_layout,
                    p_layout,
                    o_layout,
                    dq_desc,
                    ds_smem,
                    k_smem,
                    dq_smem,
                    ds_written,
                    ds_free,
                    off_b,
                    off_h,
                    SUB,
                    FUSED_DQ,
                    seqlen_k,
                    RAGGED_KEYS,
                    False,
                )
            if IS_LOCAL:
                _release_skipped(qdo_ready, qdo_empty, it0 + (my_hi - lo) // BLOCK_M, (hi - my_hi) // BLOCK_M, STAGES)
        if FUSED_DQ:  # another consumer's last dQ product may still read this K tile
            n_steps = group_size * n_m
            mbarrier.wait(ds_free, (n_steps - 1) & 1, pred=n_steps > 0)
        # every product of this warpgroup has completed: its K and V tiles' shared memory takes dK and dV
        k.store((dk * softmax_scale).to(dtype))
        v.store(dv.to(dtype))
        if block.VARLEN:
            # the sequence's keys only. (Keys past its end, the next sequence's, went through the products
            # unmasked: a key's row of dK and dV depends on that key alone, and is not stored.)
            _store_packed(k, block.DK, block.stride_dks, block.stride_dkh, block.k_start, first, seqlen_k, off_hk, 0)
            _store_packed(v, block.DV, block.stride_dvs, block.stride_dvh, block.k_start, first, seqlen_k, off_hk, 0)
        else:
            fence_async_shared()
            tma_store(dk_desc, [off_b, first, off_hk, 0], k_tile)
            tma_store(dv_desc, [off_b, first, off_hk, 0], v_tile)
            tma.store_wait(0)

    @gluon.jit(
        do_not_specialize=[
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
    def _attn_bwd_dkdv_hopper(
        q_desc,
        do_desc,
        k_desc,
        v_desc,
        dk_desc,
        dv_desc,
        dq_desc,
        LSE2,
        DELTA,
        n_heads,
        group_size,
        seqlen_q,
        seqlen_k,
        right_offset,
        softmax_scale,
        qk_scale,
        left_offset,
        softcap_scale,
        DK,
        DV,
        stride_dks,
        stride_dkh,
        stride_dvs,
        stride_dvh,
        CU_Q,
        CU_K,
        ITEMS,
        n_seqs,
        total_q,
        IS_CAUSAL: gl.constexpr,
        STAGES: gl.constexpr,
        N_CONSUMERS: gl.constexpr,
        SECTION: gl.constexpr = 0,
        FUSED_DQ: gl.constexpr = False,
        RAGGED_KEYS: gl.constexpr = False,
        IS_LOCAL: gl.constexpr = False,
        SOFTCAP: gl.constexpr = False,
        VARLEN: gl.constexpr = False,
    ):
        """Grid: (key tiles of N_CONSUMERS * BLOCK_N, batch * kv heads). LSE2: the LSE in log2 units, DELTA:
        rowsum(dO * O) (``backward.bwd_preprocess``): ``forward_hopper.rows_descriptor``s over (batch, heads,
        seqlen_q) buffers, whose rows the producer copies into the ring. With FUSED_DQ, dq_desc is a zeroed fp32 dQ
        buffer into which the program adds dS K (``_tiles``); without it, dq_desc is not read.
        RAGGED_KEYS (fused only): seqlen_k is not a multiple of N_CONSUMERS * BLOCK_N (``_consumer``). The mask and
        score change: ``Scores`` (not with FUSED_DQ).

        VARLEN (not with FUSED_DQ): packed sequences (``varlen.varlen_bwd_dkdv_hopper``). A 1-D grid bounds the items
        (sequence, kv head, key block) from the shapes alone; each program finds its own (``_packed_item``), and those
        past the last run an empty one (``_found_sequence``). The descriptors are ``hopper_common.packed_descriptor``s
        (dk_desc and dv_desc go unread: dK and dV leave through DK and DV by masked stores), LSE2 and DELTA are
        ``rows_descriptor``s over (1, heads, total_q), right_offset and left_offset are the band's offsets from each
        sequence's bottom-right diagonal, and seqlen_q, seqlen_k go unread. DK to total_q: ``PackedKeyBlock``'s and the
        item table (``varlen.item_table``: the sequences by query length, longest first). Without it those eleven are
        None (``DKDV_VARLEN_ONLY``)."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
        dtype: gl.constexpr = q_desc.dtype
        if VARLEN:
            block, scores = _packed_key_block(
                ITEMS,
                CU_Q,
                CU_K,
                Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP),
                group_size,
                DK,
                DV,
                stride_dks,
                stride_dkh,
                stride_dvs,
                stride_dvh,
                N_CONSUMERS * BLOCK_N,
                BLOCK_M,
            )
        else:
            off_b, off_hk, start_n, lo, hi = _key_block(
                N_CONSUMERS * BLOCK_N,
                BLOCK_M,
                n_heads,
                group_size,
                seqlen_q,
                seqlen_k,
                right_offset,
                IS_CAUSAL,
                SECTION,
                left_offset,
                IS_LOCAL,
            )

        k_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_N, 1, BLOCK_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [N_CONSUMERS, 1, BLOCK_N, 1, BLOCK_D], v_desc.layout)
        q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_M, 1, BLOCK_D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_M, 1, BLOCK_D], do_desc.layout)
        lse2_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], LSE2.layout)
        delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], DELTA.layout)
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        qdo_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        qdo_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(qdo_ready.index(i), count=1)
            mbarrier.init(qdo_empty.index(i), count=N_CONSUMERS)

        if FUSED_DQ:  # each consumer's dS^T tile and fp32 dQ tile (the source of its reduce-adds)
            ds_smem = gl.allocate_shared_memory(
                dtype, [N_CONSUMERS, BLOCK_N, BLOCK_M], gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
            )
            dq_smem = gl.allocate_shared_memory(gl.float32, [N_CONSUMERS, 1, BLOCK_M, 1, BLOCK_D], dq_desc.layout)
            # a step's dS^T tiles: written by every consumer (one arrival each) / read by its dQ product (one)
            ds_written = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            ds_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(ds_written, count=N_CONSUMERS)
            mbarrier.init(ds_free, count=1)
        else:  # stand-ins, never read (warp_specialize's arguments cannot be None)
            ds_smem = q_smem
            dq_smem = q_smem
            ds_written = kv_ready
            ds_free = kv_ready

        ring = QueryRing(q_smem, do_smem, lse2_smem, delta_smem, qdo_ready, qdo_empty)
        if not VARLEN:  # (``_packed_key_block`` made a varlen program's)
            block = KeyBlock(off_b, off_hk, start_n, lo, hi, group_size, seqlen_q, seqlen_k)
            scores = Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP)
        fused = FusedDQ(dq_desc, ds_smem, dq_smem, ds_written, ds_free)
        if N_CONSUMERS == 2:
            gl.warp_specialize(
                [
                    (
                        _producer,
                        (q_desc, do_desc, k_desc, v_desc, LSE2, DELTA, ring, k_smem, v_smem, kv_ready, block, n_heads),
                    ),
                    (
                        _consumer,
                        (
                            dk_desc,
                            dv_desc,
                            ring,
                            k_smem,
                            v_smem,
                            kv_ready,
                            block,
                            scores,
                            softmax_scale,
                            fused,
                            0,
                            FUSED_DQ,
                            RAGGED_KEYS,
                        ),
                    ),
                    (
                        _consumer,
                        (
                            dk_desc,
                            dv_desc,
                            ring,
                            k_smem,
                            v_smem,
                            kv_ready,
                            block,
                            scores,
                            softmax_scale,
                            fused,
                            1,
                            FUSED_DQ,
                            RAGGED_KEYS,
                        ),
                    ),
                ],
                [4, 4],
                [240, 240],
            )
        else:
            gl.warp_specialize(
                [
                    (
                        _producer,
                        (q_desc, do_desc, k_desc, v_desc, LSE2, DELTA, ring, k_smem, v_smem, kv_ready, block, n_heads),
                    ),
                    (
                        _consumer,
                        (
                            dk_desc,
                            dv_desc,
                            ring,
                            k_smem,
                            v_smem,
                            kv_ready,
                            block,
                            scores,
                            softmax_scale,
                            fused,
                            0,
                            FUSED_DQ,
                            RAGGED_KEYS,
                        ),
                    ),
                    (
                        _consumer,
                        (
                            dk_desc,
                            dv_desc,
                            ring,
                            k_smem,
                            v_smem,
                            kv_ready,
                            block,
                            scores,
                            softmax_scale,
                            fused,
                            1,
                            FUSED_DQ,
                            RAGGED_KEYS,
                        ),
                    ),
                    (
                        _consumer,
                        (
                            dk_desc,
                            dv_desc,
                            ring,
                            k_smem,
                            v_smem,
                            kv_ready,
                            block,
                            scores,
                            softmax_scale,
                            fused,
                            2,
                            FUSED_DQ,
                            RAGGED_KEYS,
                        ),
                    ),
                ],
                [4, 4, 4],
                [160, 160, 160],
            )

    # dK/dV for head dims over 128 (the producer streams Q and dO in column halves; the consumers share the keys) --
    # Two 64 x 256 fp32 accumulators would take 256 registers a thread in one warpgroup, more than a thread has. So
    # the two consumers share the program's BLOCK_N keys: consumer c owns columns [c * COLS, + COLS) of dK and dV
    # (COLS = head_dim / 2: 64 + 64 registers a thread), and on each streamed tile it computes S^T and dP^T for
    # query rows [c * BLOCK_M / 2, + BLOCK_M / 2) only. The two exchange their P^T and dS^T through shared memory,
    # as FlashAttention-3's backward does, and each then updates its columns with both halves. Every tile is kept
    # as two column halves (descriptors of COLS columns), so no product needs a column slice of shared memory.

    @gluon.jit
    def _wide_producer(q_desc, do_desc, k_desc, v_desc, LSE2, DELTA, ring, k_smem, v_smem, kv_ready, block, n_heads):
        """``_producer`` with each tile in two column halves: half h of ring slot s is ring.q.index(2 * s + h)."""
        q_smem, do_smem, lse2_smem, delta_smem = ring.q, ring.do, ring.lse2, ring.delta
        qdo_ready, qdo_empty = ring.ready, ring.empty
        off_b, off_hk, lo, hi, group_size = (
            block.off_b,
            block.off_hk,
            block.lo,
            block.hi,
            block.group_size,
        )
        STAGES: gl.constexpr = lse2_smem.shape[0]
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        COLS: gl.constexpr = q_desc.block_type.shape[3]
        key_row, q_row, lse_col = _streamed_rows(block)
        mbarrier.expect(kv_ready, 2 * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
        for h in gl.static_range(2):
            tma_load(k_desc, [off_b, key_row, off_hk, h * COLS], kv_ready, k_smem.index(h))
            tma_load(v_desc, [off_b, key_row, off_hk, h * COLS], kv_ready, v_smem.index(h))
        n_m = gl.cdiv(hi - lo, BLOCK_M)
        nbytes: gl.constexpr = (
            2 * (q_desc.block_type.nbytes + do_desc.block_type.nbytes)
            + LSE2.block_type.nbytes
            + DELTA.block_type.nbytes
        )
        for g in range(group_size):
            off_h = off_hk * group_size + g
            for j in range(n_m):
                it = g * n_m + j
                s = it % STAGES
                mbarrier.wait(qdo_empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(qdo_ready.index(s), nbytes)
                for h in gl.static_range(2):
                    tma_load(
                        q_desc,
                        [off_b, q_row + j * BLOCK_M, off_h, h * COLS],
                        qdo_ready.index(s),
                        q_smem.index(2 * s + h),
                    )
                    tma_load(
                        do_desc,
                        [off_b, q_row + j * BLOCK_M, off_h, h * COLS],
                        qdo_ready.index(s),
                        do_smem.index(2 * s + h),
                    )
                _load_rows(
                    LSE2,
                    DELTA,
                    lse2_smem.index(s),
                    delta_smem.index(s),
                    qdo_ready.index(s),
                    off_b * n_heads + off_h,
                    lse_col + j * BLOCK_M,
                )

    # --8<-- [start:hopper_bwd_wide_step]
    @gluon.jit
    def _wide_tiles(
        dk,
        dv,
        k_smem,
        v_smem,
        q_smem,
        do_smem,
        pT_smem,
        dsT_smem,
        qdo_ready,
        qdo_empty,
        ps_ready,
        ps_empty,
        lse2_smem,
        delta_smem,
        offs_n,
        seqlen_q,
        scores,
        it0,
        m_lo,
        m_hi,
        SUB: gl.constexpr,
        MASKED: gl.constexpr,
        BLOCK_M: gl.constexpr,
        BLOCK_N: gl.constexpr,
        COLS: gl.constexpr,
        STAGES: gl.constexpr,
        s_layout: gl.constexpr,
    ):
        """``_tiles`` for one of the two consumers sharing the keys: query tiles [m_lo, m_hi), the ring's it0-th
        first. Exchange buffer b (of 2) holds both consumers' P^T and dS^T: pT_smem.index(2 * b + c)."""
        qk_scale = scores.qk_scale
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
            lse2, delta = _slot_rows(lse2_smem, delta_smem, s, SUB * ROWS, offs_m, seqlen_q)
            # S^T and dP^T of my rows, each summed over both column halves; dP^T runs during the exponentials
            qkT = warpgroup_mma(k0, q0.slice(SUB * ROWS, ROWS).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qkT = warpgroup_mma(k1, q1.slice(SUB * ROWS, ROWS).permute((1, 0)), qkT, is_async=True)
            dpT = warpgroup_mma(v0, do0.slice(SUB * ROWS, ROWS).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dpT = warpgroup_mma(v1, do1.slice(SUB * ROWS, ROWS).permute((1, 0)), dpT, is_async=True)
            qkT = warpgroup_mma_wait(2, deps=(qkT,))
            qkT = _scores(qkT, scores)
            pT = gl.exp2(qkT * qk_scale - lse2[None, :])
            if MASKED:  # (the causal edge written out always, as in ``_tiles``; no key-end mask: seqlen_k unread)
                cols = offs_n[:, None]
                pT = mask_scores(
                    pT,
                    offs_m[None, :],
                    cols,
                    0,
                    scores.left_offset,
                    scores.right_offset,
                    0.0,
                    False,
                    True,
                    scores.IS_LOCAL,
                )
            dpT = warpgroup_mma_wait(0, deps=(dpT,))
            dsT = _scores_grad(pT * (dpT - delta[None, :]), qkT, scores)
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

    # --8<-- [end:hopper_bwd_wide_step]

    @gluon.jit
    def _wide_consumer(
        dk_desc, dv_desc, ring, k_smem, v_smem, kv_ready, exchange, block, scores, softmax_scale, SUB: gl.constexpr
    ):
        q_smem, do_smem, lse2_smem, delta_smem = ring.q, ring.do, ring.lse2, ring.delta
        qdo_ready, qdo_empty = ring.ready, ring.empty
        pT_smem, dsT_smem, ps_ready, ps_empty, done = (
            exchange.pT,
            exchange.dsT,
            exchange.ready,
            exchange.empty,
            exchange.done,
        )
        off_b, off_hk, start_n, lo, hi, group_size = (
            block.off_b,
            block.off_hk,
            block.start_n,
            block.lo,
            block.hi,
            block.group_size,
        )
        seqlen_q, right_offset = block.seqlen_q, scores.right_offset
        IS_CAUSAL: gl.constexpr = scores.IS_CAUSAL
        STAGES: gl.constexpr = lse2_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[2]
        COLS: gl.constexpr = k_smem.shape[4]
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M // 2, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, COLS, 16]
        )
        offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        dk = gl.zeros([BLOCK_N, COLS], gl.float32, layout=o_layout)
        dv = gl.zeros([BLOCK_N, COLS], gl.float32, layout=o_layout)
        # both consumers need every query tile the program streams (its lo is their my_lo); from full_lo on, unmasked
        _, full_lo = _query_range(start_n, lo, hi, right_offset, IS_CAUSAL, BLOCK_M, BLOCK_N)
        if scores.IS_LOCAL:  # every tile masked, as in ``_consumer`` (hi is where the rows' windows leave the keys)
            full_lo = hi
        n_m = gl.cdiv(hi - lo, BLOCK_M)
        mbarrier.wait(kv_ready, 0)
        for g in range(group_size):
            it0 = g * n_m
            dk, dv = _wide_tiles(
                dk,
                dv,
                k_smem,
                v_smem,
                q_smem,
                do_smem,
                pT_smem,
                dsT_smem,
                qdo_ready,
                qdo_empty,
                ps_ready,
                ps_empty,
                lse2_smem,
                delta_smem,
                offs_n,
                seqlen_q,
                scores,
                it0,
                lo,
                full_lo,
                SUB,
                True,
                BLOCK_M,
                BLOCK_N,
                COLS,
                STAGES,
                s_layout,
            )
            dk, dv = _wide_tiles(
                dk,
                dv,
                k_smem,
                v_smem,
                q_smem,
                do_smem,
                pT_smem,
                dsT_smem,
                qdo_ready,
                qdo_empty,
                ps_ready,
                ps_empty,
                lse2_smem,
                delta_smem,
                offs_n,
                seqlen_q,
                scores,
                it0 + (full_lo - lo) // BLOCK_M,
                full_lo,
                hi,
                SUB,
                False,
                BLOCK_M,
                BLOCK_N,
                COLS,
                STAGES,
                s_layout,
            )
        # both consumers read both halves of K and V to the end: wait for the other before overwriting mine
        mbarrier.arrive(done, count=1)
        mbarrier.wait(done, 0)
        k_tile = k_smem.index(SUB)
        v_tile = v_smem.index(SUB)
        k_tile.reshape([BLOCK_N, COLS]).store((dk * softmax_scale).to(dtype))
        v_tile.reshape([BLOCK_N, COLS]).store(dv.to(dtype))
        if block.VARLEN:  # my columns of the sequence's keys only (``_consumer``)
            k_start, seqlen_k = block.k_start, block.seqlen_k
            dk_rows = k_tile.reshape([BLOCK_N, COLS])
            dv_rows = v_tile.reshape([BLOCK_N, COLS])
            _store_packed(
                dk_rows, block.DK, block.stride_dks, block.stride_dkh, k_start, start_n, seqlen_k, off_hk, SUB * COLS
            )
            _store_packed(
                dv_rows, block.DV, block.stride_dvs, block.stride_dvh, k_start, start_n, seqlen_k, off_hk, SUB * COLS
            )
        else:
            fence_async_shared()
            tma_store(dk_desc, [off_b, start_n, off_hk, SUB * COLS], k_tile)
            tma_store(dv_desc, [off_b, start_n, off_hk, SUB * COLS], v_tile)
            tma.store_wait(0)

    @gluon.jit(
        do_not_specialize=[
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
    def _attn_bwd_dkdv_hopper_wide(
        q_desc,
        do_desc,
        k_desc,
        v_desc,
        dk_desc,
        dv_desc,
        LSE2,
        DELTA,
        n_heads,
        group_size,
        seqlen_q,
        seqlen_k,
        right_offset,
        softmax_scale,
        qk_scale,
        left_offset,
        softcap_scale,
        DK,
        DV,
        stride_dks,
        stride_dkh,
        stride_dvs,
        stride_dvh,
        CU_Q,
        CU_K,
        ITEMS,
        n_seqs,
        total_q,
        IS_CAUSAL: gl.constexpr,
        STAGES: gl.constexpr,
        SECTION: gl.constexpr = 0,
        IS_LOCAL: gl.constexpr = False,
        SOFTCAP: gl.constexpr = False,
        VARLEN: gl.constexpr = False,
    ):
        """``_attn_bwd_dkdv_hopper`` for head dims over 128, every tile descriptor in tiles of half the head dim
        (LSE2, DELTA, the variants and VARLEN as there; a varlen item is BLOCK_N keys). Grid: (key tiles of
        BLOCK_N, batch * kv heads)."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        COLS: gl.constexpr = q_desc.block_type.shape[3]
        dtype: gl.constexpr = q_desc.dtype
        if VARLEN:
            block, scores = _packed_key_block(
                ITEMS,
                CU_Q,
                CU_K,
                Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP),
                group_size,
                DK,
                DV,
                stride_dks,
                stride_dkh,
                stride_dvs,
                stride_dvh,
                BLOCK_N,
                BLOCK_M,
            )
        else:
            off_b, off_hk, start_n, lo, hi = _key_block(
                BLOCK_N,
                BLOCK_M,
                n_heads,
                group_size,
                seqlen_q,
                seqlen_k,
                right_offset,
                IS_CAUSAL,
                SECTION,
                left_offset,
                IS_LOCAL,
            )

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
        lse2_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], LSE2.layout)
        delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], DELTA.layout)
        ring = QueryRing(q_smem, do_smem, lse2_smem, delta_smem, qdo_ready, qdo_empty)
        exchange = Exchange(pT_smem, dsT_smem, ps_ready, ps_empty, done)
        if not VARLEN:  # (``_packed_key_block`` made a varlen program's)
            block = KeyBlock(off_b, off_hk, start_n, lo, hi, group_size, seqlen_q, seqlen_k)
            scores = Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP)

        gl.warp_specialize(
            [
                (
                    _wide_producer,
                    (q_desc, do_desc, k_desc, v_desc, LSE2, DELTA, ring, k_smem, v_smem, kv_ready, block, n_heads),
                ),
                (
                    _wide_consumer,
                    (dk_desc, dv_desc, ring, k_smem, v_smem, kv_ready, exchange, block, scores, softmax_scale, 0),
                ),
                (
                    _wide_consumer,
                    (dk_desc, dv_desc, ring, k_smem, v_smem, kv_ready, exchange, block, scores, softmax_scale, 1),
                ),
            ],
            [4, 4],
            [240, 240],
        )

    # dQ: the forward's skeleton (the producer streams K and V; each consumer keeps its query rows' Q and dO) ------

    @aggregate
    class QueryBlock:
        """A dQ program's query rows from row0, of (batch off_b, head off_h; kv head off_hk; pid_bh = batch * heads
        + head), and hi: the keys they see between them (from key 0)."""

        off_b: gl.tensor
        off_h: gl.tensor
        off_hk: gl.tensor
        pid_bh: gl.tensor
        row0: gl.tensor
        hi: gl.tensor
        seqlen_q: gl.tensor
        seqlen_k: gl.tensor
        VARLEN: gl.constexpr

        @gluon.constexpr_function
        def __init__(self, off_b, off_h, off_hk, pid_bh, row0, hi, seqlen_q, seqlen_k):
            self.off_b = off_b
            self.off_h = off_h
            self.off_hk = off_hk
            self.pid_bh = pid_bh
            self.row0 = row0
            self.hi = hi
            self.seqlen_q = seqlen_q
            self.seqlen_k = seqlen_k
            self.VARLEN = gl.constexpr(False)

    @aggregate
    class PackedQueryBlock:
        """``QueryBlock`` for one sequence of a varlen launch (off_b 0, pid_bh unread, row0 and hi counted from
        the sequence's first query and key, seqlen_q and seqlen_k its lengths), with where its rows start in the
        packed tensors (q_start, k_start), the LSE's row length total_q, and where dQ goes: DQ (total_q, heads,
        head dim) with its row and head strides, written by masked stores (``_store_packed``)."""

        off_b: gl.tensor
        off_h: gl.tensor
        off_hk: gl.tensor
        pid_bh: gl.tensor
        row0: gl.tensor
        hi: gl.tensor
        seqlen_q: gl.tensor
        seqlen_k: gl.tensor
        q_start: gl.tensor
        k_start: gl.tensor
        total_q: gl.tensor
        DQ: gl.tensor
        stride_dqs: gl.tensor
        stride_dqh: gl.tensor
        VARLEN: gl.constexpr

        @gluon.constexpr_function
        def __init__(
            self,
            off_b,
            off_h,
            off_hk,
            pid_bh,
            row0,
            hi,
            seqlen_q,
            seqlen_k,
            q_start,
            k_start,
            total_q,
            DQ,
            stride_dqs,
            stride_dqh,
        ):
            self.off_b = off_b
            self.off_h = off_h
            self.off_hk = off_hk
            self.pid_bh = pid_bh
            self.row0 = row0
            self.hi = hi
            self.seqlen_q = seqlen_q
            self.seqlen_k = seqlen_k
            self.q_start = q_start
            self.k_start = k_start
            self.total_q = total_q
            self.DQ = DQ
            self.stride_dqs = stride_dqs
            self.stride_dqh = stride_dqh
            self.VARLEN = gl.constexpr(True)

    @gluon.jit
    def _dq_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, qdo_ready, ring, block, scores):
        """The program's query rows' Q and dO, then its key tiles through the ring: with a window's left edge, from
        its first row's first key on (ring position 0)."""
        k_smem, v_smem, k_ready, v_ready, kv_empty = ring.a, ring.b, ring.a_ready, ring.b_ready, ring.empty
        off_b, off_h, off_hk, row0, hi = block.off_b, block.off_h, block.off_hk, block.row0, block.hi
        STAGES: gl.constexpr = k_smem.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        q_row = row0
        if block.VARLEN:  # rows of the packed tensors (off_b is 0): past the sequence's end, the next one's
            q_row += block.q_start
        _load_resident(q_desc, do_desc, q_smem, do_smem, qdo_ready, off_b, q_row, off_h)
        n_kv = gl.cdiv(hi, BLOCK_N)
        j0 = _first_tile(
            row0,
            block.seqlen_k,
            scores.left_offset,
            scores.right_offset,
            n_kv,
            scores.IS_CAUSAL,
            scores.IS_LOCAL,
            BLOCK_N,
        )
        for j in range(j0, n_kv):
            it = j - j0
            s = it % STAGES
            mbarrier.wait(kv_empty.index(s), ((it // STAGES) & 1) ^ 1)
            key_row = j * BLOCK_N
            if block.VARLEN:  # the keys past the sequence's end that a tile holds are masked (``_dq_tiles``)
                key_row += block.k_start
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma_load(k_desc, [off_b, key_row, off_hk, 0], k_ready.index(s), k_smem.index(s))
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma_load(v_desc, [off_b, key_row, off_hk, 0], v_ready.index(s), v_smem.index(s))

    @gluon.jit
    def _dq_tiles(
        dq,
        q,
        do,
        lse2,
        delta,
        ring,
        offs_m,
        seqlen_k,
        scores,
        lo,
        hi,
        MASKED: gl.constexpr,
        s_layout: gl.constexpr,
        p_layout: gl.constexpr,
        j0=0,
    ):
        """The portable ``_attn_bwd_dq_inner`` for one consumer: key/value tiles [lo, hi) from the ring, whose first
        (position 0) is key tile j0. The scores as in ``_tiles``."""
        k_smem, v_smem, k_ready, v_ready, kv_empty = ring.a, ring.b, ring.a_ready, ring.b_ready, ring.empty
        qk_scale = scores.qk_scale
        dtype: gl.constexpr = k_smem.dtype
        BLOCK_M: gl.constexpr = q.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[2]
        BLOCK_D: gl.constexpr = k_smem.shape[4]
        STAGES: gl.constexpr = k_smem.shape[0]
        offs_n0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
        for start_n in range(lo, hi, BLOCK_N):
            j = start_n // BLOCK_N - j0
            s = j % STAGES
            phase = (j // STAGES) & 1
            mbarrier.wait(k_ready.index(s), phase)
            k = k_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            qk = warpgroup_mma(q, k.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(s), phase)
            v = v_smem.index(s).reshape([BLOCK_N, BLOCK_D])
            dp = warpgroup_mma(do, v.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qk = warpgroup_mma_wait(1, deps=(qk,))  # dP may still be running during the exponentials
            qk = _scores(qk, scores)
            p = gl.exp2(qk * qk_scale - lse2[:, None])
            if MASKED:
                offs_n = start_n + offs_n0
                cols = offs_n[None, :]
                p = mask_scores(
                    p,
                    offs_m[:, None],
                    cols,
                    seqlen_k,
                    scores.left_offset,
                    scores.right_offset,
                    0.0,
                    True,
                    scores.IS_CAUSAL,
                    scores.IS_LOCAL,
                )
            p = _scores_grad(p, qk, scores)  # (as in ``_tiles``)
            dp = warpgroup_mma_wait(0, deps=(dp,))
            ds = p * (dp - delta[:, None])
            dq = warpgroup_mma(gl.convert_layout(ds.to(dtype), p_layout), k, dq, is_async=True)
            dq = warpgroup_mma_wait(0, deps=(dq,))
            mbarrier.arrive(kv_empty.index(s), count=1)
        return dq

    @gluon.jit
    def _dq_consumer(
        dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, SUB: gl.constexpr
    ):
        k_ready, kv_empty = ring.a_ready, ring.empty
        off_b, off_h, pid_bh, row0, hi = block.off_b, block.off_h, block.pid_bh, block.row0, block.hi
        seqlen_q, seqlen_k = block.seqlen_q, block.seqlen_k
        IS_CAUSAL: gl.constexpr = scores.IS_CAUSAL
        IS_LOCAL: gl.constexpr = scores.IS_LOCAL
        STAGES: gl.constexpr = ring.a.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = ring.a.shape[2]
        BLOCK_D: gl.constexpr = q_smem.shape[4]
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_D, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        first = row0 + SUB * BLOCK_M
        offs_m = first + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        if block.VARLEN:  # LSE2 and DELTA (heads, total_q); rows past the sequence's end get P = 0
            row = off_h.to(gl.int64) * block.total_q + (block.q_start + offs_m)
        else:
            row = pid_bh.to(gl.int64) * seqlen_q + offs_m
        lse2 = gl.load(LSE2 + row, mask=offs_m < seqlen_q, other=float("inf"))
        delta = gl.load(DELTA + row, mask=offs_m < seqlen_q, other=0.0)
        my_lo, full_lo, full_hi, my_hi = _key_range(
            first, seqlen_k, scores.left_offset, scores.right_offset, IS_CAUSAL, IS_LOCAL, BLOCK_M, BLOCK_N
        )
        q_tile = q_smem.index(SUB)
        q = q_tile.reshape([BLOCK_M, BLOCK_D])
        do = do_smem.index(SUB).reshape([BLOCK_M, BLOCK_D])
        dq = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)
        mbarrier.wait(qdo_ready, 0)
        if IS_LOCAL:
            # the ring holds the program's key tiles from its first row's first key (``_dq_producer``)
            j0 = _first_tile(
                row0,
                seqlen_k,
                scores.left_offset,
                scores.right_offset,
                gl.cdiv(hi, BLOCK_N),
                IS_CAUSAL,
                IS_LOCAL,
                BLOCK_N,
            )
            my_lo, full_lo, full_hi, my_hi, my_end = _in_ring(j0 * BLOCK_N, hi, my_lo, full_lo, full_hi, my_hi, BLOCK_N)
            _release_skipped(k_ready, kv_empty, 0, my_lo // BLOCK_N - j0, STAGES)
            dq = _dq_tiles(
                dq, q, do, lse2, delta, ring, offs_m, seqlen_k, scores, my_lo, full_lo, True, s_layout, p_layout, j0
            )
        else:
            j0 = 0
        dq = _dq_tiles(
            dq, q, do, lse2, delta, ring, offs_m, seqlen_k, scores, full_lo, full_hi, False, s_layout, p_layout, j0
        )
        dq = _dq_tiles(
            dq, q, do, lse2, delta, ring, offs_m, seqlen_k, scores, full_hi, my_hi, True, s_layout, p_layout, j0
        )
        # every product of this warpgroup has completed: its query tile's shared memory takes dQ
        q.store((dq * softmax_scale).to(dtype))
        if block.VARLEN:  # the sequence's rows only
            _store_packed(q, block.DQ, block.stride_dqs, block.stride_dqh, block.q_start, first, seqlen_q, off_h, 0)
        else:
            fence_async_shared()
            tma_store(dq_desc, [off_b, first, off_h, 0], q_tile)
        if IS_LOCAL:
            _release_skipped(
                k_ready, kv_empty, my_end // BLOCK_N - j0, gl.cdiv(hi, BLOCK_N) - my_end // BLOCK_N, STAGES
            )
        else:
            _release_skipped(
                k_ready, kv_empty, gl.cdiv(my_hi, BLOCK_N), gl.cdiv(hi, BLOCK_N) - gl.cdiv(my_hi, BLOCK_N), STAGES
            )
        if not block.VARLEN:
            tma.store_wait(0)

    @gluon.jit(
        do_not_specialize=[
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
    def _attn_bwd_dq_hopper(
        q_desc,
        do_desc,
        k_desc,
        v_desc,
        dq_desc,
        LSE2,
        DELTA,
        n_heads,
        group_size,
        seqlen_q,
        seqlen_k,
        right_offset,
        softmax_scale,
        qk_scale,
        left_offset,
        softcap_scale,
        DQ,
        stride_dqs,
        stride_dqh,
        CU_Q,
        CU_K,
        ITEMS,
        n_seqs,
        total_q,
        IS_CAUSAL: gl.constexpr,
        STAGES: gl.constexpr,
        N_CONSUMERS: gl.constexpr,
        SECTION: gl.constexpr = 0,
        IS_LOCAL: gl.constexpr = False,
        SOFTCAP: gl.constexpr = False,
        VARLEN: gl.constexpr = False,
    ):
        """Grid: (query tiles of N_CONSUMERS * BLOCK_M, batch * heads); with SECTION (causal only), one axis in
        ``forward_hopper._causal_item``'s order, as ``_key_block``'s. The variants as in
        ``_attn_bwd_dkdv_hopper``.

        VARLEN: packed sequences (``varlen.varlen_bwd_dq_hopper``), as in ``_attn_bwd_dkdv_hopper``: a 1-D grid bounding
        the items (sequence, head, query rows), each program finding its own, under the mask the last rows first; LSE2
        and DELTA are (heads, total_q) fp32, dq_desc goes unread (dQ leaves through DQ by masked stores); DQ to total_q:
        ``PackedQueryBlock``'s and the item table (``varlen.item_table``: the sequences by key length, longest first).
        Without it those eight are None (``DQ_VARLEN_ONLY``)."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[1]
        BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
        dtype: gl.constexpr = q_desc.dtype
        if VARLEN:
            seq, local = _packed_item(ITEMS)
            seq, len_q, len_k, q_start, k_start = _found_sequence(CU_Q, CU_K, seq)
            band = _sequence_band(
                len_q, len_k, Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP)
            )
            n_tiles = gl.maximum(gl.cdiv(len_q, N_CONSUMERS * BLOCK_M), 1)
            off_h = local // n_tiles
            tile = local % n_tiles
            if IS_CAUSAL:
                tile = n_tiles - 1 - tile  # the last query rows see the most keys
            off_hk = off_h // group_size
            row0 = tile * (N_CONSUMERS * BLOCK_M)
            hi = _keys_seen(row0, N_CONSUMERS * BLOCK_M, len_k, band.right_offset, IS_CAUSAL)
        else:
            if SECTION > 0:
                n_tiles = gl.cdiv(seqlen_q, N_CONSUMERS * BLOCK_M)
                rank, pid_bh = _causal_item(gl.program_id(0), n_tiles, gl.num_programs(0) // n_tiles, SECTION)
                tile = n_tiles - 1 - rank  # the last query rows see the most keys
            else:
                tile = gl.program_id(0)
                pid_bh = gl.program_id(1)
                if IS_CAUSAL:
                    tile = gl.num_programs(0) - 1 - tile  # the last query rows see the most keys: launch them first
            off_b = pid_bh // n_heads
            off_h = pid_bh % n_heads
            off_hk = off_h // group_size
            row0 = tile * (N_CONSUMERS * BLOCK_M)
            hi = _keys_seen(row0, N_CONSUMERS * BLOCK_M, seqlen_k, right_offset, IS_CAUSAL)

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

        ring = Ring(k_smem, v_smem, k_ready, v_ready, kv_empty)
        if VARLEN:
            zero = gl.to_tensor(0)
            block = PackedQueryBlock(
                zero, off_h, off_hk, zero, row0, hi, len_q, len_k, q_start, k_start, total_q, DQ, stride_dqs, stride_dqh
            )
            scores = band
        else:
            block = QueryBlock(off_b, off_h, off_hk, pid_bh, row0, hi, seqlen_q, seqlen_k)
            scores = Scores(right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP)
        if N_CONSUMERS == 2:
            gl.warp_specialize(
                [
                    (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, qdo_ready, ring, block, scores)),
                    (
                        _dq_consumer,
                        (dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, 0),
                    ),
                    (
                        _dq_consumer,
                        (dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, 1),
                    ),
                ],
                [4, 4],
                [240, 240],
            )
        else:
            gl.warp_specialize(
                [
                    (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, qdo_ready, ring, block, scores)),
                    (
                        _dq_consumer,
                        (dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, 0),
                    ),
                    (
                        _dq_consumer,
                        (dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, 1),
                    ),
                    (
                        _dq_consumer,
                        (dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, 2),
                    ),
                ],
                [4, 4, 4],
                [160, 160, 160],
            )


def _grid(n_tiles: int, n_pairs: int, k: torch.Tensor, head_dim: int, causal: bool, section: int | None = None):
    """A kernel's grid over n_tiles tiles of n_pairs (batch, head) pairs, and the constexpr that says how it is
    ordered: two axes (tiles, pairs), or, for causal calls at ``SECTIONED_HEAD_DIMS``, one axis in the forward's
    order (sections of heads whose K/V fit in L2, costliest tiles first: ``forward_hopper._causal_item``), or for
    causal calls given a section, that order in sections of that many pairs."""
    if causal and section is not None:
        return (n_tiles * n_pairs,), dict(SECTION=min(section, n_pairs))
    if causal and head_dim in SECTIONED_HEAD_DIMS:
        return (n_tiles * n_pairs,), dict(SECTION=forward_hopper.heads_per_section(k, n_pairs))
    return (n_tiles, n_pairs), {}


def bwd_dkdv_hopper(
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
    dq_acc=None,
    *,
    window_size=(-1, -1),
    softcap: float = 0.0,
    alibi_slopes=None,
):
    """``backward.bwd_dkdv`` on Hopper (dk, dv written in place; lse2, delta from ``backward.bwd_preprocess``).
    config: (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS), default ``HOPPER_DKDV_CONFIGS[head_dim, causal]``,
    or with dq_acc ``FUSED_DQ_CONFIGS[head_dim, causal]``.
    dq_acc: a zeroed float32 tensor shaped like q: run the fused kernel, which also adds dS K (dQ before the
    softmax scale) into it.
    Head dims over ``MAX_NARROW_HEAD_DIM`` run the wide kernel, which takes (BLOCK_M, BLOCK_N, STAGES, 2):
    BLOCK_N keys per program, half of each streamed tile's BLOCK_M rows per consumer.
    window_size and softcap: as ``hopper_common.mask`` takes them (not with dq_acc); a window takes the tables'
    causal entries. alibi_slopes must be None (``supports_dkdv``)."""
    if alibi_slopes is not None:
        raise ValueError("the Hopper backward has no ALiBi: alibi_slopes runs on the portable kernels")
    fused = dq_acc is not None
    if fused:
        if softcap > 0 or tuple(window_size) != (-1, -1):
            raise ValueError("the fused dK/dV/dQ kernel (dq_acc) takes no window_size or softcap")
        config = config or FUSED_DQ_CONFIGS[q.shape[3], causal]
    config = config or HOPPER_DKDV_CONFIGS[forward_hopper.table_key(q, causal, window_size)]
    # the producer copies each streamed tile's LSE and delta rows into the ring with its Q and dO
    objects = (q, k, v, dout, dk, dv, dq_acc, rows_descriptor(lse2, config[0]), rows_descriptor(delta, config[0]))
    key = (
        *map(layout, (q, k, v, dout, dk, dv)),
        None if dq_acc is None else layout(dq_acc),
        *plan_options(q.device, softmax_scale, causal, bottom_right, window_size, softcap, config),
    )
    plan = planned(
        _plans,
        key,
        lambda: _dkdv_plan(distinct(objects), softmax_scale, causal, bottom_right, config, window_size, softcap),
    )
    plan(objects)


_plans = plan_cache()

# The dK/dV kernels' varlen parameters (DK, DV, their four strides, CU_Q, CU_K, ITEMS, n_seqs, total_q) and the dQ
# kernel's (DQ, its two strides, CU_Q, CU_K, ITEMS, n_seqs, total_q): None in a dense launch, which Triton compiles
# as constants, so that the dense kernels keep their parameters and code (``forward_hopper.VARLEN_ONLY``).
DKDV_VARLEN_ONLY = (None,) * 11
DQ_VARLEN_ONLY = (None,) * 8


def dkdv_consumers(config: tuple, head_dim: int) -> tuple:
    """(N_CONSUMERS, wide) of a dK/dV launch, dense or varlen: the wide kernel (head dims over
    ``MAX_NARROW_HEAD_DIM``) splits one key block's columns between exactly two consumers, the narrow one builds
    ``CONSUMER_COUNTS``; any other count is refused (``consumers_of``)."""
    wide = head_dim > MAX_NARROW_HEAD_DIM
    kernel = f"the {'wide ' if wide else ''}dK/dV kernel (head_dim {head_dim})"
    return consumers_of(config, kernel, (2,) if wide else CONSUMER_COUNTS), wide


def _dkdv_plan(objects, softmax_scale, causal, bottom_right, config, window_size, softcap):
    """``bwd_dkdv_hopper``'s launch for the layout of ``objects`` (q, k, v, dout, dk, dv, dq_acc or None, and the
    LSE's and delta's ``rows_descriptor``s)."""
    q, k, v, dout, dk, dv, dq_acc, lse2_rows, delta_rows = objects
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    m = mask(causal, window_size, softcap, softmax_scale, seqlen_q, seqlen_k, bottom_right)
    block_m, block_n, stages, _ = config
    consumers, wide = dkdv_consumers(config, head_dim)
    rest = (
        lse2_rows,
        delta_rows,
        n_heads,
        n_heads // n_kv_heads,
        seqlen_q,
        seqlen_k,
        m.right_offset,
        softmax_scale,
        m.qk_scale,
        m.left_offset,
        m.softcap_scale,
        *DKDV_VARLEN_ONLY,
    )
    if wide:
        cols = head_dim // 2
        grid, order = _grid(cdiv(seqlen_k, block_n), batch * n_kv_heads, k, head_dim, m.is_causal)
        return gluon_plan(
            _attn_bwd_dkdv_hopper_wide,
            grid,
            (
                *(
                    descriptor(t, rows, cols)
                    for t, rows in (
                        (q, block_m),
                        (dout, block_m),
                        (k, block_n),
                        (v, block_n),
                        (dk, block_n),
                        (dv, block_n),
                    )
                ),
                *rest,
            ),
            dict(**m.constexprs, STAGES=stages, **order),
            4,
            objects,
        )
    fused = dq_acc is not None
    grid, order = _grid(
        cdiv(seqlen_k, consumers * block_n),
        batch * n_kv_heads,
        k,
        head_dim,
        m.is_causal,
        FUSED_DQ_SECTIONS.get((head_dim, causal)) if fused else None,
    )
    dk_desc = descriptor(dk, block_n)
    return gluon_plan(
        _attn_bwd_dkdv_hopper,
        grid,
        (
            descriptor(q, block_m),
            descriptor(dout, block_m),
            descriptor(k, block_n),
            descriptor(v, block_n),
            dk_desc,
            descriptor(dv, block_n),
            descriptor(dq_acc, block_m) if fused else dk_desc,
            *rest,
        ),  # (dq_desc: unread unless fused)
        dict(
            **m.constexprs,
            STAGES=stages,
            N_CONSUMERS=consumers,
            **order,
            FUSED_DQ=fused,
            RAGGED_KEYS=fused and seqlen_k % (consumers * block_n) != 0,
        ),
        4,
        objects,
    )


def bwd_dq_hopper(
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
    *,
    window_size=(-1, -1),
    softcap: float = 0.0,
    alibi_slopes=None,
):
    """``backward.bwd_dq`` on Hopper (dq written in place). config: (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS),
    default ``HOPPER_DQ_CONFIGS[head_dim, causal]`` (a window takes the causal entry). window_size and softcap:
    as ``hopper_common.mask`` takes them; alibi_slopes must be None (``supports_dq``)."""
    if alibi_slopes is not None:
        raise ValueError("the Hopper backward has no ALiBi: alibi_slopes runs on the portable kernels")
    objects = (q, k, v, dout, dq, lse2, delta)
    key = (
        *map(layout, (q, k, v, dout, dq)),
        aligned(lse2),
        aligned(delta),
        *plan_options(q.device, softmax_scale, causal, bottom_right, window_size, softcap, config),
    )
    plan = planned(
        _dq_plans,
        key,
        lambda: _dq_plan(distinct(objects), softmax_scale, causal, bottom_right, config, window_size, softcap),
    )
    plan(objects)


_dq_plans = plan_cache()


def _dq_plan(objects, softmax_scale, causal, bottom_right, config, window_size, softcap):
    """``bwd_dq_hopper``'s launch for the layout of ``objects`` (q, k, v, dout, dq, lse2, delta)."""
    q, k, v, dout, dq, lse2, delta = objects
    batch, seqlen_q, n_heads, head_dim = q.shape
    seqlen_k, n_kv_heads = k.shape[1], k.shape[2]
    m = mask(causal, window_size, softcap, softmax_scale, seqlen_q, seqlen_k, bottom_right)
    config = config or HOPPER_DQ_CONFIGS[forward_hopper.table_key(q, causal, window_size)]
    block_m, block_n, stages, _ = config
    consumers = consumers_of(config, "the dQ kernel")
    grid, order = _grid(cdiv(seqlen_q, consumers * block_m), batch * n_heads, k, head_dim, m.is_causal)
    return gluon_plan(
        _attn_bwd_dq_hopper,
        grid,
        (
            descriptor(q, block_m),
            descriptor(dout, block_m),
            descriptor(k, block_n),
            descriptor(v, block_n),
            descriptor(dq, block_m),
            lse2,
            delta,
            n_heads,
            n_heads // n_kv_heads,
            seqlen_q,
            seqlen_k,
            m.right_offset,
            softmax_scale,
            m.qk_scale,
            m.left_offset,
            m.softcap_scale,
            *DQ_VARLEN_ONLY,
        ),
        dict(**m.constexprs, STAGES=stages, N_CONSUMERS=consumers, **order),
        4,
        objects,
    )
