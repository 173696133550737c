"""How much work padding to the longest sequence wastes, for batches drawn from one
length distribution.

Lengths are log-uniform between 128 and 8,192 tokens: as many sequences between 128 and
1k as between 1k and 8k, the long tail of a mixed corpus of chats, documents and code.
Swap in your own distribution: the rest follows."""

import math

import matplotlib.pyplot as plt
import torch

SHORTEST, LONGEST = 128, 8192
BATCH_SIZES = (2, 4, 8, 16, 32, 64)
DRAWS = 2000  # batches per batch size


# --8<-- [start:waste]
def draw_lengths(batches, batch_size, generator):
    """(batches, batch_size) lengths, log-uniform in [SHORTEST, LONGEST]."""
    u = torch.rand(batches, batch_size, generator=generator, dtype=torch.float64)
    return torch.exp(math.log(SHORTEST) + u * math.log(LONGEST / SHORTEST)).round()


def wasted(lengths):
    """Fractions of the work spent on padding when every sequence is padded to the
    batch's longest.

    Per-token work (projections, MLP) grows as the length, attention's as its square
    (with or without a causal mask: the mask halves the real and the padded work
    alike)."""
    longest = lengths.amax(dim=-1, keepdim=True)
    batch = lengths.shape[-1]
    tokens = 1 - lengths.sum(-1) / (longest * batch).squeeze(-1)
    attention = 1 - (lengths**2).sum(-1) / (longest**2 * batch).squeeze(-1)
    return tokens, attention


# --8<-- [end:waste]

g = torch.Generator().manual_seed(0)
rows = [
    "| batch size | tokens wasted (median) | attention FLOPs wasted (median) "
    "| attention FLOPs wasted (10th - 90th percentile) |",
    "|---|---|---|---|",
]
medians = {}
percentiles = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
for batch_size in BATCH_SIZES:
    tokens, attention = wasted(draw_lengths(DRAWS, batch_size, g))
    lo, mid, hi = torch.quantile(attention, percentiles).tolist()
    token_mid = tokens.median().item()
    medians[batch_size] = (token_mid, mid, lo, hi)
    rows.append(f"| {batch_size} | {token_mid:.0%} | {mid:.0%} | {lo:.0%} - {hi:.0%} |")
table = "\n".join(rows) + "\n"
open("waste.md", "w").write(table)
print(f"lengths log-uniform in [{SHORTEST}, {LONGEST}], {DRAWS} batches per batch size")

# One batch of 8, as the padded tensor sees it.
example = draw_lengths(1, 8, torch.Generator().manual_seed(1))[0]
tokens, attention = wasted(example[None])
print(f"example batch of 8: lengths {example.int().tolist()}")
share = (
    f"{tokens.item():.0%} of the tokens and {attention.item():.0%} of attention's FLOPs"
)
print(f"  padded to {int(example.max())}: {share} are padding")

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
order = example.argsort(descending=True)
for row, b in enumerate(order.tolist()):
    n = int(example[b])
    left.barh(row, n, color="#3b7dd8")
    left.barh(row, int(example.max()) - n, left=n, color="#d9d9d9")
left.set_yticks(range(8), [f"seq {b}" for b in order.tolist()])
left.invert_yaxis()
left.set_xlabel("tokens (grey: padding)")
left.set_title(f"one batch of 8: {attention.item():.0%} of attention FLOPs are padding")
sizes = list(medians)
# in % per batch size: the tokens' median; attention's median, 10th and 90th percentile
token_pct, attn_pct, attn_lo, attn_hi = (
    [medians[s][i] * 100 for s in sizes] for i in range(4)
)
right.plot(sizes, attn_pct, "o-", color="#c0392b", label="attention FLOPs (median)")
right.fill_between(
    sizes,
    attn_lo,
    attn_hi,
    color="#c0392b",
    alpha=0.15,
    label="attention FLOPs (10th - 90th pct)",
)
right.plot(sizes, token_pct, "s--", color="#555555", label="tokens (median)")
right.set_xscale("log", base=2)
right.set_xticks(sizes, [str(s) for s in sizes])
right.set_ylim(0, 100)
right.set_xlabel("batch size")
right.set_ylabel("% of the work spent on padding")
right.set_title("padding to the longest, by batch size")
right.legend(loc="lower right", fontsize=8)
fig.tight_layout()
fig.savefig("padding_waste.png", dpi=130)
