"""Every kernel candidate in benchmarks/candidates/ still applies to the package as it is, so a patch waiting for
a GPU run cannot silently fall behind the kernels it edits, and the timeline of each kernel it edits (forward or
backward) can still trace it."""

import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.kernels import bwd_timeline, fwd_timeline

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "benchmarks" / "candidates").glob("*.patch"))
TIMELINES = (fwd_timeline, bwd_timeline)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_candidate_applies_to_the_package(patch, tmp_path):
    shutil.copytree(ROOT / "flashdoc", tmp_path / "flashdoc", ignore=shutil.ignore_patterns("__pycache__"))
    before = {t: (tmp_path / t.KERNEL).read_text() for t in TIMELINES}
    # (tmp_path is outside the repository, so git apply patches the files under it)
    result = subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, f"{patch.name} no longer applies: refresh it or delete it\n{result.stderr}"
    edited = [t for t in TIMELINES if (tmp_path / t.KERNEL).read_text() != before[t]]
    assert edited, f"{patch.name} edits neither the forward's nor the backward's Hopper kernels"
    for timeline in edited:  # its kernels can be traced as the package's are
        timeline.instrument((tmp_path / timeline.KERNEL).read_text())


def test_there_is_something_to_check():
    assert PATCHES, "benchmarks/candidates/ holds no patch: delete this test with the folder"
