"""Scaled dot-product attention with nothing but lists and the math module (it runs in
the browser too)."""

import math


def softmax(row):
    m = max(row)  # subtract the largest score first, so exp() never overflows
    e = [math.exp(s - m) for s in row]
    total = sum(e)
    return [x / total for x in e]


def attention(Q, K, V, causal=False):
    scale = 1 / math.sqrt(len(K[0]))
    S = []
    for i, q in enumerate(Q):
        row = []
        for j, k in enumerate(K):
            if causal and j > i:
                # token i may not look at a later token j: weight exp(-inf) = 0
                row.append(-math.inf)
            else:
                row.append(scale * sum(a * b for a, b in zip(q, k)))
        S.append(row)
    P = [softmax(row) for row in S]
    O = [[sum(p * v[c] for p, v in zip(row, V)) for c in range(len(V[0]))] for row in P]
    return S, P, O


def show(name, rows, tokens):
    print(name)
    for token, row in zip(tokens, rows):
        print(f"  {token:>4}: " + "  ".join(f"{x:7.3f}" for x in row))


tokens = ["The", "cat", "sat"]
Q = [[0.0, 2.0], [0.5, 1.5], [2.0, 0.0]]  # what each token looks for
K = [[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]  # what each token offers
V = [[0.1, 0.0], [1.0, 0.2], [0.2, 1.0]]  # what each token passes on

S, P, O = attention(Q, K, V)
show("Scores S = Q K^T / sqrt(2)", S, tokens)
show("Weights softmax(S): each row sums to 1", P, tokens)
show("Output = weights @ V", O, tokens)
print("Row sums of the weights:", [round(sum(row), 12) for row in P])

_, P_causal, _ = attention(Q, K, V, causal=True)
show("Weights with the causal mask (no looking ahead)", P_causal, tokens)
