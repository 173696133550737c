"""Benchmark flashdoc against the attention kernels PyTorch already ships, in one run on one GPU (issue 4).

Usage::

    python -m flashdoc.bench --out bench-out            # full sweep (estimated ~8 min on an H200)
    python -m flashdoc.bench --quick --out bench-out    # smoke subset on the GPU (~2 min)
    python -m flashdoc.bench --device cpu --out /tmp/b  # tiny shapes on the CPU: the numbers mean nothing

or, from Python (this is what the site's benchmark snippet does)::

    from flashdoc.bench import run_benchmark
    results = run_benchmark(out_dir=".")

What is measured, each peer only if it is available (otherwise it is reported as skipped, with the reason):

- **speed**: TFLOP/s of naive PyTorch attention (matmul-softmax-matmul), ``scaled_dot_product_attention`` with
  one backend forced at a time (FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION), FlexAttention compiled
  with ``torch.compile``, flash-attn, and flashdoc; forward and forward+backward, bf16 and fp16, head dims
  64/128/256, causal and not, N = 512 ... 16k with 16k tokens in total (batch = 16384/N, heads = 2048/d, the
  convention of flash-attn's plots). FLOPs = 4·B·H·N²·d, halved when causal; forward+backward counts 3.5× the
  forward (the backward does 2.5×). A time is the median of ``triton.testing.do_bench`` after its warm-up, over
  at least 10 calls; the peers of each row are timed in turn, in an order rotated from row to row, by a process
  whose threads all run on one CPU (unpinned, host time on a virtual machine moves with thread placement). The
  sweep runs twice, the second pass in reverse order, and each record keeps the lower of its two medians (both are
  in ``ms_passes``): interference only slows a timing, and one pass left single rows 10-20% slow. The forward
  is timed on inputs that require grad (the training forward, as flash-attn's benchmarks do). Naive attention is
  timed up to N = 8k. FlexAttention is compiled per shape (static shapes, its fastest kernels); those compiles,
  and flashdoc's, happen before any timing, in parallel worker processes that fill the compile caches (see
  ``_precompile``).
- **memory**: peak extra GPU memory of a causal forward (batch 1, 32 heads, d 128) vs N up to 64k, where
  "extra" is the peak during the call minus what was allocated before it (the inputs).
- **first call**: the time flashdoc's first call takes on a new shape in a fresh process with an empty
  Triton cache (compile + autotune); every speed record also carries the time of its own first call.

Outputs in ``out_dir``: ``results.json`` (one record per measurement, each with GPU name, timestamp and
versions), ``tflops_bf16.png`` / ``tflops_fp16.png`` (TFLOP/s vs N, one subplot per mode, head dim and
causality), ``memory.png``, ``ratios.md`` (flashdoc's speed ratio to each peer per configuration, also printed
at the end), ``tflops.md`` (every TFLOP/s number), ``targets.md`` (issue 4's targets, met or not) and
``autotuned.md`` (the tiles flashdoc's autotuner picked for each kernel and shape, also in results.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = ["run_benchmark", "main", "SWEEPS", "PEERS", "flops", "make_inputs"]

# ---------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------

SCHEMA = "flashdoc-bench/1"
# Median first (the number we report), then the 20th and 80th percentiles as the spread (Liger's convention).
QUANTILES = [0.5, 0.2, 0.8]
MODES = ("fwd", "fwd_bwd")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Every speed measurement times at least this many calls (do_bench's budget is raised for slow ones).
MIN_REPS = 10
# Flashdoc's speed targets are judged from this N up (short sequences are launch- and tail-bound).
RATIO_MIN_SEQLEN = 2048


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What one run measures. ``batch = total_tokens // seqlen`` and ``heads = hidden // head_dim``."""

    name: str
    device: str
    modes: tuple = MODES
    dtypes: tuple = ("bf16", "fp16")
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
    # the sweep short; each is raised so that at least MIN_REPS calls are timed.
    warmup_ms: float = 10.0
    rep_ms: float = 30.0
    # Each configuration is timed this many times, in passes over the whole sweep (odd passes in reverse order);
    # a record keeps its lowest median. With one pass a row of one peer now and then came out 10-25% slow, and its
    # ratios with it (flashdoc's bf16 d=64 full fwd+bwd at 2k: 3.16 ms in benchmark v15, 2.53-2.86 ms in the ~90
    # timings of perf/NOTES.md, session 15).
    passes: int = 2
    first_call: bool = True  # the cold first-call measurement in a fresh process
    # Time in a process whose threads all run on one CPU (Linux). On a virtual machine Python's host time moved
    # by up to 2x with where the scheduler put each thread (perf/NOTES.md, session 7), which made the rows
    # where host time shows (N <= 1k) unrepeatable. Every peer is timed under the same pinning.
    pin_cpu: bool = True
    # Processes that compile FlexAttention and flashdoc kernels ahead of the timing (0: no compiling ahead),
    # and how long they may take before the rest is left to the timed run.
    precompile_workers: int = min(12, max(1, (os.cpu_count() or 4) - 2))
    precompile_timeout_s: float = 240.0

    def batch_heads(self, seqlen, head_dim):
        return max(1, self.total_tokens // seqlen), max(1, self.hidden // head_dim)


SWEEPS = {
    "full": Sweep("full", "cuda"),
    # The columns of NOTES.md's peer table, at d=128 in bf16: a smoke test that still says something.
    "quick": Sweep(
        "quick", "cuda", dtypes=("bf16",), head_dims=(128,), seqlens=(1024, 4096, 16384),
        memory_seqlens=(4096, 16384, 32768),
    ),
    # Tiny shapes for CPU-only machines and the tests: it exercises every code path, and its numbers mean
    # nothing (flashdoc runs through the Triton interpreter there, one program instance after another).
    "cpu": Sweep(
        "cpu", "cpu", dtypes=("fp16",), head_dims=(32,), seqlens=(64, 128), total_tokens=128, hidden=32,
        naive_max_seqlen=128, memory_seqlens=(), warmup_ms=0.0, rep_ms=0.0, passes=1, first_call=False,
        precompile_workers=0,
    ),
}
CPU_NOTE = "CPU smoke run: tiny shapes, and the numbers are NOT meaningful (run on a CUDA GPU for real ones)."


def flops(mode, batch, heads, seqlen, head_dim, causal):
    """FLOPs of one call: two N x N x d matmuls per head (4·B·H·N²·d), half of it when causal; the backward
    does 2.5x the forward's, so forward+backward counts 3.5x."""
    f = 4 * batch * heads * seqlen * seqlen * head_dim
    if causal:
        f //= 2
    return f * (3.5 if mode == "fwd_bwd" else 1.0)


# ---------------------------------------------------------------------------------------------------------
# Peers: each takes q, k, v in its own layout and returns the output
# ---------------------------------------------------------------------------------------------------------


def naive_attention(q, k, v, causal):
    """softmax(q kᵀ / √d) v written as matmul-softmax-matmul: materialises the (N, N) scores."""
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        n = scores.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@dataclasses.dataclass
class Peer:
    name: str
    layout: str  # "bhnd": (batch, heads, seqlen, dim), as SDPA; "bnhd": (batch, seqlen, heads, dim), as flash-attn
    load: callable  # (device) -> attention function (q, k, v, causal) -> out; raises if unavailable
    style: dict = dataclasses.field(default_factory=dict)  # matplotlib line style


def _load_naive(device):
    return naive_attention


def _sdpa_loader(backend_name):
    def load(device):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)
        if device == "cuda" and backend_name == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
            raise RuntimeError("cuDNN is not available in this torch build")

        def attn(q, k, v, causal):
            with sdpa_kernel(backend):  # only this backend: an unsupported shape raises instead of falling back
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        # A tiny call tells whether the backend exists on this device at all.
        x = torch.randn(1, 1, 128, 64, device=device, dtype=torch.float16 if device == "cuda" else torch.float32)
        try:
            attn(x, x, x, True)
        except RuntimeError as e:
            raise RuntimeError(f"no {backend_name} kernel on {device} ({str(e).splitlines()[0][:120]})") from e
        return attn

    return load


def _load_flex(device):
    if device != "cuda":
        raise RuntimeError("CPU mode: torch.compile of FlexAttention on the CPU takes minutes, too long for a smoke "
                           "run")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # Static shapes: one compile (forward and backward kernels, ~5 s) per shape. Measured on the H200,
    # dynamic=True still compiled once per N and its kernels were 15-35% slower (no static bounds), which
    # would flatter flashdoc. The compiles are paid ahead of the timing by parallel workers (see _precompile);
    # more than dynamo's default of 8 versions of one function would otherwise silently run it eagerly.
    torch._dynamo.config.recompile_limit = max(1024, torch._dynamo.config.recompile_limit)
    torch._dynamo.config.accumulated_recompile_limit = max(4096, torch._dynamo.config.accumulated_recompile_limit)
    compiled = torch.compile(flex_attention, dynamic=False)
    block_masks = {}

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def attn(q, k, v, causal):
        block_mask = None
        if causal:
            n = q.shape[-2]
            if n not in block_masks:  # built on the first (untimed) call of each N, then reused
                block_masks[n] = create_block_mask(causal_mask, None, None, n, n, device=q.device)
            block_mask = block_masks[n]
        return compiled(q, k, v, block_mask=block_mask)

    return attn


def _load_flash_attn(device):
    from flash_attn import flash_attn_func  # noqa: F401  (ImportError -> "not installed")

    return lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal)


def _load_flashdoc(device):
    from flashdoc import flash_attn_func

    return lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal)


# Order = order in plots and tables. flashdoc last so that it is drawn on top.
PEERS = [
    Peer("naive", "bhnd", _load_naive, dict(color="tab:gray", marker="x", linestyle=":")),
    Peer("sdpa-efficient", "bhnd", _sdpa_loader("EFFICIENT_ATTENTION"), dict(color="tab:olive", marker="v")),
    Peer("sdpa-flash", "bhnd", _sdpa_loader("FLASH_ATTENTION"), dict(color="tab:blue", marker="s")),
    Peer("sdpa-cudnn", "bhnd", _sdpa_loader("CUDNN_ATTENTION"), dict(color="tab:green", marker="D")),
    Peer("flex", "bhnd", _load_flex, dict(color="tab:purple", marker="^")),
    Peer("flash-attn", "bnhd", _load_flash_attn, dict(color="tab:orange", marker="P")),
    Peer("flashdoc", "bnhd", _load_flashdoc, dict(color="tab:red", marker="o", linewidth=2.5)),
]
MEMORY_PEERS = ("naive", "sdpa-flash", "flashdoc")


def load_peers(device, names=None):
    """{name: attention function} for the peers that load, and {name: reason} for those that do not."""
    available, skipped = {}, {}
    for peer in PEERS:
        if names is not None and peer.name not in names:
            continue
        try:
            available[peer.name] = peer.load(device)
        except Exception as e:  # ImportError, "No available kernel", ...
            skipped[peer.name] = _reason(e)
    return available, skipped


def _reason(e):
    if isinstance(e, torch.OutOfMemoryError):
        return "out of memory"
    if isinstance(e, ImportError):
        return f"not installed ({e})"
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")


# ---------------------------------------------------------------------------------------------------------
# One setup shared by the speed and the memory measurements
# ---------------------------------------------------------------------------------------------------------


def make_inputs(layout, batch, heads, seqlen, head_dim, dtype, device, requires_grad):
    """q, k, v (standard normal) in the peer's layout, and dout for the backward."""
    shape = (batch, heads, seqlen, head_dim) if layout == "bhnd" else (batch, seqlen, heads, head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=requires_grad) for _ in range(3))
    return q, k, v, torch.randn(shape, device=device, dtype=dtype)


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _time_ms(fn, sweep, grad_to_none):
    """[median, p20, p80] in ms."""
    if sweep.device == "cuda":
        import triton.testing

        # One more call sizes the budgets, so that a slow configuration still gets MIN_REPS timed calls.
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        call_ms = (time.perf_counter() - start) * 1e3
        return triton.testing.do_bench(
            fn, warmup=max(sweep.warmup_ms, 2 * call_ms), rep=max(sweep.rep_ms, MIN_REPS * call_ms),
            grad_to_none=grad_to_none, quantiles=QUANTILES,
        )
    # CPU (a smoke run): one plain wall-clock timing, the first call having served as the warm-up.
    for t in grad_to_none or ():
        t.grad = None
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms]


def measure_speed(attn, layout, mode, dtype, batch, heads, seqlen, head_dim, causal, sweep):
    """{'ms', 'ms_p20', 'ms_p80', 'first_call_s'} for one peer at one configuration."""
    q, k, v, dout = make_inputs(layout, batch, heads, seqlen, head_dim, DTYPES[dtype], sweep.device, True)
    if mode == "fwd":
        fn = lambda: attn(q, k, v, causal)  # noqa: E731
    else:
        fn = lambda: attn(q, k, v, causal).backward(dout)  # noqa: E731
    _sync(sweep.device)
    start = time.perf_counter()
    fn()  # the first call on this shape: compiles, autotunes, builds block masks ...
    _sync(sweep.device)
    first_call_s = time.perf_counter() - start
    ms, p20, p80 = _time_ms(fn, sweep, grad_to_none=[q, k, v] if mode == "fwd_bwd" else None)
    return dict(ms=ms, ms_p20=p20, ms_p80=p80, first_call_s=first_call_s)


# ---------------------------------------------------------------------------------------------------------
# Compiling ahead, in parallel
# ---------------------------------------------------------------------------------------------------------
# FlexAttention compiles once per shape (~5 s each, 72 shapes) and flashdoc's autotuner compiles each of its
# configs once per (dtype, head dim, causal) (~6 s forward, ~13 s backward): one after another that is most
# of the run. Worker processes do those compiles first, in parallel, on the same GPU but before any timing,
# filling the on-disk caches of torch.compile (FX graph and AOTAutograd caches) and Triton. The timed run then
# finds every kernel compiled: its first calls only load them (and flashdoc's autotuner benchmarks its
# candidates, which must happen alone on the GPU, so it is not done ahead). Nothing measured comes from the
# workers; if one fails, the main run simply compiles that kernel itself.


def _precompile_tasks(sweep, available):
    tasks = []
    for mode, dtype, head_dim, causal, seqlen in _speed_configs(sweep):
        if mode != "fwd":  # one forward+backward call compiles what both modes use
            continue
        batch, heads = sweep.batch_heads(seqlen, head_dim)
        if "flex" in available:
            tasks.append(dict(peer="flex", dtype=dtype, head_dim=head_dim, causal=causal, seqlen=seqlen,
                              batch=batch, heads=heads, device=sweep.device, cost=5))
        if "flashdoc" in available and seqlen == min(sweep.seqlens):  # kernels do not depend on N
            tasks.append(dict(peer="flashdoc", dtype=dtype, head_dim=head_dim, causal=causal, seqlen=seqlen,
                              batch=batch, heads=heads, device=sweep.device, cost=20))
    return tasks


def _precompile_worker(tasks):
    """Runs in a worker process: one forward+backward call per task; prints one JSON line per task."""
    peers = {p.name: p for p in PEERS}
    loaded = {}
    for t in tasks:
        start = time.perf_counter()
        try:
            peer = peers[t["peer"]]
            attn = loaded.get(peer.name) or loaded.setdefault(peer.name, peer.load(t["device"]))
            q, k, v, dout = make_inputs(peer.layout, t["batch"], t["heads"], t["seqlen"], t["head_dim"],
                                        DTYPES[t["dtype"]], t["device"], True)
            attn(q, k, v, t["causal"]).backward(dout)
            _sync(t["device"])
            status = "ok"
        except Exception as e:
            status = _reason(e)
        print(json.dumps(dict(t, status=status, s=time.perf_counter() - start)), flush=True)


def _precompile(sweep, available, workers, timeout_s):
    """Run the compile tasks in ``workers`` processes; returns a summary dict (kept in results.json)."""
    tasks = sorted(_precompile_tasks(sweep, available), key=lambda t: -t["cost"])
    if not tasks or workers < 1:
        return dict(workers=0, tasks=len(tasks), wall_s=0.0)
    workers = min(workers, len(tasks))
    shares = [tasks[i::workers] for i in range(workers)]  # longest first, dealt round-robin
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONUNBUFFERED="1")
    script = ("import json, sys; from flashdoc.bench import _precompile_worker; "
              "_precompile_worker(json.loads(sys.argv[1]))")
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", script, json.dumps(share)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for share in shares]
    done = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()  # its remaining compiles happen in the main run instead
            out, _ = proc.communicate()
        done += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    failed = [f"{t['peer']} {t['dtype']} d={t['head_dim']} causal={t['causal']} N={t['seqlen']}: {t['status']}"
              for t in done if t["status"] != "ok"]
    return dict(workers=workers, tasks=len(tasks), done=sum(t["status"] == "ok" for t in done),
                failed=failed[:10], wall_s=time.perf_counter() - start,
                task_s=sum(t["s"] for t in done))


def measure_peak_memory(attn, layout, batch, heads, seqlen, head_dim, dtype, causal, device):
    """Peak GPU memory allocated during one forward call, minus what was allocated before it (the inputs)."""
    q, k, v, _ = make_inputs(layout, batch, heads, seqlen, head_dim, DTYPES[dtype], device, False)
    with torch.no_grad():
        del _
        attn(q, k, v, causal)  # warm-up: compile/autotune scratch memory must not count
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = attn(q, k, v, causal)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak


# The cold first call runs in a fresh Python process with an empty Triton cache, so that nothing compiled
# or autotuned by the sweep helps it.
_FIRST_CALL_SCRIPT = r"""
import json, sys, time, torch
from flashdoc import flash_attn_func
b, n, h, d, causal = json.loads(sys.argv[1])
q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
torch.cuda.synchronize(); t0 = time.perf_counter()
out = flash_attn_func(q, k, v, causal=causal)
torch.cuda.synchronize(); t1 = time.perf_counter()
out.backward(torch.randn_like(out))
torch.cuda.synchronize(); t2 = time.perf_counter()
print(json.dumps({"fwd_s": t1 - t0, "bwd_s": t2 - t1}))
"""


def measure_first_call(batch, seqlen, heads, head_dim, causal, timeout_s=300):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        args = json.dumps([batch, seqlen, heads, head_dim, causal])
        proc = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL_SCRIPT, args], env=env, capture_output=True, text=True,
            timeout=timeout_s,
        )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _pin_threads(cpus):
    """Set the CPU affinity of every thread of this process (threads started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread ended meanwhile
            pass


def autotuned_configs():
    """The config flashdoc's autotuner picked, so far in this process, for each kernel and autotuning key
    (sequence-length bucket, head dim, causal, dtypes): which tiles each flashdoc row ran with. Empty under
    Triton's interpreter, which does not autotune."""
    from flashdoc.kernels import backward, forward

    picks = []
    for kernel, tuned in (("fwd", forward._attn_fwd_tuned), ("dkdv", backward._attn_bwd_dkdv_tuned),
                          ("dq", backward._attn_bwd_dq_tuned)):
        for key, config in (tuned.cache.items() if tuned is not None else ()):
            seq_bucket, head_dim, causal = key[:3]
            # the autotuner appends the dtypes of the tensor arguments; the first is the inputs' dtype
            dtype = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}.get(
                str(key[3]) if len(key) > 3 else "", "?")
            picks.append(dict(kernel=kernel, dtype=dtype, seq_bucket=seq_bucket, head_dim=head_dim,
                              causal=bool(causal), key=str(key), block_m=config.kwargs["BLOCK_M"],
                              block_n=config.kwargs["BLOCK_N"], num_stages=config.num_stages,
                              num_warps=config.num_warps))
    return sorted(picks, key=lambda p: (p["kernel"], p["key"]))


def hopper_configs(sweep):
    """The configs of the Hopper (Gluon) kernels for the sweep's rows that they take, as picks like
    ``autotuned_configs``'s with ``gluon=True`` and their consumer warpgroups: these kernels do not autotune, so
    the autotuner's cache does not know them. Empty where they do not run (another GPU or Triton, the CPU)."""
    from flashdoc.kernels import backward, backward_hopper, forward_hopper
    from flashdoc.kernels.forward import seq_bucket

    picks = []
    for dtype in sweep.dtypes:
        for head_dim in sweep.head_dims:
            for causal in sweep.causals:
                for seqlen in sweep.seqlens:
                    batch, heads = sweep.batch_heads(seqlen, head_dim)
                    # what the dispatch looks at (shape, dtype, device), with no memory behind it
                    q = torch.empty(1, 1, 1, head_dim, device=sweep.device, dtype=DTYPES[dtype]).expand(
                        batch, seqlen, heads, head_dim)
                    key = (head_dim, causal)
                    kernels = [("fwd", forward_hopper.supports(q, causal), forward_hopper.HOPPER_CONFIGS)]
                    # flashdoc is timed with flash_attn_func's default, deterministic=False
                    fused = backward.fused_dq_runs(q, q, causal, deterministic=False)  # (keys shaped as queries)
                    if fused:  # one kernel for the three gradients
                        kernels.append(("dkdv", True, backward_hopper.FUSED_DQ_CONFIGS))
                    else:
                        kernels += [
                            ("dkdv", backward_hopper.supports_dkdv(q, causal), backward_hopper.HOPPER_DKDV_CONFIGS),
                            ("dq", backward_hopper.supports_dq(q, causal), backward_hopper.HOPPER_DQ_CONFIGS)]
                    for kernel, taken, table in kernels:
                        if taken:
                            block_m, block_n, stages, consumers = table[key][:4]
                            pick = dict(kernel=kernel, gluon=True, dtype=dtype, seq_bucket=seq_bucket(seqlen),
                                        head_dim=head_dim, causal=causal, block_m=block_m, block_n=block_n,
                                        num_stages=stages, consumers=consumers)
                            if kernel == "fwd":
                                pick["o_in_q"] = head_dim > forward_hopper.MAX_SEPARATE_O_HEAD_DIM
                            if kernel == "dkdv":
                                pick["wide"] = head_dim > backward_hopper.MAX_NARROW_HEAD_DIM
                                pick["fused_dq"] = fused
                            picks.append(pick)
    return picks


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


def _environment(device):
    import triton

    try:
        import flashdoc

        flashdoc_version = getattr(flashdoc, "__version__", None)
        if flashdoc_version is None:
            from importlib.metadata import version

            flashdoc_version = version("flashdoc")
    except Exception:
        flashdoc_version = "unknown"
    # FLASHDOC_COMMIT names the commit when the checkout's .git is not the source of truth (a copied working
    # tree on a GPU box whose .git lags behind)
    commit = os.environ.get("FLASHDOC_COMMIT")
    try:
        commit = commit or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip() or None
    except Exception:
        commit = None
    if device == "cuda":
        gpu = torch.cuda.get_device_name()
    else:
        gpu = f"CPU ({platform.processor() or platform.machine()}), no GPU"
    return dict(
        gpu=gpu, torch=torch.__version__, triton=triton.__version__, flashdoc=flashdoc_version,
        flashdoc_commit=commit, cuda=torch.version.cuda, python=platform.python_version(),
        flashdoc_autotune=os.environ.get("FLASHDOC_AUTOTUNE", "default"),
    )


def _progress(total, enabled):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the progress bar is a nicety, not a requirement
        tqdm = None
    if tqdm is None or not enabled:
        return _NoProgress()
    return tqdm(total=total, desc="flashdoc.bench", unit="meas", file=sys.stderr, dynamic_ncols=True)


class _NoProgress:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def _speed_configs(sweep):
    for dtype in sweep.dtypes:
        for head_dim in sweep.head_dims:
            for causal in sweep.causals:
                for mode in sweep.modes:
                    for seqlen in sweep.seqlens:
                        yield mode, dtype, head_dim, causal, seqlen


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _pass_order(configs, pass_index):
    """(row number, configuration) in the order a pass times them: the even passes go through the sweep
    forwards, the odd ones backwards, so no configuration is timed at the same point of the run twice."""
    rows = list(enumerate(configs))
    return rows if pass_index % 2 == 0 else rows[::-1]


def _row_order(row, pass_index):
    """The peers in the order they are timed in one row: each row starts at the next peer (where a kernel sits in
    the order moved its timing by a few percent, perf/NOTES.md, session 6), and the odd passes reverse it."""
    shift = row % len(PEERS)
    order = PEERS[shift:] + PEERS[:shift]
    return order if pass_index % 2 == 0 else order[::-1]


def _keep_best(kept, timing):
    """The record of the pass with the lower median, carrying every pass's median and the first pass's
    first-call time. Interference (another process, a clock dip, a host hiccup) only ever slows a timing."""
    if kept is None:
        return dict(timing, ms_passes=[timing["ms"]])
    best = dict(min(kept, timing, key=lambda t: t["ms"]))
    best.update(ms_passes=kept["ms_passes"] + [timing["ms"]], first_call_s=kept["first_call_s"],
                wall_s=kept["wall_s"] + timing["wall_s"])
    return best


def run_benchmark(out_dir=".", quick=False, device=None, peers=None, progress=True, verbose=True, **overrides):
    """Run the sweep, write results.json, plots and tables into ``out_dir``, print the ratio table.

    device: "cuda", "cpu" or None (CUDA if available). On the CPU the tiny "cpu" sweep runs whatever
    ``quick`` says. peers: names from ``PEERS`` to include (default all). overrides: fields of ``Sweep``
    (e.g. ``head_dims=(128,)``, ``rep_ms=100``). Returns the results dict that results.json holds.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sweep = SWEEPS["cpu" if device == "cpu" else ("quick" if quick else "full")]
    sweep = dataclasses.replace(sweep, device=device, **overrides)
    if not isinstance(sweep.passes, int) or sweep.passes < 1:
        raise ValueError(f"passes must be a whole number of at least 1 (the times each configuration is timed), "
                         f"got {sweep.passes!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = print if verbose else (lambda *a, **k: None)
    t_start = time.perf_counter()

    env = _environment(device)
    available, skipped = load_peers(device, peers)
    say(f"flashdoc benchmark ({sweep.name} sweep) on {env['gpu']}: torch {env['torch']}, triton {env['triton']}")
    if device == "cpu":
        say(CPU_NOTE)
    for name, reason in skipped.items():
        say(f"  skipped peer {name}: {reason}")

    records = []
    common = dict(gpu=env["gpu"], torch=env["torch"], triton=env["triton"], flashdoc=env["flashdoc"])

    def record(**fields):  # stamped now, unless the fields carry the time they were measured
        records.append(dict({"timestamp": _now()}, **fields, **common))

    # -- compile ahead (no timing happens meanwhile) ------------------------------------------------------
    precompiled = None
    if device == "cuda" and sweep.precompile_workers > 0:
        say(f"Compiling kernels ahead in {sweep.precompile_workers} processes ...")
        precompiled = _precompile(sweep, available, sweep.precompile_workers, sweep.precompile_timeout_s)
        say(f"Compiled {precompiled.get('done', 0)}/{precompiled['tasks']} kernels ahead in "
            f"{precompiled['workers']} processes: {precompiled['wall_s']:.0f} s")
        for line in precompiled.get("failed", []):
            say(f"  compile ahead failed (the timed run compiles it itself): {line}")
        # From here on torch.compile mostly loads from its cache: no pool of compile processes is needed (on
        # the H200, shutting that pool down held the process for more than 10 s after the run).
        from torch._inductor import config as inductor_config

        inductor_config.compile_threads = 1

    all_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pinned_cpu = None
    if device == "cuda" and sweep.pin_cpu and all_cpus:
        pinned_cpu = min(all_cpus)
        _pin_threads({pinned_cpu})
        say(f"Timing with every thread of this process on CPU {pinned_cpu}")

    configs = list(_speed_configs(sweep))
    memory_peers = [p for p in PEERS if p.name in MEMORY_PEERS and p.name in available]
    n_memory = len(memory_peers) * len(sweep.memory_seqlens) if device == "cuda" else 0
    bar = _progress(sweep.passes * len(configs) * len(available) + n_memory, progress)

    interrupted = None
    speed = {}  # (peer, mode, dtype, head_dim, causal, seqlen) -> its record's fields, in first-timed order
    try:
        # -- speed ------------------------------------------------------------------------------------------
        # Every (peer, configuration) is timed in each pass; its record keeps the pass with the lowest median.
        failed = {}  # (peer, mode, dtype, head_dim, causal) -> reason: larger N are skipped after a failure
        for pass_index in range(sweep.passes):
            for row, (mode, dtype, head_dim, causal, seqlen) in _pass_order(configs, pass_index):
                batch, heads = sweep.batch_heads(seqlen, head_dim)
                fl = flops(mode, batch, heads, seqlen, head_dim, causal)
                for peer in _row_order(row, pass_index):
                    if peer.name not in available:
                        continue
                    bar.set_postfix_str(f"{peer.name} {mode} {dtype} d={head_dim} causal={causal} N={seqlen}")
                    key = (peer.name, mode, dtype, head_dim, causal)
                    base = dict(kind="speed", peer=peer.name, mode=mode, dtype=dtype, head_dim=head_dim,
                                causal=causal, seqlen=seqlen, batch=batch, heads=heads, flops=fl)
                    slot = key + (seqlen,)
                    t0 = time.perf_counter()
                    if peer.name == "naive" and seqlen > sweep.naive_max_seqlen:
                        speed[slot] = dict(base, status="skipped",
                                           reason=f"naive is timed up to N={sweep.naive_max_seqlen} only")
                    elif key in failed:
                        speed.setdefault(slot, dict(base, status="skipped", reason=failed[key]))
                    else:
                        try:
                            m = measure_speed(available[peer.name], peer.layout, mode, dtype, batch, heads, seqlen,
                                              head_dim, causal, sweep)
                            speed[slot] = _keep_best(speed.get(slot), dict(
                                base, status="ok", tflops=fl / (m["ms"] * 1e-3) / 1e12, **m,
                                wall_s=time.perf_counter() - t0, timestamp=_now()))
                        except Exception as e:
                            reason = _reason(e)
                            if isinstance(e, torch.OutOfMemoryError):
                                failed[key] = f"out of memory at N={seqlen}"
                            else:
                                failed[key] = f"failed at N={seqlen}: {reason}"
                            if speed.get(slot, {}).get("status") != "ok":  # a failure in a later pass keeps the
                                speed[slot] = dict(base, status="skipped", reason=reason,  # earlier timing
                                                   wall_s=time.perf_counter() - t0)
                            if device == "cuda":
                                torch.cuda.empty_cache()
                    bar.update()
        for fields in speed.values():
            record(**fields)
        speed = {}

        # -- memory -----------------------------------------------------------------------------------------
        if device != "cuda":
            record(kind="memory", status="skipped", reason="needs a CUDA device (torch.cuda memory statistics)")
        else:
            for peer in memory_peers:
                oom_at = None
                for seqlen in sweep.memory_seqlens:
                    bar.set_postfix_str(f"memory {peer.name} N={seqlen}")
                    base = dict(kind="memory", peer=peer.name, mode="fwd", dtype=sweep.memory_dtype,
                                head_dim=sweep.memory_head_dim, causal=True, seqlen=seqlen, batch=1,
                                heads=sweep.memory_heads)
                    if oom_at is not None:
                        record(**base, status="skipped", reason=f"out of memory at N={oom_at}")
                    else:
                        try:
                            peak = measure_peak_memory(available[peer.name], peer.layout, 1, sweep.memory_heads, seqlen,
                                                       sweep.memory_head_dim, sweep.memory_dtype, True, device)
                            record(**base, status="ok", peak_extra_bytes=peak)
                        except Exception as e:
                            if isinstance(e, torch.OutOfMemoryError):
                                oom_at = seqlen
                            record(**base, status="skipped", reason=_reason(e))
                            torch.cuda.empty_cache()
                    bar.update()
        bar.close()

        # -- first call on a new shape (compile + autotune) --------------------------------------------------
        shape = dict(batch=4, seqlen=4096, heads=16, head_dim=128, causal=True)
        first = dict(kind="first_call", peer="flashdoc", dtype="bf16", cold_process=True, **shape)
        if "flashdoc" not in available:
            record(**first, status="skipped", reason=skipped.get("flashdoc", "not selected"))
        elif not sweep.first_call:
            record(**first, status="skipped",
                   reason="not measured in this sweep (first_call=False; on the CPU nothing is compiled)")
        else:
            say("Measuring flashdoc's first call in a fresh process with an empty Triton cache ...")
            if pinned_cpu is not None:  # compiles as a user's process would, on every CPU
                _pin_threads(all_cpus)
            try:
                fc = measure_first_call(shape["batch"], shape["seqlen"], shape["heads"], shape["head_dim"],
                                        shape["causal"])
                record(**first, status="ok", fwd_s=fc["fwd_s"], bwd_s=fc["bwd_s"],
                       first_call_s=fc["fwd_s"] + fc["bwd_s"])
            except Exception as e:
                record(**first, status="skipped", reason=_reason(e))
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from `timeout` (see main): keep what was measured
        interrupted = "interrupted: the records cover only part of the sweep"
        bar.close()
        for fields in speed.values():  # the timings of the passes so far
            record(**fields)
        say(f"\n{interrupted}; writing them")
    finally:  # the caller's process gets its CPUs back, whatever happened
        if pinned_cpu is not None:
            _pin_threads(all_cpus)

    results = dict(
        schema=SCHEMA,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=device,
        **env,
        note=CPU_NOTE if device == "cpu" else None,
        sweep={k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(sweep).items()},
        quantiles=QUANTILES,
        peers={p.name: ({"available": True} if p.name in available
                        else {"available": False, "reason": skipped.get(p.name, "not selected")})
               for p in PEERS},
        wall_s=time.perf_counter() - t_start,
        interrupted=interrupted,
        precompiled=precompiled,
        pinned_cpu=pinned_cpu,
        flashdoc_autotuned=autotuned_configs() + hopper_configs(sweep),
        records=records,
    )
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    written = ["results.json"] + write_plots(results, out_dir) + write_tables(results, out_dir)
    say("")
    say(summary_text(results))
    say(f"Wrote {', '.join(written)} to {out_dir} in {results['wall_s']:.0f} s.")
    return results


# ---------------------------------------------------------------------------------------------------------
# Reports: tables and plots from the records alone (so they can be redrawn from a results.json)
# ---------------------------------------------------------------------------------------------------------


def _speed(results):
    """{(mode, dtype, head_dim, causal, seqlen): {peer: tflops}} for the records that succeeded."""
    table = {}
    for r in results["records"]:
        if r["kind"] == "speed" and r["status"] == "ok":
            key = (r["mode"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"])
            table.setdefault(key, {})[r["peer"]] = r["tflops"]
    return table


def _peer_names(results):
    return [p.name for p in PEERS if results["peers"].get(p.name, {}).get("available")]


def _config_label(mode, dtype, head_dim, causal):
    return f"{'fwd+bwd' if mode == 'fwd_bwd' else 'fwd'} {dtype} d={head_dim} {'causal' if causal else 'full'}"


def ratio_rows(results):
    """Per configuration (mode, dtype, head dim, causal): flashdoc's speed ratio to each peer, as the geometric
    mean and the minimum over N >= RATIO_MIN_SEQLEN (over every N if the sweep has none that long)."""
    speed = _speed(results)
    peers = [p for p in _peer_names(results) if p != "flashdoc"]
    seqlens = results["sweep"]["seqlens"]
    use = [n for n in seqlens if n >= RATIO_MIN_SEQLEN] or seqlens
    rows = []
    for mode in results["sweep"]["modes"]:
        for dtype in results["sweep"]["dtypes"]:
            for d in results["sweep"]["head_dims"]:
                for causal in results["sweep"]["causals"]:
                    cells = {}
                    for peer in peers:
                        ratios = [speed[k]["flashdoc"] / speed[k][peer] for n in use
                                  if "flashdoc" in speed.get(k := (mode, dtype, d, causal, n), {})
                                  and peer in speed.get(k, {})]
                        cells[peer] = None if not ratios else dict(
                            geomean=math.exp(sum(map(math.log, ratios)) / len(ratios)), min=min(ratios), n=len(ratios))
                    rows.append(dict(mode=mode, dtype=dtype, head_dim=d, causal=causal, ratios=cells))
    return rows, peers, use


def ratio_cells(results, mode, peer, head_dims, causals=(False, True)):
    """The cells of ``ratio_rows`` (geomean, min, n) for flashdoc against peer in this mode at these head dims and
    maskings, both dtypes; configurations where the peer was not measured are left out."""
    rows, _, _ = ratio_rows(results)
    return [row["ratios"][peer] for row in rows
            if row["mode"] == mode and row["head_dim"] in head_dims and row["causal"] in causals
            and row["ratios"].get(peer)]


def ratio_range(results, mode, peer, head_dims, causals=(False, True), stat="geomean"):
    """(lowest, highest) over ``ratio_cells`` of each configuration's geometric mean over N (stat="geomean") or
    its minimum (stat="min"). The numbers a page's prose quotes from the ratio table."""
    vals = [cell[stat] for cell in ratio_cells(results, mode, peer, head_dims, causals)]
    if not vals:
        raise ValueError(f"no {mode} ratio to {peer!r} at head dims {list(head_dims)} in these results")
    return min(vals), max(vals)


def short_ratios(results, peer):
    """flashdoc's speed ratio to peer in every row shorter than RATIO_MIN_SEQLEN (512 and 1k tokens in the full
    sweep): the rows the ratio table leaves out, where host time per call is a large part of the wall time."""
    return [row["flashdoc"] / row[peer] for key, row in _speed(results).items()
            if key[4] < RATIO_MIN_SEQLEN and "flashdoc" in row and peer in row]


def causal_full_ratios(results, min_n=0, max_n=None):
    """{(dtype, head_dim, N): flashdoc's causal forward TFLOP/s over its full forward's} for min_n <= N <= max_n
    (TFLOP/s count only the unmasked half of a causal call's work, so equal efficiency reads 1.0)."""
    speed = _speed(results)
    ratios = {}
    for (mode, dtype, d, causal, n), row in speed.items():
        full = speed.get((mode, dtype, d, False, n), {})
        if (mode == "fwd" and causal and min_n <= n and (max_n is None or n <= max_n)
                and "flashdoc" in row and "flashdoc" in full):
            ratios[(dtype, d, n)] = row["flashdoc"] / full["flashdoc"]
    return ratios


def dtype_twins(results, threshold):
    """flashdoc's (mode, head_dim, causal, N) rows whose bfloat16 and float16 TFLOP/s differ by more than
    threshold (a fraction of the lower), with each dtype's record: both run the same kernels in the same
    configs, so a difference that large is a property of the run (host time, noise), not of the kernels."""
    recs = {}
    for r in results["records"]:
        if r["kind"] == "speed" and r["status"] == "ok" and r["peer"] == "flashdoc":
            recs.setdefault((r["mode"], r["head_dim"], r["causal"], r["seqlen"]), {})[r["dtype"]] = r
    return [(key, pair) for key, pair in sorted(recs.items())
            if len(pair) == 2 and max(x["tflops"] for x in pair.values())
            > (1 + threshold) * min(x["tflops"] for x in pair.values())]


def twins_table(results, threshold):
    """Markdown: the rows of ``dtype_twins``, with each dtype's TFLOP/s and its calls' 20th-80th percentile."""
    rows = dtype_twins(results, threshold)
    if not rows:
        return f"No row's bfloat16 and float16 speeds differ by more than {threshold:.0%} in this run."
    body = [[f"{'fwd+bwd' if mode == 'fwd_bwd' else 'fwd'} d={d} {'causal' if causal else 'full'}", _fmt_n(n)]
            + [f"{pair[dt]['tflops']:.0f} ({pair[dt]['ms_p20']:.2f}–{pair[dt]['ms_p80']:.2f} ms)"
               for dt in ("bf16", "fp16")]
            for (mode, d, causal, n), pair in rows]
    return _md_table(["configuration", "N", "bfloat16 TFLOP/s (calls' p20–p80)",
                      "float16 TFLOP/s (calls' p20–p80)"], body)


def _md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def ratio_table(results):
    """Markdown: one row per configuration, one column per peer, cells 'geomean× (min ×)'."""
    if not results["peers"]["flashdoc"]["available"]:
        return f"flashdoc was not measured: {results['peers']['flashdoc']['reason']}"
    rows, peers, use = ratio_rows(results)
    body = []
    for row in rows:
        cells = []
        for peer in peers:
            c = row["ratios"][peer]
            cells.append("—" if c is None else f"{c['geomean']:.2f}× (min {c['min']:.2f}×)")
        body.append([_config_label(row["mode"], row["dtype"], row["head_dim"], row["causal"])] + cells)
    header = ["configuration"] + [f"vs {p}" for p in peers]
    ns = ", ".join(_fmt_n(n) for n in use)
    return (f"flashdoc's speed (TFLOP/s) divided by each peer's: geometric mean over N = {ns}, and the "
            f"minimum; above 1× flashdoc is faster. — = not measured (see results.json for why).\n\n"
            + _md_table(header, body))


def tflops_table(results):
    """Markdown: every TFLOP/s number, one row per (configuration, N)."""
    speed = _speed(results)
    peers = _peer_names(results)
    body = []
    for mode, dtype, d, causal, n in _speed_configs_from(results):
        row = speed.get((mode, dtype, d, causal, n), {})
        cells = []
        for p in peers:
            if p not in row:
                cells.append("—")
            elif p != "flashdoc" and "flashdoc" in row:
                cells.append(f"{row[p]:.0f} ({row['flashdoc'] / row[p]:.2f}×)")
            else:
                cells.append(f"{row[p]:.0f}")
        body.append([_config_label(mode, dtype, d, causal), _fmt_n(n)] + cells)
    return ("TFLOP/s per peer; in brackets flashdoc's ratio to that peer.\n\n"
            + _md_table(["configuration", "N"] + peers, body))


def _speed_configs_from(results):
    s = results["sweep"]
    return _speed_configs(argparse.Namespace(**{k: s[k] for k in ("modes", "dtypes", "head_dims", "causals",
                                                                  "seqlens")}))


def memory_table(results):
    mem = {}
    for r in results["records"]:
        if r["kind"] == "memory" and "peer" in r:
            mem.setdefault(r["seqlen"], {})[r["peer"]] = (
                f"{r['peak_extra_bytes'] / 2**20:,.0f} MiB" if r["status"] == "ok" else "OOM"
                if "out of memory" in r["reason"] else "—")
    if not mem:
        return None
    peers = [p for p in MEMORY_PEERS if any(p in row for row in mem.values())]
    body = [[_fmt_n(n)] + [mem[n].get(p, "—") for p in peers] for n in sorted(mem)]
    return _md_table(["N"] + peers, body)


def target_rows(results):
    """Issue 4's targets, each with the worst value seen and whether it is met (None: nothing to judge)."""
    speed = _speed(results)
    out = []

    def worst_ratio(mode, peer, min_n):
        vals = [(row["flashdoc"] / row[peer], k) for k, row in speed.items()
                if k[0] == mode and k[4] >= min_n and "flashdoc" in row and peer in row]
        return min(vals) if vals else None

    for label, mode, peer, goal in [
        ("forward ≥ 1.1× FlexAttention (N ≥ 2k)", "fwd", "flex", 1.1),
        ("forward ≥ 1.0× cuDNN (N ≥ 2k, stretch)", "fwd", "sdpa-cudnn", 1.0),
        ("forward+backward ≥ 1.0× FlexAttention (N ≥ 2k)", "fwd_bwd", "flex", 1.0),
        ("forward+backward ≥ 1.5× SDPA-flash (N ≥ 2k)", "fwd_bwd", "sdpa-flash", 1.5),
    ]:
        w = worst_ratio(mode, peer, RATIO_MIN_SEQLEN)
        out.append((label, None if w is None else w[0] >= goal,
                    "—" if w is None else f"worst {w[0]:.2f}× at {_config_label(*w[1][:4])} N={_fmt_n(w[1][4])}"))
    w = min(((r, k) for k, r in causal_full_ratios(results, min_n=4096).items()), default=None)
    out.append(("causal forward ≥ 0.9× non-causal (N ≥ 4k)", None if w is None else w[0] >= 0.9,
                "—" if w is None else f"worst {w[0]:.2f}× at {w[1][0]} d={w[1][1]} N={_fmt_n(w[1][2])}"))
    mem = {}
    for r in results["records"]:
        if r["kind"] == "memory" and r["status"] == "ok":
            mem.setdefault(r["seqlen"], {})[r["peer"]] = r["peak_extra_bytes"]
    vals = [(row["flashdoc"] / row["sdpa-flash"], n) for n, row in mem.items()
            if "flashdoc" in row and row.get("sdpa-flash")]
    w = max(vals) if vals else None
    out.append(("peak extra memory ≤ 1.05× SDPA-flash", None if w is None else w[0] <= 1.05,
                "—" if w is None else f"worst {w[0]:.2f}× at N={_fmt_n(w[1])}"))
    fc = [r for r in results["records"] if r["kind"] == "first_call" and r["status"] == "ok"]
    out.append(("first call on a new shape < 30 s", (fc[0]["first_call_s"] < 30) if fc else None,
                f"{fc[0]['first_call_s']:.1f} s (forward {fc[0]['fwd_s']:.1f} s + backward {fc[0]['bwd_s']:.1f} s, "
                "fresh process, empty Triton cache)" if fc else "—"))
    return out


def targets_table(results):
    rows = [[label, {True: "met", False: "NOT met", None: "not measured"}[ok], detail]
            for label, ok, detail in target_rows(results)]
    return _md_table(["issue 4 target", "status", "measured"], rows)


def summary_text(results):
    parts = [f"## flashdoc vs peers on {results['gpu']} ({results['date']})"]
    for note in (results.get("note"), results.get("interrupted")):
        if note:
            parts.append(f"NOTE: {note}")
    skipped = {p: v["reason"] for p, v in results["peers"].items() if not v["available"]}
    if skipped:
        parts.append("Skipped peers: " + "; ".join(f"{p} ({r})" for p, r in skipped.items()))
    parts.append(ratio_table(results))
    mem = memory_table(results)
    if mem:
        parts.append("Peak extra GPU memory, causal forward, batch 1, "
                     f"{results['sweep']['memory_heads']} heads, d={results['sweep']['memory_head_dim']}:\n\n" + mem)
    parts.append(targets_table(results))
    return "\n\n".join(parts) + "\n"


def autotuned_table(results):
    """The autotuner's pick per kernel, one row per (dtype, head dim, masking, length bucket), and the fixed
    config of each Hopper kernel where one ran."""
    picks = results.get("flashdoc_autotuned") or []
    if not picks:
        return "No autotuning in this run (Triton's interpreter runs each kernel's first config)."
    cells = {}
    for p in picks:
        row = (p["dtype"], p["head_dim"], p["causal"], p["seq_bucket"])
        if p.get("gluon"):
            variants = [name for field, name in (("o_in_q", "O in Q"), ("wide", "wide"),
                                                 ("fused_dq", "+ dQ")) if p.get(field)]
            cell = f"{p['block_m']}×{p['block_n']} s{p['num_stages']} c{p['consumers']}"
            cell += f" {', '.join(variants)}" if variants else ""
            cell += " (Gluon)"
        else:
            cell = f"{p['block_m']}×{p['block_n']} s{p['num_stages']} w{p['num_warps']}"
        cells.setdefault(row, {})[p["kernel"]] = cell
        if p.get("fused_dq"):
            cells[row]["dq"] = "in dK/dV"
    nbsp = "\u00a0"  # keeps each cell on one line in the page's narrow column
    rows = [[f"{dtype} d={d} {'causal' if causal else 'full'} N={_fmt_n(n)}".replace(" ", nbsp)]
            + [cells[dtype, d, causal, n].get(k, "—").replace(" ", nbsp) for k in ("fwd", "dkdv", "dq")]
            for (dtype, d, causal, n) in sorted(cells)]
    header = ["configuration (N: its length bucket)", "forward", "dK/dV", "dQ"]
    return _md_table(header, rows) + (
        "\n\nEach cell: BLOCK_M query rows × BLOCK_N keys, s pipeline stages, w warps. The forward and dQ kernels "
        "keep their query rows and stream the keys, BLOCK_N per step; the dK/dV kernel keeps its keys and streams "
        "the query rows. (Gluon): the Hopper kernel, whose config is fixed (no autotuning); c consumer warpgroups "
        "of 4 warps, each with its own BLOCK_M query rows (forward, dQ) or BLOCK_N keys (dK/dV); O in Q: the "
        "forward stages its output in the query tiles; wide: the two dK/dV consumers share BLOCK_N keys and split "
        "the head dim; + dQ: the fused backward, whose dK/dV kernel also computes dQ (no dQ kernel runs). — : the "
        "kernel did not run in that row.")


def write_tables(results, out_dir):
    header = f"<!-- {results['gpu']}, torch {results['torch']}, triton {results['triton']}, {results['date']} -->\n"
    if results.get("note"):
        header += f"\n**{results['note']}**\n"
    (out_dir / "ratios.md").write_text(header + "\n" + ratio_table(results) + "\n")
    (out_dir / "tflops.md").write_text(header + "\n" + tflops_table(results) + "\n")
    mem = memory_table(results)
    targets = targets_table(results) + ("\n\nPeak extra GPU memory (causal forward):\n\n" + mem if mem else "")
    (out_dir / "targets.md").write_text(header + "\n" + targets + "\n")
    (out_dir / "autotuned.md").write_text(header + "\n" + autotuned_table(results) + "\n")
    return ["ratios.md", "tflops.md", "targets.md", "autotuned.md"]


def _fmt_n(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def write_plots(results, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = _speed(results)
    s = results["sweep"]
    styles = {p.name: p.style for p in PEERS}
    peers = _peer_names(results)
    cpu = results["device"] == "cpu"
    written = []
    columns = [(m, c) for m in s["modes"] for c in s["causals"]]
    for dtype in s["dtypes"]:
        fig, axes = plt.subplots(len(s["head_dims"]), len(columns), squeeze=False, sharex=True,
                                 figsize=(3.6 * len(columns), 2.8 * len(s["head_dims"]) + 0.8))
        for i, d in enumerate(s["head_dims"]):
            for j, (mode, causal) in enumerate(columns):
                ax = axes[i][j]
                for p in peers:
                    pts = [(n, speed[k][p]) for n in s["seqlens"]
                           if p in speed.get(k := (mode, dtype, d, causal, n), {})]
                    if pts:
                        ax.plot(*zip(*pts), label=p, markersize=4, **styles[p])
                ax.set_xscale("log", base=2)
                ax.set_xticks(s["seqlens"], [_fmt_n(n) for n in s["seqlens"]])
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.set_title(_config_label(mode, dtype, d, causal), fontsize=9)
                if j == 0:
                    ax.set_ylabel("TFLOP/s")
                if i == len(s["head_dims"]) - 1:
                    ax.set_xlabel("sequence length N")
        handles = {}  # label -> the first line drawn with it
        for ax in axes.flat:
            for h, l in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(l, h)
        if handles:  # (a run stopped before its first timing has none)
            fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8,
                       bbox_to_anchor=(0.5, 0))
        title = f"Attention throughput, {dtype}, {results['gpu']} — {s['total_tokens']} tokens per batch"
        fig.suptitle(("CPU SMOKE RUN, NUMBERS NOT MEANINGFUL\n" if cpu else "") + title, fontsize=10)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        name = f"tflops_{dtype}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    fig, ax = plt.subplots(figsize=(6, 4))
    mem = [r for r in results["records"] if r["kind"] == "memory" and "peer" in r]
    for p in MEMORY_PEERS:
        pts = [(r["seqlen"], r["peak_extra_bytes"] / 2**20) for r in mem if r["peer"] == p and r["status"] == "ok"]
        if pts:  # sdpa-flash drawn larger: flashdoc's line often lies right on top of it
            ax.plot(*zip(*pts), label=p, **dict(styles[p], markersize=9 if p == "sdpa-flash" else 5))
        oom = [r["seqlen"] for r in mem if r["peer"] == p and "out of memory" in r.get("reason", "")]
        if oom and pts:
            ax.annotate(f"{p}: out of memory at N={_fmt_n(oom[0])}", xy=pts[-1], xytext=(5, -12),
                        textcoords="offset points", fontsize=8)
    if mem:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ns = sorted({r["seqlen"] for r in mem})
        ax.set_xticks(ns, [_fmt_n(n) for n in ns])
        ax.legend()
        ax.grid(alpha=0.3, which="both")
    else:
        ax.text(0.5, 0.5, "no memory measurements:\nthey need a CUDA device", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("peak extra memory (MiB)")
    ax.set_title(f"Causal forward, batch 1, {s['memory_heads']} heads, d={s['memory_head_dim']}, {s['memory_dtype']}"
                 f"\n{results['gpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_dir / "memory.png", dpi=110)
    plt.close(fig)
    written.append("memory.png")
    return written


# ---------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------


def _ints(text):
    return tuple(int(x) for x in text.split(","))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m flashdoc.bench", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="bench-out", help="output folder (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a small smoke subset (bf16, d=128, N=1k/4k/16k)")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                        help="cpu = tiny shapes whose numbers mean nothing (default: cuda if available)")
    parser.add_argument("--peers", help=f"comma-separated subset of: {', '.join(p.name for p in PEERS)}")
    parser.add_argument("--modes", help="comma-separated subset of: fwd, fwd_bwd")
    parser.add_argument("--dtypes", help="comma-separated subset of: bf16, fp16")
    parser.add_argument("--head-dims", type=_ints, help="e.g. 64,128,256")
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--seqlens", type=_ints, help="e.g. 1024,4096,16384")
    parser.add_argument("--memory-seqlens", type=_ints, help="e.g. 4096,65536; 0 to skip the memory curve")
    parser.add_argument("--warmup-ms", type=float, help="do_bench warm-up budget per measurement")
    parser.add_argument("--rep-ms", type=float, help="do_bench measuring budget per measurement")
    parser.add_argument("--naive-max-seqlen", type=int, help="time naive attention up to this N")
    parser.add_argument("--passes", type=int, help="time every configuration this many times and keep the "
                        "lowest median (default 2 on a GPU)")
    parser.add_argument("--no-first-call", action="store_true", help="skip the cold first-call measurement")
    parser.add_argument("--precompile-workers", type=int,
                        help="processes compiling kernels ahead of the timing (0: none; default: min(8, CPUs/2))")
    parser.add_argument("--no-pin-cpu", action="store_true",
                        help="time without pinning the process to one CPU (the short rows then vary more)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    overrides = {}
    if args.modes:
        overrides["modes"] = tuple(args.modes.split(","))
    if args.dtypes:
        overrides["dtypes"] = tuple(args.dtypes.split(","))
    if args.head_dims:
        overrides["head_dims"] = args.head_dims
    if args.causal != "both":
        overrides["causals"] = (args.causal == "yes",)
    if args.seqlens:
        overrides["seqlens"] = args.seqlens
    if args.memory_seqlens:
        overrides["memory_seqlens"] = tuple(n for n in args.memory_seqlens if n > 0)
    if args.warmup_ms is not None:
        overrides["warmup_ms"] = args.warmup_ms
    if args.rep_ms is not None:
        overrides["rep_ms"] = args.rep_ms
    if args.naive_max_seqlen is not None:
        overrides["naive_max_seqlen"] = args.naive_max_seqlen
    if args.passes is not None:
        if args.passes < 1:
            parser.error(f"--passes must be at least 1, got {args.passes}")
        overrides["passes"] = args.passes
    if args.no_first_call:
        overrides["first_call"] = False
    if args.no_pin_cpu:
        overrides["pin_cpu"] = False
    if args.precompile_workers is not None:
        overrides["precompile_workers"] = args.precompile_workers
    # `timeout` and job schedulers stop a run with SIGTERM: turn it into KeyboardInterrupt, so that what was
    # measured until then is still written out.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run_benchmark(
            out_dir=args.out, quick=args.quick, device=None if args.device == "auto" else args.device,
            peers=args.peers.split(",") if args.peers else None, progress=not args.no_progress, **overrides,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
