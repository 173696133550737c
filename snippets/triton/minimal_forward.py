"""FlashAttention's forward pass as a minimal Triton kernel, and its launch.

No causal mask, no tuning, plain pointers: the online softmax of the reference, one
program per block of queries. On a machine without a GPU, importing flashdoc switches
Triton to its interpreter, which runs the same kernel on the CPU.
"""

import torch

import flashdoc  # noqa: F401  (no CUDA: sets TRITON_INTERPRET=1 before triton loads)
from flashdoc.reference import naive_attention
import triton
import triton.language as tl


# --8<-- [start:kernel]
@triton.jit
def attention_fwd(
    Q,
    K,
    V,
    Out,
    n,
    scale,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    block = tl.program_id(0)  # which block of queries this program owns
    head = tl.program_id(1)  # which (batch, head) pair
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    base = head * n * D  # Q, K, V, Out: contiguous (batch * heads, n, D)
    row_offsets = base + rows[:, None] * D + cols[None, :]  # this block's rows
    q = tl.load(Q + row_offsets, mask=rows[:, None] < n, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max
    l = tl.zeros([BLOCK_M], tl.float32)  # running denominator
    acc = tl.zeros([BLOCK_M, D], tl.float32)  # unnormalised output
    for start in range(0, n, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        offsets = base + keys[:, None] * D + cols[None, :]
        k = tl.load(K + offsets, mask=keys[:, None] < n, other=0.0)
        v = tl.load(V + offsets, mask=keys[:, None] < n, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(keys[None, :] < n, s, float("-inf"))  # keys past the end
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = alpha * l + tl.sum(p, axis=1)
        acc = alpha[:, None] * acc + tl.dot(p, v)
        m = m_new
    tl.store(Out + row_offsets, acc / l[:, None], mask=rows[:, None] < n)


# --8<-- [end:kernel]


# --8<-- [start:launch]
def attention(q, k, v, block_m=16, block_n=16):
    """q, k, v: (batch, heads, n, d), float32 and contiguous."""
    batch, heads, n, d = q.shape
    out = torch.empty_like(q)
    grid = (triton.cdiv(n, block_m), batch * heads)  # programs along each axis
    attention_fwd[grid](q, k, v, out, n, d**-0.5, D=d, BLOCK_M=block_m, BLOCK_N=block_n)
    return out


# --8<-- [end:launch]


# --8<-- [start:check]
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
q, k, v = (torch.randn(2, 3, 50, 16, device=device) for _ in range(3))
error = (attention(q, k, v) - naive_attention(q, k, v)).abs().max().item()
print(f"n = 50 (not a multiple of 16): max |kernel - reference| = {error:.1e}")
# --8<-- [end:check]
assert error < 1e-2 if device == "cuda" else error < 1e-5  # tf32 dot on a GPU
