"""Paged decode with each page's K and V read by TMA: does it close the gap to a contiguous cache at the small
split points?

    python3 benchmarks/kernels/paged_tma.py [--points 1x4096,1x32768,8x4096,1x131072]
    TRITON_INTERPRET=1 python benchmarks/kernels/paged_tma.py --check   # CPU: its output against the shipped one

Nsight Compute put the paged kernel's gap in per-row address work: a 64-key tile over pages of 16 builds a 64-bit
address for each of its rows from the row's page (benchmarks/FINDINGS.md, Open leads). A tensor descriptor over
the cache's rows (pages x page rows, KV heads x head dim) loads a whole page of one KV head as one box, so a tile
needs one table entry and one TMA copy a page and no address a row. The four boxes of a tile are not reassembled
into one 64-key tile (compiled for sm_90, joining them converts their layout through shared memory: 76 shared
stores against the shipped kernel's 22): each page's scores are their own 16-key product, the tile's running
maximum is taken over the four, and each page's probabilities meet its own V box. Compiled so for sm_90 (Triton 3.6,
split, no mask, the paged entry's 4 warps and 5 stages), it has the shipped kernel's 1,808 instructions, with IMAD
196 against 314, LEA 43 against 178 and ISETP 94 against 164, but 77 barriers against 24, 72 waits on the copies'
barriers, and 48 tensor-core products against 32 (the 16-key products are smaller than the tile's): whether the
GPU gains is what this times.

The copy here is the shipped ``_split_kv`` with its key loop replaced where ``TMA_PAGES`` is set; it covers what
the timed points need (four pages of 16 a tile, no variant). A key past the sequence's end still has its page's
row read, its score masked to -inf and its probability 0, which is exact for finite cache contents (the timed
caches are full); a kernel that shipped this would mask the last tile's V. Each point is timed as
``paged_lookup.py`` times it: CUDA graphs over copies of the caches that L2 cannot hold together, three rotated
rounds, medians, at the paged table's tile config; each output is first checked against the shipped kernel's.
"""

import argparse
import inspect
import linecache
import sys
import textwrap
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import flashdoc  # noqa: E402, F401, I001  (first: without a GPU it turns on Triton's interpreter)
import triton  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from benchmarks import decode as bench  # noqa: E402
from benchmarks.kernels.paged_chain import ROUNDS, report_point  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402

PAGE_SIZE, PAGES = 16, 4  # the small points' paged entry: 64-key tiles over pages of 16
SHIPPED, SHIPPED_LAUNCH = dk._split_kv, dk.launch

# The loop that replaces the shipped one under TMA_PAGES: page p of the tile holds keys start_n + 16 p ...
_PAGE = """
            row{p} = tl.load(BLOCK_TABLE + entry + {p}) * PAGE_SIZE
            s{p} = tl.dot(q, tl.trans(K_DESC.load([row{p}, off_hk * HEAD_DIM])), input_precision=DOT_PRECISION)
            s{p} = mask_scores(
                s{p}, offs_i[:, None], (start_n + {p} * PAGE_SIZE + offs_p)[None, :], seqlen_k, left_offset,
                right_offset, float("-inf"), True, IS_CAUSAL, IS_LOCAL,
            )"""
_TMA_LOOP = (
    """    if TMA_PAGES:
        offs_p = tl.arange(0, PAGE_SIZE)
        for start_n in tl.range(start, end, BLOCK_N):
            entry = off_b * stride_tb + start_n // PAGE_SIZE"""
    + "".join(_PAGE.format(p=p) for p in range(PAGES))
    + """
            tile_max = tl.maximum(tl.maximum(tl.max(s0, 1), tl.max(s1, 1)), tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))
            m_new = tl.maximum(m_i, tile_max * qk_scale)
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.math.exp2(m_i - m_new)
            p0 = tl.math.exp2(s0 * qk_scale - m_new[:, None])
            p1 = tl.math.exp2(s1 * qk_scale - m_new[:, None])
            p2 = tl.math.exp2(s2 * qk_scale - m_new[:, None])
            p3 = tl.math.exp2(s3 * qk_scale - m_new[:, None])
            l_i = l_i * alpha + (tl.sum(p0, 1) + tl.sum(p1, 1)) + (tl.sum(p2, 1) + tl.sum(p3, 1))
            acc = acc * alpha[:, None]
            dt = V_DESC.dtype
            acc = tl.dot(p0.to(dt), V_DESC.load([row0, off_hk * HEAD_DIM]), acc, input_precision=DOT_PRECISION)
            acc = tl.dot(p1.to(dt), V_DESC.load([row1, off_hk * HEAD_DIM]), acc, input_precision=DOT_PRECISION)
            acc = tl.dot(p2.to(dt), V_DESC.load([row2, off_hk * HEAD_DIM]), acc, input_precision=DOT_PRECISION)
            acc = tl.dot(p3.to(dt), V_DESC.load([row3, off_hk * HEAD_DIM]), acc, input_precision=DOT_PRECISION)
            m_i = m_new
    else:
"""
)


def _tma_kernel():
    """The shipped ``_split_kv``'s source with the TMA loop beside its own (under TMA_PAGES) and the two
    descriptors as parameters, jitted with the shipped kernel's unspecialised integers. Registered in linecache,
    which is where Triton reads a kernel's source from."""
    fn = getattr(SHIPPED, "fn", SHIPPED)
    src = textwrap.dedent(inspect.getsource(fn))
    src = src[src.index("def _split_kv(") :]
    params_end = "    HAS_LEFTPAD: tl.constexpr = False,\n):"
    loop_start = "    for start_n in tl.range(start, end, BLOCK_N):"
    loop_end = "        m_i = m_new\n"
    if params_end not in src or loop_start not in src:
        sys.exit("paged_tma.py: _split_kv's parameters or key loop changed; update the copy here to match")
    a = src.index(loop_start)
    b = src.index(loop_end, a) + len(loop_end)
    src = src.replace(
        params_end,
        "    HAS_LEFTPAD: tl.constexpr = False,\n    K_DESC=None,\n    V_DESC=None,\n"
        "    TMA_PAGES: tl.constexpr = False,\n):",
    )
    a = src.index(loop_start)
    src = src[:a] + _TMA_LOOP + textwrap.indent(src[a:b], "    ") + src[b:]
    filename = "<paged_tma: _split_kv with TMA pages>"
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    scope = dict(fn.__globals__)
    exec(compile(src, filename, "exec"), scope)
    names = [SHIPPED.arg_names[i] if isinstance(i, int) else i for i in getattr(SHIPPED, "do_not_specialize", ())]
    return triton.jit(scope["_split_kv"], do_not_specialize=names)


TMA_KERNEL = _tma_kernel()


def _descriptor(cache, block_d):
    """A page of one KV head as one box: the cache's rows (pages x page rows) by its columns (KV heads x d)."""
    pages, page_size, kv_heads, head_dim = cache.shape
    rows = cache.view(pages * page_size, kv_heads * head_dim)
    return TensorDescriptor.from_tensor(rows, [page_size, block_d])


def _launch_tma(kernel, tuned_kernel, grid, args, meta, config, default_config):
    """``dk.launch`` for the TMA copy (uncached, as the launch with an explicit config is): its descriptors are
    made from the call's caches (args 1 and 2)."""
    if kernel is not TMA_KERNEL:
        return SHIPPED_LAUNCH(kernel, tuned_kernel, grid, args, meta, config, default_config)
    if not (meta["PAGED"] and meta["PAGE_SIZE"] == PAGE_SIZE and config.kwargs["BLOCK_N"] == PAGE_SIZE * PAGES):
        sys.exit(f"paged_tma.py covers pages of {PAGE_SIZE} in {PAGE_SIZE * PAGES}-key tiles, not {meta}, {config}")
    constexprs = {**meta, **config.kwargs, "TMA_PAGES": True}
    descriptors = dict(K_DESC=_descriptor(args[1], meta["BLOCK_D"]), V_DESC=_descriptor(args[2], meta["BLOCK_D"]))
    kernel[grid(constexprs)](
        *args, **constexprs, **descriptors, num_warps=config.num_warps, num_stages=config.num_stages
    )
    return None


def call_with(kernel, inputs, config):
    """``bench.config_call`` with ``kernel`` as the split-KV kernel (the module globals the launch reads)."""
    run, _ = bench.config_call(*inputs, config)

    def call():
        dk._split_kv, dk.launch = kernel, _launch_tma
        try:
            return run()
        finally:
            dk._split_kv, dk.launch = SHIPPED, SHIPPED_LAUNCH

    return call


def check(batch, cache, config, tol):
    """The TMA copy's output is the shipped kernel's within ``tol`` (its products are per page, so its sums are
    ordered differently)."""
    inputs = bench.make_cache(batch, cache, PAGE_SIZE)
    shipped = call_with(SHIPPED, inputs, config)()
    tma = call_with(TMA_KERNEL, inputs, config)()
    err = (shipped.float() - tma.float()).abs().max().item()
    if not err <= tol:
        sys.exit(f"{batch} x {cache}, pages of {PAGE_SIZE}, {config}: the TMA copy's output is off by {err:.3g}")
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768,8x4096,1x131072")
    ap.add_argument("--check", action="store_true", help="compare outputs only (small shapes on the CPU)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        if not a.check:
            sys.exit("paged_tma.py times CUDA graphs: it needs a GPU (--check compares outputs on the CPU)")
        config = dk.DecodeConfig(block_n=PAGE_SIZE * PAGES, warps=4, stages=1, programs_per_sm=1)
        with bench.smoke_shape():
            err = check(2, 128, config, 1e-5)
        print(f"TMA pages == shipped within {err:.2g} (fp32), pages of {PAGE_SIZE}, {config}")
        return
    print(f"pages of {PAGE_SIZE}: TB/s under CUDA graphs (medians of {ROUNDS} rotated rounds)")
    for point in a.points.split(","):
        batch, cache = (int(x) for x in point.split("x"))
        fills = dk.fills_gpu(batch * bench.KV_HEADS, 0)
        table = dk.table_config(bench.HEAD_DIM, PAGE_SIZE, fills)
        wide = dk.table_config(bench.HEAD_DIM, 0, fills)
        err = check(batch, cache, table, 2e-2)  # bf16 outputs
        contiguous = [bench.make_cache(batch, cache, None, seed=i) for i in range(bench.copies_for(batch, cache))]
        paged = [bench.make_cache(batch, cache, PAGE_SIZE, seed=i) for i in range(bench.copies_for(batch, cache))]
        variants = {
            "contiguous": [call_with(SHIPPED, x, wide) for x in contiguous],
            f"paged, {table.block_n} keys": [call_with(SHIPPED, x, table) for x in paged],
            f"paged by TMA, {table.block_n} keys": [call_with(TMA_KERNEL, x, table) for x in paged],
        }
        del contiguous, paged  # the variants' calls hold them until report_point frees them
        report_point(batch, cache, variants, f"; TMA output within {err:.2g} of the shipped")


if __name__ == "__main__":
    main()
