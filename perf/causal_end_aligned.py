"""A/B for end-aligned causal tiles in the Hopper forward (session 15, branch wip/causal-end-aligned).

The forward's work items are 192 query rows (three consumers of 64) at d = 64 and 128. When 192 does not divide the
length (4k: 21.3 items per head), the short item was the last one, which sees every key: it cost a whole item for
64 rows of output. A cost model (key tiles of the busiest consumer per item, plus one tile per item) puts the
causal/full TFLOP/s ratio at 0.89 (4k) with the short item last and 0.94 with it first, the measured one being
0.85-0.88. The change aligns the items to the last row instead, so the short item is the first (lightest) one.

This loads the kernel before the change from a git revision (default 340bf9e, whose forward_hopper.py main still
had when this was written) as a second module, checks that both give the same bits, and times both, causal, with
the full forward for the ratio (bf16, 16k tokens, rotated order, median of 3).

    PYTHONPATH=. python3 perf/causal_end_aligned.py [--base REV] [--lengths 2048 3000 4096 8192]   # H200, ~1 min
"""

import argparse
import importlib.util
import subprocess
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels.launch import on_device


def load_base(rev):
    """forward_hopper.py as of git revision rev (or from the file rev names, for a checkout whose history lacks
    the revision), imported as flashdoc.kernels.forward_hopper_base (its relative imports resolve in the current
    package; Triton reads the kernels' source from the file)."""
    if Path(rev).is_file():
        source = Path(rev).read_text()
    else:
        source = subprocess.run(["git", "show", f"{rev}:flashdoc/kernels/forward_hopper.py"], check=True,
                                capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "forward_hopper_base.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("flashdoc.kernels.forward_hopper_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module, q, k, v, out, lse, causal, bottom_right=False):
    with on_device(q.device):
        module.attn_fwd_hopper(q, k, v, out, lse, q.shape[3] ** -0.5, causal, bottom_right)


def check(base):
    worst = 0.0
    for d in (64, 128, 256):
        for (b, sq, sk, h, hk) in [(2, 4096, 4096, 4, 4), (1, 1000, 1000, 3, 3), (2, 333, 777, 4, 2),
                                   (1, 777, 333, 2, 1), (1, 100, 100, 2, 2), (2, 3000, 3000, 4, 4)]:
            for bottom_right in (False, True):
                q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
                k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                outs = []
                for module in (base, fh):
                    out = torch.full_like(q, float("nan"))
                    lse = torch.full((b, h, sq), float("nan"), device="cuda")
                    run(module, q, k, v, out, lse, True, bottom_right)
                    outs.append((out, lse))
                (o0, l0), (o1, l1) = outs
                same = torch.equal(o0.nan_to_num(7.0), o1.nan_to_num(7.0)) and torch.equal(l0.nan_to_num(7.0),
                                                                                            l1.nan_to_num(7.0))
                err = (o0.float() - o1.float()).abs().nan_to_num(99.0).max().item()
                worst = max(worst, err)
                if not same or o1.isnan().any() or l1.isnan().any():
                    print(f"MISMATCH d={d} {(b, sq, sk, h, hk)} bottom_right={bottom_right}: max |diff| {err:.3g}, "
                          f"unwritten out {o1.isnan().sum().item()}, lse {l1.isnan().sum().item()}", flush=True)
    print(f"check done: worst |new - base| {worst:.3g}", flush=True)


def bench(base, head_dims, lengths):
    for d in head_dims:
        for n in lengths:
            b, h = max(1, 16384 // n), 2048 // d
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            out, lse = torch.empty_like(q), torch.empty(b, h, n, device="cuda")
            flops = 4 * b * h * n * n * d
            runs = {"base": (base, True), "new": (fh, True), "full": (fh, False)}
            times = {name: [] for name in runs}
            for name, (module, causal) in runs.items():
                run(module, q, k, v, out, lse, causal)
            names = list(runs)
            for r in range(3):
                for name in names[r % 3:] + names[:r % 3]:
                    module, causal = runs[name]
                    times[name].append(do_bench(lambda: run(module, q, k, v, out, lse, causal), warmup=25, rep=100))
            tf = {name: flops / (2 if runs[name][1] else 1) / (sorted(t)[1] * 1e-3) / 1e12
                  for name, t in times.items()}
            print(f"d={d} N={n}: causal base {tf['base']:.0f}  causal new {tf['new']:.0f} "
                  f"({tf['new'] / tf['base']:.3f}x)"
                  f"  full {tf['full']:.0f};  causal/full base {tf['base'] / tf['full']:.3f} new "
                  f"{tf['new'] / tf['full']:.3f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="340bf9e")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 3000, 4096, 8192])
    a = ap.parse_args()
    base = load_base(a.base)
    check(base)
    bench(base, a.head_dims, a.lengths)
