"""Tile-config sweep on the GPU: every candidate config of each kernel, launched directly (no autotuner).

    PYTHONPATH=. python benchmarks/kernels/sweep.py [--ds 64,128,256] [--kinds fwd,dkdv,dq] [--out sweep.json]
    PYTHONPATH=. python benchmarks/kernels/sweep.py --round 2 --ds 64,128 --kinds fwd,dkdv,dq   (or --round 3)
    PYTHONPATH=. python benchmarks/kernels/sweep.py --round 4 --ds 64,128 --causal True --fwd-ns 2048,4096,8192 \
        --bwd-ns ...

Kinds: fwd (the package's forward), dkdv / dq (the package's backward kernels, timed one at a time). To compare
whole kernel versions instead of tile sizes, use ab.py. bf16, 16k tokens in total (batch = 16384 / N),
heads = 2048 / d, layout (B, N, H, d). TFLOP/s: 4 B H N^2 d (halved when causal) per
forward; the dK/dV kernel does 4 of the backward's 7 matmuls (2.5 x forward in all), dQ the other 3.
Compilation runs first in parallel worker processes (it is CPU-bound and the cache is shared), timing after.
"""

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

# SWEEP_DEVICE=cpu SWEEP_TOKENS=... give a slow interpreter dry run of the script's plumbing.
DEVICE = os.environ.get("SWEEP_DEVICE", "cuda")
TOKENS = int(os.environ.get("SWEEP_TOKENS", 16384))
# The workers import flashdoc from this checkout (the repository's root, two folders up).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def C(bm, bn, s, w):
    return (bm, bn, s, w)


# (BLOCK_M, BLOCK_N, stages, warps). fwd: BLOCK_M query rows, BLOCK_N keys per step. dkdv: BLOCK_N keys kept,
# BLOCK_M query rows per step. dq: BLOCK_M query rows kept, BLOCK_N keys per step.
CANDIDATES = {
    "fwd": {
        64: [
            C(128, 64, 3, 4),
            C(128, 128, 3, 8),
            C(64, 64, 4, 4),
            C(128, 64, 4, 4),
            C(128, 128, 2, 8),
            C(64, 128, 3, 4),
            C(128, 64, 3, 8),
            C(128, 128, 4, 8),
            C(64, 64, 3, 4),
            C(64, 128, 2, 4),
        ],
        128: [
            C(128, 64, 3, 8),
            C(128, 128, 2, 8),
            C(128, 64, 4, 8),
            C(64, 64, 3, 4),
            C(64, 128, 2, 4),
            C(64, 128, 3, 4),
            C(64, 64, 4, 4),
            C(128, 64, 2, 8),
            C(128, 32, 4, 8),
            C(128, 64, 3, 4),
        ],
        256: [
            C(64, 64, 2, 8),
            C(128, 64, 2, 8),
            C(64, 32, 3, 4),
            C(64, 64, 2, 4),
            C(64, 32, 2, 4),
            C(128, 32, 2, 8),
            C(128, 32, 3, 8),
        ],
    },
    "dkdv": {
        64: [
            C(32, 128, 3, 4),
            C(64, 64, 2, 4),
            C(64, 128, 2, 8),
            C(32, 128, 4, 4),
            C(32, 128, 5, 4),
            C(64, 128, 3, 8),
            C(32, 64, 3, 4),
            C(16, 128, 4, 4),
        ],
        128: [
            C(32, 128, 3, 8),
            C(64, 64, 2, 8),
            C(64, 128, 2, 8),
            C(32, 128, 3, 4),
            C(32, 128, 5, 4),
            C(32, 128, 4, 8),
            C(32, 64, 3, 4),
            C(64, 64, 3, 4),
            C(16, 128, 4, 8),
        ],
        256: [
            C(32, 64, 2, 8),
            C(64, 64, 2, 8),
            C(16, 64, 3, 8),
            C(32, 64, 3, 8),
            C(32, 64, 2, 4),
            C(64, 64, 1, 8),
            C(16, 64, 2, 4),
        ],
    },
    "dq": {
        64: [
            C(128, 32, 3, 4),
            C(64, 64, 2, 4),
            C(128, 64, 2, 8),
            C(128, 32, 5, 4),
            C(128, 64, 3, 8),
            C(64, 32, 3, 4),
            C(128, 32, 4, 8),
        ],
        128: [
            C(128, 32, 3, 8),
            C(64, 64, 2, 8),
            C(128, 64, 2, 8),
            C(128, 32, 5, 4),
            C(128, 32, 4, 8),
            C(64, 32, 3, 4),
            C(128, 64, 3, 8),
            C(64, 64, 3, 4),
        ],
        256: [
            C(64, 32, 2, 8),
            C(64, 64, 2, 8),
            C(128, 32, 2, 8),
            C(64, 32, 3, 8),
            C(128, 32, 3, 8),
            C(64, 16, 3, 4),
            C(64, 32, 2, 4),
        ],
    },
}
# Round 2 (--round 2): round 1's winners (first) and their neighbours; two programs per SM won the forward.
ROUND2 = {
    "fwd": {
        64: [C(64, 128, 2, 4), C(64, 256, 2, 4), C(64, 64, 2, 4), C(64, 128, 2, 8), C(64, 64, 3, 4)],
        128: [
            C(64, 64, 3, 4),
            C(64, 32, 3, 4),
            C(64, 32, 4, 4),
            C(64, 64, 2, 4),
            C(64, 32, 2, 4),
            C(64, 64, 3, 8),
            C(128, 64, 3, 8),
        ],
    },
    "dkdv": {
        64: [C(32, 128, 3, 4), C(64, 128, 2, 4), C(32, 128, 2, 4), C(32, 64, 2, 4), C(64, 64, 3, 4)],
        128: [
            C(32, 64, 3, 4),
            C(32, 64, 2, 4),
            C(32, 64, 4, 4),
            C(16, 64, 3, 4),
            C(64, 64, 2, 4),
            C(32, 64, 3, 8),
            C(64, 128, 2, 8),
        ],
    },
    "dq": {
        64: [C(128, 64, 3, 8), C(128, 64, 4, 8), C(128, 128, 2, 8), C(64, 64, 3, 4), C(128, 64, 3, 4)],
        128: [C(128, 64, 3, 8), C(128, 64, 4, 8), C(128, 128, 2, 8), C(64, 64, 2, 4), C(64, 32, 4, 4), C(64, 32, 2, 4)],
    },
}
# Round 3 (--round 3): 128-row tiles on 4 warps, which ab.py found fast for the d = 128
# forward (two such programs fit one SM); the current configs come first.
ROUND3 = {
    "fwd": {
        64: [C(64, 128, 2, 4), C(128, 64, 2, 4), C(128, 32, 2, 4), C(128, 64, 3, 4), C(128, 32, 3, 4)],
        128: [
            C(64, 64, 3, 4),
            C(128, 64, 2, 4),
            C(128, 32, 2, 4),
            C(128, 32, 3, 4),
            C(128, 32, 4, 4),
            C(128, 64, 3, 4),
        ],
        256: [C(128, 64, 2, 8), C(128, 32, 2, 4), C(128, 16, 2, 4), C(64, 64, 2, 4), C(128, 32, 3, 4)],
    },
    "dkdv": {
        64: [C(32, 128, 3, 4), C(128, 64, 2, 4), C(64, 64, 2, 4), C(64, 128, 2, 4), C(128, 128, 2, 8)],
        128: [C(64, 64, 2, 4), C(128, 64, 2, 4), C(128, 64, 2, 8), C(128, 32, 2, 4), C(64, 32, 2, 4)],
        256: [C(64, 64, 2, 8), C(64, 32, 2, 4), C(128, 32, 2, 4), C(128, 64, 1, 8), C(128, 32, 2, 8)],
    },
    "dq": {
        64: [C(128, 64, 3, 8), C(128, 64, 2, 4), C(128, 32, 2, 4), C(128, 128, 2, 4), C(128, 32, 3, 4)],
        128: [C(128, 64, 3, 8), C(128, 64, 2, 4), C(128, 32, 2, 4), C(128, 32, 3, 4), C(128, 64, 3, 4)],
        256: [C(128, 32, 3, 8), C(128, 32, 2, 4), C(128, 16, 2, 4), C(128, 16, 3, 4), C(64, 32, 2, 4)],
    },
}
# Round 4: causal at 2k-8k, where the benchmark is weakest (bf16 d = 64 causal forward + backward at
# 4k ran 0.72x its non-causal speed); the package's candidates first, then neighbours. With --causal True.
ROUND4 = {
    "fwd": {
        64: [
            C(64, 128, 2, 4),
            C(64, 64, 3, 4),
            C(128, 64, 3, 4),
            C(128, 128, 2, 8),
            C(128, 64, 2, 4),
            C(64, 64, 2, 4),
            C(128, 32, 3, 4),
            C(64, 128, 3, 4),
        ],
        128: [
            C(64, 64, 3, 4),
            C(128, 64, 2, 4),
            C(128, 64, 3, 8),
            C(128, 64, 2, 8),
            C(128, 32, 3, 8),
            C(64, 32, 3, 4),
            C(128, 128, 2, 8),
            C(64, 64, 2, 4),
        ],
    },
    "dkdv": {
        64: [
            C(32, 128, 3, 4),
            C(64, 64, 3, 4),
            C(128, 64, 2, 4),
            C(64, 128, 2, 4),
            C(32, 64, 3, 4),
            C(16, 128, 3, 4),
            C(32, 128, 2, 4),
            C(64, 128, 2, 8),
        ],
        128: [
            C(64, 64, 2, 4),
            C(32, 64, 4, 4),
            C(64, 128, 2, 8),
            C(32, 64, 3, 4),
            C(32, 128, 2, 4),
            C(32, 128, 3, 8),
            C(64, 64, 3, 4),
            C(16, 64, 4, 4),
        ],
    },
    "dq": {
        64: [
            C(128, 64, 3, 8),
            C(64, 64, 3, 4),
            C(64, 64, 2, 4),
            C(128, 32, 3, 4),
            C(64, 32, 3, 4),
            C(128, 64, 2, 4),
            C(64, 128, 2, 4),
        ],
        128: [
            C(128, 64, 3, 8),
            C(128, 64, 4, 8),
            C(64, 64, 2, 4),
            C(64, 32, 3, 4),
            C(128, 32, 3, 8),
            C(64, 64, 3, 4),
            C(128, 64, 2, 8),
        ],
    },
}
MATMULS = {"fwd": 1.0, "dkdv": 4 / 7 * 2.5, "dq": 3 / 7 * 2.5}


def setup(kind, d, n, causal):
    """Tensors and a launch function f(config) for one kernel kind at one shape."""
    import torch

    from flashdoc.kernels import backward, forward

    torch.manual_seed(0)
    b, h = max(TOKENS // n, 1), 2048 // d if DEVICE == "cuda" else 1
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter's bf16 is wrong
    q, k, v, do = (torch.randn(b, n, h, d, device=DEVICE, dtype=dtype) for _ in range(4))
    out, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
    lse = torch.empty(b, h, n, device=DEVICE, dtype=torch.float32)
    scale = d**-0.5
    forward.attn_fwd(q, k, v, out, lse, scale, causal, False, config=forward.fwd_configs_for(d, q.dtype)[0])
    delta, lse2 = backward.bwd_preprocess(do, out, lse, None)

    def f(cfg):
        config = forward.tile_config(*cfg)
        if kind == "fwd":
            forward.attn_fwd(q, k, v, out, lse, scale, causal, False, config=config)
        elif kind == "dkdv":
            backward.bwd_dkdv(q, k, v, do, dk, dv, lse2, delta, scale, causal, False, config)
        else:
            backward.bwd_dq(q, k, v, do, dq, lse2, delta, scale, causal, False, config)

    flops = 4 * b * h * n * n * d / (2 if causal else 1) * MATMULS[kind]
    return f, flops


def compile_job(job):
    """Compile one (kind, d, causal, config) on a small shape; returns the job and an error string or None."""
    kind, d, causal, cfg = job
    try:
        import torch

        from flashdoc.kernels import launch

        compiled = []
        init = launch._Launcher.__init__

        def keep(self, kernel, compiled_kernel, *rest):  # the compiled kernel, for its register report
            compiled.append(compiled_kernel)
            init(self, kernel, compiled_kernel, *rest)

        launch._Launcher.__init__ = keep
        f, _ = setup(kind, d, min(256, TOKENS), causal)
        compiled.clear()
        launch._launchers.clear()  # so that f's launch compiles (or loads) and reports, even at setup's config
        f(cfg)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        report = {k: getattr(compiled[-1], k, None) for k in ("n_regs", "n_spills")} if compiled else {}
        return job, None, report
    except Exception as e:  # out of shared memory / registers: the config is skipped
        return job, f"{type(e).__name__}: {str(e)[:160]}", {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds", default="64,128,256")
    ap.add_argument("--kinds", default="fwd,dkdv,dq")
    ap.add_argument("--fwd-ns", default="2048,4096,16384")
    ap.add_argument("--bwd-ns", default="4096,16384")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--out", default="sweep.json")
    ap.add_argument("--round", type=int, default=1, choices=(1, 2, 3, 4))
    ap.add_argument("--causal", default="False,True")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="times each config is timed, the configs in a rotated order each time (median kept): a "
        "fixed order biases configs by their position (up to +-6%%)",
    )
    ap.add_argument("--regs", action="store_true", help="print each compiled kernel's registers and spills")
    ap.add_argument("--regs-only", action="store_true", help="with --regs: compile and report, no timing")
    args = ap.parse_args()
    candidates = {1: CANDIDATES, 2: ROUND2, 3: ROUND3, 4: ROUND4}[args.round]
    causals = [c == "True" for c in args.causal.split(",")]
    ds = [int(x) for x in args.ds.split(",")]
    kinds = args.kinds.split(",")
    jobs = [(kind, d, causal, cfg) for kind in kinds for d in ds for causal in causals for cfg in candidates[kind][d]]
    t0 = time.time()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        compiled = list(pool.imap_unordered(compile_job, jobs))
    failed = {job: err for job, err, _ in compiled if err}
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.0f} s; {len(failed)} failed", flush=True)
    if args.regs:  # registers per thread and spills, from each compiled kernel
        for (kind, d, causal, cfg), err, report in sorted(compiled, key=lambda x: str(x[0])):
            if not err:
                print(f"  regs {kind:>4} d={d:<3} causal={causal!s:<5} {cfg}: {report}", flush=True)
        if args.regs_only:
            return
    for job, err in failed.items():
        print("  skip", job, err, flush=True)

    import torch
    import triton

    rows = []
    for kind in kinds:
        ns = [int(x) for x in (args.fwd_ns if kind == "fwd" else args.bwd_ns).split(",")]
        for d in ds:
            for causal in causals:
                for n in ns:
                    f, flops = setup(kind, d, n, causal)
                    cfgs = [c for c in candidates[kind][d] if (kind, d, causal, c) not in failed]
                    times = {c: [] for c in cfgs}
                    for r in range(args.rounds):
                        for cfg in cfgs[r % len(cfgs) :] + cfgs[: r % len(cfgs)]:
                            times[cfg].append(
                                triton.testing.do_bench(lambda: f(cfg), warmup=10, rep=40, return_mode="median")
                            )
                    results = {c: flops / statistics.median(t) * 1e-9 for c, t in times.items()}
                    best = max(results, key=results.get)
                    default = candidates[kind][d][0]
                    line = " ".join(f"{c}:{t:.0f}" for c, t in sorted(results.items(), key=lambda x: -x[1]))
                    print(
                        f"{kind:>8} d={d:<3} causal={causal!s:<5} N={n:<5} best {best} {results[best]:.0f} "
                        f"(default {results.get(default, 0):.0f}) | {line}",
                        flush=True,
                    )
                    rows.append(
                        {
                            "kind": kind,
                            "d": d,
                            "causal": causal,
                            "n": n,
                            "tflops": {str(c): t for c, t in results.items()},
                        }
                    )
                    torch.cuda.empty_cache()
                    with open(args.out, "w") as fh:
                        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
