"""torch.compile(fullgraph=True) traces through flashdoc's kernels, forward and
backward, with no graph break."""

import torch

import flashdoc

device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
# On the CPU, "aot_eager" traces the same graph (forward and backward) without needing
# a C++ compiler.
backend = "inductor" if device == "cuda" else "aot_eager"
dim, heads, seqlen = (1024, 8, 1024) if device == "cuda" else (64, 2, 24)


# --8<-- [start:compile]
class SelfAttention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):  # x: (batch, seqlen, dim)
        b, s, dim = x.shape
        # views, no copies
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        # (batch, seqlen, heads, head_dim)
        o = flashdoc.flash_attn_func(q, k, v, causal=True)
        return self.out(o.reshape(b, s, dim))


torch.manual_seed(0)
model = SelfAttention(dim, heads).to(device, dtype)
# fullgraph: a graph break would raise
compiled = torch.compile(model, backend=backend, fullgraph=True)
x = torch.randn(2, seqlen, dim, device=device, dtype=dtype, requires_grad=True)
y = compiled(x)
y.float().square().mean().backward()
# --8<-- [end:compile]
eager = model(x)
print(
    f"compiled with backend={backend!r}, fullgraph=True: output {tuple(y.shape)}, "
    f"x.grad {tuple(x.grad.shape)}"
)
print(f"max |compiled - eager| = {(y - eager).abs().max().item():.1e}")
