"""Every kernel candidate in benchmarks/candidates/ still applies to the package as it is, so a patch waiting for
a GPU run cannot silently fall behind the kernels it edits, and the forward's timeline can still trace it."""

import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.kernels import fwd_timeline

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "benchmarks" / "candidates").glob("*.patch"))


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_candidate_applies_to_the_package(patch, tmp_path):
    shutil.copytree(ROOT / "flashdoc", tmp_path / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    before = (tmp_path / fwd_timeline.KERNEL).read_text()
    # (tmp_path is outside the repository, so git apply patches the files under it)
    result = subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, f"{patch.name} no longer applies: refresh it or delete it\n{result.stderr}"
    after = (tmp_path / fwd_timeline.KERNEL).read_text()
    if after != before:  # a forward candidate: its items can be traced as the package's are
        fwd_timeline.instrument(after)


def test_there_is_something_to_check():
    assert PATCHES, "benchmarks/candidates/ holds no patch: delete this test with the folder"
