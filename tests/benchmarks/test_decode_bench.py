"""benchmarks/decode.py's bookkeeping (the timings themselves need a GPU): target checks, tables and the
figure from synthetic rows, and its CPU smoke run end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import decode as bench

# loaded by path: a package named ``benchmarks`` elsewhere on sys.path (this test folder's) cannot shadow it
ROOT = Path(__file__).resolve().parents[2]

COPY = 4.0e12  # bytes/s


def rows(flashdoc=3.6, cudnn=3.0, flash=3.0, paged=3.5, slow_point=None):
    """One row per method and point; slow_point gets flashdoc at half its bandwidth."""
    out = []
    for b, c in bench.points(False):
        ours = flashdoc / 2 if (b, c) == slow_point else flashdoc
        values = {
            "flashdoc": ours,
            "sdpa-cudnn": cudnn,
            "sdpa-flash": flash,
            "flex": 2.0,
            **{f"flashdoc-paged{p}": paged for p in bench.PAGE_SIZES},
        }
        for method, tbps in values.items():
            out.append(dict(batch=b, cache=c, method=method, ms=1.0, graph_ms=1.0, tbps=tbps, graph_tbps=tbps))
    return out


def test_targets_met():
    checks = bench.target_checks(rows(), COPY)
    assert [c["met"] for c in checks] == [True, True, True, True]


def test_targets_name_the_worst_point():
    checks = {c["target"]: c for c in bench.target_checks(rows(slow_point=(8, 32768)), COPY)}
    cudnn = checks["flashdoc >= sdpa-cudnn at every point"]
    assert not cudnn["met"] and cudnn["worst"] == "0.60x at 8×32k"
    share = checks["flashdoc >= 85% of the copy where batch×cache >= 8×32k"]
    assert not share["met"] and share["worst"] == "45% at 8×32k"


def test_points_are_named_without_spaces_so_table_cells_do_not_break_them():
    labels = [line.split(" | ")[0].removeprefix("| ") for line in bench.bandwidth_table(rows(), COPY).splitlines()[2:]]
    assert labels == [f"{b}×{c // 1024}k" for b, c in bench.points(False)], labels
    checks = bench.target_checks(rows(paged=3.0), COPY)
    assert all(" x " not in c["target"] + c["worst"] for c in checks), checks


def test_paged_slack():
    checks = {c["target"]: c for c in bench.target_checks(rows(paged=3.2), COPY)}
    assert not checks["paged within 5% of contiguous at every point"]["met"]
    checks = {c["target"]: c for c in bench.target_checks(rows(paged=3.45), COPY)}
    assert checks["paged within 5% of contiguous at every point"]["met"]


def test_missing_method_is_a_dash_and_skipped_by_the_checks():
    data = [r for r in rows() if not (r["method"] == "sdpa-cudnn" and r["batch"] == 64)]
    data.append(dict(batch=64, cache=131072, method="sdpa-cudnn", error="No available kernel"))
    table = bench.bandwidth_table(data, COPY)
    assert "| 64×128k | 3.60 | — |" in table
    assert all(c["met"] for c in bench.target_checks(data, COPY))


def test_markdown_and_figure(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "flush_bytes", lambda: None)  # as without a GPU: no flush buffer to measure
    text = bench.markdown(rows(), COPY, dict(gpu="GPU", torch="t", triton="x"))
    for timer in bench.timers().values():
        assert f"**Timed with {timer}**" in text
    bench.roofline_figure(rows(), COPY, tmp_path / "roof.png")
    assert "(L2 flushed between calls)" in text
    assert (tmp_path / "roof.png").stat().st_size > 10_000


def test_each_page_size_has_its_own_shade_and_hatch():
    from matplotlib import colors

    methods = ["flashdoc", "flex"] + [f"flashdoc-paged{p}" for p in (256, 16, 64)]
    styles = bench.paged_styles(methods)
    assert list(styles) == ["flashdoc-paged16", "flashdoc-paged64", "flashdoc-paged256"]
    fills = [colors.to_hex(fill) for fill, _, _ in styles.values()]
    assert len(set(fills)) == 3 and colors.to_hex("C0") not in fills, fills
    lightness = [sum(colors.to_rgb(f)) for f in fills]
    assert lightness == sorted(lightness, reverse=True), fills  # the smallest page lightest
    assert len({hatch for _, hatch, _ in styles.values()}) == 3


def test_headings_say_how_each_timer_timed(monkeypatch):
    """On a GPU the headings give the size of the buffer do_bench writes and how the graph timing kept L2 out."""
    monkeypatch.setattr(bench, "flush_bytes", lambda: 256 * 2**20)
    text = bench.markdown(rows(), COPY, dict(gpu="GPU", torch="t", triton="x"))
    assert "**Timed with do_bench (256 MiB written between calls)**" in text
    assert "exceed 4 x L2 (60 MiB); each method's median of 3 rounds, in rotated order**" in text


@pytest.mark.parametrize("only,expected", [("1x4096,64x32768", [(1, 4096), (64, 32768)]), (None, None)])
def test_points(only, expected):
    got = bench.points(False, only)
    assert got == (expected or [(b, c) for b in bench.BATCHES for c in bench.CACHES])


def test_copies_cover_four_times_l2():
    assert bench.copies_for(1, 4096) * bench.kv_bytes(1, 4096) >= 4 * bench.L2_BYTES
    assert bench.copies_for(64, 131072) == 1


def test_smoke_run_writes_its_schema(tmp_path):
    """The CPU smoke run, as `nox -s bench -- --quick` runs it without a GPU: every file, and the JSON's layout."""
    if torch.cuda.is_available():
        pytest.skip("the GPU run is the benchmark itself")
    cmd = [sys.executable, "-m", "benchmarks.decode", "--out", str(tmp_path), "--quick"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.json", "decode.md", "decode_roofline.png"]
    result = json.loads((tmp_path / "decode.json").read_text())
    assert result["smoke"] is True and result["copy_tbps"] > 0
    assert result["shape"] == dict(heads=4, kv_heads=2, head_dim=32, seqlen_q=1, dtype="float32")
    assert set(result["targets"]) == set(bench.TIMERS)
    methods = [
        "flashdoc",
        "sdpa-cudnn",
        "sdpa-flash",
        "flex",
        "flashdoc-training",
        "flashdoc-paged16",
        "flashdoc-paged32",
    ]
    assert [(r["batch"], r["cache"], r["method"]) for r in result["rows"]] == [
        (b, c, m) for b, c in bench.SMOKE_POINTS for m in methods
    ]
    for row in result["rows"]:
        if row["method"] in bench.GPU_METHODS:
            assert row["error"] == "runs on a CUDA GPU only"
        elif row["method"].startswith("flashdoc"):  # flashdoc's own calls must run (SDPA's flash may not on a CPU)
            assert row["ms"] > 0 and row["tbps"] > 0 and row["graph_ms"] is None, row
    assert "flashdoc >= sdpa-flash at every point" in (tmp_path / "decode.md").read_text()


def test_smoke_shape_is_restored():
    with bench.smoke_shape():
        assert (bench.HEADS, bench.DEVICE, bench.PAGE_SIZES) == (4, "cpu", (16, 32))
        assert bench.kv_bytes(1, 64) == 2 * 64 * 2 * 32 * 4
    assert (bench.HEADS, bench.DEVICE, bench.PAGE_SIZES) == (32, "cuda", (16, 64, 256))
    assert bench.kv_bytes(1, 4096) == 2 * 4096 * 8 * 128 * 2


def test_sweep_winners_per_page_and_grid(monkeypatch):
    """The sweep picks a winner for each page size and regime from that regime's points only: a config that is
    best where splits fill the GPU need not be where the batch does, and the table keys its entries that way."""
    monkeypatch.setattr(bench.dk, "num_sms", lambda index: 132)
    split_best, full_best = bench.sweep_candidates()[0], bench.sweep_candidates()[-1]
    measured = []
    for batch, cache in bench.SWEEP_POINTS:
        for page in bench.SWEEP_PAGES:
            for config in (split_best, full_best):
                wins = (config == full_best) == bench.fills_gpu(batch)
                measured.append(dict(batch=batch, cache=cache, page=page, tbps=4.0 if wins else 2.0, **vars(config)))
    winners = bench.sweep_winners(measured)
    assert len(winners) == 2 * len(bench.SWEEP_PAGES)  # the points include both regimes
    for w in winners:
        expected = full_best if w["fills_gpu"] else split_best
        assert bench.dk.DecodeConfig(w["block_n"], w["warps"], w["stages"], w["programs_per_sm"]) == expected
        assert w["geomean_tbps"] == pytest.approx(4.0)


def test_graph_rounds_keep_each_methods_median(monkeypatch):
    """A passing slowdown in one graph timing must not become a method's figure: every graph-timed method but the
    training forward is timed again, in a rotated order, and keeps its median round."""
    timings = {"flashdoc": [2.0, 1.0], "sdpa-cudnn": [1.0, 1.0], "flashdoc-paged16": [None, 3.0]}
    order = []

    def graph_time(calls):
        name = calls[0]
        order.append(name)
        return timings[name].pop(0)

    monkeypatch.setattr(bench, "graph_time_or_none", graph_time)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    point = {}
    for name, first in [("flashdoc", 0.5), ("sdpa-cudnn", 1.0), ("flashdoc-paged16", 1.0), ("flashdoc-training", 9.0)]:
        point[name] = dict(batch=1, cache=4096, method=name, graph_ms=first, graph_rounds_ms=[first], bytes=1e9)
    point["flex"] = dict(batch=1, cache=4096, method="flex", error="no kernel")
    builders = {name: (lambda i, name=name: name) for name in point}
    bench._more_graph_rounds(point, builders, 1, verbose=False)
    # round 1 starts at the second method, round 2 at the third; nothing times the training forward again
    assert order == ["sdpa-cudnn", "flashdoc-paged16", "flashdoc", "flashdoc-paged16", "flashdoc", "sdpa-cudnn"]
    assert point["flashdoc"]["graph_rounds_ms"] == [0.5, 2.0, 1.0] and point["flashdoc"]["graph_ms"] == 1.0
    assert point["flashdoc"]["graph_tbps"] == pytest.approx(1e9 / 1.0 / 1e9)
    assert point["flashdoc-paged16"]["graph_rounds_ms"] == [1.0, 3.0]  # a round that could not capture is left out
    assert point["flashdoc-training"]["graph_ms"] == 9.0 and point["flashdoc-training"]["graph_rounds_ms"] == [9.0]
    assert "graph_ms" not in point["flex"]
