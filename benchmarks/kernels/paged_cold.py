"""What does a cold start cost a paged decode call that it does not cost a contiguous one?

    python3 benchmarks/kernels/paged_cold.py [--points 1x4096,1x32768,8x4096,1x131072] [--pages 16,64,256]
    TRITON_INTERPRET=1 python benchmarks/kernels/paged_cold.py --smoke     # CPU: the protocol runs, times mean nothing

The decode benchmark times each call twice: ``do_bench``, which writes a buffer larger than L2 before every call,
and a CUDA graph of warm calls. Under the graph paged caches run within a few percent of contiguous ones; under
``do_bench`` one recording had paged calls at 1 x 32k taking 65-117 us against the contiguous call's 64 us, for
kernels of 52-53 us, while at 1 x 4k and 8 x 4k they cost a few microseconds more at most
(benchmarks/FINDINGS.md). The host does the same work at every point, so the suspects are on the GPU: after the
flush, a paged kernel fetches its block-table entries from memory, and its pages lie scattered over the pool, so
the addresses of many more of them must be translated again than a contiguous cache's few large runs need.

Each call's GPU time is measured under four conditions, in rounds whose order rotates: a CUDA graph holds the
condition's preparation and the call, replayed back to back, less a graph of the preparation alone
(``time_calls``: a call timed alone with CUDA events would measure the host's launch instead). The conditions:

- ``warm``: nothing between calls (the caches stay as far in L2 as they fit);
- ``flushed``: the flush buffer written before the call, as ``do_bench`` does;
- ``flushed, table read``: then the block table read again, so only its entries are warm;
- ``flushed, pages touched``: then one element of every page (and of every 2 MiB of a contiguous cache) read, which
  brings back the pages' address translations and a few cache lines, and almost none of the bytes.

If ``flushed`` is slower than ``warm`` for pages by more than for contiguous caches, and reading the table closes
that gap, the table is the cost; if only touching the pages does, the translations are.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks import decode as bench  # noqa: E402
from benchmarks.report import shape_label  # noqa: E402

CONDITIONS = ("warm", "flushed", "flushed, table read", "flushed, pages touched")
# The contiguous cache's stand-in for pages: one element of every 2 MiB (a large page of the GPU's memory).
RUN_BYTES = 2 * 2**20


def touch_rows(k_cache: torch.Tensor, table) -> torch.Tensor:
    """Indices along dim 0-1 of the first row of each page (paged) or of every RUN_BYTES (contiguous), flattened."""
    rows = k_cache.shape[0] * k_cache.shape[1]
    if table is not None:
        return torch.arange(0, rows, k_cache.shape[1], device=k_cache.device)
    row_bytes = k_cache[0, 0].numel() * k_cache.element_size()
    return torch.arange(0, rows, max(1, RUN_BYTES // row_bytes), device=k_cache.device)


def prepare(condition: str, inputs, flush: torch.Tensor):
    """A function that puts the GPU in ``condition`` before a timed call of ``inputs`` (q, k_cache, v_cache,
    cache_seqlens, block_table), or None for ``warm``, which needs nothing."""
    _, k_cache, v_cache, _, table = inputs
    if condition not in CONDITIONS:
        raise ValueError(f"condition is one of {CONDITIONS}, got {condition!r}")
    rows = touch_rows(k_cache, table)
    k_rows, v_rows = (c.flatten(0, 1) for c in (k_cache, v_cache))
    sink = torch.empty(2, device=k_cache.device, dtype=torch.float32)

    if condition == "warm":
        return None

    def before():
        flush.zero_()
        if condition == "flushed, table read" and table is not None:
            sink[0] = table.sum()
        elif condition == "flushed, pages touched":
            sink[0] = k_rows[rows, 0, 0].float().sum()
            sink[1] = v_rows[rows, 0, 0].float().sum()

    return before


def time_calls(call, before, reps: int) -> float:
    """Microseconds the GPU spends on one call after ``before()`` (None: nothing before it): on a GPU, the mean
    over ``reps`` back-to-back replays of a CUDA graph holding ``before()`` and the call, less the same for a graph
    holding ``before()`` alone.

    A call timed alone with CUDA events on an idle GPU measures its host instead: the start event fires at once and
    the end waits for the host to launch the kernels, which on the decode points takes longer than they run (an
    H100's host took 96-190 us a call for kernels of 13-50 us). In a graph the preparation and the call follow each
    other on the GPU with nothing between them, as a flushed ``do_bench`` call would if its host were infinitely
    fast."""
    if not torch.cuda.is_available():  # the smoke run: the protocol, with the host's clock
        import time

        us = []
        for _ in range(reps):
            if before is not None:
                before()
            start = time.perf_counter()
            call()
            us.append((time.perf_counter() - start) * 1e6)
        return statistics.median(us)
    if before is None:
        return _graph_us(call, reps)
    return _graph_us(lambda: (before(), call()), reps) - _graph_us(before, reps)


def _graph_us(work, reps: int) -> float:
    """Mean microseconds of one replay of a CUDA graph of ``work``, over ``reps`` replays back to back."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        work()  # warm-up on a side stream, as graph capture asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def measure(points, pages, reps: int, rounds: int) -> dict:
    """{(batch, cache, layout, condition): median us}, layout 'contiguous' or 'paged<size>', each the median of
    ``rounds`` rounds whose order of layouts and conditions rotates."""
    flush_bytes = bench.flush_bytes() or 2**20
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device=bench.DEVICE)
    times = {}
    for batch, cache in points:
        layouts = {"contiguous": bench.make_cache(batch, cache)}
        layouts.update({f"paged{p}": bench.make_cache(batch, cache, p) for p in pages})
        cases = [(layout, condition) for layout in layouts for condition in CONDITIONS]
        found = {case: [] for case in cases}
        for r in range(rounds):
            for layout, condition in cases[r:] + cases[:r]:
                inputs = layouts[layout]
                call = bench.flashdoc_call(*inputs)
                call()  # compiled and planned before it is timed
                found[layout, condition].append(time_calls(call, prepare(condition, inputs, flush), reps))
        for (layout, condition), us in found.items():
            times[batch, cache, layout, condition] = statistics.median(us)
        del layouts
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return times


def table(times: dict) -> str:
    """Markdown: a row per point and layout, a column per condition (us), and what flushing costs beyond warm."""
    lines = ["| point | layout | " + " | ".join(CONDITIONS) + " | flushed - warm |", "|---|---|" + "---|" * 5]
    keys = sorted({k[:3] for k in times}, key=lambda k: (k[0] * k[1], k[2] != "contiguous", k[2]))
    for batch, cache, layout in keys:
        us = [times[batch, cache, layout, c] for c in CONDITIONS]
        cells = " | ".join(f"{u:.1f}" for u in us)
        lines.append(f"| {shape_label(batch, cache)} | {layout} | {cells} | {us[1] - us[0]:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768,8x4096,1x131072")
    ap.add_argument("--pages", default="16,64,256")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the protocol runs")
    a = ap.parse_args()
    if a.smoke:
        with bench.smoke_shape():
            print(table(measure([(2, 128)], [16], reps=1, rounds=1)))
        return
    if not torch.cuda.is_available():
        sys.exit("paged_cold.py times CUDA calls: it needs a GPU (--smoke runs the protocol on the CPU)")
    points = [tuple(int(x) for x in p.split("x")) for p in a.points.split(",")]
    pages = [int(p) for p in a.pages.split(",")]
    print(table(measure(points, pages, a.reps, a.rounds)), flush=True)


if __name__ == "__main__":
    main()
