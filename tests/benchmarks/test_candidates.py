"""Every kernel candidate in benchmarks/candidates/ still applies to the repository as it is, so a patch waiting for
a GPU run cannot silently fall behind the code it edits; where it edits the forward's or the backward's Hopper
kernel, that kernel's timeline can still trace it."""

import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.kernels import bwd_timeline, fwd_timeline

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "benchmarks" / "candidates").glob("*.patch"))
TIMELINES = (fwd_timeline, bwd_timeline)
# what a candidate may edit: the package, its tests and the benchmarks that compile or time it
FOLDERS = ("flashdoc", "tests", "benchmarks")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_candidate_applies_to_the_repository(patch, tmp_path):
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = {t: (tmp_path / t.KERNEL).read_text() for t in TIMELINES}
    # (tmp_path is outside the repository, so git apply patches the files under it)
    result = subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, f"{patch.name} no longer applies: refresh it or delete it\n{result.stderr}"
    changed = subprocess.run(
        ["git", "apply", "--numstat", str(patch)], cwd=tmp_path, capture_output=True, text=True
    ).stdout
    assert "flashdoc/" in changed, f"{patch.name} edits nothing in the package"
    for timeline in TIMELINES:  # a Hopper kernel it edits can be traced as the package's is
        if (tmp_path / timeline.KERNEL).read_text() != before[timeline]:
            timeline.instrument((tmp_path / timeline.KERNEL).read_text())


def test_there_is_something_to_check():
    assert PATCHES, "benchmarks/candidates/ holds no patch: delete this test with the folder"
