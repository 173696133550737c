# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The 4×4 FlashAttention example, as a notebook
#
# The worked example from [Part 2: FlashAttention, exact attention without the N×N matrix](../blog/posts/flashattention-explained.md),
# to run and change. It uses the same teaching code as the post, `flashdoc.reference` (install flashdoc as
# [Using flashdoc](../usage.md#install) shows). Its source, `snippets/notebooks/worked_example.py`, is a plain Python file in
# jupytext's percent format: run it as a script, or open it in Jupyter through jupytext.
#
# Four tokens, $d_k = 4$, blocks of two rows. $K = 2I$ makes the scaled scores $S = QK^\top/2$ equal to $Q$, and
# $V = I$ makes each output row that query's row of attention probabilities.

# %%
import math

import torch

from flashdoc.reference import naive_attention, online_softmax_update, tiled_attention

torch.set_default_dtype(torch.float64)
torch.set_printoptions(precision=4, sci_mode=False)

Q = torch.tensor(
    [
        [1.0, 2.0, 3.0, 4.0],
        [2.0, 1.0, 0.0, -1.0],
        [4.0, 3.0, 2.0, 1.0],
        [-1.0, 0.0, 1.0, 2.0],
    ]
)
K = 2 * torch.eye(4)
V = torch.eye(4)
scale, block = 0.5, 2
Q @ K.T * scale  # the full score matrix, which FlashAttention never stores

# %% [markdown]
# ## One worker, one tile at a time
#
# Worker 1 owns query rows 1 and 2. It starts with $m = -\infty$, $\ell = 0$, $O = 0$ and folds in the key blocks
# one after the other with `online_softmax_update` (the function the post proves exact). Change `rows` to
# `slice(2, 4)` to follow worker 2 instead.

# %%
rows = slice(0, 2)
m = torch.full((2,), -math.inf)
l = torch.zeros(2)
O = torch.zeros(2, 4)
for j in range(0, 4, block):
    S = Q[rows] @ K[j : j + block].T * scale
    m_old = m
    m, l, O, alpha, P = online_softmax_update(m, l, O, S, V[j : j + block])
    print(f"key block {j // block + 1}: S = {S.tolist()}")
    print(f"  m: {m_old.tolist()} -> {m.tolist()}   alpha = {alpha}   l = {l}")
out = O / l[:, None]
out

# %% [markdown]
# Row 1 is $\operatorname{softmax}([1, 2, 3, 4])$: the rescale factor $e^{-2}$ appears at the second block, when
# row 1's maximum rises from 2 to 4.

# %%
assert torch.allclose(out, torch.softmax(Q[rows] @ K.T * scale, dim=-1))
assert math.isclose(
    torch.softmax(torch.tensor([1.0, 2, 3, 4]), 0)[3].item(), 0.6439, abs_tol=5e-5
)
torch.softmax(torch.tensor([1.0, 2, 3, 4]), dim=0)

# %% [markdown]
# ## Any size, any block
#
# The same algorithm for every query block is `tiled_attention`. Try sizes that are not multiples of the block
# size, and the causal mask: the result always matches the textbook formula to rounding error.

# %%
torch.manual_seed(0)
n, d = 7, 8
q, k, v = torch.randn(n, d), torch.randn(n, d), torch.randn(n, d)
for causal in (False, True):
    tiled = tiled_attention(q, k, v, block_q=3, block_k=3, causal=causal)
    error = (tiled - naive_attention(q, k, v, causal=causal)).abs().max().item()
    print(f"causal={causal}: max |tiled - naive| = {error:.1e}")
    assert error < 1e-12
