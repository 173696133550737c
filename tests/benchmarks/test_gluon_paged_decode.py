"""The Gluon paged-decode kernel (``flashdoc/kernels/decode_hopper.py``) without a GPU, compiled for sm_90 by
benchmarks/kernels/gluon_paged_decode.py with the installed Triton: a tile over pages of 16 is eight box copies into
one buffer, read by the same products as a contiguous tile. (Its outputs are tests/kernels/test_kvcache.py's, on a
Hopper GPU.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashdoc.kernels import gluon_support
from flashdoc.kernels.decode import HOPPER_PAGED_CONFIG

pytestmark = pytest.mark.skipif(not gluon_support.ALLOWED, reason=gluon_support.REASON)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def counts():
    """{page size (0: contiguous): {what: count}} from ``--aot``, run in a process of its own: the compile needs
    Triton's compiler, not the interpreter the CPU tests run under."""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "benchmarks/kernels/gluon_paged_decode.py", "--aot"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = {}
    for line in proc.stdout.splitlines():
        head = re.match(r"(contiguous|pages of (\d+)): ", line)
        if head:
            found[int(head[2] or 0)] = {what: int(n) for n, what in re.findall(r"(\d+) ([a-z ]+?)(?=[,;]|$)", line)}
    assert set(found) == {0, 16, 64}, proc.stdout
    return found


def test_a_tile_over_pages_of_16_is_one_copy_a_page(counts):
    # stages - 1 tiles issued before the loop and one in it, K and V each: a box each for a contiguous tile, eight
    # for 128 keys over pages of 16 and two over pages of 64
    assert counts[0]["bulk copies"] == 2 * HOPPER_PAGED_CONFIG.stages
    assert counts[16]["bulk copies"] == 8 * counts[0]["bulk copies"]
    assert counts[64]["bulk copies"] == 2 * counts[0]["bulk copies"]


def test_the_boxes_of_a_tile_feed_the_products_of_a_contiguous_tile(counts):
    # one product chain for q K^T and one for P V whatever the pages; the boxes land in place, with no shared
    # store of their own (the kernel's shared stores are its layout conversions and the last tile's V zeroing)
    assert counts[16]["wgmma"] == counts[0]["wgmma"] > 0
    assert counts[16]["shared stores"] == counts[0]["shared stores"]


def test_q_k_reads_q_from_shared_memory(counts):
    # half the products (P V) take their A operand from registers, and q K^T takes q from shared memory: ptxas
    # gave a q held in registers across the loop the registers of P, which the loop writes
    for page, found in counts.items():
        assert found["wgmma from registers"] == found["wgmma"] // 2, page


def test_one_table_entry_serves_a_pages_key_and_value_boxes(counts):
    # besides the sequence's length, one int load a page a tile visits, shared by its K and V copies
    for page, found in counts.items():
        assert found["int loads"] == 1 + found["bulk copies"] // 2, page
