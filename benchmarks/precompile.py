"""Compiling ahead of the timing, in parallel worker processes.

FlexAttention compiles once per shape (~5 s each, 72 shapes in the full sweep) and flashdoc's autotuner compiles
each of its configs once per (dtype, head dim, causal) (~6 s forward, ~13 s backward): one after another that is
most of the run. Worker processes do those compiles first, in parallel, on the same GPU but before any timing,
filling the on-disk caches of torch.compile (FX graph and AOTAutograd caches) and Triton. The timed run then
finds every kernel compiled: its first calls only load them (and flashdoc's autotuner benchmarks its
candidates, which must happen alone on the GPU, so it is not done ahead). Nothing measured comes from the
workers; if one fails, the main run simply compiles that kernel itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import peers
from benchmarks.schema import sweep_configs
from benchmarks.timing import DTYPES, make_inputs, sync

ROOT = Path(__file__).resolve().parent.parent


def tasks(sweep, available):
    """One forward+backward call per FlexAttention shape and per flashdoc (dtype, head dim, causal)."""
    out = []
    for mode, dtype, head_dim, causal, seqlen in sweep_configs(sweep):
        if mode != "fwd":  # one forward+backward call compiles what both modes use
            continue
        batch, heads = sweep.batch_heads(seqlen, head_dim)
        if "flex" in available:
            out.append(
                dict(
                    peer="flex",
                    dtype=dtype,
                    head_dim=head_dim,
                    causal=causal,
                    seqlen=seqlen,
                    batch=batch,
                    heads=heads,
                    device=sweep.device,
                    cost=5,
                )
            )
        if "flashdoc" in available and seqlen == min(sweep.seqlens):  # kernels do not depend on N
            out.append(
                dict(
                    peer="flashdoc",
                    dtype=dtype,
                    head_dim=head_dim,
                    causal=causal,
                    seqlen=seqlen,
                    batch=batch,
                    heads=heads,
                    device=sweep.device,
                    cost=20,
                )
            )
    return out


def worker(task_list):
    """Runs in a worker process: one forward+backward call per task; prints one JSON line per task."""
    loaded = {}
    for t in task_list:
        start = time.perf_counter()
        try:
            p = peers.peer(t["peer"])
            attn = loaded.get(p.name) or loaded.setdefault(p.name, p.load(t["device"]))
            q, k, v, dout = make_inputs(
                p.layout, t["batch"], t["heads"], t["seqlen"], t["head_dim"], DTYPES[t["dtype"]], t["device"], True
            )
            attn(q, k, v, t["causal"]).backward(dout)
            sync(t["device"])
            status = "ok"
        except Exception as e:
            status = peers.failure_reason(e)
        print(json.dumps(dict(t, status=status, s=time.perf_counter() - start)), flush=True)


def precompile(sweep, available, workers, timeout_s):
    """Run the compile tasks in ``workers`` processes; returns a summary dict (kept in results.json)."""
    todo = sorted(tasks(sweep, available), key=lambda t: -t["cost"])
    if not todo or workers < 1:
        return dict(workers=0, tasks=len(todo), wall_s=0.0)
    workers = min(workers, len(todo))
    shares = [todo[i::workers] for i in range(workers)]  # longest first, dealt round-robin
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath)
    script = "import json, sys; from benchmarks.precompile import worker; worker(json.loads(sys.argv[1]))"
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(share)],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for share in shares
    ]
    done = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()  # its remaining compiles happen in the main run instead
            out, _ = proc.communicate()
        done += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    failed = [
        f"{t['peer']} {t['dtype']} d={t['head_dim']} causal={t['causal']} N={t['seqlen']}: {t['status']}"
        for t in done
        if t["status"] != "ok"
    ]
    return dict(
        workers=workers,
        tasks=len(todo),
        done=sum(t["status"] == "ok" for t in done),
        failed=failed[:10],
        wall_s=time.perf_counter() - start,
        task_s=sum(t["s"] for t in done),
    )
