"""Consistency of the recorded benchmark's files with each other and with benchmarks/schema.py.

Nothing is timed here. The site shows the recorded tables and quotes numbers that its macros compute from the
recorded results.json; these checks fail when the two disagree (a table edited by hand, a record that does not
add up, report code changed since the recording), naming the file.
"""

import json

import pytest

from benchmarks import peers, report, schema
from tools.outputs import snippet

BENCHMARK = snippet("triton/benchmark")


@pytest.fixture(scope="module")
def results():
    return json.loads((BENCHMARK.output_dir / "results.json").read_text())


def test_recorded_results_follow_the_schema(results):
    assert results["schema"] == schema.SCHEMA
    assert results["device"] == "cuda" and results["note"] is None, "the site shows a GPU recording"
    assert results["gpu"] == BENCHMARK.provenance()["device"]
    assert list(results["peers"]) == [p.name for p in peers.PEERS]
    assert {r["kind"] for r in results["records"]} == {"speed", "memory", "first_call"}
    for r in results["records"]:
        assert r["status"] in ("ok", "skipped"), r
        assert r["status"] == "ok" or r["reason"], r


def test_recorded_speed_records_add_up(results):
    """Each timing's FLOPs follow the shape, its TFLOP/s follow its median, and the median is its best pass."""
    timed = [r for r in results["records"] if r["kind"] == "speed" and r["status"] == "ok"]
    assert timed
    for r in timed:
        where = f"{r['peer']} {report.config_label(r['mode'], r['dtype'], r['head_dim'], r['causal'])} N={r['seqlen']}"
        assert (r["batch"], r["heads"]) == (
            results["sweep"]["total_tokens"] // r["seqlen"],
            results["sweep"]["hidden"] // r["head_dim"],
        ), where
        assert r["flops"] == schema.flops(r["mode"], r["batch"], r["heads"], r["seqlen"], r["head_dim"], r["causal"]), (
            where
        )
        assert r["tflops"] == pytest.approx(r["flops"] / (r["ms"] * 1e-3) / 1e12), where
        assert r["ms"] == min(r["ms_passes"]) and len(r["ms_passes"]) == results["sweep"]["passes"], where
        assert r["ms_p20"] <= r["ms"] <= r["ms_p80"], where


def test_every_configuration_of_the_sweep_was_recorded_for_every_peer(results):
    recorded = {
        (r["peer"], r["mode"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"])
        for r in results["records"]
        if r["kind"] == "speed"
    }
    available = report.peer_names(results)
    missing = [
        (p, *config)
        for config in schema.sweep_configs(results["sweep"])
        for p in available
        if (p, *config) not in recorded
    ]
    assert not missing, f"no record (not even a skip) for {missing[:5]}"


@pytest.mark.parametrize("table", ["ratios.md", "tflops.md", "autotuned.md", "targets.md"])
def test_recorded_tables_are_what_the_report_makes_of_the_recorded_results(results, table):
    """The tables on the page and the numbers the macros compute come from the same records."""
    made = {
        "ratios.md": report.ratio_table,
        "tflops.md": report.tflops_table,
        "autotuned.md": report.autotuned_table,
        "targets.md": report.targets_table,
    }[table](results)
    recorded = (BENCHMARK.output_dir / table).read_text()
    if table == "targets.md":  # compare the rows, which the data decides, not the header's wording
        made, recorded = made.splitlines()[2:], recorded.split("\n\n")[1].splitlines()[2:]
        assert made and made == recorded, f"{table}: the recorded rows differ from the report's"
    else:
        assert made in recorded, (
            f"{table} differs from what benchmarks.report makes of results.json: a hand edit, "
            "or report code changed since the recording"
        )
