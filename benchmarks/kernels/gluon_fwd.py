"""A/B harness for the Hopper forward in Gluon (flashdoc/kernels/forward_hopper.py).

    PYTHONPATH=/tmp/t36:. python benchmarks/kernels/gluon_fwd.py --aot   # compile every config for sm_90 here
                                                                         # (a Triton 3.6 wheel in /tmp/t36, no GPU)
    PYTHONPATH=. python3 benchmarks/kernels/gluon_fwd.py --check --bench   # on an H200: against the portable kernel

Configs are (BLOCK_M per consumer, BLOCK_N, STAGES, consumers, persistent).
"""

import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.kernels.code_hash import compile_forward, ptxas_info
from benchmarks.kernels.gluon_bwd import _config, _time
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.forward import attn_fwd as tl_fwd
from flashdoc.kernels.launch import on_device

# (BLOCK_M per consumer, BLOCK_N, STAGES, consumers, persistent)
CONFIGS = [
    (64, 128, 2, 3, False),
    (64, 128, 2, 2, False),
    (64, 128, 2, 3, True),
    (64, 128, 2, 2, True),
    (64, 128, 3, 3, True),
]


def smem_bytes(d, cfg):
    bm, bn, st, nc, persistent = cfg
    o_tiles = 0 if d > fh.MAX_SEPARATE_O_HEAD_DIM else 1  # over it, O is staged in the Q tiles
    return 2 * d * ((1 + o_tiles) * nc * bm + 2 * st * bn)  # Q (and O) tiles, the key/value ring


def configs(d):
    return [c for c in CONFIGS if smem_bytes(d, c) <= 226 * 1024]


def aot(head_dims=(64, 128)):
    """Compile every config for sm_90 without a GPU and print registers/spills from ptxas."""
    for d in head_dims:
        for causal in (False, True):
            for bm, bn, st, nc, persistent in configs(d):
                smem = smem_bytes(d, (bm, bn, st, nc, persistent))
                ck = compile_forward(d, causal, (bm, bn, st, nc, persistent))
                info = ptxas_info(ck)
                print(
                    f"d={d} causal={causal} ({bm}, {bn}, {st}, {nc}, {persistent}) smem={smem // 1024} KiB: {info}",
                    flush=True,
                )


def hopper(q, k, v, causal, cfg, bottom_right=False, out=None, lse=None):
    """The Hopper kernel in config cfg; out and lse are allocated unless given (the timings pass them, as the
    portable kernel's do, so that no allocation is timed)."""
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32) if lse is None else lse
    with on_device(q.device):
        fh.attn_fwd_hopper(q, k, v, out, lse, q.shape[3] ** -0.5, causal, bottom_right, cfg)
    return out, lse


def portable(q, k, v, out, lse, causal, bottom_right=False):
    """flashdoc's portable forward, autotuned (the Hopper dispatch switched off for the call)."""
    enabled, fh.ENABLED = fh.ENABLED, False
    try:
        tl_fwd(q, k, v, out, lse, q.shape[3] ** -0.5, causal, bottom_right)
    finally:
        fh.ENABLED = enabled


def check(head_dims=(64, 128)):
    """Every config against the portable kernel: bf16 (fp16 on the first config), ragged lengths, GQA, both
    causal alignments."""
    torch.manual_seed(0)
    worst = 0.0
    for dtype in (torch.bfloat16, torch.float16):
        for d in head_dims:
            for b, sq, sk, h, hk in [
                (2, 1024, 1024, 4, 4),
                (1, 1000, 1000, 3, 3),
                (2, 333, 777, 4, 2),
                (1, 777, 333, 2, 1),
                (3, 4096, 4096, 2, 2),
                (2, 4096, 4096, 16, 8),
            ]:
                for causal in (False, True):
                    for cfg in configs(d) if dtype == torch.bfloat16 else configs(d)[:1]:
                        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
                        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
                        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
                        o, lse = hopper(q, k, v, causal, cfg, bottom_right=True)
                        o_ref, lse_ref = torch.empty_like(o), torch.empty_like(lse)
                        portable(q, k, v, o_ref, lse_ref, causal, bottom_right=True)
                        err = (o.float() - o_ref.float()).abs().max().item()
                        lerr = (lse - lse_ref).abs().nan_to_num(0.0).max().item()
                        worst = max(worst, err)
                        if not (err < 2e-2 and lerr < 1e-3):
                            print(
                                f"MISMATCH {dtype} d={d} {(b, sq, sk, h, hk)} causal={causal} {cfg}: "
                                f"out {err:.3g} lse {lerr:.3g}",
                                flush=True,
                            )
    print(f"check done: worst |out - portable| {worst:.3g}", flush=True)


def cudnn(q, k, v, causal):
    """PyTorch's SDPA on cuDNN, the peer the recorded benchmark compares with (q, k, v as (B, H, N, d) views)."""
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def bench(causal_modes=(False, True), head_dims=(64, 128), lengths=(2048, 4096, 8192, 16384)):
    """TFLOP/s of each config and of cuDNN against the portable kernel (autotuned), same process, rotated order,
    median of 3."""
    for d in head_dims:
        for causal in causal_modes:
            for n in lengths:
                b, h = 16384 // n, 2048 // d
                q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                o, lse = torch.empty_like(q), torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                flops = 4 * b * h * n * n * d / (2 if causal else 1)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                runs = {
                    "portable": lambda: portable(q, k, v, o, lse, causal),
                    "cudnn": lambda: cudnn(qt, kt, vt, causal),
                }
                for cfg in configs(d):
                    name = "g%d-%d-%d-%d%s" % (*cfg[:4], "p" * cfg[4])
                    runs[name] = lambda cfg=cfg: hopper(q, k, v, causal, cfg, out=o, lse=lse)
                print(f"d={d} causal={int(causal)} N={n}: {_time(runs, flops)}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--aot", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--causal-only", action="store_true")
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--configs", type=_config, nargs="+", help="instead of CONFIGS, e.g. 64,64,2,2,1")
    a = ap.parse_args()
    CONFIGS[:] = [(*c[:4], bool(c[4])) for c in a.configs] if a.configs else CONFIGS
    if a.aot:
        aot(a.head_dims)
    if a.check:
        check(a.head_dims)
    if a.bench:
        bench((True,) if a.causal_only else (False, True), a.head_dims, a.lengths)
