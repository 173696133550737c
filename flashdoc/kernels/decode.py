"""Decoding: attention of a few new queries against a long KV cache (FlashDecoding), and the cache append.

Three kernels, launched in this order for one call of ``flash_attn_with_kvcache`` (``append_kv``, then
``decode_attention``):

1. ``_append_kv`` writes the new keys and values into the cache at each sequence's length, applying the rotary
   embedding to the new keys (and to the queries) on the way. One program per (batch, new position).
2. ``_split_kv`` computes attention over one *split* of the cache: the key range of each sequence is cut into
   ``num_splits`` parts that run in parallel, each writing a partial output normalised over its own keys and
   that part's log-sum-exp. Query heads that share a KV head (GQA/MQA) and the query positions are packed into
   the rows of one tile, so each K and V tile is read from memory once per KV head.
3. ``_merge_splits`` combines the partial outputs with their log-sum-exps into the exact result. With one split
   the attention kernel writes the result itself and this kernel is not launched.

Which keys each query row sees (causal, sliding window) and how its scores change (softcap, ALiBi) is the
masking core's rule (``mask.py``), applied with each sequence's own diagonal, which only the GPU knows.

On Hopper, a plain decode step over pages of 16 rows runs ``decode_hopper``'s Gluon kernel in place of
``_split_kv`` (``hopper_takes``), with the same split heuristic, partial outputs and merge.

Caches are paged or contiguous, and both are read the same way: a contiguous cache (batch, seqlen, Hk, D) is a
paged cache whose pages are whole sequences, page ``cache_batch_idx[b]`` (or ``b``) of length seqlen.

Nothing here reads a device value on the host: the number of splits and every launch grid follow from tensor
shapes, and the sequence lengths are read inside the kernels, so a decode step can be captured in a CUDA graph.

The file reads like the other kernel files: tuning constants, kernels, launch functions.
"""

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import INTERPRET, LOG2E, cdiv, decode_hopper, next_power_of_2
from .common import block_d_for, dot_precision
from .forward_hopper import gluon_runs
from .launch import (
    aligned,
    descriptor_ready,
    device_index,
    head_tiles,
    launch,
    launch_gluon,
    launch_signature,
    no_launch_hooks,
    on_device,
    plan_cache,
)
from .mask import band, key_block_range, mask_scores, mod_scores

# ---------------------------------------------------------------------------------------------------------------
# Tuning constants
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeConfig:
    """One configuration of the split-KV kernel.

    block_n: keys per tile. Each program streams tiles of BLOCK_N keys of one KV head.
    warps, stages: Triton's num_warps and num_stages (tiles of K and V in flight per program: the loads of the
        next ``stages - 1`` tiles are issued before the current one is used, which is what keeps enough bytes
        in flight per SM to reach the memory bandwidth).
    programs_per_sm: how many of these programs one SM holds at once (shared memory: stages x 2 tiles of
        BLOCK_N x D); the split heuristic fills ``SMs x programs_per_sm`` slots.
    """

    block_n: int
    warps: int
    stages: int
    programs_per_sm: int

    def triton_config(self, paged: bool) -> triton.Config:
        # Triton's pipeliner gives the block-table load (whose result addresses K and V) stages of its own: for
        # the same K and V buffers as a contiguous cache, a paged one needs two more (the shared memory that
        # `benchmarks/decode.py --aot` prints for both: stages 3 contiguous = stages 5 paged = 2 buffers each).
        return triton.Config(
            {"BLOCK_N": self.block_n},
            num_warps=self.warps,
            num_stages=self.stages + (PAGED_EXTRA_STAGES if paged else 0),
        )


# Keyed by (padded head dim, whether the grid fills the GPU without splits). Each program keeps ``stages - 1``
# tiles of BLOCK_N keys and values in flight. At d = 128, the winners of ``benchmarks/decode.py --sweep`` on the
# H200 (figures in benchmarks/FINDINGS.md): 128-key tiles, one program per SM, 4 warps where splits fill the GPU
# and 8 where the batch does. d = 64 and 256 keep the first choice's bytes per tile (not swept).
DECODE_CONFIGS = {
    (64, False): DecodeConfig(block_n=128, warps=4, stages=3, programs_per_sm=2),
    (64, True): DecodeConfig(block_n=128, warps=4, stages=3, programs_per_sm=2),
    (128, False): DecodeConfig(block_n=128, warps=4, stages=3, programs_per_sm=1),
    (128, True): DecodeConfig(block_n=128, warps=8, stages=3, programs_per_sm=1),
    (256, False): DecodeConfig(block_n=32, warps=4, stages=3, programs_per_sm=2),
    (256, True): DecodeConfig(block_n=32, warps=4, stages=3, programs_per_sm=2),
}
# Paged caches that ran faster with other entries, keyed (padded head dim, page size, grid fills the GPU): pages
# of 16 and 64 rows want 64-key tiles, and fewer in flight where the batch fills the GPU (timed as CUDA graphs).
TUNED_CONFIGS = {
    (128, 16, False): DecodeConfig(block_n=64, warps=4, stages=3, programs_per_sm=2),
    (128, 16, True): DecodeConfig(block_n=64, warps=4, stages=2, programs_per_sm=1),
    (128, 64, False): DecodeConfig(block_n=64, warps=4, stages=3, programs_per_sm=2),
    (128, 64, True): DecodeConfig(block_n=64, warps=4, stages=2, programs_per_sm=1),
}

# Pages of 16 rows go to the Gluon kernel on Hopper (``decode_hopper``) where the split heuristic, not the batch,
# fills the GPU: it reads a 128-key tile as one TMA box a page into one buffer, where ``_split_kv`` computes an
# address a row. Timed on an H100 under CUDA graphs against the package's contiguous call at 1 x 4k, 1 x 32k, 8 x 4k
# and 1 x 128k (benchmarks/FINDINGS.md), it ran at 0.957-0.963x with one tile in flight, where ``_split_kv`` ran at
# 0.897-0.955x; deeper rings of small boxes ran slower. Over pages of 32 it gained at 1 x 4k only, and the batches
# that fill the GPU were not timed: both stay on ``_split_kv``.
HOPPER_PAGED_CONFIG = DecodeConfig(block_n=128, warps=4, stages=2, programs_per_sm=1)
HOPPER_PAGE_SIZES = (16,)

PAGED_EXTRA_STAGES = 2
# flash-attn's cap on splits: more would make the merge cost more than the split saves.
MAX_SPLITS = 128
# Query rows (heads of one group x query positions) per tile: beyond this, the packed rows are cut into tiles.
MAX_BLOCK_M = 64
# Splits merged per step of the merge kernel's loop.
MERGE_CHUNK = 16

# Under the interpreter every program runs in numpy one after another: large tiles mean few steps.
CPU_DECODE_CONFIG = DecodeConfig(block_n=32, warps=4, stages=1, programs_per_sm=1)


def table_config(head_dim: int, page_size: int = 0, fills_gpu: bool = False) -> DecodeConfig:
    """The GPU table's entry for this head dim, page size (0: a contiguous cache) and regime (``fills_gpu``)."""
    d = max(64, block_d_for(head_dim))
    return TUNED_CONFIGS.get((d, page_size, fills_gpu), DECODE_CONFIGS[d, fills_gpu])


def fills_gpu(programs: int, device_index: int) -> bool:
    """Whether a grid of ``programs`` (batch x KV heads x query tiles) gives every SM one without splits: the
    regime ``TUNED_CONFIGS`` is keyed on."""
    return programs >= num_sms(device_index)


def decode_config(head_dim: int, dtype: torch.dtype, page_size: int = 0, fills_gpu: bool = False) -> DecodeConfig:
    """The split-KV configuration for this head dim, cache dtype and page size (0: a contiguous cache), for a grid
    that fills the GPU without splits or not (``fills_gpu``): the GPU tables, or the CPU tiles."""
    if INTERPRET:
        return CPU_DECODE_CONFIG
    config = table_config(head_dim, page_size, fills_gpu)
    if dtype == torch.float32:  # 4-byte elements: the same bytes per tile with half the keys
        config = DecodeConfig(max(16, config.block_n // 2), config.warps, config.stages, config.programs_per_sm)
    return config


# --8<-- [start:num_splits_heuristic]
@functools.lru_cache(maxsize=1024)  # a decode loop asks the same question every step
def num_splits_heuristic(programs: int, slots: int, n_blocks: int, max_splits: int = MAX_SPLITS) -> int:
    """How many splits to cut each sequence's keys into. programs: programs per split (batch x KV heads x query
    tiles); slots: programs the GPU runs at once (SMs x programs per SM); n_blocks: key tiles in the longest
    sequence the cache holds.

    No split when the grid nearly fills the GPU already. Where two or more splits fit in one wave, the most that
    do (a second wave would pay each program's fixed cost again), and of the counts that cut the tiles as finely
    (64 tiles in 11 or 12 splits are both 6 a split), the fewest. Otherwise flash-attn's ``last_wave_splits``.
    """
    if programs >= 0.8 * slots:
        return 1
    one_wave = min(max_splits, slots, n_blocks, slots // programs)
    if one_wave >= 2:
        return cdiv(n_blocks, cdiv(n_blocks, one_wave))
    return last_wave_splits(programs, slots, n_blocks, max_splits)


# --8<-- [end:num_splits_heuristic]


def last_wave_splits(programs: int, slots: int, n_blocks: int, max_splits: int = MAX_SPLITS) -> int:
    """flash-attn's split count (``flash_api.cpp``): for each split count, the *efficiency of the last wave* (with
    ``w = programs x splits / slots`` waves the GPU is busy ``w / ceil(w)`` of the time), and the smallest count
    within 85% of the best. Split counts that cut the tiles as the one before does are skipped."""
    if programs >= 0.8 * slots:
        return 1
    max_splits = min(max_splits, slots, n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or cdiv(n_blocks, s) != cdiv(n_blocks, s - 1)

    efficiency = {s: programs * s / slots / cdiv(programs * s, slots) for s in range(1, max_splits + 1) if eligible(s)}
    best = max(efficiency.values(), default=1.0)
    return next((s for s, e in efficiency.items() if e >= 0.85 * best), 1)


@functools.cache
def num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


# ---------------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------------


# A tile over at most this many whole pages looks each page up once and spreads it over the page's rows (a layout
# conversion through shared memory); over more pages, each row looks its own page up. Timed as CUDA graphs
# (benchmarks/kernels/paged_lookup.py, benchmarks/FINDINGS.md): over 64-key tiles of pages of 16, one lookup a
# page was 0.3-1.4 points faster than one a row at the small split points on an H100 and within 0.7 either way at
# the large points on the H200; over 128-key tiles it was 4 points faster for pages of 64 and slower for pages of
# 16, where the conversion costs more than the eight lookups it saves.
MAX_PAGES_PER_LOOKUP: tl.constexpr = tl.constexpr(4)


@triton.jit
def _cache_rows(
    BLOCK_TABLE,
    stride_tb,
    max_pages,
    cache_page,
    cache_len,
    off_b,
    pos,
    PAGED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    TILE_ROWS: tl.constexpr,
):
    """(page, row in page, valid) of cache positions ``pos`` of sequence ``off_b``.

    Paged: the page is ``BLOCK_TABLE[off_b, pos // PAGE_SIZE]``. TILE_ROWS > 0: ``pos`` is a tile of that many
    consecutive positions from a multiple of TILE_ROWS, so it lies within one page (one lookup serves it) or covers
    whole pages (one lookup a page, up to MAX_PAGES_PER_LOOKUP of them); otherwise each row looks its page up.
    Contiguous: one page per sequence, ``cache_page``, of ``cache_len`` rows (the cache's seqlen, a runtime
    value: a new cache length compiles nothing new). Positions past the pages the table holds, or past the
    contiguous cache, are not valid (never read, never written).
    """
    if PAGED:
        logical = pos // PAGE_SIZE
        valid = logical < max_pages
        if TILE_ROWS == 0:
            page = tl.load(BLOCK_TABLE + off_b * stride_tb + logical, mask=valid, other=0)
        elif PAGE_SIZE % TILE_ROWS == 0:  # one lookup for the tile: its first row's page
            first = tl.min(logical, 0)
            page = tl.load(BLOCK_TABLE + off_b * stride_tb + first, mask=first < max_pages, other=0)
            page = tl.zeros_like(pos) + page
        elif TILE_ROWS % PAGE_SIZE == 0 and TILE_ROWS // PAGE_SIZE <= MAX_PAGES_PER_LOOKUP:
            PAGES: tl.constexpr = TILE_ROWS // PAGE_SIZE
            entry = tl.min(logical, 0) + tl.arange(0, PAGES)
            pages = tl.load(BLOCK_TABLE + off_b * stride_tb + entry, mask=entry < max_pages, other=0)
            page = tl.reshape(tl.broadcast_to(pages[:, None], (PAGES, PAGE_SIZE)), (TILE_ROWS,))
        else:
            page = tl.load(BLOCK_TABLE + off_b * stride_tb + logical, mask=valid, other=0)
        return page.to(tl.int64), pos % PAGE_SIZE, valid
    return (tl.zeros_like(pos) + cache_page).to(tl.int64), pos, pos < cache_len


@triton.jit
def _rotate(
    x,
    X_PARTNER_PTR,
    partner_mask,
    COS,
    SIN,
    stride_cs,
    seqlen_ro,
    position,
    offs_d,
    rotary_dim,
    INTERLEAVED: tl.constexpr,
):
    """The rotary embedding of rows ``x`` (R, BLOCK_D) at integer ``position`` (R,): each pair of dimensions
    (2i, 2i + 1) when INTERLEAVED (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX), turns by the angle whose
    cos and sin are ``COS[position, i]``, ``SIN[position, i]``. Dimensions from rotary_dim on are kept.
    X_PARTNER_PTR: pointers to each element's partner in its pair (loaded here, in fp32).

    A position at or past the tables' ``seqlen_ro`` rows (a cache_seqlens value past the cache, which a GPU call
    does not check) reads no table: the row is left unrotated, as flash-attn's rotary kernel leaves it."""
    half = rotary_dim // 2
    if INTERLEAVED:
        pair = offs_d // 2
        first = (offs_d % 2) == 0
    else:
        pair = offs_d % half
        first = offs_d < half
    rotated = offs_d < rotary_dim
    m = partner_mask & rotated[None, :]
    partner = tl.load(X_PARTNER_PTR, mask=m, other=0.0).to(tl.float32)
    cs_offs = position[:, None] * stride_cs + pair[None, :]
    in_table = m & (position < seqlen_ro)[:, None]
    cos = tl.load(COS + cs_offs, mask=in_table, other=1.0).to(tl.float32)
    sin = tl.load(SIN + cs_offs, mask=in_table, other=0.0).to(tl.float32)
    sign = tl.where(first, -1.0, 1.0)
    out = x * cos + sign[None, :] * partner * sin
    return tl.where(rotated[None, :], out, x)


@triton.jit(
    do_not_specialize=[
        "seqlen_ro",
        "seqlen_new",
        "seqlen_q",
        "max_pages",
        "cache_len",
        "cache_seqlen_const",
        "rotary_dim",
    ]
)
def _append_kv(
    Q,
    K_NEW,
    V_NEW,
    Q_ROT,
    K_CACHE,
    V_CACHE,
    CACHE_SEQLENS,
    CACHE_BATCH_IDX,
    BLOCK_TABLE,
    COS,
    SIN,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_nb,
    stride_ns,
    stride_nh,
    stride_vnb,
    stride_vns,
    stride_vnh,
    stride_rb,
    stride_rs,
    stride_rh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_tb,
    stride_cs,
    seqlen_ro,
    n_heads,
    n_kv_heads,
    seqlen_new,
    seqlen_q,
    max_pages,
    cache_len,
    cache_seqlen_const,
    rotary_dim,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    PAGED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    HAS_BATCH_IDX: tl.constexpr,
    SEQLENS_TENSOR: tl.constexpr,
    APPEND: tl.constexpr,
    ROTARY: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    Q_POS_PER_ROW: tl.constexpr,
):
    """Program (s, b): write new key/value position s of sequence b into the cache at its length
    ``cache_seqlens[b] + s`` (rotating the key first), and with ROTARY rotate query position s into Q_ROT.

    Queries rotate at ``cache_seqlens[b] + s`` when Q_POS_PER_ROW (causal or windowed attention, where each query
    has its own position), else all at ``cache_seqlens[b]``, as flash-attn does.
    """
    s = tl.program_id(0)
    off_b = tl.program_id(1)
    if SEQLENS_TENSOR:
        base = tl.load(CACHE_SEQLENS + off_b).to(tl.int32)
    else:
        base = cache_seqlen_const
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    if APPEND:
        if s < seqlen_new:
            offs_h = tl.arange(0, BLOCK_HK)
            row_ok = (offs_h < n_kv_heads)[:, None] & d_ok[None, :]
            pos = base + s + tl.zeros_like(offs_h)
            if HAS_BATCH_IDX:
                cache_page = tl.load(CACHE_BATCH_IDX + off_b).to(tl.int64)
            else:
                cache_page = off_b.to(tl.int64)
            page, row, valid = _cache_rows(
                BLOCK_TABLE, stride_tb, max_pages, cache_page, cache_len, off_b, pos, PAGED, PAGE_SIZE, 0
            )
            m = row_ok & valid[:, None]
            k_src = K_NEW + off_b.to(tl.int64) * stride_nb + s * stride_ns + offs_h[:, None] * stride_nh
            k = tl.load(k_src + offs_d[None, :], mask=row_ok, other=0.0).to(tl.float32)
            if ROTARY:
                partner = offs_d ^ 1 if INTERLEAVED else (offs_d + rotary_dim // 2) % rotary_dim
                k = _rotate(
                    k,
                    k_src + partner[None, :],
                    row_ok,
                    COS,
                    SIN,
                    stride_cs,
                    seqlen_ro,
                    pos,
                    offs_d,
                    rotary_dim,
                    INTERLEAVED,
                )
            dst = page.to(tl.int64)[:, None] * stride_kp + row[:, None] * stride_ks + offs_h[:, None] * stride_kh
            tl.store(K_CACHE + dst + offs_d[None, :], k.to(K_CACHE.dtype.element_ty), mask=m)
            v_src = V_NEW + off_b.to(tl.int64) * stride_vnb + s * stride_vns + offs_h[:, None] * stride_vnh
            v = tl.load(v_src + offs_d[None, :], mask=row_ok, other=0.0)
            dst = page.to(tl.int64)[:, None] * stride_vp + row[:, None] * stride_vs + offs_h[:, None] * stride_vh
            tl.store(V_CACHE + dst + offs_d[None, :], v.to(V_CACHE.dtype.element_ty), mask=m)
    if ROTARY:
        if s < seqlen_q:
            offs_h = tl.arange(0, BLOCK_H)
            row_ok = (offs_h < n_heads)[:, None] & d_ok[None, :]
            q_src = Q + off_b.to(tl.int64) * stride_qb + s * stride_qs + offs_h[:, None] * stride_qh
            q = tl.load(q_src + offs_d[None, :], mask=row_ok, other=0.0).to(tl.float32)
            q_pos = base + tl.zeros_like(offs_h)
            if Q_POS_PER_ROW:
                q_pos += s
            partner = offs_d ^ 1 if INTERLEAVED else (offs_d + rotary_dim // 2) % rotary_dim
            q = _rotate(
                q,
                q_src + partner[None, :],
                row_ok,
                COS,
                SIN,
                stride_cs,
                seqlen_ro,
                q_pos,
                offs_d,
                rotary_dim,
                INTERLEAVED,
            )
            dst = Q_ROT + off_b.to(tl.int64) * stride_rb + s * stride_rs + offs_h[:, None] * stride_rh
            tl.store(dst + offs_d[None, :], q.to(Q_ROT.dtype.element_ty), mask=row_ok)


# --8<-- [start:split_kv_kernel]
@triton.jit(
    do_not_specialize=[
        "seqlen_q",
        "max_pages",
        "cache_len",
        "left_rel",
        "right_rel",
        "cache_seqlen_const",
        "seqlen_new",
    ]
)
def _split_kv(
    Q,
    K_CACHE,
    V_CACHE,
    CACHE_SEQLENS,
    CACHE_BATCH_IDX,
    BLOCK_TABLE,
    CACHE_LEFTPAD,
    O,
    LSE,
    O_PART,
    LSE_PART,
    SLOPES,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_tb,
    stride_ob,
    stride_os,
    stride_oh,
    n_kv_heads,
    seqlen_q,
    max_pages,
    cache_len,
    cache_seqlen_const,
    seqlen_new,
    qk_scale,
    left_rel,
    right_rel,
    cap_in,
    cap_out,
    K_TILES,
    V_TILES,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    PAGED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    HAS_BATCH_IDX: tl.constexpr,
    SEQLENS_TENSOR: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_LOCAL: tl.constexpr,
    SOFTCAP: tl.constexpr,
    ALIBI: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    HAS_LEFTPAD: tl.constexpr = False,
    TMA_PAGES: tl.constexpr = False,
):
    """Program (b x KV head, query tile, split): the query tile's packed rows over one split of sequence b's keys.

    Row r of the tile is query position ``r // GROUP`` (from the tile's first) of query head
    ``kv_head x GROUP + r % GROUP``. Keys: cache positions [0, cache_seqlens[b] + seqlen_new), or with
    HAS_LEFTPAD from ``CACHE_LEFTPAD[b]`` on, numbered from there (flash-attn's ``cache_leftpad``: the masks and
    ALiBi see only the keys after the padding). The masking core (``mask.py``) decides which keys each row sees
    and how its scores change, with this sequence's own diagonal: the band's offsets arrive relative to it
    (``left_rel``, ``right_rel``). With SPLIT the program writes its partial output and log-sum-exp for
    ``_merge_splits``; without, the final ones. The split count is the grid's third axis, a runtime value:
    changing it compiles nothing. With TMA_PAGES (pages that hold whole tiles) each tile of K and of V is one TMA
    box of its page, read through the host descriptors K_TILES and V_TILES: one table entry a tile and no address
    a row, where the per-row addresses were most of a paged tile's instructions.
    """
    Q_PER_TILE: tl.constexpr = BLOCK_M // GROUP
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    num_splits = tl.num_programs(2)
    off_b = pid_bh // n_kv_heads
    off_hk = pid_bh % n_kv_heads
    if SEQLENS_TENSOR:
        seqlen_k = tl.load(CACHE_SEQLENS + off_b).to(tl.int32) + seqlen_new
    else:
        seqlen_k = cache_seqlen_const + seqlen_new
    if PAGED:
        seqlen_k = tl.minimum(seqlen_k, max_pages * PAGE_SIZE)  # never read past the pages the table holds
    else:
        seqlen_k = tl.minimum(seqlen_k, cache_len)
    if HAS_LEFTPAD:  # the sequence starts at row `pad` of its cache: key j is row pad + j
        pad = tl.load(CACHE_LEFTPAD + off_b).to(tl.int32)
        seqlen_k = seqlen_k - pad
    if HAS_BATCH_IDX:
        cache_page = tl.load(CACHE_BATCH_IDX + off_b).to(tl.int64)
    else:
        cache_page = off_b.to(tl.int64)

    offs_r = tl.arange(0, BLOCK_M)
    offs_i = pid_m * Q_PER_TILE + offs_r // GROUP  # query position
    offs_h = off_hk * GROUP + offs_r % GROUP  # query head
    row_ok = (offs_r < Q_PER_TILE * GROUP) & (offs_i < seqlen_q)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q_ptrs = (
        Q + off_b.to(tl.int64) * stride_qb + offs_i[:, None] * stride_qs + offs_h[:, None] * stride_qh + offs_d[None, :]
    )
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    n_heads = n_kv_heads * GROUP
    slope = 0.0
    if ALIBI:
        slope = tl.load(SLOPES + off_b * n_heads + offs_h, mask=row_ok, other=0.0)[:, None]

    # The band of this sequence: query i sees key j when i + left_offset <= j <= i + right_offset, with the
    # diagonal at the bottom-right corner. The keys the tile's positions see, cut into num_splits runs of
    # whole tiles; this program takes run ``split``.
    diag = seqlen_k - seqlen_q
    left_offset = diag + left_rel
    right_offset = diag + right_rel
    first_i = pid_m * Q_PER_TILE  # the tile's first query position
    lo, _, _, hi = key_block_range(
        first_i, seqlen_k, left_offset, right_offset, Q_PER_TILE, BLOCK_N, IS_CAUSAL, IS_LOCAL
    )
    n_lo = lo // BLOCK_N
    n_hi = tl.cdiv(tl.maximum(hi, lo), BLOCK_N)
    per_split = tl.cdiv(n_hi - n_lo, num_splits)
    start = (n_lo + split * per_split) * BLOCK_N
    end = tl.minimum(start + per_split * BLOCK_N, hi)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    offs_n0 = tl.arange(0, BLOCK_N)
    # With TMA_PAGES the tile that ends past the sequence, if any, runs on its own as the second part: a box reads
    # its page's rows past the sequence, which may hold anything (and 0 x NaN is NaN), so that tile's V rows are
    # zeroed, a trip through registers that the full tiles, whose V goes from shared memory to the product, skip.
    full_end = seqlen_k // BLOCK_N * BLOCK_N
    PARTS: tl.constexpr = 2 if TMA_PAGES else 1
    for part in tl.static_range(PARTS):
        if PARTS == 1:
            part_start = start
            part_end = end
        elif part == 0:
            part_start = start
            part_end = tl.minimum(end, full_end)
        else:
            part_start = tl.maximum(start, full_end)
            part_end = end
        for start_n in tl.range(part_start, part_end, BLOCK_N):
            offs_n = start_n + offs_n0
            if TMA_PAGES:  # the tile lies in one page: its rows of this KV head are one box
                tile_page = tl.load(BLOCK_TABLE + off_b * stride_tb + start_n // PAGE_SIZE)
                k = K_TILES.load([tile_page, start_n % PAGE_SIZE, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
            else:
                page, row, valid = _cache_rows(
                    BLOCK_TABLE,
                    stride_tb,
                    max_pages,
                    cache_page,
                    cache_len,
                    off_b,
                    offs_n,
                    PAGED,
                    PAGE_SIZE,
                    BLOCK_N,
                )
                if HAS_LEFTPAD:
                    row += pad
                kv_mask = (valid & (offs_n < seqlen_k))[:, None] & d_ok[None, :]
                k = tl.load(
                    K_CACHE
                    + page[:, None] * stride_kp
                    + row[:, None] * stride_ks
                    + off_hk * stride_kh
                    + offs_d[None, :],
                    mask=kv_mask,
                    other=0.0,
                )
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
            qk = mod_scores(
                qk,
                offs_i[:, None],
                offs_n[None, :],
                cap_in,
                cap_out,
                slope,
                diag,
                SOFTCAP,
                ALIBI,
                DOT_PRECISION == "ieee",
            )
            # every tile is masked: decoding reads memory, and the compares are free next to the loads
            qk = mask_scores(
                qk,
                offs_i[:, None],
                offs_n[None, :],
                seqlen_k,
                left_offset,
                right_offset,
                float("-inf"),
                True,
                IS_CAUSAL,
                IS_LOCAL,
            )
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: exp2(-inf - 0) = 0
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            if TMA_PAGES:
                v = V_TILES.load([tile_page, start_n % PAGE_SIZE, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
                if part == 1:
                    v = tl.where((offs_n < seqlen_k)[:, None], v, 0.0)
            else:
                v = tl.load(
                    V_CACHE
                    + page[:, None] * stride_vp
                    + row[:, None] * stride_vs
                    + off_hk * stride_vh
                    + offs_d[None, :],
                    mask=kv_mask,
                    other=0.0,
                )
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
            m_i = m_new

    # A row that saw no key (an empty split, or a row masked out entirely) writes zeros and LSE = -inf.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)  # log2 -> ln
    out_mask = row_ok[:, None] & d_ok[None, :]
    # LSE (and its partial) rows are (b, h, i), as flash-attn returns it
    lse_offs = (off_b * n_heads + offs_h) * seqlen_q + offs_i
    if not SPLIT:
        o_ptrs = (
            O
            + off_b.to(tl.int64) * stride_ob
            + offs_i[:, None] * stride_os
            + offs_h[:, None] * stride_oh
            + offs_d[None, :]
        )
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=out_mask)
        tl.store(LSE + lse_offs, lse, mask=row_ok)
    else:
        # partials: O_PART (splits, B, H, Sq, BLOCK_D) and LSE_PART (splits, B, H, Sq), fp32
        part = split.to(tl.int64) * (tl.num_programs(0) // n_kv_heads) * n_heads * seqlen_q
        tl.store(LSE_PART + part + lse_offs, lse, mask=row_ok)
        o_ptrs = O_PART + (part + lse_offs.to(tl.int64))[:, None] * BLOCK_D + offs_d[None, :]
        tl.store(o_ptrs, acc, mask=row_ok[:, None])


# --8<-- [end:split_kv_kernel]


# --8<-- [start:merge_kernel]
@triton.jit(do_not_specialize=["n_heads", "seqlen_q", "n_rows", "num_splits"])
def _merge_splits(
    O_PART,
    LSE_PART,
    O,
    LSE,
    stride_ob,
    stride_os,
    stride_oh,
    n_heads,
    seqlen_q,
    n_rows,
    num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """Program (b, h, i): out = sum_s exp(lse_s - lse) out_s with lse = log sum_s exp(lse_s).

    Each split's partial output is normalised over its own keys, so weighting it by its share of the total
    softmax mass, exp(lse_s - lse), gives the exact result. Splits that saw no key have lse_s = -inf and
    weight 0.
    """
    row = tl.program_id(0)  # (b, h, i) flattened, as the LSE rows are
    offs_s = tl.arange(0, BLOCK_S)
    lse_s = tl.load(LSE_PART + offs_s.to(tl.int64) * n_rows + row, mask=offs_s < num_splits, other=float("-inf"))
    lse_max = tl.max(lse_s, 0)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # every split empty: weights 0, out 0
    total = tl.sum(tl.exp(lse_s - lse_max), 0)
    total_safe = tl.where(total == 0.0, 1.0, total)
    lse = tl.where(total == 0.0, float("-inf"), lse_max + tl.log(total_safe))
    offs_c = tl.arange(0, CHUNK)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s0 in tl.range(0, num_splits, CHUNK):
        splits = s0 + offs_c
        ok = splits < num_splits
        lse_c = tl.load(LSE_PART + splits.to(tl.int64) * n_rows + row, mask=ok, other=float("-inf"))
        w = tl.exp(lse_c - lse_max) / total_safe
        o = tl.load(
            O_PART + (splits.to(tl.int64) * n_rows + row)[:, None] * BLOCK_D + offs_d[None, :],
            mask=ok[:, None] & (w > 0.0)[:, None],
            other=0.0,
        )
        acc += tl.sum(o * w[:, None], 0)
    off_b = row // (n_heads * seqlen_q)
    off_h = (row // seqlen_q) % n_heads
    off_i = row % seqlen_q
    tl.store(
        O + off_b.to(tl.int64) * stride_ob + off_i * stride_os + off_h * stride_oh + offs_d,
        acc.to(O.dtype.element_ty),
        mask=offs_d < HEAD_DIM,
    )
    tl.store(LSE + row, lse)


# --8<-- [end:merge_kernel]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions
# ---------------------------------------------------------------------------------------------------------------


@functools.cache
def _triton_config(config: DecodeConfig, paged: bool) -> triton.Config:
    return config.triton_config(paged)


@functools.cache
def _small_config(warps: int, stages: int) -> triton.Config:
    return triton.Config({}, num_warps=warps, num_stages=stages)


def fits_one_tile(n_heads: int, n_kv_heads: int, seqlen_q: int) -> bool:
    """Whether the query rows of one KV head (its group's heads x the query positions) fit one tile: a decode
    step's shape, which ``decode_attention`` reads each KV head once for, where the training forward would launch
    one program per query head for a tile of mostly empty rows."""
    return (n_heads // n_kv_heads) * seqlen_q <= MAX_BLOCK_M


def block_m_for(rows: int) -> int:
    """Packed query rows per tile: tl.dot needs at least 16."""
    return min(max(16, next_power_of_2(rows)), MAX_BLOCK_M)


def launch_plan(
    programs: int, head_dim: int, dtype: torch.dtype, page_size: int, capacity: int, device_index: int
) -> tuple:
    """(DecodeConfig, num_splits) for a launch of ``programs`` per split (batch x KV heads x query tiles) over
    caches of ``capacity`` keys per sequence (pages of ``page_size`` rows, 0 for a contiguous cache), from shapes
    only: the table's config for the regime, and ``num_splits_heuristic``'s split count for it."""
    if INTERPRET:
        return CPU_DECODE_CONFIG, 1
    config = decode_config(head_dim, dtype, page_size, fills_gpu(programs, device_index))
    return config, splits_for(programs, capacity, config, device_index)


def splits_for(programs: int, capacity: int, config: DecodeConfig, device_index: int) -> int:
    """``num_splits_heuristic`` for a launch of ``programs`` per split under ``config``, over ``capacity`` keys."""
    slots = num_sms(device_index) * config.programs_per_sm
    return num_splits_heuristic(programs, slots, cdiv(capacity, config.block_n))


_NO_TENSOR = {}


def _placeholder(device: torch.device) -> torch.Tensor:
    """An int32 tensor standing in for an absent optional pointer (the kernels never read it)."""
    t = _NO_TENSOR.get(device)
    if t is None:
        t = _NO_TENSOR[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return t


@dataclass
class _AppendPlan:
    """What an ``append_kv`` call launches, worked out from everything but its tensors' data and the int cache
    length (as ``_Plan`` is for the attention): the grid, the constexprs and the launch's int arguments, which
    the key fixes. ``launcher`` is the compiled kernel's once a first call has launched it."""

    grid: tuple
    ints: tuple  # the int arguments from the strides to cache_len; cache_seqlen_const and rotary_dim follow
    rotary_dim: int
    meta: dict
    device_index: int = None
    launcher: object = None


_append_plans = plan_cache()


def _append_key(q, kk, vv, qr, k_cache, v_cache, seqlens, const, batch_idx, table, cos, sin, interleaved, per_row):
    """Everything an append plan and its launcher's signature depend on, as ``_plan_key`` is for the attention."""
    return (
        q.shape,
        q.stride(),
        q.dtype,
        q.device,
        kk is q,  # no new keys: q stands in for k and v
        kk.shape,
        kk.stride(),
        vv.stride(),
        qr.stride(),
        k_cache.shape,
        k_cache.stride(),
        v_cache.stride(),
        k_cache.dtype,
        None if seqlens is None else seqlens.dtype,
        None if batch_idx is None else batch_idx.dtype,
        None if table is None else (table.shape, table.stride()),
        None if cos is None else (cos.shape, cos.stride(), cos.dtype, sin.dtype),
        launch_signature(const),
        interleaved,
        per_row,
        _aligned(q, kk, vv, qr, k_cache, v_cache, seqlens, batch_idx, table, cos, sin),
    )


def append_kv(
    q,
    k,
    v,
    q_rot,
    k_cache,
    v_cache,
    cache_seqlens,
    cache_seqlen_const: int,
    cache_batch_idx,
    block_table,
    rotary_cos,
    rotary_sin,
    rotary_interleaved: bool,
    q_pos_per_row: bool,
) -> None:
    """Write k, v (B, S_new, Hk, D) into the caches at each sequence's length (rotated when rotary_cos is given),
    and, when rotary_cos is given, q (B, Sq, H, D) rotated into q_rot. Either part may be absent (k None, or no
    rotary). rotary_sin has rotary_cos's strides."""
    rotary = rotary_cos is not None
    if (k is None or k.shape[1] == 0) and not rotary:
        return
    paged = block_table is not None
    dummy = _placeholder(q.device)
    kk = k if k is not None else q
    vv = v if v is not None else q
    qr = q_rot if q_rot is not None else q
    key = plan = None
    if not INTERPRET:
        key = _append_key(
            q,
            kk,
            vv,
            qr,
            k_cache,
            v_cache,
            cache_seqlens,
            cache_seqlen_const,
            cache_batch_idx,
            block_table,
            rotary_cos,
            rotary_sin,
            rotary_interleaved,
            q_pos_per_row,
        )
        plan = _append_plans.get(key)
    if plan is None:
        plan = _make_append_plan(
            q,
            kk,
            vv,
            qr,
            k,
            k_cache,
            v_cache,
            cache_seqlens,
            cache_batch_idx,
            block_table,
            rotary_cos,
            rotary_interleaved,
            q_pos_per_row,
        )
    args = (
        q,
        kk,
        vv,
        qr,
        k_cache,
        v_cache,
        cache_seqlens if cache_seqlens is not None else dummy,
        cache_batch_idx if cache_batch_idx is not None else dummy,
        block_table if paged else dummy,
        rotary_cos if rotary else dummy,
        rotary_sin if rotary else dummy,
        *plan.ints,
        cache_seqlen_const,
        plan.rotary_dim,
    )
    # a plan's launcher takes the arguments straight to the compiled kernel, on the current device's stream
    if plan.launcher is not None and no_launch_hooks() and torch.cuda.current_device() == plan.device_index:
        plan.launcher(plan.grid, args, plan.device_index)
        return
    config = _small_config(4, 1)
    with on_device(q.device):
        launcher = launch(_append_kv, None, lambda meta: plan.grid, args, plan.meta, config, config)
    if key is not None and launcher is not None:
        plan.launcher = launcher
        _append_plans[key] = plan


def _make_append_plan(
    q, kk, vv, qr, k, k_cache, v_cache, seqlens, batch_idx, block_table, rotary_cos, interleaved, q_pos_per_row
) -> _AppendPlan:
    """The plan of an ``append_kv`` call (``_AppendPlan``); kk, vv, qr: the tensors launched in place of k, v
    and q_rot (q where one is absent)."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[-2]
    seqlen_new = 0 if k is None else k.shape[1]
    rotary = rotary_cos is not None
    paged = block_table is not None
    ints = (
        *q.stride()[:3],
        *kk.stride()[:3],
        *vv.stride()[:3],
        *qr.stride()[:3],
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        block_table.stride(0) if paged else 0,
        rotary_cos.stride(0) if rotary else 0,
        rotary_cos.shape[0] if rotary else 0,
        n_heads,
        n_kv_heads,
        seqlen_new,
        seqlen_q,
        block_table.shape[1] if paged else 1,
        k_cache.shape[1],
    )
    meta = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d_for(head_dim),
        BLOCK_H=next_power_of_2(n_heads),
        BLOCK_HK=next_power_of_2(n_kv_heads),
        PAGED=paged,
        PAGE_SIZE=k_cache.shape[1] if paged else 0,
        HAS_BATCH_IDX=batch_idx is not None,
        SEQLENS_TENSOR=seqlens is not None,
        APPEND=seqlen_new > 0,
        ROTARY=rotary,
        INTERLEAVED=interleaved,
        Q_POS_PER_ROW=q_pos_per_row,
    )
    grid = (max(seqlen_new, seqlen_q if rotary else 0), batch)
    return _AppendPlan(
        grid=grid,
        ints=ints,
        rotary_dim=2 * rotary_cos.shape[1] if rotary else 0,
        meta=meta,
        device_index=None if INTERPRET else device_index(q.device),  # CPU tensors have none
    )


def query_tiles(group: int, seqlen_q: int) -> tuple:
    """(BLOCK_M, query tiles): rows per tile (at least 16 for tl.dot, at least one whole group) and how many
    tiles the seqlen_q positions take at BLOCK_M // group positions each."""
    block_m = max(block_m_for(group * seqlen_q), next_power_of_2(group))
    return block_m, cdiv(seqlen_q, block_m // group)


@dataclass
class _Plan:
    """What a ``decode_attention`` call launches, worked out from everything but its tensors' data and its float
    arguments: a decode loop makes the same call every step, and on short caches working this out again (the
    split count, the meta-parameters, the launch cache's key over some thirty arguments) took longer than the
    kernels. ``launchers`` are the compiled kernels' launchers once a first call has launched them."""

    num_splits: int
    block_d: int
    part_rows: int  # rows of partial outputs (splits x batch x heads x seqlen_q), 0 without splits
    left_rel: int
    right_rel: int
    grid: tuple
    meta: dict
    tconfig: triton.Config
    merge_grid: tuple
    merge_meta: dict
    merge_config: triton.Config
    ints: tuple  # the int arguments from q's strides to the cache's length; the call's own values follow
    merge_ints: tuple  # the merge's int arguments (out's strides, heads, seqlen_q, rows, splits)
    tma_pages: bool  # K and V read as TMA boxes of their pages (``_split_kv``'s TMA_PAGES)
    hopper: bool  # ``decode_hopper``'s Gluon kernel in place of ``_split_kv`` (``hopper_takes``)
    device_index: int = None
    launchers: tuple = None


_plans = plan_cache()


def _aligned(*tensors) -> bool:
    """Whether every tensor given (None for one not passed) starts on a 16-byte boundary."""
    return all(t is None or aligned(t) for t in tensors)


def tma_pages(k_cache, v_cache, page_size: int, block_n: int, leftpad) -> bool:
    """Whether a paged call reads its tiles as TMA boxes: each page holds whole tiles, so a tile's rows of one KV
    head are one box of one page, and the caches are laid out as a descriptor needs (16-byte aligned start and
    strides, unit last stride). Timed on an H100 against per-row addresses, decode steps over pages of 64 rows
    took 1-5% less time (the most at the short caches, where a program has few tiles to hide its addresses
    behind) and pages of 256 the same within 1% (benchmarks/FINDINGS.md). Pages smaller than a tile keep the
    per-row path: four 16-row boxes a tile ran slower than their addresses."""
    return leftpad is None and page_size % block_n == 0 and descriptor_ready(k_cache) and descriptor_ready(v_cache)


def plain_paged_step(q, k_cache, v_cache, out, block_table, batch_idx, window_size, softcap, slopes, pad) -> bool:
    """Whether a call is the step ``decode_hopper``'s kernel computes, from its shapes and options alone: one query a
    sequence (which sees every key up to its own, whatever the causal flag or a window's right edge says), no
    window's left edge, softcap, ALiBi, left padding or ``cache_batch_idx``; pages of ``HOPPER_PAGE_SIZES``; a head
    dim of ``decode_hopper.HEAD_DIMS``; at most ``decode_hopper.BLOCK_M`` query heads a KV head; one dtype for q,
    the caches and the output; caches a descriptor reads as they lie."""
    _, seqlen_q, n_heads, head_dim = q.shape
    return (
        block_table is not None
        and k_cache.shape[1] in HOPPER_PAGE_SIZES
        and seqlen_q == 1
        and window_size[0] < 0
        and not softcap
        and slopes is None
        and pad is None
        and batch_idx is None
        and head_dim in decode_hopper.HEAD_DIMS
        and n_heads // k_cache.shape[2] <= decode_hopper.BLOCK_M
        and q.dtype == k_cache.dtype == v_cache.dtype == out.dtype
        and descriptor_ready(k_cache)
        and descriptor_ready(v_cache)
    )


def hopper_takes(
    q, k_cache, v_cache, out, block_table, batch_idx, window_size, softcap, slopes, pad, programs: int, index: int
) -> bool:
    """Whether ``decode_hopper``'s Gluon kernel takes a call of ``programs`` per split: a ``plain_paged_step`` on a
    Hopper GPU with Gluon (``forward_hopper.gluon_runs``), whose batch alone does not fill the GPU (what
    ``HOPPER_PAGE_SIZES`` was timed on)."""
    return (
        q.is_cuda
        and plain_paged_step(q, k_cache, v_cache, out, block_table, batch_idx, window_size, softcap, slopes, pad)
        and not fills_gpu(programs, index)
        and gluon_runs(q)
    )


def _plan_key(
    q, k_cache, v_cache, out, lse, seqlens, const, seqlen_new, batch_idx, table, causal, window, softcap, slopes, n, pad
):
    """Everything a call's plan and its launchers' signatures depend on (``launch.launch_signature``): shapes, strides,
    dtypes, the device, the options, whether each tensor is 16-byte aligned and the integers' signatures."""
    return (
        q.shape,
        q.stride(),
        q.dtype,
        q.device,
        k_cache.shape,
        k_cache.stride(),
        v_cache.stride(),
        k_cache.dtype,
        out.stride(),
        out.dtype,
        lse.stride(),
        None if seqlens is None else seqlens.dtype,
        None if batch_idx is None else batch_idx.dtype,
        None if table is None else (table.shape, table.stride()),
        launch_signature(const),
        launch_signature(seqlen_new),
        causal,
        tuple(window),
        bool(softcap),
        None if slopes is None else slopes.shape,
        n,
        None if pad is None else pad.dtype,
        _aligned(q, k_cache, v_cache, out, lse, seqlens, batch_idx, table, pad),
    )


def _make_plan(
    q, k_cache, v_cache, out, seqlens, batch_idx, block_table, causal, window_size, softcap, slopes, splits, config, pad
) -> _Plan:
    """The plan for a call (``_Plan``): the table's config or ``config``, and ``splits`` splits (0: the
    heuristic's count)."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[-2]
    group = n_heads // n_kv_heads
    paged = block_table is not None
    page_size = k_cache.shape[1]
    capacity = block_table.shape[1] * page_size if paged else page_size
    block_m, m_tiles = query_tiles(group, seqlen_q)
    programs = batch * n_kv_heads * m_tiles
    index = None if INTERPRET else device_index(q.device)  # CPU tensors have none
    hopper = config is None and hopper_takes(
        q, k_cache, v_cache, out, block_table, batch_idx, window_size, softcap, slopes, pad, programs, index
    )
    if hopper:
        config = HOPPER_PAGED_CONFIG
        planned_splits = splits_for(programs, capacity, config, index)
    elif config is None:
        config, planned_splits = launch_plan(
            programs, head_dim, k_cache.dtype, page_size if paged else 0, capacity, index
        )
    else:
        planned_splits = 1 if INTERPRET else splits_for(programs, capacity, config, index)
    num_splits = splits or planned_splits
    block_d = block_d_for(head_dim)
    tma = paged and not hopper and tma_pages(k_cache, v_cache, page_size, config.block_n, pad)
    # The masking core's band, with offsets relative to the diagonal (a square of the cache's capacity has its
    # diagonal at 0): the kernel shifts them by each sequence's own seqlen_k - seqlen_q.
    is_causal, is_local, left_rel, right_rel = band(capacity, capacity, causal, window_size)
    meta = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_M=block_m,
        GROUP=group,
        PAGED=paged,
        PAGE_SIZE=page_size if paged else 0,
        HAS_BATCH_IDX=batch_idx is not None,
        SEQLENS_TENSOR=seqlens is not None,
        IS_CAUSAL=is_causal,
        IS_LOCAL=is_local,
        SOFTCAP=bool(softcap),
        ALIBI=slopes is not None,
        SPLIT=num_splits > 1,
        DOT_PRECISION=dot_precision(q.dtype),
    )
    if pad is not None:  # only then: the kernels without it keep their compiled code
        meta["HAS_LEFTPAD"] = True
    if tma:  # likewise
        meta["TMA_PAGES"] = True
    # BLOCK_S: the split counts up to a power of two share one compiled merge
    block_s = next_power_of_2(num_splits)
    out_strides = out.stride()[:3]
    grid = (batch * n_kv_heads, m_tiles, num_splits)
    ints = (
        *q.stride()[:3],
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        block_table.stride(0) if paged else 0,
        *out_strides,
        n_kv_heads,
        seqlen_q,
        block_table.shape[1] if paged else 1,
        k_cache.shape[1],
    )
    if hopper:  # ``decode_hopper._paged_decode``'s grid, meta-parameters and ints
        grid = (batch * n_kv_heads, num_splits)
        meta = dict(
            GROUP=group,
            PAGE_SIZE=page_size,
            BLOCK_N=config.block_n,
            STAGES=config.stages,
            SPLIT=num_splits > 1,
            SEQLENS_TENSOR=seqlens is not None,
        )
        ints = (
            q.stride(0),
            q.stride(2),
            out.stride(0),
            out.stride(2),
            block_table.stride(0),
            block_table.shape[1],
            n_kv_heads,
            batch * n_heads,
        )
    return _Plan(
        num_splits=num_splits,
        block_d=block_d,
        part_rows=num_splits * batch * n_heads * seqlen_q if num_splits > 1 else 0,
        left_rel=left_rel,
        right_rel=right_rel,
        grid=grid,
        meta=meta,
        tconfig=_triton_config(config, paged and not tma),  # a TMA box needs no stages for its table entry
        merge_grid=(batch * n_heads * seqlen_q,),
        merge_meta=dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=block_s, CHUNK=min(MERGE_CHUNK, block_s)),
        merge_config=_small_config(4 if block_d >= 128 else 2, 2),
        ints=ints,
        merge_ints=(*out_strides, n_heads, seqlen_q, batch * n_heads * seqlen_q, num_splits),
        tma_pages=tma,
        hopper=hopper,
        device_index=index,
    )


def decode_attention(
    q,
    k_cache,
    v_cache,
    out,
    lse,
    cache_seqlens,
    cache_seqlen_const: int,
    seqlen_new: int,
    cache_batch_idx,
    block_table,
    softmax_scale: float,
    causal: bool,
    window_size: tuple,
    softcap: float,
    alibi_slopes,
    num_splits: int,
    config: DecodeConfig = None,
    cache_leftpad=None,
) -> None:
    """Attention of q (B, Sq, H, D) over the caches, whose sequence b holds ``cache_seqlens[b] + seqlen_new``
    keys (or ``cache_seqlen_const + seqlen_new`` for every b when cache_seqlens is None). Writes out
    (B, Sq, H, D) and lse (B, H, Sq) fp32. causal, window_size, softcap, alibi_slopes ((H,) or (B, H) fp32, or
    None): flash-attn's, bottom-right aligned. num_splits: 0 chooses with ``num_splits_heuristic``.
    config: a ``DecodeConfig`` instead of the table's (the benchmark's sweep uses it). cache_leftpad: int32 (B,)
    or None: sequence b's keys start at row ``cache_leftpad[b]`` of a contiguous cache, and are counted from
    there (the masks, ALiBi and the length), as in flash-attn. On Hopper a plain step over small pages runs
    ``decode_hopper``'s kernel in place of ``_split_kv`` (``hopper_takes``)."""
    key = plan = None
    if config is None and not INTERPRET:
        key = _plan_key(
            q,
            k_cache,
            v_cache,
            out,
            lse,
            cache_seqlens,
            cache_seqlen_const,
            seqlen_new,
            cache_batch_idx,
            block_table,
            causal,
            window_size,
            softcap,
            alibi_slopes,
            num_splits,
            cache_leftpad,
        )
        plan = _plans.get(key)
    if plan is None:
        plan = _make_plan(
            q,
            k_cache,
            v_cache,
            out,
            cache_seqlens,
            cache_batch_idx,
            block_table,
            causal,
            window_size,
            softcap,
            alibi_slopes,
            num_splits,
            config,
            cache_leftpad,
        )
    dummy = _placeholder(q.device)
    if plan.part_rows:  # one allocation for both: the partial outputs (splits, B, H, Sq, BLOCK_D), then LSEs
        part = torch.empty(plan.part_rows * (plan.block_d + 1), device=q.device, dtype=torch.float32)
        o_part, lse_part = part[: plan.part_rows * plan.block_d], part[plan.part_rows * plan.block_d :]
    else:
        o_part = lse_part = dummy
    seqlens = cache_seqlens if cache_seqlens is not None else dummy
    if plan.hopper:
        block_n = plan.meta["BLOCK_N"]
        args = (
            q,
            *decode_hopper.descriptors(k_cache, v_cache, block_n),
            block_table,
            seqlens,
            o_part,
            lse_part,
            out,
            lse,
            *plan.ints,
            cache_seqlen_const,
            seqlen_new,
            softmax_scale * LOG2E,
        )
    else:
        args = _split_kv_args(q, k_cache, v_cache, seqlens, cache_batch_idx, block_table, cache_leftpad, out, lse,
                              o_part, lse_part, dummy, plan, cache_seqlen_const, seqlen_new, softmax_scale, softcap,
                              alibi_slopes)  # fmt: skip
    split = plan.num_splits > 1
    if split:
        margs = (o_part, lse_part, out, lse, *plan.merge_ints)
    # a plan's launchers take the arguments straight to the compiled kernels, on the current device's stream
    if plan.launchers is not None and no_launch_hooks() and torch.cuda.current_device() == plan.device_index:
        split_kv, merge = plan.launchers
        split_kv(plan.grid, args, plan.device_index)
        if split:
            merge(plan.merge_grid, margs, plan.device_index)
        return
    with on_device(q.device):
        if plan.hopper:
            split_kv = launch_gluon(decode_hopper._paged_decode, plan.grid, args, plan.meta, plan.tconfig.num_warps)
        else:
            split_kv = launch(_split_kv, None, lambda meta: plan.grid, args, plan.meta, plan.tconfig, plan.tconfig)
        merge = None
        if split:
            config = plan.merge_config
            merge = launch(_merge_splits, None, lambda meta: plan.merge_grid, margs, plan.merge_meta, config, config)
    if key is not None and split_kv is not None and (merge is not None or not split):
        plan.launchers = (split_kv, merge)
        _plans[key] = plan


def _split_kv_args(
    q,
    k_cache,
    v_cache,
    seqlens,
    cache_batch_idx,
    block_table,
    cache_leftpad,
    out,
    lse,
    o_part,
    lse_part,
    dummy,
    plan: _Plan,
    cache_seqlen_const: int,
    seqlen_new: int,
    softmax_scale: float,
    softcap: float,
    alibi_slopes,
) -> tuple:
    """``_split_kv``'s arguments for a call under ``plan`` (``dummy`` for each tensor it does not pass)."""
    batch, _, n_heads, _ = q.shape
    paged = block_table is not None
    cap_in, cap_out = (softmax_scale / softcap, softcap / softmax_scale) if softcap else (None, None)
    slopes = None
    if alibi_slopes is not None:  # divided by the scale, as the masking core's scores are
        slopes = (alibi_slopes.float() / softmax_scale).expand(batch, n_heads).contiguous()
    return (
        q,
        k_cache,
        v_cache,
        seqlens,
        cache_batch_idx if cache_batch_idx is not None else dummy,
        block_table if paged else dummy,
        cache_leftpad,  # None compiles as a constant: the kernel without it has no such parameter
        out,
        lse,
        o_part,
        lse_part,
        slopes if slopes is not None else dummy,
        *plan.ints,
        cache_seqlen_const,
        seqlen_new,
        softmax_scale * LOG2E,
        plan.left_rel,
        plan.right_rel,
        cap_in,
        cap_out,
        *((head_tiles(k_cache, "BLOCK_N"), head_tiles(v_cache, "BLOCK_N")) if plan.tma_pages else (None, None)),
    )
