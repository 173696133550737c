"""Run the tiled pseudocode from the seed post exactly as published, and see where it
breaks."""

import math

import torch

from flashdoc.reference import naive_attention


# --8<-- [start:seed]
# The seed post's code, reformatted; its docstring became the comment below.
# Q, K, V: (batch, seq_len, d_head).
def flash_attention(Q, K, V, block_size=64):
    n = Q.shape[1]
    output = torch.zeros_like(Q)

    # Process in blocks
    for i in range(0, n, block_size):
        q_block = Q[:, i : i + block_size]

        # Track running max and normalizer for numerical stability
        m_i = torch.full((q_block.shape[0], block_size), float("-inf"))
        l_i = torch.zeros((q_block.shape[0], block_size))
        o_i = torch.zeros_like(q_block)

        for j in range(0, n, block_size):
            k_block = K[:, j : j + block_size]
            v_block = V[:, j : j + block_size]

            # Compute attention scores for this tile
            scores = q_block @ k_block.transpose(-1, -2) / math.sqrt(d_k)

            # Online softmax update
            m_ij = torch.max(scores, dim=-1).values
            m_new = torch.maximum(m_i, m_ij)

            # Rescale and accumulate
            alpha = torch.exp(m_i - m_new)
            beta = torch.exp(m_ij - m_new)

            l_i = alpha * l_i + beta * torch.sum(torch.exp(scores - m_ij), dim=-1)
            o_i = alpha * o_i + beta * (torch.exp(scores - m_ij) @ v_block)
            m_i = m_new

        # Final normalization
        output[:, i : i + block_size] = o_i / l_i.unsqueeze(-1)

    return output


# --8<-- [end:seed]


def report(label, thunk):
    try:
        print(f"{label}: {thunk()}")
    except Exception as err:  # noqa: BLE001 - what the seed's code raises is the point
        print(f"{label}: {type(err).__name__}: {err}")


def error_vs_naive(batch, n, d):
    torch.manual_seed(0)
    Q, K, V = (torch.randn(batch, n, d) for _ in range(3))
    error = (flash_attention(Q, K, V) - naive_attention(Q, K, V)).abs().max()
    return f"ran; max |error| vs naive attention = {error:.3g}"


report("1. as published (batch 2, n 128, d 32)", lambda: error_vs_naive(2, 128, 32))
d_k = 32  # work around bug 1: the function reads a global d_k that it never defines
report("2. with d_k defined (batch 2, n 128, d 32)", lambda: error_vs_naive(2, 128, 32))
d_k = 64
report("3. batch 1, n 128, d 64 = block_size", lambda: error_vs_naive(1, 128, 64))

# 4. For n = 100 the last query block has 36 rows, but the seed allocates m_i (and l_i)
# with block_size columns:
m_i = torch.full((1, 64), float("-inf"))
m_ij = torch.randn(1, 100 - 64, 64).max(dim=-1).values  # one max per row: shape (1, 36)
report(
    "4. last block, torch.maximum(m_i, m_ij)", lambda: torch.maximum(m_i, m_ij).shape
)

# --8<-- [start:beta]
# The seed's beta form (FlashAttention-1's update) vs the standard one, on a tile row
# whose keys are all masked:
scores = torch.full((1, 4), float("-inf"))  # every key of this tile is in the future
m_i = torch.tensor([1.5])  # the row already saw keys in an earlier tile
m_ij = scores.max(dim=-1).values  # -inf
m_new = torch.maximum(m_i, m_ij)
beta_form = torch.exp(m_ij - m_new) * torch.exp(scores - m_ij[:, None]).sum(dim=-1)
standard = torch.exp(scores - m_new[:, None]).sum(dim=-1)
print(
    f"5. fully masked tile row: beta form adds {beta_form.item()}, "
    f"the standard form adds {standard.item()}"
)

# The same row with one visible key: every term is finite, and the two forms agree.
scores[0, 0] = 0.5
m_ij = scores.max(dim=-1).values
m_new = torch.maximum(m_i, m_ij)
beta_form = torch.exp(m_ij - m_new) * torch.exp(scores - m_ij[:, None]).sum(dim=-1)
standard = torch.exp(scores - m_new[:, None]).sum(dim=-1)
print(
    f"6. one visible key: beta form adds {beta_form.item():.4f}, "
    f"the standard form adds {standard.item():.4f}"
)
# --8<-- [end:beta]
