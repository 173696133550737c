"""Where the Hopper forward's time goes inside its programs: a timeline of every work item, read from clocks that an
instrumented copy of the kernel writes as it runs.

    PYTHONPATH=. python3 benchmarks/kernels/fwd_timeline.py                 # a GPU: window (1024, 0) and causal
    PYTHONPATH=. python3 benchmarks/kernels/fwd_timeline.py --json bench-out/timeline.json
    PYTHONPATH=. python3 benchmarks/kernels/fwd_timeline.py --build bench-out/timeline   # the instrumented copy only
    PYTHONPATH=. python3 benchmarks/kernels/fwd_timeline.py --package bench-out/cand --tree bench-out/cand-timeline

The profilers see a kernel from outside: Nsight Compute counts instructions and stall reasons over the whole launch,
and a fit over window sizes (``window_fixed_cost.py``) splits a program's time into a part per tile and a part per
program. Neither says where, inside one work item, the part besides the tiles is spent. This reads the SM's cycle
counter (``%clock64``) at the seams of every item, in every partition of every program:

- each consumer warpgroup: the item's start (its queries have landed), the end of its left-edge tiles (a window's
  masked left edge), of its unmasked tiles, of its right-edge tiles (the diagonal, the keys' end), and of its
  epilogue (the output and LSE written); with the number of tiles in each stretch;
- the producer warp: when it claimed the item, when it had issued the item's last key/value loads, and how long it
  waited in all for free ring stages.

The copy is the package with ``kernels/forward_hopper.py`` edited (``EDITS``, checked by
``kernel_trace.apply_edits``: a change to the kernel that moves an anchor fails loudly rather than timing the wrong
place); it stores nothing unless ``TRACE_BUFFER`` is set. The clock reads cost a few instructions an item in the
consumers and two a tile in the producer; the run times the instrumented call against the package's so that the
perturbation is on the page. The trace needs the launch cache off (``kernel_trace.run_child``), so a call whose time
is set by its launches reports a wrong clock rate; its cycles stand.

Printed per case and consumer: cycles per tile in each stretch, the epilogue's cycles, the wait between one item's
end and the next one's queries, and each stretch's share of the consumer's time; for the producer, the share of its
time spent waiting for the ring. Cycles become microseconds through the clock rate that the traced launch itself
implies (its programs' spans of cycles over its measured time).
"""

from pathlib import Path

import numpy as np

from benchmarks.kernels.kernel_trace import CLOCK_HELPERS, ROOT, apply_edits, copy_package, timeline_main

KERNEL = Path("flashdoc/kernels/forward_hopper.py")

# the trace: int64 (programs, PARTITIONS, items, FIELDS); partition 0 is the producer, 1 + c consumer c
PARTITIONS = 4
FIELDS = 8
# a consumer's fields: its item's start, the ends of its left-edge, unmasked and right-edge stretches and of its
# epilogue (clocks), then the tiles of the three stretches; the producer's: the claim's clock, the last load's, the
# cycles it waited for free stages, the tiles it loaded and the item's number

_HELPERS = (
    CLOCK_HELPERS
    + f'''
    @gluon.jit
    def _trace(TRACE, TRACE_ITEMS: gl.constexpr, part: gl.constexpr, r, field: gl.constexpr, value):
        """Field ``field`` of this program's r-th item in partition ``part`` (fwd_timeline.py's layout)."""
        if r < TRACE_ITEMS:
            _store_trace(TRACE, ((gl.program_id(0) * {PARTITIONS} + part) * TRACE_ITEMS + r) * {FIELDS} + field, value)

    @gluon.jit
    def _producer(
        q_desc, k_desc, v_desc, queries, ring, work, scores, COUNTER, section, TRACE, TRACE_ITEMS: gl.constexpr
    ):'''
)

# the right edge's call (the consumer's last): its first lines up to its range, whose start only it has
_MIDDLE = (
    "            acc, l_i, m_i = _consume(\n"
    "                acc,\n"
    "                l_i,\n"
    "                m_i,\n"
    "                q,\n"
    "                ring,\n"
    "                kv_base,\n"
    "                offs_m,\n"
    "                seqlen_k,\n"
    "                band,\n"
    "                full_hi,\n"
)

# (anchor, replacement, count): ``kernel_trace.apply_edits``
EDITS = [
    # the helpers, and the producer's trace arguments
    (
        "\n    @gluon.jit\n    def _producer(q_desc, k_desc, v_desc, queries, ring, work, scores, COUNTER, section):",
        _HELPERS,
        1,
    ),
    # the producer: the claim's time, its waits for free stages, the time its last load went out
    (
        "        while i < total:\n            if VARLEN:\n                q_start, seqlen_q, k_start, seqlen_k",
        "        while i < total:\n            _trace(TRACE, TRACE_ITEMS, 0, r, 0, _clock())\n"
        "            ring_wait = _clock() * 0\n"
        "            if VARLEN:\n                q_start, seqlen_q, k_start, seqlen_k",
        1,
    ),
    (
        "                mbarrier.wait(kv_empty.index(s), ((it // STAGES) & 1) ^ 1)\n",
        "                t_wait = _clock()\n"
        "                mbarrier.wait(kv_empty.index(s), ((it // STAGES) & 1) ^ 1)\n"
        "                ring_wait += _clock() - t_wait\n",
        1,
    ),
    (
        "            kv_it += n_kv - j0\n            r += 1\n",
        "            _trace(TRACE, TRACE_ITEMS, 0, r, 1, _clock())\n"
        "            _trace(TRACE, TRACE_ITEMS, 0, r, 2, ring_wait)\n"
        "            _trace(TRACE, TRACE_ITEMS, 0, r, 3, n_kv - j0)\n"
        "            _trace(TRACE, TRACE_ITEMS, 0, r, 4, i)\n"
        "            kv_it += n_kv - j0\n            r += 1\n",
        1,
    ),
    # the consumer
    (
        "O_IN_Q: gl.constexpr, BOUNDED: gl.constexpr\n    ):",
        "O_IN_Q: gl.constexpr, BOUNDED: gl.constexpr,\n        TRACE,\n        TRACE_ITEMS: gl.constexpr,\n    ):",
        1,
    ),
    (
        "        while i < total:\n            if VARLEN:\n"
        "                item, seqlen_q, seqlen_k = _read_packed(item_smem)",
        "        while i < total:\n            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 0, _clock())\n"
        "            if VARLEN:\n                item, seqlen_q, seqlen_k = _read_packed(item_smem)",
        1,
    ),
    (
        "            else:\n                kv_base = kv_it\n",
        "            else:\n                kv_base = kv_it\n"
        "            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 1, _clock())\n"
        "            if IS_LOCAL:\n"
        "                _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 5, gl.cdiv(gl.maximum(full_lo - my_lo, 0), BLOCK_N))\n"
        "            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 6, gl.cdiv(gl.maximum(full_hi - full_lo, 0), BLOCK_N))\n"
        "            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 7, gl.cdiv(gl.maximum(my_hi - full_hi, 0), BLOCK_N))\n",
        1,
    ),
    (_MIDDLE, "            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 2, _clock())\n" + _MIDDLE, 1),
    (
        "            if VARLEN:  # (before the producer may publish the next item)\n",
        "            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 3, _clock())\n"
        "            if VARLEN:  # (before the producer may publish the next item)\n",
        1,
    ),
    (
        "            kv_it = kv_base + gl.cdiv(hi, BLOCK_N)\n            r += 1\n",
        "            _trace(TRACE, TRACE_ITEMS, 1 + SUB, r, 4, _clock())\n"
        "            kv_it = kv_base + gl.cdiv(hi, BLOCK_N)\n            r += 1\n",
        1,
    ),
    # the kernel's arguments and the partitions' lists
    (
        "        BOUNDED_EXPONENT: gl.constexpr = False,\n    ):\n",
        "        BOUNDED_EXPONENT: gl.constexpr = False,\n"
        "        TRACE=None,\n        TRACE_ITEMS: gl.constexpr = 0,\n    ):\n",
        1,
    ),
    # the launch: the module's buffer, when one is set
    (
        "            BOUNDED_EXPONENT=bounded(head_dim, softcap, q.dtype),\n        ),\n",
        "            BOUNDED_EXPONENT=bounded(head_dim, softcap, q.dtype),\n"
        "            TRACE=TRACE_BUFFER,\n"
        "            TRACE_ITEMS=0 if TRACE_BUFFER is None else TRACE_BUFFER.shape[2],\n"
        "        ),\n",
        1,
    ),
    (
        "\nBOUNDED_MIN_HEAD_DIM = 128\n",
        "\nBOUNDED_MIN_HEAD_DIM = 128\n"
        "# fwd_timeline.py's trace: int64 (programs, partitions, items, fields), or None (nothing stored)\n"
        "TRACE_BUFFER = None\n",
        1,
    ),
]
_PRODUCER_ARGS = "_producer, (q_desc, k_desc, v_desc, queries, ring, work, scores, COUNTER, section"
EDITS.append((f"({_PRODUCER_ARGS}))", f"({_PRODUCER_ARGS}, TRACE, TRACE_ITEMS))", 2))
for _sub, _count in ((0, 2), (1, 2), (2, 1)):
    _args = f"_consumer, (o_desc, LSE, queries, ring, work, scores, {_sub}, O_IN_Q, BOUNDED_EXPONENT"
    EDITS.append((f"({_args}))", f"({_args}, TRACE, TRACE_ITEMS))", _count))


def instrument(source: str) -> str:
    """The forward's source with the clocks in; a ValueError naming the anchor if one no longer matches."""
    return apply_edits(source, EDITS, str(KERNEL))


def build(dest: Path, source: Path = ROOT) -> Path:
    """A copy of the package under source (a folder holding flashdoc/: this repository, or a candidate's tree) under
    dest, with the instrumented forward; returns dest."""
    return copy_package(dest, source, {KERNEL: instrument})


# (label, head dim, causal, window_size): 16k tokens, 2,048 hidden, bf16, as tree_ab.py's window cases
CASES = [
    ("d=128 window (1024, 0)", 128, True, (1024, 0)),
    ("d=128 window (256, 0)", 128, True, (256, 0)),
    ("d=128 causal", 128, True, (-1, -1)),
]
TOKENS, HIDDEN, MAX_ITEMS = 16384, 2048, 64


def time_cases(traced: bool, cases: list = CASES) -> dict:
    """{label: {"ms": the call's time} and, if traced, "trace": the int64 trace as nested lists} for this
    process's flashdoc (traced: the instrumented copy, its clocks on), on the GPU."""
    import torch
    import triton

    import flashdoc
    from flashdoc.kernels import forward_hopper

    out = {}
    for label, d, causal, window in cases:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (
            torch.randn(1, TOKENS, HIDDEN // d, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)
        )

        def call():
            return flashdoc.flash_attn_func(q, k, v, causal=causal, window_size=window)

        if not traced:
            out[label] = {"ms": triton.testing.do_bench(call, warmup=50, rep=300)}
            continue
        programs = torch.cuda.get_device_properties(0).multi_processor_count
        trace = torch.zeros(programs, PARTITIONS, MAX_ITEMS, FIELDS, dtype=torch.int64, device="cuda")
        forward_hopper.TRACE_BUFFER = trace
        ms = triton.testing.do_bench(call, warmup=50, rep=300)
        trace.zero_()
        call()
        torch.cuda.synchronize()
        forward_hopper.TRACE_BUFFER = None
        out[label] = {"ms": ms, "trace": trace.cpu().tolist()}
    return out


def aot(tree: Path) -> list:
    """Compile the instrumented forward for sm_90 (no GPU): the window and causal kernels at d = 128, with a trace
    buffer; returns (label, ``code_hash.ptxas_info``: the machine code's hash, registers, spill stores). Needs a
    Triton whose ptxas runs here; run in a process whose flashdoc is the copy under tree."""
    from benchmarks.kernels import code_hash
    from flashdoc.kernels import forward_hopper as fh

    if not hasattr(fh, "TRACE_BUFFER"):
        raise SystemExit(f"this process's flashdoc ({fh.__file__}) is not the instrumented copy under {tree}")
    code_hash.POINTERS["TRACE"] = "*i64"
    rows = []
    for label, d, causal, window in CASES:
        local = window != (-1, -1)
        config = fh.table_config((d, causal), local)
        constants = dict(TRACE_ITEMS=MAX_ITEMS)
        if local:
            constants["IS_LOCAL"] = True
        compiled = code_hash.compile_forward(d, causal, config, **constants)
        rows.append((label, code_hash.ptxas_info(compiled)))
    return rows


def _next_starts(starts: np.ndarray) -> np.ndarray:
    """For each program's items (programs, items) of start clocks: the start of the same program's next item, 0 for
    its last."""
    nxt = np.zeros_like(starts)
    nxt[:, :-1] = starts[:, 1:]
    return nxt


def summarise(trace: np.ndarray, ms: float) -> dict:
    """From one launch's trace (programs, 4, items, 8) and its time: the clock rate it implies and, per consumer and
    for the producer, mean cycles of each stretch of an item."""
    trace = np.asarray(trace, dtype=np.int64)
    consumers = trace[:, 1:]
    used = consumers[..., 0] != 0
    # a program's span: from its first item's start to its last epilogue's end, over every consumer
    starts = np.where(used, consumers[..., 0], np.iinfo(np.int64).max).min(axis=(1, 2))
    ends = np.where(used, consumers[..., 4], 0).max(axis=(1, 2))
    live = ends > 0
    cycles_per_us = float(np.median((ends - starts)[live])) / (ms * 1e3)
    result = {"cycles_per_us": cycles_per_us, "consumers": [], "producer": {}}
    for c in range(consumers.shape[1]):
        rows = consumers[:, c][used[:, c]]  # (items, 8)
        if not len(rows):
            continue
        left = rows[:, 1] - rows[:, 0]
        middle = rows[:, 2] - rows[:, 1]
        right = rows[:, 3] - rows[:, 2]
        epilogue = rows[:, 4] - rows[:, 3]
        # the wait for the next item: this program's next start after this item's end (last items have none)
        mine = consumers[:, c]
        nxt = _next_starts(mine[..., 0])
        gap = (nxt - mine[..., 4])[used[:, c] & (nxt != 0)]
        tiles = rows[:, 5:8].astype(float)
        total = (rows[:, 4] - rows[:, 0]).sum() + gap.sum()
        result["consumers"].append(
            {
                "items": int(len(rows)),
                "tiles": [float(t) for t in tiles.mean(axis=0)],
                "cycles_a_tile": [
                    float(x.sum() / n) if n else 0.0
                    for x, n in ((left, tiles[:, 0].sum()), (middle, tiles[:, 1].sum()), (right, tiles[:, 2].sum()))
                ],
                "epilogue": float(epilogue.mean()),
                "wait_next": float(gap.mean()) if len(gap) else 0.0,
                "item": float((rows[:, 4] - rows[:, 0]).mean()),
                "shares": {
                    name: float(x.sum() / total)
                    for name, x in (
                        ("left", left),
                        ("middle", middle),
                        ("right", right),
                        ("epilogue", epilogue),
                        ("wait_next", gap),
                    )
                },
            }
        )
    producer = trace[:, 0]
    p_used = producer[..., 0] != 0
    p_rows = producer[p_used]
    if len(p_rows):
        nxt = _next_starts(producer[..., 0])
        followed = p_used & (nxt != 0)  # items with a next one on the same program: their span is known
        span = (nxt - producer[..., 0])[followed]
        result["producer"] = {
            "items": int(len(p_rows)),
            "tiles": float(p_rows[:, 3].mean()),
            "ring_wait": float(p_rows[:, 2].mean()),
            "item": float(span.mean()) if len(span) else 0.0,
            "ring_wait_share": float(producer[..., 2][followed].sum() / span.sum()) if span.sum() else 0.0,
        }
    return result


def report(label: str, run: dict) -> list:
    """Markdown lines for one case."""
    s = summarise(np.array(run["trace"]), run["ms"])
    rate = s["cycles_per_us"]
    lines = [
        f"### {label}",
        "",
        f"the package's call {run['ms_plain'] * 1e3:.1f} us, the instrumented one's {run['ms'] * 1e3:.1f} us; "
        f"{rate:.0f} cycles a microsecond",
        "",
        "| partition | items | tiles left / middle / right | cycles a tile left / middle / right | epilogue "
        "| wait for the next | item, us | shares: edges, middle, epilogue, wait |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, row in enumerate(s["consumers"]):
        sh = row["shares"]
        lines.append(
            f"| consumer {c} | {row['items']} | {' / '.join(f'{t:.1f}' for t in row['tiles'])} "
            f"| {' / '.join(f'{x:.0f}' for x in row['cycles_a_tile'])} | {row['epilogue']:.0f} "
            f"| {row['wait_next']:.0f} | {row['item'] / rate:.2f} "
            f"| {sh['left'] + sh['right']:.1%}, {sh['middle']:.1%}, {sh['epilogue']:.1%}, {sh['wait_next']:.1%} |"
        )
    p = s["producer"]
    if p:
        lines.append(
            f"| producer | {p['items']} | {p['tiles']:.1f} loaded | | | | {p['item'] / rate:.2f} "
            f"| waiting for the ring {p['ring_wait_share']:.1%} |"
        )
    return lines + [""]


def main(argv=None):
    tree = ROOT / "bench-out" / "timeline"
    timeline_main(argv, __file__, __doc__, tree, build, aot, time_cases, report)


if __name__ == "__main__":
    main()
