"""Scaled dot-product attention in ten lines of NumPy: two queries attend over three
keys."""

import numpy as np


def softmax(x):
    # Subtracting the row maximum changes nothing mathematically but keeps exp() from
    # overflowing.
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(Q, K, V):
    d_k = K.shape[-1]
    scores = Q @ K.swapaxes(-1, -2) / np.sqrt(d_k)  # swapaxes, not .T: batches work too
    weights = softmax(scores)
    return weights @ V, weights


rng = np.random.default_rng(42)
Q = rng.standard_normal((2, 4))  # 2 queries of dimension d_k = 4
K = rng.standard_normal((3, 4))  # 3 keys
V = rng.standard_normal((3, 4))  # one value per key

output, weights = attention(Q, K, V)

print("Q:", Q.shape, " K:", K.shape, " V:", V.shape)
print("Attention weights (row i: how much query i takes from each key):")
print(np.round(weights, 3))
print("Each row sums to", weights.sum(axis=-1))
print("Output:", output.shape)
