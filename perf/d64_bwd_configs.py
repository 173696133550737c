"""The d = 64 full backward's tile pairs, timed as a whole backward (session 14).

perf/pin_host.py timed flashdoc's d = 64 full forward + backward at 2k tokens at 2.66-2.84 ms in a fresh process,
against 3.08-3.16 ms in benchmark v15 (same shape, same do_bench): the autotuner may have picked a slower pair
there. This times every (dK/dV, dQ) pair of the tables' candidates as the backward runs them (both kernels,
dQ on its side stream), then the autotuned backward and the pair it picked.

    PYTHONPATH=. python3 perf/d64_bwd_configs.py     # on the H200: bf16, 16k tokens, 32 heads
"""

import torch
from triton.testing import do_bench

from flashdoc.bench import autotuned_configs
from flashdoc.kernels.backward import DKDV_CONFIGS, DQ_CONFIGS, attn_bwd
from flashdoc.kernels.forward import attn_fwd, configs_for


def label(c):
    return f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']} s{c.num_stages} w{c.num_warps}"


def main():
    for seqlen in (2048, 4096, 8192):
        batch, heads, d = 16384 // seqlen, 32, 64
        q, k, v, dout = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = torch.empty_like(q), torch.empty(batch, heads, seqlen, device="cuda", dtype=torch.float32)
        attn_fwd(q, k, v, out, lse, d ** -0.5, False, False)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        flops = 4 * batch * heads * seqlen * seqlen * d * 2.5

        def backward(config):
            return lambda: attn_bwd(dout, q, k, v, out, lse, None, dq, dk, dv, d ** -0.5, False, False, config)

        cells = []
        for dkdv_cfg in configs_for(DKDV_CONFIGS, d, torch.bfloat16, False):
            for dq_cfg in configs_for(DQ_CONFIGS, d, torch.bfloat16, False):
                ms = do_bench(backward((dkdv_cfg, dq_cfg)), warmup=25, rep=100)
                cells.append((ms, f"{label(dkdv_cfg)} + {label(dq_cfg)}"))
        tuned = do_bench(backward(None), warmup=25, rep=100)
        picks = [f"{p['kernel']} {p['block_m']}x{p['block_n']} s{p['num_stages']} w{p['num_warps']}"
                 for p in autotuned_configs() if p["seq_bucket"] == seqlen and p["head_dim"] == d]
        print(f"N={seqlen}: autotuned {tuned:.3f} ms ({flops / tuned / 1e9:.0f} TFLOP/s; {', '.join(picks)}) | "
              + " | ".join(f"{name} {ms:.3f}" for ms, name in sorted(cells)), flush=True)


if __name__ == "__main__":
    main()
