"""flash_attn_func against the float64 oracle with flash-attn's criterion (out, lse, dq, dk, dv).

CPU subset first (runs everywhere, through Triton's interpreter on CPU), then the GPU sweeps.
"""

import pytest
import torch
import triton
import triton.language as tl
from attention_oracle import (
    DEVICE,
    assert_close_like_flash_attn,
    attention_math,
    check_against_oracle,
    cpu_sweep,
    forward_backward,
    make_qkv,
)

import flashdoc
from flashdoc.kernels.common import MAX_GRID_Y, MIN_BLOCK, one_axis, program_tile, tile_grid

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _flash(causal, scale=None):
    def fn(q, k, v):
        return flashdoc.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)

    return fn


# --- CPU subset ------------------------------------------------------------------------------------------------


@cpu_sweep
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [40, 64])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(1, 17), (45, 20), (20, 45)])
def test_flash_attn(seqlen_q, seqlen_k, head_dim, causal, dtype):
    q, k, v = make_qkv(2, seqlen_q, seqlen_k, 2, 2, head_dim, dtype)
    check_against_oracle(_flash(causal), q, k, v, head_dim**-0.5, causal, bottom_right=True)


@cpu_sweep
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_heads,n_kv_heads", [(4, 2), (3, 1)], ids=["gqa", "mqa"])
def test_flash_attn_gqa(n_heads, n_kv_heads, causal, dtype):
    q, k, v = make_qkv(1, 33, 50, n_heads, n_kv_heads, 32, dtype)
    check_against_oracle(_flash(causal), q, k, v, 32**-0.5, causal, bottom_right=True)


@cpu_sweep
@pytest.mark.parametrize("head_dim", [8, 16, 72, 128])
def test_flash_attn_head_dims(head_dim):
    q, k, v = make_qkv(1, 37, 37, 2, 1, head_dim, torch.float16)
    check_against_oracle(_flash(True), q, k, v, head_dim**-0.5, True, bottom_right=True)


@pytest.mark.parametrize("scale", [0.05, 1.0])
def test_softmax_scale(scale):
    q, k, v = make_qkv(1, 24, 40, 2, 2, 32, torch.float32)
    check_against_oracle(_flash(False, scale), q, k, v, scale, False, bottom_right=True)


def test_no_silent_double_backward():
    """The backward is not itself differentiable. Gradients taken with create_graph=True raise when
    differentiated again, also in a gradient penalty mixed with terms that need no second derivative, instead of
    quietly leaving out the second-order term; a plain backward is untouched."""
    q, k, v = make_qkv(1, 12, 12, 2, 2, 16, torch.float32)
    (dq,) = torch.autograd.grad(flashdoc.flash_attn_func(q, k, v).square().sum(), q, create_graph=True)
    assert dq.requires_grad
    with pytest.raises(RuntimeError, match="no second derivative"):
        dq.square().sum().backward()
    weight = torch.randn(16, device=DEVICE, requires_grad=True)
    (dq,) = torch.autograd.grad((flashdoc.flash_attn_func(q, k, v) * weight).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="no second derivative"):
        (dq.square().sum() + weight.sum()).backward()
    (dq,) = torch.autograd.grad(flashdoc.flash_attn_func(q, k, v).sum(), q)
    assert not dq.requires_grad and torch.isfinite(dq).all()


def test_no_silent_double_backward_varlen():
    q, k, v = (torch.randn(10, 2, 16, device=DEVICE, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, 4, 10], device=DEVICE, dtype=torch.int32)
    out = flashdoc.flash_attn_varlen_func(q, k, v, cu, cu, 6, 6, causal=True)
    (dq,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="no second derivative"):
        dq.square().sum().backward()


def test_bottom_right_rows_without_keys_are_zero():
    # seqlen_q > seqlen_k, causal, bottom-right: the first seqlen_q - seqlen_k rows see no key
    q, k, v = make_qkv(1, 40, 9, 2, 2, 16, torch.float32)
    out, lse = flashdoc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.all(out[:, :31] == 0) and torch.all(out[:, 31:].abs().sum(-1) > 0)
    assert torch.all(lse[:, :, :31] == float("-inf")) and torch.isfinite(lse[:, :, 31:]).all()
    out.sum().backward()
    assert torch.all(q.grad[:, :31] == 0) and torch.isfinite(q.grad).all()
    check_against_oracle(_flash(True), *make_qkv(1, 40, 9, 2, 2, 16, torch.float32), 0.25, True, True)


# Under Triton's interpreter the exp2 of lanes past the keys' end overflows in numpy, which warns; no result uses them.
@pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_huge_logits_stay_finite(dtype):
    q, k, v = make_qkv(1, 40, 40, 2, 2, 32, dtype, scale=100.0)
    out, lse = flashdoc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    # PyTorch's own fp16 math overflows here, so compare to the oracle directly: logits ~1e4 make softmax
    # nearly one-hot, and the output must pick the right value rows
    out_ref, lse_ref = attention_math(q.detach(), k.detach(), v.detach(), 32**-0.5, True, True)
    err = (out.double() - out_ref).abs().max().item() / out_ref.abs().max().item()
    lse_err = (lse.double() - lse_ref.double()).abs().max().item() / lse_ref.abs().max().item()
    print(f"relative error: out {err:.2e}, lse {lse_err:.2e}")
    assert err < 1e-2 and lse_err < 1e-2
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


def test_non_contiguous_inputs():
    # q, k, v as views of one packed QKV projection (strides of a (B, S, 3, H, D) tensor), and a v whose
    # head_dim is not the last-stride-1 dimension (copied once by flashdoc)
    qkv = torch.randn(2, 30, 3, 2, 32, device=DEVICE, dtype=torch.float16)
    q, k, v = (qkv[:, :, i].requires_grad_() for i in range(3))
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    v = torch.randn(2, 30, 2, 32, device=DEVICE, dtype=torch.float16).transpose(-1, -2).contiguous()
    v = v.transpose(-1, -2).requires_grad_()
    q, k = qkv[:, :, 0].detach().requires_grad_(), qkv[:, :, 1].detach().requires_grad_()
    assert not q.is_contiguous() and v.stride(-1) != 1
    check_against_oracle(_flash(True), q, k, v, 32**-0.5, True, True)


@pytest.mark.parametrize("uses_out", [True, False], ids=["out_and_lse", "lse_only"])
def test_lse_gradient_flows(uses_out):
    # a loss that uses the returned LSE: d lse / d scores = P, folded into the backward's delta
    q, k, v = make_qkv(1, 20, 28, 2, 2, 16, torch.float32)
    out, lse = flashdoc.flash_attn_func(q, k, v, return_lse=True)
    w = torch.randn_like(lse)
    loss = (lse * w).sum() + (out.sum() if uses_out else 0)
    grads = torch.autograd.grad(loss, (q, k, v), allow_unused=True)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", qr, kr) * 16**-0.5
    lse_r = torch.logsumexp(s, -1)
    out_r = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), vr)
    loss_r = (lse_r * w.double()).sum() + (out_r.sum() if uses_out else 0)
    grads_r = torch.autograd.grad(loss_r, (qr, kr, vr), allow_unused=True)
    for name, a, b in zip("qkv", grads, grads_r):
        b = torch.zeros_like(vr) if b is None else b  # the LSE does not depend on v
        err = (a.double() - b).abs().max().item()
        print(f"d{name}: max err {err:.2e}")
        assert err < 1e-4


def test_out_matches_oracle_not_a_tautology():
    # the criterion must be able to fail: a wrong scale is caught
    q, k, v = make_qkv(1, 20, 20, 2, 2, 16, torch.float16)
    with pytest.raises(AssertionError):
        check_against_oracle(_flash(False, 0.3), q, k, v, 0.25, False, True, with_grads=False)


def test_causal_launch_order_changes_nothing_but_speed():
    """Causal tiles launch per head or across heads (a tuning choice): every output bit stays the same."""
    from flashdoc.kernels.backward import attn_bwd
    from flashdoc.kernels.forward import attn_fwd
    from flashdoc.kernels.launch import tile_config

    q, k, v = make_qkv(2, 70, 90, 4, 2, 32, torch.float16, requires_grad=False)
    dout = torch.randn_like(q)
    results = []
    for across_heads in (False, True):
        config = tile_config(32, 32, 1, 4, across_heads) if DEVICE == "cpu" else tile_config(64, 64, 2, 4, across_heads)
        out, lse = torch.empty_like(q), torch.empty(2, 4, 70, device=q.device, dtype=torch.float32)
        attn_fwd(q, k, v, out, lse, 32**-0.5, True, True, config=config)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        attn_bwd(dout, q, k, v, out, lse, None, dq, dk, dv, 32**-0.5, True, True, config=(config, config))
        results.append((out, lse, dq, dk, dv))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@triton.jit
def _record_program_tiles(
    TILE,
    HEAD,
    n_tiles,
    IS_CAUSAL: tl.constexpr,
    HEAVIEST_LAST: tl.constexpr,
    ACROSS_HEADS: tl.constexpr,
    ONE_AXIS: tl.constexpr,
):
    tile, head = program_tile(n_tiles, IS_CAUSAL, HEAVIEST_LAST, ACROSS_HEADS, ONE_AXIS)
    pid = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)  # launch order
    tl.store(TILE + pid, tile)
    tl.store(HEAD + pid, head)


@pytest.mark.parametrize("one_axis", [False, True], ids=["2d", "1d"])
@pytest.mark.parametrize(
    "causal,heaviest_last,across_heads",
    [(False, True, True), (True, False, False), (True, True, False), (True, True, True)],
)
def test_program_tile_order(causal, heaviest_last, across_heads, one_axis):
    """Every (tile, head) exactly once, in the order each launch mode promises, on two grid axes or one."""
    n_tiles, n_heads = 5, 3
    grid = tile_grid(n_tiles * 16, "BLOCK", n_heads, causal)(
        {"BLOCK": 16, "ACROSS_HEADS": across_heads, "ONE_AXIS": one_axis}
    )
    assert grid == (
        (n_tiles * n_heads,) if one_axis else (n_heads, n_tiles) if causal and across_heads else (n_tiles, n_heads)
    )
    tile, head = (torch.full((n_tiles * n_heads,), -1, dtype=torch.int32, device=DEVICE) for _ in range(2))
    _record_program_tiles[grid](tile, head, n_tiles, causal, heaviest_last, across_heads, one_axis)
    tile, head = tile.tolist(), head.tolist()
    assert sorted(zip(tile, head)) == [(t, h) for t in range(n_tiles) for h in range(n_heads)]
    if causal and across_heads:  # one tile of every head, then the next tile
        assert head == [p % n_heads for p in range(len(head))]
    else:  # the tiles of one head, then the next head (its K and V stay in L2)
        assert head == [p // n_tiles for p in range(len(head))]
    assert tile[0] == (n_tiles - 1 if causal and heaviest_last else 0)  # causal: the costliest tile first


def test_one_axis_only_past_grid_axis_1():
    assert not one_axis(10**6, MAX_GRID_Y, True)
    assert one_axis(100, MAX_GRID_Y + 1, False)  # (batch, head) pairs on axis 1
    assert not one_axis(MAX_GRID_Y * MIN_BLOCK + 1, 4, False)  # tiles stay on axis 0
    assert one_axis(MAX_GRID_Y * MIN_BLOCK + 1, 4, True)  # the across-heads order puts tiles on axis 1


def test_causal_entries_replace_the_unmasked_ones_under_the_mask():
    from flashdoc.kernels.common import configs_for, prune_for

    table = {(64, False): ["both"], (64, False, True): ["causal"], (128, False): ["d128"], (64, True): ["fp32"]}
    assert configs_for(table, 32, torch.bfloat16, causal=False) == ["both"]
    assert configs_for(table, 64, torch.float16, causal=True) == ["causal"]
    assert configs_for(table, 128, torch.bfloat16, causal=True) == ["d128"]  # no causal entry: the shared one
    assert configs_for(table, 64, torch.float32, causal=True) == ["fp32"]
    q = torch.empty(1, dtype=torch.bfloat16)
    assert prune_for(table)([], {"Q": q}, BLOCK_D=64, IS_CAUSAL=True) == ["causal"]  # what the autotuner sees


def test_hopper_dispatch_rules(monkeypatch):
    """Which calls the Gluon kernels take once the GPU checks pass (faked here, so that the rules run on any
    machine): the keys of their tables, at any length, and no more (batch, head) pairs in the backward
    than grid axis 1 holds. The GPU tests check the real dispatch end to end."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh

    monkeypatch.setattr(fh, "gluon_runs", lambda q: True)
    monkeypatch.setattr(bh, "gluon_runs", lambda q: True)

    def q(batch, seqlen, heads, head_dim):  # the shape is all the rules read; no memory behind it
        return torch.empty(1, 1, 1, head_dim).expand(batch, seqlen, heads, head_dim)

    for head_dim in (64, 96, 128, 256):
        for causal in (False, True):
            key = (head_dim, causal)
            for seqlen in (1, 100, 4096):
                assert fh.supports(q(2, seqlen, 4, head_dim), causal) == (key in fh.HOPPER_CONFIGS), key
                assert bh.supports_dkdv(q(2, seqlen, 4, head_dim), causal) == (key in bh.HOPPER_DKDV_CONFIGS), key
                assert bh.supports_dq(q(2, seqlen, 4, head_dim), causal) == (key in bh.HOPPER_DQ_CONFIGS), key
    key = next(iter(bh.HOPPER_DKDV_CONFIGS))
    assert bh.supports_dkdv(q(1, 64, MAX_GRID_Y, key[0]), key[1])
    assert not bh.supports_dkdv(q(3, 64, MAX_GRID_Y // 2, key[0]), key[1])  # 98,301 pairs: the portable 1-D grid
    key = next(iter(bh.HOPPER_DQ_CONFIGS))
    assert not bh.supports_dq(q(4125, 24, 16, key[0]), key[1])  # 66,000 pairs, as in the GPU test of that limit


def test_decode_steps_take_the_split_kv_kernel(monkeypatch):
    """A forward whose query rows (a KV head's group x seqlen_q) fit one decode tile runs on the split-KV kernel,
    as flash-attn 2's forward splits the keys of such calls; not with dropout, which that kernel lacks, nor under
    PyTorch's top-left causal mask. Its output and gradients are the oracle tests' (seqlen_q 1 there)."""
    import flashdoc.interface

    routed = []
    decode_attention = flashdoc.interface.decode_attention
    monkeypatch.setattr(
        flashdoc.interface, "decode_attention", lambda q, *a, **kw: (routed.append(1), decode_attention(q, *a, **kw))
    )

    def takes_it(seqlen_q, heads, kv_heads, call):
        routed.clear()
        q, k, v = make_qkv(1, seqlen_q, 40, heads, kv_heads, 16, torch.float32)
        call(q, k, v)
        return bool(routed)

    fa = flashdoc.flash_attn_func
    sdpa = flashdoc.scaled_dot_product_attention

    def sdpa_call(**kw):
        return lambda q, k, v: sdpa(*(t.transpose(1, 2) for t in (q, k, v)), enable_gqa=True, **kw)

    assert takes_it(1, 8, 2, lambda q, k, v: fa(q, k, v, causal=True, window_size=(7, 0), softcap=5.0))
    assert takes_it(16, 8, 2, lambda q, k, v: fa(q, k, v, causal=True))  # 64 rows
    assert not takes_it(17, 8, 2, lambda q, k, v: fa(q, k, v, causal=True))  # 68 rows
    assert not takes_it(1, 8, 2, lambda q, k, v: fa(q, k, v, dropout_p=0.1))
    assert takes_it(1, 8, 2, sdpa_call())
    assert not takes_it(1, 8, 2, sdpa_call(is_causal=True))  # top-left: query 0 sees key 0 alone


def test_hopper_causal_sections(monkeypatch):
    """The Hopper forward hands out causal work in sections of (batch, head) pairs whose keys and values fit in
    L2 (FlashAttention-3's LPT scheduler): a power of two, at most the launch's pairs, at least one."""
    from flashdoc.kernels import forward_hopper as fh

    monkeypatch.setattr(fh, "_l2_bytes", lambda device_index: 60 * 2**20)  # the H200's L2

    def k(seqlen, head_dim):  # the shape and dtype are all the rule reads; no memory behind it
        return torch.empty(1, 1, 1, 1, dtype=torch.bfloat16).expand(1, seqlen, 1, head_dim)

    assert fh.heads_per_section(k(4096, 128), 64) == 16  # 2 MiB of keys and values a head: 30 fit
    assert fh.heads_per_section(k(4096, 128), 5) == 5
    assert fh.heads_per_section(k(16384, 256), 16) == 2  # 16 MiB a head: 3 fit
    assert fh.heads_per_section(k(2**20, 256), 4) == 1  # not even one head fits


def test_hopper_backward_grid_order(monkeypatch):
    """Causal backward launches at SECTIONED_HEAD_DIMS, or given a section, take one grid axis in the forward's
    sectioned order; the others keep the kernels' own two axes (tiles, pairs) and pass no SECTION (so they compile
    as before)."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh

    k = torch.empty(1, 1, 1, 1, dtype=torch.bfloat16).expand(2, 4096, 8, 256)
    for d in (64, 128, 256):
        assert bh._grid(32, 16, k, d, causal=False) == ((32, 16), {})
    monkeypatch.setattr(fh, "heads_per_section", lambda k, n_pairs: 4)
    assert bh._grid(32, 16, k, 256, causal=True) == ((512,), {"SECTION": 4})
    assert bh._grid(32, 16, k, 128, causal=True) == ((32, 16), {})
    # a section given (the fused kernel's, ``FUSED_DQ_SECTIONS``): that many pairs, or all of them if fewer
    assert bh._grid(32, 16, k, 64, causal=True, section=2) == ((512,), {"SECTION": 2})
    assert bh._grid(32, 16, k, 64, causal=True, section=32) == ((512,), {"SECTION": 16})
    assert bh._grid(32, 16, k, 64, causal=False, section=2) == ((32, 16), {})


# --- GPU sweeps ------------------------------------------------------------------------------------------------

ODD_SEQLENS = [
    (1, 1),
    (1, 17),
    (17, 1),
    (113, 203),
    (203, 113),
    (127, 127),
    (128, 217),
    (1000, 1000),
    (1023, 1024),
    (1024, 1023),
    (4097, 4097),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("seqlen_q,seqlen_k", ODD_SEQLENS)
def test_gpu_seqlens(seqlen_q, seqlen_k, head_dim, causal, dtype):
    batch = 1 if max(seqlen_q, seqlen_k) > 2000 else 2
    q, k, v = make_qkv(batch, seqlen_q, seqlen_k, 2, 2, head_dim, dtype)
    check_against_oracle(_flash(causal), q, k, v, head_dim**-0.5, causal, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [8, 16, 32, 40, 72, 80, 96, 112, 160, 192, 256])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(113, 203), (1023, 1024)])
def test_gpu_head_dims(seqlen_q, seqlen_k, head_dim, causal, dtype):
    q, k, v = make_qkv(2, seqlen_q, seqlen_k, 2, 2, head_dim, dtype)
    check_against_oracle(_flash(causal), q, k, v, head_dim**-0.5, causal, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_heads,n_kv_heads", [(8, 2), (8, 1), (6, 3)], ids=["gqa4", "mqa", "gqa2"])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(203, 113), (1000, 1000), (17, 1024)])
def test_gpu_gqa(seqlen_q, seqlen_k, n_heads, n_kv_heads, causal, dtype):
    q, k, v = make_qkv(2, seqlen_q, seqlen_k, n_heads, n_kv_heads, 128, dtype)
    check_against_oracle(_flash(causal), q, k, v, 128**-0.5, causal, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_non_contiguous_packed_qkv(head_dim, dtype):
    qkv = torch.randn(2, 1000, 3, 4, head_dim, device="cuda", dtype=dtype)
    q, k, v = (qkv[:, :, i].detach().requires_grad_() for i in range(3))
    check_against_oracle(_flash(True), q, k, v, head_dim**-0.5, True, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_huge_logits(dtype):
    q, k, v = make_qkv(2, 1000, 1000, 4, 4, 128, dtype, scale=100.0)
    out, lse = flashdoc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(lse).all() and torch.isfinite(q.grad).all()


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim,causal", [(64, False), (64, True), (256, True)])
def test_gpu_more_batch_heads_than_a_grid_axis(head_dim, causal):
    """66,000 (batch, head) pairs: more than CUDA's grid axis 1 holds (65,535), so the kernels launch on a 1-D
    grid. d = 256 causal launches its tiles across heads (the other order)."""
    q, k, v = make_qkv(4125, 24, 24, 16, 16, head_dim, torch.bfloat16)
    check_against_oracle(_flash(causal), q, k, v, head_dim**-0.5, causal, bottom_right=True)


@pytest.mark.gpu
def test_gpu_new_thread():
    """A Python thread that has not called CUDA yet (its first allocations come from PyTorch's cache) has no
    current CUDA context; the host tensor descriptors need one."""
    import threading

    q, k, v = make_qkv(2, 300, 300, 4, 2, 64, torch.bfloat16, requires_grad=False)
    expected, result = forward_backward(q, k, v), {}
    thread = threading.Thread(target=lambda: result.update(value=forward_backward(q, k, v)))
    thread.start()
    thread.join()
    assert "value" in result, "the call in the new thread raised (see the thread's traceback above)"
    for a, b in zip(result["value"], expected):
        assert torch.equal(a, b)


def eager_and_replayed(step, q, k, v):
    """step(q, k, v)'s tensors run eagerly, and from a CUDA graph that captured it on copies of q, k, v (the
    graph's outputs zeroed before the replay, so that only the replay can fill them)."""
    expected = step(q, k, v)
    static = [t.clone() for t in (q, k, v)]
    warmup = torch.cuda.Stream()  # compiling and autotuning cannot happen during a capture
    warmup.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warmup):
        step(*static)
    torch.cuda.current_stream().wait_stream(warmup)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = step(*static)
    for t in result:
        t.zero_()
    graph.replay()
    torch.cuda.synchronize()
    return expected, result


@pytest.mark.gpu
def test_gpu_cuda_graph(monkeypatch):
    """A forward + backward captured in a CUDA graph replays to the eager bits. The backward forks a second
    stream for the dQ kernel (made to here, where the call is small), which the capture has to follow and join."""
    from flashdoc.kernels import backward

    monkeypatch.setattr(backward, "OVERLAP_MIN_FLOPS", 0)
    q, k, v = make_qkv(2, 300, 300, 4, 2, 64, torch.bfloat16, requires_grad=False)
    expected, result = eager_and_replayed(forward_backward, q, k, v)
    for a, b in zip(result, expected):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_cuda_graph_fused_backward(causal, monkeypatch):
    """The fused backward (deterministic=False, where backward_hopper takes the call; here also short causal
    calls) captured in a CUDA graph: its zeroed float32 dq buffer and the final scaling are part of the capture,
    so a replay gives the eager output, dk and dv bits, and dq to rounding (its additions come in a different order
    on each run)."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels.backward import fused_dq_runs

    monkeypatch.setattr(bh, "FUSED_DQ_MIN_SEQLEN", {})
    q, k, v = make_qkv(2, 1000, 1000, 4, 2, 64, torch.bfloat16, requires_grad=False)
    if not fused_dq_runs(q, k, causal, deterministic=False):
        pytest.skip("the fused backward runs on Hopper GPUs only")

    def step(q, k, v):
        return forward_backward(q, k, v, causal=causal, deterministic=False)

    expected, result = eager_and_replayed(step, q, k, v)
    for name, a, b in zip(("out", "dq", "dk", "dv"), result, expected):
        if name == "dq":
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-4)
        else:
            assert torch.equal(a, b), name


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_gpu_second_device():
    """Tensors on cuda:1 while cuda:0 is current: the kernels must run on the tensors' device."""
    q, k, v = make_qkv(2, 300, 300, 4, 2, 64, torch.bfloat16, requires_grad=False)
    expected = forward_backward(q, k, v)
    with torch.cuda.device(0):
        result = forward_backward(*(t.to("cuda:1") for t in (q, k, v)))
    for a, b in zip(result, expected):
        assert a.device == torch.device("cuda:1") and torch.equal(a.cpu(), b.cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_autotuned(head_dim, causal, dtype, monkeypatch):
    """The path users take: the autotuners' pruning and pre-hooks pick and set up the configs (the other GPU
    tests run with FLASHDOC_AUTOTUNE=0 or pass a config directly, which skips both)."""
    import flashdoc.kernels.launch

    monkeypatch.setattr(flashdoc.kernels.launch, "AUTOTUNE", True)
    q, k, v = make_qkv(2, 1000, 1203, 4, 2, head_dim, dtype)
    check_against_oracle(_flash(causal), q, k, v, head_dim**-0.5, causal, bottom_right=True)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_every_autotune_config(head_dim, causal):
    """Each candidate the autotuner may pick computes the same attention (the sweeps above use the first)."""
    from flashdoc.kernels.backward import attn_bwd, bwd_configs_for
    from flashdoc.kernels.forward import attn_fwd, fwd_configs_for

    dtype = torch.bfloat16
    q, k, v = make_qkv(2, 1000, 1203, 4, 2, head_dim, dtype, requires_grad=False)
    scale = head_dim**-0.5
    ref_in = [t.double().requires_grad_() for t in (q, k, v)]
    out_ref, lse_ref = attention_math(*ref_in, scale, causal, True)
    dout = torch.randn_like(q)
    grads_ref = torch.autograd.grad(out_ref, ref_in, dout.double())
    out_pt, _ = attention_math(q, k, v, scale, causal, True, dtype)
    base = (out_pt.double() - out_ref).abs().max().item()
    for config in fwd_configs_for(head_dim, dtype, causal):
        out = torch.empty_like(q)
        lse = torch.empty(2, 4, 1000, device="cuda", dtype=torch.float32)
        attn_fwd(q, k, v, out, lse, scale, causal, True, config=config)
        err = (out.double() - out_ref).abs().max().item()
        print("fwd", config, f"{err:.3e} vs pytorch {base:.3e}")
        assert err <= 2 * base + 1e-3
    out_ref_dtype = out_ref.detach().to(dtype)
    lse_ref = lse_ref.float().contiguous()
    for config in bwd_configs_for(head_dim, dtype, causal):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        attn_bwd(dout, q, k, v, out_ref_dtype, lse_ref, None, dq, dk, dv, scale, causal, True, config=config)
        for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), grads_ref):
            err = (g.double() - r).abs().max().item() / r.abs().max().item()
            print("bwd", config, name, f"relative {err:.3e}")
            assert err < 2e-2


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon forward runs on Hopper GPUs only")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_hopper_every_config(head_dim, causal, dtype, monkeypatch):
    """The Hopper forward (forward_hopper.py) in its tuned config and with two or three consumer warpgroups,
    other rings, and persistent grids, against the oracle, by the portable configs' criterion: ragged lengths,
    GQA, both causal alignments (seqlen_q > seqlen_k leaves rows with no key under the bottom-right mask).
    Causal work items end at the last query row, so where an item's rows do not divide the length (every length
    here with three consumers) the first item's leading consumers have only rows before row 0: out and lse start
    as NaN, and every row must still be written."""
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels import gluon_support
    from flashdoc.kernels.launch import on_device

    assert fh.GLUON, f"Gluon should be available here (triton {triton.__version__}: {gluon_support.REASON})"
    # a persistent grid of 7 programs: each claims several work items from the counter, some more than others
    monkeypatch.setattr(fh, "_sm_count", lambda device_index: 7)
    # causal work in sections of 3 (batch, head) pairs, the last one short where 3 does not divide the pairs (at
    # these sizes L2 would take them all in one)
    monkeypatch.setattr(fh, "heads_per_section", lambda k, n_pairs: min(3, n_pairs))
    for shape in [(2, 1000, 1203, 4, 2), (1, 777, 333, 2, 1), (3, 64, 64, 2, 2)]:
        q, k, v = make_qkv(*shape, head_dim, dtype, requires_grad=False)
        scale = head_dim**-0.5
        for bottom_right in (False, True):
            out_ref, lse_ref = attention_math(q.double(), k.double(), v.double(), scale, causal, bottom_right)
            out_pt, _ = attention_math(q, k, v, scale, causal, bottom_right, dtype)
            base = (out_pt.double() - out_ref).abs().max().item()
            # (two and three consumers, one program per tile or persistent; a deeper ring of narrower tiles;
            # three stages where shared memory holds them; at d = 256, where O is staged in the Q tiles, what fits)
            if head_dim > fh.MAX_SEPARATE_O_HEAD_DIM:
                others = [(64, 64, 2, 2, False), (64, 32, 3, 2, True)]
            else:
                others = [(64, 128, 2, 2, False), (64, 128, 2, 2, True), (64, 128, 2, 3, True), (64, 64, 4, 3, False)]
                others += [(64, 128, 3, 3, True)] if head_dim == 64 else []
            for config in {fh.HOPPER_CONFIGS[head_dim, causal], *others}:
                out = torch.full_like(q, float("nan"))
                lse = torch.full((shape[0], shape[3], shape[1]), float("nan"), device="cuda")
                with on_device(q.device):
                    fh.attn_fwd_hopper(q, k, v, out, lse, scale, causal, bottom_right, config)
                err = (out.double() - out_ref).abs().max().item()
                assert err <= 2 * base + 1e-3, (shape, bottom_right, config, err, base)
                torch.testing.assert_close(lse, lse_ref.float(), atol=1e-3, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon backward runs on Hopper GPUs only")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_hopper_backward_every_config(head_dim, causal, dtype, monkeypatch):
    """The Hopper dK/dV and dQ kernels (backward_hopper.py) in their tuned configs and with three consumers or a
    deeper ring (at d = 256: the wide dK/dV kernel, and dQ in the configs that fit), against
    the oracle's gradients by flash-attn's criterion (the one the autograd tests use): ragged lengths, GQA, both
    causal alignments (seqlen_q > seqlen_k leaves rows with no key, and keys no row sees). Causal calls at
    SECTIONED_HEAD_DIMS run in sections of 3 pairs here, the last one short."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.backward import bwd_preprocess
    from flashdoc.kernels.launch import on_device

    monkeypatch.setattr(fh, "heads_per_section", lambda k, n_pairs: min(3, n_pairs))

    scale = head_dim**-0.5
    for shape in [(2, 1000, 1203, 4, 2), (1, 777, 333, 2, 1), (3, 64, 64, 2, 2)]:
        q, k, v = make_qkv(*shape, head_dim, dtype, requires_grad=False)
        dout = torch.randn_like(q)
        for bottom_right in (False, True):
            ref_in = [t.double().requires_grad_() for t in (q, k, v)]
            pt_in = [t.clone().requires_grad_() for t in (q, k, v)]
            out_ref, lse_ref = attention_math(*ref_in, scale, causal, bottom_right)
            out_pt, _ = attention_math(*pt_in, scale, causal, bottom_right, dtype)
            dq_ref, dk_ref, dv_ref = torch.autograd.grad(out_ref, ref_in, dout.double())
            dq_pt, dk_pt, dv_pt = torch.autograd.grad(out_pt, pt_in, dout)
            with on_device(q.device):
                delta, lse2 = bwd_preprocess(dout, out_ref.detach().to(dtype), lse_ref.contiguous(), None)
            where = f"{shape} bottom_right={bottom_right}"
            if head_dim > bh.MAX_NARROW_HEAD_DIM:
                dkdv_configs, dq_configs = [(64, 64, 2, 2)], [(64, 32, 2, 2), (64, 32, 3, 2)]
            else:
                dkdv_configs = [(64, 64, 2, 2), (64, 64, 3, 2), (64, 64, 2, 3)]
                dq_configs = [(64, 64, 2, 2), (64, 128, 2, 2), (64, 64, 3, 2), (64, 64, 2, 3)]
            for config in {bh.HOPPER_DKDV_CONFIGS.get((head_dim, causal)), *dkdv_configs} - {None}:
                dk, dv = torch.empty_like(k), torch.empty_like(v)
                with on_device(q.device):
                    bh.bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, scale, causal, bottom_right, config)
                assert_close_like_flash_attn(f"dk {where} {config}", dk, dk_ref, dk_pt, dtype, mult=3.0)
                assert_close_like_flash_attn(f"dv {where} {config}", dv, dv_ref, dv_pt, dtype, mult=3.0)
            for config in {bh.HOPPER_DQ_CONFIGS.get((head_dim, causal)), *dq_configs} - {None}:
                dq = torch.empty_like(q)
                with on_device(q.device):
                    bh.bwd_dq_hopper(q, k, v, dout, dq, lse2, delta, scale, causal, bottom_right, config)
                assert_close_like_flash_attn(f"dq {where} {config}", dq, dq_ref, dq_pt, dtype, mult=3.0)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon forward runs on Hopper GPUs only")
def test_gpu_hopper_takes_the_calls_it_supports(monkeypatch):
    """fp16/bf16 at head dims 64, 128 and 256 go to the Hopper forward, at any length; other dtypes and head dims,
    a config passed explicitly, and FLASHDOC_HOPPER=0 (its ENABLED) stay on the portable kernel."""
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.forward import attn_fwd, fwd_configs_for

    calls = []
    real = fh.attn_fwd_hopper
    monkeypatch.setattr(fh, "attn_fwd_hopper", lambda *a, **kw: calls.append(a[0].shape) or real(*a, **kw))
    for head_dim, dtype, causal, taken in [
        (64, torch.bfloat16, False, True),
        (128, torch.float16, True, True),
        (64, torch.bfloat16, True, True),
        (256, torch.float16, True, True),
        (96, torch.bfloat16, False, False),
        (256, torch.bfloat16, False, True),
        (128, torch.float32, False, False),
    ]:
        q, k, v = make_qkv(1, 200, 200, 2, 2, head_dim, dtype, requires_grad=False)
        calls.clear()
        flashdoc.flash_attn_func(q, k, v, causal=causal)
        assert bool(calls) == taken, (head_dim, dtype, causal)
    q, k, v = make_qkv(1, 200, 200, 2, 2, 128, torch.bfloat16, requires_grad=False)
    calls.clear()
    lse = torch.empty(1, 2, 200, device="cuda")
    attn_fwd(q, k, v, torch.empty_like(q), lse, 0.1, False, False, config=fwd_configs_for(128, q.dtype)[0])
    monkeypatch.setattr(fh, "ENABLED", False)
    flashdoc.flash_attn_func(q, k, v)
    assert not calls


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon backward runs on Hopper GPUs only")
def test_gpu_hopper_backward_takes_the_calls_it_supports(monkeypatch):
    """Each backward kernel goes to its Hopper version where that one's table has the (head dim, causal) key, for
    fp16/bf16; fp32, other head dims, configs passed explicitly and FLASHDOC_HOPPER=0 stay portable. Without
    ``deterministic``, the keys of ``FUSED_DQ_CONFIGS`` run the fused dK/dV/dQ kernel alone (here at every length:
    ``test_fused_backward_takes_causal_calls_from_its_minimum_length`` checks its length rule)."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.backward import attn_bwd, bwd_configs_for

    monkeypatch.setattr(bh, "FUSED_DQ_MIN_SEQLEN", {})
    calls = []
    for name in ("bwd_dkdv_hopper", "bwd_dq_hopper"):
        real = getattr(bh, name)
        monkeypatch.setattr(bh, name, lambda *a, real=real, name=name, **kw: calls.append(name) or real(*a, **kw))

    def backward_calls(head_dim, dtype, causal, deterministic=True):
        q, k, v = make_qkv(1, 300, 300, 2, 2, head_dim, dtype)
        calls.clear()
        flashdoc.flash_attn_func(q, k, v, causal=causal, deterministic=deterministic).sum().backward()
        return set(calls)

    for head_dim, dtype in [
        (64, torch.bfloat16),
        (64, torch.float16),
        (128, torch.float16),
        (128, torch.bfloat16),
        (96, torch.bfloat16),
        (256, torch.bfloat16),
        (128, torch.float32),
    ]:
        for causal in (False, True):
            for deterministic in (True, False):
                expected = set()
                if dtype != torch.float32 and not deterministic and (head_dim, causal) in bh.FUSED_DQ_CONFIGS:
                    expected = {"bwd_dkdv_hopper"}
                elif dtype != torch.float32:
                    expected |= {"bwd_dkdv_hopper"} if (head_dim, causal) in bh.HOPPER_DKDV_CONFIGS else set()
                    expected |= {"bwd_dq_hopper"} if (head_dim, causal) in bh.HOPPER_DQ_CONFIGS else set()
                assert backward_calls(head_dim, dtype, causal, deterministic) == expected, (
                    head_dim,
                    dtype,
                    causal,
                    deterministic,
                )
    assert (64, False) in bh.FUSED_DQ_CONFIGS and (64, False) not in bh.HOPPER_DKDV_CONFIGS
    assert (128, False) in bh.HOPPER_DKDV_CONFIGS and (128, False) in bh.HOPPER_DQ_CONFIGS
    # an explicit config pair keeps both kernels portable
    q, k, v = make_qkv(1, 300, 300, 2, 2, 128, torch.bfloat16, requires_grad=False)
    out, lse, dout = torch.randn_like(q), torch.zeros(1, 2, 300, device="cuda"), torch.randn_like(q)
    calls.clear()
    attn_bwd(
        dout,
        q,
        k,
        v,
        out,
        lse,
        None,
        torch.empty_like(q),
        torch.empty_like(k),
        torch.empty_like(v),
        0.1,
        False,
        False,
        config=bwd_configs_for(128, q.dtype)[0],
    )
    assert not calls
    monkeypatch.setattr(fh, "ENABLED", False)
    assert backward_calls(128, torch.bfloat16, False) == set()


@pytest.mark.gpu
def test_gpu_decode_step_in_a_cuda_graph():
    """flash_attn_func on a decode step (one query of 32 heads over 8 KV heads: the split-KV kernel, with splits)
    captures in a CUDA graph, which fails on any host synchronisation, and its replays over new inputs give the
    eager calls' bits; the output meets flash-attn's rule against the oracle."""
    torch.manual_seed(0)
    kw = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(2, 1, 32, 128, **kw)
    k, v = (torch.randn(2, 3000, 8, 128, **kw) for _ in range(2))

    def step():
        return flashdoc.flash_attn_func(q, k, v, causal=True)

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_static = step()
    for _ in range(2):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        graph.replay()
        torch.testing.assert_close(out_static, step(), atol=0, rtol=0)
    ref, pt = (attention_math(q, k, v, 128**-0.5, causal=True, dtype=d)[0] for d in (torch.float64, q.dtype))
    assert_close_like_flash_attn("out", out_static, ref, pt, q.dtype)
