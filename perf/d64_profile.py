"""Where a forward + backward call's GPU time goes at head dim 64 without the mask (session 14), the one benchmark
configuration under 1.5x SDPA-flash: flashdoc's kernels as shipped (Gluon forward, portable dK/dV and dQ on two
streams), the same with the Gluon dQ and/or dK/dV kernels swapped in (configs that lost in isolation, measured here
in place, beside the other stream's kernel), and cuDNN's and FlashAttention-2's kernels.

    PYTHONPATH=. python3 perf/d64_profile.py      # on the H200: bf16, 16k tokens, 32 heads, N = 2k and 8k

Prints, per variant: the call's time (median of CUDA events over 20 calls), then each kernel's GPU time per call;
with --timeline, one call of flashdoc's as shipped, kernel by kernel: when the host launched it and when it ran on
the GPU, in microseconds from the call's first launch (where the GPU waits, and for what).
"""

import argparse
import collections

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashdoc
from flashdoc.kernels import backward
from flashdoc.kernels import backward_hopper as bh

CALLS = 20
GLUON_DQ = (64, 128, 2, 2)  # perf/NOTES.md, session 13: 0.98-1.02x the portable kernel alone
GLUON_DKDV = (64, 64, 2, 2)  # 0.94-0.98x alone (with PREFETCH, since replaced by the LSE rows in the ring)


def profile_call(step):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(CALLS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            step()
        torch.cuda.synchronize()
    per_kernel = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[e.name[:60]] += e.time_range.elapsed_us() / CALLS / 1e3
    return sorted(times)[CALLS // 2], per_kernel


class _SameStream:
    """backward.forked_stream's interface, launching on the current stream."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def join(self):
        pass


# the host-side calls a timeline shows besides kernel launches: where the host waits, allocates or orders streams
HOST_CALLS = ("Synchronize", "cudaFree", "cudaMalloc", "cudaStreamWaitEvent", "cudaEventRecord")


def timeline(step, calls=1):
    """`calls` back-to-back calls of step: the host's kernel launches (and HOST_CALLS) and the GPU's kernels, in
    us from the first of them on the host."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    gpu = torch.autograd.DeviceType.CUDA
    events = [e for e in prof.events() if e.device_type == gpu or "LaunchKernel" in e.name
              or any(name in e.name for name in HOST_CALLS)]
    t0 = min(e.time_range.start for e in events if e.device_type != gpu)
    for e in sorted(events, key=lambda e: e.time_range.start):
        where = "GPU " if e.device_type == gpu else "host"
        print(f"  {where} {e.time_range.start - t0:8.0f} .. {e.time_range.end - t0:8.0f}  {e.name[:70]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeline", action="store_true")
    args = ap.parse_args()
    for seqlen in (2048, 8192):
        batch, heads, d = 16384 // seqlen, 32, 64
        flops = 4 * batch * heads * seqlen * seqlen * d * 3.5  # forward + backward, as the benchmark counts
        q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn_like(q)
        qt, kt, vt, doutt = (x.detach().transpose(1, 2).contiguous().requires_grad_(x.requires_grad)
                             for x in (q, k, v, dout))

        def flash_step():
            q.grad = k.grad = v.grad = None
            flashdoc.flash_attn_func(q, k, v).backward(dout)

        def sdpa_step(backend):
            def step():
                qt.grad = kt.grad = vt.grad = None
                with sdpa_kernel(backend):
                    torch.nn.functional.scaled_dot_product_attention(qt, kt, vt).backward(doutt)
            return step

        if args.timeline:
            print(f"N={seqlen}: one call of flashdoc's, as shipped: {profile_call(flash_step)[0]:.3f} ms", flush=True)
            timeline(flash_step)
            forked = backward.forked_stream
            backward.forked_stream = _SameStream  # dQ after dK/dV on one stream
            print(f"N={seqlen}: dQ on the same stream: {profile_call(flash_step)[0]:.3f} ms", flush=True)
            timeline(flash_step)
            backward.forked_stream = forked
            continue
        variants = {"flashdoc": {}, "+gluon dq": {"dq": GLUON_DQ}, "+gluon dkdv": {"dkdv": GLUON_DKDV},
                    "+both": {"dq": GLUON_DQ, "dkdv": GLUON_DKDV}}
        for name, swap in variants.items():
            bh.HOPPER_DQ_CONFIGS.pop((64, False), None)
            bh.HOPPER_DKDV_CONFIGS.pop((64, False), None)
            if "dq" in swap:
                bh.HOPPER_DQ_CONFIGS[64, False] = swap["dq"]
            if "dkdv" in swap:
                bh.HOPPER_DKDV_CONFIGS[64, False] = swap["dkdv"]
            ms, kernels = profile_call(flash_step)
            print(f"N={seqlen} {name}: {ms:.3f} ms ({flops / ms / 1e9:.0f} TFLOP/s) | "
                  + "; ".join(f"{k} {v:.3f}" for k, v in sorted(kernels.items(), key=lambda x: -x[1])), flush=True)
        bh.HOPPER_DQ_CONFIGS.pop((64, False), None)
        bh.HOPPER_DKDV_CONFIGS.pop((64, False), None)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
            ms, kernels = profile_call(sdpa_step(backend))
            print(f"N={seqlen} {name}: {ms:.3f} ms ({flops / ms / 1e9:.0f} TFLOP/s) | "
                  + "; ".join(f"{k} {v:.3f}" for k, v in sorted(kernels.items(), key=lambda x: -x[1])), flush=True)


if __name__ == "__main__":
    main()
