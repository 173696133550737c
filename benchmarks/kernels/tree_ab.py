"""Copies of the package's attention, timed against each other on one GPU.

    PYTHONPATH=. python3 benchmarks/kernels/tree_ab.py --base bench-out/base [--rounds 3] [--cases window]
        [--mode fwd | fwd_bwd] [--new DIR [--new DIR ...]]
    TRITON_INTERPRET=1 python benchmarks/kernels/tree_ab.py --base DIR --smoke      # CPU: the protocol only

``--base`` is a folder holding another copy of the ``flashdoc`` package (say, the last commit's, from
``git archive HEAD flashdoc | tar x -C bench-out/base``); the tree timed against it is this repository's, or the
copy in ``--new`` (a config to try, edited into a second copy, needs no change to the working tree). ``--new`` may
be given several times: every candidate is then timed in the same rounds as one base, which is timed once a round
rather than once per candidate. Each round times every case in one process per tree, the processes one after the other,
the first of them moving on by one tree from round to round, so that a drift of the GPU's clocks over the run falls
on all. Each process builds the same inputs from a fixed seed and reports, per case, do_bench's median time of
``flash_attn_func``'s forward (``--mode fwd``) or of a training step's forward and backward (``fwd_bwd``: the three
gradients for a fixed output gradient), and a hash of the bytes of everything the call returned: a change that
should only reorder work (a schedule, a protocol) must leave every bit the same. ``--cases decode`` times decode
steps instead (``flash_attn_with_kvcache`` at the decode benchmark's shape and split points, a contiguous cache and
each page size, as CUDA graphs over copies of the caches that L2 cannot hold together, as that benchmark times
them), and ``--cases decode-contiguous`` the contiguous cache alone at every point of that benchmark an 80 GB card
holds; ``--mode`` does not apply to either.

Prints, per candidate and case, the base's and the candidate's medians over the rounds, the ratio base / candidate
(above 1: the candidate is faster), and whether the outputs agree. A single candidate is named "new"; several are
named by their folders.
"""

import argparse
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (label, head dim, causal, window_size, softcap): 16k tokens, 2,048 hidden, bf16, as the variants benchmark
CASES = {
    "window": [
        ("d=128 window (1024, 0)", 128, True, (1024, 0), 0.0),
        ("d=128 window (256, 0)", 128, True, (256, 0), 0.0),
        ("d=128 window (4096, 0)", 128, True, (4096, 0), 0.0),
        ("d=64 window (1024, 0)", 64, True, (1024, 0), 0.0),
        ("d=256 window (1024, 0)", 256, True, (1024, 0), 0.0),
        ("d=128 window (1024, 0) softcap 50", 128, True, (1024, 0), 50.0),
        ("d=128 window (1000, 24)", 128, False, (1000, 24), 0.0),
        # a control whose kernel the change under test should leave alone
        ("d=128 causal", 128, True, (-1, -1), 0.0),
    ],
    # softcap, with its controls: the same calls without it, whose kernels a softcap change should leave alone
    "softcap": [
        ("d=128 full softcap 50", 128, False, (-1, -1), 50.0),
        ("d=128 causal softcap 50", 128, True, (-1, -1), 50.0),
        ("d=256 causal softcap 50", 256, True, (-1, -1), 50.0),
        ("d=128 window (1024, 0) softcap 50", 128, True, (1024, 0), 50.0),
        ("d=128 full", 128, False, (-1, -1), 0.0),
        ("d=128 causal", 128, True, (-1, -1), 0.0),
    ],
    # the dense kernels, for a change to them or to what they share
    "dense": [
        ("d=64 full", 64, False, (-1, -1), 0.0),
        ("d=64 causal", 64, True, (-1, -1), 0.0),
        ("d=128 full", 128, False, (-1, -1), 0.0),
        ("d=128 causal", 128, True, (-1, -1), 0.0),
        ("d=256 full", 256, False, (-1, -1), 0.0),
        ("d=256 causal", 256, True, (-1, -1), 0.0),
    ],
}
# (label, batch, cache tokens, page size or None): the decode benchmark's points where splits fill the GPU, whose
# paged readings trail the contiguous cache's most, and one where the batch does
DECODE_POINTS = ((1, 4096), (1, 32768), (8, 4096), (1, 131072), (8, 32768))
CASES["decode"] = [
    (f"{batch} x {cache // 1024}k {f'pages of {page}' if page else 'contiguous'}", batch, cache, page)
    for batch, cache in DECODE_POINTS
    for page in (None, 16, 64, 256)
]
# the contiguous cache alone, at every point of the decode benchmark that an 80 GB card holds: a change to the
# contiguous path, timed where the batch fills the GPU as well as where splits do
CASES["decode-contiguous"] = [
    (f"{batch} x {cache // 1024}k contiguous", batch, cache, None)
    for batch in (1, 8, 64)
    for cache in (4096, 32768, 131072)
    if batch * cache <= 64 * 32768
]
MODES = ("fwd", "fwd_bwd")
TOKENS, HIDDEN = 16384, 2048
SMOKE_TOKENS, SMOKE_HIDDEN = 64, 64


def measure(cases: list, smoke: bool, mode: str = "fwd") -> dict:
    """{label: {"ms": median time of the mode's call, "hash": its results' hash}} for this process's flashdoc."""
    import torch
    import triton

    import flashdoc

    device = "cpu" if smoke else "cuda"
    tokens, hidden = (SMOKE_TOKENS, SMOKE_HIDDEN) if smoke else (TOKENS, HIDDEN)
    dtype = torch.float32 if smoke else torch.bfloat16
    out = {}
    for label, d, causal, window, softcap in cases:
        g = torch.Generator(device=device).manual_seed(0)
        heads = max(1, hidden // d)
        q, k, v = (torch.randn(1, tokens, heads, d, device=device, dtype=dtype, generator=g) for _ in range(3))
        if mode == "fwd_bwd":
            dout = torch.randn(q.shape, device=device, dtype=dtype, generator=g)
            for t in (q, k, v):
                t.requires_grad_(True)

        def call():
            out = flashdoc.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap)
            if mode == "fwd":
                return (out,)
            # autograd.grad returns the gradients rather than adding them to .grad: every call does the same work
            return (out, *torch.autograd.grad(out, (q, k, v), dout))

        digest = hashlib.sha256()
        for t in call():
            digest.update(t.detach().float().cpu().numpy().tobytes())
        digest = digest.hexdigest()[:16]
        ms = 0.0 if smoke else triton.testing.do_bench(call, warmup=50, rep=300)
        out[label] = {"ms": ms, "hash": digest}
    return out


def measure_decode(cases: list, smoke: bool) -> dict:
    """``measure`` for the decode cases: each step's CUDA-graph time over copies of its caches, and its output's
    hash (on the CPU, the decode benchmark's smoke shape over 64 tokens, untimed)."""
    from benchmarks import decode as bench

    out = {}
    with bench.smoke_shape() if smoke else contextlib.nullcontext():
        for label, batch, cache, page in cases:
            if smoke:
                cache, page = 64, page and min(page, 32)
            n_copies = 1 if smoke else bench.copies_for(batch, cache)
            copies = [bench.make_cache(batch, cache, page, seed=i) for i in range(n_copies)]
            calls = [bench.flashdoc_call(*inputs) for inputs in copies]
            digest = hashlib.sha256(calls[0]().float().cpu().numpy().tobytes()).hexdigest()[:16]
            ms = 0.0 if smoke else bench.graph_time_ms(calls)
            out[label] = {"ms": ms, "hash": digest}
            del calls, copies
    return out


def run_tree(path: Path, case_set: str, smoke: bool, mode: str = "fwd") -> dict:
    """``measure`` in a fresh process whose ``flashdoc`` is the copy under path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), str(ROOT)]))
    cmd = [sys.executable, __file__, "--child", "--cases", case_set, "--mode", mode] + (["--smoke"] if smoke else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the tree at {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(rounds: list, labels: list, new_name: str = "new") -> list:
    """Rows (label, base ms, new ms, base / new, outputs equal) from rounds of {"base": ..., new_name: ...}."""
    rows = []
    for label in labels:
        base = statistics.median(r["base"][label]["ms"] for r in rounds)
        new = statistics.median(r[new_name][label]["ms"] for r in rounds)
        same = all(r["base"][label]["hash"] == r[new_name][label]["hash"] for r in rounds)
        rows.append((label, base, new, base / new if new else float("nan"), same))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="a folder holding the other copy of the flashdoc package")
    parser.add_argument(
        "--new",
        type=Path,
        action="append",
        help="a tree to time against it (default: this one); give it again for more candidates",
    )
    parser.add_argument("--cases", default="window", choices=sorted(CASES))
    parser.add_argument("--mode", default="fwd", choices=MODES, help="the forward alone, or forward and backward")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny fp32 shapes on the CPU, no timing")
    parser.add_argument("--json", type=Path, help="also write every round's readings here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = CASES[args.cases]
    if args.child:
        readings = (
            measure_decode(cases, args.smoke)
            if args.cases.startswith("decode")
            else measure(cases, args.smoke, args.mode)
        )
        print(json.dumps(readings))
        return
    candidates = args.new or [ROOT]
    for name, tree in [("base", args.base)] + [("new", t) for t in candidates]:
        if tree is None or not (tree / "flashdoc" / "__init__.py").is_file():
            parser.error(f"--{name} must be a folder holding a copy of the flashdoc package (DIR/flashdoc/__init__.py)")
    for tree in candidates:
        if package_digest(tree) == package_digest(args.base):
            parser.error(
                f"{tree}'s flashdoc is the same as --base's, so the run would time one package against itself "
                "(a git apply run inside the repository skips paths outside the current folder: from the "
                "repository's root, git apply --directory=DIR PATCH)"
            )
    trees = {"base": args.base.resolve(), **candidate_names([t.resolve() for t in candidates])}
    names = list(trees)
    rounds = []
    for i in range(args.rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        rounds.append({name: run_tree(trees[name], args.cases, args.smoke, args.mode) for name in order})
        print(f"round {i + 1} of {args.rounds} done", flush=True)
        if args.json:  # after every round, so that a run stopped by a time limit keeps the rounds it finished
            args.json.write_text(json.dumps(rounds, indent=1))
    for name in names[1:]:
        if len(names) > 2:
            print(f"\n{name}: {trees[name]}")
        print(f"| case | base ms | {name} ms | base / {name} | outputs equal |")
        print("|---|---|---|---|---|")
        for label, base, new, ratio, same in summarise(rounds, [c[0] for c in cases], name):
            print(f"| {label} | {base:.4f} | {new:.4f} | {ratio:.3f}x | {'yes' if same else 'NO'} |")


def package_digest(tree: Path) -> str:
    """A hash of the names and bytes of every Python file of the flashdoc package under tree."""
    digest = hashlib.sha256()
    package = tree / "flashdoc"
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def candidate_names(paths: list) -> dict:
    """{name: path} for the candidate trees: "new" for one; else each folder's name, with its position added where
    two folders share a name (or one is called "base")."""
    if len(paths) == 1:
        return {"new": paths[0]}
    names = [p.name for p in paths]
    return {
        (name if names.count(name) == 1 and name != "base" else f"{name}-{i + 1}"): p
        for i, (name, p) in enumerate(zip(names, paths))
    }


if __name__ == "__main__":
    main()
