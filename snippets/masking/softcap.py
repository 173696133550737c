"""Softcap: scores squashed into (-softcap, softcap) by a tanh, and the gradient the
backward multiplies by.

Gemma 2 and Grok cap their attention logits after scaling: s -> softcap * tanh(s /
softcap). The derivative is 1 - tanh(s / softcap)^2, which the backward applies to dS
before it forms dQ and dK. flashdoc computes the forward and backward with the cap
inside the kernels; here both are checked against autograd on the formula.
"""

import torch

import flashdoc

torch.manual_seed(0)
cap = 5.0

# --8<-- [start:math]
s = torch.linspace(-20, 20, 9, dtype=torch.float64, requires_grad=True)
capped = cap * torch.tanh(s / cap)
(grad,) = torch.autograd.grad(capped.sum(), s)
# what the kernels multiply dS by (mask.softcap_grad)
by_hand = 1 - torch.tanh(s / cap) ** 2
# --8<-- [end:math]
print("score        ", " ".join(f"{x:7.2f}" for x in s.tolist()))
print("capped       ", " ".join(f"{x:7.2f}" for x in capped.tolist()))
print("d capped / ds", " ".join(f"{x:7.4f}" for x in grad.tolist()))
diff = (grad - by_hand).abs().max().item()
print(f"autograd vs 1 - tanh^2: max difference {diff:.1e}\n")

# --8<-- [start:kernel]
device = "cuda" if torch.cuda.is_available() else "cpu"
# large scores, so the cap bites
q = (torch.randn(1, 48, 2, 32, device=device) * 4).requires_grad_()
k = torch.randn(1, 48, 2, 32, device=device, requires_grad=True)
v = torch.randn(1, 48, 2, 32, device=device, requires_grad=True)
out = flashdoc.flash_attn_func(q, k, v, causal=True, softcap=cap)


def reference(q, k, v):
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    scores = cap * torch.tanh(scores / cap)
    keep = torch.ones(48, 48, dtype=torch.bool, device=q.device).tril()
    p = scores.masked_fill(~keep, float("-inf")).softmax(-1)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


ref = reference(q, k, v)
dout = torch.randn_like(out)
grads = torch.autograd.grad(out, (q, k, v), dout)
grads_ref = torch.autograd.grad(ref, (q, k, v), dout)
# --8<-- [end:kernel]
diff = (out - ref).abs().max().item()
print(f"flashdoc vs the formula, fp32: out {diff:.1e}", end="")
for name, a, b in zip(("dq", "dk", "dv"), grads, grads_ref):
    print(f", {name} {(a - b).abs().max().item():.1e}", end="")
print()
