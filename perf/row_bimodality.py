"""Is flashdoc's d=64 full forward + backward at 2k bimodal, and is the second CUDA stream the cause? (session 15)

The row read 2.53-2.65 ms in most timings and 2.75-3.3 ms in others with the same autotuned configs, in the same
process (perf/NOTES.md, session 15). This times it again and again with the benchmark's own protocol
(bench.measure_speed: fresh inputs, the first call untimed, do_bench's median), in rounds whose order rotates:
flashdoc as shipped (dQ on a second stream, concurrent with dK/dV), flashdoc with dQ on the same stream after
dK/dV, FlexAttention and cuDNN (for the machine's own drift), in bf16 and fp16. Prints every timing, then per
variant the median, min and max and how many timings are over 1.08x the variant's minimum.

    PYTHONPATH=. python3 perf/row_bimodality.py --rounds 12      # on the H200, ~2 minutes
"""

import argparse
import os
import statistics
import time

from flashdoc import bench
from flashdoc.kernels import backward
from perf.d64_profile import _SameStream  # forked_stream's interface, launching on the current stream


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--seqlen", type=int, default=2048)
    args = ap.parse_args()
    available, _ = bench.load_peers("cuda", ["flashdoc", "flex", "sdpa-cudnn"])
    layouts = {p.name: p.layout for p in bench.PEERS}
    variants = [("flashdoc", "flashdoc", True), ("flashdoc-1-stream", "flashdoc", False),
                ("flex", "flex", None), ("sdpa-cudnn", "sdpa-cudnn", None)]
    sweep = bench.SWEEPS["full"]
    batch, heads = sweep.batch_heads(args.seqlen, 64)
    bench._pin_threads({min(os.sched_getaffinity(0))})
    forked = backward.forked_stream
    times = {}
    for r in range(args.rounds):
        for dtype in ("bf16", "fp16"):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for label, peer, two_streams in order:
                backward.forked_stream = forked if two_streams in (True, None) else _SameStream
                m = bench.measure_speed(available[peer], layouts[peer], "fwd_bwd", dtype, batch, heads, args.seqlen,
                                        64, False, sweep)
                backward.forked_stream = forked
                times.setdefault((label, dtype), []).append(m["ms"])
                print(f"{time.strftime('%H:%M:%S')} round {r:2d} {dtype} {label:18s} median {m['ms']:.3f} "
                      f"(p20 {m['ms_p20']:.3f}, p80 {m['ms_p80']:.3f}) ms", flush=True)
    print(f"\nN={args.seqlen}, d=64, full, fwd+bwd, {args.rounds} timings each:")
    for (label, dtype), ts in times.items():
        lo = min(ts)
        print(f"  {dtype} {label:18s} median {statistics.median(ts):.3f}  min {lo:.3f}  max {max(ts):.3f} ms; "
              f"{sum(t > 1.08 * lo for t in ts)} of {len(ts)} over 1.08x its min")


if __name__ == "__main__":
    main()
