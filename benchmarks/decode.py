"""Decode attention at the memory-bandwidth limit: flashdoc's ``flash_attn_with_kvcache`` against SDPA (cuDNN and
flash backends), FlexAttention's decoding kernel, flashdoc's own training forward and a device-to-device copy,
on one GPU in one run.

    python3 benchmarks/decode.py --out OUT            # the benchmark: OUT/decode.json, decode.md, decode_roofline.png
    python3 benchmarks/decode.py --out OUT --sweep    # time candidate split-KV configs: OUT/decode_sweep.{json,md}
    python3 benchmarks/decode.py --out OUT --sweep --graph --points 1x4096,1x32768 --configs 128,4,3,1 128,8,3,1
                                                      # some configs at small points, timed as CUDA graphs
    python3 benchmarks/decode.py --out OUT --quick    # a few points, for a smoke run
    python3 benchmarks/decode.py --out OUT --smoke    # tiny shapes on the CPU (the default without a GPU)
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python benchmarks/decode.py --aot
                                                      # compile the configs for sm_90 without a GPU
                                                      # (a Triton 3.6 wheel unpacked in /tmp/t36)

The shape is a decode step of a Llama-style model: bf16, 32 query heads sharing 8 KV heads (GQA), head dim 128,
one new query per sequence, batch 1, 8 and 64 with caches of 4k, 32k and 128k tokens (points whose caches do
not fit in memory are skipped). The figure of merit is the *effective bandwidth*: the bytes of K and V the step
must read (batch x cache x KV heads x head dim x 2 bytes x 2), divided by its time. A copy moves each byte in
and out once; its bandwidth (bytes read + bytes written per second) is the ceiling a kernel that reads the cache
once can approach.

Two timers, both recorded for every point, and the targets checked on each:

- ``do_bench``: ``triton.testing.do_bench``'s median, CUDA events around each call, with Triton's 256 MB write
  between calls so that every call reads the cache from HBM, not from the 60 MB L2 (a decode step in a model
  follows other layers that evict it). The events time the GPU, but where a call's host work outlasts the GPU
  work queued before it (the smallest points), the host work is timed too.
- ``graph``: 20 calls captured in one CUDA graph and replayed, the time per call: what a serving engine that
  captures its decode step sees, with no host work. Where one cache would stay in L2 between calls, the calls
  cycle over several copies of it (together at least four times L2), so every call still reads from HBM. Each
  point's methods are timed this way in three rounds, in a rotated order, and each keeps its median round: one
  replay takes a tenth of a second, short enough for a passing slowdown of the GPU to take a single method's
  figure down by 5%, which a comparison inside the point would read as a difference between kernels.

Without a GPU (``--smoke``, or ``run_benchmark(out, smoke=True)``) the same code runs tiny float32 shapes on the
CPU, flashdoc's kernels in Triton's interpreter, one timed call per point and no FlexAttention or cuDNN: a check
that the script and its outputs work, whose numbers mean nothing.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: the checkout's flashdoc
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flashdoc  # noqa: E402, I001  (first: without a GPU it turns on Triton's interpreter)
import triton  # noqa: E402

from benchmarks.report import shape_label  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402
from flashdoc.kernels.forward import attn_fwd  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
BATCHES = (1, 8, 64)
CACHES = (4096, 32768, 131072)
PAGE_SIZES = (16, 64, 256)
DTYPE = torch.bfloat16
DEVICE = "cuda"
# The CPU smoke run's shape and points (``smoke_shape``): small enough for Triton's interpreter.
SMOKE = dict(HEADS=4, KV_HEADS=2, HEAD_DIM=32, PAGE_SIZES=(16, 32), DTYPE=torch.float32, DEVICE="cpu")
SMOKE_POINTS = [(1, 64), (2, 128)]
# Methods that need a GPU (FlexAttention compiles for CUDA; cuDNN is CUDA's): recorded as missing on the CPU.
GPU_METHODS = ("sdpa-cudnn", "flex")
GRAPH_CALLS = 20
GRAPH_ROUNDS = 3  # graph timings per method and point, in rotated order; the row keeps the median
L2_BYTES = 60 * 2**20  # the H200's L2
L2_MULTIPLE = 4  # the graph timing's copies of a point's inputs add up to at least this many L2s
# The targets: a ratio to each SDPA backend at every point; a share of the copy bandwidth where the cache holds
# at least this many tokens in all; paged within this fraction of contiguous.
COPY_SHARE, COPY_SHARE_MIN_TOKENS, PAGED_SLACK = 0.85, 8 * 32768, 0.05


def kv_bytes(batch, cache, n_kv=None, head_dim=None, dtype=None):
    """Bytes of K and V a decode step reads (by default at the run's shape)."""
    n_kv, head_dim, dtype = n_kv or KV_HEADS, head_dim or HEAD_DIM, dtype or DTYPE
    return 2 * batch * cache * n_kv * head_dim * torch.finfo(dtype).bits // 8


def fits(batch, cache, copies=2.5):
    """Whether ``copies`` caches of this size fit in the GPU's free memory (the paged copy and SDPA's own)."""
    if DEVICE != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info()
    return copies * kv_bytes(batch, cache) < free


@contextlib.contextmanager
def smoke_shape():
    """The CPU smoke run's shape (``SMOKE``) in this module's constants, restored afterwards."""
    module = globals()
    saved = {name: module[name] for name in SMOKE}
    module.update(SMOKE)
    try:
        yield
    finally:
        module.update(saved)


# ---------------------------------------------------------------------------------------------------------------
# The timed calls
# ---------------------------------------------------------------------------------------------------------------


def make_cache(batch, cache, page_size=None, seed=0):
    """q (B, 1, H, D), caches and their arguments for a full cache of ``cache`` tokens per sequence: contiguous
    (B, cache, Hk, D), or paged with pages of page_size in shuffled order."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    kw = dict(device=DEVICE, dtype=DTYPE)
    q = torch.randn(batch, 1, HEADS, HEAD_DIM, generator=g, **kw)
    seqlens = torch.full((batch,), cache, dtype=torch.int32, device=DEVICE)
    if page_size is None:
        shape, table = (batch, cache, KV_HEADS, HEAD_DIM), None
    else:
        pages = batch * cache // page_size
        shape = (pages, page_size, KV_HEADS, HEAD_DIM)
        table = torch.randperm(pages, device=DEVICE, generator=g).to(torch.int32).reshape(batch, -1)
    k_cache = torch.randn(shape, generator=g, **kw)
    v_cache = torch.randn(shape, generator=g, **kw)
    return q, k_cache, v_cache, seqlens, table


def flashdoc_call(q, k_cache, v_cache, seqlens, table, num_splits=0):
    def call():
        return flashdoc.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table, num_splits=num_splits
        )

    return call


def training_call(q, k_cache, v_cache):
    """flashdoc's training forward on the same cache: the kernel a decode step would get without a decode kernel
    (the cache is full, so no lengths are needed). Launched directly: ``flash_attn_func`` sends a call of this
    shape to the split-KV kernel."""
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)
    scale = q.shape[-1] ** -0.5

    def call():
        attn_fwd(q, k_cache, v_cache, out, lse, scale, causal=False, bottom_right=True)
        return out

    return call


def config_call(q, k_cache, v_cache, seqlens, table, config):
    """The split-KV kernel (and merge) under one DecodeConfig, without the public API's checks: for the sweep.
    (call, splits): call() runs it and returns the output it wrote; one split under Triton's interpreter."""
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)
    _, m_tiles = dk.query_tiles(HEADS // KV_HEADS, q.shape[1])
    capacity = k_cache.shape[1] * (1 if table is None else table.shape[1])
    splits = 1 if dk.INTERPRET else dk.splits_for(q.shape[0] * KV_HEADS * m_tiles, capacity, config, 0)

    def call():
        dk.decode_attention(
            q,
            k_cache,
            v_cache,
            out,
            lse,
            seqlens,
            0,
            0,
            None,
            table,
            HEAD_DIM**-0.5,
            False,
            (-1, -1),
            0.0,
            None,
            splits,
            config,
        )
        return out

    return call, splits


def sdpa_call(backend_name, q, k_cache, v_cache):
    """SDPA in its own layout (B, H, S, D), one backend only; its K and V are copies made once, untimed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    qs = q.transpose(1, 2).contiguous()
    ks, vs = k_cache.transpose(1, 2).contiguous(), v_cache.transpose(1, 2).contiguous()

    def call():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)

    return call


_flex = None


def flex_call(q, k_cache, v_cache):
    """FlexAttention compiled for these static shapes: a query length of 1 takes its decoding kernel (split-KV).

    It gets a block mask of 128-key blocks that masks nothing. Without one, FlexAttention treats the whole cache
    as a single block, and its decoding kernel, which splits a cache by whole blocks, leaves every split but the
    first empty: one program per sequence and KV head then reads the cache."""
    global _flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention, noop_mask

    if _flex is None:
        # one compile per shape; past dynamo's default limit it would silently run eagerly (see NOTES)
        torch._dynamo.config.recompile_limit = max(1024, torch._dynamo.config.recompile_limit)
        torch._dynamo.config.accumulated_recompile_limit = max(4096, torch._dynamo.config.accumulated_recompile_limit)
        _flex = torch.compile(flex_attention, dynamic=False)
    qs = q.transpose(1, 2).contiguous()
    ks, vs = k_cache.transpose(1, 2).contiguous(), v_cache.transpose(1, 2).contiguous()
    blocks = create_block_mask(noop_mask, None, None, qs.shape[2], ks.shape[2], device=qs.device)

    def call():
        return _flex(qs, ks, vs, block_mask=blocks, enable_gqa=True)

    return call


def time_ms(calls):
    """(do_bench median ms of calls[0], L2 flushed between calls; ms per call of a CUDA graph of GRAPH_CALLS calls
    cycling over ``calls``, which read different copies of the inputs). On the CPU (a smoke run): one call, timed
    with the host's clock, and no graph."""
    if DEVICE != "cuda":
        start = time.perf_counter()
        calls[0]()
        return (time.perf_counter() - start) * 1e3, None
    for call in calls:
        call()
    torch.cuda.synchronize()
    events_ms = triton.testing.do_bench(calls[0], warmup=25, rep=200, return_mode="median")
    return events_ms, graph_time_or_none(calls)


def graph_time_or_none(calls):
    """``graph_time_ms``, or None (with a note) for a method that cannot be captured."""
    try:
        return graph_time_ms(calls)
    except Exception as e:
        print(f"  (no CUDA-graph timing: {str(e).splitlines()[0][:100]})", flush=True)
        return None


def graph_time_ms(calls):
    """ms per call of a CUDA graph of GRAPH_CALLS calls cycling over ``calls`` (each called once on the capture
    stream first, which also compiles them outside the capture)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:
            call()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(GRAPH_CALLS):
                calls[i % len(calls)]()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(graph.replay, warmup=10, rep=100, return_mode="median") / GRAPH_CALLS
    del graph
    return ms


def copy_bandwidth():
    """Device-to-device copy of 2 GiB (16 MiB on the CPU): (bytes read + bytes written) per second, in bytes/s."""
    if DEVICE != "cuda":
        n = 2**24
        src, dst = torch.ones(n // 2, dtype=torch.bfloat16), torch.empty(n // 2, dtype=torch.bfloat16)
        dst.copy_(src)
        start = time.perf_counter()
        dst.copy_(src)
        return 2 * n / (time.perf_counter() - start)
    n = 2**31
    buffers = [torch.empty(n // 2, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    ms = triton.testing.do_bench(lambda: buffers[1].copy_(buffers[0]), warmup=25, rep=200, return_mode="median")
    buffers.clear()
    return 2 * n / (ms * 1e-3)


# ---------------------------------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------------------------------


def points(quick, only=None, smoke=False):
    """The (batch, cache) points: all of them, two (quick), those named in only ("1x4096,8x32768"), or the CPU
    smoke run's (smoke)."""
    if only:
        return [tuple(int(x) for x in p.split("x")) for p in only.split(",")]
    if smoke:
        return list(SMOKE_POINTS)
    if quick:
        return [(1, 4096), (8, 32768)]
    return [(b, c) for b in BATCHES for c in CACHES]


def copies_for(batch, cache):
    """How many copies of a point's inputs the graph timing cycles over: enough for L2_MULTIPLE x L2 (at most
    GRAPH_CALLS)."""
    return min(GRAPH_CALLS, max(1, -(-L2_MULTIPLE * L2_BYTES // kv_bytes(batch, cache))))


def measure(quick=False, verbose=True, only=None, smoke=False):
    """Every method at every point: a list of rows (batch, cache, method, ms, graph_ms, tbps, graph_tbps), and
    the copy bandwidth."""
    torch.manual_seed(0)
    copy = copy_bandwidth()
    if verbose:
        print(f"device-to-device copy: {copy / 1e12:.2f} TB/s", flush=True)
    rows = []
    try:
        _measure_points(points(quick, only, smoke), rows, verbose)
    except KeyboardInterrupt:  # a time limit's Ctrl-C: keep what was measured
        print("interrupted: writing the points measured so far", flush=True)
    return rows, copy


def _measure_points(pts, rows, verbose):
    for batch, cache in pts:
        if not fits(batch, cache):
            print(f"skip {batch} x {cache}: the caches do not fit", flush=True)
            continue
        n_copies = copies_for(batch, cache)
        builders = {
            "flashdoc": lambda i: flashdoc_call(*make_cache(batch, cache, seed=i)),
            "sdpa-cudnn": lambda i: sdpa_call("CUDNN_ATTENTION", *make_cache(batch, cache, seed=i)[:3]),
            "sdpa-flash": lambda i: sdpa_call("FLASH_ATTENTION", *make_cache(batch, cache, seed=i)[:3]),
            "flex": lambda i: flex_call(*make_cache(batch, cache, seed=i)[:3]),
            "flashdoc-training": lambda i: training_call(*make_cache(batch, cache, seed=i)[:3]),
        }
        for page in PAGE_SIZES:
            builders[f"flashdoc-paged{page}"] = lambda i, page=page: flashdoc_call(
                *make_cache(batch, cache, page, seed=i)
            )
        point_rows = {}
        for name, build in builders.items():
            if DEVICE != "cuda" and name in GPU_METHODS:
                point_rows[name] = dict(batch=batch, cache=cache, method=name, error="runs on a CUDA GPU only")
                continue
            point_rows[name] = _build_and_time(name, build, n_copies, batch, cache, verbose)
        if DEVICE == "cuda":
            _more_graph_rounds(point_rows, builders, n_copies, verbose)
        rows.extend(point_rows.values())


def _build_and_time(name, build, n_copies, batch, cache, verbose):
    """The row of one method at one point: both timers, or the error that stopped it."""
    calls = None
    try:
        calls = [build(i) for i in range(n_copies)]
        return _time_one(name, calls, batch, cache, verbose)
    except Exception as e:  # a backend without a kernel for this shape: recorded as missing
        print(f"{batch} x {cache} {name}: failed ({str(e).splitlines()[0][:120]})", flush=True)
        return dict(batch=batch, cache=cache, method=name, error=str(e).splitlines()[0][:200])
    finally:
        del calls
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


def _more_graph_rounds(point_rows, builders, n_copies, verbose):
    """Time each graph-timed method of one point GRAPH_ROUNDS - 1 more times, the order rotated each round (the
    inputs are built again: a large point holds one method's at a time), and keep each method's median round."""
    # the training forward's row shows a kernel starved by one query, not a contest: one round (its graphs take
    # up to a second a replay at the largest points)
    names = [n for n, row in point_rows.items() if row.get("graph_ms") is not None and n != "flashdoc-training"]
    for r in range(1, GRAPH_ROUNDS):
        for name in names[r:] + names[:r]:
            calls = [builders[name](i) for i in range(n_copies)]
            graph_ms = graph_time_or_none(calls)
            del calls
            torch.cuda.empty_cache()
            if graph_ms is not None:
                point_rows[name]["graph_rounds_ms"].append(graph_ms)
    for name in names:
        row = point_rows[name]
        row["graph_ms"] = statistics.median(row["graph_rounds_ms"])
        row["graph_tbps"] = row["bytes"] / row["graph_ms"] / 1e9
        if verbose:
            rounds = ", ".join(f"{row['bytes'] / ms / 1e9:.2f}" for ms in row["graph_rounds_ms"])
            print(f"{row['batch']:3d} x {row['cache']:6d}  {name:18s} graph rounds {rounds} TB/s", flush=True)


def _time_one(name, calls, batch, cache, verbose):
    n_bytes = kv_bytes(batch, cache)
    ms, graph_ms = time_ms(calls)
    row = dict(
        batch=batch,
        cache=cache,
        method=name,
        ms=ms,
        graph_ms=graph_ms,
        tbps=n_bytes / ms / 1e9,
        graph_tbps=None if graph_ms is None else n_bytes / graph_ms / 1e9,
        copies=len(calls),
        bytes=n_bytes,
    )
    if graph_ms is not None:
        row["graph_rounds_ms"] = [graph_ms]
    if verbose:
        graph = "" if graph_ms is None else f"  graph {row['graph_tbps']:.2f} TB/s"
        print(f"{batch:3d} x {cache:6d}  {name:18s} {ms * 1e3:9.1f} us  {row['tbps']:.2f} TB/s{graph}", flush=True)
    return row


def flush_bytes() -> int | None:
    """Bytes of the buffer ``do_bench`` writes between calls to empty L2 (Triton's own); None without a GPU."""
    if not torch.cuda.is_available():
        return None
    buffer = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    return buffer.numel() * buffer.element_size()


def timers() -> dict[str, str]:
    """Each timer's row key and how it timed, as the tables' headings say it (``TIMERS``, in full)."""
    flush = flush_bytes()
    written = f"{flush / 2**20:.0f} MiB written between calls" if flush else "L2 flushed between calls"
    return {
        "tbps": f"do_bench ({written})",
        "graph_tbps": f"CUDA graph of {GRAPH_CALLS} calls over copies of the inputs that together exceed "
        f"{L2_MULTIPLE} x L2 ({L2_BYTES / 2**20:.0f} MiB); each method's median of {GRAPH_ROUNDS} rounds, in "
        "rotated order",
    }


# each timer's row key and short name (the figure's title, decode.json); ``timers`` says how each one timed
TIMERS = {"tbps": "do_bench (L2 flushed between calls)", "graph_tbps": f"CUDA graph of {GRAPH_CALLS} calls"}


def _by(rows, key="tbps"):
    """{(batch, cache, method): bandwidth in TB/s under one timer}, for the rows that have it."""
    return {(r["batch"], r["cache"], r["method"]): r[key] for r in rows if r.get(key)}


def target_checks(rows, copy, key="tbps"):
    """One entry per target under one timer: what was asked, the worst point, met or not."""
    got = _by(rows, key)
    pts = sorted({(b, c) for b, c, _ in got})
    ours = {(b, c): got[(b, c, "flashdoc")] for b, c in pts if (b, c, "flashdoc") in got}
    checks = []
    for peer in ("sdpa-cudnn", "sdpa-flash"):
        ratios = [(ours[p] / got[(*p, peer)], *p) for p in ours if (*p, peer) in got]
        if ratios:
            worst = min(ratios)
            checks.append(
                dict(
                    target=f"flashdoc >= {peer} at every point",
                    worst=f"{worst[0]:.2f}x at {shape_label(*worst[1:])}",
                    met=worst[0] >= 1.0,
                )
            )
    shares = [(ours[p] * 1e12 / copy, *p) for p in ours if p[0] * p[1] >= COPY_SHARE_MIN_TOKENS]
    if shares:
        worst = min(shares)
        checks.append(
            dict(
                target=f"flashdoc >= {COPY_SHARE:.0%} of the copy where batch×cache >= {shape_label(8, 32768)}",
                worst=f"{worst[0]:.0%} at {shape_label(*worst[1:])}",
                met=worst[0] >= COPY_SHARE,
            )
        )
    paged = [
        (got[(*p, f"flashdoc-paged{size}")] / ours[p], size, *p)
        for p in ours
        for size in PAGE_SIZES
        if (*p, f"flashdoc-paged{size}") in got
    ]
    if paged:
        worst = min(paged)
        checks.append(
            dict(
                target=f"paged within {PAGED_SLACK:.0%} of contiguous at every point",
                worst=f"{worst[0]:.2f}x (page {worst[1]}) at {shape_label(*worst[2:])}",
                met=worst[0] >= 1 - PAGED_SLACK,
            )
        )
    return checks


def _ordered(rows):
    methods, pts = [], []
    for r in rows:
        if r["method"] not in methods:
            methods.append(r["method"])
        if (r["batch"], r["cache"]) not in pts:
            pts.append((r["batch"], r["cache"]))
    return methods, pts


def bandwidth_table(rows, copy, key="tbps"):
    """Markdown: one row per point, one column per method (TB/s), and flashdoc's share of the copy."""
    got = _by(rows, key)
    methods, pts = _ordered(rows)
    lines = ["| batch×cache | " + " | ".join(methods) + " | flashdoc / copy |", "|---|" + "---|" * (len(methods) + 1)]
    for b, c in pts:
        cells = [f"{got[(b, c, m)]:.2f}" if (b, c, m) in got else "—" for m in methods]
        share = f"{got[(b, c, 'flashdoc')] * 1e12 / copy:.0%}" if (b, c, "flashdoc") in got else "—"
        lines.append(f"| {shape_label(b, c)} | " + " | ".join(cells) + f" | {share} |")
    return "\n".join(lines) + "\n"


def targets_table(rows, copy, key="tbps"):
    lines = ["| claim | worst point | holds |", "|---|---|---|"]
    for t in target_checks(rows, copy, key):
        lines.append(f"| {t['target']} | {t['worst']} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def markdown(rows, copy, env):
    parts = [
        f"Decode step, {_dtype_name()}, H = {HEADS}, Hk = {KV_HEADS}, d = {HEAD_DIM}, seqlen_q = 1, on {env['gpu']} "
        f"(torch {env['torch']}, Triton {env['triton']}). Effective K+V bandwidth in TB/s; a device-to-device "
        f"copy moves {copy / 1e12:.2f} TB/s."
    ]
    for key, timer in timers().items():
        parts += [f"**Timed with {timer}**", bandwidth_table(rows, copy, key), targets_table(rows, copy, key)]
    return "\n\n".join(parts)


def paged_styles(methods) -> dict:
    """{paged method: (fill, hatch, hatch colour)}: one shade of flashdoc's blue per page size, smallest page
    lightest, none of them the contiguous cache's own blue (C0), so that each bar tells its page size apart by
    colour as well as by hatch, on screen and in grey print."""
    from matplotlib import colormaps, colors

    paged = sorted(
        (m for m in methods if m.startswith("flashdoc-paged")), key=lambda m: int(m.removeprefix("flashdoc-paged"))
    )
    # light to navy along the Blues map, around the middle blue where C0 sits
    stops = (
        (0.3, 0.5, 0.95) if len(paged) == 3 else [0.3 + 0.65 * i / max(len(paged) - 1, 1) for i in range(len(paged))]
    )
    hatches = ("///", "...", "xxx")
    styles = {}
    for i, (m, t) in enumerate(zip(paged, stops)):
        r, g, b, _ = colormaps["Blues"](t)
        # a hatch is drawn in the edge colour: navy on a light shade, white on a dark one
        ink = "#08306b" if 0.299 * r + 0.587 * g + 0.114 * b > 0.45 else "white"
        styles[m] = (colors.to_hex((r, g, b)), hatches[i % len(hatches)], ink)
    return styles


def roofline_figure(rows, copy, path, key="graph_tbps"):
    """Effective bandwidth of each method at each point (bars; one timer), under the copy's ceiling (a line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    got = _by(rows, key)
    methods, pts = _ordered(rows)
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(methods)
    colors = {"flashdoc": "C0", "sdpa-cudnn": "C1", "sdpa-flash": "C2", "flex": "C3", "flashdoc-training": "C7"}
    paged = paged_styles(methods)
    for i, m in enumerate(methods):
        xs = [j + (i - (len(methods) - 1) / 2) * width for j in range(len(pts))]
        ys = [got.get((b, c, m), 0.0) for b, c in pts]
        fill, hatch, ink = paged.get(m, (colors.get(m, "C0"), None, "white"))
        ax.bar(xs, ys, width, label=m, color=fill, hatch=hatch, edgecolor=ink, linewidth=0.5)
    ax.axhline(copy / 1e12, color="black", linewidth=1)
    ax.text(
        0.01,
        copy / 1e12 * 1.02,
        f"device-to-device copy {copy / 1e12:.2f} TB/s",
        transform=ax.get_yaxis_transform(),
        fontsize=9,
    )
    ax.set_xticks(range(len(pts)), [shape_label(b, c) for b, c in pts])
    ax.set_xlabel("batch × cache length (tokens)")
    ax.set_ylabel("effective K+V bandwidth (TB/s)")
    ax.set_ylim(0, copy / 1e12 * 1.2)
    ax.set_title(
        f"Decode step, {_dtype_name()}, {HEADS} query heads over {KV_HEADS} KV heads, d = {HEAD_DIM}, one query "
        f"({TIMERS[key]})",
        fontsize=10,
    )
    # taller, wider keys than the default, so that each page size's hatch shows in the legend
    ax.legend(fontsize=8, ncol=4, loc="upper left", bbox_to_anchor=(0, -0.14), handlelength=2.6, handleheight=1.4)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def _dtype_name():
    return str(DTYPE).removeprefix("torch.")


def run_benchmark(out_dir, quick=False, verbose=True, only=None, smoke=None):
    """Measure, then write decode.json, decode.md and decode_roofline.png into out_dir; returns the JSON dict.
    smoke: the CPU smoke run's tiny shapes (by default when there is no CUDA GPU)."""
    if smoke is None:
        smoke = not torch.cuda.is_available()
    if not smoke and not torch.cuda.is_available():
        raise ValueError("run_benchmark(smoke=False) measures a CUDA GPU; this machine has none: use smoke=True")
    if smoke:
        with smoke_shape():
            return _run_benchmark(out_dir, quick, verbose, only, smoke)
    return _run_benchmark(out_dir, quick, verbose, only, smoke)


def _run_benchmark(out_dir, quick, verbose, only, smoke):
    from benchmarks.run import environment as _environment

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = _environment(DEVICE)
    rows, copy = measure(quick, verbose, only, smoke)
    result = dict(
        env,
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        smoke=smoke,
        shape=dict(heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, seqlen_q=1, dtype=_dtype_name()),
        timers=TIMERS,
        copy_tbps=copy / 1e12,
        rows=rows,
        targets={key: target_checks(rows, copy, key) for key in TIMERS},
        decode_configs={f"{d}-{'full' if full else 'split'}": vars(c) for (d, full), c in dk.DECODE_CONFIGS.items()},
    )
    (out / "decode.json").write_text(json.dumps(result, indent=1))
    (out / "decode.md").write_text(markdown(rows, copy, env))
    roofline_figure(rows, copy, out / "decode_roofline.png")
    if verbose:
        print((out / "decode.md").read_text())
    return result


# ---------------------------------------------------------------------------------------------------------------
# The config sweep
# ---------------------------------------------------------------------------------------------------------------

SWEEP_POINTS = [(1, 131072), (8, 32768), (64, 32768)]
SWEEP_PAGES = (None, 16, 64)


def sweep_candidates():
    """Tiles of 32 to 256 keys, 2 to 4 stages (4 warps; also 8 from 64 keys), and 1, 2 or 4 programs per SM
    for the split heuristic (which only changes the split count, not the compiled kernel). Each (tile, warps,
    stages) compiles once per page mode and split mode: about 90 compiles, a few minutes on the H200's host."""
    tiles = [(bn, 4, st) for bn in (32, 64, 128) for st in (2, 3, 4)]
    tiles += [(bn, 8, st) for bn in (64, 128) for st in (2, 3, 4)] + [(256, 8, 2)]
    return [
        dk.DecodeConfig(bn, w, st, ppsm)
        for bn, w, st in tiles
        for ppsm in (1, 2, 4)
        if 2 * bn * HEAD_DIM * 2 * (st - 1) <= 220 * 1024
    ]  # K and V tiles in flight, in shared memory


def fills_gpu(batch: int) -> bool:
    """Whether a decode step of this batch (one query) has a program per SM without splits: the regime that
    ``decode_config`` keys its table on."""
    return dk.fills_gpu(batch * KV_HEADS, 0)


def sweep(out_dir, verbose=True, points=None, graph=False, configs=None):
    """Time every candidate config (or ``configs``) at a few points (or ``points``) and page sizes; write the
    table and the best config per page size and regime (split grid or full grid: the geometric mean of its
    bandwidth over that regime's points), with the entry ``decode_config`` would take for it.
    Timed with do_bench (L2 flushed), or with ``graph`` as CUDA graphs over copies of the inputs that exceed L2
    (``graph_time_ms``): the small points, whose steps take tens of microseconds, are only measured that way."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = points or SWEEP_POINTS
    rows = []
    for batch, cache in points:
        for page in SWEEP_PAGES:
            inputs = [make_cache(batch, cache, page, seed=i) for i in range(copies_for(batch, cache) if graph else 1)]
            n_bytes = kv_bytes(batch, cache)
            for config in configs or sweep_candidates():
                try:
                    calls = [config_call(*x, config) for x in inputs]
                    splits = calls[0][1]
                    if graph:
                        ms = graph_time_ms([call for call, _ in calls])
                    else:
                        ms = triton.testing.do_bench(calls[0][0], warmup=10, rep=60, return_mode="median")
                except Exception as e:  # out of shared memory or registers: not a candidate
                    if verbose:
                        print(f"{config}: {str(e).splitlines()[0][:100]}", flush=True)
                    continue
                row = dict(
                    batch=batch, cache=cache, page=page, splits=splits, ms=ms, tbps=n_bytes / ms / 1e9, **vars(config)
                )
                rows.append(row)
                if verbose:
                    print(
                        f"{batch} x {cache} page {page}: {config} splits {splits}: {row['tbps']:.2f} TB/s", flush=True
                    )
            del inputs
            torch.cuda.empty_cache()
    best = sweep_winners(rows, points, configs)
    (out / "decode_sweep.json").write_text(json.dumps(dict(rows=rows, best=best), indent=1))
    lines = [
        "| page | grid | block_n | warps | stages | programs/SM | geomean TB/s | table's config TB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    entries = []
    for b in best:
        current = "—" if b["current_tbps"] is None else f"{b['current_tbps']:.2f}"
        lines.append(
            f"| {b['page'] or 'contiguous'} | {'full' if b['fills_gpu'] else 'split'} | {b['block_n']} | "
            f"{b['warps']} | {b['stages']} | {b['programs_per_sm']} | {b['geomean_tbps']:.2f} | {current} |"
        )
        config = (
            f"DecodeConfig(block_n={b['block_n']}, warps={b['warps']}, stages={b['stages']}, "
            f"programs_per_sm={b['programs_per_sm']})"
        )
        entries.append(f"({HEAD_DIM}, {b['page'] or 0}, {b['fills_gpu']}): {config},")
    lines += [
        "",
        "Entries for the winners (flashdoc/kernels/decode.py: TUNED_CONFIGS for a page size, or DECODE_CONFIGS,",
        "keyed (head dim, grid fills the GPU), where every layout agrees):",
        "",
        "```python",
        *entries,
        "```",
    ]
    (out / "decode_sweep.md").write_text("\n".join(lines) + "\n")
    if verbose:
        print("\n".join(lines))


def sweep_winners(rows, points=None, configs=None) -> list:
    """For each page size and regime (``fills_gpu``) among the rows: the config with the best geometric mean of
    its bandwidth over that regime's points (only configs measured at all of them), and the table's own."""
    best = []
    for page in SWEEP_PAGES:
        for full in (False, True):
            regime = {(b, c) for b, c in points or SWEEP_POINTS if fills_gpu(b) == full}
            scores = {}
            for config in configs or sweep_candidates():
                got = [
                    r["tbps"]
                    for r in rows
                    if r["page"] == page
                    and (r["batch"], r["cache"]) in regime
                    and (r["block_n"], r["warps"], r["stages"], r["programs_per_sm"])
                    == (config.block_n, config.warps, config.stages, config.programs_per_sm)
                ]
                if regime and len(got) == len(regime):
                    scores[config] = torch.tensor(got).log().mean().exp().item()
            if scores:
                winner = max(scores, key=scores.get)
                current = dk.table_config(HEAD_DIM, page or 0, full)
                best.append(
                    dict(
                        vars(winner),
                        page=page,
                        fills_gpu=full,
                        geomean_tbps=scores[winner],
                        current_tbps=scores.get(current),
                    )
                )
    return best


# ---------------------------------------------------------------------------------------------------------------
# Compiling for sm_90 without a GPU
# ---------------------------------------------------------------------------------------------------------------


def aot():
    """Compile the decode kernels for sm_90 with the installed Triton (``code_hash.py --decode``'s list: the split-KV
    kernel under every table entry, paged and not, then every variant at once, the merge and the append kernel)
    and print registers, spills and shared memory: a check that runs without a GPU."""
    from benchmarks.kernels.code_hash import decode_kernels, ptxas_info

    for label, ck in decode_kernels():
        print(f"{label}: {ptxas_info(ck)}, {ck.metadata.shared // 1024} KiB shared (Triton)", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-results/decode", help="folder for the results")
    ap.add_argument("--quick", action="store_true", help="two points only (a smoke run)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (the default without a GPU)")
    ap.add_argument("--points", help="only these points, e.g. 1x4096,64x32768")
    ap.add_argument("--sweep", action="store_true", help="time candidate split-KV configs instead")
    ap.add_argument("--graph", action="store_true", help="with --sweep: time CUDA graphs, not do_bench")
    ap.add_argument(
        "--configs",
        nargs="+",
        type=lambda text: dk.DecodeConfig(*(int(x) for x in text.split(","))),
        help="with --sweep: only these configs, block_n,warps,stages,programs_per_sm (e.g. 128,4,3,1)",
    )
    ap.add_argument("--aot", action="store_true", help="compile for sm_90 without a GPU, print registers/spills")
    a = ap.parse_args(argv)
    if a.aot:
        aot()
        return
    smoke = a.smoke or not torch.cuda.is_available()
    if a.sweep:
        if smoke:
            sys.exit("benchmarks/decode.py --sweep times a GPU; this machine has none (--aot compiles without one)")
        sweep(a.out, points=points(False, a.points) if a.points else None, graph=a.graph, configs=a.configs)
    else:
        if smoke:
            print("No CUDA GPU (or --smoke): tiny shapes on the CPU, whose numbers mean nothing.", flush=True)
        run_benchmark(a.out, quick=a.quick, only=None if smoke else a.points, smoke=smoke)


if __name__ == "__main__":
    os.environ.setdefault("FLASHDOC_AUTOTUNE", "1")
    main()
