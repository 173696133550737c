"""Ring attention (context parallelism) over ``torch.distributed``.

Every rank of a process group holds one shard of the sequence: its queries, keys and values. The key/value
shards travel around the ring, one hop per step, while each rank attends its queries to the shard it holds; after
W steps every query has seen every key. Each step gives a partial output and its log-sum-exp (LSE), and the
partials merge exactly through their LSEs, the online softmax one level up. The backward sends the key/value
shards around the ring again, and with them their gradients, which collect one contribution per rank and arrive
back at their owner after the last step.

Built on the two ``torch.library`` ops of ``flashdoc.interface``: the forward op returns each block's LSE, and
the backward op takes the output and LSE it differentiates through as arguments, so every block's gradient is
computed against the *final* (merged) output and LSE, which is what makes the blocks' gradients add up to the
gradient of the whole attention.

Layouts (how the sequence of N tokens is cut over W ranks):

- ``"contiguous"``: rank r holds tokens [r N/W, (r+1) N/W). With a causal mask, rank r computes r full blocks
  and half of its diagonal one: the last rank does 2W - 1 times the work of the first.
- ``"zigzag"``: the sequence is cut into 2W chunks, and rank r holds chunks r and 2W-1-r, one early and one late.
  Causal work is then the same on every rank: after its own shard, each step costs exactly half a block.
  ``zigzag_shard`` and ``zigzag_unshard`` convert.

Sliding windows count positions in the whole sequence. Each pair of contiguous runs of tokens (a rank's shard,
or a zigzag chunk) meets in at most one rectangle of pairs the window keeps, cut to its rows and keys that see
anything and computed as one block with the window moved to the block's corner (``ring_blocks``). A window that
needs only the nearest shards ends the ring early: the keys travel only as far as some rank still needs them,
and each key gradient goes straight home from wherever its sum ends up.
"""

import functools
from typing import NamedTuple, Optional, Sequence

import torch
import torch.distributed as dist

from ._validation import check_bool, check_int, validate_attention_inputs, validate_window_and_softcap
from .interface import _bwd_op, _fwd_op, first_order_only, flash_attn_func

__all__ = [
    "ring_flash_attn_func",
    "zigzag_shard",
    "zigzag_unshard",
    "ring_block",
    "ring_blocks",
    "ring_steps",
    "RingBlock",
    "merge_partial",
    "LAYOUTS",
]

LAYOUTS = ("contiguous", "zigzag")


# ---------------------------------------------------------------------------------------------------------------
# The schedule: which rows of this rank's queries meet which rows of the visiting key/value shard
# ---------------------------------------------------------------------------------------------------------------


class RingBlock(NamedTuple):
    """One step's attention block: rows of the local queries, rows of the visiting key/value shard, and whether
    the block has a causal mask aligned to its top-left corner (without a window only the diagonal block does,
    where queries and keys are the same tokens; under one, any block whose band is a triangle). Under a sliding
    window, ``window`` is the block's own (left, right), counted from its first query and first key (the top-left
    corner; -1 unbounded)."""

    q: slice
    kv: slice
    causal: bool
    window: tuple = (-1, -1)


def _check_layout(layout) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _check_schedule(world_size, seqlen, causal, layout, window_size=(-1, -1), rank=0, step=0) -> None:
    """The schedule helpers' arguments, refused by name as ``ring_flash_attn_func`` refuses its own."""
    _check_rank(world_size, rank)
    check_int(step, "step")
    check_int(seqlen, "seqlen", 1, meaning="the length of one rank's shard")
    check_bool(causal, "causal")
    _check_layout(layout)
    if layout == "zigzag" and seqlen % 2:
        raise ValueError(f"seqlen is {seqlen}: a zigzag shard holds two equal chunks, so its length must be even")
    validate_window_and_softcap(window_size, 0.0)


# --8<-- [start:schedule]
def ring_block(
    rank: int, step: int, world_size: int, seqlen: int, causal: bool, layout: str = "contiguous"
) -> Optional[RingBlock]:
    """The block rank ``rank`` computes at ring step ``step``, or None when the causal mask hides all of it.

    At step s, rank r holds the key/value shard of rank (r - s) mod W. ``seqlen`` is the local shard's length.
    Contiguous: the shard of an earlier rank is seen in full, a later one not at all. Zigzag (chunks r and
    2W-1-r): an earlier rank's early chunk is seen in full by both local chunks and its late chunk by neither;
    a later rank's two chunks are seen in full by the local late chunk only. Under zigzag, either way half a
    block.
    """
    _check_schedule(world_size, seqlen, causal, layout, rank=rank, step=step)
    every = slice(0, seqlen)
    if step == 0:
        return RingBlock(every, every, causal)
    if not causal:
        return RingBlock(every, every, False)
    source = (rank - step) % world_size
    if layout == "contiguous":
        return RingBlock(every, every, False) if source < rank else None
    half = seqlen // 2
    if source < rank:
        return RingBlock(every, slice(0, half), False)
    return RingBlock(slice(half, seqlen), every, False)


# --8<-- [end:schedule]


# --8<-- [start:window_schedule]
def ring_blocks(
    rank: int,
    step: int,
    world_size: int,
    seqlen: int,
    causal: bool,
    layout: str = "contiguous",
    window_size=(-1, -1),
) -> list:
    """Every block rank ``rank`` computes at ring step ``step``: ``ring_block``'s one (or none) without a window.

    With a window (left, right) over positions in the whole sequence (query i sees key j when
    i - left <= j <= i + right; -1 unbounded, ``causal`` sets right = 0), each run of local queries meets each run
    of visiting keys (one run a shard; two, its chunks, under zigzag) in at most one block."""
    _check_schedule(world_size, seqlen, causal, layout, window_size, rank, step)
    if tuple(window_size) == (-1, -1):
        block = ring_block(rank, step, world_size, seqlen, causal, layout)
        return [] if block is None else [block]
    left, right = window_size
    if causal:
        right = 0
    source = (rank - step) % world_size
    blocks = []
    for q_start, rows in _runs(rank, world_size, seqlen, layout):
        for k_start, keys in _runs(source, world_size, seqlen, layout):
            block = _band_block(q_start - k_start, rows, keys, left, right)
            if block is not None:
                blocks.append(block)
    return blocks


def _runs(rank: int, world_size: int, seqlen: int, layout: str) -> list:
    """(position of the first token in the whole sequence, local rows) of each contiguous run a rank holds."""
    if layout == "contiguous":
        return [(rank * seqlen, slice(0, seqlen))]
    half = seqlen // 2
    return [(rank * half, slice(0, half)), ((2 * world_size - 1 - rank) * half, slice(half, seqlen))]


def _band_block(offset: int, rows: slice, keys: slice, left: int, right: int) -> Optional[RingBlock]:
    """The block of a run of queries and a run of keys whose first positions differ by ``offset`` (query's minus
    key's): local query i sees local key j when i + offset - left <= j <= i + offset + right. Cut to the rows
    that see a key and the keys that a row sees; None if there are none."""
    m, n = rows.stop - rows.start, keys.stop - keys.start
    first_row = 0 if right < 0 else max(0, -offset - right)
    end_row = m if left < 0 else min(m, n - offset + left)
    if first_row >= end_row:
        return None
    first_key = 0 if left < 0 else max(0, first_row + offset - left)
    end_key = n if right < 0 else min(n, end_row + offset + right)
    if first_key >= end_key:
        return None
    # The window seen from the block's corner; a side that reaches past the block's edge masks nothing there.
    offset += first_row - first_key
    height, width = end_row - first_row, end_key - first_key
    block_left = -1 if left < 0 or left - offset >= height - 1 else left - offset
    block_right = -1 if right < 0 or right + offset >= width - 1 else right + offset
    q = slice(rows.start + first_row, rows.start + end_row)
    kv = slice(keys.start + first_key, keys.start + end_key)
    if block_left == -1 and block_right in (-1, 0):  # plain or causal: the kernels' fastest forms
        return RingBlock(q, kv, block_right == 0)
    return RingBlock(q, kv, False, (block_left, block_right))


def ring_steps(world_size: int, seqlen: int, causal: bool, layout: str = "contiguous", window_size=(-1, -1)) -> int:
    """How many steps the ring runs: one past the last step in which any rank has a block. W without a window;
    fewer when a window ends where some nearer shard does."""
    _check_schedule(world_size, seqlen, causal, layout, window_size)
    return _ring_steps(world_size, seqlen, causal, layout, tuple(window_size))  # a list window too


@functools.cache
def _ring_steps(world_size: int, seqlen: int, causal: bool, layout: str, window_size: tuple) -> int:
    if window_size == (-1, -1):
        return world_size
    last = max(
        step
        for rank in range(world_size)
        for step in range(world_size)
        if ring_blocks(rank, step, world_size, seqlen, causal, layout, window_size)
    )
    return last + 1


# --8<-- [end:window_schedule]


# ---------------------------------------------------------------------------------------------------------------
# Sharding helpers for the zigzag layout
# ---------------------------------------------------------------------------------------------------------------


def _check_rank(world_size, rank) -> None:
    check_int(world_size, "world_size", 1)
    check_int(rank, "rank")
    if rank >= world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


def _check_dim(dim, ndim: int) -> None:
    """``dim`` names one of a tensor's ``ndim`` dimensions (negative counts from the end, as in torch)."""
    check_int(dim, "dim", minimum=None)
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim is {dim} but the tensor has {ndim} dimensions; allowed: {-ndim} to {ndim - 1}")


def zigzag_shard(x: torch.Tensor, world_size: int, rank: int, dim: int = 1) -> torch.Tensor:
    """Rank ``rank``'s zigzag shard of the full tensor ``x``: cut dimension ``dim`` into 2 W equal chunks and
    return chunks ``rank`` and ``2W-1-rank``, concatenated. For W = 2 and chunks a b c d: rank 0 gets a d,
    rank 1 gets b c. ``dim=1`` is the sequence dimension of the (batch, seqlen, heads, head_dim) layout."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    _check_rank(world_size, rank)
    _check_dim(dim, x.dim())
    length = x.shape[dim]
    if length % (2 * world_size) != 0:
        raise ValueError(
            f"the zigzag layout cuts dimension {dim} into 2 * world_size = {2 * world_size} equal "
            f"chunks, but its length {length} is not a multiple of {2 * world_size}; pad the "
            "sequence or pick another world size"
        )
    chunks = x.chunk(2 * world_size, dim=dim)
    return torch.cat((chunks[rank], chunks[2 * world_size - 1 - rank]), dim=dim)


def zigzag_unshard(shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """The full tensor from every rank's zigzag shard, given in rank order (the inverse of ``zigzag_shard``;
    gather the shards first, e.g. with ``torch.distributed.all_gather``)."""
    if isinstance(shards, torch.Tensor) or not all(isinstance(s, torch.Tensor) for s in shards) or not shards:
        raise TypeError("shards must be a non-empty list of tensors, one per rank, in rank order")
    shape = shards[0].shape
    if any(s.shape != shape for s in shards):
        raise ValueError(f"every shard must have the same shape, got {[tuple(s.shape) for s in shards]}")
    _check_dim(dim, len(shape))
    if shape[dim] % 2 != 0:
        raise ValueError(
            f"a zigzag shard holds two equal chunks along dimension {dim}, but its length {shape[dim]} is odd"
        )
    halves = [s.chunk(2, dim=dim) for s in shards]
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim=dim)


# ---------------------------------------------------------------------------------------------------------------
# The ring: one asynchronous hop to the next rank, with a receive from the previous one
# ---------------------------------------------------------------------------------------------------------------


class _Ring:
    """Point-to-point neighbours in a process group. ``pass_on`` posts one send to the next rank and one receive
    from the previous rank as a single batch and returns at once; ``wait`` on NCCL only orders the compute
    stream after the transfer (the host does not block), so kernels queued in between overlap with it."""

    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.size)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.size)

    def pass_on(self, send: torch.Tensor, recv: torch.Tensor, tag: int, hops: int = 1):
        """Send to the rank ``hops`` places on (the next one by default) and receive from as far back."""
        if hops % self.size == 1:
            to, source = self.next, self.prev
        else:
            to = dist.get_global_rank(self.group, (self.rank + hops) % self.size)
            source = dist.get_global_rank(self.group, (self.rank - hops) % self.size)
        return dist.batch_isend_irecv(
            [
                dist.P2POp(dist.isend, send, to, self.group, tag),
                dist.P2POp(dist.irecv, recv, source, self.group, tag),
            ]
        )

    @staticmethod
    def wait(works) -> None:
        for work in works:
            work.wait()


_KV_TAG, _DKV_TAG = 0, 1  # the two streams of messages of the backward, kept apart on backends that use tags


# ---------------------------------------------------------------------------------------------------------------
# Forward and backward over the ring
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:merge]
def merge_partial(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor) -> None:
    """Fold one block's attention into the running result, in place: out (B, S, H, D) fp32 and lse (B, H, S)
    fp32 become the attention over the union of both key sets. With L = logaddexp(lse, block_lse), each side
    is weighted by its share of the softmax denominator, exp(lse - L) and exp(block_lse - L). A row that sees
    no key on either side (both LSEs -inf) keeps L = -inf and gets zeros, as the kernels give it."""
    new_lse = torch.logaddexp(lse, block_lse)
    shift = new_lse.nan_to_num(neginf=0.0)  # exp(-inf - (-inf)) would be NaN
    old_weight = torch.exp(lse - shift).transpose(1, 2).unsqueeze(-1)
    new_weight = torch.exp(block_lse - shift).transpose(1, 2).unsqueeze(-1)
    # two passes over the (memory-bound) output, and no temporary of its size
    out.mul_(old_weight).addcmul_(block_out, new_weight)
    lse.copy_(new_lse)


# --8<-- [end:merge]


def _variant(block: RingBlock, softcap: float) -> tuple:
    """The ops' arguments after causal and the alignment for a block: its window and the softcap, or none.
    Every block is aligned to its top-left corner (``bottom_right=False``), where its window is counted from."""
    if block.window == (-1, -1) and softcap == 0.0:
        return ()
    return (*block.window, softcap)


# --8<-- [start:forward]
def _ring_forward(q, k, v, softmax_scale: float, causal: bool, layout: str, ring: _Ring, window=(-1, -1), softcap=0.0):
    """This rank's output (q's dtype) and LSE (fp32) over all ranks' keys."""
    seqlen = q.shape[1]
    steps = ring_steps(ring.size, seqlen, causal, layout, window)
    kv = torch.stack((k, v))  # one message per hop instead of two
    out = lse = None
    for step in range(steps):
        last = step == steps - 1
        if not last:  # post the next hop first, so that it travels while this block computes
            kv_next = torch.empty_like(kv)
            in_flight = ring.pass_on(kv, kv_next, _KV_TAG)
        for block in ring_blocks(ring.rank, step, ring.size, seqlen, causal, layout, window):
            block_out, block_lse = _fwd_op(
                q[:, block.q],
                kv[0][:, block.kv],
                kv[1][:, block.kv],
                softmax_scale,
                block.causal,
                False,
                *_variant(block, softcap),
            )
            if out is None and block.q == slice(0, seqlen):  # the diagonal block covers every local query
                out, lse = block_out.float(), block_lse
                continue
            if out is None:  # a window's blocks cover the queries in parts: start from no keys at all
                out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
                lse = torch.full(block_lse.shape[:2] + (seqlen,), -torch.inf, device=q.device)
            merge_partial(out[:, block.q], lse[:, :, block.q], block_out, block_lse)
        if not last:
            ring.wait(in_flight)
            kv = kv_next
    return out.to(q.dtype), lse


# --8<-- [end:forward]


# --8<-- [start:backward]
def _ring_backward(
    dout, q, k, v, out, lse, softmax_scale: float, causal: bool, layout: str, ring: _Ring, window=(-1, -1), softcap=0.0
):
    """dq, dk, dv of this rank's shards. The key/value shards go around as in the forward; next to each travels
    the fp32 sum of its gradient so far, which every rank adds its blocks' share to before passing it on. After
    W hops each sum is back at its owner, complete (a window's shorter ring sends it home in one hop)."""
    seqlen = q.shape[1]
    steps = ring_steps(ring.size, seqlen, causal, layout, window)
    kv = torch.stack((k, v))
    dq = torch.zeros_like(q, dtype=torch.float32)
    dkv = torch.zeros_like(kv, dtype=torch.float32)  # the gradient sum of the shard held now
    dkv_next = dkv_in_flight = None
    for step in range(steps):
        last = step == steps - 1
        if not last:
            kv_next = torch.empty_like(kv)
            kv_in_flight = ring.pass_on(kv, kv_next, _KV_TAG)
        blocks = ring_blocks(ring.rank, step, ring.size, seqlen, causal, layout, window)
        # The final out and lse, not each block's own: P = exp(S - lse) is then the block's slice of the full
        # softmax, and delta = rowsum(dO * O) its full row term, so the blocks' gradients add up.
        grads = [
            _bwd_op(
                dout[:, block.q],
                q[:, block.q],
                kv[0][:, block.kv],
                kv[1][:, block.kv],
                out[:, block.q],
                lse[:, :, block.q],
                None,
                softmax_scale,
                block.causal,
                False,
                False,
                *_variant(block, softcap),
            )
            for block in blocks
        ]
        if dkv_in_flight is not None:  # the sum for the shard received this step, sent by the previous rank
            ring.wait(dkv_in_flight)
            dkv = dkv_next
        for block, (dq_block, dk_block, dv_block) in zip(blocks, grads):
            dq[:, block.q] += dq_block
            dkv[0][:, block.kv] += dk_block
            dkv[1][:, block.kv] += dv_block
        # The last hop takes each sum to its owner: the next rank after W steps, (steps - 1) ranks back after fewer.
        hops = 1 if not last else 1 - steps
        if hops % ring.size:
            dkv_next = torch.empty_like(dkv)
            dkv_in_flight = ring.pass_on(dkv, dkv_next, _DKV_TAG, hops)
        else:  # a ring of one step: the sum held is this rank's own
            dkv_next, dkv_in_flight = dkv, None
        if not last:
            ring.wait(kv_in_flight)
            kv = kv_next
    if dkv_in_flight is not None:
        ring.wait(dkv_in_flight)  # the last hop brings this rank's own shard's gradient home
    dk, dv = dkv_next.to(k.dtype).unbind(0)
    return dq.to(q.dtype), dk, dv


# --8<-- [end:backward]


class _RingFlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, layout, ring, window, softcap):
        out, lse = _ring_forward(q, k, v, softmax_scale, causal, layout, ring, window, softcap)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (softmax_scale, causal, layout, ring, window, softcap)
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(dout, q, k, v, out, lse, *ctx.options)
        return dq, dk, dv, None, None, None, None, None, None


def _resolve_group(group):
    """A ProcessGroup, a one-dimensional DeviceMesh, or None (the default group)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "ring_flash_attn_func needs torch.distributed: call torch.distributed."
            "init_process_group (e.g. under torchrun) first, or use flashdoc.flash_attn_func "
            "on one device"
        )
    if group is None:
        return dist.group.WORLD
    if isinstance(group, dist.ProcessGroup):
        return group
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError(
                f"group is a {group.ndim}-D DeviceMesh; pass the context-parallel dimension's "
                "mesh, e.g. mesh['cp'], or its process group, mesh.get_group('cp')"
            )
        return group.get_group()
    raise TypeError(
        f"group must be a torch.distributed ProcessGroup, a 1-D DeviceMesh or None, got {type(group).__name__}"
    )


def ring_flash_attn_func(
    q, k, v, softmax_scale=None, causal=False, group=None, layout="contiguous", window_size=(-1, -1), softcap=0.0
):
    """Exact attention over a sequence sharded across the ranks of a process group (ring attention).

    Every rank calls it with its own shard; the result is this rank's shard of
    ``flash_attn_func(q_full, k_full, v_full, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
    softcap=softcap)``, and autograd
    gives this rank's shards of the gradients. Keys and values move around the ring with asynchronous
    ``batch_isend_irecv`` while the blocks compute. Runs on NCCL (CUDA tensors), where nothing waits on the host
    inside a step, and on gloo (CPU tensors, through Triton's interpreter), whose transfers the host waits for.

    Args:
        q: (batch, seqlen / W, nheads, headdim), this rank's queries; W is the group's size.
        k, v: (batch, seqlen / W, nheads_k, headdim), this rank's keys and values; nheads must be a multiple of
            nheads_k (GQA/MQA). Every rank's shards have the same shape.
        softmax_scale: multiplies q @ k^T before the softmax; default headdim ** -0.5.
        causal: query i sees key j when j <= i, positions counted in the full sequence.
        group: the ranks that share the sequence: a ProcessGroup, a 1-D DeviceMesh (e.g. ``mesh["cp"]``), or
            None for the default group. Ranks are taken in the group's order.
        layout: how the sequence is sharded. ``"contiguous"``: rank r holds tokens [r N/W, (r+1) N/W).
            ``"zigzag"``: the sequence is cut into 2W chunks and rank r holds chunks r and 2W-1-r
            (``zigzag_shard``), which gives every rank the same causal work. Must match how the shards were cut.
        window_size: (left, right), flash-attn's sliding window over positions in the full sequence: query i sees
            key j when i - left <= j <= i + right, -1 for unbounded; with ``causal``, right is 0. The ring stops
            as soon as no rank needs farther shards, so a window with right = 0 narrower than a contiguous shard
            costs one hop; one that looks right needs the next rank's shard, which comes round last.
        softcap: as in ``flash_attn_func``, ``softcap * tanh(scores / softcap)`` after scaling; 0 for none.

    Returns:
        out: (batch, seqlen / W, nheads, headdim), this rank's output shard, in q's dtype. The partial outputs
            are merged in float32.
    """
    validate_attention_inputs(
        q,
        k,
        v,
        layout="bshd",
        softmax_scale=softmax_scale,
        causal=causal,
        scale_name="softmax_scale",
        causal_name="causal",
    )
    _check_layout(layout)
    validate_window_and_softcap(window_size, softcap)
    window, softcap = tuple(window_size), float(softcap)
    if q.shape[1] != k.shape[1]:
        raise ValueError(
            f"q has {q.shape[1]} tokens and k {k.shape[1]}: ring attention shards one sequence, "
            "so every rank's q, k and v shards have the same length"
        )
    if layout == "zigzag" and q.shape[1] % 2 != 0:
        raise ValueError(
            f"a zigzag shard holds two equal chunks, but this one has {q.shape[1]} tokens (odd); "
            "cut the sequence with zigzag_shard, into 2 * world_size chunks"
        )
    ring = _Ring(_resolve_group(group))
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    softmax_scale = float(softmax_scale)
    if ring.size == 1:
        return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window, softcap=softcap)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _RingFlashAttention.apply(q, k, v, softmax_scale, causal, layout, ring, window, softcap)
    return _ring_forward(q, k, v, softmax_scale, causal, layout, ring, window, softcap)[0]
