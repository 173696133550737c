"""What the kernel timelines (``fwd_timeline.py``, ``bwd_timeline.py``) share: a copy of the package with a kernel's
source edited to read the SM's cycle counter and store it into a trace buffer, and the child processes that run such a
copy beside the package.

An edit is (anchor, replacement, count): the anchor must occur exactly ``count`` times in the kernel's source, so that a
change to the kernel that moves one fails loudly in ``apply_edits`` (and in its CPU test) instead of timing the wrong
place.
"""

import argparse
import json
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


def timeline_main(argv, script: str, doc: str, tree: Path, build, aot, time_cases, report) -> None:
    """The command line both timelines share. script: the timeline's file (run again as the child); doc: its help;
    tree: where the instrumented copy goes by default; build(dest, source) makes it; aot(tree) compiles it for sm_90
    in a child whose flashdoc is the copy, as (label, ptxas info) rows; time_cases(traced) times the cases in a
    child, traced or plain; report(label, run) renders one case's run (its "ms", "ms_plain" and "trace")."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, help="write the instrumented copy under this folder and stop")
    parser.add_argument("--tree", type=Path, default=tree, help="where the copy goes")
    parser.add_argument(
        "--package",
        type=Path,
        default=ROOT,
        help="the folder whose flashdoc/ to instrument and to time plain (default: this repository; say, a "
        "candidate's tree from tree_ab.py)",
    )
    parser.add_argument("--aot", action="store_true", help="compile the instrumented kernels for sm_90 and stop")
    parser.add_argument("--json", type=Path, help="also write the traces here")
    parser.add_argument("--child", choices=("traced", "plain", "aot"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "aot":
        for label, info in aot(args.tree):
            print(f"{label}: {info}")
        return
    if args.child:
        print(json.dumps(time_cases(args.child == "traced")))
        return
    copy = build(args.build or args.tree, args.package)
    if args.build:
        print(f"instrumented copy of the package under {copy}")
        return

    def child(mode: str, first: list) -> str:
        return run_child(script, ["--child", mode, "--tree", str(copy)], first)

    if args.aot:
        print(child("aot", [copy]), end="")
        return
    runs = json.loads(child("traced", [copy]).strip().splitlines()[-1])
    plain = json.loads(child("plain", [args.package]).strip().splitlines()[-1])
    for label in runs:
        runs[label]["ms_plain"] = plain[label]["ms"]
    if args.json:
        args.json.write_text(json.dumps(runs))
    for label, run in runs.items():
        print("\n".join(report(label, run)))
