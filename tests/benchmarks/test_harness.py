"""The benchmark harness (benchmarks/) in its smallest mode, on the CPU.

Only the plumbing is tested: what gets written, its schema, the printed ratio table, and that a peer which is
missing or fails is reported as skipped with a reason instead of stopping the run. No timing is asserted:
CPU numbers (flashdoc runs through the Triton interpreter here) mean nothing.
"""

import json
import os
import threading

import pytest
import torch

from benchmarks import kernel_configs, peers, report, schema, timing
from benchmarks.run import main, run_benchmark

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The smallest sweep: one tiny shape, both modes and both maskings (a few seconds of interpreted flashdoc).
# On a GPU machine the same tiny sweep runs on the GPU, without FlexAttention (its compiles take a minute).
# 128 tokens, not fewer: a forward whose query rows fit one tile (64) goes to the split-KV decode kernel, as in
# flash-attn 2, and that kernel has no tile pick to report, where every row of the benchmark's sweeps has one.
TINY = dict(
    seqlens=(128,),
    total_tokens=256,
    hidden=32,
    head_dims=(32,),
    dtypes=("fp16",),
    memory_seqlens=(256,),
    first_call=False,
    passes=2,
)
# This process's CPUs before any benchmark ran (the GPU run pins itself to one of them while it times).
ALL_CPUS = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
PEERS = None if DEVICE == "cpu" else ["naive", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "flashdoc"]

RECORD_KEYS = {
    "kind",
    "peer",
    "mode",
    "dtype",
    "head_dim",
    "causal",
    "seqlen",
    "batch",
    "heads",
    "status",
    "gpu",
    "timestamp",
    "torch",
    "triton",
    "flashdoc",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    results = run_benchmark(out_dir=out, device=DEVICE, peers=PEERS, progress=False, verbose=False, **TINY)
    return out, results


def test_results_json_schema(run):
    out, results = run
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))  # what was returned is what was written
    for key in (
        "schema",
        "date",
        "gpu",
        "torch",
        "triton",
        "flashdoc",
        "device",
        "note",
        "sweep",
        "peers",
        "records",
        "quantiles",
    ):
        assert key in on_disk, key
    assert on_disk["schema"] == schema.SCHEMA
    if DEVICE == "cpu":  # no pinning and, under the interpreter, no autotuner
        assert on_disk["pinned_cpu"] is None and on_disk["flashdoc_autotuned"] == []
    else:  # timed on one CPU, and every (length bucket, head dim, masking) that flashdoc ran has its picks
        assert on_disk["pinned_cpu"] == min(os.sched_getaffinity(0))
        ran = {
            (r["head_dim"], r["causal"])
            for r in on_disk["records"]
            if r["kind"] == "speed" and r["peer"] == "flashdoc" and r["status"] == "ok"
        }
        for kernel in ("fwd", "dkdv", "dq"):
            assert ran <= {
                (p["head_dim"], p["causal"]) for p in on_disk["flashdoc_autotuned"] if p["kernel"] == kernel
            }, kernel
    assert on_disk["device"] == DEVICE
    if DEVICE == "cpu":
        assert "not meaningful" in on_disk["note"].lower()
    assert set(on_disk["peers"]) == {p.name for p in peers.PEERS}

    speed = [r for r in on_disk["records"] if r["kind"] == "speed"]
    # one record per (mode, causal) for every available peer
    n_available = sum(p["available"] for p in on_disk["peers"].values())
    assert len(speed) == 2 * 2 * n_available
    for r in speed:
        assert RECORD_KEYS <= set(r), RECORD_KEYS - set(r)
        assert r["status"] in ("ok", "skipped")
        if r["status"] == "ok":
            assert r["ms"] > 0 and r["tflops"] > 0 and r["first_call_s"] > 0
            assert r["flops"] == schema.flops(
                r["mode"], r["batch"], r["heads"], r["seqlen"], r["head_dim"], r["causal"]
            )
        else:
            assert r["reason"]
    assert {r["peer"] for r in speed if r["status"] == "ok"} >= {"naive", "flashdoc"}
    first_call = [r for r in on_disk["records"] if r["kind"] == "first_call"]
    assert len(first_call) == 1 and first_call[0]["status"] == "skipped" and first_call[0]["reason"]
    memory = [r for r in on_disk["records"] if r["kind"] == "memory"]
    if DEVICE == "cpu":  # GPU memory statistics need a GPU: one record says so
        assert len(memory) == 1 and memory[0]["status"] == "skipped" and memory[0]["reason"]
    else:
        assert {r["peer"] for r in memory} == set(schema.MEMORY_PEERS)
        assert all(r["peak_extra_bytes"] > 0 for r in memory if r["status"] == "ok")


def test_every_timing_is_the_best_of_its_passes(run):
    """Each configuration is timed once per pass; its record keeps the pass with the lowest median, whole."""
    _, results = run
    timed = [r for r in results["records"] if r["kind"] == "speed" and r["status"] == "ok"]
    assert timed
    for r in timed:
        assert len(r["ms_passes"]) == 2 and r["ms"] == min(r["ms_passes"])
        assert r["ms_p20"] <= r["ms"] <= r["ms_p80"]
        assert r["tflops"] == pytest.approx(r["flops"] / (r["ms"] * 1e-3) / 1e12)


def test_the_second_pass_times_in_reverse_order():
    configs = [("fwd", "fp16", 32, False, n) for n in (64, 128, 256)]
    assert [row for row, _ in timing.pass_order(configs, 1)] == [2, 1, 0]
    for row in range(3):
        assert timing.row_order(peers.PEERS, row, 1) == timing.row_order(peers.PEERS, row, 0)[::-1]


# (one peer, four configurations per pass) the second call of the second pass; the very first call
@pytest.mark.parametrize("stop_at, passes_kept", [(6, [1, 1, 1, 2]), (1, [])])
def test_an_interrupted_run_keeps_what_it_timed(tmp_path, monkeypatch, stop_at, passes_kept):
    """Ctrl-C (or `timeout`'s SIGTERM) during the timing: what was timed is still written, each configuration
    once with the passes it got, the tables and plots too (even with nothing timed), and the run says so."""
    calls = []
    measure = timing.measure_speed

    def measure_then_stop(*args, **kwargs):
        calls.append(args)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return measure(*args, **kwargs)

    monkeypatch.setattr(timing, "measure_speed", measure_then_stop)
    results = run_benchmark(out_dir=tmp_path, device="cpu", peers=["naive"], progress=False, verbose=False, **TINY)
    assert results["interrupted"]
    timed = [r for r in results["records"] if r["kind"] == "speed" and r["status"] == "ok"]
    assert sorted(len(r["ms_passes"]) for r in timed) == passes_kept
    assert json.loads((tmp_path / "results.json").read_text())["records"] == json.loads(json.dumps(results["records"]))
    assert (tmp_path / "tflops_fp16.png").stat().st_size > 0 and (tmp_path / "ratios.md").read_text()


def test_passes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="passes must be"):
        run_benchmark(
            out_dir=tmp_path, device="cpu", peers=["naive"], progress=False, verbose=False, **dict(TINY, passes=0)
        )


def test_each_row_starts_at_another_peer(run):
    """The peers are timed in an order rotated from row to row, so no kernel is always timed first."""
    _, results = run
    rows = []
    for r in results["records"]:
        if r["kind"] == "speed":
            key = (r["mode"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"])
            if not rows or rows[-1][0] != key:
                rows.append((key, []))
            rows[-1][1].append(r["peer"])
    names = [p.name for p in peers.PEERS]
    for i, (_, order) in enumerate(rows):
        rotated = names[i % len(names) :] + names[: i % len(names)]
        assert order == [name for name in rotated if name in order]
    assert len({order[0] for _, order in rows}) > 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is a Linux feature")
def test_pinning_moves_every_thread_and_is_undone(run):
    """The GPU run times on one CPU and gives the others back afterwards; _pin_threads reaches every thread,
    including ones started before it (autograd's worker, for one)."""
    everyone = os.sched_getaffinity(0)
    assert everyone == ALL_CPUS  # the fixture's run (pinned on a GPU) gave every CPU back
    started = threading.Event()
    stop = threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), stop.wait()))
    worker.start()
    started.wait()
    try:
        timing.pin_threads({min(everyone)})
        for tid in os.listdir("/proc/self/task"):
            assert os.sched_getaffinity(int(tid)) == {min(everyone)}, tid
    finally:
        timing.pin_threads(everyone)
        stop.set()
        worker.join()
    assert os.sched_getaffinity(0) == everyone


def test_unavailable_peers_are_skipped_with_a_reason(run):
    _, results = run
    ran = results["peers"]
    assert ran["naive"]["available"] and ran["flashdoc"]["available"]
    for name, peer in ran.items():
        assert peer["available"] or peer["reason"], name
    if DEVICE == "cpu":  # these cannot run on a CPU-only machine
        for name in ("flex", "sdpa-cudnn", "sdpa-efficient"):
            assert not ran[name]["available"], name


def test_plots_and_tables_are_written(run):
    out, _ = run
    for name in ("tflops_fp16.png", "memory.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    ratios = (out / "ratios.md").read_text()
    assert "| configuration | vs naive |" in ratios
    assert "fwd+bwd fp16 d=32 causal" in ratios
    assert "| target | status | measured |" in (out / "targets.md").read_text()
    assert "fwd fp16 d=32 full" in (out / "tflops.md").read_text()
    autotuned = (out / "autotuned.md").read_text()
    if DEVICE == "cpu":
        assert "No autotuning in this run" in autotuned
    else:
        assert "| fp16 d=32 causal N=128 |" in autotuned.replace("\u00a0", " ")


def test_autotuned_table_has_one_row_per_shape_and_a_column_per_kernel():
    pick = dict(
        dtype="bf16", head_dim=128, causal=False, seq_bucket=4096, block_m=128, block_n=64, num_stages=2, num_warps=4
    )
    picks = [
        dict(pick, kernel="fwd"),
        dict(pick, kernel="dq", block_n=32),
        dict(pick, kernel="fwd", causal=True, seq_bucket=2048),
    ]
    lines = report.autotuned_table({"flashdoc_autotuned": picks}).splitlines()
    lines = [line.replace("\u00a0", " ") for line in lines]  # non-breaking spaces keep cells on one line
    assert lines[0] == "| configuration (N: its length bucket) | forward | dK/dV | dQ |"
    # sorted full before causal; a kernel the row never ran (no backward there) shows a dash
    assert lines[2] == "| bf16 d=128 full N=4k | 128×64 s2 w4 | — | 128×32 s2 w4 |"
    assert lines[3] == "| bf16 d=128 causal N=2k | 128×64 s2 w4 | — | — |"


def test_autotuned_picks_are_read_by_key_name(monkeypatch):
    """The autotuner's cache keys are its named key values (the length bucket, head dim and variant flags) and then
    the tensor arguments' dtypes: each pick's dtype and masking come from those places, however many flags the key
    has."""
    import types

    import triton

    from flashdoc.kernels import backward, forward
    from flashdoc.kernels.mask import VARIANT_FLAGS

    keys = ["SEQ_BUCKET", "HEAD_DIM", *VARIANT_FLAGS]
    flags = {flag: flag == "IS_CAUSAL" for flag in VARIANT_FLAGS}
    key = (2048, 64, *flags.values(), "torch.float16", "torch.float16", "torch.float32")
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3)
    monkeypatch.setattr(forward, "_attn_fwd_tuned", types.SimpleNamespace(keys=keys, cache={key: config}))
    monkeypatch.setattr(backward, "_attn_bwd_dkdv_tuned", None)
    monkeypatch.setattr(backward, "_attn_bwd_dq_tuned", None)
    (pick,) = kernel_configs.autotuned_configs()
    assert (pick["kernel"], pick["dtype"], pick["seq_bucket"], pick["head_dim"], pick["causal"]) == (
        "fwd",
        "fp16",
        2048,
        64,
        True,
    )
    assert (pick["block_m"], pick["block_n"], pick["num_stages"], pick["num_warps"]) == (128, 64, 3, 4)


def test_hopper_kernels_are_listed_with_their_fixed_configs(monkeypatch):
    """The Gluon kernels do not autotune, so the autotuner's cache misses them: the table lists their configs for
    the rows the dispatch sends them (here faked: forward at d = 128, dK/dV under the mask)."""
    import dataclasses

    from flashdoc.kernels import backward_hopper, forward_hopper

    monkeypatch.setattr(forward_hopper, "supports", lambda q, causal: q.shape[3] == 128)
    monkeypatch.setattr(backward_hopper, "supports_dkdv", lambda q, causal: causal)
    monkeypatch.setattr(backward_hopper, "supports_dq", lambda q, causal: False)
    sweep = dataclasses.replace(
        schema.SWEEPS["cpu"], head_dims=(64, 128), seqlens=(2048,), total_tokens=2048, hidden=256
    )
    picks = kernel_configs.hopper_configs(sweep)
    assert sorted((p["kernel"], p["head_dim"], p["causal"]) for p in picks) == [
        ("dkdv", 64, True),
        ("dkdv", 128, True),
        ("fwd", 128, False),
        ("fwd", 128, True),
    ]
    lines = [line.replace("\u00a0", " ") for line in report.autotuned_table({"flashdoc_autotuned": picks}).splitlines()]
    block_m, block_n, stages, consumers = forward_hopper.HOPPER_CONFIGS[128, False][:4]
    assert lines[2] == (
        f"| fp16 d=64 causal N=2k | — | "
        f"{'%d×%d s%d c%d' % backward_hopper.HOPPER_DKDV_CONFIGS[64, True][:4]} (Gluon) | — |"
    )
    assert lines[3] == f"| fp16 d=128 full N=2k | {block_m}×{block_n} s{stages} c{consumers} (Gluon) | — | — |"
    assert "(Gluon): the Hopper kernel" in lines[-1]


def test_hopper_config_cells_name_their_variants():
    """A Gluon cell says which variant of its kernel ran: the forward's output staged in the query tiles, the wide
    dK/dV kernel."""
    picks = [
        dict(
            kernel="fwd",
            gluon=True,
            dtype="bf16",
            seq_bucket=4096,
            head_dim=256,
            causal=False,
            block_m=64,
            block_n=64,
            num_stages=2,
            consumers=2,
            o_in_q=True,
        ),
        dict(
            kernel="dkdv",
            gluon=True,
            dtype="bf16",
            seq_bucket=4096,
            head_dim=256,
            causal=False,
            block_m=64,
            block_n=64,
            num_stages=2,
            consumers=2,
            wide=True,
        ),
        dict(
            kernel="dkdv",
            gluon=True,
            dtype="bf16",
            seq_bucket=4096,
            head_dim=128,
            causal=False,
            block_m=64,
            block_n=64,
            num_stages=2,
            consumers=2,
            wide=False,
        ),
    ]
    lines = [line.replace("\u00a0", " ") for line in report.autotuned_table({"flashdoc_autotuned": picks}).splitlines()]
    assert lines[2] == "| bf16 d=128 full N=4k | — | 64×64 s2 c2 (Gluon) | — |"
    assert lines[3] == "| bf16 d=256 full N=4k | 64×64 s2 c2 O in Q (Gluon) | 64×64 s2 c2 wide (Gluon) | — |"


def test_fused_backward_is_listed_in_the_dkdv_column(monkeypatch):
    """Where the fused backward runs (flashdoc is timed with deterministic=False), the table lists its config in
    the dK/dV column, marked + dQ, and says dQ ran inside it."""
    import dataclasses

    from flashdoc.kernels import backward_hopper, forward_hopper

    monkeypatch.setattr(forward_hopper, "supports", lambda q, causal: False)
    monkeypatch.setattr(backward_hopper, "supports_fused_dq", lambda q, k, causal: (q.shape[3], causal) == (64, False))
    monkeypatch.setattr(backward_hopper, "supports_dkdv", lambda q, causal: True)
    monkeypatch.setattr(backward_hopper, "supports_dq", lambda q, causal: True)
    sweep = dataclasses.replace(schema.SWEEPS["cpu"], head_dims=(64,), seqlens=(2048,), total_tokens=2048, hidden=256)
    picks = kernel_configs.hopper_configs(sweep)
    assert sorted((p["kernel"], p["causal"], p.get("fused_dq")) for p in picks) == [
        ("dkdv", False, True),
        ("dkdv", True, False),
        ("dq", True, None),
    ]
    lines = [line.replace("\u00a0", " ") for line in report.autotuned_table({"flashdoc_autotuned": picks}).splitlines()]
    fused = "%d×%d s%d c%d" % backward_hopper.FUSED_DQ_CONFIGS[64, False][:4]
    assert lines[2] == f"| fp16 d=64 full N=2k | — | {fused} + dQ (Gluon) | in dK/dV |"
    assert "+ dQ: the fused backward" in lines[-1]


def tiny_run(out) -> list:
    """The arguments of a benchmark run small enough for a test: naive and flashdoc, one forward shape, into out."""
    run = ["--device", DEVICE, "--out", str(out), "--no-progress", "--peers", "naive,flashdoc", "--no-first-call"]
    return run + "--modes fwd --causal no --seqlens 32 --dtypes fp16 --head-dims 32 --memory-seqlens 256".split()


def test_ratio_table_is_printed(tmp_path, capsys):
    main([*tiny_run(tmp_path), "--no-pin-cpu"])
    printed = capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text())["pinned_cpu"] is None  # --no-pin-cpu
    if DEVICE == "cpu":
        assert "NOT meaningful" in printed
    assert "| configuration | vs naive |" in printed
    assert "| fwd fp16 d=32 full |" in printed
    assert (tmp_path / "results.json").exists()


def test_failing_peers_do_not_stop_the_run(tmp_path, monkeypatch):
    def missing(device):
        raise ImportError("No module named 'not_a_kernel'")

    def runs_out_of_memory(device):
        def attn(q, k, v, causal):
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

        return attn

    kept = [p for p in peers.PEERS if p.name in ("naive", "flashdoc")]
    kept += [peers.Peer("missing", "bhnd", missing), peers.Peer("oom", "bhnd", runs_out_of_memory)]
    monkeypatch.setattr(peers, "PEERS", kept)
    results = run_benchmark(
        out_dir=tmp_path,
        device=DEVICE,
        progress=False,
        verbose=False,
        **dict(TINY, seqlens=(32, 64), modes=("fwd",), causals=(True,)),
    )
    assert results["peers"]["missing"] == {
        "available": False,
        "reason": "not installed (No module named 'not_a_kernel')",
    }
    oom = [r for r in results["records"] if r.get("peer") == "oom"]
    assert [r["status"] for r in oom] == ["skipped", "skipped"]
    assert oom[0]["reason"] == "out of memory" and oom[1]["reason"] == "out of memory at N=32"
    assert all(r["status"] == "ok" for r in results["records"] if r["kind"] == "speed" and r["peer"] == "flashdoc")
    assert "| vs naive | vs oom |" in (tmp_path / "ratios.md").read_text()  # a peer with no numbers shows —


def test_dtype_twins_and_causal_ratios_from_records():
    """The numbers the post's prose quotes (tools/site_macros/benchmark.py): bf16/fp16 rows of flashdoc that
    disagree beyond the threshold, and causal over full forward TFLOP/s."""

    def rec(dtype, causal, tflops, mode="fwd", n=512):
        return dict(
            kind="speed",
            status="ok",
            peer="flashdoc",
            mode=mode,
            dtype=dtype,
            head_dim=64,
            causal=causal,
            seqlen=n,
            tflops=tflops,
            ms_p20=1.0,
            ms_p80=1.5,
        )

    results = {
        "records": [
            rec("bf16", False, 300),
            rec("fp16", False, 240),
            rec("bf16", True, 270),
            rec("fp16", True, 250),
            rec("bf16", False, 100, n=4096),
            rec("bf16", True, 90, n=4096),
        ]
    }
    twins = report.dtype_twins(results, 0.15)
    assert [key for key, _ in twins] == [("fwd", 64, False, 512)]  # 300 vs 240 is 25% apart; 270 vs 250 is 8%
    table = report.twins_table(results, 0.15)
    assert "| fwd d=64 full | 512 | 300 (1.00–1.50 ms) | 240 (1.00–1.50 ms) |" in table
    assert "No row" in report.twins_table(results, 0.5)
    assert report.causal_full_ratios(results) == {
        ("bf16", 64, 512): 0.9,
        ("fp16", 64, 512): 250 / 240,
        ("bf16", 64, 4096): 0.9,
    }
    assert report.causal_full_ratios(results, min_n=1024) == {("bf16", 64, 4096): 0.9}


def test_the_command_line_runs_in_a_fresh_process(tmp_path):
    """As `python -m benchmarks.run` (nox -s bench) starts it: nothing imported beforehand, so the benchmark's own
    import order must leave flashdoc's kernels runnable (on a CPU: Triton's interpreter on before triton loads)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # (this process's flashdoc set it)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.run",
            *tiny_run(tmp_path),
            "--precompile-workers",
            "0",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads((tmp_path / "results.json").read_text())["records"]
    assert [r["status"] for r in records if r["kind"] == "speed" and r["peer"] == "flashdoc"] == ["ok"]


def test_ratio_header_names_a_peer_timed_at_fewer_lengths():
    """Naive attention stops where its N x N matrix would not fit, so its geometric mean covers fewer lengths; the
    header says which."""

    def rec(peer, n, tflops):
        return dict(
            kind="speed", status="ok", peer=peer, mode="fwd", dtype="bf16", head_dim=64, causal=False, seqlen=n,
            tflops=tflops,
        )  # fmt: skip

    results = {
        "peers": {name: {"available": True} for name in ("naive", "flex", "flashdoc")},
        "sweep": dict(seqlens=[2048, 4096], modes=["fwd"], dtypes=["bf16"], head_dims=[64], causals=[False]),
        "records": [
            rec("flashdoc", 2048, 400),
            rec("flashdoc", 4096, 400),
            rec("flex", 2048, 200),
            rec("flex", 4096, 100),
            rec("naive", 2048, 40),
        ],
    }
    table = report.ratio_table(results)
    assert "geometric mean over N = 2k, 4k (naive at N = 2k only), and the minimum" in table
    assert "| fwd bf16 d=64 full | 10.00× (min 10.00×) | 2.83× (min 2.00×) |" in table
