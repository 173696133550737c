"""Run the fused d = 64 backward once on one shape and say whether it ran (a crash is caught by the caller)."""
import sys

import torch

from flashdoc.kernels import backward as bw
from flashdoc.kernels import backward_hopper as bh
from perf.fused_dq import forward

bh.FUSED_DQ_MIN_SEQLEN = {}
b, sq, sk, h, hk, causal = (int(x) for x in sys.argv[1].split(","))
q = torch.randn(b, sq, h, 64, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(b, sk, hk, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
dout = torch.randn_like(q)
out, lse = forward(q, k, v, bool(causal))
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
bw.attn_bwd(dout, q, k, v, out, lse, None, dq, dk, dv, 0.125, bool(causal), True, deterministic=False)
torch.cuda.synchronize()
print("ok", sys.argv[1], dq.float().abs().max().item(), flush=True)
