"""Does Python's garbage collector make the benchmark's short rows noisy? (session 13's lead, not yet run)

In benchmark v14 the slow flashdoc (and FlexAttention) rows came in stretches of a few seconds, each right after
a configuration's compile pause, while SDPA's rows stayed tight (perf/NOTES.md, session 13). A compile leaves
millions of new Python objects; the launches that follow allocate a few each, and every so often one of those
allocations triggers a collection of the oldest generation, which walks all of them. The host-bound rows would
then see stalls that the GPU-bound ones hide. timeit switches the collector off while it times for this reason.

This times flashdoc's forward on a host-bound row (bf16, d = 256, causal, 1k tokens: v14's worst twin pair) in
one process pinned to one CPU, as the benchmark times it: first with nothing compiled since start-up, then right
after FlexAttention is compiled for a new shape, then after ``gc.freeze()`` moves every object alive into the
permanent generation, which the collector no longer walks. For each it prints the timing quantiles and the
collections of each generation that ran during the timing, with their total time.

    PYTHONPATH=. python3 perf/gc_noise.py     # on the H200

If the slow timings line up with generation-2 collections and vanish after the freeze: freeze (or switch off)
the collector around each row's timing in ``bench.measure_speed``, and record the benchmark again.
"""

import gc
import os
import time

import torch
from triton.testing import do_bench

import flashdoc
from flashdoc.bench import _pin_threads

BATCH, SEQLEN, HEADS, HEAD_DIM = 16, 1024, 8, 256


class Collections:
    """The collector's runs while active: count and seconds per generation (gc.callbacks)."""

    def __init__(self):
        self.count, self.seconds, self._start = [0, 0, 0], [0.0, 0.0, 0.0], None

    def __call__(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._start

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)


def timed(label, fn, repeats=3):
    for _ in range(repeats):
        with Collections() as c:
            p20, ms, p80 = do_bench(fn, warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])
        gcs = ", ".join(f"gen{g} {n} ({s * 1e3:.1f} ms)" for g, (n, s) in enumerate(zip(c.count, c.seconds)))
        print(f"{label:34s} p20 {p20:.3f}  median {ms:.3f}  p80 {p80:.3f} ms   collections: {gcs}", flush=True)


def compile_flex(seqlen):
    """FlexAttention compiled for a new shape, as the benchmark does at the start of a configuration."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q = torch.randn(BATCH, HEADS, seqlen, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, seqlen, seqlen)
    torch.compile(flex_attention)(q, q, q, block_mask=mask)
    torch.cuda.synchronize()


def main():
    _pin_threads({min(os.sched_getaffinity(0))})
    q, k, v = (torch.randn(BATCH, SEQLEN, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    forward = lambda: flashdoc.flash_attn_func(q, k, v, causal=True)  # noqa: E731
    forward()
    print(f"objects tracked by the collector: {len(gc.get_objects()):,}", flush=True)
    timed("nothing compiled since start-up", forward)
    for seqlen in (2048, 4096):
        compile_flex(seqlen)
        print(f"objects tracked after compiling FlexAttention at N={seqlen}: {len(gc.get_objects()):,}", flush=True)
        timed("right after the compile", forward)
    gc.freeze()
    timed("after gc.freeze()", forward)
    compile_flex(8192)
    gc.freeze()
    timed("after another compile and a freeze", forward)


if __name__ == "__main__":
    main()
