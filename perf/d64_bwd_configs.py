"""The d = 64 full backward's tile pairs, timed as a whole backward (session 14).

perf/pin_host.py timed flashdoc's d = 64 full forward + backward at 2k tokens at 2.66-2.84 ms in a fresh process,
against 3.08-3.16 ms in benchmark v15 (same shape, same do_bench): the autotuner may have picked a slower pair
there. This times every (dK/dV, dQ) pair of the tables' candidates as the backward runs them (both kernels,
dQ on its side stream), then the autotuned backward and the pair it picked. --extra adds dK/dV candidates that
the table lacks (session 16: 8-warp, 64-row tiles compile without spills where the table's 4-warp ones spill).

    PYTHONPATH=. python3 perf/d64_bwd_configs.py [--extra 64,128,2,8 ...]     # on the H200: bf16, 16k tokens
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python perf/d64_bwd_configs.py --aot [--extra ...]   # ptxas, no GPU
"""

import argparse

import torch
from triton.testing import do_bench

from flashdoc.bench import autotuned_configs
from flashdoc.kernels import backward as bw
from flashdoc.kernels.backward import DKDV_CONFIGS, DQ_CONFIGS, attn_bwd
from flashdoc.kernels.forward import attn_fwd, configs_for
from flashdoc.kernels.launch import tile_config


def label(c):
    return f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']} s{c.num_stages} w{c.num_warps}"


def dkdv_candidates(extra):
    return configs_for(DKDV_CONFIGS, 64, torch.bfloat16, False) + [tile_config(*c) for c in extra]


def aot(extra, causal=False):
    """Each d = 64 dK/dV candidate compiled for sm_90 (Triton 3.6, no GPU): ptxas's registers and spills."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perf.code_hash import ptxas_info

    d = 64
    for config in dkdv_candidates(extra):
        bm, bn = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
        rows = {"Q": bm, "DO": bm, "DK": bn, "DV": bn}
        constexprs = dict(HEAD_DIM=d, BLOCK_D=d, IS_CAUSAL=causal, DOT_PRECISION="tf32", BLOCK_M=bm, BLOCK_N=bn,
                          ACROSS_HEADS=False, ONE_AXIS=False)
        sig, consts = {}, {}
        for i, name in enumerate(bw._attn_bwd_dkdv.arg_names):
            if name in rows:
                sig[name] = f"tensordesc<bf16[1, {rows[name]}, 1, {d}]>"
            elif name in constexprs:
                sig[name], consts[(i,)] = "constexpr", constexprs[name]
            else:
                sig[name] = {"K": "*bf16", "V": "*bf16", "LSE2": "*fp32", "DELTA": "*fp32", "softmax_scale": "fp32",
                             "qk_scale": "fp32"}.get(name, "i32")
        ck = triton.compile(ASTSource(bw._attn_bwd_dkdv, sig, consts), target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=config.num_warps, num_stages=config.num_stages))
        print(f"dK/dV d=64 causal={causal} {label(config)}: {ptxas_info(ck)}", flush=True)


def main(extra):
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
        for dkdv_cfg in dkdv_candidates(extra):
            for dq_cfg in configs_for(DQ_CONFIGS, d, torch.bfloat16, False):
                ms = do_bench(backward((dkdv_cfg, dq_cfg)), warmup=25, rep=100)
                cells.append((ms, f"{label(dkdv_cfg)} + {label(dq_cfg)}"))
        tuned = do_bench(backward(None), warmup=25, rep=100)
        picks = [f"{p['kernel']} {p['block_m']}x{p['block_n']} s{p['num_stages']} w{p['num_warps']}"
                 for p in autotuned_configs() if p["seq_bucket"] == seqlen and p["head_dim"] == d]
        print(f"N={seqlen}: autotuned {tuned:.3f} ms ({flops / tuned / 1e9:.0f} TFLOP/s; {', '.join(picks)}) | "
              + " | ".join(f"{name} {ms:.3f}" for ms, name in sorted(cells)), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra", nargs="*", default=[], type=lambda c: tuple(int(x) for x in c.split(",")),
                    help="more dK/dV candidates, BLOCK_M,BLOCK_N,STAGES,WARPS each")
    ap.add_argument("--aot", action="store_true", help="compile for sm_90 and print ptxas info instead of timing")
    a = ap.parse_args()
    aot(a.extra) if a.aot else main(a.extra)
