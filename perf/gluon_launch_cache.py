"""Prototype, not yet run on a GPU: flashdoc's launch cache for the Gluon kernels (session 12).

``launch.launch`` sends every portable kernel's launch, from the second one with the same signature on, straight
to the compiled kernel's launcher (session 5: half of a launch's host time was Triton's Python path). The three
Gluon kernels (the Hopper forward, dK/dV and dQ) are still launched through ``kernel[grid](...)``, so a
forward + backward step pays Triton's binder and cache lookup three times. The benchmark's launch_overhead
snippet measured that step at 629 us of host time (SDPA's FlashAttention-2 backend: 195), and at 512 tokens a
d = 128 step lasts about 0.7 ms on the GPU: the short rows are host-bound, which would explain why their bf16
and fp16 twins disagree by up to 1.8x (benchmark v12 and v13).

``cached_launch`` wraps a Gluon kernel: ``cached_launch(kernel)[grid](*args, num_warps=4, **constexprs)``, the
call the host functions make. The first launch of a signature goes through Triton and keeps the compiled
kernel; later ones call its launcher directly, as ``launch._Launcher`` does. The signature is
``launch._signature`` of each argument, with Gluon's host descriptors keyed by dtype, tile and layout (what
Triton's specialisation sees of them), and the constexprs and warps.

    python3 perf/gluon_launch_cache.py --check --bench     # on the H200

--check: every Gluon kernel's outputs with the cache on, over shapes that change every int's specialisation
(1, multiples of 16, others), GQA and both causal alignments, must equal those with it off bit for bit.
--bench: host time per call (tiny problem, GPU work negligible) of the forward and the forward + backward step,
cache off and on, pinned to one CPU as the benchmark is.

If it saves host time and checks out: move ``cached_launch`` into flashdoc/kernels/launch.py, wrap the three
kernels where they are defined, add a GPU test (the launch cache's tests have the pattern), and rerun the
benchmark's launch_overhead snippet.
"""

import argparse
import contextlib
import functools
import os

import torch
import triton
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

import flashdoc
from flashdoc.kernels import backward_hopper as bh
from flashdoc.kernels import forward_hopper as fh
from flashdoc.kernels import launch
from host_overhead import per_call_us  # perf/ is this script's directory


def _signature(arg):
    """``launch._signature``, and for a Gluon host descriptor what Triton specialises on: dtype, tile, layout."""
    if isinstance(arg, GluonDescriptor):
        return "gluon desc", arg.base.dtype, tuple(arg.block_shape), arg.layout, arg.padding, len(arg.shape)
    return launch._signature(arg)


class cached_launch:
    """A Gluon kernel whose launches, from the second with the same signature on, skip Triton's Python path."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.compiled = {}  # signature -> (compiled kernel, the constexprs in parameter order)

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def _launch(self, grid, *args, num_warps, **constexprs):
        device = torch.cuda.current_device()
        key = (device, num_warps, *constexprs.items(), *map(_signature, args))
        hit = self.compiled.get(key) if launch.LAUNCH_CACHE and launch._no_launch_hooks() else None
        if hit is None:
            compiled = self.kernel[grid](*args, num_warps=num_warps, **constexprs)
            self.compiled[key] = compiled, tuple(constexprs[name] for name in self.kernel.arg_names[len(args):])
            return compiled
        compiled, tail = hit
        stream = launch._current_stream(device)
        compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                     compiled.function, compiled.packed_metadata, None, None, None, *args, *tail)
        return compiled


KERNELS = [(fh, "_attn_fwd_hopper"), (bh, "_attn_bwd_dkdv_hopper"), (bh, "_attn_bwd_dq_hopper")]


@contextlib.contextmanager
def cached():
    """The three Gluon kernels wrapped in ``cached_launch`` where the host functions look them up."""
    originals = [getattr(module, name) for module, name in KERNELS]
    for (module, name), kernel in zip(KERNELS, originals):
        setattr(module, name, cached_launch(kernel))
    try:
        yield
    finally:
        for (module, name), kernel in zip(KERNELS, originals):
            setattr(module, name, kernel)


def _step(q, k, v, dout, causal):
    """Forward and backward through the public API: outputs and the three gradients."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flashdoc.flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    return out, q.grad, k.grad, v.grad


def check():
    torch.manual_seed(0)
    shapes = [(2, 4096, 4096, 16, 16, 128), (1, 4096, 4096, 16, 4, 128), (3, 1000, 1000, 4, 4, 128),
              (2, 777, 2048, 4, 2, 128), (1, 2048, 333, 2, 1, 128), (4, 2048, 2048, 8, 8, 64),
              (1, 2049, 2049, 1, 1, 64), (2, 16, 16, 2, 2, 128)]
    worst = 0.0
    for dtype in (torch.bfloat16, torch.float16):
        for b, sq, sk, h, hk, d in shapes:
            for causal in (False, True):
                q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
                k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=dtype) for _ in range(2))
                dout = torch.randn_like(q)
                ref = _step(q, k, v, dout, causal)
                with cached():
                    for _ in range(2):  # the first launch fills the cache, the second goes through it
                        got = _step(q, k, v, dout, causal)
                diff = max((a.float() - r.float()).abs().max().item() for a, r in zip(got, ref))
                worst = max(worst, diff)
                if diff != 0:
                    print(f"MISMATCH {dtype} {(b, sq, sk, h, hk, d)} causal={causal}: {diff:.3g}", flush=True)
    print(f"check done: worst |cached - uncached| {worst:.3g}", flush=True)


def bench():
    from flashdoc.bench import _pin_threads
    _pin_threads({sorted(os.sched_getaffinity(0))[0]})
    q, k, v, dout = (torch.randn(1, 2048, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def forward():
        flashdoc.flash_attn_func(q, k, v)

    def step():
        flashdoc.flash_attn_func(qg, kg, vg).backward(dout)

    for name, fn in (("forward", forward), ("forward + backward", step)):
        off = per_call_us(fn)
        with cached():
            on = per_call_us(fn)
        print(f"{name}: host {off:.0f} us per call with Triton's launch path, {on:.0f} us cached", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    a = ap.parse_args()
    if a.check:
        check()
    if a.bench:
        bench()
