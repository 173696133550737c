"""Split-KV decode launches to read with Nsight Compute: a contiguous cache and a paged one at each point, each
call made once to compile, then once more to profile.

    ncu --clock-control none -k regex:_split_kv --launch-skip 4 --launch-count 4 \
        --section SpeedOfLight --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis \
        python3 benchmarks/kernels/ncu_decode.py --points 1x4096,1x32768 --page 16

(--launch-skip and --launch-count = 2 x the number of points.) The decode benchmark's shape: bf16, 32 query
heads over 8 KV heads, d = 128, one query per sequence, full caches, pages in shuffled order, the split count
and tile the public API picks. What a paged program pays per tile that a contiguous one does not (its stall
reasons, its instructions per tile) is the question this answers.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import decode as bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768")
    ap.add_argument("--page", type=int, default=16)
    a = ap.parse_args()
    calls = []
    for point in a.points.split(","):
        batch, cache = (int(x) for x in point.split("x"))
        for page in (None, a.page):
            calls.append(bench.flashdoc_call(*bench.make_cache(batch, cache, page)))
    for _ in range(2):  # compile every launch, then the launches to profile, in the same order
        for call in calls:
            call()


if __name__ == "__main__":
    main()
