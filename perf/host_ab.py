"""Host time per call of the package's launch path against a snapshot's, in one process, rounds rotated.

    PYTHONPATH=.:perf python perf/host_ab.py perf/_host_old    (a folder with forward.py, backward.py, launch.py)

Times attn_fwd and attn_bwd with fixed configs on a tiny problem (1 x 128 x 2 x 64, bf16), where the GPU's
work is negligible, so the time per call is the host's. Across machines and sessions the same path read up to
30% apart (perf/NOTES.md, session 5): only a comparison inside one run means anything.
"""

import os
import pathlib
import statistics
import sys

# One CPU for this process and the threads it starts: unpinned, host timings on the VM do not repeat (NOTES.md,
# session 7)
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import torch  # noqa: E402

from ab import KERNELS, load_variant  # noqa: E402
from host_overhead import per_call_us  # noqa: E402  perf/ is this script's directory

ROUNDS = 5


def main():
    snapshot = pathlib.Path(sys.argv[1])
    variants = {"new": (KERNELS / "forward.py", KERNELS / "backward.py", KERNELS / "launch.py"),
                str(snapshot): (snapshot / "forward.py", snapshot / "backward.py", snapshot / "launch.py")}
    q, k, v, dout = (torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
    lse = torch.empty(1, 2, 128, device="cuda", dtype=torch.float32)
    calls = {}
    for name, paths in variants.items():
        fwd, bwd = load_variant(name, *(p.read_text() for p in paths))
        fwd_config = fwd.fwd_configs_for(64, q.dtype)[0]
        bwd_config = bwd.bwd_configs_for(64, q.dtype)[0]
        calls[name, "attn_fwd"] = lambda fwd=fwd, c=fwd_config: fwd.attn_fwd(q, k, v, out, lse, 0.125, True, True,
                                                                                config=c)
        calls[name, "attn_bwd"] = lambda bwd=bwd, c=bwd_config: bwd.attn_bwd(dout, q, k, v, out, lse, None, dq, dk,
                                                                                dv, 0.125, True, True, config=c)
    keys = list(calls)
    times = {key: [] for key in keys}
    for r in range(ROUNDS):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            times[key].append(per_call_us(calls[key]))
    for what in ("attn_fwd", "attn_bwd"):
        base = statistics.median(times["new", what])
        cells = [f"{name} {statistics.median(times[name, what]):.1f} us "
                 f"({statistics.median(times[name, what]) / base:.2f}x)" for name in variants]
        print(f"{what}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
