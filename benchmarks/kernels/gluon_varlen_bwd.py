"""A/B harness for the varlen backward on the Hopper backward kernels in Gluon (``varlen.varlen_bwd_dkdv_hopper``
and ``varlen_bwd_dq_hopper``: the kernels of flashdoc/kernels/backward_hopper.py with VARLEN) against the portable
varlen backward (``varlen._varlen_bwd_dkdv``, ``_varlen_bwd_dq``).

    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python benchmarks/kernels/gluon_varlen_bwd.py --aot
        # compile every variant for sm_90 here (a Triton 3.6 wheel in /tmp/t36, no GPU): registers, spills
    PYTHONPATH=. python benchmarks/kernels/gluon_varlen_bwd.py --check     # on an H200: against the portable one
    PYTHONPATH=. python benchmarks/kernels/gluon_varlen_bwd.py --bench     # on an H200: TFLOP/s, three ways
    CUDA_LAUNCH_BLOCKING=1 PYTHONPATH=. python benchmarks/kernels/gluon_varlen_bwd.py --first-call --lengths 1 1000
        # one small case (d = 128), launch by launch, each synchronised: names the kernel that faults

``--check`` runs random length mixes (with lengths 0, 1, 63, 64, 65, 127, 128, 129, 1000 and 8192 among them)
through one forward, then both backwards from its output and LSE: causal and not, windows, softcap, GQA, d = 64,
128 and 256, bf16 and fp16. It prints the worst dq, dk and dv differences relative to each gradient's scale
(its largest magnitude), and every case over the limit; it exits nonzero on any. The Hopper gradients start as
NaN, so a row the kernels never write shows as a mismatch.

``--bench`` times benchmarks/varlen.py's batch (log-uniform lengths 128-8192, 64k tokens, 16 heads, d = 128,
bf16), causal and not, backward alone and forward + backward: the portable varlen backward, the Hopper one, and
the dense Hopper path on equal sequences of the same token count (``benchmarks.varlen.dense_shape``). The varlen
runs are credited with each sequence's FLOPs (``benchmarks.varlen.useful_flops``), the dense one with its own;
same process, rotated order, median of 3 ``do_bench`` runs each.

Configs: the tables' (``backward_hopper.HOPPER_DKDV_CONFIGS``, ``HOPPER_DQ_CONFIGS``), as the dense calls take them.
"""

import argparse
import sys

import torch

from benchmarks.kernels.code_hash import BWD_VARLEN_DIVISIBLE, ROWS, compile_config, ptxas_info
from benchmarks.kernels.gluon_varlen import LAYOUTS as FORWARD_LAYOUTS
from benchmarks.kernels.gluon_varlen import MASKS, cu_seqlens, length_mixes, packed, varlen_tflops
from flashdoc.kernels import backward_hopper as bh
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels import varlen
from flashdoc.kernels.launch import on_device
from flashdoc.kernels.mask import Variant

# the variants as the Hopper backward compiles them: (name, causal, the constexprs beside IS_CAUSAL)
VARIANTS = [
    ("full", False, {}),
    ("causal", True, {}),
    ("window", True, dict(IS_LOCAL=True)),
    ("softcap", False, dict(SOFTCAP=True)),
    ("causal softcap", True, dict(SOFTCAP=True)),
    ("window softcap", True, dict(IS_LOCAL=True, SOFTCAP=True)),
]


def _compile(kernel, d, cfg, causal, extra, **kwargs):
    divisible = tuple(name for name in BWD_VARLEN_DIVISIBLE if name in kernel.arg_names)
    constants = dict(IS_CAUSAL=causal, STAGES=cfg[2], VARLEN=True, **extra)
    if "N_CONSUMERS" in kernel.arg_names:
        constants["N_CONSUMERS"] = cfg[3]
    return compile_config(kernel, d, cfg[0], cfg[1], constants, divisible=divisible, **kwargs)


def aot(head_dims=(64, 128, 256)):
    """Compile the VARLEN dK/dV (narrow or wide) and dQ kernels of every variant and head dim for sm_90 without
    a GPU, in their table configs, and print registers, spills and shared memory (a launch fails past the
    H200's 227 KiB; the compiler does not check)."""
    for d in head_dims:
        for name, causal, extra in VARIANTS:
            key = (d, causal)
            if key not in bh.HOPPER_DKDV_CONFIGS:  # (d = 64 without a mask: the causal entry, as a window takes)
                key = (d, True)
            runs = []
            cfg = bh.HOPPER_DKDV_CONFIGS[key]
            if d > bh.MAX_NARROW_HEAD_DIM:
                runs.append(
                    (
                        "dkdv wide",
                        lambda: _compile(bh._attn_bwd_dkdv_hopper_wide, d, cfg, causal, extra, cols=d // 2, rows=ROWS),
                        cfg,
                    )
                )
            else:
                runs.append(("dkdv", lambda: _compile(bh._attn_bwd_dkdv_hopper, d, cfg, causal, extra, rows=ROWS), cfg))
            dq_cfg = bh.HOPPER_DQ_CONFIGS[key]
            runs.append(("dq", lambda: _compile(bh._attn_bwd_dq_hopper, d, dq_cfg, causal, extra), dq_cfg))
            for kernel, thunk, c in runs:
                try:
                    ck = thunk()
                    info = f"{ptxas_info(ck)}, {ck.metadata.shared} B shared (at most 232448)"
                except Exception as e:  # a config that does not compile: say so and go on
                    info = f"COMPILE ERROR {type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}"
                print(f"varlen {kernel} d={d} {name} {c}: {info}", flush=True)


def forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, variant=None):
    """out and lse from the varlen forward as a call takes it (the Hopper one where it runs)."""
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[1], q.shape[0], device=q.device)
    varlen.varlen_fwd(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, q.shape[2] ** -0.5, causal, None, variant)
    return out, lse


def _grads(q, k, v, grads):
    """The gradients to write: given, or NaN-filled (so that a row never written shows)."""
    return tuple(torch.full_like(t, float("nan")) for t in (q, k, v)) if grads is None else grads


def hopper_backward(dout, q, k, v, out, lse, cu_q, cu_k, max_k, causal, variant=None, grads=None):
    """dq, dk, dv from the Hopper varlen launchers called directly (``varlen_bwd``'s Hopper branch), in the
    tables' configs, or their causal entry where the tables have no key (d = 64 without a mask, which routed
    calls leave on the portable kernels): every mask runs here."""
    from flashdoc.kernels.backward import bwd_preprocess

    variant = variant or Variant()
    dq, dk, dv = grads = _grads(q, k, v, grads)
    key = fh.table_key(q, causal, variant.window_size)
    dkdv_cfg = bh.HOPPER_DKDV_CONFIGS.get(key) or bh.HOPPER_DKDV_CONFIGS[(key[0], True)]
    dq_cfg = bh.HOPPER_DQ_CONFIGS.get(key) or bh.HOPPER_DQ_CONFIGS[(key[0], True)]
    tail = (max_k, q.shape[2] ** -0.5, causal, variant)
    with on_device(q.device):
        delta, lse2 = bwd_preprocess(dout.unsqueeze(0), out.unsqueeze(0), lse.unsqueeze(0), None)
        order_q, order_k = varlen.schedule(cu_q), varlen.schedule(cu_k)
        varlen.varlen_bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, cu_q, cu_k, order_q, *tail, dkdv_cfg)
        varlen.varlen_bwd_dq_hopper(q, k, v, dout, dq, lse2, delta, cu_q, cu_k, order_k, *tail, dq_cfg)
    return grads


def routed_backward(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, variant=None, grads=None):
    """dq, dk, dv from ``varlen.varlen_bwd`` as calls take it, which must run both kernels on Hopper."""
    if varlen.gluon_varlen_bwd(q, causal, variant or Variant()) != (True, True):
        raise RuntimeError("the Hopper varlen backward does not take this call")
    grads = _grads(q, k, v, grads)
    scale = q.shape[2] ** -0.5
    with on_device(q.device):
        varlen.varlen_bwd(dout, q, k, v, out, lse, None, *grads, cu_q, cu_k, max_q, max_k, scale, causal, None, variant)
    return grads


def portable_backward(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, variant=None, grads=None, tuned=False):
    """dq, dk, dv from ``varlen.varlen_bwd`` on the portable kernels: in their tables' first configs (a config
    keeps a call there, and saves the check its autotuning), or (tuned) autotuned with the Hopper kernels off
    for the call, as calls off Hopper run."""
    from flashdoc.kernels.backward import bwd_configs_for

    masked = causal or tuple((variant or Variant()).window_size) != (-1, -1)
    config = None if tuned else bwd_configs_for(q.shape[2], q.dtype, masked)[0]
    grads = _grads(q, k, v, grads)
    scale = q.shape[2] ** -0.5
    enabled, fh.ENABLED = fh.ENABLED, False
    try:
        with on_device(q.device):
            varlen.varlen_bwd(
                dout, q, k, v, out, lse, None, *grads, cu_q, cu_k, max_q, max_k, scale, causal, config, variant
            )
    finally:
        fh.ENABLED = enabled
    return grads


# the forward's layouts, and d = 256 in fp16 with MQA
LAYOUTS = [*FORWARD_LAYOUTS, (torch.float16, 256, 4, 1)]
# the worst |Hopper - portable| over a gradient's largest magnitude that passes: both round the same fp32
# accumulations to the dtype once, in tiles of different sizes (limits of benchmarks/kernels/gluon_bwd.py's kind)
LIMIT = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _differences(lens_q, lens_k, dtype, d, h, hk, causal, variant, q_scale):
    """(dq, dk, dv): max |Hopper - portable| / max |portable| of one case (inf where a Hopper gradient kept a NaN:
    a row the kernels never wrote)."""
    q, k, v, cu_q, cu_k = packed(lens_q, lens_k, h, hk, d, dtype, q_scale)
    max_q, max_k = max(lens_q), max(lens_k)
    out, lse = forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, variant)
    dout = torch.randn_like(out)
    ours = hopper_backward(dout, q, k, v, out, lse, cu_q, cu_k, max_k, causal, variant)
    ref = portable_backward(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, variant)
    errs = []
    for a, b in zip(ours, ref):
        scale = b.float().abs().max().item() if b.numel() else 0.0
        diff = (a.float() - b.float()).abs().nan_to_num(float("inf"))
        errs.append(diff.max().item() / max(scale, 1e-6) if diff.numel() else 0.0)
    return errs


def check(head_dims=(64, 128, 256), seeds=(0,)):
    """Hopper against portable on every length mix (as self-attention, and with each sequence's keys a few more
    or fewer than its queries), mask and layout. Returns the number of mismatches."""
    worst = [0.0, 0.0, 0.0]
    cases = mismatches = 0
    for seed in seeds:
        torch.manual_seed(seed)
        for lengths in length_mixes(seed):
            cross = [max(n + (7 if b % 2 else -5), 0) for b, n in enumerate(lengths)]
            for lens_k in (lengths, cross):
                for dtype, d, h, hk in LAYOUTS:
                    if d not in head_dims:
                        continue
                    for name, causal, variant, q_scale in MASKS:
                        errs = _differences(lengths, lens_k, dtype, d, h, hk, causal, variant, q_scale)
                        worst = [max(w, e) for w, e in zip(worst, errs)]
                        cases += 1
                        if not all(e < LIMIT[dtype] for e in errs):
                            mismatches += 1
                            shown = f"{lengths[:12]}{'...' if len(lengths) > 12 else ''}"
                            print(
                                f"MISMATCH {dtype} d={d} heads {h}/{hk} {name} lengths {shown} "
                                f"cross={lens_k is cross}: dq {errs[0]:.3g} dk {errs[1]:.3g} dv {errs[2]:.3g}",
                                flush=True,
                            )
                so_far = ", ".join(f"{w:.3g}" for w in worst)
                print(f"  {cases} cases, {mismatches} mismatches; worst dq, dk, dv so far {so_far}", flush=True)
    print(
        f"check done: {cases} cases, {mismatches} mismatches; worst |Hopper - portable| / scale: dq {worst[0]:.3g}, "
        f"dk {worst[1]:.3g}, dv {worst[2]:.3g}",
        flush=True,
    )
    return mismatches


def bench(head_dims=(128,), total=65536, heads=16, seeds=(0,)):
    """benchmarks/varlen.py's batch: portable varlen backward, Hopper varlen backward and the dense Hopper path
    on the same token count, backward alone and forward + backward, in TFLOP/s and as ratios to the dense one."""
    from benchmarks.schema import flops
    from benchmarks.varlen import dense_shape, draw_lengths, useful_flops
    from flashdoc.kernels.backward import attn_bwd

    for seed in seeds:
        lengths = draw_lengths(total, 128, 8192, seed)
        batch, seqlen = dense_shape(lengths)
        print(
            f"seed {seed}: {len(lengths)} sequences of 128-8192, {total} tokens; dense {batch} x {seqlen}", flush=True
        )
        for d in head_dims:
            for causal in (False, True):
                q, k, v, cu_q, cu_k = packed(lengths, lengths, heads, heads, d, torch.bfloat16)
                n = max(lengths)
                out, lse = forward(q, k, v, cu_q, cu_k, n, n, causal)
                dout = torch.randn_like(out)
                grads = tuple(torch.empty_like(t) for t in (q, k, v))
                qd, kd, vd = (
                    torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)
                )
                od, lsed = torch.empty_like(qd), torch.empty(batch, heads, seqlen, device="cuda")
                dod = torch.randn_like(qd)
                grads_d = tuple(torch.empty_like(t) for t in (qd, kd, vd))

                def dense_fwd():
                    with on_device(qd.device):
                        fh.attn_fwd_hopper(qd, kd, vd, od, lsed, d**-0.5, causal, True)

                def dense_bwd():
                    with on_device(qd.device):
                        attn_bwd(dod, qd, kd, vd, od, lsed, None, *grads_d, d**-0.5, causal, True)

                def bwd(portable):
                    if portable:  # autotuned, as calls off Hopper run
                        return lambda: portable_backward(
                            dout, q, k, v, out, lse, cu_q, cu_k, n, n, causal, None, grads, tuned=True
                        )
                    return lambda: routed_backward(dout, q, k, v, out, lse, cu_q, cu_k, n, n, causal, None, grads)

                def fwd_bwd(fn):
                    return lambda: (forward(q, k, v, cu_q, cu_k, n, n, causal), fn())

                for mode in ("bwd", "fwd_bwd"):
                    # (the backward alone: 2.5x the forward's FLOPs, as schema.flops counts it in fwd_bwd's 3.5x)
                    share = 2.5 if mode == "bwd" else 1.0
                    counted = "fwd" if mode == "bwd" else mode
                    work = share * useful_flops(counted, lengths, heads, d, causal)
                    dense_work = share * flops(counted, batch, heads, seqlen, d, causal)
                    if mode == "bwd":
                        runs = {"portable": (bwd(True), work), "hopper": (bwd(False), work)}
                        runs["dense"] = (dense_bwd, dense_work)
                    else:
                        runs = {"portable": (fwd_bwd(bwd(True)), work), "hopper": (fwd_bwd(bwd(False)), work)}
                        runs["dense"] = (lambda: (dense_fwd(), dense_bwd()), dense_work)
                    tf = varlen_tflops(runs)
                    print(
                        f"  d={d} causal={int(causal)} {mode}: "
                        + "  ".join(f"{name} {x:.0f} ({x / tf['dense']:.2f}x dense)" for name, x in tf.items()),
                        flush=True,
                    )


def first_call(lengths=(100, 0, 300, 1), head_dim=128, kv_heads=4):
    """One tiny case per launch, each followed by a synchronize, so that a kernel that faults is the one named
    (run it under CUDA_LAUNCH_BLOCKING=1, and under compute-sanitizer for the faulting instruction): the LSE's
    preprocess, the item tables, dK/dV, then dQ, without and with the causal mask."""
    from flashdoc.kernels.backward import bwd_preprocess

    lens = list(lengths)
    cu, total = cu_seqlens(lens), sum(lens)
    order = varlen.schedule(cu)
    for causal in (False, True):
        q, dout, out = (torch.randn(total, 4, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        k, v = (torch.randn(total, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        lse = torch.randn(4, total, device="cuda")
        dq, dk, dv = (torch.full_like(q, float("nan")) for _ in range(3))
        steps = {
            "preprocess": lambda: bwd_preprocess(dout.unsqueeze(0), out.unsqueeze(0), lse.unsqueeze(0), None),
            "item table": lambda: varlen.item_table(order, cu, 4, 128, 4 * varlen.tile_bound(total, len(lens), 128)),
        }
        with on_device(q.device):
            delta, lse2 = steps["preprocess"]()
        tail = (cu, cu, order, max(lens), 0.125, causal, Variant())
        steps["dkdv"] = lambda: varlen.varlen_bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, *tail)
        steps["dq"] = lambda: varlen.varlen_bwd_dq_hopper(q, k, v, dout, dq, lse2, delta, *tail)
        with on_device(q.device):
            for name, step in steps.items():
                step()
                torch.cuda.synchronize()
                print(f"causal={causal} {name}: ok", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--first-call", action="store_true")
    ap.add_argument("--lengths", type=int, nargs="+", default=[100, 0, 300, 1], help="--first-call's sequences")
    ap.add_argument("--aot", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--head-dims", type=int, nargs="+")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    a = ap.parse_args()
    failed = 0
    if a.first_call:
        first_call(a.lengths)
    if a.aot:
        aot(a.head_dims or (64, 128, 256))
    if a.check:
        failed = check(a.head_dims or (64, 128, 256), a.seeds)
    if a.bench:
        bench(a.head_dims or (128,), seeds=a.seeds)
    sys.exit(1 if failed else 0)
