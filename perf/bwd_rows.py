"""A/B: the split Hopper dK/dV kernels with each streamed tile's LSE and delta rows copied into the ring by the
producer (``backward_hopper.ROWS_IN_RING_HEAD_DIMS``, what the fused d = 64 kernel does since session 23) against
the consumers loading them from global memory every step (the shipped way). Both load the same numbers, so the
gradients must be bit-identical; --check says whether they are, at aligned and ragged lengths, GQA, both masks.

    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 RING_VARIANTS=1 python perf/code_hash.py   # sm_90 spills, no GPU
    PYTHONPATH=. python3 perf/bwd_rows.py --check --bench                                  # on the H200, ~3 min

--bench: backward TFLOP/s (2.5x the forward's FLOPs), deterministic (the split kernels), bf16, 16k tokens,
heads = 2048 / d, rotated order, median of 3.
"""

import argparse

import torch

from flashdoc.kernels import backward as bw
from flashdoc.kernels import backward_hopper as bh
from perf.fused_dq import forward

HEAD_DIMS = (64, 128, 256)  # (d = 64: causal only; the split Hopper kernels do not take it without the mask)
VARIANTS = {"loads": frozenset(), "ring": frozenset(HEAD_DIMS)}


def run_variant(name, q, k, v, dout, out, lse, causal, grads=None):
    bh.ROWS_IN_RING_HEAD_DIMS = VARIANTS[name]
    dq, dk, dv = grads if grads is not None else (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
    bw.attn_bwd(dout, q, k, v, out, lse, None, dq, dk, dv, q.shape[3] ** -0.5, causal, True, deterministic=True)
    return dq, dk, dv


def cases():
    for d in HEAD_DIMS:
        for causal in (False, True):
            if d == 64 and not causal:
                continue
            yield d, causal


def check():
    torch.manual_seed(0)
    bad = 0
    for d, causal in cases():
        for (b, sq, sk, h, hk) in [(2, 1024, 1024, 4, 4), (1, 1000, 1000, 3, 3), (2, 333, 777, 4, 2),
                                   (1, 777, 333, 2, 1), (1, 64, 4000, 2, 2)]:
            q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            dout = torch.randn_like(q)
            out, lse = forward(q, k, v, causal)
            base, ring = (run_variant(name, q, k, v, dout, out, lse, causal) for name in ("loads", "ring"))
            for name, x, y in zip(("dq", "dk", "dv"), base, ring):
                if not torch.equal(x, y):
                    bad += 1
                    print(f"DIFFER d={d} causal={causal} {(b, sq, sk, h, hk)} {name}: "
                          f"max |ring - loads| {(x.float() - y.float()).abs().max().item():.3g}", flush=True)
    print(f"check done: {bad} gradients differ", flush=True)


def bench(lengths):
    from triton.testing import do_bench
    for d, causal in cases():
        for n in lengths:
            b, h = max(1, 16384 // n), 2048 // d
            q, k, v, dout = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            out, lse = forward(q, k, v, causal)
            grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
            names = list(VARIANTS)
            for name in names:  # compile (and autotune the split kernels) first
                run_variant(name, q, k, v, dout, out, lse, causal, grads)
            times = {name: [] for name in names}
            for r in range(3):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    times[name].append(do_bench(lambda: run_variant(name, q, k, v, dout, out, lse, causal, grads),
                                                warmup=25, rep=100))
            flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
            tf = {name: flops / (sorted(t)[1] * 1e-3) / 1e12 for name, t in times.items()}
            print(f"d={d} causal={int(causal)} N={n}: bwd TFLOP/s loads {tf['loads']:.0f}  ring {tf['ring']:.0f} "
                  f"({tf['ring'] / tf['loads']:.2f}x)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    a = ap.parse_args()
    if a.check:
        check()
    if a.bench:
        bench(a.lengths)
