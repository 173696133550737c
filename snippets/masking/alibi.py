"""ALiBi: a linear penalty on distance instead of position embeddings, added to the
scores inside the kernel.

Each head h has a slope m_h; query i and key j get -m_h * |i + seqlen_k - seqlen_q - j|
added to their score (after scaling and softcap), aligned to the bottom-right corner
like flash-attn's causal mask, so the last query is at distance 0 from the last key.
BLOOM and MPT use slopes 2^(-8h/H).
"""

import torch

import flashdoc

# --8<-- [start:bias]
seqlen_q, seqlen_k, slope = 3, 6, 0.5
i = torch.arange(seqlen_q)[:, None]
j = torch.arange(seqlen_k)[None, :]
bias = -slope * (i + seqlen_k - seqlen_q - j).abs()
# --8<-- [end:bias]
print(f"the bias for seqlen_q={seqlen_q}, seqlen_k={seqlen_k}, slope {slope}:")
print(bias)

# --8<-- [start:kernel]
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
batch, seqlen, heads, head_dim = 2, 40, 4, 32
q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device=device) for _ in range(3))
# the slopes: (heads,), fp32
slopes = torch.tensor(
    [2 ** (-8 * (h + 1) / heads) for h in range(heads)], device=device
)
out = flashdoc.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)

# the bias spelled out as a (heads, N, N) matrix, which flashdoc never builds
pos = torch.arange(seqlen, device=device)
bias = -slopes[:, None, None] * (pos[:, None] - pos[None, :]).abs()
causal = pos[None, :] <= pos[:, None]
scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * head_dim**-0.5 + bias
p = scores.masked_fill(~causal, float("-inf")).softmax(-1)
ref = torch.einsum("bhqk,bkhd->bqhd", p, v)
# --8<-- [end:kernel]
print(f"\nslopes {[round(x, 4) for x in slopes.tolist()]}")
diff = (out - ref).abs().max().item()
print(f"flashdoc vs the explicit bias, fp32: max difference {diff:.1e}")
