"""Variable-length batches: flashdoc's ``flash_attn_varlen_func`` against flashdoc's dense kernel on the same token
count, FlexAttention with a document mask and SDPA's flash backend on the padded batch, on one GPU in one run.

    python3 benchmarks/varlen.py --out OUT      # the benchmark (H200: a few minutes): OUT/results.json, OUT/varlen.md
    python3 benchmarks/varlen.py --smoke --out OUT   # tiny shapes, any device (CPU: the interpreter): the plumbing
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python3 benchmarks/varlen.py --aot
        # compile the varlen kernels' configs for sm_90 without a GPU, print registers and spills
        # (a Triton 3.6 wheel unpacked in /tmp/t36)

The batch: sequence lengths drawn log-uniformly from 128 to 8k (seeded), 64k tokens in all (the last length
trimmed to fit), bf16, 16 heads, head dim 128, causal and not, forward and forward+backward. Every method is
credited with the batch's *useful* FLOPs, summed per sequence (4 x len^2 x heads x d, halved when causal,
x3.5 for forward+backward: ``benchmarks.schema.flops``), so that TFLOP/s compare the same work:

- ``flashdoc-varlen``: ``flash_attn_varlen_func`` on the packed batch.
- ``flashdoc-dense``: ``flash_attn_func`` on a batch of equal sequences with the same token count (length: the
  power of two nearest the mean length), credited with its own FLOPs: the speed the kernels reach without
  varlen's scheduling, the number varlen's should approach.
- ``flex``: ``torch.nn.attention.flex_attention`` (compiled) on the packed batch as one sequence, with a block
  mask of the document ids (and causal within each document).
- ``sdpa-flash``: ``F.scaled_dot_product_attention`` with the flash backend on the batch padded to the longest
  length (no mask: the padding's keys are attended, as a padded batch without varlen pays for them).

Each timing is ``benchmarks.timing.time_ms`` (``triton.testing.do_bench``: median of at least 10 calls, L2
flushed between them), after a first call timed apart (compile, autotune, block mask). Results: ``results.json``
(one record per method, mode and mask) and ``varlen.md`` (TFLOP/s and flashdoc-varlen's ratio to each method),
also printed.
"""

import argparse
import json
import math
import os
import platform
import sys
import time
import types
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: the checkout's flashdoc and benchmarks
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flashdoc  # noqa: E402, I001  (first: without a GPU it turns on Triton's interpreter)
import triton  # noqa: E402

from benchmarks import peers, timing  # noqa: E402
from benchmarks.report import shape_label  # noqa: E402
from benchmarks.schema import flops  # noqa: E402

SHAPE = dict(total=65536, min_len=128, max_len=8192, heads=16, head_dim=128)
SMOKE = dict(total=128, min_len=8, max_len=48, heads=2, head_dim=16)
DTYPE = torch.bfloat16
SEED = 0
METHODS = ("flashdoc-varlen", "flashdoc-dense", "flex", "sdpa-flash")
MODES = ("fwd", "fwd_bwd")


def draw_lengths(total, min_len, max_len, seed=SEED):
    """Log-uniform lengths in [min_len, max_len] summing to total (the last one trimmed)."""
    g = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < total:
        u = torch.rand((), generator=g).item()
        lengths.append(min(round(math.exp(math.log(min_len) + u * (math.log(max_len) - math.log(min_len)))), max_len))
    lengths[-1] -= sum(lengths) - total
    return lengths


def useful_flops(mode, lengths, heads, head_dim, causal):
    """The batch's FLOPs, sequence by sequence (``schema.flops`` of each)."""
    return sum(flops(mode, 1, heads, n, head_dim, causal) for n in lengths)


def dense_shape(lengths):
    """(batch, seqlen) of equal sequences holding the same tokens: seqlen the power of two nearest the mean."""
    total = sum(lengths)
    seqlen = 2 ** round(math.log2(total / len(lengths)))
    return max(total // seqlen, 1), seqlen


# ---------------------------------------------------------------------------------------------------------------
# The methods: each returns (fn(), FLOPs credited, the tensors whose grads to clear)
# ---------------------------------------------------------------------------------------------------------------


def _leaves(*shape, device):
    return [torch.randn(shape, device=device, dtype=DTYPE).requires_grad_() for _ in range(3)]


def _step(attn, leaves, mode):
    """A call of ``attn`` on the leaves, with a backward of a fixed dout (q's shape, as the output's) for fwd_bwd."""
    dout = torch.randn_like(leaves[0])

    def fn():
        o = attn(*leaves)
        if mode == "fwd_bwd":
            o.backward(dout)
        return o

    return fn


def flashdoc_varlen(lengths, heads, head_dim, causal, mode, device):
    total = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    leaves = _leaves(total, heads, head_dim, device=device)

    def attn(q, k, v):
        return flashdoc.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=causal)

    return _step(attn, leaves, mode), useful_flops(mode, lengths, heads, head_dim, causal), leaves


def flashdoc_dense(lengths, heads, head_dim, causal, mode, device):
    batch, seqlen = dense_shape(lengths)
    leaves = _leaves(batch, seqlen, heads, head_dim, device=device)

    def attn(q, k, v):
        return flashdoc.flash_attn_func(q, k, v, causal=causal)

    return _step(attn, leaves, mode), flops(mode, batch, heads, seqlen, head_dim, causal), leaves


def flex_document(lengths, heads, head_dim, causal, mode, device):
    if device != "cuda":
        raise RuntimeError("CPU: torch.compile of FlexAttention takes minutes there, too long for a smoke run")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # one compile per (mask, mode); past dynamo's limits a compiled function silently runs eagerly
    torch._dynamo.config.recompile_limit = max(1024, torch._dynamo.config.recompile_limit)
    torch._dynamo.config.accumulated_recompile_limit = max(4096, torch._dynamo.config.accumulated_recompile_limit)
    total = sum(lengths)
    doc = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))

    def document(b, h, q_idx, kv_idx):
        same = doc[q_idx] == doc[kv_idx]
        return same & (q_idx >= kv_idx) if causal else same

    block_mask = create_block_mask(document, None, None, total, total, device=device)
    compiled = torch.compile(flex_attention, dynamic=False)
    leaves = _leaves(1, heads, total, head_dim, device=device)

    def attn(q, k, v):
        return compiled(q, k, v, block_mask=block_mask)

    return _step(attn, leaves, mode), useful_flops(mode, lengths, heads, head_dim, causal), leaves


def sdpa_padded(lengths, heads, head_dim, causal, mode, device):
    sdpa = peers.peer("sdpa-flash").load(device)
    leaves = _leaves(len(lengths), heads, max(lengths), head_dim, device=device)

    def attn(q, k, v):
        return sdpa(q, k, v, causal)

    return _step(attn, leaves, mode), useful_flops(mode, lengths, heads, head_dim, causal), leaves


LOADERS = {
    "flashdoc-varlen": flashdoc_varlen,
    "flashdoc-dense": flashdoc_dense,
    "flex": flex_document,
    "sdpa-flash": sdpa_padded,
}


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------


def measure(method, lengths, heads, head_dim, causal, mode, sweep):
    """One record: ms (median, p20, p80), TFLOP/s and the first call's seconds, or the error that stopped it."""
    record = dict(method=method, mode=mode, causal=causal)
    try:
        fn, n_flops, leaves = LOADERS[method](lengths, heads, head_dim, causal, mode, sweep.device)
        timing.sync(sweep.device)
        start = time.perf_counter()
        fn()
        timing.sync(sweep.device)
        first_call_s = time.perf_counter() - start
        ms, p20, p80 = timing.time_ms(fn, sweep, leaves if mode == "fwd_bwd" else None)
    except Exception as e:  # a method without a kernel here, out of memory, ...
        record["error"] = peers.failure_reason(e)
        return record
    finally:
        if sweep.device == "cuda":
            torch.cuda.empty_cache()
    record.update(ms=ms, ms_p20=p20, ms_p80=p80, flops=n_flops, tflops=n_flops / ms * 1e-9, first_call_s=first_call_s)
    return record


def markdown(records, meta):
    """TFLOP/s per method (the useful FLOPs; flashdoc-dense its own), and flashdoc-varlen's ratio to each."""
    by_key = {(r["method"], r["mode"], r["causal"]): r for r in records}
    others = [m for m in METHODS if m != "flashdoc-varlen"]
    header = ["mode", "causal", *METHODS, *(f"varlen / {m}" for m in others)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for mode in MODES:
        for causal in (False, True):
            cells = [mode, str(causal)]
            tf = {m: by_key.get((m, mode, causal), {}).get("tflops") for m in METHODS}
            cells += [f"{tf[m]:.4g}" if tf[m] else "—" for m in METHODS]
            ours = tf["flashdoc-varlen"]
            cells += [f"{ours / tf[m]:.2f}x" if ours and tf[m] else "—" for m in others]
            lines.append("| " + " | ".join(cells) + " |")
    errors = [f"- {r['method']} {r['mode']} causal={r['causal']}: {r['error']}" for r in records if "error" in r]
    dense = shape_label(meta["dense_batch"], meta["dense_seqlen"])
    intro = (
        f"{meta['n_seqs']} sequences of {meta['min_len']}-{meta['max_len']} tokens (log-uniform, seed {SEED}), "
        f"{meta['total']} tokens, {meta['heads']} heads, head dim {meta['head_dim']}, bf16, on {meta['gpu']}. "
        f"TFLOP/s of the batch's useful FLOPs; flashdoc-dense: {dense} "
        "tokens, its own FLOPs.\n\n"
    )
    return intro + "\n".join(lines) + ("\n\nNot measured:\n" + "\n".join(errors) if errors else "") + "\n"


def run(out_dir, smoke=False, methods=METHODS):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = SMOKE if smoke else SHAPE
    lengths = draw_lengths(shape["total"], shape["min_len"], shape["max_len"])
    heads, head_dim = shape["heads"], shape["head_dim"]
    sweep = types.SimpleNamespace(device=device, warmup_ms=25, rep_ms=100)
    dense_batch, dense_seqlen = dense_shape(lengths)
    meta = dict(
        **shape,
        n_seqs=len(lengths),
        lengths=lengths,
        seed=SEED,
        dense_batch=dense_batch,
        dense_seqlen=dense_seqlen,
        gpu=torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'interpreter'})",
        torch=torch.__version__,
        triton=triton.__version__,
        smoke=smoke,
    )
    print(
        f"{len(lengths)} sequences, {sum(lengths)} tokens, longest {max(lengths)}; dense {dense_batch}x{dense_seqlen}"
    )
    records = []
    for mode in MODES:
        for causal in (False, True):
            for method in methods:
                record = measure(method, lengths, heads, head_dim, causal, mode, sweep)
                records.append(record)
                shown = (
                    f"{record['tflops']:.1f} TFLOP/s, {record['ms']:.3f} ms" if "tflops" in record else record["error"]
                )
                print(f"{mode:8s} causal={causal!s:5s} {method:16s} {shown}", flush=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(dict(meta=meta, records=records), indent=1))
    table = markdown(records, meta)
    (out / "varlen.md").write_text(table)
    print(table)
    return records


# ---------------------------------------------------------------------------------------------------------------
# Compiling for sm_90 without a GPU
# ---------------------------------------------------------------------------------------------------------------


def aot():
    """Every config of the varlen kernels' tables compiled for sm_90, plain and with every variant on: ptxas's
    registers and spills (the dense kernels' are in ``benchmarks/kernels/code_hash.py --portable``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from benchmarks.kernels.code_hash import ptxas_info
    from flashdoc.kernels import backward, forward, varlen
    from flashdoc.kernels.launch import constexpr_defaults

    pointers = dict(CU_Q="*i32", CU_K="*i32", ORDER="*i32", LSE="*fp32", LSE2="*fp32", DELTA="*fp32")
    pointers.update(SLOPES="*fp32", RNG="*i64")
    floats = {"qk_scale", "softmax_scale", "cap_in", "cap_out", "p_drop", "drop_scale"}
    off = {"cap_in", "cap_out", "SLOPES", "RNG", "p_drop", "drop_scale", "window_left"}  # None without variants
    kernels = (
        ("fwd ", varlen._varlen_fwd, forward.FWD_CONFIGS, dict(K="BLOCK_N", V="BLOCK_N")),
        ("dkdv", varlen._varlen_bwd_dkdv, backward.DKDV_CONFIGS, dict(Q="BLOCK_M", DO="BLOCK_M")),
        ("dq  ", varlen._varlen_bwd_dq, backward.DQ_CONFIGS, dict(K="BLOCK_N", V="BLOCK_N")),
    )
    for label, kernel, table, descriptors in kernels:
        for d, float32 in sorted({key[:2] for key in table}):
            dtype = "fp32" if float32 else "bf16"
            for causal in (False, True):
                for config in forward.configs_for(table, d, torch.float32 if float32 else torch.bfloat16, causal):
                    for variants in (False, True):
                        flags = dict(IS_LOCAL=True, SOFTCAP=True, ALIBI=True, DROPOUT=True) if variants else {}
                        meta = {
                            **constexpr_defaults(kernel),
                            **dict(HEAD_DIM=d, BLOCK_D=d, IS_CAUSAL=causal, CHUNK=varlen.CHUNK, **flags),
                            **dict(DOT_PRECISION="ieee" if float32 else "tf32"),
                            **config.kwargs,
                        }
                        sig, attrs = {}, {}
                        for i, name in enumerate(kernel.arg_names):
                            if name in meta or (name in off and not variants):
                                sig[name] = "constexpr"
                                meta.setdefault(name, None)
                            elif name in descriptors:
                                rows = meta[descriptors[name]]
                                sig[name] = f"tensordesc<{dtype}[1,{rows},1,{d}]>"
                            elif name.isupper():
                                sig[name] = pointers.get(name, f"*{dtype}")
                                attrs[(i,)] = [["tt.divisibility", 16]]
                            else:
                                sig[name] = "fp32" if name in floats else "i32"
                                if i not in kernel.do_not_specialize:
                                    attrs[(i,)] = [["tt.divisibility", 16]]
                        consts = {(kernel.arg_names.index(k),): v for k, v in meta.items()}
                        ck = triton.compile(
                            ASTSource(kernel, sig, consts, attrs),
                            target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=config.num_warps, num_stages=config.num_stages),
                        )
                        name = (
                            f"{label} d={d} {dtype} causal={causal}{' variants' if variants else ''} "
                            f"{config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']} s{config.num_stages} "
                            f"w{config.num_warps}"
                        )
                        print(f"{name}: {ptxas_info(ck)}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-results/varlen", help="folder for results.json and varlen.md")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (a CPU runs them through the interpreter)")
    ap.add_argument("--methods", help=f"comma-separated subset of {','.join(METHODS)}")
    ap.add_argument("--aot", action="store_true", help="compile for sm_90 without a GPU, print registers/spills")
    ap.add_argument("--quick", action="store_true", help="skip FlexAttention (its compiles take most of the run)")
    a = ap.parse_args(argv)
    if a.aot:
        aot()
        return None
    methods = METHODS if a.methods is None else tuple(a.methods.split(","))
    if a.quick and a.methods is None:
        methods = tuple(m for m in METHODS if not m.startswith("flex"))
    unknown = set(methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}; allowed: {', '.join(METHODS)}")
    if not torch.cuda.is_available() and not a.smoke:
        sys.exit("benchmarks/varlen.py measures a GPU; this machine has none (--smoke runs tiny shapes on the CPU)")
    return run(a.out, smoke=a.smoke, methods=methods)


if __name__ == "__main__":
    os.environ.setdefault("FLASHDOC_AUTOTUNE", "1")
    main()
