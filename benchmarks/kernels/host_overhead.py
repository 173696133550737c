"""Host (CPU) time per call: how long the Python side of each path takes when the GPU work is negligible.

    PYTHONPATH=. python benchmarks/kernels/host_overhead.py [--profile] [--trace trace.json]

At N <= 1k a forward takes 0.1-0.3 ms on the GPU, and do_bench times each call after an L2 flush of about
60 us: host work beyond that leaves the GPU idle inside the timed window, so it shows up as lower TFLOP/s.
This times a tiny problem (1 x 128 x 2 x 64, bf16) back to back, synchronising once per batch of calls, for
the public API, each layer below it, and SDPA-flash; --profile adds cProfile's top entries for the API, and
--trace writes a torch.profiler timeline (CPU and CUDA, with Python stacks) of ten forward + backward steps,
for chrome://tracing or Perfetto: the place to see where a step's host time goes, thread by thread.
--trace-window LEFT traces a sliding window (LEFT, 0) instead of plain causal attention, and --sync-debug runs one
traced step with CUDA's synchronisation warnings on (``torch.cuda.set_sync_debug_mode``), printing each place
where the step makes the host wait for the GPU:

    PYTHONPATH=. python benchmarks/kernels/host_overhead.py --skip-table --trace /tmp/w.json \
        --trace-shape 1,16384,16,128 --trace-window 128 --sync-debug

Without a GPU it times the same calls' host path on CPU tensors, with the Hopper GPU's routing and every kernel
launch stubbed out (``stub_gpu_host_path``: what is left is validation, the custom ops, autograd, allocations,
plan lookups and each plan's arguments), so that a change to that path can be measured on any machine.
"""

import argparse
import cProfile
import os
import pstats
import sys
import time
import warnings

import torch

GPU = torch.cuda.is_available()
if not GPU and "triton" not in sys.modules:
    # the GPU's host path, not the interpreter's: the Gluon kernels are defined only with the interpreter off, and
    # Triton reads the switch as it is imported (a process that imported it already, as host_decode.py's does for
    # this module's timer, keeps its own)
    os.environ["TRITON_INTERPRET"] = "0"

import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashdoc  # noqa: E402
from flashdoc.kernels.backward import attn_bwd, bwd_configs_for  # noqa: E402
from flashdoc.kernels.forward import attn_fwd, fwd_configs_for  # noqa: E402

CALLS = 2000


def synchronisations(fn) -> list:
    """The warnings of CUDA's synchronisation debug mode for one call of fn: each place it made the host wait."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # torch's own note that the debug mode is a prototype also says "synchronization": count only its warnings
    # about an operation
    return [w for w in caught if "called a synchronizing CUDA operation" in str(w.message)]


def print_synchronisations(what: str, fn) -> None:
    syncs = synchronisations(fn)
    print(f"synchronisations in {what}: {len(syncs)}")
    for w in syncs:
        print(f"  {w.filename}:{w.lineno}: {w.message}")


class _NoLauncher:
    """What a plan's first launch hands back when nothing is launched: a launcher that launches nothing (and no C
    launcher, so each call goes through ``Plan.arguments`` as on a Triton without one)."""

    c_launcher = None

    def __init__(self, name, on_launch):
        self.name, self.on_launch = name, on_launch

    def __call__(self, grid, args, device):
        if self.on_launch is not None:
            self.on_launch(self.name, "plan")


def stub_gpu_host_path(patch=setattr, on_launch=None) -> None:
    """CPU only, in a process that imported flashdoc with TRITON_INTERPRET=0: route calls on CPU tensors as on an
    H200 (the Gluon kernels for fp16 and bf16, 132 SMs, 60 MiB of L2) and run their host path, launching nothing.

    patch: how each attribute is replaced (``setattr``, or a test's ``monkeypatch.setattr``). on_launch(kernel
    name, path): called for every launch a GPU would make, path "first" for a plan's first, "plan" after."""
    from flashdoc import _validation
    from flashdoc.kernels import INTERPRET, backward_hopper, forward_hopper, launch

    if INTERPRET:
        raise RuntimeError(
            "stub_gpu_host_path needs flashdoc imported with TRITON_INTERPRET=0 (the interpreter defines no Gluon "
            "kernels): import this module before triton, or run it as a script"
        )

    def name_of(kernel):
        return getattr(getattr(kernel, "fn", kernel), "__name__", str(kernel))

    def first_launch(name):
        if on_launch is not None:
            on_launch(name, "first")
        return _NoLauncher(name, on_launch)

    def hopper_dtype(q):
        return q.dtype in (torch.float16, torch.bfloat16)

    patch(_validation, "INTERPRET", True)  # its device check: CPU tensors are this run's "GPU" tensors
    patch(_validation, "host_readable", lambda *tensors: False)  # a GPU's device values are not read on the host
    patch(torch.cuda, "current_device", lambda: 0)
    patch(launch, "_bind_primary_context", lambda index: None)
    patch(launch, "launch", lambda kernel, tuned, grid, args, meta, config, default: first_launch(name_of(kernel)))
    patch(launch, "launch_gluon", lambda kernel, grid, args, constexprs, num_warps: first_launch(name_of(kernel)))
    patch(forward_hopper, "gluon_runs", hopper_dtype)
    patch(backward_hopper, "gluon_runs", hopper_dtype)
    patch(forward_hopper, "_sm_count", lambda index: 132)
    patch(forward_hopper, "_l2_bytes", lambda index: 60 << 20)
    launch.forget_plans()


class _FloorFunction(torch.autograd.Function):
    """An autograd.Function with flashdoc's inputs and outputs that allocates what its forward and backward
    allocate (out and LSE; dQ, dK, dV and the backward's delta) and launches nothing: the floor of a host path
    in Python around these ops."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device, dtype=torch.float32)
        return torch.empty_like(q), lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v = ctx.saved_tensors
        torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device, dtype=torch.float32)  # delta
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def per_call_us(fn, calls=CALLS, rounds=3):
    """fn's time per call back to back, in us: the best of ``rounds`` runs of ``calls`` calls, each run ended by
    one synchronisation (none on a machine without CUDA, where the host path is timed alone)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(50):
        fn()
    sync()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--calls", type=int, default=CALLS, help="calls per timed run (default %(default)s)")
    ap.add_argument("--trace", metavar="JSON", help="write a torch.profiler timeline of ten forward + backward steps")
    ap.add_argument(
        "--trace-shape",
        default="1,128,2,64",
        metavar="B,N,H,D",
        help="the traced steps' shape (default: the tiny one timed above); e.g. 8,2048,16,128 for a "
        "benchmark row whose GPU work is comparable to the host work",
    )
    ap.add_argument("--trace-window", type=int, metavar="LEFT", help="trace a sliding window (LEFT, 0), causal")
    ap.add_argument("--sync-debug", action="store_true", help="with --trace: list the traced step's synchronisations")
    ap.add_argument("--skip-table", action="store_true", help="only the trace")
    args = ap.parse_args()
    if not GPU:
        if args.trace or args.sync_debug:
            ap.error("--trace and --sync-debug need a CUDA GPU")
        stub_gpu_host_path()
    device = "cuda" if GPU else "cpu"
    print(f"host time per call on {torch.cuda.get_device_name() if GPU else 'CPU, kernel launches stubbed out'}")
    q, k, v = (torch.randn(1, 128, 2, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = torch.empty_like(q), torch.empty(1, 2, 128, device=device, dtype=torch.float32)
    config = fwd_configs_for(64, torch.bfloat16)[0]
    bwd_config = bwd_configs_for(64, torch.bfloat16)[0]
    dout, dq, dk, dv = (torch.randn_like(q) for _ in range(4))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    def fwd_bwd():
        flashdoc.flash_attn_func(qg, kg, vg, causal=True).sum().backward()

    def floor_fwd_bwd():
        _FloorFunction.apply(qg, kg, vg)[0].sum().backward()

    def sdpa_fwd_bwd():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(
                qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=True
            ).sum().backward()

    rows = {
        "flash_attn_func forward": lambda: flashdoc.flash_attn_func(q, k, v, causal=True),
        "op flashdoc::fwd (no validation, no autograd)": lambda: torch.ops.flashdoc.fwd(q, k, v, 0.125, True, True),
        "attn_fwd (the Hopper kernel where it runs)": lambda: attn_fwd(q, k, v, out, lse, 0.125, True, True),
        "attn_fwd with a fixed config (the portable kernel)": lambda: attn_fwd(
            q, k, v, out, lse, 0.125, True, True, config=config
        ),
        "SDPA-flash forward": sdpa,
        "flash_attn_func forward + backward": fwd_bwd,
        "op flashdoc::bwd": lambda: torch.ops.flashdoc.bwd(dout, q, k, v, out, lse, None, 0.125, True, True, True),
        "attn_bwd (3 launches)": lambda: attn_bwd(dout, q, k, v, out, lse, None, dq, dk, dv, 0.125, True, True),
        "attn_bwd with fixed configs (the portable kernels, 3 launches)": lambda: attn_bwd(
            dout, q, k, v, out, lse, None, dq, dk, dv, 0.125, True, True, config=bwd_config
        ),
        "SDPA-flash forward + backward": sdpa_fwd_bwd,
        "autograd.Function that only allocates, forward + backward (a Python path's floor)": floor_fwd_bwd,
        "empty op (torch.empty_like)": lambda: torch.empty_like(q),
    }
    if not GPU:
        rows = {name: fn for name, fn in rows.items() if not name.startswith("SDPA")}
    if not args.skip_table:
        for name, fn in rows.items():
            print(f"{per_call_us(fn, args.calls):8.1f} us  {name}", flush=True)
        if GPU:
            # The autograd engine runs a CUDA backward on its own worker thread; the same step with it on this one:
            torch.autograd.set_multithreading_enabled(False)
            for name, fn in (("flash_attn_func", fwd_bwd), ("SDPA-flash", sdpa_fwd_bwd)):
                us = per_call_us(fn, args.calls)
                print(f"{us:8.1f} us  {name} forward + backward, backward on the calling thread")
            torch.autograd.set_multithreading_enabled(True)
    if args.profile:
        # cProfile sees only the calling thread: the backward runs on it here, not on autograd's worker
        torch.autograd.set_multithreading_enabled(False)
        for name in ("flash_attn_func forward", "flash_attn_func forward + backward"):
            prof = cProfile.Profile()
            prof.enable()
            per_call_us(rows[name], calls=min(500, args.calls))
            prof.disable()
            print(f"\n== cProfile: {name}")
            pstats.Stats(prof).sort_stats("cumtime").print_stats(30)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        torch.autograd.set_multithreading_enabled(True)
    if args.trace:
        from torch.profiler import ProfilerActivity, profile

        b, n, h, d = (int(x) for x in args.trace_shape.split(","))
        tq, tk, tv = (
            torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
        )
        tdout = torch.randn_like(tq)
        window = (args.trace_window, 0) if args.trace_window is not None else (-1, -1)

        def step():  # as the benchmark's forward + backward row
            flashdoc.flash_attn_func(tq, tk, tv, causal=True, window_size=window).backward(tdout)
            tq.grad = tk.grad = tv.grad = None

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        if args.sync_debug:
            # the backward on this thread, so that its warnings are caught here too
            with torch.autograd.set_multithreading_enabled(False):
                print_synchronisations("one step", step)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(args.trace)
        # Host-bound check: do_bench's time for the step (as the benchmark times it) against the GPU's kernel time
        # the kernels' own events: an operator's row also carries the time of the kernels it launched
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernel_us = sum(e.device_time_total for e in kernels) / 10
        bench_ms = triton.testing.do_bench(step, warmup=25, rep=200)
        print(
            f"trace shape {args.trace_shape}: do_bench {bench_ms * 1e3:.0f} us per step, GPU kernels "
            f"{kernel_us:.0f} us per step, back to back without flushes "
            f"{per_call_us(step, calls=50):.0f} us per step"
        )
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))


if __name__ == "__main__":
    main()
