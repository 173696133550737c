"""This GPU's memory hierarchy, its measured bandwidth and matmul speed, and where the
steps of naive attention and of a fused FlashAttention kernel sit on the roofline those
two numbers draw."""
# flashdoc: gpu-only

import matplotlib.pyplot as plt
import torch

import flashdoc

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def median_seconds(fn, reps=20):
    """Median wall time of fn() after one warm-up call (CUDA events on the GPU)."""
    fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = (
                torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True),
            )
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            import time

            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


# --8<-- [start:properties]
rows = ["| property | value |", "|---|---|"]
if device == "cuda":
    p = torch.cuda.get_device_properties(0)
    smem_all_sms = p.multi_processor_count * p.shared_memory_per_multiprocessor
    rows += [
        f"| GPU | {p.name} |",
        f"| streaming multiprocessors (SMs) | {p.multi_processor_count} |",
        f"| shared memory per SM | {p.shared_memory_per_multiprocessor // 1024} KiB |",
        (
            "| shared memory one block can use | "
            f"{p.shared_memory_per_block_optin // 1024} KiB |"
        ),
        (
            f"| registers per SM | {p.regs_per_multiprocessor} × 4 bytes = "
            f"{p.regs_per_multiprocessor * 4 // 1024} KiB |"
        ),
        f"| shared memory, all SMs together | {smem_all_sms / 2**20:.1f} MiB |",
        f"| L2 cache | {p.L2_cache_size / 2**20:.0f} MiB |",
        f"| HBM capacity | {p.total_memory / 2**30:.0f} GiB |",
    ]
else:
    rows.append(
        "| GPU | none (CPU run: the numbers below only show that the code works) |"
    )
# --8<-- [end:properties]

# --8<-- [start:measure]
# HBM bandwidth: copy a buffer far larger than L2, so every byte goes to and from HBM
# (read once, written once).
n_bytes = 2**31 if device == "cuda" else 2**24
src = torch.empty(n_bytes // 4, device=device)
dst = torch.empty_like(src)
bandwidth = 2 * n_bytes / median_seconds(lambda: dst.copy_(src))  # bytes per second
del src, dst

# Compute: a large bf16 matrix multiply, the best case for the tensor cores.
n = 8192 if device == "cuda" else 512
a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
peak_flops = 2 * n**3 / median_seconds(lambda: a @ b)
del a, b
# FLOPs per byte where a kernel stops being limited by memory
ridge = peak_flops / bandwidth
# --8<-- [end:measure]
rows += [
    f"| measured HBM bandwidth (copy) | {bandwidth / 1e12:.2f} TB/s |",
    f"| measured bf16 matmul | {peak_flops / 1e12:.0f} TFLOP/s |",
    f"| ridge point (matmul / bandwidth) | {ridge:.0f} FLOP/byte |",
]
hardware = "\n".join(rows) + "\n"
print(hardware)
with open("hardware.md", "w") as f:
    f.write(hardware)

# --8<-- [start:attention]
# Naive attention in three kernels vs one fused kernel, bf16, 32 heads of one sequence,
# head dim 128.
bh, seq, d = (32, 4096, 128) if device == "cuda" else (2, 64, 64)
q, k, v = (
    torch.randn(1, bh, seq, d, device=device, dtype=torch.bfloat16) for _ in range(3)
)
e = 2  # bytes per bf16 element
s = q @ k.transpose(-2, -1)
p = torch.softmax(s, dim=-1)
steps = {  # name: (function, FLOPs, the fewest bytes it must move to and from HBM)
    "S = Q K^T": (
        lambda: q @ k.transpose(-2, -1),
        2 * bh * seq * seq * d,
        e * bh * (2 * seq * d + seq * seq),
    ),
    # about 5 operations per score: max, subtract, exp, sum, divide
    "P = softmax(S)": (
        lambda: torch.softmax(s, dim=-1),
        5 * bh * seq * seq,
        e * bh * 2 * seq * seq,
    ),
    "O = P V": (
        lambda: p @ v,
        2 * bh * seq * seq * d,
        e * bh * (seq * seq + 2 * seq * d),
    ),
    # one kernel: reads Q, K, V once and writes O; the N x N scores never leave the chip
    "fused (flashdoc)": (
        lambda: flashdoc.scaled_dot_product_attention(q, k, v),
        4 * bh * seq * seq * d,
        e * bh * 4 * seq * d,
    ),
}
# --8<-- [end:attention]
points = []
table = [
    "| step | time (ms) | FLOP/byte | achieved TFLOP/s | achieved TB/s | bound by |",
    "|---|---|---|---|---|---|",
]
for name, (fn, flops, moved) in steps.items():
    t = median_seconds(fn, reps=10 if device == "cuda" else 2)
    intensity = flops / moved
    points.append((name, intensity, flops / t))
    bound = "memory" if intensity < ridge else "compute"
    table.append(
        f"| {name} | {t * 1e3:.2f} | {intensity:.0f} | {flops / t / 1e12:.1f} "
        f"| {moved / t / 1e12:.2f} | {bound} |"
    )
table = "\n".join(table) + "\n"
print(f"batch x heads = {bh}, N = {seq}, head dim = {d}, bf16\n")
print(table)
with open("roofline.md", "w") as f:
    f.write(table)

fig, ax = plt.subplots(figsize=(7, 4.5))
# the ridge among the points, so the line turns exactly there, not cutting the corner
x = sorted([2.0**i for i in range(-2, 13)] + [ridge])
ax.loglog(
    x,
    [min(peak_flops, bandwidth * i) / 1e12 for i in x],
    color="black",
    lw=2,
    label="roofline (measured)",
)
ax.axvline(ridge, color="grey", ls=":", lw=1)
for (name, intensity, achieved), marker in zip(points, "osD*"):
    ax.loglog(
        intensity,
        achieved / 1e12,
        marker,
        ms=10,
        label=f"{name}: {achieved / 1e12:.1f} TFLOP/s",
    )
ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
ax.set_ylabel("TFLOP/s")
ax.set_title(
    f"Roofline of {torch.cuda.get_device_name(0) if device == 'cuda' else 'this CPU'}"
    f", N = {seq}"
)
ax.legend(fontsize=8, loc="lower right")
ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()
fig.savefig("roofline.png", dpi=150)
