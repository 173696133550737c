"""The two-tree A/B (benchmarks/kernels/tree_ab.py) off the GPU: both trees run in their own processes and
their outputs are compared, a tree whose output differs is reported, and a --base without the package is refused.
(Its times need a GPU.)"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from benchmarks.kernels import tree_ab

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU protocol; a GPU times it")

ROOT = Path(__file__).resolve().parents[2]


def test_two_copies_of_the_package_agree_bit_for_bit(tmp_path, capsys):
    _edited_copy(tmp_path)
    tree_ab.main(["--base", str(tmp_path), "--smoke", "--rounds", "1", "--json", str(tmp_path / "rounds.json")])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| d=")]
    assert len(rows) == len(tree_ab.CASES["window"])
    assert all(row.endswith("| yes |") for row in rows)
    assert (tmp_path / "rounds.json").is_file()


def test_decode_steps_of_two_copies_agree_bit_for_bit(tmp_path, capsys):
    """The decode cases: every layout at every point, run in each tree's process and compared."""
    _edited_copy(tmp_path)
    tree_ab.main(["--base", str(tmp_path), "--cases", "decode", "--smoke", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and " x " in line]
    assert len(rows) == len(tree_ab.CASES["decode"]) == 4 * len(tree_ab.DECODE_POINTS)
    assert all(row.endswith("| yes |") for row in rows)


def test_contiguous_decode_steps_cover_every_point_of_the_benchmark_that_fits_80_gb(tmp_path, capsys):
    """The contiguous decode cases: the decode benchmark's points but 64 x 128k, whose caches alone take 34 GB."""
    from benchmarks import decode as bench

    points = {(batch, cache) for _, batch, cache, _ in tree_ab.CASES["decode-contiguous"]}
    assert points == {(b, c) for b in bench.BATCHES for c in bench.CACHES} - {(64, 131072)}
    _edited_copy(tmp_path)
    tree_ab.main(["--base", str(tmp_path), "--cases", "decode-contiguous", "--smoke", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and " x " in line]
    assert len(rows) == len(points) and all(row.endswith("| yes |") for row in rows)


def _edited_copy(folder: Path) -> None:
    """A copy of the package under folder that differs from this one by a comment: a change that moves no bit."""
    shutil.copytree(ROOT / "flashdoc", folder / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    init = folder / "flashdoc" / "__init__.py"
    init.write_text(init.read_text() + "# a copy\n")


def test_a_candidate_identical_to_the_base_is_refused(tmp_path, capsys):
    """An unapplied patch leaves a candidate that equals the base: timing it would report noise as a result."""
    shutil.copytree(ROOT / "flashdoc", tmp_path / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    with pytest.raises(SystemExit):
        tree_ab.main(["--base", str(tmp_path), "--smoke"])
    assert "the same as --base's" in capsys.readouterr().err


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


def test_forward_and_backward_agree_bit_for_bit(tmp_path, capsys):
    _edited_copy(tmp_path)
    tree_ab.main(["--base", str(tmp_path), "--smoke", "--rounds", "1", "--mode", "fwd_bwd", "--cases", "dense"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| d=")]
    assert len(rows) == len(tree_ab.CASES["dense"])
    assert all(row.endswith("| yes |") for row in rows)


def test_the_backward_hash_covers_the_gradients(monkeypatch):
    """A tree whose gradients differ while its output does not is told apart in fwd_bwd mode, not in fwd."""
    cases = tree_ab.CASES["dense"][:1]
    before = {mode: tree_ab.measure(cases, True, mode) for mode in tree_ab.MODES}
    grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: tuple(g * 2 for g in grad(*a, **k)))
    after = {mode: tree_ab.measure(cases, True, mode) for mode in tree_ab.MODES}
    label = cases[0][0]
    assert before["fwd"][label]["hash"] == after["fwd"][label]["hash"]
    assert before["fwd_bwd"][label]["hash"] != after["fwd_bwd"][label]["hash"]


def test_two_copies_outside_the_working_tree(tmp_path, capsys):
    """--new times a second copy, so a config to try needs no edit of the working tree; a copy that computes
    something else is reported."""
    for name in ("base", "new"):
        shutil.copytree(ROOT / "flashdoc", tmp_path / name / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    interface = tmp_path / "new" / "flashdoc" / "interface.py"
    source = interface.read_text()
    assert source.count("def flash_attn_func(") == 1
    # the new copy's public forward returns twice the output: every case must read as differing
    interface.write_text(
        source + "\n\n_forward = flash_attn_func\n\n\ndef flash_attn_func(*a, **k):\n    return 2 * _forward(*a, **k)\n"
    )
    tree_ab.main(["--base", str(tmp_path / "base"), "--new", str(tmp_path / "new"), "--smoke", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| d=")]
    assert rows and all(row.endswith("| NO |") for row in rows)
    with pytest.raises(SystemExit):
        tree_ab.main(["--base", str(tmp_path / "base"), "--new", str(tmp_path), "--smoke"])
    assert "--new must be a folder holding a copy of the flashdoc package" in capsys.readouterr().err


def test_several_candidates_share_the_base_s_rounds(tmp_path, capsys):
    shutil.copytree(ROOT / "flashdoc", tmp_path / "base" / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("ring", "tiles"):
        _edited_copy(tmp_path / name)
    json_path = tmp_path / "rounds.json"
    argv = ["--base", str(tmp_path / "base"), "--new", str(tmp_path / "ring"), "--new", str(tmp_path / "tiles")]
    tree_ab.main(argv + ["--smoke", "--rounds", "3", "--cases", "dense", "--json", str(json_path)])
    out = capsys.readouterr().out
    assert "| case | base ms | ring ms | base / ring | outputs equal |" in out
    assert "| case | base ms | tiles ms | base / tiles | outputs equal |" in out
    rows = [line for line in out.splitlines() if line.startswith("| d=")]
    assert len(rows) == 2 * len(tree_ab.CASES["dense"])
    assert all(row.endswith("| yes |") for row in rows)
    # each tree goes first in one of the three rounds
    firsts = [next(iter(r)) for r in json.loads(json_path.read_text())]
    assert sorted(firsts) == ["base", "ring", "tiles"]


def test_candidates_are_named_by_their_folders_unless_that_is_ambiguous():
    assert tree_ab.candidate_names([Path("/x/ring")]) == {"new": Path("/x/ring")}
    assert list(tree_ab.candidate_names([Path("/x/ring"), Path("/y/tiles")])) == ["ring", "tiles"]
    assert list(tree_ab.candidate_names([Path("/x/a"), Path("/y/a"), Path("/z/base")])) == ["a-1", "a-2", "base-3"]
