"""Does a persistent decode grid, which loads an item's first tiles during the last item's, close the batch-64 gap?

    python3 benchmarks/kernels/decode_persistent.py                     # H200: the two batch-64 points, graphs
    python3 benchmarks/kernels/decode_persistent.py --points 64x4096 --configs 128,8,3,1 --split-kv 128,8,2,1
    python3 benchmarks/kernels/decode_persistent.py --check             # any machine: outputs against the API's
    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python3 benchmarks/kernels/decode_persistent.py --aot
                                                                        # sm_90, without a GPU

Where the batch fills the GPU (64 sequences x 8 KV heads = 512 programs of one KV head's queries each, no splits),
the split-KV kernel's table entry holds one program an SM (128-key tiles, 3 stages: 128 KB of shared memory), so
an SM runs about four programs back to back and each starts with nothing in flight: its queries' and first
tiles' latency, about a microsecond of a program that streams 32 tiles at 64 x 4k. At 64 x 32k the programs are
eight times longer and that start costs an eighth as much, and there flashdoc reads 1.00-1.01x cuDNN where 64 x 4k
reads 0.99x.

Two persistent kernels launch ``programs_per_sm x SMs`` programs (or one per item, if fewer). Program p takes the
items (sequence, KV head, query tile) p, p + P, p + 2P, ... and walks all their key tiles as one loop, so that the
software pipeliner issues the next item's first K and V tiles while the current item's last ones are in use:

- by capacity: ``tl.range(..., flatten=True)`` fuses the item loop with the tile loop, as Triton's persistent
  matmul tutorial does. Triton fuses a nest only when the inner trip count is the same for every item, so each
  item walks the cache's capacity and masks the keys past its sequence's length: right for the benchmark's full
  caches, wasteful for a model's shorter sequences (their masked steps load nothing but still take their turn).
- by length: the one loop written by hand over exactly the tiles of each item's sequence, as the split-KV kernel
  walks them. The program reads its items' lengths once, into registers, so a step's item and tile follow from
  the step number alone and nothing stands between the pipeliner and a later step's addresses. This is the form
  the package could adopt.

Scope: what the batch-64 points call. Contiguous caches with per-sequence lengths in a tensor, no causal mask or
window (one query sees every key), no softcap, ALiBi or left padding; the query rows of a KV head's group packed
into one tile as the split-KV kernel packs them. ``--check`` compares both kernels' outputs and log-sum-exps with
``flashdoc.flash_attn_with_kvcache`` (on a CPU through Triton's interpreter, where ``flatten`` changes nothing);
the timing compares, per point, the split-KV kernel at the table's entry and at two-stage entries (64 KB of
shared memory, so three programs an SM: the other candidate for these points), both kernels at each config and
SDPA-cuDNN, as CUDA graphs over copies of the inputs larger than L2 in rotated rounds (``benchmarks/decode.py``'s
graph timer), and prints each one's TB/s and its ratio to cuDNN's.
"""

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import flashdoc  # noqa: E402, I001  (first: without a GPU it turns on Triton's interpreter)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from benchmarks import decode as bench  # noqa: E402
from flashdoc.kernels import LOG2E  # noqa: E402
from flashdoc.kernels import decode as dk  # noqa: E402

ROUNDS = 3
POINTS = "64x4096,64x32768"
# (block_n, warps, stages, programs_per_sm): the table's full-grid entry as a persistent grid, then entries whose
# smaller rings fit more programs an SM (Triton keeps stages - 1 tiles of K and V in shared memory).
CONFIGS = ("128,8,3,1", "128,4,3,1", "128,8,2,3", "128,4,2,3", "64,4,3,3", "64,8,4,2")
# The split-KV kernel's entries timed beside the table's: two stages hold one tile of K and V (64 KB), so the
# hardware runs three programs an SM where the grid needs no splits (programs_per_sm only sets the split count).
SPLIT_KV_CONFIGS = ("128,8,2,1", "128,4,2,1")


@triton.jit
def _item_rows(item, m_tiles, n_kv_heads, seqlen_q, BLOCK_M: tl.constexpr, GROUP: tl.constexpr):
    """(sequence, KV head, query positions, query heads, real rows) of an item: (sequence x KV head) x m_tiles +
    query tile, its rows packed as the split-KV kernel packs them."""
    Q_PER_TILE: tl.constexpr = BLOCK_M // GROUP
    offs_r = tl.arange(0, BLOCK_M)
    off_bh = item // m_tiles
    off_b = off_bh // n_kv_heads
    off_hk = off_bh % n_kv_heads
    offs_i = (item % m_tiles) * Q_PER_TILE + offs_r // GROUP  # query position
    offs_h = off_hk * GROUP + offs_r % GROUP  # query head
    row_ok = (offs_r < Q_PER_TILE * GROUP) & (offs_i < seqlen_q)
    return off_b, off_hk, offs_i, offs_h, row_ok


@triton.jit
def _tile_step(q, k, v, key_ok, m_i, l_i, acc, qk_scale):
    """The split-KV kernel's online-softmax step over one tile of keys: (m_i, l_i, acc) updated."""
    qk = tl.dot(q, tl.trans(k))
    qk = tl.where(key_ok[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: exp2(-inf - 0) = 0
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return m_new, l_i, acc


@triton.jit
def _store_item(
    O, LSE, off_b, offs_i, offs_h, row_ok, d_ok, m_i, l_i, acc, stride_ob, stride_os, stride_oh, n_heads, seqlen_q
):
    """An item's output and log-sum-exp; a sequence of no keys writes zeros and LSE = -inf."""
    offs_d = tl.arange(0, acc.shape[1])
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    o_ptrs = O + off_b.to(tl.int64) * stride_ob + offs_i[:, None] * stride_os + offs_h[:, None] * stride_oh
    tl.store(
        o_ptrs + offs_d[None, :], (acc / l_safe[:, None]).to(O.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :]
    )
    tl.store(LSE + (off_b * n_heads + offs_h) * seqlen_q + offs_i, lse, mask=row_ok)


@triton.jit
def _by_capacity(
    Q,
    K_CACHE,
    V_CACHE,
    CACHE_SEQLENS,
    O,
    LSE,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_ob,
    stride_os,
    stride_oh,
    n_items,
    n_kv_heads,
    m_tiles,
    seqlen_q,
    cache_len,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    MAX_ITEMS: tl.constexpr,
):
    """Program p: items p, p + P, ..., each over the cache's capacity (the keys past its sequence masked), the item
    and tile loops fused by Triton (``flatten``), which needs the same trip count for every item. MAX_ITEMS is
    unused here (the by-length kernel's bound)."""
    n_heads = n_kv_heads * GROUP
    n_tiles = tl.cdiv(cache_len, BLOCK_N)  # the same for every item, so that the loops can be fused
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    offs_n0 = tl.arange(0, BLOCK_N)
    # The epilogue finds its item from its own counter, as the persistent matmul tutorial's does: a value that
    # both the fused loop's prologue and its epilogue use would have to live across the whole pipeline.
    item_out = tl.program_id(0) - tl.num_programs(0)
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0), flatten=True):
        off_b, off_hk, offs_i, offs_h, row_ok = _item_rows(item, m_tiles, n_kv_heads, seqlen_q, BLOCK_M, GROUP)
        q_ptrs = Q + off_b.to(tl.int64) * stride_qb + offs_i[:, None] * stride_qs + offs_h[:, None] * stride_qh
        q = tl.load(q_ptrs + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        seqlen_k = tl.minimum(tl.load(CACHE_SEQLENS + off_b), cache_len)
        k_base = K_CACHE + off_b.to(tl.int64) * stride_kb + off_hk * stride_kh
        v_base = V_CACHE + off_b.to(tl.int64) * stride_vb + off_hk * stride_vh
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        for tile in range(n_tiles):
            offs_n = tile * BLOCK_N + offs_n0
            key_ok = offs_n < seqlen_k
            kv_mask = key_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
            m_i, l_i, acc = _tile_step(q, k, v, key_ok, m_i, l_i, acc, qk_scale)

        item_out += tl.num_programs(0)
        off_b, _, offs_i, offs_h, row_ok = _item_rows(item_out, m_tiles, n_kv_heads, seqlen_q, BLOCK_M, GROUP)
        _store_item(
            O,
            LSE,
            off_b,
            offs_i,
            offs_h,
            row_ok,
            d_ok,
            m_i,
            l_i,
            acc,
            stride_ob,
            stride_os,
            stride_oh,
            n_heads,
            seqlen_q,
        )


@triton.jit
def _by_length(
    Q,
    K_CACHE,
    V_CACHE,
    CACHE_SEQLENS,
    O,
    LSE,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_ob,
    stride_os,
    stride_oh,
    n_items,
    n_kv_heads,
    m_tiles,
    seqlen_q,
    cache_len,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    MAX_ITEMS: tl.constexpr,
):
    """Program p: items p, p + P, ... (at most MAX_ITEMS), each over its own sequence's tiles, as the split-KV kernel
    walks them, in one loop over all of them written by hand. The items' tile counts are read once, into registers,
    so a step's item, tile and whether it ends its item are functions of the step number alone: the pipeliner can
    work out a later step's addresses, the next item's included, with no load in the way."""
    n_heads = n_kv_heads * GROUP
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    offs_n0 = tl.arange(0, BLOCK_N)
    slots = tl.arange(0, MAX_ITEMS)
    items = tl.program_id(0) + slots * tl.num_programs(0)
    has_item = items < n_items
    seq = items // m_tiles // n_kv_heads
    lengths = tl.minimum(tl.load(CACHE_SEQLENS + seq, mask=has_item, other=0), cache_len)
    # an empty sequence still takes one (fully masked) step, which writes its zeros and LSE = -inf
    tiles = tl.where(has_item, tl.maximum(tl.cdiv(lengths, BLOCK_N), 1), 0)
    ends = tl.cumsum(tiles, 0)  # the step after each item's last
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for step in tl.range(0, tl.sum(tiles, 0)):
        slot = tl.sum((ends <= step).to(tl.int32), 0)  # this step's item
        this = slots == slot
        end = tl.sum(tl.where(this, ends, 0), 0)
        tile = step - (end - tl.sum(tl.where(this, tiles, 0), 0))
        seqlen_k = tl.sum(tl.where(this, lengths, 0), 0)
        off_b, off_hk, offs_i, offs_h, row_ok = _item_rows(
            tl.program_id(0) + slot * tl.num_programs(0), m_tiles, n_kv_heads, seqlen_q, BLOCK_M, GROUP
        )
        q_ptrs = Q + off_b.to(tl.int64) * stride_qb + offs_i[:, None] * stride_qs + offs_h[:, None] * stride_qh
        q = tl.load(q_ptrs + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # an L2 hit, mostly
        offs_n = tile * BLOCK_N + offs_n0
        key_ok = offs_n < seqlen_k
        kv_mask = key_ok[:, None] & d_ok[None, :]
        k_base = K_CACHE + off_b.to(tl.int64) * stride_kb + off_hk * stride_kh
        v_base = V_CACHE + off_b.to(tl.int64) * stride_vb + off_hk * stride_vh
        k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        m_i, l_i, acc = _tile_step(q, k, v, key_ok, m_i, l_i, acc, qk_scale)
        last = step == end - 1
        if last:
            _store_item(
                O,
                LSE,
                off_b,
                offs_i,
                offs_h,
                row_ok,
                d_ok,
                m_i,
                l_i,
                acc,
                stride_ob,
                stride_os,
                stride_oh,
                n_heads,
                seqlen_q,
            )
        # the next item starts afresh
        m_i = tl.where(last, float("-inf"), m_i)
        l_i = tl.where(last, 0.0, l_i)
        acc = tl.where(last, 0.0, acc)


KERNELS = {"capacity": _by_capacity, "length": _by_length}


def parse_config(text: str) -> dk.DecodeConfig:
    """'128,8,3,1' -> DecodeConfig(block_n=128, warps=8, stages=3, programs_per_sm=1)."""
    block_n, warps, stages, per_sm = (int(x) for x in text.split(","))
    return dk.DecodeConfig(block_n, warps, stages, per_sm)


def persistent_call(q, k_cache, v_cache, seqlens, config: dk.DecodeConfig, sms: int, walk: str = "capacity"):
    """A call of a persistent kernel (``walk``: each item over the cache's ``capacity``, or over its sequence's
    ``length``) over a contiguous cache: (call, its output, its LSE (B, H, Sq))."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[2]
    group = n_heads // n_kv_heads
    if n_heads % n_kv_heads or not dk.fits_one_tile(n_heads, n_kv_heads, seqlen_q):
        raise ValueError(f"q's {n_heads} heads over {n_kv_heads} KV heads x seqlen_q {seqlen_q}: not a decode step")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:  # the kernels step along the head dim one element at a time
            raise ValueError(f"{name}'s head dim must have stride 1, got {t.stride(-1)}; pass {name}.contiguous()")
    block_m, m_tiles = dk.query_tiles(group, seqlen_q)
    n_items = batch * n_kv_heads * m_tiles
    if n_items == 0:
        raise ValueError(f"q has batch {batch}: a decode step needs at least one sequence")
    out = torch.empty(q.shape, device=q.device, dtype=q.dtype)  # contiguous, whatever q's strides
    lse = torch.empty(batch, n_heads, seqlen_q, device=q.device, dtype=torch.float32)
    grid = (min(n_items, config.programs_per_sm * sms),)
    block_d = triton.next_power_of_2(head_dim)
    max_items = triton.next_power_of_2(triton.cdiv(n_items, grid[0])) if walk == "length" else 1
    kernel = KERNELS[walk]

    def call():
        kernel[grid](
            q,
            k_cache,
            v_cache,
            seqlens,
            out,
            lse,
            *q.stride()[:3],
            *k_cache.stride()[:3],
            *v_cache.stride()[:3],
            *out.stride()[:3],
            n_items,
            n_kv_heads,
            m_tiles,
            seqlen_q,
            k_cache.shape[1],
            head_dim**-0.5 * LOG2E,
            HEAD_DIM=head_dim,
            BLOCK_D=block_d,
            BLOCK_M=block_m,
            BLOCK_N=config.block_n,
            GROUP=group,
            MAX_ITEMS=max_items,
            num_warps=config.warps,
            num_stages=config.stages,
        )
        return out

    return call, out, lse


def check(device: str, walks=tuple(KERNELS), config: dk.DecodeConfig = None) -> int:
    """Each kernel's output and LSE against ``flash_attn_with_kvcache`` on uneven lengths, counted in the config's
    tiles so that items span several (an empty sequence, one key, a tile less one key, a tile and one key, three
    tiles and more), more items than programs, MHA/GQA/MQA and 1-3 queries. Prints one line per kernel and case;
    returns how many failed."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    config = config or (dk.DecodeConfig(32, 4, 2, 1) if device == "cpu" else dk.DecodeConfig(128, 8, 3, 1))
    n = config.block_n
    failed = 0
    # (cache, heads, KV heads, head dim, seqlen_q, programs, lengths): few programs, so each takes several items
    for cache, heads, kv_heads, head_dim, seqlen_q, programs, lengths in [
        (3 * n + 4, 4, 2, 32, 1, 2, [0, 1, 3 * n + 4]),
        (2 * n + 6, 4, 1, 40, 1, 1, [n - 1, n + 1]),
        (2 * n, 2, 2, 64, 3, 3, [2 * n - 6, n]),
    ]:
        batch = len(lengths)
        g = torch.Generator(device=device).manual_seed(cache)
        kw = dict(device=device, dtype=dtype)
        q = torch.randn(batch, seqlen_q, heads, head_dim, generator=g, **kw)
        k_cache = torch.randn(batch, cache, kv_heads, head_dim, generator=g, **kw)
        v_cache = torch.randn(batch, cache, kv_heads, head_dim, generator=g, **kw)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
        want, want_lse = flashdoc.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=seqlens, return_softmax_lse=True
        )
        finite = want_lse.isfinite()
        for walk in walks:
            call, out, lse = persistent_call(q, k_cache, v_cache, seqlens, config, programs, walk)
            call()
            err = (out.float() - want.float()).abs().max().item()
            lse_ok = torch.equal(finite, lse.isfinite()) and (
                (lse[finite] - want_lse[finite]).abs().max().item() < tol if finite.any() else True
            )
            ok = err < tol and lse_ok
            failed += not ok
            print(
                f"{'ok  ' if ok else 'FAIL'} by {walk}: batch {batch} cache {cache} heads {heads}/{kv_heads} "
                f"d {head_dim} seqlen_q {seqlen_q} lengths {lengths} programs {programs}: max |out - API| "
                f"{err:.1e}, LSE {'agrees' if lse_ok else 'differs'}",
                flush=True,
            )
    return failed


def aot(configs) -> None:
    """Compile each config for sm_90 (Triton 3.6 from /tmp/t36, no GPU) and print what says whether the loops were
    fused and pipelined (``describe_loops``), then ptxas's registers and spills (``code_hash.ptxas_info``) and the
    shared memory."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from benchmarks.kernels.code_hash import ptxas_info

    for (walk, kernel), config in itertools.product(KERNELS.items(), configs):
        # MAX_ITEMS: 64 x 4k's 512 items over one program an SM take at most 4 each
        constants = dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_M=16, BLOCK_N=config.block_n, GROUP=4, MAX_ITEMS=4)
        sig, consts, attrs = {}, {}, {}
        for i, name in enumerate(kernel.arg_names):
            if name in constants:
                sig[name], consts[(i,)] = "constexpr", constants[name]
            elif name.isupper():
                sig[name] = {"CACHE_SEQLENS": "*i32", "LSE": "*fp32"}.get(name, "*bf16")
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif name == "qk_scale":
                sig[name] = "fp32"
            else:
                sig[name] = "i32"
                if name.startswith("stride"):  # as Triton specialises them at a launch over these shapes
                    attrs[(i,)] = [["tt.divisibility", 16]]
        compiled = triton.compile(
            ASTSource(kernel, sig, consts, attrs),
            target=GPUTarget("cuda", 90, 32),
            options=dict(num_warps=config.warps, num_stages=config.stages),
        )
        loops = ", ".join(describe_loops(compiled.asm["ttgir"]))
        print(f"by {walk}, {config}: {loops}; {ptxas_info(compiled)}, {compiled.metadata.shared // 1024} KiB shared")


def describe_loops(ttgir: str) -> list:
    """One phrase per loop of a kernel's TTGIR: nested or not, and how many asynchronous loads it carries from one
    iteration to the next (tiles the pipeliner issued ahead). Fused and pipelined, the by-capacity kernel has a
    top-level loop carrying them, and the nest it came from survives only in the branch for a cache of no tiles;
    the by-length kernel has one loop, written so."""
    phrases, depth_of = [], []
    for line in ttgir.splitlines():
        indent = len(line) - len(line.lstrip())
        while depth_of and indent <= depth_of[-1]:
            depth_of.pop()
        if " scf.for " in line:
            where = "nested loop" if depth_of else "top-level loop"
            phrases.append(f"{where} carrying {line.count('!ttg.async.token')} async loads")
            depth_of.append(indent)
    return phrases


def time_points(points, configs, split_kv_configs=(), out_path=None) -> list:
    """Graph-timed TB/s of the split-KV kernel at the table's entry and at ``split_kv_configs``, both persistent
    kernels at each of ``configs`` and SDPA-cuDNN, per point; printed as rows and written to ``out_path`` as JSON."""
    sms = dk.num_sms(0)
    rows = []
    for batch, cache in points:
        inputs = [bench.make_cache(batch, cache, seed=i) for i in range(bench.copies_for(batch, cache))]
        table = dk.table_config(bench.HEAD_DIM, 0, bench.fills_gpu(batch))
        methods = {}
        for config in [table, *(c for c in split_kv_configs if c != table)]:
            label = "split-KV (table's) " if config == table else "split-KV "
            methods[f"{label}{config}"] = [bench.config_call(*x, config)[0] for x in inputs]
        for walk, config in itertools.product(KERNELS, configs):
            methods[f"persistent by {walk} {config}"] = [persistent_call(*x[:4], config, sms, walk)[0] for x in inputs]
        methods["sdpa-cudnn"] = [bench.sdpa_call("CUDNN_ATTENTION", *x[:3]) for x in inputs]
        rounds = {name: [] for name in methods}
        names = list(methods)
        for r in range(ROUNDS):
            for name in names[r:] + names[:r]:
                try:
                    rounds[name].append(bench.graph_time_ms(methods[name]))
                except Exception as e:  # a config out of shared memory or registers
                    print(f"{batch} x {cache} {name}: {str(e).splitlines()[0][:100]}", flush=True)
        n_bytes = bench.kv_bytes(batch, cache)
        cudnn = n_bytes / statistics.median(rounds["sdpa-cudnn"]) / 1e9
        for name in names:
            if not rounds[name]:
                continue
            tbps = n_bytes / statistics.median(rounds[name]) / 1e9
            rows.append(dict(batch=batch, cache=cache, method=name, rounds_ms=rounds[name], tbps=tbps))
            print(f"{batch} x {cache} | {name} | {tbps:.3f} TB/s | {tbps / cudnn:.3f}x cuDNN", flush=True)
        del inputs, methods
        torch.cuda.empty_cache()
    if out_path:
        Path(out_path).write_text(json.dumps(rows, indent=1))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default=POINTS, help="batch x cache points, e.g. 64x4096,64x32768")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), help="block_n,warps,stages,programs_per_sm")
    ap.add_argument(
        "--split-kv", nargs="*", default=list(SPLIT_KV_CONFIGS), help="split-KV kernel configs timed beside the table's"
    )
    ap.add_argument("--check", action="store_true", help="compare with flash_attn_with_kvcache instead of timing")
    ap.add_argument("--aot", action="store_true", help="compile the configs for sm_90 without a GPU")
    ap.add_argument("--out", help="write the timed rows here as JSON")
    a = ap.parse_args(argv)
    configs = [parse_config(c) for c in a.configs]
    if a.aot:
        return aot(configs)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.check:
        sys.exit(1 if check(device) else 0)
    if device != "cuda":
        sys.exit("decode_persistent.py times CUDA graphs: it needs a GPU (--check and --aot run without one)")
    if check(device):
        sys.exit("the persistent kernel disagrees with flash_attn_with_kvcache: not timed")
    time_points(bench.points(False, a.points), configs, [parse_config(c) for c in a.split_kv], a.out)


if __name__ == "__main__":
    main()
