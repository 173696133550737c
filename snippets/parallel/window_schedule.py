"""The ring schedule under a causal sliding window, drawn by the functions the ring
itself calls: at each step, which query-key pairs each rank computes, for both layouts,
and how many steps the ring runs before no rank needs farther keys."""

import matplotlib.pyplot as plt
import numpy as np
import torch

from flashdoc.parallel import ring_blocks, ring_steps, zigzag_shard

W, N_LOCAL = 4, 8  # 4 ranks, 8 tokens each: a 32 x 32 attention matrix
N = W * N_LOCAL
WINDOW = (5, 0)  # each query sees itself and the 5 keys before it


def positions(layout, rank):
    """The global token positions rank `rank` holds."""
    tokens = torch.arange(N)[None]
    if layout == "zigzag":
        return zigzag_shard(tokens, W, rank)[0]
    return tokens.chunk(W, dim=1)[rank][0]


# --8<-- [start:paint]
def kept(block, i, j):
    """Whether a block keeps its local pair (i, j): its mask counts from its corner."""
    left, right = block.window
    if block.causal:
        right = 0
    return (left < 0 or j >= i - left) and (right < 0 or j <= i + right)


def paint(layout, step):
    """An N x N image: the rank computing each (query, key) pair at `step`, or -1;
    and the number of blocks (kernel calls) each rank runs."""
    image, calls = np.full((N, N), -1), []
    for rank in range(W):
        source = (rank - step) % W  # whose keys and values this rank holds now
        blocks = ring_blocks(rank, step, W, N_LOCAL, True, layout, WINDOW)
        for block in blocks:
            rows = positions(layout, rank)[block.q].tolist()
            keys = positions(layout, source)[block.kv].tolist()
            for i, q in enumerate(rows):
                for j, k in enumerate(keys):
                    if kept(block, i, j):
                        image[q, k] = rank
        calls.append(len(blocks))
    return image, calls


# --8<-- [end:paint]

colors = plt.get_cmap("tab10").colors[:W]
cmap = plt.matplotlib.colors.ListedColormap(["#f4f4f4", *colors])
fig, axes = plt.subplots(2, W, figsize=(2.6 * W, 5.6), constrained_layout=True)
for row, layout in enumerate(("contiguous", "zigzag")):
    steps = ring_steps(W, N_LOCAL, True, layout, WINDOW)
    for step in range(W):
        ax = axes[row, step]
        image, calls = paint(layout, step)
        ax.imshow(image + 1, cmap=cmap, vmin=0, vmax=W, interpolation="nearest")
        ax.set_xticks([]), ax.set_yticks([])
        if step < steps:
            pairs = [int((image == r).sum()) for r in range(W)]
            ax.set_title(f"step {step}: pairs per rank\n{pairs}", fontsize=9)
        else:
            ax.set_title(f"step {step}: not run", fontsize=9)
        if step == 0:
            ax.set_ylabel(f"{layout}\nquery position", fontsize=10)
        if row == 1:
            ax.set_xlabel("key position", fontsize=9)
handles = [
    plt.matplotlib.patches.Patch(color=c, label=f"rank {r}")
    for r, c in enumerate(colors)
]
fig.legend(handles=handles, loc="outside lower center", ncol=W, frameon=False)
fig.savefig("window_schedule.png", dpi=150)

print(f"{W} ranks, {N_LOCAL} tokens each, causal window {WINDOW}:")
for layout in ("contiguous", "zigzag"):
    steps = ring_steps(W, N_LOCAL, True, layout, WINDOW)
    painted = [paint(layout, s) for s in range(steps)]
    pairs = [sum(int((image == r).sum()) for image, _ in painted) for r in range(W)]
    calls = [sum(c[r] for _, c in painted) for r in range(W)]
    print(f"{layout}: {steps} of {W} steps")
    print(f"  pairs per rank {pairs}, kernel calls per rank {calls}")
