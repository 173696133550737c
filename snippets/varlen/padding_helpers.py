"""flash-attn's padding helpers around flash_attn_varlen_func: a padded batch packed,
attended and padded back."""

import torch
import torch.nn.functional as F

import flashdoc

# on the CPU the kernels run in Triton's interpreter
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
lengths, heads, head_dim = [5, 2, 7], 2, 32
torch.manual_seed(0)

# --8<-- [start:round_trip]
# Was: from flash_attn.bert_padding import pad_input, unpad_input
from flashdoc.bert_padding import pad_input, unpad_input

batch, seqlen = len(lengths), max(lengths)
lens = torch.tensor(lengths, device=device)
mask = torch.arange(seqlen, device=device) < lens[:, None]  # right-padded rows
shape = (batch, seqlen, heads, head_dim)
q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))

# The real tokens, packed one sequence after another, and where they came from.
q_p, indices, cu_seqlens, max_len, _ = unpad_input(q, mask)
k_p, v_p = unpad_input(k, mask)[0], unpad_input(v, mask)[0]
seqlens = (cu_seqlens, cu_seqlens, max_len, max_len)  # queries', then keys'
out_p = flashdoc.flash_attn_varlen_func(q_p, k_p, v_p, *seqlens, causal=True)
out = pad_input(out_p, indices, batch, seqlen)  # zeros at the padding
print("cu_seqlens:", cu_seqlens.tolist(), "| packed:", tuple(q_p.shape))
print("padded back:", tuple(out.shape))
# --8<-- [end:round_trip]

# --8<-- [start:check]
# Each sequence attended alone (SDPA in float32) gives its rows of the output.
worst = 0.0
for b, n in enumerate(lengths):
    q_b, k_b, v_b = (t[b : b + 1, :n].transpose(1, 2).float() for t in (q, k, v))
    alone = F.scaled_dot_product_attention(q_b, k_b, v_b, is_causal=True)
    error = (out[b, :n].float() - alone.transpose(1, 2)[0]).abs().max().item()
    worst = max(worst, error)
print(f"max |out - each sequence alone| = {worst:.1e}")
print("padding rows all zero:", bool((out[~mask] == 0).all()))
# --8<-- [end:check]
