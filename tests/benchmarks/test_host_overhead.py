"""The host-time probe's CPU mode (benchmarks/kernels/host_overhead.py): with the GPU stubbed out, calls on CPU
tensors take the Hopper GPU's host path (the Gluon kernels' plans, launching nothing), so that a change to that
path can be timed on a machine without a GPU. Each check runs in a process of its own, since the probe imports
flashdoc with the interpreter off."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the probe's CPU mode, for machines without a GPU")


def _run(args: list) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_stubbed_calls_take_the_hopper_host_path():
    """Two training steps launch the Hopper forward, the preprocess and the two Hopper backward kernels: through
    Triton's path the first time, through the plans the second."""
    code = textwrap.dedent(
        """
        import torch
        import benchmarks.kernels.host_overhead as probe
        import flashdoc

        seen = []
        probe.stub_gpu_host_path(on_launch=lambda name, path: seen.append((name, path)))
        q, k, v = (torch.randn(1, 128, 2, 64, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        for _ in range(2):
            flashdoc.flash_attn_func(q, k, v, causal=True).sum().backward()
        print(seen)
        """
    )
    kernels = ["_attn_fwd_hopper", "_attn_bwd_preprocess", "_attn_bwd_dkdv_hopper", "_attn_bwd_dq_hopper"]
    expected = [(name, "first") for name in kernels] + [(name, "plan") for name in kernels]
    assert _run(["-c", code]).strip() == repr(expected)


def test_probe_times_every_row():
    out = _run(["benchmarks/kernels/host_overhead.py", "--calls", "3"])
    assert out.splitlines()[0] == "host time per call on CPU, kernel launches stubbed out"
    rows = out.splitlines()[1:]
    assert len(rows) == 10, out
    for row in rows:
        assert re.fullmatch(r" *\d+\.\d us  \S.*", row), row
    assert not any("SDPA" in row for row in rows)


def test_every_forward_modes_condition_calls_the_hopper_forward():
    """The forward-modes probe (benchmarks/kernels/fwd_modes.py) has its calls checked here before a GPU runs them:
    each condition's call, made twice, reaches the Hopper forward, the second time through its plan (the first
    through Triton's path, unless an earlier condition made the plan). The persistent-grid switch makes a plan of
    its own. A wrong argument to a kernel entry fails here, not in device time."""
    code = textwrap.dedent(
        """
        import torch
        import benchmarks.kernels.host_overhead as probe
        from benchmarks.kernels import fwd_modes

        seen = []
        probe.stub_gpu_host_path(on_launch=lambda name, path: seen.append((name, path)))
        q, k, v = (torch.randn(1, 256, 2, 128, dtype=torch.bfloat16) for _ in range(3))
        for causal in (True, False):
            for name, (call, _) in fwd_modes.make_calls(q, k, v, causal, fwd_modes.CONDITIONS, 4).items():
                seen.clear()
                shapes = {tuple(call().shape) for _ in range(2)}
                print(causal, name, shapes == {tuple(q.shape)}, sorted({path for _, path in seen}),
                      sorted({kernel for kernel, _ in seen}))
        """
    )
    from benchmarks.kernels.fwd_modes import CONDITIONS

    lines = _run(["-c", code]).splitlines()
    assert len(lines) == 2 * len(CONDITIONS), lines
    for line in lines:  # the output's shape, and every launch the Hopper forward, the second through its plan
        assert line.endswith("True ['first', 'plan'] ['_attn_fwd_hopper']") or line.endswith(
            "True ['plan'] ['_attn_fwd_hopper']"
        ), line
    assert all("'first'" in line for line in lines if " nonpersistent " in line), lines
