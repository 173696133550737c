"""Does compiling FlexAttention in the process slow flashdoc's forward + backward down, and how? (session 14's lead)

A one-configuration benchmark sweep (d = 64, full, bf16) timed flashdoc's 2k row at 3.02 ms with FlexAttention
among the peers, 2.78 ms with cuDNN only and 2.70 ms alone (perf/NOTES.md, session 14); 4k was not affected. The
hypothesis: after the compile, something makes each call wait for the GPU (a device synchronisation, such as the
caching allocator returning memory with cudaFree), so the host no longer runs ahead and the ~350 us host gap
between the forward and the backward shows in every call.

This times the row as the benchmark does (one CPU, do_bench with the L2 flush and grad_to_none), before and after
compiling FlexAttention for a few shapes (forward + backward, as the benchmark's peer runs it), and for each
timing prints the caching allocator's counters that move during it (cudaMalloc/cudaFree calls, retries after an
out-of-memory). Then a profiler timeline of three back-to-back calls shows where the GPU waits.

    PYTHONPATH=. python3 perf/flex_in_process.py      # on the H200, about a minute
"""

import os

import torch
from triton.testing import do_bench

import flashdoc
from flashdoc.bench import _pin_threads
from perf.d64_profile import timeline

COUNTERS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams", "num_ooms")


def timed(label, fn, grads):
    before = torch.cuda.memory_stats()
    p20, ms, p80 = do_bench(fn, warmup=25, rep=200, grad_to_none=grads, quantiles=[0.2, 0.5, 0.8])
    after = torch.cuda.memory_stats()
    moved = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS if after.get(k, 0) != before.get(k, 0)}
    print(f"{label:40s} p20 {p20:.3f}  median {ms:.3f}  p80 {p80:.3f} ms   allocator: {moved or 'no change'}; "
          f"reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB", flush=True)


def compile_flex(seqlen, head_dim=64):
    """FlexAttention compiled and run forward + backward for a new shape, as the benchmark's peer does."""
    from torch.nn.attention.flex_attention import flex_attention

    batch, heads = 16384 // seqlen, 2048 // head_dim
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    torch.compile(flex_attention)(q, k, v).backward(torch.randn_like(q))
    torch.cuda.synchronize()


def main():
    _pin_threads({min(os.sched_getaffinity(0))})
    seqlen, head_dim = 2048, 64
    batch, heads = 16384 // seqlen, 2048 // head_dim
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)

    def step():
        flashdoc.flash_attn_func(q, k, v).backward(dout)

    step()
    timed("nothing else compiled", step, [q, k, v])
    timed("again", step, [q, k, v])
    for n in (1024, 2048, 4096):
        compile_flex(n, head_dim)
        timed(f"after compiling FlexAttention at N={n}", step, [q, k, v])
    torch.cuda.empty_cache()
    timed("after torch.cuda.empty_cache()", step, [q, k, v])
    print("three back-to-back calls:", flush=True)
    timeline(step, calls=3)


if __name__ == "__main__":
    main()
