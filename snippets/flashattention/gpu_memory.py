"""Peak GPU memory of one attention call, naive vs flashdoc's fused kernel, doubling N
until naive runs out."""
# flashdoc: gpu-only

import matplotlib.pyplot as plt
import torch

import flashdoc
from flashdoc.reference import naive_attention

device = "cuda" if torch.cuda.is_available() else "cpu"
heads, d, dtype = (
    (32, 128, torch.bfloat16) if device == "cuda" else (2, 64, torch.float32)
)
# up to 128k on the GPU
seqlens = [1024 * 2**i for i in range(8)] if device == "cuda" else [32, 64]


# --8<-- [start:measure]
def peak_extra_bytes(attn, n):
    """Memory allocated at the peak of one causal forward, minus the inputs that were
    there before it."""
    q, k, v = (
        torch.randn(1, heads, n, d, device=device, dtype=dtype) for _ in range(3)
    )
    if device == "cpu":  # no allocator statistics on the CPU: just check that it runs
        attn(q, k, v)
        return 0
    attn(q, k, v)  # warm-up: compilation and autotuning scratch must not count
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    attn(q, k, v)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


methods = {
    "naive": lambda q, k, v: naive_attention(q, k, v, causal=True),
    "flashdoc": lambda q, k, v: flashdoc.scaled_dot_product_attention(
        q, k, v, is_causal=True
    ),
}
# --8<-- [end:measure]
peaks = {name: {} for name in methods}
for name, attn in methods.items():
    for n in seqlens:
        try:
            peaks[name][n] = peak_extra_bytes(attn, n)
        except torch.OutOfMemoryError:
            peaks[name][n] = None  # out of memory: larger N would be too
            break
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()

rows = ["| N | naive | flashdoc | naive / flashdoc |", "|---|---|---|---|"]
for n in seqlens:
    a, b = peaks["naive"].get(n, "—"), peaks["flashdoc"].get(n, "—")
    fmt = lambda x: (  # noqa: E731
        "out of memory" if x is None else ("—" if x == "—" else f"{x / 2**20:,.0f} MiB")
    )
    ratio = f"{a / b:,.0f}×" if isinstance(a, int) and isinstance(b, int) and b else "—"
    rows.append(f"| {n:,} | {fmt(a)} | {fmt(b)} | {ratio} |")
table = "\n".join(rows) + "\n"
gpu = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
print(
    f"Peak extra memory of one causal forward, batch 1, {heads} heads, "
    f"head dim {d}, {dtype}, on {gpu}:\n"
)
print(table)
with open("memory.md", "w") as f:
    f.write(table)

fig, ax = plt.subplots(figsize=(7, 4.2))
for name, marker in (("naive", "o-"), ("flashdoc", "s-")):
    ok = [(n, b) for n, b in peaks[name].items() if b]
    ax.loglog(
        [n for n, _ in ok], [b / 2**30 for _, b in ok], marker, base=2, label=name
    )
    oom = [n for n, b in peaks[name].items() if b is None]
    if oom:
        ax.axvline(
            oom[0],
            color="grey",
            ls=":",
            label=f"{name}: out of memory at N = {oom[0]:,}",
        )
if device == "cuda":
    ax.axhline(
        torch.cuda.get_device_properties(0).total_memory / 2**30,
        color="red",
        lw=1,
        label=f"{gpu} memory",
    )
ax.set(
    xlabel="sequence length N",
    ylabel="peak extra memory (GiB)",
    title=f"One causal forward, {heads} heads, d = {d}",
)
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("memory.png", dpi=150)
