"""Why a training step costs flashdoc more host time when autograd runs the backward on its worker thread.

    PYTHONPATH=. python perf/worker_thread.py

For CUDA tensors autograd runs a backward on a worker thread of its own; `set_multithreading_enabled(False)`
keeps it on the calling thread. Two measurements, each on both threads:
1. a step whose backward is a Python loop of a known length (calibrated on the calling thread) and one tiny CUDA
   op: if the worker thread's extra time is a constant, it is the hand-over; if it grows with the loop, Python
   itself runs slower there;
2. flashdoc's step, with the time spent inside its backward op measured where it runs.
"""

import statistics
import time

import torch

import flashdoc
from flashdoc import interface

STEPS = 1000


class Busy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        total = 0
        for i in range(ctx.n):  # pure Python work
            total += i
        return grad * 1, None


def step_us(fn, threaded):
    with torch.autograd.set_multithreading_enabled(threaded):
        for _ in range(50):
            fn()
        runs = []
        for _ in range(3):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(STEPS):
                fn()
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - start) / STEPS * 1e6)
    return min(runs)


def main():
    x = torch.randn(16, device="cuda", requires_grad=True)
    print("1. backward = a Python loop of n iterations (+ one tiny CUDA op); us per step")
    for n in (0, 1000, 4000, 16000):
        fn = (lambda n=n: Busy.apply(x, n).sum().backward())
        calling, worker = step_us(fn, False), step_us(fn, True)
        print(f"   n={n:>6}: calling thread {calling:7.1f}, worker thread {worker:7.1f}, extra {worker - calling:7.1f}")

    q, k, v = (torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    inside = []
    op = interface._bwd_op

    def timed_op(*args):
        start = time.perf_counter()
        result = op(*args)
        inside.append((time.perf_counter() - start) * 1e6)
        return result
    interface._bwd_op = timed_op
    print("2. flashdoc step (1 x 128 x 2 x 64 bf16, causal); us per step, and inside the backward op (median)")
    for threaded in (False, True):
        inside.clear()
        total = step_us(lambda: flashdoc.flash_attn_func(q, k, v, causal=True).sum().backward(), threaded)
        where = "worker thread " if threaded else "calling thread"
        print(f"   {where}: step {total:7.1f}, backward op {statistics.median(inside):7.1f}")
    interface._bwd_op = op


if __name__ == "__main__":
    main()
