"""Find which Hopper forward config faults on one case, each config in a process of its own.

    PYTHONPATH=. python3 benchmarks/kernels/isolate_fault.py --dtype fp16 --head-dim 64 \
        --shape 2,1000,1203,4,2 --window 57,33 --bottom-right

A kernel that faults ("unspecified launch failure", "illegal memory access") leaves the CUDA context unusable,
so in a test process every later test fails with the same error and the report cannot say which launch faulted.
Here each config runs the case a few times in a fresh process with CUDA_LAUNCH_BLOCKING=1 (the error surfaces
at the launch that caused it) and reports ok, the error, or a wrong output against the windowed attention oracle
of ``tests/kernels/test_hopper_variants.py`` (flash-attn's 2x rule). Configs are (BLOCK_M per consumer, BLOCK_N,
STAGES, consumers, persistent); by default the table's entry (None) and the others those tests and the sweeps
have tried.
"""

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [None, (64, 128, 2, 3, True), (64, 128, 2, 2, True), (64, 64, 3, 3, True), (64, 64, 4, 3, False)]


def run_case(args) -> str:
    """One config on the case, in this process: 'ok', or what went wrong."""
    import torch

    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "kernels")]
    from attention_oracle import assert_close_like_flash_attn, make_qkv
    from test_hopper_variants import reference  # the tests' oracle for windows and softcap

    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.launch import on_device

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    batch, seqlen_q, seqlen_k, n_heads, n_kv = args.shape
    q, k, v = make_qkv(batch, seqlen_q, seqlen_k, n_heads, n_kv, args.head_dim, dtype, requires_grad=False)
    scale = args.head_dim**-0.5
    out_ref, _ = reference(q, k, v, scale, args.causal, args.window, 0.0, args.bottom_right)
    out_pt, _ = reference(q, k, v, scale, args.causal, args.window, 0.0, args.bottom_right, dtype)
    for _ in range(args.repeats):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((batch, n_heads, seqlen_q), float("nan"), device="cuda")
        with on_device(q.device):
            fh.attn_fwd_hopper(
                q, k, v, out, lse, scale, args.causal, args.bottom_right, args.config, window_size=args.window
            )
        torch.cuda.synchronize()
        assert_close_like_flash_attn(f"out {args.config}", out, out_ref, out_pt, dtype)
    return "ok"


def ints(text: str) -> tuple:
    return tuple(int(x) for x in text.split(","))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--shape", type=ints, default=(2, 1000, 1203, 4, 2), help="batch,seqlen_q,seqlen_k,heads,kv_heads")
    ap.add_argument("--window", type=ints, default=(-1, -1), help="left,right (-1: unbounded)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--bottom-right", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", help="a Python list of configs (None: the table's entry); default: " + str(CONFIGS))
    ap.add_argument("--config", type=ast.literal_eval, help=argparse.SUPPRESS)  # the child's one config
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(run_case(args), flush=True)
        return
    configs = ast.literal_eval(args.configs) if args.configs else CONFIGS
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1", "PYTHONPATH": str(ROOT)}
    shared = ["--dtype", args.dtype, "--head-dim", str(args.head_dim), "--repeats", str(args.repeats)]
    shared += ["--shape", ",".join(map(str, args.shape)), "--window", ",".join(map(str, args.window))]
    shared += ["--causal"] * args.causal + ["--bottom-right"] * args.bottom_right
    for config in configs:
        proc = subprocess.run(
            [sys.executable, __file__, *shared, "--child", "--config", repr(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        errors = [line for line in lines if "Error" in line or "error" in line]
        verdict = lines[-1] if proc.returncode == 0 and lines else (errors[-1] if errors else f"exit {proc.returncode}")
        print(f"{config}: {verdict[:200]}", flush=True)


if __name__ == "__main__":
    main()
