"""What packing buys on the GPU: flash_attn_varlen_func on a packed batch against the
dense kernels on the same number of tokens, FlexAttention with a document mask, and SDPA
on the batch padded to its longest sequence.

40 sequences of 128 to 8,192 tokens (log-uniform, seeded), 64k tokens, 16 heads, head
dim 128, bf16; forward and forward + backward, causal and not. Every method is credited
with the same useful FLOPs, those of each sequence alone, so a method's TFLOP/s say how
fast it gets the batch's real work done. Writes varlen.md (the table on the page) and
results.json (every timing).
"""
# flashdoc: gpu-only

import torch

# The benchmark is not part of the installed package: run this from a checkout of
# the repository.
from benchmarks import varlen

# --8<-- [start:run]
# On a GPU: the batch above (FlexAttention compiled). Without one: tiny shapes on the
# CPU, a smoke test whose numbers mean nothing.
# writes varlen.md, results.json
records = varlen.run(".", smoke=not torch.cuda.is_available())
# --8<-- [end:run]

if not torch.cuda.is_available():
    print("(CPU smoke run: the site shows the numbers recorded on the GPU.)")
