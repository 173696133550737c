"""Attention dropout without storing the mask: the backward draws the same random
numbers again.

Each kept weight is P[i, j] / (1 - p) and each dropped one is 0. A stored mask would be
one byte per score, N^2 per head: the memory FlashAttention exists to avoid. Instead
every element's random number comes from a counter-based generator (Philox) keyed by
(seed, offset, batch*head, row, column): any program, forward or backward, in any tile
order, computes the same number for the same element. The seed and offset are drawn from
torch's default generator, so torch.manual_seed makes a run reproducible.
"""

import torch

import flashdoc
from flashdoc.kernels.mask import draw_rng, dropout_mask

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
q, k, v = (
    torch.randn(1, 64, 2, 32, device=device, requires_grad=True) for _ in range(3)
)

# --8<-- [start:reproducible]
torch.manual_seed(42)
out_a = flashdoc.flash_attn_func(q, k, v, dropout_p=0.25)
torch.manual_seed(42)
out_b = flashdoc.flash_attn_func(q, k, v, dropout_p=0.25)
# the generator has moved on: another mask
out_c = flashdoc.flash_attn_func(q, k, v, dropout_p=0.25)
# --8<-- [end:reproducible]
print(
    f"same seed, same output: {torch.equal(out_a, out_b)}; "
    f"next call differs: {not torch.equal(out_a, out_c)}"
)

# --8<-- [start:regenerated]
torch.manual_seed(42)
# the kernels' own rule, for this seed
keep = dropout_mask(draw_rng(q.device), 1, 2, 64, 64, 0.25)
scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * 32**-0.5
p = scores.softmax(-1).masked_fill(~keep, 0.0) / (1 - 0.25)
ref = torch.einsum("bhqk,bkhd->bqhd", p, v)
dout = torch.randn_like(ref)
grads = torch.autograd.grad(out_a, (q, k, v), dout)  # the backward regenerates the mask
grads_ref = torch.autograd.grad(ref, (q, k, v), dout)
# --8<-- [end:regenerated]
print(f"kept {keep.float().mean().item():.3f} of the weights (1 - p = 0.75)")
out_diff = (out_a - ref).abs().max().item()
grad_diffs = [(a - b).abs().max().item() for a, b in zip(grads, grads_ref)]
print(
    f"output vs the masked formula: {out_diff:.1e}; gradients: "
    + ", ".join(f"{n} {d:.1e}" for n, d in zip("qkv", grad_diffs))
)
n = 16384
print(
    f"a stored mask at N = {n:,}: {n * n / 2**20:.0f} MiB per head "
    "(one byte per score); flashdoc stores none"
)
