"""Values from the kernels' tables that the docs state in words.

The post shows the tables themselves (included from the package), but a few sentences around them, the usage
page and a docstring repeat a value in prose. Each test here derives the words from the table and fails, naming
the file, when a table changes under prose that still says the old value.
"""

import re
from pathlib import Path

import pytest

from flashdoc import interface
from flashdoc.kernels import backward_hopper

ROOT = Path(__file__).resolve().parents[2]
POST = ROOT / "docs/blog/posts/flashattention-in-triton.md"
USAGE = ROOT / "docs/usage.md"


def _one_line(text: str) -> str:
    return " ".join(text.split())  # sentences wrap anywhere in the source


def _fused_causal_threshold() -> int:
    """FUSED_DQ_MIN_SEQLEN's one value: the prose names it as the length from which causal calls at head dimension
    64 take the fused backward."""
    (key, tokens), = backward_hopper.FUSED_DQ_MIN_SEQLEN.items()
    assert key == (64, True), "the prose says the threshold is for causal calls at head dimension 64"
    return tokens


@pytest.mark.parametrize("where", [POST, USAGE, "interface.flash_attn_func"])
def test_fused_backward_threshold_in_prose(where):
    """Causal calls take the fused backward from FUSED_DQ_MIN_SEQLEN tokens on, written with a thousands comma
    (e.g. "1,024") wherever it is named."""
    tokens = _fused_causal_threshold()
    text = interface.flash_attn_func.__doc__ if isinstance(where, str) else where.read_text()
    assert f"{tokens:,}" in _one_line(text), f"{where} should give FUSED_DQ_MIN_SEQLEN as {tokens:,}"


def test_fused_backward_threshold_in_short_form():
    """The post also names the threshold in passing, as "(causal mask|causal calls|under the mask) from 2k tokens":
    every such mention must be FUSED_DQ_MIN_SEQLEN in thousands of tokens."""
    tokens = _fused_causal_threshold()
    said = re.findall(r"(?:causal mask|causal calls|under the mask) from (\d+)k tokens", _one_line(POST.read_text()))
    assert said, "the post no longer names the threshold in short form: update or remove this test"
    assert all(int(k) * 1024 == tokens for k in said), f"the post says {said}k tokens, the table {tokens:,}"


def test_fused_backward_program_keys_in_prose():
    """The post's ragged-keys paragraph gives a fused program's keys: N_CONSUMERS * BLOCK_N of the configs."""
    keys = {config[1] * config[3] for config in backward_hopper.FUSED_DQ_CONFIGS.values()}
    assert len(keys) == 1, keys
    said = f"multiple of a program's {keys.pop()} keys"
    assert said in _one_line(POST.read_text()), f"the post should say {said!r}"
