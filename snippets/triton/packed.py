"""flash-attn's packed functions: Q, K and V as one fused projection gives them, by
flash-attn's module name."""

import torch
import torch.nn.functional as F

import flashdoc

# on the CPU the kernels run in Triton's interpreter
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
shape = (4, 2048, 16, 128) if device == "cuda" else (2, 48, 2, 32)
batch, seqlen, heads, head_dim = shape
torch.manual_seed(0)

# --8<-- [start:qkvpacked]
# Was: from flash_attn.flash_attn_interface import ...
from flashdoc.flash_attn_interface import flash_attn_qkvpacked_func

hidden = heads * head_dim
to_qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False, device=device, dtype=dtype)
x = torch.randn(batch, seqlen, hidden, device=device, dtype=dtype)

# One matmul gives q, k and v side by side; a view stacks them on dim 2, no copy.
qkv = to_qkv(x).view(batch, seqlen, 3, heads, head_dim)
out = flash_attn_qkvpacked_func(qkv, causal=True)  # (batch, seqlen, heads, head_dim)
out.sum().backward()  # one gradient for qkv, into the projection's weight
grad = tuple(to_qkv.weight.grad.shape)
print("flash_attn_qkvpacked_func:", tuple(out.shape), "| weight grad:", grad)
# --8<-- [end:qkvpacked]

# --8<-- [start:same_as_unpacked]
# The packed call is flash_attn_func on the slices: the same output, bit for bit.
q, k, v = qkv.unbind(2)
same = torch.equal(out, flashdoc.flash_attn_func(q, k, v, causal=True))
q_t, k_t, v_t = (t.transpose(1, 2).float() for t in (q, k, v))
expected = F.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True)
error = (out.float() - expected.transpose(1, 2)).abs().max().item()
print(f"equal to flash_attn_func on its slices: {same}")
print(f"max |out - SDPA (float32)| = {error:.1e}")
# --8<-- [end:same_as_unpacked]

# --8<-- [start:kvpacked]
# Cross-attention, or grouped-query attention: keys and values stacked on their
# own, with their own head count (one key/value head for every two query heads).
from flashdoc.flash_attn_interface import flash_attn_kvpacked_func

kv_heads = heads // 2
kv = torch.randn(batch, seqlen // 2, 2, kv_heads, head_dim, device=device, dtype=dtype)
out_kv = flash_attn_kvpacked_func(q.detach(), kv)
print("flash_attn_kvpacked_func:", tuple(out_kv.shape), f"| {kv_heads} KV head(s)")
# --8<-- [end:kvpacked]
