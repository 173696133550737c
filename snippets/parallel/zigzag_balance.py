"""Causal work per rank in the ring, contiguous against zigzag, counted from the ring's
own schedule (flashdoc.parallel.ring_block): the query-key pairs each rank computes,
and the time the ring takes when every step waits for its slowest rank."""

import matplotlib.pyplot as plt
import torch

from flashdoc.parallel import ring_block, zigzag_shard


# --8<-- [start:work]
def work(layout, world_size, n_local):
    """pairs[step][rank]: the causal query-key pairs `rank` computes at `step`."""
    tokens = torch.arange(world_size * n_local)[None]
    if layout == "zigzag":
        held = [zigzag_shard(tokens, world_size, r)[0] for r in range(world_size)]
    else:
        held = list(tokens[0].chunk(world_size))
    pairs = []
    for step in range(world_size):
        row = []
        for rank in range(world_size):
            block = ring_block(rank, step, world_size, n_local, True, layout)
            if block is None:  # every pair masked: nothing to compute
                row.append(0)
                continue
            q = held[rank][block.q]
            k = held[(rank - step) % world_size][block.kv]
            row.append(int((k[None, :] <= q[:, None]).sum()))
        pairs.append(row)
    return pairs


# --8<-- [end:work]


N_LOCAL = 512  # tokens per rank (the shares do not depend on it, up to the diagonal)
print(
    f"{N_LOCAL} tokens per rank, causal. "
    f"Work in units of one full block ({N_LOCAL} x {N_LOCAL} pairs)."
)
lines = [
    "| ranks | layout | work per rank (min - max) | ring time: the slowest rank "
    "at each step, summed | even split (total / ranks) | efficiency bound |",
    "|---|---|---|---|---|---|",
]
for world_size in (2, 4, 8):
    for layout in ("contiguous", "zigzag"):
        pairs = work(layout, world_size, N_LOCAL)
        per_rank = [sum(p[r] for p in pairs) / N_LOCAL**2 for r in range(world_size)]
        ring_time = sum(max(p) for p in pairs) / N_LOCAL**2
        ideal = sum(per_rank) / world_size
        spread = f"{min(per_rank):.2f} - {max(per_rank):.2f}"
        lines.append(
            f"| {world_size} | {layout} | {spread} | {ring_time:.2f} | {ideal:.2f} "
            f"| {ideal / ring_time:.2f} |"
        )
table = "\n".join(lines) + "\n"
print(table)
with open("balance.md", "w") as f:
    f.write(table)

world_size = 8
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True, constrained_layout=True)
for ax, layout in zip(axes, ("contiguous", "zigzag")):
    pairs = work(layout, world_size, N_LOCAL)
    bottom = [0.0] * world_size
    cmap = plt.get_cmap("viridis")
    for step, row in enumerate(pairs):
        heights = [p / N_LOCAL**2 for p in row]
        ax.bar(
            range(world_size),
            heights,
            bottom=bottom,
            color=cmap(step / world_size),
            edgecolor="white",
            linewidth=0.5,
            label=f"step {step}",
        )
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_title(f"{layout}: causal work per rank, {world_size} ranks")
    ax.set_xlabel("rank")
    ax.set_xticks(range(world_size))
axes[0].set_ylabel("work (full blocks)")
axes[1].legend(loc="upper left", fontsize=7, ncol=2)
fig.savefig("zigzag_balance.png", dpi=150)
