"""The forward's timeline (benchmarks/kernels/fwd_timeline.py) off the GPU: its edits still find their places in the
kernel, the instrumented copy imports with its clocks off, and the analysis reads a synthetic trace right."""

import subprocess
import sys

import numpy as np
import pytest

from benchmarks.kernels import fwd_timeline as tl


def test_every_anchor_occurs_once_in_the_package_s_forward():
    source = (tl.ROOT / tl.KERNEL).read_text()
    instrumented = tl.instrument(source)
    assert instrumented.count("_trace(TRACE, TRACE_ITEMS, 1 + SUB, r,") == 8  # five clocks, three tile counts
    assert instrumented.count("_trace(TRACE, TRACE_ITEMS, 0, r,") == 5
    # every partition of both consumer counts gets the buffer
    assert instrumented.count("TRACE, TRACE_ITEMS))") == 7


def test_a_moved_anchor_is_named():
    with pytest.raises(ValueError, match="occurs 0 times"):
        tl.instrument("def nothing(): pass\n")


def test_the_copy_imports_with_its_clocks_off(tmp_path):
    tl.build(tmp_path)
    code = "from flashdoc.kernels import forward_hopper as f; print(f.__file__, f.TRACE_BUFFER)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert done == [str(tmp_path / tl.KERNEL), "None"]


def _synthetic(programs=2, items=3):
    """A trace where each consumer item runs 2 left-edge tiles of 150 cycles, 10 middle tiles of 100 and 1 right
    tile of 200, then a 300-cycle epilogue and a 50-cycle wait; the producer waits 400 cycles of each 2,000-cycle
    item for the ring."""
    trace = np.zeros((programs, tl.PARTITIONS, 8, tl.FIELDS), dtype=np.int64)
    item = 2 * 150 + 10 * 100 + 200 + 300 + 50
    for p in range(programs):
        for c in range(1, 4):
            for r in range(items):
                t = 10_000 + r * item
                trace[p, c, r, :5] = [t, t + 300, t + 1300, t + 1500, t + 1800]
                trace[p, c, r, 5:] = [2, 10, 1]
        for r in range(items):
            trace[p, 0, r, :5] = [10_000 + 2000 * r, 10_000 + 2000 * r + 1500, 400, 13, r]
    return trace, item


def test_the_analysis_reads_each_stretch():
    trace, item = _synthetic()
    span = 2 * item + 1800  # first start to last epilogue's end
    s = tl.summarise(trace, ms=span / 1.5e6)  # a 1.5 GHz clock: 1,500 cycles a microsecond
    assert s["cycles_per_us"] == pytest.approx(1500)
    assert len(s["consumers"]) == 3
    row = s["consumers"][0]
    assert row["items"] == 6
    assert row["tiles"] == [2, 10, 1]
    assert row["cycles_a_tile"] == pytest.approx([150, 100, 200])
    assert row["epilogue"] == pytest.approx(300)
    assert row["wait_next"] == pytest.approx(50)
    assert row["item"] == pytest.approx(1800)
    # 2 programs x 3 items of 1,800 cycles, and 2 x 2 waits of 50 between them
    total = 6 * 1800 + 4 * 50
    assert row["shares"]["middle"] == pytest.approx(6 * 1000 / total)
    assert row["shares"]["wait_next"] == pytest.approx(4 * 50 / total)
    assert sum(row["shares"].values()) == pytest.approx(1.0)
    producer = s["producer"]
    assert producer["items"] == 6 and producer["tiles"] == 13
    assert producer["item"] == pytest.approx(2000)
    assert producer["ring_wait_share"] == pytest.approx(0.2)


def test_the_report_names_every_partition():
    trace, item = _synthetic()
    lines = tl.report("case", {"trace": trace.tolist(), "ms": (2 * item + 1800) / 1.5e6, "ms_plain": 0.002})
    assert lines[0] == "### case"
    assert sum(line.startswith("| consumer ") for line in lines) == 3
    assert any(line.startswith("| producer | 6 | 13.0 loaded") for line in lines)
    assert "| 2.0 / 10.0 / 1.0 | 150 / 100 / 200 | 300 | 50 | 1.20 |" in lines[6]


def test_the_command_line_runs_children_and_reports(tmp_path, monkeypatch, capsys):
    """timeline_main (both timelines' command line): the child modes print the cases' readings as JSON, and the parent
    runs a traced child on the copy and a plain one on the package, then reports each case with both times."""
    from benchmarks.kernels import kernel_trace

    def time_cases(traced):
        return {"case": {"ms": 2.0 if traced else 1.0, **({"trace": [[1]]} if traced else {})}}

    def report(label, run):
        return [f"{label}: {run['ms_plain']} / {run['ms']} {run['trace']}"]

    calls = []

    def run_child(script, args, first):
        calls.append((args[1], first))
        kernel_trace.timeline_main(args, script, "", tmp_path, None, None, time_cases, report)
        return capsys.readouterr().out

    monkeypatch.setattr(kernel_trace, "run_child", run_child)
    build = lambda dest, source: dest  # noqa: E731 (a stand-in for the copy)
    kernel_trace.timeline_main(["--tree", str(tmp_path)], "x.py", "", tmp_path, build, None, time_cases, report)
    assert capsys.readouterr().out == "case: 1.0 / 2.0 [[1]]\n"
    assert calls == [("traced", [tmp_path]), ("plain", [kernel_trace.ROOT])]
