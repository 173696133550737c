"""benchmarks/varlen.py: the batch it draws, the FLOPs it credits, and a smoke run on tiny shapes (the interpreter
on a CPU) that writes results.json and the markdown table."""

import json
import math

import pytest

from benchmarks import varlen as bench
from benchmarks.schema import flops


def test_lengths_fill_the_batch():
    shape = bench.SHAPE
    lengths = bench.draw_lengths(shape["total"], shape["min_len"], shape["max_len"])
    assert sum(lengths) == shape["total"]
    assert all(shape["min_len"] <= n <= shape["max_len"] for n in lengths[:-1]) and 1 <= lengths[-1]
    assert lengths == bench.draw_lengths(shape["total"], shape["min_len"], shape["max_len"])  # seeded
    # log-uniform: about as many below the geometric middle as above it
    middle = math.sqrt(shape["min_len"] * shape["max_len"])
    below = sum(n < middle for n in lengths)
    assert 0.25 < below / len(lengths) < 0.75


def test_flops_are_per_sequence():
    assert bench.useful_flops("fwd", [100, 200], 4, 64, False) == 4 * 4 * 64 * (100**2 + 200**2)
    assert bench.useful_flops("fwd_bwd", [100], 4, 64, True) == flops("fwd_bwd", 1, 4, 100, 64, True)
    assert bench.dense_shape([1000, 3000, 4192]) == (4, 2048)


@pytest.mark.timeout(600)
def test_smoke_run(tmp_path):
    bench.main(["--smoke", "--out", str(tmp_path), "--methods", "flashdoc-varlen,flashdoc-dense,sdpa-flash"])
    data = json.loads((tmp_path / "results.json").read_text())
    records = {(r["method"], r["mode"], r["causal"]): r for r in data["records"]}
    assert len(records) == 3 * 2 * 2
    for mode in bench.MODES:
        for causal in (False, True):
            ours = records[("flashdoc-varlen", mode, causal)]
            assert ours["tflops"] > 0 and ours["flops"] == bench.useful_flops(
                mode, data["meta"]["lengths"], data["meta"]["heads"], data["meta"]["head_dim"], causal
            )
    table = (tmp_path / "varlen.md").read_text()
    assert "| mode | causal | flashdoc-varlen |" in table and "varlen / flashdoc-dense" in table


def test_unknown_method_is_refused():
    with pytest.raises(SystemExit):
        bench.main(["--smoke", "--methods", "flashdoc-varlen,nope"])
