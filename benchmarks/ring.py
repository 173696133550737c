"""Ring attention across GPUs: tokens/s and scaling efficiency against PyTorch's context parallel.

Run on one machine with W GPUs (W = 2 by default, or every visible GPU with --nproc 0):

    torchrun --nproc-per-node 2 benchmarks/ring.py --out results/ring
    python3 benchmarks/ring.py --out results/ring          # the same, spawning the processes itself

For every sequence length N, mask (causal, full, or a causal sliding window: ``window4096`` is window_size
(4096, 0)) and mode (forward, forward + backward) it times, on the same GPUs in one run:

- flashdoc on one GPU, on the full sequence (each rank runs it alone, at the same time, with no traffic);
- ``flashdoc.parallel.ring_flash_attn_func`` over the W GPUs, contiguous and zigzag layouts;
- PyTorch's SDPA on one GPU with the cuDNN and flash backends, and the same backends under PyTorch's
  ``context_parallel`` over the W GPUs (head-tail load balancing when causal, as PyTorch does by default);
  neither takes a sliding window, so window masks time flashdoc's rows only.

Throughput is tokens per second of the whole sequence (batch x N / time). Scaling efficiency is the W-GPU
throughput over W times the same kernel's one-GPU throughput (1.0: perfect scaling). Before timing, the ring's
output is gathered and compared with flashdoc's one-GPU output on the same tensors (``max_abs_diff``).
Writes ``results.json`` (one row per measurement, with the machine and versions), ``results.md`` and
``efficiency.png``.

NVLink SHARP (multicast) is kept off, ``NCCL_NVLS_ENABLE=0``, unless the environment sets it.
"""

import argparse
import json
import math
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # read by NCCL when the process group starts

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import flashdoc  # noqa: E402
from flashdoc.parallel import ring_flash_attn_func, zigzag_shard, zigzag_unshard  # noqa: E402

MIN_TIMED_SECONDS = 1.0  # per measurement: enough repetitions that launch jitter is noise
MAX_REPS = 50
# Without GPUs the script runs its flashdoc rows over gloo on the CPU (Triton's interpreter), as a smoke test of
# the script itself: those timings mean nothing.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json and results.md")
    p.add_argument("--seqlens", default="32768,131072,262144", help="full sequence lengths, comma-separated")
    p.add_argument("--heads", type=int, default=16, help="query heads (hidden = heads x head_dim)")
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads, no GQA)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument(
        "--masks",
        default="causal,full",
        help="causal, full and/or window<left> (a causal window of that many keys back), comma-separated",
    )
    p.add_argument("--modes", default="fwd,fwd_bwd", help="fwd and/or fwd_bwd, comma-separated")
    p.add_argument(
        "--methods",
        default="flashdoc,ring-contiguous,ring-zigzag,sdpa-cudnn,sdpa-flash,cp-cudnn,cp-flash",
        help="which rows to time, comma-separated",
    )
    p.add_argument(
        "--cp-rotate",
        default="alltoall",
        choices=["alltoall", "allgather"],
        help="PyTorch context parallel's K/V exchange: alltoall is its ring, allgather its default",
    )
    p.add_argument("--nproc", type=int, default=2, help="GPUs when not under torchrun (0: every visible GPU)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------


def timed(fn):
    """Seconds per call, the slowest rank's: every rank starts together, runs the same number of calls."""
    fn()  # warm-up: compiles, autotunes, allocates
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    once = torch.tensor([time.perf_counter() - t0], device=DEVICE)
    dist.all_reduce(once, op=dist.ReduceOp.MAX)
    reps = max(3, min(MAX_REPS, math.ceil(MIN_TIMED_SECONDS / once.item())))
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    elapsed = torch.tensor([(time.perf_counter() - t0) / reps], device=DEVICE)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def step(attend, inputs, dout, mode):
    """One call: forward only, or forward and backward (gradients of q, k, v, as in training)."""
    if mode == "fwd":

        def run():
            with torch.no_grad():
                attend(*inputs)
    else:

        def run():
            out = attend(*inputs)
            torch.autograd.grad(out, inputs, dout)

    return run


# ---------------------------------------------------------------------------------------------------------------
# The methods
# ---------------------------------------------------------------------------------------------------------------


def full_tensors(args, n, seed):
    kv_heads = args.kv_heads or args.heads
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    shape_q = (args.batch, n, args.heads, args.head_dim)
    shape_kv = (args.batch, n, kv_heads, args.head_dim)
    return [
        torch.randn(s, device=DEVICE, dtype=torch.bfloat16, generator=gen)
        for s in (shape_q, shape_kv, shape_kv, shape_q)
    ]


def shard(x, layout, world, rank):
    return zigzag_shard(x, world, rank) if layout == "zigzag" else x.chunk(world, dim=1)[rank].clone()


def mask_options(mask):
    """flashdoc's keyword arguments for a --masks entry: causal, full, or window<left>."""
    if mask in ("causal", "full"):
        return dict(causal=mask == "causal", window_size=(-1, -1))
    if mask.startswith("window") and mask.removeprefix("window").isdigit():
        return dict(causal=True, window_size=(int(mask.removeprefix("window")), 0))
    raise ValueError(f"--masks entries are causal, full or window<left> (e.g. window4096), got {mask!r}")


def check_ring(q, k, v, options, layout, world, rank):
    """max |ring output - one-GPU output| over the whole sequence (the ring's shards gathered)."""
    with torch.no_grad():
        local = ring_flash_attn_func(*(shard(t, layout, world, rank) for t in (q, k, v)), layout=layout, **options)
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        ring = zigzag_unshard(gathered) if layout == "zigzag" else torch.cat(gathered, dim=1)
        single = flashdoc.flash_attn_func(q, k, v, **options)
        return (ring.float() - single.float()).abs().max().item()


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend

    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]


def measure(method, args, n, options, mode, world, rank, mesh):
    """Seconds per call of one method (``options``: its mask's, from ``mask_options``), and extra fields for its
    row."""
    causal = options["causal"]
    q, k, v, dout = full_tensors(args, n, seed=n)
    extra = {}
    if method == "flashdoc":
        inputs = [t.requires_grad_(mode == "fwd_bwd") for t in (q, k, v)]

        def attend(a, b, c):
            return flashdoc.flash_attn_func(a, b, c, **options)

        return timed(step(attend, inputs, dout, mode)), extra
    if method.startswith("ring-"):
        layout = method.removeprefix("ring-")
        if mode == "fwd":
            extra["max_abs_diff"] = check_ring(q, k, v, options, layout, world, rank)
        inputs = [shard(t, layout, world, rank).requires_grad_(mode == "fwd_bwd") for t in (q, k, v)]
        dout = shard(dout, layout, world, rank)
        del q, k, v

        def attend(a, b, c):
            return ring_flash_attn_func(a, b, c, layout=layout, **options)

        return timed(step(attend, inputs, dout, mode)), extra
    from torch.nn.attention import sdpa_kernel

    backend = sdpa_backend(method.split("-")[1])
    # SDPA's layout: (batch, heads, seqlen, head_dim), contiguous
    q, k, v, dout = (t.transpose(1, 2).contiguous() for t in (q, k, v, dout))
    gqa = bool(args.kv_heads) and args.kv_heads != args.heads

    def attend(a, b, c):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=gqa)

    if method.startswith("sdpa-"):
        inputs = [t.requires_grad_(mode == "fwd_bwd") for t in (q, k, v)]
        return timed(step(attend, inputs, dout, mode)), extra

    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method

    set_rotate_method(args.cp_rotate)
    _cp_options.enable_load_balance = causal  # PyTorch refuses load balancing without a causal mask
    buffers = [t.contiguous() for t in (q, k, v, dout)]
    del q, k, v, dout
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers=set(buffers)):
        inputs = [t.requires_grad_(mode == "fwd_bwd") for t in buffers[:3]]
        extra["cp_rotate"] = args.cp_rotate
        return timed(step(attend, inputs, buffers[3], mode)), extra


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------

BASELINE = {
    "ring-contiguous": "flashdoc",
    "ring-zigzag": "flashdoc",
    "cp-cudnn": "sdpa-cudnn",
    "cp-flash": "sdpa-flash",
}


def run(args):
    world, rank = dist.get_world_size(), dist.get_rank()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(DEVICE, (world,), mesh_dim_names=("cp",))
    methods = args.methods.split(",")
    rows = []
    masks = {mask: mask_options(mask) for mask in args.masks.split(",")}  # a bad entry fails before any timing
    for n in (int(s) for s in args.seqlens.split(",")):
        for mask, options in masks.items():
            for mode in args.modes.split(","):
                for method in methods:
                    if options["window_size"] != (-1, -1) and not method.startswith(("flashdoc", "ring-")):
                        continue  # SDPA and PyTorch's context parallel take no sliding window
                    gpus = world if (method.startswith("ring-") or method.startswith("cp-")) else 1
                    row = dict(
                        method=method,
                        seqlen=n,
                        mask=mask,
                        causal=options["causal"],
                        window=list(options["window_size"]),
                        mode=mode,
                        gpus=gpus,
                        batch=args.batch,
                        heads=args.heads,
                        kv_heads=args.kv_heads or args.heads,
                        head_dim=args.head_dim,
                        dtype="bf16",
                    )
                    try:
                        seconds, extra = measure(method, args, n, options, mode, world, rank, mesh)
                        row.update(extra, ms=seconds * 1e3, tokens_per_s=args.batch * n / seconds)
                    except Exception as err:  # one failing row (e.g. a backend PyTorch lacks) is reported
                        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
                    torch.cuda.empty_cache()
                    base = next(
                        (
                            r
                            for r in rows
                            if r["method"] == BASELINE.get(method)
                            and r["seqlen"] == n
                            and r["mask"] == mask
                            and r["mode"] == mode
                            and "tokens_per_s" in r
                        ),
                        None,
                    )
                    if base and "tokens_per_s" in row:
                        row["efficiency"] = row["tokens_per_s"] / (gpus * base["tokens_per_s"])
                    rows.append(row)
                    if rank == 0:
                        print(json.dumps(row), flush=True)
    return rows


def environment(world):
    from benchmarks.run import environment as _environment

    env = _environment(DEVICE)
    nccl = torch.cuda.nccl.version() if DEVICE == "cuda" else None
    env.update(
        world_size=world,
        nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
        nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
        time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return env


def markdown(rows, env):
    lines = [
        f"Ring attention on {env['world_size']} x {env['gpu']} (torch {env['torch']}, triton "
        f"{env['triton']}, NCCL {env['nccl']}, NCCL_NVLS_ENABLE={env['nccl_nvls_enable']}); bf16, "
        f"batch {rows[0]['batch']}, {rows[0]['heads']} heads ({rows[0]['kv_heads']} K/V), "
        f"head dim {rows[0]['head_dim']}.",
        "",
        "| N | mask | mode | method | GPUs | ms | tokens/s | scaling efficiency |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            cells = ["failed", r["error"].replace("|", "/"), ""]
        else:
            eff = f"{r['efficiency']:.2f}" if "efficiency" in r else ""
            cells = [f"{r['ms']:.1f}", f"{r['tokens_per_s']:,.0f}", eff]
        lines.append(
            f"| {r['seqlen']:,} | {r['mask']} | {r['mode']} | {r['method']} | {r['gpus']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def plot(rows, env, path):
    """Scaling efficiency of every multi-GPU method, one panel per mode and mask, bars by N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in BASELINE if any(r["method"] == m and "efficiency" in r for r in rows)]
    panels = sorted({(r["mode"], r["mask"]) for r in rows if "efficiency" in r})
    if not methods or not panels:
        return
    seqlens = sorted({r["seqlen"] for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True, squeeze=False)
    width = 0.8 / len(methods)
    for ax, (mode, mask) in zip(axes[0], panels):
        for i, method in enumerate(methods):
            eff = [
                next(
                    (
                        r["efficiency"]
                        for r in rows
                        if r["method"] == method
                        and r["seqlen"] == n
                        and r["mode"] == mode
                        and r["mask"] == mask
                        and "efficiency" in r
                    ),
                    0.0,
                )
                for n in seqlens
            ]
            ax.bar([j + i * width for j in range(len(seqlens))], eff, width, label=method)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(seqlens))], [f"{n // 1024}k" for n in seqlens])
        ax.set_title(f"{mode}, {mask}")
        ax.set_xlabel("sequence length")
    axes[0][0].set_ylabel(f"scaling efficiency on {env['world_size']} GPUs")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(methods), bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.savefig(path, dpi=150, bbox_inches="tight")


def main(local_rank=None, world=None, args=None):
    args = args or parse_args()
    if local_rank is not None:  # spawned by this script rather than torchrun
        os.environ.update(
            RANK=str(local_rank),
            LOCAL_RANK=str(local_rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=os.environ.get("MASTER_PORT", "29517"),
        )
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
    else:
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
    try:
        rows = run(args)
        if dist.get_rank() == 0:
            env = environment(dist.get_world_size())
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "results.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
            (out / "results.md").write_text(markdown(rows, env))
            try:
                plot(rows, env, out / "efficiency.png")
            except ImportError:  # matplotlib is optional: the JSON and the table are the results
                pass
            print(markdown(rows, env))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        main()
    else:
        cli = parse_args()
        nproc = cli.nproc or torch.cuda.device_count()
        if DEVICE == "cuda" and (torch.cuda.device_count() < nproc or nproc < 2):
            sys.exit(f"needs at least 2 CUDA GPUs (asked for {nproc}, found {torch.cuda.device_count()})")
        torch.multiprocessing.spawn(main, args=(nproc, cli), nprocs=nproc, join=True)
