"""Bad input -> ValueError/TypeError naming the argument and what is allowed."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from attention_oracle import DEVICE

import flashdoc


def t(*shape, dtype=torch.float16, device=DEVICE):
    return torch.randn(*shape).to(device=device, dtype=dtype)


Q = (2, 8, 4, 32)  # (batch, seqlen, heads, head_dim)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(k=t(*Q, dtype=torch.float32)), TypeError, "k has dtype torch.float32 but q"),
        (dict(v=t(*Q, dtype=torch.bfloat16)), TypeError, "v has dtype"),
        (
            dict(q=t(*Q).to(torch.int32), k=t(*Q).to(torch.int32), v=t(*Q).to(torch.int32)),
            TypeError,
            "q has dtype torch.int32; allowed",
        ),
        (dict(q=t(2, 8, 32)), ValueError, "q must be 4-D"),
        (dict(k=t(2, 8, 4, 32, 1)), ValueError, "k must be 4-D"),
        (dict(q=t(2, 8, 4, 264), k=t(2, 8, 4, 264), v=t(2, 8, 4, 264)), ValueError, "head_dim is 264; allowed"),
        (dict(q=t(2, 8, 4, 0), k=t(2, 8, 4, 0), v=t(2, 8, 4, 0)), ValueError, "head_dim is 0; allowed: 1 to 256"),
        (dict(k=t(2, 8, 3, 32), v=t(2, 8, 3, 32)), ValueError, r"q heads \(4\) must be a multiple of k heads \(3\)"),
        (dict(v=t(2, 9, 4, 32)), ValueError, "k and v must have the same seqlen"),
        (dict(k=t(3, 8, 4, 32), v=t(3, 8, 4, 32)), ValueError, "batch sizes differ"),
        (dict(k=t(2, 0, 4, 32), v=t(2, 0, 4, 32)), ValueError, "zero keys"),
        (dict(v=t(2, 8, 4, 16)), ValueError, "share one head_dim"),
        (dict(v=t(2, 8, 2, 32)), ValueError, "same number of heads"),
        (dict(softmax_scale=-1.0), ValueError, "softmax_scale must be a finite number > 0"),
        (dict(softmax_scale="0.1"), TypeError, "softmax_scale must be a float"),
        (dict(causal=1), TypeError, "causal must be a bool"),
        (dict(q=[1.0]), TypeError, "q must be a torch.Tensor"),
        # flash-attn 2's options
        (dict(dropout_p=1.0), ValueError, r"dropout_p must be in \[0, 1\)"),
        (dict(dropout_p=-0.1), ValueError, r"dropout_p must be in \[0, 1\)"),
        (dict(dropout_p=None), TypeError, "dropout_p must be a float"),
        (dict(window_size=(128, -2)), ValueError, r"window_size must be two ints >= -1"),
        (dict(window_size=-1), TypeError, "window_size must be a pair of ints"),
        (dict(window_size=(1, 2, 3)), TypeError, "window_size must be a pair of ints"),
        (dict(window_size=(1.5, 0)), TypeError, "window_size must be a pair of ints"),
        (dict(softcap=-1.0), ValueError, "softcap must be a finite float >= 0"),
        (dict(softcap=float("inf")), ValueError, "softcap must be a finite float >= 0"),
        (dict(softcap="0"), TypeError, "softcap must be a float"),
        (dict(alibi_slopes=torch.ones(3)), ValueError, r"alibi_slopes has shape \(3,\); allowed: \(4,\) or \(2, 4\)"),
        (dict(alibi_slopes=torch.ones(4, 2)), ValueError, r"alibi_slopes has shape \(4, 2\)"),
        (
            dict(alibi_slopes=torch.ones(4, dtype=torch.float16)),
            TypeError,
            "alibi_slopes must be a float32 tensor, got dtype torch.float16",
        ),
        (dict(alibi_slopes=torch.ones(4, device="meta")), ValueError, "alibi_slopes is on meta but q is on"),
        (dict(alibi_slopes=[0.1] * 4), TypeError, r"alibi_slopes must be a float32 tensor .*or None, got list"),
        (dict(return_attn_probs=1), TypeError, "return_attn_probs must be a bool"),
    ],
)
def test_flash_attn_func_rejects(kwargs, exc, match):
    args = dict(q=t(*Q), k=t(*Q), v=t(*Q))
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        flashdoc.flash_attn_func(**args)


def test_flash_attn_func_takes_flash_attn_2_defaults_by_keyword():
    """A call written for flash-attn 2, every option spelled out at its default, runs and gives the same output."""
    q, k, v = t(*Q), t(*Q), t(*Q)
    plain = flashdoc.flash_attn_func(q, k, v, causal=True)
    spelled = flashdoc.flash_attn_func(
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=True,
        window_size=[-1, -1],
        softcap=0.0,
        alibi_slopes=None,
        deterministic=False,
        return_attn_probs=False,
    )
    assert torch.equal(plain, spelled)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (a second device to mismatch)")
def test_device_mismatch():
    with pytest.raises(ValueError, match="k is on cpu but q is on cuda"):
        flashdoc.flash_attn_func(t(*Q, device="cuda"), t(*Q, device="cpu"), t(*Q, device="cuda"))


def test_device_mismatch_meta():
    with pytest.raises(ValueError, match="is on meta but q is on"):
        flashdoc.flash_attn_func(t(*Q), t(*Q, device="meta"), t(*Q))


S = (2, 4, 8, 32)  # (batch, heads, seqlen, head_dim)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (
            dict(attn_mask=torch.ones(8, 8, dtype=torch.bool)),
            ValueError,
            "attn_mask is not supported by.*is_causal=True",
        ),
        (dict(dropout_p=1.5), ValueError, r"dropout_p must be in \[0, 1\)"),
        (dict(dropout_p="0.1"), TypeError, "dropout_p must be a float"),
        (dict(key=t(2, 2, 8, 32), value=t(2, 2, 8, 32)), ValueError, "enable_gqa=True"),
        (dict(key=t(2, 3, 8, 32), value=t(2, 3, 8, 32), enable_gqa=True), ValueError, "query heads"),
        (dict(scale=0.0), ValueError, "scale must be a finite number > 0"),
        (dict(is_causal="yes"), TypeError, "is_causal must be a bool"),
        (dict(key=t(*S, dtype=torch.float32)), TypeError, "key has dtype torch.float32 but query"),
    ],
)
def test_sdpa_rejects(kwargs, exc, match):
    args = dict(query=t(*S), key=t(*S), value=t(*S))
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        flashdoc.scaled_dot_product_attention(**args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is only turned on without a CUDA GPU")
def test_triton_imported_first_without_gpu():
    """Triton decorates its own library functions when it is imported: with the interpreter turned on only
    afterwards, the kernels would fail deep inside Triton. They refuse with the fix instead; the pure-PyTorch
    teaching code still runs."""
    script = (
        "import triton, torch, flashdoc\n"
        "q = torch.randn(1, 8, 2, 16)\n"
        "print('reference', tuple(flashdoc.reference.naive_attention(q, q, q).shape))\n"
        "flashdoc.flash_attn_func(q, q, q)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        cwd=pathlib.Path(__file__).resolve().parents[2],
    )
    assert "reference (1, 8, 2, 16)" in run.stdout, run.stderr
    assert run.returncode != 0
    assert "RuntimeError: flashdoc's kernels run in Triton's interpreter here" in run.stderr
    assert "Import flashdoc before triton" in run.stderr
