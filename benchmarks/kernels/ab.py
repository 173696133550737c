"""A/B timing of kernel variants on the GPU, each at fixed tile configs (no autotuner), in one process.

    PYTHONPATH=. python benchmarks/kernels/ab.py [--variants base,new,pipe,ws] [--out ab.json]

Variants, each loaded as its own package from a copy of the kernel sources:
- base: benchmarks/kernels/_base/{forward,backward}.py, a snapshot of the kernels before the change under test
  (copy them there before editing; the folder is git-ignored: carry it to the GPU box with the working tree);
- <folder>/...: any other such snapshot folder, by its path from the repository's root (e.g.
  benchmarks/kernels/_same); a file it lacks comes from `new`;
- new:  flashdoc/kernels as they are now;
- pipe: `new` with the unmasked forward loop software-pipelined by hand: the next tile's Q K^T is issued before
  the current tile's softmax (FlashAttention-3's intra-warpgroup overlap), if Triton keeps that product in flight;
- poly: `new` with half of each unmasked forward tile's exponentials computed by a polynomial on the FMA units
  instead of the MUFU (FlashAttention-4's split: the MUFU's 16 exp2 per clock per SM bind at d = 64); poly4:
  a quarter of them;
- qk:   `new` with the dK/dV step computed queries-by-keys (S = Q K^T, K and V as B operands, P^T and dS^T into
  the accumulating products; rejected: same registers, same speed);
- ws:   `new` with `warp_specialize=True` on the forward's key loops;
- lazy: `new` with the forward's rescaling of the accumulator skipped while no row's maximum has grown by more
  than 8 (log2 units, a factor 256), a branch on the whole tile (FlashAttention-4's conditional rescaling);
- serial: `new` with the dQ kernel back on the caller's stream after the dK/dV kernel (the package runs it on a
  second stream, concurrently: `launch.forked_stream`);
- stream2: `new` with the dQ kernel launched first, on its second stream;
- even: `new` without the masked loops of the forward and dQ kernels when there is no causal mask, as an
  EVEN_N constexpr would compile them for lengths that the key tile divides (the A/B's lengths);
- diag1: `new` with the masked loops (the causal diagonal, the ragged ends) of all three attention kernels
  left unpipelined (`num_stages=1`): a loop of one or two tiles pays a full pipeline prologue otherwise;
(Rejected variants that were removed live in git: the fused backward with atomic dQ at commit cfdb8d3, the
dV/dK split of the dK/dV kernel (`split`) at commit 00bd95b; benchmarks/FINDINGS.md has their figures.)
bf16, 16k tokens in total, heads = 2048 / d, layout (B, N, H, d). Prints each variant's median TFLOP/s over
--rounds rounds (the variants in a rotated order each round) and its ratio to base.
"""

import argparse
import importlib
import json
import os
import pathlib
import statistics
import sys
import tempfile

import torch
import triton

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "flashdoc" / "kernels"
# AB_DEVICE=cpu (with TRITON_INTERPRET=1 and tiny --ns, --tokens) checks the variants' plumbing and results.
DEVICE = os.environ.get("AB_DEVICE", "cuda")

PIPELINED_INNER = """
@triton.jit
def _softmax_step(acc, l_i, m_i, qk, v, qk_scale, DOT_PRECISION: tl.constexpr):
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
    return acc, l_i, m_ij


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, offs_m, seqlen_k, causal_offset, qk_scale, lo, hi,
                    BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                    DOT_PRECISION: tl.constexpr):
    if MASKED:  # the few diagonal and ragged tiles: the package's loop as it is
        acc, l_i, m_i = _attn_fwd_inner_plain(acc, l_i, m_i, q, k_desc, v_desc, offs_m, seqlen_k, causal_offset,
                                              qk_scale, lo, hi, BLOCK_N, IS_CAUSAL, MASKED, DOT_PRECISION)
    elif lo < hi:
        qk = tl.dot(q, tl.trans(k_desc.load([lo, 0])), input_precision=DOT_PRECISION)
        for start_n in tl.range(lo, hi - BLOCK_N, BLOCK_N):
            # the next tile's product is issued before this tile's softmax
            qk_next = tl.dot(q, tl.trans(k_desc.load([start_n + BLOCK_N, 0])), input_precision=DOT_PRECISION)
            acc, l_i, m_i = _softmax_step(acc, l_i, m_i, qk, v_desc.load([start_n, 0]), qk_scale, DOT_PRECISION)
            qk = qk_next
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, qk, v_desc.load([hi - BLOCK_N, 0]), qk_scale, DOT_PRECISION)
    return acc, l_i, m_i


"""


LAZY_SOFTMAX = """
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        if MASKED:
            m_ij = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        # rescale only when some row's maximum grew by more than 8 (p stays below 2**8 otherwise)
        if tl.max(m_ij - m_i, 0) > 8.0:
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha
            acc = acc * alpha[:, None]
            m_i = m_ij
        p = tl.math.exp2(qk * qk_scale - m_i[:, None])
        l_i = l_i + tl.sum(p, 1)
        v = V.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
"""

EXP2_POLY = '''
@triton.jit
def _exp2_poly(x):
    """2^x for x <= 0 on the FMA and integer units (FlashAttention-4's trick): 2^x = 2^r * 2^f with r = x
    rounded by the float add of 1.5 * 2^23 (whose low bits then hold r) and f in [-0.5, 0.5]; 2^f from a
    degree-3 polynomial (relative error 1.1e-4, below bf16's 3.9e-3), r added into its exponent bits. No
    floor or float-to-int conversion: those run on the same slow pipe as the MUFU's exp2."""
    x = tl.maximum(x, -126.0)  # 2^-126: the smallest normal float; below it P is 0 for every purpose
    t = x + 12582912.0
    f = x - (t - 12582912.0)
    p = tl.fma(f, tl.fma(f, tl.fma(f, 0.05459282, 0.24221784), 0.6933686), 1.0)
    return (p.to(tl.int32, bitcast=True) + ((t.to(tl.int32, bitcast=True) - 0x4B400000) << 23)).to(tl.float32,
                                                                                                   bitcast=True)


'''
POLY_P = """        if MASKED:
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        else:  # half the exponentials on the MUFU, half on the FMA units
            x = qk * qk_scale - m_ij[:, None]
            xa, xb = tl.split(x.reshape(x.shape[0], BLOCK_N // 2, 2))
            p = tl.join(tl.math.exp2(xa), _exp2_poly(xb)).reshape(x.shape[0], BLOCK_N)
"""
POLY4_P = """        if MASKED:
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        else:  # a quarter of the exponentials on the FMA units
            x = qk * qk_scale - m_ij[:, None]
            xa, xb = tl.split(x.reshape(x.shape[0], BLOCK_N // 2, 2))
            xb1, xb2 = tl.split(xb.reshape(x.shape[0], BLOCK_N // 4, 2))
            pb = tl.join(tl.math.exp2(xb1), _exp2_poly(xb2)).reshape(x.shape[0], BLOCK_N // 2)
            p = tl.join(tl.math.exp2(xa), pb).reshape(x.shape[0], BLOCK_N)
"""


# The dK/dV step queries-by-keys: K and V become B operands, P^T and dS^T feed the accumulating products.
QK_DKDV = """        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASKED:
            if IS_CAUSAL:
                p = tl.where(offs_n[None, :] <= offs_m[:, None] + causal_offset, p, 0.0)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, input_precision=DOT_PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk, input_precision=DOT_PRECISION)
"""


def load_variant(name: str, forward_src: str, backward_src: str, launch_src: str = None):
    """Import a copy of the kernel sources as package `ab_<name>` (relative imports keep working); the launch
    module is the package's own unless launch_src is given (older snapshots do not import one)."""
    name = name.replace("/", "_")
    pkg = pathlib.Path(tempfile.mkdtemp()) / f"ab_{name}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text((KERNELS / "__init__.py").read_text())
    (pkg / "launch.py").write_text(launch_src or (KERNELS / "launch.py").read_text())
    (pkg / "forward.py").write_text(forward_src)
    (pkg / "backward.py").write_text(backward_src)
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module(f"ab_{name}.forward"), importlib.import_module(f"ab_{name}.backward")


def tile_config(fwd, *cfg):
    """A config from a variant's forward module (named _cfg before the launch module existed)."""
    return (getattr(fwd, "tile_config", None) or fwd._cfg)(*cfg)


def variants(names):
    fwd_new, bwd_new = (KERNELS / "forward.py").read_text(), (KERNELS / "backward.py").read_text()
    for name in names:
        fwd, bwd = fwd_new, bwd_new
        if name == "base" or "/" in name:  # a snapshot folder (git-ignored, carried)
            folder = ROOT / ("benchmarks/kernels/_base" if name == "base" else name)
            if (folder / "forward.py").exists():
                fwd = (folder / "forward.py").read_text()
            if (folder / "backward.py").exists():
                bwd = (folder / "backward.py").read_text()
        elif name == "pipe":
            # the package's loop stays as _attn_fwd_inner_plain; the pipelined one takes its name
            fwd = fwd.replace("def _attn_fwd_inner(", "def _attn_fwd_inner_plain(", 1)
            end = fwd.index("# --8<-- [end:fwd_inner]")
            fwd = fwd[:end] + PIPELINED_INNER.lstrip() + fwd[end:]
        elif name == "diag1":
            for loop in ("tl.range(lo, hi, BLOCK_N)", "tl.range(lo, hi, BLOCK_M)"):
                staged = loop[:-1] + ", num_stages=1 if MASKED else None)"
                fwd, bwd = fwd.replace(loop, staged), bwd.replace(loop, staged)
            assert fwd.count("num_stages=1 if MASKED") == 1 and bwd.count("num_stages=1 if MASKED") == 2
        elif name == "lazy":
            start = fwd.index("# --8<-- [start:online_softmax]\n") + len("# --8<-- [start:online_softmax]\n")
            end = fwd.index("        # --8<-- [end:online_softmax]")
            fwd = fwd[:start] + LAZY_SOFTMAX.lstrip("\n") + fwd[end:]
        elif name in ("serial", "stream2"):
            fork, join = "        dq_stream = forked_stream()\n", "        dq_stream.join()\n"
            assert fork in bwd and join in bwd and "        with dq_stream:\n            bwd_dq(" in bwd
            if name == "serial":
                bwd = bwd.replace(fork, "").replace(join, "")
                bwd = bwd.replace("with dq_stream:\n            bwd_dq(", "bwd_dq(")
            else:
                dkdv = next(line for line in bwd.splitlines(keepends=True) if line.startswith("        bwd_dkdv("))
                bwd = bwd.replace(dkdv, "").replace(join, dkdv + join)
        elif name == "even":
            # what an EVEN_N constexpr would give when seqlen is a multiple of the key tile: no masked loop
            # compiled at all without the causal mask (valid only for such lengths: the A/B shapes)
            call = "    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K, V, off_b, off_hk, offs_m, seqlen_k, causal_offset,\n                                    qk_scale, full_hi, masked_hi,"
            assert call in fwd
            fwd = fwd.replace(call, "    if IS_CAUSAL:\n    " + call.replace("\n ", "\n     "))
            call = "    dq = _attn_bwd_dq_inner(dq, q, do, lse2, delta, K, V, off_b, off_hk, offs_m, seqlen_k, causal_offset, qk_scale,\n                            full_hi, masked_hi,"
            assert call in bwd
            bwd = bwd.replace(call, "    if IS_CAUSAL:\n    " + call.replace("\n ", "\n     "))
        elif name == "qk":
            start = bwd.index("        qkT = tl.dot(k, tl.trans(q)")
            end = bwd.index("    return dk, dv\n", start)
            bwd = bwd[:start] + QK_DKDV + bwd[end:]
        elif name in ("poly", "poly4"):
            line = "        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])\n"
            assert fwd.count(line) == 1
            fwd = fwd.replace(line, POLY_P if name == "poly" else POLY4_P)
            fwd = fwd.replace("# --8<-- [start:fwd_inner]\n", EXP2_POLY.lstrip() + "# --8<-- [start:fwd_inner]\n")
        elif name == "ws":
            assert "tl.range(lo, hi, BLOCK_N)" in fwd
            fwd = fwd.replace("tl.range(lo, hi, BLOCK_N)", "tl.range(lo, hi, BLOCK_N, warp_specialize=True)")
        yield name, load_variant(name, fwd, bwd)


def report_registers(name, launch, dump=None):
    """Print registers per thread and spills of each kernel this variant compiles (once per kernel and config);
    with dump, a folder, also write each kernel's Triton GPU IR and PTX there."""
    init = launch._Launcher.__init__

    def init_and_report(self, kernel, compiled, config, args, meta):
        init(self, kernel, compiled, config, args, meta)
        tiles = {k: v for k, v in self.config.items() if k.startswith("BLOCK_") and k != "BLOCK_D"}
        print(
            f"  regs {name} {getattr(kernel, '__name__', kernel)} {tiles} stages={config.num_stages} "
            f"warps={config.num_warps}: "
            f"n_regs={getattr(compiled, 'n_regs', None)} n_spills={getattr(compiled, 'n_spills', None)}",
            flush=True,
        )
        if dump:
            stem = "_".join(
                [
                    name.replace("/", "_"),
                    getattr(kernel, "__name__", "kernel"),
                    *map(str, tiles.values()),
                    str(config.num_stages),
                    str(config.num_warps),
                    str(self.config.get("IS_CAUSAL", "")),
                ]
            )
            for ext in ("ttgir", "ptx"):
                if ext in compiled.asm:
                    pathlib.Path(dump, f"{stem}.{ext}").write_text(compiled.asm[ext])

    launch._Launcher.__init__ = init_and_report


# Fixed configs (BLOCK_M, BLOCK_N, stages, warps) per head dim: the sweep's winners.
FWD = {64: [(64, 128, 2, 4)], 128: [(64, 64, 3, 4), (128, 64, 3, 8)], 256: [(128, 64, 2, 8)]}
DKDV = {64: (32, 128, 3, 4), 128: (64, 64, 2, 4), 256: (64, 64, 2, 8)}
DQ = {64: (128, 64, 3, 8), 128: (128, 64, 3, 8), 256: (128, 32, 3, 8)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base,new,pipe,ws")
    ap.add_argument("--ds", default="64,128,256")
    ap.add_argument("--ns", default="2048,4096,16384")
    ap.add_argument("--fwd-variants", default=None, help="default: every one in --variants")
    ap.add_argument(
        "--fwd-configs",
        default=None,
        help="forward configs instead of FWD, e.g. '128=64,32,3,4;128=64,64,3,4;64=64,64,3,4'",
    )
    ap.add_argument("--bwd-variants", default="base,new", help="variants to time the backward of")
    ap.add_argument(
        "--bwd-configs",
        default=None,
        help="(dK/dV, dQ) config pairs instead of DKDV and DQ, timed against each other in one "
        "rotation, e.g. '64=32,128,3,4/128,64,3,8;64=64,64,3,4/64,64,2,4'",
    )
    ap.add_argument("--causal", default="False,True")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument(
        "--autotune",
        action="store_true",
        help="each variant through its own autotuner (as users call it) instead of fixed configs",
    )
    ap.add_argument("--rounds", type=int, default=3, help="times each variant is timed, in rotated order")
    ap.add_argument("--warm", action="store_true", help="only compile (run each variant once), no timing")
    ap.add_argument("--regs", action="store_true", help="print each compiled kernel's registers and spills")
    ap.add_argument("--dump", default=None, help="with --regs: a folder to write each kernel's TTGIR and PTX to")
    ap.add_argument("--out", default="ab.json")
    args = ap.parse_args()
    mods = dict(variants(args.variants.split(",")))
    if args.regs:
        for name, (fwd, _) in mods.items():
            report_registers(name, sys.modules[fwd.__package__ + ".launch"], args.dump)
    fwd_table = FWD
    if args.autotune:
        fwd_table = {d: [None] for d in FWD}
    elif args.fwd_configs:
        fwd_table = {}
        for item in args.fwd_configs.split(";"):
            d, cfg = item.split("=")
            fwd_table.setdefault(int(d), []).append(tuple(int(x) for x in cfg.split(",")))
    bwd_table = {d: [(DKDV[d], DQ[d])] for d in DKDV}
    if args.bwd_configs:
        bwd_table = {}
        for item in args.bwd_configs.split(";"):
            d, pair = item.split("=")
            bwd_table.setdefault(int(d), []).append(tuple(tuple(int(x) for x in c.split(",")) for c in pair.split("/")))
    ds = [int(x) for x in args.ds.split(",")]
    rows = []
    for d in ds:
        for causal in (c == "True" for c in args.causal.split(",")):
            for n in (int(x) for x in args.ns.split(",")):
                b, h = max(args.tokens // n, 1), 2048 // d if DEVICE == "cuda" else 2
                torch.manual_seed(0)
                dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter's bf16 is wrong
                q, k, v, do = (torch.randn(b, n, h, d, device=DEVICE, dtype=dtype) for _ in range(4))
                flops = 4 * b * h * n * n * d / (2 if causal else 1)
                # One set of output buffers for every variant: where a variant's outputs live in memory moved its
                # timing by up to +-5% (a copy of one variant under two names read 0.94-1.03x).
                out, lse = torch.empty_like(q), torch.empty(b, h, n, device=DEVICE, dtype=torch.float32)
                dq, dk, dv = (torch.empty_like(q) for _ in range(3))
                tests = []  # (label, variant, setup before timing, timed function, FLOPs, result)
                fwd_variants = args.fwd_variants.split(",") if args.fwd_variants is not None else list(mods)
                for cfg in fwd_table.get(d, []):
                    for name in filter(None, fwd_variants):
                        fwd = mods[name][0]

                        def run(fwd=fwd, cfg=cfg):
                            fwd.attn_fwd(
                                q, k, v, out, lse, d**-0.5, causal, False, config=cfg and tile_config(fwd, *cfg)
                            )

                        tests.append((f"fwd {cfg or 'autotuned'}", name, None, run, flops, lambda: out))
                pairs = bwd_table.get(d, []) if not args.autotune else [None]
                for name in filter(None, args.bwd_variants.split(",")):
                    fwd, bwd = mods[name]

                    def setup(fwd=fwd):  # this variant's forward output, into the shared buffers
                        fwd.attn_fwd(q, k, v, out, lse, d**-0.5, causal, False, config=tile_config(fwd, *FWD[d][0]))

                    for pair in pairs:
                        config = pair and (tile_config(fwd, *pair[0]), tile_config(fwd, *pair[1]))

                        def run_bwd(bwd=bwd, config=config):
                            bwd.attn_bwd(do, q, k, v, out, lse, None, dq, dk, dv, d**-0.5, causal, False, config=config)

                        def grads():
                            return torch.cat([dq.flatten(), dk.flatten(), dv.flatten()])

                        label = name if len(pairs) == 1 else f"{name} {pair[0]}/{pair[1]}".replace(" (", "(")
                        tests.append(("bwd", label, setup, run_bwd, 2.5 * flops, grads))
                # Each variant once per round, the order rotated every round, the median kept: the position in
                # the order moved an identical copy of a variant by up to +-6% when each was timed once.
                groups = {}
                for test in tests:
                    groups.setdefault(test[0], []).append(test)
                results, times = {}, {}
                for round_ in range(1 if args.warm else args.rounds):
                    for label, group in groups.items():
                        shift = round_ % len(group)
                        for _, name, setup, fn, fl, result in group[shift:] + group[:shift]:
                            try:
                                if setup is not None:
                                    setup()
                                fn()
                                ms = (
                                    1.0
                                    if args.warm
                                    else triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
                                )
                                times.setdefault((label, name), []).append(fl / ms * 1e-9)
                                if round_ == 0:
                                    results.setdefault(label, {})[name] = (None, result().float().clone())
                            except Exception as e:
                                print(f"  {label} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                for label, per in results.items():
                    for name, (_, res) in per.items():
                        per[name] = (statistics.median(times[label, name]), res)
                for label, per in results.items():
                    ref = per.get("base", next(iter(per.values())))
                    cells = []
                    for name, (tf, res) in per.items():
                        err = (res - ref[1]).abs().max().item()
                        cells.append(f"{name} {tf:6.1f} ({tf / ref[0]:.3f}x, maxdiff {err:.1e})")
                    print(f"d={d:<3} causal={causal!s:<5} N={n:<5} {label:<22} " + " | ".join(cells), flush=True)
                    rows.append(
                        {
                            "d": d,
                            "causal": causal,
                            "n": n,
                            "test": label,
                            "tflops": {name: tf for name, (tf, _) in per.items()},
                        }
                    )
                del q, k, v, do
                if DEVICE == "cuda":
                    torch.cuda.empty_cache()
                with open(args.out, "w") as fh:
                    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
                    json.dump({"gpu": gpu, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
