"""Which config the autotuner picks for each kernel at the benchmark's shapes (bf16, 16k tokens in total,
heads = 2048 / d), and how stable the pick is: run it twice, in two processes, and compare.

    PYTHONPATH=. python perf/choices.py [--ds 64,128] [--ns 2048,4096,8192]
"""

import argparse

import torch

import flashdoc
from flashdoc import bench


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
    for p in bench.autotuned_configs():
        print(f"{p['kernel']:>4} key={p['key'][:40]} -> ({p['block_m']}, {p['block_n']}, {p['num_stages']}, "
              f"{p['num_warps']})")


if __name__ == "__main__":
    main()
