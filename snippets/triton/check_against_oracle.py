"""How flashdoc's kernels are tested: flash-attn's criterion, on the output and on all
three gradients.

A kernel working in half precision cannot match exact attention, so the question is
whether its error is in line with half precision: its error against a reference must be
at most twice the error of PyTorch's own attention computed in the same dtype.
flash-attn's tests take the reference in float32, from inputs upcast to float32;
flashdoc's tests take it in float64. This program applies the criterion with both.
"""

import torch

import flashdoc

device = "cuda" if torch.cuda.is_available() else "cpu"
shape = (2, 1000, 1023, 8, 128) if device == "cuda" else (1, 45, 70, 2, 32)
batch, seqlen_q, seqlen_k, heads, head_dim = shape


# --8<-- [start:criterion]
def attention(q, k, v, dtype, causal=True):
    """Plain PyTorch in dtype; layout (batch, seqlen, heads, head_dim);
    causal mask aligned to the bottom-right corner, as flash-attn's."""
    q, k, v = (x.to(dtype) for x in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    if causal:
        i = torch.arange(q.shape[1], device=q.device)[:, None]
        j = torch.arange(k.shape[1], device=q.device)[None, :]
        s = s.masked_fill(j > i + k.shape[1] - q.shape[1], float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v)


def outputs_and_grads(fn, q, k, v, dout, dtype=None):
    """fn's output and gradients, in float64, taken at inputs of dtype (default:
    theirs): a reference's gradients must not be rounded back to half precision."""
    q, k, v = (x.detach().to(dtype or x.dtype).requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout.to(out.dtype))
    return [t.double() for t in (out, q.grad, k.grad, v.grad)]


torch.manual_seed(0)
for dtype in (torch.float16, torch.bfloat16):
    q = torch.randn(batch, seqlen_q, heads, head_dim, device=device, dtype=dtype)
    k = torch.randn(batch, seqlen_k, heads, head_dim, device=device, dtype=dtype)
    v = torch.randn(batch, seqlen_k, heads, head_dim, device=device, dtype=dtype)
    dout = torch.randn_like(q)
    same_dtype = outputs_and_grads(lambda *x: attention(*x, dtype), q, k, v, dout)
    flash = outputs_and_grads(
        lambda *x: flashdoc.flash_attn_func(*x, causal=True), q, k, v, dout
    )
    for ref_dtype in (torch.float32, torch.float64):  # flash-attn's, flashdoc's
        ref = outputs_and_grads(
            lambda *x: attention(*x, ref_dtype), q, k, v, dout, ref_dtype
        )
        for name, r, p, f in zip(("out", "dq", "dk", "dv"), ref, same_dtype, flash):
            err_flash = (f - r).abs().max().item()
            err_torch = (p - r).abs().max().item()
            print(
                f"{str(dtype)[6:]:8} vs {str(ref_dtype)[6:]:7} {name:3}  "
                f"flashdoc {err_flash:.2e}  PyTorch {err_torch:.2e}  "
                f"ratio {err_flash / err_torch:.2f}"
            )
            assert err_flash <= 2 * err_torch + 1e-5, (name, dtype, ref_dtype)
# --8<-- [end:criterion]
