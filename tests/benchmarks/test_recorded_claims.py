"""Consistency of the recorded benchmark with the sentences the Triton post writes around its numbers.

Nothing is timed here: each check reads recorded files (docs/generated/triton/benchmark/results.json and the
dtype_bits snippet's table). The numbers in the post's prose come from macros (tools/site_macros/benchmark.py),
so they follow every new recording. The words around them ("ahead in every row", "behind in a few") do not:
each check fails when a recording contradicts a sentence of the post, naming the sentence, so that a new
recording cannot land under prose it disproves.
"""

import json
from pathlib import Path

import pytest

from benchmarks import report, schema

ROOT = Path(__file__).resolve().parents[2]
POST = ROOT / "docs/blog/posts/flashattention-in-triton.md"
RESULTS = ROOT / "docs/generated/triton/benchmark/results.json"


@pytest.fixture(scope="module")
def results():
    return json.loads(RESULTS.read_text())


@pytest.fixture(scope="module")
def post():
    return " ".join(POST.read_text().split())  # one line: sentences wrap anywhere in the source


def rows(results, mode, peer, head_dims=(64, 128, 256), causals=(False, True)):
    """The ratio table's cells (geomean and min over N >= 2k) for these rows."""
    return report.ratio_cells(results, mode, peer, head_dims, causals)


def claim(post, sentence):
    """The sentence, as the post words it (a test whose sentence left the post is a test to delete)."""
    assert sentence in post, f"the post no longer says {sentence!r}: update or remove this test"
    return sentence


def test_recording_backs_faster_than_both_pytorch_backends_in_every_row(results, post):
    said = claim(post, "Against PyTorch's FlashAttention-2 and memory-efficient backends, flashdoc is faster in "
                       "every row.")
    for peer in ("sdpa-flash", "sdpa-efficient"):
        for mode in schema.MODES:
            assert min(c["min"] for c in rows(results, mode, peer)) > 1, (said, peer, mode)


def test_recording_backs_forward_backward_clearing_one_and_a_half_flash_backend(results, post):
    said = claim(post, "Every row clears the 1.5× target: the lowest ratio at any length is")
    assert min(c["min"] for c in rows(results, "fwd_bwd", "sdpa-flash")) >= 1.5, said


def test_recording_backs_ahead_of_flex_in_every_row(results, post):
    said = claim(post, "Against FlexAttention (another Triton kernel), flashdoc is ahead in every row, forward and "
                       "forward plus backward")
    for mode in schema.MODES:
        assert min(c["min"] for c in rows(results, mode, "flex")) > 1, (said, mode)


def test_recording_backs_the_cudnn_comparison(results, post):
    said = claim(post, "Against cuDNN, the forward is ahead on average at head dimension 64")
    narrow = rows(results, "fwd", "sdpa-cudnn", (64, 128))
    assert all(c["geomean"] > 1 for c in rows(results, "fwd", "sdpa-cudnn", (64,))), said
    said = claim(post, "and at 128 under the mask")
    assert all(c["geomean"] > 1 for c in rows(results, "fwd", "sdpa-cudnn", (128,), (True,))), said
    said = claim(post, "and level or a little ahead at 128 without it")
    assert all(0.97 <= c["geomean"] <= 1.08 for c in rows(results, "fwd", "sdpa-cudnn", (128,), (False,))), said
    assert any(c["min"] < 1 for c in narrow), claim(post, "though behind in a few rows")
    said = claim(post, "at 256 it is behind without the mask")
    assert all(c["geomean"] < 1 for c in rows(results, "fwd", "sdpa-cudnn", (256,), (False,))), said
    assert all(c["geomean"] > 1 for c in rows(results, "fwd", "sdpa-cudnn", (256,), (True,))), said
    said = claim(post, "flashdoc is a little ahead of cuDNN on average at head dimensions 64 and 256")
    assert all(1 < c["geomean"] <= 1.10 for c in rows(results, "fwd_bwd", "sdpa-cudnn", (64, 256))), said
    said = claim(post, "and behind at 128")
    assert all(c["geomean"] < 1 for c in rows(results, "fwd_bwd", "sdpa-cudnn", (128,))), said


def test_recording_backs_short_sequences_mostly_behind_cudnn(results, post):
    said = claim(post, "at 512 and 1k tokens flashdoc is ahead of cuDNN in only")
    vs_cudnn = report.short_ratios(results, "sdpa-cudnn")
    assert sum(r > 1 for r in vs_cudnn) < len(vs_cudnn) / 2, said


def test_recording_backs_hopper_forward_in_every_row(results, post):
    said = claim(post, "In the benchmark below, this kernel is flashdoc's forward in every row")
    forward = [p for p in results["flashdoc_autotuned"] if p["kernel"] == "fwd"]
    assert forward and all(p.get("gluon") for p in forward), said


def test_recording_backs_most_dtype_twins_agreeing(results, post):
    said = claim(post, "Most twins agree within a few percent")
    speed = report.speed_table(results)
    gaps = [speed[k]["flashdoc"] / speed[(k[0], "fp16", *k[2:])]["flashdoc"] for k in speed
            if k[1] == "bf16" and "flashdoc" in speed[k] and "flashdoc" in speed.get((k[0], "fp16", *k[2:]), {})]
    assert sum(abs(g - 1) <= 0.05 for g in gaps) > len(gaps) / 2, said


def test_recording_backs_causal_forward_lowest_at_2k(results, post):
    said = claim(post, "At 2k it is lowest")
    at_2k = report.causal_full_ratios(results, 2048, 2048).values()
    longer = report.causal_full_ratios(results, 4096).values()
    assert min(at_2k) < min(longer), said


def test_recording_backs_float16_rows_trailing_their_bfloat16_twins(results, post):
    said = claim(post, "From 2k tokens up, most float16 rows also read a few percent below their bfloat16 twins.")
    speed = {(r["mode"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"]): r["tflops"]
             for r in results["records"]
             if r["kind"] == "speed" and r["status"] == "ok" and r["peer"] == "flashdoc" and r["seqlen"] >= 2048}
    ratios = [speed[key] / speed[(key[0], "bf16", *key[2:])] for key in speed if key[1] == "fp16"]
    assert sum(0.9 < r < 1 for r in ratios) > 0.75 * len(ratios), said


def test_dtype_bits_recording_backs_float16_holding_bfloat16_values_keeping_pace():
    """The dtype_bits snippet's table: float16 inputs with bfloat16's values run within 2% of bfloat16 in both
    columns, and random float16 inputs run slower than both."""
    table = (ROOT / "docs/generated/triton/dtype_bits/dtype_bits.md").read_text().splitlines()[2:]
    speed = {cells[0]: [float(x) for x in cells[1:]]
             for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table)}
    bf16, fp16, held = speed["bfloat16"], speed["float16"], speed["float16 holding the bfloat16 values"]
    for column in range(2):
        assert abs(held[column] / bf16[column] - 1) <= 0.02, (column, bf16, held)
        assert fp16[column] < min(bf16[column], held[column]), (column, fp16)
