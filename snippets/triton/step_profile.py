"""Where one training call's GPU time goes: each kernel's time per forward + backward
call, from PyTorch's profiler, and how much the two backward kernels on their two
streams overlap."""
# flashdoc: gpu-only

import collections

import torch
from torch.profiler import ProfilerActivity, profile

import flashdoc

cuda = torch.cuda.is_available()
device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
# d = 128 at 4k tokens, as one row of the benchmark below (16k tokens in total,
# 2048 / d heads)
batch, seqlen, heads, head_dim = (4, 4096, 16, 128) if cuda else (1, 64, 2, 32)
calls = 20 if cuda else 1

# --8<-- [start:profile]
q, k, v = (
    torch.randn(
        batch, seqlen, heads, head_dim, device=device, dtype=dtype, requires_grad=True
    )
    for _ in range(3)
)
dout = torch.randn_like(q)


def step():
    # a fresh step: no gradient accumulation kernels in the profile
    q.grad = k.grad = v.grad = None
    flashdoc.flash_attn_func(q, k, v).backward(dout)


for _ in range(3):  # compile and autotune first
    step()
with profile(
    activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
) as prof:
    for _ in range(calls):
        step()
    if cuda:
        torch.cuda.synchronize()
kernels = sorted(
    (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
    key=lambda e: e.time_range.start,
)
per_kernel = collections.defaultdict(float)  # microseconds per call
for e in kernels:
    per_kernel[e.name] += e.time_range.elapsed_us() / calls
# The backward of one call: from its first kernel (the preprocess) to the last of dK/dV
# and dQ to finish
spans = []
for i, e in enumerate(kernels):
    if e.name.startswith("_attn_bwd_preprocess"):
        rest = [
            x
            for x in kernels[i + 1 : i + 3]
            if x.name.startswith(("_attn_bwd_dkdv", "_attn_bwd_dq"))
        ]
        spans.append(max(x.time_range.end for x in rest) - e.time_range.start)
# --8<-- [end:profile]

rows = ["| kernel | GPU time per call |", "|---|---|"]
rows += [
    f"| `{name}` | {us / 1e3:.3f} ms |"
    for name, us in sorted(per_kernel.items(), key=lambda x: -x[1])
]
if spans:
    backward_sum = sum(
        us for name, us in per_kernel.items() if name.startswith("_attn_bwd")
    )
    span = sorted(spans)[len(spans) // 2]
    rows += [
        (
            "| the backward's three kernels, one after the other "
            f"| {backward_sum / 1e3:.3f} ms |"
        ),
        (
            "| the backward, first kernel's start to last kernel's end (median) "
            f"| {span / 1e3:.3f} ms |"
        ),
    ]
else:
    rows = [
        "On the CPU the kernels run in Triton's interpreter and the profiler sees "
        "no GPU kernel: run this on a CUDA GPU."
    ]
print(
    f"flash_attn_func(...).backward(), batch {batch}, {seqlen} tokens, {heads} heads, "
    f"head dim {head_dim}, "
    f"{str(dtype).removeprefix('torch.')}, {calls} calls"
)
print("\n".join(rows))
with open("step_profile.md", "w") as f:
    f.write("\n".join(rows) + "\n")
