"""Why flashdoc's short forward + backward rows are slower inside the full benchmark than alone (session 15).

Benchmark v15 timed bf16 d=64 full fwd+bwd at 1.73 ms (1k) and 3.16 ms (2k); one-configuration sweeps in a fresh
process time the same rows at 1.46-1.48 and 2.64-2.80 ms, and the kernels add up to ~2.6 ms at 2k
(perf/NOTES.md, sessions 14-15). This times the 2k row with bench.measure_speed (the benchmark's own protocol)
in a fresh process, then runs a part of the benchmark (run_benchmark, bf16, d=64, both modes, causal and not,
every N, every peer) and times the row again in the same process, pinned as the benchmark pins it. For each timing
it prints which threads of the process used CPU time meanwhile (a busy thread sharing the pinned CPU would slow
the host), and at the end a timeline of three calls (is the host behind the GPU?).

    PYTHONPATH=. python3 perf/bench_process_probe.py [--precompile-workers 0] [--dtypes bf16,fp16] \
        [--head-dims 64,128]   # H200, 1-5 min
"""

import argparse
import os
import time

import torch

from flashdoc import bench
from perf.d64_profile import timeline


def thread_cpu():
    """{(tid, name): CPU seconds} for every thread of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = open(f"/proc/self/task/{tid}/comm").read().strip()
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            out[(tid, name)] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return out


def timed_row(label, sweep, seqlen=2048):
    flashdoc_attn = bench.load_peers("cuda", ["flashdoc"])[0]["flashdoc"]
    layout = next(p.layout for p in bench.PEERS if p.name == "flashdoc")
    batch, heads = sweep.batch_heads(seqlen, 64)
    before, t0 = thread_cpu(), time.perf_counter()
    m = bench.measure_speed(flashdoc_attn, layout, "fwd_bwd", "bf16", batch, heads, seqlen, 64, False, sweep)
    wall = time.perf_counter() - t0
    after = thread_cpu()
    busy = sorted(((after[k] - before.get(k, 0), k) for k in after if after[k] - before.get(k, 0) > 0), reverse=True)
    print(f"{label:45s} N={seqlen}: median {m['ms']:.3f} ms (p20 {m['ms_p20']:.3f}, p80 {m['ms_p80']:.3f}); "
          f"{len(after)} threads; CPU s in {wall:.2f} s wall: "
          + ", ".join(f"{name}/{tid} {s:.2f}" for s, (tid, name) in busy[:6]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precompile-workers", type=int, default=None)
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--head-dims", default="64")
    ap.add_argument("--out", default="/tmp/probe")
    args = ap.parse_args()
    sweep = bench.SWEEPS["full"]
    cpus = os.sched_getaffinity(0)
    bench._pin_threads({min(cpus)})
    for n in (1024, 2048):
        timed_row("fresh process, pinned", sweep, n)
    bench._pin_threads(cpus)
    extra = {} if args.precompile_workers is None else {"precompile_workers": args.precompile_workers}
    results = bench.run_benchmark(out_dir=args.out, dtypes=tuple(args.dtypes.split(",")),
                                  head_dims=tuple(int(d) for d in args.head_dims.split(",")), memory_seqlens=(),
                                  first_call=False, verbose=False, progress=False, **extra)
    for r in results["records"]:  # the benchmark's own timings of the rows timed here
        if (r["kind"] == "speed" and r["status"] == "ok" and r["mode"] == "fwd_bwd" and r["head_dim"] == 64
                and not r["causal"] and r["seqlen"] in (1024, 2048, 4096) and r["peer"] in ("flashdoc", "flex")):
            print(f"  in run_benchmark: {r['peer']:8s} {r['dtype']} N={r['seqlen']}: median {r['ms']:.3f} ms "
                  f"(p20 {r['ms_p20']:.3f}, p80 {r['ms_p80']:.3f}) at {r['timestamp']}", flush=True)
    bench._pin_threads({min(cpus)})
    for n in (1024, 2048, 1024, 2048):
        timed_row("after run_benchmark, pinned", sweep, n)
    bench._pin_threads(cpus)
    for n in (1024, 2048):
        timed_row("after run_benchmark, unpinned", sweep, n)
    import gc
    gc.collect()
    bench._pin_threads({min(cpus)})
    timed_row("after gc.collect(), pinned", sweep, 2048)
    batch, heads = sweep.batch_heads(2048, 64)
    q, k, v, dout = bench.make_inputs("bnhd", batch, heads, 2048, 64, torch.bfloat16, "cuda", True)
    import flashdoc

    def step():
        q.grad = k.grad = v.grad = None
        flashdoc.flash_attn_func(q, k, v).backward(dout)

    print("three back-to-back calls after run_benchmark, pinned:", flush=True)
    timeline(step, calls=3)


if __name__ == "__main__":
    main()
