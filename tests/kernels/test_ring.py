"""Ring attention (``flashdoc.parallel``) against single-process ``flash_attn_func`` on the full tensors.

CPU: real multi-process rings over gloo, 2 and 3 ranks, each spawned once per world size; every rank runs all
cases (causal or not, both layouts, GQA, bf16, a DeviceMesh, a subgroup whose ranks are not the global ones)
forward and backward, and the parent compares the gathered shards with the single-process kernels.
GPU: the same over NCCL on two GPUs, up to long sequences, and on one GPU the ring schedule run in one process
over simulated ranks, which checks the merge and the blocks' gradients with the compiled kernels.
"""

import os
import socket
import zlib
from typing import NamedTuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from attention_oracle import DEVICE

import flashdoc  # noqa: F401  (first: turns on Triton's interpreter without a GPU)
from flashdoc import flash_attn_func
from flashdoc.kernels import INTERPRET
from flashdoc.parallel import (
    LAYOUTS,
    merge_partial,
    ring_block,
    ring_blocks,
    ring_flash_attn_func,
    ring_steps,
    zigzag_shard,
    zigzag_unshard,
)


class Case(NamedTuple):
    world_size: int
    seqlen: int  # full sequence
    heads: int
    kv_heads: int
    causal: bool
    layout: str
    dtype: torch.dtype = torch.float32
    group: str = "world"  # "world", "mesh" (a 1-D DeviceMesh) or "tail" (ranks 1..W-1 as a subgroup)
    window: tuple = (-1, -1)
    softcap: float = 0.0

    @property
    def name(self):
        dt = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]
        variant = "" if self.window == (-1, -1) else f"-window{self.window[0]},{self.window[1]}"
        variant += f"-softcap{self.softcap:g}" if self.softcap else ""
        return (
            f"W{self.world_size}-N{self.seqlen}-H{self.heads}/{self.kv_heads}-"
            f"{'causal' if self.causal else 'full'}-{self.layout}-{dt}-{self.group}{variant}"
        )

    @property
    def options(self):
        """The keyword arguments that ring_flash_attn_func and flash_attn_func share."""
        return dict(causal=self.causal, window_size=self.window, softcap=self.softcap)

    @property
    def ring_size(self):
        return self.world_size - 1 if self.group == "tail" else self.world_size


def _cases(world_size, seqlen):
    cases = [Case(world_size, seqlen, 2, 2, causal, layout) for causal in (False, True) for layout in LAYOUTS]
    cases.append(Case(world_size, seqlen, 4, 2, True, "zigzag"))  # GQA
    if world_size == 2:
        cases.append(Case(world_size, seqlen, 2, 1, True, "contiguous", torch.bfloat16))  # MQA, bf16
        cases.append(Case(world_size, seqlen, 2, 2, True, "zigzag", group="mesh"))
    else:
        cases.append(Case(world_size, 2 * seqlen // 3, 2, 2, True, "zigzag", group="tail"))
    # Sliding windows narrower than a zigzag chunk, between a chunk and a shard, and wider than a shard, causal
    # or not; softcap with and without one. (Shards of seqlen / W tokens, chunks of half that.)
    shard = seqlen // world_size
    for layout in LAYOUTS:
        cases.append(Case(world_size, seqlen, 4, 2, True, layout, window=(shard // 2 - 1, 0)))
        cases.append(Case(world_size, seqlen, 2, 2, True, layout, window=(shard + 3, 0), softcap=2.0))
        cases.append(Case(world_size, seqlen, 2, 2, False, layout, window=(3, shard - 2)))
    cases.append(Case(world_size, seqlen, 2, 2, True, "zigzag", softcap=2.0))
    return cases


CPU_CASES = {2: _cases(2, 32), 3: _cases(3, 24)}  # d = 16: a few ms per block in the interpreter
HEAD_DIM = 16


def _full_tensors(case, device="cpu", head_dim=HEAD_DIM):
    """q, k, v, dout on the full sequence; the same on every process (seeded by the case)."""
    gen = torch.Generator(device).manual_seed(zlib.crc32(case.name.encode()))  # same stream on every rank
    shapes = [
        (1, case.seqlen, case.heads, head_dim),
        (1, case.seqlen, case.kv_heads, head_dim),
        (1, case.seqlen, case.kv_heads, head_dim),
        (1, case.seqlen, case.heads, head_dim),
    ]
    return [torch.randn(s, generator=gen, device=device).to(case.dtype) for s in shapes]


def _shard(x, case, rank):
    if case.layout == "zigzag":
        return zigzag_shard(x, case.ring_size, rank)
    return x.chunk(case.ring_size, dim=1)[rank]


def _unshard(shards, case):
    return zigzag_unshard(shards) if case.layout == "zigzag" else torch.cat(shards, dim=1)


def _group_for(case, rank, groups):
    """The group argument for this case and this process's rank in it (None: not a member)."""
    if case.group == "mesh":
        return groups["mesh"], rank
    if case.group == "tail":
        return groups["tail"], (rank - 1 if rank >= 1 else None)
    return None, rank


def _run_rank(case, rank, groups, device, head_dim=HEAD_DIM):
    group, ring_rank = _group_for(case, rank, groups)
    if ring_rank is None:
        return None
    q, k, v, dout = (_shard(t, case, ring_rank) for t in _full_tensors(case, device, head_dim))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = ring_flash_attn_func(q, k, v, group=group, layout=case.layout, **case.options)
    out.backward(dout)
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]


def _errors_on_rank(case, rank, groups, device, head_dim):
    """On a GPU each rank checks its own shards against one-GPU flashdoc on the full tensors (long sequences:
    nothing large leaves the process). max |ring - single| and max |single| per tensor."""
    shards = _run_rank(case, rank, groups, device, head_dim)
    q, k, v, dout = _full_tensors(case, device, head_dim)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = flash_attn_func(q, k, v, **case.options)
    out.backward(dout)
    errors = {}
    for name, mine, full in zip(("out", "dq", "dk", "dv"), shards, (out, q.grad, k.grad, v.grad)):
        ref = _shard(full.detach(), case, rank).float().cpu()
        errors[name] = ((mine.float() - ref).abs().max().item(), ref.abs().max().item())
    return errors


def _worker(rank, world_size, port, backend, cases, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    device = "cpu"
    if backend == "nccl":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off, as on our GPU machines
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        groups = {
            "mesh": init_device_mesh("cuda" if backend == "nccl" else "cpu", (world_size,)),
            "tail": dist.new_group(list(range(1, world_size))),
        }
        if backend == "nccl":
            results = {case.name: _errors_on_rank(case, rank, groups, device, 128) for case in cases}
        else:
            results = {case.name: _run_rank(case, rank, groups, device) for case in cases}
        errors = {}
        try:
            ring_flash_attn_func(*(torch.zeros(1, 4, 1, 16, device=device) for _ in range(3)), group="world")
        except TypeError as err:
            errors["group"] = str(err)
        try:  # a 2-D mesh is refused: the ring needs one dimension
            if world_size % 2 == 0:
                mesh2d = init_device_mesh(groups["mesh"].device_type, (2, world_size // 2))
                ring_flash_attn_func(*(torch.zeros(1, 4, 1, 16, device=device) for _ in range(3)), group=mesh2d)
        except ValueError as err:
            errors["mesh2d"] = str(err)
        # a group of one rank: no ring, the same as flash_attn_func on that rank's tensors
        alone = [dist.new_group([r]) for r in range(world_size)][rank]
        q, k, v = (torch.randn(1, 8, 2, 16, device=device) for _ in range(3))
        single = torch.equal(
            ring_flash_attn_func(q, k, v, causal=True, group=alone, layout="zigzag"),
            flash_attn_func(q, k, v, causal=True),
        )
        torch.save({"results": results, "errors": errors, "single": single}, os.path.join(result_dir, f"rank{rank}.pt"))
        dist.barrier()  # rank 0 hosts the store: it must not leave while others still use it
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ring(world_size, backend, cases, tmp_path):
    mp.spawn(_worker, args=(world_size, _free_port(), backend, cases, str(tmp_path)), nprocs=world_size, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world_size)]


def _check_case(case, per_rank, device="cpu", head_dim=HEAD_DIM, atol=None):
    """The gathered shards of out, dq, dk, dv against flash_attn_func on the full tensors."""
    q, k, v, dout = _full_tensors(case, device, head_dim)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = flash_attn_func(q, k, v, **case.options)
    out.backward(dout)
    expected = [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]
    got = [r["results"][case.name] for r in per_rank]
    got = [g for g in got if g is not None]
    assert len(got) == case.ring_size
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        ring = _unshard([g[i] for g in got], case)
        assert ring.dtype == case.dtype and ring.shape == expected[i].shape, name
        ref = expected[i].float()
        err = (ring.float() - ref).abs().max().item()
        tol = atol if atol is not None else (1e-5 if case.dtype == torch.float32 else 2e-2)
        tol = tol * max(1.0, ref.abs().max().item())
        print(f"{case.name} {name}: max|ring - single| = {err:.2e} (tolerance {tol:.1e})")
        assert err <= tol, f"{case.name}: {name} differs from flash_attn_func by {err:.3e} > {tol:.1e}"


@pytest.fixture(scope="module", params=sorted(CPU_CASES))
def gloo_ring(request, tmp_path_factory):
    if not INTERPRET:
        pytest.skip("the gloo ring runs CPU tensors, which flashdoc runs only in Triton's interpreter (no GPU)")
    world_size = request.param
    result_dir = tmp_path_factory.mktemp(f"ring{world_size}")
    return world_size, _run_ring(world_size, "gloo", CPU_CASES[world_size], result_dir)


def test_gloo_ring_matches_single_process(gloo_ring):
    world_size, per_rank = gloo_ring
    for case in CPU_CASES[world_size]:
        _check_case(case, per_rank)


def test_groups_of_one_and_bad_groups(gloo_ring):
    world_size, per_rank = gloo_ring
    assert all(r["single"] for r in per_rank), "a one-rank group must give flash_attn_func's result"
    errors = per_rank[0]["errors"]
    assert "ProcessGroup, a 1-D DeviceMesh or None" in errors["group"]
    if world_size % 2 == 0:
        assert "2-D DeviceMesh" in errors["mesh2d"]


# ---------------------------------------------------------------------------------------------------------------
# The schedule and the sharding helpers, without processes
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("dim", [0, 1])
def test_zigzag_round_trip(world_size, dim):
    x = torch.arange(2 * world_size * 3 * 5).reshape(2 * world_size * 3, 5)
    x = x if dim == 0 else x.T.contiguous()
    shards = [zigzag_shard(x, world_size, r, dim=dim) for r in range(world_size)]
    assert torch.equal(zigzag_unshard(shards, dim=dim), x)
    first = x.chunk(2 * world_size, dim=dim)
    assert torch.equal(shards[0], torch.cat((first[0], first[-1]), dim=dim))


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_schedule_covers_the_causal_mask_once(world_size, layout):
    """Paint every (query, key) pair each rank's blocks cover over the whole ring: together they must be exactly
    the causal mask's kept pairs, each covered once; and zigzag gives every rank the same number of pairs."""
    n_local = 4
    full = world_size * n_local
    positions = [
        _shard(torch.arange(full)[None], Case(world_size, full, 1, 1, True, layout), r)[0] for r in range(world_size)
    ]
    covered = torch.zeros(full, full, dtype=torch.int64)
    work = []
    for rank in range(world_size):
        pairs = 0
        for step in range(world_size):
            block = ring_block(rank, step, world_size, n_local, True, layout)
            if block is None:
                continue
            qpos = positions[rank][block.q]
            kpos = positions[(rank - step) % world_size][block.kv]
            keep = kpos[None, :] <= qpos[:, None] if block.causal else torch.ones(len(qpos), len(kpos), dtype=bool)
            assert keep.all() or block.causal, "a non-causal block must not contain masked pairs"
            covered[qpos[:, None].expand_as(keep)[keep], kpos[None, :].expand_as(keep)[keep]] += 1
            pairs += int(keep.sum())
        work.append(pairs)
    assert torch.equal(covered, torch.ones(full, full, dtype=torch.int64).tril())
    if layout == "zigzag":
        assert len(set(work)) == 1, work
    else:
        assert work == sorted(work) and work[0] < work[-1]


def _window_mask(n, causal, window):
    """flash-attn's mask over n positions: query i sees key j when i - left <= j <= i + right."""
    left, right = window
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = torch.ones(n, n, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if causal or right >= 0:
        keep &= j <= i + (0 if causal else right)
    return keep


WINDOW_SCHEDULES = [
    (world_size, layout, causal, window)
    for world_size in (2, 3, 5)
    for layout in LAYOUTS
    for causal, window in (
        (True, (0, 0)),
        (True, (1, -1)),
        (True, (3, 0)),
        (True, (5, 0)),
        (True, (9, 0)),
        (True, (100, 0)),
        (False, (2, 2)),
        (False, (0, 7)),
        (False, (6, 1)),
        (False, (-1, 3)),
        (False, (4, -1)),
    )
]


@pytest.mark.parametrize("world_size, layout, causal, window", WINDOW_SCHEDULES)
def test_window_schedule_covers_the_window_once(world_size, layout, causal, window):
    """Paint every pair the blocks of a windowed ring keep, each block's mask counted from its own corner:
    together they must be exactly the window's pairs over the whole sequence, each once, within ring_steps
    steps; and each block holds only rows that see a key and keys that a row sees."""
    n_local = 6
    full = world_size * n_local
    case = Case(world_size, full, 1, 1, causal, layout)
    positions = [_shard(torch.arange(full)[None], case, r)[0] for r in range(world_size)]
    steps = ring_steps(world_size, n_local, causal, layout, window)
    covered = torch.zeros(full, full, dtype=torch.int64)
    for rank in range(world_size):
        for step in range(world_size):
            blocks = ring_blocks(rank, step, world_size, n_local, causal, layout, window)
            assert step < steps or not blocks, f"a block at step {step}, after the {steps} the ring runs"
            for block in blocks:
                qpos = positions[rank][block.q]
                kpos = positions[(rank - step) % world_size][block.kv]
                keep = _window_mask(max(len(qpos), len(kpos)), block.causal, block.window)[: len(qpos), : len(kpos)]
                assert keep.any(1).all() and keep.any(0).all(), "a block row or key that sees nothing"
                covered[qpos[:, None].expand_as(keep)[keep], kpos[None, :].expand_as(keep)[keep]] += 1
    assert torch.equal(covered, _window_mask(full, causal, window).long())


def test_windows_shorten_the_ring():
    """A causal window that ends in the previous contiguous shard needs two steps; one reaching two shards back,
    three; a window open on the right needs the whole ring (the later shards come round last)."""
    assert ring_steps(4, 16, True, "contiguous", (10, 0)) == 2
    assert ring_steps(4, 16, True, "contiguous", (20, 0)) == 3
    assert ring_steps(4, 16, True, "contiguous", (0, 0)) == 1
    assert ring_steps(4, 16, False, "contiguous", (10, 1)) == 4
    assert ring_steps(4, 16, True, "contiguous") == 4
    assert ring_steps(4, 16, True, "zigzag", (3, 0)) == 4  # chunk 2W-1-r's neighbour is a later rank's
    assert ring_steps(4, 16, True, "contiguous", [10, 0]) == 2  # a list, as flash-attn's callers pass it


def test_merge_of_two_halves_is_attention_over_both():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=gen).to(DEVICE) for _ in range(3))
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    out_a, lse_a = flash_attn_func(q, k[:, :3], v[:, :3], return_lse=True)
    out_b, lse_b = flash_attn_func(q, k[:, 3:], v[:, 3:], return_lse=True)
    merged, merged_lse = out_a.float(), lse_a.clone()
    merge_partial(merged, merged_lse, out_b, lse_b)
    torch.testing.assert_close(merged, out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(merged_lse, lse, atol=1e-6, rtol=1e-5)


def test_merge_of_rows_that_see_no_key_stays_empty():
    """Rows empty on both sides (LSE -inf) stay empty, zeros and -inf, as the kernels return them, instead of
    exp(-inf - (-inf)) = NaN; a row empty on one side takes the other's result."""
    out = torch.zeros(1, 2, 1, 4)
    lse = torch.full((1, 1, 2), -torch.inf)
    block_out = torch.stack((torch.zeros(4), torch.arange(4.0))).view(1, 2, 1, 4)
    block_lse = torch.tensor([[[-torch.inf, 0.5]]])
    merge_partial(out, lse, block_out, block_lse)
    assert torch.equal(out[0, 0, 0], torch.zeros(4)) and lse[0, 0, 0] == -torch.inf
    assert torch.equal(out[0, 1, 0], torch.arange(4.0)) and lse[0, 0, 1] == 0.5


def _zeros(seqlen):
    """A (1, seqlen, 1, 16) q, k or v where this machine's kernels run (these calls fail before any kernel)."""
    return torch.zeros(1, seqlen, 1, 16, device=DEVICE)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: zigzag_shard(torch.zeros(1, 10, 1, 8), 2, 0), "multiple of 4"),
        (lambda: zigzag_shard(torch.zeros(1, 8, 1, 8), 2, 2), r"rank must be an int in \[0, 2\)"),
        (lambda: zigzag_shard(torch.zeros(1, 8, 1, 8), 0, 0), "world_size must be an int >= 1"),
        (lambda: zigzag_unshard([torch.zeros(1, 4), torch.zeros(1, 6)]), "same shape"),
        (lambda: zigzag_unshard([torch.zeros(1, 3), torch.zeros(1, 3)]), "odd"),
        (
            lambda: ring_flash_attn_func(*(_zeros(4) for _ in range(3)), layout="zig-zag"),
            "layout must be one of",
        ),
        (
            lambda: ring_flash_attn_func(_zeros(4), _zeros(6), _zeros(6)),
            "same length",
        ),
        (lambda: ring_flash_attn_func(*(_zeros(5) for _ in range(3)), layout="zigzag"), "odd"),
        (lambda: ring_flash_attn_func(*(_zeros(4) for _ in range(3)), causal=1), "causal must be"),
        (lambda: ring_flash_attn_func(*(_zeros(4) for _ in range(3)), window_size=(-2, 0)), "window_size must be"),
        (lambda: ring_flash_attn_func(*(_zeros(4) for _ in range(3)), window_size=8), "window_size must be"),
        (lambda: ring_flash_attn_func(*(_zeros(4) for _ in range(3)), softcap=-1.0), "softcap must be"),
        # the schedule helpers are public too: nothing they cannot schedule comes back as a plan
        (lambda: ring_steps(4, 16, True, "diag"), "layout must be one of"),
        (lambda: ring_steps(0, 16, True), "world_size must be an int >= 1"),
        (lambda: ring_steps(4, 0, True), "seqlen must be an int >= 1"),
        (lambda: ring_steps(4, 15, True, "zigzag"), "must be even"),
        (lambda: ring_steps(4, 16, True, "contiguous", 8), "window_size must be a pair"),
        (lambda: ring_blocks(0, 0, 4, 16, True, "contiguous", (-2, 0)), "window_size must be two ints"),
        (lambda: ring_blocks(4, 0, 4, 16, True), r"rank must be an int in \[0, 4\)"),
        (lambda: ring_block(0, -1, 4, 16, True), "step must be an int >= 0"),
        (lambda: ring_block(0, 0, 4, 16, 1), "causal must be a bool"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_needs_an_initialised_process_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_flash_attn_func(*(_zeros(4) for _ in range(3)))
    with pytest.raises(TypeError, match="list of tensors"):
        zigzag_unshard(torch.zeros(2, 4))


# ---------------------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------------------


def _simulated_ring(q_shards, k_shards, v_shards, dout_shards, case):
    """The ring schedule in one process: every rank's blocks, merges and gradient sums, with the real ops."""
    world_size, n = len(q_shards), q_shards[0].shape[1]
    scale = q_shards[0].shape[-1] ** -0.5
    steps = ring_steps(world_size, n, case.causal, case.layout, case.window)

    def blocks(rank):
        for step in range(steps):
            for block in ring_blocks(rank, step, world_size, n, case.causal, case.layout, case.window):
                yield (rank - step) % world_size, block, (*block.window, case.softcap)

    outs, lses = [], []
    for rank in range(world_size):
        out = torch.zeros(q_shards[rank].shape, dtype=torch.float32, device=q_shards[rank].device)
        lse = torch.full(out.shape[:1] + out.shape[2:3] + out.shape[1:2], -torch.inf, device=out.device)
        for src, block, variant in blocks(rank):
            o, l_ = torch.ops.flashdoc.fwd(
                q_shards[rank][:, block.q],
                k_shards[src][:, block.kv],
                v_shards[src][:, block.kv],
                scale,
                block.causal,
                False,
                *variant,
            )
            merge_partial(out[:, block.q], lse[:, :, block.q], o, l_)
        outs.append(out.to(q_shards[0].dtype))
        lses.append(lse)
    dq = [torch.zeros_like(q, dtype=torch.float32) for q in q_shards]
    dk = [torch.zeros_like(k, dtype=torch.float32) for k in k_shards]
    dv = [torch.zeros_like(v, dtype=torch.float32) for v in v_shards]
    for rank in range(world_size):
        for src, block, variant in blocks(rank):
            r = block.q
            g = torch.ops.flashdoc.bwd(
                dout_shards[rank][:, r],
                q_shards[rank][:, r],
                k_shards[src][:, block.kv],
                v_shards[src][:, block.kv],
                outs[rank][:, r],
                lses[rank][:, :, r],
                None,
                scale,
                block.causal,
                False,
                False,
                *variant,
            )
            dq[rank][:, r] += g[0]
            dk[src][:, block.kv] += g[1]
            dv[src][:, block.kv] += g[2]
    return outs, dq, dk, dv


SIMULATED_VARIANTS = [
    dict(causal=causal) for causal in (False, True)
] + [  # windows within a zigzag chunk, across shards, open on one side; softcap with and without one
    dict(causal=True, window=(700, 0)),
    dict(causal=True, window=(2500, 0), softcap=30.0),
    dict(causal=False, window=(300, 1500)),
    dict(causal=True, softcap=30.0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("variant", SIMULATED_VARIANTS, ids=lambda v: "-".join(f"{k}{v[k]}" for k in v))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpu_simulated_ring(world_size, variant, layout):
    """One GPU: the ring's blocks and merges in one process against flash_attn_func on the full sequence."""
    case = Case(world_size, world_size * 2 * 1024, 8, 2, layout=layout, dtype=torch.bfloat16, **variant)
    q, k, v, dout = _full_tensors(case, "cuda", head_dim=128)
    shards = [[_shard(t, case, r) for r in range(world_size)] for t in (q, k, v, dout)]
    outs, dq, dk, dv = _simulated_ring(*shards, case)
    qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = flash_attn_func(qf, kf, vf, **case.options)
    out.backward(dout)
    for name, ring, ref in (("out", outs, out), ("dq", dq, qf.grad), ("dk", dk, kf.grad), ("dv", dv, vf.grad)):
        ring = _unshard(ring, case).float()
        err = (ring - ref.float()).abs().max().item()
        print(f"{case.name} {name}: {err:.2e}")
        assert err <= 2e-2 * max(1.0, ref.abs().max().item()), name


GPU_CASES = [
    Case(2, n, 8, 2, causal, layout, torch.bfloat16)
    for n in (4096, 65536, 262144)
    for causal in (False, True)
    for layout in LAYOUTS
] + [Case(2, 65536, 8, 2, True, layout, torch.bfloat16, window=(4095, 0)) for layout in LAYOUTS]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs (NCCL ring)")
def test_nccl_ring_matches_one_gpu(tmp_path):
    """Two GPUs over NCCL, bf16, up to 256k tokens, against flashdoc on one GPU on the full tensors."""
    per_rank = _run_ring(2, "nccl", GPU_CASES, tmp_path)
    for case in GPU_CASES:
        for rank, result in enumerate(per_rank):
            for name, (err, scale) in result["results"][case.name].items():
                print(f"{case.name} rank {rank} {name}: max|ring - one GPU| = {err:.2e} (max|one GPU| {scale:.2e})")
                assert err <= 2e-2 * max(1.0, scale), f"{case.name} rank {rank}: {name} differs by {err:.3e}"
