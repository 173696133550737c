"""Forward launches to read with Nsight Compute: each given config once to compile, then once more to profile.

    ncu --clock-control none -k regex:_attn_fwd --launch-skip 2 --launch-count 2 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
        python3 benchmarks/kernels/ncu_fwd.py --d 128 --n 4096 --causal --configs "64,64,3,4;128,64,2,4"

(--launch-skip = the number of configs: the compiling launches). bf16, 16k tokens, heads = 2048 / d.
"""

import argparse

import torch

from flashdoc.kernels.forward import attn_fwd
from flashdoc.kernels.launch import tile_config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--configs", default="64,64,3,4;128,64,2,4")
    args = ap.parse_args()
    b, h = 16384 // args.n, 2048 // args.d
    q, k, v = (torch.randn(b, args.n, h, args.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.empty_like(q), torch.empty(b, h, args.n, device="cuda")
    configs = [tile_config(*map(int, c.split(","))) for c in args.configs.split(";")]
    for _ in range(2):  # compile, then the launches to profile
        for config in configs:
            attn_fwd(q, k, v, out, lse, args.d**-0.5, args.causal, False, config=config)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
