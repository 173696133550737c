"""Why is one float16 row steadily slower than its bfloat16 twin? (benchmark v17, perf/NOTES.md session 16)

fwd+bwd, d = 256, causal, 512 tokens (batch 32, 8 heads) ran at 1.019 ms in float16 in both passes, p20-p80
0.999-1.040, against 0.59 ms in bfloat16; at 1k 0.97 against 0.78. The kernels and their configs are the same for
both dtypes (autotuned.md). This times the forward alone and forward+backward per dtype as the benchmark does
(bench.make_inputs, bench._time_ms with the benchmark's budgets, rotated order), then profiles a few
forward+backward calls per dtype and prints each CUDA kernel's mean time, so the slow one is named.

    PYTHONPATH=. python3 perf/dtype_twins.py [--lengths 512 1024] [--head-dim 256]     # H200, ~1 min
"""

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from flashdoc import flash_attn_func
from flashdoc.bench import DTYPES, Sweep, _time_ms, make_inputs


def calls(dtype, n, d):
    q, k, v, dout = make_inputs("bnhd", 16384 // n, 2048 // d, n, d, DTYPES[dtype], "cuda", True)
    fwd = lambda: flash_attn_func(q, k, v, causal=True)  # noqa: E731
    fwd_bwd = lambda: flash_attn_func(q, k, v, causal=True).backward(dout)  # noqa: E731
    return {"fwd": (fwd, None), "fwd_bwd": (fwd_bwd, [q, k, v])}


def kernel_times(fn, grads, reps=20):
    """Mean CUDA time per call of each kernel over reps calls, in us, largest first."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            for t in grads or ():
                t.grad = None
            fn()
        torch.cuda.synchronize()
    total = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            total[event.name[:60]] += event.device_time / reps
    return sorted(total.items(), key=lambda kv: -kv[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--head-dim", type=int, default=256)
    a = ap.parse_args()
    sweep = Sweep(name="dtype_twins", device="cuda")
    for n in a.lengths:
        runs = {(dtype, mode): fg for dtype in ("bf16", "fp16") for mode, fg in calls(dtype, n, a.head_dim).items()}
        for fn, grads in runs.values():  # compile and autotune before any timing
            fn()
        names = list(runs)
        times = defaultdict(list)
        for r in range(3):
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn, grads = runs[name]
                times[name].append(_time_ms(fn, sweep, grads))
        for (dtype, mode), t in times.items():
            print(f"N={n} d={a.head_dim} causal {dtype} {mode}: [median, p20, p80] ms per pass "
                  + "  ".join("[" + ", ".join(f"{x:.3f}" for x in q) + "]" for q in t), flush=True)
        for dtype in ("bf16", "fp16"):
            fn, grads = runs[(dtype, "fwd_bwd")]
            print(f"N={n} {dtype} fwd+bwd kernels (us per call):", flush=True)
            for name, us in kernel_times(fn, grads):
                print(f"    {us:8.1f}  {name}", flush=True)


if __name__ == "__main__":
    main()
