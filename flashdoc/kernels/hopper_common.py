"""What the Hopper kernels (``forward_hopper``, ``backward_hopper``) share: Gluon itself, the host descriptors
their TMA copies go through, and the device helpers that say which keys a block of query rows sees under the
causal mask and in which order causal work is handed out.
"""

import dataclasses
import functools

import torch
import triton

from . import INTERPRET, LOG2E
from .launch import unchecked_descriptor

# Gluon is experimental and its API moves between Triton releases: only the tested one is used.
TESTED_TRITON = "3.6."

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    # (the kernel modules take these from here, with the helpers below)
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, \
        warpgroup_mma, warpgroup_mma_wait  # noqa: F401
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    GLUON = triton.__version__.startswith(TESTED_TRITON) and not INTERPRET
except ImportError:  # a Triton without Gluon
    GLUON = False


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
    return unchecked_descriptor(TensorDescriptor, base=t, shape=list(t.shape), strides=list(t.stride()),
                                block_shape=[1, rows, 1, cols], layout=_smem_layout(rows, cols, t.dtype))


def rows_descriptor(t: torch.Tensor, rows: int):
    """A Gluon host descriptor over a contiguous fp32 (batch, heads, seqlen) tensor (the Hopper dK/dV kernels' LSE
    and delta), read in (1, rows) tiles of one (batch, head)'s row; elements past seqlen read as zeros. TMA needs
    16-byte row strides and tile starts, so a seqlen that is not a multiple of 4 gets its rows copied into a
    padded buffer (batch x heads x seqlen floats; the launch's stream orders the buffer's reuse)."""
    batch, heads, seqlen = t.shape
    flat = t.view(batch * heads, seqlen)
    if seqlen % 4:
        flat = torch.nn.functional.pad(flat, (0, -seqlen % 4))
    return unchecked_descriptor(TensorDescriptor, base=flat, shape=[batch * heads, seqlen], strides=[flat.stride(0), 1],
                                block_shape=[1, rows],
                                layout=gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2))


@dataclasses.dataclass(frozen=True)
class Mask:
    """What a Hopper kernel launch takes for a call's mask and score change (``mask`` builds it): constexprs
    IS_CAUSAL (an upper key bound: query i sees keys up to i + causal_offset), WINDOW (a lower one too: from
    i + causal_offset - window) and SOFTCAP, and the runtime values. ``table_causal``: which of a config table's
    entries (head dim, causal) the call takes: a window runs the causal kernels."""
    causal: bool
    window: bool
    softcap: bool
    causal_offset: int
    window_width: int
    qk_scale: float
    softcap_scale: float

    @property
    def constexprs(self) -> dict:
        return dict(IS_CAUSAL=self.causal, WINDOW=self.window, SOFTCAP=self.softcap)


def mask(causal: bool, window_size: tuple, softcap: float, softmax_scale: float, seqlen_q: int, seqlen_k: int,
         bottom_right: bool) -> Mask:
    """The kernels' form of a call's mask. window_size = (left, right), -1 unbounded, flash-attn's meaning:
    query i sees keys [i + offset - left, i + offset + right], offset = seqlen_k - seqlen_q when bottom_right
    (flash-attn's alignment), else 0 (SDPA's); causal sets right = 0. softcap > 0 caps the scaled scores at
    softcap * tanh(s / softcap)."""
    left, right = window_size
    if causal:
        right = 0
    offset = seqlen_k - seqlen_q if bottom_right else 0
    bounded = left >= 0 or right >= 0
    if left >= 0 and right < 0:
        right = max(seqlen_q, seqlen_k)  # no right edge: one past every key, from any row
    window = left >= 0
    return Mask(causal=bounded, window=window, softcap=softcap > 0,
                causal_offset=offset + right if bounded else offset, window_width=left + right if window else 0,
                qk_scale=(softcap if softcap > 0 else softmax_scale) * LOG2E,
                softcap_scale=softmax_scale / softcap if softcap > 0 else 1.0)


if GLUON:
    @gluon.jit
    def _keys_seen(row0, ROWS: gl.constexpr, seqlen_k, causal_offset, IS_CAUSAL: gl.constexpr):
        """How many keys (from key 0) the query rows [row0, row0 + ROWS) see between them."""
        if IS_CAUSAL:
            return gl.maximum(gl.minimum(row0 + ROWS + causal_offset, seqlen_k), 0)
        else:
            return seqlen_k

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

    @gluon.jit
    def _key_range(first, seqlen_k, causal_offset, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr):
        """The keys that one consumer's BLOCK_M query rows from ``first`` on need: [0, full_hi) with no mask,
        [full_hi, my_hi) masked. Under the causal mask, the upper warpgroups' rows see fewer keys than the
        program loads; a consumer skips [my_hi, hi)."""
        if IS_CAUSAL:
            full_hi = gl.maximum(first + causal_offset + 1, 0) // BLOCK_N * BLOCK_N
            full_hi = gl.minimum(full_hi, seqlen_k // BLOCK_N * BLOCK_N)
        else:
            full_hi = seqlen_k // BLOCK_N * BLOCK_N
        return full_hi, _keys_seen(first, BLOCK_M, seqlen_k, causal_offset, IS_CAUSAL)

    @gluon.jit
    def _key_visible(offs_n, offs_m, seqlen_k, causal_offset, IS_CAUSAL: gl.constexpr, window=0,
                     WINDOW: gl.constexpr = False):
        """Which (query, key) pairs of a tile count: keys before seqlen_k and, under the causal mask, keys at most
        causal_offset past their query; in a window, also at least causal_offset - window past it. offs_n and
        offs_m come broadcast to the tile's shape, either way round."""
        keep = offs_n < seqlen_k
        if IS_CAUSAL:
            keep = keep & (offs_n <= offs_m + causal_offset)
        if WINDOW:
            keep = keep & (offs_n >= offs_m + causal_offset - window)
        return keep

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

    # Sliding windows. A window (left, right) lets query i see keys [i + offset - left, i + offset + right] (offset:
    # the diagonal's, 0 or seqlen_k - seqlen_q). The kernels take its right edge as the causal mask's, with
    # causal_offset = offset + right, and its left edge as WINDOW with window = left + right: keys
    # [i + causal_offset - window, i + causal_offset]. So what the causal mask skips past the diagonal, the window
    # skips before its left edge too, and a program's cost grows with the window, not with the length.

    @gluon.jit
    def _first_tile(row0, causal_offset, window, n_tiles, WINDOW: gl.constexpr, BLOCK_N: gl.constexpr):
        """The first key tile (of BLOCK_N keys, at most n_tiles: none) that query rows from row0 on see: the one
        that holds row0's first key in a window, else 0."""
        if WINDOW:
            return gl.minimum(gl.maximum(row0 + causal_offset - window, 0) // BLOCK_N, n_tiles)
        else:
            return 0

    @gluon.jit
    def _window_key_range(first, lo, full_hi, my_hi, causal_offset, window, BLOCK_M: gl.constexpr,
                          BLOCK_N: gl.constexpr):
        """``_key_range`` in a window, for a consumer whose program loads the key tiles from ``lo`` on: its rows
        from ``first`` need the tiles [my_lo, my_end), masked in [my_lo, full_lo) (keys left of some of its rows'
        windows) and in [full_hi, my_hi) (keys past some of its rows' diagonals), unmasked in between. Returns
        my_lo, full_lo, full_hi, my_end."""
        my_lo = gl.maximum(gl.maximum(first + causal_offset - window, 0) // BLOCK_N * BLOCK_N, lo)
        my_end = gl.maximum(gl.cdiv(my_hi, BLOCK_N) * BLOCK_N, my_lo)
        my_lo = gl.minimum(my_lo, my_end)
        # the last row's first key: tiles from there on are inside every row's window
        full_lo = gl.cdiv(gl.maximum(first + BLOCK_M - 1 + causal_offset - window, 0), BLOCK_N) * BLOCK_N
        full_lo = gl.maximum(gl.minimum(full_lo, full_hi), my_lo)
        return my_lo, full_lo, gl.maximum(full_hi, full_lo), my_end

    @gluon.jit
    def _window_query_range(first, lo, hi, full_lo, causal_offset, window, BLOCK_M: gl.constexpr,
                            BLOCK_N: gl.constexpr):
        """The backward's side of ``_window_key_range``: for BLOCK_N keys from ``first`` whose query tiles
        [full_lo, hi) need no causal mask, the tiles [full_lo, full_hi) see all of them and [full_hi, my_hi) some
        (past full_hi, the later rows' windows have left the first keys); tiles from my_hi on see none. Returns
        full_hi, my_hi."""
        # query i sees key j when j >= i + causal_offset - window, i.e. i <= j - causal_offset + window
        my_hi = gl.cdiv(gl.maximum(first + BLOCK_N - causal_offset + window, 0), BLOCK_M) * BLOCK_M
        my_hi = gl.maximum(gl.minimum(my_hi, hi), full_lo)
        full_hi = gl.maximum(first - causal_offset + window + 1, 0) // BLOCK_M * BLOCK_M
        full_hi = gl.maximum(gl.minimum(full_hi, my_hi), full_lo)
        return full_hi, my_hi

    @gluon.jit
    def _last_query_tile(start_n, KEYS: gl.constexpr, hi, causal_offset, window, WINDOW: gl.constexpr,
                         BLOCK_M: gl.constexpr):
        """The end of the query tiles (of BLOCK_M, at most hi) that see any of the KEYS keys from start_n: in a
        window, the later rows' windows have left them; else hi."""
        if WINDOW:
            return gl.minimum(gl.cdiv(gl.maximum(start_n + KEYS - causal_offset + window, 0), BLOCK_M) * BLOCK_M, hi)
        else:
            return hi

    # Softcap: s -> softcap * tanh(s / softcap) on the scaled scores. The kernels take softcap_scale =
    # softmax_scale / softcap into the tanh and softcap * log2(e) as their qk_scale, as FlashAttention-3 does, so
    # the cap costs one multiply and one tanh per score; the backward multiplies dS by tanh's derivative, 1 - t^2.

    @gluon.jit
    def _tanh(x):
        """tanh by the hardware's approximation (one MUFU instruction, relative error under 2^-10.9, as
        FlashAttention-3's softcap uses)."""
        return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=True,
                                         pack=1)
