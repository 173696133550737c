"""The conditional-rescale emulation (benchmarks/kernels/rescale_error.py): without 16-bit rounding both rules are
the same softmax, the conditional one skips tiles, and with the kernel's rounding it stays inside flash-attn's rule."""

import torch

from benchmarks.kernels import rescale_error


def test_both_rules_are_the_same_softmax_without_rounding():
    gen = torch.Generator().manual_seed(3)
    q, k, v = rescale_error.trial_inputs(gen, torch.float32, 64, growing=True)
    exact = rescale_error.exact_attention(q, k, v)
    eager, eager_skipped, tiles = rescale_error.online_softmax(q, k, v, 64, torch.float32, None)
    lazy, lazy_skipped, _ = rescale_error.online_softmax(q, k, v, 64, torch.float32, 8.0)
    assert eager_skipped == 0
    assert 0 < lazy_skipped < tiles
    torch.testing.assert_close(eager.double(), exact, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(lazy.double(), exact, atol=1e-4, rtol=1e-3)


def test_a_threshold_below_zero_rescales_every_tile_as_the_kernel_does():
    gen = torch.Generator().manual_seed(4)
    q, k, v = rescale_error.trial_inputs(gen, torch.bfloat16, 64, growing=False)
    eager = rescale_error.online_softmax(q, k, v, 64, torch.bfloat16, None)
    always = rescale_error.online_softmax(q, k, v, 64, torch.bfloat16, -1.0)
    assert always[1] == 0
    assert torch.equal(eager[0], always[0])


def test_the_conditional_rule_stays_inside_flash_attns_error_rule():
    result = rescale_error.compare(trials=4, threshold=8.0, block_n=64, dtype=torch.bfloat16, head_dim=64)
    assert result["eager"]["skipped"] == [0, 0]
    assert sum(result["conditional"]["skipped"]) > 0
    for row in result.values():
        assert row["over_reference"] < 2.0, row
