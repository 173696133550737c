"""The 4x4 example's backward pass, tile by tile, every intermediate printed.

The same Q, K = 2I and V = I as the forward example, and dO = I: the gradient of
the loss trace(O) = sum_i P_ii, which rewards each query for attending to itself.
"""

import math

import torch

from flashdoc.reference import tiled_attention, tiled_attention_backward

torch.set_default_dtype(torch.float64)
torch.set_printoptions(precision=4, sci_mode=False)

# --8<-- [start:setup]
scale = 1 / math.sqrt(4)  # d_k = 4
block = 2
Q = torch.tensor(
    [
        [1.0, 2.0, 3.0, 4.0],
        [2.0, 1.0, 0.0, -1.0],
        [4.0, 3.0, 2.0, 1.0],
        [-1.0, 0.0, 1.0, 2.0],
    ]
)
K, V = 2 * torch.eye(4), torch.eye(4)
dO = torch.eye(4)  # the gradient arriving at O

O, lse = tiled_attention(Q, K, V, block, block, return_lse=True)  # the forward
delta = (dO * O).sum(dim=-1)  # rowsum(dO * O), one number per query row
# --8<-- [end:setup]


def show(name, x):
    return f"{name} =\n{x}\n"


def emit(filename, text):
    """Print one piece of the walk-through and keep it as a file a page can show."""
    print(text)
    with open(filename, "w") as f:
        f.write(text)


emit(
    "setup.txt",
    show("dO", dO)
    + show("O (= P, since V = I)", O)
    + f"LSE = {lse}\ndelta = rowsum(dO * O) = {delta}\n",
)


# --8<-- [start:key_block]
def run_key_block(j):
    """One program of the dK/dV kernel: keys j, j+1 stay, query blocks stream past."""
    k_blk, v_blk = K[j : j + block], V[j : j + block]
    dK, dV = torch.zeros(block, 4), torch.zeros(block, 4)
    text = ""
    for i in range(0, 4, block):
        q_blk, do_blk = Q[i : i + block], dO[i : i + block]
        S = q_blk @ k_blk.T * scale
        P = torch.exp(S - lse[i : i + block, None])  # recomputed from the LSE
        dP = do_blk @ v_blk.T
        dS = P * (dP - delta[i : i + block, None])
        dQ_part = dS @ k_blk * scale  # this tile's share of dQ's rows i, i+1
        dV += P.T @ do_blk
        dK += dS.T @ q_blk * scale
        tile = f"{i // block + 1}{j // block + 1}"
        text += (
            f"Tile {tile}: query rows {i + 1}-{i + 2}, key rows {j + 1}-{j + 2}\n"
            + show(f"P{tile} = exp(S{tile} - LSE)", P)
            + show(f"dP{tile}", dP)
            + show(f"dS{tile} = P * (dP - delta)", dS)
            + show("its part of dQ, scale * dS K", dQ_part)
        )
    return text + show("dK of these keys", dK) + show("dV of these keys", dV)


# --8<-- [end:key_block]


for j in range(0, 4, block):
    emit(f"keys{j // block + 1}.txt", run_key_block(j))

# --8<-- [start:check]
dQ, dK, dV = tiled_attention_backward(Q, K, V, O, lse, dO, block, block)
q, k, v = (t.clone().requires_grad_() for t in (Q, K, V))
torch.trace(torch.softmax(q @ k.T * scale, dim=-1) @ v).backward()  # autograd
error = max((a - b.grad).abs().max().item() for a, b in zip((dQ, dK, dV), (q, k, v)))
emit(
    "result.txt",
    show("dQ", dQ)
    + show("dK", dK)
    + show("dV", dV)
    + f"max |tiled - autograd| over dQ, dK, dV = {error:.1e}\n",
)
# --8<-- [end:check]
assert error < 1e-12
