"""The decode benchmark on this GPU: effective K+V bandwidth of one decode step
(bf16, 32 query heads over 8 KV heads, head dim 128, one query per sequence) for
flashdoc's flash_attn_with_kvcache (contiguous and paged caches), PyTorch's SDPA
(cuDNN and flash backends), FlexAttention and flashdoc's training forward, against a
device-to-device copy.
Writes decode.md (tables and target checks), decode.json and decode_roofline.png."""
# flashdoc: gpu-only

import torch

from benchmarks.decode import run_benchmark

# --8<-- [start:run]
if torch.cuda.is_available():
    run_benchmark(".")  # every point, every method, both timers; a few minutes
else:
    print("The decode benchmark measures a GPU; this machine has none.")
# --8<-- [end:run]
