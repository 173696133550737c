"""benchmarks/hf_step.py: the batches it builds (the same real tokens in every layout) and a smoke run of the
whole script on a tiny model in float32 on the CPU (flashdoc's kernels in the interpreter), checking what it
writes."""

import json

import pytest

pytest.importorskip(
    "transformers", reason="benchmarks/hf_step.py times a transformers model (pip install transformers)"
)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

from benchmarks import hf_step as bench  # noqa: E402  (after the skip: without transformers there is nothing to test)


def test_layouts_hold_the_same_tokens():
    shape = bench.SMOKE_SHAPE
    batches, lengths = bench.make_batches(shape, 96, "cpu")
    assert sum(lengths) == shape["tokens"]
    dense, padded, packed = batches["dense"], batches["padded"], batches["packed"]
    assert tuple(dense["input_ids"].shape) == (shape["dense_rows"], shape["tokens"] // shape["dense_rows"])
    real = padded["attention_mask"].bool()
    assert padded["attention_mask"].sum(-1).tolist() == lengths
    assert (
        padded["input_ids"][real].tolist() == packed["input_ids"][0].tolist() == dense["input_ids"].flatten().tolist()
    )
    # padding is never a label, and neither is a packed sequence's first token: both layouts predict the same
    # next tokens
    assert padded["labels"][~real].eq(-100).all()
    predicted = sum(n - 1 for n in lengths)
    assert int(packed["labels"][0, 1:].ne(-100).sum()) == int(padded["labels"][:, 1:].ne(-100).sum()) == predicted
    # positions restart at 0 for each packed sequence
    assert packed["position_ids"][0].eq(0).sum().item() == len(lengths)
    assert all(b["use_cache"] is False for b in batches.values())


def test_attention_flop_share_grows_with_the_sequence():
    short = bench.attention_flop_share(bench.MODEL, [1024] * 8, 8192)
    long = bench.attention_flop_share(bench.MODEL, [2048] * 4, 8192)
    assert 0 < short < long < 1
    assert long / (1 - long) == pytest.approx(2 * short / (1 - short))  # attention doubles, the matmuls do not


@pytest.mark.timeout(120)
def test_smoke_run(tmp_path):
    bench.main(["--smoke", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) == {"meta", "records", "targets", "loss_checks"}
    meta, records = data["meta"], data["records"]
    assert meta["smoke"] and meta["tokens"] == sum(meta["lengths"]) == bench.SMOKE_SHAPE["tokens"]
    assert meta["env"]["transformers"] and meta["sdpa_packed"]["supported"] in (True, False)
    assert list(records) == list(bench.LAYOUTS)
    for layout, by_impl in records.items():
        want = {"flashdoc", bench.NO_ATTENTION, "eager" if layout in bench.EAGER_LAYOUTS else None} - {None}
        if layout != "packed" or meta["sdpa_packed"]["supported"]:
            want.add("sdpa")
        for impl in want:
            r = by_impl[impl]
            assert "error" not in r, (layout, impl, r.get("error"))
            assert r["ms"] > 0 and len(r["step_ms"]) == meta["timed_steps"]
            assert r["tokens_per_s"] == pytest.approx(meta["tokens"] / r["ms"] * 1e3)
            assert r["ms_p20"] <= r["ms"] <= r["ms_p80"]
    # both implementations ran every layout they can, and their losses agree (float32: to 1e-4)
    assert [t["layout"] for t in data["targets"]] == list(bench.LAYOUTS)
    for t in data["targets"]:
        if t["met"] is not None:
            assert t["ratio"] == pytest.approx(t["flashdoc_ms"] / t["sdpa_ms"])
    checks = {c["check"]: c for c in data["loss_checks"]}
    assert "dense: flashdoc vs sdpa" in checks and "flashdoc: packed vs padded" in checks
    assert all(c["ok"] for c in checks.values()), checks
    table = (tmp_path / "hf_step.md").read_text()
    assert "| layout | attention | step ms (p20-p80) |" in table
    assert "Target: flashdoc's step time <= SDPA's" in table and "| dense | flashdoc |" in table


def test_without_a_gpu_only_the_smoke_run_is_allowed(tmp_path):
    if bench.torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the full run is allowed")
    with pytest.raises(SystemExit, match="measures a GPU"):
        bench.main(["--out", str(tmp_path)])
