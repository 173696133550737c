"""What a benchmark run measures (``Sweep``) and the shape of the ``results.json`` it writes.

``results.json`` holds the run's environment (``gpu``, ``torch``, ``triton``, ``flashdoc``, ``flashdoc_commit``,
``cuda``, ``python``), ``sweep`` (this module's ``Sweep`` as a dict), ``quantiles``, ``peers`` (name ->
``{"available": bool, "reason": str}``, in plotting order), ``flashdoc_autotuned`` (the tile configs flashdoc's
kernels ran with) and ``records``: one dict per measurement, stamped with GPU, versions and timestamp.

- ``kind="speed"``: ``peer, mode, dtype, head_dim, causal, seqlen, batch, heads, flops``, and when
  ``status="ok"``: ``ms`` (median), ``ms_p20``, ``ms_p80``, ``ms_passes`` (each pass's median; ``ms`` is the
  lowest), ``tflops`` (= flops / ms), ``first_call_s``, ``wall_s``;
- ``kind="memory"``: a causal forward's ``peak_extra_bytes`` (peak allocated minus the inputs);
- ``kind="first_call"``: flashdoc's ``fwd_s`` and ``bwd_s`` in a fresh process with an empty Triton cache.

A record with ``status="skipped"`` carries a ``reason`` instead of numbers. Everything that reads results
(``benchmarks.report``, the site's macros, the tests) goes by these names.
"""

from __future__ import annotations

import dataclasses
import os

SCHEMA = "flashdoc-bench/1"
# Median first (the number reported), then the 20th and 80th percentiles as the spread.
QUANTILES = [0.5, 0.2, 0.8]
MODES = ("fwd", "fwd_bwd")
DTYPE_NAMES = ("bf16", "fp16")
# The peers whose peak memory is measured (naive attention shows the N x N scores; SDPA-flash the floor).
MEMORY_PEERS = ("naive", "sdpa-flash", "flashdoc")
CPU_NOTE = "CPU smoke run: tiny shapes, and the numbers are NOT meaningful (run on a CUDA GPU for real ones)."


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What one run measures. ``batch = total_tokens // seqlen`` and ``heads = hidden // head_dim``."""

    name: str
    device: str
    modes: tuple = MODES
    dtypes: tuple = DTYPE_NAMES
    head_dims: tuple = (64, 128, 256)
    causals: tuple = (False, True)
    seqlens: tuple = (512, 1024, 2048, 4096, 8192, 16384)
    total_tokens: int = 16384
    hidden: int = 2048
    # Naive attention is only timed up to here: at 16k one call takes a quarter of a second and the point
    # (it is 10x slower) is made long before. Its memory curve still runs until it is out of memory.
    naive_max_seqlen: int = 8192
    # Memory: causal forward, batch 1, these heads and head dim, in this dtype.
    memory_seqlens: tuple = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
    memory_heads: int = 32
    memory_head_dim: int = 128
    memory_dtype: str = "bf16"
    # do_bench's warm-up and measuring budgets in ms (Triton's defaults are 25 and 100). Shorter ones keep
    # the sweep short; each is raised so that at least timing.MIN_REPS calls are timed.
    warmup_ms: float = 10.0
    rep_ms: float = 30.0
    # Each configuration is timed this many times, in passes over the whole sweep (odd passes in reverse
    # order); a record keeps its lowest median. With one pass a row of one peer now and then came out 10-25%
    # slow, and its ratios with it (FINDINGS.md, "Noise").
    passes: int = 2
    first_call: bool = True  # the cold first-call measurement in a fresh process
    # Time in a process whose threads all run on one CPU (Linux). On a virtual machine Python's host time
    # moved by up to 2x with where the scheduler put each thread, which made the rows where host time shows
    # (N <= 1k) unrepeatable. Every peer is timed under the same pinning.
    pin_cpu: bool = True
    # Processes that compile FlexAttention and flashdoc kernels ahead of the timing (0: no compiling ahead),
    # and how long they may take before the rest is left to the timed run.
    precompile_workers: int = min(12, max(1, (os.cpu_count() or 4) - 2))
    precompile_timeout_s: float = 240.0

    def batch_heads(self, seqlen, head_dim):
        return max(1, self.total_tokens // seqlen), max(1, self.hidden // head_dim)


SWEEPS = {
    "full": Sweep("full", "cuda"),
    # d = 128 in bf16 at three lengths: a smoke test on the GPU that still says something.
    "quick": Sweep(
        "quick",
        "cuda",
        dtypes=("bf16",),
        head_dims=(128,),
        seqlens=(1024, 4096, 16384),
        memory_seqlens=(4096, 16384, 32768),
    ),
    # Tiny shapes for CPU-only machines and the tests: it exercises every code path, and its numbers mean
    # nothing (flashdoc runs through the Triton interpreter there, one program instance after another).
    "cpu": Sweep(
        "cpu",
        "cpu",
        dtypes=("fp16",),
        head_dims=(32,),
        seqlens=(64, 128),
        total_tokens=128,
        hidden=32,
        naive_max_seqlen=128,
        memory_seqlens=(),
        warmup_ms=0.0,
        rep_ms=0.0,
        passes=1,
        first_call=False,
        precompile_workers=0,
    ),
}


def flops(mode, batch, heads, seqlen, head_dim, causal):
    """FLOPs of one call: two N x N x d matmuls per head (4·B·H·N²·d), half of it when causal; the backward
    does 2.5x the forward's, so forward+backward counts 3.5x."""
    f = 4 * batch * heads * seqlen * seqlen * head_dim
    if causal:
        f //= 2
    return f * (3.5 if mode == "fwd_bwd" else 1.0)


def speed_configs(modes, dtypes, head_dims, causals, seqlens):
    """Every (mode, dtype, head_dim, causal, seqlen) of a sweep, in the order the sweep times them."""
    for dtype in dtypes:
        for head_dim in head_dims:
            for causal in causals:
                for mode in modes:
                    for seqlen in seqlens:
                        yield mode, dtype, head_dim, causal, seqlen


def sweep_configs(sweep):
    """``speed_configs`` of a ``Sweep``, or of the ``sweep`` dict a results.json holds."""
    s = sweep if isinstance(sweep, dict) else dataclasses.asdict(sweep)
    return speed_configs(s["modes"], s["dtypes"], s["head_dims"], s["causals"], s["seqlens"])
