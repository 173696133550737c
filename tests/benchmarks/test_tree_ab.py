"""The two-tree forward A/B (benchmarks/kernels/tree_ab.py) off the GPU: both trees run in their own processes and
their outputs are compared, a tree whose output differs is reported, and a --base without the package is refused.
(Its times need a GPU.)"""

import shutil
from pathlib import Path

import pytest
import torch

from benchmarks.kernels import tree_ab

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU protocol; a GPU times it")

ROOT = Path(__file__).resolve().parents[2]


def test_two_copies_of_the_package_agree_bit_for_bit(tmp_path, capsys):
    shutil.copytree(ROOT / "flashdoc", tmp_path / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    tree_ab.main(["--base", str(tmp_path), "--smoke", "--rounds", "1", "--json", str(tmp_path / "rounds.json")])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| d=")]
    assert len(rows) == len(tree_ab.CASES["window"])
    assert all(row.endswith("| yes |") for row in rows)
    assert (tmp_path / "rounds.json").is_file()


def test_a_differing_output_is_reported():
    reading = {"ms": 1.0, "hash": "a"}
    rounds = [
        {"base": {"x": {"ms": 2.0, "hash": "a"}}, "new": {"x": reading}},
        {"base": {"x": {"ms": 2.2, "hash": "a"}}, "new": {"x": {"ms": 1.1, "hash": "b"}}},
    ]
    ((label, base, new, ratio, same),) = tree_ab.summarise(rounds, ["x"])
    assert (label, base, new, same) == ("x", 2.1, 1.05, False)
    assert ratio == pytest.approx(2.0)


def test_a_base_without_the_package_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tree_ab.main(["--base", str(tmp_path), "--smoke"])
    assert "--base must be a folder holding a copy of the flashdoc package" in capsys.readouterr().err
