"""Host time per call: how long the Python side of a call takes, with flashdoc's launch
cache off and on, next to PyTorch's FlashAttention-2 backend, on a problem so small that
the GPU's share does not count."""
# flashdoc: gpu-only

import os
import time

# Pin this process, and every thread it starts from now on (autograd's worker among
# them), to one CPU. On a virtual machine, Python's host time otherwise moves a lot with
# where the scheduler puts each thread, and the numbers below would not repeat from run
# to run.
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashdoc
from flashdoc.kernels import launch

cuda = torch.cuda.is_available()
device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
# on the CPU (Triton's interpreter) this is a smoke run: the numbers mean nothing
calls = 1000 if cuda else 2


def host_us(fn):
    """Microseconds per call of fn(), called back to back with one synchronisation per
    batch: the GPU finishes a tiny call faster than the host issues the next, so this is
    the host's time. Best of three batches."""
    for _ in range(min(calls, 50)):
        fn()
    best = float("inf")
    for _ in range(3):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


# --8<-- [start:calls]
# one sequence of 128 tokens, 2 heads of 64: microseconds of GPU work per call
q, k, v = (
    torch.randn(1, 128, 2, 64, device=device, dtype=dtype, requires_grad=True)
    for _ in range(3)
)


def flashdoc_forward():
    with torch.no_grad():
        flashdoc.flash_attn_func(q, k, v, causal=True)


def flashdoc_step():  # forward + backward, as in training
    flashdoc.flash_attn_func(q, k, v, causal=True).sum().backward()


def sdpa(backward):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.set_grad_enabled(backward):
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        if backward:
            out.sum().backward()


def on_calling_thread(fn):
    """fn with autograd running the backward on the calling thread (for CUDA tensors it
    runs on a worker thread of its own otherwise), to see what that hand-over costs."""

    def wrapped():
        with torch.autograd.set_multithreading_enabled(False):
            fn()

    return wrapped


rows = [
    (
        "| call | flashdoc, launch cache off | flashdoc, launch cache on "
        "| SDPA, FlashAttention-2 backend |"
    ),
    "|---|---|---|---|",
]
cases = [
    ("forward", flashdoc_forward, lambda: sdpa(backward=False)),
    ("forward + backward", flashdoc_step, lambda: sdpa(backward=True)),
    (
        "forward + backward, backward on the calling thread",
        on_calling_thread(flashdoc_step),
        on_calling_thread(lambda: sdpa(backward=True)),
    ),
]
for name, fn, peer_fn in cases:
    # what FLASHDOC_LAUNCH_CACHE=0 sets at import: Triton's launch path every time
    launch.LAUNCH_CACHE = False
    off = host_us(fn)
    launch.LAUNCH_CACHE = True
    on = host_us(fn)
    peer = f"{host_us(peer_fn):.0f} µs" if cuda else "— (needs a GPU)"
    rows.append(f"| {name} | {off:.0f} µs | {on:.0f} µs | {peer} |")
# --8<-- [end:calls]
print("\n".join(rows))
with open("host_time.md", "w") as f:
    f.write("\n".join(rows) + "\n")
