"""A/B: the fused backward (``backward_hopper``'s dK/dV kernel also adding dQ with TMA reduce-adds, 5 products per
tile pair) against the split kernels (dK/dV and dQ, 7 products, deterministic), at head dim 64, where the fused
kernel runs (benchmarks/FINDINGS.md says why). The fused variant runs at every length here: the script
lifts the causal calls' minimum length (``backward_hopper.FUSED_DQ_MIN_SEQLEN``), which this A/B measured.

    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python benchmarks/kernels/code_hash.py   # sm_90 compile, no GPU
    PYTHONPATH=. python3 benchmarks/kernels/fused_dq.py --check --bench --causal       # on an H200, ~2 min

--check: every variant against a float64 reference (bf16 and fp16, GQA, ragged, both masks; the other head dims
take the split kernels), and whether the split path is bit-identical run to run. --bench:
backward TFLOP/s (2.5x the forward's FLOPs), bf16, 16k tokens, rotated order, median of 3.
"""

import argparse

import torch

from flashdoc.kernels import backward as bw
from flashdoc.kernels import backward_hopper as bh

# name: deterministic (True: the split kernels)
VARIANTS = {"split": True, "fused": False}


def run_variant(name, q, k, v, dout, out, lse, causal, grads=None):
    deterministic = VARIANTS[name]
    dq, dk, dv = grads if grads is not None else (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
    bw.attn_bwd(
        dout, q, k, v, out, lse, None, dq, dk, dv, q.shape[3] ** -0.5, causal, True, deterministic=deterministic
    )
    return dq, dk, dv


def forward(q, k, v, causal):
    from flashdoc.kernels.forward import attn_fwd

    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)
    attn_fwd(q, k, v, out, lse, q.shape[3] ** -0.5, causal, True)
    return out, lse


def reference_grads(q, k, v, dout, causal):
    qf, kf, vf = (x.double().requires_grad_() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kr, vr = (x.repeat_interleave(group, dim=2) for x in (kf, vf))
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kr) * q.shape[3] ** -0.5
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        keep = torch.arange(sk, device=q.device)[None, :] <= torch.arange(sq, device=q.device)[:, None] + sk - sq
        s = s.masked_fill(~keep, float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1).nan_to_num(0.0), vr)
    return torch.autograd.grad(o, (qf, kf, vf), dout.double())


def check():
    torch.manual_seed(0)
    worst = {}
    for dtype in (torch.bfloat16, torch.float16):
        for b, sq, sk, h, hk, d in [
            (2, 1024, 1024, 4, 4, 64),
            (1, 1000, 1000, 3, 3, 64),
            (2, 333, 777, 4, 2, 64),
            (1, 777, 333, 2, 1, 64),
            (1, 64, 4000, 2, 2, 64),
            (2, 2048, 2048, 8, 2, 32),
        ]:
            for causal in (False, True):
                q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
                k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=dtype) for _ in range(2))
                dout = torch.randn_like(q)
                out, lse = forward(q, k, v, causal)
                ref = reference_grads(q, k, v, dout, causal)
                split = run_variant("split", q, k, v, dout, out, lse, causal)
                again = run_variant("split", q, k, v, dout, out, lse, causal)
                for variant in [name for name in VARIANTS if name != "split"]:
                    fused = run_variant(variant, q, k, v, dout, out, lse, causal)
                    for name, s_, f_, a_, r_ in zip(("dq", "dk", "dv"), split, fused, again, ref):
                        es, ef = ((x.double() - r_).abs().max().item() for x in (s_, f_))
                        worst[variant, name] = max(worst.get((variant, name), 0.0), ef / max(es, 1e-6))
                        if ef > 2 * es + 1e-3 or not torch.equal(s_, a_):
                            print(
                                f"MISMATCH {variant} {dtype} {(b, sq, sk, h, hk, d)} causal={causal} {name}: "
                                f"split {es:.3g} fused {ef:.3g} split repeatable {torch.equal(s_, a_)}",
                                flush=True,
                            )
    print(
        "check done: worst fused/split error vs float64 "
        + ", ".join(f"{v} {n} {x:.2f}" for (v, n), x in worst.items()),
        flush=True,
    )


def bench(lengths, causals):
    from triton.testing import do_bench

    d = 64
    for causal in causals:
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
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    times[name].append(
                        do_bench(lambda: run_variant(name, q, k, v, dout, out, lse, causal, grads), warmup=25, rep=100)
                    )
            flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
            tf = {name: flops / (sorted(t)[1] * 1e-3) / 1e12 for name, t in times.items()}
            print(
                f"d={d} causal={int(causal)} N={n}: bwd TFLOP/s split {tf['split']:.0f}  "
                + "  ".join(f"{name} {tf[name]:.0f} ({tf[name] / tf['split']:.2f}x)" for name in names[1:]),
                flush=True,
            )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--causal", action="store_true", help="also time causal calls")
    a = ap.parse_args()
    bh.FUSED_DQ_MIN_SEQLEN = {}
    if a.check:
        check()
    if a.bench:
        bench(a.lengths, (False, True) if a.causal else (False,))
