"""Short sequences, causal forward: the public API (autotuned) against each forward candidate and SDPA-flash.

    PYTHONPATH=. python perf/small_n.py

Checks whether a slow N = 512 causal row in a benchmark run is the kernel (every candidate slow), the
autotuner's pick (one candidate slow), or the machine (repeats disagree). bf16, 16k tokens, heads = 2048 / d.
"""

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashdoc
from flashdoc.kernels.forward import attn_fwd, fwd_configs_for


def ms(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, quantiles=[0.2, 0.5, 0.8])


for d in (128, 256):
    for n in (512, 1024):
        b, h = 16384 // n, 2048 // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * b * h * n * n * d / 2
        rows = {"api": lambda: flashdoc.scaled_dot_product_attention(q, k, v, is_causal=True)}

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        rows["sdpa-flash"] = flash
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        out, lse = torch.empty_like(qt), torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        for cfg in fwd_configs_for(d, torch.bfloat16):
            rows[str(cfg)] = (lambda cfg=cfg: attn_fwd(qt, kt, vt, out, lse, d ** -0.5, True, False, config=cfg))
        for name, fn in rows.items():
            fn()
            for rep in range(2):
                p20, p50, p80 = ms(fn)
                print(f"d={d} N={n} {name:<60} rep{rep} {flops / p50 * 1e-9:6.0f} TFLOP/s  "
                      f"ms {p20:.3f}/{p50:.3f}/{p80:.3f}", flush=True)
