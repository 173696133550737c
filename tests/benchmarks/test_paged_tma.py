"""The TMA-paged decode experiment (benchmarks/kernels/paged_tma.py) off the GPU: its copies of the split-KV kernel
build from the shipped kernel's source, give its output in Triton's interpreter for every way a tile can meet its
pages, and the check stops on one that does not. (The timing needs a GPU.)"""

import pytest
import torch

from benchmarks import decode as bench
from benchmarks.kernels import paged_tma as exp
from flashdoc.kernels import decode as dk

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check; a GPU runs it before timing")


def config(block_n):
    return dk.DecodeConfig(block_n=block_n, warps=4, stages=1, programs_per_sm=1)


@pytest.mark.parametrize("page, block_n", exp.CPU_CASES, ids=lambda v: str(v))
def test_tma_copy_matches_the_shipped_kernel(monkeypatch, page, block_n):
    """Page None: a contiguous cache, a box a tile."""
    boxes = []  # the TMA copy ran: it made its two descriptors (K's and V's), of one page or one tile each
    real = exp._descriptor
    monkeypatch.setattr(exp, "_descriptor", lambda cache, box, block_d: boxes.append(box) or real(cache, box, block_d))
    with bench.smoke_shape():
        err = exp.check(2, 128, page, config(block_n), 1e-5)
    assert err < 1e-5 and boxes == [min(page or block_n, block_n)] * 2
    assert dk._split_kv is exp.SHIPPED and dk.launch is exp.SHIPPED_LAUNCH  # the swap is undone


def test_the_loop_takes_one_product_a_box():
    loop = exp._tma_loop(4)
    assert loop.count("tl.dot(q,") == 4 and loop.count("V_DESC.load") == 4
    assert "tl.maximum(tl.maximum(tl.max(s0, 1), tl.max(s1, 1)), tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))" in loop
    assert exp._fold("+", ["a", "b", "c"]) == "((a + b) + c)"


def test_check_stops_on_a_different_output(monkeypatch):
    real = exp.call_with

    def one_wrong(kernel, inputs, cfg, tma_stages=None):
        call = real(kernel, inputs, cfg, tma_stages)
        return (lambda: call() + 1e-3) if kernel is exp.TMA else call

    monkeypatch.setattr(exp, "call_with", one_wrong)
    with bench.smoke_shape(), pytest.raises(SystemExit, match="the TMA copy's output is off by"):
        exp.check(2, 128, 16, config(64), 1e-5)


def test_a_page_across_tiles_is_refused():
    """A page of 48 rows neither divides a 32-key tile nor holds a whole number of them: a message, not garbage."""
    with pytest.raises(SystemExit, match="needs a page that divides the tile"):
        exp._launch_tma(
            exp.TMA, None, None, (), dict(PAGED=True, PAGE_SIZE=48), dk._triton_config(config(32), True), None
        )
