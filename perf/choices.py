"""Which config the autotuner picks for each kernel at the benchmark's shapes (bf16, 16k tokens in total,
heads = 2048 / d), and how stable the pick is: run it twice, in two processes, and compare.

    PYTHONPATH=. python perf/choices.py [--ds 64,128] [--ns 2048,4096,8192]
"""

import argparse

import torch

import flashdoc
from flashdoc.kernels import backward, forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds", default="64,128")
    ap.add_argument("--ns", default="2048,4096,8192")
    args = ap.parse_args()
    for d in map(int, args.ds.split(",")):
        for n in map(int, args.ns.split(",")):
            for causal in (False, True):
                q, k, v = (torch.randn(16384 // n, n, 2048 // d, d, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                flashdoc.flash_attn_func(q, k, v, causal=causal).sum().backward()
    torch.cuda.synchronize()
    for name, tuned in [("fwd", forward._attn_fwd_tuned), ("dkdv", backward._attn_bwd_dkdv_tuned),
                        ("dq", backward._attn_bwd_dq_tuned)]:
        for key, config in sorted(tuned.cache.items(), key=str):
            kw = config.kwargs
            print(f"{name:>4} key={key[:3]} -> ({kw['BLOCK_M']}, {kw['BLOCK_N']}, {config.num_stages}, "
                  f"{config.num_warps})")


if __name__ == "__main__":
    main()
