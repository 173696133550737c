"""The kernels' host-side integer helpers agree with Triton's own, which they replace for host time."""

import torch
import triton

from flashdoc.kernels import cdiv, next_power_of_2
from flashdoc.kernels.decode import launch_plan, num_splits_heuristic


def test_cdiv_and_next_power_of_2_match_triton():
    for n in range(0, 4097):
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for d in (1, 3, 16, 64, 100, 128, 192):
            assert cdiv(n, d) == triton.cdiv(n, d), (n, d)


def test_split_heuristic_and_launch_plan_are_cached():
    # A decode loop asks the same question every step; the second call must not recompute it.
    num_splits_heuristic.cache_clear()
    first = num_splits_heuristic(8, 264, 1024)
    assert num_splits_heuristic(8, 264, 1024) == first
    assert num_splits_heuristic.cache_info().hits == 1
    launch_plan.cache_clear()
    plan = launch_plan(8, 128, torch.bfloat16, 16, 4096, 0)
    assert launch_plan(8, 128, torch.bfloat16, 16, 4096, 0) == plan
    assert launch_plan.cache_info().hits == 1
