"""The macros that put the variant, window fixed-cost, decoding, varlen and host-time recordings' numbers into the
prose (tools/site_macros/recorded.py): every call the pages make evaluates against the recordings, each renders one
measured number, and a call naming nothing recorded fails with a message that says what it asked for. Also the
macros that name the GPU a recording ran on (tools/site_macros/snippets.py)."""

import re
from pathlib import Path

import pytest

from tools.outputs import all_snippets, snippet
from tools.site_macros import recorded, snippets

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs/blog/posts").glob("*.md")) + [ROOT / "docs/usage.md"]
# what one macro renders: a ratio or a range of them, a time, a share, a range of times, a count of tiles, a
# count in words, a size in memory, or decode points by their shape ('1 × 4k and 8 × 4k')
POINT = r"\d+ × \d+k"
NUMBER = re.compile(
    r"[\d.]+(–[\d.]+)?×|[\d.]+ (ms|µs)|[\d.]+%|\d+ to \d+ µs|[\d.]+× to [\d.]+×|\d+ tiles|[\d,]+ tokens|[\d.]+ [KMG]iB|"
    + rf"{POINT}((, {POINT})* and {POINT})?|"
    + "|".join(recorded.NUMBER_WORDS)
)


class Env:
    """What ``register`` needs of mkdocs-macros' env: a ``macro`` decorator, here collecting the functions."""

    def __init__(self):
        self.macros = {}

    def macro(self, fn):
        self.macros[fn.__name__] = fn
        return fn


@pytest.fixture(scope="module")
def macros():
    env = Env()
    recorded.register(env)
    return env.macros


def calls(macros):
    """(page, expression) for every call of one of these macros in the pages."""
    names = "|".join(macros)
    for page in PAGES:
        for expr in re.findall(r"\{\{\s*((?:%s)\(.*?\))\s*\}\}" % names, page.read_text(), flags=re.S):
            yield page.name, expr


def test_the_pages_use_every_macro(macros):
    used = {expr.split("(")[0] for _, expr in calls(macros)}
    assert used == set(macros), set(macros) - used


def test_every_call_in_the_pages_renders_one_measured_number(macros):
    found = list(calls(macros))
    assert len(found) >= 20, found
    texts = {path.name: path.read_text() for path in PAGES}
    for page, expr in found:
        # the pages' calls are Python expressions too: strings, numbers, True/False and keywords
        html = eval(expr, {"__builtins__": {}}, macros)
        if html == "":  # nothing recorded to name: the page must test the call first and then not render it
            assert re.search(r"\{%%\s*if %s\s*%%\}" % re.escape(expr), texts[page]), (page, expr)
            continue
        text = re.fullmatch(r'<span class="measured">(.+)</span>', html)
        assert text, (page, expr, html)
        assert NUMBER.fullmatch(text.group(1)), (page, expr, html)


def test_a_comparison_nothing_recorded_names_the_recording():
    with pytest.raises(ValueError, match="masking/gpu_variants: 0 rows of targets for 'no such comparison'"):
        recorded.variant_row("no such comparison", "fwd")


def test_a_window_call_from_an_unknown_recording_says_which_there_are():
    with pytest.raises(ValueError, match="'window_cost' or 'variants'"):
        recorded.window_call("flex")


def test_the_host_bound_points_are_where_flashdocs_call_outlasts_its_kernels():
    _, rows = recorded.decode_rows()
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}
    bound = recorded.decode_host_bound_points()
    assert bound == sorted(bound, key=lambda p: (p[0] * p[1], p)) and set(bound) < points
    for p in points:
        call = rows[p + ("flashdoc",)]
        assert (p in bound) == (call["ms"] > recorded.HOST_BOUND_FACTOR * call["graph_ms"]), (p, call)


def test_the_paged_host_bound_points_are_where_every_page_sizes_call_outlasts_its_kernels():
    _, rows = recorded.decode_rows()
    paged = recorded.decode_paged_methods()
    points = {(b, c) for b, c, m in rows if m == "flashdoc"}
    bound = recorded.decode_host_bound_points("paged")
    for p in points:
        calls = [rows[p + (m,)] for m in paged]
        assert (p in bound) == all(c["ms"] > recorded.HOST_BOUND_FACTOR * c["graph_ms"] for c in calls), (p, calls)
    with pytest.raises(ValueError, match="group is 'flashdoc' or 'paged', got 'flex'"):
        recorded.decode_host_bound_points("flex")


def test_the_host_bound_points_read_in_words_or_as_nothing(macros, monkeypatch):
    """Part 8 tests ``decode_host_bound()`` before it names the points: empty where no call waited on its host."""
    monkeypatch.setattr(recorded, "decode_host_bound_points", lambda: [(1, 4096), (1, 32768)])
    assert macros["decode_host_bound"]() == '<span class="measured">1 × 4k and 1 × 32k</span>'
    monkeypatch.setattr(recorded, "decode_host_bound_points", lambda: [])
    assert macros["decode_host_bound"]() == ""


def test_the_call_by_call_reading_against_cudnn(macros, monkeypatch):
    monkeypatch.setattr(recorded, "decode_against", lambda peer, key: {(1, 4096): 0.541, (8, 32768): 1.004})
    assert macros["decode_call_vs_cudnn"]("lowest") == '<span class="measured">0.54×</span>'
    assert macros["decode_call_vs_cudnn"]("least") == '<span class="measured">1 × 4k</span>'
    with pytest.raises(ValueError, match="what is range, least or lowest, got 'most'"):
        macros["decode_call_vs_cudnn"]("most")


def decode_recording(rounds_ms: dict) -> tuple:
    """A stand-in for ``decode_rows()``: {(batch, cache, method): graph rounds in ms}, each row's median as its
    graph time."""
    rows = {
        key: dict(graph_rounds_ms=ms, graph_tbps=1 / sorted(ms)[len(ms) // 2], batch=key[0], cache=key[1])
        for key, ms in rounds_ms.items()
    }
    return {}, rows


def test_the_rounds_against_cudnn_read_where_flashdoc_trails(macros, monkeypatch):
    recording = decode_recording(
        {
            (64, 4096, "flashdoc"): [1.004, 1.003, 1.006],  # trails in every round, 0.3% apart at the most
            (64, 4096, "sdpa-cudnn"): [1.0, 1.0, 1.0],
            (1, 4096, "flashdoc"): [0.9, 0.99, 0.95],  # ahead, by far more: not what the macro reads
            (1, 4096, "sdpa-cudnn"): [1.0, 1.0, 1.0],
        }
    )
    monkeypatch.setattr(recorded, "decode_rows", lambda: recording)
    rounds = recorded.decode_rounds_against("sdpa-cudnn")
    assert rounds[(64, 4096)] == [1 / 1.004, 1 / 1.003, 1 / 1.006]
    assert macros["decode_cudnn_rounds"]("count") == '<span class="measured">three</span>'
    assert macros["decode_cudnn_rounds"]("spread") == '<span class="measured">0.3%</span>'
    with pytest.raises(ValueError, match="what is count or spread, got 'least'"):
        macros["decode_cudnn_rounds"]("least")


def test_rounds_that_do_not_pair_up_or_a_flashdoc_never_behind_are_named(macros, monkeypatch):
    unpaired = decode_recording({(8, 32768, "flashdoc"): [1.0, 1.0], (8, 32768, "sdpa-cudnn"): [1.0, 1.0, 1.0]})
    monkeypatch.setattr(recorded, "decode_rows", lambda: unpaired)
    with pytest.raises(ValueError, match="8 x 32768 has 2 flashdoc rounds and 3 of sdpa-cudnn's"):
        recorded.decode_rounds_against("sdpa-cudnn")
    ahead = decode_recording({(8, 32768, "flashdoc"): [0.99] * 3, (8, 32768, "sdpa-cudnn"): [1.0] * 3})
    monkeypatch.setattr(recorded, "decode_rows", lambda: ahead)
    with pytest.raises(ValueError, match="trails cuDNN nowhere here; reword the prose"):
        macros["decode_cudnn_rounds"]("count")


def test_decode_points_read_as_a_list_in_words():
    assert recorded.decode_points_in_words([(1, 4096)]) == "1 × 4k"
    assert recorded.decode_points_in_words([(1, 4096), (1, 32768), (8, 4096)]) == "1 × 4k, 1 × 32k and 8 × 4k"


def test_call_excess_reads_each_call_against_its_graph_timing_away_from_the_host_bound_points():
    _, rows = recorded.decode_rows()
    excess = recorded.decode_call_excess()
    bound = recorded.decode_host_bound_points()
    assert excess and {m for _, _, m in excess} == set(recorded.CALL_TIMED_METHODS)
    for (b, c, m), us in excess.items():
        assert (b, c) not in bound
        assert us == (rows[(b, c, m)]["ms"] - rows[(b, c, m)]["graph_ms"]) * 1e3


def test_a_fixed_cost_of_an_unknown_kernel_says_which_there_are():
    with pytest.raises(ValueError, match="masking/fixed_cost: 0 fits for kernel 'dK' \\(forward, dK/dV or dQ\\)"):
        recorded.fixed_cost_fit("dK")


def test_a_fixed_cost_at_an_unrecorded_window_names_it():
    with pytest.raises(ValueError, match="masking/fixed_cost: 0 rows of programs for kernel 'dQ' at window 100"):
        recorded.fixed_cost_program("dQ", 100)


def test_a_fixed_cost_reading_of_an_unknown_kind_says_which_there_are(macros):
    with pytest.raises(ValueError, match="what is fixed, tile, causal_tile, vs_causal, share or tiles"):
        macros["fixed_cost"]("dQ", "speed")


def test_large_decode_points_are_the_benchmarks_copy_share_points():
    from benchmarks.decode import COPY_SHARE_MIN_TOKENS, PAGE_SIZES

    assert recorded.LARGE_DECODE_TOKENS == COPY_SHARE_MIN_TOKENS
    assert recorded.decode_paged_methods() == tuple(sorted(f"flashdoc-paged{p}" for p in PAGE_SIZES))


def test_a_range_of_call_times_that_round_alike_reads_as_one_time(macros, monkeypatch):
    """'50 µs', not '50 to 50 µs', where the calls of a decode reading round to one figure."""
    monkeypatch.setattr(recorded, "decode_worst_paged_call_us", lambda what: (49.8, 50.4))
    assert macros["decode_worst_paged_call"]("contiguous") == '<span class="measured">50 µs</span>'
    monkeypatch.setattr(recorded, "decode_worst_paged_call_us", lambda what: (11.6, 37.6))
    assert macros["decode_worst_paged_call"]("paged") == '<span class="measured">12 to 38 µs</span>'


# The GPU a recording ran on, for the prose around its numbers (tools/site_macros/snippets.py)

DOCS_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "generated" not in p.relative_to(ROOT / "docs").parts)


@pytest.mark.parametrize(
    "device,card",
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("Tesla V100-SXM2-16GB", "V100"),
    ],
)
def test_a_device_reads_as_its_card(device, card):
    assert snippets.card_name(device) == card


def test_a_card_takes_the_article_its_spoken_name_needs():
    assert snippets.cards_in_words(["H100"], article=True) == "an H100"
    assert snippets.cards_in_words(["B200"], article=True) == "a B200"
    assert snippets.cards_in_words(["H100", "RTX 4090"], article=True) == "an H100 and an RTX\N{NO-BREAK SPACE}4090"
    assert snippets.cards_in_words(["A100", "H100", "H200"]) == "A100, H100 and H200"


class Recording:
    def __init__(self, prov):
        self.prov = prov

    def check_fresh(self):
        return self.prov


def test_a_recording_made_on_the_cpu_names_no_gpu(monkeypatch):
    cpu = "CPU (x86_64, 2 cores, Triton interpreter)"
    monkeypatch.setattr(snippets, "snippet", lambda name: Recording(dict(device=cpu, gpu=False)))
    with pytest.raises(ValueError, match=r"masking/gpu_variants was recorded on CPU \(x86_64.*not on a GPU"):
        snippets.recorded_card("masking/gpu_variants")
    with pytest.raises(ValueError, match="names no GPU"):
        snippets.card_name(cpu)


def test_a_recording_reads_as_the_card_in_its_provenance(monkeypatch):
    monkeypatch.setattr(snippets, "snippet", lambda name: Recording(dict(device="NVIDIA H100 80GB HBM3", gpu=True)))
    assert snippets.recorded_card("triton/benchmark") == "H100"


def test_the_cards_of_all_gpu_recordings_are_each_named_once():
    cards = snippets.recorded_cards()
    gpu_only = [s for s in all_snippets() if s.gpu_only]
    assert cards == sorted({snippets.card_name(s.provenance()["device"]) for s in gpu_only}), cards


def test_every_card_a_page_names_is_that_of_a_gpu_recording():
    env = Env()
    snippets.register(env)
    found = []
    for page in DOCS_PAGES:
        for expr in re.findall(r"\{\{\s*(gpu_cards?\(.*?\))\s*\}\}", page.read_text()):
            found.append(expr)
            text = eval(expr, {"__builtins__": {}}, env.macros)
            assert text and "<" not in text, (page.name, expr, text)
            for name in re.findall(r'gpu_card\("([^"]+)"', expr):
                assert snippet(name).gpu_only, f"{page.name}: {expr} names the card of a recording made on the CPU"
    assert len(found) >= 10, found


def test_hardware_reads_a_row_of_the_recorded_gpu_table(macros):
    table = recorded.markdown_table(recorded._text("flashattention/gpu_roofline", "hardware.md"))
    assert macros["hardware"]("L2 cache") == f'<span class="measured">{table["L2 cache"][0]}</span>'
    with pytest.raises(ValueError, match="not 'L3 cache'"):
        macros["hardware"]("L3 cache")


def test_host_time_reads_flashdocs_column_of_the_recorded_table(macros):
    table = recorded.markdown_table(recorded._text(recorded.HOST_TIME, "host_time.md"))
    cell = table["forward + backward"][1]  # flashdoc with the launch cache
    assert macros["host_time_us"]("forward + backward") == f'<span class="measured">{cell}</span>'
    with pytest.raises(ValueError, match="not 'backward'"):
        macros["host_time_us"]("backward")
