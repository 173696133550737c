"""Sliding-window and softcap attention on Hopper against dense causal attention and FlexAttention.

For each head dim, at 16k tokens (batch 1, hidden 2048: 2048 / d heads), bf16, this times with
``triton.testing.do_bench`` the forward and forward + backward of flashdoc's ``flash_attn_func`` and
FlexAttention (torch.compile, the equivalent block mask or score_mod) for:

- dense causal attention (the reference rate);
- a sliding window (1024, 0): each query sees itself and the 1,024 keys before it;
- softcap 50, without and with the causal mask, against the same call without softcap.

TFLOP/s count 4 * d FLOPs per (query, key) pair and head in the forward, 3.5 times that for forward + backward
(the backward's five products to the forward's two), over the pairs the call needs (the visible ones), so a
window's rate compares with the causal rate as useful work per second. A kernel computes whole tiles, so it
also visits pairs outside the window at its edges: the window / causal ratio is also printed on the pairs in
the tiles visited (64 x 128 tiles), which is the kernel's efficiency apart from the tiling. It prints one
table, the ratios the targets name (window >= 0.9x dense causal, ahead of FlexAttention; softcap forward >=
0.9x without), and whether each flashdoc call ran on the Hopper kernels. With ``--out DIR`` it also writes the
rows to DIR/hopper_variants.json.

    python3 benchmarks/hopper_variants.py [--seqlen 16384] [--head-dims 64 128] [--out $OUT]
"""

import argparse
import json
import os

import torch
import triton

WINDOW = (1024, 0)
SOFTCAP = 50.0


def visible_pairs(seqlen_q, seqlen_k, causal, window_size):
    """The (query, key) pairs a call computes, flash-attn's bottom-right window (-1: unbounded; causal: right
    0), counted row by row."""
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(seqlen_q, dtype=torch.int64)
    offset = seqlen_k - seqlen_q
    hi = torch.clamp(i + offset + right, max=seqlen_k - 1) if right >= 0 else torch.full_like(i, seqlen_k - 1)
    lo = torch.clamp(i + offset - left, min=0) if left >= 0 else torch.zeros_like(i)
    return int(torch.clamp(hi - lo + 1, min=0).sum())


def visited_pairs(seqlen_q, seqlen_k, causal, window_size, block_m=64, block_n=128):
    """The (query, key) pairs the kernel computes: for each block_m query rows, the whole block_n key tiles from
    the one holding the first row's first key to the one holding the last row's last key (bottom-right)."""
    left, right = window_size
    if causal:
        right = 0
    offset = seqlen_k - seqlen_q
    total = 0
    for first in range(0, seqlen_q, block_m):
        last = min(first + block_m, seqlen_q) - 1
        lo = max(first + offset - left, 0) // block_n * block_n if left >= 0 else 0
        hi = min(last + offset + right + 1, seqlen_k) if right >= 0 else seqlen_k
        total += (last - first + 1) * max(-(-hi // block_n) * block_n - lo, 0)
    return total


def flex(seqlen, causal, window_size, softcap):
    """FlexAttention compiled for this call: a block mask for the causal or windowed pattern, a score_mod for
    softcap."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.config.cache_size_limit = max(256, torch._dynamo.config.cache_size_limit)
    left = window_size[0]

    def mask_mod(b, h, q_idx, kv_idx):
        keep = q_idx >= kv_idx
        if left >= 0:
            keep = keep & (q_idx - kv_idx <= left)
        return keep

    def score_mod(score, b, h, q_idx, kv_idx):
        return SOFTCAP * torch.tanh(score / SOFTCAP)

    block_mask = create_block_mask(mask_mod, None, None, seqlen, seqlen, device="cuda") if causal or left >= 0 else None
    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, score_mod=score_mod if softcap else None)


def time_ms(fn, backward):
    """Median ms of fn() (and its backward with backward)."""
    if backward:

        def step():
            out = fn()
            out.backward(grad)

        out = fn()
        grad = torch.randn_like(out)
        return triton.testing.do_bench(step, warmup=50, rep=300)
    return triton.testing.do_bench(fn, warmup=50, rep=300)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlen", type=int, default=16384)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--no-flex", action="store_true", help="skip FlexAttention")
    parser.add_argument("--out", help="a folder for hopper_variants.json")
    args = parser.parse_args()

    import flashdoc
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh

    cases = [
        ("dense causal", True, (-1, -1), 0.0),
        (f"window {WINDOW}", False, WINDOW, 0.0),
        ("dense", False, (-1, -1), 0.0),
        (f"softcap {SOFTCAP:g}", False, (-1, -1), SOFTCAP),
        (f"causal softcap {SOFTCAP:g}", True, (-1, -1), SOFTCAP),
    ]
    rows = []
    n = args.seqlen
    print(f"N = {n}, bf16, TFLOP/s on visited scores (fwd: 4·d per pair and head, fwd+bwd: 3.5x that)")
    print(f"{'d':>4} {'case':<22} {'hopper fwd/dkdv/dq':<20} {'fwd':>8} {'fwd+bwd':>8} {'flex fwd':>9} {'flex f+b':>9}")
    for d in args.head_dims:
        heads = 2048 // d
        q, k, v = (
            torch.randn(1, n, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
        )
        qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
        for name, causal, window, softcap in cases:
            flops = 4 * d * heads * visible_pairs(n, n, causal, window)
            variant = dict(window_size=window, softcap=softcap)
            call = lambda: flashdoc.flash_attn_func(q, k, v, causal=causal, **variant)  # noqa: E731
            on_hopper = "/".join(
                "y" if p else "n"
                for p in (
                    fh.supports(q, causal, **variant),
                    bh.supports_dkdv(q, causal, **variant),
                    bh.supports_dq(q, causal, **variant),
                )
            )
            row = dict(
                head_dim=d,
                case=name,
                seqlen=n,
                hopper=on_hopper,
                visited_over_visible=visited_pairs(n, n, causal, window) / visible_pairs(n, n, causal, window),
                fwd=flops / time_ms(call, False) * 1e-9,
                fwd_bwd=3.5 * flops / time_ms(call, True) * 1e-9,
            )
            if not args.no_flex:
                try:
                    fcall = flex(n, causal, window, softcap)
                    run = lambda: fcall(qt, kt, vt)  # noqa: E731
                    run()
                    row["flex_fwd"] = flops / time_ms(run, False) * 1e-9
                    row["flex_fwd_bwd"] = 3.5 * flops / time_ms(run, True) * 1e-9
                except Exception as e:  # FlexAttention missing or failing: the flashdoc rows still count
                    print(f"  (FlexAttention: {type(e).__name__}: {str(e).splitlines()[0][:100]})")
            rows.append(row)
            print(
                f"{d:>4} {name:<22} {on_hopper:<20} {row['fwd']:>8.1f} {row['fwd_bwd']:>8.1f} "
                f"{row.get('flex_fwd', float('nan')):>9.1f} {row.get('flex_fwd_bwd', float('nan')):>9.1f}",
                flush=True,
            )
        by = {r["case"]: r for r in rows if r["head_dim"] == d}
        causal_row, window_row = by["dense causal"], by[f"window {WINDOW}"]
        print(
            f"  d={d}: window / dense causal: fwd {window_row['fwd'] / causal_row['fwd']:.2f}x, fwd+bwd "
            f"{window_row['fwd_bwd'] / causal_row['fwd_bwd']:.2f}x (target >= 0.9x)"
        )
        tiling = window_row["visited_over_visible"] / causal_row["visited_over_visible"]
        fwd, fwd_bwd = (window_row[m] / causal_row[m] * tiling for m in ("fwd", "fwd_bwd"))
        print(
            f"  d={d}: the same on the pairs in the tiles visited: fwd {fwd:.2f}x, fwd+bwd {fwd_bwd:.2f}x "
            f"(the window visits "
            f"{window_row['visited_over_visible']:.2f}x its visible pairs, causal "
            f"{causal_row['visited_over_visible']:.2f}x)"
        )
        if "flex_fwd" in window_row:
            print(
                f"  d={d}: window / FlexAttention's: fwd {window_row['fwd'] / window_row['flex_fwd']:.2f}x, "
                f"fwd+bwd {window_row['fwd_bwd'] / window_row['flex_fwd_bwd']:.2f}x (target > 1)"
            )
        for base, capped in (("dense", f"softcap {SOFTCAP:g}"), ("dense causal", f"causal softcap {SOFTCAP:g}")):
            print(
                f"  d={d}: {capped} / {base}: fwd {by[capped]['fwd'] / by[base]['fwd']:.2f}x (target >= 0.9x), "
                f"fwd+bwd {by[capped]['fwd_bwd'] / by[base]['fwd_bwd']:.2f}x"
            )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "hopper_variants.json"), "w") as f:
            json.dump(
                dict(
                    device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows
                ),
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
