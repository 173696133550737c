"""Where the Hopper backward's time goes: a timeline of every dK/dV and dQ program, read from clocks that an
instrumented copy of the kernels writes as they run.

    PYTHONPATH=. python3 benchmarks/kernels/bwd_timeline.py                 # a GPU: window (1024, 0) and causal
    PYTHONPATH=. python3 benchmarks/kernels/bwd_timeline.py --json bench-out/bwd-timeline.json
    PYTHONPATH=/tmp/t36:. python3 benchmarks/kernels/bwd_timeline.py --aot   # sm_90 registers and spills, no GPU

The backward's kernels give each program one block (dK/dV: a block of keys against every query tile that sees
them; dQ: a block of queries against its keys) and end it, so what a program costs besides its tiles (loading its
resident tiles, its stores, the launch of the next program on the SM) is paid once a block. Under a 1,024-key window
a dK/dV program streams about 17 tiles where dense causal's average 129, so that cost weighs seven times as much.
Whether a persistent grid (one program an SM, the next block's resident tiles loaded while the last block's stream)
would take it back depends on where it is, which this measures. Each consumer warpgroup of each program stores:

- the SM it ran on and the cycle counter (``%clock64``, one per SM, so programs on one SM share a clock) at its entry,
- when its resident tiles had landed (dK/dV: its keys and values; dQ: its queries and output gradients),
- when its last tile's products had completed, and when its results had been stored,
- how many tiles it streamed.

Both runs put dQ on the main stream after dK/dV (``backward.OVERLAP_MIN_FLOPS``), so that each kernel's programs
have the GPU to themselves. Printed per kernel and case: cycles per tile, the cycles before the first tile (entry to
resident tiles landed), after
the last (the stores), and between one program's last store and the next program's entry on the same SM (the launch
gap, which only a persistent grid removes), each as a share of the SMs' busy time.

The copy is the package with ``kernels/backward_hopper.py`` edited (``EDITS``; ``kernel_trace.apply_edits`` checks
every anchor). The trace needs the launch cache off (``kernel_trace.run_child``), so a case whose time is set by its
launches is timed wrong; the cycles stand.
"""

from pathlib import Path

import numpy as np

from benchmarks.kernels.kernel_trace import CLOCK_HELPERS, ROOT, apply_edits, copy_package, timeline_main

KERNEL = Path("flashdoc/kernels/backward_hopper.py")
KERNELS = ("dK/dV", "dQ")
# the trace: int64 (programs, 4 consumer slots, FIELDS) per kernel
SLOTS, FIELDS = 4, 8
ENTRY, RESIDENT, TILES_DONE, STORED, TILES, SM = range(6)

_HELPERS = (
    CLOCK_HELPERS
    + f'''
    @gluon.jit
    def _trace(TRACE, TRACE_PROGRAMS: gl.constexpr, sub: gl.constexpr, field: gl.constexpr, value):
        """Field ``field`` of consumer ``sub`` of this program (bwd_timeline.py's layout: programs in launch order)."""
        pid = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
        if pid < TRACE_PROGRAMS:
            _store_trace(TRACE, (pid * {SLOTS} + sub) * {FIELDS} + field, value)

    @gluon.jit
    def _load_resident('''
)

_DKDV_TILES = "gl.cdiv(my_hi - my_lo, BLOCK_M)" + " if IS_LOCAL else " + "gl.cdiv(hi - my_lo, BLOCK_M)"

# the dQ consumer's unmasked tiles (its key range final by then, a window's inside the ring)
_DQ_UNMASKED = (
    "        dq = _dq_tiles(\n            dq, q, do, lse2, delta, ring, offs_m, seqlen_k, scores, full_lo, full_hi,"
)

# (anchor, replacement, count): ``kernel_trace.apply_edits``
EDITS = [
    ("\n    @gluon.jit\n    def _load_resident(", _HELPERS, 1),
    # dK/dV: the consumer's arguments, its clocks, the partitions' lists, the kernel's arguments, the launch
    (
        "        FUSED_DQ: gl.constexpr,\n        RAGGED_KEYS: gl.constexpr,\n    ):\n"
        "        q_smem, do_smem, lse2_smem, delta_smem = ring.q, ring.do, ring.lse2, ring.delta\n",
        "        FUSED_DQ: gl.constexpr,\n        RAGGED_KEYS: gl.constexpr,\n        TRACE,\n"
        "        TRACE_PROGRAMS: gl.constexpr,\n    ):\n"
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {ENTRY}, _clock())\n"
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {SM}, _smid())\n"
        "        q_smem, do_smem, lse2_smem, delta_smem = ring.q, ring.do, ring.lse2, ring.delta\n",
        1,
    ),
    (
        "        mbarrier.wait(kv_ready, 0)\n        if FUSED_DQ:\n",
        f"        mbarrier.wait(kv_ready, 0)\n        _trace(TRACE, TRACE_PROGRAMS, SUB, {RESIDENT}, _clock())\n"
        "        if IS_LOCAL:\n"
        "            streamed_hi = my_hi\n"
        "        else:\n"
        "            streamed_hi = hi\n"
        "        streamed = group_size * gl.cdiv(gl.maximum(streamed_hi - my_lo, 0), BLOCK_M)\n"
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {TILES}, streamed)\n"
        "        if FUSED_DQ:\n",
        1,
    ),
    (
        "        if FUSED_DQ:  # another consumer's last dQ product may still read this K tile\n",
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {TILES_DONE}, _clock())\n"
        "        if FUSED_DQ:  # another consumer's last dQ product may still read this K tile\n",
        1,
    ),
    (
        "            tma_store(dv_desc, [off_b, first, off_hk, 0], v_tile)\n            tma.store_wait(0)\n",
        "            tma_store(dv_desc, [off_b, first, off_hk, 0], v_tile)\n            tma.store_wait(0)\n"
        f"            _trace(TRACE, TRACE_PROGRAMS, SUB, {STORED}, _clock())\n",
        1,
    ),
    (
        "                            RAGGED_KEYS,\n                        ),\n                    ),\n",
        "                            RAGGED_KEYS,\n"
        "                            TRACE,\n"
        "                            TRACE_PROGRAMS,\n"
        "                        ),\n                    ),\n",
        5,
    ),
    (
        '        VARLEN: gl.constexpr = False,\n    ):\n        """Grid: (key tiles of N_CONSUMERS * BLOCK_N',
        "        VARLEN: gl.constexpr = False,\n        TRACE=None,\n        TRACE_PROGRAMS: gl.constexpr = 0,\n"
        '    ):\n        """Grid: (key tiles of N_CONSUMERS * BLOCK_N',
        1,
    ),
    (
        "            RAGGED_KEYS=fused and seqlen_k % (consumers * block_n) != 0,\n        ),\n",
        "            RAGGED_KEYS=fused and seqlen_k % (consumers * block_n) != 0,\n"
        '            TRACE=TRACE_BUFFERS.get("dK/dV"),\n'
        '            TRACE_PROGRAMS=_trace_programs("dK/dV"),\n        ),\n',
        1,
    ),
    # dQ: the same
    (
        "ring, block, scores, softmax_scale, SUB: gl.constexpr\n    ):\n",
        "ring, block, scores, softmax_scale, SUB: gl.constexpr,\n"
        "        TRACE,\n        TRACE_PROGRAMS: gl.constexpr,\n    ):\n"
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {ENTRY}, _clock())\n"
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {SM}, _smid())\n",
        1,
    ),
    (
        "        dq = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)\n        mbarrier.wait(qdo_ready, 0)\n",
        "        dq = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, layout=o_layout)\n        mbarrier.wait(qdo_ready, 0)\n"
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {RESIDENT}, _clock())\n",
        1,
    ),
    (
        _DQ_UNMASKED,
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {TILES}, gl.cdiv(gl.maximum(my_hi - my_lo, 0), BLOCK_N))\n"
        + _DQ_UNMASKED,
        1,
    ),
    (
        "        # every product of this warpgroup has completed: its query tile's shared memory takes dQ\n",
        f"        _trace(TRACE, TRACE_PROGRAMS, SUB, {TILES_DONE}, _clock())\n"
        "        # every product of this warpgroup has completed: its query tile's shared memory takes dQ\n",
        1,
    ),
    (
        "        if not block.VARLEN:\n            tma.store_wait(0)\n\n",
        "        if not block.VARLEN:\n            tma.store_wait(0)\n"
        f"            _trace(TRACE, TRACE_PROGRAMS, SUB, {STORED}, _clock())\n\n",
        1,
    ),
    (
        "        SECTION: gl.constexpr = 0,\n        IS_LOCAL: gl.constexpr = False,\n"
        "        SOFTCAP: gl.constexpr = False,\n        VARLEN: gl.constexpr = False,\n    ):\n"
        '        """Grid: (query tiles',
        "        SECTION: gl.constexpr = 0,\n        IS_LOCAL: gl.constexpr = False,\n"
        "        SOFTCAP: gl.constexpr = False,\n        VARLEN: gl.constexpr = False,\n"
        "        TRACE=None,\n        TRACE_PROGRAMS: gl.constexpr = 0,\n    ):\n"
        '        """Grid: (query tiles',
        1,
    ),
    (
        "        dict(**m.constexprs, STAGES=stages, N_CONSUMERS=consumers, **order),\n",
        "        dict(\n            **m.constexprs,\n            STAGES=stages,\n            N_CONSUMERS=consumers,\n"
        '            **order,\n            TRACE=TRACE_BUFFERS.get("dQ"),\n'
        '            TRACE_PROGRAMS=_trace_programs("dQ"),\n        ),\n',
        1,
    ),
    # the module's buffers, set by this script's child
    (
        "\nHOPPER_DKDV_CONFIGS = {",
        "\n# bwd_timeline.py's traces: {kernel: int64 (programs, 4, 8)}; none set, no clocks stored\n"
        "TRACE_BUFFERS = {}\n\n\n"
        "def _trace_programs(kernel):\n"
        "    buffer = TRACE_BUFFERS.get(kernel)\n"
        "    return 0 if buffer is None else buffer.shape[0]\n\n\n"
        "HOPPER_DKDV_CONFIGS = {",
        1,
    ),
]
for _sub, _count in ((0, 2), (1, 2), (2, 1)):
    _args = f"(dq_desc, LSE2, DELTA, q_smem, do_smem, qdo_ready, ring, block, scores, softmax_scale, {_sub})"
    EDITS.append((_args, _args[:-1] + ", TRACE, TRACE_PROGRAMS)", _count))


def instrument(source: str) -> str:
    """The backward's source with the clocks in; a ValueError naming the anchor if one no longer matches."""
    return apply_edits(source, EDITS, str(KERNEL))


def build(dest: Path, source: Path = ROOT) -> Path:
    """A copy of the package under source (a folder holding flashdoc/) under dest, with the instrumented backward."""
    return copy_package(dest, source, {KERNEL: instrument})


# (label, head dim, causal, window_size): 16k tokens, 2,048 hidden, bf16, as tree_ab.py's window cases
CASES = [
    ("d=128 window (1024, 0)", 128, True, (1024, 0)),
    ("d=128 causal", 128, True, (-1, -1)),
]
TOKENS, HIDDEN, MAX_PROGRAMS = 16384, 2048, 1 << 16


def time_cases(traced: bool, cases: list = CASES) -> dict:
    """{label: {"ms": a forward and backward step's time} and, if traced, {"trace": {kernel: the trace as nested
    lists}}} for this process's flashdoc (traced: the instrumented copy), on the GPU."""
    import torch
    import triton

    import flashdoc
    from flashdoc.kernels import backward, backward_hopper

    # dQ on the main stream, after dK/dV: the trace reads each kernel's programs with the GPU to itself (the
    # shipped backward overlaps the two for long sequences)
    backward.OVERLAP_MIN_FLOPS = float("inf")
    out = {}
    for label, d, causal, window in cases:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, dout = (
            torch.randn(1, TOKENS, HIDDEN // d, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)
        )
        for t in (q, k, v):
            t.requires_grad_(True)

        def step():
            o = flashdoc.flash_attn_func(q, k, v, causal=causal, window_size=window)
            return torch.autograd.grad(o, (q, k, v), dout)

        if not traced:
            out[label] = {"ms": triton.testing.do_bench(step, warmup=20, rep=200)}
            continue
        buffers = {
            kernel: torch.zeros(MAX_PROGRAMS, SLOTS, FIELDS, dtype=torch.int64, device="cuda") for kernel in KERNELS
        }
        backward_hopper.TRACE_BUFFERS.update(buffers)
        ms = triton.testing.do_bench(step, warmup=20, rep=200)
        for buffer in buffers.values():
            buffer.zero_()
        step()
        torch.cuda.synchronize()
        backward_hopper.TRACE_BUFFERS.clear()
        out[label] = {"ms": ms, "trace": {kernel: _used(buffer).cpu().tolist() for kernel, buffer in buffers.items()}}
    return out


def _used(buffer):
    """The programs of a trace buffer that ran (their first consumer stored an entry)."""
    ran = (buffer[:, 0, ENTRY] != 0).nonzero()
    return buffer[: int(ran.max()) + 1] if len(ran) else buffer[:0]


def summarise(trace) -> dict:
    """One kernel's trace (programs, 4, 8), over its programs: mean tiles a consumer and cycles a tile (a consumer's
    span from its resident tiles' landing to its products' end, over its tiles); cycles before the first tile (the
    first consumer's entry to the resident tiles' landing), after the last (the last consumer's products to the last
    store) and between programs on one SM (a store to the next program's first entry); and those as shares of the
    SMs' time, each SM's from its first program's entry to its last one's store."""
    trace = np.asarray(trace, dtype=np.int64)
    ran = trace[:, :, ENTRY] != 0  # (programs, slots): the consumers that stored anything
    trace = trace[ran.any(axis=1)]
    ran = ran[ran.any(axis=1)]
    big = np.iinfo(np.int64).max
    entry = np.where(ran, trace[:, :, ENTRY], big).min(axis=1)
    resident = np.where(ran, trace[:, :, RESIDENT], 0).max(axis=1)
    last_tile = np.where(ran, trace[:, :, TILES_DONE], 0).max(axis=1)
    stored = np.where(ran, trace[:, :, STORED], 0).max(axis=1)
    sm = trace[:, 0, SM]
    # a consumer's tiles: from its own resident tiles' landing to its own products' end
    per_consumer = (trace[:, :, TILES_DONE] - trace[:, :, RESIDENT])[ran]
    tiles = trace[:, :, TILES][ran]
    gaps, busy = [], 0
    for s in np.unique(sm):
        on = np.flatnonzero(sm == s)
        order = on[np.argsort(entry[on])]
        busy += int(stored[order].max() - entry[order].min())
        gaps.extend((entry[order[1:]] - stored[order[:-1]]).tolist())
    gaps = np.array(gaps, dtype=float)
    before = (resident - entry).astype(float)
    after = (stored - last_tile).astype(float)
    programs = len(trace)
    return {
        "programs": programs,
        "sms": int(len(np.unique(sm))),
        "tiles": float(tiles.mean()) if len(tiles) else 0.0,
        "cycles_a_tile": float(per_consumer.sum() / tiles.sum()) if tiles.sum() else 0.0,
        "before": float(before.mean()),
        "after": float(after.mean()),
        "program": float((stored - entry).mean()),
        "gap": float(gaps.mean()) if len(gaps) else 0.0,
        "overlapping": int((gaps < 0).sum()),
        "shares": {
            "before": float(before.sum() / busy),
            "after": float(after.sum() / busy),
            "gaps": float(gaps[gaps > 0].sum() / busy),
        },
    }


def report(label: str, run: dict) -> list:
    """Markdown lines for one case."""
    lines = [
        f"### {label}",
        "",
        f"forward and backward step: the package's {run['ms_plain']:.3f} ms, "
        f"the instrumented copy's {run['ms']:.3f} ms",
        "",
        "| kernel | programs on SMs | tiles a consumer | cycles a tile | before the first tile | after the last "
        "| a program | between programs | shares of the SMs' time: before, after, between |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kernel in KERNELS:
        s = summarise(run["trace"][kernel])
        sh = s["shares"]
        lines.append(
            f"| {kernel} | {s['programs']} on {s['sms']} | {s['tiles']:.1f} | {s['cycles_a_tile']:.0f} "
            f"| {s['before']:.0f} | {s['after']:.0f} | {s['program']:.0f} | {s['gap']:.0f} "
            f"| {sh['before']:.1%}, {sh['after']:.1%}, {sh['gaps']:.1%} |"
        )
    return lines + [""]


def aot(tree: Path) -> list:
    """The instrumented backward kernels compiled for sm_90 (no GPU) at d = 128 under the window and the causal mask,
    with trace buffers: (label, ``code_hash.ptxas_info``). Run in a process whose flashdoc is the copy under tree."""
    from benchmarks.kernels import code_hash
    from flashdoc.kernels import backward_hopper as bh

    if not hasattr(bh, "TRACE_BUFFERS"):
        raise SystemExit(f"this process's flashdoc ({bh.__file__}) is not the instrumented copy under {tree}")
    code_hash.POINTERS["TRACE"] = "*i64"
    rows = []
    for label, d, causal, window in CASES:
        extra = dict(TRACE_PROGRAMS=MAX_PROGRAMS) | ({"IS_LOCAL": True} if window != (-1, -1) else {})
        bm, bn, stages, consumers = bh.HOPPER_DKDV_CONFIGS[d, causal]
        constants = dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, **extra)
        dkdv = code_hash.compile_config(bh._attn_bwd_dkdv_hopper, d, bm, bn, constants, rows=code_hash.ROWS)
        rows.append((f"dK/dV {label}", code_hash.ptxas_info(dkdv)))
        bm, bn, stages, consumers = bh.HOPPER_DQ_CONFIGS[d, causal]
        constants = dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers, **extra)
        dq = code_hash.compile_config(bh._attn_bwd_dq_hopper, d, bm, bn, constants)
        rows.append((f"dQ {label}", code_hash.ptxas_info(dq)))
    return rows


def main(argv=None):
    tree = ROOT / "bench-out" / "bwd-timeline"
    timeline_main(argv, __file__, __doc__, tree, build, aot, time_cases, report)


if __name__ == "__main__":
    main()
