"""Paged decode with each page's K and V read by TMA: does it close the gap to a contiguous cache at the small
split points?

    python3 benchmarks/kernels/paged_tma.py [--points 1x4096,1x32768,8x4096,1x131072] [--pages 16,64]
    TRITON_INTERPRET=1 python benchmarks/kernels/paged_tma.py --check   # CPU: its outputs against the shipped ones

Nsight Compute put the paged kernel's gap in per-row address work: a 64-key tile over pages of 16 builds a 64-bit
address for each of its rows from the row's page (benchmarks/FINDINGS.md, Open leads). A tensor descriptor over
the cache's rows (pages x page rows, KV heads x head dim) loads a page of one KV head, or a tile's rows of one page,
as one box, so a tile needs one table entry and one TMA copy a box and no address a row. A tile's boxes are not
joined into one tile (compiled for sm_90, joining four converts their layout through shared memory: 76 shared
stores against the shipped kernel's 22): each box's scores are their own product, the tile's running maximum is
taken over them, and each box's probabilities meet its own V box.

Compiled for sm_90 (Triton 3.6, split, no mask) at the paged entries' 64-key tiles, 4 warps and 5 stages: over
pages of 16 (four boxes a tile) the copy has the shipped kernel's 1,808 instructions, with IMAD 192 against 314,
LEA 43 against 178 and ISETP 94 against 164, but 77 barriers against 24 and 48 tensor-core products against 32
(four 16-key products in place of one 64-key one); over pages of 64 (one box a tile) it has 968 against 1,560,
the same 32 products and 23 barriers against 24. The paged entries count two stages for the shipped kernel's
table loads, which the copy does not stage, so it is also timed at the entry's own depth (3 stages: 1,560 and 888
instructions). A contiguous cache read the same way (a box a 128-key tile, at its own entry) is timed too, since
the target is a ratio between the layouts: 1,008 instructions against 1,560. Whether the GPU gains is what this
times.

The copy is the shipped ``_split_kv`` with its key loop replaced where ``TMA_PAGES`` is set, for a page that
divides the tile or holds whole tiles, without variants. A key past the sequence's end still has its row read, its
score masked to -inf and its probability 0, which is exact for finite cache contents (the timed caches are full);
a kernel that shipped this would mask the last tile's V. Each point is timed as ``paged_lookup.py`` times it: CUDA
graphs over copies of the caches that L2 cannot hold together, three rotated rounds, medians, each page size at
its paged table entry's tile; each output is first checked against the shipped kernel's.
"""

import argparse
import functools
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
from benchmarks.kernels.paged_lookup import UNSPECIALISED  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402

SHIPPED, SHIPPED_LAUNCH = dk._split_kv, dk.launch
# Stands in for the split-KV kernel in a call to be launched through the TMA copy for its tile and page size.
TMA = object()
# The tile's products: BOX keys each, BLOCK_N // BOX of them (BOX = the page, or the tile when a page holds it).
_PRODUCT = """
            if PAGED:
                row{p} = tl.load(BLOCK_TABLE + entry + {p}) * PAGE_SIZE + start_n % PAGE_SIZE
            else:  # one page a sequence, of cache_len rows
                row{p} = (cache_page * cache_len + start_n).to(tl.int32)
            s{p} = tl.dot(q, tl.trans(K_DESC.load([row{p}, off_hk * HEAD_DIM])), input_precision=DOT_PRECISION)
            s{p} = mask_scores(
                s{p}, offs_i[:, None], (start_n + {p} * BOX + offs_p)[None, :], seqlen_k, left_offset,
                right_offset, float("-inf"), True, IS_CAUSAL, IS_LOCAL,
            )"""
_V = """
            acc = tl.dot(p{p}.to(dt), V_DESC.load([row{p}, off_hk * HEAD_DIM]), acc, input_precision=DOT_PRECISION)"""


def _fold(op: str, terms: list) -> str:
    """``op`` over ``terms`` as a balanced tree: nested calls of ``op``, or parenthesised sums for "+"."""
    while len(terms) > 1:
        pairs = [terms[i : i + 2] for i in range(0, len(terms), 2)]
        terms = [
            pair[0] if len(pair) == 1 else f"({pair[0]} + {pair[1]})" if op == "+" else f"{op}({pair[0]}, {pair[1]})"
            for pair in pairs
        ]
    return terms[0]


def _tma_loop(products: int) -> str:
    """The key loop of the TMA copy: ``products`` boxes a tile, each its own product, one running maximum."""
    ps = range(products)
    return (
        f"""    if TMA_PAGES:
        BOX: tl.constexpr = BLOCK_N // {products}
        offs_p = tl.arange(0, BOX)
        for start_n in tl.range(start, end, BLOCK_N):
            if PAGED:  # the table entry of the tile's first page
                entry = off_b * stride_tb + start_n // PAGE_SIZE"""
        + "".join(_PRODUCT.format(p=p) for p in ps)
        + f"""
            m_new = tl.maximum(m_i, {_fold("tl.maximum", [f"tl.max(s{p}, 1)" for p in ps])} * qk_scale)
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.math.exp2(m_i - m_new)"""
        + "".join(f"\n            p{p} = tl.math.exp2(s{p} * qk_scale - m_new[:, None])" for p in ps)
        + f"""
            l_i = l_i * alpha + {_fold("+", [f"tl.sum(p{p}, 1)" for p in ps])}
            acc = acc * alpha[:, None]
            dt = V_DESC.dtype"""
        + "".join(_V.format(p=p) for p in ps)
        + """
            m_i = m_new
    else:
"""
    )


@functools.cache
def tma_kernel(products: int):
    """The shipped ``_split_kv``'s source with the TMA loop (``products`` boxes a tile) beside its own, under
    TMA_PAGES, and the two descriptors as parameters; jitted with the shipped kernel's unspecialised integers.
    Registered in linecache, which is where Triton reads a kernel's source from."""
    fn = getattr(SHIPPED, "fn", SHIPPED)
    src = textwrap.dedent(inspect.getsource(fn))
    src = src[src.index("def _split_kv(") :]
    params_end = "    HAS_LEFTPAD: tl.constexpr = False,\n):"
    loop_start = "    for start_n in tl.range(start, end, BLOCK_N):"
    loop_end = "        m_i = m_new\n"
    if params_end not in src or loop_start not in src or loop_end not in src:
        sys.exit("paged_tma.py: _split_kv's parameters or key loop changed; update the copy here to match")
    src = src.replace(
        params_end,
        "    HAS_LEFTPAD: tl.constexpr = False,\n    K_DESC=None,\n    V_DESC=None,\n"
        "    TMA_PAGES: tl.constexpr = False,\n):",
    )
    a = src.index(loop_start)
    b = src.index(loop_end, a) + len(loop_end)
    src = src[:a] + _tma_loop(products) + textwrap.indent(src[a:b], "    ") + src[b:]
    filename = f"<paged_tma: _split_kv, {products} TMA boxes a tile>"
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    scope = dict(fn.__globals__)
    exec(compile(src, filename, "exec"), scope)
    return triton.jit(scope["_split_kv"], do_not_specialize=UNSPECIALISED)


def _descriptor(cache, box, block_d):
    """``box`` rows of one KV head as one box: the cache's rows (pages x page rows, or sequences x cache length)
    by its columns (KV heads x d)."""
    pages, page_size, kv_heads, head_dim = cache.shape
    return TensorDescriptor.from_tensor(cache.view(pages * page_size, kv_heads * head_dim), [box, block_d])


def _launch_tma(kernel, tuned_kernel, grid, args, meta, config, default_config):
    """``dk.launch``, with the call that ``TMA`` stands in for launched through the TMA copy for its tile and page
    size (uncached, as a launch with an explicit config is), its descriptors made from the call's caches (args 1
    and 2), at ``_launch_tma.stages`` stages if set."""
    if kernel is not TMA:
        return SHIPPED_LAUNCH(kernel, tuned_kernel, grid, args, meta, config, default_config)
    block_n = config.kwargs["BLOCK_N"]
    page = meta["PAGE_SIZE"] if meta["PAGED"] else block_n  # a contiguous cache: a box a tile
    if block_n % page and page % block_n:
        sys.exit(f"paged_tma.py needs a page that divides the tile or that the tile divides, not {meta}, {config}")
    box = min(page, block_n)
    constexprs = {**meta, **config.kwargs, "TMA_PAGES": True}
    descriptors = dict(
        K_DESC=_descriptor(args[1], box, meta["BLOCK_D"]), V_DESC=_descriptor(args[2], box, meta["BLOCK_D"])
    )
    stages = _launch_tma.stages or config.num_stages
    tma_kernel(block_n // box)[grid(constexprs)](
        *args, **constexprs, **descriptors, num_warps=config.num_warps, num_stages=stages
    )
    return None


_launch_tma.stages = None


def call_with(kernel, inputs, config, tma_stages=None):
    """``bench.config_call`` with ``kernel`` (the shipped one, or ``TMA``) as the split-KV kernel: the module
    globals the launch reads, swapped for the call. tma_stages: the TMA copy's pipeline depth instead of the
    paged entry's (which counts two stages for the shipped kernel's table loads)."""
    run, _ = bench.config_call(*inputs, config)

    def call():
        dk._split_kv, dk.launch, _launch_tma.stages = kernel, _launch_tma, tma_stages
        try:
            return run()
        finally:
            dk._split_kv, dk.launch, _launch_tma.stages = SHIPPED, SHIPPED_LAUNCH, None

    return call


def check(batch, cache, page, config, tol):
    """The TMA copy's output is the shipped kernel's within ``tol`` (its products are per box, so its sums are
    ordered differently); returns the largest difference."""
    inputs = bench.make_cache(batch, cache, page)
    shipped = call_with(SHIPPED, inputs, config)()
    tma = call_with(TMA, inputs, config)()
    err = (shipped.float() - tma.float()).abs().max().item()
    if not err <= tol:
        sys.exit(f"{batch} x {cache}, pages of {page}, {config}: the TMA copy's output is off by {err:.3g}")
    return err


# Under the interpreter (the smoke shape's pages of 16 and 32, d = 32): four boxes a tile, two, one, one in a page,
# and a contiguous cache (page None)
CPU_CASES = ((16, 64), (16, 32), (32, 32), (32, 16), (None, 32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768,8x4096,1x131072")
    ap.add_argument("--pages", default="16,64", help="page sizes, each timed at its paged table entry's tile")
    ap.add_argument("--check", action="store_true", help="compare outputs only (small shapes on the CPU)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        if not a.check:
            sys.exit("paged_tma.py times CUDA graphs: it needs a GPU (--check compares outputs on the CPU)")
        with bench.smoke_shape():
            for page, block_n in CPU_CASES:
                config = dk.DecodeConfig(block_n=block_n, warps=4, stages=1, programs_per_sm=1)
                err = check(2, 128, page, config, 1e-5)
                layout = f"pages of {page}" if page else "contiguous"
                print(f"{layout}, {block_n}-key tiles: the TMA copy == shipped within {err:.2g} (fp32)")
        return
    print(f"TB/s under CUDA graphs (medians of {ROUNDS} rotated rounds)")
    for point in a.points.split(","):
        batch, cache = (int(x) for x in point.split("x"))
        fills = dk.fills_gpu(batch * bench.KV_HEADS, 0)
        wide = dk.table_config(bench.HEAD_DIM, 0, fills)
        copies = range(bench.copies_for(batch, cache))
        contiguous = [bench.make_cache(batch, cache, None, seed=i) for i in copies]
        variants = {"contiguous": [call_with(SHIPPED, x, wide) for x in contiguous]}
        errs = [check(batch, cache, None, wide, 2e-2)]  # bf16 outputs
        # a contiguous cache read by TMA too: whether the ratio moves if both layouts take it
        variants["contiguous, TMA"] = [call_with(TMA, x, wide) for x in contiguous]
        for page in (int(p) for p in a.pages.split(",")):
            table = dk.table_config(bench.HEAD_DIM, page, fills)
            errs.append(check(batch, cache, page, table, 2e-2))
            paged = [bench.make_cache(batch, cache, page, seed=i) for i in copies]
            name = f"pages of {page}, {table.block_n} keys"
            variants[name] = [call_with(SHIPPED, x, table) for x in paged]
            variants[f"{name}, TMA"] = [call_with(TMA, x, table) for x in paged]
            # the TMA copy at the entry's own depth, without the two stages a paged launch adds for the shipped
            # kernel's table loads, which the copy does not make
            variants[f"{name}, TMA, {table.stages} stages"] = [call_with(TMA, x, table, table.stages) for x in paged]
            del paged
        del contiguous  # the variants' calls hold them until report_point frees them
        report_point(batch, cache, variants, f"; TMA outputs within {max(errs):.2g} of the shipped")


if __name__ == "__main__":
    main()
