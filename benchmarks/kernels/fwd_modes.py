"""Why the dense Hopper forward runs at two speeds: single calls timed one by one under conditions that separate
the causes.

    PYTHONPATH=. python3 benchmarks/kernels/fwd_modes.py --json fwd_modes.json   # H200: 1-2 minutes, mostly compiling
    PYTHONPATH=. python3 benchmarks/kernels/fwd_modes.py --calls 600 --masks causal --conditions fresh fixed

In every recording the dense forward's do_bench 20th percentile and median land about 10-15% apart (causal, 16k
tokens, d = 128, bf16: 1.487 against 1.654 ms; benchmarks/FINDINGS.md, "Open leads"), so its calls fall into two
modes. If the slow one can be removed, that is 10% on the dense forward. do_bench reports quantiles of a run; this
keeps every call: at (batch 1, 16,384 tokens, 16 heads, d = 128, bf16), causal and full, each call bracketed by its
own CUDA events after do_bench's L2 flush (a 256 MB buffer zeroed), with the output's address and the SM clock. The
candidate causes and the conditions that tell them apart:

- ``fresh``: ``flashdoc.flash_attn_func``, its output dropped at once, as do_bench's ``fn()`` drops it (so the
  allocator can hand the next call the same block: the addresses say whether it did). What the recordings time.
- ``fresh-held``: the same call, the previous output kept alive until the next one exists, as ``out = f(...)`` in
  a loop keeps it: the allocator alternates two blocks. Tests (b), the output's address.
- ``fixed``: ``flashdoc.kernels.forward.attn_fwd``, the kernel entry the public forward calls (with
  bottom_right=True, as ``flash_attn_func`` passes), writing one preallocated output and LSE every call: no
  allocation and no public-API host path. If ``fresh`` is bimodal and this is not, the cause lies in the
  allocation or the API.
- ``rotate``: the same entry over ``--rotate`` preallocated outputs (and LSEs) taken in turn: distinct, known
  addresses with the allocator out of the picture; the address table says whether the mode follows the address.
- ``nonpersistent``: the Hopper kernel's own config with PERSISTENT off (one program per work item instead of one
  per SM taking items in turn), one preallocated output. Tests (a): with a persistent grid, which program takes
  which item through the atomic counter, and so the last round, differs from call to call. The kernel has no
  static (non-atomic) item order: even here each program claims its one item from the counter, in the order the
  hardware starts programs (FINDINGS: a static round-robin schedule collapsed at long causal N and was removed).
  Only where the Hopper kernel takes the call.
- (c), the clocks: every call gets the SM clock sampled nearest to it, through NVML (``torch.cuda.clock_rate``,
  which needs pynvml) every ``--clock-ms`` (10 ms), or else ``nvidia-smi --query-gpu=clocks.sm`` run every
  ``--clock-ms`` (100 ms) in a background thread; the report says which, or that none could be read. A sample
  spans many calls (a causal call takes 1.5 ms), so the clock tells slow stretches apart, not single calls.

The calls are not synchronised one by one (do_bench does not either): each block of calls is anchored to the host
clock by an event, and a call's wall time is the anchor's plus its start event's offset, which is how the clock
samples are matched to calls. Each condition's calls are split into ``--rounds`` blocks, one a round, the order of
the masks and of the conditions rotated every round, so that drift over the run does not pass for a condition's
effect. Every thread of the process runs on one CPU, as the benchmark pins it (``--no-pin`` leaves it free).

Per mask and condition the report gives: the modes, split at the largest relative gap between sorted times if it
exceeds ``--threshold`` (4%; gaps leaving fewer than 2% of the calls or 3 on one side are passed over, so that a few
stragglers do not make a mode), each mode's count and median, slow/fast, the slow share, the slow share at the
mask's common split (all its conditions pooled, so that a condition without a slow mode reads 0%), the slow share
by round, how often consecutive calls change mode against a random order of the same calls (well above: the modes
alternate; well below: they come in runs), the clock's median per mode, and how far the mode follows the output's
address (Cramer's V over the addresses with 5 calls or more: 1 when each address has one mode, about 0 when the
address says nothing), with the table of addresses. ``--json PATH`` writes every call.
"""

import argparse
import bisect
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout's flashdoc and benchmarks
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.variants import rotated  # noqa: E402  (the variants benchmark's round order)

CONDITIONS = ("fresh", "fresh-held", "fixed", "rotate", "nonpersistent")
MASKS = ("causal", "full")
THRESHOLD = 0.04  # a relative gap between sorted times that splits two modes
MIN_ADDRESS_CALLS = 5  # an address with fewer calls says nothing about its mode
FOLLOWS_V = 0.7  # Cramer's V from which the mode is said to follow the address


# ---------------------------------------------------------------------------------------------------------------
# Analysis (pure: no GPU; tests/benchmarks/test_fwd_modes.py)
# ---------------------------------------------------------------------------------------------------------------


def split_modes(times, threshold: float = THRESHOLD, min_count: int | None = None) -> dict:
    """The calls' modes: the sorted times split at their largest relative gap t[i+1] / t[i] - 1 when it exceeds
    ``threshold``, else one mode. Gaps that would leave fewer than ``min_count`` calls on one side (default: 2% of
    the calls, at least 3) are not considered: a few stragglers are not a mode.

    Returns {"n", "gap": the largest gap considered (None if none), "cut": the time between the modes (None with
    one mode), "labels": per call in the given order, 0 fast or 1 slow, "modes": per mode {"count", "share",
    "median", "lo", "hi"}, "ratio": the slow mode's median over the fast one's (None with one mode)}."""
    n = len(times)
    if min_count is None:
        min_count = max(3, n // 50)
    s = sorted(times)
    gap, at = None, None
    for i in range(min_count - 1, n - min_count):  # between s[i] and s[i + 1]: i + 1 calls below, n - i - 1 above
        g = s[i + 1] / s[i] - 1
        if gap is None or g > gap:
            gap, at = g, i
    cut = (s[at] + s[at + 1]) / 2 if gap is not None and gap > threshold else None
    labels = labels_at(times, cut)
    return dict(n=n, gap=gap, cut=cut, labels=labels, **mode_stats(times, labels))


def labels_at(times, cut) -> list:
    """Each call's mode under a given cut: 1 (slow) above it, 0 below; all 0 without a cut."""
    return [0] * len(times) if cut is None else [int(t > cut) for t in times]


def mode_stats(times, labels) -> dict:
    """{"modes": per mode present (fast first) its count, share, median, lo and hi; "ratio": slow median / fast
    median, None with one mode}."""
    modes = []
    for m in (0, 1):
        mine = [t for t, label in zip(times, labels) if label == m]
        if mine:
            modes.append(
                dict(
                    count=len(mine),
                    share=len(mine) / len(times),
                    median=statistics.median(mine),
                    lo=min(mine),
                    hi=max(mine),
                )
            )
    ratio = modes[1]["median"] / modes[0]["median"] if len(modes) == 2 else None
    return dict(modes=modes, ratio=ratio)


def address_association(labels, addresses, min_calls: int = MIN_ADDRESS_CALLS, follows_v: float = FOLLOWS_V) -> dict:
    """How far the mode follows the output's address: the contingency table {address: [fast calls, slow calls]}
    (every address, in order of first use) and Cramer's V over the addresses with ``min_calls`` calls or more
    (V = sqrt(chi2 / n) for two modes: 1 when every address has one mode, near 0 when the address says nothing;
    an address used once is trivially of one mode, hence the minimum). "v" and "follows" (V >= follows_v) are
    None where it cannot be told: one mode, or fewer than two addresses with enough calls."""
    table = {}
    for label, address in zip(labels, addresses):
        table.setdefault(address, [0, 0])[label] += 1
    kept = [counts for counts in table.values() if sum(counts) >= min_calls]
    n = sum(sum(counts) for counts in kept)
    columns = [sum(counts[m] for counts in kept) for m in (0, 1)]
    v = None
    if len(kept) >= 2 and all(columns):
        chi2 = 0.0
        for counts in kept:
            row = sum(counts)
            for m in (0, 1):
                expected = row * columns[m] / n
                chi2 += (counts[m] - expected) ** 2 / expected
        v = math.sqrt(chi2 / n)
    return dict(table=table, addresses=len(table), kept=len(kept), v=v, follows=None if v is None else v >= follows_v)


def alternation(blocks) -> dict:
    """How often consecutive calls change mode, against independent draws: blocks, each a list of one block's labels
    in call order (calls of different blocks are not consecutive). "observed": changes / pairs of consecutive
    calls; "independent": the same expected from a random order of each block's own calls (2 n0 n1 / m changes in
    a block of m calls, n0 and n1 of each mode). Observed well above independent: the modes alternate; well
    below: they come in runs. Both None without a pair."""
    pairs = changes = 0
    expected = 0.0
    for labels in blocks:
        m = len(labels)
        if m < 2:
            continue
        pairs += m - 1
        changes += sum(a != b for a, b in zip(labels, labels[1:]))
        slow = sum(labels)
        expected += 2 * (m - slow) * slow / m
    if not pairs:
        return dict(pairs=0, changes=0, observed=None, independent=None)
    return dict(pairs=pairs, changes=changes, observed=changes / pairs, independent=expected / pairs)


def match_clocks(calls, samples, tolerance: float) -> list:
    """Each call's SM clock: the median of the samples taken during it, else the sample nearest its middle if one
    lies within ``tolerance`` seconds, else None. calls: (start, end) wall times in seconds; samples: (time,
    MHz), sorted by time."""
    times = [t for t, _ in samples]
    clocks = []
    for start, end in calls:
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        if hi > lo:
            clocks.append(statistics.median(mhz for _, mhz in samples[lo:hi]))
            continue
        mid = (start + end) / 2
        near = [i for i in (lo - 1, lo) if 0 <= i < len(times)]
        best = min(near, key=lambda i: abs(times[i] - mid), default=None)
        clocks.append(samples[best][1] if best is not None and abs(times[best] - mid) <= tolerance else None)
    return clocks


def clocks_by_mode(labels, clocks) -> list:
    """The median clock of each mode's calls (fast, slow), None where none of its calls has one."""
    medians = []
    for m in (0, 1):
        mine = [c for label, c in zip(labels, clocks) if label == m and c is not None]
        medians.append(statistics.median(mine) if mine else None)
    return medians


def summarise(records, threshold: float = THRESHOLD) -> list:
    """One summary per (mask, condition), in order of first appearance, from per-call records {"mask",
    "condition", "round", "ms", "ptr", "clock_mhz"} listed in call order: ``split_modes`` of its times and the
    rest of the report (module docstring). The mask's common cut is ``split_modes`` of all its conditions' calls
    pooled."""
    groups, by_mask = {}, {}
    for r in records:
        groups.setdefault((r["mask"], r["condition"]), []).append(r)
        by_mask.setdefault(r["mask"], []).append(r["ms"])
    common = {mask: split_modes(times, threshold)["cut"] for mask, times in by_mask.items()}
    summaries = []
    for (mask, condition), calls in groups.items():
        times = [r["ms"] for r in calls]
        modes = split_modes(times, threshold)
        labels = modes.pop("labels")
        rounds = {}
        for r, label in zip(calls, labels):
            rounds.setdefault(r["round"], []).append(label)
        cut = common[mask]
        summaries.append(
            dict(
                mask=mask,
                condition=condition,
                **modes,
                p10_p90=_quantile(times, 0.9) / _quantile(times, 0.1),
                slow_share=sum(labels) / len(labels),
                common_cut=cut,
                common_slow_share=None if cut is None else sum(labels_at(times, cut)) / len(times),
                round_slow_shares={k: sum(v) / len(v) for k, v in rounds.items()},
                alternation=alternation(list(rounds.values())),
                clocks=clocks_by_mode(labels, [r.get("clock_mhz") for r in calls]),
                address=address_association(labels, [r["ptr"] for r in calls]),
            )
        )
    return summaries


def _quantile(values, q: float) -> float:
    """The q-quantile, linear between the order statistics (numpy's default)."""
    s = sorted(values)
    x = q * (len(s) - 1)
    i = int(x)
    return s[i] if i + 1 >= len(s) else s[i] + (s[i + 1] - s[i]) * (x - i)


def report(summaries) -> str:
    """Markdown tables of ``summarise``'s summaries: one row per (mask, condition), then each condition's address
    table where it used two addresses or more."""

    def num(x, fmt):
        return "-" if x is None else format(x, fmt)

    lines = [
        "| mask | condition | calls | fast ms (n) | slow ms (n) | slow/fast | gap | slow share | at common cut | "
        "by round | changes: seen / random | MHz fast / slow | p90/p10 | addresses (V) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        modes = s["modes"] + [None] * (2 - len(s["modes"]))
        cells = [f"{m['median']:.3f} ({m['count']})" if m else "-" for m in modes]
        rounds = " ".join(f"{v:.0%}" for v in s["round_slow_shares"].values())
        alt = s["alternation"]
        a = s["address"]
        follows = "" if a["follows"] is None else (" follows" if a["follows"] else "")
        lines.append(
            f"| {s['mask']} | {s['condition']} | {s['n']} | {cells[0]} | {cells[1]} | {num(s['ratio'], '.3f')} | "
            f"{num(s['gap'], '.1%')} | {s['slow_share']:.0%} | {num(s['common_slow_share'], '.0%')} | {rounds} | "
            f"{num(alt['observed'], '.2f')} / {num(alt['independent'], '.2f')} | "
            f"{num(s['clocks'][0], '.0f')} / {num(s['clocks'][1], '.0f')} | {s['p10_p90']:.3f} | "
            f"{a['addresses']} ({num(a['v'], '.2f')}{follows}) |"
        )
    for s in summaries:
        table = s["address"]["table"]
        if len(table) < 2:
            continue
        base = min(table)
        lines += ["", f"{s['mask']}, {s['condition']}: calls per output address (offset from the lowest), by mode"]
        lines += ["", "| address | fast | slow |", "|---|---|---|"]
        for address, (fast, slow) in sorted(table.items(), key=lambda item: -sum(item[1]))[:12]:
            offset = address - base
            lines.append(f"| +{offset:#x} ({offset / 2**20:.1f} MiB) | {fast} | {slow} |")
        if len(table) > 12:
            lines.append(f"| ({len(table) - 12} more) | | |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Clock sampling
# ---------------------------------------------------------------------------------------------------------------


class ClockSampler:
    """The SM clock sampled in a background thread, each sample stamped with ``time.perf_counter()``: through NVML
    (``torch.cuda.clock_rate``, needs pynvml) where it answers, else one ``nvidia-smi`` query per sample (stamped
    at the query's middle), else nothing. ``source`` says which."""

    def __init__(self, device: int, interval_ms: float | None = None):
        self.device, self.samples, self.stop_event = device, [], threading.Event()
        self.thread = None
        self.source = "none (neither pynvml nor nvidia-smi answered)"
        self.read = None
        try:
            torch.cuda.clock_rate(device)
            self.read, self.source = (lambda: torch.cuda.clock_rate(device)), "NVML (torch.cuda.clock_rate)"
            default_ms = 10
        except Exception:  # pynvml missing, or NVML unusable here
            smi = shutil.which("nvidia-smi")
            default_ms = 100
            for gpu in _smi_ids(device) if smi is not None else ():
                command = [smi, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", gpu]
                if _smi_clock(command) is not None:
                    self.read, self.source = (lambda command=command: _smi_clock(command)), f"nvidia-smi -i {gpu}"
                    break
        self.interval = (interval_ms or default_ms) / 1e3
        if self.read is not None:
            self.source += f", every {self.interval * 1e3:.0f} ms"

    def _run(self):
        while not self.stop_event.is_set():
            before = time.perf_counter()
            try:
                mhz = self.read()
            except Exception:
                mhz = None
            after = time.perf_counter()
            if mhz is not None:
                self.samples.append(((before + after) / 2, float(mhz)))
            self.stop_event.wait(max(0.0, self.interval - (after - before)))

    def __enter__(self):
        if self.read is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=10)

    def tolerance(self) -> float:
        """How far from a call a sample may lie and still count as its clock: 1.5 sampling periods (as sampled:
        an nvidia-smi query may take longer than the period asked for)."""
        gaps = [b[0] - a[0] for a, b in zip(self.samples, self.samples[1:])]
        return 1.5 * max(self.interval, statistics.median(gaps) if gaps else 0.0)


def _smi_ids(device: int) -> list:
    """nvidia-smi's -i for a torch device, to try in turn: its PCI bus id where torch gives one
    (CUDA_VISIBLE_DEVICES may renumber the devices), then its index."""
    props = torch.cuda.get_device_properties(device)
    ids = [str(device)]
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        ids.insert(0, f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0")
    return ids


def _smi_clock(command):
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=5).stdout.strip()
        return float(out.splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# Timing (GPU)
# ---------------------------------------------------------------------------------------------------------------


def make_calls(q, k, v, causal: bool, names, rotate: int) -> dict:
    """{condition: (call returning the output it wrote, keep the previous output alive)} for the conditions in
    ``names`` that can run here (``nonpersistent`` only on the Hopper kernel)."""
    import flashdoc
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.forward import attn_fwd
    from flashdoc.kernels.launch import on_device

    scale = q.shape[-1] ** -0.5

    def lse_like():
        return torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)

    outs = [(torch.empty_like(q), lse_like()) for _ in range(max(1, rotate))]
    turn = [0]

    def fresh():
        return flashdoc.flash_attn_func(q, k, v, causal=causal)

    def fixed():
        out, lse = outs[0]
        attn_fwd(q, k, v, out, lse, scale, causal, True)  # the public forward's entry and arguments
        return out

    def rotating():
        out, lse = outs[turn[0] % len(outs)]
        turn[0] += 1
        attn_fwd(q, k, v, out, lse, scale, causal, True)
        return out

    calls = {"fresh": (fresh, False), "fresh-held": (fresh, True), "fixed": (fixed, False), "rotate": (rotating, False)}
    if fh.supports(q, causal):
        config = (*fh.table_config(fh.table_key(q, causal), False)[:4], False)

        def nonpersistent():
            out, lse = outs[0]
            with on_device(q.device):
                fh.attn_fwd_hopper(q, k, v, out, lse, scale, causal, True, config)
            return out

        calls["nonpersistent"] = (nonpersistent, False)
    return {name: calls[name] for name in names if name in calls}


def time_block(call, keep_previous: bool, count: int, flush) -> tuple:
    """``count`` calls, each after an L2 flush, each between its own CUDA events, not synchronised one by one (as
    do_bench times). Returns (ms per call, output address per call, (start, end) wall seconds per call)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    anchor = torch.cuda.Event(enable_timing=True)
    ptrs, previous = [], None
    torch.cuda.synchronize()
    anchor.record()
    anchor.synchronize()
    t0 = time.perf_counter()  # the anchor's wall time, give or take the synchronisation's few microseconds
    if hasattr(torch.cuda, "_sleep"):  # ~2 ms of GPU wait, so that the host is ahead from the first call on
        torch.cuda._sleep(4_000_000)
    for i in range(count):
        flush.zero_()  # do_bench's L2 flush (triton's clear_cache)
        starts[i].record()
        out = call()
        ends[i].record()
        ptrs.append(out.data_ptr())
        # fresh-held: the previous output lives until this one exists, so the allocator alternates two blocks
        previous = out if keep_previous else None
        del out  # fresh: the output is gone before the next call allocates, as in do_bench's fn()
    torch.cuda.synchronize()
    del previous
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    walls = [(t0 + anchor.elapsed_time(s) / 1e3, t0 + anchor.elapsed_time(e) / 1e3) for s, e in zip(starts, ends)]
    return ms, ptrs, walls


def measure(args) -> tuple:
    """Every call's record (mask, condition, round, index, ms, ptr, t: its start in seconds from the first
    block's, clock_mhz), the clock's source and the run's description."""
    from flashdoc.kernels import forward_hopper as fh

    torch.manual_seed(0)
    shape = (args.batch, args.n, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flush = torch.empty(args.flush_mb * 2**20 // 4, dtype=torch.int32, device="cuda")
    masks = {mask: make_calls(q, k, v, mask == "causal", args.conditions, args.rotate) for mask in args.masks}
    for mask, calls in masks.items():
        skipped = [c for c in args.conditions if c not in calls]
        if skipped:
            print(f"{mask}: {', '.join(skipped)} not run (the Hopper kernel does not take this call here)")
        for call, keep in calls.values():
            time_block(call, keep, args.warmup, flush)  # compiles, then a few warm calls
    kernels = {mask: "Hopper (Gluon)" if fh.supports(q, mask == "causal") else "portable" for mask in args.masks}
    device = (
        f"{torch.cuda.get_device_name()}, {args.batch} x {args.n} tokens x {args.heads} heads, d = {args.head_dim}, "
        f"bf16; kernels {kernels}; torch {torch.__version__}"
    )
    records, walls = [], []
    with ClockSampler(torch.cuda.current_device(), args.clock_ms) as sampler:
        for r in range(args.rounds):
            count = args.calls // args.rounds + (r < args.calls % args.rounds)
            mask_order = rotated(list(masks), r)
            for mask in mask_order:
                for condition in rotated(list(masks[mask]), r):
                    call, keep = masks[mask][condition]
                    ms, ptrs, block_walls = time_block(call, keep, count, flush)
                    for i, (t, p) in enumerate(zip(ms, ptrs)):
                        records.append(dict(mask=mask, condition=condition, round=r, index=i, ms=t, ptr=p))
                    walls += block_walls
    samples = sorted(sampler.samples)
    clocks = match_clocks(walls, samples, sampler.tolerance()) if samples else [None] * len(walls)
    first = min(start for start, _ in walls)
    for record, (start, _), clock in zip(records, walls, clocks):
        record.update(t=start - first, clock_mhz=clock)
    source = sampler.source + ("" if samples or sampler.read is None else " (no sample came back)")
    return records, source, device


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="timed calls per mask and condition (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="blocks each condition's calls are split into, rotated")
    ap.add_argument("--masks", nargs="+", choices=MASKS, default=list(MASKS))
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    ap.add_argument("--rotate", type=int, default=4, help="outputs the rotate condition takes in turn (default: 4)")
    ap.add_argument("--n", type=int, default=16384, help="tokens (default: %(default)s)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--flush-mb", type=int, default=256, help="the L2 flush's buffer, as do_bench's (default: 256)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls per condition first (default: 10)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD, help="relative gap that splits modes (0.04)")
    ap.add_argument("--clock-ms", type=float, help="clock sampling period (default: 10 with NVML, 100 nvidia-smi)")
    ap.add_argument("--no-pin", action="store_true", help="leave the process's threads on every CPU")
    ap.add_argument("--json", metavar="PATH", help="write every call's record and the summaries here")
    args = ap.parse_args(argv)
    if args.calls < args.rounds or args.rounds < 1:
        ap.error("--calls must be at least --rounds, and --rounds at least 1")
    if not torch.cuda.is_available():
        print(
            "fwd_modes.py: no CUDA GPU here. It times the dense forward call by call on one (an H100 or H200).",
            file=sys.stderr,
        )
        sys.exit(2)
    if not args.no_pin and hasattr(os, "sched_getaffinity"):
        from benchmarks.timing import pin_threads

        pin_threads({min(os.sched_getaffinity(0))})  # as the benchmark pins its timing process
    records, source, device = measure(args)
    summaries = summarise(records, args.threshold)
    print(device)
    print(f"clock: {source}")
    print()
    print(report(summaries))
    if args.json:
        with open(args.json, "w") as f:
            meta = dict(device=device, clock=source, args=vars(args))
            json.dump(dict(meta=meta, calls=records, summaries=summaries), f, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
