"""The words around the recorded numbers, checked against the recordings.

The numbers in the posts' prose come from macros (tools/site_macros/benchmark.py and recorded.py) or from
recorded outputs, so they follow every new recording. The words around them ("ahead in every row", "about a
quarter of the speed of a plain copy") do not: each test here reads a recording and fails when it contradicts a
sentence of a post, naming the sentence, so that a new recording cannot land under prose it disproves.
"""

import inspect
import json
import math
import re
from pathlib import Path

import pytest
import torch
import triton.language as tl

from benchmarks import report, schema
from tools.site_macros import recorded as readings

ROOT = Path(__file__).resolve().parents[2]
POSTS = ROOT / "docs/blog/posts"
GENERATED = ROOT / "docs/generated"
RESULTS = GENERATED / "triton/benchmark/results.json"


def read_post(name):
    return " ".join((POSTS / name).read_text().split())  # one line: sentences wrap anywhere in the source


@pytest.fixture(scope="module")
def results():
    return json.loads(RESULTS.read_text())


@pytest.fixture(scope="module")
def post():
    """Part 6, where the benchmark's tables are read."""
    return read_post("benchmarking-attention.md")


def table(path):
    """A recorded markdown table as {first cell: [the other cells]}."""
    return readings.markdown_table((GENERATED / path).read_text())


number = readings.number


def rows(results, mode, peer, head_dims=(64, 128, 256), causals=(False, True)):
    """The ratio table's cells (geomean and min over N >= 2k) for these rows."""
    return report.ratio_cells(results, mode, peer, head_dims, causals)


def claim(post, sentence):
    """The sentence, as the post words it (a test whose sentence left the post is a test to delete)."""
    assert sentence in post, f"the post no longer says {sentence!r}: update or remove this test"
    return sentence


def test_recording_backs_faster_than_both_pytorch_backends_in_every_row(results, post):
    said = claim(
        post, "Against PyTorch's FlashAttention-2 and memory-efficient backends, flashdoc is faster in every row."
    )
    for peer in ("sdpa-flash", "sdpa-efficient"):
        for mode in schema.MODES:
            assert min(c["min"] for c in rows(results, mode, peer)) > 1, (said, peer, mode)


def test_recording_backs_forward_backward_clears_one_and_a_half_flash_backend_everywhere(results, post):
    said = claim(post, "In every forward-and-backward row it is about 1.5 times as fast or more from 2k tokens on")
    assert min(c["min"] for c in rows(results, "fwd_bwd", "sdpa-flash")) >= 1.45, said


def test_recording_backs_ahead_of_flex_in_every_row(results, post):
    said = claim(
        post,
        "Against FlexAttention (another Triton kernel), flashdoc is ahead in every row, forward and "
        "forward plus backward",
    )
    for mode in schema.MODES:
        assert min(c["min"] for c in rows(results, mode, "flex")) > 1, (said, mode)


def test_recording_backs_against_cudnn(results, post):
    said = claim(post, "Against cuDNN, the forward is ahead on average at head dimension 64")
    narrow = rows(results, "fwd", "sdpa-cudnn", (64, 128))
    assert all(c["geomean"] > 1 for c in rows(results, "fwd", "sdpa-cudnn", (64,))), said
    said = claim(post, "and at 128 under the mask")
    assert all(c["geomean"] > 1 for c in rows(results, "fwd", "sdpa-cudnn", (128,), (True,))), said
    said = claim(post, "and level or a little ahead at 128 without it")
    assert all(0.97 <= c["geomean"] <= 1.08 for c in rows(results, "fwd", "sdpa-cudnn", (128,), (False,))), said
    said = claim(post, "though behind in a few rows")
    assert any(c["min"] < 1 for c in narrow), said
    said = claim(post, "at 256 it is behind without the mask")
    assert all(c["geomean"] < 1 for c in rows(results, "fwd", "sdpa-cudnn", (256,), (False,))), said
    said = claim(post, "and level or a little ahead under it")
    assert all(1 <= c["geomean"] <= 1.08 for c in rows(results, "fwd", "sdpa-cudnn", (256,), (True,))), said
    said = claim(post, "flashdoc is level with or ahead of cuDNN on average at head dimensions 64 and 256")
    means = [c["geomean"] for c in rows(results, "fwd_bwd", "sdpa-cudnn", (64, 256))]
    assert all(0.98 <= g <= 1.15 for g in means) and sum(g > 1 for g in means) > len(means) / 2, (said, means)
    said = claim(post, "and at 128 behind without the mask")
    full = [c["geomean"] for c in rows(results, "fwd_bwd", "sdpa-cudnn", (128,), (False,))]
    assert all(g < 1 for g in full), said
    said = claim(post, "and level or slightly ahead")
    causal = [c["geomean"] for c in rows(results, "fwd_bwd", "sdpa-cudnn", (128,), (True,))]
    assert all(0.98 <= g <= 1.05 for g in causal) and min(causal) > max(full), said


def test_recording_backs_short_sequences_mostly_behind_cudnn(results, post):
    said = claim(post, "At 512 and 1k tokens flashdoc is ahead of cuDNN in only")
    vs_cudnn = report.short_ratios(results, "sdpa-cudnn")
    assert sum(r > 1 for r in vs_cudnn) < len(vs_cudnn) / 2, said


def test_recording_backs_hopper_forward_runs_every_row(results):
    said = claim(read_post("flashattention-on-hopper.md"), "this kernel is flashdoc's forward in every row")
    forward = [p for p in results["flashdoc_autotuned"] if p["kernel"] == "fwd"]
    assert forward and all(p.get("gluon") for p in forward), said


def test_recording_backs_most_dtype_twins_agree(results, post):
    said = claim(post, "Most twins agree within a few percent")
    speed = report.speed_table(results)
    gaps = [
        speed[k]["flashdoc"] / speed[(k[0], "fp16", *k[2:])]["flashdoc"]
        for k in speed
        if k[1] == "bf16" and "flashdoc" in speed[k] and "flashdoc" in speed.get((k[0], "fp16", *k[2:]), {})
    ]
    assert sum(abs(g - 1) <= 0.05 for g in gaps) > len(gaps) / 2, said


def test_recording_backs_causal_forward_is_lowest_at_2k(results, post):
    said = claim(post, "At 2k it is lowest")
    at_2k = report.causal_full_ratios(results, 2048, 2048).values()
    longer = report.causal_full_ratios(results, 4096).values()
    assert min(at_2k) < min(longer), said


def test_recording_backs_float16_rows_mostly_trail_their_bfloat16_twins(results, post):
    said = claim(post, "From 2k tokens up, most float16 rows also read a few percent below their bfloat16 twins.")
    speed = {
        (r["mode"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"]): r["tflops"]
        for r in results["records"]
        if r["kind"] == "speed" and r["status"] == "ok" and r["peer"] == "flashdoc" and r["seqlen"] >= 2048
    }
    ratios = [speed[key] / speed[(key[0], "bf16", *key[2:])] for key in speed if key[1] == "fp16"]
    assert sum(0.9 < r < 1 for r in ratios) > len(ratios) / 2, said


def test_recording_backs_float16_holding_bfloat16_values_keeps_pace(post):
    """The dtype_bits snippet's table: float16 inputs with bfloat16's values run about as fast as bfloat16 (within
    3%) in both columns and faster than random float16 inputs in both; random float16 inputs run slower than both."""
    claim(post, "yet it is faster than the second in both columns and within a few percent of the first")
    table = (ROOT / "docs/generated/triton/dtype_bits/dtype_bits.md").read_text().splitlines()[2:]
    speed = {
        cells[0]: [float(x) for x in cells[1:]]
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table)
    }
    bf16, fp16, held = speed["bfloat16"], speed["float16"], speed["float16 holding the bfloat16 values"]
    for column in range(2):
        assert abs(held[column] / bf16[column] - 1) <= 0.03, (column, bf16, held)
        assert fp16[column] < min(bf16[column], held[column]), (column, fp16)


# Part 2: the roofline


def test_recording_backs_softmax_moves_its_bytes_at_less_than_half_copy_speed():
    said = claim(
        read_post("flashattention-explained.md"),
        "moving the fewest bytes it must (the scores in, the weights out) at less than half the speed of a plain copy",
    )
    copy = number(table("flashattention/gpu_roofline/hardware.md")["measured HBM bandwidth (copy)"][0])
    softmax = number(table("flashattention/gpu_roofline/roofline.md")["P = softmax(S)"][3])
    assert softmax / copy < 0.5, (said, softmax, copy)


def test_recording_backs_roofline_times_the_fused_kernel_slower_than_the_benchmark(results):
    """Part 6 explains why the roofline's fused point lies far below the benchmark's row for the same N, d and
    dtype: one call at a time from an idle GPU (a synchronisation after each), on half the (batch, head)
    pairs. Each of those facts is read from the two programs and the two recordings."""
    said = claim(
        read_post("benchmarking-attention.md"),
        "and put it below the benchmark's row for the same $N$, $d$ and dtype",
    )
    roofline = number(table("flashattention/gpu_roofline/roofline.md")["fused (flashdoc)"][2])
    (row,) = [
        r
        for r in results["records"]
        if r["kind"] == "speed"
        and r["peer"] == "flashdoc"
        and r["mode"] == "fwd"
        and r["dtype"] == "bf16"
        and r["head_dim"] == 128
        and not r["causal"]
        and r["seqlen"] == 4096
    ]
    assert roofline < 0.9 * row["tflops"], (said, roofline, row["tflops"])  # below by more than run-to-run noise
    source = (ROOT / "snippets/flashattention/gpu_roofline.py").read_text()
    timer = source[source.index("def median_seconds") : source.index("return sorted(times)")]
    assert "torch.cuda.synchronize()" in timer, "the roofline no longer synchronises after every call"
    bh = int(re.search(r"bh, seq, d = \((\d+), 4096, 128\)", source).group(1))
    assert 2 * bh == row["batch"] * row["heads"], claim(
        read_post("benchmarking-attention.md"), "64 (batch, head) pairs"
    )


# Part 3: host time, the reference of the tests, automatic warp specialisation


def test_recording_backs_launch_cache_host_time_as_the_post_reads_it():
    rows = table("triton/launch_overhead/host_time.md")
    part3 = read_post("flashattention-in-triton.md")
    said = claim(part3, "In this recording the cache took host work off both calls")
    for call in ("forward", "forward + backward"):
        off, on = (number(c) for c in rows[call][:2])
        assert on < off, (said, call, off, on)


def test_recording_backs_host_time_against_sdpa_as_the_usage_page_reads_it():
    """Using flashdoc's note on speed in transformers models: its host work per call costs more than SDPA's in every
    recorded call (the ratio is the recording's, through ``host_time_vs_sdpa``), which is why a model that waits
    on its host can step slower with flashdoc."""
    usage = " ".join((ROOT / "docs/usage.md").read_text().split())
    claim(usage, "where SDPA's is C++, and it costs {{ host_time_vs_sdpa() }} SDPA's per call")
    claim(usage, "so on a dense batch it can step slower with flashdoc than with SDPA")
    ratios = readings.host_time_ratios()
    assert {"forward", "forward + backward"} <= set(ratios) and min(ratios.values()) > 1, ratios


def test_recording_backs_flashdoc_calls_cost_more_host_time_than_sdpa():
    """Part 3 reads the host-time table after the launch cache: what remains is Python that PyTorch's C++ backends
    do not run, and every recorded call, cache on, still costs more host time than SDPA's."""
    said = claim(
        read_post("flashattention-in-triton.md"),
        "with the cache on, each call in the table still costs more host time than SDPA's",
    )
    ratios = readings.host_time_ratios()
    assert len(ratios) == 3 and min(ratios.values()) > 1, (said, ratios)


def test_recording_backs_both_references_give_the_same_verdict():
    said = claim(
        read_post("flashattention-in-triton.md"),
        "flash-attn's own tests take that reference in float32, "
        "from inputs upcast to float32; flashdoc's tests go one step further and take it in float64",
    )
    out = (GENERATED / "triton/check_against_oracle/stdout.txt").read_text()
    for ref in ("float32", "float64"):
        ratios = [float(r) for r in re.findall(rf"vs {ref} .*ratio ([\d.]+)", out)]
        assert len(ratios) == 8 and max(ratios) <= 2, (said, ref, ratios)


def test_recording_backs_head_dim_64_forwards_trail_their_128_twins(results):
    """Part 3's reading of the exponentials' budget: from 1k tokens up, every kernel but the unfused one runs its
    d = 64 forward at fewer TFLOP/s than its d = 128 forward of the same dtype, mask and length."""
    claim(
        read_post("flashattention-in-triton.md"),
        "from 1k tokens up every fused kernel in [the benchmark](benchmarking-attention.md) reaches fewer TFLOP/s in "
        "its head-dimension-64 forward than in its 128 one",
    )
    rates = {}
    for r in results["records"]:
        if r["kind"] == "speed" and r["mode"] == "fwd" and r.get("tflops") and r["peer"] != "naive":
            rates[r["peer"], r["dtype"], r["causal"], r["seqlen"], r["head_dim"]] = r["tflops"]
    pairs = [(key, rate, rates.get((*key[:4], 128))) for key, rate in rates.items() if key[4] == 64]
    pairs = [(key, d64, d128) for key, d64, d128 in pairs if d128 is not None and key[3] >= 1024]
    assert len({key[0] for key, _, _ in pairs}) >= 4, pairs  # flashdoc and the fused peers
    assert all(d64 < d128 for _, d64, d128 in pairs), [p for p in pairs if p[1] >= p[2]]


def test_recording_backs_tl_offers_automatic_warp_specialisation():
    said = claim(read_post("flashattention-in-triton.md"), "`tl.range(..., warp_specialize=True)`")
    assert "warp_specialize" in inspect.signature(tl.range.__init__).parameters, said


# Part 1: heads and GPT-3


def test_recording_backs_heads_cost_the_flops_of_one_and_h_times_the_score_memory():
    said = claim(
        read_post("attention-deep-dive.md"),
        "each head has its own $N \\times N$ matrix of scores, so the "
        "scores take $h$ times the memory of a single head",
    )
    text = (GENERATED / "attention/score_memory/heads.txt").read_text()
    h = int(re.match(r"(\d+) heads", text).group(1))
    flops = [int(x.replace(",", "")) for x in re.search(r"FLOPs of QK\^T: ([\d,]+) vs ([\d,]+)", text).groups()]
    scores = [int(x.replace(",", "")) for x in re.search(r"score bytes: +([\d,]+) vs ([\d,]+)", text).groups()]
    assert flops[0] == flops[1] and scores[0] == h * scores[1], (said, flops, scores)


def saturation_by_dk() -> dict:
    """Part 1's saturation table (a measure a row, d_k along the columns) as {d_k: [Var raw, Var scaled, max weight
    raw, max weight scaled, one-hot raw, one-hot scaled, gradient raw, gradient scaled]}."""
    path = GENERATED / "attention/scale_saturation/saturation.md"
    dims = [c.strip() for c in path.read_text().splitlines()[0].strip().strip("|").split("|")][1:]
    measures = list(table("attention/scale_saturation/saturation.md").values())
    assert len(measures) == 8, measures
    return {d: [cells[i] for cells in measures] for i, d in enumerate(dims)}


def test_recording_backs_unscaled_gradient_grows_shrinks_then_collapses():
    """Part 1's reading of the saturation table: without the scale the share of one-hot rows grows at every d_k;
    the median gradient grows first, then shrinks, and collapses between the two largest d_k, where most rows
    become saturated; at d_k = 64 it is larger than the scaled gradient."""
    post = read_post("attention-deep-dive.md")
    said = claim(post, "What grows steadily is saturation: the share of rows that are almost one-hot.")
    rows_ = saturation_by_dk()
    dims = sorted(rows_, key=int)
    share = [number(rows_[d][4]) for d in dims]
    assert all(a < b for a, b in zip(share, share[1:])), (said, share)
    said = claim(post, "so the typical gradient first grows, then shrinks as more rows saturate, and collapses once")
    grad = [float(rows_[d][6]) for d in dims]
    peak = grad.index(max(grad))
    assert 0 < peak < len(grad) - 1, (said, grad)
    assert all(a >= b for a, b in zip(grad[peak:], grad[peak + 1 :])), (said, grad)
    assert grad[-1] < 0.1 * grad[-2] and share[-2] <= 50 < share[-1], (said, grad, share)
    said = claim(post, "At $d_k = 64$ the unscaled gradient is not small at all: it is *larger* than the scaled one")
    assert float(rows_["64"][6]) > float(rows_["64"][7]), said


def test_recording_backs_gpt3_scores_against_weights():
    said = claim(
        read_post("attention-deep-dive.md"),
        "Inference needs one layer's scores at a time, a small fraction of the weights' memory",
    )
    text = (GENERATED / "attention/score_memory/gpt3.txt").read_text()
    weights = number(re.search(r"weights: +(.*)GiB", text).group(1))
    layer = number(re.search(r"one layer, one sequence: +(.*)MiB", text).group(1)) / 1024
    every_layer = number(re.search(r"layers, one sequence: +(.*)GiB", text).group(1))
    assert layer < 0.01 * weights, (said, layer, weights)
    assert every_layer > 50 * layer, claim(
        read_post("attention-deep-dive.md"), "Training that keeps $P$ for every layer needs far more per sequence"
    )


# Part 2: the seed post's beta form and its Hugging Face example


def test_recording_backs_beta_form_fails_only_on_fully_masked_tile_rows():
    said = claim(
        read_post("flashattention-explained.md"),
        "A tile row with even one visible key has a finite `m_ij`, and there the two forms agree (line 6)",
    )
    out = (GENERATED / "flashattention/seed_pseudocode/stdout.txt").read_text()
    assert re.search(r"^5\. fully masked tile row: beta form adds nan, the standard form adds 0\.0$", out, re.M)
    beta, standard = re.search(
        r"^6\. one visible key: beta form adds ([\d.]+), the standard form adds ([\d.]+)$", out, re.M
    ).groups()
    assert beta == standard, (said, beta, standard)


def test_recording_backs_transformers_defaults_to_sdpa():
    said = claim(
        read_post("flashattention-explained.md"),
        'transformers uses its `"sdpa"` implementation for models that support it unless told otherwise',
    )
    out = (GENERATED / "flashattention/hf_default/stdout.txt").read_text()
    assert "the default attention is 'sdpa'" in out, said
    assert "flash-attn installed: False" in out and '"flash_attention_2": accepted' not in out, said


# Part 4: the worked example's numbers in the prose


def test_recording_backs_worked_backward_numbers_in_the_prose():
    part4 = read_post("backward-pass.md")
    keys1 = (GENERATED / "flashattention/worked_backward/keys1.txt").read_text()
    for said in re.findall(r"\$?(0\.\d{4})\$?", part4):
        assert said in keys1, f"Part 4 quotes {said}, which keys1.txt does not show"


def test_second_stream_threshold_in_part4_is_the_code_constant():
    """Part 4 names the forward FLOPs from which the backward runs dQ on a second stream."""
    from flashdoc.kernels import backward

    exponent = round(math.log10(backward.OVERLAP_MIN_FLOPS))
    assert backward.OVERLAP_MIN_FLOPS == 10.0**exponent, backward.OVERLAP_MIN_FLOPS
    claim(read_post("backward-pass.md"), f"($10^{{{exponent}}}$ forward FLOPs and up)")


# Part 5: the model of FlashAttention-3's overlaps, and where the Gluon kernels run


def test_recording_backs_overlaps_rank_as_the_post_says():
    said = claim(
        read_post("flashattention-on-hopper.md"),
        "pipelining inside one warpgroup can hide only as much "
        "softmax as one product lasts, while two warpgroups can hide all of it",
    )
    busy = {name: number(cells[0]) for name, cells in table("triton/hopper_schedules/schedules.md").items()}
    assert busy["serial, one warpgroup"] < busy["intra-warpgroup pipelining"] < busy["ping-pong, two warpgroups"], (
        said,
        busy,
    )


def test_recording_backs_hopper_forward_level_with_cudnn_only_from_2k(results):
    """Part 5: the Hopper forward brings flashdoc level with or a little ahead of cuDNN on average at head
    dimensions 64 and 128 from 2k tokens up, and cuDNN stays ahead at the shorter lengths."""
    post = read_post("flashattention-on-hopper.md")
    said = claim(post, "from 2k tokens up it brings the forward at head dimensions 64 and 128 level with or a little")
    means = [c["geomean"] for c in rows(results, "fwd", "sdpa-cudnn", (64, 128))]
    assert min(means) >= 0.97 and max(means) <= 1.15, (said, means)
    said = claim(post, "(at shorter lengths cuDNN stays ahead)")
    speed = {
        (r["peer"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"]): r["tflops"]
        for r in results["records"]
        if r["kind"] == "speed" and r["status"] == "ok" and r["mode"] == "fwd" and r["seqlen"] < 2048
    }
    short = {
        key: rate / speed[("sdpa-cudnn", *key[1:])]
        for key, rate in speed.items()
        if key[0] == "flashdoc" and key[2] in (64, 128) and ("sdpa-cudnn", *key[1:]) in speed
    }
    assert short and max(short.values()) < 1, (said, short)


@pytest.mark.parametrize("capability,hopper", [((8, 0), False), ((8, 9), False), ((9, 0), True), ((10, 0), False)])
def test_recording_backs_gluon_kernels_need_compute_capability_9(monkeypatch, capability, hopper):
    from flashdoc.kernels import forward_hopper

    claim(
        read_post("flashattention-on-hopper.md"),
        "its Gluon kernels, the ones on this page, only on compute capability 9.0",
    )
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert forward_hopper._is_hopper.__wrapped__(0) is hopper


def test_recording_backs_the_decode_targets_the_post_names():
    """Part 8's reading of the decode benchmark names its claims' thresholds; the recorded tables check the same."""
    post = read_post("decoding.md")
    sentence = " ".join(
        (
            claim(post, "Against SDPA's flash backend it is at least as fast at"),
            claim(post, "reaches 85% of the copy wherever the caches hold at least 8 × 32k tokens"),
            claim(post, "Paged caches stay within 5% of contiguous ones at every point"),
        )
    )
    text = (GENERATED / "decoding/gpu_roofline/decode.md").read_text()
    claims = re.findall(r"^\| (flashdoc >= [^|]+|paged within [^|]+) \|", text, flags=re.M)
    assert claims, "decode.md records no claim rows"
    for recorded in claims:
        peer = re.match(r"flashdoc >= (sdpa-\w+) at every point$", recorded)
        share = re.match(r"flashdoc >= (\d+)% of the copy where", recorded)
        paged = re.match(r"paged within (\d+)% of contiguous at every point$", recorded)
        assert peer or share or paged, f"decode.md checks a claim the post does not name: {recorded!r}"
        if share:
            assert f"reaches {share.group(1)}% of the copy" in sentence
        if paged:
            assert f"within {paged.group(1)}% of contiguous ones" in sentence


def test_recording_backs_the_decode_roofline_reading():
    """Part 8's reading of the roofline, against the recorded decode benchmark (the graph timing)."""
    post = read_post("decoding.md")
    recorded, rows = readings.decode_rows()
    checks = {c["target"]: c for c in recorded["targets"]["graph_tbps"]}
    claim(post, "Against SDPA's flash backend it is at least as fast at every point, often by far.")
    flash = readings.decode_against("sdpa-flash")
    assert min(flash.values()) >= 1 and max(flash.values()) >= 1.2, flash
    assert checks["flashdoc >= sdpa-flash at every point"]["met"]
    claim(post, "reaches 85% of the copy wherever the caches hold at least 8 × 32k tokens")
    assert checks["flashdoc >= 85% of the copy where batch×cache >= 8×32k"]["met"]
    claim(post, "from there on it reads at least as fast as a copy moves data, and so does cuDNN's kernel")
    for b, c, m in rows:
        if m in ("flashdoc", "sdpa-cudnn") and b * c >= readings.LARGE_DECODE_TOKENS:
            assert rows[(b, c, m)]["graph_tbps"] >= recorded["copy_tbps"], (b, c, m)
    claim(post, "which it matches to within a few percent at every point")
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}
    by_point = readings.decode_against("sdpa-cudnn")
    ratios = list(by_point.values())
    assert min(ratios) >= 0.95 and max(ratios) <= 1.05, ratios
    claim(post, 'Of the {{ decode_claims("all") }} claims, only parity with cuDNN at')
    claim(post, "every point misses, and by a hair")
    missed = {target for target, c in checks.items() if not c["met"]}
    paged_claim, cudnn_claim = "paged within 5% of contiguous at every point", "flashdoc >= sdpa-cudnn at every point"
    assert missed == {cudnn_claim}, missed
    claim(post, "and trails it by at most {{ decode_cudnn_shortfall() }} at the others.")
    assert set(by_point) == points and min(by_point.values()) < 1, by_point
    assert all(r >= 0.99 for r in by_point.values()), by_point  # behind by a fraction of a percent at most
    claim(post, "those gaps are not the timer's noise: each round of the run builds its inputs afresh")
    claim(post, 'flashdoc trails, all {{ decode_cudnn_rounds("count") }} rounds trail, lying within')
    behind = readings.decode_rounds_behind("sdpa-cudnn")
    assert behind.keys() == {p for p, r in by_point.items() if r < 1}, behind
    assert behind and all(len(r) >= 3 and max(r) < 1 for r in behind.values()), behind
    paged = readings.decode_paged_ratios()
    claim(post, "Paged caches stay within 5% of contiguous ones at every point,")
    claim(post, "though barely at the smallest, 1 × 4k, where each program reads only a few tiles")
    smallest = readings.decode_smallest_point()
    assert smallest == (1, min(c for _, c in points)) and report.shape_label(*smallest) == "1×4k"
    assert checks[paged_claim]["worst"].endswith(f"at {report.shape_label(*smallest)}")
    assert min(paged.values()) == paged[smallest] < 0.97, paged
    claim(post, "reads {{ decode_paged_small() }} as fast as the contiguous cache, and pages of 16, which the Gluon")
    claim(post, "this card, {{ decode_paged_small(16) }}. From 8 × 32k up the slowest page size reads")
    assert any(card in recorded["gpu"] for card in ("H100", "H200")), recorded["gpu"]  # the Gluon kernel ran
    assert readings.decode_paged_ratio(smallest, 16) > paged[smallest] + 0.02, paged
    claim(post, "From 8 × 32k up the slowest page size reads {{ decode_paged_large() }}.")
    large = [r for (b, c), r in paged.items() if b * c >= readings.LARGE_DECODE_TOKENS]
    assert large and min(large) > paged[smallest] and max(large) < 1, paged  # it narrows, paged still behind
    claim(post, "Timed call by call, a call this short can also wait on its host, at points that differ from run")
    excess = readings.decode_call_excess()
    host_bound = readings.decode_host_bound_points()
    assert {(b, c) for b, c, _ in excess} == points - set(host_bound), excess
    for (b, c, m), us in excess.items():  # a call is never faster than its kernels beyond the timing's noise
        assert us > -1e-3 * rows[(b, c, m)]["ms"] * 1e3 * 5, ((b, c, m), us)
    by_call = readings.decode_against("sdpa-cudnn", "tbps")
    assert set(by_call) == points, by_call
    if host_bound:
        claim(post, "Here flashdoc's contiguous calls at {{ decode_host_bound() }} took over twice their kernels' time")
        claim(post, "and cuDNN's did not: there the column times the Python in front of flashdoc's kernels")
        for point in host_bound:  # cuDNN's call at the same point stays within the factor: the host is flashdoc's
            cudnn = rows[point + ("sdpa-cudnn",)]
            assert cudnn["ms"] <= readings.HOST_BOUND_FACTOR * cudnn["graph_ms"], (point, cudnn)
        claim(post, 'call by call its bandwidth falls to {{ decode_call_vs_cudnn("lowest") }} cuDNN\'s.')
        assert min(by_call, key=by_call.get) in host_bound, by_call
        claim(post, "Elsewhere the two took at most {{ decode_call_excess_us() }} longer than under the graph.")
    else:
        claim(post, "Here none did (no contiguous call took twice its kernels' time under the graph)")
        said = claim(post, 'call by call flashdoc read {{ decode_call_vs_cudnn("range") }} cuDNN\'s bandwidth.')
        assert min(by_call.values()) >= 0.95, (said, by_call)  # about cuDNN's, as under the graph
    said = claim(post, "Paged calls carry about the same host time as contiguous ones: at")
    claim(post, '{{ decode_worst_paged_call("point") }} they took')
    claim(post, 'for kernels of {{ decode_worst_paged_call("kernels") }}.')
    paged_us, contiguous_us = (readings.decode_worst_paged_call_us(w) for w in ("paged", "contiguous"))
    kernels_us = readings.decode_worst_paged_call_us("kernels")
    assert paged_us[1] > contiguous_us[1] > kernels_us[1], (paged_us, contiguous_us, kernels_us)
    # what a call adds to its kernels: within a third of the contiguous call's addition, at every page size
    point = readings.decode_worst_paged_call_point()
    contiguous_excess = contiguous_us[1] - rows[point + ("flashdoc",)]["graph_ms"] * 1e3
    for m in readings.decode_paged_methods():
        excess = (rows[point + (m,)]["ms"] - rows[point + (m,)]["graph_ms"]) * 1e3
        assert abs(excess - contiguous_excess) < contiguous_excess / 3, (said, m, excess, contiguous_excess)


def test_recording_backs_the_flex_decoding_reading():
    """Part 8's reading of FlexAttention's decode column (graph timing): the range of flashdoc's lead over its
    split-KV kernel, where the lead is least, and the points where FlexAttention has no row."""
    post = read_post("decoding.md")
    claim(post, "FlexAttention gets a block mask of 128-key blocks that masks nothing")
    _, rows = readings.decode_rows()
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}
    lead = readings.decode_against("flex")
    claim(
        post, "flashdoc reads {{ decode_flex_lead() }} as fast as FlexAttention's split-KV kernel, the least at 64 × 4k"
    )
    assert min(lead.values()) > 1 and min(lead, key=lead.get) == (64, 4096), lead
    claim(post, 'At {{ decode_failed("flex") }} FlexAttention has no')
    failed = readings.decode_failed_points("flex")
    assert failed and set(points) - set(lead) == set(failed), (sorted(lead), failed)
    recorded, _ = readings.decode_rows()
    errors = [r["error"] for r in recorded["rows"] if r["method"] == "flex" and "error" in r]
    assert all(e.startswith("SubprocException") for e in errors), errors


def test_recording_backs_the_split_rules_as_part8_compares_them():
    """Part 8's reading of the two split rules at a 32k cache: one program per SM, 16 splits of batch 1's 8
    programs filling 128 slots, the rules parting only at one and two sequences, where flashdoc's fills 16 more SMs
    in the same single wave; and the training kernel's query heads requesting the cache once each."""
    post = read_post("decoding.md")
    text = (GENERATED / "decoding/occupancy/splits.md").read_text()
    claim(post, "With 132 SMs each holding one program")
    assert re.search(r"^132 programs run at once \(132 SMs x 1\)", text, re.M), text.splitlines()[0]
    rule = re.compile(r"(\d+) splits: (\d+) programs in (\d+) waves?, (\d+)% busy")
    rules = {
        int(batch): [tuple(int(x) for x in rule.fullmatch(cell).groups()) for cell in cells]
        for batch, cells in readings.markdown_table(text).items()
    }
    claim(post, "8 programs (batch 1 × 8 KV heads) split 16 ways make 128")
    assert rules[1][1][:2] == (16, 128), rules[1]
    claim(post, "They part where flash-attn's 85% stops short of a full wave, at one or two sequences")
    parted = {batch for batch, (theirs, ours) in rules.items() if theirs != ours}
    assert parted == {1, 2}, rules
    claim(post, "and there flashdoc keeps 16 more SMs reading")
    for batch in parted:
        (_, theirs, their_waves, _), (_, ours, our_waves, _) = rules[batch]
        assert ours - theirs == 16 and their_waves == our_waves == 1, rules[batch]
    claim(post, "so the 4 query heads of a group request 4 times the cache")
    occupancy = readings.markdown_table((GENERATED / "decoding/occupancy/occupancy.md").read_text())
    for point, cells in occupancy.items():
        assert number(cells[1]) == 4 * number(cells[4]), (point, cells)


def _variants():
    """The recorded variants benchmark, which Part 7's variant costs and its window-cost reading both quote."""
    return json.loads((GENERATED / "masking/gpu_variants/variants.json").read_text())


def test_recording_backs_the_variant_costs():
    """Part 7's reading of the variants benchmark: the ratios it quotes come from the recording
    (``variant_ratio``); whether each claim holds, as the words around them say, is checked here."""
    post = read_post("masking-core.md")
    row = readings.variant_row
    window = "sliding window / dense causal"
    claim(post, f'The window runs at {{{{ variant_ratio("{window}", "fwd") }}}} the dense causal rate in the forward')
    claim(post, f'and {{{{ variant_ratio("{window}", "fwd_bwd") }}}} forward and backward, short of the 0.9× that')
    forward, both = row(window, "fwd"), row(window, "fwd_bwd")
    assert not forward["met"] and not both["met"] and forward["threshold"] == both["threshold"] == 0.9
    visited = "sliding window / dense causal on the pairs in the tiles visited"
    claim(post, f'the ratios are {{{{ variant_ratio("{visited}", "fwd", "ratios") }}}}')
    claim(post, "the difference is the work the tiling wastes at the band's edges")
    for mode in ("fwd", "fwd_bwd"):  # counting only the tiles visited raises the ratio: the edges' waste
        assert row(visited, mode, "ratios")["ratio"] > row(window, mode)["ratio"], mode
    flex = "sliding window / FlexAttention's"
    claim(post, f'Against FlexAttention\'s window, flashdoc\'s is {{{{ variant_ratio("{flex}", "fwd") }}}} as fast')
    assert row(flex, "fwd")["met"] and row(flex, "fwd_bwd")["met"]
    flex_keeps = "FlexAttention's sliding window / its dense causal"
    claim(post, "counted on the pairs inside the band, as the claim counts flashdoc's, it keeps")
    recorded = json.loads((GENERATED / "masking/gpu_variants/variants.json").read_text())
    for mode in ("fwd", "fwd_bwd"):  # both ratios divide rates counted on the band's pairs, each kernel by its own
        found = {r["name"]: r for r in recorded["rows"] if r["group"] == "window" and r["mode"] == mode}
        for peer in ("flashdoc", "flex"):
            (banded,) = [r for n, r in found.items() if n.startswith(f"{peer} window")]
            dense = found[f"{peer} causal"]
            assert banded["visited_pairs"] > banded["pairs"], banded  # the band's pairs, not the tiles'
            shown = row(flex_keeps, mode, "ratios") if peer == "flex" else row(window, mode)
            assert abs(shown["ratio"] - banded["tflops"] / dense["tflops"]) < 1e-9, (peer, mode, shown)
    claim(post, "On a band this narrow, neither tiled kernel comes near the 0.9× that")
    for mode in ("fwd", "fwd_bwd"):
        assert row(flex_keeps, mode, "ratios")["ratio"] < 0.85, mode
    softcap = "softcap / the same call without"
    claim(post, f'Softcap\'s forward runs at {{{{ variant_ratio("{softcap}", "fwd", causal=False) }}}} the rate')
    claim(post, "the mask is full, above the claim's 0.9×, and at")
    claim(post, "under the causal mask, within a few percent of the line: about as near as two timings of the same")
    # the full mask's ratio clears the line by more than a run's drift; the causal one sits within it
    assert row(softcap, "fwd", causal=False)["ratio"] >= 0.93, row(softcap, "fwd", causal=False)
    assert abs(row(softcap, "fwd", causal=True)["ratio"] - 0.9) < 0.03, row(softcap, "fwd", causal=True)
    claim(post, "The baselines are steady: every row is the median")
    claim(post, "of three rounds, timed in an order rotated every round")
    meta = json.loads((GENERATED / "masking/gpu_variants/variants.json").read_text())["meta"]
    assert meta["rounds"] == 3, meta.get("rounds")
    claim(post, '{{ variant_plain_ms("softcap", causal=False) }} with the full mask in the softcap rows and')
    claim(post, "under the causal mask, within 3% of each other. So the ratios measure the cap, not")
    for causal in (False, True):  # one call, timed in two groups of rows of the same run
        drift = readings.plain_forward_ms("softcap", causal) / readings.plain_forward_ms("dense", causal)
        assert abs(drift - 1) < 0.03, (causal, drift)
    claim(post, f'the ratios are {{{{ variant_ratio("{softcap}", "fwd_bwd", "ratios", causal=False) }}}}')
    claim(post, "the fixed maximum helps the forward alone, since the backward has no running")
    for causal in (False, True):  # the cap costs the step something: the backward's tanh
        assert row(softcap, "fwd_bwd", "ratios", causal=causal)["ratio"] < 1, causal
    alibi = "ALiBi / FlexAttention's score_mod"
    claim(post, f'flashdoc\'s is {{{{ variant_ratio("{alibi}", "fwd") }}}} as fast in the forward')
    assert row(alibi, "fwd")["met"] and row(alibi, "fwd_bwd")["met"]
    claim(post, "so that claim holds.")
    claim(post, 'The dense causal call it divides by took {{ variant_plain_ms("window") }} in the window rows')
    claim(post, "so this ratio does not rest on one odd timing.")
    window_ms, dense_ms = readings.plain_forward_ms("window"), readings.plain_forward_ms("dense")
    assert abs(window_ms / dense_ms - 1) < 0.05, (window_ms, dense_ms)  # one call, timed twice in the same run
    rows = _variants()["rows"]
    claim(post, "Both calls run on the same Hopper kernels")
    for r in rows:
        if r["group"] == "window" and r["peer"] == "flashdoc":
            assert r["kernels"]["fwd"] == "hopper", r
    claim(post, "ALiBi runs on the portable kernels")
    assert all(r["kernels"]["fwd"] == "portable" for r in rows if r["alibi"] and r["peer"] == "flashdoc")


def test_recording_backs_the_variants_setup_as_part7_states_it():
    """Part 7 describes the variants benchmark's run in words: its size, its variants' options and the tiles of the
    visited-pairs count, and that each ratio divides by a call timed in the variant's own group of rows."""
    post = read_post("masking-core.md")
    recorded = _variants()
    meta, rows = recorded["meta"], recorded["rows"]
    claim(post, "bf16, head dimension 128, one sequence of 16,384 tokens with 16 heads (16k")
    claim(post, "tokens at a hidden size of 2048)")
    assert (meta["dtype"], meta["tokens"], meta["hidden"]) == ("bfloat16", 16384, 2048), meta
    assert all((r["head_dim"], r["seqlen"], r["batch"], r["heads"]) == (128, 16384, 1, 16) for r in rows)
    claim(post, "a window `(1024, 0)`")
    claim(post, "with and without `softcap=50`")
    assert meta["window"] == [1024, 0] and meta["softcap"] == 50, meta
    claim(post, "for the dense kernels' tiles of 64 × 128")
    assert meta["tile"] == [64, 128], meta
    claim(post, "$\\min(i + 1, 1025)$ keys, about an eighth of the causal pairs at this length")
    pairs = {r["name"]: r["pairs"] for r in rows if r["group"] == "window" and r["peer"] == "flashdoc"}
    assert 1 / 9 < pairs["flashdoc window (1024, 0)"] / pairs["flashdoc causal"] < 1 / 7, pairs
    claim(post, "Each comparison's calls are timed side by side, in a group of rows of their own")
    rate = {(r["group"], r["name"], r["mode"], r["causal"]): r["tflops"] for r in rows if "tflops" in r}
    for mode in ("fwd", "fwd_bwd"):
        within = rate["window", "flashdoc window (1024, 0)", mode, True] / rate["window", "flashdoc causal", mode, True]
        assert abs(readings.variant_row("sliding window / dense causal", mode)["ratio"] - within) < 1e-9, mode
    for causal in (False, True):
        within = rate["softcap", "flashdoc softcap 50", "fwd", causal] / rate["softcap", "flashdoc", "fwd", causal]
        got = readings.variant_row("softcap / the same call without", "fwd", causal=causal)["ratio"]
        assert abs(got - within) < 1e-9, causal


def test_recording_backs_the_window_blocks_per_tile():
    """Part 7: a window of ``left`` keys visits ceil((left + BLOCK_M) / BLOCK_N) key blocks per tile, five in the
    figure (read from the recorded ranges of the sliding window's tiles past its start)."""
    post = read_post("masking-core.md")
    claim(post, "where its left edge falls in a block: five in the figure, whatever the sequence length")
    out = (GENERATED / "masking/visited_blocks/stdout.txt").read_text()
    _, block_m, block_n = (
        int(x) for x in re.search(r"(\d+) queries and keys, tiles of (\d+) queries, blocks of (\d+)", out).groups()
    )
    left = int(re.search(r"sliding window \((\d+), 0\)", out).group(1))
    ranges = [
        [int(x) for x in row] for row in re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", out, re.M)
    ]
    past_start = [(hi - lo) // block_n for i, lo, _, _, hi in ranges if i * block_m >= left]
    expected = -(-(left + block_m) // block_n)
    assert past_start and expected == 5 and all(n in (expected, expected + 1) for n in past_start), past_start


def test_recording_backs_the_causal_blocks_skipped_and_masked():
    """Part 7: under the causal mask about half the key blocks are skipped and each query tile masks one block (the
    visited-blocks table, against the full matrix's blocks)."""
    post = read_post("masking-core.md")
    claim(post, "about half the blocks are skipped, and all but one per tile run mask-free")
    out = (GENERATED / "masking/visited_blocks/stdout.txt").read_text()
    queries, block_m = (int(x) for x in re.search(r"(\d+) queries and keys, tiles of (\d+) queries", out).groups())
    (masks,) = [block for block in out.split("\n\n") if block.startswith("| mask |")]  # the first of two tables
    visited = {mask: (int(cells[0]), int(cells[1])) for mask, cells in readings.markdown_table(masks).items()}
    (full, _), (causal, masked) = visited["full"], visited["causal"]
    assert 0.4 <= 1 - causal / full <= 0.6, visited
    assert masked == queries // block_m, (masked, queries, block_m)


def test_recording_backs_the_window_cost_floor():
    """Part 7's reading of the window-cost table: below about 1,024 keys forward and backward get cheaper by far
    less than the window (an eighth of the keys keeps well over an eighth of the time), while the forward's kernel,
    timed alone, shrinks at every halving of the window by less than half, the call following it at every width but
    the one the post names, and wider windows still cost more; a step takes about a millisecond at these widths;
    and the 1,024-key call's two timings it compares, this table's and the variants benchmark's, lie within 10% of
    each other."""
    post = read_post("masking-core.md")
    claim(post, "Below a window of about 1,024 keys a training step, forward and backward, gets cheaper by far less")
    claim(post, "window: an eighth of the keys, 128, took {{ window_step_ms(128) }} against {{ window_step_ms(1024) }}")
    rows = readings.window_cost_rows()
    ratio = {w: both for w, (_, _, both) in rows.items()}
    forward_ms = {w: fwd for w, (fwd, _, _) in rows.items()}
    both_ms = {w: both for w, (_, both, _) in rows.items()}
    narrow_widths = [w for w in rows if w <= 1024]
    # from 1,024 keys down to 256 the forward's kernel sheds time at every halving of the window, but less than half
    # of it (each program's fixed cost stays); the forward and backward shed little of their own
    claim(post, "So does the forward: it shrinks at every halving of the window down to 128 keys, but each")
    claim(post, "halving of the window saves its kernel, timed alone as below, less than half its time.")
    kernel_ms = {w: readings.fixed_cost_program("forward", w)["kernel_us"] / 1e3 for w in narrow_widths}
    for w in (256, 512, 1024):
        assert 0.5 * kernel_ms[w] < kernel_ms[w // 2] < kernel_ms[w], kernel_ms
    claim(post, "At most widths the call")
    claim(post, 'takes about as long as its kernel (at 128 keys {{ window_forward_ms(128, "kernel") }} against')
    follows = {w: 0.8 < forward_ms[w] / kernel_ms[w] < 1.25 for w in narrow_widths}
    assert follows[128] and sum(follows.values()) >= len(follows) - 1, (forward_ms, kernel_ms)
    claim(post, "but with the host in the loop any width's")
    # an eighth of the keys saves far less than seven eighths of the time: each program's fixed cost and the
    # host's work stay
    assert both_ms[128] > 0.3 * both_ms[1024], both_ms
    narrow = [ratio[w] for w in narrow_widths]
    assert len(narrow) >= 4 and ratio[2048] > max(narrow) + 0.05 and ratio[4096] > ratio[2048], ratio
    # the kernels shrink more below 1,024 keys; the step at 128 keys is partly the host's (above its kernels,
    # each timed alone, which overstates the GPU's time: the step runs dQ beside dK/dV)
    claim(post, "step's kernels shrink more: each timed alone")
    claim(post, "a step's three take {{ window_kernels_ms(128) }} at 128 keys and")
    claim(post, "{{ window_kernels_ms(1024) }} at 1,024, yet the step at 128 keys took {{ window_step_ms(128) }}")
    claim(post, 'times at {{ host_time_us("forward + backward") }} a call on this machine. The step at 128 keys')
    claim(post, "took longer than either that or its kernels, and no longer than the two added together")
    host_ms = readings.host_time_us_of("forward + backward") / 1e3
    step, added = both_ms[128], host_ms + readings.window_kernels_us(128) / 1e3
    assert step > host_ms and step > readings.window_kernels_us(128) / 1e3, (step, host_ms)
    # the sum with some slack: the kernels timed alone and the host's time come from other snippets' runs
    assert step <= 1.1 * added, (step, added)
    kernels = {w: readings.window_kernels_us(w) / 1e3 for w in (128, 1024)}
    assert kernels[128] < 0.5 * kernels[1024], kernels
    # the step stays above its kernels and sheds less of its time than they do from 1,024 keys to 128
    assert both_ms[1024] / both_ms[128] < kernels[1024] / kernels[128], (both_ms, kernels)
    claim(post, "at these widths a training step takes about a millisecond")
    assert all(0.5 <= both_ms[w] <= 2 for w in narrow_widths), both_ms
    claim(post, 'The 1,024-key call took {{ window_call_ms("window_cost") }} here')
    claim(post, 'and {{ window_call_ms("variants") }} in the benchmark')
    claim(post, "recorded minutes apart on the same GPU: within 10% of each other.")
    here, benchmark = readings.window_call("window_cost"), readings.window_call("variants")
    assert abs(here / benchmark - 1) < 0.1, (here, benchmark)


def test_recording_backs_what_a_program_costs_besides_its_tiles():
    """Part 7's reading of the window fixed-cost fit: the fixed cost, worth a few tiles, weighs more as a window
    narrows and little under dense causal attention; per tile the backward keeps pace with causal and the forward
    falls behind; and the window's rate on the tiles it visits (the variants benchmark) falls below what its tiles
    alone would give, the fixed cost outweighing the tiles' lost speed, where they lose any, in every kernel."""
    post = read_post("masking-core.md")
    kernels = ("forward", "dK/dV", "dQ")
    fit, share = readings.fixed_cost_fit, readings.fixed_share
    claim(post, "Even counted on the tiles it visits, the window falls short of the dense causal rate.")
    visited = {
        mode: readings.variant_row("sliding window / dense causal on the pairs in the tiles visited", mode, "ratios")
        for mode in ("fwd", "fwd_bwd")
    }
    assert all(row["ratio"] < 1 for row in visited.values()), visited
    claim(post, "a narrow window's program streams a few tiles, so the same cost weighs more")
    widths = sorted(fit("forward")["shares"], key=int)
    for kernel in kernels:
        shares = [share(kernel, int(w)) for w in widths]
        assert shares == sorted(shares, reverse=True), (kernel, shares)  # the narrower, the larger its share
        assert share(kernel, readings.WINDOW) > 2 * share(kernel, "causal"), kernel
    claim(post, "The intercepts are the fixed costs, each worth a few tiles:")
    for kernel in kernels:
        assert 2 <= fit(kernel)["fixed_us"] / fit(kernel)["tile_us"] <= 6, (kernel, fit(kernel))
    claim(post, 'At the 1,024-key window a dK/dV program streams {{ fixed_cost("dK/dV", "tiles") }} of')
    assert readings.WINDOW == 1024
    claim(post, "windows of 128 to 4,096 keys (dots)")
    claim(post, "(stars; the forward's in 64-key tiles)")
    assert (int(widths[0]), int(widths[-1])) == (128, 4096), widths
    assert readings.fixed_cost_program("forward", 1024)["config"][1] == 64
    claim(post, "under dense causal, a few percent.")
    assert all(share(kernel, "causal") < 0.07 for kernel in kernels), [share(k, "causal") for k in kernels]
    claim(post, "Per tile the window keeps pace in the backward and falls behind in the forward")
    speed = {kernel: readings.tile_speed_vs_causal(kernel) for kernel in kernels}
    assert 0.85 <= speed["forward"] < 0.95, speed
    claim(post, "The forward's tiles are slowed most.")
    assert speed["forward"] == min(speed.values()), speed
    claim(post, "streams keys in tiles of 64 where dense causal's streams 128")
    claim(post, "dK/dV and dQ, whose tiles are the same either way, run theirs about as fast as causal's or faster")
    assert speed["dK/dV"] >= 0.98 and speed["dQ"] >= 0.98, speed
    claim(post, "part of the cost a tile.")
    configs = {k: [readings.fixed_cost_program(k, w)["config"] for w in (readings.WINDOW, "causal")] for k in kernels}
    assert [c[1] for c in configs["forward"]] == [64, 128], configs
    assert configs["dK/dV"][0] == configs["dK/dV"][1] and configs["dQ"][0] == configs["dQ"][1], configs
    claim(post, "what holds a narrow window below the dense causal rate is mostly what its programs do")
    assert visited["fwd"]["ratio"] < speed["forward"], (visited["fwd"], speed)
    assert visited["fwd_bwd"]["ratio"] < min(speed.values()), (visited["fwd_bwd"], speed)
    claim(post, "cost's share of each kernel's programs exceeds what their tiles lose in speed, where they lose any.")
    for kernel in kernels:  # the fixed cost weighs more than the slower tiles, kernel by kernel
        assert share(kernel, readings.WINDOW) > 1 - speed[kernel], (kernel, share(kernel, readings.WINDOW), speed)


def test_recording_backs_what_packing_buys(results):
    """Part 10's reading of the varlen benchmark: its ratios come from the recording (``varlen_ratio``); the
    words around them are checked here, and the reason the comparison with equal sequences favours the packed
    batch against Part 6's recorded table."""
    post = read_post("variable-length-batches.md")
    over = readings.varlen_over
    claim(post, 'gets through the packed batch at {{ varlen_ratio("flashdoc-dense", "fwd", False) }} the rate')
    claim(post, 'The comparison favours the packed batch, though: {{ varlen_long("share") }} of its attention FLOPs')
    count, share = readings.varlen_long_sequences()
    lengths, dense = readings.varlen_lengths()
    assert share > 0.5 and 0 < count < len(lengths) / 2, (count, share)  # most of the work, in a few sequences
    claim(post, "table shows longer sequences running at a higher rate, most of all under the causal mask")
    rate = {  # flashdoc's forward in Part 6's table at the varlen benchmark's head dim and dtype
        (r["seqlen"], r["causal"]): r["tflops"]
        for r in results["records"]
        if r["kind"] == "speed"
        and r["peer"] == "flashdoc"
        and r["status"] == "ok"
        and (r["mode"], r["dtype"], r["head_dim"]) == ("fwd", "bf16", 128)
    }
    longer = max(n for n, _ in rate)
    gain = {causal: rate[(longer, causal)] / rate[(dense, causal)] for causal in (False, True)}
    assert 1 < gain[False] < gain[True], gain
    claim(post, "a batch of mixed lengths to run about as fast as equal sequences of")
    assert all(over("flashdoc-dense", "fwd", causal) >= 0.97 for causal in (False, True))
    claim(post, 'document mask flashdoc is {{ varlen_ratio("flex", "fwd", False) }} as fast in the forward')
    assert over("flex", "fwd", False) > 1 and over("flex", "fwd_bwd", False) > 1
    claim(post, 'Against SDPA on the padded batch it is {{ varlen_ratio("sdpa-flash", "fwd", False) }} as fast')
    assert over("sdpa-flash", "fwd", False) > 1
    claim(post, 'the padded batch holds {{ varlen_padded("tokens") }} the real tokens')
    assert readings.varlen_padding_factor("tokens") == len(lengths) * max(lengths) / sum(lengths)
    claim(post, "forward and backward together run at {{ varlen_dense_range() }} that rate")
    assert min(over("flashdoc-dense", "fwd_bwd", causal) for causal in (False, True)) >= 0.95


def test_recording_backs_how_the_varlen_benchmark_counts_and_what_padding_costs_sdpa():
    """Part 10: the methods that run the 40 sequences are credited with one count of useful FLOPs and the dense
    kernels with their own; the padded batch's attention FLOPs over the real ones (``varlen_padded``) explain
    part of SDPA's gap, and SDPA's kernel, running at a lower rate, the rest."""
    post = read_post("variable-length-batches.md")
    recording = json.loads((GENERATED / "varlen/gpu_rate/results.json").read_text())
    records, lengths = recording["records"], recording["meta"]["lengths"]
    said = claim(post, "Every method that runs the batch is credited with the same useful FLOPs")
    claim(post, "the dense kernels, which have no padding to waste, are credited with their own")
    for mode in ("fwd", "fwd_bwd"):
        for causal in (False, True):
            credited = {r["method"]: r["flops"] for r in records if r["mode"] == mode and r["causal"] == causal}
            on_the_batch = {credited[m] for m in ("flashdoc-varlen", "flex", "sdpa-flash")}
            assert len(on_the_batch) == 1 and credited["flashdoc-dense"] not in on_the_batch, (said, mode, causal)
    padded = len(lengths) * max(lengths) ** 2 / sum(n * n for n in lengths)
    assert readings.varlen_padding_factor("flops") == padded
    claim(post, 'since attention\'s cost grows with the square of each padded length, {{ varlen_padded("flops") }} the')
    claim(post, "the rest of the gap is SDPA's kernel, which runs at a lower rate than flashdoc's")
    assert readings.varlen_over("sdpa-flash", "fwd", False) > padded


def test_recording_backs_the_backward_crossover_reading():
    """Part 9's reading of the cost model: a causal zigzag step doubles the crossover, and the backward's transfer
    hides from fewer tokens per rank than the forward's, on every link."""
    post = read_post("attention-across-gpus.md")
    claim(post, "A causal zigzag step computes half a block, which doubles the crossover.")
    claim(post, "so its transfer hides from somewhat fewer tokens per rank than the forward's")
    rows = re.findall(
        r"^\| ([^|]+) \| (forward|backward) \| ([^|]+) \| ([\d,]+) \|$",
        (GENERATED / "parallel/cost_model/crossover.md").read_text(),
        re.M,
    )
    tokens = {(link, step, block): number(n) for link, step, block, n in rows}
    links = {link for link, _, _ in tokens}
    assert len(links) == 2, tokens
    for link in links:
        for step in ("forward", "backward"):
            assert abs(tokens[link, step, "causal, zigzag"] / tokens[link, step, "full"] - 2) < 0.01, (link, step)
        for block in ("full", "causal, zigzag"):
            backward, forward = tokens[link, "backward", block], tokens[link, "forward", block]
            assert 0.7 * forward < backward < forward, (link, block, backward, forward)
    claim(post, "On NVLink, a few thousand tokens per rank are enough to hide the transfer; over PCIe it takes several")
    by_link = {link: [n for (k, _, _), n in tokens.items() if k == link] for link in links}
    nvlink, pcie = (by_link[next(link for link in links if link.startswith(name))] for name in ("NVLink", "PCIe"))
    assert 1000 <= min(nvlink) and max(nvlink) < 10000, nvlink
    assert all(3 <= p / n <= 10 for p, n in zip(sorted(pcie), sorted(nvlink))), (pcie, nvlink)


def two_gpu_rows() -> list:
    """Part 9's two-GPU table: (N, tokens per rank, mode, mask, NVLink efficiency, PCIe efficiency) a row."""
    return re.findall(
        r"^\| ([\dk]+) \| ([\dk]+) \| (fwd|fwd\+bwd) \| ([^|]+) \| \d+x \| ([\d.]+) \| ([\d.]+) \|$",
        (GENERATED / "parallel/cost_model/two_gpus.md").read_text(),
        re.M,
    )


def test_recording_backs_the_ring_models_last_hop():
    """Part 9's reading of the two-GPU table: the fwd rows reach 1.000 on NVLink, and the fwd+bwd rows stay below
    it (the gradient sums' last hop) by less as the tokens per rank grow."""
    post = read_post("attention-across-gpus.md")
    claim(post, "On NVLink the fwd rows reach 1.000 and the fwd+bwd rows stay a little below")
    claim(post, "That hop's share shrinks as the tokens per rank grow.")
    rows = two_gpu_rows()
    assert len(rows) == 12, rows
    nvlink = {}
    for _, per_rank, mode, mask, on_nvlink, _ in rows:
        nvlink.setdefault((mode, mask), []).append((number(per_rank.rstrip("k")), float(on_nvlink)))
    for (mode, mask), points in nvlink.items():
        efficiencies = [e for _, e in sorted(points)]
        if mode == "fwd":
            assert efficiencies == [1.0] * len(efficiencies), (mask, efficiencies)
        else:
            assert all(e < 1.0 for e in efficiencies), (mask, efficiencies)
            assert efficiencies == sorted(efficiencies), (mask, efficiencies)


def test_recording_backs_the_ring_model_over_pcie():
    """Part 9: over PCIe three of the four 32k rows fall below NVLink's (the full forward stays at 1.000), and the
    causal steps' 16k tokens per rank are below both of PCIe's causal crossovers, forward and backward."""
    said = claim(post := read_post("attention-across-gpus.md"), "Over PCIe three of the four 32k rows fall further")
    claim(post, "the causal steps' 16k tokens per rank are below both of PCIe's causal crossovers")
    rows = [row[2:] for row in two_gpu_rows() if row[:2] == ("32k", "16k")]
    assert len(rows) == 4, rows
    fell = [(mode, mask) for mode, mask, nvlink, pcie in rows if float(pcie) < float(nvlink)]
    assert len(fell) == 3 and ("fwd", "full") not in fell, (said, rows)
    causal_crossovers = [
        number(tokens)
        for tokens in re.findall(
            r"^\| PCIe[^|]* \| (?:forward|backward) \| causal[^|]* \| ([\d,]+) \|$",
            (GENERATED / "parallel/cost_model/crossover.md").read_text(),
            re.M,
        )
    ]
    assert len(causal_crossovers) == 2 and all(16 * 1024 < c for c in causal_crossovers), (said, causal_crossovers)


def test_recording_backs_the_window_ring_reading():
    """Part 9's reading of the windowed ring: the contiguous layout is done after two of four steps, zigzag needs
    all four in more kernel calls, and the contiguous layout is about as even as zigzag, rank 0 apart."""
    post = read_post("attention-across-gpus.md")
    claim(post, "the contiguous layout is about as even as zigzag (only rank 0 has no earlier shard to read)")
    claim(post, "zigzag's chunks have neighbours at both ends of the ring and need every step")
    text = (GENERATED / "parallel/window_schedule/stdout.txt").read_text()
    runs = dict(re.findall(r"^(\w+): (\d+) of 4 steps$", text, re.M))
    assert runs == {"contiguous": "2", "zigzag": "4"}, runs
    pairs, calls = {}, {}
    for layout, p, c in re.findall(
        r"^(\w+): \d+ of 4 steps\n  pairs per rank \[([\d, ]+)\], kernel calls per rank \[([\d, ]+)\]$", text, re.M
    ):
        pairs[layout], calls[layout] = ([int(x) for x in s.split(", ")] for s in (p, c))
    assert pairs["contiguous"][0] < min(pairs["contiguous"][1:]) and len(set(pairs["contiguous"][1:])) == 1, pairs
    spread = {layout: max(p) - min(p) for layout, p in pairs.items()}
    assert abs(spread["contiguous"] - spread["zigzag"]) <= 0.1 * max(pairs["zigzag"]), pairs
    assert max(calls["contiguous"]) < min(calls["zigzag"]), calls


def _ran(results):
    """{(kernel, dtype, head_dim, causal, N): the config flashdoc ran} from the benchmark's record of its tiles."""
    return {
        (p["kernel"], p["dtype"], p["head_dim"], p["causal"], p["seq_bucket"]): p for p in results["flashdoc_autotuned"]
    }


def _config_rows(path):
    """A recorded markdown table whose first cells repeat, as a list of {header: cell}."""
    lines = [line for line in (GENERATED / path).read_text().splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def test_recording_backs_every_row_ran_the_hopper_kernels_and_where_the_fused_backward_ran(results, post):
    """Parts 5 and 6 say which of flashdoc's kernels the benchmark ran: the Hopper (Gluon) kernels in every row; at
    head dimension 64 the fused backward, except under the mask at 512 and 1k tokens, where the split Hopper kernels
    run; at 128 and 256 the split Hopper kernels."""
    part5 = read_post("flashattention-on-hopper.md")
    claim(post, 'On this {{ gpu_card("triton/benchmark") }} every row ran the Hopper kernels')
    claim(
        post, "so at head dimension 64 (without the mask at every length, under it from 2k tokens) its backward is the"
    )
    claim(post, "at 64, where the fused backward runs in every row")
    claim(part5, "where this kernel is flashdoc's backward at head dimension 64 (at every length without the mask,")
    claim(part5, "and under it from 2k tokens), the forward and backward from 2k tokens up run at")
    claim(
        part5,
        "In the benchmark they are flashdoc's backward at head dimensions 128 and 256, and at 64 the fused kernel, "
        "except in the causal rows at 512 and 1k tokens, which run the split kernels.",
    )
    ran = _ran(results)
    sweep = results["sweep"]
    assert ran and all(p["gluon"] for p in ran.values()), [k for k, p in ran.items() if not p["gluon"]]
    for dtype in sweep["dtypes"]:
        for d in sweep["head_dims"]:
            for causal in sweep["causals"]:
                for n in sweep["seqlens"]:
                    assert ("fwd", dtype, d, causal, n) in ran, (dtype, d, causal, n)
                    fused = ran[("dkdv", dtype, d, causal, n)]["fused_dq"]
                    split = d != 64 or (causal and n < 2048)
                    assert fused is not split, (dtype, d, causal, n, fused)
                    assert (("dq", dtype, d, causal, n) in ran) is split, (dtype, d, causal, n)


def test_recording_backs_the_hopper_forward_partitions(results):
    """Part 5's forward: three consumers of 64 query rows (an item of 192 rows) at head dimensions 64 and 128, two
    at 256 with 64-key tiles and the output in the query tile; and the producer's registers, from the registers per
    SM that the roofline recorded."""
    part5 = read_post("flashattention-on-hopper.md")
    claim(part5, "an item is 192 rows and there are four partitions")
    claim(part5, "three **consumer** warpgroups of 64 query rows each, with 160 registers per thread")
    claim(part5, "flashdoc's Hopper forward runs three consumers (two at head dimension 256)")
    claim(part5, "which frees room for 64-key tiles")
    forward = _config_rows("triton/tile_configs/hopper_forward.md")
    assert {row["head dim"] for row in forward} == {"64", "128", "256"}, forward
    for row in forward:
        consumers, rows_each = int(row["consumers"]), int(row["rows per consumer"])
        if row["head dim"] in ("64", "128"):
            assert (consumers, rows_each, consumers * rows_each) == (3, 64, 192), row
        else:
            assert (consumers, row["keys per tile"]) == (2, "64"), row
        assert row["persistent"] == "yes" and row["ring slots"] == "2", row
    claim(part5, "65,536 per SM less three warpgroups' 128 threads × 160: 32 per thread")
    per_sm = number(table("flashattention/gpu_roofline/hardware.md")["registers per SM"][0])
    assert per_sm == 65536 and (per_sm - 3 * 128 * 160) / 128 == 32, per_sm
    assert "[160, 160, 160]" in (ROOT / "flashdoc/kernels/forward_hopper.py").read_text()


def test_recording_backs_the_hopper_backward_tables(results):
    """Part 5's backward: the dK/dV program's 128 keys in two consumers' 64 (64 for the wide kernel's pair), 64-row
    query tiles, the dQ kernel's 32-key tiles at 256, and the one head dimension and mask with no split row (64
    without the mask), which the fused kernel covers."""
    part5 = read_post("flashattention-on-hopper.md")
    claim(part5, "The $dK$/$dV$ program owns 128 keys of one key/value head.")
    claim(part5, "then streams $Q$ and $dO$ tiles of 64 query rows through a ring of two shared-memory slots")
    claim(part5, "Each of its two consumers owns 64 of the keys")
    claim(part5, "gives one program's 64 keys to both consumers instead")
    claim(part5, "and the $dQ$ kernel, which needs no change at 256 (32-key")
    claim(part5, "a head dimension and mask with no $dK$/$dV$ or $dQ$ row stays on the portable kernels")
    claim(part5, "(at head dimension 64 without the mask, only when the call asks for determinism")
    backward = _config_rows("triton/tile_configs/hopper_backward.md")
    kernels = ("dK/dV", "dQ", "fused dK, dV, dQ")
    keys = {kernel: {(r["head dim"], r["causal"]) for r in backward if r["kernel"] == kernel} for kernel in kernels}
    every = {(d, c) for d in ("64", "128", "256") for c in ("no", "yes")}
    assert every - keys["dK/dV"] == every - keys["dQ"] == {("64", "no")}, keys
    assert ("64", "no") in keys["fused dK, dV, dQ"], keys
    for r in backward:
        assert (number(r["query rows"]), r["ring slots"], r["consumers"]) == (64, "2", "2"), r
        if r["kernel"] == "dK/dV":  # per consumer at 64 and 128 (128 a program), shared by both at 256
            wide = r["head dim"] == "256"
            assert r["keys"] == ("64 shared by both" if wide else "64 per consumer"), r
            assert r["query rows"] == "64 per streamed tile", r
        if r["kernel"] == "dQ":
            assert r["keys"] == ("32" if r["head dim"] == "256" else "128") + " per streamed tile", r


def test_recording_backs_the_step_profile_reading(post):
    """Part 6's reading of the profiled training call: the three largest kernels are the Hopper ones, dK/dV the
    largest; the two streams shorten the backward only a little below its kernels' sum; the fill is a microsecond."""
    claim(post, "All three big kernels here are the Hopper ones.")
    claim(post, "with four of the seven products, takes the largest share")
    claim(post, "is only a little shorter than its three kernels' times added up")
    claim(post, "The `FillFunctor` row, a microsecond,")
    profile = table("triton/step_profile/step_profile.md")
    ms = {name.strip("`"): number(cells[0]) for name, cells in profile.items()}
    span = ms.pop("the backward, first kernel's start to last kernel's end (median)")
    summed = ms.pop("the backward's three kernels, one after the other")
    biggest = sorted(ms, key=ms.get, reverse=True)
    assert [name.endswith("_hopper") for name in biggest] == [True] * 3 + [False] * (len(biggest) - 3), biggest
    assert biggest[0] == "_attn_bwd_dkdv_hopper", biggest
    assert 0.85 * summed < span < summed, (span, summed)  # shorter, by much less than dQ's time
    (fill,) = [ms[name] for name in ms if "FillFunctor" in name]
    assert fill <= 0.002, fill


def test_recording_backs_close_to_cudnn_except_two_configurations(results, post):
    """Part 6's summary: against cuDNN from 2k tokens up flashdoc is ahead or level (a geometric mean of at least
    0.97) in every configuration but the forward at 256 and the forward and backward at 128, both without the
    mask."""
    claim(post, "and close to cuDNN: ahead or level in most configurations, behind without the mask at head dimension")
    claim(post, "128 with the backward and at 256 in the forward.")
    behind = {
        (mode, d, causal)
        for mode in ("fwd", "fwd_bwd")
        for d in (64, 128, 256)
        for causal in (False, True)
        if any(c["geomean"] < 0.97 for c in rows(results, mode, "sdpa-cudnn", (d,), (causal,)))
    }
    assert behind == {("fwd", 256, False), ("fwd_bwd", 128, False)}, behind
    claim(post, "though behind in a few rows")
    speed = report.speed_table(results)
    short_of = [
        row["flashdoc"] / row["sdpa-cudnn"]
        for (mode, _, d, _, n), row in speed.items()
        if mode == "fwd" and d in (64, 128) and n >= 2048
    ]
    assert 0 < sum(r < 1 for r in short_of) <= len(short_of) / 4, short_of


def test_recording_backs_the_memory_reading(results, post):
    """Part 6: flashdoc's peak memory equals the FlashAttention-2 backend's at every length; naive attention is
    measured until it runs out, with the figure's batch, heads and head dimension; and Part 2's table, which the
    seed-post warning cites, grows with every doubling until naive attention no longer fits."""
    claim(post, "It uses the same memory as the FlashAttention-2 backend.")
    claim(post, "for naive attention (until it runs out)")
    claim(post, "(batch 1, 32 heads, d = 128)")
    memory = {}
    for r in results["records"]:
        if r["kind"] == "memory":
            memory.setdefault(r["peer"], {})[r["seqlen"]] = r
            assert (r["batch"], r["heads"], r["head_dim"], r["causal"]) == (1, 32, 128, True), r
    for n, ours in memory["flashdoc"].items():
        theirs = memory["sdpa-flash"][n]["peak_extra_bytes"]
        assert abs(ours["peak_extra_bytes"] / theirs - 1) < 0.01, (n, ours, theirs)
    naive = [memory["naive"][n] for n in sorted(memory["naive"])]
    failed = [r for r in naive if r["status"] != "ok"]
    assert failed and failed[0]["reason"] == "out of memory", failed
    claim(post, "shows it growing with every doubling of $N$ until naive attention no longer fits at all")
    part2 = [cells for _, cells in table("flashattention/gpu_memory/memory.md").items()]
    ratios = [number(cells[2]) for cells in part2 if cells[2] != "—"]
    assert len(ratios) >= 4 and all(a < b for a, b in zip(ratios, ratios[1:])), ratios
    assert part2[len(ratios)][0] == "out of memory", part2


def test_recording_backs_the_benchmark_method(results, post):
    """Part 6's method, against the recorded run: the shapes and FLOPs it counts, the quantiles, two passes keeping
    the lower median, a pinned CPU, at least ten timed calls, and a cold first call."""
    from benchmarks import timing

    claim(post, "The benchmark uses 16k tokens per batch (batch $= 16384/N$) and a hidden size of 2048")
    claim(post, "FLOPs $= 4 \\cdot B \\cdot H \\cdot N^2 \\cdot d$ for the forward, halved when causal, and 3.5 times")
    sweep = results["sweep"]
    assert (sweep["total_tokens"], sweep["hidden"]) == (16384, 2048), sweep
    speed = [r for r in results["records"] if r["kind"] == "speed" and r["status"] == "ok"]
    for r in speed:
        assert r["batch"] * r["seqlen"] == 16384 and r["heads"] * r["head_dim"] == 2048, r
        flops = 4 * r["batch"] * r["heads"] * r["seqlen"] ** 2 * r["head_dim"]
        flops *= (0.5 if r["causal"] else 1) * (3.5 if r["mode"] == "fwd_bwd" else 1)
        assert r["flops"] == flops, r
    claim(post, "The benchmark asks for the median and the 20th and 80th percentiles")
    assert results["quantiles"] == [0.5, 0.2, 0.8], results["quantiles"]
    claim(post, "so that about ten calls are timed even for the slowest rows")
    assert timing.MIN_REPS == 10
    claim(post, "each row keeps the lower of its two medians (both are in `results.json`)")
    assert sweep["passes"] == 2 and all(len(r["ms_passes"]) == 2 and r["ms"] == min(r["ms_passes"]) for r in speed)
    claim(post, "The timing process runs on one CPU, every thread of it.")
    assert sweep["pin_cpu"] and results["pinned_cpu"] is not None, results["pinned_cpu"]
    claim(post, "records of kind `first_call`")
    (first,) = [r for r in results["records"] if r["kind"] == "first_call"]
    assert first["peer"] == "flashdoc" and first["cold_process"] and first["status"] == "ok", first


def test_recording_backs_float16_twins_run_the_same_configs(results, post):
    """Part 6: each bfloat16 row's float16 twin runs the same kernels in the same configs."""
    claim(post, "Each bfloat16 row has a float16 twin, which runs the same kernels in the same configs.")
    configs = {}
    for p in results["flashdoc_autotuned"]:
        configs.setdefault(tuple(sorted((k, v) for k, v in p.items() if k != "dtype")), set()).add(p["dtype"])
    assert configs and all(dtypes == {"bf16", "fp16"} for dtypes in configs.values()), configs


def test_recording_backs_the_numpy_example_as_part1_reads_it():
    post = read_post("attention-deep-dive.md")
    claim(post, "Each row of weights sums to one, and the output has one row per query.")
    out = (GENERATED / "attention/numpy_attention/stdout.txt").read_text()
    queries = int(re.search(r"^Q: \((\d+), \d+\)", out, re.M).group(1))
    assert "Each row sums to [1. 1.]" in out and re.search(rf"^Output: \({queries}, \d+\)$", out, re.M), out
    claim(post, "since $e^{5} / e^{0} \\approx 148$")
    assert round(math.exp(5)) == 148


def test_recording_backs_the_variances_and_the_scaled_rows():
    """Part 1's reading of the saturation table: the unscaled variance tracks d_k, the scaled one stays near 1; the
    unscaled rows drift towards one-hot while the scaled rows' largest weight stays near a tenth, none saturated."""
    post = read_post("attention-deep-dive.md")
    rows_ = saturation_by_dk()
    dims = sorted(rows_, key=int)
    said = claim(post, "without the scale the variance tracks $d_k$, with it the variance stays near $1$")
    for d in dims:
        assert 0.75 <= float(rows_[d][0]) / int(d) <= 1.25, (said, d, rows_[d])
        assert 0.75 <= float(rows_[d][1]) <= 1.25, (said, d, rows_[d])
    said = claim(post, "unscaled, the rows of the softmax drift towards one-hot as $d_k$ grows")
    unscaled = [float(rows_[d][2]) for d in dims]
    assert all(a < b for a, b in zip(unscaled, unscaled[1:])) and unscaled[-1] > 0.9, (said, unscaled)
    said = claim(post, "the scaled rows barely change: their largest weight stays near a tenth at every dimension")
    scaled = [float(rows_[d][3]) for d in dims]
    assert all(0.07 <= w <= 0.13 for w in scaled), (said, scaled)
    assert all(number(rows_[d][5]) == 0 for d in dims), (said, [rows_[d][5] for d in dims])
    said = claim(post, "The scale removes almost all of the dependence on $d_k$")
    grads = [float(rows_[d][7]) for d in dims]
    assert max(grads) / min(grads) < 1.5 and max(scaled) / min(scaled) < 1.5, (said, grads, scaled)


def test_recording_backs_the_causal_map_and_the_mask_checks():
    post = read_post("attention-deep-dive.md")
    maps = (GENERATED / "site/attention_maps/stdout.txt").read_text()
    claim(
        post, "Under the mask the upper triangle is exactly zero, and the first query, which sees only itself, puts all"
    )
    assert "causal weights above the diagonal are exactly 0: True" in maps, maps
    assert "query 0 under the causal mask puts weight 1.0 on key 0" in maps, maps
    claim(post, "One head of 24 tokens")
    assert re.search(r"^N, d = 24, ", (ROOT / "snippets/site/attention_maps.py").read_text(), re.M)
    out = (GENERATED / "attention/transformer/stdout.txt").read_text()
    claim(post, "the module above uses the same ones and matches PyTorch's")
    assert "equals nn.MultiheadAttention (causal): True" in out, out
    assert "same as F.scaled_dot_product_attention(attn_mask=mask): True" in out, out
    claim(post, "`(batch, heads, n, m)`: it fails as printed below")
    assert re.search(r"\(batch, n, m\) mask against \(batch, heads, n, m\) scores: The size of tensor", out), out
    assert "weight on padded keys of example 2: 0.0" in out, out


def test_recording_backs_what_autograd_keeps_of_the_scores():
    """Part 1: the score matrix is exactly N^2 x 4 bytes; autograd keeps one N x N matrix (P), and the rest of what
    it keeps is Q, K and V (3 N d floats); the seed's 256 MB and 8 GB are 256 MiB and 8 GiB."""
    post = read_post("attention-deep-dive.md")
    rows_ = table("attention/score_memory/score_memory.md")
    d = int(re.search(r"^d = (\d+)", (ROOT / "snippets/attention/score_memory.py").read_text(), re.M).group(1))
    claim(post, "The allocation is exactly $N^2 \\times 4$ bytes")
    claim(post, "The last column shows that it is the only one kept; the rest is $Q$, $K$ and $V$.")
    for n, (s_bytes, exact, s_mib, kept, square) in rows_.items():
        n = int(n)
        assert number(s_bytes) == n * n * 4 and exact == "True", (n, s_bytes)
        assert number(square) == number(s_mib), (n, square, s_mib)
        assert abs(number(kept) - number(square) - 3 * n * d * 4 / 2**20) <= 0.051, (n, kept, square)
    claim(post, 'it wrote "256 MB" and "8 GB"; the exact figures are 256 MiB and 8 GiB')
    text = (GENERATED / "attention/score_memory/seed_arithmetic.txt").read_text()
    assert text.startswith("N = 8,192: 32 heads x 256 MiB = 8 GiB of scores per layer"), text


# Part 2: the hardware, the roofline, the worked example, the seed's code and the memory


def test_recording_backs_one_block_gets_about_a_whole_chip_over_the_sm_count():
    said = claim(
        read_post("flashattention-explained.md"),
        "smaller than the whole chip's by about the number of SMs",
    )
    hw = table("flashattention/gpu_roofline/hardware.md")
    chip_kib = number(hw["shared memory, all SMs together"][0]) * 1024
    block_kib = number(hw["shared memory one block can use"][0])
    sms = number(hw["streaming multiprocessors (SMs)"][0])
    assert abs(chip_kib / block_kib / sms - 1) < 0.1, (said, chip_kib, block_kib, sms)


def test_recording_backs_the_roofline_reading():
    """Part 2's reading of the roofline table: the softmax takes longer than both matmuls together, far left of the
    ridge and well under the copy bandwidth; the matmuls sit left of the ridge at under d FLOPs per byte; the fused
    kernel's counted intensity is N/2, right of the ridge."""
    post = read_post("flashattention-explained.md")
    hw = table("flashattention/gpu_roofline/hardware.md")
    ridge = number(hw["ridge point (matmul / bandwidth)"][0])
    copy = number(hw["measured HBM bandwidth (copy)"][0])
    steps = {
        name: [number(c) for c in cells[:4]] for name, cells in table("flashattention/gpu_roofline/roofline.md").items()
    }
    source = (ROOT / "snippets/flashattention/gpu_roofline.py").read_text()
    seq, d = (int(x) for x in re.search(r"bh, seq, d = \(\d+, (\d+), (\d+)\)", source).groups())
    said = claim(post, "yet it takes longer than both matmuls together")
    assert steps["P = softmax(S)"][0] > steps["S = Q K^T"][0] + steps["O = P V"][0], (said, steps)
    said = claim(post, "far left of the ridge, so no softmax kernel could be limited by arithmetic here")
    assert steps["P = softmax(S)"][1] < ridge / 10, (said, steps, ridge)
    said = claim(post, "and this kernel runs well above that floor")
    assert steps["P = softmax(S)"][3] < 0.5 * copy, (said, steps, copy)
    said = claim(post, "Even the two matmuls of naive attention sit left of the ridge")
    claim(post, "their intensity is at most about $d$ FLOPs per byte")
    for name in ("S = Q K^T", "O = P V"):
        assert steps[name][1] < ridge and steps[name][1] <= d, (said, name, steps[name], ridge)
    said = claim(post, "(it is $N/2$ FLOPs per byte in bf16)")
    assert steps["fused (flashdoc)"][1] == seq / 2 > ridge, (said, steps["fused (flashdoc)"], ridge)
    claim(post, "it does not move the point across the ridge")


def test_recording_backs_the_l2_sizes_in_part2():
    post = read_post("flashattention-explained.md")
    l2_mib = number(table("flashattention/gpu_roofline/hardware.md")["L2 cache"][0])
    roofline = (ROOT / "snippets/flashattention/gpu_roofline.py").read_text()
    seq, d = (int(x) for x in re.search(r"bh, seq, d = \(\d+, (\d+), (\d+)\)", roofline).groups())
    claim(post, "At the roofline's length one head's keys and values take 2 MiB in bf16")
    head_mib = 2 * seq * d * 2 / 2**20
    assert head_mib == 2 and l2_mib >= 10 * head_mib, (head_mib, l2_mib)
    claim(post, """so this GPU's {{ hardware("L2 cache") }} of L2 holds those of many heads at once""")
    claim(post, "at the table's longest, 131,072 tokens, one head's alone take 64 MiB and no longer fit")
    longest = max(int(n.replace(",", "")) for n in table("flashattention/gpu_memory/memory.md"))
    memory = (ROOT / "snippets/flashattention/gpu_memory.py").read_text()
    d_memory = int(re.search(r"heads, d, dtype = \(?\s*\(\d+, (\d+), torch\.bfloat16\)", memory).group(1))
    assert longest == 131072 and 2 * longest * d_memory * 2 / 2**20 == 64 > l2_mib, (longest, d_memory, l2_mib)


def test_recording_backs_the_worked_example_as_part2_walks_it():
    """Part 2's words on the 4x4 example: each tile's scores, maxima and rescale factors, and the result."""
    post = read_post("flashattention-explained.md")

    def step(tile):
        text = (GENERATED / f"flashattention/worked_example/{tile}.txt").read_text()

        def row(name):
            return [float(x) for x in re.search(rf"^{name} = tensor\(\[([^\]]*)\]\)", text, re.M).group(1).split(",")]

        scores = [[float(x) for x in r.split(",")] for r in re.findall(r"\[\s*([-\d., ]+)\]", text.split("m_old")[0])]
        return scores, row("m_old"), row("m_new"), row("alpha = exp\\(m_old - m_new\\)")

    claim(post, "Row 1's scores are $[1, 2]$ and row 2's $[2, 1]$, so both running maxima become $2$.")
    scores, _, m_new, alpha = step("S11")
    assert scores == [[1, 2], [2, 1]] and m_new == [2, 2] and alpha == [0, 0], (scores, m_new, alpha)
    claim(post, "The new scores are $[3, 4]$ for row 1 and $[0, -1]$ for row 2.")
    claim(post, "so everything it accumulated shrinks by $\\alpha = e^{2 - 4} = e^{-2}$")
    scores, m_old, m_new, alpha = step("S12")
    assert scores == [[3, 4], [0, -1]] and m_old == [2, 2] and m_new == [4, 2], (scores, m_old, m_new)
    assert alpha == [round(math.exp(-2), 4), 1], alpha
    claim(post, "Row 3 ($[4, 3, 2, 1]$) meets its maximum in the *first* tile, so")
    claim(post, "row 4 ($[-1, 0, 1, 2]$) raises its maximum from $0$ to $2$ and is rescaled by $e^{-2}$ like row 1")
    s21, _, m21, _ = step("S21")
    s22, m_old, m_new, alpha = step("S22")
    assert [a + b for a, b in zip(s21, s22)] == [[4, 3, 2, 1], [-1, 0, 1, 2]], (s21, s22)
    assert m21 == m_old == [4, 0] and m_new == [4, 2] and alpha == [1, round(math.exp(-2), 4)], (m_old, m_new, alpha)
    claim(post, "Row 1 is $\\operatorname{softmax}([1, 2, 3, 4])$, and row 2 is")
    result = (GENERATED / "flashattention/worked_example/result.txt").read_text()
    rows_ = re.findall(r"\[([\d., ]+)\]", result.split("max |")[0])
    soft = re.search(r"softmax\(\[1, 2, 3, 4\]\) = tensor\(\[([\d., ]+)\]\)", result).group(1)
    assert rows_[0] == soft and rows_[1] == ", ".join(reversed(soft.split(", "))), (rows_, soft)
    assert float(re.search(r"max \|flash - naive\| = (\S+)", result).group(1)) < 1e-12, result


def test_recording_backs_the_seed_pseudocode_bugs():
    """Part 2's numbered reading of the seed pseudocode's run: NameError as published, a shape error with most
    shapes, wrong numbers when the shapes line up by accident, and a mismatch on a short last block."""
    post = read_post("flashattention-explained.md")
    out = dict(
        re.findall(r"^(\d)\. (.*)$", (GENERATED / "flashattention/seed_pseudocode/stdout.txt").read_text(), re.M)
    )
    claim(post, "so it raises `NameError` before computing anything")
    assert "NameError: name 'd_k' is not defined" in out["1"], out["1"]
    claim(post, "With most shapes that fails (line 2)")
    assert "RuntimeError" in out["2"], out["2"]
    claim(post, "every shape lines up by accident, and it runs and returns wrong numbers (line 3)")
    assert out["3"].startswith("batch 1, n 128, d 64 = block_size: ran;"), out["3"]
    assert float(re.search(r"max \|error\| vs naive attention = ([\d.e-]+)", out["3"]).group(1)) > 0.01, out["3"]
    claim(post, "the last query block is shorter, and its statistics no longer match (line 4)")
    assert "RuntimeError" in out["4"] and "(64)" in out["4"] and "(36)" in out["4"], out["4"]


def test_recording_backs_tiled_against_naive_as_part2_reads_it():
    post = read_post("flashattention-explained.md")
    text = (GENERATED / "flashattention/tiled_vs_naive/tiled_vs_naive.md").read_text()
    rows_ = re.findall(r"^\| (\d+) \| (\d+) \| (True|False) \| (\S+) \| (\S+) \|$", text, re.M)
    block = int(
        re.search(r"^block = (\d+)", (ROOT / "snippets/flashattention/tiled_vs_naive.py").read_text(), re.M).group(1)
    )
    claim(post, "Tested against naive attention on lengths that are not multiples of the block size (64)")
    assert block == 64 and rows_ and all(int(n) % block for r in rows_ for n in r[:2]), rows_
    claim(post, "with and without the causal mask, including more queries than keys and the reverse")
    assert {r[2] for r in rows_} == {"True", "False"}
    assert any(int(r[0]) > int(r[1]) for r in rows_) and any(int(r[0]) < int(r[1]) for r in rows_), rows_
    claim(
        post, "The float64 column shows the two algorithms agree to rounding error; in float32 they differ by rounding"
    )
    assert all(float(r[4]) < 1e-13 and float(r[3]) < 1e-5 for r in rows_), rows_


def test_recording_backs_the_memory_table_as_part2_reads_it():
    """Part 2: naive attention's extra memory grows with N^2 until it runs out; the fused kernel's grows with N and
    is its output plus one float32 log-sum-exp per query row."""
    post = read_post("flashattention-explained.md")
    stdout = (GENERATED / "flashattention/gpu_memory/stdout.txt").read_text()
    heads, d = (int(x) for x in re.search(r"batch 1, (\d+) heads, head dim (\d+), torch\.bfloat16", stdout).groups())
    rows_ = {int(n.replace(",", "")): cells for n, cells in table("flashattention/gpu_memory/memory.md").items()}
    ns = sorted(rows_)
    claim(post, "doubling $N$ until naive attention no longer fits")
    naive = [number(rows_[n][0]) for n in ns if rows_[n][0].endswith("MiB")]
    assert "out of memory" in [rows_[n][0] for n in ns], rows_
    assert all(3.5 < b / a < 4.5 for a, b in zip(naive, naive[1:])), naive
    claim(post, "So the extra memory grows linearly in $N$; naive attention's grows with $N^2$.")
    fused = [number(rows_[n][1]) for n in ns]
    assert all(1.9 < b / a < 2.1 for a, b in zip(fused, fused[1:])), fused
    claim(post, "FlashAttention's extra memory is its output plus one number per query row")
    claim(post, "(FlashAttention-1 stored both)")
    for n, mib in zip(ns, fused):  # bf16 output, float32 LSE, to the MiB the table rounds to (the allocator pads)
        assert abs((heads * n * d * 2 + heads * n * 4) / 2**20 - mib) <= 1, (n, mib)


def test_recording_backs_the_cost_models_compute_rates(results):
    """Part 9's cost model assumes flashdoc's rates at head dimension 128 on long sequences in Part 6's benchmark
    (bf16, 8k tokens and more, both masks): each assumed rate within 10% of the recorded ones' mean."""
    claim(read_post("attention-across-gpus.md"), "are about what flashdoc's kernels reach at head dimension 128")
    source = (ROOT / "snippets/parallel/cost_model.py").read_text()
    assumed = {m: float(v) for m, v in re.findall(r'"(fwd|fwd\+bwd)": ([\d.e]+)', source)}
    assert set(assumed) == {"fwd", "fwd+bwd"}, assumed
    recorded = {"fwd": [], "fwd+bwd": []}
    for r in results["records"]:
        if r["kind"] == "speed" and r["peer"] == "flashdoc" and r["status"] == "ok" and r["dtype"] == "bf16":
            if r["head_dim"] == 128 and r["seqlen"] >= 8192:
                recorded["fwd" if r["mode"] == "fwd" else "fwd+bwd"].append(r["tflops"] * 1e12)
    for mode, rate in assumed.items():
        mean = sum(recorded[mode]) / len(recorded[mode])
        assert abs(rate / mean - 1) <= 0.1, (mode, rate, mean)
