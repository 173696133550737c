"""Compile the tuned configs of flashdoc's Gluon kernels for sm_90 without a GPU, and print a hash of each one's
generated code with ptxas's register and spill counts.

Run it before and after an edit that should not change the generated code (a refactor, a comment, a helper
shared between kernels): equal hashes (of the PTX, or of the machine code, which PTX differing only in its
registers' numbering shares) show that the kernels the tables select are the same instructions as
before, which a CPU machine can check. A different hash means the edit needs an H200 run. Register allocation
on these kernels is sensitive to small source changes (benchmarks/FINDINGS.md).

    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python3 benchmarks/kernels/code_hash.py
        # a Triton 3.6 wheel unpacked in /tmp/t36
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python3 benchmarks/kernels/code_hash.py --portable
        # the tl kernels instead
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python3 benchmarks/kernels/code_hash.py --decode
        # the split-KV decode kernel

ptxas is not always deterministic: the same PTX file of a portable dK/dV kernel assembled to two different SASS
listings, alternating between runs. Equal "code" hashes (the PTX's instructions) with different "sass" hashes
are that, not a change: assemble it again.

``--portable`` compiles every config of the portable kernels' tables (``forward.FWD_CONFIGS``,
``backward.DKDV_CONFIGS`` and ``DQ_CONFIGS``), with and without the causal mask, in bf16 (fp32 for the fp32
entries), with the integer arguments Triton specialises on taken as multiples of 16, as in a typical launch.

``--decode`` compiles the split-KV decode kernel under every entry of its tables (``decode.DECODE_CONFIGS`` and
``TUNED_CONFIGS``), for a contiguous cache and for pages of each tuned size, of 48 rows (dividing no tile) and
of 256 (holding several tiles), with and without splits, at a decode step's shape (4 query heads a KV head, one
query); then the split kernel with every variant at once, the merge and the append kernel. A comma-separated
MATCH after ``--portable`` or ``--decode`` keeps the labels that contain every part
(``--decode d=128,page=16``).

``--variants`` compiles the sliding-window and softcap kernels too (their compile errors, registers and spills
show here, without a GPU); a regular expression as the last argument keeps the labels it matches
(``benchmarks/kernels/code_hash.py --variants 'fwd.*window'``).
"""

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from functools import partial

import torch
import triton

from flashdoc.kernels import backward_hopper as bh
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.launch import constexpr_defaults

POINTERS = {
    "LSE": "*fp32",
    "LSE2": "*fp32",
    "DELTA": "*fp32",
    "COUNTER": "*i32",
    "O": "*bf16",
    "DK": "*bf16",
    "DV": "*bf16",
    "DQ": "*bf16",
    "CU_Q": "*i32",
    "CU_K": "*i32",
    "ORDER": "*i32",
    "ITEMS": "*i32",
    # the split-KV decode kernel's
    "CACHE_SEQLENS": "*i32",
    "CACHE_BATCH_IDX": "*i32",
    "BLOCK_TABLE": "*i32",
    "CACHE_LEFTPAD": "*i32",
    "O_PART": "*fp32",
    "LSE_PART": "*fp32",
    "SLOPES": "*fp32",
}
FLOATS = {"qk_scale", "softmax_scale", "softcap_scale", "cap_in", "cap_out"}
QUERY_ROWS = ("q_desc", "do_desc", "o_desc", "dq_desc")  # tiles of query rows; the other descriptors hold keys
ROWS = ("LSE2", "DELTA")  # the dK/dV kernels' LSE and delta: ``forward_hopper.rows_descriptor``s
# the portable kernels' variant arguments (mask.VariantArgs), None (compiled as constants) without their features
VARIANT_ARGS = ("left_offset", "cap_in", "cap_out", "SLOPES", "alibi_offset", "RNG", "p_drop", "drop_scale")


def ptxas_info(ck):
    """ptxas's register count and spill stores for a kernel compiled for sm_90 (its PTX assembled again), and a
    hash of the machine code: PTX that differs only in its virtual registers' numbers assembles to the same."""
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(ptx, "w") as f:
            f.write(ck.asm["ptx"])
        res = subprocess.run(
            [os.path.join(bin_dir, "ptxas"), "-v", "--gpu-name=sm_90a", ptx, "-o", cubin],
            capture_output=True,
            text=True,
        )
        sass = subprocess.run(
            [os.path.join(bin_dir, "cuobjdump"), "-sass", cubin], capture_output=True, text=True
        ).stdout
    instructions = re.findall(r"/\*[0-9a-f]{4,}\*/\s*([^;]*);", sass)
    return " ".join(
        [f"sass {hashlib.sha1(chr(10).join(instructions).encode()).hexdigest()[:12]}"]
        + re.findall(r"Used \d+ registers|\d+ bytes spill stores", res.stderr)
    )


def code_hash(ptx):
    """A hash of the PTX's instructions alone: without the debug sections, line markers and comments, which move
    with the source's line numbers."""
    end = ptx.find(".section")
    lines = [line.strip() for line in (ptx if end < 0 else ptx[:end]).splitlines()]
    code = [line for line in lines if line and not line.startswith((".loc", ".file", "//", "$L__"))]
    return hashlib.sha1("\n".join(code).encode()).hexdigest()[:12]


def compile_sm90(kernel, descriptors, constants, divisible=()):
    """kernel compiled for sm_90: descriptors (name: host descriptor) and constants (name: value) by parameter
    name, constexprs not given at their defaults; other parameters are typed by name (pointers, float scales, else
    i32), those named in divisible taken as multiples of 16 (bytes for pointers), as Triton specialises them."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    sig, consts = {}, {}
    defaults = constexpr_defaults(kernel)
    for i, name in enumerate(kernel.arg_names):
        if name in descriptors:
            sig[name] = mangle_type(descriptors[name])
        elif name in constants or name in defaults:  # a constexpr left out takes its default, as in a launch
            sig[name] = "constexpr"
            consts[(i,)] = constants.get(name, defaults.get(name))
        else:
            sig[name] = POINTERS.get(name, "fp32" if name in FLOATS else "i32")
    attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]] for name in divisible}
    return triton.compile(
        GluonASTSource(kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4)
    )


def compile_config(kernel, head_dim, block_m, block_n, constants, cols=0, float32=(), rows=(), divisible=()):
    """One of the Gluon kernels compiled for sm_90 in bf16 at head_dim: its query-row descriptors (Q, dO, O, dQ)
    in BLOCK_M rows, its key ones (K, V, dK, dV) in BLOCK_N, all of cols columns (default: head_dim); the
    descriptors named in float32 over fp32 tensors instead (the fused backward's dQ buffer); the parameters named
    in rows as ``forward_hopper.rows_descriptor``s of BLOCK_M (the dK/dV kernels' LSE and delta)."""
    t = torch.empty(2, 1024, 4, head_dim, dtype=torch.bfloat16)
    descriptors = {
        name: fh.descriptor(t.float() if name in float32 else t, block_m if name in QUERY_ROWS else block_n, cols)
        for name in kernel.arg_names
        if name.endswith("_desc")
    }
    descriptors.update({name: fh.rows_descriptor(torch.empty(2, 4, 1024), block_m) for name in rows})
    if not constants.get("VARLEN"):  # a dense launch passes the varlen parameters as None (constants)
        constants = {**dict.fromkeys(set(kernel.arg_names) & set(VARLEN_ARGS + BWD_VARLEN_ARGS)), **constants}
    return compile_sm90(kernel, descriptors, constants, divisible)


# the forward's varlen parameters, None (constants) in a dense launch: forward_hopper.VARLEN_ONLY
VARLEN_ARGS = ("O", "stride_os", "stride_oh", "CU_Q", "CU_K", "ORDER", "n_seqs", "total_q")
# the backward kernels' (backward_hopper.DKDV_VARLEN_ONLY, DQ_VARLEN_ONLY)
BWD_VARLEN_ARGS = (
    *("DK", "DV", "stride_dks", "stride_dkh", "stride_dvs", "stride_dvh"),
    *("DQ", "stride_dqs", "stride_dqh"),
    "ITEMS",
)
# the ones a launch on packed (total, heads, head dim) tensors gets specialised as multiples of 16
BWD_VARLEN_DIVISIBLE = (
    "DK",
    "DV",
    "DQ",
    "stride_dks",
    "stride_dkh",
    "stride_dvs",
    "stride_dvh",
    "stride_dqs",
    "stride_dqh",
)


def compile_forward(head_dim, causal, config, varlen=False, **constants):
    """The Hopper forward compiled for sm_90 in config (block_m, block_n, stages, consumers, persistent), with the
    constexprs its launcher derives from them (and any variant's, in constants); varlen: its VARLEN kernel, with
    the output's pointer and strides specialised as a launch on a packed (total, heads, head_dim) tensor has them."""
    bm, bn, stages, consumers, _persistent = config
    if varlen:
        constants["VARLEN"] = True
    else:
        constants.update(dict.fromkeys(VARLEN_ARGS))
    return compile_config(
        fh._attn_fwd_hopper,
        head_dim,
        bm,
        bn,
        dict(
            IS_CAUSAL=causal,
            BLOCK_M=bm,
            BLOCK_N=bn,
            STAGES=stages,
            N_CONSUMERS=consumers,
            O_IN_Q=head_dim > fh.MAX_SEPARATE_O_HEAD_DIM,
            **constants,
        ),
        divisible=("O", "stride_os", "stride_oh") if varlen else (),
    )


def tuned_kernels():
    """(label, thunk compiling the kernel) for every entry of the three Hopper config tables."""
    for (d, causal), config in fh.HOPPER_CONFIGS.items():
        yield f"fwd  d={d} causal={causal}", partial(compile_forward, d, causal, config)
    for (d, causal), (bm, bn, stages, consumers) in bh.HOPPER_DKDV_CONFIGS.items():
        for order, label in _orders(d, causal):
            if d > bh.MAX_NARROW_HEAD_DIM:
                ck = partial(
                    compile_config,
                    bh._attn_bwd_dkdv_hopper_wide,
                    d,
                    bm,
                    bn,
                    dict(IS_CAUSAL=causal, STAGES=stages, **order),
                    cols=d // 2,
                    rows=ROWS,
                )
            else:
                ck = partial(
                    compile_config,
                    bh._attn_bwd_dkdv_hopper,
                    d,
                    bm,
                    bn,
                    dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, **order),
                    rows=ROWS,
                )
            yield f"dkdv d={d} causal={causal}{label}", ck
    for (d, causal), (bm, bn, stages, consumers) in bh.FUSED_DQ_CONFIGS.items():
        section = bh.FUSED_DQ_SECTIONS.get((d, causal))  # (a launch with fewer pairs compiles its own)
        for ragged in (False, True):  # key lengths that are / are not a multiple of the program's keys
            yield (
                (
                    f"fused d={d} causal={causal}"
                    + (f" sections={section}" if section else "")
                    + (" ragged keys" if ragged else "")
                ),
                partial(
                    compile_config,
                    bh._attn_bwd_dkdv_hopper,
                    d,
                    bm,
                    bn,
                    dict(
                        IS_CAUSAL=causal,
                        STAGES=stages,
                        N_CONSUMERS=consumers,
                        FUSED_DQ=True,
                        RAGGED_KEYS=ragged,
                        **(dict(SECTION=section) if section else {}),
                    ),
                    float32=("dq_desc",),
                    rows=ROWS,
                ),
            )
    for (d, causal), (bm, bn, stages, consumers) in bh.HOPPER_DQ_CONFIGS.items():
        for order, label in _orders(d, causal):
            yield (
                f"dq   d={d} causal={causal}{label}",
                partial(
                    compile_config,
                    bh._attn_bwd_dq_hopper,
                    d,
                    bm,
                    bn,
                    dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, **order),
                ),
            )


def _orders(d, causal):
    """The backward kernel's grid orders a launch can take (constexprs, label): its own, and where causal calls
    go in L2 sections (backward_hopper.SECTIONED_HEAD_DIMS) one sectioned variant (each section size compiles
    its own; 2 stands for them)."""
    yield {}, ""
    if causal and d in getattr(bh, "SECTIONED_HEAD_DIMS", ()):
        yield dict(SECTION=2), " sections=2"


# the variants' constexprs, each on the causal configs (a window runs the causal kernels) or the dense ones
VARIANTS = {
    "window": (True, dict(IS_LOCAL=True)),
    "softcap": (False, dict(SOFTCAP=True)),
    "causal softcap": (True, dict(SOFTCAP=True)),
    "window softcap": (True, dict(IS_LOCAL=True, SOFTCAP=True)),
    # the forward's softcap without a running max (``mask.bounded_exponent``: bf16); the backward has none
    "softcap bounded": (False, dict(SOFTCAP=True, BOUNDED_EXPONENT=True)),
    "causal softcap bounded": (True, dict(SOFTCAP=True, BOUNDED_EXPONENT=True)),
    "window softcap bounded": (True, dict(IS_LOCAL=True, SOFTCAP=True, BOUNDED_EXPONENT=True)),
}


def variant_kernels():
    """(label, thunk compiling the kernel) for the sliding-window and softcap variants of every Hopper kernel
    that takes them: the forward, the dK/dV kernels (narrow and wide) and dQ, on the configs the launchers
    pick."""
    for name, (causal, extra) in VARIANTS.items():
        for d, tab_causal in fh.HOPPER_CONFIGS:
            if tab_causal == causal and (d >= fh.BOUNDED_MIN_HEAD_DIM or "BOUNDED_EXPONENT" not in extra):
                config = fh.table_config((d, tab_causal), "IS_LOCAL" in extra)
                yield f"fwd  d={d} {name}", partial(compile_forward, d, causal, config, **extra)
        if "BOUNDED_EXPONENT" in extra:
            continue
        for (d, tab_causal), (bm, bn, stages, consumers) in bh.HOPPER_DKDV_CONFIGS.items():
            if tab_causal != causal:
                continue
            if d > bh.MAX_NARROW_HEAD_DIM:
                yield (
                    f"dkdv d={d} {name}",
                    partial(
                        compile_config,
                        bh._attn_bwd_dkdv_hopper_wide,
                        d,
                        bm,
                        bn,
                        dict(IS_CAUSAL=causal, STAGES=stages, **extra),
                        cols=d // 2,
                        rows=ROWS,
                    ),
                )
            else:
                yield (
                    f"dkdv d={d} {name}",
                    partial(
                        compile_config,
                        bh._attn_bwd_dkdv_hopper,
                        d,
                        bm,
                        bn,
                        dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, **extra),
                        rows=ROWS,
                    ),
                )
        for (d, tab_causal), (bm, bn, stages, consumers) in bh.HOPPER_DQ_CONFIGS.items():
            if tab_causal == causal:
                yield (
                    f"dq   d={d} {name}",
                    partial(
                        compile_config,
                        bh._attn_bwd_dq_hopper,
                        d,
                        bm,
                        bn,
                        dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, **extra),
                    ),
                )


def compile_portable(kernel, config, descriptors, constants, float32: bool, runtime=()):
    """A portable (``tl``) kernel compiled for sm_90 under one ``triton.Config``: descriptors (name: rows
    meta-parameter) as 4-D ``head_tiles`` descriptors, pointers (``*bf16``/``*fp32``; LSE-like rows fp32), the
    scales fp32, other integers i32, those the kernel specialises taken divisible by 16. The variants' arguments
    are None unless named in ``runtime``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    dtype = "fp32" if float32 else "bf16"
    meta = {**constexpr_defaults(kernel), **constants, **config.kwargs}
    sig, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in meta or (name in VARIANT_ARGS and name not in runtime):  # None without their features
            sig[name] = "constexpr"
            meta.setdefault(name, None)
        elif name in descriptors:
            sig[name] = f"tensordesc<{dtype}[1,{meta[descriptors[name]]},1,{meta['BLOCK_D']}]>"
        elif name.isupper():  # tensors are named in capitals
            sig[name] = POINTERS.get(name, f"*{dtype}")
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = "fp32" if name in FLOATS else "i32"
            if i not in kernel.do_not_specialize and name not in kernel.do_not_specialize:  # indices or names
                attrs[(i,)] = [["tt.divisibility", 16]]
    source = ASTSource(kernel, sig, {(kernel.arg_names.index(k),): v for k, v in meta.items()}, attrs)
    return triton.compile(
        source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=config.num_warps, num_stages=config.num_stages)
    )


def portable_kernels(match=""):
    """(label, compiled kernel) for every config of the portable kernels' tables, causal and not, whose label
    contains every comma-separated part of ``match``."""
    from flashdoc.kernels import backward as b
    from flashdoc.kernels import forward as f

    kernels = (
        ("fwd ", f._attn_fwd, f.FWD_CONFIGS, dict(K="BLOCK_N", V="BLOCK_N", O="BLOCK_M")),
        ("dkdv", b._attn_bwd_dkdv, b.DKDV_CONFIGS, dict(Q="BLOCK_M", DO="BLOCK_M", DK="BLOCK_N", DV="BLOCK_N")),
        ("dq  ", b._attn_bwd_dq, b.DQ_CONFIGS, dict(K="BLOCK_N", V="BLOCK_N", DQ="BLOCK_M")),
    )
    for label, kernel, table, descriptors in kernels:
        for d, float32 in sorted({key[:2] for key in table}):
            for causal in (False, True):
                for config in f.configs_for(table, d, torch.float32 if float32 else torch.bfloat16, causal):
                    constants = dict(
                        HEAD_DIM=d,
                        BLOCK_D=d,
                        IS_CAUSAL=causal,
                        DOT_PRECISION="ieee" if float32 else "tf32",
                        ONE_AXIS=False,
                    )
                    name = (
                        f"{label} d={d} {'fp32' if float32 else 'bf16'} causal={causal} "
                        f"{config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']} s{config.num_stages} "
                        f"w{config.num_warps}{' across' if config.kwargs['ACROSS_HEADS'] else ''}"
                    )
                    if all(part in name for part in match.split(",")):
                        yield name, compile_portable(kernel, config, descriptors, constants, float32)


# A decode step's shape for the split-KV kernel: the recorded benchmark's 32 query heads over 8 KV heads, one query.
DECODE_GROUP, DECODE_SEQLEN_Q, DECODE_KV_HEADS = 4, 1, 8
# Page sizes compiled besides the tuned table's: one the tile lies in (256) and one that divides no tile (48).
DECODE_PAGE_SIZES = (48, 256)


def decode_kernels(match=""):
    """(label, compiled kernel) for the split-KV decode kernel under every entry of ``DECODE_CONFIGS`` and
    ``TUNED_CONFIGS`` (a contiguous cache, the tuned page sizes and ``DECODE_PAGE_SIZES``), with and without
    splits, at a decode step's shape in bf16, whose label contains every comma-separated part of ``match``. Pages
    that hold whole tiles compile as the package launches them, their tiles read as TMA boxes ("tma")."""
    from flashdoc.kernels import decode as dk

    block_m, _ = dk.query_tiles(DECODE_GROUP, DECODE_SEQLEN_Q)
    pages = sorted({key[1] for key in dk.TUNED_CONFIGS} | set(DECODE_PAGE_SIZES))
    for d, fills in sorted(dk.DECODE_CONFIGS):
        for page in (0, *pages):
            config = dk.table_config(d, page, fills)
            # the package's own rule, over a cache of this step's shape (a meta tensor: laid out, never allocated)
            cache = torch.empty(1, page, DECODE_KV_HEADS, d, dtype=torch.bfloat16, device="meta")
            tma = page > 0 and dk.tma_pages(cache, cache, page, config.block_n, None)
            for split in (False, True):
                constants = _split_constants(d, block_m, page, split)
                descriptors = {}
                if tma:
                    constants["TMA_PAGES"] = True
                    descriptors = dict(K_TILES="BLOCK_N", V_TILES="BLOCK_N")
                # a paged cache's stages include the lookups', which a TMA box does not need
                tconfig = config.triton_config(paged=page > 0 and not tma)
                name = (
                    f"decode d={d} {'fills' if fills else 'splits'} {f'page={page}' if page else 'contiguous'}"
                    f"{' tma' if tma else ''} split={split} n{config.block_n} w{tconfig.num_warps} "
                    f"s{tconfig.num_stages}"
                )
                if all(part in name for part in match.split(",")):
                    yield name, compile_portable(dk._split_kv, tconfig, descriptors, constants, float32=False)
    for name, kernel, tconfig, constants, runtime in _decode_others(dk, block_m):
        if all(part in name for part in match.split(",")):
            yield name, compile_portable(kernel, tconfig, {}, constants, float32=False, runtime=runtime)


def _split_constants(d, block_m, page, split):
    """The split-KV kernel's constexprs at a decode step's shape in bf16, without variants; page 0: contiguous."""
    return dict(
        HEAD_DIM=d,
        BLOCK_D=d,
        BLOCK_M=block_m,
        GROUP=DECODE_GROUP,
        PAGED=page > 0,
        PAGE_SIZE=page,
        HAS_BATCH_IDX=False,
        SEQLENS_TENSOR=True,
        IS_CAUSAL=False,
        IS_LOCAL=False,
        SOFTCAP=False,
        ALIBI=False,
        SPLIT=split,
        DOT_PRECISION="tf32",
    )


def _decode_others(dk, block_m):
    """(label, kernel, config, constexprs, runtime variant arguments) of the decode kernels besides the tables'
    entries: the split-KV kernel with every variant at once over pages of 16, the merge, and the append kernel
    (contiguous, paged with interleaved rotary, contiguous with GPT-NeoX rotary)."""
    every = dict(IS_CAUSAL=True, IS_LOCAL=True, SOFTCAP=True, ALIBI=True, HAS_LEFTPAD=True)
    yield (
        "decode d=128 page=16 window softcap alibi leftpad split n64 w4 s5",
        dk._split_kv,
        triton.Config({"BLOCK_N": 64}, num_warps=4, num_stages=5),
        {**_split_constants(128, block_m, 16, True), **every},
        ("cap_in", "cap_out", "SLOPES"),
    )
    yield (
        "merge d=128",
        dk._merge_splits,
        triton.Config({}, num_warps=4, num_stages=2),
        dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_S=32, CHUNK=16),
        (),
    )
    for paged, rotary, interleaved in ((False, False, False), (True, True, True), (False, True, False)):
        yield (
            f"append d=128 {'page=64' if paged else 'contiguous'} rotary={rotary} interleaved={interleaved}",
            dk._append_kv,
            triton.Config({}, num_warps=4, num_stages=1),
            dict(
                HEAD_DIM=128,
                BLOCK_D=128,
                BLOCK_H=32,
                BLOCK_HK=8,
                PAGED=paged,
                PAGE_SIZE=64 if paged else 0,
                HAS_BATCH_IDX=not paged,
                SEQLENS_TENSOR=True,
                APPEND=True,
                ROTARY=rotary,
                INTERLEAVED=interleaved,
                Q_POS_PER_ROW=True,
            ),
            (),
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    for flag, kernels in (("--portable", portable_kernels), ("--decode", decode_kernels)):
        if flag in args:
            # --portable [MATCH] / --decode [MATCH]: only the kernels whose label contains every comma-separated
            # part of MATCH (e.g. "dq", "fwd,causal=True", "decode,page=16")
            i = args.index(flag)
            for label, ck in kernels(args[i + 1] if len(args) > i + 1 else ""):
                print(f"{label}: code {code_hash(ck.asm['ptx'])}  {ptxas_info(ck)}", flush=True)
            sys.exit()
    variants = "--variants" in args
    args = [a for a in args if a != "--variants"]
    keep = re.compile(args[0]) if args else None
    for label, thunk in (*tuned_kernels(), *(variant_kernels() if variants else ())):
        if keep and not keep.search(label):
            continue
        try:
            ck = thunk()
        except Exception as e:  # a variant that does not compile: say so and go on
            print(f"{label}: COMPILE ERROR {type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}", flush=True)
            continue
        print(f"{label}: code {code_hash(ck.asm['ptx'])}  {ptxas_info(ck)}", flush=True)
