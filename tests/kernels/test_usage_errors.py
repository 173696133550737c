"""The errors the usage page promises, for bad input the other error tests do not try: NaN and infinite options,
tensors and NumPy scalars where a Python number or bool is expected, zero-size dimensions, expanded (stride-0)
index tensors, cu_seqlens' values on the CPU, the KV cache's index tensors and rotary tables, the ring's group,
and the padding helpers. Each call fails before any kernel runs, with the argument's name.

The last tests hold input that once crashed inside torch or returned garbage: an expanded cache taking appends,
scales float32 cannot hold, sparse and nested tensors, and windows past int64. Those marked ``xfail(strict=True)``
are bugs still open: they pass (and so fail strictly) once the bug is fixed."""

import numpy as np
import pytest
import torch
from attention_oracle import DEVICE

import flashdoc.flash_attn_interface as fai
from flashdoc import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, scaled_dot_product_attention
from flashdoc.bert_padding import pad_input, unpad_input
from flashdoc.parallel import ring_flash_attn_func, zigzag_shard, zigzag_unshard

NAN, INF = float("nan"), float("inf")


def t(*shape, dtype=torch.float16, device=DEVICE):
    return torch.randn(*shape).to(device=device, dtype=dtype)


def i32(*values, device=DEVICE):
    return torch.tensor(values, dtype=torch.int32, device=device)


# ---------------------------------------------------------------------------------------------------------------
# flash_attn_func: q, k, v (2, 8, 4, 32) in flash-attn's layout
# ---------------------------------------------------------------------------------------------------------------

DENSE = (2, 8, 4, 32)


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: dict(softmax_scale=NAN), ValueError, r"softmax_scale must be a finite number > 0 .*got nan"),
        (lambda: dict(softmax_scale=INF), ValueError, r"softmax_scale must be a finite number > 0 .*got inf"),
        (lambda: dict(softmax_scale=torch.tensor(0.1)), TypeError, "softmax_scale must be a float or None, got Tensor"),
        (lambda: dict(softmax_scale=True), TypeError, "softmax_scale must be a float or None, got bool"),
        (lambda: dict(softcap=NAN), ValueError, "softcap must be a finite float >= 0"),
        (lambda: dict(softcap=torch.tensor(2.0)), TypeError, "softcap must be a float, got Tensor"),
        (lambda: dict(dropout_p=NAN), ValueError, r"dropout_p must be in \[0, 1\)"),
        (lambda: dict(dropout_p=torch.tensor(0.1)), TypeError, "dropout_p must be a float, got Tensor"),
        (lambda: dict(window_size=(True, 0)), TypeError, "window_size must be a pair of ints"),
        (lambda: dict(window_size=(np.int64(2), 0)), TypeError, "window_size must be a pair of ints"),
        (lambda: dict(window_size=torch.tensor([2, 0])), TypeError, "window_size must be a pair of ints"),
        (lambda: dict(causal=np.bool_(True)), TypeError, "causal must be a bool, got numpy.bool"),
        (lambda: dict(deterministic=1), TypeError, "deterministic must be a bool, got int"),
        (lambda: dict(return_lse=None), TypeError, "return_lse must be a bool, got NoneType"),
        (lambda: dict(alibi_slopes=torch.tensor(0.1, device=DEVICE)), ValueError, r"alibi_slopes has shape \(\)"),
        (
            lambda: dict(q=t(*DENSE, dtype=torch.bool), k=t(*DENSE, dtype=torch.bool), v=t(*DENSE, dtype=torch.bool)),
            TypeError,
            "q has dtype torch.bool; allowed: torch.float16, torch.bfloat16, torch.float32",
        ),
        (lambda: dict(q=t(2, 0, 4, 32)), ValueError, r"q must have batch, heads and seqlen >= 1, got shape \(2, 0"),
        (
            lambda: dict(q=t(0, 8, 4, 32), k=t(0, 8, 4, 32), v=t(0, 8, 4, 32)),
            ValueError,
            r"q must have batch, heads and seqlen >= 1, got shape \(0, 8",
        ),
        (
            lambda: dict(q=t(2, 8, 0, 32), k=t(2, 8, 0, 32), v=t(2, 8, 0, 32)),
            ValueError,
            r"q must have batch, heads and seqlen >= 1, got shape \(2, 8, 0",
        ),
        (lambda: dict(k=t(2, 8, 0, 32), v=t(2, 8, 0, 32)), ValueError, r"q heads \(4\) must be a multiple of k heads"),
    ],
)
def test_flash_attn_func_rejects(make, exc, match):
    args = dict(q=t(*DENSE), k=t(*DENSE), v=t(*DENSE))
    args.update(make())
    with pytest.raises(exc, match=match):
        flash_attn_func(**args)


def test_flash_attn_func_takes_strided_and_expanded_inputs():
    """Non-contiguous inputs are supported, expanded (stride-0) ones and ALiBi slopes that are views included:
    the result is that of the same values made contiguous."""
    q, k = t(2, 8, 4, 32, dtype=torch.float32), t(1, 8, 4, 32, dtype=torch.float32).expand(2, 8, 4, 32)
    v = t(2, 4, 8, 32, dtype=torch.float32).transpose(1, 2)
    slopes = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]], device=DEVICE).t()  # (2, 4), strided
    out = flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    want = flash_attn_func(q, k.contiguous(), v.contiguous(), causal=True, alibi_slopes=slopes.contiguous())
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# scaled_dot_product_attention: (2, 4, 8, 32) in PyTorch's layout
# ---------------------------------------------------------------------------------------------------------------

SDPA = (2, 4, 8, 32)


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: dict(query=t(2, 8, 32), key=t(2, 8, 32), value=t(2, 8, 32)), ValueError, "query must be 4-D"),
        (lambda: dict(enable_gqa=1), TypeError, "enable_gqa must be a bool, got int"),
        (lambda: dict(dropout_p=NAN), ValueError, r"dropout_p must be in \[0, 1\)"),
        (lambda: dict(scale=NAN), ValueError, "scale must be a finite number > 0"),
        (lambda: dict(value=t(2, 4, 8, 16)), ValueError, "query, key and value must share one head_dim"),
        (lambda: dict(query=t(2, 4, 0, 32)), ValueError, r"query must have batch, heads and seqlen >= 1"),
        (lambda: dict(key=t(2, 4, 0, 32), value=t(2, 4, 0, 32)), ValueError, "key has zero keys"),
    ],
)
def test_sdpa_rejects(make, exc, match):
    args = dict(query=t(*SDPA), key=t(*SDPA), value=t(*SDPA))
    args.update(make())
    with pytest.raises(exc, match=match):
        scaled_dot_product_attention(**args)


# ---------------------------------------------------------------------------------------------------------------
# flash_attn_varlen_func: two sequences of 3 and 5 tokens
# ---------------------------------------------------------------------------------------------------------------


def _varlen_args(**kw):
    args = dict(
        q=t(8, 4, 32),
        k=t(8, 4, 32),
        v=t(8, 4, 32),
        cu_seqlens_q=i32(0, 3, 8),
        cu_seqlens_k=i32(0, 3, 8),
        max_seqlen_q=5,
        max_seqlen_k=5,
    )
    args.update(kw)
    return args


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: dict(max_seqlen_q=torch.tensor(5)), TypeError, "max_seqlen_q must be an int .*got Tensor"),
        (lambda: dict(max_seqlen_k=np.int64(5)), TypeError, "max_seqlen_k must be an int .*got numpy.int64"),
        (
            lambda: dict(cu_seqlens_q=torch.tensor(0, dtype=torch.int32, device=DEVICE)),
            ValueError,
            r"cu_seqlens_q must be 1-D of shape \(batch \+ 1,\) with batch >= 1 .*got shape \(\)",
        ),
        (lambda: dict(cu_seqlens_k=i32(0, 3, 8).bool()), TypeError, "cu_seqlens_k has dtype torch.bool"),
        (
            lambda: dict(cu_seqlens_q=i32(0).expand(3)),
            ValueError,
            r"cu_seqlens_q must be contiguous, got stride 0; call \.contiguous\(\)",
        ),
        (lambda: dict(q=t(8, 0, 32), k=t(8, 0, 32), v=t(8, 0, 32)), ValueError, "q must have heads >= 1"),
        (lambda: dict(k=t(8, 0, 32), v=t(8, 0, 32)), ValueError, r"q heads \(4\) must be a multiple of k heads \(0\)"),
        (lambda: dict(q=t(8, 4, 0), k=t(8, 4, 0), v=t(8, 4, 0)), ValueError, "head_dim is 0; allowed: 1 to 256"),
        (lambda: dict(q=t(8, 4, 300), k=t(8, 4, 300), v=t(8, 4, 300)), ValueError, "head_dim is 300; allowed"),
        (lambda: dict(window_size=[1.0, 0]), TypeError, "window_size must be a pair of ints"),
        (lambda: dict(softcap=torch.tensor(1.0)), TypeError, "softcap must be a float, got Tensor"),
        (lambda: dict(return_attn_probs=1), TypeError, "return_attn_probs must be a bool"),
    ],
)
def test_varlen_rejects(make, exc, match):
    with pytest.raises(exc, match=match):
        flash_attn_varlen_func(**_varlen_args(**make()))


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU tensors only: on a GPU the values wait for FLASHDOC_DEBUG_VARLEN")
@pytest.mark.parametrize(
    "cu,max_seqlen,match",
    [
        (i32(1, 3, 8, device="cpu"), 5, "cu_seqlens_q must start at 0, got 1"),
        (i32(0, 6, 5, device="cpu"), 6, r"cu_seqlens_q must be non-decreasing, got \[0, 6, 5\]"),
        (i32(0, -2, 8, device="cpu"), 10, r"cu_seqlens_q must be non-decreasing, got \[0, -2, 8\]"),
        (i32(0, 3, 8, device="cpu"), 0, "max_seqlen_q is 0 but cu_seqlens_q holds a sequence of 5 tokens"),
    ],
)
def test_varlen_checks_cu_seqlens_values_on_the_cpu_without_the_switch(monkeypatch, cu, max_seqlen, match):
    """On the CPU every check of cu_seqlens' values runs without FLASHDOC_DEBUG_VARLEN, not only the totals."""
    monkeypatch.delenv("FLASHDOC_DEBUG_VARLEN", raising=False)
    with pytest.raises(ValueError, match=match):
        flash_attn_varlen_func(**_varlen_args(cu_seqlens_q=cu, max_seqlen_q=max_seqlen))


# ---------------------------------------------------------------------------------------------------------------
# flash_attn_with_kvcache: q (2, 1, 4, 32) over caches (2, 64, 2, 32)
# ---------------------------------------------------------------------------------------------------------------


def _kv_args(**kw):
    args = dict(q=t(2, 1, 4, 32), k_cache=t(2, 64, 2, 32), v_cache=t(2, 64, 2, 32), cache_seqlens=i32(0, 0))
    args.update(kw)
    return args


def _new(n=1):
    return t(2, n, 2, 32)


def _paged(page=16, **kw):
    return dict(k_cache=t(8, page, 2, 32), v_cache=t(8, page, 2, 32), **kw)


def _rotary(rows=64, half=8, dtype=torch.float16, device=DEVICE):
    return dict(
        k=_new(),
        v=_new(),
        rotary_cos=torch.ones(rows, half, dtype=dtype, device=device),
        rotary_sin=torch.ones(rows, half, dtype=dtype, device=device),
    )


TABLE = (0, 1, 2, 3, 4, 5, 6, 7)


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: dict(cache_seqlens=3.0), TypeError, "cache_seqlens must be an int, got float"),
        (lambda: dict(cache_seqlens=np.int64(3)), TypeError, "cache_seqlens must be an int, got numpy.int64"),
        (lambda: dict(cache_seqlens=[0, 0]), TypeError, "cache_seqlens must be an int, got list"),
        (lambda: dict(cache_seqlens=-1), ValueError, "cache_seqlens must be an int >= 0, got -1"),
        (
            lambda: dict(cache_seqlens=torch.tensor(3, dtype=torch.int32, device=DEVICE)),
            ValueError,
            r"cache_seqlens must have shape \(batch=2,\), got \(\)",
        ),
        (
            lambda: dict(cache_seqlens=i32(3).expand(2)),
            ValueError,
            r"cache_seqlens must have a unit last stride \(call \.contiguous\(\) on it\)",
        ),
        (lambda: dict(k=_new().float(), v=_new().float()), TypeError, "k has dtype torch.float32 but q has"),
        (lambda: dict(k=t(2, 1, 32), v=t(2, 1, 32)), ValueError, "k must be 4-D"),
        (lambda: dict(q=t(2, 1, 4, 32, 1)), ValueError, "q must be 4-D"),
        (lambda: dict(q=t(2, 0, 4, 32)), ValueError, r"q must have batch, seqlen and heads >= 1"),
        (
            lambda: dict(q=t(2, 1, 4, 20), k_cache=t(2, 64, 2, 20), v_cache=t(2, 64, 2, 20)),
            ValueError,
            "head_dim is 20; allowed: a multiple of 8 from 8 to 256",
        ),
        (
            lambda: dict(k_cache=t(2, 64, 2, 64)[..., ::2]),
            ValueError,
            "k_cache must have a unit last stride: it is written in place",
        ),
        (lambda: dict(v_cache=t(2, 64, 2, 32).float()), TypeError, "v_cache has dtype torch.float32 but q has"),
        (
            lambda: _paged(block_table=torch.tensor(TABLE, device=DEVICE).float().reshape(2, 4)),
            TypeError,
            "block_table has dtype torch.float32; allowed: torch.int32",
        ),
        (lambda: _paged(block_table=[[0, 1], [2, 3]]), TypeError, "block_table must be a torch.Tensor .*got list"),
        (lambda: _paged(block_table=i32(*TABLE)), ValueError, r"block_table must be a 2-D tensor .*got \(8,\)"),
        (
            lambda: _paged(block_table=torch.zeros(2, 0, dtype=torch.int32, device=DEVICE)),
            ValueError,
            "block_table must list at least one page per sequence",
        ),
        (
            lambda: _paged(block_table=i32(*TABLE).reshape(4, 2).t()),
            ValueError,
            r"block_table must have a unit last stride \(call \.contiguous\(\) on it\)",
        ),
        (
            lambda: _paged(page=8, block_table=i32(*TABLE).reshape(2, 4)),
            ValueError,
            r"page_size \(k_cache.shape\[1\] with a block_table\) is 8; allowed: a multiple of 16",
        ),
        (
            lambda: dict(cache_batch_idx=torch.zeros(2, device=DEVICE)),
            TypeError,
            "cache_batch_idx has dtype torch.float32; allowed: torch.int32 or torch.int64",
        ),
        (
            lambda: dict(cache_batch_idx=i32(0, 9, 1, 9)[::2]),
            ValueError,
            "cache_batch_idx must have a unit last stride",
        ),
        (lambda: dict(num_splits=2.0), TypeError, "num_splits must be an int, got float"),
        (lambda: dict(num_splits=np.int64(2)), TypeError, "num_splits must be an int, got numpy.int64"),
        (lambda: dict(softmax_scale=NAN), ValueError, "softmax_scale must be a finite number > 0 .*got nan"),
        (lambda: dict(softmax_scale=-INF), ValueError, "softmax_scale must be a finite number > 0 .*got -inf"),
        (lambda: dict(window_size=(3.0, 0)), TypeError, "window_size must be a pair of ints"),
        (lambda: dict(softcap=torch.tensor(1.0)), TypeError, "softcap must be a float, got Tensor"),
        (lambda: dict(alibi_slopes=[1.0] * 4), TypeError, "alibi_slopes must be a float32 tensor"),
        (lambda: dict(alibi_slopes=torch.ones(4, device="meta")), ValueError, "alibi_slopes is on meta but q is on"),
        (lambda: dict(return_softmax_lse=1), TypeError, "return_softmax_lse must be a bool, got int"),
        (
            lambda: _rotary(dtype=torch.float64),
            TypeError,
            "rotary_cos has dtype torch.float64; allowed: torch.float16, torch.bfloat16, torch.float32",
        ),
        (
            lambda: _rotary(dtype=torch.int32),
            TypeError,
            "rotary_cos has dtype torch.int32; allowed:",
        ),
        (
            lambda: _rotary(device="meta"),
            ValueError,
            "rotary_cos is on meta but q is on",
        ),
        (
            lambda: _rotary(rows=10),
            ValueError,
            "rotary_cos has 10 positions but the cache holds 64: it needs one row per cache position",
        ),
        (
            lambda: _rotary(half=32),
            ValueError,
            r"rotary_dim \(2 x rotary_cos.shape\[1\]\) is 64; allowed: a multiple of 16 up to head_dim \(32\)",
        ),
        (
            lambda: {**_rotary(), "rotary_cos": _rotary()["rotary_cos"][0]},
            ValueError,
            r"rotary_cos must be a 2-D tensor \(seqlen_ro, rotary_dim / 2\), got \(8,\)",
        ),
        (
            lambda: {**_rotary(), "rotary_cos": _rotary()["rotary_cos"].t().contiguous().t()},
            ValueError,
            r"rotary_cos must have a unit last stride \(call \.contiguous\(\) on it\)",
        ),
        (
            lambda: {**_rotary(), "rotary_cos": [[1.0] * 8] * 64},
            TypeError,
            r"rotary_cos must be a torch.Tensor \(seqlen_ro, rotary_dim / 2\), got list",
        ),
        (
            lambda: dict(k_cache=t(2, 64, 0, 32), v_cache=t(2, 64, 0, 32)),
            ValueError,
            r"q heads \(4\) must be a multiple of k_cache heads \(0\)",
        ),
    ],
)
def test_kvcache_rejects(make, exc, match):
    with pytest.raises(exc, match=match):
        flash_attn_with_kvcache(**_kv_args(**make()))


@pytest.mark.parametrize(
    "slopes,exc",
    [
        (lambda: [0.1] * 4, TypeError),
        (lambda: torch.ones(4, dtype=torch.float64, device=DEVICE), TypeError),
        (lambda: torch.ones(3, device=DEVICE), ValueError),
        (lambda: torch.ones(4, 2, device=DEVICE), ValueError),
        (lambda: torch.ones(4, device="meta"), ValueError),
    ],
    ids=["list", "float64", "nheads", "transposed", "device"],
)
def test_kvcache_and_flash_attn_func_refuse_slopes_in_one_wording(slopes, exc):
    """One check of alibi_slopes for both entry points: the same error, word for word, for the same batch and
    heads (q (2, 1, 4, 32) in both)."""
    q = t(2, 1, 4, 32)
    with pytest.raises(exc) as kvcache_error:
        flash_attn_with_kvcache(**_kv_args(q=q, alibi_slopes=slopes()))
    with pytest.raises(exc) as flash_error:
        flash_attn_func(q, t(2, 8, 2, 32), t(2, 8, 2, 32), alibi_slopes=slopes())
    assert str(kvcache_error.value) == str(flash_error.value)
    assert str(kvcache_error.value).startswith("alibi_slopes ")


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU tensors only: on a GPU the values wait for FLASHDOC_DEBUG_CHECKS")
@pytest.mark.parametrize("cache_seqlens", [20, i32(20, 20, device="cpu"), None], ids=["int", "tensor", "full"])
def test_kvcache_checks_block_table_entries_on_the_cpu(cache_seqlens):
    """A block_table entry past the pool, among the pages a sequence uses, is refused on the CPU without
    FLASHDOC_DEBUG_CHECKS, whichever form the lengths take."""
    table = i32(*TABLE, device="cpu").reshape(2, 4) + 8
    with pytest.raises(ValueError, match=r"block_table\[0\] names pages outside 0..7 among its first"):
        flash_attn_with_kvcache(**_kv_args(**_paged(block_table=table), cache_seqlens=cache_seqlens))


# ---------------------------------------------------------------------------------------------------------------
# flash-attn's packed functions and padding helpers
# ---------------------------------------------------------------------------------------------------------------


def test_packed_functions_name_the_tensors_passed():
    cu = i32(0, 3, 8)
    with pytest.raises(TypeError, match="cu_seqlens must be a torch.Tensor, got list"):
        fai.flash_attn_varlen_qkvpacked_func(t(8, 3, 2, 16), [0, 3, 8], 5)
    with pytest.raises(TypeError, match="q has dtype torch.int32"):
        fai.flash_attn_kvpacked_func(t(1, 8, 2, 16).int(), t(1, 8, 2, 2, 16))
    with pytest.raises(ValueError, match=r"kv must have shape \(total_k, 2, nheads_k, headdim\), got \(2, 8, 2, 16\)"):
        fai.flash_attn_varlen_kvpacked_func(t(8, 2, 16), t(2, 8, 2, 16), cu, cu, 5, 5)


@pytest.mark.parametrize(
    "unused,exc,match",
    [
        (torch.zeros(2, 5), TypeError, r"unused_mask must be bool or integer .*unused_mask.bool\(\)"),
        (torch.zeros(2, 4, dtype=torch.bool), ValueError, r"unused_mask must have shape \(batch, seqlen\) = \(2, 5\)"),
    ],
)
def test_unpad_input_names_a_bad_unused_mask(unused, exc, match):
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    with pytest.raises(exc, match=match):
        unpad_input(torch.zeros(2, 5, 8), mask, unused)


# ---------------------------------------------------------------------------------------------------------------
# Ring attention: checked before the process group is looked up, so no group is needed
# ---------------------------------------------------------------------------------------------------------------


def _shard(seqlen=4):
    return torch.zeros(1, seqlen, 2, 16, device=DEVICE)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(softmax_scale=NAN), ValueError, "softmax_scale must be a finite number > 0"),
        (dict(window_size=[1.0, 0]), TypeError, "window_size must be a pair of ints"),
        (dict(softcap=torch.tensor(1.0)), TypeError, "softcap must be a float, got Tensor"),
        (dict(layout=None), ValueError, r"layout must be one of \('contiguous', 'zigzag'\), got None"),
    ],
)
def test_ring_rejects(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ring_flash_attn_func(_shard(), _shard(), _shard(), **kwargs)


@pytest.mark.parametrize("group", ["world", 0])
def test_ring_rejects_a_group_of_another_type(monkeypatch, group):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    with pytest.raises(TypeError, match="group must be a torch.distributed ProcessGroup, a 1-D DeviceMesh or None"):
        ring_flash_attn_func(_shard(), _shard(), _shard(), group=group)


def test_zigzag_shard_rejects_a_world_size_or_rank_of_another_type():
    with pytest.raises(TypeError, match="world_size must be an int, got float"):
        zigzag_shard(torch.zeros(1, 8, 2, 16), 2.0, 0)
    with pytest.raises(TypeError, match="rank must be an int, got numpy.int64"):
        zigzag_shard(torch.zeros(1, 8, 2, 16), 2, np.int64(0))


# ---------------------------------------------------------------------------------------------------------------
# Bugs: a crash inside torch, or garbage, where the page's rule asks for a clear error
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("expand", ["batch", "seqlen"])
def test_kvcache_refuses_an_expanded_cache_it_would_write(expand):
    """An expanded cache's rows share memory: appends to one sequence would overwrite the others'."""
    shape = (1, 64, 2, 32) if expand == "batch" else (2, 1, 2, 32)
    k_cache, v_cache = (t(*shape).expand(2, 64, 2, 32) for _ in range(2))
    with pytest.raises(ValueError, match=r"k_cache has a zero stride .*cannot take appended k and v"):
        flash_attn_with_kvcache(**_kv_args(k_cache=k_cache, v_cache=v_cache, k=_new(), v=_new()))
    # reading one is fine: nothing is written
    out = flash_attn_with_kvcache(**_kv_args(k_cache=k_cache, v_cache=v_cache, cache_seqlens=i32(5, 7)))
    assert torch.isfinite(out).all() and out.abs().sum() > 0


@pytest.mark.parametrize("view", ["one-tensor", "one-address"])
def test_kvcache_refuses_one_memory_as_both_caches(view):
    """Passed the same memory twice, each appended value would overwrite its key. Two views of one buffer that do
    not share an address (keys and values side by side in one allocation) stay allowed."""
    both = t(2, 64, 2, 2, 32)
    k_cache = both[:, :, :, 0]
    v_cache = k_cache if view == "one-tensor" else both[:, :, :, 0][:]  # another view at the same address
    with pytest.raises(ValueError, match=r"k_cache and v_cache are the same memory .*torch.empty_like\(k_cache\)"):
        flash_attn_with_kvcache(**_kv_args(k_cache=k_cache, v_cache=v_cache, k=_new(), v=_new()))
    flash_attn_with_kvcache(**_kv_args(k_cache=k_cache, v_cache=both[:, :, :, 1], k=_new(), v=_new()))


def test_alibi_slopes_that_require_grad_are_refused_while_grad_is_on():
    """The kernels give the slopes no gradient (as flash-attn's do not): learned slopes would stay untrained
    without a word. Under no_grad, or detached, the same slopes are fine."""
    q, k, v = (t(1, 8, 2, 16, dtype=torch.float32).requires_grad_() for _ in range(3))
    slopes = torch.rand(2, device=DEVICE).requires_grad_()
    with pytest.raises(ValueError, match=r"alibi_slopes requires grad, .*pass alibi_slopes.detach\(\)"):
        flash_attn_func(q, k, v, alibi_slopes=slopes)
    with torch.no_grad():
        expected = flash_attn_func(q, k, v, alibi_slopes=slopes)
    torch.testing.assert_close(flash_attn_func(q, k, v, alibi_slopes=slopes.detach()).detach(), expected)


@pytest.mark.parametrize(
    "options,name",
    [
        (dict(softmax_scale=1e39), "softmax_scale"),
        (dict(softmax_scale=1e-50), "softmax_scale"),
        (dict(softcap=1e39), "softcap"),
        (dict(softcap=1e-50), "softcap"),
    ],
    ids=["scale-overflow", "scale-underflow", "softcap-overflow", "softcap-underflow"],
)
def test_options_that_float32_cannot_hold_are_refused(options, name):
    """Finite as Python floats, these become inf or 0 in the kernels' float32, and every output NaN."""
    q = t(1, 8, 2, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match=rf"{name} is 1e[-+]\d+, which float32 \(the kernels' type\) cannot hold"):
        flash_attn_func(q, q, q, **options)
    with pytest.raises(ValueError, match=name):
        flash_attn_with_kvcache(**_kv_args(**options))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")  # building one warns
@pytest.mark.parametrize("layout", ["sparse", "nested"])
def test_a_sparse_or_nested_q_is_refused_by_name(layout):
    k = t(1, 8, 2, 16, dtype=torch.float32)
    q = k.to_sparse() if layout == "sparse" else torch.nested.nested_tensor([k[0], k[0, :4]])
    message = r"q has layout torch.sparse_coo; allowed: torch.strided" if layout == "sparse" else "q is a nested tensor"
    with pytest.raises(TypeError, match=message):
        flash_attn_func(q, k, k)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")  # building one warns
@pytest.mark.parametrize("argument", ["q", "k_cache"])
def test_kvcache_refuses_a_nested_tensor_by_name(argument):
    args = _kv_args()
    args[argument] = torch.nested.nested_tensor(list(args[argument].float()))
    with pytest.raises(TypeError, match=f"{argument} is a nested tensor"):
        flash_attn_with_kvcache(**args)


def test_a_window_wider_than_int64_is_refused_by_name():
    q = t(1, 8, 2, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"window_size sides must be at most 2\*\*63 - 1"):
        flash_attn_func(q, q, q, window_size=(2**64, 0))
    flash_attn_func(q, q, q, window_size=(2**63 - 1, 0))  # the widest an int64 holds still runs


@pytest.mark.parametrize("bad", ["batch too small", "2-D indices"])
def test_pad_input_refuses_indices_that_do_not_fit(bad):
    hidden, indices, _, _, _ = unpad_input(torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))
    if bad == "batch too small":
        with pytest.raises(ValueError, match=r"indices run from 0 to 9 but batch x seqlen = 1 x 5"):
            pad_input(hidden, indices, 1, 5)
    else:
        with pytest.raises(TypeError, match=r"indices must be a 1-D integer torch.Tensor"):
            pad_input(hidden, indices[None].expand(8, 8), 2, 5)


@pytest.mark.parametrize("bad", ["unpad list", "pad float batch"])
def test_padding_helpers_name_a_bad_argument(bad):
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    with pytest.raises(TypeError, match="hidden_states|batch"):
        if bad == "unpad list":
            unpad_input([[1.0] * 5] * 2, mask)
        else:
            hidden, indices, _, _, _ = unpad_input(torch.randn(2, 5, 8), mask)
            pad_input(hidden, indices, 2.0, 5)


@pytest.mark.parametrize("call", ["shard", "unshard"])
def test_zigzag_helpers_name_a_dim_out_of_range(call):
    x = torch.zeros(1, 8, 2, 16)
    with pytest.raises((ValueError, IndexError), match="dim"):
        if call == "shard":
            zigzag_shard(x, 2, 0, dim=5)
        else:
            zigzag_unshard([x, x], dim=7)
