"""Macros that put numbers from the recorded benchmark into a page's prose, so that no sentence quotes a number by
hand: each is computed by ``benchmarks.report`` (the code that writes the benchmark's own tables) from the
``results.json`` that ``snippets/triton/benchmark.py`` recorded, and the build fails if that recording is older
than the snippet.

    {{ bench_ratio("fwd_bwd", "sdpa-flash", head_dims=[128, 256]) }}          1.58–1.75× (geometric means)
    {{ bench_worst_ratio("fwd_bwd", "sdpa-flash", head_dims=[64]) }}          the lowest ratio of any row
    {{ bench_causal_ratio(min_n=4096, max_n=4096) }}                          causal over full forward TFLOP/s
    {{ bench_short_ahead("flex") }}                                           '44 of 48': rows under 2k it leads
    {{ bench_twins(0.15) }}                                                   table: bf16/fp16 rows that disagree
"""

from __future__ import annotations

import json

from benchmarks import report
from tools.outputs import snippet

BENCHMARK = "triton/benchmark"


def recorded_results() -> dict:
    """The benchmark's recorded results.json (``recorded_file`` fails the build if it is stale)."""
    return json.loads(snippet(BENCHMARK).recorded_file("results.json").read_text())


def measured(text: str) -> str:
    """A measured number in the prose, kept on one line (it reads wrong broken at its dash or space)."""
    return f'<span class="measured">{text}</span>'


def times_range(lo: float, hi: float, digits: int = 2) -> str:
    """'1.58–1.75×', or '1.04×' when both ends round to the same digits."""
    a, b = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    return measured(f"{a if a == b else f'{a}–{b}'}×")


def _causals(causal):
    """The maskings a macro's rows cover: both unless causal is given."""
    return (False, True) if causal is None else (causal,)


def register(env):
    @env.macro
    def bench_ratio(mode, peer, head_dims, causal=None):
        """The range, over the matching rows of the ratio table (both dtypes; both maskings unless causal is
        given), of flashdoc's geometric-mean ratio to peer over N >= 2k."""
        return times_range(*report.ratio_range(recorded_results(), mode, peer, head_dims, _causals(causal)))

    @env.macro
    def bench_worst_ratio(mode, peer, head_dims, causal=None):
        """The lowest ratio to peer in any matching row at any N >= 2k."""
        lo, _ = report.ratio_range(recorded_results(), mode, peer, head_dims, _causals(causal), stat="min")
        return times_range(lo, lo)

    @env.macro
    def bench_causal_ratio(min_n, max_n=None):
        """The range of flashdoc's causal forward TFLOP/s over its full forward's, for min_n <= N <= max_n."""
        ratios = report.causal_full_ratios(recorded_results(), min_n, max_n).values()
        if not ratios:
            raise ValueError(f"bench_causal_ratio: no causal/full pair with {min_n} <= N <= {max_n}")
        return times_range(min(ratios), max(ratios))

    @env.macro
    def bench_short_ahead(peer):
        """'k of n': in how many of the rows shorter than the ratio table's (512 and 1k tokens) flashdoc is faster
        than peer."""
        ratios = report.short_ratios(recorded_results(), peer)
        if not ratios:
            raise ValueError(f"bench_short_ahead: no short row measured against {peer!r}")
        return measured(f"{sum(r > 1 for r in ratios)} of {len(ratios)}")

    @env.macro
    def bench_twins(threshold):
        """Markdown table of flashdoc's rows whose bfloat16 and float16 speeds differ by more than threshold."""
        return report.twins_table(recorded_results(), threshold)
