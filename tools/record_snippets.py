"""Run every snippet and record what it produced, with provenance.

    python -m tools.record_snippets                 # all snippets
    python -m tools.record_snippets attention/numpy_attention   # only these
    python -m tools.record_snippets --stale         # only those whose outputs the checkout did not produce, or
                                                    # produced only in part (a run stopped at its time limit)
    python -m tools.record_snippets --check         # record nothing: list the stale and partial ones, exit 1 if any
                                                    # (stale GPU-only ones also as commands that fit ten minutes)
    python -m tools.record_snippets --require-gpu   # refuse to run without a CUDA GPU
    python -m tools.record_snippets --time-limit 540 triton/benchmark   # interrupt (Ctrl-C) after 540 s
    python -m tools.record_snippets --archive out.tar.gz ...   # pack what is recorded after each snippet

Each snippet runs as ``python <file>`` in a fresh, empty working directory (through ``tools/run_snippet.py``,
which also notes the modules it imported). What it prints becomes ``stdout.txt``; every file it writes there
(figures, tables, video) is copied next to it; ``provenance.json`` says what produced them: the snippet's
sha256, the sha256 of every module of this repository that the run imported, the commit, device, versions and
date. A snippet marked ``# flashdoc: gpu-only`` still runs on a CPU machine, as a smoke test, but keeps its last
GPU-recorded outputs. What a snippet prints shows as it runs, indented under its name.
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
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools import outputs
from tools.outputs import (
    GPU_RECORD_COMMAND,
    PROVENANCE_FORMAT,
    ROOT,
    Snippet,
    all_snippets,
    module_hashes,
    snippet,
    stale_snippets,
)

RUNNER = Path(__file__).resolve().with_name("run_snippet.py")


@dataclass
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    workdir: Path
    interrupted: bool = False  # stopped at the time limit with Ctrl-C; it may still have written partial outputs
    modules: list[str] = field(default_factory=list)  # this repository's modules it imported, relative paths

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


def _drain(pipe, sink: list[str], echo) -> None:
    for line in pipe:
        sink.append(line)
        if echo is not None:
            echo.write(f"      | {line}" if line.endswith("\n") else f"      | {line}\n")
            echo.flush()


def run_snippet(snip: Snippet, workdir: Path, timeout: float = 1800, echo=None) -> RunResult:
    """Run one snippet as a reader would (``python file.py``) inside ``workdir``.

    At ``timeout`` seconds the snippet gets a Ctrl-C (SIGINT), as a reader would press it: a long benchmark
    then writes out what it measured so far. If it is still running a minute later, it is killed. With
    ``echo`` (a text stream), each line it prints is copied there as it comes, indented.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flashdoc-imports-") as side:
        imports_json = Path(side) / "imports.json"  # outside workdir: not one of the snippet's outputs
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(RUNNER), str(outputs.ROOT), str(imports_json), str(snip.path)],
            cwd=workdir,
            env=snippet_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_default_ctrl_c if os.name == "posix" else None,
        )
        out: list[str] = []
        err: list[str] = []
        readers = [
            threading.Thread(target=_drain, args=(proc.stdout, out, echo), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, err, echo), daemon=True),
        ]
        for reader in readers:
            reader.start()
        interrupted = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            interrupted = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in readers:
            reader.join()
        seconds = time.perf_counter() - start
        modules = json.loads(imports_json.read_text()) if imports_json.exists() else []
    return RunResult(proc.returncode, "".join(out), "".join(err), seconds, workdir, interrupted, modules)


def current_commit() -> str | None:
    """The commit the checkout is at (FLASHDOC_COMMIT overrides it, for a copy whose .git is not current)."""
    if os.environ.get("FLASHDOC_COMMIT"):
        return os.environ["FLASHDOC_COMMIT"]
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


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
        "format": PROVENANCE_FORMAT,
        "snippet": snip.rel_path,
        "source_sha256": snip.source_sha256,
        # every module of this repository the run imported, so a change to any of them marks these outputs stale
        "modules": module_hashes(result.modules),
        "commit": current_commit(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        **device,
        "seconds": round(result.seconds, 2),
        "interrupted_at_time_limit": result.interrupted,
        "files": [f.relative_to(result.workdir).as_posix() for f in files],
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


def partial_snippets() -> list[tuple[outputs.Snippet, dict]]:
    """Every snippet whose recorded outputs come from a run stopped at its time limit, with their provenance: what
    such a run wrote on its way out (a benchmark's rows so far) is an output of the code, but not all of it."""
    found = []
    for snip in outputs.all_snippets():
        prov = snip.provenance()
        if prov and prov.get("interrupted_at_time_limit"):
            found.append((snip, prov))
    return found


# The GPU machines stop a command at ten minutes. A recording command gets snippets whose last recorded times add
# up to GPU_BATCH_SECONDS at most, and each snippet a time limit of GPU_CALL_SECONDS. The margin between the two is
# for the machine: one host ran the same snippets 1.2 to 2.6 times as long as the host before (their compiles and
# host-bound timings are CPU work), and a batch that outgrows its limit ends with partial outputs.
GPU_BATCH_SECONDS = 400
GPU_CALL_SECONDS = 540


def gpu_batches(snippets: list[Snippet], budget: float = GPU_BATCH_SECONDS) -> list[tuple[list[str], float]]:
    """GPU-only snippets split into recording commands of at most ``budget`` seconds each, by how long each took
    when last recorded (longest first, each into the first command with room: first-fit decreasing). A snippet
    never recorded counts as the whole budget. Returns (names, seconds) per command."""

    def seconds(snip: Snippet) -> float:
        prov = snip.provenance()
        return float(prov["seconds"]) if prov and prov.get("gpu") and prov.get("seconds") else budget

    timed = sorted(((seconds(snip), snip.name) for snip in snippets), key=lambda item: item[0], reverse=True)
    batches: list[tuple[list[str], float]] = []
    for need, name in timed:
        for i, (names, total) in enumerate(batches):
            if total + need <= budget:
                batches[i] = (names + [name], total + need)
                break
        else:
            batches.append(([name], need))
    return batches


def gpu_commands(snippets: list[Snippet]) -> list[str]:
    """The commands that record ``snippets`` on a GPU, each within one device call (``gpu_batches``)."""
    return [
        f"{GPU_RECORD_COMMAND} --time-limit {GPU_CALL_SECONDS} {' '.join(names)}  # {total:.0f} s when last recorded"
        for names, total in gpu_batches(snippets)
    ]


def check(names: list[str]) -> int:
    """Print one line per stale or partial output (or 'all fresh'); 1 if any."""
    stale = [s for s in stale_snippets() if not names or s.snippet.name in names]
    for state in stale:
        where = "GPU-only" if state.snippet.gpu_only else "CPU"
        print(f"stale ({where}): {state.snippet.name}: {state.reason()}")
    gpu_only = [state.snippet for state in stale if state.snippet.gpu_only]
    if gpu_only:
        print("on a CUDA GPU, in commands that each fit a ten-minute call:\n  " + "\n  ".join(gpu_commands(gpu_only)))
    partial = [(snip, prov) for snip, prov in partial_snippets() if not names or snip.name in names]
    for snip, prov in partial:
        print(
            f"partial: {snip.name}: its run stopped at the time limit after {prov['seconds']:.0f} s; "
            "record it again with a longer --time-limit"
        )
    if not stale and not partial:
        print("every recorded output is fresh")
    return 1 if stale or partial else 0


def write_archive(path: Path, snippets: list[Snippet]) -> None:
    """Pack the outputs of ``snippets`` into the gzipped tar ``path``, named from the repository's root (unpack it
    there with ``tar xzf``). It is written to a temporary name and then renamed over ``path``, after every snippet,
    so that a run stopped from outside (a batch job's time limit) leaves a whole archive of what it recorded."""
    part = path.with_name(path.name + ".part")
    with tarfile.open(part, "w:gz") as tar:
        for snip in snippets:
            tar.add(snip.output_dir, arcname=snip.output_dir.relative_to(outputs.ROOT).as_posix())
    part.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="snippet ids like 'attention/numpy_attention' (default: all)")
    parser.add_argument("--require-gpu", action="store_true", help="fail unless a CUDA GPU is present")
    parser.add_argument(
        "--stale", action="store_true", help="record only snippets whose outputs are stale (of those named, or of all)"
    )
    parser.add_argument(
        "--check", action="store_true", help="record nothing; list stale and partial outputs, exit 1 if any"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=1800,
        help="seconds before a snippet is interrupted with Ctrl-C (default: %(default)s)",
    )
    parser.add_argument(
        "--archive",
        type=Path,
        metavar="PATH",
        help="after each snippet, pack every output recorded so far into this .tar.gz (paths from the repository's "
        "root), for a machine whose results leave as files and whose commands may be stopped at a time limit",
    )
    args = parser.parse_args(argv)
    if args.archive and not args.archive.parent.is_dir():
        parser.error(
            f"--archive: the folder {args.archive.parent} does not exist; create it, or name a file in one that does"
        )
    names = [snippet(n).name for n in args.names]  # fails early, listing the known ones, on a typo
    if args.check:
        return check(names)

    device = describe_device()
    if args.require_gpu and not device["gpu"]:
        print(
            "error: --require-gpu: no CUDA GPU is visible (torch.cuda.is_available() is False). "
            "Publishing records every output on a GPU; run it on a GPU machine (see CONTRIBUTING.md).",
            file=sys.stderr,
        )
        return 2

    snippets = [snippet(n) for n in names] if names else all_snippets()
    if args.stale:
        stale = {state.snippet.name for state in stale_snippets()} | {snip.name for snip, _ in partial_snippets()}
        snippets = [s for s in snippets if s.name in stale]
        if not device["gpu"]:
            gpu_only = [s for s in snippets if s.gpu_only]
            snippets = [s for s in snippets if not s.gpu_only]
            if gpu_only:
                commands = gpu_commands(gpu_only)
                print(
                    "Stale GPU-only outputs, which this CPU machine cannot record: "
                    f"{' '.join(s.name for s in gpu_only)}\n"
                    "  record them on a CUDA GPU, in commands that each fit a ten-minute call:\n    "
                    + "\n    ".join(commands),
                    flush=True,
                )
        if not snippets:
            print("Nothing stale to record here.", flush=True)
            return 0
    print(
        f"Recording {len(snippets)} snippet(s) on {device['device']} "
        f"(torch {device['torch']}, triton {device['triton']})",
        flush=True,
    )
    outcomes: list[tuple[str, str, float]] = []
    recorded: list[Snippet] = []
    started = time.perf_counter()
    for i, snip in enumerate(snippets, 1):
        elapsed = format_seconds(time.perf_counter() - started)
        print(f"[{i}/{len(snippets)}] {snip.name}  (elapsed {elapsed})", flush=True)
        with tempfile.TemporaryDirectory(prefix="flashdoc-snippet-") as tmp:
            result = run_snippet(snip, Path(tmp), timeout=args.time_limit, echo=sys.stdout)
            if not result.ok:  # its traceback was shown as it ran
                outcomes.append((snip.name, "FAILED", result.seconds))
            elif snip.gpu_only and not device["gpu"]:
                prov = snip.provenance()
                kept = f"kept GPU outputs from {prov['date']}" if prov and prov["gpu"] else "no GPU outputs yet"
                outcomes.append((snip.name, f"ran on CPU as a smoke test; {kept}", result.seconds))
            else:
                record(snip, result, device)
                status = "recorded partial outputs: stopped at the time limit" if result.interrupted else "recorded"
                outcomes.append((snip.name, status, result.seconds))
                recorded.append(snip)
                if args.archive:
                    write_archive(args.archive, recorded)
        print(f"      {outcomes[-1][1]} in {outcomes[-1][2]:.1f} s", flush=True)

    width = max(len(name) for name, _, _ in outcomes)
    print(f"\nSummary (total {format_seconds(time.perf_counter() - started)})")
    for name, status, seconds in outcomes:
        print(f"  {name:<{width}}  {seconds:7.1f} s  {status}")
    failed = [name for name, status, _ in outcomes if status == "FAILED"]
    print(f"{len(outcomes) - len(failed)} ok, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
