"""A/B of the Hopper forward's softcap with a fixed row max (``mask.bounded_exponent``) against a running one.

    PYTHONPATH=. python3 benchmarks/kernels/softcap_bound.py [--rounds 5] [--head-dims 64 128 256]

On one Hopper GPU, in one process: for each head dim and mask, the forward without softcap, with softcap 50 and
a running max, and with the fixed one (the same tree: a launch plan made for each with the bound's decision
forced), bf16, 16k tokens a call, 2,048 hidden. The two softcap kernels' outputs and LSEs are compared (they
differ by bf16's rounding of P) before the timing. Prints TFLOP/s of the
pairs inside the mask and the softcap kernels' ratio to the call without it (the variants benchmark's target).
"""

import argparse

import torch

from benchmarks.timing import rotated_median_ms
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.launch import distinct, on_device

SOFTCAP = 50.0


def forward(q, k, v, causal, softcap, bounded):
    """(a thunk launching the Hopper forward's plan made with the fixed-max decision forced on or off, its
    output, its LSE)."""
    out, lse = torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device)
    counter = torch.zeros(1, device=q.device, dtype=torch.int32)
    objects = (q, k, v, out, lse, counter)
    real = fh.bounded
    fh.bounded = lambda head_dim, softcap, dtype: bounded
    try:
        with on_device(q.device):
            plan = fh._plan(distinct(objects), q.shape[-1] ** -0.5, causal, True, None, (-1, -1), softcap)
    finally:
        fh.bounded = real

    def call():
        counter.zero_()  # the next work item to claim (``attn_fwd_hopper`` allocates a zeroed one a call)
        with on_device(q.device):
            plan(objects)

    return call, out, lse


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--length", type=int, default=16384)
    args = parser.parse_args()
    torch.manual_seed(0)
    n = args.length
    for d in args.head_dims:
        b, h = 16384 // n, 2048 // d
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        q_capped = q * (SOFTCAP / 4)  # scores the cap bends, as the tests scale them
        for causal in (False, True):
            runs = {
                "none": forward(q, k, v, causal, 0.0, False),
                "running max": forward(q_capped, k, v, causal, SOFTCAP, False),
                "fixed max": forward(q_capped, k, v, causal, SOFTCAP, True),
            }
            for fn, _, _ in runs.values():
                fn()
            torch.cuda.synchronize()
            (_, out_r, lse_r), (_, out_f, lse_f) = runs["running max"], runs["fixed max"]
            out_err = (out_f.float() - out_r.float()).abs().max().item()
            lse_err = (lse_f - lse_r).abs().max().item()
            pairs = b * h * (n * (n + 1) // 2 if causal else n * n)
            ms = rotated_median_ms({name: fn for name, (fn, _, _) in runs.items()}, rounds=args.rounds)
            tf = {name: 4 * d * pairs / (t * 1e-3) / 1e12 for name, t in ms.items()}
            print(
                f"d={d:3d} {'causal' if causal else 'full  '}  "
                + "  ".join(f"{name} {x:5.0f}" for name, x in tf.items())
                + f"  | softcap / none: running {tf['running max'] / tf['none']:.3f}x,"
                f" fixed {tf['fixed max'] / tf['none']:.3f}x"
                + f"  | max |out diff| {out_err:.2e}, |lse diff| {lse_err:.2e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
