"""Experiment: does Triton 3.6's warp specialisation (`tl.range(..., warp_specialize=True)`) speed up the forward
on Hopper? Builds a variant of flashdoc/kernels/forward.py with the flag on its key loops (the package is not
touched), autotunes both over the same candidates, and prints forward TFLOP/s side by side.

    PYTHONPATH=. python perf/ws_probe.py
"""

import importlib.util
import os
import pathlib
import sys
import tempfile

os.environ.setdefault("FLASHDOC_AUTOTUNE", "1")

import torch  # noqa: E402
import triton  # noqa: E402

import flashdoc  # noqa: E402
from flashdoc.kernels import forward as base  # noqa: E402


def load_variant():
    src = pathlib.Path(base.__file__).read_text()
    assert "tl.range(lo, hi, BLOCK_N)" in src
    src = src.replace("tl.range(lo, hi, BLOCK_N)", "tl.range(lo, hi, BLOCK_N, warp_specialize=True)")
    src = src.replace("from . import INTERPRET", "from flashdoc.kernels import INTERPRET")
    path = pathlib.Path(tempfile.mkdtemp()) / "forward_ws.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("forward_ws", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ws = load_variant()
    d = 128
    print(f"{'causal':>6} {'N':>6} {'base':>8} {'ws':>8} {'ratio':>6}  max|ws-base|")
    for causal in (False, True):
        for n in (4096, 16384):
            b, h = 16384 // n, 2048 // d
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            res = {}
            outs = {}
            for name, mod in (("base", base), ("ws", ws)):
                out = torch.empty_like(q)
                lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)

                def f():
                    mod.attn_fwd(q, k, v, out, lse, d ** -0.5, causal, True)
                try:
                    f()
                    ms = triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")
                    res[name] = flops / ms * 1e-9
                    outs[name] = out.clone()
                except Exception as e:
                    res[name] = float("nan")
                    print(name, "failed:", repr(e)[:300])
            diff = (outs["ws"].float() - outs["base"].float()).abs().max().item() if len(outs) == 2 else float("nan")
            print(f"{causal!s:>6} {n:>6} {res['base']:8.1f} {res['ws']:8.1f} {res['ws'] / res['base']:6.2f}  {diff:.2e}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
