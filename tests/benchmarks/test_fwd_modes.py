"""The forward-modes diagnostic's analysis off the GPU (benchmarks/kernels/fwd_modes.py): the split into modes,
the address table, the alternation count, the clock matching and the summary over synthetic calls, and the script's
exit without a GPU. (The timing needs a Hopper GPU.)"""

import math
import random

import pytest
import torch

from benchmarks.kernels import fwd_modes
from benchmarks.kernels.fwd_modes import (
    address_association,
    alternation,
    clocks_by_mode,
    match_clocks,
    split_modes,
    summarise,
)


def _bimodal(seed=0):
    """200 fast calls over 1.48-1.52 ms and 100 slow ones over 1.64-1.68, shuffled: (times, true labels)."""
    fast = [1.48 + 0.04 * i / 199 for i in range(200)]
    slow = [1.64 + 0.04 * i / 99 for i in range(100)]
    calls = [(t, 0) for t in fast] + [(t, 1) for t in slow]
    random.Random(seed).shuffle(calls)
    return [t for t, _ in calls], [label for _, label in calls]


def test_a_bimodal_sample_splits_between_its_modes():
    times, truth = _bimodal()
    modes = split_modes(times)
    assert modes["labels"] == truth
    assert [m["count"] for m in modes["modes"]] == [200, 100]
    assert [m["share"] for m in modes["modes"]] == pytest.approx([2 / 3, 1 / 3])
    assert modes["cut"] == pytest.approx((1.52 + 1.64) / 2)
    assert modes["gap"] == pytest.approx(1.64 / 1.52 - 1)
    assert modes["modes"][0]["median"] == pytest.approx(1.50)
    assert modes["modes"][1]["median"] == pytest.approx(1.66)
    assert modes["ratio"] == pytest.approx(1.66 / 1.50)
    assert (modes["modes"][0]["hi"], modes["modes"][1]["lo"]) == pytest.approx((1.52, 1.64))


def test_a_spread_below_the_threshold_is_one_mode():
    times = [1.50 + 0.045 * i / 299 for i in range(300)]  # 3% from end to end
    modes = split_modes(times)
    assert modes["cut"] is None and modes["ratio"] is None
    assert modes["labels"] == [0] * 300
    assert [m["count"] for m in modes["modes"]] == [300]
    # two clusters 3% apart: a gap, but under the 4% threshold; over a 2% one it splits
    clusters = [1.50] * 150 + [1.545] * 150
    assert split_modes(clusters)["cut"] is None
    assert [m["count"] for m in split_modes(clusters, threshold=0.02)["modes"]] == [150, 150]


def test_a_few_stragglers_are_not_a_mode():
    times = [1.50 + 0.01 * i / 297 for i in range(298)] + [1.80, 1.85]
    modes = split_modes(times)  # 2 calls above the 20% gap: fewer than max(3, 300 // 50) = 6
    assert modes["cut"] is None and [m["count"] for m in modes["modes"]] == [300]
    assert [m["count"] for m in split_modes(times, min_count=2)["modes"]] == [298, 2]


def test_a_mode_that_follows_the_address_is_detected():
    addresses = [0x1000, 0x2000] * 50
    labels = [0, 1] * 50
    a = address_association(labels, addresses)
    assert a["table"] == {0x1000: [50, 0], 0x2000: [0, 50]}
    assert a["v"] == pytest.approx(1.0) and a["follows"] is True


def test_a_mode_drawn_at_random_does_not_follow_the_address():
    rng = random.Random(1)
    addresses = [0x1000, 0x2000] * 150
    labels = [int(rng.random() < 0.5) for _ in addresses]
    a = address_association(labels, addresses)
    assert a["follows"] is False and a["v"] < 0.2


def test_cramers_v_by_hand_and_the_cases_it_cannot_tell():
    # {A: 8 fast 2 slow, B: 2 fast 8 slow}: expected 5 in each cell, chi2 = 4 x 9 / 5 = 7.2, V = sqrt(7.2 / 20)
    labels = [0] * 8 + [1] * 2 + [0] * 2 + [1] * 8
    addresses = ["A"] * 10 + ["B"] * 10
    a = address_association(labels, addresses)
    assert a["v"] == pytest.approx(math.sqrt(7.2 / 20)) and a["follows"] is False
    # every call at its own address: each trivially of one mode, so none counts
    assert address_association([0, 1] * 10, list(range(20)))["v"] is None
    # one address, or one mode: nothing to tell
    assert address_association([0, 1] * 10, ["A"] * 20)["follows"] is None
    assert address_association([0] * 20, ["A", "B"] * 10)["follows"] is None


def test_alternation_counts_changes_within_blocks():
    a = alternation([[0, 1, 0, 1]])
    assert (a["changes"], a["pairs"], a["observed"]) == (3, 3, 1.0)
    assert a["independent"] == pytest.approx(2 * 2 * 2 / 4 / 3)
    # two blocks: the step from one block to the next is no pair; expected 2 x 2 x 2 / 4 + 2 x 1 x 1 / 2 = 3 changes
    a = alternation([[0, 0, 1, 1], [1, 0]])
    assert (a["changes"], a["pairs"]) == (2, 4)
    assert a["observed"] == 0.5 and a["independent"] == pytest.approx(0.75)
    assert alternation([[1], []])["observed"] is None


def test_clocks_are_matched_to_calls_by_time():
    samples = [(0.0, 1980.0), (0.01, 1700.0), (0.02, 1800.0)]
    calls = [(0.002, 0.003), (0.009, 0.011), (0.0, 0.02), (0.5, 0.6)]
    assert match_clocks(calls, samples, tolerance=0.015) == [1980.0, 1700.0, 1800.0, None]
    assert clocks_by_mode([0, 1, 0, 1], [1980.0, 1700.0, 1900.0, None]) == [1940.0, 1700.0]
    assert clocks_by_mode([0, 0], [None, None]) == [None, None]


def _records():
    """'fresh': alternating fast and slow calls, each mode at its own address, the slow ones at a lower clock;
    'fixed': every call fast, at one address. Two rounds of 50 calls each."""
    records = []
    for r in range(2):
        for i in range(50):
            slow = i % 2
            records.append(
                dict(
                    mask="causal",
                    condition="fresh",
                    round=r,
                    ms=1.65 if slow else 1.49,
                    ptr=0x2000 if slow else 0x1000,
                    clock_mhz=1800.0 if slow else 1980.0,
                )
            )
        for i in range(50):
            records.append(dict(mask="causal", condition="fixed", round=r, ms=1.49 + 0.001 * (i % 3), ptr=0x3000))
    return records


def test_summaries_of_synthetic_calls():
    fresh, fixed = summarise(_records())
    assert (fresh["condition"], fresh["n"]) == ("fresh", 100)
    assert [m["count"] for m in fresh["modes"]] == [50, 50]
    assert fresh["ratio"] == pytest.approx(1.65 / 1.49) and fresh["slow_share"] == 0.5
    assert fresh["round_slow_shares"] == {0: 0.5, 1: 0.5}
    assert (fresh["alternation"]["changes"], fresh["alternation"]["pairs"]) == (98, 98)
    assert fresh["address"]["follows"] is True and fresh["clocks"] == [1980.0, 1800.0]
    assert fresh["common_slow_share"] == 0.5
    assert [m["count"] for m in fixed["modes"]] == [100] and fixed["ratio"] is None
    assert fixed["common_slow_share"] == 0.0  # the mask's pooled split puts every fixed call in the fast mode
    assert fixed["address"]["follows"] is None and fixed["clocks"] == [None, None]
    text = fwd_modes.report([fresh, fixed])
    assert "| causal | fresh | 100 | 1.490 (50) | 1.650 (50) | 1.107 |" in text
    assert "| causal | fixed | 100 |" in text
    # fresh's address table (fixed used one address: none): 0x1000 all fast, 0x2000 all slow
    assert "| +0x0 (0.0 MiB) | 50 | 0 |\n| +0x1000 (0.0 MiB) | 0 | 50 |" in text
    assert text.count("calls per output address") == 1


def test_rotation_moves_the_first_condition_every_round():
    names = ["fresh", "fixed", "rotate"]
    assert [fwd_modes.rotated(names, r)[0] for r in range(4)] == ["fresh", "fixed", "rotate", "fresh"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the exit without a GPU")
def test_main_without_a_gpu_exits_2_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_:
        fwd_modes.main([])
    assert exit_.value.code == 2
    assert "no CUDA GPU here" in capsys.readouterr().err
