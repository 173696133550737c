"""The decode parity experiment (benchmarks/kernels/decode_parity.py) off the GPU: its head-major caches hold the
benchmark's values and flashdoc reads them to the same output, and its summary's ratios. (The timing needs a GPU.)"""

import pytest
import torch

from benchmarks import decode as bench
from benchmarks.kernels import decode_parity as exp


def test_head_major_caches_hold_the_same_values_in_sdpa_order():
    with bench.smoke_shape():
        q, k, v, seqlens, _ = bench.make_cache(2, 64, seed=3)
        q2, k_major, v_major, seqlens2, table = exp.head_major_cache(2, 64, seed=3)
        assert table is None and torch.equal(q, q2) and torch.equal(seqlens, seqlens2)
        for flat, major in ((k, k_major), (v, v_major)):
            assert torch.equal(flat, major)
            assert major.shape == flat.shape and major.transpose(1, 2).is_contiguous() and not major.is_contiguous()
        out = bench.flashdoc_call(q, k, v, seqlens, None)()
        out_major = bench.flashdoc_call(q2, k_major, v_major, seqlens2, None)()
    torch.testing.assert_close(out_major, out, rtol=1e-5, atol=1e-5)


def test_full_cache_call_computes_the_step_without_lengths_and_refuses_a_short_sequence():
    with bench.smoke_shape():
        q, k, v, seqlens, table = bench.make_cache(2, 64, seed=5)
        out = bench.flashdoc_call(q, k, v, seqlens, table)()
        out_full = exp.full_cache_call(q, k, v, seqlens, table)()
        with pytest.raises(ValueError, match="every sequence must fill its cache"):
            exp.full_cache_call(q, k, v, seqlens - 1, table)
    assert torch.equal(out_full, out)


def test_summary_ratios_are_the_baselines_time_over_each_methods_in_the_same_round():
    times = {"cudnn": [2.0, 2.0, 4.0], "a": [1.0, 2.0, 5.0], "cudnn-again": [2.0, 2.0, 4.0]}
    s = exp.summarize(times)
    assert s["cudnn"]["ratio_median"] == 1.0 and s["cudnn-again"]["share_at_least_1"] == 1.0
    a = s["a"]
    assert a["median_ms"] == 2.0
    assert (a["ratio_min"], a["ratio_median"], a["ratio_max"]) == (0.8, 1.0, 2.0)
    assert a["share_at_least_1"] == pytest.approx(2 / 3)
    assert "| 1x1 | a | 2000.00 | 1.0000 | 0.8000 | 2.0000 | 67% |" in exp.table({"1x1": s}).splitlines()
