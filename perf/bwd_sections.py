"""A/B for the causal backward at d = 256 in L2 sections (branch wip/d256-bwd-sections, session 15).

Session 14 tried the forward's causal order (sections of heads whose K/V fit in L2, costliest tiles first) in both
backward kernels and dropped it: at d <= 128 it lost (dK/dV -9 to -12%, dQ -2 to -5%), but at d = 256 the wide
dK/dV kernel gained ~10% at 8-16k and dQ 3-8% (perf/NOTES.md). This branch turns it on for d = 256 only
(backward_hopper.SECTIONED_HEAD_DIMS, backward_hopper._grid). This checks that the order changes no bit of dK, dV,
dQ, and times both kernels per order: "own" (the kernels' two-axis grid, as on main), "L2" (heads_per_section's
sections, as shipped here), and fixed section sizes; bf16, 16k tokens, causal, TFLOP/s of the products each kernel
does (halved under the mask), median of three do_bench medians.

    PYTHONPATH=. python3 perf/bwd_sections.py [--head-dims 256 128] [--sections 1 2 4]    # on the H200, ~1 min
"""

import argparse

import torch

from flashdoc.kernels import backward_hopper as bh
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.launch import on_device
from perf.causal_order import backward_kernels, tflops

DEFAULT_RULE = fh.heads_per_section
SHIPPED = bh.SECTIONED_HEAD_DIMS


def use(order, d):
    """order: "own" (no sections), "L2" (the default rule) or a fixed number of heads per section."""
    bh.SECTIONED_HEAD_DIMS = SHIPPED - {d} if order == "own" else SHIPPED | {d}
    fh.heads_per_section = DEFAULT_RULE if order in ("own", "L2") else (lambda k, n_pairs: min(order, n_pairs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", type=int, nargs="+", default=[256])
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--sections", type=int, nargs="*", default=[1, 4])
    args = ap.parse_args()
    torch.manual_seed(0)
    for d in args.head_dims:
        for n in args.lengths:
            b, h = 16384 // n, 2048 // d
            q, k, v, dout = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            out, lse = torch.empty_like(q), torch.empty(b, h, n, device="cuda", dtype=torch.float32)
            scale = d ** -0.5
            with on_device(q.device):
                fh.attn_fwd_hopper(q, k, v, out, lse, scale, True, False)
            one = b * h * n * n * d  # one product under the causal mask (half of 2 B H N^2 d)
            grads = {}
            cells = []
            for order in ["own", "L2", *args.sections]:
                use(order, d)
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                dkdv, dq_ = backward_kernels(q, k, v, dout, out, lse, dq, dk, dv, scale)
                dkdv()
                dq_()
                grads[order] = (dq.clone(), dk.clone(), dv.clone())
                cells.append(f"{order}: dkdv {tflops(dkdv, 4 * one):.0f} dq {tflops(dq_, 3 * one):.0f}")
            use("own", d)
            bh.SECTIONED_HEAD_DIMS = SHIPPED
            same = all(torch.equal(a, b_) for g in grads.values() for a, b_ in zip(g, grads["own"]))
            print(f"d={d} N={n} (L2 rule: {DEFAULT_RULE(k, b * h)} heads) {'same bits' if same else 'MISMATCH'} | "
                  + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
