"""Scaled dot-product attention, multi-head attention and a transformer block in
PyTorch, checked against PyTorch's own implementations, with the shapes printed for
each check."""

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:sdpa]
class ScaledDotProductAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_k)) V. ``mask``: True (or 1) where a query may attend to a
    key."""

    def __init__(self, d_k: int, dropout: float = 0.0):
        super().__init__()
        self.scale = d_k**-0.5
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        # query: (..., n, d_k), key: (..., m, d_k), value: (..., m, d_v); mask
        # broadcasts to (..., n, m)
        scores = query @ key.transpose(-2, -1) * self.scale  # (..., n, m)
        if mask is not None:
            # 0/False = may not attend
            scores = scores.masked_fill(mask == 0, float("-inf"))
        # each row sums to 1 (before dropout)
        weights = self.dropout(F.softmax(scores, dim=-1))
        return weights @ value, weights  # (..., n, d_v), (..., n, m)


# --8<-- [end:sdpa]


# --8<-- [start:mha]
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must split evenly into heads"
        self.d_k, self.n_heads = d_model // n_heads, n_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )
        self.attention = ScaledDotProductAttention(self.d_k, dropout)

    def split_heads(self, x):  # (batch, seq, d_model) -> (batch, heads, seq, d_k)
        return x.view(x.shape[0], x.shape[1], self.n_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        Q, K, V = (
            self.split_heads(self.W_q(query)),
            self.split_heads(self.W_k(key)),
            self.split_heads(self.W_v(value)),
        )
        if mask is not None and mask.dim() == 3:
            # (batch, n, m) -> (batch, 1, n, m): the same mask for every head
            mask = mask.unsqueeze(1)
        x, weights = self.attention(Q, K, V, mask)  # (batch, heads, n, d_k)
        # concatenate the heads
        x = x.transpose(1, 2).reshape(query.shape[0], query.shape[1], -1)
        return self.W_o(x), weights


# --8<-- [end:mha]


# --8<-- [start:block]
class TransformerBlock(nn.Module):
    """Attention then a feed-forward network, each added back to its input and
    normalised (post-norm, as in the original Transformer)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
            nn.Dropout(dropout),
        )
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        attn_out, _ = self.attention(x, x, x, mask)
        x = self.norm1(x + attn_out)
        return self.norm2(x + self.ffn(x))


# --8<-- [end:block]


torch.manual_seed(0)
batch, seq, d_model, n_heads = 2, 10, 64, 8
x = torch.randn(batch, seq, d_model)
# True on and below the diagonal: query i sees keys 0..i
causal = torch.ones(seq, seq).tril().bool()

# --8<-- [start:check_sdpa]
sdpa = ScaledDotProductAttention(d_k=d_model)
out, weights = sdpa(x, x, x, causal)
print("SDPA:", tuple(x.shape), "->", tuple(out.shape), "weights", tuple(weights.shape))
print(
    "  rows of weights sum to 1:",
    torch.allclose(weights.sum(-1), torch.ones(batch, seq)),
)
# The mask convention (True = attend) is that of F.scaled_dot_product_attention's
# boolean attn_mask ...
torch_out = F.scaled_dot_product_attention(x, x, x, attn_mask=causal)
print(
    "  same as F.scaled_dot_product_attention(attn_mask=mask):",
    torch.allclose(out, torch_out, atol=1e-6),
)
# ... and the opposite of nn.MultiheadAttention's boolean attn_mask, where True means
# "may NOT attend".
# --8<-- [end:check_sdpa]

# --8<-- [start:check_mha]
mha = MultiHeadAttention(d_model, n_heads).eval()
out, weights = mha(x, x, x)
print(
    "MHA:",
    tuple(x.shape),
    "->",
    tuple(out.shape),
    "weights",
    tuple(weights.shape),
    "(batch, heads, n, m)",
)
ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
with torch.no_grad():  # give PyTorch's module the same weights
    ref.in_proj_weight.copy_(
        torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight])
    )
    ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
    ref.out_proj.weight.copy_(mha.W_o.weight)
    ref.out_proj.bias.copy_(mha.W_o.bias)
# inverted: True = masked out in nn.MultiheadAttention
ref_out, _ = ref(x, x, x, attn_mask=~causal)
print(
    "  equals nn.MultiheadAttention (causal):",
    torch.allclose(mha(x, x, x, causal)[0], ref_out, atol=1e-5),
)

# A per-example mask of shape (batch, n, m) must be broadcast over the heads explicitly:
padding = torch.ones(batch, seq, seq, dtype=torch.bool)
padding[1, :, 7:] = False  # example 2 has only 7 real tokens
scores = torch.zeros(batch, n_heads, seq, seq)
try:
    # what happens without the unsqueeze(1)
    scores.masked_fill(padding == 0, float("-inf"))
except RuntimeError as err:
    print("  (batch, n, m) mask against (batch, heads, n, m) scores:", err)
out, weights = mha(x, x, x, padding)
print(
    "  with unsqueeze(1), weight on padded keys of example 2:",
    weights[1, :, :, 7:].sum().item(),
)
# --8<-- [end:check_mha]

# --8<-- [start:check_block]
# eval(): dropout off, output repeatable
block = TransformerBlock(d_model, n_heads, d_ff=4 * d_model).eval()
y = block(x, causal)
print(
    "Block:",
    tuple(x.shape),
    "->",
    tuple(y.shape),
    f"parameters: {sum(p.numel() for p in block.parameters()):,}",
)
# --8<-- [end:check_block]
