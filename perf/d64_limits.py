"""Two diagnostics for the d = 64 rows that stay under 1.5x SDPA-flash (perf/NOTES.md, session 20), on the H200:

--waves: the fused backward without the mask at 16k tokens runs (N / 128) x (batch * heads) = 4096 programs,
one per SM at a time: 31.03 waves of 132, so the 32nd wave keeps 4 SMs busy while 128 wait. Timed at 32 heads
(4096 programs) and 33 (4224, exactly 32 waves), TFLOP/s per head count: if the last wave costs what the
model says, 33 heads run ~3% faster per FLOP.

--dtypes: the same kernels in fp16 read 1-3% slower than in bf16 (benchmark v21). Timed on three inputs: bf16,
fp16, and fp16 holding the bf16 inputs' values (exactly representable, so their low mantissa bits are zeros). If
the fp16 gap is the tensor cores' power draw on busier mantissa bits, the third reads as bf16 does.

Both print fwd and bwd TFLOP/s, median of three do_bench medians, and the SM clock nvidia-smi reports after each.

    PYTHONPATH=. python3 perf/d64_limits.py --waves --dtypes    # ~1 min
"""

import argparse
import subprocess

import torch
from triton.testing import do_bench

from flashdoc.kernels import backward as bw
from flashdoc.kernels.forward import attn_fwd


def clock():
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True,
                         text=True)
    return out.stdout.strip() or "?"


def timed(q, k, v, dout, causal):
    """(fwd ms, bwd ms) for flashdoc's kernels with flash_attn_func's defaults (the fused backward)."""
    scale = q.shape[3] ** -0.5
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)
    grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))

    def fwd():
        attn_fwd(q, k, v, out, lse, scale, causal, True)

    def bwd():
        bw.attn_bwd(dout, q, k, v, out, lse, None, *grads, scale, causal, True, deterministic=False)

    fwd()
    bwd()
    return [sorted(do_bench(f, warmup=25, rep=200) for _ in range(3))[1] for f in (fwd, bwd)]


def report(label, b, h, n, d, causal, ms):
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    print(f"{label}: fwd {flops / ms[0] / 1e9:.0f} bwd {2.5 * flops / ms[1] / 1e9:.0f} TFLOP/s  (SM clock "
          f"{clock()})", flush=True)


def waves(n=16384, d=64):
    for h in (32, 33, 32, 33):  # twice, interleaved
        q, k, v, dout = (torch.randn(1, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        report(f"full N={n} heads={h} programs={n // 128 * h}", 1, h, n, d, False, timed(q, k, v, dout, False))


def dtypes(n=16384, d=64):
    h = 2048 // d
    base = [torch.randn(1, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    inputs = {"bf16": base, "fp16": [torch.randn_like(x, dtype=torch.float16) for x in base],
              "fp16 holding bf16 values": [x.to(torch.float16) for x in base]}
    for _ in range(2):
        for label, tensors in inputs.items():
            report(f"full N={n} {label}", 1, h, n, d, False, timed(*tensors, False))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--waves", action="store_true")
    ap.add_argument("--dtypes", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.waves:
        waves()
    if a.dtypes:
        dtypes()
