"""Quick side-by-side timing on the GPU: flashdoc vs SDPA (flash, cuDNN) and FlexAttention.

    python perf/probe.py [--d 128] [--ns 1024,4096,16384] [--flex-ns 4096] [--out probe.json]

16k tokens in total (batch = 16384 / N), heads = 2048 / d, bf16, layout (B, H, N, d) for every peer.
FLOPs = 4 B H N^2 d, halved when causal; forward+backward counts 3.5x the forward. Median of do_bench.
"""

import argparse
import json
import os
import time

os.environ.setdefault("FLASHDOC_AUTOTUNE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashdoc  # noqa: E402


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--ns", default="1024,4096,16384")
    ap.add_argument("--flex-ns", default="4096")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    d, dtype = args.d, getattr(torch, args.dtype)
    flex_ns = {int(n) for n in args.flex_ns.split(",") if n}
    flex = None
    if flex_ns:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
    rows = []
    for causal in (False, True):
        for n in (int(x) for x in args.ns.split(",")):
            b, h = 16384 // n, 2048 // d
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            peers = {
                "flashdoc": lambda: flashdoc.scaled_dot_product_attention(q, k, v, is_causal=causal),
            }

            def sdpa(backend):
                def f():
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                return f
            peers["sdpa-flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
            peers["sdpa-cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
            if flex is not None and n in flex_ns:
                mask = None
                if causal:
                    mask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, n, n, device="cuda")
                peers["flex"] = lambda: flex(q, k, v, block_mask=mask)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            peers["flashdoc"]()
            torch.cuda.synchronize()
            first_fwd = time.perf_counter() - t0
            t0 = time.perf_counter()
            torch.autograd.grad(peers["flashdoc"](), (q, k, v), do)
            torch.cuda.synchronize()
            first_bwd = time.perf_counter() - t0
            row = {"d": d, "n": n, "causal": causal, "first_call_fwd_s": first_fwd, "first_call_fwd_bwd_s": first_bwd}
            for name, f in peers.items():
                try:
                    f()
                    ms_f = bench(f)
                    ms_fb = bench(lambda: torch.autograd.grad(f(), (q, k, v), do))
                    row[name] = {"fwd_tflops": flops / ms_f * 1e-9, "fwdbwd_tflops": 3.5 * flops / ms_fb * 1e-9}
                except Exception as e:  # a backend may refuse a shape
                    row[name] = {"error": repr(e)[:200]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'causal':>6} {'N':>6} {'mode':>7} " + " ".join(f"{p:>11}" for p in ["flashdoc", "sdpa-flash",
                                                                                   "sdpa-cudnn", "flex"]) +
          "   ratio vs flash/cudnn/flex")
    for r in rows:
        for mode in ("fwd", "fwdbwd"):
            vals = [r.get(p, {}).get(f"{mode}_tflops") for p in ["flashdoc", "sdpa-flash", "sdpa-cudnn", "flex"]]
            ratios = [f"{vals[0] / x:.2f}" if x else "-" for x in vals[1:4]]
            print(f"{r['causal']!s:>6} {r['n']:>6} {mode:>7} "
                  + " ".join(f"{x:11.1f}" if x else f"{'-':>11}" for x in vals)
                  + "   " + "/".join(ratios))
    print("first calls (s):", [(r["n"], r["causal"], round(r["first_call_fwd_s"], 1),
                                round(r["first_call_fwd_bwd_s"], 1))
                               for r in rows])
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                       "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
