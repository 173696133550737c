"""The ring schedule, drawn by the function the ring itself calls: at each step, which
query-key pairs of a causal attention matrix each rank computes, for both layouts."""

import matplotlib.pyplot as plt
import numpy as np
import torch

from flashdoc.parallel import ring_block, zigzag_shard

W, N_LOCAL = 4, 8  # 4 ranks, 8 tokens each: a 32 x 32 attention matrix
N = W * N_LOCAL


def positions(layout, rank):
    """The global token positions rank `rank` holds."""
    tokens = torch.arange(N)[None]
    if layout == "zigzag":
        return zigzag_shard(tokens, W, rank)[0]
    return tokens.chunk(W, dim=1)[rank][0]


# --8<-- [start:paint]
def paint(layout, step):
    """An N x N image: the rank computing each (query, key) pair at `step`, or -1."""
    image = np.full((N, N), -1)
    for rank in range(W):
        block = ring_block(rank, step, W, N_LOCAL, causal=True, layout=layout)
        if block is None:  # everything this rank could see at this step is masked
            continue
        source = (rank - step) % W  # whose keys and values this rank holds now
        for q in positions(layout, rank)[block.q].tolist():
            for k in positions(layout, source)[block.kv].tolist():
                if k <= q:  # causal; only the diagonal block (step 0) has masked pairs
                    image[q, k] = rank
    return image


# --8<-- [end:paint]


colors = plt.get_cmap("tab10").colors[:W]
cmap = plt.matplotlib.colors.ListedColormap(["#f4f4f4", *colors])
fig, axes = plt.subplots(2, W, figsize=(2.6 * W, 5.6), constrained_layout=True)
for row, layout in enumerate(("contiguous", "zigzag")):
    for step in range(W):
        ax = axes[row, step]
        image = paint(layout, step)
        ax.imshow(image + 1, cmap=cmap, vmin=0, vmax=W, interpolation="nearest")
        ax.set_xticks([]), ax.set_yticks([])
        pairs = [int((image == r).sum()) for r in range(W)]
        ax.set_title(f"step {step}: pairs per rank\n{pairs}", fontsize=9)
        if step == 0:
            ax.set_ylabel(f"{layout}\nquery position", fontsize=10)
        if row == 1:
            ax.set_xlabel("key position", fontsize=9)
handles = [
    plt.matplotlib.patches.Patch(color=c, label=f"rank {r}")
    for r, c in enumerate(colors)
]
fig.legend(handles=handles, loc="outside lower center", ncol=W, frameon=False)
fig.savefig("ring_schedule.png", dpi=150)

print(
    f"{W} ranks, {N_LOCAL} tokens each. "
    "At step s, rank r holds the keys and values of rank (r - s) mod W:"
)
print("step | " + " | ".join(f"rank {r}" for r in range(W)))
for step in range(W):
    held = [f"K/V {(r - step) % W}".ljust(6) for r in range(W)]
    print(f"{step:>4} | " + " | ".join(held))
for layout in ("contiguous", "zigzag"):
    images = [paint(layout, s) for s in range(W)]
    per_step = [[int((image == r).sum()) for r in range(W)] for image in images]
    total = [sum(col) for col in zip(*per_step)]
    print(
        f"{layout:>10}: causal pairs per rank over the ring = {total}; "
        f"the slowest rank at each step = {[max(p) for p in per_step]}"
    )
