"""Paged decode with one block-table lookup per page or one per row: which closes more of the gap to a contiguous
cache at the small split points?

    python3 benchmarks/kernels/paged_lookup.py [--points 1x4096,1x32768,8x4096,1x131072] [--page 16]
    TRITON_INTERPRET=1 python benchmarks/kernels/paged_lookup.py --check   # CPU: every lookup gives one output

Where a tile of keys spans several pages, a lookup per row loads a page number for every row: a 64-key tile over
pages of 16 reads each of its four table entries 16 times, and Nsight Compute counted 2.2-2.3x the contiguous
kernel's instructions at these points (benchmarks/FINDINGS.md). One lookup per page loads the tile's
``BLOCK_N // PAGE_SIZE`` entries as one vector and spreads each over its page's rows with a reshape, which
compiles to fewer integer instructions and more barriers (the reshape's layout conversion goes through shared
memory). The shipped ``_cache_rows`` looks up once a page over at most ``MAX_PAGES_PER_LOOKUP`` pages and once a
row over more; the two copies of ``_split_kv`` here take one rule each at every page count, so each column times
one lookup whatever the tile.

Each point is timed as the decode benchmark's graph timer does it (a CUDA graph over copies of the caches that
L2 cannot hold together, three rounds in rotated order, medians): the contiguous cache, then the paged one with
each lookup, at the tile config the paged table has for the point's regime and at the contiguous cache's (128
keys, one program an SM); the contiguous cache under the paged table's tile config, which separates what the
tile costs from what the pages cost; and both caches through the public ``flash_attn_with_kvcache``, as the decode
benchmark calls them (its own config and split count). Every copy's output is checked against the shipped
kernel's first.
"""

import argparse
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import flashdoc  # noqa: E402, F401, I001  (first: without a GPU it turns on Triton's interpreter)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from benchmarks import decode as bench  # noqa: E402
from benchmarks.kernels.paged_chain import ROUNDS, report_point  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402
from flashdoc.kernels.decode import _cache_rows  # noqa: E402


@triton.jit
def _cache_rows_per_page(
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
    """``dk._cache_rows`` with one table load per page wherever a tile covers several whole pages, however many
    (the copies here only ever see a paged cache's tiles: PAGE_SIZE and TILE_ROWS > 0)."""
    if TILE_ROWS > PAGE_SIZE and TILE_ROWS % PAGE_SIZE == 0:
        PAGES: tl.constexpr = TILE_ROWS // PAGE_SIZE
        logical = pos // PAGE_SIZE
        entry = tl.min(logical, 0) + tl.arange(0, PAGES)
        pages = tl.load(BLOCK_TABLE + off_b * stride_tb + entry, mask=entry < max_pages, other=0)
        page = tl.reshape(tl.broadcast_to(pages[:, None], (PAGES, PAGE_SIZE)), (TILE_ROWS,))
        return page.to(tl.int64), pos % PAGE_SIZE, logical < max_pages
    else:
        return _cache_rows(
            BLOCK_TABLE, stride_tb, max_pages, cache_page, cache_len, off_b, pos, PAGED, PAGE_SIZE, TILE_ROWS
        )


@triton.jit
def _cache_rows_per_row(
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
    """``dk._cache_rows`` with one table load per row wherever a tile spans pages (one a tile within a page)."""
    if PAGE_SIZE % TILE_ROWS == 0:
        return _cache_rows(
            BLOCK_TABLE, stride_tb, max_pages, cache_page, cache_len, off_b, pos, PAGED, PAGE_SIZE, TILE_ROWS
        )
    else:
        return _cache_rows(BLOCK_TABLE, stride_tb, max_pages, cache_page, cache_len, off_b, pos, PAGED, PAGE_SIZE, 0)


def _split_kv_with(lookup):
    """A second ``_split_kv`` from the same source, whose ``_cache_rows`` is ``lookup``."""
    fn = getattr(dk._split_kv, "fn", dk._split_kv)
    scope = dict(fn.__globals__, _cache_rows=lookup)
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__module__, copy.__qualname__, copy.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    copy.__annotations__ = dict(fn.__annotations__)  # the tl.constexpr parameters (FunctionType drops them)
    return triton.jit(copy, do_not_specialize=UNSPECIALISED)


SHIPPED = dk._split_kv
# the shipped kernel's unspecialised integers, which every copy keeps (names, or their indices once Triton has
# read them)
UNSPECIALISED = [SHIPPED.arg_names[i] if isinstance(i, int) else i for i in getattr(SHIPPED, "do_not_specialize", ())]
PER_PAGE = _split_kv_with(_cache_rows_per_page)
PER_ROW = _split_kv_with(_cache_rows_per_row)


def call_with(kernel, inputs, config):
    """``bench.config_call`` with ``kernel`` as the split-KV kernel (the module global the launch reads)."""
    run, _ = bench.config_call(*inputs, config)

    def call():
        dk._split_kv = kernel
        try:
            return run()
        finally:
            dk._split_kv = SHIPPED

    return call


def output_of(kernel, inputs, config):
    """The attention output of one call with ``kernel``."""
    return call_with(kernel, inputs, config)()


def check(batch, cache, page, config):
    """Both lookups give the shipped kernel's output, bit for bit (the same loads, in the same order)."""
    inputs = bench.make_cache(batch, cache, page)
    shipped = output_of(SHIPPED, inputs, config)
    for name, kernel in (("per-page", PER_PAGE), ("per-row", PER_ROW)):
        if not torch.equal(shipped, output_of(kernel, inputs, config)):
            sys.exit(f"{batch} x {cache}, pages of {page}, {config}: the {name} lookup's output differs")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768,8x4096,1x131072")
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--check", action="store_true", help="compare outputs only (small shapes on the CPU)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        if not a.check:
            sys.exit("paged_lookup.py times CUDA graphs: it needs a GPU (--check compares outputs on the CPU)")
        with bench.smoke_shape():  # the interpreter's tiles: 32 keys, two pages of 16
            check(2, 128, a.page, dk.CPU_DECODE_CONFIG)
        print(f"per-page lookup == per-row lookup == shipped, pages of {a.page}, {dk.CPU_DECODE_CONFIG}")
        return
    if a.check:
        check(1, 4096, a.page, dk.table_config(bench.HEAD_DIM, a.page))
        print(f"per-page lookup == per-row lookup == shipped at 1 x 4096, pages of {a.page}")
        return
    print(f"pages of {a.page}: TB/s under CUDA graphs (medians of {ROUNDS} rotated rounds)")
    for point in a.points.split(","):
        batch, cache = (int(x) for x in point.split("x"))
        fills = dk.fills_gpu(batch * bench.KV_HEADS, 0)  # one query tile per sequence and KV head
        table = dk.table_config(bench.HEAD_DIM, a.page, fills)
        # the contiguous cache's own config (128-key tiles, one program an SM): 128-key tiles under the paged
        # entry's two programs an SM would not fit two programs' buffers in one SM's shared memory
        wide = dk.table_config(bench.HEAD_DIM, 0, fills)
        contiguous = [bench.make_cache(batch, cache, None, seed=i) for i in range(bench.copies_for(batch, cache))]
        paged = [bench.make_cache(batch, cache, a.page, seed=i) for i in range(bench.copies_for(batch, cache))]
        for config in (table, wide):
            check(batch, cache, a.page, config)
        variants = {
            "contiguous": [call_with(SHIPPED, x, wide) for x in contiguous],
            # the contiguous cache under the paged tile config: how much of the gap is the tile, not the pages
            f"contiguous, {table.block_n} keys": [call_with(SHIPPED, x, table) for x in contiguous],
            f"per row, {table.block_n} keys": [call_with(PER_ROW, x, table) for x in paged],
            f"per page, {table.block_n} keys": [call_with(PER_PAGE, x, table) for x in paged],
            "per row, contiguous's config": [call_with(PER_ROW, x, wide) for x in paged],
            "per page, contiguous's config": [call_with(PER_PAGE, x, wide) for x in paged],
            # the public call, as the decode benchmark times it (its own config and split count, an output per call)
            "contiguous, public call": [bench.flashdoc_call(*x) for x in contiguous],
            "paged, public call": [bench.flashdoc_call(*x) for x in paged],
        }
        del contiguous, paged  # the variants' calls hold them until report_point frees them
        report_point(batch, cache, variants)


if __name__ == "__main__":
    main()
