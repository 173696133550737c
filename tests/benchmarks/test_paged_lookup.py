"""The page-lookup experiment (benchmarks/kernels/paged_lookup.py) off the GPU: its copies of the split-KV kernel
(one lookup a page, one a row) give the shipped kernel's output bit for bit in Triton's interpreter, and the check
stops on one that does not. (The timing needs a GPU.)"""

import pytest
import torch

from benchmarks import decode as bench
from benchmarks.kernels import paged_lookup as exp
from flashdoc.kernels import decode as dk

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check; a GPU runs it before timing")


@pytest.mark.parametrize("page", [16, 32])
def test_per_page_lookup_matches_the_shipped_kernel(page):
    """Tiles of 32 keys: two pages of 16 each (the shipped kernel looks each page up once), or one page of 32."""
    with bench.smoke_shape():
        exp.check(2, 128, page, dk.CPU_DECODE_CONFIG)
    assert dk._split_kv is exp.SHIPPED  # the swap is undone


@pytest.mark.parametrize("name", ["per-page", "per-row"])
def test_check_stops_on_a_different_output(monkeypatch, name):
    real = exp.output_of
    wrong = exp.PER_PAGE if name == "per-page" else exp.PER_ROW

    def one_wrong(kernel, inputs, config):
        out = real(kernel, inputs, config)
        return out + 1 if kernel is wrong else out

    monkeypatch.setattr(exp, "output_of", one_wrong)
    with bench.smoke_shape(), pytest.raises(SystemExit, match=f"the {name} lookup's output differs"):
        exp.check(2, 128, 16, dk.CPU_DECODE_CONFIG)
