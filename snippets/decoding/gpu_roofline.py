"""The decode benchmark on this GPU: effective K+V bandwidth of one decode step
(bf16, 32 query heads over 8 KV heads, head dim 128, one query per sequence) for
flashdoc's flash_attn_with_kvcache (contiguous and paged caches), PyTorch's SDPA
(cuDNN and flash backends), FlexAttention and flashdoc's training forward, against a
device-to-device copy.
Writes decode.md (tables and target checks), decode.json and decode_roofline.png."""
# flashdoc: gpu-only

import torch

# The benchmark is not part of the installed package: run this from a checkout of
# the repository.
from benchmarks.decode import run_benchmark

# --8<-- [start:run]
# On a GPU: every point, every method, both timers (a few minutes on an H200).
# Without one: tiny shapes on the CPU, a smoke test whose numbers mean nothing.
run_benchmark(".")
# --8<-- [end:run]

if not torch.cuda.is_available():
    print("(CPU smoke run: the site shows the numbers recorded on the GPU.)")
