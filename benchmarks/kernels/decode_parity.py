"""flashdoc's decode step against SDPA's cuDNN backend, over many rounds, where the recorded ratio sits within a
point of 1.0: is flashdoc behind there, or is the difference the comparison's own noise?

    PYTHONPATH=. python3 benchmarks/kernels/decode_parity.py --json parity.json      # a GPU: about two minutes
    PYTHONPATH=. python3 benchmarks/kernels/decode_parity.py --points 64x4096 --rounds 15

The recorded benchmark (``benchmarks/decode.py``) times each method in three rounds and keeps its median, and at
the points where the cache is large both kernels read it near the memory's peak, so its flashdoc / cuDNN ratio
lands on either side of 1.0 from one recording to the next. This times, at the benchmark's shape (bf16, 32 query
heads over 8 KV heads, d = 128, one query) and with its graph timer (20 calls in one CUDA graph, cycling over copies
of the inputs that L2 cannot hold together), five methods in every round, in an order rotated each round:

- ``flashdoc``: ``flash_attn_with_kvcache`` on flash-attn's cache layout (B, S, Hk, D), as the benchmark times it;
- ``flashdoc-head-major``: the same call on a strided view of caches laid out as SDPA's are, (B, Hk, S, D), where
  each KV head's keys are one contiguous run: the bytes cuDNN reads, in the order it finds them;
- ``flashdoc-full-cache``: the same call without ``cache_seqlens``, which the benchmark's full caches allow: the
  kernel then takes each sequence's length as a constant where the other reads it from memory before it can bound
  its loop and issue its first loads. Where the batch fills the GPU, each SM runs several programs one after the
  other, and pays that load's latency at the start of each; cuDNN, which SDPA gives no lengths, pays none;
- ``cudnn`` and ``cudnn-again``: SDPA's cuDNN backend twice, on inputs of their own. Their ratio is an A/A
  comparison: what one round's ratio moves by when nothing differs but the run.

The report gives, per point, each method's speed relative to ``cudnn`` in the same round (above 1: faster), as the
median over rounds with the least and the most, and the share of rounds at or above 1.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: the checkout's flashdoc and benchmarks
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import decode as bench  # noqa: E402  (imports flashdoc first)

DEFAULT_POINTS = "64x4096,8x32768,8x131072,1x131072"
BASELINE = "cudnn"


def head_major_cache(batch, cache, seed=0):
    """``bench.make_cache``'s contiguous inputs with K and V stored as (B, Hk, S, D) and passed as (B, S, Hk, D)
    views: the same values' bytes in SDPA's order."""
    q, k, v, seqlens, table = bench.make_cache(batch, cache, seed=seed)
    k_major, v_major = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    return q, k_major, v_major, seqlens, table


def full_cache_call(q, k_cache, v_cache, seqlens, table):
    """``bench.flashdoc_call`` without the lengths: every sequence of ``bench.make_cache``'s caches is full."""
    if not bool((seqlens == k_cache.shape[1]).all()):
        raise ValueError("full_cache_call: every sequence must fill its cache, or the call would read past it")
    return bench.flashdoc_call(q, k_cache, v_cache, None, table)


def builders(batch, cache):
    """The methods' call builders: ``build(i)`` makes the i-th copy of a method's inputs and returns its call."""
    return {
        "flashdoc": lambda i: bench.flashdoc_call(*bench.make_cache(batch, cache, seed=i)),
        "flashdoc-head-major": lambda i: bench.flashdoc_call(*head_major_cache(batch, cache, seed=i)),
        "flashdoc-full-cache": lambda i: full_cache_call(*bench.make_cache(batch, cache, seed=i)),
        "cudnn": lambda i: bench.sdpa_call("CUDNN_ATTENTION", *bench.make_cache(batch, cache, seed=i)[:3]),
        "cudnn-again": lambda i: bench.sdpa_call("CUDNN_ATTENTION", *bench.make_cache(batch, cache, seed=i)[:3]),
    }


def time_point(batch, cache, rounds, log=print):
    """{method: [ms per call, one a round]} at one point; each method's inputs are built once and its graph is
    captured again every round."""
    n_copies = bench.copies_for(batch, cache)
    calls = {name: [build(i) for i in range(n_copies)] for name, build in builders(batch, cache).items()}
    names = list(calls)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(bench.graph_time_ms(calls[name]))
        log(f"{batch} x {cache} round {r + 1}: " + ", ".join(f"{n} {times[n][-1] * 1e3:.2f} us" for n in names))
    return times


def summarize(times: dict, baseline: str = BASELINE) -> dict:
    """Per method: its median ms, and its speed relative to ``baseline`` round by round (baseline ms / its ms, so
    above 1 is faster): median, least, most, and the share of rounds at or above 1."""
    out = {}
    for name, ms in times.items():
        ratios = [b / m for b, m in zip(times[baseline], ms)]
        out[name] = dict(
            median_ms=statistics.median(ms),
            ratio_median=statistics.median(ratios),
            ratio_min=min(ratios),
            ratio_max=max(ratios),
            share_at_least_1=sum(r >= 1 for r in ratios) / len(ratios),
        )
    return out


def table(results: dict) -> str:
    """A markdown table: one row per point and method, the ratios to ``BASELINE`` in the same round."""
    lines = [
        f"| point | method | median us | / {BASELINE}, median | least | most | rounds >= 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for point, methods in results.items():
        for name, s in methods.items():
            if name == BASELINE:
                continue
            lines.append(
                f"| {point} | {name} | {s['median_ms'] * 1e3:.2f} | {s['ratio_median']:.4f} | {s['ratio_min']:.4f} "
                f"| {s['ratio_max']:.4f} | {s['share_at_least_1']:.0%} |"
            )
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default=DEFAULT_POINTS, help=f"batch x cache points (default {DEFAULT_POINTS})")
    ap.add_argument("--rounds", type=int, default=9, help="rounds per point (default 9)")
    ap.add_argument("--json", help="write the per-round times and the summary here")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("decode_parity.py times SDPA's cuDNN backend on a CUDA GPU; this machine has none")
    print(torch.cuda.get_device_name(), f"torch {torch.__version__}", flush=True)
    raw, results = {}, {}
    for batch, cache in bench.points(False, a.points):
        if not bench.fits(batch, cache, copies=6):
            print(f"skip {batch} x {cache}: five methods' inputs do not fit", flush=True)
            continue
        times = time_point(batch, cache, a.rounds, log=lambda line: print(line, flush=True))
        raw[f"{batch}x{cache}"] = times
        results[f"{batch}x{cache}"] = summarize(times)
        torch.cuda.empty_cache()
    print(table(results), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(dict(times_ms=raw, summary=results), indent=1) + "\n")


if __name__ == "__main__":
    main()
