"""What each attention variant costs on the GPU, as ratios of two calls timed in
one run.

A sliding window (1024, 0) against dense causal attention and against FlexAttention with
the same sliding-window block mask; softcap against the same call without it; ALiBi
against FlexAttention with the same bias as a score_mod. bf16, head dim 128, N = 16k
(batch 1, 16 heads). TFLOP/s count only the scores inside the mask (a window's band), so
a window's rate compares with the dense causal rate whatever the window skips.
Writes claims.md, ratios.md and rows.md (the tables on the page) and variants.json.
"""
# flashdoc: gpu-only

import torch

# The benchmark is not part of the installed package: run this from a checkout of
# the repository.
from benchmarks import variants

# --8<-- [start:run]
# On a GPU: every row at head dim 128 and N = 16k (FlexAttention compiled).
# Without one: tiny shapes on the CPU and no FlexAttention, a smoke test
# whose numbers mean nothing.
scale = "quick" if torch.cuda.is_available() else "smoke"
result = variants.run(".", scale=scale)  # writes variants.json, variants.md
# --8<-- [end:run]

# The page's tables: each claim checked with its ratio, the other ratios, and every
# timed call.
tables = {
    "claims.md": variants.targets_table(result["targets"]),
    "ratios.md": variants.ratios_table(result["ratios"]),
    "rows.md": variants.rows_table(result["rows"]),
}
for name, table in tables.items():
    with open(name, "w") as f:
        f.write(table)
print(variants.summary_line(result["meta"]))

if not torch.cuda.is_available():
    print("(CPU smoke run: the site shows the numbers recorded on the GPU.)")
