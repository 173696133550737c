"""The corrected tiled algorithm (flashdoc.reference.tiled_attention) against naive
attention, on sequence lengths that are not multiples of the block size, with and
without the causal mask."""

import torch

from flashdoc.reference import naive_attention, tiled_attention

torch.manual_seed(0)
block = 64
rows = [
    "| n_q | n_k | causal | float32: max abs error | float64: max abs error |",
    "|---|---|---|---|---|",
]
for n_q, n_k in [(1, 1), (100, 100), (129, 129), (200, 77), (77, 200), (513, 513)]:
    for causal in (False, True):
        errors = []
        for dtype in (torch.float32, torch.float64):
            # (batch, heads, seq, head_dim)
            q = torch.randn(2, 4, n_q, 64, dtype=dtype)
            k, v = torch.randn(2, 2, 4, n_k, 64, dtype=dtype)
            tiled = tiled_attention(q, k, v, block, block, causal=causal)
            naive = naive_attention(q, k, v, causal=causal)
            errors.append((tiled - naive).abs().max().item())
        assert errors[0] < 1e-5 and errors[1] < 1e-12, errors
        rows.append(f"| {n_q} | {n_k} | {causal} | {errors[0]:.1e} | {errors[1]:.1e} |")

table = "\n".join(rows) + "\n"
print(table)
with open("tiled_vs_naive.md", "w") as f:
    f.write(table)
