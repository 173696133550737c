"""Run every snippet and record what it produced, with provenance.

    python -m tools.record_snippets                 # all snippets
    python -m tools.record_snippets attention/numpy_attention   # only these
    python -m tools.record_snippets --require-gpu   # refuse to run without a CUDA GPU (used by `nox -s publish`)
    python -m tools.record_snippets --time-limit 540 triton/benchmark   # interrupt (Ctrl-C) after 540 s

Each snippet runs as ``python <file>`` in a fresh, empty working directory. What it prints becomes
``stdout.txt``; every file it writes there (figures, tables, video) is copied next to it; ``provenance.json``
says which source (sha256), device, versions and date produced them. A snippet marked ``# flashdoc: gpu-only``
still runs on a CPU machine, as a smoke test, but keeps its last GPU-recorded outputs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tools.outputs import ROOT, Snippet, all_snippets, snippet


@dataclass
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    workdir: Path
    interrupted: bool = False  # stopped at the time limit with Ctrl-C; it may still have written partial outputs

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def snippet_env() -> dict[str, str]:
    """The environment a snippet runs in: the checkout importable, no GUI backend, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _default_ctrl_c() -> None:
    """In the snippet's process before it starts: Ctrl-C back to its default. A shell's background job
    (``nox -s publish &``) and nohup start with SIGINT ignored, which children inherit; Python then never raises
    KeyboardInterrupt, and the time limit's Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_snippet(snip: Snippet, workdir: Path, timeout: float = 1800) -> RunResult:
    """Run one snippet as a reader would (``python file.py``) inside ``workdir``.

    At ``timeout`` seconds the snippet gets a Ctrl-C (SIGINT), as a reader would press it: a long benchmark
    then writes out what it measured so far. If it is still running a minute later, it is killed.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(snip.path)],
        cwd=workdir,
        env=snippet_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_ctrl_c if os.name == "posix" else None,
    )
    interrupted = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        interrupted = True
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    return RunResult(proc.returncode, stdout, stderr, time.perf_counter() - start, workdir, interrupted)


def describe_device() -> dict[str, str | bool]:
    import torch
    import triton

    gpu = torch.cuda.is_available()
    if gpu:
        device = torch.cuda.get_device_name(0)
    else:
        device = f"CPU ({platform.machine()}, {os.cpu_count()} cores, Triton interpreter)"
    return {
        "device": device,
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }


def record(snip: Snippet, result: RunResult, device: dict) -> None:
    """Replace the snippet's generated folder with this run's outputs and their provenance."""
    out = snip.output_dir
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "stdout.txt").write_text(result.stdout, encoding="utf-8")
    files = sorted(p for p in result.workdir.rglob("*") if p.is_file())
    for f in files:
        dest = out / f.relative_to(result.workdir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
    provenance = {
        "snippet": snip.rel_path,
        "source_sha256": snip.source_sha256,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        **device,
        "seconds": round(result.seconds, 2),
        "interrupted_at_time_limit": result.interrupted,
        "files": [f.relative_to(result.workdir).as_posix() for f in files],
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="snippet ids like 'attention/numpy_attention' (default: all)")
    parser.add_argument("--require-gpu", action="store_true", help="fail unless a CUDA GPU is present")
    parser.add_argument("--time-limit", type=float, default=1800,
                        help="seconds before a snippet is interrupted with Ctrl-C (default: %(default)s)")
    args = parser.parse_args(argv)

    device = describe_device()
    if args.require_gpu and not device["gpu"]:
        print(
            "error: --require-gpu: no CUDA GPU is visible (torch.cuda.is_available() is False). "
            "Publishing records every output on a GPU; run it on a GPU machine (see CONTRIBUTING.md).",
            file=sys.stderr,
        )
        return 2

    snippets = [snippet(n) for n in args.names] if args.names else all_snippets()
    print(f"Recording {len(snippets)} snippet(s) on {device['device']} "
          f"(torch {device['torch']}, triton {device['triton']})", flush=True)
    outcomes: list[tuple[str, str, float]] = []
    for i, snip in enumerate(snippets, 1):
        print(f"[{i}/{len(snippets)}] {snip.rel_path} ... ({len(snippets) - i} left after this)", flush=True)
        with tempfile.TemporaryDirectory(prefix="flashdoc-snippet-") as tmp:
            result = run_snippet(snip, Path(tmp), timeout=args.time_limit)
            if not result.ok:
                print(result.stdout[-2000:], result.stderr[-4000:], sep="\n", file=sys.stderr)
                outcomes.append((snip.name, "FAILED", result.seconds))
            elif snip.gpu_only and not device["gpu"]:
                prov = snip.provenance()
                kept = f"kept GPU outputs from {prov['date']}" if prov and prov["gpu"] else "no GPU outputs yet"
                outcomes.append((snip.name, f"ran on CPU as a smoke test; {kept}", result.seconds))
            else:
                record(snip, result, device)
                outcomes.append((snip.name, "recorded", result.seconds))
        print(f"      {outcomes[-1][1]} in {outcomes[-1][2]:.1f} s", flush=True)

    width = max(len(name) for name, _, _ in outcomes)
    print("\nSummary")
    for name, status, seconds in outcomes:
        print(f"  {name:<{width}}  {seconds:7.1f} s  {status}")
    failed = [name for name, status, _ in outcomes if status == "FAILED"]
    print(f"{len(outcomes) - len(failed)} ok, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
