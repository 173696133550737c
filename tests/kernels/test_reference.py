"""The teaching code in flashdoc/reference.py: each version agrees with the definition, in float64."""

from __future__ import annotations

import json
import math

import pytest
import torch

from flashdoc.reference import (
    naive_attention,
    online_softmax,
    online_softmax_update,
    tiled_attention,
    tiled_attention_backward,
)
from tools.outputs import snippet

F64 = torch.float64


def qkv(batch, heads, n_q, n_k, d, d_v=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n_q, d, generator=g, dtype=F64)
    k = torch.randn(batch, heads, n_k, d, generator=g, dtype=F64)
    v = torch.randn(batch, heads, n_k, d_v or d, generator=g, dtype=F64)
    return q, k, v


def definition(q, k, v, causal=False, scale=None):
    """softmax(q k^T * scale) v written out with an explicit boolean mask (top-left aligned)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.einsum("...id,...jd->...ij", q, k) * scale
    if causal:
        i = torch.arange(q.shape[-2])[:, None]
        j = torch.arange(k.shape[-2])[None, :]
        s = torch.where(j <= i, s, -math.inf)
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q,n_k", [(1, 1), (7, 13), (64, 64), (65, 33), (100, 100), (33, 130)])
@pytest.mark.parametrize("block_q,block_k", [(16, 16), (32, 8), (5, 64)])
def test_tiled_matches_naive_on_lengths_that_are_not_block_multiples(n_q, n_k, block_q, block_k, causal):
    q, k, v = qkv(2, 3, n_q, n_k, 16, d_v=24)
    expected = definition(q, k, v, causal=causal)
    torch.testing.assert_close(naive_attention(q, k, v, causal=causal), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(tiled_attention(q, k, v, block_q, block_k, causal=causal), expected, rtol=0, atol=1e-12)


def test_tiled_honours_an_explicit_scale():
    q, k, v = qkv(1, 2, 37, 41, 8)
    torch.testing.assert_close(
        tiled_attention(q, k, v, 16, 16, scale=0.3), definition(q, k, v, scale=0.3), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("block_size", [1, 3, 8, 1000])
def test_online_softmax_is_softmax_even_where_exp_would_overflow(block_size):
    x = torch.randn(4, 3, 50, dtype=F64, generator=torch.Generator().manual_seed(1)) * 1000  # exp(1000) = inf
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1), rtol=0, atol=1e-12)


def test_update_over_two_tiles_equals_one_tile_over_both():
    s = torch.randn(5, 12, dtype=F64)
    v = torch.randn(12, 3, dtype=F64)
    start = (torch.full((5,), -math.inf, dtype=F64), torch.zeros(5, dtype=F64), torch.zeros(5, 3, dtype=F64))
    m1, l1, acc1, alpha, _ = online_softmax_update(*start, s, v)
    assert torch.equal(alpha, torch.zeros(5, dtype=F64))  # nothing to rescale before the first tile
    m, l, acc, _, _ = online_softmax_update(*start, s[:, :7], v[:7])
    m, l, acc, _, _ = online_softmax_update(m, l, acc, s[:, 7:], v[7:])
    torch.testing.assert_close((m, l, acc), (m1, l1, acc1), rtol=0, atol=1e-12)
    torch.testing.assert_close(acc / l[:, None], torch.softmax(s, dim=-1) @ v, rtol=0, atol=1e-12)


def test_the_worked_example_numbers():
    """Seed 000's 4x4 example: K = 2I, so S = Q K^T / 2 = Q; V = I, so the output rows are probabilities."""
    q = torch.tensor([[1, 2, 3, 4], [2, 1, 0, -1], [4, 3, 2, 1], [-1, 0, 1, 2]], dtype=F64)
    k, v = 2 * torch.eye(4, dtype=F64), torch.eye(4, dtype=F64)
    out = tiled_attention(q, k, v, block_q=2, block_k=2)
    row = torch.tensor([0.0321, 0.0871, 0.2369, 0.6439], dtype=F64)
    torch.testing.assert_close(out, torch.stack([row, row.flip(0), row.flip(0), row]), rtol=0, atol=5e-5)

    # Row 1 of tile S12 raises the running max from 2 to 4: the old state shrinks by exp(-2) = 0.1353.
    m, l, acc, _, _ = online_softmax_update(
        torch.full((2,), -math.inf, dtype=F64),
        torch.zeros(2, dtype=F64),
        torch.zeros(2, 4, dtype=F64),
        q[:2, :2],
        v[:2],
    )
    assert m.tolist() == [2.0, 2.0]
    m, l, acc, alpha, _ = online_softmax_update(m, l, acc, q[:2, 2:], v[2:])
    assert m.tolist() == [4.0, 2.0]
    assert round(alpha[0].item(), 4) == 0.1353 and alpha[1].item() == 1.0


def test_worked_example_trace_follows_the_tile_stepper_contract():
    """The recorded trace.json that the interactive tile stepper reads: Q, K, V, scale, block, and per worker
    the state (S, m_old, m_new, alpha, P, l, O) after each K/V block."""
    trace = json.loads((snippet("flashattention/worked_example").output_dir / "trace.json").read_text())
    assert trace["scale"] == 0.5 and trace["block"] == 2
    assert [w["rows"] for w in trace["workers"]] == [[0, 1], [2, 3]]
    for w in trace["workers"]:
        assert [s["k_block"] for s in w["steps"]] == [0, 1]
        first, second = w["steps"]
        assert first["m_old"] == ["-inf", "-inf"] and first["alpha"] == [0.0, 0.0]
        assert second["m_old"] == first["m_new"]
        for step in w["steps"]:
            assert set(step) == {"k_block", "S", "m_old", "m_new", "alpha", "P", "l", "O"}
            p = torch.tensor(step["P"], dtype=F64)
            torch.testing.assert_close(
                p,
                torch.exp(torch.tensor(step["S"], dtype=F64) - torch.tensor(step["m_new"], dtype=F64)[:, None]),
                rtol=0,
                atol=1e-6,
            )
        o, l = torch.tensor(second["O"], dtype=F64), torch.tensor(second["l"], dtype=F64)
        torch.testing.assert_close(o / l[:, None], torch.tensor(w["output"], dtype=F64), rtol=0, atol=1e-5)
    assert trace["workers"][0]["steps"][1]["alpha"][0] == round(math.exp(-2), 6)
    q, k = torch.tensor(trace["Q"], dtype=F64), torch.tensor(trace["K"], dtype=F64)
    expected = torch.softmax(q @ k.T * trace["scale"], dim=-1) @ torch.tensor(trace["V"], dtype=F64)
    torch.testing.assert_close(torch.tensor(trace["output"], dtype=F64), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q,n_k,block_q,block_k", [(1, 1, 16, 16), (7, 13, 32, 8), (65, 33, 16, 16), (33, 70, 5, 64)])
def test_tiled_backward_matches_autograd(n_q, n_k, block_q, block_k, causal):
    """The tiled backward's dQ, dK, dV equal autograd's through the definition, in float64."""
    q, k, v = qkv(2, 3, n_q, n_k, 16, d_v=24)
    dout = torch.randn(2, 3, n_q, 24, dtype=F64, generator=torch.Generator().manual_seed(2))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    definition(q, k, v, causal=causal).backward(dout)
    with torch.no_grad():
        out, lse = tiled_attention(q, k, v, block_q, block_k, causal=causal, return_lse=True)
        grads = tiled_attention_backward(q, k, v, out, lse, dout, block_q, block_k, causal=causal)
    for name, got, t in zip(("dq", "dk", "dv"), grads, (q, k, v)):
        torch.testing.assert_close(got, t.grad, rtol=0, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}")


def test_tiled_lse_is_the_rows_log_sum_exp():
    q, k, v = qkv(1, 2, 37, 41, 8)
    _, lse = tiled_attention(q, k, v, 16, 16, causal=True, return_lse=True)
    s = (q @ k.transpose(-2, -1)) * 8**-0.5
    s = s.masked_fill(torch.ones(37, 41, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(s, dim=-1), rtol=0, atol=1e-12)


def test_tiled_backward_honours_an_explicit_scale():
    q, k, v = qkv(1, 1, 19, 23, 8)
    dout = torch.randn(1, 1, 19, 8, dtype=F64, generator=torch.Generator().manual_seed(3))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    definition(q, k, v, scale=0.3).backward(dout)
    with torch.no_grad():
        out, lse = tiled_attention(q, k, v, 8, 8, scale=0.3, return_lse=True)
        grads = tiled_attention_backward(q, k, v, out, lse, dout, 8, 8, scale=0.3)
    for got, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(got, t.grad, rtol=0, atol=1e-12)
