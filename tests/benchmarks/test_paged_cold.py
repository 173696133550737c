"""The paged cold-start diagnostic (benchmarks/kernels/paged_cold.py) off the GPU: its protocol runs every layout
under every condition, the rows it touches are one a page (or one a large page of a contiguous cache), and an
unknown condition is refused. (Its times need a GPU.)"""

import pytest
import torch

from benchmarks import decode as bench
from benchmarks.kernels import paged_cold as cold

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU protocol; a GPU times it")


def test_every_layout_runs_under_every_condition():
    with bench.smoke_shape():
        times = cold.measure([(2, 128)], [16], reps=1, rounds=1)
    assert set(times) == {(2, 128, layout, c) for layout in ("contiguous", "paged16") for c in cold.CONDITIONS}
    assert all(us > 0 for us in times.values())
    text = cold.table(times)
    assert text.splitlines()[2].startswith("| 2×128 | contiguous |") and "| 2×128 | paged16 |" in text


def test_touched_rows_are_one_per_page_or_per_large_page():
    with bench.smoke_shape():
        _, k_cache, _, _, table = bench.make_cache(2, 128, 16)
        assert cold.touch_rows(k_cache, table).tolist() == list(range(0, 2 * 128, 16))
        _, k_cache, _, _, _ = bench.make_cache(2, 128)
    row_bytes = k_cache[0, 0].numel() * k_cache.element_size()
    step = max(1, cold.RUN_BYTES // row_bytes)
    assert cold.touch_rows(k_cache, None).tolist() == list(range(0, 2 * 128, step))


def test_an_unknown_condition_is_refused_and_warm_needs_no_preparation():
    with bench.smoke_shape():
        inputs = bench.make_cache(2, 128, 16)
    flush = torch.empty(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="condition is one of"):
        cold.prepare("cold", inputs, flush)
    assert cold.prepare("warm", inputs, flush) is None
    assert callable(cold.prepare("flushed", inputs, flush))
