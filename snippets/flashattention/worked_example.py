"""FlashAttention by hand: a 4x4 example in 2x2 tiles, every intermediate printed and
written to trace.json."""

import json
import math

import torch

from flashdoc.reference import naive_attention, online_softmax_update

# exact enough that the last digit printed is the true one
torch.set_default_dtype(torch.float64)
torch.set_printoptions(precision=4, sci_mode=False)

# --8<-- [start:setup]
d_k = 4
scale = 1 / math.sqrt(d_k)  # 1/2
block = 2  # 2 rows of Q and 2 rows of K per tile, so every score tile is 2x2

# K = 2I makes the scaled scores S = Q K^T / 2 equal to Q itself, so Q can be read as
# the score matrix.
Q = torch.tensor(
    [
        [1.0, 2.0, 3.0, 4.0],
        [2.0, 1.0, 0.0, -1.0],
        [4.0, 3.0, 2.0, 1.0],  # rows 3 and 4 mirror rows 1 and 2 left to right
        [-1.0, 0.0, 1.0, 2.0],
    ]
)
K = 2 * torch.eye(4)
V = torch.eye(4)  # V = I: each output row *is* that query's row of probabilities
# --8<-- [end:setup]


def blocks(x):
    return [x[i : i + block] for i in range(0, x.shape[0], block)]


def show(name, x):
    return f"{name} =\n{x}\n"


def emit(filename, text):
    """Print a piece of the walk-through and also keep it as its own file, so a page
    can show it step by step."""
    print(text)
    with open(filename, "w") as f:
        f.write(text)


def as_json(x):
    """Plain lists for trace.json; -inf (the running max before the first tile) as the
    string "-inf"."""
    if isinstance(x, list):
        return [as_json(e) for e in x]
    return "-inf" if x == -math.inf else round(x, 6)


emit(
    "inputs.txt",
    show("Q", Q)
    + show("K", K)
    + show("V", V)
    + "The full score matrix S = Q K^T / 2, for reference "
    + "(FlashAttention never stores it):\n"
    + show("S", Q @ K.T * scale),
)


# --8<-- [start:worker]
def run_worker(q_blk):
    """One worker: a block of query rows keeps (m, l, O) while the K/V blocks stream
    past."""
    m = torch.full((q_blk.shape[0],), -math.inf)
    l = torch.zeros(q_blk.shape[0])
    O = torch.zeros(q_blk.shape[0], V.shape[1])
    steps = []
    for j, (k_blk, v_blk) in enumerate(zip(blocks(K), blocks(V))):
        S = q_blk @ k_blk.T * scale  # the tile S_ij, 2x2
        m_old = m
        m, l, O, alpha, P = online_softmax_update(m, l, O, S, v_blk)
        step = dict(k_block=j, S=S, m_old=m_old, m_new=m, alpha=alpha, P=P, l=l, O=O)
        steps.append(step)
    return steps, O / l[:, None]  # normalise once, after the last tile


# --8<-- [end:worker]


workers = []
for i, q_blk in enumerate(blocks(Q)):
    steps, out = run_worker(q_blk)
    for st in steps:
        tile = f"S{i + 1}{st['k_block'] + 1}"
        emit(
            f"{tile}.txt",
            f"Worker {i + 1} (rows {2 * i + 1}-{2 * i + 2} of Q), tile {tile}\n"
            + show(tile, st["S"])
            + f"m_old = {st['m_old']}\nm_new = {st['m_new']}\n"
            + f"alpha = exp(m_old - m_new) = {st['alpha']}\n"
            + show("P = exp(S - m_new)", st["P"])
            + f"l = alpha * l + rowsum(P) = {st['l']}\n"
            + show("O = alpha * O + P V", st["O"]),
        )
    emit(
        f"worker{i + 1}_output.txt",
        show(f"Rows {2 * i + 1}-{2 * i + 2} of the output, O / l", out),
    )
    workers.append(dict(rows=[2 * i, 2 * i + 1], steps=steps, output=out))

# --8<-- [start:check]
flash = torch.cat([w["output"] for w in workers])
# the textbook formula, with the full 4x4 matrix
exact = naive_attention(Q, K, V, scale=scale)
emit(
    "result.txt",
    show("Both workers' rows, stacked", flash)
    + f"max |flash - naive| = {(flash - exact).abs().max().item():.1e}\n"
    + f"softmax([1, 2, 3, 4]) = {torch.softmax(torch.tensor([1.0, 2, 3, 4]), dim=0)}\n"
    + f"exp(-2) = {math.exp(-2):.4f}\n",
)
# --8<-- [end:check]
assert torch.allclose(flash, exact, rtol=0, atol=1e-12)

trace = {
    "Q": Q.tolist(),
    "K": K.tolist(),
    "V": V.tolist(),
    "scale": scale,
    "block": block,
    "workers": [
        {
            "rows": w["rows"],
            "steps": [
                {
                    key: (val if key == "k_block" else as_json(val.tolist()))
                    for key, val in st.items()
                }
                for st in w["steps"]
            ],
            "output": as_json(w["output"].tolist()),
        }
        for w in workers
    ],
    "output": as_json(flash.tolist()),
}
with open("trace.json", "w") as f:
    json.dump(trace, f)
