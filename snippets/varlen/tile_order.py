"""How flashdoc's varlen kernels order their tiles: the longest sequence first, each
sequence's heaviest causal tiles first, and a grid sized from shapes alone whose spare
programs exit at once. The order comes from the kernel's own functions: ``schedule``
and ``varlen_grid`` on the host, and ``find_tile`` run inside a tiny kernel that
records, for every program, the (sequence, head, tile) it would compute."""

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import flashdoc  # noqa: F401  (no CUDA: sets TRITON_INTERPRET=1 before triton loads)
from flashdoc.kernels.varlen import CHUNK, find_tile, schedule, tile_bound, varlen_grid
import triton
import triton.language as tl

device = "cuda" if torch.cuda.is_available() else "cpu"
lengths = torch.tensor([300, 40, 1000, 0, 130])
n_heads, BLOCK_M = 1, 64


# --8<-- [start:order]
@triton.jit
def which_tile(
    ORDER,
    CU,
    OUT,
    n_seqs,
    n_heads,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    """Store (sequence, head, tile) for each program, as the varlen forward finds them
    before computing."""
    pid = tl.program_id(0)
    seq, head, tile = find_tile(pid, ORDER, CU, n_seqs, n_heads, BLOCK_M, CHUNK)
    if seq < 0:  # past the real number of tiles: the forward returns here
        return
    if IS_CAUSAL:  # the last query tiles see the most keys: they go first
        len_q = tl.load(CU + seq + 1) - tl.load(CU + seq)
        tile = (len_q + BLOCK_M - 1) // BLOCK_M - 1 - tile
    tl.store(OUT + 3 * pid, seq)
    tl.store(OUT + 3 * pid + 1, head)
    tl.store(OUT + 3 * pid + 2, tile)


cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32).to(device)
order = schedule(cu_seqlens)  # longest first, sorted on the device: no sync
# shapes the host knows: the packed length, the batch
total, n_seqs = int(lengths.sum()), len(lengths)
grid = varlen_grid(total, n_seqs, n_heads, "BLOCK_M")({"BLOCK_M": BLOCK_M})
programs = {}
for causal in (False, True):
    # -1: the program exited at once
    out = torch.full((grid[0], 3), -1, dtype=torch.int32, device=device)
    which_tile[grid](
        order,
        cu_seqlens,
        out,
        n_seqs,
        n_heads,
        BLOCK_M=BLOCK_M,
        CHUNK=CHUNK,
        IS_CAUSAL=causal,
    )
    programs[causal] = out.cpu()
# --8<-- [end:order]

real = int(((lengths + BLOCK_M - 1) // BLOCK_M).sum()) * n_heads
padded = n_seqs * int((lengths.max() + BLOCK_M - 1) // BLOCK_M) * n_heads
print(f"lengths {lengths.tolist()}, BLOCK_M {BLOCK_M}, {n_heads} head(s)")
print(f"schedule (longest first): {order.tolist()}")
print(
    f"grid {grid[0]} programs = tile_bound({total}, {n_seqs}, {BLOCK_M}) "
    f"x {n_heads} head(s)"
)
print(f"real tiles {real}: {grid[0] - real} programs exit at once")
print(
    f"padded grid, batch x cdiv(max_len, BLOCK_M): {padded} programs, "
    f"{padded - real} of them on padding"
)
assert tile_bound(total, n_seqs, BLOCK_M) * n_heads == grid[0]
assert real <= grid[0] <= padded
print()
print("program  sequence  length  head  tile  causal tile")
for pid in range(grid[0]):
    seq, head, tile = programs[False][pid].tolist()
    if seq < 0:
        print(f"{pid:7d}  exits at once")
        continue
    length, causal_tile = int(lengths[seq]), int(programs[True][pid, 2])
    print(f"{pid:7d}  {seq:8d}  {length:6d}  {head:4d}  {tile:4d}  {causal_tile:11d}")

# The figure: one box per program, coloured by sequence and labelled with its causal
# tile; the spare programs hatched; below, the three program counts side by side.
colors = ["#3b7dd8", "#e67e22", "#27ae60", "#8e44ad", "#c0392b"]
spare = dict(facecolor="white", edgecolor="#999999", hatch="///")  # exits at once
fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 4.2), height_ratios=[1.3, 1])
for pid in range(grid[0]):
    seq, _, tile = programs[True][pid].tolist()
    if seq < 0:
        top.add_patch(plt.Rectangle((pid, 0), 0.92, 1, **spare))
        continue
    top.add_patch(plt.Rectangle((pid, 0), 0.92, 1, color=colors[seq]))
    top.text(
        pid + 0.46, 0.5, str(tile), ha="center", va="center", color="white", fontsize=8
    )
top.set_xlim(0, grid[0]), top.set_ylim(0, 1)
top.set_yticks([])
top.set_xlabel(
    "program id (launch order); "
    "the number is the query tile it computes under a causal mask"
)
shown = [b for b in order.tolist() if lengths[b] > 0]  # the empty sequence has none
handles = [plt.Rectangle((0, 0), 1, 1, color=colors[b]) for b in shown]
labels = [f"seq {b} ({int(lengths[b])} tokens)" for b in shown]
handles.append(plt.Rectangle((0, 0), 1, 1, **spare))
labels.append("exits at once")
top.legend(
    handles,
    labels,
    ncol=len(labels),
    loc="lower center",
    bbox_to_anchor=(0.5, 1.02),
    fontsize=8,
)
counts = {"real tiles": real, "grid (tile_bound)": grid[0], "padded grid": padded}
bar_colors = ["#27ae60", "#3b7dd8", "#999999"]
bars = bottom.barh(list(counts), list(counts.values()), color=bar_colors)
bottom.bar_label(bars, fontsize=8, padding=3)
bottom.invert_yaxis()
bottom.set_xlabel("programs launched")
fig.tight_layout()
fig.savefig("tile_order.png", dpi=130)
