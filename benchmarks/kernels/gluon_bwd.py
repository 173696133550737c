"""A/B of the Hopper backward kernels (flashdoc/kernels/backward_hopper.py) against the portable ones, and
their sm_90 compile (registers, spills) without a GPU.

    PYTHONPATH=. python3 benchmarks/kernels/gluon_bwd.py --check --bench   # on an H200: every config against
                                                                          # the portable kernels
    PYTHONPATH=/tmp/t36:. python benchmarks/kernels/gluon_bwd.py --aot   # no GPU: a Triton 3.6 wheel in /tmp/t36

--check compares every config's gradients with the portable kernels' (they are bit-identical: the same products
in the same order); --bench times each kernel against the autotuned portable one. Candidate configs can be given
on the command line:

    python3 benchmarks/kernels/gluon_bwd.py --check --bench --head-dims 256 --dkdv-configs 64,64,2,2 \
        --dq-configs 64,32,2,2
"""

import argparse
import contextlib

import torch

from benchmarks.kernels.code_hash import ROWS, compile_config, ptxas_info
from benchmarks.timing import rotated_median_ms
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.backward import bwd_dkdv, bwd_dq, bwd_preprocess
from flashdoc.kernels.backward_hopper import (
    MAX_NARROW_HEAD_DIM,
    _attn_bwd_dkdv_hopper,
    _attn_bwd_dkdv_hopper_wide,
    _attn_bwd_dq_hopper,
    bwd_dkdv_hopper,
    bwd_dq_hopper,
)
from flashdoc.kernels.forward import attn_fwd
from flashdoc.kernels.launch import on_device

# candidates, dK/dV: (BLOCK_M query rows per streamed tile, BLOCK_N keys per consumer, STAGES, N_CONSUMERS)
CONFIGS = [(64, 64, 2, 2), (64, 64, 3, 2), (64, 64, 2, 3)]
# dQ: (BLOCK_M query rows per consumer, BLOCK_N keys per streamed tile, STAGES, N_CONSUMERS)
DQ_CONFIGS = [(64, 64, 2, 2), (64, 64, 3, 2), (64, 128, 2, 2), (64, 64, 2, 3)]


def _config(text):
    """A config from the command line: "64,128,2,2"."""
    return tuple(int(x) for x in text.split(","))


def smem_bytes(d, cfg):
    bm, bn, st, nc = cfg[:4]
    if d > MAX_NARROW_HEAD_DIM:  # the wide kernel: the consumers share the keys and exchange P^T and dS^T
        return 2 * d * (2 * bn + 2 * st * bm) + 2 * 2 * 4 * bn * bm // 2
    return 2 * d * (2 * nc * bn + 2 * st * bm)  # dK/dV: resident K and V, the Q/dO ring


def dq_smem_bytes(d, cfg):
    bm, bn, st, nc = cfg[:4]
    return 2 * d * (2 * nc * bm + 2 * st * bn)  # dQ: resident Q and dO, the K/V ring


def aot(head_dims=(64, 128)):
    """Compile every config of both kernels for sm_90 without a GPU and print registers/spills from ptxas."""
    for name, kernel, cfgs, smem in (
        ("dkdv", _attn_bwd_dkdv_hopper, CONFIGS, smem_bytes),
        ("dq", _attn_bwd_dq_hopper, DQ_CONFIGS, dq_smem_bytes),
    ):
        for d in head_dims:
            for causal in (False, True):
                for cfg in cfgs:
                    bm, bn, st, nc = cfg[:4]
                    if smem(d, cfg) > 226 * 1024:
                        continue
                    if name == "dkdv" and d > MAX_NARROW_HEAD_DIM:
                        ck = compile_config(
                            _attn_bwd_dkdv_hopper_wide,
                            d,
                            bm,
                            bn,
                            dict(IS_CAUSAL=causal, STAGES=st),
                            cols=d // 2,
                            rows=ROWS,
                        )
                    elif name == "dkdv":
                        ck = compile_config(
                            kernel, d, bm, bn, dict(IS_CAUSAL=causal, STAGES=st, N_CONSUMERS=nc), rows=ROWS
                        )
                    else:
                        ck = compile_config(kernel, d, bm, bn, dict(IS_CAUSAL=causal, STAGES=st, N_CONSUMERS=nc))
                    print(
                        f"{name} d={d} causal={causal} {cfg} smem={smem(d, cfg) // 1024} KiB: {ptxas_info(ck)}",
                        flush=True,
                    )


def _inputs(b, sq, sk, h, hk, d, dtype, causal, bottom_right):
    """Random inputs and what the backward kernels read: lse2 and delta from flashdoc's own forward and
    preprocess."""
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=dtype) for _ in range(2))
    dout = torch.randn_like(q)
    out, lse = torch.empty_like(q), torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
    attn_fwd(q, k, v, out, lse, d**-0.5, causal, bottom_right)
    with on_device(q.device):
        delta, lse2 = bwd_preprocess(dout, out, lse, None)
    return q, k, v, dout, lse2, delta


@contextlib.contextmanager
def _portable_kernels():
    """backward.bwd_dkdv / bwd_dq on the portable (autotuned) kernels: the Hopper ones switched off meanwhile."""
    fh.ENABLED = False
    try:
        yield
    finally:
        fh.ENABLED = True


def _portable(q, k, v, dout, dk, dv, lse2, delta, causal, bottom_right):
    with _portable_kernels(), on_device(q.device):
        bwd_dkdv(q, k, v, dout, dk, dv, lse2, delta, q.shape[3] ** -0.5, causal, bottom_right)


def _portable_dq(q, k, v, dout, dq, lse2, delta, causal, bottom_right):
    with _portable_kernels(), on_device(q.device):
        bwd_dq(q, k, v, dout, dq, lse2, delta, q.shape[3] ** -0.5, causal, bottom_right)


def _dispatched(q, k, v, dout, dk, dv, dq, lse2, delta, causal, bottom_right):
    """Both kernels as flashdoc dispatches them (the Hopper ones where their tables say so), one stream."""
    with on_device(q.device):
        bwd_dkdv(q, k, v, dout, dk, dv, lse2, delta, q.shape[3] ** -0.5, causal, bottom_right)
        bwd_dq(q, k, v, dout, dq, lse2, delta, q.shape[3] ** -0.5, causal, bottom_right)


def check(head_dims, kernels):
    """Every config of both kernels against the portable ones: ragged lengths, GQA, both causal alignments."""
    torch.manual_seed(0)
    worst = 0.0
    for dtype in (torch.bfloat16, torch.float16):
        for d in head_dims:
            for shape in [(2, 1024, 1024, 4, 4), (1, 1000, 1000, 3, 3), (2, 333, 777, 4, 2), (1, 777, 333, 2, 1)]:
                for causal in (False, True):
                    args = _inputs(*shape, d, dtype, causal, True)
                    ref = [torch.empty_like(args[1]), torch.empty_like(args[2])]
                    _portable(*args[:4], *ref, *args[4:], causal, True)
                    for cfg in (CONFIGS if dtype == torch.bfloat16 else CONFIGS[:1]) if "dkdv" in kernels else []:
                        if smem_bytes(d, cfg) > 226 * 1024:
                            continue
                        got = [torch.empty_like(args[1]), torch.empty_like(args[2])]
                        bwd_dkdv_hopper(*args[:4], *got, *args[4:], d**-0.5, causal, True, cfg)
                        err = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, ref))
                        scale = max(b.float().abs().max().item() for b in ref)
                        worst = max(worst, err / scale)
                        if err > 2e-2 * scale:
                            print(
                                f"MISMATCH dkdv {dtype} d={d} {shape} causal={causal} {cfg}: {err:.3g} "
                                f"(max {scale:.3g})",
                                flush=True,
                            )
                    ref = torch.empty_like(args[0])
                    _portable_dq(*args[:4], ref, *args[4:], causal, True)
                    for cfg in (DQ_CONFIGS if dtype == torch.bfloat16 else DQ_CONFIGS[:1]) if "dq" in kernels else []:
                        if dq_smem_bytes(d, cfg) > 226 * 1024:
                            continue
                        got = torch.empty_like(args[0])
                        bwd_dq_hopper(*args[:4], got, *args[4:], d**-0.5, causal, True, cfg)
                        err = (got.float() - ref.float()).abs().max().item()
                        scale = ref.float().abs().max().item()
                        worst = max(worst, err / scale)
                        if err > 2e-2 * scale:
                            print(
                                f"MISMATCH dq {dtype} d={d} {shape} causal={causal} {cfg}: {err:.3g} (max {scale:.3g})",
                                flush=True,
                            )
    print(f"check done: worst |d - portable| / max {worst:.3g}", flush=True)


def _time(runs, flops):
    """TFLOP/s of each run: rotated order, median of 3."""
    tf = {name: flops / (ms * 1e-3) / 1e12 for name, ms in rotated_median_ms(runs).items()}
    return "  ".join(f"{name} {x:.0f} ({x / tf['portable']:.2f})" for name, x in tf.items())


def bench(lengths, head_dims, kernels):
    """Each kernel against the portable one (autotuned), bf16, 16k tokens: dK/dV in TFLOP/s of its 4 products
    (8 B H N^2 d), dQ of its 3 (6 B H N^2 d), then both together, all halved when causal."""
    for d in head_dims:
        for causal in (False, True):
            for n in lengths:
                b, h = 16384 // n, 2048 // d
                args = _inputs(b, n, n, h, h, d, torch.bfloat16, causal, False)
                dk, dv, dq = torch.empty_like(args[1]), torch.empty_like(args[2]), torch.empty_like(args[0])
                flops = 2 * b * h * n * n * d / (2 if causal else 1)  # one product, halved when causal
                # (name, products, the portable kernel, the Hopper one in config cfg, candidate configs, smem)
                singles = [
                    (
                        "dkdv",
                        4,
                        lambda: _portable(*args[:4], dk, dv, *args[4:], causal, False),
                        lambda cfg: bwd_dkdv_hopper(*args[:4], dk, dv, *args[4:], d**-0.5, causal, False, cfg),
                        CONFIGS,
                        smem_bytes,
                    ),
                    (
                        "dq  ",
                        3,
                        lambda: _portable_dq(*args[:4], dq, *args[4:], causal, False),
                        lambda cfg: bwd_dq_hopper(*args[:4], dq, *args[4:], d**-0.5, causal, False, cfg),
                        DQ_CONFIGS,
                        dq_smem_bytes,
                    ),
                ]
                for name, products, portable, hopper, configs, smem in singles:
                    if name.strip() not in kernels:
                        continue
                    runs = {"portable": portable}
                    runs.update(
                        {
                            "g" + "-".join(str(int(x)) for x in cfg): (lambda cfg=cfg, hopper=hopper: hopper(cfg))
                            for cfg in configs
                            if smem(d, cfg) <= 226 * 1024
                        }
                    )
                    print(f"{name} d={d} causal={int(causal)} N={n}: {_time(runs, products * flops)}", flush=True)
                if "both" in kernels:
                    # the two kernels one after the other, as flashdoc dispatches them and on the portable
                    # kernels only
                    runs = {
                        "portable": lambda: (
                            _portable(*args[:4], dk, dv, *args[4:], causal, False),
                            _portable_dq(*args[:4], dq, *args[4:], causal, False),
                        ),
                        "flashdoc": lambda: _dispatched(*args[:4], dk, dv, dq, *args[4:], causal, False),
                    }
                    print(f"both d={d} causal={int(causal)} N={n}: {_time(runs, 7 * flops)}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--aot", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--kernels", nargs="+", default=["dkdv", "dq", "both"], choices=["dkdv", "dq", "both"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--dkdv-configs", type=_config, nargs="+", help="instead of CONFIGS, e.g. 64,64,3,2")
    ap.add_argument("--dq-configs", type=_config, nargs="+", help="instead of DQ_CONFIGS, e.g. 64,32,2,2")
    a = ap.parse_args()
    CONFIGS[:] = a.dkdv_configs or CONFIGS
    DQ_CONFIGS[:] = a.dq_configs or DQ_CONFIGS
    if a.aot:
        aot(a.head_dims)
    if a.check:
        check(a.head_dims, a.kernels)
    if a.bench:
        bench(a.lengths, a.head_dims, a.kernels)
