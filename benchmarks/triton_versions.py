"""The table of Triton releases the Hopper kernels were verified on: the GPU suite's pass count and the ratio to
cuDNN, from the files ``kernels/triton_matrix.sh`` leaves (``results-<release>.json`` from the benchmark,
``suite-<release>.txt`` with each shard's pytest summary line).

    python -m benchmarks.triton_versions benchmarks/triton_versions > benchmarks/triton_versions/README.md
"""

import argparse
import glob
import json
import os
import re


def suite_counts(path: str) -> dict:
    """Passed, failed and skipped tests summed over a suite's shards."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    with open(path) as f:
        for line in f:
            for n, what in re.findall(r"(\d+) (passed|failed|skipped|error)", line):
                counts[what] += int(n)
    return counts


def ratios(path: str) -> tuple[dict, dict]:
    """The run's header, and flashdoc / cuDNN TFLOP/s per (sequence length, mode, head dim, causal)."""
    with open(path) as f:
        run = json.load(f)
    tflops = {
        (r["peer"], r["seqlen"], r["mode"], r["head_dim"], r["causal"]): r["tflops"]
        for r in run["records"]
        if r["kind"] == "speed" and r["status"] == "ok"
    }
    return run, {
        key[1:]: tflops[key] / tflops[("sdpa-cudnn",) + key[1:]]
        for key in tflops
        if key[0] == "flashdoc" and ("sdpa-cudnn",) + key[1:] in tflops
    }


def table(folder: str) -> str:
    cols = [(mode, d, causal) for mode in ("fwd", "fwd_bwd") for d in (64, 128) for causal in (False, True)]
    head = " | ".join(f"{m.replace('_', '+')} d={d}{' causal' if c else ''}" for m, d, c in cols)
    lines = [f"| Triton | GPU suite | N | {head} |", "|---" * (len(cols) + 3) + "|"]
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "results-*.json"))):
        release = os.path.basename(path)[len("results-") : -len(".json")]
        run, ratio = ratios(path)
        runs.append(run)
        suite_file = os.path.join(folder, f"suite-{release}.txt")
        if os.path.exists(suite_file):
            c = suite_counts(suite_file)
            suite = f"{c['passed']} passed, {c['failed'] + c['error']} failed, {c['skipped']} skipped"
        else:
            suite = "not run"
        for n in sorted({key[0] for key in ratio}):
            cells = " | ".join(f"{ratio[(n,) + col]:.2f}x" if (n,) + col in ratio else "-" for col in cols)
            lines.append(f"| {release} | {suite} | {n // 1024}k | {cells} |")
    first = runs[0]
    timed = [r for r in first["records"] if r["kind"] == "speed"]
    note = (
        f"flashdoc's TFLOP/s over cuDNN's (SDPA's cuDNN backend), {first['gpu']}, torch {first['torch']}, "
        f"flashdoc {first['flashdoc_commit']}, {', '.join(sorted({r['dtype'] for r in timed}))}, N = "
        f"{', '.join(str(n) for n in sorted({r['seqlen'] for r in timed}))}, "
        f"one pass, {first['date'][:10]}. "
        "Newer Tritons ran ahead of the installed one on PYTHONPATH."
    )
    return "\n".join(["# The Hopper kernels on each Triton release", "", note, ""] + lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    print(table(parser.parse_args().folder), end="")
