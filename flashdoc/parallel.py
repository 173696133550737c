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
"""

from typing import NamedTuple, Optional, Sequence

import torch
import torch.distributed as dist

from ._validation import validate_attention_inputs
from .interface import _bwd_op, _fwd_op, first_order_only, flash_attn_func

__all__ = [
    "ring_flash_attn_func",
    "zigzag_shard",
    "zigzag_unshard",
    "ring_block",
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
    the block is causal (only the diagonal block, where queries and keys are the same tokens, is)."""

    q: slice
    kv: slice
    causal: bool


# --8<-- [start:schedule]
def ring_block(
    rank: int, step: int, world_size: int, seqlen: int, causal: bool, layout: str = "contiguous"
) -> Optional[RingBlock]:
    """The block rank ``rank`` computes at ring step ``step``, or None when the causal mask hides all of it.

    At step s, rank r holds the key/value shard of rank (r - s) mod W. ``seqlen`` is the local shard's length.
    Contiguous: the shard of an earlier rank is seen in full, a later one not at all. Zigzag (chunks r and
    2W-1-r): an earlier rank's early chunk is seen in full by both local chunks and its late chunk by neither;
    a later rank's two chunks are seen in full by the local late chunk only. Either way half a block.
    """
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


# ---------------------------------------------------------------------------------------------------------------
# Sharding helpers for the zigzag layout
# ---------------------------------------------------------------------------------------------------------------


def _check_rank(world_size, rank) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


def zigzag_shard(x: torch.Tensor, world_size: int, rank: int, dim: int = 1) -> torch.Tensor:
    """Rank ``rank``'s zigzag shard of the full tensor ``x``: cut dimension ``dim`` into 2 W equal chunks and
    return chunks ``rank`` and ``2W-1-rank``, concatenated. For W = 2 and chunks a b c d: rank 0 gets a d,
    rank 1 gets b c. ``dim=1`` is the sequence dimension of the (batch, seqlen, heads, head_dim) layout."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    _check_rank(world_size, rank)
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

    def pass_on(self, send: torch.Tensor, recv: torch.Tensor, tag: int):
        return dist.batch_isend_irecv(
            [
                dist.P2POp(dist.isend, send, self.next, self.group, tag),
                dist.P2POp(dist.irecv, recv, self.prev, self.group, tag),
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
    is weighted by its share of the softmax denominator, exp(lse - L) and exp(block_lse - L)."""
    new_lse = torch.logaddexp(lse, block_lse)
    old_weight = torch.exp(lse - new_lse).transpose(1, 2).unsqueeze(-1)
    new_weight = torch.exp(block_lse - new_lse).transpose(1, 2).unsqueeze(-1)
    # two passes over the (memory-bound) output, and no temporary of its size
    out.mul_(old_weight).addcmul_(block_out, new_weight)
    lse.copy_(new_lse)


# --8<-- [end:merge]


# --8<-- [start:forward]
def _ring_forward(q, k, v, softmax_scale: float, causal: bool, layout: str, ring: _Ring):
    """This rank's output (q's dtype) and LSE (fp32) over all ranks' keys."""
    seqlen = q.shape[1]
    kv = torch.stack((k, v))  # one message per hop instead of two
    out = lse = None
    for step in range(ring.size):
        last = step == ring.size - 1
        if not last:  # post the next hop first, so that it travels while this block computes
            kv_next = torch.empty_like(kv)
            in_flight = ring.pass_on(kv, kv_next, _KV_TAG)
        block = ring_block(ring.rank, step, ring.size, seqlen, causal, layout)
        if block is not None:
            block_out, block_lse = _fwd_op(
                q[:, block.q], kv[0][:, block.kv], kv[1][:, block.kv], softmax_scale, block.causal, True
            )
            if out is None:  # step 0, the diagonal block, covers every local query
                out, lse = block_out.float(), block_lse
            else:
                merge_partial(out[:, block.q], lse[:, :, block.q], block_out, block_lse)
        if not last:
            ring.wait(in_flight)
            kv = kv_next
    return out.to(q.dtype), lse


# --8<-- [end:forward]


# --8<-- [start:backward]
def _ring_backward(dout, q, k, v, out, lse, softmax_scale: float, causal: bool, layout: str, ring: _Ring):
    """dq, dk, dv of this rank's shards. The key/value shards go around as in the forward; next to each travels
    the fp32 sum of its gradient so far, which every rank adds its block's share to before passing it on. After
    W hops each sum is back at its owner, complete."""
    seqlen = q.shape[1]
    kv = torch.stack((k, v))
    dq = torch.zeros_like(q, dtype=torch.float32)
    dkv = torch.zeros_like(kv, dtype=torch.float32)  # the gradient sum of the shard held now
    dkv_next = dkv_in_flight = None
    for step in range(ring.size):
        last = step == ring.size - 1
        if not last:
            kv_next = torch.empty_like(kv)
            kv_in_flight = ring.pass_on(kv, kv_next, _KV_TAG)
        block = ring_block(ring.rank, step, ring.size, seqlen, causal, layout)
        if block is not None:
            # The final out and lse, not this block's own: P = exp(S - lse) is then this block's slice of the
            # full softmax, and delta = rowsum(dO * O) its full row term, so the blocks' gradients add up.
            rows, cols = block.q, block.kv
            dq_block, dk_block, dv_block = _bwd_op(
                dout[:, rows],
                q[:, rows],
                kv[0][:, cols],
                kv[1][:, cols],
                out[:, rows],
                lse[:, :, rows],
                None,
                softmax_scale,
                block.causal,
                True,
                False,
            )
        if dkv_in_flight is not None:  # the sum for the shard received this step, sent by the previous rank
            ring.wait(dkv_in_flight)
            dkv = dkv_next
        if block is not None:
            dq[:, rows] += dq_block
            dkv[0][:, cols] += dk_block
            dkv[1][:, cols] += dv_block
        dkv_next = torch.empty_like(dkv)
        dkv_in_flight = ring.pass_on(dkv, dkv_next, _DKV_TAG)
        if not last:
            ring.wait(kv_in_flight)
            kv = kv_next
    ring.wait(dkv_in_flight)  # the W-th hop brings this rank's own shard's gradient home
    dk, dv = dkv_next.to(k.dtype).unbind(0)
    return dq.to(q.dtype), dk, dv


# --8<-- [end:backward]


class _RingFlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, layout, ring):
        out, lse = _ring_forward(q, k, v, softmax_scale, causal, layout, ring)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.softmax_scale, ctx.causal, ctx.layout, ctx.ring = softmax_scale, causal, layout, ring
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(dout, q, k, v, out, lse, ctx.softmax_scale, ctx.causal, ctx.layout, ctx.ring)
        return dq, dk, dv, None, None, None, None


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


def ring_flash_attn_func(q, k, v, softmax_scale=None, causal=False, group=None, layout="contiguous"):
    """Exact attention over a sequence sharded across the ranks of a process group (ring attention).

    Every rank calls it with its own shard; the result is this rank's shard of
    ``flash_attn_func(q_full, k_full, v_full, softmax_scale=softmax_scale, causal=causal)``, and autograd
    gives this rank's shards of the gradients. Keys and values move around the ring with asynchronous
    ``batch_isend_irecv`` while the blocks compute; nothing waits on the host inside a step. Runs on NCCL
    (CUDA tensors) and gloo (CPU tensors, through Triton's interpreter).

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

    Returns:
        (batch, seqlen / W, nheads, headdim), this rank's output shard, in q's dtype. The partial outputs are
        merged in float32.
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
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
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
        return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _RingFlashAttention.apply(q, k, v, softmax_scale, causal, layout, ring)
    return _ring_forward(q, k, v, softmax_scale, causal, layout, ring)[0]
