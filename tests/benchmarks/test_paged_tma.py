"""The TMA-paged decode experiment (benchmarks/kernels/paged_tma.py) off the GPU: its copy of the split-KV kernel
builds from the shipped kernel's source, gives its output in Triton's interpreter, and the check stops on one that
does not. (The timing needs a GPU.)"""

import pytest
import torch

from benchmarks import decode as bench
from benchmarks.kernels import paged_tma as exp
from flashdoc.kernels import decode as dk

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check; a GPU runs it before timing")
CONFIG = dk.DecodeConfig(block_n=exp.PAGE_SIZE * exp.PAGES, warps=4, stages=1, programs_per_sm=1)


def test_tma_pages_match_the_shipped_kernel(monkeypatch):
    made = []  # the TMA copy ran: it made its two descriptors (K's and V's) from the call's caches
    real = exp._descriptor
    monkeypatch.setattr(exp, "_descriptor", lambda cache, block_d: made.append(cache.shape) or real(cache, block_d))
    with bench.smoke_shape():
        err = exp.check(2, 128, CONFIG, 1e-5)
    assert err < 1e-5 and len(made) == 2
    assert dk._split_kv is exp.SHIPPED and dk.launch is exp.SHIPPED_LAUNCH  # the swap is undone


def test_check_stops_on_a_different_output(monkeypatch):
    real = exp.call_with

    def one_wrong(kernel, inputs, config):
        call = real(kernel, inputs, config)
        return (lambda: call() + 1e-3) if kernel is exp.TMA_KERNEL else call

    monkeypatch.setattr(exp, "call_with", one_wrong)
    with bench.smoke_shape(), pytest.raises(SystemExit, match="the TMA copy's output is off by"):
        exp.check(2, 128, CONFIG, 1e-5)


def test_other_tiles_are_refused():
    """The copy covers four pages of 16 a tile: another tile stops with a message, not a wrong output."""
    with bench.smoke_shape(), pytest.raises(SystemExit, match="covers pages of 16 in 64-key tiles"):
        exp.check(2, 128, dk.CPU_DECODE_CONFIG, 1e-5)
