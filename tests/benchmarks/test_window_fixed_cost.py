"""The window fixed-cost fit's host side: the tiles it credits each program with, against a count from the mask's
definition, and the least-squares line. (The timing itself needs a Hopper GPU.)"""

import math

import pytest

from benchmarks.kernels.window_fixed_cost import fit, mean_tiles, programs


def _sees(i, j, left):
    """Query i sees key j under dense causal (left None) or a window (left, 0), square and bottom-right."""
    return j <= i and (left is None or i - j <= left)


def _brute_tiles(n, kernel, config, left):
    block_m, block_n, _, consumers = config[:4]
    counts = []
    if kernel == "dK/dV":  # programs of keys over query tiles: the query rows that see any of the keys
        rows = consumers * block_n
        for n0 in range(0, n, rows):
            seen = [i for i in range(n) if any(_sees(i, j, left) for j in range(n0, min(n0 + rows, n)))]
            counts.append(seen[-1] // block_m - seen[0] // block_m + 1 if seen else 0)
    else:  # items of query rows over key tiles: the keys any of the rows sees, from its first tile
        rows = consumers * block_m
        for m0 in range(0, n, rows):
            seen = [j for j in range(n) if any(_sees(i, j, left) for i in range(m0, min(m0 + rows, n)))]
            counts.append(math.ceil((seen[-1] + 1 - seen[0] // block_n * block_n) / block_n))
    return sum(counts) / len(counts)


@pytest.mark.parametrize(
    "kernel,config", [("forward", (16, 16, 3, 3, True)), ("dK/dV", (16, 16, 2, 2)), ("dQ", (16, 32, 2, 2))]
)
@pytest.mark.parametrize("left", [None, 0, 20, 64, 300])
def test_tiles_match_the_mask(kernel, config, left):
    n = 192
    window = None if left is None else (left, 0)
    assert mean_tiles(n, kernel, config, window) == pytest.approx(_brute_tiles(n, kernel, config, left))


def test_programs_count_whole_blocks():
    assert programs(1000, 4, "dK/dV", (64, 64, 2, 2)) == 8 * 4  # 128 keys a program
    assert programs(1000, 4, "forward", (64, 64, 3, 3, True)) == 6 * 4  # 192 rows an item


def test_fit_recovers_a_line():
    fixed, per_tile = fit([4, 18, 30], [4 + 1.5 * 4, 4 + 1.5 * 18, 4 + 1.5 * 30])
    assert fixed == pytest.approx(4) and per_tile == pytest.approx(1.5)
