"""The backward's timeline (benchmarks/kernels/bwd_timeline.py) off the GPU: its edits still find their places in the
kernels, the instrumented copy imports with no trace set, and the analysis reads a synthetic trace right."""

import subprocess
import sys

import numpy as np
import pytest

from benchmarks.kernels import bwd_timeline as tl


def test_every_anchor_matches_the_package_s_backward():
    instrumented = tl.instrument((tl.ROOT / tl.KERNEL).read_text())
    # four clocks, the SM and the tile count in each kernel's consumer
    assert instrumented.count("_trace(TRACE, TRACE_PROGRAMS, SUB,") == 2 * 6
    assert instrumented.count("TRACE_PROGRAMS=_trace_programs(") == 2


def test_the_copy_imports_with_no_trace(tmp_path):
    tl.build(tmp_path)
    code = (
        "from flashdoc.kernels import backward_hopper as b; print(b.__file__, b.TRACE_BUFFERS, b._trace_programs('dQ'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(tmp_path / tl.KERNEL), "{}", "0"]


def _synthetic():
    """Two SMs, each running two programs of two consumers one after the other: 100 cycles to the resident tiles,
    4 tiles of 250 cycles each, 150 cycles of stores, then 40 cycles before the next program enters."""
    trace = np.zeros((4, tl.SLOTS, tl.FIELDS), dtype=np.int64)
    for program in range(4):
        sm, turn = program % 2, program // 2
        t = 1_000 + turn * (100 + 1000 + 150 + 40)
        for sub in range(2):
            trace[program, sub, : tl.SM + 1] = [t, t + 100, t + 1100, t + 1250, 4, sm]
    return trace


def test_the_analysis_reads_each_stretch():
    s = tl.summarise(_synthetic())
    assert (s["programs"], s["sms"]) == (4, 2)
    assert s["tiles"] == 4 and s["cycles_a_tile"] == pytest.approx(250)
    assert (s["before"], s["after"], s["program"]) == (100, 150, 1250)
    assert s["gap"] == pytest.approx(40) and s["overlapping"] == 0
    busy = 2 * (2 * 1250 + 40)  # per SM: two programs and the gap between them
    assert s["shares"]["before"] == pytest.approx(4 * 100 / busy)
    assert s["shares"]["gaps"] == pytest.approx(2 * 40 / busy)


def test_programs_that_never_ran_are_left_out():
    trace = np.concatenate([_synthetic(), np.zeros((3, tl.SLOTS, tl.FIELDS), dtype=np.int64)])
    assert tl.summarise(trace)["programs"] == 4


def test_the_report_has_a_row_per_kernel():
    run = {"ms": 1.1, "ms_plain": 1.0, "trace": {kernel: _synthetic().tolist() for kernel in tl.KERNELS}}
    lines = tl.report("case", run)
    rows = [line for line in lines if line.startswith(("| dK/dV |", "| dQ |"))]
    assert len(rows) == 2
    assert rows[0].startswith("| dK/dV | 4 on 2 | 4.0 | 250 | 100 | 150 | 1250 | 40 |")
