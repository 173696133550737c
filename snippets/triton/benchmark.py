"""Benchmark flashdoc against the attention kernels PyTorch already ships: speed,
memory, first-call time."""
# flashdoc: gpu-only

import torch

# The benchmark is not part of the installed package: run this from a checkout of
# the repository.
from benchmarks.run import run_benchmark

# On a GPU (about 8 minutes on an H200): every peer that is installed, forward and
# forward+backward, bf16 and fp16, head dims 64/128/256, causal and not, N = 512 ... 16k
# with 16k tokens per batch; then peak memory vs N and flashdoc's first-call time. It
# writes results.json, tflops_bf16.png, tflops_fp16.png, memory.png and ratios.md here
# and prints flashdoc's speed ratio to each peer.
# On a CPU it runs tiny shapes only, as a smoke test: those numbers mean nothing.
results = run_benchmark(out_dir=".")

if not torch.cuda.is_available():
    print("(CPU smoke run: the site shows the numbers recorded on the GPU.)")
