"""Host cost of one kernel launch, layer by layer, and where the forward + backward step's host time goes.

    PYTHONPATH=. python benchmarks/kernels/launch_cost.py

Times the dQ kernel on a tiny problem (GPU work negligible), from the public launcher down to Triton's compiled
launcher called directly, then the whole forward + backward step with the backward on autograd's worker thread
or on the calling thread, with the process free to use every CPU or pinned to one, and the same for a step
whose backward is a Python loop of growing length (unpinned, the worker thread's extra time did not follow the
loop's length; pinned, the hand-off cost ~10 us).
"""

import cProfile
import inspect
import os
import pstats
import time

import torch

import flashdoc
import flashdoc.interface as interface
from benchmarks.kernels.host_overhead import per_call_us
from benchmarks.timing import pin_threads as _pin_threads  # every thread of this process, as the benchmark pins
from flashdoc.kernels import backward as bwd
from flashdoc.kernels import forward as fwd
from flashdoc.kernels import launch


def main():
    b, n, h, d = 1, 128, 2, 64
    q, k, v, dout, out, dq = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(6))
    lse2, delta = (torch.zeros(b, h, n, device="cuda") for _ in range(2))
    cfg = bwd.bwd_configs_for(d, q.dtype)[0][1]
    # The public paths with flashdoc's launch cache off (Triton's launch path every time) and on
    paths = {
        "flash_attn_func forward": lambda: flashdoc.flash_attn_func(q, k, v, causal=True),
        "op flashdoc::fwd": lambda: torch.ops.flashdoc.fwd(q, k, v, 0.125, True, True),
        "op flashdoc::bwd": lambda: torch.ops.flashdoc.bwd(dout, q, k, v, out, lse2, None, 0.125, True, True),
        "bwd_dq through the autotuner": lambda: bwd.bwd_dq(q, k, v, dout, dq, lse2, delta, 0.125, True, True),
        "bwd_dq with a fixed config": lambda: bwd.bwd_dq(q, k, v, dout, dq, lse2, delta, 0.125, True, True, cfg),
    }
    with launch.on_device(q.device):
        for name, fn in paths.items():
            launch.LAUNCH_CACHE = False
            off = per_call_us(fn)
            launch.LAUNCH_CACHE = True
            print(f"{off:8.1f} -> {per_call_us(fn):6.1f} us  {name} (launch cache off -> on)", flush=True)
    rows = {}
    scalars, meta = bwd._common_args(q, k, 0.125, True, True)
    meta["ONE_AXIS"] = False
    args = (
        q,
        launch.head_tiles(k, "BLOCK_N"),
        launch.head_tiles(v, "BLOCK_N"),
        dout,
        launch.head_tiles(dq, "BLOCK_M"),
        lse2,
        delta,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        dout.stride(0),
        dout.stride(1),
        dout.stride(2),
        *scalars,
    )
    launch.set_block_shapes({**dict(enumerate(args)), **meta, **cfg.kwargs})
    grid = (*fwd.tile_grid(n, "BLOCK_M", b * h, True)({**meta, **cfg.kwargs}), 1, 1)[:3]
    opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    with launch.on_device(q.device):
        compiled = bwd._attn_bwd_dq[grid](*args, **meta, **cfg.kwargs, **opts)
    rows["JIT launch, arguments prebuilt"] = lambda: bwd._attn_bwd_dq[grid](*args, **meta, **cfg.kwargs, **opts)
    bound = inspect.signature(bwd._attn_bwd_dq.fn).bind(*args, **meta, **cfg.kwargs).arguments
    all_args = [bound[name] for name in bwd._attn_bwd_dq.arg_names]
    stream = torch.cuda.current_stream().cuda_stream
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    rows["compiled kernel's launcher, arguments prebuilt"] = lambda: run(
        grid[0], grid[1], grid[2], stream, function, packed, None, None, None, *all_args
    )
    rows["head_tiles (one host descriptor)"] = lambda: launch.head_tiles(k, "BLOCK_N")
    rows["_common_args"] = lambda: bwd._common_args(q, k, 0.125, True, True)

    def enter_exit():
        with launch.on_device(q.device):
            pass

    rows["on_device enter + exit"] = enter_exit
    rows["torch.empty_like"] = lambda: torch.empty_like(q)
    with launch.on_device(q.device):
        for name, fn in rows.items():
            print(f"{per_call_us(fn):8.1f} us  {name}", flush=True)

    # Where the backward op's host time goes (cProfile inflates Python calls; read it for proportions)
    prof = cProfile.Profile()
    bwd_op = lambda: torch.ops.flashdoc.bwd(dout, q, k, v, out, lse2, None, 0.125, True, True)  # noqa: E731
    per_call_us(bwd_op, calls=10)
    prof.enable()
    per_call_us(bwd_op, calls=300)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)

    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    backward_us = []
    real_bwd_op = interface._bwd_op

    def timed_bwd_op(*a):
        start = time.perf_counter()
        r = real_bwd_op(*a)
        backward_us.append((time.perf_counter() - start) * 1e6)
        return r

    interface._bwd_op = timed_bwd_op

    def step():
        flashdoc.flash_attn_func(qg, kg, vg, causal=True).backward(dout)

    for cache in (False, True):
        launch.LAUNCH_CACHE = cache
        print(f"{per_call_us(step, calls=500):8.1f} us  step, launch cache {'on' if cache else 'off'}", flush=True)

    class Busy(torch.autograd.Function):
        """A backward of n iterations of a plain Python loop and one tiny CUDA op."""

        @staticmethod
        def forward(ctx, x, n):
            ctx.n = n
            return x * 2

        @staticmethod
        def backward(ctx, g):
            total = 0
            for i in range(ctx.n):
                total += i
            return g * 2, None

    x = torch.randn(1000, device="cuda", requires_grad=True)
    for pinned in (False, True):
        if pinned:
            _pin_threads({sorted(os.sched_getaffinity(0))[0]})
        where = "one CPU" if pinned else "all CPUs"
        for threaded in (True, False):
            torch.autograd.set_multithreading_enabled(threaded)
            backward_us.clear()
            total = per_call_us(step, calls=500)
            inside = sorted(backward_us)[len(backward_us) // 2]
            print(
                f"{total:8.1f} us  step ({'worker thread' if threaded else 'calling thread'}, {where}); "
                f"backward op itself {inside:.0f} us (median)",
                flush=True,
            )
        # What the engine and the thread hand-off cost without flashdoc's Python: if the worker thread's extra
        # time stays constant as the backward's Python work grows, it is the hand-off; if it grows, Python
        # itself runs slower on that thread
        for n in (0, 1000, 4000, 16000):
            us = {}
            for threaded in (True, False):
                torch.autograd.set_multithreading_enabled(threaded)
                us[threaded] = per_call_us(lambda: Busy.apply(x, n).sum().backward(), calls=500)
            print(
                f"{us[True]:8.1f} us  autograd.Function step, backward = {n} Python loop iterations ({where}); "
                f"calling thread {us[False]:.1f}, worker thread's extra {us[True] - us[False]:.1f}",
                flush=True,
            )
    torch.autograd.set_multithreading_enabled(True)


if __name__ == "__main__":
    main()
