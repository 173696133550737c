"""Backward launches to read with Nsight Compute: the variants of fused_dq.py (the split kernels, the fused
one), each once to compile (and autotune), then once more to profile.

    ncu --clock-control none --nvtx --nvtx-include "profile/" -k regex:_attn_bwd_dkdv \
        --section SpeedOfLight --section WarpStateStats --section SourceCounters \
        python3 benchmarks/kernels/ncu_bwd.py --variants fused --n 16384 --causal --dtype fp16

(only the launches inside the NVTX range "profile" are profiled: every variant's second backward, after the first
has compiled and autotuned it). d = 64, 16k tokens (batch 16384 / N, 32 heads); --n, --causal and --dtype pick
the call. What to read: the tensor pipe's utilisation and the SM clock (SpeedOfLight; with --clock-control none
the clock is the one the card chose under its power limit), and the consumer warps' stall reasons
(WarpStateStats; per instruction in SourceCounters).
"""

import argparse

import torch

from benchmarks.kernels.fused_dq import VARIANTS, forward, run_variant


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    args = ap.parse_args()
    d = 64
    b, h = max(1, 16384 // args.n), 2048 // d
    q, k, v, dout = (
        torch.randn(b, args.n, h, d, device="cuda", dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float16)
        for _ in range(4)
    )
    out, lse = forward(q, k, v, args.causal)
    grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
    for name in args.variants:  # compile and autotune every variant first, so the profiled launches come last
        run_variant(name, q, k, v, dout, out, lse, args.causal, grads)
    torch.cuda.synchronize()
    with torch.cuda.nvtx.range("profile"):
        for name in args.variants:
            run_variant(name, q, k, v, dout, out, lse, args.causal, grads)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
