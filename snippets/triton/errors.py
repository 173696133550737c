"""What flashdoc says when a call is outside what it supports: each error names the
argument and what is allowed."""

import torch

from flashdoc import flash_attn_func, scaled_dot_product_attention

device = "cuda" if torch.cuda.is_available() else "cpu"
# (batch, seqlen, heads, head_dim)
q = k = v = torch.randn(1, 16, 2, 64, device=device, dtype=torch.float16)

# --8<-- [start:errors]
calls = {
    "head_dim 300 (more than 256)": lambda: flash_attn_func(
        *(torch.randn(1, 16, 2, 300, device=device, dtype=torch.float16),) * 3
    ),
    "float64 inputs": lambda: flash_attn_func(q.double(), k.double(), v.double()),
    "q and k of different dtypes": lambda: flash_attn_func(q, k.float(), v),
    "3 query heads over 2 key/value heads": lambda: flash_attn_func(
        torch.randn(1, 16, 3, 64, device=device, dtype=torch.float16), k, v
    ),
    "an arbitrary attention mask (SDPA API)": lambda: scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(2, 2, dtype=torch.bool)
    ),
    "dropout_p = 1 (SDPA API)": lambda: scaled_dot_product_attention(
        q, k, v, dropout_p=1.0
    ),
    "a window side below -1": lambda: flash_attn_func(q, k, v, window_size=(256, -2)),
    "ALiBi slopes that require grad": lambda: flash_attn_func(
        q, k, v, alibi_slopes=torch.full((2,), 0.5, device=device, requires_grad=True)
    ),
}
for what, call in calls.items():
    try:
        call()
        print(f"{what}: accepted")
    except (TypeError, ValueError) as err:
        print(f"{what}:\n    {type(err).__name__}: {err}")
# --8<-- [end:errors]
