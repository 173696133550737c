"""What the portable kernels share: the config tables' lookup, the launch grid and each program's place in it,
and the in-kernel descriptor of one (batch, head). ``forward.py`` and ``backward.py`` import these from here rather
than from each other; the masking rules live in ``mask.py``. Also the search for a varlen work item's sequence
(``find_item``): a ``@triton.jit`` function that the Hopper forward calls and the interpreter runs in tests."""

import torch
import triton
import triton.language as tl

from . import cdiv, next_power_of_2

# ---------------------------------------------------------------------------------------------------------------
# Config tables
# ---------------------------------------------------------------------------------------------------------------


def configs_for(table, block_d: int, dtype, causal: bool = False) -> list:
    """The candidates for this head dim (16 and 32 share the 64 entry), dtype and mask: a table's entry keyed
    (head dim, fp32?) serves both masks unless an entry keyed (head dim, fp32?, True) overrides it under the
    causal mask."""
    key = (max(block_d, 64), dtype == torch.float32 or dtype == tl.float32)
    return table.get((*key, True), table[key]) if causal else table[key]


def all_configs(table) -> list:
    """Every candidate in a table, for the autotuner (which ``prune_for`` narrows per launch)."""
    return [c for cs in table.values() for c in cs]


def prune_for(table):
    """An autotuner ``early_config_prune`` keeping ``table``'s candidates for the launch's head dim, Q dtype and
    mask (Q is a tensor or a host descriptor over one, depending on the kernel)."""

    def prune(configs, named_args, **kwargs):
        q = named_args["Q"]
        return configs_for(table, kwargs["BLOCK_D"], getattr(q, "base", q).dtype, kwargs["IS_CAUSAL"])

    return prune


def seq_bucket(n: int) -> int:
    """Autotune once per power-of-two bucket of sequence length, not once per exact length."""
    return min(next_power_of_2(n), 16384)


def block_d_for(head_dim: int) -> int:
    return max(16, next_power_of_2(head_dim))


def dot_precision(dtype: torch.dtype) -> str:
    # fp32 inputs get full-precision products (tf32 would be 1000x less exact than PyTorch's fp32 matmul)
    return "ieee" if dtype == torch.float32 else "tf32"


# ---------------------------------------------------------------------------------------------------------------
# The launch grid and a program's place in it
# ---------------------------------------------------------------------------------------------------------------


MAX_GRID_Y = 65535  # CUDA's limit on grid axis 1 (and 2); axis 0 allows 2**31 - 1
MIN_BLOCK = 16  # the shortest tile any config streams or keeps


def one_axis(seqlen: int, n_heads: int, causal: bool) -> bool:
    """Whether a launch needs the 1-D grid (``program_tile``'s ONE_AXIS): more (batch, head) pairs than grid
    axis 1 holds, or a causal launch whose tiles could land there (the across-heads order, at any tile size)."""
    return n_heads > MAX_GRID_Y or (causal and cdiv(seqlen, MIN_BLOCK) > MAX_GRID_Y)


def tile_grid(seqlen: int, block: str, n_heads: int, causal: bool):
    """The launch grid that ``program_tile`` reads, as a function of the chosen meta-parameters: one program
    per tile of ``seqlen`` (the meta-parameter ``block`` long) and head, laid out (tiles, heads), (heads, tiles)
    when a causal config launches its tiles across heads, or all on axis 0 (ONE_AXIS, see ``one_axis``)."""

    def grid(meta):
        n_tiles = cdiv(seqlen, meta[block])
        if meta["ONE_AXIS"]:
            return (n_tiles * n_heads,)
        return (n_heads, n_tiles) if causal and meta["ACROSS_HEADS"] else (n_tiles, n_heads)

    return grid


@triton.jit
def program_tile(
    n_tiles, IS_CAUSAL: tl.constexpr, HEAVIEST_LAST: tl.constexpr, ACROSS_HEADS: tl.constexpr, ONE_AXIS: tl.constexpr
):
    """(tile index, batch * head index) of this program, for the grid that ``tile_grid`` launches.

    Programs run roughly in launch order, and the grid is (tiles, heads): programs launched together share a
    head, whose K and V stay in L2. Under a causal mask tiles differ in cost, and the costliest go first
    (HEAVIEST_LAST: the last tile is the costliest). With ACROSS_HEADS (a tuning choice, causal only) the grid
    is (heads, tiles) and the costliest tiles of *all* heads go first, so no long tile starts near the end;
    that wins with one program per SM and loses L2 reuse when several programs share one.

    CUDA allows 65,535 programs on grid axis 1. Past that (more (batch, head) pairs, or more tiles in the
    across-heads order) the grid is 1-D: n_tiles x heads programs in the same order (ONE_AXIS), at the cost of
    two integer divisions per program. The usual launches keep two axes, so their compiled code stays the code
    that every measurement in benchmarks/FINDINGS.md was taken with.
    """
    if ONE_AXIS:
        pid = tl.program_id(0)
        if IS_CAUSAL and ACROSS_HEADS:
            n_heads = tl.num_programs(0) // n_tiles
            tile, head = pid // n_heads, pid % n_heads
        else:
            tile, head = pid % n_tiles, pid // n_tiles
    elif IS_CAUSAL and ACROSS_HEADS:
        tile, n_tiles, head = tl.program_id(1), tl.num_programs(1), tl.program_id(0)
    else:
        tile, n_tiles, head = tl.program_id(0), tl.num_programs(0), tl.program_id(1)
    if IS_CAUSAL and HEAVIEST_LAST:
        tile = n_tiles - 1 - tile
    return tile, head


@triton.jit
def find_item(i, offs, ORDER, CU, n_seqs, n_heads, ROWS: tl.constexpr, start, before):
    """(seq, local, start, before): the sequence holding varlen work item i (-1 past the last item) and i's place
    among that sequence's items, for a persistent program that claims items in increasing order (the Hopper
    forward's producer, ``forward_hopper._claim_packed``).

    Items are numbered sequence by sequence in ORDER (``varlen.schedule``), each sequence holding n_heads x
    cdiv(its length, ROWS) of them (its length from CU, cu_seqlens); ``local`` counts them head by head. As in
    ``varlen.find_tile``, a running sum of these counts over a chunk of sequences a step (offs = arange(0,
    chunk), in the caller's layout) finds the sequence; it starts at ORDER[start], whose sequences' items follow
    the ``before`` items of those before it, and returns where the next claim's search starts: the chunk where
    this one ended. (start, before) = (0, 0) searches from the first sequence."""
    seq = -1
    local = 0
    while (seq < 0) & (start < n_seqs):
        chunk = start + offs
        valid = chunk < n_seqs
        b = tl.load(ORDER + chunk, mask=valid, other=0)
        length = tl.load(CU + b + 1, mask=valid, other=0) - tl.load(CU + b, mask=valid, other=0)
        count = (length + ROWS - 1) // ROWS * n_heads
        end = before + tl.cumsum(count, 0)  # items up to and including each sequence
        hit = (i >= end - count) & (i < end)  # at most one, and only where count > 0
        seq = tl.max(tl.where(hit, b, -1), 0)
        local = tl.max(tl.where(hit, i - (end - count), 0), 0)
        found = seq >= 0
        start = tl.where(found, start, start + offs.shape[0])
        before = tl.where(found, before, before + tl.sum(count, 0))
    return seq, local, start, before


@triton.jit
def head_desc(base, seqlen, stride_s, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """A (seqlen, head_dim) view of one (batch, head), read and written in (BLOCK_S, BLOCK_D) tiles.

    On Hopper each tile moves with one TMA copy; rows past seqlen and the columns that pad head_dim to a power
    of two read as zeros and are never written, so no load or store needs a mask.
    """
    return tl.make_tensor_descriptor(
        base, shape=[seqlen, HEAD_DIM], strides=[stride_s, 1], block_shape=[BLOCK_S, BLOCK_D]
    )
