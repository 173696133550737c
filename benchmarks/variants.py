"""Benchmark flashdoc's attention variants on one GPU, in one process: sliding window, softcap and ALiBi against
flashdoc's dense rows and FlexAttention with the same block mask / score_mod.

    python3 benchmarks/variants.py --out $OUT/variants          # writes variants.json and variants.md there
    python3 benchmarks/variants.py --out $OUT/variants --groups window   # one group: variants-window.*

Shapes follow the project's protocol: bf16, 16k tokens in total (batch = 16384 / N), hidden 2048 (heads =
2048 / d). Each time is the median of ``triton.testing.do_bench``. TFLOP/s count 4 * B * H * d FLOPs per score
actually computed (the scores inside the mask: N^2 for dense, N(N+1)/2 for causal, the band for a window),
x 3.5 for forward+backward (2.5 for the backward's five products over the forward's two). So a sliding window's
rate compares with the dense causal rate as work done per second, whatever the window skips.

On a machine without flashdoc's variants (an older checkout) those rows are recorded as unsupported, so the
dense rows can be compared across versions. Without a GPU, ``--smoke`` runs tiny shapes through Triton's
interpreter to check that the script runs (no FlexAttention there).
"""

import argparse
import json
import math
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import flashdoc  # noqa: E402  (first: on a CPU machine it turns Triton's interpreter on)

TOKENS, HIDDEN = 16384, 2048
WINDOW = (1024, 0)
SOFTCAP = 50.0
QUANTILES = [0.5, 0.2, 0.8]
GROUPS = ["dense", "window", "softcap", "alibi"]


# --- what is counted ------------------------------------------------------------------------------------------


def visible_scores(seqlen_q: int, seqlen_k: int, causal: bool, window=(-1, -1)) -> int:
    """The number of (query, key) pairs inside the mask (bottom-right aligned, as flash_attn_func)."""
    diag = seqlen_k - seqlen_q
    total = 0
    for i in range(seqlen_q):
        hi = seqlen_k - 1
        if causal or window[1] >= 0:
            hi = min(hi, i + diag + (0 if causal else window[1]))
        lo = max(0, i + diag - window[0]) if window[0] >= 0 else 0
        total += max(0, hi - lo + 1)
    return total


def tflops(ms: float, batch: int, heads: int, head_dim: int, scores: int, mode: str) -> float:
    flops = 4 * batch * heads * head_dim * scores * (3.5 if mode == "fwd_bwd" else 1.0)
    return flops / (ms * 1e-3) / 1e12


# --- peers ----------------------------------------------------------------------------------------------------


def flashdoc_call(causal=False, window=(-1, -1), softcap=0.0, slopes=None):
    """flashdoc.flash_attn_func on (B, H, N, D) tensors (as views in its layout), with keywords only, so the
    same call runs on checkouts with either argument order."""

    def call(q, k, v):
        options = dict(causal=causal)
        if window != (-1, -1):
            options["window_size"] = window
        if softcap:
            options["softcap"] = softcap
        if slopes is not None:
            options["alibi_slopes"] = slopes
        return flashdoc.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **options)

    return call


class Flex:
    """FlexAttention, compiled once per shape (static shapes: its fastest kernels), with a block mask built once
    per (mask, N) outside the timing."""

    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        # one compile per shape and mask; past dynamo's default limit Flex silently runs eagerly, 10x slower
        torch._dynamo.config.cache_size_limit = max(1024, torch._dynamo.config.cache_size_limit)
        torch._dynamo.config.accumulated_cache_size_limit = max(
            4096, getattr(torch._dynamo.config, "accumulated_cache_size_limit", 0)
        )
        self.flex = torch.compile(flex_attention, dynamic=False)
        self.create_block_mask = create_block_mask
        self.masks = {}

    def block_mask(self, name, n, device):
        if (name, n) not in self.masks:
            left = WINDOW[0]

            def causal(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx

            def sliding(b, h, q_idx, kv_idx):
                return (q_idx >= kv_idx) & (q_idx - kv_idx <= left)

            fn = dict(causal=causal, sliding=sliding)[name]
            self.masks[(name, n)] = self.create_block_mask(fn, None, None, n, n, device=device)
        return self.masks[(name, n)]

    def call(self, mask=None, score_mod=None):
        def call(q, k, v):
            block_mask = None if mask is None else self.block_mask(mask, q.shape[-2], q.device)
            return self.flex(q, k, v, score_mod=score_mod, block_mask=block_mask)

        return call


def softcap_mod(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)


def alibi_mod(slopes):
    def mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    return mod


# --- timing ---------------------------------------------------------------------------------------------------


def time_ms(fn, grads, device):
    if device == "cuda":
        import triton.testing

        fn()  # compiles and autotunes outside the timing
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=grads, quantiles=QUANTILES)
    fn()
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms]


def measure(call, mode, batch, heads, seqlen, head_dim, device, dtype):
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, seqlen, head_dim, generator=g).to(device, dtype).requires_grad_() for _ in range(3)
    )
    dout = torch.randn(batch, heads, seqlen, head_dim, generator=g).to(device, dtype)
    if mode == "fwd":

        def fn():
            with torch.no_grad():
                call(q, k, v)
    else:

        def fn():
            out = call(q, k, v)
            if out.shape[1] != heads:  # flashdoc's (B, N, H, D) output
                out = out.transpose(1, 2)
            out.backward(dout)

    return time_ms(fn, [q, k, v], device)


# --- the rows -------------------------------------------------------------------------------------------------


def rows_to_run(smoke: bool):
    """(group, name, peer, mode, seqlen, head_dim, causal, window, what) for every row of the run."""
    seqlens = [128] if smoke else [1024, 4096, 16384]
    long = seqlens[-1]
    head_dims = [64] if smoke else [64, 128]
    window = (32, 0) if smoke else WINDOW
    rows = []
    for d in head_dims:  # dense rows: compare with the same script on another checkout
        for n in seqlens:
            for causal in (False, True):
                for mode in ("fwd", "fwd_bwd"):
                    rows.append(
                        (
                            "dense",
                            f"flashdoc {'causal' if causal else 'full'}",
                            "flashdoc",
                            mode,
                            n,
                            d,
                            causal,
                            (-1, -1),
                            {},
                        )
                    )
    for d in head_dims:
        for mode in ("fwd", "fwd_bwd"):
            rows.append(("window", "flashdoc causal", "flashdoc", mode, long, d, True, (-1, -1), {}))
            rows.append(("window", f"flashdoc window {window}", "flashdoc", mode, long, d, True, window, {}))
            rows.append(
                ("window", f"flex sliding window {window}", "flex", mode, long, d, True, window, dict(mask="sliding"))
            )
    for d in head_dims:
        for n in seqlens[-2:]:
            for causal in (False, True):
                rows.append(("softcap", "flashdoc", "flashdoc", "fwd", n, d, causal, (-1, -1), {}))
                rows.append(
                    (
                        "softcap",
                        f"flashdoc softcap {SOFTCAP:g}",
                        "flashdoc",
                        "fwd",
                        n,
                        d,
                        causal,
                        (-1, -1),
                        dict(softcap=SOFTCAP),
                    )
                )
    for d in head_dims:
        for n in seqlens[-2:]:
            for mode in ("fwd", "fwd_bwd"):
                rows.append(("alibi", "flashdoc alibi", "flashdoc", mode, n, d, True, (-1, -1), dict(alibi=True)))
                rows.append(
                    (
                        "alibi",
                        "flex alibi score_mod",
                        "flex",
                        mode,
                        n,
                        d,
                        True,
                        (-1, -1),
                        dict(alibi=True, mask="causal"),
                    )
                )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for variants.json and variants.md")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (runs on a CPU, through the interpreter)")
    parser.add_argument(
        "--groups",
        nargs="+",
        default=GROUPS,
        choices=GROUPS,
        help="run only these groups of rows (default: all; the outputs are named after them)",
    )
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    smoke = args.smoke or device == "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tokens = 256 if smoke else TOKENS
    hidden = 128 if smoke else HIDDEN
    flex = Flex() if device == "cuda" else None
    results = []
    for group, name, peer, mode, n, d, causal, window, extra in rows_to_run(smoke):
        if group not in args.groups:
            continue
        batch, heads = max(1, tokens // n), hidden // d
        slopes = None
        if extra.get("alibi"):
            # the ALiBi paper's geometric slopes, 2^(-8 i / H)
            slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)], device=device)
        row = dict(
            group=group,
            name=name,
            peer=peer,
            mode=mode,
            seqlen=n,
            head_dim=d,
            batch=batch,
            heads=heads,
            causal=causal,
            window=list(window),
            softcap=extra.get("softcap", 0.0),
            alibi=slopes is not None,
        )
        if peer == "flex":
            if flex is None:
                continue
            score_mod = alibi_mod(slopes) if slopes is not None else None
            call = flex.call(extra.get("mask"), score_mod)
        else:
            call = flashdoc_call(causal, window, extra.get("softcap", 0.0), slopes)
        try:
            ms = measure(call, mode, batch, heads, n, d, device, dtype)
        except (TypeError, ValueError) as err:  # an older flashdoc: no such option
            row.update(unsupported=str(err).splitlines()[0])
            results.append(row)
            print(f"{group:8s} {name:34s} {mode:7s} N={n:6d} d={d:3d}: unsupported", flush=True)
            continue
        scores = visible_scores(n, n, causal, window)
        row.update(
            ms=ms[0], ms_p20=ms[1], ms_p80=ms[2], scores=scores, tflops=tflops(ms[0], batch, heads, d, scores, mode)
        )
        results.append(row)
        print(
            f"{group:8s} {name:34s} {mode:7s} N={n:6d} d={d:3d}: {ms[0]:8.3f} ms {row['tflops']:7.1f} TFLOP/s",
            flush=True,
        )
    os.makedirs(args.out, exist_ok=True)
    meta = dict(
        device=torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        torch=torch.__version__,
        triton=__import__("triton").__version__,
        smoke=smoke,
        dtype=str(dtype).removeprefix("torch."),
        tokens=tokens,
        hidden=hidden,
        flashdoc=os.path.dirname(flashdoc.__file__),
    )
    stem = "variants" if args.groups == GROUPS else "variants-" + "-".join(args.groups)
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump(dict(meta=meta, rows=results), f, indent=1)
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write(report(results, meta))
    print(report(results, meta))


def _rate(results, group, name_start, mode, n, d, causal=None):
    for r in results:
        if (
            r["group"] == group
            and r["name"].startswith(name_start)
            and r["mode"] == mode
            and r["seqlen"] == n
            and r["head_dim"] == d
            and (causal is None or r["causal"] == causal)
            and "tflops" in r
        ):
            return r["tflops"]
    return math.nan


def report(results, meta) -> str:
    """Markdown: every row, then the ratios the targets are stated in."""
    lines = [
        "# flashdoc variants benchmark\n",
        f"{meta['device']}, torch {meta['torch']}, triton {meta['triton']}, "
        f"{meta['dtype']}, {meta['tokens']} tokens in total, hidden {meta['hidden']}; TFLOP/s on the scores "
        "inside the mask.\n",
        "| group | row | mode | N | d | ms | TFLOP/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rate = f"{r['tflops']:.1f}" if "tflops" in r else "unsupported"
        ms = f"{r['ms']:.3f}" if "ms" in r else "-"
        causal = " causal" if r["causal"] and "causal" not in r["name"] else ""
        lines.append(
            f"| {r['group']} | {r['name']}{causal} | {r['mode']} | {r['seqlen']} | {r['head_dim']} | {ms} | {rate} |"
        )
    lines += ["", "## Ratios (target in brackets)", "", "| what | d | mode | N | ratio |", "|---|---|---|---|---|"]
    if not results:
        return "\n".join(lines) + "\n"
    long = max(r["seqlen"] for r in results)
    for d in sorted({r["head_dim"] for r in results}):
        for mode in ("fwd", "fwd_bwd") if any(r["group"] == "window" for r in results) else ():
            w = _rate(results, "window", "flashdoc window", mode, long, d)
            c = _rate(results, "window", "flashdoc causal", mode, long, d)
            fl = _rate(results, "window", "flex sliding", mode, long, d)
            lines.append(f"| window / dense causal [>= 0.9] | {d} | {mode} | {long} | {w / c:.2f} |")
            lines.append(f"| window / Flex sliding window [> 1] | {d} | {mode} | {long} | {w / fl:.2f} |")
        for n in sorted({r["seqlen"] for r in results if r["group"] == "softcap"}):
            for causal in (False, True):
                s = _rate(results, "softcap", "flashdoc softcap", "fwd", n, d, causal)
                p = _rate(results, "softcap", "flashdoc", "fwd", n, d, causal)
                lines.append(
                    f"| softcap / none{' (causal)' if causal else ''} [>= 0.9] | {d} | fwd | {n} | {s / p:.2f} |"
                )
        for n in sorted({r["seqlen"] for r in results if r["group"] == "alibi"}):
            for mode in ("fwd", "fwd_bwd"):
                a = _rate(results, "alibi", "flashdoc alibi", mode, n, d)
                fl = _rate(results, "alibi", "flex alibi", mode, n, d)
                lines.append(f"| ALiBi / Flex score_mod (causal) [>= 1] | {d} | {mode} | {n} | {a / fl:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
