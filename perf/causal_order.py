"""A/B for the order of causal work (session 14): the Gluon kernels' causal tiles in L2-sized sections of heads,
costliest tile first within a section (forward_hopper._causal_item), against one head at a time.

Benchmark v14 had the causal forward at 0.85-0.87x of the full one at 4k tokens, 0.95-1.10x at 16k: a cost per
work item, not per key tile. One candidate is the end of the run. Heads were handed out one after another, each
head's tiles costliest first; the last items handed out were then the last head's, its costliest ones among
them, and a program that takes one of those late finishes after the others have run out of work. With the
costliest tiles of a whole section first, the last items are the lightest ones of the last section.

    PYTHONPATH=. python3 perf/causal_order.py             # on the H200; bf16, 16k tokens, d = 64/128/256
    PYTHONPATH=. python3 perf/causal_order.py --sections 1 4 8 16 0 --forward-only --lengths 2048 4096
                                                          # section sizes (0: heads_per_section's own)

Each row prints TFLOP/s of the causal forward, dK/dV and dQ kernels (the products each does, halved under the
mask), per order: "head" (sections of one head: the forward's previous order), "L2" (the default sections),
"all" (one section); and the forward without the mask, for the causal/full ratio. A checkout without sections
(the code before this change, e.g. `git archive` of it on PYTHONPATH) prints its own order as "before".

Session 14 ran it with the sections in the two backward kernels as well (a one-axis causal grid mapped by
_causal_item); they lost at d <= 128 and were not kept (perf/NOTES.md), so the dK/dV and dQ columns now run
their own order in every variant.
"""

import argparse

import torch
from triton.testing import do_bench

from flashdoc.kernels import backward_hopper as bh
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.backward import bwd_preprocess
from flashdoc.kernels.launch import on_device

SECTIONED = hasattr(fh, "heads_per_section")
DEFAULT = getattr(fh, "heads_per_section", None)


def orders(n_pairs, sections):
    """{name: heads per section or None (the default)}; the code before this change has one order."""
    if not SECTIONED:
        return {"before": None}
    if sections:
        return {("L2" if n == 0 else f"s{n}"): (n or None) for n in sections}
    return {"head": 1, "L2": None, "all": n_pairs}


def use_order(section):
    """Make every launch use `section` heads per section (None: heads_per_section's own choice)."""
    fh.heads_per_section = DEFAULT if section is None else (lambda k, n_pairs: min(section, n_pairs))


def backward_kernels(q, k, v, dout, out, lse, dq, dk, dv, scale):
    """The causal Hopper dK/dV and dQ launches on these tensors (out, lse: the causal forward's), as two
    argument-free callables that write dk/dv and dq."""
    with on_device(q.device):
        delta, lse2 = bwd_preprocess(dout, out, lse, None)

    def dkdv():
        with on_device(q.device):
            bh.bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, scale, True, False)

    def dq_():
        with on_device(q.device):
            bh.bwd_dq_hopper(q, k, v, dout, dq, lse2, delta, scale, True, False)

    return dkdv, dq_


def tflops(fn, flops):
    """Median of three do_bench medians, TFLOP/s."""
    fn()
    times = sorted(do_bench(fn, warmup=25, rep=100) for _ in range(3))
    return flops / (times[1] * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", type=int, nargs="+", help="heads per section to time (0: the default rule) "
                    "instead of head / L2 / all")
    ap.add_argument("--forward-only", action="store_true", help="skip the dK/dV and dQ kernels")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"sections: {SECTIONED}; L2 {torch.cuda.get_device_properties(0).L2_cache_size / 2**20:.0f} MiB",
          flush=True)
    for d in args.head_dims:
        for n in args.lengths:
            b, h = 16384 // n, 2048 // d
            q, k, v, dout = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            out, lse = torch.empty_like(q), torch.empty(b, h, n, device="cuda", dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            scale = d ** -0.5
            one = 2 * b * h * n * n * d  # one product without the mask

            def fwd(causal):
                with on_device(q.device):
                    fh.attn_fwd_hopper(q, k, v, out, lse, scale, causal, False)

            fwd(True)
            dkdv, dq_ = backward_kernels(q, k, v, dout, out, lse, dq, dk, dv, scale)

            full = tflops(lambda: fwd(False), 2 * one)
            cells = []
            for name, section in orders(b * h, args.sections).items():
                use_order(section)
                f = tflops(lambda: fwd(True), one)
                cells.append(f"{name}: fwd {f:.0f} ({f / full:.2f} of full)" + ("" if args.forward_only else
                             f" dkdv {tflops(dkdv, 2 * one):.0f} dq {tflops(dq_, 1.5 * one):.0f}"))
            use_order(None)
            chosen = f" (L2 = s{DEFAULT(k, b * h)})" if SECTIONED else ""
            print(f"d={d} N={n}{chosen} full fwd {full:.0f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
