"""Why the benchmark's float16 rows trail their bfloat16 twins by a few percent: the
same kernels, timed on bfloat16 inputs, on float16 inputs, and on float16 inputs that
hold the bfloat16 inputs' values."""
# flashdoc: gpu-only

import time

import torch

import flashdoc

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
# head dim 64 without the mask at 16k tokens, one row of the benchmark below; on the
# CPU (Triton's interpreter) a smoke run whose numbers mean nothing
batch, seqlen, heads, head_dim = (1, 16384, 32, 64) if cuda else (1, 64, 2, 32)

# --8<-- [start:inputs]
shape = (batch, seqlen, heads, head_dim)
bf16 = [  # q, k, v, dout
    torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(4)
]
inputs = {
    "bfloat16": bf16,
    "float16": [torch.randn_like(x, dtype=torch.float16) for x in bf16],
    # the bfloat16 inputs' numbers: float16's three extra mantissa bits all zero
    "float16 holding the bfloat16 values": [x.to(torch.float16) for x in bf16],
}
# --8<-- [end:inputs]
for tensors in inputs.values():
    for t in tensors[:3]:  # q, k, v (the fourth is dout)
        t.requires_grad_()


def forward(q, k, v, dout):
    with torch.no_grad():
        flashdoc.flash_attn_func(q, k, v)


def forward_backward(q, k, v, dout):
    # no .grad to accumulate into
    torch.autograd.grad(flashdoc.flash_attn_func(q, k, v), (q, k, v), dout)


def milliseconds(fn, tensors):
    """The median time of a call (on the CPU: of one call)."""
    fn(*tensors)  # compile first
    if not cuda:
        start = time.perf_counter()
        fn(*tensors)
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench

    return do_bench(lambda: fn(*tensors), warmup=25, rep=200)


flops = 4 * batch * heads * seqlen**2 * head_dim
times = {(name, fn): [] for name in inputs for fn in (forward, forward_backward)}
cases = list(times)
# five rounds through every case, each starting one case later (the GPU's clock drifts)
for r in range(5):
    for name, fn in cases[r % len(cases) :] + cases[: r % len(cases)]:
        times[name, fn].append(milliseconds(fn, inputs[name]))
rows = ["| inputs | forward, TFLOP/s | forward + backward, TFLOP/s |", "|---|---|---|"]
for name in inputs:
    # the median round
    fwd, fwd_bwd = (sorted(times[name, fn])[2] for fn in (forward, forward_backward))
    rows.append(
        f"| {name} | {flops / fwd / 1e9:.0f} | {3.5 * flops / fwd_bwd / 1e9:.0f} |"
    )
print(
    f"flash_attn_func, batch {batch}, {seqlen} tokens, {heads} heads, "
    f"head dim {head_dim}, no mask, "
    f"on {torch.cuda.get_device_name() if cuda else 'the CPU'}"
)
print("\n".join(rows))
with open("dtype_bits.md", "w") as f:
    f.write("\n".join(rows) + "\n")
