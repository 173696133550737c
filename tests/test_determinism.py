"""The backward uses no atomics: gradients are bit-identical from run to run."""

import pytest
import torch
from attention_oracle import make_qkv

import flashdoc


def _grads(q, k, v, dout, causal):
    out = flashdoc.flash_attn_func(q, k, v, causal=causal, deterministic=True)
    return torch.autograd.grad(out, (q, k, v), dout)


def _check(shape, causal, repeats, dtype):
    batch, seqlen_q, seqlen_k, heads, kv_heads, d = shape
    q, k, v = make_qkv(batch, seqlen_q, seqlen_k, heads, kv_heads, d, dtype)
    dout = torch.randn(q.shape, device=q.device, dtype=dtype)
    first = _grads(q, k, v, dout, causal)
    for _ in range(repeats):
        for name, a, b in zip(("dq", "dk", "dv"), first, _grads(q, k, v, dout, causal)):
            assert torch.equal(a, b), f"{name} differs between runs"


@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_cpu(causal):
    _check((1, 40, 40, 4, 2, 32), causal, repeats=2, dtype=torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_deterministic_many_repeats(causal):
    _check((2, 2048, 2048, 16, 4, 128), causal, repeats=50, dtype=torch.bfloat16)
