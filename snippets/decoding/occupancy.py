"""Why the training kernel starves on a decode step: the programs it launches for one
query per sequence against the GPU's SMs, and what the split-KV decode kernel launches
instead. Computed from the kernels' own tile tables and launch rules, for a Llama-style
shape (32 query heads over 8 KV heads, head dim 128, bf16)."""

import torch
import triton

from flashdoc.kernels.decode import (
    DECODE_CONFIGS,
    last_wave_splits,
    num_splits_heuristic,
    query_tiles,
)
from flashdoc.kernels.forward import FWD_CONFIGS

if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    gpu, sms = props.name, props.multi_processor_count
else:
    gpu, sms = "an H200, whose SM count this CPU run assumes", 132

heads, kv_heads, head_dim, seqlen_q = 32, 8, 128, 1
group = heads // kv_heads

# --8<-- [start:training]
# The training forward: one program per (query tile, batch, head). With one query,
# each program's BLOCK_M-row tile holds one real row, and each of the 4 query heads
# of a group streams the same K and V.
train_block_m = FWD_CONFIGS[(128, False)][0].kwargs["BLOCK_M"]


def training_programs(batch):
    return triton.cdiv(seqlen_q, train_block_m) * batch * heads


# --8<-- [end:training]


# --8<-- [start:decode]
# The decode kernel: the group's query heads are packed into the rows of one tile
# (one program per KV head), and each sequence's keys are cut into splits that run
# in parallel, as many as fill the GPU.
config = DECODE_CONFIGS[128, False]  # the tiles of a grid of splits
block_m, query_tiles_per_head = query_tiles(group, seqlen_q)  # 16 rows, 1 tile


def decode_programs(batch, cache):
    programs = batch * kv_heads * query_tiles_per_head
    slots = sms * config.programs_per_sm
    n_blocks = triton.cdiv(cache, config.block_n)
    splits = num_splits_heuristic(programs, slots, n_blocks)
    return programs * splits, splits


# --8<-- [end:decode]


kv_bytes_per_token = 2 * kv_heads * head_dim * 2  # K and V, bf16
lines = [
    f"On {gpu}: {sms} SMs. Training forward: {train_block_m}-row query tiles, one "
    f"row used ({seqlen_q / train_block_m:.1%} of each tile's rows). K+V requested: "
    "bytes the programs load (before any L2 hit); the cache holds the decode column's.",
    "",
    "| batch x cache | training: programs (per SM) | K+V requested "
    "| decode: splits | programs (per SM) | K+V requested |",
    "|---|---|---|---|---|---|",
]
for batch in (1, 8, 64):
    for cache in (4096, 32768, 131072):
        train = training_programs(batch)
        dec, splits = decode_programs(batch, cache)
        size = batch * cache * kv_bytes_per_token / 2**20  # MiB
        lines.append(
            f"| {batch} x {cache // 1024}k | {train} ({train / sms:.2f}) "
            f"| {group * size:,.0f} MiB | {splits} | {dec} ({dec / sms:.2f}) "
            f"| {size:,.0f} MiB |"
        )
table = "\n".join(lines) + "\n"
print(table)
with open("occupancy.md", "w") as f:
    f.write(table)

# Two rules for the split count at a cache of 32k tokens: flash-attn's (the fewest
# splits within 85% of the best last-wave efficiency) and flashdoc's (the most splits
# that fit in one wave, where two or more do; flash-attn's rule otherwise).
slots = sms * config.programs_per_sm
n_blocks = triton.cdiv(32768, config.block_n)
rules = {"flash-attn": last_wave_splits, "flashdoc": num_splits_heuristic}
lines = [
    f"{slots} programs run at once ({sms} SMs x {config.programs_per_sm}); "
    f"a cache of 32k tokens is {n_blocks} tiles of {config.block_n} keys; "
    f"a sequence has {kv_heads} programs (one per KV head) before it is split. "
    "Busy: programs / (waves x slots).",
    "",
    "| batch | flash-attn's rule, on these slots | flashdoc's rule |",
    "|---|---|---|",
]
for batch in (1, 2, 3, 4, 8, 12):
    programs = batch * kv_heads * query_tiles_per_head
    cells = []
    for rule in rules.values():
        splits = rule(programs, slots, n_blocks)
        total = programs * splits
        waves = triton.cdiv(total, slots)
        busy = total / (waves * slots)
        cells.append(
            f"{splits} splits: {total} programs in {waves} wave{'s' * (waves > 1)}, "
            f"{busy:.0%} busy"
        )
    lines.append(f"| {batch} | " + " | ".join(cells) + " |")
splits_table = "\n".join(lines) + "\n"
print(splits_table)
with open("splits.md", "w") as f:
    f.write(splits_table)
