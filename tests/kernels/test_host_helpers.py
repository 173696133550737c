"""The kernels' host-side integer helpers agree with Triton's own, which they replace for host time."""

import torch
import triton

from flashdoc.kernels import cdiv, next_power_of_2
from flashdoc.kernels.decode import _append_key, _plan_key, num_splits_heuristic


def test_cdiv_and_next_power_of_2_match_triton():
    for n in range(0, 4097):
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for d in (1, 3, 16, 64, 100, 128, 192):
            assert cdiv(n, d) == triton.cdiv(n, d), (n, d)


def test_split_heuristic_is_cached():
    # The benchmark's sweep and the occupancy snippet ask the same question many times over.
    num_splits_heuristic.cache_clear()
    first = num_splits_heuristic(8, 264, 1024)
    assert num_splits_heuristic(8, 264, 1024) == first
    assert num_splits_heuristic.cache_info().hits == 1


def _decode_args(page_size=None, seqlen_const=0):
    """decode_attention's key arguments for a batch of 2 (32 query heads over 8, d = 128): up to num_splits, then
    cache_leftpad."""
    q = torch.zeros(2, 1, 32, 128, dtype=torch.bfloat16)
    table = None
    if page_size is None:
        k_cache = torch.zeros(2, 256, 8, 128, dtype=torch.bfloat16)
    else:
        k_cache = torch.zeros(2 * 256 // page_size, page_size, 8, 128, dtype=torch.bfloat16)
        table = torch.arange(2 * 256 // page_size, dtype=torch.int32).reshape(2, -1)
    out, lse = torch.empty_like(q), torch.empty(2, 32, 1)
    seqlens = torch.full((2,), 100, dtype=torch.int32)
    return [
        q,
        k_cache,
        k_cache.clone(),
        out,
        lse,
        seqlens,
        seqlen_const,
        0,
        None,
        table,
        True,
        (-1, -1),
        0.0,
        None,
        0,
        None,
    ]


def test_decode_plan_key_tells_apart_what_the_launch_depends_on():
    """A decode step's plan (its split count, meta-parameters and compiled launchers) is reused for a later
    call only when everything it was worked out from is the same: new tensors of the same layout share one,
    while another page size, split count, option, an int of another Triton signature, or a pointer off the
    16-byte alignment must not."""
    key = _plan_key(*_decode_args())
    assert _plan_key(*_decode_args()) == key  # new tensors, same layout
    assert _plan_key(*_decode_args(page_size=16)) != key
    assert _plan_key(*_decode_args(page_size=16)) != _plan_key(*_decode_args(page_size=64))
    assert _plan_key(*_decode_args(seqlen_const=32)) == _plan_key(*_decode_args(seqlen_const=48))
    assert _plan_key(*_decode_args(seqlen_const=32)) != _plan_key(*_decode_args(seqlen_const=33))
    leftpad = torch.zeros(2, dtype=torch.int32)
    for position, value in ((10, False), (11, (64, 0)), (12, 30.0), (13, torch.ones(32)), (14, 4), (15, leftpad)):
        args = _decode_args()
        args[position] = value
        assert _plan_key(*args) != key, position
    args = _decode_args()
    args[0] = torch.zeros(2 * 32 * 128 + 1, dtype=torch.bfloat16)[1:].view(2, 1, 32, 128)  # 2 bytes off
    assert _plan_key(*args) != key


def _append_args(rotary=True, seqlen_const=0):
    """append_kv's key arguments for one new token of a batch of 2 (32 query heads over 8, d = 128, a contiguous
    cache of 256 rows): q, k, v, q_rot, the caches, lengths, int length, batch index, table, cos, sin, the
    rotary layout and whether queries rotate at their own positions."""
    q = torch.zeros(2, 1, 32, 128, dtype=torch.bfloat16)
    k, v = (torch.zeros(2, 1, 8, 128, dtype=torch.bfloat16) for _ in range(2))
    k_cache, v_cache = (torch.zeros(2, 256, 8, 128, dtype=torch.bfloat16) for _ in range(2))
    cos, sin = (torch.zeros(256, 64, dtype=torch.bfloat16) for _ in range(2)) if rotary else (None, None)
    seqlens = torch.full((2,), 100, dtype=torch.int32)
    q_rot = torch.empty_like(q) if rotary else q
    return [q, k, v, q_rot, k_cache, v_cache, seqlens, seqlen_const, None, None, cos, sin, False, True]


def test_append_plan_key_tells_apart_what_the_launch_depends_on():
    """The append's plan (grid, constexprs, int arguments, launcher) is reused only for a call of the same
    layout: not with rotary on or off, another rotary layout or query positions, more new tokens, an int of
    another Triton signature, a sin table of another dtype, or a pointer off the 16-byte alignment."""
    key = _append_key(*_append_args())
    assert _append_key(*_append_args()) == key  # new tensors, same layout
    assert _append_key(*_append_args(rotary=False)) != key
    args = _append_args()
    args[0], args[1], args[2] = (torch.zeros(2, 1, 8, 128, dtype=torch.bfloat16) for _ in range(3))  # q as k
    rotate_only = list(args)
    rotate_only[1] = rotate_only[2] = rotate_only[0]  # no new keys: q stands in for k and v
    assert _append_key(*args) != _append_key(*rotate_only)
    assert _append_key(*_append_args(seqlen_const=32)) == _append_key(*_append_args(seqlen_const=48))
    assert _append_key(*_append_args(seqlen_const=32)) != _append_key(*_append_args(seqlen_const=33))
    for position, value in (
        (1, torch.zeros(2, 2, 8, 128, dtype=torch.bfloat16)),
        (11, torch.zeros(256, 64, dtype=torch.float32)),
        (12, True),
        (13, False),
    ):
        args = _append_args()
        args[position] = value
        assert _append_key(*args) != key, position
    args = _append_args()
    args[4] = torch.zeros(2 * 256 * 8 * 128 + 1, dtype=torch.bfloat16)[1:].view(2, 256, 8, 128)  # 2 bytes off
    assert _append_key(*args) != key
