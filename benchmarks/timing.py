"""How one measurement is taken: inputs, do_bench, peak memory, the cold first call, CPU pinning, pass order.

The protocol (why each step is there, with the figures that decided it) is in ``benchmarks/README.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from benchmarks.schema import QUANTILES

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Every speed measurement times about this many calls or more (do_bench's budget is raised for slow ones; its own
# estimate of a call, which includes its L2 flush, can make it one fewer).
MIN_REPS = 10


def make_inputs(layout, batch, heads, seqlen, head_dim, dtype, device, requires_grad):
    """q, k, v (standard normal) in the peer's layout, and dout for the backward: the one setup shared by the
    speed and the memory measurements."""
    shape = (batch, heads, seqlen, head_dim) if layout == "bhnd" else (batch, seqlen, heads, head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=requires_grad) for _ in range(3))
    return q, k, v, torch.randn(shape, device=device, dtype=dtype)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, sweep, grad_to_none):
    """[median, p20, p80] in ms of ``fn``'s calls, with do_bench's L2 flush between calls."""
    if sweep.device == "cuda":
        import triton.testing

        # One more call sizes the budgets, so that a slow configuration still gets MIN_REPS timed calls.
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        call_ms = (time.perf_counter() - start) * 1e3
        return triton.testing.do_bench(
            fn,
            warmup=max(sweep.warmup_ms, 2 * call_ms),
            rep=max(sweep.rep_ms, MIN_REPS * call_ms),
            grad_to_none=grad_to_none,
            quantiles=QUANTILES,
        )
    # CPU (a smoke run): one plain wall-clock timing, the first call having served as the warm-up.
    for t in grad_to_none or ():
        t.grad = None
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms]


def measure_speed(attn, layout, mode, dtype, batch, heads, seqlen, head_dim, causal, sweep):
    """{'ms', 'ms_p20', 'ms_p80', 'first_call_s'} for one peer at one configuration. The forward is timed on
    inputs that require grad (the training forward, as flash-attn's benchmarks do)."""
    q, k, v, dout = make_inputs(layout, batch, heads, seqlen, head_dim, DTYPES[dtype], sweep.device, True)
    if mode == "fwd":

        def fn():
            return attn(q, k, v, causal)
    else:

        def fn():
            return attn(q, k, v, causal).backward(dout)

    sync(sweep.device)
    start = time.perf_counter()
    fn()  # the first call on this shape: compiles, autotunes, builds block masks ...
    sync(sweep.device)
    first_call_s = time.perf_counter() - start
    ms, p20, p80 = time_ms(fn, sweep, grad_to_none=[q, k, v] if mode == "fwd_bwd" else None)
    return dict(ms=ms, ms_p20=p20, ms_p80=p80, first_call_s=first_call_s)


def measure_peak_memory(attn, layout, batch, heads, seqlen, head_dim, dtype, causal, device):
    """Peak GPU memory allocated during one forward call, minus what was allocated before it (the inputs)."""
    q, k, v, _ = make_inputs(layout, batch, heads, seqlen, head_dim, DTYPES[dtype], device, False)
    with torch.no_grad():
        del _
        attn(q, k, v, causal)  # warm-up: compile/autotune scratch memory must not count
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = attn(q, k, v, causal)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak


# The cold first call runs in a fresh Python process with an empty Triton cache, so that nothing compiled
# or autotuned by the sweep helps it.
_FIRST_CALL_SCRIPT = r"""
import json, sys, time, torch
from flashdoc import flash_attn_func
b, n, h, d, causal = json.loads(sys.argv[1])
q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
torch.cuda.synchronize(); t0 = time.perf_counter()
out = flash_attn_func(q, k, v, causal=causal)
torch.cuda.synchronize(); t1 = time.perf_counter()
out.backward(torch.randn_like(out))
torch.cuda.synchronize(); t2 = time.perf_counter()
print(json.dumps({"fwd_s": t1 - t0, "bwd_s": t2 - t1}))
"""


def measure_first_call(batch, seqlen, heads, head_dim, causal, timeout_s=300):
    """{'fwd_s', 'bwd_s'}: flashdoc's first forward and backward on a new shape (compile + autotune)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        args = json.dumps([batch, seqlen, heads, head_dim, causal])
        proc = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL_SCRIPT, args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pin_threads(cpus):
    """Set the CPU affinity of every thread of this process (threads started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread ended meanwhile
            pass


def pass_order(configs, pass_index):
    """(row number, configuration) in the order a pass times them: the even passes go through the sweep
    forwards, the odd ones backwards, so no configuration is timed at the same point of the run twice."""
    rows = list(enumerate(configs))
    return rows if pass_index % 2 == 0 else rows[::-1]


def row_order(peers, row, pass_index):
    """The peers in the order they are timed in one row: each row starts at the next peer (where a kernel sits
    in the order moved its timing by a few percent), and the odd passes reverse it."""
    shift = row % len(peers)
    order = peers[shift:] + peers[:shift]
    return order if pass_index % 2 == 0 else order[::-1]


def rotated_median_ms(fns: dict, rounds: int = 3) -> dict:
    """{name: ms} of each function: each called once first (compiles), then timed with do_bench once per round,
    the order rotated every round so no function is always first, and the median round kept. The kernel A/B
    harnesses' timing (benchmarks/kernels)."""
    from triton.testing import do_bench

    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(do_bench(fns[name], warmup=25, rep=100))
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def keep_best(kept, timing):
    """The record of the pass with the lower median, carrying every pass's median and the first pass's
    first-call time. Interference (another process, a clock dip, a host hiccup) only ever slows a timing."""
    if kept is None:
        return dict(timing, ms_passes=[timing["ms"]])
    best = dict(min(kept, timing, key=lambda t: t["ms"]))
    best.update(
        ms_passes=kept["ms_passes"] + [timing["ms"]],
        first_call_s=kept["first_call_s"],
        wall_s=kept["wall_s"] + timing["wall_s"],
    )
    return best
