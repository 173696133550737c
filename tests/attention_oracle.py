"""The kernel tests' oracle: attention in float64, and flash-attn's error criterion.

A plain module rather than conftest.py, so tests import it by a name no other conftest.py shadows.
"""

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


DTYPE_IDS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}

# Marks the CPU subset's wide parametrized sweeps: on a GPU the test_gpu_* sweeps cover them (and more), so
# they are skipped there to save compile time. Single-purpose CPU tests run on both.
cpu_sweep = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU subset; the GPU sweeps cover it on a GPU")


def attention_math(q, k, v, softmax_scale, causal=False, bottom_right=True, dtype=torch.float64):
    """Attention in plain PyTorch, computed in ``dtype``. Layout (B, S, H, D); returns out (B, Sq, H, D) in
    ``dtype`` and lse (B, H, Sq) in float32.

    GQA/MQA: key/value heads are repeated to match the query heads. Causal: query i sees key j when
    j <= i + (seqlen_k - seqlen_q if bottom_right else 0); a row that sees no key outputs 0 and has lse -inf.
    With dtype=float64 this is the oracle; with the inputs' dtype it is "PyTorch's own error" for the criterion.
    """
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    seqlen_q, n_heads, seqlen_k, n_kv = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k = k.repeat_interleave(n_heads // n_kv, dim=2)
    v = v.repeat_interleave(n_heads // n_kv, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * softmax_scale
    if causal:
        offset = seqlen_k - seqlen_q if bottom_right else 0
        rows = torch.arange(seqlen_q, device=q.device)[:, None]
        cols = torch.arange(seqlen_k, device=q.device)[None, :]
        keep = cols <= rows + offset
    else:
        keep = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    has_key = keep.any(dim=1)[:, None]  # (Sq, 1)
    masked = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(masked.float(), dim=-1).detach()
    # empty rows: softmax over a finite dummy row, then zeroed, so gradients stay finite (and zero)
    p = torch.softmax(masked.masked_fill(~has_key, 0.0), dim=-1) * has_key
    out = torch.einsum("bhqk,bkhd->bqhd", p.to(dtype), v)
    return out, lse


def _rounding(x: torch.Tensor, dtype: torch.dtype) -> float:
    """flash-attn's absolute floor: the rounding error of storing values around x in ``dtype``."""
    x = x.to(dtype)
    return (x + 0.3 - 0.3 - x).abs().max().item()


def assert_close_like_flash_attn(name, ours, ref, pt, dtype, mult=2.0, floor=1e-5):
    """max|ours - ref| <= mult * max|pt - ref| + 2 * rounding(dtype) + floor, printed before asserting."""
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(ours), finite), f"{name}: inf/NaN pattern differs from the oracle"
    if not finite.any():
        return
    err = (ours.double() - ref.double())[finite].abs().max().item()
    err_pt = (pt.double() - ref.double())[finite].abs().max().item()
    atol = 2 * _rounding(ref[finite].double(), dtype) + floor
    print(f"{name}: max err {err:.3e}   pytorch-in-{dtype} err {err_pt:.3e}   allowed {mult * err_pt + atol:.3e}")
    assert err <= mult * err_pt + atol, f"{name}: max err {err:.3e} > {mult} x {err_pt:.3e} + {atol:.3e}"


def make_qkv(
    batch,
    seqlen_q,
    seqlen_k,
    n_heads,
    n_kv_heads,
    head_dim,
    dtype,
    device=DEVICE,
    scale=1.0,
    layout="bshd",
    requires_grad=True,
    seed=0,
):
    g = torch.Generator(device="cpu").manual_seed(seed)

    def one(s, h):
        t = torch.randn(batch, s, h, head_dim, generator=g) * scale
        t = t.to(device=device, dtype=dtype)
        if layout == "bhsd":
            t = t.transpose(1, 2).contiguous()
        return t.requires_grad_(requires_grad)

    return one(seqlen_q, n_heads), one(seqlen_k, n_kv_heads), one(seqlen_k, n_kv_heads)


def check_against_oracle(fn, q, k, v, softmax_scale, causal, bottom_right, with_grads=True, grad_mult=3.0):
    """Run fn(q, k, v) -> (out, lse or None) (layout B, S, H, D), and compare out, lse, dq, dk, dv to the
    float64 oracle with flash-attn's criterion against the same math in the inputs' dtype."""
    dtype = q.dtype
    out, lse = fn(q, k, v)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    pt_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out_ref, lse_ref = attention_math(*ref_in, softmax_scale, causal, bottom_right, torch.float64)
    out_pt, lse_pt = attention_math(*pt_in, softmax_scale, causal, bottom_right, dtype)
    assert out.shape == q.shape and out.dtype == dtype
    assert_close_like_flash_attn("out", out, out_ref, out_pt, dtype)
    if lse is not None:
        assert lse.dtype == torch.float32 and lse.shape == lse_ref.shape
        assert_close_like_flash_attn("lse", lse, lse_ref, lse_pt, dtype)
    if not with_grads:
        return
    g = torch.Generator(device="cpu").manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(device=q.device, dtype=dtype)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    grads_ref = torch.autograd.grad(out_ref, ref_in, dout.double())
    grads_pt = torch.autograd.grad(out_pt, pt_in, dout)
    for name, ours, ref, pt in zip(("dq", "dk", "dv"), (dq, dk, dv), grads_ref, grads_pt):
        assert ours.shape == ref.shape and ours.dtype == dtype
        assert_close_like_flash_attn(name, ours, ref, pt, dtype, mult=grad_mult)


def forward_backward(q, k, v, causal=True, deterministic=True):
    """flashdoc's output and the three gradients of out.sum(), on fresh leaves: for bit-for-bit comparisons of the
    same call made in different ways (another thread, device, launch path, CUDA graph). Deterministic by default,
    so that no fused backward (whose dq varies between runs) takes the call."""
    import flashdoc

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flashdoc.flash_attn_func(q, k, v, causal=causal, deterministic=deterministic)
    out.backward(torch.ones_like(out))
    return [out.detach(), q.grad, k.grad, v.grad]
