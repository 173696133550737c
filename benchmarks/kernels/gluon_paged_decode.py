"""The package's Gluon paged-decode kernel (``flashdoc/kernels/decode_hopper.py``) against its Triton one, under
other tile configs and over more shapes than the tests'.

    python3 benchmarks/kernels/gluon_paged_decode.py --check        # GPU: outputs against the Triton kernel's
    python3 benchmarks/kernels/gluon_paged_decode.py --check-shapes [--configs 128x2x1]   # the same, other shapes
    python3 benchmarks/kernels/gluon_paged_decode.py [--points 1x4096,1x32768,8x4096,1x131072] [--page 16]
        [--configs 128x2x1,64x3x1]  # Gluon tile configs: keys a tile x ring stages x programs an SM
    python benchmarks/kernels/gluon_paged_decode.py --aot           # any machine: compile for sm_90, count the copies

``decode_hopper``'s docstring says what the kernel does and why; ``decode.hopper_takes`` says which calls the
package sends it, at ``decode.HOPPER_PAGED_CONFIG`` (``DEFAULT`` here). This script calls the kernel directly, so
that it can try other configs, pages of other sizes and a contiguous cache (one page a sequence, which separates
what the pages cost from what the kernel costs), and compares it with the package's Triton kernel: it sets
FLASHDOC_HOPPER=0 before importing flashdoc, which keeps every package call on the portable kernels.

``--check-shapes`` compares outputs over d = 64 and 128, bf16 and fp16, groups of 1, 4 and 64, lengths that are not
whole tiles, pages of 16, 32 and 64 and contiguous caches, one split and the heuristic's. ``--aot`` compiles the
kernel for sm_90 and counts its copies, products and loads (``tests/benchmarks/test_gluon_paged_decode.py``).

Timed as the decode benchmark's graph timer times (``paged_chain.report_point``: CUDA graphs over copies of the
caches that L2 cannot hold together, three rotated rounds, medians), TB/s and the ratio to the package's
contiguous call, after ``--check``'s comparison at the point.
"""

import argparse
import itertools
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# the package's own calls, the comparison's baseline, on the Triton kernels (read when flashdoc is imported)
os.environ["FLASHDOC_HOPPER"] = "0"

import flashdoc  # noqa: E402, F401, I001  (first: without a GPU it turns on Triton's interpreter)
import triton  # noqa: E402

from benchmarks import decode as bench  # noqa: E402
from benchmarks.kernels.code_hash import ptxas_info  # noqa: E402
from benchmarks.kernels.paged_chain import report_point  # noqa: E402
from flashdoc.kernels import LOG2E  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402
from flashdoc.kernels import gluon_support  # noqa: E402

from flashdoc.kernels import decode_hopper  # noqa: E402
from flashdoc.kernels.hopper_common import GLUON  # noqa: E402

if not GLUON:
    sys.exit(f"gluon_paged_decode.py needs Gluon from a verified Triton: {gluon_support.REASON}")


class Config(NamedTuple):
    """A tile config: keys a tile, tiles in the ring (``stages - 1`` in flight) and programs an SM, which with the
    package's heuristic sets the split count."""

    block_n: int
    stages: int
    per_sm: int

    @classmethod
    def parse(cls, text: str) -> "Config":
        return cls(*(int(x) for x in text.split("x")))

    @classmethod
    def of(cls, config: dk.DecodeConfig) -> "Config":
        return cls(config.block_n, config.stages, config.programs_per_sm)

    def __str__(self):
        return f"{self.block_n}x{self.stages}x{self.per_sm}"

    def splits(self, programs: int, cache: int) -> int:
        """The package's split count for ``programs`` (sequences x KV heads) over ``cache`` keys under this config."""
        config = dk.DecodeConfig(block_n=self.block_n, warps=4, stages=self.stages, programs_per_sm=self.per_sm)
        return dk.splits_for(programs, cache, config, 0)


# the package's config (``decode.HOPPER_PAGED_CONFIG``)
DEFAULT = Config.of(dk.HOPPER_PAGED_CONFIG)


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
    if heads // kv_heads > decode_hopper.BLOCK_M:
        raise ValueError(
            f"{heads} query heads over {kv_heads} KV heads: a program's tile holds {decode_hopper.BLOCK_M}"
        )
    if table is None:
        table = torch.arange(batch, device=q.device, dtype=torch.int32)[:, None]
    capacity = page * table.shape[1]
    k_desc, v_desc = decode_hopper.descriptors(k_cache, v_cache, block_n)
    splits = splits or config.splits(batch * kv_heads, capacity)
    n_rows = batch * heads
    o_part = torch.empty(splits, n_rows, d, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(splits, n_rows, device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, 1, device=q.device, dtype=torch.float32)
    block_s = triton.next_power_of_2(splits)
    qk_scale = d**-0.5 * LOG2E

    def call():
        decode_hopper._paged_decode[(batch * kv_heads, splits)](
            q, k_desc, v_desc, table, seqlens, o_part, lse_part, out, lse, q.stride(0), q.stride(2), out.stride(0),
            out.stride(2), table.stride(0), table.shape[1], kv_heads, n_rows, 0, 0, qk_scale, GROUP=heads // kv_heads,
            PAGE_SIZE=page, BLOCK_N=block_n, STAGES=config.stages, SPLIT=splits > 1, SEQLENS_TENSOR=True, num_warps=4,
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
    desc = mangle_type(decode_hopper.descriptors(cache, cache, DEFAULT.block_n)[0])
    pointer = {torch.bfloat16: "*bf16", torch.float16: "*fp16"}[dtype]
    sig = dict(Q=pointer, k_desc=desc, v_desc=desc, BLOCK_TABLE="*i32", CACHE_SEQLENS="*i32")
    sig.update(O_PART="*fp32", LSE_PART="*fp32", O=pointer, LSE="*fp32")
    ints = ["stride_qb", "stride_qh", "stride_ob", "stride_oh", "stride_tb", "max_pages", "n_kv_heads", "n_rows"]
    ints += ["cache_seqlen_const", "seqlen_new"]
    sig.update(dict.fromkeys(ints, "i32"), qk_scale="fp32")
    consts = dict(GROUP=group, PAGE_SIZE=rows, BLOCK_N=DEFAULT.block_n, STAGES=DEFAULT.stages, SPLIT=split)
    consts.update(SEQLENS_TENSOR=True)
    sig.update(dict.fromkeys(consts, "constexpr"))
    kernel = decode_hopper._paged_decode
    names = kernel.arg_names
    source = GluonASTSource(kernel, sig, {(names.index(k),): v for k, v in consts.items()}, {})
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
