"""With ``deterministic=True`` the backward uses no atomics: gradients are bit-identical from run to run. Without
it, Hopper runs a fused backward where that is faster (``backward.fused_dq_runs``), whose dq is added across key
blocks in a varying order: its dk and dv stay bit-identical, its dq as accurate as the split kernels'."""

import pytest
import torch
from attention_oracle import DEVICE, assert_close_like_flash_attn, attention_math, make_qkv

import flashdoc
from flashdoc.kernels import backward, backward_hopper, forward_hopper, launch


def _grads(q, k, v, dout, causal, deterministic=True):
    out = flashdoc.flash_attn_func(q, k, v, causal=causal, deterministic=deterministic)
    return torch.autograd.grad(out, (q, k, v), dout)


def _check(shape, causal, repeats, dtype):
    batch, seqlen_q, seqlen_k, heads, kv_heads, d = shape
    q, k, v = make_qkv(batch, seqlen_q, seqlen_k, heads, kv_heads, d, dtype)
    dout = torch.randn(q.shape, device=q.device, dtype=dtype)
    first = _grads(q, k, v, dout, causal)
    for _ in range(repeats):
        for name, a, b in zip(("dq", "dk", "dv"), first, _grads(q, k, v, dout, causal)):
            assert torch.equal(a, b), f"{name} differs between runs"


@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_cpu(causal):
    _check((1, 40, 40, 4, 2, 32), causal, repeats=2, dtype=torch.float16)


def test_fused_backward_only_without_determinism(monkeypatch):
    """The fused kernel runs only when neither the call nor ``torch.use_deterministic_algorithms`` asks for
    determinism, and only where ``backward_hopper`` takes the call."""
    q = torch.empty(1, 8, 2, 64)
    monkeypatch.setattr(backward_hopper, "supports_fused_dq", lambda q, k, causal: True)
    assert backward.fused_dq_runs(q, q, False, deterministic=False)
    assert not backward.fused_dq_runs(q, q, False, deterministic=True)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert not backward.fused_dq_runs(q, q, False, deterministic=False)
    finally:
        torch.use_deterministic_algorithms(was)
    monkeypatch.setattr(backward_hopper, "supports_fused_dq", lambda q, k, causal: False)
    assert not backward.fused_dq_runs(q, q, False, deterministic=False)


def test_fused_backward_takes_causal_calls_from_its_minimum_length(monkeypatch):
    """Under the mask the fused kernel takes a call only when both lengths reach ``FUSED_DQ_MIN_SEQLEN`` (shorter
    causal calls measured faster on the split kernels); without the mask it takes every length."""
    monkeypatch.setattr(backward_hopper, "gluon_runs", lambda q: True)  # as on a Hopper GPU
    min_seqlen = backward_hopper.FUSED_DQ_MIN_SEQLEN[64, True]

    def takes(seqlen_q, seqlen_k, causal):
        q, k = torch.empty(1, seqlen_q, 2, 64, device="meta"), torch.empty(1, seqlen_k, 2, 64, device="meta")
        return backward_hopper.supports_fused_dq(q, k, causal)

    assert takes(min_seqlen, min_seqlen, True) and takes(2 * min_seqlen, min_seqlen, True)
    assert not takes(min_seqlen // 2, min_seqlen // 2, True)
    assert not takes(min_seqlen, min_seqlen - 1, True) and not takes(min_seqlen - 1, 4 * min_seqlen, True)
    assert takes(128, 128, False) and takes(1, 100, False)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_deterministic_many_repeats(causal):
    _check((2, 2048, 2048, 16, 4, 128), causal, repeats=50, dtype=torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "shape", [(2, 2048, 2048, 8, 2, 64), (1, 1000, 777, 3, 1, 64), (1, 777, 1000, 2, 2, 64), (3, 1000, 1000, 4, 2, 64)]
)
def test_gpu_fused_backward(shape, dtype, causal, monkeypatch):
    """The fused backward against float64: as accurate as the split kernels (deterministic=True) in every
    gradient, with dk and dv bit-identical from run to run. Short causal calls are routed to it here (without its
    minimum length), so that the masked tiles at both alignments' diagonals are checked; their programs go in
    sections of ``FUSED_DQ_SECTIONS`` pairs, here 1, 2, 4 and 4 + 2 (the last shape's 6 pairs: a short last
    section)."""
    monkeypatch.setattr(backward_hopper, "FUSED_DQ_MIN_SEQLEN", {})
    batch, seqlen_q, seqlen_k, heads, kv_heads, d = shape
    q, k, v = make_qkv(batch, seqlen_q, seqlen_k, heads, kv_heads, d, dtype)
    if not backward.fused_dq_runs(q, k, causal, deterministic=False):
        pytest.skip("the fused backward runs on Hopper GPUs only")
    dout = torch.randn(q.shape, device=q.device, dtype=dtype)
    fused = _grads(q, k, v, dout, causal, deterministic=False)
    split = _grads(q, k, v, dout, causal, deterministic=True)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out_ref, _ = attention_math(*ref_in, d**-0.5, causal, True, torch.float64)
    refs = torch.autograd.grad(out_ref, ref_in, dout.double())
    for name, ours, ref, theirs in zip(("dq", "dk", "dv"), fused, refs, split):
        assert_close_like_flash_attn(name, ours, ref, theirs, dtype, mult=1.5)
    again = _grads(q, k, v, dout, causal, deterministic=False)
    assert torch.equal(fused[1], again[1]) and torch.equal(fused[2], again[2])


def _opposed(batch, seqlen_q, seqlen_k, heads, d, dtype, score=-150.0):
    """q and k pointing nearly opposite ways, so that every score lies near ``score`` and every row's LSE far below
    -88, where exp(0 - LSE) overflows float32 (v and the gradient of the output: random)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    size = (-score / d**0.5) ** 0.5  # score = -size^2 * d * d^-0.5

    def one(seqlen, sign):
        t = sign * size * (1 + 0.05 * torch.randn(batch, seqlen, heads, d, generator=g))
        return t.to(device=DEVICE, dtype=dtype).requires_grad_()

    v = torch.randn(batch, seqlen_k, heads, d, generator=g).to(device=DEVICE, dtype=dtype).requires_grad_()
    return one(seqlen_q, -1), one(seqlen_k, 1), v


@pytest.mark.parametrize(
    "seqlen_k, fused, causal, ragged",
    [
        (1000, True, False, True),
        (960, True, False, True),
        (1024, True, False, False),
        (1000, True, True, True),
        (1024, True, True, False),
        (1000, False, True, False),
    ],
)  # (d = 64 runs split dK/dV on Hopper causal only)
def test_fused_kernel_masks_only_ragged_key_lengths(seqlen_k, fused, causal, ragged, monkeypatch):
    """The launcher compiles the fused kernel's ragged-keys mask (RAGGED_KEYS) exactly when the key length leaves a
    program with keys past the end (not a multiple of its N_CONSUMERS * BLOCK_N = 128 keys; 960 = 15 x 64 is
    one). The mask costs speed where it is compiled in, and NaN where it is left out (the test below). Checked
    on the launch itself, so it runs on the CPU too."""
    launches = []
    monkeypatch.setattr(
        launch, "launch_gluon", lambda kernel, grid, args, constexprs, num_warps: launches.append(constexprs)
    )
    monkeypatch.setattr(backward_hopper, "_attn_bwd_dkdv_hopper", "the kernel", raising=False)
    q = torch.zeros(1, 1000, 2, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, seqlen_k, 2, 64, dtype=torch.bfloat16)
    stats = torch.zeros(1, 2, 1000)
    dq_acc = torch.zeros(q.shape) if fused else None
    backward_hopper.bwd_dkdv_hopper(
        q, k, k, q, torch.empty_like(k), torch.empty_like(k), stats, stats, 0.125, causal, True, dq_acc=dq_acc
    )
    (constexprs,) = launches
    assert constexprs["FUSED_DQ"] is fused and constexprs["RAGGED_KEYS"] is ragged, constexprs


@pytest.mark.parametrize("seqlen", [777, 1000, 1001])
def test_lse_rows_start_on_16_byte_boundaries(seqlen):
    """The Hopper dK/dV kernels' producer copies each query tile's LSE and delta rows with TMA, which faults
    ("illegal instruction", seen on the H200) on a row that starts off a 16-byte boundary: a seqlen that is not a
    multiple of 4 gets its rows padded first. Checked on the host descriptor, so it runs on the CPU too."""
    stats = torch.randn(2, 3, seqlen)
    desc = forward_hopper.rows_descriptor(stats, 64)
    assert desc.shape == [6, seqlen] and desc.block_shape == [1, 64]
    assert desc.strides[0] * 4 % 16 == 0 and desc.strides[1] == 1 and desc.base.data_ptr() % 16 == 0
    assert torch.equal(desc.base[:, :seqlen], stats.view(6, seqlen))


# Triton's interpreter computes every lane in numpy, the padded keys' overflowing exp2 (this test's premise) and
# their inf x 0 products included, and numpy warns of both; the kernels keep those lanes out of every result.
@pytest.mark.filterwarnings(
    "ignore:overflow encountered in exp2:RuntimeWarning", "ignore:invalid value encountered in matmul:RuntimeWarning"
)
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_with_every_score_far_below_zero(causal, deterministic, monkeypatch):
    """Keys past the last key block's end read as zeros (score 0): with every real score near -150, exp(0 - LSE)
    overflows there, and a kernel that lets those keys into dQ multiplies inf by their zero rows. The lengths are
    ragged so that such keys exist; on Hopper the fused kernel takes the calls without determinism (at any
    length here)."""
    monkeypatch.setattr(backward_hopper, "FUSED_DQ_MIN_SEQLEN", {})
    on_gpu = DEVICE == "cuda"
    dtype = torch.bfloat16 if on_gpu else torch.float16
    batch, seqlen_q, seqlen_k, heads, d = (1, 1000, 1000, 2, 64) if on_gpu else (1, 40, 50, 2, 32)
    q, k, v = _opposed(batch, seqlen_q, seqlen_k, heads, d, dtype)
    dout = torch.randn(q.shape, device=q.device, dtype=dtype)
    ours = _grads(q, k, v, dout, causal, deterministic=deterministic)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out_ref, lse_ref = attention_math(*ref_in, d**-0.5, causal, True, torch.float64)
    assert lse_ref[:, :, -1].max() < -100  # the premise: the last rows' LSE (which see every key) far below -88
    refs = torch.autograd.grad(out_ref, ref_in, dout.double())
    pt_in = [t.detach().requires_grad_() for t in (q, k, v)]
    out_pt, _ = attention_math(*pt_in, d**-0.5, causal, True, dtype)
    theirs = torch.autograd.grad(out_pt, pt_in, dout)
    for name, a, ref, pt in zip(("dq", "dk", "dv"), ours, refs, theirs):
        assert_close_like_flash_attn(name, a, ref, pt, dtype)
