"""Sliding-window attention costs in proportion to the window, not the sequence.

At one sequence length, the forward's and forward+backward's times for growing windows
(left, 0), against dense causal attention. A window skips whole key blocks
(``mask.key_block_range``), so its time grows with the window until it covers the whole
causal triangle.
"""
# flashdoc: gpu-only

import matplotlib.pyplot as plt
import torch

import flashdoc

gpu = torch.cuda.is_available()
device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
seqlen, heads, head_dim = (16384, 16, 128) if gpu else (64, 1, 16)
windows = [128, 256, 512, 1024, 2048, 4096, 8192] if gpu else [16, 32]


def timed(fn):
    if gpu:
        import triton.testing

        # grad_to_none: each backward writes fresh gradients instead of adding to the
        # last one's
        return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=[q, k, v])
    import time  # on the CPU (a smoke run): one call, timed

    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


q, k, v = (
    torch.randn(
        1, seqlen, heads, head_dim, device=device, dtype=dtype, requires_grad=True
    )
    for _ in range(3)
)
dout = torch.randn_like(q)


# --8<-- [start:measure]
def cost(window):
    options = (
        dict(causal=True, window_size=(window, 0)) if window else dict(causal=True)
    )

    def forward():
        with torch.no_grad():
            flashdoc.flash_attn_func(q, k, v, **options)

    def forward_backward():
        flashdoc.flash_attn_func(q, k, v, **options).backward(dout)

    return timed(forward), timed(forward_backward)


# --8<-- [end:measure]


causal_fwd, causal_fb = cost(None)
print(
    f"N = {seqlen}, {heads} heads, head dim {head_dim}, {str(dtype)[6:]}: "
    "time relative to dense causal\n"
)
print(
    "| window (left, 0) | forward ms | fwd / causal | fwd+bwd ms | fwd+bwd / causal |"
)
print("|---|---|---|---|---|")
rows = []
for w in windows:
    fwd, fb = cost(w)
    rows.append((w, fwd / causal_fwd, fb / causal_fb))
    print(
        f"| {w} | {fwd:.3f} | {fwd / causal_fwd:.2f} | "
        f"{fb:.3f} | {fb / causal_fb:.2f} |"
    )
print(f"| causal (no window) | {causal_fwd:.3f} | 1.00 | {causal_fb:.3f} | 1.00 |")

fig, ax = plt.subplots(figsize=(6, 3.6))
ax.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label="forward")
ax.plot([r[0] for r in rows], [r[2] for r in rows], "s-", label="forward + backward")


def share_inside(window):
    """The share of the causal scores inside a window (left, 0): row i sees
    min(i + 1, window + 1) keys."""
    inside = sum(min(i + 1, window + 1) for i in range(seqlen))
    return inside / (seqlen * (seqlen + 1) / 2)


ax.plot(
    windows,
    [share_inside(w) for w in windows],
    ":",
    color="grey",
    label="share of the causal scores inside the window",
)
ax.set(
    xscale="log",
    xlabel="window (keys to the left)",
    ylabel="time / dense causal time",
    title=f"Sliding window at N = {seqlen}",
)
ax.set_xticks(windows, [str(w) for w in windows])
ax.grid(True, alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig("window_cost.png", dpi=120)
