"""FlashAttention's forward pass in pure Python: key blocks stream past each block of
queries."""

import math


def matmul_t(A, B):
    """A @ B^T for lists of rows."""
    return [[sum(a * b for a, b in zip(row_a, row_b)) for row_b in B] for row_a in A]


def naive_attention(Q, K, V, scale):
    out = []
    for row in matmul_t(Q, K):
        m = max(row)
        p = [math.exp(scale * s - scale * m) for s in row]
        o = [sum(pi * v[c] for pi, v in zip(p, V)) for c in range(len(V[0]))]
        out.append([x / sum(p) for x in o])
    return out


def flash_attention(Q, K, V, scale, block):
    out = []
    for i in range(0, len(Q), block):  # one worker per block of query rows
        q_blk = Q[i : i + block]
        m = [-math.inf] * len(q_blk)
        l = [0.0] * len(q_blk)
        O = [[0.0] * len(V[0]) for _ in q_blk]
        for j in range(0, len(K), block):  # the key/value blocks stream past
            S = [[scale * s for s in row] for row in matmul_t(q_blk, K[j : j + block])]
            for r, row in enumerate(S):
                m_new = max(m[r], *row)
                # rescales what was accumulated under the old max
                alpha = math.exp(m[r] - m_new)
                P = [math.exp(s - m_new) for s in row]
                l[r] = alpha * l[r] + sum(P)
                O[r] = [
                    alpha * o + sum(p * v[c] for p, v in zip(P, V[j : j + block]))
                    for c, o in enumerate(O[r])
                ]
                m[r] = m_new
            print(
                f"worker {i // block + 1}, keys {j + 1}-{min(j + block, len(K))}: "
                f"m = {[round(x, 4) for x in m]}, l = {[round(x, 4) for x in l]}"
            )
        # normalise once, at the end
        out += [[o / l[r] for o in O[r]] for r in range(len(q_blk))]
    return out


# The 4x4 worked example: K = 2I and scale 1/2 make the scores equal to Q; V = I shows
# the weights.
Q = [
    [1.0, 2.0, 3.0, 4.0],
    [2.0, 1.0, 0.0, -1.0],
    [4.0, 3.0, 2.0, 1.0],
    [-1.0, 0.0, 1.0, 2.0],
]
K = [[2.0 if r == c else 0.0 for c in range(4)] for r in range(4)]
V = [[1.0 if r == c else 0.0 for c in range(4)] for r in range(4)]

flash = flash_attention(Q, K, V, scale=0.5, block=2)
exact = naive_attention(Q, K, V, scale=0.5)
for row in flash:
    print("  ".join(f"{x:.4f}" for x in row))
# Equal up to float64 rounding; the last bits depend on the C library's exp, so compare,
# don't print them.
print(
    "flash == naive to 12 decimals:",
    all(abs(a - b) < 1e-12 for fr, er in zip(flash, exact) for a, b in zip(fr, er)),
)
