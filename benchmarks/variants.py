"""Benchmark flashdoc's attention variants on one GPU, in one process: sliding window, softcap and ALiBi against
flashdoc's dense rows and FlexAttention with the same block mask / score_mod, with the project's targets checked.

    python -m benchmarks.variants --out OUT                     # every group: OUT/variants.json, variants.md
    python -m benchmarks.variants --out OUT --groups window     # one group: OUT/variants-window.{json,md}
    python -m benchmarks.variants --out OUT --quick             # d = 128 at N = 16k only (a GPU smoke run)
    python -m benchmarks.variants --out OUT --smoke             # tiny shapes on the CPU: the numbers mean nothing

Shapes follow the protocol of ``benchmarks/run.py``: bf16, 16k tokens in total (batch = 16384 / N), hidden 2048
(heads = 2048 / d). Each time is the median of ``triton.testing.do_bench``, and on a GPU each group's rows are
timed in ``ROUNDS`` rounds, in an order rotated every round, each row keeping its median round. TFLOP/s count
4 * B * H * d FLOPs per (query, key) pair inside the mask (N^2 dense, N(N+1)/2 causal, the band for a window),
x 3.5 for forward+backward (the backward's five products over the forward's two): work done per second, so a
sliding window's rate compares with the dense causal rate whatever the window skips. A kernel computes whole
tiles, so it also visits pairs outside the mask at the band's edges; each row records those too
(``visited_pairs``, for 64 x 128 tiles), and the window's ratio to dense causal is also given on them: the
kernel's efficiency apart from the tiling.

The targets (each printed as met or unmet with its ratio, and kept in the JSON):

- sliding window >= 0.9x dense causal (TFLOP/s), and faster than FlexAttention's sliding window;
- softcap forward >= 0.9x the same call without softcap;
- ALiBi (causal) >= FlexAttention with the same score_mod.

Every flashdoc row records which kernels ran it (Hopper's Gluon kernels or the portable ones, by the same
decision the kernels make: ``flashdoc.kernels.mask.hopper_supports``), and the run records ``python -m
flashdoc``'s kernel-path report. Windows and softcap run on the Hopper kernels where the dense call does (so a
ratio to the dense call is the variant's own cost), ALiBi on the portable ones.

On a checkout without some variant, its rows are recorded as unsupported, so the dense rows still compare across
versions. Rows are written out as each group's rounds end, and a SIGTERM or Ctrl-C (a time limit) keeps what was
measured, each row's median over the rounds it had.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python benchmarks/variants.py): the checkout's flashdoc
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import flashdoc  # noqa: E402, I001  (first: on a machine without a GPU it turns on Triton's interpreter)

SCHEMA = "flashdoc-variants/1"
TOKENS, HIDDEN = 16384, 2048
WINDOW = (1024, 0)
SOFTCAP = 50.0
QUANTILES = [0.5, 0.2, 0.8]
GROUPS = ("dense", "window", "softcap", "alibi")
# A ratio divides two rows of one group. Timed once each, a ratio hangs on which of a call's modes its one timing
# fell into (the dense causal forward's do_bench samples are bimodal on the H200: 1.49 and 1.65 ms); timed in
# rounds whose order rotates, so that no row is always first, each row keeps its median round.
ROUNDS = 3
SCALES = ("full", "quick", "smoke")
# The tiles the visited-pairs count assumes (the Hopper forward's; the portable kernels' are autotuned).
TILE_M, TILE_N = 64, 128
# The targets: (key, what, threshold, strict: the ratio must exceed the threshold rather than reach it).
TARGETS = {
    "window_vs_causal": ("sliding window / dense causal", 0.9, False),
    "window_vs_flex": ("sliding window / FlexAttention's", 1.0, True),
    "softcap_vs_plain": ("softcap / the same call without", 0.9, False),
    "alibi_vs_flex": ("ALiBi / FlexAttention's score_mod", 1.0, False),
}


FLEX_WINDOW_RATIO = "FlexAttention's sliding window / its dense causal"


# --- what is counted ------------------------------------------------------------------------------------------


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window=(-1, -1)) -> int:
    """The (query, key) pairs inside the mask, flash-attn's bottom-right alignment (-1: unbounded; causal sets
    the right side to 0), counted row by row."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(seqlen_q, dtype=torch.int64)
    offset = seqlen_k - seqlen_q
    hi = torch.clamp(i + offset + right, max=seqlen_k - 1) if right >= 0 else torch.full_like(i, seqlen_k - 1)
    lo = torch.clamp(i + offset - left, min=0) if left >= 0 else torch.zeros_like(i)
    return int(torch.clamp(hi - lo + 1, min=0).sum())


def visited_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window=(-1, -1), block_m=TILE_M, block_n=TILE_N) -> int:
    """The (query, key) pairs a tiled kernel computes: for each block_m query rows, the whole block_n key tiles
    from the one holding the first row's first key to the one holding the last row's last key."""
    left, right = window
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


def tflops(ms: float, batch: int, heads: int, head_dim: int, pairs: int, mode: str) -> float:
    flops = 4 * batch * heads * head_dim * pairs * (3.5 if mode == "fwd_bwd" else 1.0)
    return flops / (ms * 1e-3) / 1e12


# --- which kernels run a call ---------------------------------------------------------------------------------


def kernel_path(q, k, causal: bool, window, softcap: float, slopes, mode: str) -> dict:
    """{"fwd": "hopper" | "portable", and for fwd_bwd "dkdv", "dq" ("fused" when the dK/dV kernel computes dQ
    too)} for a call on q, k in flashdoc's (B, N, H, D) layout; {"unknown": why} on a checkout without these
    predicates."""
    try:
        from flashdoc.kernels import backward, backward_hopper, forward_hopper, mask

        variant = mask.Variant(tuple(window), float(softcap), slopes)
        path = {"fwd": "hopper" if mask.hopper_supports(forward_hopper.supports, q, causal, variant) else "portable"}
        if mode == "fwd_bwd":
            dkdv = mask.hopper_supports(backward_hopper.supports_dkdv, q, causal, variant)
            path["dkdv"] = "hopper" if dkdv else "portable"
            if dkdv and backward.fused_dq_runs(q, k, causal, False, variant):
                path["dq"] = "fused"
            else:
                dq = mask.hopper_supports(backward_hopper.supports_dq, q, causal, variant)
                path["dq"] = "hopper" if dq else "portable"
        return path
    except (ImportError, AttributeError, TypeError) as err:
        return {"unknown": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"}


def environment_kernel_paths() -> list:
    """``python -m flashdoc``'s kernel-path rows for this process: [operation, kernel and why]."""
    try:
        from flashdoc._config import kernel_paths

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        return [list(row) for row in kernel_paths(capability)]
    except (ImportError, AttributeError) as err:
        return [["unknown", f"{type(err).__name__}: {err}"]]


# --- peers ----------------------------------------------------------------------------------------------------


def flashdoc_call(causal: bool, window=(-1, -1), softcap: float = 0.0, slopes=None):
    """flashdoc.flash_attn_func with keywords only (so the same call runs on checkouts with either argument
    order), and variant keywords only where the row uses them (so a checkout without them still runs the
    dense rows)."""
    options = dict(causal=causal)
    if tuple(window) != (-1, -1):
        options["window_size"] = tuple(window)
    if softcap:
        options["softcap"] = softcap
    if slopes is not None:
        options["alibi_slopes"] = slopes

    def call(q, k, v):
        return flashdoc.flash_attn_func(q, k, v, **options)

    return call


class Flex:
    """FlexAttention compiled once per shape (static shapes: its fastest kernels), with each block mask built once
    per (mask, N) outside the timing."""

    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        # one compile per shape and mask; past dynamo's limit Flex silently runs eagerly, many times slower
        config = torch._dynamo.config
        for name, least in (
            ("recompile_limit", 1024),
            ("cache_size_limit", 1024),
            ("accumulated_recompile_limit", 4096),
            ("accumulated_cache_size_limit", 4096),
        ):
            if hasattr(config, name):
                setattr(config, name, max(least, getattr(config, name)))
        self.flex = torch.compile(flex_attention, dynamic=False)
        self.create_block_mask = create_block_mask
        self.masks = {}

    def block_mask(self, name: str, n: int, window, device):
        key = (name, n, tuple(window))
        if key not in self.masks:
            left = window[0]

            def causal(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx

            def sliding(b, h, q_idx, kv_idx):
                return (q_idx >= kv_idx) & (q_idx - kv_idx <= left)

            fn = dict(causal=causal, sliding=sliding)[name]
            self.masks[key] = self.create_block_mask(fn, None, None, n, n, device=device)
        return self.masks[key]

    def call(self, mask=None, window=(-1, -1), score_mod=None):
        def call(q, k, v):
            block_mask = None if mask is None else self.block_mask(mask, q.shape[-2], window, q.device)
            return self.flex(q, k, v, score_mod=score_mod, block_mask=block_mask)

        return call


def alibi_mod(slopes):
    def mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    return mod


def alibi_slopes(heads: int, device) -> torch.Tensor:
    """The ALiBi paper's geometric slopes, 2^(-8 i / H) for i = 1 ... H, fp32."""
    return torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)], device=device, dtype=torch.float32)


# --- timing ---------------------------------------------------------------------------------------------------


def time_ms(fn, grads, device: str) -> list[float]:
    """[median, 20th, 80th percentile] ms: do_bench on a GPU; on the CPU one timed call (a smoke run)."""
    if device == "cuda":
        import triton.testing

        fn()  # compiles and autotunes outside the timing
        torch.cuda.synchronize()
        return list(triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=grads, quantiles=QUANTILES))
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms]


def inputs(batch: int, heads: int, seqlen: int, head_dim: int, device: str, dtype, flex_layout: bool):
    """q, k, v (requiring grad) and dout: (B, N, H, D) for flashdoc, (B, H, N, D) contiguous for FlexAttention."""
    g = torch.Generator(device="cpu").manual_seed(0)
    shape = (batch, heads, seqlen, head_dim) if flex_layout else (batch, seqlen, heads, head_dim)
    q, k, v = (torch.randn(shape, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    dout = torch.randn(shape, generator=g).to(device, dtype)
    return q, k, v, dout


def measure(call, q, k, v, dout, mode: str, device: str) -> list[float]:
    if mode == "fwd":

        def fn():
            with torch.no_grad():
                call(q, k, v)
    else:

        def fn():
            call(q, k, v).backward(dout)

    return time_ms(fn, [q, k, v], device)


# --- the rows -------------------------------------------------------------------------------------------------


def row_spec(group, name, peer, mode, n, d, causal, window=(-1, -1), softcap=0.0, alibi=False, mask=None) -> dict:
    return dict(
        group=group,
        name=name,
        peer=peer,
        mode=mode,
        seqlen=n,
        head_dim=d,
        causal=causal,
        window=list(window),
        softcap=softcap,
        alibi=alibi,
        mask=mask,
    )


def shapes(scale: str) -> dict:
    """The sizes of a run: seqlens (the dense rows'), the variants' seqlens, head dims, window, tokens, hidden."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if scale == "smoke":  # the Triton interpreter: a few tiny calls
        return dict(seqlens=[64], variant_seqlens=[64], head_dims=[32], window=(16, 0), tokens=64, hidden=64)
    if scale == "quick":
        return dict(
            seqlens=[16384], variant_seqlens=[16384], head_dims=[128], window=WINDOW, tokens=TOKENS, hidden=HIDDEN
        )
    return dict(
        seqlens=[1024, 4096, 16384],
        variant_seqlens=[4096, 16384],
        head_dims=[64, 128],
        window=WINDOW,
        tokens=TOKENS,
        hidden=HIDDEN,
    )


def rows_to_run(scale: str, groups=GROUPS) -> list[dict]:
    """Every row of a run, in the order they are timed: dense (full and causal at each N), window (dense causal,
    the window, Flex's window, Flex's dense causal) at the longest N, softcap (without, with) and ALiBi
    (flashdoc's, Flex's) at the two longest."""
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ValueError(f"groups must be among {', '.join(GROUPS)}, got {', '.join(unknown)}")
    s = shapes(scale)
    window, long = s["window"], s["seqlens"][-1]
    rows = []
    for d in s["head_dims"]:
        if "dense" in groups:
            for n in s["seqlens"]:
                for causal in (False, True):
                    for mode in ("fwd", "fwd_bwd"):
                        rows.append(
                            row_spec(
                                "dense", f"flashdoc {'causal' if causal else 'full'}", "flashdoc", mode, n, d, causal
                            )
                        )
        if "window" in groups:
            for mode in ("fwd", "fwd_bwd"):
                rows += [
                    row_spec("window", "flashdoc causal", "flashdoc", mode, long, d, True),
                    row_spec("window", f"flashdoc window {window}", "flashdoc", mode, long, d, True, window),
                    row_spec("window", f"flex window {window}", "flex", mode, long, d, True, window, mask="sliding"),
                    # Flex's own dense causal rate: what its window's rate is measured against, as flashdoc's is
                    row_spec("window", "flex causal", "flex", mode, long, d, True, mask="causal"),
                ]
        if "softcap" in groups:
            for n in s["variant_seqlens"]:
                for causal in (False, True):
                    for mode in ("fwd", "fwd_bwd"):
                        rows += [
                            row_spec("softcap", "flashdoc", "flashdoc", mode, n, d, causal),
                            row_spec(
                                "softcap",
                                f"flashdoc softcap {SOFTCAP:g}",
                                "flashdoc",
                                mode,
                                n,
                                d,
                                causal,
                                softcap=SOFTCAP,
                            ),
                        ]
        if "alibi" in groups:
            for n in s["variant_seqlens"]:
                for mode in ("fwd", "fwd_bwd"):
                    rows += [
                        row_spec("alibi", "flashdoc alibi", "flashdoc", mode, n, d, True, alibi=True),
                        row_spec("alibi", "flex alibi score_mod", "flex", mode, n, d, True, alibi=True, mask="causal"),
                    ]
    return rows


def run_row(spec: dict, s: dict, device: str, dtype, flex) -> dict:
    """Time one row; the row with its measurements, or with ``unsupported`` / ``skipped`` / ``error``."""
    n, d = spec["seqlen"], spec["head_dim"]
    batch, heads = max(1, s["tokens"] // n), s["hidden"] // d
    row = dict(spec, batch=batch, heads=heads)
    if spec["peer"] == "flex" and flex is None:
        row["skipped"] = "FlexAttention runs compiled on a GPU only"
        return row
    window, causal = tuple(spec["window"]), spec["causal"]
    slopes = alibi_slopes(heads, device) if spec["alibi"] else None
    q, k, v, dout = inputs(batch, heads, n, d, device, dtype, flex_layout=spec["peer"] == "flex")
    if spec["peer"] == "flex":
        call = flex.call(spec["mask"], window, alibi_mod(slopes) if slopes is not None else None)
    else:
        call = flashdoc_call(causal, window, spec["softcap"], slopes)
        row["kernels"] = kernel_path(q.detach(), k.detach(), causal, window, spec["softcap"], slopes, spec["mode"])
    try:
        ms = measure(call, q, k, v, dout, spec["mode"], device)
    except (TypeError, ValueError) as err:  # a checkout without this option
        row["unsupported"] = str(err).splitlines()[0][:200]
        return row
    except Exception as err:  # a peer failing on this shape: the other rows still count
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        return row
    finally:
        del q, k, v, dout
        if device == "cuda":
            torch.cuda.empty_cache()
    pairs = visible_pairs(n, n, causal, window)
    visited = visited_pairs(n, n, causal, window)
    row.update(
        ms=ms[0],
        ms_p20=ms[1],
        ms_p80=ms[2],
        pairs=pairs,
        visited_pairs=visited,
        tflops=tflops(ms[0], batch, heads, d, pairs, spec["mode"]),
    )
    return row


def rotated(items: list, turn: int) -> list:
    """items, starting at index turn (mod their number): round turn's order."""
    k = turn % len(items)
    return items[k:] + items[:k]


def median_round(timed: list[dict]) -> dict:
    """One row out of its rounds: the round with the median time, carrying every round's time (``ms_rounds``);
    a row that has no time (skipped, unsupported, failed) as its one round recorded it."""
    if "ms" not in timed[0]:
        return timed[0]
    row = dict(sorted(timed, key=lambda r: r["ms"])[len(timed) // 2])
    row["ms_rounds"] = [r["ms"] for r in timed]
    return row


def describe(row: dict) -> str:
    head = f"{row['group']:8s} {row['name']:34s} {row['mode']:7s} N={row['seqlen']:6d} d={row['head_dim']:3d}"
    if "tflops" in row:
        kernels = "/".join(f"{k}={v}" for k, v in row.get("kernels", {}).items())
        return f"{head}: {row['ms']:9.3f} ms {row['tflops']:7.1f} TFLOP/s  {kernels}"
    reason = row.get("unsupported") or row.get("skipped") or row.get("error")
    status = "unsupported" if "unsupported" in row else ("skipped" if "skipped" in row else "error")
    return f"{head}: {status} ({reason})"


# --- the targets ----------------------------------------------------------------------------------------------


def _find(rows, group, name, mode, n, d, causal=None):
    for r in rows:
        if (
            r["group"] == group
            and r["name"] == name
            and r["mode"] == mode
            and r["seqlen"] == n
            and r["head_dim"] == d
            and (causal is None or r["causal"] == causal)
            and "tflops" in r
        ):
            return r
    return None


def _ratio(a, b, key="tflops"):
    return None if a is None or b is None else a[key] / b[key]


def _target(key, ratio, **where) -> dict:
    what, threshold, strict = TARGETS[key]
    met = None if ratio is None else (ratio > threshold if strict else ratio >= threshold)
    return dict(target=key, what=what, threshold=threshold, strict=strict, ratio=ratio, met=met, **where)


def evaluate(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(targets, other ratios) from the measured rows. A target whose rows are missing has ratio and met None.

    targets: sliding window / dense causal and / Flex (each mode, each head dim, at the window group's N);
    softcap / without (forward, each N, head dim and causality); ALiBi / Flex (each mode, N and head dim).
    Other ratios: softcap / without in the forward+backward, the window against dense causal on the pairs in the
    tiles visited, and FlexAttention's window against its own dense causal (how much of its causal rate a peer's
    tiled kernel keeps on a narrow band)."""
    targets, ratios = [], []
    window_rows = [r for r in rows if r["group"] == "window"]
    # the band the window rows are named after, "(1024, 0)" (the dense causal rows' window is (-1, -1))
    band = next((tuple(r["window"]) for r in window_rows if tuple(r["window"]) != (-1, -1)), None)
    for d in sorted({r["head_dim"] for r in window_rows}):
        for mode in ("fwd", "fwd_bwd"):
            n = max(r["seqlen"] for r in window_rows)
            win = _find(rows, "window", f"flashdoc window {band}", mode, n, d)
            causal = _find(rows, "window", "flashdoc causal", mode, n, d)
            flex = _find(rows, "window", f"flex window {band}", mode, n, d)
            flex_causal = _find(rows, "window", "flex causal", mode, n, d)
            where = dict(group="window", head_dim=d, mode=mode, seqlen=n)
            targets.append(_target("window_vs_causal", _ratio(win, causal), **where))
            targets.append(_target("window_vs_flex", _ratio(win, flex), **where))
            if win is not None and causal is not None:
                tiled = (
                    _ratio(win, causal)
                    * (win["visited_pairs"] / win["pairs"])
                    / (causal["visited_pairs"] / causal["pairs"])
                )
            else:
                tiled = None
            ratios.append(
                dict(what="sliding window / dense causal on the pairs in the tiles visited", ratio=tiled, **where)
            )
            ratios.append(dict(what=FLEX_WINDOW_RATIO, ratio=_ratio(flex, flex_causal), **where))
    softcap_rows = [r for r in rows if r["group"] == "softcap"]
    for d in sorted({r["head_dim"] for r in softcap_rows}):
        for n in sorted({r["seqlen"] for r in softcap_rows}):
            for causal in (False, True):
                for mode in ("fwd", "fwd_bwd"):
                    capped = _find(rows, "softcap", f"flashdoc softcap {SOFTCAP:g}", mode, n, d, causal)
                    plain = _find(rows, "softcap", "flashdoc", mode, n, d, causal)
                    where = dict(group="softcap", head_dim=d, mode=mode, seqlen=n, causal=causal)
                    if mode == "fwd":
                        targets.append(_target("softcap_vs_plain", _ratio(capped, plain), **where))
                    else:
                        ratios.append(
                            dict(what="softcap / the same call without", ratio=_ratio(capped, plain), **where)
                        )
    alibi_rows = [r for r in rows if r["group"] == "alibi"]
    for d in sorted({r["head_dim"] for r in alibi_rows}):
        for n in sorted({r["seqlen"] for r in alibi_rows}):
            for mode in ("fwd", "fwd_bwd"):
                ours = _find(rows, "alibi", "flashdoc alibi", mode, n, d)
                flex = _find(rows, "alibi", "flex alibi score_mod", mode, n, d)
                where = dict(group="alibi", head_dim=d, mode=mode, seqlen=n, causal=True)
                targets.append(_target("alibi_vs_flex", _ratio(ours, flex), **where))
    return targets, ratios


def target_line(t: dict) -> str:
    causal = {True: " causal", False: " full"}.get(t.get("causal"), "")
    bound = f"{'>' if t['strict'] else '>='} {t['threshold']:g}"
    if t["ratio"] is None:
        verdict = "not measured"
    else:
        verdict = f"{t['ratio']:.2f}x: {'met' if t['met'] else 'unmet'}"
    return f"{t['what']} [{bound}] d={t['head_dim']} {t['mode']} N={t['seqlen']}{causal}: {verdict}"


# --- the report -----------------------------------------------------------------------------------------------


def summary_line(meta: dict) -> str:
    """One sentence: the GPU, versions and shapes of the run, and what its TFLOP/s count."""
    return (
        f"{meta['gpu']}, torch {meta['torch']}, Triton {meta['triton']}, flashdoc {meta.get('flashdoc_commit')}; "
        f"{meta['dtype']}, {meta['tokens']} tokens in total, hidden {meta['hidden']} ({meta['scale']} run"
        f"{', interrupted' if meta.get('interrupted') else ''}). TFLOP/s on the pairs inside the mask"
        + (f", each row its median of {meta['rounds']} rounds." if meta.get("rounds", 1) > 1 else ".")
    )


def _causality(item: dict) -> str:
    # targets and ratios of the softcap and ALiBi groups name their masking; the window's are always causal
    return {True: " (causal)", False: " (full)"}.get(item.get("causal"), "")


def _table(header: list[str], cells: list[list]) -> str:
    """A markdown table ending in a newline, so that it can be written to a file as it is."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def targets_table(targets: list[dict]) -> str:
    """Markdown: each target with its threshold, the measured ratio and whether it is met (a "claim" in the
    table, as the site calls it)."""
    cells = []
    for t in targets:
        bound = f"{'>' if t['strict'] else '>='} {t['threshold']:g}"
        ratio = "—" if t["ratio"] is None else f"{t['ratio']:.2f}"
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "no")
        cells.append([f"{t['what']}{_causality(t)} [{bound}]", t["head_dim"], t["mode"], t["seqlen"], ratio, met])
    return _table(["claim", "d", "mode", "N", "ratio", "met"], cells)


def ratios_table(ratios: list[dict]) -> str:
    """Markdown: the ratios that are not targets (softcap's forward+backward, the window on visited pairs)."""
    cells = [
        [
            f"{r['what']}{_causality(r)}",
            r["head_dim"],
            r["mode"],
            r["seqlen"],
            "—" if r["ratio"] is None else f"{r['ratio']:.2f}",
        ]
        for r in ratios
    ]
    return _table(["ratio", "d", "mode", "N", "value"], cells)


def rows_table(rows: list[dict]) -> str:
    """Markdown: every row, with its time, TFLOP/s (or why it has none), tiling overhead and kernels."""
    cells = []
    for r in rows:
        causal = " causal" if r["causal"] and "causal" not in r["name"] else ""
        if "tflops" in r:
            ms, rate = f"{r['ms']:.3f}", f"{r['tflops']:.1f}"
            visited = f"{r['visited_pairs'] / r['pairs']:.2f}"
        else:
            ms, visited = "—", "—"
            rate = "unsupported" if "unsupported" in r else ("skipped" if "skipped" in r else "error")
        kernels = ", ".join(f"{k} {v}" for k, v in r.get("kernels", {}).items()) or "—"
        cells.append(
            [r["group"], f"{r['name']}{causal}", r["mode"], r["seqlen"], r["head_dim"], ms, rate, visited, kernels]
        )
    return _table(["group", "row", "mode", "N", "d", "ms", "TFLOP/s", "visited / visible", "kernels"], cells)


def report(result: dict) -> str:
    """Markdown: the summary, the targets, the other ratios, then every row."""
    return "\n".join(
        [
            "# flashdoc variants benchmark\n",
            summary_line(result["meta"]) + "\n",
            "## Targets\n",
            targets_table(result["targets"]),
            "## Other ratios\n",
            ratios_table(result["ratios"]),
            "## Rows\n",
            rows_table(result["rows"]),
        ]
    )


# --- the run --------------------------------------------------------------------------------------------------


def run(out_dir, scale: str = "full", groups=GROUPS, verbose: bool = True, rounds: int | None = None) -> dict:
    """Time every row of ``groups`` at ``scale`` in ``rounds`` rounds (default: ``ROUNDS`` on a GPU, one on the
    CPU, where a smoke run's numbers mean nothing) and write ``variants.json`` and ``variants.md`` into out_dir
    (``variants-<groups>.*`` for a subset) after every group; returns the JSON dict."""
    from benchmarks.run import environment

    groups = tuple(g for g in GROUPS if g in groups)
    specs = rows_to_run(scale, groups)  # checks scale and groups
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and scale != "smoke":
        raise ValueError(f"scale {scale!r} needs a CUDA GPU; without one, use scale 'smoke'")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    rounds = rounds if rounds is not None else (ROUNDS if device == "cuda" else 1)
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    s = shapes(scale)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "variants" if groups == GROUPS else "variants-" + "-".join(groups)
    meta = dict(
        environment(device),
        schema=SCHEMA,
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        scale=scale,
        groups=list(groups),
        dtype=str(dtype).removeprefix("torch."),
        tokens=s["tokens"],
        hidden=s["hidden"],
        window=list(s["window"]),
        softcap=SOFTCAP,
        tile=[TILE_M, TILE_N],
        kernel_paths=environment_kernel_paths(),
        rounds=rounds,
        interrupted=False,
    )
    result = dict(meta=meta, rows=[], targets=[], ratios=[])

    def write():
        result["targets"], result["ratios"] = evaluate(result["rows"])
        (out / f"{stem}.json").write_text(json.dumps(result, indent=1, allow_nan=False))
        (out / f"{stem}.md").write_text(report(result))

    if verbose:
        for op, path in meta["kernel_paths"]:
            print(f"kernels, {op}: {path}", flush=True)
    flex = None
    if device == "cuda" and any(spec["peer"] == "flex" for spec in specs):
        try:
            flex = Flex()
        except Exception as err:  # no FlexAttention in this torch: its rows are skipped
            print(f"FlexAttention unavailable: {type(err).__name__}: {err}", flush=True)
    timed: list[list[dict]] = []  # the current group's rows, each a list of its rounds

    def keep_group():
        for row in (median_round(rounds_of_row) for rounds_of_row in timed if rounds_of_row):
            result["rows"].append(row)
            if verbose:
                print(describe(row), flush=True)
        timed.clear()
        write()

    try:
        # a group's rows at one head dim divide each other: those are rotated together, in the order rows_to_run
        # gives
        for _, batch_of_specs in itertools.groupby(specs, key=lambda spec: (spec["group"], spec["head_dim"])):
            group_specs = list(batch_of_specs)
            timed.extend([] for _ in group_specs)
            for turn in range(rounds):
                for i in rotated(list(range(len(group_specs))), turn):
                    if turn and "ms" not in timed[i][0]:  # skipped, unsupported or failed: once is enough
                        continue
                    timed[i].append(run_row(group_specs[i], s, device, dtype, flex))
            keep_group()
    except KeyboardInterrupt:  # a time limit: keep what was measured, each row's rounds so far
        meta["interrupted"] = True
        print("interrupted: writing the rows measured so far", flush=True)
        keep_group()
    write()
    if verbose:
        print()
        for t in result["targets"]:
            print(target_line(t), flush=True)
        print(f"\nwrote {out / (stem + '.json')} and {out / (stem + '.md')}", flush=True)
    return result


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.variants",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="bench-results/variants", help="output folder (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="head dim 128 at N = 16k only (on the CPU: --smoke)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (the default without a GPU)")
    parser.add_argument(
        "--groups",
        nargs="+",
        default=list(GROUPS),
        choices=GROUPS,
        help="run only these groups of rows (default: all; the outputs are named after them)",
    )
    args = parser.parse_args(argv)
    if args.smoke or not torch.cuda.is_available():
        scale = "smoke"
    else:
        scale = "quick" if args.quick else "full"
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run(args.out, scale, args.groups)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
