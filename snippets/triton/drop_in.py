"""flashdoc's two APIs as drop-ins: for flash-attn's flash_attn_func and for PyTorch's
scaled_dot_product_attention."""

import torch
import torch.nn.functional as F

import flashdoc

# on the CPU the kernels run in Triton's interpreter
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
shape = (4, 16, 2048, 128) if device == "cuda" else (1, 2, 40, 32)
batch, heads, seqlen, head_dim = shape
torch.manual_seed(0)

# --8<-- [start:flash_attn]
# flash-attn layout: (batch, seqlen, heads, head_dim).
# Was: from flash_attn import flash_attn_func
from flashdoc import flash_attn_func

q, k, v = (
    torch.randn(
        batch, seqlen, heads, head_dim, device=device, dtype=dtype, requires_grad=True
    )
    for _ in range(3)
)
# softmax_scale defaults to head_dim ** -0.5
out = flash_attn_func(q, k, v, causal=True)
out.sum().backward()  # gradients come from flashdoc's Triton backward kernels
print("flash_attn_func:", tuple(out.shape), out.dtype, "| q.grad:", tuple(q.grad.shape))
# --8<-- [end:flash_attn]

# --8<-- [start:sdpa]
# PyTorch layout: (batch, heads, seqlen, head_dim). Was:
# F.scaled_dot_product_attention(q, k, v, is_causal=True)
qt, kt, vt = (x.detach().transpose(1, 2) for x in (q, k, v))
out_sdpa = flashdoc.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
reference = F.scaled_dot_product_attention(
    qt.float(), kt.float(), vt.float(), is_causal=True
)
error = (out_sdpa.float() - reference).abs().max().item()
print(
    "scaled_dot_product_attention:",
    tuple(out_sdpa.shape),
    f"| max |flashdoc - torch (float32)| = {error:.1e}",
)
# --8<-- [end:sdpa]

# --8<-- [start:gqa]
# Grouped-query attention: heads // kv_heads query heads share each key/value head
# (8 on a GPU; flash_attn_func infers the group from the shapes).
kv_heads = max(heads // 8, 1)
k_gqa = torch.randn(batch, seqlen, kv_heads, head_dim, device=device, dtype=dtype)
v_gqa = torch.randn(batch, seqlen, kv_heads, head_dim, device=device, dtype=dtype)
print(
    "GQA:",
    tuple(flash_attn_func(q.detach(), k_gqa, v_gqa).shape),
    f"with {kv_heads} key/value head(s)",
)
# --8<-- [end:gqa]

# --8<-- [start:causal_alignment]
# With seqlen_q != seqlen_k the two APIs align the causal mask differently, each like
# the library it replaces: flash_attn_func bottom-right (the last query sees every
# key), SDPA top-left (query i sees keys 0..i).
# two queries (the last two tokens) ...
q2 = torch.randn(1, 2, 1, 32, device=device, dtype=dtype)
k5 = torch.randn(1, 5, 1, 32, device=device, dtype=dtype)  # ... over five cached keys
# value j = one-hot j: out = weights
v5 = torch.eye(5, 32, device=device, dtype=dtype)[None, :, None, :]
w_flash = flash_attn_func(q2, k5, v5, causal=True)[0, :, 0, :5]
w_sdpa = flashdoc.scaled_dot_product_attention(
    *(x.transpose(1, 2) for x in (q2, k5, v5)), is_causal=True
)[0, 0, :, :5]
print(
    "keys each query sees, flash_attn_func (bottom-right):",
    (w_flash > 0).int().tolist(),
)
print(
    "keys each query sees, SDPA (top-left):               ",
    (w_sdpa > 0).int().tolist(),
)
# --8<-- [end:causal_alignment]
