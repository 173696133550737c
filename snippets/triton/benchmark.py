"""Benchmark flashdoc against the attention kernels PyTorch already ships: speed, memory, first-call time."""
# flashdoc: gpu-only

import torch

from flashdoc.bench import run_benchmark

# On a GPU (about 8 minutes on an H200): every peer that is installed, forward and forward+backward, bf16 and fp16, head dims 64/128/256,
# causal and not, N = 512 ... 16k (16k tokens per batch); then peak memory vs N and the first-call time.
# Writes results.json, tflops_bf16.png, tflops_fp16.png, memory.png and ratios.md here, and prints the table
# of flashdoc's speed ratio to each peer. On a CPU it runs tiny shapes only: those numbers mean nothing.
results = run_benchmark(out_dir=".")

if not torch.cuda.is_available():
    print("(CPU smoke run: the site shows the numbers recorded on the GPU.)")
