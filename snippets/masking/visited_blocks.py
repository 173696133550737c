"""Which key blocks each query block visits: drawn from the rule the kernels run.

``flashdoc.kernels.mask.block_ranges`` launches a tiny kernel that calls
``key_block_range``, the function the forward and dQ kernels call, for every tile of
query rows. Each tile visits keys [lo, hi); the whole key blocks in [full_lo, full_hi)
need no per-element mask; the rest of [lo, hi) is masked element by element; everything
else is skipped without being loaded.
"""

import matplotlib.pyplot as plt
import numpy as np

from flashdoc.kernels.mask import block_ranges

seqlen, block_m, block_n = 1024, 64, 64
masks = {
    "full": dict(causal=False),
    "causal": dict(causal=True),
    "sliding window (256, 0)": dict(causal=True, window_size=(256, 0)),
    "window (128, 128)": dict(causal=False, window_size=(128, 128)),
}


# --8<-- [start:ranges]
def block_map(**mask):
    """(query tiles, key blocks): 0 skipped, 1 masked per element, 2 mask-free."""
    # (tiles, 4): lo, full_lo, full_hi, hi
    ranges = block_ranges(seqlen, seqlen, block_m, block_n, **mask)
    grid = np.zeros((len(ranges), seqlen // block_n), dtype=int)
    for tile, (lo, full_lo, full_hi, hi) in enumerate(ranges.tolist()):
        for block in range(seqlen // block_n):
            start = block * block_n
            if full_lo <= start < full_hi:
                grid[tile, block] = 2
            elif lo <= start < hi:
                grid[tile, block] = 1
    return grid


# --8<-- [end:ranges]


fig, axes = plt.subplots(1, len(masks), figsize=(13, 4.2))
colors = plt.matplotlib.colors.ListedColormap(["#f2f2f2", "#f0a35e", "#3a75b0"])
print(
    f"{seqlen} queries and keys, tiles of {block_m} queries, blocks of {block_n} keys\n"
)
print("| mask | key blocks visited | of which masked | share of the full matrix |")
print("|---|---|---|---|")
for ax, (name, mask) in zip(axes, masks.items()):
    grid = block_map(**mask)
    ax.imshow(grid, cmap=colors, vmin=0, vmax=2)
    ylabel = "query tile" if ax is axes[0] else None
    ax.set(title=name, xlabel="key block", ylabel=ylabel)
    ax.set_xticks([]), ax.set_yticks([])
    visited, masked = int((grid > 0).sum()), int((grid == 1).sum())
    print(f"| {name} | {visited} | {masked} | {visited / grid.size:.0%} |")
handles = [plt.Rectangle((0, 0), 1, 1, color=colors(i)) for i in (2, 1, 0)]
fig.legend(
    handles,
    ["computed, no mask", "computed, masked", "skipped"],
    loc="lower center",
    ncol=3,
)
fig.tight_layout(rect=(0, 0.1, 1, 0.97))
fig.savefig("visited_blocks.png", dpi=120)
window = masks["sliding window (256, 0)"]
ranges = block_ranges(seqlen, seqlen, block_m, block_n, **window)[:6].tolist()
print("\n`key_block_range` for the sliding window, first 6 query tiles (keys):\n")
print("| query tile | lo | full_lo | full_hi | hi |")
print("|---|---|---|---|---|")
for tile, (lo, full_lo, full_hi, hi) in enumerate(ranges):
    print(f"| {tile} | {lo} | {full_lo} | {full_hi} | {hi} |")
