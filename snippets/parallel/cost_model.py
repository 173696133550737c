"""A cost model of one ring step: the attention a rank computes against the time to pass
its key/value shard to the next rank, as a function of the tokens each rank holds.

A model, not a measurement: the compute rates and link bandwidths below are assumptions,
printed with the results. Change them to your hardware."""

import matplotlib.pyplot as plt
import numpy as np

# --8<-- [start:assumptions]
# Attention throughput of one GPU, FLOP/s (forward FLOPs = 4 n_q n_k heads head_dim;
# a forward + backward counts 3.5 times that). Assumed: about what flashdoc's kernels
# reach in bf16 at head dim 128 on long sequences in the single-GPU benchmark.
RATE = {"fwd": 700e12, "fwd+bwd": 530e12}
# One direction of the link between neighbouring GPUs, bytes/s. Assumed: NVIDIA's
# figures, NVLink 4 on H200 SXM (900 GB/s both directions together), PCIe Gen5 x16.
LINKS = {"NVLink (H200 SXM)": 450e9, "PCIe Gen5 x16": 64e9}
HEADS, KV_HEADS, HEAD_DIM, BYTES = 16, 16, 128, 2  # bf16, no GQA
# --8<-- [end:assumptions]


# --8<-- [start:model]
def step_compute(n, part, block=1.0):
    """Seconds for one rank's block at one ring step: n queries against n keys, times
    the fraction of the block computed (1: a full block, 1/2: a causal zigzag step).
    The backward's time is what the forward + backward rate leaves after the forward."""
    flops = 4 * n * n * HEADS * HEAD_DIM * block
    if part == "forward":
        return flops / RATE["fwd"]
    return 3.5 * flops / RATE["fwd+bwd"] - flops / RATE["fwd"]


def step_transfer(n, part, bandwidth):
    """Seconds to pass one shard to the next rank. The forward sends K and V (bf16); the
    backward sends them again, and with them their gradient sums (float32: twice the
    bytes)."""
    kv = 2 * n * KV_HEADS * HEAD_DIM * BYTES
    return (kv if part == "forward" else kv + 2 * kv) / bandwidth


def crossover(part, bandwidth, block):
    """Tokens per rank from which a step's compute hides its transfer (compute grows as
    n^2, transfer as n, so they cross once)."""
    return step_transfer(1, part, bandwidth) / step_compute(1, part, block)


def ring_time(n, part, bandwidth, block, world_size):
    """One pass around the ring with perfect overlap: world_size - 1 steps that take the
    longer of compute and transfer, a last step of compute alone, and in the backward a
    last hop of the gradient sums with nothing left to hide behind."""
    c, t = step_compute(n, part, block), step_transfer(n, part, bandwidth)
    last_hop = 0.0 if part == "forward" else 2 * step_transfer(n, "forward", bandwidth)
    return (world_size - 1) * max(c, t) + c + last_hop


def ring_efficiency(n, mode, bandwidth, block, world_size=2):
    """Ring throughput over world_size times one GPU's (which computes all world_size^2
    blocks' steps itself, with no transfers)."""
    parts = ["forward"] if mode == "fwd" else ["forward", "backward"]
    one_gpu = sum(world_size**2 * step_compute(n, p, block) for p in parts)
    ring = sum(ring_time(n, p, bandwidth, block, world_size) for p in parts)
    return one_gpu / (world_size * ring)


# --8<-- [end:model]


rates = ", ".join(f"{m} at {r / 1e12:.0f} TFLOP/s" for m, r in RATE.items())
links = ", ".join(
    f"{name} {bw / 1e9:.0f} GB/s per direction" for name, bw in LINKS.items()
)
print(
    f"Assumptions: {rates}; {links}; {HEADS} query heads, {KV_HEADS} key/value heads, "
    f"head dim {HEAD_DIM}, bf16.\n"
)

lines = [
    "| link | step | block | transfer hidden from (tokens per rank) |",
    "|---|---|---|---|",
]
for name, bw in LINKS.items():
    for part in ("forward", "backward"):
        for block, label in ((1.0, "full"), (0.5, "causal, zigzag")):
            tokens = crossover(part, bw, block)
            lines.append(f"| {name} | {part} | {label} | {tokens:,.0f} |")
table = "\n".join(lines) + "\n"
print(table)
with open("crossover.md", "w") as f:
    f.write(table)

lines = [
    "| N | tokens per rank | mode | mask | forward compute / transfer, NVLink | "
    "efficiency, NVLink | efficiency, PCIe |",
    "|---|---|---|---|---|---|---|",
]
nvlink, pcie = LINKS.values()
for n_total in (32768, 131072, 262144):
    n = n_total // 2
    for mode in RATE:
        for block, label in ((1.0, "full"), (0.5, "causal, zigzag")):
            compute = step_compute(n, "forward", block)
            ratio = compute / step_transfer(n, "forward", nvlink)
            fast = ring_efficiency(n, mode, nvlink, block)
            slow = ring_efficiency(n, mode, pcie, block)
            lines.append(
                f"| {n_total // 1024}k | {n // 1024}k | {mode} | {label} "
                f"| {ratio:.0f}x | {fast:.3f} | {slow:.3f} |"
            )
table = "\n".join(lines) + "\n"
print("Two GPUs (the model's efficiency: 1 is perfect scaling):")
print(table)
with open("two_gpus.md", "w") as f:
    f.write(table)

n = np.logspace(np.log2(256), np.log2(262144), 60, base=2)
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True, constrained_layout=True)
for ax, part in zip(axes, ("forward", "backward")):
    ax.loglog(n, step_compute(n, part), color="black", label="compute, full block")
    ax.loglog(
        n,
        step_compute(n, part, 0.5),
        color="black",
        linestyle="--",
        label="compute, causal zigzag (half block)",
    )
    for (name, bw), color in zip(LINKS.items(), ("tab:green", "tab:red")):
        ax.loglog(n, step_transfer(n, part, bw), color=color, label=f"transfer, {name}")
        ax.axvline(crossover(part, bw, 0.5), color=color, linewidth=0.6, linestyle=":")
    ax.set_title(f"one ring step, {part} (a model, not a measurement)")
    ax.set_xlabel("tokens per rank")
    ax.grid(True, which="major", linewidth=0.3)
axes[0].set_ylabel("seconds per step")
axes[0].legend(fontsize=8)
fig.savefig("cost_model.png", dpi=150)
