"""Host (CPU) time of one decode call, ``flash_attn_with_kvcache``, against SDPA's: where a call's time goes when
its kernels take a few microseconds.

    PYTHONPATH=. python benchmarks/kernels/host_decode.py [--profile] [--sync-debug]

On a GPU it times each call back to back (one synchronisation per batch of calls, so the GPU never waits for the
host only when the host is faster), and also as ``triton.testing.do_bench`` times it (an L2 flush before each
call), at batch 1 over a 4k cache (bf16, 32 query heads over 8 KV heads, d = 128): a contiguous cache, a paged
one, and a decode loop's call that appends a token and applies the rotary embedding (the one
``snippets/decoding/generate.py`` makes). ``--sync-debug`` lists any place a call makes the host wait for the
GPU; ``--profile`` prints cProfile's top entries for the loop's call.

Without a GPU it times the same calls on CPU tensors with every kernel launch stubbed out (fp16; what is left is
the host path itself: validation, the custom op's dispatch, allocations, plan lookups), which is how a change to
that path can be measured on any machine.
"""

import argparse
import cProfile
import os
import pstats
import sys

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import flashdoc  # noqa: E402
from benchmarks.kernels.host_overhead import per_call_us, print_synchronisations  # noqa: E402
from flashdoc.kernels import decode  # noqa: E402

BATCH, CACHE, HEADS, KV_HEADS, HEAD_DIM, PAGE = 1, 4096, 32, 8, 128, 16


class _NoDevice:
    """Stands in for ``launch.on_device``: CPU tensors have no CUDA device to make current."""

    def __init__(self, device):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def stub_launches(patch=setattr, on_launch=None) -> None:
    """CPU only: run the GPU host path (plans, launchers) over CPU tensors, launching nothing.

    patch: how each module attribute is replaced (``setattr``, or a test's ``monkeypatch.setattr``, which undoes
    it). on_launch(kernel name, path, grid, args): called for every launch a GPU would make, path "triton" for
    a launch through Triton's own path (a plan's first), "plan" for one through a plan's launcher."""
    from flashdoc import _validation
    from flashdoc.kernels import launch

    # a GPU's device values are not read on the host (CPU tensors' are, for free)
    patch(_validation, "host_readable", lambda *tensors: False)
    patch(decode, "INTERPRET", False)
    patch(launch, "INTERPRET", False)
    patch(decode, "device_index", lambda device: 0)
    patch(decode, "num_sms", lambda index: 132)
    patch(decode, "no_launch_hooks", lambda: True)
    patch(torch.cuda, "current_device", lambda: 0)
    patch(decode, "on_device", _NoDevice)

    def launch_nothing(kernel, tuned_kernel, grid, args, meta, config, default_config):
        name = kernel.fn.__name__
        if on_launch is not None:
            on_launch(name, "triton", grid(meta), args)

        def launcher(grid, args, device):
            if on_launch is not None:
                on_launch(name, "plan", grid, args)

        return launcher

    patch(decode, "launch", launch_nothing)


def calls() -> dict:
    device = "cuda" if GPU else "cpu"
    dtype = torch.bfloat16 if GPU else torch.float16  # the CPU path upcasts bf16: fp16 keeps the GPU's host path
    g = torch.Generator(device=device).manual_seed(0)
    kw = dict(device=device, dtype=dtype)
    q = torch.randn(BATCH, 1, HEADS, HEAD_DIM, generator=g, **kw)
    k_cache = torch.randn(BATCH, CACHE, KV_HEADS, HEAD_DIM, generator=g, **kw)
    v_cache = torch.randn_like(k_cache)
    pages = BATCH * CACHE // PAGE
    k_pages = k_cache.view(pages, PAGE, KV_HEADS, HEAD_DIM)
    v_pages = v_cache.view(pages, PAGE, KV_HEADS, HEAD_DIM)
    table = torch.arange(pages, dtype=torch.int32, device=device).view(BATCH, -1)
    full = torch.full((BATCH,), CACHE, dtype=torch.int32, device=device)
    lengths = torch.full((BATCH,), CACHE // 2, dtype=torch.int32, device=device)
    k_new = torch.randn(BATCH, 1, KV_HEADS, HEAD_DIM, generator=g, **kw)
    v_new = torch.randn_like(k_new)
    cos, sin = (torch.randn(CACHE, HEAD_DIM // 2, generator=g, **kw) for _ in range(2))
    rows = {
        "contiguous cache": lambda: flashdoc.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=full),
        f"paged cache (pages of {PAGE})": lambda: flashdoc.flash_attn_with_kvcache(
            q, k_pages, v_pages, cache_seqlens=full, block_table=table
        ),
        "flash_attn_func over the cache (a decode step, sent to the same kernels)": lambda: flashdoc.flash_attn_func(
            q, k_cache, v_cache
        ),
        "append + rotary + causal (a decode loop's call)": lambda: flashdoc.flash_attn_with_kvcache(
            q,
            k_cache,
            v_cache,
            k_new,
            v_new,
            rotary_cos=cos,
            rotary_sin=sin,
            cache_seqlens=lengths,
            causal=True,
            rotary_interleaved=False,
        ),
    }
    if GPU:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qs, ks, vs = q.transpose(1, 2).contiguous(), k_cache.transpose(1, 2).contiguous(), v_cache.transpose(1, 2)
        vs = vs.contiguous()

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)

        rows["SDPA-cuDNN"] = cudnn
        rows["empty CUDA op (torch.empty_like)"] = lambda: torch.empty_like(q)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", action="store_true", help="cProfile's top entries for the decode loop's call")
    ap.add_argument("--profile-row", default="append + rotary + causal", help="the row --profile profiles (a prefix)")
    ap.add_argument("--sync-debug", action="store_true", help="GPU: list each synchronisation a call makes")
    args = ap.parse_args()
    if not GPU:
        stub_launches()
    rows = calls()
    where = torch.cuda.get_device_name() if GPU else "CPU, kernel launches stubbed out"
    print(f"host time per call, batch {BATCH} x {CACHE} keys, {HEADS} heads over {KV_HEADS}, d = {HEAD_DIM} ({where})")
    for name, fn in rows.items():
        line = f"{per_call_us(fn, rounds=5):8.1f} us back to back"
        if GPU:
            import triton

            line += f", {triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3:8.1f} us under do_bench"
        print(f"{line}  {name}", flush=True)
    if args.sync_debug and GPU:
        for name, fn in rows.items():
            print_synchronisations(f"one call ({name})", fn)
    if args.profile:
        fn = next(fn for name, fn in rows.items() if name.startswith(args.profile_row))
        prof = cProfile.Profile()
        prof.enable()
        per_call_us(fn, calls=500, rounds=5)
        prof.disable()
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
