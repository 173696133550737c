"""Split-KV by hand: one query, six keys cut into three splits, each split's partial
output and log-sum-exp, and the merge that gives back exact attention. Then the same
on flashdoc's kernels, for several split counts."""

import torch

import flashdoc

torch.set_default_dtype(torch.float64)  # the hand example: every digit printed is exact
torch.set_printoptions(precision=4, sci_mode=False)

# --8<-- [start:setup]
# One query against six keys, head dim 2. Scores s = q . k (scale 1 here).
q = torch.tensor([1.0, 0.0])
K = torch.tensor(
    [[2.0, 0.0], [1.0, 1.0], [0.0, 3.0], [3.0, 1.0], [-1.0, 0.0], [1.0, 2.0]]
)
V = torch.tensor(
    [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0], [0.0, 2.0], [1.0, -1.0]]
)
s = K @ q  # the six scores
exact = torch.softmax(s, 0) @ V
# --8<-- [end:setup]
print(f"scores s = {s}")
print(f"exact output softmax(s) @ V = {exact}")
print(f"exact log-sum-exp = {torch.logsumexp(s, 0):.4f}\n")

# --8<-- [start:splits]
# Three splits of two keys each. Each is FlashAttention over its own keys alone: it
# returns its output normalised over those keys, and the log of its softmax
# denominator, lse_j = log(sum of e^s_i over the keys i of split j).
partials = []
for j, keys in enumerate([slice(0, 2), slice(2, 4), slice(4, 6)]):
    lse_j = torch.logsumexp(s[keys], 0)
    out_j = torch.softmax(s[keys], 0) @ V[keys]
    partials.append((out_j, lse_j))
    print(f"split {j}: scores {s[keys]}  lse_{j} = {lse_j:.4f}  out_{j} = {out_j}")
# --8<-- [end:splits]

# --8<-- [start:merge]
# lse = log(sum_j e^lse_j) is the log of the full denominator, so e^(lse_j - lse) is
# split j's share of the softmax mass: the exact output is the partial outputs
# weighted by their shares.
lses = torch.stack([lse_j for _, lse_j in partials])
lse = torch.logsumexp(lses, 0)
weights = torch.exp(lses - lse)
merged = sum(w * out_j for w, (out_j, _) in zip(weights, partials))
# --8<-- [end:merge]
terms = " + ".join(f"e^{x:.4f}" for x in lses)
print(f"\nmerged lse = log({terms}) = {lse:.4f}")
print(f"weights e^(lse_j - lse) = {weights}  (they sum to {weights.sum():.4f})")
print(f"merged output = {merged}")
print(f"largest difference from the exact output: {(merged - exact).abs().max():.1e}\n")

# --8<-- [start:kernel]
# The same on flashdoc's kernels: caches of 200 and 77 keys, cut into 1, 2, 3 and 7
# splits. Every split count gives attention to rounding; only the order of the sums
# differs.
device = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g).to(device, torch.float32)


q4 = randn(2, 1, 4, 32)  # (batch, seqlen_q, heads, head_dim)
k_cache = randn(2, 200, 2, 32)  # (batch, cache length, kv heads, head_dim)
v_cache = randn(2, 200, 2, 32)
lengths = torch.tensor([200, 77], dtype=torch.int32, device=device)
outs = {
    n: flashdoc.flash_attn_with_kvcache(
        q4, k_cache, v_cache, cache_seqlens=lengths, num_splits=n
    )
    for n in (1, 2, 3, 7)
}
for n, out in outs.items():
    diff = (out - outs[1]).abs().max()
    print(f"num_splits = {n}: largest difference from one split: {diff:.1e}")
# --8<-- [end:kernel]
