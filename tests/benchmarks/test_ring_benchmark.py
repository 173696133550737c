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
        "causal",
        "--methods",
        "flashdoc,ring-zigzag",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [(r["method"], r["mode"]) for r in rows] == [
        ("flashdoc", "fwd"),
        ("ring-zigzag", "fwd"),
        ("flashdoc", "fwd_bwd"),
        ("ring-zigzag", "fwd_bwd"),
    ]
    assert all("error" not in r and r["tokens_per_s"] > 0 for r in rows)
    assert all(r["gpus"] == 2 and r["efficiency"] > 0 for r in rows if r["method"] == "ring-zigzag")
    assert rows[1]["max_abs_diff"] <= 2e-2  # bf16 ring output against one device's, on the same tensors
    assert "| 16 | causal | fwd | ring-zigzag | 2 |" in (tmp_path / "results.md").read_text()
