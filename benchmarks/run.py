"""Benchmark flashdoc against the attention kernels PyTorch already ships, in one run on one GPU.

Usage, from the repository's root::

    python -m benchmarks.run --out bench-out            # full sweep (about 8 min on an H200)
    python -m benchmarks.run --quick --out bench-out    # smoke subset on the GPU (about 2 min)
    python -m benchmarks.run --device cpu --out /tmp/b  # tiny shapes on the CPU: the numbers mean nothing

or, from Python (this is what the site's benchmark snippet does)::

    from benchmarks.run import run_benchmark
    results = run_benchmark(out_dir=".")

What is measured, each peer only if it is available (otherwise it is reported as skipped, with the reason):

- **speed**: TFLOP/s of naive PyTorch attention (matmul-softmax-matmul), ``scaled_dot_product_attention`` with
  one backend forced at a time (FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION), FlexAttention compiled
  with ``torch.compile``, flash-attn, and flashdoc; forward and forward+backward, bf16 and fp16, head dims
  64/128/256, causal and not, N = 512 ... 16k with 16k tokens in total (batch = 16384/N, heads = 2048/d, the
  convention of flash-attn's plots). FLOPs are in ``benchmarks.schema.flops``; the timing protocol (do_bench,
  passes, rotated order, one pinned CPU, compiling ahead) in ``benchmarks/README.md``.
- **memory**: peak extra GPU memory of a causal forward (batch 1, 32 heads, d 128) vs N up to 64k, where
  "extra" is the peak during the call minus what was allocated before it (the inputs).
- **first call**: the time flashdoc's first call takes on a new shape in a fresh process with an empty
  Triton cache (compile + autotune); every speed record also carries the time of its own first call.

Outputs in ``out_dir``: ``results.json`` (``benchmarks.schema`` describes it), ``tflops_bf16.png`` /
``tflops_fp16.png`` (TFLOP/s vs N, one subplot per mode, head dim and causality), ``memory.png``,
``ratios.md`` (flashdoc's speed ratio to each peer per configuration, also printed at the end), ``tflops.md``
(every TFLOP/s number), ``targets.md`` (the speed and memory targets, met or not) and ``autotuned.md`` (the
tiles flashdoc's kernels ran with for each shape, also in results.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python benchmarks/run.py): make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import flashdoc  # noqa: E402  (first: on a machine without a GPU it switches Triton to its interpreter)
from benchmarks import kernel_configs, report, timing  # noqa: E402
from benchmarks import peers as peer_registry  # noqa: E402  (run_benchmark's `peers` is a list of names)
from benchmarks.precompile import precompile  # noqa: E402
from benchmarks.schema import CPU_NOTE, MEMORY_PEERS, QUANTILES, SCHEMA, SWEEPS, flops, sweep_configs  # noqa: E402


def environment(device):
    """GPU, versions and the flashdoc commit that every record is stamped with."""
    import triton

    # FLASHDOC_COMMIT names the commit when the checkout's .git is not the source of truth (a copied working
    # tree on a GPU box whose .git lags behind)
    commit = os.environ.get("FLASHDOC_COMMIT")
    try:
        commit = (
            commit
            or subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                cwd=Path(__file__).resolve().parent,
            ).stdout.strip()
            or None
        )
    except Exception:
        commit = None
    if device == "cuda":
        gpu = torch.cuda.get_device_name()
    else:
        gpu = f"CPU ({platform.processor() or platform.machine()}), no GPU"
    return dict(
        gpu=gpu,
        torch=torch.__version__,
        triton=triton.__version__,
        flashdoc=flashdoc.__version__,
        flashdoc_commit=commit,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        flashdoc_autotune=os.environ.get("FLASHDOC_AUTOTUNE", "default"),
    )


def _progress(total, enabled):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the progress bar is a nicety, not a requirement
        tqdm = None
    if tqdm is None or not enabled:
        return _NoProgress()
    return tqdm(total=total, desc="benchmark", unit="meas", file=sys.stderr, dynamic_ncols=True)


class _NoProgress:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_benchmark(out_dir=".", quick=False, device=None, peers=None, progress=True, verbose=True, **overrides):
    """Run the sweep, write results.json, plots and tables into ``out_dir``, print the ratio table.

    device: "cuda", "cpu" or None (CUDA if available). On the CPU the tiny "cpu" sweep runs whatever
    ``quick`` says. peers: names from ``benchmarks.peers.PEERS`` to include (default all). overrides: fields of
    ``benchmarks.schema.Sweep`` (e.g. ``head_dims=(128,)``, ``rep_ms=100``). Returns the results dict that
    results.json holds.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sweep = SWEEPS["cpu" if device == "cpu" else ("quick" if quick else "full")]
    sweep = dataclasses.replace(sweep, device=device, **overrides)
    if not isinstance(sweep.passes, int) or sweep.passes < 1:
        raise ValueError(
            f"passes must be a whole number of at least 1 (the times each configuration is timed), got {sweep.passes!r}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = print if verbose else (lambda *a, **k: None)
    t_start = time.perf_counter()

    env = environment(device)
    available, skipped = peer_registry.load_peers(device, peers)
    say(f"flashdoc benchmark ({sweep.name} sweep) on {env['gpu']}: torch {env['torch']}, triton {env['triton']}")
    if device == "cpu":
        say(CPU_NOTE)
    for name, reason in skipped.items():
        say(f"  skipped peer {name}: {reason}")

    records = []
    common = dict(gpu=env["gpu"], torch=env["torch"], triton=env["triton"], flashdoc=env["flashdoc"])

    def record(**fields):  # stamped now, unless the fields carry the time they were measured
        records.append(dict({"timestamp": _now()}, **fields, **common))

    # -- compile ahead (no timing happens meanwhile) ------------------------------------------------------
    precompiled = None
    if device == "cuda" and sweep.precompile_workers > 0:
        say(f"Compiling kernels ahead in {sweep.precompile_workers} processes ...")
        precompiled = precompile(sweep, available, sweep.precompile_workers, sweep.precompile_timeout_s)
        say(
            f"Compiled {precompiled.get('done', 0)}/{precompiled['tasks']} kernels ahead in "
            f"{precompiled['workers']} processes: {precompiled['wall_s']:.0f} s"
        )
        for line in precompiled.get("failed", []):
            say(f"  compile ahead failed (the timed run compiles it itself): {line}")
        # From here on torch.compile mostly loads from its cache: no pool of compile processes is needed (on
        # the H200, shutting that pool down held the process for more than 10 s after the run).
        from torch._inductor import config as inductor_config

        inductor_config.compile_threads = 1

    all_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pinned_cpu = None
    if device == "cuda" and sweep.pin_cpu and all_cpus:
        pinned_cpu = min(all_cpus)
        timing.pin_threads({pinned_cpu})
        say(f"Timing with every thread of this process on CPU {pinned_cpu}")

    configs = list(sweep_configs(sweep))
    memory_peers = [p for p in peer_registry.PEERS if p.name in MEMORY_PEERS and p.name in available]
    n_memory = len(memory_peers) * len(sweep.memory_seqlens) if device == "cuda" else 0
    bar = _progress(sweep.passes * len(configs) * len(available) + n_memory, progress)

    interrupted = None
    speed = {}  # (peer, mode, dtype, head_dim, causal, seqlen) -> its record's fields, in first-timed order
    try:
        # -- speed ------------------------------------------------------------------------------------------
        # Every (peer, configuration) is timed in each pass; its record keeps the pass with the lowest median.
        failed = {}  # (peer, mode, dtype, head_dim, causal) -> reason: larger N are skipped after a failure
        for pass_index in range(sweep.passes):
            for row, (mode, dtype, head_dim, causal, seqlen) in timing.pass_order(configs, pass_index):
                batch, heads = sweep.batch_heads(seqlen, head_dim)
                fl = flops(mode, batch, heads, seqlen, head_dim, causal)
                for peer in timing.row_order(peer_registry.PEERS, row, pass_index):
                    if peer.name not in available:
                        continue
                    bar.set_postfix_str(f"{peer.name} {mode} {dtype} d={head_dim} causal={causal} N={seqlen}")
                    key = (peer.name, mode, dtype, head_dim, causal)
                    base = dict(
                        kind="speed",
                        peer=peer.name,
                        mode=mode,
                        dtype=dtype,
                        head_dim=head_dim,
                        causal=causal,
                        seqlen=seqlen,
                        batch=batch,
                        heads=heads,
                        flops=fl,
                    )
                    slot = key + (seqlen,)
                    t0 = time.perf_counter()
                    if peer.name == "naive" and seqlen > sweep.naive_max_seqlen:
                        speed[slot] = dict(
                            base, status="skipped", reason=f"naive is timed up to N={sweep.naive_max_seqlen} only"
                        )
                    elif key in failed:
                        speed.setdefault(slot, dict(base, status="skipped", reason=failed[key]))
                    else:
                        try:
                            m = timing.measure_speed(
                                available[peer.name],
                                peer.layout,
                                mode,
                                dtype,
                                batch,
                                heads,
                                seqlen,
                                head_dim,
                                causal,
                                sweep,
                            )
                            speed[slot] = timing.keep_best(
                                speed.get(slot),
                                dict(
                                    base,
                                    status="ok",
                                    tflops=fl / (m["ms"] * 1e-3) / 1e12,
                                    **m,
                                    wall_s=time.perf_counter() - t0,
                                    timestamp=_now(),
                                ),
                            )
                        except Exception as e:
                            reason = peer_registry.failure_reason(e)
                            if isinstance(e, torch.OutOfMemoryError):
                                failed[key] = f"out of memory at N={seqlen}"
                            else:
                                failed[key] = f"failed at N={seqlen}: {reason}"
                            if speed.get(slot, {}).get("status") != "ok":  # a failure in a later pass keeps the
                                speed[slot] = dict(
                                    base,
                                    status="skipped",
                                    reason=reason,  # earlier timing
                                    wall_s=time.perf_counter() - t0,
                                )
                            if device == "cuda":
                                torch.cuda.empty_cache()
                    bar.update()
        for fields in speed.values():
            record(**fields)
        speed = {}

        # -- memory -----------------------------------------------------------------------------------------
        if device != "cuda":
            record(kind="memory", status="skipped", reason="needs a CUDA device (torch.cuda memory statistics)")
        else:
            for peer in memory_peers:
                oom_at = None
                for seqlen in sweep.memory_seqlens:
                    bar.set_postfix_str(f"memory {peer.name} N={seqlen}")
                    base = dict(
                        kind="memory",
                        peer=peer.name,
                        mode="fwd",
                        dtype=sweep.memory_dtype,
                        head_dim=sweep.memory_head_dim,
                        causal=True,
                        seqlen=seqlen,
                        batch=1,
                        heads=sweep.memory_heads,
                    )
                    if oom_at is not None:
                        record(**base, status="skipped", reason=f"out of memory at N={oom_at}")
                    else:
                        try:
                            peak = timing.measure_peak_memory(
                                available[peer.name],
                                peer.layout,
                                1,
                                sweep.memory_heads,
                                seqlen,
                                sweep.memory_head_dim,
                                sweep.memory_dtype,
                                True,
                                device,
                            )
                            record(**base, status="ok", peak_extra_bytes=peak)
                        except Exception as e:
                            if isinstance(e, torch.OutOfMemoryError):
                                oom_at = seqlen
                            record(**base, status="skipped", reason=peer_registry.failure_reason(e))
                            torch.cuda.empty_cache()
                    bar.update()
        bar.close()

        # -- first call on a new shape (compile + autotune) --------------------------------------------------
        shape = dict(batch=4, seqlen=4096, heads=16, head_dim=128, causal=True)
        first = dict(kind="first_call", peer="flashdoc", dtype="bf16", cold_process=True, **shape)
        if "flashdoc" not in available:
            record(**first, status="skipped", reason=skipped.get("flashdoc", "not selected"))
        elif not sweep.first_call:
            record(
                **first,
                status="skipped",
                reason="not measured in this sweep (first_call=False; on the CPU nothing is compiled)",
            )
        else:
            say("Measuring flashdoc's first call in a fresh process with an empty Triton cache ...")
            if pinned_cpu is not None:  # compiles as a user's process would, on every CPU
                timing.pin_threads(all_cpus)
            try:
                fc = timing.measure_first_call(
                    shape["batch"], shape["seqlen"], shape["heads"], shape["head_dim"], shape["causal"]
                )
                record(
                    **first, status="ok", fwd_s=fc["fwd_s"], bwd_s=fc["bwd_s"], first_call_s=fc["fwd_s"] + fc["bwd_s"]
                )
            except Exception as e:
                record(**first, status="skipped", reason=peer_registry.failure_reason(e))
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from `timeout` (see main): keep what was measured
        interrupted = "interrupted: the records cover only part of the sweep"
        bar.close()
        for fields in speed.values():  # the timings of the passes so far
            record(**fields)
        say(f"\n{interrupted}; writing them")
    finally:  # the caller's process gets its CPUs back, whatever happened
        if pinned_cpu is not None:
            timing.pin_threads(all_cpus)

    results = dict(
        schema=SCHEMA,
        date=_now(),
        device=device,
        **env,
        note=CPU_NOTE if device == "cpu" else None,
        sweep={k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(sweep).items()},
        quantiles=QUANTILES,
        peers={
            p.name: (
                {"available": True}
                if p.name in available
                else {"available": False, "reason": skipped.get(p.name, "not selected")}
            )
            for p in peer_registry.PEERS
        },
        wall_s=time.perf_counter() - t_start,
        interrupted=interrupted,
        precompiled=precompiled,
        pinned_cpu=pinned_cpu,
        flashdoc_autotuned=kernel_configs.autotuned_configs() + kernel_configs.hopper_configs(sweep),
        records=records,
    )
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    written = ["results.json"] + report.write_plots(results, out_dir) + report.write_tables(results, out_dir)
    say("")
    say(report.summary_text(results))
    say(f"Wrote {', '.join(written)} to {out_dir} in {results['wall_s']:.0f} s.")
    return results


# ---------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------


def _ints(text):
    return tuple(int(x) for x in text.split(","))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="bench-out", help="output folder (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a small smoke subset (bf16, d=128, N=1k/4k/16k)")
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="cpu = tiny shapes whose numbers mean nothing (default: cuda if available)",
    )
    parser.add_argument("--peers", help=f"comma-separated subset of: {', '.join(p.name for p in peer_registry.PEERS)}")
    parser.add_argument("--modes", help="comma-separated subset of: fwd, fwd_bwd")
    parser.add_argument("--dtypes", help="comma-separated subset of: bf16, fp16")
    parser.add_argument("--head-dims", type=_ints, help="e.g. 64,128,256")
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--seqlens", type=_ints, help="e.g. 1024,4096,16384")
    parser.add_argument("--memory-seqlens", type=_ints, help="e.g. 4096,65536; 0 to skip the memory curve")
    parser.add_argument("--warmup-ms", type=float, help="do_bench warm-up budget per measurement")
    parser.add_argument("--rep-ms", type=float, help="do_bench measuring budget per measurement")
    parser.add_argument("--naive-max-seqlen", type=int, help="time naive attention up to this N")
    parser.add_argument(
        "--passes",
        type=int,
        help="time every configuration this many times and keep the lowest median (default 2 on a GPU)",
    )
    parser.add_argument("--no-first-call", action="store_true", help="skip the cold first-call measurement")
    parser.add_argument(
        "--precompile-workers",
        type=int,
        help="processes compiling kernels ahead of the timing (0: none; default: CPUs - 2, at most 12)",
    )
    parser.add_argument(
        "--no-pin-cpu",
        action="store_true",
        help="time without pinning the process to one CPU (the short rows then vary more)",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    overrides = {}
    if args.modes:
        overrides["modes"] = tuple(args.modes.split(","))
    if args.dtypes:
        overrides["dtypes"] = tuple(args.dtypes.split(","))
    if args.head_dims:
        overrides["head_dims"] = args.head_dims
    if args.causal != "both":
        overrides["causals"] = (args.causal == "yes",)
    if args.seqlens:
        overrides["seqlens"] = args.seqlens
    if args.memory_seqlens:
        overrides["memory_seqlens"] = tuple(n for n in args.memory_seqlens if n > 0)
    if args.warmup_ms is not None:
        overrides["warmup_ms"] = args.warmup_ms
    if args.rep_ms is not None:
        overrides["rep_ms"] = args.rep_ms
    if args.naive_max_seqlen is not None:
        overrides["naive_max_seqlen"] = args.naive_max_seqlen
    if args.passes is not None:
        if args.passes < 1:
            parser.error(f"--passes must be at least 1, got {args.passes}")
        overrides["passes"] = args.passes
    if args.no_first_call:
        overrides["first_call"] = False
    if args.no_pin_cpu:
        overrides["pin_cpu"] = False
    if args.precompile_workers is not None:
        overrides["precompile_workers"] = args.precompile_workers
    # `timeout` and job schedulers stop a run with SIGTERM: turn it into KeyboardInterrupt, so that what was
    # measured until then is still written out.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run_benchmark(
            out_dir=args.out,
            quick=args.quick,
            device=None if args.device == "auto" else args.device,
            peers=args.peers.split(",") if args.peers else None,
            progress=not args.no_progress,
            **overrides,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
