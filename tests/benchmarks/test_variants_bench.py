"""benchmarks/variants.py: its CPU smoke run end to end (the JSON and markdown it writes), and its bookkeeping
(pair counts, the rows a run times, the targets) on synthetic rows. The timings themselves need a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import variants as bench

ROOT = Path(__file__).resolve().parents[2]

ROW_KEYS = {"group", "name", "peer", "mode", "seqlen", "head_dim", "causal", "window", "softcap", "alibi", "batch"}
MEASURED_KEYS = {"ms", "ms_p20", "ms_p80", "pairs", "visited_pairs", "tflops"}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One CPU smoke run of every group, as `nox -s bench -- --quick` runs it without a GPU."""
    if torch.cuda.is_available():
        pytest.skip("the GPU run is the benchmark itself")
    out = tmp_path_factory.mktemp("variants")
    cmd = [sys.executable, "-m", "benchmarks.variants", "--out", str(out), "--quick"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, proc.stdout


def test_smoke_run_writes_its_schema(smoke_run):
    out, _ = smoke_run
    result = json.loads((out / "variants.json").read_text())
    assert set(result) == {"meta", "rows", "targets", "ratios"}
    meta = result["meta"]
    assert meta["schema"] == bench.SCHEMA and meta["scale"] == "smoke" and meta["groups"] == list(bench.GROUPS)
    assert meta["interrupted"] is False
    assert meta["kernel_paths"] and all(len(row) == 2 for row in meta["kernel_paths"])
    specs = bench.rows_to_run("smoke")
    assert [(r["group"], r["name"], r["mode"]) for r in result["rows"]] == [
        (s["group"], s["name"], s["mode"]) for s in specs
    ]
    for row in result["rows"]:
        assert ROW_KEYS <= set(row)
        if row["peer"] == "flex":  # compiled for CUDA only
            assert "skipped" in row and "tflops" not in row
            continue
        assert MEASURED_KEYS <= set(row), row
        assert row["kernels"]["fwd"] == "portable"  # the interpreter runs the portable kernels only
        assert set(row["kernels"]) == ({"fwd", "dkdv", "dq"} if row["mode"] == "fwd_bwd" else {"fwd"})
        assert row["pairs"] == bench.visible_pairs(row["seqlen"], row["seqlen"], row["causal"], row["window"])
        assert row["visited_pairs"] >= row["pairs"] > 0


def test_smoke_run_reports_every_target(smoke_run):
    out, stdout = smoke_run
    result = json.loads((out / "variants.json").read_text())
    by_key = {}
    for t in result["targets"]:
        by_key.setdefault(t["target"], []).append(t)
        assert set(t) >= {"target", "what", "threshold", "strict", "ratio", "met", "head_dim", "mode", "seqlen"}
    assert set(by_key) == set(bench.TARGETS)
    # Flex rows are skipped on the CPU: their targets are there, not measured; the others have a ratio
    for key in ("window_vs_flex", "alibi_vs_flex"):
        assert all(t["ratio"] is None and t["met"] is None for t in by_key[key])
    for key in ("window_vs_causal", "softcap_vs_plain"):
        assert all(t["ratio"] > 0 and isinstance(t["met"], bool) for t in by_key[key])
    for t in result["targets"]:
        assert bench.target_line(t) in stdout
    text = (out / "variants.md").read_text()
    assert "## Targets" in text and "## Rows" in text
    assert text.count("\n| ") == 3 + len(result["targets"]) + len(result["ratios"]) + len(result["rows"])


def test_groups_name_the_outputs(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("the GPU run is the benchmark itself")
    result = bench.run(tmp_path, "smoke", ["alibi"], verbose=False)
    assert {r["group"] for r in result["rows"]} == {"alibi"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["variants-alibi.json", "variants-alibi.md"]
    assert [t["target"] for t in result["targets"]] == ["alibi_vs_flex", "alibi_vs_flex"]


@pytest.mark.parametrize(
    "causal,window,expected",
    [(False, (-1, -1), 64 * 64), (True, (-1, -1), 64 * 65 // 2), (True, (16, 0), 17 * 64 - 16 * 17 // 2)],
)
def test_visible_pairs(causal, window, expected):
    assert bench.visible_pairs(64, 64, causal, window) == expected


def test_visited_pairs_cover_whole_tiles():
    # dense: every tile; causal at N = 256 with 64 x 128 tiles: rows 0-127 see one key tile, rows 128-255 two
    assert bench.visited_pairs(256, 256, False) == 256 * 256
    assert bench.visited_pairs(256, 256, True) == 128 * 128 + 128 * 256
    # a narrow window visits at most two key tiles per query tile, whatever N
    assert bench.visited_pairs(4096, 4096, True, (16, 0)) <= 4096 * 2 * bench.TILE_N


def test_rows_reject_unknown_groups_and_scales():
    with pytest.raises(ValueError, match="groups must be among"):
        bench.rows_to_run("smoke", ["dense", "windows"])
    with pytest.raises(ValueError, match="scale must be one of"):
        bench.rows_to_run("tiny")


def test_full_run_rows():
    rows = bench.rows_to_run("full")
    groups = {g: [r for r in rows if r["group"] == g] for g in bench.GROUPS}
    assert len(groups["dense"]) == 2 * 3 * 2 * 2  # head dims x N x causal x mode
    assert {r["seqlen"] for r in groups["window"]} == {16384}
    assert {tuple(r["window"]) for r in groups["window"]} == {(-1, -1), bench.WINDOW}
    assert {r["seqlen"] for r in groups["softcap"] + groups["alibi"]} == {4096, 16384}
    quick = bench.rows_to_run("quick")
    assert {r["head_dim"] for r in quick} == {128} and {r["seqlen"] for r in quick} == {16384}


def _row(group, name, mode, tflops, causal=True, peer="flashdoc", n=1024, d=64, window=(-1, -1)):
    return dict(
        bench.row_spec(group, name, peer, mode, n, d, causal, window),
        tflops=tflops,
        pairs=bench.visible_pairs(n, n, causal, window),
        visited_pairs=bench.visited_pairs(n, n, causal, window),
    )


def test_targets_from_synthetic_rows():
    window = f"flashdoc window {bench.WINDOW}"
    rows = []
    for mode in ("fwd", "fwd_bwd"):
        rows += [
            _row("window", "flashdoc causal", mode, 100.0),
            _row("window", window, mode, 95.0 if mode == "fwd" else 85.0, window=bench.WINDOW),
            _row("window", f"flex window {bench.WINDOW}", mode, 95.0, peer="flex", window=bench.WINDOW),
            _row("window", "flex causal", mode, 125.0 if mode == "fwd" else 100.0, peer="flex"),
            _row("alibi", "flashdoc alibi", mode, 50.0),
            _row("alibi", "flex alibi score_mod", mode, 50.0, peer="flex"),
        ]
    for causal in (False, True):
        rows += [
            _row("softcap", "flashdoc", "fwd", 100.0, causal),
            _row("softcap", f"flashdoc softcap {bench.SOFTCAP:g}", "fwd", 89.0 if causal else 90.0, causal),
        ]
    targets, ratios = bench.evaluate(rows)
    got = {(t["target"], t["mode"], t.get("causal")): (round(t["ratio"], 3), t["met"]) for t in targets}
    assert got[("window_vs_causal", "fwd", None)] == (0.95, True)
    assert got[("window_vs_causal", "fwd_bwd", None)] == (0.85, False)
    assert got[("window_vs_flex", "fwd", None)] == (1.0, False)  # "faster than": a tie is not met
    assert got[("alibi_vs_flex", "fwd", True)] == (1.0, True)  # ">=": a tie is met
    assert got[("softcap_vs_plain", "fwd", False)] == (0.9, True)
    assert got[("softcap_vs_plain", "fwd", True)] == (0.89, False)
    tiled = [r for r in ratios if r["what"] == "sliding window / dense causal on the pairs in the tiles visited"]
    win, causal = (_row("window", "", "fwd", 1.0, window=w) for w in (bench.WINDOW, (-1, -1)))
    tiling = (win["visited_pairs"] / win["pairs"]) / (causal["visited_pairs"] / causal["pairs"])
    assert [round(r["ratio"], 4) for r in tiled] == [round(0.95 * tiling, 4), round(0.85 * tiling, 4)]
    assert "0.85x: unmet" in bench.target_line(targets[2])
    flex = [r for r in ratios if r["what"] == bench.FLEX_WINDOW_RATIO]
    assert [(r["mode"], round(r["ratio"], 3)) for r in flex] == [("fwd", 0.76), ("fwd_bwd", 0.95)]
    # the window target's Flex row is Flex's window, not its causal call (now in the same group)
    assert got[("window_vs_flex", "fwd_bwd", None)] == (round(85.0 / 95.0, 3), False)


def _report_example():
    """A result written by hand: a measured row, one visiting the Hopper kernels, a skipped, an unsupported and a
    failed row; targets met, unmet, tied under "faster than" and not measured; an interrupted run."""
    meta = dict(gpu="NVIDIA H200", torch="2.9.0", triton="3.5.0", flashdoc_commit="abc1234", dtype="bfloat16")
    meta.update(tokens=16384, hidden=2048, scale="quick", interrupted=True)
    measured = dict(ms=1.23456, ms_p20=1.2, ms_p80=1.3, pairs=1000, visited_pairs=1250, tflops=345.678)
    window = (1024, 0)
    rows = [
        dict(
            bench.row_spec("dense", "flashdoc causal", "flashdoc", "fwd", 16384, 128, True),
            **measured,
            kernels={"fwd": "hopper"},
        ),
        dict(
            bench.row_spec("window", "flashdoc window (1024, 0)", "flashdoc", "fwd_bwd", 16384, 128, True, window),
            **measured,
            kernels={"fwd": "hopper", "dkdv": "hopper", "dq": "fused"},
        ),
        dict(
            bench.row_spec("window", "flex window (1024, 0)", "flex", "fwd", 16384, 128, True, window, mask="sliding"),
            skipped="FlexAttention runs compiled on a GPU only",
        ),
        dict(
            bench.row_spec("softcap", "flashdoc softcap 50", "flashdoc", "fwd", 16384, 128, False, softcap=50.0),
            unsupported="unexpected keyword argument 'softcap'",
        ),
        dict(
            bench.row_spec("alibi", "flex alibi score_mod", "flex", "fwd_bwd", 16384, 128, True, alibi=True),
            error="OutOfMemoryError: CUDA out of memory",
        ),
    ]
    where = dict(head_dim=128, mode="fwd", seqlen=16384)
    targets = [
        bench._target("window_vs_causal", 0.9512, group="window", **where),
        bench._target("window_vs_flex", 1.0, group="window", **where),
        bench._target("softcap_vs_plain", 0.876, group="softcap", causal=False, **where),
        bench._target("alibi_vs_flex", None, group="alibi", causal=True, **where),
    ]
    tiled = "sliding window / dense causal on the pairs in the tiles visited"
    ratios = [
        dict(what=tiled, ratio=1.234, group="window", **where),
        dict(what="softcap / the same call without", ratio=None, group="softcap", causal=True, **where),
    ]
    return dict(meta=meta, rows=rows, targets=targets, ratios=ratios)


# What report() wrote for _report_example() before it was split into parts; the page shows the parts, and
# variants.md must not change under them.
EXPECTED_REPORT = """\
# flashdoc variants benchmark

NVIDIA H200, torch 2.9.0, Triton 3.5.0, flashdoc abc1234; bfloat16, 16384 tokens in total, hidden 2048 (quick run, interrupted). TFLOP/s on the pairs inside the mask.

## Targets

| claim | d | mode | N | ratio | met |
|---|---|---|---|---|---|
| sliding window / dense causal [>= 0.9] | 128 | fwd | 16384 | 0.95 | yes |
| sliding window / FlexAttention's [> 1] | 128 | fwd | 16384 | 1.00 | no |
| softcap / the same call without (full) [>= 0.9] | 128 | fwd | 16384 | 0.88 | no |
| ALiBi / FlexAttention's score_mod (causal) [>= 1] | 128 | fwd | 16384 | — | not measured |

## Other ratios

| ratio | d | mode | N | value |
|---|---|---|---|---|
| sliding window / dense causal on the pairs in the tiles visited | 128 | fwd | 16384 | 1.23 |
| softcap / the same call without (causal) | 128 | fwd | 16384 | — |

## Rows

| group | row | mode | N | d | ms | TFLOP/s | visited / visible | kernels |
|---|---|---|---|---|---|---|---|---|
| dense | flashdoc causal | fwd | 16384 | 128 | 1.235 | 345.7 | 1.25 | fwd hopper |
| window | flashdoc window (1024, 0) causal | fwd_bwd | 16384 | 128 | 1.235 | 345.7 | 1.25 | fwd hopper, dkdv hopper, dq fused |
| window | flex window (1024, 0) causal | fwd | 16384 | 128 | — | skipped | — | — |
| softcap | flashdoc softcap 50 | fwd | 16384 | 128 | — | unsupported | — | — |
| alibi | flex alibi score_mod causal | fwd_bwd | 16384 | 128 | — | error | — | — |
"""  # noqa: E501


def test_report_text_is_unchanged():
    assert bench.report(_report_example()) == EXPECTED_REPORT


def test_report_parts_are_whole_tables():
    """Each part renders on its own, as a page shows it: a header, a separator and one line per entry, ending in
    a newline; report() is the parts under their headings, in order."""
    result = _report_example()
    parts = [
        (bench.targets_table(result["targets"]), result["targets"]),
        (bench.ratios_table(result["ratios"]), result["ratios"]),
        (bench.rows_table(result["rows"]), result["rows"]),
    ]
    text = bench.report(result)
    position = text.index(bench.summary_line(result["meta"]) + "\n")
    for table, entries in parts:
        assert table.endswith("|\n") and table.count("\n") == 2 + len(entries)
        assert all(line.startswith("|") and line.endswith("|") for line in table.splitlines())
        position = text.index(table, position)
    assert bench.rows_table([]).count("\n") == 2  # a run interrupted before its first row still has a table


def test_rotated_starts_each_round_one_row_later():
    assert [bench.rotated([0, 1, 2], turn) for turn in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]


def test_median_round_keeps_the_middle_time_and_every_rounds():
    timed = [dict(ms=3.0, ms_p20=2.9), dict(ms=1.0, ms_p20=0.9), dict(ms=2.0, ms_p20=1.9)]
    assert bench.median_round(timed) == dict(ms=2.0, ms_p20=1.9, ms_rounds=[3.0, 1.0, 2.0])
    assert bench.median_round([dict(skipped="no GPU")]) == dict(skipped="no GPU")


def test_rounds_rotate_a_groups_rows_and_keep_each_rows_median(tmp_path, monkeypatch):
    """Three rounds of the softcap group: each round starts one row later, each row keeps its median round, and
    the rows come out in rows_to_run's order."""
    specs = bench.rows_to_run("smoke", ["softcap"])
    order, clock = [], iter(range(1, 1000))

    def fake_row(spec, s, device, dtype, flex):
        order.append(specs.index(spec))
        return dict(spec, ms=float(next(clock)), ms_p20=0.0, ms_p80=0.0, pairs=1, visited_pairs=1, tflops=1.0)

    monkeypatch.setattr(bench, "run_row", fake_row)
    result = bench.run(tmp_path, "smoke", ["softcap"], verbose=False, rounds=3)
    per_head_dim = len(specs) // len({s["head_dim"] for s in specs})
    first = list(range(per_head_dim))
    assert order[: 3 * per_head_dim] == first + first[1:] + first[:1] + first[2:] + first[:2]
    assert [(r["name"], r["mode"], r["causal"]) for r in result["rows"]] == [
        (s["name"], s["mode"], s["causal"]) for s in specs
    ]
    for row in result["rows"]:
        assert len(row["ms_rounds"]) == 3 and row["ms"] == sorted(row["ms_rounds"])[1]
    assert result["meta"]["rounds"] == 3
    assert "each row its median of 3 rounds" in bench.summary_line(result["meta"])


def test_an_interrupted_round_keeps_each_rows_rounds_so_far(tmp_path, monkeypatch):
    specs = bench.rows_to_run("smoke", ["alibi"])
    calls = []

    def fake_row(spec, s, device, dtype, flex):
        if len(calls) == len(specs) + 1:  # a time limit in the second round, after its first row
            raise KeyboardInterrupt
        calls.append(spec)
        if spec["peer"] == "flex":
            return dict(spec, skipped="FlexAttention runs compiled on a GPU only")
        return dict(spec, ms=float(len(calls)), ms_p20=0.0, ms_p80=0.0, pairs=1, visited_pairs=1, tflops=1.0)

    monkeypatch.setattr(bench, "run_row", fake_row)
    result = bench.run(tmp_path, "smoke", ["alibi"], verbose=False, rounds=3)
    assert result["meta"]["interrupted"] is True
    assert len(result["rows"]) == len(specs)
    rounds = sorted(len(r.get("ms_rounds", [])) for r in result["rows"] if r["peer"] == "flashdoc")
    assert rounds == [1, 2]  # the second round's first row was timed again, the other not yet
    assert all("skipped" in r and "ms_rounds" not in r for r in result["rows"] if r["peer"] == "flex")
    saved = json.loads((tmp_path / "variants-alibi.json").read_text())
    assert saved["meta"]["interrupted"] is True and len(saved["rows"]) == len(specs)


def test_rounds_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        bench.run(tmp_path, "smoke", ["alibi"], verbose=False, rounds=0)
