"""Macros that put numbers from the variant, window fixed-cost, decoding, varlen and host-time recordings into a
page's prose, as ``benchmark`` does for the kernel benchmark: no sentence quotes one of these numbers by hand, so a
new recording changes the prose with it, and the build fails if a recording is older than its snippet. The words
around the numbers ("short of 0.9x", "so that claim holds") are checked against the same functions by
``tests/benchmarks/test_recorded_claims.py``.

    {{ variant_ratio("sliding window / dense causal", "fwd") }}          0.73x   (Part 7)
    {{ variant_plain_ms("window") }}                                      1.71 ms (the divisor of the window rows)
    {{ window_call_ms("window_cost") }}                                   1.26 ms (fwd+bwd, 1,024-key window)
    {{ fixed_cost("forward", "fixed") }}                                  5.2 µs a forward program besides its tiles
    {{ fixed_cost("dQ", "share") }}                                       24% of a dQ program at the 1,024-key window
    {{ decode_call_us("flashdoc", "graph_ms") }}                          12 to 37 us at the host-bound points
    {{ decode_call_excess_us() }}                                         21 us: the most a call took over its graph
    {{ decode_flex_lead() }}                                              1.06x to 1.47x   (Part 8)
    {{ decode_count("sdpa-cudnn", "at_least") }}                          six: points where flashdoc reads as fast
    {{ decode_paged_large() }}                                            0.93x to 1.00x: paged / contiguous, large
    {{ varlen_ratio("flashdoc-dense", "fwd", False) }}                    1.03x   (Part 10)
    {{ varlen_dense_range() }}                                            1.01-1.11x, fwd+bwd, both maskings
    {{ varlen_long("share") }}                                            94%: the FLOPs in sequences over 2,048
    {{ varlen_padded("flops") }}                                          6.9x: the padded batch's over the real
    {{ host_time_vs_sdpa() }}                                             1.8-2.2x SDPA's host time per call

The plain functions (``variant_row``, ``decode_against``, ...) return the numbers themselves, for the
tests.
"""

from __future__ import annotations

import json
import re

from benchmarks.report import fmt_n
from tools.outputs import snippet
from tools.site_macros.benchmark import measured, times_range

VARIANTS = "masking/gpu_variants"
WINDOW_COST = "masking/window_cost"
FIXED_COST = "masking/fixed_cost"
DECODE = "decoding/gpu_roofline"
VARLEN = "varlen/gpu_rate"
HOST_TIME = "triton/launch_overhead"

# A decode point measures the host, not the kernels, where flashdoc's call timed alone took more than this many
# times its kernels' time under a CUDA graph (Part 8).
HOST_BOUND_FACTOR = 2
# The methods whose calls Part 8 compares with their graph timings.
CALL_TIMED_METHODS = ("flashdoc", "sdpa-cudnn")
# The window whose forward + backward call Part 7 times in two recordings.
WINDOW = 1024


def _text(name: str, file: str) -> str:
    return snippet(name).recorded_file(file).read_text()


def _json(name: str, file: str) -> dict:
    return json.loads(_text(name, file))


def markdown_table(text: str) -> dict:
    """A markdown table's rows ("|" lines) as {first cell: [the other cells]}, header and rule left out."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return {cells[0]: cells[1:] for cells in rows[2:]}


def number(cell: str) -> float:
    """The first number in a table cell ('1,091 µs' -> 1091.0)."""
    return float(re.search(r"-?[\d.,]+", cell).group().replace(",", ""))


# Part 7: the variants benchmark and the window-cost table


def variant_row(what: str, mode: str, table: str = "targets", causal=None) -> dict:
    """The one row of the variants benchmark's ``targets`` (with ``ratio``, ``met``, ``threshold``) or ``ratios``
    table for this comparison, mode and, where both maskings are recorded, causal."""
    rows = [
        r
        for r in _json(VARIANTS, "variants.json")[table]
        if r["what"] == what and r["mode"] == mode and (causal is None or r["causal"] == causal)
    ]
    if len(rows) != 1:
        raise ValueError(f"{VARIANTS}: {len(rows)} rows of {table} for {what!r}, {mode}, causal={causal}")
    return rows[0]


def _variant_ms(what: str, keep) -> float:
    """The median ms of the one variants-benchmark row that ``keep`` accepts (a ValueError naming what if not one)."""
    rows = [r for r in _json(VARIANTS, "variants.json")["rows"] if keep(r)]
    if len(rows) != 1:
        raise ValueError(f"{VARIANTS}: {len(rows)} rows of {what}")
    return rows[0]["ms"]


def plain_forward_ms(group: str, causal: bool = True) -> float:
    """flashdoc's forward time with no window, softcap or ALiBi, causal or full, in this group of the variants
    benchmark's rows (the call a group's ratios divide by)."""
    return _variant_ms(
        f"flashdoc's plain forward in group {group!r}, causal={causal}",
        lambda r: (
            (r["group"], r["peer"], r["mode"], r["causal"]) == (group, "flashdoc", "fwd", causal)
            and r["window"] == [-1, -1]
            and not r["softcap"]
            and not r["alibi"]
        ),
    )


def window_cost_rows() -> dict:
    """The window-cost table as {width: (forward ms, forward + backward ms, forward + backward / causal)}."""
    rows = re.findall(
        r"^\| (\d+) \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \|$", _text(WINDOW_COST, "stdout.txt"), re.M
    )
    return {int(w): (float(fwd), float(both), float(ratio)) for w, fwd, both, ratio in rows}


def window_step(window) -> float:
    """The window-cost table's forward + backward time, in ms, at a window (left, 0) of this width."""
    return window_cost_rows()[window][1]


def window_call(source: str) -> float:
    """The forward + backward time of the (1,024, 0) window, as the window-cost table (``window_cost``) or the
    variants benchmark (``variants``) recorded it."""
    if source == "window_cost":
        return window_step(WINDOW)
    if source == "variants":
        return _variant_ms(
            f"flashdoc's window ({WINDOW}, 0) forward + backward",
            lambda r: (r["group"], r["peer"], r["mode"], r["window"]) == ("window", "flashdoc", "fwd_bwd", [WINDOW, 0]),
        )
    raise ValueError(f"window_call: source is 'window_cost' or 'variants', got {source!r}")


# Part 7: what a window's Hopper programs cost besides their tiles (benchmarks/kernels/window_fixed_cost.py)


def fixed_cost_fit(kernel: str) -> dict:
    """The fixed-cost fit of one kernel ("forward", "dK/dV" or "dQ"): ``fixed_us``, ``tile_us`` (a window's tile),
    ``causal_tile_us`` (dense causal's, per the window's tile width) and ``shares``."""
    fits = [f for f in _json(FIXED_COST, "fixed_cost.json")["fits"] if f["kernel"] == kernel]
    if len(fits) != 1:
        raise ValueError(f"{FIXED_COST}: {len(fits)} fits for kernel {kernel!r} (forward, dK/dV or dQ)")
    return fits[0]


def fixed_cost_program(kernel: str, window=WINDOW) -> dict:
    """One kernel's programs at a window (left, 0) of this width, or under dense causal (``"causal"``): ``tiles``
    (a program streams, on average), ``program_us``, ``config``, ``programs``."""
    left = None if window == "causal" else window
    rows = [r for r in _json(FIXED_COST, "fixed_cost.json")["programs"] if (r["kernel"], r["window"]) == (kernel, left)]
    if len(rows) != 1:
        raise ValueError(f"{FIXED_COST}: {len(rows)} rows of programs for kernel {kernel!r} at window {window!r}")
    return rows[0]


def fixed_share(kernel: str, window=WINDOW) -> float:
    """The fixed cost's share of one program's time at a window width, or under dense causal (``"causal"``)."""
    return fixed_cost_fit(kernel)["fixed_us"] / fixed_cost_program(kernel, window)["program_us"]


def window_kernels_us(window) -> float:
    """A forward + backward step's three Hopper kernels at a window (left, 0) of this width, each timed alone (the
    fixed-cost recording's kernel times, summed): the GPU's work for the step."""
    return sum(fixed_cost_program(kernel, window)["kernel_us"] for kernel in ("forward", "dK/dV", "dQ"))


def tile_speed_vs_causal(kernel: str) -> float:
    """A window's speed a tile against dense causal's, over the same keys: above 1, the window's tiles are faster."""
    fit = fixed_cost_fit(kernel)
    return fit["causal_tile_us"] / fit["tile_us"]


# Part 8: the decode benchmark


def decode_rows() -> tuple[dict, dict]:
    """(the recorded decode benchmark, its rows as {(batch, cache, method): row}), rows that failed left out."""
    recorded = _json(DECODE, "decode.json")
    return recorded, {(r["batch"], r["cache"], r["method"]): r for r in recorded["rows"] if "error" not in r}


def decode_call_group(group: str) -> tuple:
    """The methods of a host-bound reading: ``flashdoc`` (the contiguous cache) or ``paged`` (each page size)."""
    if group == "flashdoc":
        return ("flashdoc",)
    if group == "paged":
        return decode_paged_methods()
    raise ValueError(f"decode_call_group: group is 'flashdoc' or 'paged', got {group!r}")


def decode_host_bound_points(group: str = "flashdoc") -> list:
    """The (batch, cache) points, fewest tokens first, where every call of the group's methods took more than
    ``HOST_BOUND_FACTOR`` times its kernels: there the call-by-call timing measures the host's work in front of
    the kernels."""
    _, rows = decode_rows()
    methods = decode_call_group(group)
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}

    def bound(r):
        return bool(r.get("ms") and r.get("graph_ms")) and r["ms"] > HOST_BOUND_FACTOR * r["graph_ms"]

    return sorted(
        (p for p in points if all(bound(rows.get(p + (m,)) or {}) for m in methods)),
        key=lambda point: (point[0] * point[1], point),
    )


def decode_points_in_words(points: list) -> str:
    """'1 × 4k, 1 × 32k and 8 × 4k' for [(1, 4096), (1, 32768), (8, 4096)]."""
    names = [f"{b} × {fmt_n(c)}" for b, c in points]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def decode_failed_points(method: str) -> list:
    """The (batch, cache) points, fewest tokens first, where ``method`` ran but has no timing: its row records an
    error (a compile that failed, say), not a cache too large to fit, which leaves no row at all."""
    recorded, _ = decode_rows()
    failed = {(r["batch"], r["cache"]) for r in recorded["rows"] if r["method"] == method and "error" in r}
    return sorted(failed, key=lambda point: (point[0] * point[1], point))


def decode_worst_paged(key: str = "tbps") -> tuple:
    """(ratio, (batch, cache)): the lowest bandwidth of any page size over the contiguous cache's, and where, timed
    call by call (``tbps``) or in a CUDA graph (``graph_tbps``)."""
    return min((ratio, point) for point, ratio in decode_paged_ratios(key).items())


def decode_worst_paged_call_point() -> tuple:
    """The (batch, cache) point where the call-by-call claim on pages is worst."""
    return decode_worst_paged("tbps")[1]


def decode_worst_paged_call_us(what: str) -> tuple[float, float]:
    """The least and most microseconds at that point: ``paged`` every page size's call timed alone, ``contiguous``
    the contiguous cache's, ``kernels`` every page size's call in a CUDA graph."""
    _, rows = decode_rows()
    point = decode_worst_paged_call_point()
    methods, timing = {
        "paged": (decode_paged_methods(), "ms"),
        "contiguous": (("flashdoc",), "ms"),
        "kernels": (decode_paged_methods(), "graph_ms"),
    }[what]
    us = [rows[point + (m,)][timing] * 1e3 for m in methods]
    return min(us), max(us)


def decode_call_excess(methods: tuple = CALL_TIMED_METHODS) -> dict:
    """{(batch, cache, method): µs} a call timed alone took beyond the same call replayed in a CUDA graph, at the
    points that are not host-bound."""
    _, rows = decode_rows()
    host_bound = decode_host_bound_points()
    return {
        (b, c, m): (r["ms"] - r["graph_ms"]) * 1e3
        for (b, c, m), r in rows.items()
        if m in methods and (b, c) not in host_bound and r.get("ms") and r.get("graph_ms")
    }


def decode_against(peer: str, key: str = "graph_tbps") -> dict:
    """flashdoc's bandwidth over peer's at each point where both have one, in a CUDA graph (``graph_tbps``) or call
    by call (``tbps``)."""
    _, rows = decode_rows()
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}
    return {
        p: rows[p + ("flashdoc",)][key] / rows[p + (peer,)][key]
        for p in points
        if (rows.get(p + (peer,)) or {}).get(key)
    }


def decode_rounds_against(peer: str) -> dict:
    """flashdoc's bandwidth over peer's in each CUDA-graph round, at each point where both have rounds: a list per
    point. The benchmark rebuilds every method's inputs for each round and rotates their order, so the rounds
    show how far the ratio moves within one run."""
    _, rows = decode_rows()
    out = {}
    for (b, c, m), row in rows.items():
        if m != "flashdoc" or (b, c, peer) not in rows:
            continue
        own, theirs = row.get("graph_rounds_ms"), rows[(b, c, peer)].get("graph_rounds_ms")
        if own and theirs:
            if len(own) != len(theirs):
                raise ValueError(
                    f"decode_rounds_against: {b} x {c} has {len(own)} flashdoc rounds and {len(theirs)} of {peer}'s"
                )
            out[(b, c)] = [peer_ms / own_ms for own_ms, peer_ms in zip(own, theirs)]
    return out


def decode_rounds_behind(peer: str) -> dict:
    """``decode_rounds_against(peer)`` at the points where flashdoc's median graph bandwidth trails peer's."""
    medians = decode_against(peer)
    return {p: rounds for p, rounds in decode_rounds_against(peer).items() if medians[p] < 1}


# The decode points whose caches hold at least this many tokens in all: the copy-share claim's points
# (``benchmarks/decode.py``'s COPY_SHARE_MIN_TOKENS, which a test holds this to).
LARGE_DECODE_TOKENS = 8 * 32768


def decode_paged_methods() -> tuple:
    """The recorded paged-cache methods, one per page size the benchmark timed."""
    _, rows = decode_rows()
    return tuple(sorted({m for _, _, m in rows if m.startswith("flashdoc-paged")}))


def decode_paged_ratios(key: str = "graph_tbps") -> dict:
    """{point: the slowest page size's bandwidth over the contiguous cache's}, in a CUDA graph (``graph_tbps``) or
    call by call (``tbps``)."""
    _, rows = decode_rows()
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}
    paged = decode_paged_methods()
    return {p: min(rows[p + (m,)][key] for m in paged) / rows[p + ("flashdoc",)][key] for p in points}


def decode_paged_ratio(point: tuple, page: int, key: str = "graph_tbps") -> float:
    """Page size ``page``'s bandwidth over the contiguous cache's at ``point`` (batch, cache)."""
    _, rows = decode_rows()
    method = f"flashdoc-paged{page}"
    if point + (method,) not in rows:
        raise ValueError(f"decode_paged_ratio: the recording has no {method} row at {point}")
    return rows[point + (method,)][key] / rows[point + ("flashdoc",)][key]


def decode_smallest_point() -> tuple:
    """(1, the shortest cache): the decode point with the fewest tokens."""
    _, rows = decode_rows()
    return min(((b, c) for b, c, m in rows if m == "flashdoc"), key=lambda point: (point[0] * point[1], point))


NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def in_words(n: int) -> str:
    """'eleven' for 11; digits past twelve."""
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


# Part 10: the varlen benchmark


def varlen_rates() -> dict:
    """{(method, mode, causal): TFLOP/s} of the recorded varlen benchmark."""
    return {(r["method"], r["mode"], r["causal"]): r["tflops"] for r in _json(VARLEN, "results.json")["records"]}


def varlen_over(method: str, mode: str, causal) -> float:
    """The packed varlen call's rate over method's, in this mode and masking."""
    rate = varlen_rates()
    return rate[("flashdoc-varlen", mode, causal)] / rate[(method, mode, causal)]


def varlen_lengths() -> tuple[list, int]:
    """(the packed batch's sequence lengths, the dense comparison's sequence length)."""
    meta = _json(VARLEN, "results.json")["meta"]
    return meta["lengths"], meta["dense_seqlen"]


def varlen_long_sequences() -> tuple[int, float]:
    """(how many of the packed batch's sequences are longer than the dense comparison's, their share of the
    batch's attention FLOPs, which grow with each length's square)."""
    lengths, dense = varlen_lengths()
    long = [n for n in lengths if n > dense]
    return len(long), sum(n * n for n in long) / sum(n * n for n in lengths)


def varlen_padding_factor(what: str) -> float:
    """How much more the batch padded to its longest sequence holds than the real one: ``tokens`` or attention
    ``flops``."""
    lengths, _ = varlen_lengths()
    if what == "tokens":
        return len(lengths) * max(lengths) / sum(lengths)
    if what == "flops":
        return len(lengths) * max(lengths) ** 2 / sum(n * n for n in lengths)
    raise ValueError(f"varlen_padded: what is tokens or flops, got {what!r}")


# Host time per call (the usage page)


def host_time_ratios() -> dict:
    """flashdoc's host time per call (launch cache on) over SDPA's, for each call of the recorded table."""
    rows = markdown_table(_text(HOST_TIME, "host_time.md"))
    return {call: number(cells[1]) / number(cells[2]) for call, cells in rows.items()}


def host_time_us_of(call: str) -> float:
    """flashdoc's host time in µs for one call of the recorded table (launch cache on): 'forward', 'forward +
    backward', ..."""
    rows = markdown_table(_text(HOST_TIME, "host_time.md"))
    if call not in rows:
        raise ValueError(f"{HOST_TIME}: the table has calls {sorted(rows)}, not {call!r}")
    return number(rows[call][1])


def us_range(low: float, high: float) -> str:
    """'12 to 37 µs', or '50 µs' where both ends round alike."""
    a, b = f"{low:.0f}", f"{high:.0f}"
    return measured(f"{a} µs" if a == b else f"{a} to {b} µs")


def register(env):
    @env.macro
    def variant_ratio(what, mode, table="targets", causal=None):
        """One ratio of the variants benchmark, as '0.73×'."""
        ratio = variant_row(what, mode, table, causal)["ratio"]
        return times_range(ratio, ratio)

    @env.macro
    def variant_plain_ms(group, causal=True):
        """'1.71 ms': the call without a variant that a group of variant rows divides by (dense causal by default)."""
        return measured(f"{plain_forward_ms(group, causal):.2f} ms")

    @env.macro
    def window_call_ms(source):
        """'1.26 ms': the (1,024, 0) window's forward + backward call in one of the two recordings."""
        return measured(f"{window_call(source):.2f} ms")

    @env.macro
    def window_step_ms(window):
        """'0.93 ms': the window-cost table's forward + backward time at a window (left, 0) of this width."""
        return measured(f"{window_step(window):.2f} ms")

    @env.macro
    def window_forward_ms(window, timed="call"):
        """'0.14 ms': the forward at a window (left, 0) of this width: ``call`` as the window-cost table timed the
        public call, ``kernel`` its kernel alone, as the fixed-cost recording timed it."""
        if timed not in ("call", "kernel"):
            raise ValueError(f"window_forward_ms: timed is 'call' or 'kernel', got {timed!r}")
        ms = (
            window_cost_rows()[window][0]
            if timed == "call"
            else fixed_cost_program("forward", window)["kernel_us"] / 1e3
        )
        return measured(f"{ms:.2f} ms")

    @env.macro
    def window_kernels_ms(window):
        """'0.44 ms': a window's forward + backward kernels at that width, each timed alone."""
        return measured(f"{window_kernels_us(window) / 1e3:.2f} ms")

    @env.macro
    def fixed_cost(kernel, what, window=WINDOW):
        """One number of the window fixed-cost fit for kernel ("forward", "dK/dV" or "dQ"): ``fixed`` ('5.2 µs' a
        program besides its tiles), ``tile`` ('1.20 µs' a window's tile), ``causal_tile`` (dense causal's, per the
        same keys), ``vs_causal`` ('0.91×': a window's speed a tile against causal's), ``share`` ('19%': the fixed
        cost's share of a program at window, a width or "causal") or ``tiles`` ('18 tiles' a program streams
        there)."""
        fit = fixed_cost_fit(kernel)
        if what == "fixed":
            return measured(f"{fit['fixed_us']:.1f} µs")
        if what in ("tile", "causal_tile"):
            return measured(f"{fit[what + '_us']:.2f} µs")
        if what == "vs_causal":
            ratio = tile_speed_vs_causal(kernel)
            return times_range(ratio, ratio)
        if what == "share":
            return measured(f"{fixed_share(kernel, window):.0%}")
        if what == "tiles":
            return measured(f"{fixed_cost_program(kernel, window)['tiles']:.0f} tiles")
        raise ValueError(f"fixed_cost: what is fixed, tile, causal_tile, vs_causal, share or tiles, got {what!r}")

    @env.macro
    def decode_host_bound():
        """'1 × 4k and 1 × 32k': the points where every contiguous call of flashdoc's took more than twice its
        kernels' time under the graph, or '' where none did (a page reads the recording either way)."""
        points = decode_host_bound_points()
        return measured(decode_points_in_words(points)) if points else ""

    @env.macro
    def decode_call_excess_us():
        """'20 µs': the most a call timed alone took beyond the same call in a CUDA graph, away from the host-bound
        points, over flashdoc's and cuDNN's calls."""
        return measured(f"{max(decode_call_excess().values()):.0f} µs")

    @env.macro
    def decode_worst_paged_call(what):
        """At the point where the call-by-call claim on pages is worst: ``point`` ('1 × 4k'), or the calls' times
        ('127 to 149 µs'): ``paged``, ``contiguous`` or ``kernels`` (the paged calls in a CUDA graph)."""
        if what == "point":
            return measured(decode_points_in_words([decode_worst_paged_call_point()]))
        if what not in ("paged", "contiguous", "kernels"):
            raise ValueError(f"decode_worst_paged_call: what is point, paged, contiguous or kernels, got {what!r}")
        return us_range(*decode_worst_paged_call_us(what))

    @env.macro
    def decode_flex_lead():
        """'1.06× to 1.47×': the range of flashdoc's lead over FlexAttention's decoding kernel."""
        lead = decode_against("flex").values()
        return measured(f"{min(lead):.2f}× to {max(lead):.2f}×")

    @env.macro
    def decode_failed(method):
        """'64 × 32k': the points where ``method`` has no timing because its run failed."""
        points = decode_failed_points(method)
        if not points:
            raise ValueError(f"decode_failed: every point has a timing for {method!r}; reword the prose")
        return measured(decode_points_in_words(points))

    @env.macro
    def decode_count(peer, which):
        """How many decode points, in words: ``points`` (with a graph timing for both), ``at_least`` (flashdoc
        reads at least as fast as peer there) or ``behind``."""
        ratios = decode_against(peer).values()
        counts = {
            "points": len(ratios),
            "at_least": sum(r >= 1 for r in ratios),
            "behind": sum(r < 1 for r in ratios),
        }
        if which not in counts:
            raise ValueError(f"decode_count: which is one of {sorted(counts)}, got {which!r}")
        return measured(in_words(counts[which]))

    @env.macro
    def hardware(row):
        """'50 MiB': a row's value in the GPU table Part 2's roofline recorded (``hardware.md``)."""
        rows = markdown_table(_text("flashattention/gpu_roofline", "hardware.md"))
        if row not in rows:
            raise ValueError(f"hardware: the recorded table has rows {sorted(rows)}, not {row!r}")
        return measured(rows[row][0])

    @env.macro
    def decode_claims(which):
        """How many of the decode benchmark's claims (graph timing), in words: ``all`` or ``missed``."""
        recorded, _ = decode_rows()
        checks = recorded["targets"]["graph_tbps"]
        counts = {"all": len(checks), "missed": sum(not c["met"] for c in checks)}
        if which not in counts:
            raise ValueError(f"decode_claims: which is one of {sorted(counts)}, got {which!r}")
        return measured(in_words(counts[which]))

    @env.macro
    def decode_cudnn_shortfall():
        """'0.3%': the most flashdoc's graph-timed bandwidth trails cuDNN's at any point."""
        behind = [r for r in decode_against("sdpa-cudnn").values() if r < 1]
        if not behind:
            raise ValueError("decode_cudnn_shortfall: flashdoc trails cuDNN nowhere here; reword the prose")
        return measured(f"{1 - min(behind):.1%}")

    @env.macro
    def decode_cudnn_rounds(what):
        """Where flashdoc's graph-timed bandwidth trails cuDNN's, the same ratio round by round: ``count`` (rounds
        a point, in words), ``spread`` (the widest gap between one point's highest and lowest round, '0.1%')."""
        behind = decode_rounds_behind("sdpa-cudnn")
        if not behind:
            raise ValueError("decode_cudnn_rounds: flashdoc trails cuDNN nowhere here; reword the prose")
        if what == "count":
            return measured(in_words(min(len(r) for r in behind.values())))
        if what == "spread":
            return measured(f"{max(max(r) - min(r) for r in behind.values()):.1%}")
        raise ValueError(f"decode_cudnn_rounds: what is count or spread, got {what!r}")

    @env.macro
    def decode_call_vs_cudnn(what):
        """Call by call, flashdoc's bandwidth over cuDNN's: ``range`` ('0.93× to 1.01×'), ``least`` (the point
        where it is least, '1 × 4k') or ``lowest`` (the least ratio, '0.54×')."""
        ratios = decode_against("sdpa-cudnn", "tbps")
        if what == "range":
            return measured(f"{min(ratios.values()):.2f}× to {max(ratios.values()):.2f}×")
        if what == "least":
            return measured(decode_points_in_words([min(ratios, key=ratios.get)]))
        if what == "lowest":
            return measured(f"{min(ratios.values()):.2f}×")
        raise ValueError(f"decode_call_vs_cudnn: what is range, least or lowest, got {what!r}")

    @env.macro
    def decode_paged_small(page=None):
        """'0.95×': at the smallest point (one sequence, the shortest cache), the slowest page size's bandwidth over
        the contiguous cache's, or page size ``page``'s."""
        point = decode_smallest_point()
        if page is None:
            return times_range(decode_paged_ratios()[point], decode_paged_ratios()[point])
        ratio = decode_paged_ratio(point, page)
        return times_range(ratio, ratio)

    @env.macro
    def decode_paged_large():
        """'0.93× to 1.00×': the slowest page size over the contiguous cache, at the points of 8 x 32k tokens up."""
        ratios = [r for (b, c), r in decode_paged_ratios().items() if b * c >= LARGE_DECODE_TOKENS]
        return times_range(min(ratios), max(ratios))

    @env.macro
    def varlen_ratio(method, mode, causal):
        """'1.03×': the packed varlen call's rate over method's."""
        ratio = varlen_over(method, mode, causal)
        return times_range(ratio, ratio)

    @env.macro
    def varlen_dense_range():
        """'1.01–1.11×': the packed forward + backward over the dense one's rate, over both maskings."""
        ratios = [varlen_over("flashdoc-dense", "fwd_bwd", causal) for causal in (False, True)]
        return times_range(min(ratios), max(ratios))

    @env.macro
    def varlen_long(what):
        """Of the packed batch's sequences longer than the dense comparison's: ``count`` ('eleven'), ``share``
        ('94%' of the batch's attention FLOPs) or ``length`` ('2,048 tokens', the dense comparison's sequences)."""
        count, share = varlen_long_sequences()
        if what == "count":
            return measured(in_words(count))
        if what == "share":
            return measured(f"{share:.0%}")
        if what == "length":
            return measured(f"{varlen_lengths()[1]:,} tokens")
        raise ValueError(f"varlen_long: what is count, share or length, got {what!r}")

    @env.macro
    def varlen_padded(what):
        """'4.1×' (``tokens``) or '6.9×' (``flops``): the batch padded to its longest sequence over the real one."""
        return measured(f"{varlen_padding_factor(what):.1f}×")

    @env.macro
    def host_time_us(call):
        """'393 µs': flashdoc's host time for one call of the recorded table (launch cache on), a row's name."""
        return measured(f"{host_time_us_of(call):.0f} µs")

    @env.macro
    def host_time_vs_sdpa():
        """'1.8–2.2×': flashdoc's host time per call over SDPA's, over the recorded calls."""
        ratios = host_time_ratios().values()
        return times_range(min(ratios), max(ratios), digits=1)
