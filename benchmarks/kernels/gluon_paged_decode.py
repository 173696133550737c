"""Paged decode in Gluon: a tile of keys over several pages filled by one TMA box a page, read by one product.

    python3 benchmarks/kernels/gluon_paged_decode.py --check        # GPU: outputs against flash_attn_with_kvcache
    python3 benchmarks/kernels/gluon_paged_decode.py --check-shapes --configs 128x2x1   # the same, other shapes
    python3 benchmarks/kernels/gluon_paged_decode.py [--points 1x4096,1x32768,8x4096,1x131072] [--page 16]
        [--configs 128x3x1,64x4x1]  # Gluon tile configs: keys a tile x ring stages x programs an SM
    python benchmarks/kernels/gluon_paged_decode.py --aot           # any machine: compile for sm_90, count the copies

The package's split-KV kernel (Triton) reads a tile over pages of 16 rows with an address a row: Triton returns
every TMA box as a tensor of its own, so four boxes a 64-key tile meant four products or a trip through
registers, and both ran slower than the addresses (benchmarks/FINDINGS.md). Gluon places each box where it
wants: here the boxes of a tile land at consecutive 16-row offsets of one shared buffer, under one barrier that
expects all their bytes, and one product reads the whole tile. Compiled for sm_90, a 128-key tile over pages of
16 is eight 4-D bulk copies into the slices of one buffer, with no shared store of their own (``--aot``).

The kernel covers the plain decode step and no more: one query a sequence, no mask beyond each sequence's length (no
window, softcap, ALiBi or left padding), up to 64 query heads a KV head, pages that divide the tile or hold whole
tiles, caches of any length. The timings take the benchmark's shape (bf16, d = 128, 32 query heads over 8 KV heads);
``--check-shapes`` compares its outputs over others (d = 64, fp16, groups of 1 and 64, lengths that are not whole
tiles, one split). A contiguous cache goes through it as one page a sequence, so the comparison with it separates
what the pages cost from what the kernel costs. Each program (sequence x KV head, split) stacks the group's query
heads in the first rows of a 64-row shared tile (a warpgroup's product), streams its run of tiles (128 keys by
default) with ``stages - 1`` in flight, and writes its partial output and log-sum-exp where the package's
``_merge_splits`` reads them (with one split, the output and log-sum-exp themselves); the split count is the
package's heuristic for the config's tile and programs an SM (by default those of the contiguous cache's table
entry: 128-key tiles, one program an SM). The tile that ends past the sequence has its V rows past it zeroed: a box
copies whatever they hold.

Timed as the decode benchmark's graph timer times (``paged_chain.report_point``: CUDA graphs over copies of the
caches that L2 cannot hold together, three rotated rounds, medians), TB/s and the ratio to the package's
contiguous call, after ``--check``'s comparison at the point.
"""

import argparse
import itertools
import re
import sys
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import flashdoc  # noqa: E402, F401, I001  (first: without a GPU it turns on Triton's interpreter)
import triton  # noqa: E402

from benchmarks import decode as bench  # noqa: E402
from benchmarks.kernels.code_hash import ptxas_info  # noqa: E402
from benchmarks.kernels.paged_chain import report_point  # noqa: E402
from flashdoc.kernels import LOG2E  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402
from flashdoc.kernels import gluon_support  # noqa: E402

if gluon_support.HAS_GLUON:
    from flashdoc.kernels.hopper_common import (  # noqa: E402
        descriptor,
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        thread_barrier,
        tma_load,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
else:  # noqa: E402
    sys.exit("gluon_paged_decode.py needs a Triton with Gluon (triton.experimental.gluon)")

BLOCK_M = gl.constexpr(64)  # one warpgroup's product: the group's query heads in the first rows, zeros below


class Config(NamedTuple):
    """A tile config: keys a tile, tiles in the ring (``stages - 1`` in flight) and programs an SM, which with the
    package's heuristic sets the split count."""

    block_n: int = 128
    stages: int = 3
    per_sm: int = 1

    @classmethod
    def parse(cls, text: str) -> "Config":
        return cls(*(int(x) for x in text.split("x")))

    def __str__(self):
        return f"{self.block_n}x{self.stages}x{self.per_sm}"

    def splits(self, programs: int, cache: int) -> int:
        """The package's split count for ``programs`` (sequences x KV heads) over ``cache`` keys under this config."""
        config = dk.DecodeConfig(block_n=self.block_n, warps=4, stages=self.stages, programs_per_sm=self.per_sm)
        return dk.splits_for(programs, cache, config, 0)


DEFAULT = Config()


@gluon.jit
def _issue(
    k_desc,
    v_desc,
    k_smem,
    v_smem,
    k_bar,
    v_bar,
    table_row,
    n_pages,
    tile,
    off_hk,
    PAGE: gl.constexpr,
    BLOCK_N: gl.constexpr,
):
    """Start the copies of tile ``tile`` of one KV head's keys and values into ``k_smem`` and ``v_smem`` ([1,
    BLOCK_N, 1, D]): one box a page the tile spans (or one box of a page that holds the tile), each into its rows
    of the buffer, counted on ``k_bar`` and ``v_bar``. Each page's table entry is read once for both. A last tile
    that runs past the table's ``n_pages`` pages copies the last page again for its rows past the end: they lie
    past the sequence, so their scores are masked and their values zeroed."""
    BOX: gl.constexpr = k_desc.block_type.shape[1]
    mbarrier.expect(k_bar, (BLOCK_N // BOX) * k_desc.block_type.nbytes)
    mbarrier.expect(v_bar, (BLOCK_N // BOX) * v_desc.block_type.nbytes)
    for j in gl.static_range(BLOCK_N // BOX):
        pos = tile * BLOCK_N + j * BOX
        page = gl.load(table_row + gl.minimum(pos // PAGE, n_pages - 1))
        tma_load(k_desc, [page, pos % PAGE, off_hk, 0], k_bar, k_smem.slice(j * BOX, BOX, dim=1))
        tma_load(v_desc, [page, pos % PAGE, off_hk, 0], v_bar, v_smem.slice(j * BOX, BOX, dim=1))


@gluon.jit
def _paged_split_kv(
    Q,
    k_desc,
    v_desc,
    TABLE,
    SEQLENS,
    O_PART,
    LSE_PART,
    OUT,
    LSE,
    stride_qb,
    stride_qh,
    stride_ob,
    stride_oh,
    stride_tb,
    n_pages,
    n_kv_heads,
    n_rows,
    qk_scale,
    GROUP: gl.constexpr,
    PAGE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    SPLIT: gl.constexpr,
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
    seqlen_k = gl.load(SEQLENS + off_b)
    n_tiles = (seqlen_k + BLOCK_N - 1) // BLOCK_N
    per_split = (n_tiles + num_splits - 1) // num_splits
    first = split * per_split
    count = gl.maximum(gl.minimum(first + per_split, n_tiles) - first, 0)
    table_row = TABLE + off_b * stride_tb

    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, rows_layout))
    cols = gl.arange(0, BLOCK_D, gl.SliceLayout(0, rows_layout))
    q_ptrs = Q + off_b * stride_qb + (off_hk * GROUP + rows)[:, None] * stride_qh + cols[None, :]
    # q K^T reads q from shared memory, as the package's forward does. Held in registers across the loop as that
    # product's A operand, q got the same registers from ptxas (CUDA 12.8 and 12.9) as P, the second product's
    # A operand, which is written inside the loop: every tile after a program's first then multiplied the last
    # tile's probabilities with K instead of q
    q_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_D], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_D], q_shared)
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
            _issue(k_desc, v_desc, k_smem.index(i), v_smem.index(i), k_ready.index(i), v_ready.index(i), table_row,
                   n_pages, first + i, off_hk, PAGE, BLOCK_N)  # fmt: skip

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, o_layout)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    key_cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    for it in range(count):
        # the stage tile it + STAGES - 1 goes into was read by the last iteration, whose products every warp has
        # waited for: the barrier makes sure all of them have, before a copy overwrites it
        ahead = it + STAGES - 1
        if ahead < count:
            thread_barrier()
            st = ahead % STAGES
            _issue(k_desc, v_desc, k_smem.index(st), v_smem.index(st), k_ready.index(st), v_ready.index(st),
                   table_row, n_pages, first + ahead, off_hk, PAGE, BLOCK_N)  # fmt: skip
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
        o_ptrs = OUT + off_b * stride_ob + (off_hk * GROUP + rows)[:, None] * stride_oh + cols[None, :]
        gl.store(o_ptrs, out.to(dtype), mask=(rows < GROUP)[:, None])


def gluon_call(q, k_cache, v_cache, seqlens, table, config: Config = DEFAULT, splits: int = 0):
    """The Gluon kernel and, over splits, the package's merge for one decode step: call() returns the output it
    wrote. A contiguous cache (table None) is one page a sequence. ``splits``: 0 for the config's count."""
    batch, _, heads, d = q.shape
    kv_heads = k_cache.shape[2]
    block_n = config.block_n
    page = k_cache.shape[1]
    if table is not None and (block_n % page if page < block_n else page % block_n):
        # a box must lie within one page, which the kernel does not check (a contiguous cache is one page, whose
        # rows past its end read as zeros)
        raise ValueError(f"pages of {page} rows: use a size that divides {block_n} or a multiple of it")
    if heads // kv_heads > BLOCK_M:
        raise ValueError(f"{heads} query heads over {kv_heads} KV heads: a program's tile holds {BLOCK_M.value}")
    if table is None:
        table = torch.arange(batch, device=q.device, dtype=torch.int32)[:, None]
    capacity = page * table.shape[1]
    box = min(page, block_n)
    k_desc, v_desc = descriptor(k_cache, box), descriptor(v_cache, box)
    splits = splits or config.splits(batch * kv_heads, capacity)
    n_rows = batch * heads
    o_part = torch.empty(splits, n_rows, d, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(splits, n_rows, device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, 1, device=q.device, dtype=torch.float32)
    block_s = triton.next_power_of_2(splits)
    qk_scale = d**-0.5 * LOG2E

    def call():
        _paged_split_kv[(batch * kv_heads, splits)](
            q, k_desc, v_desc, table, seqlens, o_part, lse_part, out, lse, q.stride(0), q.stride(2), out.stride(0),
            out.stride(2), table.stride(0), table.shape[1], kv_heads, n_rows, qk_scale, GROUP=heads // kv_heads,
            PAGE=page, BLOCK_N=block_n, STAGES=config.stages, SPLIT=splits > 1, num_warps=4,
        )  # fmt: skip
        if splits == 1:
            return out
        dk._merge_splits[(n_rows,)](
            o_part, lse_part, out, lse, out.stride(0), out.stride(1), out.stride(2), heads, 1, n_rows, splits,
            HEAD_DIM=d, BLOCK_D=d, BLOCK_S=block_s, CHUNK=min(dk.MERGE_CHUNK, block_s), num_warps=4, num_stages=2,
        )  # fmt: skip
        return out

    return call


def poison_past_lengths(k_cache, v_cache, seqlens, table) -> None:
    """NaN in every cache row past its sequence's length, up to the rows its table (or contiguous cache) holds: a
    box copies such rows with a sequence's last tile, and they must not reach the output."""
    page = k_cache.shape[1]
    rows = page if table is None else page * table.shape[1]
    for b, length in enumerate(seqlens.tolist()):
        past = torch.arange(length, rows, device=k_cache.device)
        where = (b, past) if table is None else (table[b, past // page].long(), past % page)
        k_cache[where], v_cache[where] = float("nan"), float("nan")


def check(batch: int, cache: int, page: int, configs=(DEFAULT,)) -> float:
    """The largest difference between the Gluon kernel's output under each of ``configs`` and
    ``flash_attn_with_kvcache``'s, contiguous and over pages of ``page`` rows; exits where it is not within bf16's
    rounding of the same sums."""
    worst = 0.0
    for page_size in (None, page):
        _, k_cache, v_cache, seqlens, table = x = bench.make_cache(batch, cache, page_size)
        seqlens[:] = cache - 37  # sequences 37 keys short of the cache, with NaN past them
        poison_past_lengths(k_cache, v_cache, seqlens, table)
        ref = bench.flashdoc_call(*x)()
        for config in configs:
            diff = (gluon_call(*x, config)().float() - ref.float()).abs().max().item()
            if not diff <= 2e-2:
                sys.exit(
                    f"{batch} x {cache}, pages of {page_size}, {config}: the Gluon kernel's output differs by {diff}"
                )
            worst = max(worst, diff)
    return worst


def general_cache(batch, capacity, heads, kv_heads, d, dtype, page, seed):
    """q, caches, lengths and table for ``check_shapes``: random lengths up to ``capacity`` (the first sequence
    full), pages of ``page`` rows in shuffled order (None: contiguous) over as many pages as ``capacity`` needs, and
    NaN in every cache row past a sequence's length, which must not reach the output."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    kw = dict(device="cuda", dtype=dtype)
    q = torch.randn(batch, 1, heads, d, generator=g, **kw)
    seqlens = torch.randint(1, capacity + 1, (batch,), generator=g, device="cuda", dtype=torch.int32)
    seqlens[0] = capacity
    if page is None:
        table = None
        k_cache = torch.randn(batch, capacity, kv_heads, d, generator=g, **kw)
        v_cache = torch.randn(batch, capacity, kv_heads, d, generator=g, **kw)
    else:
        per_seq = -(-capacity // page)
        table = torch.randperm(batch * per_seq, generator=g, device="cuda").to(torch.int32).reshape(batch, per_seq)
        k_cache = torch.randn(batch * per_seq, page, kv_heads, d, generator=g, **kw)
        v_cache = torch.randn(batch * per_seq, page, kv_heads, d, generator=g, **kw)
    poison_past_lengths(k_cache, v_cache, seqlens, table)
    return q, k_cache, v_cache, seqlens, table


def check_shapes(config: Config) -> int:
    """The kernel's outputs against ``flash_attn_with_kvcache``'s beyond the benchmark's shape, for what moving
    pages to it in the package would take: d = 64 and 128, bf16 and fp16, groups of 1, 4 and 64 query heads,
    caches whose length is not a whole number of tiles (or of pages), per-sequence lengths, pages of 16, 32 and 64
    rows and contiguous caches, one split (output written directly) and the heuristic's count. Exits at the first
    case that differs by more than bf16's rounding of the same sums; returns the number of cases."""
    cases = 0
    shapes = itertools.product((64, 128), (torch.bfloat16, torch.float16), ((8, 8), (32, 8), (64, 1)), (1000, 4096))
    for d, dtype, (heads, kv_heads), capacity in shapes:
        for page in (16, 32, 64, None):
            x = general_cache(3, capacity, heads, kv_heads, d, dtype, page, seed=cases)
            ref = bench.flashdoc_call(*x)()
            for splits in (1, 0):
                ours = gluon_call(*x, config, splits)()
                diff = (ours.float() - ref.float()).abs().max().item()
                if not diff <= 2e-2:
                    sys.exit(
                        f"d = {d}, {dtype}, {heads} heads over {kv_heads}, {capacity} keys, pages of {page}, "
                        f"splits {splits or config.splits(3 * kv_heads, capacity)}: the Gluon kernel's output "
                        f"differs by {diff}"
                    )
                cases += 1
    return cases


def compile_sm90(page: int, d: int = 128, dtype=torch.bfloat16, group: int = 4, split: bool = True):
    """The kernel compiled for sm_90 for a cache of pages of ``page`` rows (0: contiguous, 32k rows a page), head
    dim ``d``, ``group`` query heads a KV head and partial outputs (``split``) or the output itself."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    rows = page or 32768
    cache = torch.empty(64, rows, 8, d, dtype=dtype)
    desc = mangle_type(descriptor(cache, min(rows, DEFAULT.block_n)))
    pointer = {torch.bfloat16: "*bf16", torch.float16: "*fp16"}[dtype]
    sig = dict(Q=pointer, k_desc=desc, v_desc=desc, TABLE="*i32", SEQLENS="*i32", O_PART="*fp32", LSE_PART="*fp32")
    sig.update(OUT=pointer, LSE="*fp32")
    ints = ["stride_qb", "stride_qh", "stride_ob", "stride_oh", "stride_tb", "n_pages", "n_kv_heads", "n_rows"]
    sig.update(dict.fromkeys(ints, "i32"), qk_scale="fp32")
    consts = dict(GROUP=group, PAGE=rows, BLOCK_N=DEFAULT.block_n, STAGES=DEFAULT.stages, SPLIT=split)
    sig.update(dict.fromkeys(consts, "constexpr"))
    names = _paged_split_kv.arg_names
    source = GluonASTSource(_paged_split_kv, sig, {(names.index(k),): v for k, v in consts.items()}, {})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def ptx_counts(ptx: str) -> dict:
    """What a compiled kernel's PTX does in the copies and products."""
    return {
        "bulk copies": len(re.findall(r"cp\.async\.bulk\.tensor", ptx)),
        "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
        # an A operand in registers is a {...} list after the accumulator's; from shared memory, a descriptor
        "wgmma from registers": len(re.findall(r"wgmma\.mma_async[^;]*\}, \{", ptx)),
        # the sequence's length, then the block table's entries
        "int loads": len(re.findall(r"\bld\.global\.b32\s", ptx)),
        "shared stores": len(re.findall(r"\bst\.shared", ptx)),
        "barriers": len(re.findall(r"\bbar\.sync", ptx)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768,8x4096,1x131072")
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument(
        "--configs", default=str(DEFAULT), help="Gluon tile configs, BLOCK_NxSTAGESxPER_SM, comma-separated"
    )
    ap.add_argument("--check", action="store_true", help="compare outputs only (GPU)")
    ap.add_argument("--check-shapes", action="store_true", help="compare outputs over other shapes only (GPU)")
    ap.add_argument("--aot", action="store_true", help="compile for sm_90 and count copies (any machine)")
    a = ap.parse_args()
    if a.aot:
        for page in (0, 16, 64):
            kernel = compile_sm90(page)
            counts = ", ".join(f"{v} {k}" for k, v in ptx_counts(kernel.asm["ptx"]).items())
            print(f"{f'pages of {page}' if page else 'contiguous'}: {counts}; {ptxas_info(kernel)}")
        return
    if not torch.cuda.is_available():
        sys.exit("gluon_paged_decode.py runs a Hopper kernel: it needs the GPU (--aot compiles without one)")

    points = [tuple(int(x) for x in point.split("x")) for point in a.points.split(",")]
    configs = [Config.parse(c) for c in a.configs.split(",")]
    if a.check_shapes:
        for config in configs:
            print(f"{config}: {check_shapes(config)} cases agree with flash_attn_with_kvcache", flush=True)
        return
    for batch, cache in points:
        worst = check(batch, cache, a.page, configs)
        print(f"{batch} x {cache}: outputs agree with flash_attn_with_kvcache (largest difference {worst:.1e})")
    if a.check:
        return
    print(f"pages of {a.page}: TB/s under CUDA graphs (medians of three rotated rounds); Gluon configs are keys a "
          "tile x ring stages x programs an SM")  # fmt: skip
    for batch, cache in points:
        contiguous = [bench.make_cache(batch, cache, None, seed=i) for i in range(bench.copies_for(batch, cache))]
        paged = [bench.make_cache(batch, cache, a.page, seed=i) for i in range(bench.copies_for(batch, cache))]
        variants = {
            "contiguous": [bench.flashdoc_call(*x) for x in contiguous],
            "paged": [bench.flashdoc_call(*x) for x in paged],
        }
        for config in configs:
            variants[f"gluon {config} contiguous"] = [gluon_call(*x, config) for x in contiguous]
            variants[f"gluon {config} paged"] = [gluon_call(*x, config) for x in paged]
        del contiguous, paged
        splits = ", ".join(f"{config}: {config.splits(batch * bench.KV_HEADS, cache)}" for config in configs)
        report_point(batch, cache, variants, note=f" (splits {splits})")


if __name__ == "__main__":
    main()
