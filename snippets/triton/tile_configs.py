"""The tile configurations flashdoc's kernels choose from, read from its tables.

The portable forward's autotuner times the candidates of its key on the first call of a
shape; the Hopper kernels run one fixed configuration per (head dim, causal).
"""

from flashdoc.kernels import backward_hopper, forward, forward_hopper


def write(name, header, rows):
    """Print a markdown table and keep it as a file a page can show."""
    text = "\n".join([header, "|---" * (header.count("|") - 1) + "|", *rows]) + "\n"
    print(text)
    with open(name, "w") as f:
        f.write(text)


def yes(flag):
    return "yes" if flag else "no"


# --8<-- [start:portable]
rows = []
for (head_dim, fp32), candidates in forward.FWD_CONFIGS.items():
    for c in candidates:  # the autotuner times them all, the first is the default
        kw = c.kwargs
        rows.append(
            f"| {head_dim} | {'fp32' if fp32 else 'fp16, bf16'} "
            f"| {kw['BLOCK_M']} | {kw['BLOCK_N']} | {c.num_stages} "
            f"| {c.num_warps} | {yes(kw['ACROSS_HEADS'])} |"
        )
write(
    "forward.md",
    "| head dim | inputs | BLOCK_M | BLOCK_N | num_stages | num_warps "
    "| causal order across heads |",
    rows,
)
# --8<-- [end:portable]

configs = forward_hopper.HOPPER_CONFIGS
rows = [
    f"| {hd} | {yes(causal)} | {m} | {n} | {stages} | {consumers} | {yes(persist)} |"
    for (hd, causal), (m, n, stages, consumers, persist) in configs.items()
]
write(
    "hopper_forward.md",
    "| head dim | causal | rows per consumer | keys per tile | ring slots "
    "| consumers | persistent |",
    rows,
)


# BLOCK_M and BLOCK_N mean different things in each kernel: the dK/dV programs own
# their keys and stream query tiles, dQ's own query rows and stream key tiles.
def tiles(kernel, head_dim, m, n):
    """(query rows, keys) of one config, as words."""
    if kernel == "dQ":
        return f"{m} per consumer", f"{n} per streamed tile"
    wide = head_dim > backward_hopper.MAX_NARROW_HEAD_DIM  # both consumers share keys
    return (
        f"{m} per streamed tile",
        f"{n} {'shared by both' if wide else 'per consumer'}",
    )


rows = []
for kernel, table in [
    ("dK/dV", backward_hopper.HOPPER_DKDV_CONFIGS),
    ("dQ", backward_hopper.HOPPER_DQ_CONFIGS),
    ("fused dK, dV, dQ", backward_hopper.FUSED_DQ_CONFIGS),
]:
    for (hd, causal), (m, n, stages, consumers) in table.items():
        rows_, keys = tiles(kernel, hd, m, n)
        rows.append(
            f"| {kernel} | {hd} | {yes(causal)} | {rows_} | {keys} | {stages} "
            f"| {consumers} |"
        )
write(
    "hopper_backward.md",
    "| kernel | head dim | causal | query rows | keys | ring slots | consumers |",
    rows,
)
((key, tokens),) = backward_hopper.FUSED_DQ_MIN_SEQLEN.items()
print(
    f"Causal calls at head dim {key[0]} take the fused kernel from {tokens:,} tokens."
)
