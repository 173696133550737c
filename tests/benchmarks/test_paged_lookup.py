"""The per-page lookup experiment (benchmarks/kernels/paged_lookup.py) off the GPU: its copy of the split-KV kernel
gives the shipped kernel's output bit for bit in Triton's interpreter, and the check stops on one that does not.
(The timing needs a GPU.)"""

import pytest
import torch

from benchmarks import decode as bench
from benchmarks.kernels import paged_lookup as exp
from flashdoc.kernels import decode as dk

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check; a GPU runs it before timing")


@pytest.mark.parametrize("page", [16, 32])
def test_per_page_lookup_matches_the_shipped_kernel(page):
    """Tiles of 32 keys: two pages of 16 each (one lookup a page), or one page of 32 (the shipped path)."""
    with bench.smoke_shape():
        exp.check(2, 128, page, dk.CPU_DECODE_CONFIG)
    assert dk._split_kv is exp.SHIPPED  # the swap is undone


def test_check_stops_on_a_different_output(monkeypatch):
    real = exp.output_of

    def wrong_per_page(kernel, inputs, config):
        out = real(kernel, inputs, config)
        return out + 1 if kernel is exp.PER_PAGE else out

    monkeypatch.setattr(exp, "output_of", wrong_per_page)
    with bench.smoke_shape(), pytest.raises(SystemExit, match="the per-page lookup's output differs"):
        exp.check(2, 128, 16, dk.CPU_DECODE_CONFIG)
