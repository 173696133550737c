"""Where a benchmark row's forward+backward time goes: each kernel's GPU time, the GPU's idle gaps inside one
call, and the benchmark's own measurement of the same call, side by side.

    PYTHONPATH=. python perf/step_profile.py [--ds 64,128] [--ns 2048,4096] [--causal False]

The call is the benchmark's (``flashdoc.bench``: flash_attn_func(...).backward(dout), autotuned, grads set
to None between calls). The profile covers --calls calls after the benchmark's timing; per call it reports the
sum of kernel times per kernel name, and the span from the first kernel's start to the last kernel's end.
"""

import argparse
import collections
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

from flashdoc import bench


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds", default="64,128")
    ap.add_argument("--ns", default="2048,4096")
    ap.add_argument("--causal", default="False")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    sweep = bench.SWEEPS["full"]
    attn = bench._load_flashdoc("cuda")
    for d in map(int, args.ds.split(",")):
        for causal in (c == "True" for c in args.causal.split(",")):
            for n in map(int, args.ns.split(",")):
                batch, heads = sweep.batch_heads(n, d)
                timed = {mode: bench.measure_speed(attn, "bnhd", mode, args.dtype, batch, heads, n, d, causal, sweep)
                         for mode in ("fwd", "fwd_bwd")}
                q, k, v, dout = bench.make_inputs("bnhd", batch, heads, n, d, bench.DTYPES[args.dtype], "cuda", True)
                for _ in range(3):
                    attn(q, k, v, causal).backward(dout)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.calls):
                        q.grad = k.grad = v.grad = None
                        attn(q, k, v, causal).backward(dout)
                    torch.cuda.synchronize()
                kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                kernels.sort(key=lambda e: e.time_range.start)
                per_name = collections.defaultdict(float)
                for e in kernels:
                    per_name[e.name[:40]] += e.time_range.elapsed_us() / args.calls
                # one call = the kernels from one _attn_fwd to the next
                starts = [i for i, e in enumerate(kernels) if e.name.startswith("_attn_fwd")] + [len(kernels)]
                spans = [(kernels[b - 1].time_range.end - kernels[a].time_range.start)
                         for a, b in zip(starts, starts[1:])]
                gaps = [(kernels[b].time_range.start - kernels[b - 1].time_range.end) for b in starts[1:-1]]
                print(f"d={d} causal={causal} N={n} {args.dtype}: benchmark fwd {timed['fwd']['ms']:.3f} ms, "
                      f"fwd+bwd {timed['fwd_bwd']['ms']:.3f} ms; profiled span per call median "
                      f"{statistics.median(spans) / 1e3:.3f} ms, gap between calls median "
                      f"{statistics.median(gaps) / 1e3 if gaps else 0:.3f} ms", flush=True)
                for name, us in sorted(per_name.items(), key=lambda x: -x[1]):
                    print(f"    {us / 1e3:8.3f} ms  {name}", flush=True)
                del q, k, v, dout
    for p in bench.autotuned_configs():
        print(f"  pick {p['kernel']:>4} {p['key'][:40]} -> ({p['block_m']}, {p['block_n']}, {p['num_stages']}, "
              f"{p['num_warps']})")


if __name__ == "__main__":
    main()
