"""The window fixed-cost fit's host side: the tiles it credits each program with, against a count from the mask's
definition, the least-squares line, ``measure``'s assembly of both around stubbed kernel times, and Part 7's
snippet (snippets/masking/fixed_cost.py) printing, plotting and saving such a measurement for the page's macros.
(The timing itself needs a Hopper GPU.)"""

import json
import math
import runpy
from pathlib import Path

import pytest
import torch

from benchmarks.kernels import window_fixed_cost
from benchmarks.kernels.window_fixed_cost import fit, mean_tiles, programs
from tools.site_macros import recorded

ROOT = Path(__file__).resolve().parents[2]


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


def test_measure_refuses_one_width():
    with pytest.raises(ValueError, match="at least two window widths"):
        window_fixed_cost.measure(widths=[1024])


LINE = {"forward": (5.0, 1.2), "dK/dV": (4.5, 1.7), "dQ": (5.3, 1.9)}  # (fixed us, us a tile) a stub's kernels take


def stub_gpu(monkeypatch, sms=132):
    """Stand in for a Hopper GPU under ``measure``: each kernel's time made from its line in LINE (dense causal's
    forward from the same line over its own, wider tiles), and the device's properties."""
    from flashdoc.kernels import backward, backward_hopper, forward_hopper

    configs = {
        "forward": forward_hopper.table_config((128, True), True),
        "dK/dV": backward_hopper.HOPPER_DKDV_CONFIGS[(128, True)],
        "dQ": backward_hopper.HOPPER_DQ_CONFIGS[(128, True)],
    }
    causal_forward = forward_hopper.table_config((128, True), False)

    def kernel_times(q, k, v, dout, window, steps):
        n, heads = q.shape[1], q.shape[2]
        times = {}
        for name, (fixed, per_tile) in LINE.items():
            config = causal_forward if name == "forward" and window is None else configs[name]
            count = programs(n, heads, name, config)
            program_us = fixed + per_tile * mean_tiles(n, name, config, window)
            times[name] = program_us * count / min(sms, count)
        return times

    # On a machine with a GPU the masking core's block ranges still launch a kernel there, and Triton reads the
    # device's compute capability through these properties: every field but the SM count stays the real one.
    real_properties = torch.cuda.get_device_properties if torch.cuda.is_available() else None

    class Properties:
        multi_processor_count = sms

        def __init__(self, device):
            self.device = device

        def __getattr__(self, name):
            if real_properties is None:
                raise AttributeError(f"the stubbed GPU has no {name}")
            return getattr(real_properties(self.device), name)

    monkeypatch.setattr(window_fixed_cost, "kernel_times", kernel_times)
    # measure() puts dQ on the main stream for the whole process; the tests after this one keep the overlap
    monkeypatch.setattr(backward, "OVERLAP_MIN_FLOPS", backward.OVERLAP_MIN_FLOPS)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Properties(device))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "stub")
    randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *shape, device=None, **kw: randn(*shape, **kw))


def test_measure_recovers_each_kernels_line(monkeypatch):
    """With kernel times made from a known line per kernel (GPU and profiler stubbed out), the fit returns that
    line, and dense causal's per-tile cost is its own, per the window's tile width."""
    n, heads, widths = 4096, 2, (128, 512, 1024)
    stub_gpu(monkeypatch)
    result = window_fixed_cost.measure(n, heads, widths, steps=1)
    for f in result["fits"]:
        fixed, per_tile = LINE[f["kernel"]]
        assert f["fixed_us"] == pytest.approx(fixed) and f["tile_us"] == pytest.approx(per_tile), f
        # the causal forward's tiles hold twice the keys: scaled to the window's tile, half the stubbed cost
        assert f["causal_tile_us"] == pytest.approx(per_tile / (2 if f["kernel"] == "forward" else 1)), f
        assert set(f["shares"]) == set(widths)


def test_the_snippet_prints_plots_and_saves_what_the_page_reads(monkeypatch, tmp_path, capsys):
    """Part 7's snippet on a stubbed GPU (and a shorter sequence): its tables, its figure, and a fixed_cost.json
    from which every reading of the ``fixed_cost`` macro renders."""
    stub_gpu(monkeypatch)
    measure = window_fixed_cost.measure
    monkeypatch.setattr(window_fixed_cost, "measure", lambda n, heads, widths, steps: measure(4096, 2, widths, steps=1))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    runpy.run_path(str(ROOT / "snippets/masking/fixed_cost.py"), run_name="__main__")
    table = (tmp_path / "fixed_cost.md").read_text()
    assert table in capsys.readouterr().out  # printed too
    assert "| forward | 64-key tiles | 5.0 | 1.20 | 0.60 | 0.50× |" in table, table
    assert "| dK/dV | 64-query tiles | 4.5 | 1.70 | 1.70 | 1.00× |" in table, table
    assert "| window | forward | dK/dV | dQ |" in table, table
    first_cells = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ")]
    assert first_cells[-7:] == [f"| {w}" for w in (128, 256, 512, 1024, 2048, 4096, "causal")], table
    assert (tmp_path / "fixed_cost.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "fixed_cost.json").read_text())
    monkeypatch.setattr(recorded, "_json", lambda name, file: saved)
    assert recorded.fixed_cost_fit("dQ")["fixed_us"] == pytest.approx(5.3)
    causal_tiles = recorded.fixed_cost_program("dK/dV", "causal")["tiles"]
    assert causal_tiles == mean_tiles(4096, "dK/dV", recorded.fixed_cost_program("dK/dV")["config"], None)
    assert recorded.fixed_share("dK/dV", "causal") == pytest.approx(4.5 / (4.5 + 1.7 * causal_tiles))
    env = type("Env", (), {"macro": lambda self, fn: setattr(self, fn.__name__, fn) or fn})()
    recorded.register(env)
    readings = ("fixed", "tile", "causal_tile", "vs_causal", "share", "tiles")
    rendered = {what: env.fixed_cost("forward", what) for what in readings}
    assert rendered["fixed"] == '<span class="measured">5.0 µs</span>', rendered
    assert rendered["vs_causal"] == '<span class="measured">0.50×</span>', rendered
    tiles = mean_tiles(4096, "forward", recorded.fixed_cost_program("forward")["config"], (1024, 0))
    assert rendered["tiles"] == f'<span class="measured">{tiles:.0f} tiles</span>', rendered
    assert all(html.startswith('<span class="measured">') for html in rendered.values()), rendered
