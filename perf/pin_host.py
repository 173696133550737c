"""Does pinning the benchmark to one CPU keep the host from running ahead of the GPU? (session 14)

The d = 64 full forward + backward at 2k tokens took 3.0-3.2 ms per call in the benchmark (do_bench, every
thread of the process on one CPU) while its kernels add up to 2.6 ms (perf/d64_profile.py); a one-call
timeline showed the GPU waiting ~350 us for the host between the forward and the backward. With calls back to
back, the host should run ahead and hide that, unless it is slower per call than the GPU. This times the call
with do_bench as the benchmark does, first with the process on every CPU, then pinned to one, beside cuDNN's.

    PYTHONPATH=. python3 perf/pin_host.py      # on the H200
"""

import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import flashdoc
from flashdoc.bench import _pin_threads


def main():
    every = os.sched_getaffinity(0)
    for seqlen in (1024, 2048, 4096):
        batch, heads, d = 16384 // seqlen, 32, 64
        q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn_like(q)
        qt, kt, vt = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
        doutt = dout.transpose(1, 2).contiguous()

        def flash():
            flashdoc.flash_attn_func(q, k, v).backward(dout)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt).backward(doutt)

        for pinned in (False, True, False):
            _pin_threads({min(every)} if pinned else every)
            cells = []
            for name, fn, grads in (("flashdoc", flash, [q, k, v]), ("cudnn", cudnn, [qt, kt, vt])):
                p20, ms, p80 = do_bench(fn, warmup=25, rep=200, grad_to_none=grads, quantiles=[0.2, 0.5, 0.8])
                cells.append(f"{name} {p20:.3f} / {ms:.3f} / {p80:.3f}")
            print(f"N={seqlen} {'pinned to one CPU' if pinned else 'every CPU       '}: " + " | ".join(cells),
                  flush=True)
    _pin_threads(every)


if __name__ == "__main__":
    main()
