"""How cu_seqlens index a packed batch: three sequences, padded and packed, and the
block-diagonal attention that a varlen kernel computes over the packed tokens."""

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

lengths = torch.tensor([5, 3, 7])
heads, head_dim = 2, 4

# --8<-- [start:pack]
# A right-padded batch, (batch, max_seqlen, heads, head_dim), and its padding mask.
batch, longest = len(lengths), int(lengths.max())
padded = torch.randn(batch, longest, heads, head_dim)
mask = torch.arange(longest)[None, :] < lengths[:, None]  # True for a real token

# Packed: the real tokens one after another, (total, heads, head_dim), no padding at
# all; index holds where each real token sits in the padded batch.
index = mask.flatten().nonzero().flatten()
packed = padded.reshape(batch * longest, heads, head_dim)[index]
# (batch + 1,): where each sequence starts
cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
max_seqlen = int(lengths.max())

# sequence b is rows cu_seqlens[b] : cu_seqlens[b + 1] of the packed tensor
for b in range(batch):
    assert torch.equal(
        packed[cu_seqlens[b] : cu_seqlens[b + 1]], padded[b, : lengths[b]]
    )
# --8<-- [end:pack]

print(f"lengths    {lengths.tolist()}")
print(
    f"padded     {tuple(padded.shape)}: {batch * longest} token slots, "
    f"{batch * longest - len(index)} of them padding"
)
print(f"packed     {tuple(packed.shape)}")
print(f"cu_seqlens {cu_seqlens.tolist()}   max_seqlen {max_seqlen}")
print(f"index      {index.tolist()}")

# The figure: the padded batch, the packed row with cu_seqlens, and the pairs a causal
# varlen kernel computes.
colors = ["#3b7dd8", "#e67e22", "#27ae60"]
fig = plt.figure(figsize=(11, 4.2))
top = fig.add_axes([0.08, 0.60, 0.50, 0.32])
bottom = fig.add_axes([0.08, 0.12, 0.50, 0.30])
right = fig.add_axes([0.64, 0.10, 0.33, 0.82])
for b in range(batch):
    for t in range(longest):
        color = colors[b] if t < lengths[b] else "#dddddd"  # grey: padding
        top.add_patch(plt.Rectangle((t, batch - 1 - b), 0.95, 0.9, color=color))
top.set_xlim(0, longest), top.set_ylim(0, batch)
top.set_yticks(
    [batch - 0.55 - b for b in range(batch)], [f"seq {b}" for b in range(batch)]
)
top.set_xticks([])
top.set_title(f"padded: ({batch}, {longest}) slots, grey is padding", fontsize=10)
total = int(cu_seqlens[-1])
for b in range(batch):
    for t in range(int(cu_seqlens[b]), int(cu_seqlens[b + 1])):
        bottom.add_patch(plt.Rectangle((t, 0), 0.95, 0.9, color=colors[b]))
arrow = dict(arrowstyle="->", lw=0.8)
for c in cu_seqlens.tolist():
    bottom.annotate(
        str(c), (c, 0.0), (c, -0.9), ha="center", fontsize=9, arrowprops=arrow
    )
bottom.set_xlim(0, longest * batch * 0.75), bottom.set_ylim(-1.2, 1)
bottom.axis("off")
bottom.set_title(
    f"packed: ({total},) tokens; cu_seqlens = {cu_seqlens.tolist()}", fontsize=10
)
seq_of = torch.repeat_interleave(torch.arange(batch), lengths)
pos = torch.cat([torch.arange(n) for n in lengths.tolist()])
computed = (seq_of[:, None] == seq_of[None, :]) & (pos[None, :] <= pos[:, None])
image = torch.ones(total, total, 3)
for b in range(batch):
    rgb = torch.tensor(plt.matplotlib.colors.to_rgb(colors[b]))
    image[(computed & (seq_of[:, None] == b))] = rgb
right.imshow(image.numpy(), interpolation="nearest", extent=(0, total, total, 0))
right.set_xticks(cu_seqlens.tolist())
right.set_yticks(cu_seqlens.tolist())
right.grid(True, color="#999999", lw=0.5)
right.set_xlabel("key (packed index)"), right.set_ylabel("query (packed index)")
right.set_title("causal varlen attention: one triangle per sequence", fontsize=10)
fig.savefig("cu_seqlens.png", dpi=130)
print(
    f"attention pairs computed: {int(computed.sum())} of the {total * total} "
    "in the packed square"
)
