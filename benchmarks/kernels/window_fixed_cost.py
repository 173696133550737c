"""What a sliding window's Hopper programs cost besides their tiles: a fit over window widths, kernel by kernel.

    PYTHONPATH=. python3 benchmarks/kernels/window_fixed_cost.py            # H200: d = 128, 16 heads, 16k tokens
    PYTHONPATH=. python3 benchmarks/kernels/window_fixed_cost.py --widths 128 512 2048 --n 8192

A window's programs stream few tiles (a 1,024-key window's dK/dV program about 18 query tiles, where dense causal's
stream 129 on average), so what a program costs before its first tile and after its last (loading the resident
tile, filling the ring, storing the result) weighs far more than under the causal mask. This separates the two.

For each window (w, 0) and for dense causal it times a forward + backward step under ``torch.profiler``, with the
backward's dQ kernel on the main stream (``OVERLAP_MIN_FLOPS``) so that no two kernels share the GPU, and takes
each kernel's GPU time per step: the forward, dK/dV and dQ. Each SM runs its share of a kernel's programs one after
another (one program fits an SM at d = 128; the forward's persistent programs take its items in turn), so a
program's time is the kernel's time x SMs / programs. Its tiles are what the masking core's block ranges give for
the kernel's own config (``flashdoc.kernels.mask.block_ranges``: the key tiles an item of the forward or dQ
visits, and, for dK/dV, the query tiles that see a program's keys, which under the transposed band are a key
range of the same rule). Over the window widths, time per program = fixed + per_tile x tiles is fitted by least
squares; dense causal's per-tile cost is what is left of its program time after the same fixed cost, scaled to the
window's tile where the two configs stream tiles of different widths (the forward's). Printed per kernel: the fixed
cost, the per-tile cost, the fixed cost's share of a program at each width, and the per-tile cost against causal's
(what the window would reach with the fixed cost hidden).
"""

import argparse
import statistics

import torch

from flashdoc.kernels import cdiv
from flashdoc.kernels.mask import band, block_ranges

# the kernels' names, as the profiler lists them
KERNELS = {"forward": "_attn_fwd_hopper", "dK/dV": "_attn_bwd_dkdv_hopper", "dQ": "_attn_bwd_dq_hopper"}


def mean_tiles(n: int, kernel: str, config: tuple, window) -> float:
    """Mean tiles a program of ``kernel`` streams at n tokens (square, bottom-right) under ``window`` ((left, 0),
    or None for dense causal), with ``config`` (the Hopper kernel's: (BLOCK_M, BLOCK_N, STAGES, N_CONSUMERS, ...)).
    Forward and dQ: items of N_CONSUMERS x BLOCK_M query rows over BLOCK_N-key tiles. dK/dV: programs of
    N_CONSUMERS x BLOCK_N keys over BLOCK_M-row query tiles; the rows that see key j are j to j + left, the band
    (0, left) of the transposed problem, so the same rule gives them."""
    rows, cols = _program_shape(kernel, config)
    if kernel == "dK/dV":
        left = -1 if window is None else window[0]
        ranges = block_ranges(n, n, rows, cols, causal=False, window_size=(0, left))
    else:
        ranges = block_ranges(n, n, rows, cols, causal=True, window_size=window or (-1, -1))
    lo, hi = ranges[:, 0].double(), ranges[:, 3].double()
    return ((hi - lo) / cols).ceil().mean().item()  # a program loops over whole tiles


def programs(n: int, heads: int, kernel: str, config: tuple) -> int:
    """Programs (the forward's: work items) of ``kernel`` for one sequence of n tokens and ``heads`` heads."""
    return cdiv(n, _program_shape(kernel, config)[0]) * heads


def _program_shape(kernel: str, config: tuple) -> tuple:
    """(rows a program keeps, rows of each tile it streams): queries over key tiles for the forward and dQ, keys
    over query tiles for dK/dV."""
    block_m, block_n, _, consumers = config[:4]
    return (consumers * block_n, block_m) if kernel == "dK/dV" else (consumers * block_m, block_n)


def fit(tiles: list, times: list) -> tuple:
    """(fixed, per_tile): the least-squares line time = fixed + per_tile x tiles."""
    mt, my = statistics.fmean(tiles), statistics.fmean(times)
    per_tile = sum((t - mt) * (y - my) for t, y in zip(tiles, times)) / sum((t - mt) ** 2 for t in tiles)
    return my - per_tile * mt, per_tile


def kernel_times(q, k, v, dout, window, steps: int) -> dict:
    """GPU microseconds per step of each kernel in KERNELS, for a forward + backward step (window (left, 0), or
    None for dense causal), from torch.profiler over ``steps`` steps after a warm-up."""
    import flashdoc

    kw = dict(causal=True) if window is None else dict(causal=True, window_size=window)

    def step():
        q.grad = k.grad = v.grad = None
        flashdoc.flash_attn_func(q, k, v, **kw).backward(dout)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    totals = {name: 0.0 for name in KERNELS}
    for event in prof.key_averages():
        for name, symbol in KERNELS.items():
            if event.key.startswith(symbol) and not event.key.startswith(symbol + "_"):
                totals[name] += event.device_time_total
    missing = [name for name, total in totals.items() if total == 0]
    if missing:
        raise RuntimeError(f"the profiler saw no {missing} kernel: this measures the Hopper kernels (an H100/H200)")
    return {name: total / steps for name, total in totals.items()}


WIDTHS = (128, 256, 512, 1024, 2048, 4096)


def measure(n: int = 16384, heads: int = 16, widths=WIDTHS, steps: int = 10) -> dict:
    """Time each kernel at each window width and at dense causal, and fit each kernel's line. Returns
    {"device", "sms", "programs": one row per (kernel, window: left or None for causal) with its config, programs,
    tiles a program, kernel us and us a program, "fits": one row per kernel with fixed_us, tile_us, causal_tile_us
    (per the window's tile width) and shares ({width: the fixed cost's share of a program})}."""
    if len(widths) < 2:
        raise ValueError(f"widths: at least two window widths are needed to fit a line, got {list(widths)}")
    if not torch.cuda.is_available():
        raise RuntimeError("window_fixed_cost times the Hopper kernels: it needs an H100 or H200")
    from flashdoc.kernels import backward, backward_hopper, forward_hopper

    d = 128
    backward.OVERLAP_MIN_FLOPS = float("inf")  # dQ on the main stream: one kernel at a time
    configs = {
        "forward": forward_hopper.table_config((d, True), True),
        "dK/dV": backward_hopper.HOPPER_DKDV_CONFIGS[(d, True)],
        "dQ": backward_hopper.HOPPER_DQ_CONFIGS[(d, True)],
    }
    causal_configs = dict(configs, forward=forward_hopper.table_config((d, True), False))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, n, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)
    windows = [(w, 0) for w in widths] + [None]
    us = {window: kernel_times(q, k, v, dout, window, steps) for window in windows}
    rows, fits = [], []
    for name in KERNELS:
        for window in windows:
            config = configs[name] if window else causal_configs[name]
            count = programs(n, heads, name, config)
            rows.append(
                dict(
                    kernel=name,
                    window=window[0] if window else None,
                    config=tuple(config[:4]),
                    programs=count,
                    tiles=mean_tiles(n, name, config, window),
                    kernel_us=us[window][name],
                    program_us=us[window][name] * min(sms, count) / count,
                )
            )
        mine = {r["window"]: r for r in rows if r["kernel"] == name}
        fixed, per_tile = fit([mine[w]["tiles"] for w in widths], [mine[w]["program_us"] for w in widths])
        # per key: a causal tile of another width (the forward's) is scaled to the window's
        scale = _program_shape(name, configs[name])[1] / _program_shape(name, causal_configs[name])[1]
        causal = mine[None]
        fits.append(
            dict(
                kernel=name,
                fixed_us=fixed,
                tile_us=per_tile,
                causal_tile_us=(causal["program_us"] - fixed) / causal["tiles"] * scale,
                shares={w: fixed / mine[w]["program_us"] for w in widths},
            )
        )
    device = f"{torch.cuda.get_device_name()}, 1 x {n} tokens x {heads} heads, d = {d}, bf16; {sms} SMs"
    return dict(device=device, sms=sms, programs=rows, fits=fits)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16384, help="tokens of the one sequence (default: %(default)s)")
    ap.add_argument("--heads", type=int, default=16, help="query heads, as many KV heads (default: %(default)s)")
    ap.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    ap.add_argument("--steps", type=int, default=10, help="profiled steps per call (default: %(default)s)")
    args = ap.parse_args(argv)
    if len(args.widths) < 2:
        ap.error("--widths needs at least two window widths to fit a line")
    if not torch.cuda.is_available():
        raise SystemExit("window_fixed_cost.py times the Hopper kernels: it needs an H100 or H200")
    result = measure(args.n, args.heads, args.widths, args.steps)
    print(result["device"])
    print("| kernel | window | config | programs | tiles a program | kernel us | us a program |")
    print("|---|---|---|---|---|---|---|")
    for r in result["programs"]:
        label = "causal" if r["window"] is None else f"({r['window']}, 0)"
        print(
            f"| {r['kernel']} | {label} | {r['config']} | {r['programs']} | {r['tiles']:.1f} | {r['kernel_us']:.0f} | "
            f"{r['program_us']:.2f} |"
        )
    print()
    print("| kernel | fixed us | us a tile | causal us a tile | per tile vs causal | fixed share by width |")
    print("|---|---|---|---|---|---|")
    for f in result["fits"]:
        shares = " ".join(f"{w}: {share:.0%}" for w, share in f["shares"].items())
        print(
            f"| {f['kernel']} | {f['fixed_us']:.2f} | {f['tile_us']:.3f} | {f['causal_tile_us']:.3f} | "
            f"{f['causal_tile_us'] / f['tile_us']:.2f}x | {shares} |"
        )
    # the band the kernels ran, for the record (bottom-right, square)
    print()
    print("bands (is_causal, is_local, left, right):", {w: band(args.n, args.n, True, (w, 0)) for w in args.widths})


if __name__ == "__main__":
    main()
