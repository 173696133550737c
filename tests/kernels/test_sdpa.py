"""flashdoc.scaled_dot_product_attention: PyTorch layout (B, H, S, D), top-left causal alignment."""

import pytest
import torch
import torch.nn.functional as F
from attention_oracle import check_against_oracle, cpu_sweep, make_qkv

import flashdoc


def _sdpa(causal, scale=None, enable_gqa=False):
    # adapt to the oracle's (B, S, H, D) layout: take and return transposed views
    def fn(q, k, v):
        out = flashdoc.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=causal,
            scale=scale,
            enable_gqa=enable_gqa,
        )
        assert out.is_contiguous(), "SDPA-layout inputs should give an SDPA-layout (contiguous) output"
        return out.transpose(1, 2), None

    return fn


@cpu_sweep
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(9, 40), (40, 9)])
def test_sdpa_top_left(seqlen_q, seqlen_k, causal, dtype):
    q, k, v = make_qkv(2, seqlen_q, seqlen_k, 2, 2, 32, dtype, layout="bhsd")
    q, k, v = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))  # (B, S, H, D) views
    check_against_oracle(_sdpa(causal), q, k, v, 32**-0.5, causal, bottom_right=False)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_torch(causal):
    q, k, v = make_qkv(1, 24, 37, 4, 2, 16, torch.float32, layout="bhsd", requires_grad=False)
    ours = flashdoc.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3, enable_gqa=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3, enable_gqa=True)
    err = (ours - theirs).abs().max().item()
    print(f"max |flashdoc - torch| = {err:.2e}")
    assert ours.shape == theirs.shape and err < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(113, 203), (1024, 1023), (4097, 4097)])
def test_gpu_sdpa(seqlen_q, seqlen_k, head_dim, causal, dtype):
    q, k, v = make_qkv(1, seqlen_q, seqlen_k, 4, 2, head_dim, dtype, layout="bhsd")
    q, k, v = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    check_against_oracle(_sdpa(causal, enable_gqa=True), q, k, v, head_dim**-0.5, causal, bottom_right=False)


@pytest.mark.gpu
def test_gpu_sdpa_matches_torch_flash():
    q, k, v = make_qkv(4, 1024, 1024, 16, 16, 128, torch.bfloat16, layout="bhsd", requires_grad=False)
    ours = flashdoc.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    err, err_torch = ((ours.float() - ref).abs().max().item(), (theirs.float() - ref).abs().max().item())
    print(f"flashdoc {err:.2e}, torch bf16 {err_torch:.2e}")
    assert err <= 2 * err_torch + 1e-3
