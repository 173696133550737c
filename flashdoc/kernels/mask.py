"""The masking core: which scores every flashdoc kernel computes, which it masks, and how it changes them.

Every attention variant is a band of the (seqlen_q, seqlen_k) score matrix plus a change to the scores that
survive. Query row i sees key j when

    i + left_offset <= j <= i + right_offset        (and j < seqlen_k)

with each edge present or not (the ``IS_LOCAL`` and ``IS_CAUSAL`` compile-time flags). ``band`` derives the
two offsets from the public arguments: ``diag_offset`` is ``seqlen_k - seqlen_q`` for flash-attn's bottom-right
alignment and 0 for PyTorch's top-left one, causal is ``right_offset = diag_offset``, and a window
``(left, right)`` is ``left_offset = diag_offset - left``, ``right_offset = diag_offset + right``.

Kernel-side rules (``@triton.jit``; pure arithmetic on the scalars and tensors passed in, so a Gluon kernel can
call them too: Triton generates a called ``@triton.jit`` function with its caller's semantics):

- ``key_block_range(start_m, seqlen_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL)`` ->
  ``(lo, full_lo, full_hi, hi)``: the keys a tile of BLOCK_M query rows from ``start_m`` visits are
  ``[lo, hi)``; those in ``[full_lo, full_hi)`` (whole BLOCK_N tiles every row sees, all below seqlen_k) need
  no element mask; ``[lo, full_lo)`` and ``[full_hi, hi)`` do. Without IS_LOCAL, ``lo = full_lo = 0``.
- ``query_block_range(start_n, seqlen_q, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL)`` ->
  ``(lo, full_lo, full_hi, hi)``: the same for the query rows a tile of BLOCK_N keys from ``start_n`` is seen by
  (the backward's dK/dV direction); ``hi`` is rounded up to whole BLOCK_M tiles, rows past seqlen_q are in the
  masked part.
- ``mask_scores(s, rows, cols, seqlen_k, left_offset, right_offset, fill, KEY_END, IS_CAUSAL, IS_LOCAL)``: s
  with ``fill`` where row ``rows`` does not see key ``cols`` (rows and cols broadcast against s: ``offs_m[:,
  None]`` and ``offs_n[None, :]``, or transposed). KEY_END also masks ``cols >= seqlen_k``.
- ``mod_scores(qk, rows, cols, cap_in, cap_out, slope, alibi_offset, SOFTCAP, ALIBI, PRECISE)``: the raw
  product q.k changed so that ``result * softmax_scale`` is the score: softcap ``cap_out * tanh(qk * cap_in)``
  (``cap_in = scale / softcap``, ``cap_out = softcap / scale``) then ALiBi ``- slope / scale * |i + alibi_offset
  - j|``. Apply it before ``mask_scores`` (tanh(-inf) is not -inf). ``softcap_grad(capped, cap_in)`` is the
  tanh derivative the backward multiplies dS by.
- ``dropout_keep(seed, rng_offset, head, rows, cols, p_drop)``: the elements dropout keeps, from a counter-based
  Philox stream on (seed, rng_offset, head, row, column): the backward regenerates the same mask.

Host side: ``band(...)`` (the offsets and flags from the public arguments) and ``block_ranges(...)`` (the
ranges ``key_block_range`` gives each query tile, computed by a tiny kernel that calls it: for figures and tests).
"""

import functools
import inspect
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import INTERPRET, LOG2E, cdiv
from .launch import aligned, layout, on_device

_INTERPRETED: tl.constexpr = tl.constexpr(INTERPRET)


# ---------------------------------------------------------------------------------------------------------------
# Host side: a call's variant, and the kernel arguments it becomes
# ---------------------------------------------------------------------------------------------------------------

# The compile-time flags every kernel takes for the variants (each False for dense attention).
VARIANT_FLAGS = ("IS_CAUSAL", "IS_LOCAL", "SOFTCAP", "ALIBI", "DROPOUT")


class Variant(NamedTuple):
    """What a call asks for beyond ``softmax(scale * q k^T) v`` (causal and the alignment are passed apart).

    window_size: (left, right), -1 unbounded. softcap: 0 for none. alibi_slopes: (B, H) or (H,) fp32, or None.
    dropout_p: the probability of dropping. rng: the (seed, offset) int64 tensor on the device that dropout's
    Philox stream starts from (``draw_rng``), None without dropout.
    """

    window_size: tuple = (-1, -1)
    softcap: float = 0.0
    alibi_slopes: Optional[torch.Tensor] = None
    dropout_p: float = 0.0
    rng: Optional[torch.Tensor] = None

    def is_plain(self) -> bool:
        return (
            tuple(self.window_size) == (-1, -1)
            and self.softcap == 0.0
            and self.alibi_slopes is None
            and self.dropout_p == 0.0
        )

    def hopper_kwargs(self) -> dict:
        """The keyword arguments a Hopper launcher gets for this variant (none for a plain call)."""
        if self.is_plain():
            return {}
        return dict(window_size=tuple(self.window_size), softcap=self.softcap, alibi_slopes=self.alibi_slopes)


@functools.cache
def _takes_variants(supports) -> bool:
    return "window_size" in inspect.signature(supports).parameters


def hopper_supports(supports, q: torch.Tensor, causal: bool, variant: Variant) -> bool:
    """Whether a Hopper kernel whose predicate is ``supports`` runs this call. Dropout always runs on the
    portable kernels (the Gluon kernels have no Philox stream); another variant goes to Hopper only if
    ``supports`` takes the variant keywords and says yes (windows and softcap; ALiBi stays portable)."""
    if variant.is_plain():
        return supports(q, causal)
    if variant.dropout_p > 0.0 or not _takes_variants(supports):
        return False
    return supports(
        q,
        causal,
        window_size=tuple(variant.window_size),
        softcap=variant.softcap,
        alibi=variant.alibi_slopes is not None,
    )


def draw_rng(device: torch.device) -> torch.Tensor:
    """(seed, offset), int64 on ``device``, drawn from torch's default generator there: ``torch.manual_seed``
    reproduces a run. A tensor op, not a read of the generator's state, so torch.compile traces it as the random
    op it is, and no host sync waits for it."""
    return torch.randint(0, 2**62, (2,), device=device, dtype=torch.int64)


class VariantArgs(NamedTuple):
    """The kernels' runtime arguments for a variant, in their parameter order (None where a feature is off: Triton
    compiles a None argument as a constant, so a kernel without the feature keeps its old parameters)."""

    right_offset: int
    left_offset: Optional[int]
    cap_in: Optional[float]
    cap_out: Optional[float]
    slopes: Optional[torch.Tensor]
    alibi_offset: Optional[int]
    rng: Optional[torch.Tensor]
    p_drop: Optional[float]
    drop_scale: Optional[float]


def variant_args(
    variant: Variant, q: torch.Tensor, seqlen_k: int, softmax_scale: float, causal: bool, bottom_right: bool
) -> tuple:
    """(``VariantArgs``, compile-time flags ``VARIANT_FLAGS``) for a call with q: (B, Sq, H, D)."""
    batch, seqlen_q, n_heads = q.shape[0], q.shape[1], q.shape[2]
    is_causal, is_local, left_offset, right_offset = band(seqlen_q, seqlen_k, causal, variant.window_size, bottom_right)
    softcap, slopes, p_drop = variant.softcap, variant.alibi_slopes, variant.dropout_p
    if slopes is not None:  # divided by the scale, like the scores the kernels hold (see mod_scores)
        slopes = (slopes.float() / softmax_scale).expand(batch, n_heads).contiguous()
    args = VariantArgs(
        right_offset,
        left_offset if is_local else None,
        softmax_scale / softcap if softcap else None,
        softcap / softmax_scale if softcap else None,
        slopes,
        (seqlen_k - seqlen_q if bottom_right else 0) if slopes is not None else None,
        variant.rng if p_drop else None,
        p_drop if p_drop else None,
        1.0 / (1.0 - p_drop) if p_drop else None,
    )
    flags = dict(
        IS_CAUSAL=is_causal, IS_LOCAL=is_local, SOFTCAP=bool(softcap), ALIBI=slopes is not None, DROPOUT=bool(p_drop)
    )
    return args, flags


def variant_key(variant: Variant, band_args: VariantArgs) -> tuple:
    """What a launch plan (``launch.Plan``) depends on in a call's variant besides the shapes: its options, and
    the layout of the tensors it passes (the scaled ALiBi slopes, dropout's rng)."""
    slopes, rng = band_args.slopes, band_args.rng
    return (
        tuple(variant.window_size),
        variant.softcap,
        variant.dropout_p,
        None if slopes is None else (layout(slopes), aligned(slopes)),
        None if rng is None else aligned(rng),
    )


# ---------------------------------------------------------------------------------------------------------------
# The band: which scores exist
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:band]
def band(seqlen_q: int, seqlen_k: int, causal: bool, window_size=(-1, -1), bottom_right: bool = True):
    """(IS_CAUSAL, IS_LOCAL, left_offset, right_offset) for a call: query i sees key j when
    ``i + left_offset <= j <= i + right_offset``, each edge only where its flag is set.

    window_size: (left, right), -1 for unbounded, as flash-attn: a window at least seqlen_k wide on one side is
    unbounded there, and ``causal`` sets right = 0. bottom_right: align the diagonal to the bottom-right corner
    (flash-attn) rather than the top-left one (PyTorch).
    """
    left, right = window_size
    left = -1 if left >= seqlen_k else left
    right = -1 if right >= seqlen_k else right
    if causal:
        right = 0
    diag_offset = seqlen_k - seqlen_q if bottom_right else 0
    is_causal, is_local = right >= 0, left >= 0
    return (is_causal, is_local, diag_offset - left if is_local else 0, diag_offset + right if is_causal else 0)


# --8<-- [end:band]


# --8<-- [start:key_block_range]
@triton.jit
def key_block_range(
    start_m,
    seqlen_k,
    left_offset,
    right_offset,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
    tile=None,
):
    """(lo, full_lo, full_hi, hi): the keys rows [start_m, start_m + BLOCK_M) visit, and the whole tiles among
    them that every row sees (no element mask). See the module docstring.

    tile: the tile's index, for a caller whose start_m is tile * BLOCK_M and which wants the tile's end computed
    as (tile + 1) * BLOCK_M (the forward kernel: the integer arithmetic it was tuned with)."""
    if IS_CAUSAL:
        # row start_m sees keys <= start_m + right_offset, and so does every row below it
        full_hi = tl.maximum(start_m + right_offset + 1, 0) // BLOCK_N * BLOCK_N
        full_hi = tl.minimum(full_hi, seqlen_k // BLOCK_N * BLOCK_N)
        end_m = start_m + BLOCK_M if tile is None else (tile + 1) * BLOCK_M
        hi = tl.minimum(end_m + right_offset, seqlen_k)
    else:
        full_hi = seqlen_k // BLOCK_N * BLOCK_N
        hi = seqlen_k
    if IS_LOCAL:
        # the last row sees keys >= start_m + BLOCK_M - 1 + left_offset, and so does every row above it
        lo = tl.maximum(start_m + left_offset, 0) // BLOCK_N * BLOCK_N
        hi = tl.maximum(hi, lo)
        full_lo = tl.cdiv(tl.maximum(start_m + (BLOCK_M - 1) + left_offset, 0), BLOCK_N) * BLOCK_N
        full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
        full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    else:
        lo = 0
        full_lo = 0
    return lo, full_lo, full_hi, hi


# --8<-- [end:key_block_range]


@triton.jit
def left_edge_one_sided(start_m, full_lo, right_offset, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """Whether the left-edge tiles [lo, full_lo) that ``key_block_range`` gives rows from start_m need only the
    window's left edge masked: when full_lo is a tile boundary, the tiles hold no key past it (and so none past
    seqlen_k), and if the first row sees every key below it from the right, every row does. (full_lo is cut to hi,
    off the tile grid, where the keys end before the last row's window starts.) The diagonal tiles [full_hi, hi)
    never need the left edge: full_hi >= full_lo lies past the last row's left edge, or the range is empty."""
    one_sided = full_lo % BLOCK_N == 0
    if IS_CAUSAL:
        one_sided = one_sided & (full_lo <= start_m + right_offset + 1)
    return one_sided


@triton.jit
def query_block_range(
    start_n,
    seqlen_q,
    left_offset,
    right_offset,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
):
    """(lo, full_lo, full_hi, hi): the query rows that see keys [start_n, start_n + BLOCK_N), in BLOCK_M tiles,
    and the tiles among them whose rows all see every one of these keys and lie below seqlen_q (no mask)."""
    q_even_hi = seqlen_q // BLOCK_M * BLOCK_M
    if IS_CAUSAL:
        # row i sees key j when i >= j - right_offset: rows before `lo` see none of these keys, rows from
        # `full_lo` on see all of them
        lo = tl.maximum(start_n - right_offset, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - right_offset, 0), BLOCK_M) * BLOCK_M
        full_lo = tl.minimum(full_lo, q_even_hi)
        lo = tl.minimum(lo, full_lo)
    else:
        lo = 0
        full_lo = 0
    full_hi = q_even_hi
    hi = tl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M
    if IS_LOCAL:
        # row i sees key j when i <= j - left_offset: rows up to start_n - left_offset see all of these keys,
        # rows past start_n + BLOCK_N - 1 - left_offset none
        hi = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - left_offset, 0), BLOCK_M) * BLOCK_M, hi)
        hi = tl.maximum(hi, lo)
        full_hi = tl.minimum(tl.maximum(start_n - left_offset + 1, 0) // BLOCK_M * BLOCK_M, full_hi)
        full_lo = tl.minimum(full_lo, hi)
        full_hi = tl.maximum(full_hi, full_lo)
    return lo, full_lo, full_hi, hi


# --8<-- [start:mask_scores]
@triton.jit
def mask_scores(
    s,
    rows,
    cols,
    seqlen_k,
    left_offset,
    right_offset,
    fill: tl.constexpr,
    KEY_END: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
):
    """s with ``fill`` where query ``rows`` does not see key ``cols`` (both broadcast against s); KEY_END also
    masks keys past seqlen_k. Only boundary tiles call this (see ``key_block_range``)."""
    if KEY_END:
        keep = cols < seqlen_k
        if IS_CAUSAL:
            keep = keep & (cols <= rows + right_offset)
        if IS_LOCAL:
            keep = keep & (cols >= rows + left_offset)
        s = tl.where(keep, s, fill)
    elif IS_CAUSAL:
        keep = cols <= rows + right_offset
        if IS_LOCAL:
            keep = keep & (cols >= rows + left_offset)
        s = tl.where(keep, s, fill)
    elif IS_LOCAL:
        s = tl.where(cols >= rows + left_offset, s, fill)
    return s


# --8<-- [end:mask_scores]

# ---------------------------------------------------------------------------------------------------------------
# Score modifications
# ---------------------------------------------------------------------------------------------------------------


@triton.jit
def _tanh(x, PRECISE: tl.constexpr):
    if _INTERPRETED:
        # the interpreter has no libdevice: 1 - 2 / (e^2x + 1), exact at both ends (e^2x = inf or 0)
        e = tl.exp(2.0 * x)
        return 1.0 - 2.0 / (e + 1.0)
    elif PRECISE:
        return libdevice.tanh(x)
    else:
        # one MUFU instruction, relative error about 2^-11 (what flash-attn uses): fp16's rounding, 1/8 of bf16's
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


# --8<-- [start:softcap]
@triton.jit
def softcap(qk, cap_in, cap_out, PRECISE: tl.constexpr):
    """``cap_out * tanh(qk * cap_in)``: with cap_in = scale / softcap and cap_out = softcap / scale, times the
    softmax scale this is ``softcap * tanh(scale * qk / softcap)``."""
    return cap_out * _tanh(qk * cap_in, PRECISE)


@triton.jit
def softcap_grad(capped, cap_in):
    """d capped / d qk, in the units of the scaled score: 1 - tanh^2, where tanh = capped * cap_in."""
    t = capped * cap_in
    return 1.0 - t * t


# --8<-- [end:softcap]

# A capped score's exponent is bounded: with t = tanh(...) in [-1, 1] it is t * C, C = softcap * log2(e). So the
# online softmax's running row max can be a constant, m = C - EXPONENT_HEADROOM, that no exponent outgrows: every
# probability 2^(t C - m) lies in [2^(HEADROOM - 2C), 2^HEADROOM], and the accumulator is never rescaled. That
# needs the whole range in normal floating point: an fp32 sum, and P in bf16, which has fp32's exponent range
# (fp16's stops at 2^16), down to 2^-126, so 2C <= 126 + HEADROOM (softcap up to about 65; Gemma 2 uses 50). The
# sums stay finite while keys * |v| < 2^64.
EXPONENT_HEADROOM: tl.constexpr = tl.constexpr(64.0)
_MIN_NORMAL_EXPONENT = -126.0


def bounded_exponent(softcap: float, dtype: torch.dtype) -> bool:
    """Whether a softcapped forward in ``dtype`` may fix its row max at softcap * log2(e) - EXPONENT_HEADROOM
    instead of keeping a running one (the Hopper forward's BOUNDED_EXPONENT)."""
    cap = softcap * LOG2E
    return softcap > 0 and dtype == torch.bfloat16 and EXPONENT_HEADROOM.value - 2 * cap >= _MIN_NORMAL_EXPONENT


# --8<-- [start:mod_scores]
@triton.jit
def alibi(qk, rows, cols, slope, alibi_offset):
    """qk minus ``slope * |i + alibi_offset - j|`` (slope already divided by the softmax scale)."""
    return qk - slope * tl.abs(rows + alibi_offset - cols).to(tl.float32)


@triton.jit
def mod_scores(
    qk,
    rows,
    cols,
    cap_in,
    cap_out,
    slope,
    alibi_offset,
    SOFTCAP: tl.constexpr,
    ALIBI: tl.constexpr,
    PRECISE: tl.constexpr,
):
    """Softcap, then the ALiBi bias, as flash-attn orders them (see the module docstring)."""
    if SOFTCAP:
        qk = softcap(qk, cap_in, cap_out, PRECISE)
    if ALIBI:
        qk = alibi(qk, rows, cols, slope, alibi_offset)
    return qk


# --8<-- [end:mod_scores]

# ---------------------------------------------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:dropout_keep]
@triton.jit
def dropout_keep(seed, rng_offset, head, rows, cols, p_drop):
    """True where dropout keeps P[row, col] of (batch * heads + head) ``head``: one Philox draw per element
    from the counter (col, row, head, rng_offset) under ``seed``. The counter names the element, so any program,
    forward or backward, in any tile order, regenerates the same mask without storing it."""
    r, _, _, _ = tl.philox(
        seed,
        cols.to(tl.uint32, bitcast=True),
        rows.to(tl.uint32, bitcast=True),
        head.to(tl.uint32, bitcast=True),
        rng_offset.to(tl.uint32),
    )
    return tl.uint_to_uniform_float(r) >= p_drop


# --8<-- [end:dropout_keep]

# ---------------------------------------------------------------------------------------------------------------
# Host helpers for figures and tests
# ---------------------------------------------------------------------------------------------------------------


@triton.jit
def _block_ranges_kernel(
    OUT,
    seqlen_k,
    left_offset,
    right_offset,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
):
    pid = tl.program_id(0)
    lo, full_lo, full_hi, hi = key_block_range(
        pid * BLOCK_M, seqlen_k, left_offset, right_offset, BLOCK_M, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    tl.store(OUT + pid * 4, lo)
    tl.store(OUT + pid * 4 + 1, full_lo)
    tl.store(OUT + pid * 4 + 2, full_hi)
    tl.store(OUT + pid * 4 + 3, hi)


def block_ranges(
    seqlen_q: int,
    seqlen_k: int,
    block_m: int,
    block_n: int,
    causal: bool = False,
    window_size=(-1, -1),
    bottom_right: bool = True,
) -> torch.Tensor:
    """(query tiles, 4) int32 on the CPU: ``key_block_range``'s (lo, full_lo, full_hi, hi) for every tile of
    block_m query rows, computed by a kernel that calls it (so a figure or test shows the rule the kernels run).
    The kernel runs where flashdoc's kernels do: the GPU, or the interpreter on a machine without one."""
    is_causal, is_local, left_offset, right_offset = band(seqlen_q, seqlen_k, causal, window_size, bottom_right)
    n_tiles = cdiv(seqlen_q, block_m)
    out = torch.empty((n_tiles, 4), dtype=torch.int32, device="cpu" if INTERPRET else "cuda")
    _block_ranges_kernel[(n_tiles,)](out, seqlen_k, left_offset, right_offset, block_m, block_n, is_causal, is_local)
    return out.cpu()


@triton.jit
def _dropout_mask_kernel(OUT, RNG, seqlen_q, seqlen_k, p_drop, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    head = tl.program_id(2)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    keep = dropout_keep(tl.load(RNG), tl.load(RNG + 1), head, rows, cols, p_drop)
    tl.store(
        OUT + (head.to(tl.int64) * seqlen_q + rows) * seqlen_k + cols,
        keep.to(tl.int8),
        mask=(rows < seqlen_q) & (cols < seqlen_k),
    )


def dropout_mask(
    rng: torch.Tensor, batch: int, nheads: int, seqlen_q: int, seqlen_k: int, dropout_p: float
) -> torch.Tensor:
    """(batch, nheads, seqlen_q, seqlen_k) bool: the elements a call with this ``rng`` (``draw_rng``) and
    dropout_p keeps, regenerated by the kernels' own ``dropout_keep``. For tests and figures: to reproduce a
    call's mask, ``torch.manual_seed(s)`` before the call and again before ``draw_rng(device)``."""
    out = torch.empty((batch, nheads, seqlen_q, seqlen_k), dtype=torch.int8, device=rng.device)
    grid = (cdiv(seqlen_q, 32), cdiv(seqlen_k, 32), batch * nheads)
    with on_device(rng.device):
        _dropout_mask_kernel[grid](out, rng, seqlen_q, seqlen_k, float(dropout_p), 32, 32)
    return out.bool()
