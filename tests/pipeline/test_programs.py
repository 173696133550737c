"""What a copy button copies: the shown section plus the lines above it that it needs, cut after a whole
top-level statement, without section markers. The programs of GPU-only snippets run here on a GPU (the CPU
ones run in tests/site/test_copy_programs.py, read from the built site)."""

from __future__ import annotations

import pytest

from tools import outputs
from tools.programs import blocks_from_pages, copy_program, run_distinct, section_end

SOURCE = """import math
# --8<-- [start:setup]
x = 2.0
# --8<-- [end:setup]


def f(y):
    # --8<-- [start:body]
    z = math.sqrt(y)
    # --8<-- [end:body]
    return z


print(f(x))
"""


@pytest.fixture
def demo(tmp_path):
    path = tmp_path / "demo.py"
    path.write_text(SOURCE)
    return outputs.Snippet(path)


def test_a_section_copies_everything_above_it_and_nothing_after(demo):
    assert copy_program(demo, "setup") == "import math\nx = 2.0\n"


def test_a_section_inside_a_def_copies_the_whole_def(demo):
    text = copy_program(demo, "body")
    assert text.endswith("    return z\n") and "print" not in text and "--8<--" not in text
    compile(text, "copied", "exec")


def test_the_whole_file_copies_without_markers(demo):
    assert copy_program(demo) == "\n".join(line for line in SOURCE.splitlines() if "--8<--" not in line) + "\n"


def test_an_unknown_section_names_the_ones_there(demo):
    with pytest.raises(ValueError, match="no section 'nope'; the file marks: body, setup"):
        section_end(SOURCE, "nope")


def test_every_page_block_copies_a_program_that_compiles():
    blocks = blocks_from_pages()
    assert len(blocks) >= 20
    for block in blocks:
        compile(block.text, f"{block.page}: {block.snippet}", "exec")


GPU_BLOCKS = [b for b in blocks_from_pages() if b.gpu_only]


@pytest.mark.gpu
def test_gpu_only_blocks_copy_programs_that_run():
    assert GPU_BLOCKS
    outcomes = run_distinct([b.text for b in GPU_BLOCKS], workers=1, timeout=900)
    failed = [
        f"{b.page}: {b.snippet} [{b.section}]\n{outcomes[b.text].output[-2000:]}"
        for b in GPU_BLOCKS
        if outcomes[b.text].returncode != 0
    ]
    assert not failed, "\n\n".join(failed)
