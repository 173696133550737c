"""What the kernel timelines (``fwd_timeline.py``, ``bwd_timeline.py``) share: a copy of the package with a kernel's
source edited to read the SM's cycle counter and store it into a trace buffer, and the child processes that run such a
copy beside the package.

An edit is (anchor, replacement, count): the anchor must occur exactly ``count`` times in the kernel's source, so that a
change to the kernel that moves one fails loudly in ``apply_edits`` (and in its CPU test) instead of timing the wrong
place.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Gluon helpers the edits call: put in front of a function of the kernel's module (4 spaces in, under ``if GLUON:``)
CLOCK_HELPERS = '''
    @gluon.jit
    def _clock():
        """The SM's cycle counter."""
        return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)

    @gluon.jit
    def _smid():
        """The SM this program runs on."""
        return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)

    @gluon.jit
    def _store_trace(TRACE, index, value):
        """value at TRACE[index], if there is a trace (a None TRACE compiles to nothing)."""
        if TRACE is not None:
            gl.store(TRACE + index, value.to(gl.int64))
'''


def apply_edits(source: str, edits: list, name: str) -> str:
    """source with every (anchor, replacement, count) edit made; a ValueError naming the anchor if one does not occur
    exactly count times (name: the file, for the message)."""
    for anchor, replacement, count in edits:
        found = source.count(anchor)
        if found != count:
            raise ValueError(f"an anchor occurs {found} times in {name} ({count} expected): update the edits\n{anchor}")
        source = source.replace(anchor, replacement)
    return source


def copy_package(dest: Path, source: Path, instrumenters: dict) -> Path:
    """The flashdoc package under source copied under dest, each file named in instrumenters (a path relative to the
    folder, such as flashdoc/kernels/forward_hopper.py) passed through its function; returns dest."""
    package = dest / "flashdoc"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(source / "flashdoc", package, ignore=shutil.ignore_patterns("__pycache__"))
    for relative, instrument in instrumenters.items():
        path = dest / relative
        path.write_text(instrument(path.read_text()))
    return dest


def run_child(script: str, args: list, first: list) -> str:
    """script run with args in a child process whose path starts with the folders in first (an instrumented copy, a
    candidate's tree), then the caller's own PYTHONPATH (a carried Triton), then this repository; every launch goes
    through Triton's own path (no launch cache, no plans), so that a trace buffer set on the module reaches each one.
    Returns its standard output; exits with its error output if it fails."""
    path = [*map(str, first), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)), str(ROOT)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), FLASHDOC_LAUNCH_CACHE="0")
    done = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{Path(script).name} {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout
