"""A/B harness for the varlen forward on the Hopper forward in Gluon (``varlen.varlen_fwd_hopper``: the kernel of
flashdoc/kernels/forward_hopper.py with VARLEN) against the portable varlen forward (``varlen._varlen_fwd``).

    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python benchmarks/kernels/gluon_varlen.py --aot
        # compile every config for sm_90 here (a Triton 3.6 wheel in /tmp/t36, no GPU): registers, spills
    PYTHONPATH=. python benchmarks/kernels/gluon_varlen.py --check     # on an H200: against the portable kernel
    PYTHONPATH=. python benchmarks/kernels/gluon_varlen.py --bench     # on an H200: TFLOP/s, three ways

``--check`` runs random length mixes (with lengths 1, 63, 64, 65, 127, 128, 129, 1000 and 8192 among them, and
empty sequences) through both forwards: causal and not, windows, softcap, GQA, d = 64, 128 and 256, bf16 and
fp16, and prints the worst |out| and |lse| differences, and every case over the limits. The Gluon output and
LSE start as NaN, so a row the kernel never writes shows as a mismatch.

``--bench`` times benchmarks/varlen.py's batch (log-uniform lengths 128-8192, 64k tokens, 16 heads, d = 128,
bf16), forward only, causal and not: the portable varlen forward, the Gluon one, and the dense Gluon forward on
equal sequences of the same token count (``benchmarks.varlen.dense_shape``). The varlen kernels are credited
with the FLOPs of each sequence (4 len^2 H d, halved when causal), the dense one with its own; same process,
rotated order, median of 3 ``do_bench`` runs each. The target is the Gluon varlen rate >= 0.95x the dense one.

Configs are (BLOCK_M per consumer, BLOCK_N, STAGES, consumers, persistent), as in gluon_fwd.py; by default
each call takes the one the dense call would (``forward_hopper.HOPPER_CONFIGS``, ``WINDOW_CONFIGS``).
"""

import argparse

import torch

from benchmarks.kernels.code_hash import compile_forward, ptxas_info
from benchmarks.kernels.gluon_bwd import _config
from benchmarks.schema import flops
from benchmarks.timing import rotated_median_ms
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels import varlen
from flashdoc.kernels.launch import on_device
from flashdoc.kernels.mask import Variant

# the variants as the Hopper forward compiles them: (name, causal, the constexprs beside IS_CAUSAL)
VARIANTS = [
    ("full", False, {}),
    ("causal", True, {}),
    ("window", True, dict(IS_LOCAL=True)),
    ("softcap", False, dict(SOFTCAP=True)),
    ("causal softcap", True, dict(SOFTCAP=True)),
    ("window softcap", True, dict(IS_LOCAL=True, SOFTCAP=True)),
]
CONFIGS = []  # --configs: these instead of the tables' picks


def table_config(d, causal, local):
    """The config a call takes by default: the dense call's (``varlen._hopper_plan`` picks it so)."""
    return fh.table_config((d, causal or local), local)


def aot(head_dims=(64, 128, 256)):
    """Compile the VARLEN kernel of every variant and head dim for sm_90 without a GPU, in its table config (or
    each of --configs), and print registers and spills from ptxas, and the shared memory it takes (a launch
    fails past the H200's 227 KiB; the compiler does not check)."""
    for d in head_dims:
        for name, causal, extra in VARIANTS:
            for cfg in CONFIGS or [table_config(d, causal, "IS_LOCAL" in extra)]:
                try:
                    ck = compile_forward(d, causal, cfg, varlen=True, **extra)
                    info = f"{ptxas_info(ck)}, {ck.metadata.shared} B shared (at most 232448)"
                except Exception as e:  # a config that does not compile: say so and go on
                    info = f"COMPILE ERROR {type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}"
                print(f"varlen d={d} {name} {cfg}: {info}", flush=True)


def cu_seqlens(lengths, device="cuda"):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


def packed(lens_q, lens_k, h, hk, d, dtype, q_scale=1.0):
    """q (total_q, h, d), k and v (total_k, hk, d), and the two cu_seqlens."""
    q = torch.randn(sum(lens_q), h, d, device="cuda", dtype=dtype) * q_scale
    k = torch.randn(sum(lens_k), hk, d, device="cuda", dtype=dtype)
    v = torch.randn(sum(lens_k), hk, d, device="cuda", dtype=dtype)
    return q, k, v, cu_seqlens(lens_q), cu_seqlens(lens_k)


def gluon(q, k, v, cu_q, cu_k, max_k, causal, variant=None, cfg=None, out=None, lse=None):
    """The Gluon varlen forward; out and lse are allocated (as NaN, so that unwritten rows show) unless given."""
    out = torch.full_like(q, float("nan")) if out is None else out
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device=q.device) if lse is None else lse
    with on_device(q.device):
        varlen.varlen_fwd_hopper(q, k, v, out, lse, cu_q, cu_k, max_k, q.shape[2] ** -0.5, causal, variant, cfg)
    return out, lse


def portable(q, k, v, cu_q, cu_k, max_q, max_k, causal, variant=None, out=None, lse=None, tuned=True):
    """The portable varlen forward (the switch to the Gluon one off for the call): autotuned, or (tuned=False)
    in its table's first config, which saves the checks their tuning."""
    from flashdoc.kernels.common import configs_for
    from flashdoc.kernels.forward import FWD_CONFIGS

    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(q.shape[1], q.shape[0], device=q.device) if lse is None else lse
    config = None if tuned else configs_for(FWD_CONFIGS, max(q.shape[2], 64), q.dtype, causal)[0]
    scale = q.shape[2] ** -0.5
    enabled, fh.ENABLED = fh.ENABLED, False
    try:
        varlen.varlen_fwd(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal, config, variant)
    finally:
        fh.ENABLED = enabled
    return out, lse


EDGES = [1, 63, 64, 65, 127, 128, 129, 1000, 8192]


def length_mixes(seed):
    """Length lists: the edge lengths with empty sequences, shuffled; a random mix with an edge length among
    short and long ones; many short sequences (more than one step of the kernel's search); one long sequence."""
    g = torch.Generator().manual_seed(seed)
    edges = EDGES + [0, 0]
    mixed = torch.randint(0, 3000, (9,), generator=g).tolist()
    mixed[int(torch.randint(0, 9, (1,), generator=g))] = EDGES[int(torch.randint(0, len(EDGES), (1,), generator=g))]
    return [
        [edges[i] for i in torch.randperm(len(edges), generator=g).tolist()],
        mixed,
        torch.randint(0, 130, (300,), generator=g).tolist(),
        [4096],
    ]


# (name, causal, variant, q's scale: softcap's is larger, so that the cap binds)
MASKS = [
    ("full", False, Variant(), 1.0),
    ("causal", True, Variant(), 1.0),
    ("window", False, Variant(window_size=(300, 40)), 1.0),
    ("causal window", True, Variant(window_size=(200, -1)), 1.0),
    ("left window", False, Variant(window_size=(100, -1)), 1.0),
    ("softcap", False, Variant(softcap=30.0), 4.0),
    ("causal softcap", True, Variant(softcap=30.0), 4.0),
]
# (dtype, head dim, heads, kv heads)
LAYOUTS = [
    (torch.bfloat16, 64, 6, 2),
    (torch.bfloat16, 128, 6, 2),
    (torch.bfloat16, 128, 4, 4),
    (torch.bfloat16, 256, 6, 2),
    (torch.float16, 64, 6, 2),
    (torch.float16, 128, 6, 2),
]


def _differences(lens_q, lens_k, dtype, d, h, hk, causal, variant, q_scale):
    """max |out - portable| and max |lse - portable| of one case (inf where the Gluon kernel left a NaN: a row
    it never wrote; rows that see no key have LSE -inf in both)."""
    q, k, v, cu_q, cu_k = packed(lens_q, lens_k, h, hk, d, dtype, q_scale)
    o, lse = gluon(q, k, v, cu_q, cu_k, max(lens_k), causal, variant, CONFIGS[0] if CONFIGS else None)
    o_ref, lse_ref = portable(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal, variant, tuned=False)
    err = (o.float() - o_ref.float()).abs().nan_to_num(float("inf")).max().item()
    equal = lse == lse_ref  # (-inf == -inf)
    lerr = (lse - lse_ref).abs().masked_fill(equal, 0.0).nan_to_num(float("inf")).max().item()
    return err, lerr


def check(head_dims=(64, 128, 256), seeds=(0,)):
    """Gluon against portable on every length mix (as self-attention, and with each sequence's keys a few more
    or fewer than its queries), mask and layout: the worst differences, and each case over |out| 2e-2 or |lse|
    1e-3 (gluon_fwd.py's limits)."""
    worst_out = worst_lse = 0.0
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
                        err, lerr = _differences(lengths, lens_k, dtype, d, h, hk, causal, variant, q_scale)
                        worst_out, worst_lse = max(worst_out, err), max(worst_lse, lerr)
                        cases += 1
                        if not (err < 2e-2 and lerr < 1e-3):
                            mismatches += 1
                            shown = f"{lengths[:12]}{'...' if len(lengths) > 12 else ''}"
                            print(
                                f"MISMATCH {dtype} d={d} heads {h}/{hk} {name} lengths {shown} "
                                f"cross={lens_k is cross}: out {err:.3g} lse {lerr:.3g}",
                                flush=True,
                            )
    print(
        f"check done: {cases} cases, {mismatches} mismatches; worst |out - portable| {worst_out:.3g}, "
        f"worst |lse - portable| {worst_lse:.3g}",
        flush=True,
    )


def varlen_tflops(runs):
    """TFLOP/s of each (fn, flops) run, timed by ``rotated_median_ms``."""
    ms = rotated_median_ms({name: fn for name, (fn, _) in runs.items()})
    return {name: runs[name][1] / (ms[name] * 1e-3) / 1e12 for name in runs}


def bench(head_dims=(128,), total=65536, heads=16, seeds=(0,)):
    """benchmarks/varlen.py's batch, forward: portable varlen, Gluon varlen (each config of --configs, else the
    table's) and the dense Gluon forward on the same token count, in TFLOP/s and as ratios to the dense one."""
    from benchmarks.varlen import dense_shape, draw_lengths, useful_flops

    for seed in seeds:
        lengths = draw_lengths(total, 128, 8192, seed)
        batch, seqlen = dense_shape(lengths)
        print(
            f"seed {seed}: {len(lengths)} sequences of 128-8192, {total} tokens; dense {batch} x {seqlen}", flush=True
        )
        for d in head_dims:
            for causal in (False, True):
                q, k, v, cu_q, cu_k = packed(lengths, lengths, heads, heads, d, torch.bfloat16)
                out, lse = torch.empty_like(q), torch.empty(heads, q.shape[0], device="cuda")
                n = max(lengths)
                work = useful_flops("fwd", lengths, heads, d, causal)
                runs = {"portable": (lambda: portable(q, k, v, cu_q, cu_k, n, n, causal, out=out, lse=lse), work)}
                for cfg in CONFIGS or [None]:
                    name = "gluon" if cfg is None else "g%d-%d-%d-%d%s" % (*cfg[:4], "p" * cfg[4])
                    runs[name] = (lambda cfg=cfg: gluon(q, k, v, cu_q, cu_k, n, causal, None, cfg, out, lse), work)
                qd, kd, vd = (
                    torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)
                )
                od, lsed = torch.empty_like(qd), torch.empty(batch, heads, seqlen, device="cuda")

                def dense():
                    with on_device(qd.device):
                        fh.attn_fwd_hopper(qd, kd, vd, od, lsed, d**-0.5, causal, True)

                runs["dense"] = (dense, flops("fwd", batch, heads, seqlen, d, causal))
                tf = varlen_tflops(runs)
                print(
                    f"  d={d} causal={int(causal)}: "
                    + "  ".join(f"{name} {x:.0f} ({x / tf['dense']:.2f}x dense)" for name, x in tf.items()),
                    flush=True,
                )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--aot", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--head-dims", type=int, nargs="+")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--configs", type=_config, nargs="+", help="instead of the tables' picks, e.g. 64,128,2,3,1")
    a = ap.parse_args()
    CONFIGS[:] = [(*c[:4], bool(c[4])) for c in a.configs] if a.configs else []
    if a.aot:
        aot(a.head_dims or (64, 128, 256))
    if a.check:
        check(a.head_dims or (64, 128, 256), a.seeds)
    if a.bench:
        bench(a.head_dims or (128,), seeds=a.seeds)
