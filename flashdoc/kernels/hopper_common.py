"""What the Hopper kernels (``forward_hopper``, ``backward_hopper``) share: Gluon itself, the host descriptors
their TMA copies go through, and the device helpers that say which keys a block of query rows sees under the
causal mask and in which order causal work is handed out.
"""

import dataclasses
import functools

import torch

from . import INTERPRET, LOG2E, gluon_support
from .launch import unchecked_descriptor
from .mask import (  # noqa: F401
    band,
    key_block_range,
    left_edge_one_sided,
    mask_scores,
    query_block_range,
    softcap,
    softcap_grad,
)

# Gluon is experimental and its API moves between Triton releases: only verified ones are used (gluon_support).
# The host descriptors below need Gluon's classes whenever the installed Triton has them (tests build them on a
# CPU); the kernels are compiled only where GLUON holds.
GLUON = gluon_support.ALLOWED and not INTERPRET
if gluon_support.HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    # (the kernel modules take these from here, with the helpers below)
    from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: F401
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .gluon_support import thread_barrier, tma_load, tma_reduce_add, tma_store  # noqa: F401


@functools.cache
def _smem_layout(rows: int, head_dim: int, dtype: torch.dtype):
    # (float32: the fused backward's dQ buffer, which receives TMA reduce-adds)
    element = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for([1, rows, 1, head_dim], element)


def descriptor(t, rows: int, cols: int = 0):
    """A Gluon host descriptor over a (batch, seqlen, heads, head_dim) tensor, read and written in (1, rows, 1,
    cols) tiles of one (batch, head), cols = head_dim unless given. Rows past seqlen read as zeros and are never
    written."""
    cols = cols or t.shape[3]
    return unchecked_descriptor(
        TensorDescriptor,
        base=t,
        shape=list(t.shape),
        strides=list(t.stride()),
        block_shape=[1, rows, 1, cols],
        layout=_smem_layout(rows, cols, t.dtype),
    )


def packed_descriptor(t, rows: int, cols: int = 0):
    """``descriptor`` over a packed (total, heads, head_dim) tensor (varlen) seen as one batch of ``total`` rows:
    (1, rows, 1, cols) tiles of one head from any row on, cols = head_dim unless given. Rows past ``total`` read
    as zeros; rows past a sequence's end are the next sequence's, which the kernel masks or does not store."""
    total, heads, head_dim = t.shape
    cols = cols or head_dim
    return unchecked_descriptor(
        TensorDescriptor,
        base=t,
        shape=[1, total, heads, head_dim],
        strides=[total * t.stride(0), *t.stride()],
        block_shape=[1, rows, 1, cols],
        layout=_smem_layout(rows, cols, t.dtype),
    )


def rows_descriptor(t: torch.Tensor, rows: int):
    """A Gluon host descriptor over a contiguous fp32 (batch, heads, seqlen) tensor (the Hopper dK/dV kernels' LSE
    and delta), read in (1, rows) tiles of one (batch, head)'s row; elements past seqlen read as zeros. TMA needs
    16-byte row strides and tile starts, so a seqlen that is not a multiple of 4 gets its rows copied into a
    padded buffer (batch x heads x seqlen floats; the launch's stream orders the buffer's reuse)."""
    batch, heads, seqlen = t.shape
    flat = t.view(batch * heads, seqlen)
    if seqlen % 4:
        flat = torch.nn.functional.pad(flat, (0, -seqlen % 4))
    return unchecked_descriptor(
        TensorDescriptor,
        base=flat,
        shape=[batch * heads, seqlen],
        strides=[flat.stride(0), 1],
        block_shape=[1, rows],
        layout=_rows_layout(),
    )


@functools.cache
def _rows_layout():
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)


@dataclasses.dataclass(frozen=True)
class Mask:
    """A call's mask and score change as the Hopper kernels take them (``mask`` builds it): the constexprs
    IS_CAUSAL (query i sees keys up to i + right_offset), IS_LOCAL (and from i + left_offset on: a sliding
    window's left edge) and SOFTCAP, and the runtime values. The tables' (head dim, causal) entry a call takes is
    (head dim, is_causal): a window runs the causal kernels."""

    is_causal: bool
    is_local: bool
    softcap: bool
    right_offset: int
    left_offset: int
    qk_scale: float
    softcap_scale: float

    @property
    def constexprs(self) -> dict:
        return dict(IS_CAUSAL=self.is_causal, IS_LOCAL=self.is_local, SOFTCAP=self.softcap)


def mask(
    causal: bool,
    window_size: tuple,
    softcap: float,
    softmax_scale: float,
    seqlen_q: int,
    seqlen_k: int,
    bottom_right: bool,
) -> Mask:
    """The Hopper kernels' form of a call: the masking core's band (``mask.band``: flash-attn's window_size,
    -1 unbounded, causal = right 0, bottom-right or top-left alignment) and softcap > 0, which caps the scaled
    scores at softcap * tanh(s / softcap) (the kernels take softcap_scale = softmax_scale / softcap into the tanh
    and softcap * log2(e) as the exponent's scale, FlashAttention-3's way: one multiply and one tanh a score)."""
    is_causal, is_local, left_offset, right_offset = band(seqlen_q, seqlen_k, causal, window_size, bottom_right)
    if is_local and not is_causal:
        # the kernels' left edge comes with a right one (their programs' key ranges start from the causal ones):
        # put it past every key, from every row
        is_causal = True
        right_offset = (seqlen_k - seqlen_q if bottom_right else 0) + max(seqlen_q, seqlen_k)
    qk_scale, softcap_scale = score_scales(softcap, softmax_scale)
    return Mask(
        is_causal=is_causal,
        is_local=is_local,
        softcap=softcap > 0,
        right_offset=right_offset,
        left_offset=left_offset,
        qk_scale=qk_scale,
        softcap_scale=softcap_scale,
    )


def plan_options(device, softmax_scale, causal, bottom_right, window_size, softcap, config) -> tuple:
    """What a dense Hopper launch plan's key holds besides its tensors' layouts: the device, the score options and
    the config. (Varlen plans key on their ``Band`` instead.)"""
    return (device, softmax_scale, causal, bottom_right, tuple(window_size), softcap, config)


# Every Gluon kernel lists its consumer warpgroups in its warp_specialize call: two, or else three. A config asking
# for another count would launch three partitions over shared memory sized for its count.
CONSUMER_COUNTS = (2, 3)


def consumers_of(config: tuple, kernel: str, allowed: tuple = CONSUMER_COUNTS) -> int:
    """A Hopper config's N_CONSUMERS (its fourth entry), refused with a ValueError unless the kernel (named in the
    message) builds that many consumer warpgroups."""
    if config[3] not in allowed:
        counts = " or ".join(map(str, allowed))
        raise ValueError(
            f"{kernel}: config={tuple(config)} asks for {config[3]} consumer warpgroups (its fourth entry); "
            f"this kernel builds {counts}"
        )
    return config[3]


def score_scales(softcap: float, softmax_scale: float) -> tuple:
    """(qk_scale, softcap_scale) of ``Mask``: the exponent's scale and, with softcap > 0, the tanh's."""
    return (softcap if softcap > 0 else softmax_scale) * LOG2E, softmax_scale / softcap if softcap > 0 else 1.0


if GLUON:
    from .gluon_support import aggregate

    # --8<-- [start:hopper_state]
    @aggregate
    class Scores:
        """How a kernel turns Q K^T into the softmax's exponents (``Mask`` on the device): capped with SOFTCAP
        (tanh of the scores times softcap_scale), scaled by qk_scale (softmax_scale * log2(e), or softcap * log2(e)
        with SOFTCAP), and masked by the core's band: key j counts for query i when j <= i + right_offset
        (IS_CAUSAL) and j >= i + left_offset (IS_LOCAL)."""

        right_offset: gl.tensor
        left_offset: gl.tensor
        qk_scale: gl.tensor
        softcap_scale: gl.tensor
        IS_CAUSAL: gl.constexpr
        IS_LOCAL: gl.constexpr
        SOFTCAP: gl.constexpr

        @gluon.constexpr_function
        def __init__(self, right_offset, left_offset, qk_scale, softcap_scale, IS_CAUSAL, IS_LOCAL, SOFTCAP):
            self.right_offset = right_offset
            self.left_offset = left_offset
            self.qk_scale = qk_scale
            self.softcap_scale = softcap_scale
            self.IS_CAUSAL = gl.constexpr(IS_CAUSAL)
            self.IS_LOCAL = gl.constexpr(IS_LOCAL)
            self.SOFTCAP = gl.constexpr(SOFTCAP)

    @aggregate
    class Ring:
        """A ring of shared-memory slots of two streamed tiles a and b (K and V): a_ready and b_ready (a barrier a
        slot each) complete when a TMA copy lands, empty when every consumer is done with the slot. The number of
        slots (STAGES), the tiles' rows and the head dim are the buffers' shapes."""

        a: gl.shared_memory_descriptor
        b: gl.shared_memory_descriptor
        a_ready: gl.shared_memory_descriptor
        b_ready: gl.shared_memory_descriptor
        empty: gl.shared_memory_descriptor

        @gluon.constexpr_function
        def __init__(self, a, b, a_ready, b_ready, empty):
            self.a = a
            self.b = b
            self.a_ready = a_ready
            self.b_ready = b_ready
            self.empty = empty

    # --8<-- [end:hopper_state]

    # --8<-- [start:hopper_causal_order]
    @gluon.jit
    def _causal_item(i, n_tiles, n_pairs, section):
        """Causal work item i of n_tiles x n_pairs (tiles of n_pairs (batch, head) pairs) as (rank, pair): rank 0 is a
        pair's costliest tile. Items go section by section of ``section`` pairs (``heads_per_section``), and within
        a section rank by rank: the costliest tile of every pair in it, then the next ... So the last items handed
        out are light ones, which fill in while the others finish (longest-processing-time-first), and the pairs in
        flight at one time are few enough for L2 to keep what they stream. FlashAttention-3's LPT tile scheduler."""
        per_section = section * n_tiles
        first = i // per_section * section
        pairs = gl.minimum(section, n_pairs - first)  # the last section may be short
        j = i % per_section
        return j // pairs, first + j % pairs

    # --8<-- [end:hopper_causal_order]

    # The key ranges. A program of the forward or dQ kernel loads, for its ROWS query rows, the key tiles from the
    # first one its first row sees (0 without a window) to the last one its last row sees; each consumer then
    # visits its own BLOCK_M rows' part (the core's ``key_block_range``) and releases the rest of the ring.

    @gluon.jit
    def _key_range(
        first,
        seqlen_k,
        left_offset,
        right_offset,
        IS_CAUSAL: gl.constexpr,
        IS_LOCAL: gl.constexpr,
        BLOCK_M: gl.constexpr,
        BLOCK_N: gl.constexpr,
    ):
        """The keys the query rows [first, first + BLOCK_M) see: the core's ``key_block_range`` (lo, full_lo,
        full_hi, hi; masked [lo, full_lo), unmasked [full_lo, full_hi), masked [full_hi, hi)), with hi at least 0
        (under the bottom-right diagonal the first rows can see no key at all)."""
        lo, full_lo, full_hi, hi = key_block_range(
            first, seqlen_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
        )
        if IS_CAUSAL:
            hi = gl.maximum(hi, 0)
        return lo, full_lo, full_hi, hi

    @gluon.jit
    def _keys_seen(row0, ROWS: gl.constexpr, seqlen_k, right_offset, IS_CAUSAL: gl.constexpr):
        """How many keys (from key 0) the query rows [row0, row0 + ROWS) see between them: ``_key_range``'s hi."""
        _, _, _, hi = _key_range(row0, seqlen_k, 0, right_offset, IS_CAUSAL, False, ROWS, ROWS)
        return hi

    @gluon.jit
    def _first_tile(
        row0,
        seqlen_k,
        left_offset,
        right_offset,
        n_tiles,
        IS_CAUSAL: gl.constexpr,
        IS_LOCAL: gl.constexpr,
        BLOCK_N: gl.constexpr,
    ):
        """The first key tile (of BLOCK_N keys, at most n_tiles: none) that query rows from row0 on see: with a
        window's left edge, the tile of row0's first key (the core's lo); else 0.

        Under the causal mask a forward item may start before row 0 (``_work``'s shift): its leading consumers
        are skipped, so the first row that sees keys is row 0. Starting there matters for more than the loads it
        saves: a tile that no consumer uses is released as soon as its K has landed, so the producer could
        refill the stage while the tile's V load is still in flight, and a second ``expect`` on a barrier whose
        phase has not completed corrupts it (a launch failure on the H200). Every tile loaded from here on is
        used by some consumer, which waits for its V before releasing it."""
        if IS_LOCAL:
            if IS_CAUSAL:
                row0 = gl.maximum(row0, 0)
            lo, _, _, _ = key_block_range(
                row0, seqlen_k, left_offset, right_offset, BLOCK_N, BLOCK_N, IS_CAUSAL, IS_LOCAL
            )
            return gl.minimum(lo // BLOCK_N, n_tiles)
        else:
            return 0

    @gluon.jit
    def _in_ring(lo, hi, my_lo, full_lo, full_hi, my_hi, BLOCK_N: gl.constexpr):
        """A consumer's ``_key_range`` (my_lo, full_lo, full_hi, my_hi) inside its program's ring, which holds the
        key tiles from lo to hi's: rows whose window starts past every key the program loads visit none. Returns
        my_lo, full_lo, full_hi, my_hi and my_end, the end of the tiles it visits (the ones past it it releases)."""
        end = gl.cdiv(hi, BLOCK_N) * BLOCK_N
        my_hi = gl.minimum(my_hi, hi)
        my_lo = gl.minimum(gl.maximum(my_lo, lo), end)
        my_end = gl.maximum(gl.cdiv(my_hi, BLOCK_N) * BLOCK_N, my_lo)
        full_lo = gl.minimum(gl.maximum(full_lo, my_lo), my_end)
        full_hi = gl.maximum(gl.minimum(full_hi, my_hi), full_lo)
        return my_lo, full_lo, full_hi, my_hi, my_end

    @gluon.jit
    def _query_end(
        start_n,
        KEYS: gl.constexpr,
        hi,
        seqlen_q,
        left_offset,
        right_offset,
        IS_CAUSAL: gl.constexpr,
        IS_LOCAL: gl.constexpr,
        BLOCK_M: gl.constexpr,
    ):
        """The end of the query tiles (of BLOCK_M, at most hi) that see any of the KEYS keys from start_n: with a
        window's left edge, where the rows' windows have left them (the core's ``query_block_range`` hi); else
        hi."""
        if IS_LOCAL:
            _, _, _, end = query_block_range(
                start_n, seqlen_q, left_offset, right_offset, BLOCK_M, KEYS, IS_CAUSAL, IS_LOCAL
            )
            return gl.minimum(end, hi)
        else:
            return hi

    @gluon.jit
    def _scores(qk, scores):
        """The raw scores Q K^T (or K Q^T) as the kernels' exponents take them: capped with SOFTCAP (the core's
        ``softcap`` with cap_out 1: the cap's softcap * log2(e) is the kernel's qk_scale). Before the mask."""
        if scores.SOFTCAP:
            qk = softcap(qk, scores.softcap_scale, 1.0, False)
        return qk

    @gluon.jit
    def _scores_grad(ds, qk, scores):
        """ds (dS, or P on its way to dS = P (dP - delta)) through the cap: times tanh's derivative 1 - t^2 (the
        core's ``softcap_grad``; t = ``_scores``' qk)."""
        if scores.SOFTCAP:
            ds = ds * softcap_grad(qk, 1.0)
        return ds

    @gluon.jit
    def _release_skipped(ready, empty, it0, n, STAGES: gl.constexpr):
        """Release the n streamed tiles from the ring's it0-th on that this consumer does not need, in order, each
        once it has landed (an early arrival would count towards the slot's previous use). The forward's consumer
        releases the tiles past its last one with the loop written out; this form (a count, not an end) kept
        ptxas's spills at d = 128 causal to 316 bytes instead of 408, and the kernel 10% faster."""
        for t in range(n):
            it = it0 + t
            mbarrier.wait(ready.index(it % STAGES), (it // STAGES) & 1)
            mbarrier.arrive(empty.index(it % STAGES), count=1)
