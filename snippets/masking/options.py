"""Every option of flashdoc.flash_attn_func beyond causal, and what it says when one is
out of range."""

import torch

import flashdoc

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim = 2, 24, 40, 4, 2, 59
q = torch.randn(batch, seqlen_q, heads, head_dim, device=device)
k = torch.randn(batch, seqlen_k, kv_heads, head_dim, device=device)
v = torch.randn(batch, seqlen_k, kv_heads, head_dim, device=device)

# --8<-- [start:options]
out = flashdoc.flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.1,  # drop 10% of the attention weights (0.0 for evaluation)
    softmax_scale=None,  # default head_dim ** -0.5
    causal=True,  # bottom-right aligned, like flash-attn
    window_size=(16, 0),  # each query sees itself and the 16 keys before it
    softcap=30.0,  # scores -> 30 * tanh(score / 30)
    alibi_slopes=torch.tensor([0.25, 0.125, 0.0625, 0.03125], device=device),
    deterministic=True,
)
out, lse, probs = flashdoc.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
# --8<-- [end:options]
print(f"out {tuple(out.shape)}, lse {tuple(lse.shape)}, probs {probs} (never stored)")
print(
    f"head_dim {head_dim} (not a multiple of 8) is padded inside: out keeps {head_dim}"
)

# --8<-- [start:errors]
calls = {
    "dropout_p = 1": dict(dropout_p=1.0),
    "a window of three numbers": dict(window_size=(8, 0, 1)),
    "a window side below -1": dict(window_size=(-2, 0)),
    "a negative softcap": dict(softcap=-1.0),
    "ALiBi slopes of the wrong shape": dict(alibi_slopes=torch.ones(3, device=device)),
    "ALiBi slopes in fp16": dict(alibi_slopes=torch.ones(4, dtype=torch.float16)),
    "ALiBi slopes on another device": dict(alibi_slopes=torch.ones(4, device="meta")),
}
for what, options in calls.items():
    try:
        flashdoc.flash_attn_func(q, k, v, **options)
        print(f"{what}: accepted")
    except (TypeError, ValueError) as err:
        print(f"{what}:\n    {type(err).__name__}: {err}")
# --8<-- [end:errors]
