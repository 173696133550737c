"""One attention head drawn three ways: raw scores, softmax weights, and the weights
under a causal mask.

The three heatmaps share one layout (same size, same axes, colour bar in the same
place), so an image-compare slider can wipe from any one of them to another."""

import math

import matplotlib.pyplot as plt
import torch

N, d = 24, 16  # 24 tokens, head dimension 16

# Queries and keys made from a sinusoidal code of each token's position, plus noise.
# Codes of nearby positions are similar, so every query scores its neighbours highest:
# the diagonal band of a local head.
gen = torch.Generator().manual_seed(0)
pos = torch.arange(N, dtype=torch.float32)[:, None]
freq = torch.linspace(0.05, 0.5, d // 2)  # radians per position, slow to fast
code = 1.2 * torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)
Q = code + 0.4 * torch.randn(N, d, generator=gen)
K = code + 0.4 * torch.randn(N, d, generator=gen)

# --8<-- [start:attention]
scores = Q @ K.T / math.sqrt(d)
weights = torch.softmax(scores, dim=-1)

# Causal: query i may only look at keys j <= i. Masked scores become -inf, so exp()
# makes them exactly 0.
causal = torch.ones(N, N, dtype=torch.bool).tril()
causal_weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
# --8<-- [end:attention]

# one colour scale for both weight maps
vmax = max(weights.max(), causal_weights.max()).item()


def heatmap(matrix, title, filename, **style):
    fig, ax = plt.subplots(figsize=(4.8, 4.0), dpi=150, layout="constrained")
    im = ax.imshow(matrix.numpy(), **style)
    fig.colorbar(im, ax=ax, shrink=0.9)
    ax.set(title=title, xlabel="key position j", ylabel="query position i")
    fig.savefig(filename)
    plt.close(fig)


limit = scores.abs().max().item()
heatmap(
    scores,
    r"Scores $QK^\top/\sqrt{d}$",
    "scores.png",
    cmap="RdBu_r",
    vmin=-limit,
    vmax=limit,
)
heatmap(
    weights,
    "Weights: softmax of each row",
    "weights.png",
    cmap="magma",
    vmin=0,
    vmax=vmax,
)
heatmap(
    causal_weights,
    "Causal weights: keys j > i masked",
    "causal_weights.png",
    cmap="magma",
    vmin=0,
    vmax=vmax,
)

print(f"scores range from {scores.min():.2f} to {scores.max():.2f}")
print("every row of weights sums to 1:", torch.allclose(weights.sum(-1), torch.ones(N)))
print(
    f"mean weight on the diagonal: {weights.diagonal().mean():.3f} "
    f"(uniform would be {1 / N:.3f})"
)
print(
    "causal weights above the diagonal are exactly 0: "
    f"{bool((causal_weights[~causal] == 0).all())}"
)
print(
    f"query 0 under the causal mask puts weight {causal_weights[0, 0]:.1f} on key 0, "
    "its only visible key"
)
