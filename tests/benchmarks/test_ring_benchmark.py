"""benchmarks/ring.py runs end to end: on a CPU its flashdoc rows go over gloo through Triton's interpreter (the
timings mean nothing there; the rows, the efficiency column and the ring-vs-one-device check are what is tested).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU run is the benchmark itself")
def test_ring_benchmark_smoke(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "ring.py"),
        "--out",
        str(tmp_path),
        "--seqlens",
        "16",
        "--heads",
        "2",
        "--head-dim",
        "16",
        "--masks",
        "causal,window3",
        "--methods",
        "flashdoc,ring-contiguous,sdpa-flash",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    # SDPA takes no sliding window, so the window rows are flashdoc's only (SDPA's own rows are not checked here)
    assert [(r["mask"], r["method"], r["mode"]) for r in rows] == [
        ("causal", "flashdoc", "fwd"),
        ("causal", "ring-contiguous", "fwd"),
        ("causal", "sdpa-flash", "fwd"),
        ("causal", "flashdoc", "fwd_bwd"),
        ("causal", "ring-contiguous", "fwd_bwd"),
        ("causal", "sdpa-flash", "fwd_bwd"),
        ("window3", "flashdoc", "fwd"),
        ("window3", "ring-contiguous", "fwd"),
        ("window3", "flashdoc", "fwd_bwd"),
        ("window3", "ring-contiguous", "fwd_bwd"),
    ]
    ours = [r for r in rows if r["method"] != "sdpa-flash"]
    assert all("error" not in r and r["tokens_per_s"] > 0 for r in ours)
    assert all(r["gpus"] == 2 and r["efficiency"] > 0 for r in ours if r["method"] == "ring-contiguous")
    assert [r["window"] for r in ours if r["mask"] == "window3"] == [[3, 0]] * 4
    for r in ours:  # bf16 ring output against one device's, on the same tensors
        assert r.get("max_abs_diff", 0) <= 2e-2, r
    table = (tmp_path / "results.md").read_text()
    assert "| 16 | causal | fwd | ring-contiguous | 2 |" in table
    assert "| 16 | window3 | fwd_bwd | ring-contiguous | 2 |" in table
