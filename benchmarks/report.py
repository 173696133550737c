"""Tables, plots and the numbers the site quotes, from a results.json's records alone (no GPU, no torch).

The benchmark writes its tables and plots with these functions; the site's macros
(``tools/site_macros/benchmark.py``) and the post's claim checks call the queries (``ratio_range``,
``short_ratios``, ``causal_full_ratios``, ``twins_table``) on the recorded results.json. To redraw a run's
tables and plots::

    python -m benchmarks.report path/to/results.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from benchmarks.schema import MEMORY_PEERS, sweep_configs

# Flashdoc's speed ratios are judged from this N up (shorter sequences are launch- and host-bound).
RATIO_MIN_SEQLEN = 2048
# matplotlib line style per peer; a peer not listed is drawn in the default style.
STYLES = {
    "naive": dict(color="tab:gray", marker="x", linestyle=":"),
    "sdpa-efficient": dict(color="tab:olive", marker="v"),
    "sdpa-flash": dict(color="tab:blue", marker="s"),
    "sdpa-cudnn": dict(color="tab:green", marker="D"),
    "flex": dict(color="tab:purple", marker="^"),
    "flash-attn": dict(color="tab:orange", marker="P"),
    "flashdoc": dict(color="tab:red", marker="o", linewidth=2.5),
}


# ---------------------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------------------


def speed_table(results):
    """{(mode, dtype, head_dim, causal, seqlen): {peer: tflops}} for the records that succeeded."""
    table = {}
    for r in results["records"]:
        if r["kind"] == "speed" and r["status"] == "ok":
            key = (r["mode"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"])
            table.setdefault(key, {})[r["peer"]] = r["tflops"]
    return table


def peer_names(results):
    """The peers that ran, in the run's order (flashdoc last)."""
    return [name for name, p in results["peers"].items() if p.get("available")]


def config_label(mode, dtype, head_dim, causal):
    return f"{'fwd+bwd' if mode == 'fwd_bwd' else 'fwd'} {dtype} d={head_dim} {'causal' if causal else 'full'}"


def fmt_n(n):
    """A token count as tables name it: 32k for 32768, 64 for 64."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def shape_label(batch, n):
    """'1×32k': a batch of sequences or caches of n tokens each, as tables, figures and prose name it. No spaces,
    so that a narrow table column never breaks it over two lines."""
    return f"{batch}×{fmt_n(n)}"


def ratio_rows(results):
    """Per configuration (mode, dtype, head dim, causal): flashdoc's speed ratio to each peer, as the geometric
    mean and the minimum over N >= RATIO_MIN_SEQLEN (over every N if the sweep has none that long)."""
    speed = speed_table(results)
    peers = [p for p in peer_names(results) if p != "flashdoc"]
    seqlens = results["sweep"]["seqlens"]
    use = [n for n in seqlens if n >= RATIO_MIN_SEQLEN] or seqlens
    rows = []
    s = results["sweep"]
    for mode in s["modes"]:
        for dtype in s["dtypes"]:
            for d in s["head_dims"]:
                for causal in s["causals"]:
                    cells = {}
                    for peer in peers:
                        at = {n: speed.get((mode, dtype, d, causal, n), {}) for n in use}
                        timed = [n for n in use if "flashdoc" in at[n] and peer in at[n]]
                        ratios = [at[n]["flashdoc"] / at[n][peer] for n in timed]
                        cells[peer] = (
                            None
                            if not ratios
                            else dict(
                                geomean=math.exp(sum(map(math.log, ratios)) / len(ratios)),
                                min=min(ratios),
                                n=len(ratios),
                                seqlens=timed,
                            )
                        )
                    rows.append(dict(mode=mode, dtype=dtype, head_dim=d, causal=causal, ratios=cells))
    return rows, peers, use


def ratio_cells(results, mode, peer, head_dims, causals=(False, True)):
    """The cells of ``ratio_rows`` (geomean, min, n) for flashdoc against peer in this mode at these head dims and
    maskings, both dtypes; configurations where the peer was not measured are left out."""
    rows, _, _ = ratio_rows(results)
    return [
        row["ratios"][peer]
        for row in rows
        if row["mode"] == mode and row["head_dim"] in head_dims and row["causal"] in causals and row["ratios"].get(peer)
    ]


def ratio_range(results, mode, peer, head_dims, causals=(False, True), stat="geomean"):
    """(lowest, highest) over ``ratio_cells`` of each configuration's geometric mean over N (stat="geomean") or
    its minimum (stat="min"). The numbers a page's prose quotes from the ratio table."""
    vals = [cell[stat] for cell in ratio_cells(results, mode, peer, head_dims, causals)]
    if not vals:
        raise ValueError(f"no {mode} ratio to {peer!r} at head dims {list(head_dims)} in these results")
    return min(vals), max(vals)


def short_ratios(results, peer):
    """flashdoc's speed ratio to peer in every row shorter than RATIO_MIN_SEQLEN (512 and 1k tokens in the full
    sweep): the rows the ratio table leaves out, where host time per call is a large part of the wall time."""
    return [
        row["flashdoc"] / row[peer]
        for key, row in speed_table(results).items()
        if key[4] < RATIO_MIN_SEQLEN and "flashdoc" in row and peer in row
    ]


def causal_full_ratios(results, min_n=0, max_n=None):
    """{(dtype, head_dim, N): flashdoc's causal forward TFLOP/s over its full forward's} for min_n <= N <= max_n
    (TFLOP/s count only the unmasked half of a causal call's work, so equal efficiency reads 1.0)."""
    speed = speed_table(results)
    ratios = {}
    for (mode, dtype, d, causal, n), row in speed.items():
        full = speed.get((mode, dtype, d, False, n), {})
        if (
            mode == "fwd"
            and causal
            and min_n <= n
            and (max_n is None or n <= max_n)
            and "flashdoc" in row
            and "flashdoc" in full
        ):
            ratios[(dtype, d, n)] = row["flashdoc"] / full["flashdoc"]
    return ratios


def dtype_twins(results, threshold):
    """flashdoc's (mode, head_dim, causal, N) rows whose bfloat16 and float16 TFLOP/s differ by more than
    threshold (a fraction of the lower), with each dtype's record: both run the same kernels in the same
    configs, so a difference that large is a property of the run (host time, noise), not of the kernels."""
    recs = {}
    for r in results["records"]:
        if r["kind"] == "speed" and r["status"] == "ok" and r["peer"] == "flashdoc":
            recs.setdefault((r["mode"], r["head_dim"], r["causal"], r["seqlen"]), {})[r["dtype"]] = r
    return [
        (key, pair)
        for key, pair in sorted(recs.items())
        if len(pair) == 2
        and max(x["tflops"] for x in pair.values()) > (1 + threshold) * min(x["tflops"] for x in pair.values())
    ]


def target_rows(results):
    """The speed and memory targets, each with the worst value seen and whether it is met (None: nothing to
    judge)."""
    speed = speed_table(results)
    out = []

    def worst_ratio(mode, peer, min_n):
        vals = [
            (row["flashdoc"] / row[peer], k)
            for k, row in speed.items()
            if k[0] == mode and k[4] >= min_n and "flashdoc" in row and peer in row
        ]
        return min(vals) if vals else None

    for label, mode, peer, goal in [
        ("forward ≥ 1.1× FlexAttention (N ≥ 2k)", "fwd", "flex", 1.1),
        ("forward ≥ 1.0× cuDNN (N ≥ 2k, stretch)", "fwd", "sdpa-cudnn", 1.0),
        ("forward+backward ≥ 1.0× FlexAttention (N ≥ 2k)", "fwd_bwd", "flex", 1.0),
        ("forward+backward ≥ 1.5× SDPA-flash (N ≥ 2k)", "fwd_bwd", "sdpa-flash", 1.5),
    ]:
        w = worst_ratio(mode, peer, RATIO_MIN_SEQLEN)
        out.append(
            (
                label,
                None if w is None else w[0] >= goal,
                "—" if w is None else f"worst {w[0]:.2f}× at {config_label(*w[1][:4])} N={fmt_n(w[1][4])}",
            )
        )
    w = min(((r, k) for k, r in causal_full_ratios(results, min_n=4096).items()), default=None)
    out.append(
        (
            "causal forward ≥ 0.9× non-causal (N ≥ 4k)",
            None if w is None else w[0] >= 0.9,
            "—" if w is None else f"worst {w[0]:.2f}× at {w[1][0]} d={w[1][1]} N={fmt_n(w[1][2])}",
        )
    )
    mem = {}
    for r in results["records"]:
        if r["kind"] == "memory" and r["status"] == "ok":
            mem.setdefault(r["seqlen"], {})[r["peer"]] = r["peak_extra_bytes"]
    vals = [
        (row["flashdoc"] / row["sdpa-flash"], n)
        for n, row in mem.items()
        if "flashdoc" in row and row.get("sdpa-flash")
    ]
    w = max(vals) if vals else None
    out.append(
        (
            "peak extra memory ≤ 1.05× SDPA-flash",
            None if w is None else w[0] <= 1.05,
            "—" if w is None else f"worst {w[0]:.2f}× at N={fmt_n(w[1])}",
        )
    )
    fc = [r for r in results["records"] if r["kind"] == "first_call" and r["status"] == "ok"]
    out.append(
        (
            "first call on a new shape < 30 s",
            (fc[0]["first_call_s"] < 30) if fc else None,
            f"{fc[0]['first_call_s']:.1f} s (forward {fc[0]['fwd_s']:.1f} s + backward {fc[0]['bwd_s']:.1f} s, "
            "fresh process, empty Triton cache)"
            if fc
            else "—",
        )
    )
    return out


# ---------------------------------------------------------------------------------------------------------
# Markdown tables
# ---------------------------------------------------------------------------------------------------------


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def ratio_table(results):
    """Markdown: one row per configuration, one column per peer, cells 'geomean× (min ×)'."""
    if not results["peers"]["flashdoc"]["available"]:
        return f"flashdoc was not measured: {results['peers']['flashdoc']['reason']}"
    rows, peers, use = ratio_rows(results)
    body = []
    for row in rows:
        cells = []
        for peer in peers:
            c = row["ratios"][peer]
            cells.append("—" if c is None else f"{c['geomean']:.2f}× (min {c['min']:.2f}×)")
        body.append([config_label(row["mode"], row["dtype"], row["head_dim"], row["causal"])] + cells)
    header = ["configuration"] + [f"vs {p}" for p in peers]
    ns = ", ".join(fmt_n(n) for n in use)
    # a peer timed at fewer lengths (naive attention stops where its N x N matrix would not fit) averages fewer
    fewer = []
    for peer in peers:
        timed = sorted({n for row in rows if row["ratios"][peer] for n in row["ratios"][peer]["seqlens"]})
        if timed and timed != use:
            fewer.append(f"{peer} at N = {', '.join(fmt_n(n) for n in timed)} only")
    only = f" ({'; '.join(fewer)})" if fewer else ""
    return (
        f"flashdoc's speed (TFLOP/s) divided by each peer's: geometric mean over N = {ns}{only}, and the "
        f"minimum; above 1× flashdoc is faster. — = not measured (see results.json for why).\n\n"
        + md_table(header, body)
    )


def tflops_table(results):
    """Markdown: every TFLOP/s number, one row per (configuration, N)."""
    speed = speed_table(results)
    peers = peer_names(results)
    body = []
    for mode, dtype, d, causal, n in sweep_configs(results["sweep"]):
        row = speed.get((mode, dtype, d, causal, n), {})
        cells = []
        for p in peers:
            if p not in row:
                cells.append("—")
            elif p != "flashdoc" and "flashdoc" in row:
                cells.append(f"{row[p]:.0f} ({row['flashdoc'] / row[p]:.2f}×)")
            else:
                cells.append(f"{row[p]:.0f}")
        body.append([config_label(mode, dtype, d, causal), fmt_n(n)] + cells)
    return "TFLOP/s per peer; in brackets flashdoc's ratio to that peer.\n\n" + md_table(
        ["configuration", "N"] + peers, body
    )


def memory_table(results):
    mem = {}
    for r in results["records"]:
        if r["kind"] == "memory" and "peer" in r:
            mem.setdefault(r["seqlen"], {})[r["peer"]] = (
                f"{r['peak_extra_bytes'] / 2**20:,.0f} MiB"
                if r["status"] == "ok"
                else "OOM"
                if "out of memory" in r["reason"]
                else "—"
            )
    if not mem:
        return None
    peers = [p for p in MEMORY_PEERS if any(p in row for row in mem.values())]
    body = [[fmt_n(n)] + [mem[n].get(p, "—") for p in peers] for n in sorted(mem)]
    return md_table(["N"] + peers, body)


def targets_table(results):
    rows = [
        [label, {True: "met", False: "NOT met", None: "not measured"}[ok], detail]
        for label, ok, detail in target_rows(results)
    ]
    return md_table(["target", "status", "measured"], rows)


def twins_table(results, threshold):
    """Markdown: the rows of ``dtype_twins``, with each dtype's TFLOP/s and its calls' 20th-80th percentile."""
    rows = dtype_twins(results, threshold)
    if not rows:
        return f"No row's bfloat16 and float16 speeds differ by more than {threshold:.0%} in this run."
    body = [
        [f"{'fwd+bwd' if mode == 'fwd_bwd' else 'fwd'} d={d} {'causal' if causal else 'full'}", fmt_n(n)]
        + [
            f"{pair[dt]['tflops']:.0f} ({pair[dt]['ms_p20']:.2f}–{pair[dt]['ms_p80']:.2f} ms)"
            for dt in ("bf16", "fp16")
        ]
        for (mode, d, causal, n), pair in rows
    ]
    return md_table(
        ["configuration", "N", "bfloat16 TFLOP/s (calls' p20–p80)", "float16 TFLOP/s (calls' p20–p80)"], body
    )


def autotuned_table(results):
    """The autotuner's pick per kernel, one row per (dtype, head dim, masking, length bucket), and the fixed
    config of each Hopper kernel where one ran."""
    picks = results.get("flashdoc_autotuned") or []
    if not picks:
        return "No autotuning in this run (Triton's interpreter runs each kernel's first config)."
    cells = {}
    for p in picks:
        row = (p["dtype"], p["head_dim"], p["causal"], p["seq_bucket"])
        if p.get("gluon"):
            variants = [
                name for field, name in (("o_in_q", "O in Q"), ("wide", "wide"), ("fused_dq", "+ dQ")) if p.get(field)
            ]
            cell = f"{p['block_m']}×{p['block_n']} s{p['num_stages']} c{p['consumers']}"
            cell += f" {', '.join(variants)}" if variants else ""
            cell += " (Gluon)"
        else:
            cell = f"{p['block_m']}×{p['block_n']} s{p['num_stages']} w{p['num_warps']}"
        cells.setdefault(row, {})[p["kernel"]] = cell
        if p.get("fused_dq"):
            cells[row]["dq"] = "in dK/dV"
    nbsp = "\u00a0"  # keeps each cell on one line in the page's narrow column
    rows = [
        [f"{dtype} d={d} {'causal' if causal else 'full'} N={fmt_n(n)}".replace(" ", nbsp)]
        + [cells[dtype, d, causal, n].get(k, "—").replace(" ", nbsp) for k in ("fwd", "dkdv", "dq")]
        for (dtype, d, causal, n) in sorted(cells)
    ]
    header = ["configuration (N: its length bucket)", "forward", "dK/dV", "dQ"]
    return md_table(header, rows) + (
        "\n\nEach cell: BLOCK_M query rows × BLOCK_N keys, s pipeline stages, w warps. The forward and dQ kernels "
        "keep their query rows and stream the keys, BLOCK_N per step; the dK/dV kernel keeps its keys and streams "
        "the query rows. (Gluon): the Hopper kernel, whose config is fixed (no autotuning); c consumer warpgroups "
        "of 4 warps, each with its own BLOCK_M query rows (forward, dQ) or BLOCK_N keys (dK/dV); O in Q: the "
        "forward stages its output in the query tiles; wide: the two dK/dV consumers share BLOCK_N keys and split "
        "the head dim; + dQ: the fused backward, whose dK/dV kernel also computes dQ (no dQ kernel runs). — : the "
        "kernel did not run in that row."
    )


def summary_text(results):
    """What the run prints at the end: the ratio table, the memory table and the targets."""
    parts = [f"## flashdoc vs peers on {results['gpu']} ({results['date']})"]
    for note in (results.get("note"), results.get("interrupted")):
        if note:
            parts.append(f"NOTE: {note}")
    skipped = {p: v["reason"] for p, v in results["peers"].items() if not v["available"]}
    if skipped:
        parts.append("Skipped peers: " + "; ".join(f"{p} ({r})" for p, r in skipped.items()))
    parts.append(ratio_table(results))
    mem = memory_table(results)
    if mem:
        parts.append(
            "Peak extra GPU memory, causal forward, batch 1, "
            f"{results['sweep']['memory_heads']} heads, d={results['sweep']['memory_head_dim']}:\n\n" + mem
        )
    parts.append(targets_table(results))
    return "\n\n".join(parts) + "\n"


def write_tables(results, out_dir):
    out_dir = Path(out_dir)
    header = f"<!-- {results['gpu']}, torch {results['torch']}, triton {results['triton']}, {results['date']} -->\n"
    if results.get("note"):
        header += f"\n**{results['note']}**\n"
    (out_dir / "ratios.md").write_text(header + "\n" + ratio_table(results) + "\n")
    (out_dir / "tflops.md").write_text(header + "\n" + tflops_table(results) + "\n")
    mem = memory_table(results)
    targets = targets_table(results) + ("\n\nPeak extra GPU memory (causal forward):\n\n" + mem if mem else "")
    (out_dir / "targets.md").write_text(header + "\n" + targets + "\n")
    (out_dir / "autotuned.md").write_text(header + "\n" + autotuned_table(results) + "\n")
    return ["ratios.md", "tflops.md", "targets.md", "autotuned.md"]


# ---------------------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------------------


def write_plots(results, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    speed = speed_table(results)
    s = results["sweep"]
    peers = peer_names(results)
    cpu = results["device"] == "cpu"
    written = []
    columns = [(m, c) for m in s["modes"] for c in s["causals"]]
    for dtype in s["dtypes"]:
        fig, axes = plt.subplots(
            len(s["head_dims"]),
            len(columns),
            squeeze=False,
            sharex=True,
            figsize=(3.6 * len(columns), 2.8 * len(s["head_dims"]) + 0.8),
        )
        for i, d in enumerate(s["head_dims"]):
            for j, (mode, causal) in enumerate(columns):
                ax = axes[i][j]
                for p in peers:
                    pts = [
                        (n, speed[k][p]) for n in s["seqlens"] if p in speed.get(k := (mode, dtype, d, causal, n), {})
                    ]
                    if pts:
                        ax.plot(*zip(*pts), label=p, markersize=4, **STYLES.get(p, {}))
                ax.set_xscale("log", base=2)
                ax.set_xticks(s["seqlens"], [fmt_n(n) for n in s["seqlens"]])
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.set_title(config_label(mode, dtype, d, causal), fontsize=9)
                if j == 0:
                    ax.set_ylabel("TFLOP/s")
                if i == len(s["head_dims"]) - 1:
                    ax.set_xlabel("sequence length N")
        handles = {}  # label -> the first line drawn with it
        for ax in axes.flat:
            for h, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, h)
        if handles:  # (a run stopped before its first timing has none)
            fig.legend(
                handles.values(),
                handles.keys(),
                loc="lower center",
                ncol=len(handles),
                fontsize=8,
                bbox_to_anchor=(0.5, 0),
            )
        title = f"Attention throughput, {dtype}, {results['gpu']} — {s['total_tokens']} tokens per batch"
        fig.suptitle(("CPU SMOKE RUN, NUMBERS NOT MEANINGFUL\n" if cpu else "") + title, fontsize=10)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        name = f"tflops_{dtype}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    fig, ax = plt.subplots(figsize=(6, 4))
    mem = [r for r in results["records"] if r["kind"] == "memory" and "peer" in r]
    for p in MEMORY_PEERS:
        pts = [(r["seqlen"], r["peak_extra_bytes"] / 2**20) for r in mem if r["peer"] == p and r["status"] == "ok"]
        if pts:  # sdpa-flash drawn larger: flashdoc's line often lies right on top of it
            ax.plot(*zip(*pts), label=p, **dict(STYLES.get(p, {}), markersize=9 if p == "sdpa-flash" else 5))
        oom = [r["seqlen"] for r in mem if r["peer"] == p and "out of memory" in r.get("reason", "")]
        if oom and pts:
            ax.annotate(
                f"{p}: out of memory at N={fmt_n(oom[0])}",
                xy=pts[-1],
                xytext=(5, -12),
                textcoords="offset points",
                fontsize=8,
            )
    if mem:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ns = sorted({r["seqlen"] for r in mem})
        ax.set_xticks(ns, [fmt_n(n) for n in ns])
        ax.legend()
        ax.grid(alpha=0.3, which="both")
    else:
        ax.text(
            0.5,
            0.5,
            "no memory measurements:\nthey need a CUDA device",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("peak extra memory (MiB)")
    ax.set_title(
        f"Causal forward, batch 1, {s['memory_heads']} heads, d={s['memory_head_dim']}, {s['memory_dtype']}"
        f"\n{results['gpu']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out_dir / "memory.png", dpi=110)
    plt.close(fig)
    written.append("memory.png")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
        description="Redraw a benchmark run's tables and plots from its results.json.",
    )
    parser.add_argument("results", help="a results.json written by benchmarks.run")
    parser.add_argument("--out", default=None, help="output folder (default: the results.json's folder)")
    args = parser.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    out_dir = Path(args.out) if args.out else Path(args.results).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    written = write_plots(results, out_dir) + write_tables(results, out_dir)
    print(summary_text(results))
    print(f"Wrote {', '.join(written)} to {out_dir}.")


if __name__ == "__main__":
    main()
