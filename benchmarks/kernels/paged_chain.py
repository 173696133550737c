"""How much of the paged decode's gap at the small points is the chain of loads in front of its first tile?

    python3 benchmarks/kernels/paged_chain.py [--points 1x4096,1x32768,8x4096,1x131072] [--page 16]

With ``cache_seqlens`` a tensor, a paged program reads the sequence's length, then (through the split's key range,
which depends on it) its block-table entries, then its first K tile: three loads, each waiting for the one before,
where a contiguous cache's chain is two. With ``cache_seqlens`` an int the length is a kernel argument and each
chain is one load shorter. Timing both layouts both ways (CUDA graphs, as the decode benchmark's graph timer, three
rotated rounds, medians) says what removing one link is worth: if paged-with-an-int reads as fast as
contiguous-with-a-tensor, a paged kernel that issues its table loads beside the length's would close the gap.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks import decode as bench  # noqa: E402

ROUNDS = 3


def graph_medians(variants: dict, rounds: int = ROUNDS) -> dict:
    """Each variant's median ms per call under CUDA graphs (``bench.graph_time_ms`` over its list of calls), over
    ``rounds`` rounds whose order rotates, so that no variant always runs first."""
    times = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r:] + names[:r]:
            times[name].append(bench.graph_time_ms(variants[name]))
    return {name: statistics.median(ms) for name, ms in times.items()}


def report_point(batch: int, cache: int, variants: dict, note: str = "") -> None:
    """Time ``variants`` (``graph_medians``) at one point and print each one's TB/s and its ratio to the one named
    "contiguous", then free the point's inputs."""
    n_bytes = bench.kv_bytes(batch, cache)
    tbps = {name: n_bytes / ms / 1e9 for name, ms in graph_medians(variants).items()}
    cells = ", ".join(f"{name} {value:.3f} ({value / tbps['contiguous']:.3f}x)" for name, value in tbps.items())
    print(f"{batch} x {cache}: {cells}{note}", flush=True)
    variants.clear()
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x4096,1x32768,8x4096,1x131072")
    ap.add_argument("--page", type=int, default=16)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("paged_chain.py times CUDA graphs: it needs a GPU")
    print("batch x cache | contiguous, tensor | contiguous, int | paged, tensor | paged, int | TB/s, graphs")
    for point in a.points.split(","):
        batch, cache = (int(x) for x in point.split("x"))
        n_bytes = bench.kv_bytes(batch, cache)
        variants = {}
        for page in (None, a.page):
            inputs = [bench.make_cache(batch, cache, page, seed=i) for i in range(bench.copies_for(batch, cache))]
            layout = "contiguous" if page is None else "paged"
            variants[f"{layout}, tensor"] = [bench.flashdoc_call(*x) for x in inputs]
            variants[f"{layout}, int"] = [bench.flashdoc_call(*x[:3], cache, x[4]) for x in inputs]
        tbps = {name: n_bytes / ms / 1e9 for name, ms in graph_medians(variants).items()}
        cells = " | ".join(f"{value:.3f}" for value in tbps.values())
        ratio = tbps["paged, int"] / tbps["contiguous, tensor"]
        print(f"{batch} x {cache} | {cells} | paged int / contiguous tensor {ratio:.3f}", flush=True)
        del variants
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
