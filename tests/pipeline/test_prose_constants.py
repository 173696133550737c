"""Values from the kernels' tables that the docs state in words.

The post shows the tables themselves (included from the package), but a few sentences around them, the usage
page and a docstring repeat a value in prose. Each test here derives the words from the table and fails, naming
the file, when a table changes under prose that still says the old value.
"""

import re
from pathlib import Path

import pytest

from flashdoc import interface
from flashdoc.kernels import backward_hopper, decode

ROOT = Path(__file__).resolve().parents[2]
POSTS = ROOT / "docs/blog/posts"
HOPPER = POSTS / "flashattention-on-hopper.md"
DECODING = POSTS / "decoding.md"
USAGE = ROOT / "docs/usage.md"


def _one_line(text: str) -> str:
    return " ".join(text.split())  # sentences wrap anywhere in the source


def _fused_causal_threshold() -> int:
    """FUSED_DQ_MIN_SEQLEN's one value: the prose names it as the length from which causal calls at head dimension
    64 take the fused backward."""
    ((key, tokens),) = backward_hopper.FUSED_DQ_MIN_SEQLEN.items()
    assert key == (64, True), "the prose says the threshold is for causal calls at head dimension 64"
    return tokens


@pytest.mark.parametrize("where", [HOPPER, USAGE, "interface.flash_attn_func"])
def test_fused_backward_threshold_in_prose(where):
    """Causal calls take the fused backward from FUSED_DQ_MIN_SEQLEN tokens on, written with a thousands comma
    (e.g. "1,024") wherever it is named."""
    tokens = _fused_causal_threshold()
    text = interface.flash_attn_func.__doc__ if isinstance(where, str) else where.read_text()
    assert f"{tokens:,}" in _one_line(text), f"{where} should give FUSED_DQ_MIN_SEQLEN as {tokens:,}"


def test_fused_backward_threshold_in_short_form():
    """The posts also name the threshold in passing, as "(causal mask|causal calls|under the mask|under it) from 2k
    tokens":
    every such mention must be FUSED_DQ_MIN_SEQLEN in thousands of tokens."""
    tokens = _fused_causal_threshold()
    text = " ".join(_one_line(post.read_text()) for post in sorted(POSTS.glob("*.md")))
    said = re.findall(r"(?:causal mask|causal calls|under the mask|under it) from (\d+)k tokens", text)
    assert said, "no post names the threshold in short form any more: update or remove this test"
    assert all(int(k) * 1024 == tokens for k in said), f"the post says {said}k tokens, the table {tokens:,}"


def test_fused_backward_program_keys_in_prose():
    """The post's ragged-keys paragraph gives a fused program's keys: N_CONSUMERS * BLOCK_N of the configs."""
    keys = {config[1] * config[3] for config in backward_hopper.FUSED_DQ_CONFIGS.values()}
    assert len(keys) == 1, keys
    said = f"multiple of a program's {keys.pop()} keys"
    assert said in _one_line(HOPPER.read_text()), f"the post should say {said!r}"


def test_recorded_tile_tables_match_the_package(tmp_path):
    """The posts show the kernels' configuration tables as the tile_configs snippet recorded them; a table
    changed in the package since then must be recorded again (the snippet's source did not change, so the
    freshness check alone would not notice)."""
    from tools.outputs import GENERATED_DIR, snippet
    from tools.record_snippets import run_snippet

    assert run_snippet(snippet("triton/tile_configs"), tmp_path, timeout=300).ok
    for name in ("forward.md", "hopper_forward.md", "hopper_backward.md"):
        recorded = (GENERATED_DIR / "triton/tile_configs" / name).read_text()
        assert (tmp_path / name).read_text() == recorded, (
            f"{name} differs from the package's tables: python -m tools.record_snippets triton/tile_configs"
        )


@pytest.mark.parametrize("module", ["flash_attn_interface", "bert_padding"])
def test_usage_page_names_every_function_of_flash_attns_modules(module):
    """The usage page's section on flash-attn's other functions names each one the module exports."""
    import importlib

    names = importlib.import_module(f"flashdoc.{module}").__all__
    missing = [name for name in names if f"`{name}" not in USAGE.read_text()]
    assert not missing, f"docs/usage.md does not name flashdoc.{module}'s {missing}"


def test_pages_per_lookup_in_prose():
    """Part 8 says up to how many pages a tile looks up once each (``decode.MAX_PAGES_PER_LOOKUP``), in words."""
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    pages = int(decode.MAX_PAGES_PER_LOOKUP)
    sentence = f"one per page for a tile over up to {words[pages]} pages"
    assert sentence in _one_line(DECODING.read_text()), f"{DECODING} should say {sentence!r}"
