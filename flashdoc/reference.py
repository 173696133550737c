"""Teaching implementations of attention in plain PyTorch.

These are the versions the site walks through, from the definition to the tiled
algorithm that the Triton kernel implements. They favour clarity over speed and are
tested against each other and against the kernel.

All functions take tensors whose last two dimensions are (sequence, feature); any
leading dimensions (batch, heads) are carried along. ``causal=True`` masks key ``j``
for query ``i`` when ``j > i`` (top-left aligned, as
``torch.nn.functional.scaled_dot_product_attention``).
"""

from __future__ import annotations

import torch

__all__ = [
    "naive_attention",
    "online_softmax",
    "online_softmax_update",
    "tiled_attention",
    "tiled_attention_backward",
]


# --8<-- [start:naive]
def naive_attention(q, k, v, causal=False, scale=None):
    """softmax(q k^T * scale) v, materialising the full (n_q, n_k) score matrix.

    q: (..., n_q, d), k: (..., n_k, d), v: (..., n_k, d_v) -> (..., n_q, d_v)
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., n_q, n_k): the O(N^2) tensor
    if causal:
        n_q, n_k = scores.shape[-2:]
        future = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v


# --8<-- [end:naive]


# --8<-- [start:online_softmax]
def online_softmax(x, block_size=2):
    """Softmax over the last dimension, reading ``x`` one block of columns at a time.

    Keeps one running maximum ``m`` and one running denominator ``l`` per row. When a
    block raises the maximum, everything accumulated so far is rescaled by
    exp(m_old - m_new), so the result is exact.
    """
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
    # A second, cheap pass turns the statistics into probabilities. FlashAttention
    # avoids even this pass by folding it into the output accumulator (tiled_attention).
    return torch.exp(x - m[..., None]) / l[..., None]


# --8<-- [end:online_softmax]


# --8<-- [start:update]
def online_softmax_update(m, l, acc, s, v_blk):
    """Fold one tile of scores into a block of rows' running state: the heart of
    FlashAttention.

    m, l: (..., rows) running max and denominator; acc: (..., rows, d_v) unnormalised
    output; s: (..., rows, cols) scaled scores of this tile; v_blk: (..., cols, d_v) the
    matching values. Returns the new (m, l, acc) and, for inspection, alpha (how much
    the old state shrank) and p.
    """
    m_new = torch.maximum(m, s.amax(dim=-1))
    alpha = torch.exp(m - m_new)  # rescales the old state; 0 on the first tile
    p = torch.exp(s - m_new[..., None])  # unnormalised weights, all <= 1
    l = alpha * l + p.sum(dim=-1)
    acc = alpha[..., None] * acc + p @ v_blk
    return m_new, l, acc, alpha, p


# --8<-- [end:update]


# --8<-- [start:tiled]
def tiled_attention(q, k, v, block_q=64, block_k=64, causal=False, scale=None, return_lse=False):
    """FlashAttention's forward pass, tile by tile, in plain PyTorch.

    Each block of queries keeps a running max ``m``, denominator ``l`` and unnormalised
    output ``acc`` while blocks of keys and values stream past; no (n_q, n_k) tensor is
    ever allocated. q: (..., n_q, d), k: (..., n_k, d), v: (..., n_k, d_v) ->
    (..., n_q, d_v), and with ``return_lse`` also the log-sum-exp of each row of scores,
    (..., n_q): all that the backward pass keeps of the softmax.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for i in range(0, n_q, block_q):
        q_blk = q[..., i : i + block_q, :]
        rows = q_blk.shape[-2]  # the last block may be shorter than block_q
        like = dict(dtype=q.dtype, device=q.device)
        m = torch.full((*q.shape[:-2], rows), float("-inf"), **like)  # one per row
        l = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-2], rows, v.shape[-1], **like)
        for j in range(0, n_k, block_k):
            if causal and j > i + rows - 1:
                break  # every key of this block is in every query's future
            s = (q_blk @ k[..., j : j + block_k, :].transpose(-2, -1)) * scale
            if causal:
                q_idx = torch.arange(i, i + rows, device=q.device)[:, None]
                k_idx = torch.arange(j, j + s.shape[-1], device=q.device)[None, :]
                s = s.masked_fill(k_idx > q_idx, float("-inf"))
            v_blk = v[..., j : j + block_k, :]
            m, l, acc, _, _ = online_softmax_update(m, l, acc, s, v_blk)
        out[..., i : i + rows, :] = acc / l[..., None]  # normalise once, at the end
        lse[..., i : i + rows] = m + torch.log(l)
    return (out, lse) if return_lse else out


# --8<-- [end:tiled]


# --8<-- [start:tiled_backward]
def tiled_attention_backward(q, k, v, out, lse, dout, block_q=64, block_k=64, causal=False, scale=None):
    """FlashAttention's backward pass, tile by tile: ``tiled_attention``'s gradients.

    out and lse are the forward's output and log-sum-exp; dout is the gradient arriving
    at out. Each block of keys keeps its dK and dV accumulators while the blocks of
    queries stream past; every tile of P is recomputed from the scores and lse, so no
    (n_q, n_k) tensor is ever allocated.
    Returns (dq, dk, dv), shaped like (q, k, v).
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    delta = (dout * out).sum(dim=-1)  # rowsum(dO * O): one number per query row
    dq = torch.zeros_like(q)  # every key block adds its part of each query row's dQ
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    for j in range(0, n_k, block_k):
        k_blk, v_blk = k[..., j : j + block_k, :], v[..., j : j + block_k, :]
        cols = k_blk.shape[-2]
        dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)
        for i in range(0, n_q, block_q):
            q_blk, do_blk = q[..., i : i + block_q, :], dout[..., i : i + block_q, :]
            rows = q_blk.shape[-2]
            if causal and i + rows - 1 < j:
                continue  # every query of this block is before every key of the other
            s = (q_blk @ k_blk.transpose(-2, -1)) * scale
            if causal:
                q_idx = torch.arange(i, i + rows, device=q.device)[:, None]
                k_idx = torch.arange(j, j + cols, device=q.device)[None, :]
                s = s.masked_fill(k_idx > q_idx, float("-inf"))
            p = torch.exp(s - lse[..., i : i + rows, None])  # the forward's P, again
            dv_acc += p.transpose(-2, -1) @ do_blk  # dV = P^T dO
            dp = do_blk @ v_blk.transpose(-2, -1)  # dP = dO V^T
            ds = p * (dp - delta[..., i : i + rows, None])  # dS = P * (dP - delta)
            dq[..., i : i + rows, :] += (ds @ k_blk) * scale  # dQ = scale * dS K
            dk_acc += (ds.transpose(-2, -1) @ q_blk) * scale  # dK = scale * dS^T Q
        dk[..., j : j + cols, :], dv[..., j : j + cols, :] = dk_acc, dv_acc
    return dq, dk, dv


# --8<-- [end:tiled_backward]
