"""What a sliding window's Hopper programs cost besides their tiles.

Every program of the Hopper kernels (a forward work item, a dK/dV or dQ program) loads
the tile it keeps, fills the ring its tiles stream through and stores its result,
besides streaming its tiles. For windows (w, 0) of growing width and for dense causal
attention, ``window_fixed_cost.measure`` times each kernel of a forward + backward step
under torch.profiler, turns its time into microseconds a program, counts the tiles a
program streams, and fits time = fixed + per tile x tiles over the widths. Writes
fixed_cost.md (the fits and each kernel's fixed share of a program, also printed),
fixed_cost.json (everything measured) and fixed_cost.png (time a program against tiles).
"""
# flashdoc: gpu-only

import json

import matplotlib.pyplot as plt
import torch

# The benchmark is not part of the installed package: run this from a checkout of
# the repository.
from benchmarks.kernels import window_fixed_cost

if not torch.cuda.is_available():
    print(
        "(CPU smoke run: the Hopper kernels it times need an H100 or H200; "
        "the site shows the GPU's numbers.)"
    )
    raise SystemExit

# --8<-- [start:measure]
# One sequence of 16k tokens, 16 heads, head dim 128, bf16. For each window (w, 0)
# and for dense causal: each kernel's time a step, as microseconds a program (kernel
# time x SMs / programs: an SM runs its share of the programs one after another),
# and the tiles a program streams (from the masking core's block ranges). Over the
# widths, one line per kernel: time a program = fixed + per tile x tiles.
widths = [128, 256, 512, 1024, 2048, 4096]
result = window_fixed_cost.measure(n=16384, heads=16, widths=widths, steps=10)
# --8<-- [end:measure]

with open("fixed_cost.json", "w") as out:
    json.dump(result, out, indent=1)

programs = {(r["kernel"], r["window"]): r for r in result["programs"]}
fits = {f["kernel"]: f for f in result["fits"]}
# What a program streams, from its kernel's config (BLOCK_M, BLOCK_N, stages,
# consumers): key tiles of BLOCK_N for the forward and dQ, query tiles of BLOCK_M for
# dK/dV.
tile_of = {
    "forward": "{1}-key tiles",
    "dK/dV": "{0}-query tiles",
    "dQ": "{1}-key tiles",
}
lines = [
    (
        "| kernel | a program streams | fixed µs | µs a tile | causal's µs a tile "
        "| speed a tile against causal |"
    ),
    "|---|---|---|---|---|---|",
]
for name, f in fits.items():
    tiles = tile_of[name].format(*programs[(name, widths[0])]["config"])
    lines.append(
        f"| {name} | {tiles} | {f['fixed_us']:.1f} | {f['tile_us']:.2f} | "
        f"{f['causal_tile_us']:.2f} | {f['causal_tile_us'] / f['tile_us']:.2f}× |"
    )
lines += [
    "",
    (
        "The fixed cost's share of a program at each window width (keys to the left), "
        "with the tiles it streams:"
    ),
    "",
    "| window | " + " | ".join(fits) + " |",
    "|---|" + "---|" * len(fits),
]
for w in widths + [None]:
    cells = [
        f"{f['fixed_us'] / programs[(name, w)]['program_us']:.0%}"
        for name, f in fits.items()
    ]
    tiles = [f"{programs[(name, w)]['tiles']:.0f} tiles" for name in fits]
    lines.append(
        f"| {w or 'causal'} | "
        + " | ".join(f"{c} ({t})" for c, t in zip(cells, tiles))
        + " |"
    )
window_keys, causal_keys = (
    programs[("forward", w)]["config"][1] for w in (widths[0], None)
)
lines += [
    "",
    (
        f"Causal's forward streams {causal_keys}-key tiles (the count above); "
        f"its µs a tile are per {window_keys} keys, as the window's."
    ),
]
with open("fixed_cost.md", "w") as out:
    out.write("\n".join(lines) + "\n")
print(result["device"], "", *lines, sep="\n")

# Time a program against tiles a program: each window's point, each kernel's line from
# its intercept (the fixed cost), and dense causal's program (a star), its tiles counted
# in the window's tile width.
fig, (whole, narrow) = plt.subplots(1, 2, figsize=(9, 3.6))
for name, colour in zip(fits, ["C0", "C1", "C2"]):
    mine, causal = [programs[(name, w)] for w in widths], programs[(name, None)]
    scale = causal_keys / window_keys if name == "forward" else 1
    ends = [0, causal["tiles"] * scale]
    for ax in (whole, narrow):
        ax.plot(
            [r["tiles"] for r in mine],
            [r["program_us"] for r in mine],
            "o",
            color=colour,
            label=name,
        )
        ax.plot(
            ends,
            [fits[name]["fixed_us"] + fits[name]["tile_us"] * x for x in ends],
            "-",
            color=colour,
            lw=1,
        )
    whole.plot(
        ends[1], causal["program_us"], "*", color=colour, ms=12, mec="black", mew=0.5
    )
whole.plot(
    [], [], "*", color="white", ms=12, mec="black", mew=0.5, label="dense causal"
)
near = [
    r for r in result["programs"] if r["window"] is not None and r["window"] <= 1024
]
whole.set(title="Every window, and dense causal", ylabel="µs a program")
narrow.set(
    title="Windows up to 1,024 keys",
    xlim=(0, 1.1 * max(r["tiles"] for r in near)),
    ylim=(0, 1.2 * max(r["program_us"] for r in near)),
)
for ax in (whole, narrow):
    ax.set(xlabel="tiles a program streams")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
whole.legend()
fig.tight_layout()
fig.savefig("fixed_cost.png", dpi=120)
