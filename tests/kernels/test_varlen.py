"""flash_attn_varlen_func: packed sequences of different lengths, forward and backward, every variant, against the
float64 oracle applied to each sequence alone, with flash-attn's criterion (output error <= 2x, gradients <= 3x
the error of the same math in the inputs' dtype).

Also: each sequence's result equals ``flash_attn_func`` on that sequence alone; the call never reads cu_seqlens on
the host (CPU: flashdoc's code may not turn a tensor into a Python value; GPU: CUDA graph capture and replay with
new cu_seqlens, and torch's sync debug mode); torch.compile(fullgraph=True) traces it; bad input fails clearly.
"""

import math
import sys

import pytest
import torch
import triton
import triton.language as tl
from attention_oracle import DEVICE, DTYPE_IDS, assert_close_like_flash_attn, cpu_sweep
from test_variants import variant_math

import flashdoc
from flashdoc.kernels import INTERPRET
from flashdoc.kernels.common import find_item
from flashdoc.kernels.mask import draw_rng, dropout_mask
from flashdoc.kernels.varlen import schedule, tile_bound

# --- inputs and the oracle -------------------------------------------------------------------------------------


def cu_seqlens(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


def packed_inputs(lens_q, lens_k, n_heads, n_kv_heads, head_dim, dtype, q_scale=1.0, seed=0):
    """q (total_q, H, D), k, v (total_k, Hk, D), leaves requiring grad, and the two cu_seqlens."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def one(total, heads, scale=1.0):
        return (torch.randn(total, heads, head_dim, generator=g) * scale).to(DEVICE, dtype).requires_grad_()

    q = one(sum(lens_q), n_heads, q_scale)
    k, v = one(sum(lens_k), n_kv_heads), one(sum(lens_k), n_kv_heads)
    return q, k, v, cu_seqlens(lens_q), cu_seqlens(lens_k)


def varlen_math(q, k, v, cu_q, cu_k, scale, keep=None, alibi_slopes=None, dtype=torch.float64, **options):
    """``variant_math`` on each sequence alone, packed back: out (total_q, H, D) and lse (H, total_q). keep: the
    dropout mask of the whole packed batch, (H, total_q, total_k)."""
    outs, lses = [], []
    bounds_q, bounds_k = cu_q.tolist(), cu_k.tolist()
    # flash-attn compares a window's sides with the call's max_seqlen_k, not with each sequence's length
    max_seqlen_k = max(b - a for a, b in zip(bounds_k, bounds_k[1:]))
    for b in range(len(bounds_q) - 1):
        (q0, q1), (k0, k1) = bounds_q[b : b + 2], bounds_k[b : b + 2]
        if q1 == q0:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
        out, lse = variant_math(
            q[None, q0:q1],
            k[None, k0:k1],
            v[None, k0:k1],
            scale,
            alibi_slopes=slopes,
            keep=None if keep is None else keep[None, :, q0:q1, k0:k1],
            dtype=dtype,
            window_limit=max_seqlen_k,
            **options,
        )
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def check_varlen(
    lens_q,
    lens_k,
    n_heads,
    n_kv_heads,
    head_dim,
    dtype,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    dropout_p=0.0,
    q_scale=1.0,
    seed=0,
):
    """flash_attn_varlen_func against the per-sequence oracle: out and lse, then dq, dk, dv."""
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, n_heads, n_kv_heads, head_dim, dtype, q_scale, seed)
    scale = head_dim**-0.5
    torch.manual_seed(1234)
    out, lse, _ = flashdoc.flash_attn_varlen_func(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max(lens_q),
        max(lens_k),
        dropout_p,
        None,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs=True,
    )
    keep = None
    if dropout_p > 0:
        torch.manual_seed(1234)  # the call's draw; its counter runs over packed rows and columns
        keep = dropout_mask(draw_rng(q.device), 1, n_heads, q.shape[0], k.shape[0], dropout_p)[0]
    options = dict(causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, keep=keep)
    options["dropout_p"] = dropout_p
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    pt_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out_ref, lse_ref = varlen_math(*ref_in, cu_q, cu_k, scale, **options)
    out_pt, lse_pt = varlen_math(*pt_in, cu_q, cu_k, scale, dtype=dtype, **options)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (n_heads, q.shape[0]) and lse.dtype == torch.float32
    assert_close_like_flash_attn("out", out, out_ref, out_pt, dtype)
    assert_close_like_flash_attn("lse", lse, lse_ref, lse_pt, dtype)
    g = torch.Generator(device="cpu").manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(device=q.device, dtype=dtype)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    grads_ref = torch.autograd.grad(out_ref, ref_in, dout.double(), allow_unused=True)
    grads_pt = torch.autograd.grad(out_pt, pt_in, dout, allow_unused=True)
    for name, ours, ref, pt, x in zip(("dq", "dk", "dv"), grads, grads_ref, grads_pt, (q, k, v)):
        ref = torch.zeros_like(x, dtype=torch.float64) if ref is None else ref
        pt = torch.zeros_like(x) if pt is None else pt
        assert ours.shape == x.shape and ours.dtype == dtype
        assert_close_like_flash_attn(name, ours, ref, pt, dtype, mult=3.0)


# --- CPU subset: tiny shapes through the interpreter ------------------------------------------------------------

# lengths with an empty sequence, a one-token one, ragged tiles (17, 40 against the CPU's 32-row tiles), and
# per-sequence len_q != len_k in both directions (some rows see no key under a causal mask)
SELF = ([17, 0, 40, 1], [17, 0, 40, 1])
CROSS = ([17, 40, 5, 3], [30, 12, 0, 9])


@cpu_sweep
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens", [SELF, CROSS], ids=["self", "cross"])
def test_varlen_plain(lens, causal):
    check_varlen(*lens, 4, 2, 16, torch.float16, causal)


@cpu_sweep
@pytest.mark.parametrize("causal,window_size", [(False, (7, 3)), (True, (9, -1)), (False, (-1, 5))])
def test_varlen_window(causal, window_size):
    check_varlen(*CROSS, 2, 1, 24, torch.float32, causal, window_size)


@cpu_sweep
def test_varlen_window_sides_compare_with_max_seqlen_k():
    """flash-attn counts a window side at least max_seqlen_k wide as unbounded, for the whole call. The second
    sequence has more queries than its keys plus the right side (30 > 4 + 5), so its first rows see no key; a
    rule applied per sequence would count 5 >= 4 as unbounded and show them every key."""
    check_varlen([20, 30], [40, 4], 2, 1, 16, torch.float32, False, (10, 5))


@cpu_sweep
def test_varlen_softcap_bf16():
    check_varlen(*SELF, 2, 2, 16, torch.bfloat16, True, softcap=5.0, q_scale=8.0)


@cpu_sweep
@pytest.mark.parametrize("per_batch", [False, True])
def test_varlen_alibi(per_batch):
    shape = (4, 2) if per_batch else (2,)
    slopes = torch.rand(shape, generator=torch.Generator().manual_seed(2)).to(DEVICE) * 0.3
    check_varlen(*CROSS, 2, 1, 16, torch.float16, True, alibi_slopes=slopes)


@cpu_sweep
def test_varlen_dropout():
    check_varlen(*CROSS, 2, 1, 16, torch.float32, False, dropout_p=0.3)


@cpu_sweep
def test_varlen_all_variants_odd_head_dim():
    """Window, softcap, ALiBi and dropout at once, MQA, head dim 40 and 7 (zero-padded to 8)."""
    slopes = torch.rand(4, generator=torch.Generator().manual_seed(3)).to(DEVICE) * 0.3
    for head_dim in (40, 7):
        check_varlen(
            [20, 33, 1],
            [25, 9, 14],
            4,
            1,
            head_dim,
            torch.float16,
            False,
            (11, 4),
            softcap=10.0,
            alibi_slopes=slopes,
            dropout_p=0.2,
            q_scale=4.0,
        )


def test_varlen_equals_flash_attn_func_per_sequence(monkeypatch):
    """Each sequence's output, LSE and gradients (a loss on the LSE too) are flash_attn_func's on that sequence
    alone: bit for bit under the interpreter, where both run the same tiles. (flash_attn_func would send these
    short sequences to the decode kernel; here it is kept on the training kernel that varlen shares.)"""
    monkeypatch.setattr(flashdoc.interface, "_is_decode_step", lambda *args: False)
    lens_q, lens_k = [23, 40, 1, 9], [23, 7, 35, 9]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 2, 16, torch.float32, seed=3)
    options = dict(causal=True, window_size=(12, 3), softcap=8.0)
    out, lse = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 35, return_lse=True, **options)
    g = torch.Generator().manual_seed(4)
    dout, dlse = torch.randn(out.shape, generator=g).to(DEVICE), torch.randn(lse.shape, generator=g).to(DEVICE)
    grads = torch.autograd.grad((out * dout).sum() + (lse * dlse).sum(), (q, k, v))
    for b in range(len(lens_q)):
        (q0, q1), (k0, k1) = cu_q[b : b + 2].tolist(), cu_k[b : b + 2].tolist()
        qb, kb, vb = (t.detach()[None, s0:s1].requires_grad_() for t, s0, s1 in ((q, q0, q1), (k, k0, k1), (v, k0, k1)))
        out_b, lse_b = flashdoc.flash_attn_func(qb, kb, vb, return_lse=True, **options)
        grads_b = torch.autograd.grad(
            (out_b * dout[None, q0:q1]).sum() + (lse_b * dlse[None, :, q0:q1]).sum(), (qb, kb, vb)
        )
        pairs = [(out[q0:q1], out_b[0]), (lse[:, q0:q1], lse_b[0]), (grads[0][q0:q1], grads_b[0][0])]
        pairs += [(grads[1][k0:k1], grads_b[1][0]), (grads[2][k0:k1], grads_b[2][0])]
        for ours, dense in pairs:
            if INTERPRET:
                assert torch.equal(ours, dense), b
            else:
                torch.testing.assert_close(ours, dense, atol=1e-4, rtol=1e-4)


def test_varlen_empty_batches():
    """No query tokens, or no key tokens at all: empty output, or zeros with LSE -inf and zero gradients."""
    q, k, v, cu_q, cu_k = packed_inputs([0, 0], [5, 3], 2, 2, 16, torch.float32)
    out, lse = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 0, 5, return_lse=True)
    assert out.shape == (0, 2, 16) and lse.shape == (2, 0)
    q, k, v, cu_q, cu_k = packed_inputs([4, 3], [0, 0], 2, 1, 16, torch.float32)
    out, lse = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 0, causal=True, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.all(lse == float("-inf"))
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))


def test_tile_bound():
    """The grid's bound covers every split of the tokens into sequences, and is reached."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n_seqs, block = int(torch.randint(1, 9, (1,), generator=g)), int(2 ** torch.randint(4, 8, (1,), generator=g))
        lengths = torch.randint(0, 300, (n_seqs,), generator=g).tolist()
        assert sum(-(-n // block) for n in lengths) <= tile_bound(sum(lengths), n_seqs, block)
    assert tile_bound(3 * 65, 3, 64) == 6  # three sequences of 65: two tiles each


@triton.jit
def _claims(ORDER, CU, OUT, n_seqs, n_heads, n_claims, ROWS: tl.constexpr, PROGRAMS: tl.constexpr, CHUNK: tl.constexpr):
    """Program p claims items p, p + PROGRAMS, p + 2 PROGRAMS ... (a persistent program's claims only grow), each
    found by ``find_item`` from where its last search ended, and stores (seq, local) at the item's place in OUT."""
    p = tl.program_id(0)
    start = 0
    before = 0
    for c in range(n_claims):
        i = p + c * PROGRAMS
        seq, local, start, before = find_item(i, tl.arange(0, CHUNK), ORDER, CU, n_seqs, n_heads, ROWS, start, before)
        tl.store(OUT + 2 * i, seq)
        tl.store(OUT + 2 * i + 1, local)


@pytest.mark.parametrize(
    "lengths",
    [[300, 40, 1000, 0, 130], [1, 63, 64, 65, 127, 128, 129, 1000, 0, 0, 8192], list(range(0, 700, 7)), [0, 0, 5]],
    ids=["mixed", "edges", "more-than-a-chunk", "mostly-empty"],
)
def test_find_item_follows_the_schedule(lengths):
    """The Hopper forward's varlen search (``common.find_item``, run here by the interpreter): programs claiming
    growing items, each search starting where its last one ended, find every item's sequence and place in the
    schedule's order (longest first, head by head), and -1 past the last item, over chunks of 16 sequences."""
    n_heads, rows, programs = 3, 192, 5
    cu = cu_seqlens(lengths)
    order = schedule(cu)
    expected = []  # (seq, local) of every item, in claim order
    for b in order.tolist():
        expected += [(b, local) for local in range(n_heads * -(-lengths[b] // rows))]
    n_claims = -(-(len(expected) + programs) // programs)  # every program claims past the last item
    out = torch.full((programs * n_claims, 2), -2, dtype=torch.int32, device=DEVICE)
    _claims[(programs,)](order, cu, out, len(lengths), n_heads, n_claims, rows, programs, 16)
    found = [tuple(pair) for pair in out.tolist()]
    assert found[: len(expected)] == expected
    assert all(seq == -1 for seq, _ in found[len(expected) :])


def _recording(monkeypatch):
    """Calls to ``varlen_fwd_hopper`` recorded (and not run: on a CPU no Gluon kernel can), with the Hopper checks
    of ``forward_hopper.gluon_runs`` (GPU, dtype, Triton) passed as on an H200."""
    from flashdoc.kernels import forward_hopper, varlen

    calls = []
    monkeypatch.setattr(varlen, "varlen_fwd_hopper", lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(forward_hopper, "gluon_runs", lambda q: q.dtype in (torch.float16, torch.bfloat16))
    return calls


def test_varlen_takes_the_gluon_forward_where_dense_does(monkeypatch):
    """The forward calls the dense Hopper forward takes (fp16/bf16, head dims with a tuned config, plain, causal,
    windows, softcap) go to ``varlen_fwd_hopper``; ALiBi, dropout, other head dims and fp32 stay on the portable
    kernel."""
    calls = _recording(monkeypatch)
    _recording_backward(monkeypatch)

    def routed(head_dim=64, dtype=torch.float16, **options):
        q, k, v, cu_q, cu_k = packed_inputs([20, 0, 33], [20, 0, 33], 4, 2, head_dim, dtype, seed=3)
        calls.clear()
        with torch.no_grad():
            flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 33, 33, **options)
        return len(calls) == 1

    assert routed()
    assert routed(causal=True)
    assert routed(head_dim=128, window_size=(8, 0))
    assert routed(head_dim=256, softcap=20.0)
    assert routed(head_dim=59)  # padded to 64
    assert not routed(head_dim=32)
    assert not routed(dtype=torch.float32)
    assert not routed(alibi_slopes=torch.full((4,), 0.1, device=DEVICE))
    assert not routed(dropout_p=0.1)
    # the backward recomputes from the forward's output and LSE
    q, k, v, cu_q, cu_k = packed_inputs([20, 7], [20, 7], 2, 2, 64, torch.float16)
    calls.clear()
    out, lse = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 20, 20, return_lse=True)
    assert len(calls) == 1
    args = calls[0]
    assert args[3] is out or args[3].shape == out.shape  # written in place
    assert args[4] is lse


def _recording_backward(monkeypatch):
    """Calls to ``varlen_bwd_dkdv_hopper`` and ``varlen_bwd_dq_hopper`` recorded as ("dkdv" or "dq", args) (and
    not run), with the Hopper checks of ``gluon_runs`` passed as on an H200 for fp16/bf16."""
    from flashdoc.kernels import backward_hopper, forward_hopper, varlen

    calls = []
    for name in ("dkdv", "dq"):
        monkeypatch.setattr(
            varlen, f"varlen_bwd_{name}_hopper", lambda *args, name=name, **kwargs: calls.append((name, args))
        )
    runs = lambda q: q.dtype in (torch.float16, torch.bfloat16)  # noqa: E731
    monkeypatch.setattr(forward_hopper, "gluon_runs", runs)
    monkeypatch.setattr(backward_hopper, "gluon_runs", runs)
    return calls


def test_varlen_takes_the_gluon_backward_where_dense_does(monkeypatch):
    """The backward's dK/dV and dQ go to the Hopper varlen kernels where the dense Hopper backward takes the call
    (fp16/bf16, the head dims and masks with a tuned config, windows, softcap), never to the fused dK/dV/dQ
    kernel; ALiBi, dropout, untuned keys (d = 64 without a mask, d = 32), fp32 and a given config stay portable.
    The Hopper launches get the preprocess's (1, H, total_q) LSE and delta and each kernel its schedule."""
    from flashdoc.kernels import varlen
    from flashdoc.kernels.backward import bwd_configs_for

    calls = _recording_backward(monkeypatch)
    # (nor the Hopper forward: its stand-in writes zeros and an infinite LSE, P = 0, for the portable backward)
    monkeypatch.setattr(
        varlen, "varlen_fwd_hopper", lambda q, k, v, out, lse, *args: (out.zero_(), lse.fill_(float("inf")))
    )

    def routed(head_dim=64, dtype=torch.float16, causal=True, **options):
        q, k, v, cu_q, cu_k = packed_inputs([20, 0, 33], [20, 0, 33], 4, 2, head_dim, dtype, seed=3)
        calls.clear()
        out = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 33, 33, causal=causal, **options)
        out.float().sum().backward()
        return sorted(name for name, _ in calls)

    both = ["dkdv", "dq"]
    assert routed() == both
    assert routed(head_dim=59) == both  # padded to 64
    assert routed(head_dim=128, causal=False) == both
    assert routed(head_dim=128, causal=False, window_size=(8, 0)) == both
    assert routed(head_dim=64, causal=False, window_size=(8, -1)) == both  # a window takes the causal entry
    assert routed(head_dim=256, causal=False, softcap=20.0) == both
    assert routed(head_dim=64, causal=False) == []  # the dense call's key has no config either
    assert routed(head_dim=32) == []
    assert routed(dtype=torch.float32) == []
    assert routed(alibi_slopes=torch.full((4,), 0.1, device=DEVICE)) == []
    assert routed(dropout_p=0.1) == []
    assert routed(deterministic=False) == both  # (no fused kernel: split kernels, each element written once)

    q, k, v, cu_q, cu_k = (
        t.detach() if t.requires_grad else t for t in packed_inputs([20, 7], [9, 30], 4, 2, 128, torch.bfloat16)
    )
    out, lse = torch.zeros_like(q), torch.full((4, 27), float("inf"), device=DEVICE)
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    calls.clear()
    varlen.varlen_bwd(torch.ones_like(q), q, k, v, out, lse, None, *grads, cu_q, cu_k, 20, 30, 0.1, True)
    (_, dkdv), (_, dq) = sorted(calls, key=lambda c: c[0])
    assert all(a is b for a, b in zip(dkdv[:6], (q, k, v, dkdv[3], grads[1], grads[2]))) and dq[4] is grads[0]
    for args in (dkdv[6:], dq[5:]):
        lse2, delta, cu_q_, cu_k_, order, max_seqlen_k, scale, causal, _variant = args
        assert lse2.shape == delta.shape == (1, 4, 27) and cu_q_ is cu_q and cu_k_ is cu_k
        assert (max_seqlen_k, scale, causal) == (30, 0.1, True)
    assert dkdv[10].tolist() == schedule(cu_q).tolist() and dq[9].tolist() == schedule(cu_k).tolist()
    calls.clear()
    varlen.varlen_bwd(
        torch.ones_like(q),
        q,
        k,
        v,
        out,
        lse,
        None,
        *grads,
        cu_q,
        cu_k,
        20,
        30,
        0.1,
        True,
        bwd_configs_for(128, torch.bfloat16, True)[0],
    )
    assert calls == []  # a config keeps both kernels portable


# the Hopper dK/dV and dQ kernels' parameters, in order, up to their constexprs
HOPPER_DKDV_ARGS = (
    "q_desc do_desc k_desc v_desc dk_desc dv_desc dq_desc LSE2 DELTA n_heads group_size seqlen_q seqlen_k "
    "right_offset softmax_scale qk_scale left_offset softcap_scale DK DV stride_dks stride_dkh stride_dvs stride_dvh "
    "CU_Q CU_K ITEMS n_seqs total_q"
).split()
HOPPER_WIDE_ARGS = [name for name in HOPPER_DKDV_ARGS if name != "dq_desc"]
HOPPER_DQ_ARGS = (
    "q_desc do_desc k_desc v_desc dq_desc LSE2 DELTA n_heads group_size seqlen_q seqlen_k right_offset "
    "softmax_scale qk_scale left_offset softcap_scale DQ stride_dqs stride_dqh CU_Q CU_K ITEMS n_seqs total_q"
).split()


def _hopper_bwd_launches(monkeypatch, lens_q, lens_k, head_dim=64, n_heads=4, n_kv_heads=2, **options):
    """The launches ``varlen_bwd_dkdv_hopper`` and ``varlen_bwd_dq_hopper`` plan for a call, as (kernel name,
    grid, arguments by name, constexprs), worked out on the host and not run."""
    from flashdoc.kernels import backward_hopper, varlen
    from flashdoc.kernels.mask import Variant

    launches = []
    for name in ("_attn_bwd_dkdv_hopper", "_attn_bwd_dkdv_hopper_wide", "_attn_bwd_dq_hopper"):
        monkeypatch.setattr(backward_hopper, name, name, raising=False)
    names = {
        "_attn_bwd_dkdv_hopper": HOPPER_DKDV_ARGS,
        "_attn_bwd_dkdv_hopper_wide": HOPPER_WIDE_ARGS,
        "_attn_bwd_dq_hopper": HOPPER_DQ_ARGS,
    }

    def plan(kernel, grid, args, constexprs, num_warps, objects):
        launches.append((kernel, grid, dict(zip(names[kernel], args, strict=True)), constexprs))
        return lambda objects: None

    monkeypatch.setattr(varlen, "gluon_plan", plan)
    monkeypatch.setattr(varlen, "_dkdv_hopper_plans", {})
    monkeypatch.setattr(varlen, "_dq_hopper_plans", {})
    q, k, v, cu_q, cu_k = (
        t.detach() if t.requires_grad else t
        for t in packed_inputs(lens_q, lens_k, n_heads, n_kv_heads, head_dim, torch.float16)
    )
    grads = [torch.empty_like(t) for t in (q, k, v)]
    # (distinct values: the padded copies must move each one, each to its own buffer)
    lse2, delta = torch.randn(2, 1, n_heads, q.shape[0], device=DEVICE)
    causal = options.pop("causal", False)
    variant = Variant(**options)
    tail = (cu_q, cu_k)
    varlen.varlen_bwd_dkdv_hopper(
        q, k, v, q, *grads[1:], lse2, delta, *tail, schedule(cu_q), max(lens_k), 0.125, causal, variant
    )
    varlen.varlen_bwd_dq_hopper(
        q, k, v, q, grads[0], lse2, delta, *tail, schedule(cu_k), max(lens_k), 0.125, causal, variant
    )
    return launches, (q, k, v, *grads, lse2, delta, cu_q, cu_k)


def expected_items(order, lengths, n_units, rows, n_programs):
    """``varlen.item_table``'s table by hand: (sequence, its item) for each item in order, then (-1, 0)."""
    items = [[b, local] for b in order.tolist() for local in range(n_units * -(-lengths[b] // rows))]
    return items + [[-1, 0]] * (n_programs - len(items))


@pytest.mark.parametrize("block", [64, 128])
def test_padded_rows_start_each_sequence_on_a_block(block):
    """``padded_rows`` moves each sequence's LSE rows to a start that is a multiple of block (where TMA tiles of
    them start on 16 bytes), keeps every row, and gives each sequence room for its rows before the next one."""
    from flashdoc.kernels.varlen import padded_rows

    g = torch.Generator().manual_seed(block)
    lengths = [1, 0, 63, 64, 65, 1000, 0, 3, 129] + torch.randint(0, 300, (20,), generator=g).tolist()
    cu = cu_seqlens(lengths).cpu()
    t = torch.randn(1, 3, sum(lengths), generator=g)
    out = padded_rows(t, cu, block)
    starts = [(int(cu[b]) + b * block) // block * block for b in range(len(lengths))]
    assert out.shape[2] % block == 0 and all(start % block == 0 for start in starts)
    for b, n in enumerate(lengths):
        assert torch.equal(out[0, :, starts[b] : starts[b] + n], t[0, :, int(cu[b]) : int(cu[b]) + n])
        if b + 1 < len(lengths):
            assert starts[b] + n <= starts[b + 1]
    assert starts[-1] + lengths[-1] <= out.shape[2]


def test_varlen_hopper_backward_launch(monkeypatch):
    """The Hopper varlen backward's host side: descriptors over the packed tensors seen as one batch, 1-D grids
    bounded by the items the shapes allow (dK/dV: (sequence, kv head, key block); dQ: (sequence, head, query
    rows)), the gradients' pointers and strides for the masked stores, the band's offsets from each sequence's
    diagonal, and the wide dK/dV kernel (half-width tiles) past head dim 128."""
    from flashdoc.kernels.backward_hopper import HOPPER_DKDV_CONFIGS, HOPPER_DQ_CONFIGS
    from flashdoc.kernels.varlen import UNBOUNDED_RIGHT

    lens = [100, 0, 300, 1]
    launches, (q, k, v, dq, dk, dv, lse2, delta, cu_q, cu_k) = _hopper_bwd_launches(
        monkeypatch, lens, lens, causal=True
    )
    (kernel, grid, args, constexprs), (dq_kernel, dq_grid, dq_args, dq_constexprs) = launches
    block_m, block_n, stages, consumers = HOPPER_DKDV_CONFIGS[(64, True)]
    assert kernel == "_attn_bwd_dkdv_hopper" and grid == (2 * tile_bound(401, 4, consumers * block_n),)
    assert args["q_desc"].base is q and args["q_desc"].shape == [1, 401, 4, 64]
    assert args["q_desc"].block_shape == [1, block_m, 1, 64] and args["k_desc"].block_shape == [1, block_n, 1, 64]
    # the LSE's rows per sequence from a multiple of block_m (TMA tiles start on 16 bytes; 100 and 400 do not)
    starts = [(start + b * block_m) // block_m * block_m for b, start in enumerate(cu_q[:-1].tolist())]
    assert args["LSE2"].shape == [4, -(-(401 + 4 * block_m) // block_m) * block_m]
    assert args["LSE2"].block_shape == [1, block_m] and args["DELTA"].shape == args["LSE2"].shape
    for b, (start, n) in enumerate(zip(cu_q[:-1].tolist(), lens, strict=True)):
        assert torch.equal(args["LSE2"].base[:, starts[b] : starts[b] + n], lse2[0, :, start : start + n])
        assert torch.equal(args["DELTA"].base[:, starts[b] : starts[b] + n], delta[0, :, start : start + n])
    assert args["DK"] is dk and args["DV"] is dv and (args["stride_dks"], args["stride_dkh"]) == (128, 64)
    assert (args["n_heads"], args["group_size"], args["n_seqs"], args["total_q"]) == (4, 2, 4, 401)
    assert args["CU_Q"] is cu_q and args["CU_K"] is cu_k
    # each program's (sequence, item in it): sequences longest first by queries, 2 kv heads x key blocks each
    assert args["ITEMS"].tolist() == expected_items(schedule(cu_q), lens, 2, consumers * block_n, grid[0])
    assert args["right_offset"] == 0 and args["softmax_scale"] == 0.125
    assert constexprs == dict(
        IS_CAUSAL=True, IS_LOCAL=False, SOFTCAP=False, STAGES=stages, N_CONSUMERS=consumers, VARLEN=True
    )
    block_m, block_n, stages, consumers = HOPPER_DQ_CONFIGS[(64, True)]
    assert dq_kernel == "_attn_bwd_dq_hopper" and dq_grid == (4 * tile_bound(401, 4, consumers * block_m),)
    assert dq_args["DQ"] is dq and (dq_args["stride_dqs"], dq_args["stride_dqh"]) == (256, 64)
    assert dq_args["LSE2"] is lse2 and dq_args["DELTA"] is delta
    assert dq_args["ITEMS"].tolist() == expected_items(schedule(cu_k), lens, 4, consumers * block_m, dq_grid[0])
    assert dq_args["q_desc"].block_shape == [1, block_m, 1, 64] and dq_args["k_desc"].block_shape == [1, block_n, 1, 64]
    assert dq_constexprs["VARLEN"] and dq_constexprs["N_CONSUMERS"] == consumers

    launches, _ = _hopper_bwd_launches(monkeypatch, [5, 9], [7, 9], head_dim=128, window_size=(4, -1))
    for _, _, args, constexprs in launches:
        assert constexprs["IS_CAUSAL"] and constexprs["IS_LOCAL"]
        assert (args["right_offset"], args["left_offset"]) == (UNBOUNDED_RIGHT, -4)
    launches, (_, _, _, _, dk, _, _, _, _, _) = _hopper_bwd_launches(
        monkeypatch, [5, 9], [7, 9], head_dim=256, softcap=30.0
    )
    (kernel, grid, args, constexprs), (_, _, dq_args, _) = launches
    block_m, block_n, stages, _ = HOPPER_DKDV_CONFIGS[(256, False)]
    assert kernel == "_attn_bwd_dkdv_hopper_wide" and grid == (2 * tile_bound(16, 2, block_n),)
    assert args["k_desc"].block_shape == [1, block_n, 1, 128] and args["DK"] is dk
    assert constexprs["SOFTCAP"] and not constexprs["IS_CAUSAL"] and "N_CONSUMERS" not in constexprs
    assert dq_args["q_desc"].block_shape[3] == 256


# the Hopper forward's parameters, in order, up to its constexprs (forward_hopper._attn_fwd_hopper)
HOPPER_FWD_ARGS = (
    "q_desc k_desc v_desc o_desc LSE COUNTER n_tiles total section n_heads group_size seqlen_q seqlen_k "
    "right_offset qk_scale left_offset softcap_scale O stride_os stride_oh CU_Q CU_K ORDER n_seqs total_q"
).split()


def _hopper_launch(monkeypatch, lens_q, lens_k, head_dim=64, n_heads=4, n_kv_heads=2, **options):
    """The launch ``varlen_fwd_hopper`` plans for a call (grid, arguments by name, constexprs), worked out on the
    host as on an H200 with 132 SMs, and not run."""
    from flashdoc.kernels import forward_hopper, varlen
    from flashdoc.kernels.mask import Variant

    launches = []

    def plan(kernel, grid, args, constexprs, num_warps, objects):
        launches.append((grid, dict(zip(HOPPER_FWD_ARGS, args, strict=True)), constexprs, objects))
        return lambda objects: None

    monkeypatch.setattr(varlen, "gluon_plan", plan)
    monkeypatch.setattr(varlen, "_hopper_plans", {})
    monkeypatch.setattr(forward_hopper, "_sm_count", lambda index: 132)
    monkeypatch.setattr(forward_hopper, "_attn_fwd_hopper", None, raising=False)
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, n_heads, n_kv_heads, head_dim, torch.float16)
    out = torch.empty_like(q)
    lse = torch.empty(n_heads, q.shape[0])
    causal = options.pop("causal", False)
    varlen.varlen_fwd_hopper(q, k, v, out, lse, cu_q, cu_k, max(lens_k), head_dim**-0.5, causal, Variant(**options))
    (launch,) = launches
    return launch, (q, k, v, out, lse, cu_q, cu_k)


def test_varlen_hopper_launch(monkeypatch):
    """The Gluon varlen launch's host side: TMA descriptors over the packed tensors seen as one batch, a
    persistent grid bounded by the items the shapes allow, the band's offsets from each sequence's diagonal
    (a window open to the right runs the causal kernel with its right edge past every key), and the output,
    cu_seqlens and the schedule passed through."""
    from flashdoc.kernels import LOG2E
    from flashdoc.kernels.forward_hopper import HOPPER_CONFIGS, WINDOW_CONFIGS
    from flashdoc.kernels.varlen import UNBOUNDED_RIGHT

    lens = [100, 0, 300, 1]
    (grid, args, constexprs, objects), (q, k, v, out, lse, cu_q, cu_k) = _hopper_launch(monkeypatch, lens, lens)
    block_m, block_n, stages, consumers, _ = HOPPER_CONFIGS[(64, False)]
    items = 4 * tile_bound(401, 4, consumers * block_m)
    assert args["total"] == items and grid == (min(items, 132),)
    assert args["q_desc"].base is q and args["q_desc"].shape == [1, 401, 4, 64]
    assert args["q_desc"].block_shape == [1, block_m, 1, 64] and args["o_desc"].base is out
    assert args["k_desc"].base is k and args["k_desc"].block_shape == [1, block_n, 1, 64]
    assert args["k_desc"].strides == [401 * 2 * 64, 2 * 64, 64, 1]
    assert (args["n_heads"], args["group_size"], args["n_seqs"], args["total_q"]) == (4, 2, 4, 401)
    assert args["LSE"] is lse and args["O"] is out and (args["stride_os"], args["stride_oh"]) == (256, 64)
    assert args["CU_Q"] is cu_q and args["CU_K"] is cu_k
    assert args["ORDER"].tolist() == schedule(cu_k).tolist() and args["COUNTER"].tolist() == [0]
    assert constexprs["VARLEN"] and not constexprs["IS_CAUSAL"] and not constexprs["IS_LOCAL"]
    assert (constexprs["BLOCK_M"], constexprs["STAGES"], constexprs["N_CONSUMERS"]) == (block_m, stages, consumers)
    assert args["qk_scale"] == pytest.approx(64**-0.5 * LOG2E)

    (_, args, constexprs, _), _ = _hopper_launch(monkeypatch, [5, 9], [7, 9], causal=True, head_dim=128)
    assert constexprs["IS_CAUSAL"] and args["right_offset"] == 0 and not constexprs["O_IN_Q"]
    (_, args, constexprs, _), _ = _hopper_launch(monkeypatch, [5, 9], [7, 9], window_size=(4, 2))
    assert constexprs["IS_CAUSAL"] and constexprs["IS_LOCAL"]
    assert (args["right_offset"], args["left_offset"]) == (2, -4)
    assert constexprs["BLOCK_N"] == WINDOW_CONFIGS[(64, True)][1]
    (_, args, constexprs, _), _ = _hopper_launch(monkeypatch, [5, 9], [7, 9], window_size=(4, -1))
    assert constexprs["IS_CAUSAL"] and constexprs["IS_LOCAL"] and args["right_offset"] == UNBOUNDED_RIGHT
    (_, args, constexprs, _), _ = _hopper_launch(monkeypatch, [5, 9], [7, 9], window_size=(9, -1), head_dim=256)
    assert not constexprs["IS_CAUSAL"] and not constexprs["IS_LOCAL"]  # as wide as max_seqlen_k: no edge
    assert constexprs["O_IN_Q"]
    (_, args, constexprs, _), _ = _hopper_launch(monkeypatch, [5, 9], [7, 9], causal=True, softcap=30.0)
    assert constexprs["SOFTCAP"] and args["qk_scale"] == pytest.approx(30.0 * LOG2E)
    assert args["softcap_scale"] == pytest.approx(64**-0.5 / 30.0)


def _no_host_reads(monkeypatch):
    """Make every Tensor -> Python value conversion made by flashdoc's own code raise (Triton's interpreter, which
    reads the kernels' arguments on the host, is not flashdoc's code)."""
    package = flashdoc.__file__.rsplit("/", 1)[0]

    def guard(name):
        original = getattr(torch.Tensor, name)

        def method(self, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(package):
                raise AssertionError(f"flashdoc called Tensor.{name} on the host")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, method)

    for name in ("item", "tolist", "__bool__", "__int__", "__index__", "__float__", "numpy", "cpu"):
        guard(name)


def test_varlen_reads_nothing_on_the_host(monkeypatch):
    q, k, v, cu_q, cu_k = packed_inputs(*CROSS, 2, 1, 16, torch.float32)
    slopes = torch.full((2,), 0.1, device=DEVICE)
    # CPU tensors' values are checked on the host, for free: take the path a GPU's tensors take
    monkeypatch.setattr(flashdoc._validation, "host_readable", lambda *tensors: False)
    _no_host_reads(monkeypatch)
    out = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 30, 0.1, None, True, (5, 0), 3.0, slopes)
    out.sum().backward()
    monkeypatch.undo()
    assert torch.isfinite(q.grad).all()


def test_varlen_debug_checks(monkeypatch):
    """FLASHDOC_DEBUG_VARLEN=1 checks cu_seqlens' values (a device sync); without it they are not read."""
    q, k, v, cu_q, cu_k = packed_inputs([5, 6], [5, 6], 2, 2, 16, torch.float32, seed=1)
    q, k, v = q.detach(), k.detach(), v.detach()
    bad = [
        (torch.tensor([1, 5, 11], dtype=torch.int32), 6, "cu_seqlens_q must start at 0"),
        (torch.tensor([0, 7, 5], dtype=torch.int32), 7, "cu_seqlens_q must be non-decreasing"),
        (torch.tensor([0, 5, 10], dtype=torch.int32), 6, "cu_seqlens_q ends at 10 but the tensor holds 11"),
        (cu_q, 5, "max_seqlen_q is 5 but cu_seqlens_q holds a sequence of 6"),
    ]
    monkeypatch.setenv("FLASHDOC_DEBUG_VARLEN", "1")
    flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 6)
    for cu, max_seqlen, match in bad:
        with pytest.raises(ValueError, match=match):
            flashdoc.flash_attn_varlen_func(q, k, v, cu.to(DEVICE), cu_k, max_seqlen, 6)
    with pytest.raises(ValueError, match="max_seqlen_k is 2"):
        flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 2)


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU tensors only: on a GPU the values wait for the switch")
def test_cpu_cu_seqlens_values_are_always_checked():
    """On the CPU reading cu_seqlens costs nothing, so its values are checked without FLASHDOC_DEBUG_VARLEN: an
    entry past the tensors' length would have the interpreted kernels write past q's storage, corrupting the
    heap, where a GPU run reads past it."""
    q, k, v, cu_q, cu_k = packed_inputs([5, 6], [5, 6], 2, 2, 16, torch.float32, seed=1)
    q, k, v = q.detach(), k.detach(), v.detach()
    past_the_end = torch.tensor([0, 5, 40], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q ends at 40 but the tensor holds 11 tokens"):
        flashdoc.flash_attn_varlen_func(q, k, v, past_the_end, cu_k, 35, 6)
    with pytest.raises(ValueError, match="cu_seqlens_k ends at 40 but the tensor holds 11 tokens"):
        flashdoc.flash_attn_varlen_func(q, k, v, cu_q, past_the_end, 6, 35)


def _t(*shape, dtype=torch.float16):
    return torch.randn(*shape).to(device=DEVICE, dtype=dtype)


_CU = torch.tensor([0, 3, 8], dtype=torch.int32)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(q=_t(2, 8, 4, 32)), ValueError, "q must be 3-D"),
        (dict(k=_t(8, 32)), ValueError, "k must be 3-D"),
        (dict(v=_t(8, 4, 32, dtype=torch.float32)), TypeError, "v has dtype torch.float32 but q"),
        (dict(v=_t(9, 4, 32)), ValueError, "k and v must have the same total_k"),
        (dict(k=_t(8, 3, 32), v=_t(8, 3, 32)), ValueError, r"q heads \(4\) must be a multiple of k heads \(3\)"),
        (dict(v=_t(8, 4, 16)), ValueError, "share one head_dim"),
        (dict(cu_seqlens_q=[0, 3, 8]), TypeError, "cu_seqlens_q must be a torch.Tensor"),
        (dict(cu_seqlens_q=_CU.long()), TypeError, "cu_seqlens_q has dtype torch.int64; allowed: torch.int32"),
        (dict(cu_seqlens_k=_CU[None]), ValueError, r"cu_seqlens_k must be 1-D of shape \(batch \+ 1,\)"),
        (dict(cu_seqlens_k=_CU[:1]), ValueError, r"cu_seqlens_k must be 1-D of shape \(batch \+ 1,\)"),
        (dict(cu_seqlens_k=torch.tensor([0, 8], dtype=torch.int32)), ValueError, "cu_seqlens_q has 2 sequences"),
        (dict(cu_seqlens_q=_CU.to("meta")), ValueError, "cu_seqlens_q is on meta but q is on"),
        (dict(max_seqlen_q=5.0), TypeError, "max_seqlen_q must be an int"),
        (dict(max_seqlen_k=True), TypeError, "max_seqlen_k must be an int"),
        (dict(max_seqlen_k=-1), ValueError, "max_seqlen_k must be an int >= 0"),
        (dict(softmax_scale=0.0), ValueError, "softmax_scale must be a finite number > 0"),
        (dict(causal=None), TypeError, "causal must be a bool"),
        (dict(dropout_p=1.5), ValueError, r"dropout_p must be in \[0, 1\)"),
        (dict(window_size=(3,)), TypeError, "window_size must be a pair of ints"),
        (
            dict(alibi_slopes=torch.ones(3, 4)),
            ValueError,
            r"alibi_slopes has shape \(3, 4\); allowed: \(4,\) or \(2, 4\)",
        ),
        (dict(deterministic=None), TypeError, "deterministic must be a bool"),
        (dict(return_lse=1), TypeError, "return_lse must be a bool"),
    ],
)
def test_varlen_rejects(kwargs, exc, match):
    args = dict(
        q=_t(8, 4, 32),
        k=_t(8, 4, 32),
        v=_t(8, 4, 32),
        cu_seqlens_q=_CU.to(DEVICE),
        cu_seqlens_k=_CU.to(DEVICE),
        max_seqlen_q=5,
        max_seqlen_k=5,
    )
    # the cases' tensors are made at import, on the CPU: on the inputs' device each fails only its own check
    args.update(
        {n: a.to(DEVICE) if isinstance(a, torch.Tensor) and a.device.type == "cpu" else a for n, a in kwargs.items()}
    )
    with pytest.raises(exc, match=match):
        flashdoc.flash_attn_varlen_func(**args)


def test_varlen_rejects_strided_cu_seqlens():
    """The kernels index cu_seqlens as a plain array: a strided view would read the wrong lengths (and, past the
    end, other memory), so it is refused by name."""
    strided = torch.tensor([0, 99, 3, 99, 8, 99], dtype=torch.int32, device=DEVICE)[::2]
    q, k, v = (_t(8, 4, 32) for _ in range(3))
    with pytest.raises(ValueError, match=r"cu_seqlens_k must be contiguous, got stride 2; call \.contiguous\(\)"):
        flashdoc.flash_attn_varlen_func(q, k, v, _CU.to(DEVICE), strided, 5, 5)


def test_varlen_positional_order():
    """flash-attn 2's positional order: dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes."""
    q, k, v, cu_q, cu_k = (t.detach() if t.requires_grad else t for t in packed_inputs(*SELF, 2, 2, 16, torch.float32))
    a = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 40, 0.0, 0.3, True, (4, 0), 2.0)
    b = flashdoc.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, 40, 40, softmax_scale=0.3, causal=True, window_size=(4, 0), softcap=2.0
    )
    assert torch.equal(a, b)
    out, lse, probs = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 40, return_attn_probs=True)
    assert probs is None and lse.shape == (2, q.shape[0])


def test_varlen_opcheck():
    """The varlen ops' schemas and fake implementations agree with the kernels (eager and AOT dispatch)."""
    q, k, v, cu_q, cu_k = (t.detach() for t in packed_inputs([9, 4], [6, 12], 2, 1, 16, torch.float32))
    checks = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(
        torch.ops.flashdoc.varlen_fwd.default, (q, k, v, cu_q, cu_k, 9, 12, 0.25, True), test_utils=checks
    )
    out, lse = torch.ops.flashdoc.varlen_fwd(q, k, v, cu_q, cu_k, 9, 12, 0.25, True)
    torch.library.opcheck(
        torch.ops.flashdoc.varlen_bwd.default,
        (torch.randn_like(out), q, k, v, out, lse, torch.randn_like(lse), cu_q, cu_k, 9, 12, 0.25, True),
        test_utils=checks,
    )


def test_varlen_compile_fullgraph():
    """torch.compile(fullgraph=True) traces the call, forward and backward, with no graph break (aot_eager on
    the CPU: the fake implementations and AOTAutograd's joint graph)."""
    q, k, v, cu_q, cu_k = packed_inputs([9, 20], [9, 20], 2, 1, 16, torch.float32)

    def step(q, k, v, cu_q, cu_k):
        return flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 20, 20, causal=True, window_size=(6, 0))

    backend = "aot_eager" if DEVICE == "cpu" else "inductor"
    torch._dynamo.reset()
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    out = compiled(q, k, v, cu_q, cu_k)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    out_eager = step(q, k, v, cu_q, cu_k)
    grads_eager = torch.autograd.grad(out_eager.sum(), (q, k, v))
    torch.testing.assert_close(out, out_eager)
    for a, b in zip(grads, grads_eager):
        torch.testing.assert_close(a, b)


def test_varlen_compile_fullgraph_with_one_cu_seqlens_and_one_tensor():
    """Self-attention passes one cu_seqlens as both (and here one tensor as q, k and v): torch.compile cannot
    trace an autograd.Function given a tensor twice, so the call must hand each over once, and the gradient of
    the shared tensor is the sum of its three roles'."""
    q, _, _, cu, _ = packed_inputs([9, 20], [9, 20], 2, 2, 16, torch.float32)

    def step(x, cu):
        return flashdoc.flash_attn_varlen_func(x, x, x, cu, cu, 20, 20, causal=True)

    backend = "aot_eager" if DEVICE == "cpu" else "inductor"
    torch._dynamo.reset()
    out = torch.compile(step, backend=backend, fullgraph=True)(q, cu)
    (grad,) = torch.autograd.grad(out.sum(), q)
    k, v = (q.detach().clone().requires_grad_() for _ in range(2))
    q_alone = q.detach().clone().requires_grad_()
    out_apart = flashdoc.flash_attn_varlen_func(q_alone, k, v, cu, cu.clone(), 20, 20, causal=True)
    torch.testing.assert_close(out, out_apart)
    torch.testing.assert_close(grad, sum(torch.autograd.grad(out_apart.sum(), (q_alone, k, v))))


# --- GPU sweep (flash-attn's parametrization) ------------------------------------------------------------------
# Random lengths up to the pair's maxima, as flash-attn's varlen tests draw them (a few sequences empty), every
# feature over head dims {32, 59, 64, 128, 256}, MHA and GQA.

GPU_SEQLENS = [(113, 203), (128, 217), (512, 256), (1023, 1024), (2048, 2048)]
GPU_HEAD_DIMS = [32, 59, 64, 128, 256]
HEADS = {"mha": (6, 6), "gqa": (6, 2)}


def random_lengths(max_q, max_k, seed, n_seqs=6):
    """Lengths drawn uniformly in [0, max] (the maxima themselves appear once), self-attention (equal lengths)
    when the maxima are equal."""
    g = torch.Generator().manual_seed(seed)
    lens_q = torch.randint(0, max_q + 1, (n_seqs,), generator=g).tolist()
    lens_k = lens_q if max_q == max_k else torch.randint(0, max_k + 1, (n_seqs,), generator=g).tolist()
    lens_q[0], lens_k[0] = max_q, max_k
    return lens_q, lens_k


GPU_VARIANTS = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window_size=(97, 23)),
    "causal-window": dict(causal=True, window_size=(150, -1)),
    "softcap": dict(causal=True, softcap=50.0, q_scale=4.0),
    "alibi": dict(causal=True, alibi=True),
    "dropout": dict(dropout_p=0.17),
}


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(GPU_VARIANTS))
@pytest.mark.parametrize("mha_type", list(HEADS))
@pytest.mark.parametrize("head_dim", GPU_HEAD_DIMS)
@pytest.mark.parametrize("seqlen_q,seqlen_k", GPU_SEQLENS)
def test_gpu_varlen(seqlen_q, seqlen_k, head_dim, mha_type, variant, monkeypatch):
    gluon_forward(monkeypatch, on=False)
    check_gpu_varlen(seqlen_q, seqlen_k, head_dim, mha_type, variant)


def check_gpu_varlen(seqlen_q, seqlen_k, head_dim, mha_type, variant):
    options = dict(GPU_VARIANTS[variant])
    lens_q, lens_k = random_lengths(seqlen_q, seqlen_k, seed=seqlen_q + head_dim)
    n_heads, n_kv_heads = HEADS[mha_type]
    if options.pop("alibi", False):
        g = torch.Generator().manual_seed(head_dim)
        options["alibi_slopes"] = torch.rand(len(lens_q), n_heads, generator=g).to(DEVICE) * 0.3
    check_varlen(lens_q, lens_k, n_heads, n_kv_heads, head_dim, torch.bfloat16, seed=head_dim, **options)


# The sweep again on the Hopper kernels (the one above pins the portable ones): the variants they take (ALiBi and
# dropout stay portable), at the head dims with a config (59 runs padded to 64), forward and backward.
HOPPER = DEVICE == "cuda" and torch.cuda.get_device_capability()[0] == 9
GLUON_VARIANTS = [name for name in GPU_VARIANTS if name not in ("alibi", "dropout")]
on_hopper = pytest.mark.skipif(not HOPPER, reason="the Gluon varlen kernels run on Hopper GPUs only")


def gluon_forward(monkeypatch, on: bool = True) -> list:
    """The list that each call reaching the Hopper varlen forward adds to; with on=False no call reaches it, nor
    the Hopper varlen backward (the portable kernels take every call, as they do off Hopper)."""
    from flashdoc.kernels import varlen

    calls = []
    if on:
        real = varlen.varlen_fwd_hopper
        monkeypatch.setattr(varlen, "varlen_fwd_hopper", lambda *a, **kw: calls.append(a[0].shape) or real(*a, **kw))
    else:
        monkeypatch.setattr(varlen, "gluon_varlen", lambda *args: False)
        monkeypatch.setattr(varlen, "gluon_varlen_bwd", lambda *args: (False, False))
    return calls


def gluon_backward(monkeypatch) -> list:
    """The list that each launch of the Hopper varlen backward adds its kernel's name to ("dkdv", "dq")."""
    from flashdoc.kernels import varlen

    calls = []
    for name in ("dkdv", "dq"):
        real = getattr(varlen, f"varlen_bwd_{name}_hopper")
        monkeypatch.setattr(
            varlen,
            f"varlen_bwd_{name}_hopper",
            lambda *a, name=name, real=real, **kw: calls.append(name) or real(*a, **kw),
        )
    return calls


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("variant", GLUON_VARIANTS)
@pytest.mark.parametrize("mha_type", list(HEADS))
@pytest.mark.parametrize("head_dim", [59, 64, 128, 256])
@pytest.mark.parametrize("seqlen_q,seqlen_k", GPU_SEQLENS)
def test_gpu_varlen_gluon(seqlen_q, seqlen_k, head_dim, mha_type, variant, monkeypatch):
    """Forward and backward on the Hopper kernels, against the oracle: the backward where the dense Hopper
    backward runs (not d = 64 without a mask: no tuned config there)."""
    calls = gluon_forward(monkeypatch)
    backward = gluon_backward(monkeypatch)
    check_gpu_varlen(seqlen_q, seqlen_k, head_dim, mha_type, variant)
    assert calls
    assert sorted(backward) == ([] if head_dim <= 64 and variant == "plain" else ["dkdv", "dq"])


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_varlen_gluon_tile_edges(causal, dtype, head_dim, monkeypatch):
    """Sequences one row either side of the Hopper forward's 64-row consumer tiles and 192-row items (and of the
    backward's 64-key and 128-key blocks and 128-row dQ items), one of one token, empty ones and a long one, in
    one batch; cross-attention lengths shifted by one too. Forward and backward on the Hopper kernels."""
    calls = gluon_forward(monkeypatch)
    backward = gluon_backward(monkeypatch)
    lens = [1, 63, 64, 65, 0, 127, 128, 129, 191, 192, 193, 255, 256, 257, 1000, 0, 8192]
    check_varlen(lens, lens, 4, 2, head_dim, dtype, causal)
    shifted = [n + 1 if b % 2 else max(n - 1, 0) for b, n in enumerate(lens)]
    check_varlen(lens, shifted, 4, 2, head_dim, dtype, causal)
    assert len(calls) == 2
    assert sorted(backward) == ([] if head_dim == 64 and not causal else ["dkdv", "dkdv", "dq", "dq"])


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("variant", ["causal-window", "softcap"])
def test_gpu_varlen_gluon_backward_edges_variants(variant, head_dim, monkeypatch):
    """The Hopper varlen backward's window and softcap at tile-edge lengths, MQA, against the oracle (the
    forward on the Hopper kernel too)."""
    gluon_forward(monkeypatch)
    backward = gluon_backward(monkeypatch)
    options = dict(GPU_VARIANTS[variant])
    lens_q = [129, 1, 0, 64, 257, 65, 700]
    lens_k = [127, 5, 3, 64, 300, 0, 650]
    check_varlen(lens_q, lens_k, 4, 1, head_dim, torch.bfloat16, seed=head_dim, **options)
    assert sorted(backward) == ["dkdv", "dq"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_varlen_dtypes(causal, dtype):
    lens_q, lens_k = random_lengths(1023, 1024, seed=7, n_seqs=8)
    check_varlen(lens_q, lens_k, 4, 2, 128, dtype, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [False, pytest.param(True, marks=on_hopper)], ids=["portable", "gluon"])
def test_gpu_varlen_many_short_sequences(gluon, monkeypatch):
    """More sequences than one step of the in-kernel search covers (varlen.CHUNK, and the Hopper forward's 128),
    most shorter than a tile."""
    calls = gluon_forward(monkeypatch, gluon)
    backward = gluon_backward(monkeypatch)
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(0, 40, (300,), generator=g).tolist()
    check_varlen(lengths, lengths, 4, 4, 64, torch.bfloat16, True)
    assert bool(calls) == gluon
    assert sorted(backward) == (["dkdv", "dq"] if gluon else [])


def _graph_inputs():
    lens = [700, 3, 0, 1500, 64, 129]
    q, k, v, cu_q, cu_k = packed_inputs(lens, lens, 8, 2, 128, torch.bfloat16)
    return [t.detach() for t in (q, k, v)], cu_q, max(lens)


@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [False, pytest.param(True, marks=on_hopper)], ids=["portable", "gluon"])
def test_gpu_varlen_cuda_graph(gluon, monkeypatch):
    """Forward and backward captured in a CUDA graph, replayed after cu_seqlens changed in place to another split
    of the same tokens: the replay matches an eager call with the new split, which it can only do if nothing on
    the host read the old one."""
    calls = gluon_forward(monkeypatch, gluon)
    (q, k, v), cu, max_seqlen = _graph_inputs()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]

    def step():
        for t in leaves:
            t.grad = None
        out = flashdoc.flash_attn_varlen_func(*leaves, cu, cu, max_seqlen, max_seqlen, causal=True)
        out.backward(torch.ones_like(out))
        return out

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # compile (and autotune) outside the capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    new_lens = [300, 403, 1500, 0, 192, 1]
    assert sum(new_lens) == q.shape[0]  # another split of the same tokens, not more of them
    cu.copy_(cu_seqlens(new_lens))
    graph.replay()
    torch.cuda.synchronize()
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = flashdoc.flash_attn_varlen_func(*ref_leaves, cu, cu, 1500, 1500, causal=True)
    ref.backward(torch.ones_like(ref))
    torch.testing.assert_close(out, ref)
    for a, b in zip(leaves, ref_leaves):
        torch.testing.assert_close(a.grad, b.grad)
    assert bool(calls) == gluon


@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [False, pytest.param(True, marks=on_hopper)], ids=["portable", "gluon"])
def test_gpu_varlen_no_sync(gluon, monkeypatch):
    """With torch's sync debug mode set to error, a warm forward and backward (variants on) never synchronise.
    (The Hopper forward takes the window and softcap, not dropout or ALiBi.)"""
    calls = gluon_forward(monkeypatch, gluon)
    (q, k, v), cu, max_seqlen = _graph_inputs()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    slopes = None if gluon else torch.full((8,), 0.05, device=DEVICE)
    dropout_p = 0.0 if gluon else 0.1

    def step():
        out = flashdoc.flash_attn_varlen_func(
            *leaves, cu, cu, max_seqlen, max_seqlen, dropout_p, None, True, (256, 0), 30.0, slopes
        )
        out.backward(torch.ones_like(out))

    step()  # compile and autotune first: the autotuner synchronises to time its candidates
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(math.isfinite(t.grad.float().sum().item()) for t in leaves)
    assert bool(calls) == gluon


@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [False, pytest.param(True, marks=on_hopper)], ids=["portable", "gluon"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_varlen_equals_dense_long(causal, gluon, monkeypatch):
    """Per-sequence equality with flash_attn_func at lengths where the autotuned configs apply."""
    calls = gluon_forward(monkeypatch, gluon)
    lens = [2048, 1, 777, 1024]
    q, k, v, cu_q, cu_k = packed_inputs(lens, lens, 8, 8, 128, torch.bfloat16)
    out = flashdoc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 2048, 2048, causal=causal)
    for b in range(len(lens)):
        s0, s1 = cu_q[b : b + 2].tolist()
        dense = flashdoc.flash_attn_func(q[None, s0:s1], k[None, s0:s1], v[None, s0:s1], causal=causal)
        torch.testing.assert_close(out[s0:s1], dense[0], atol=2e-2, rtol=2e-2)
    assert bool(calls) == gluon


@pytest.mark.parametrize("kernel", ["forward", "dK/dV", "dQ"])
def test_varlen_hopper_plans_refuse_a_consumer_count_the_kernels_do_not_build(monkeypatch, kernel):
    """As the dense plans do (``test_launch_cache``): a config whose consumer count the Gluon kernels do not
    build is refused on the host with a ValueError that names it."""
    from flashdoc.kernels import varlen
    from flashdoc.kernels.mask import Variant

    for plans in ("_hopper_plans", "_dkdv_hopper_plans", "_dq_hopper_plans"):
        monkeypatch.setattr(varlen, plans, {})
    lens = [100, 0, 300, 1]
    q, k, v, cu_q, cu_k = (
        t.detach() if t.requires_grad else t for t in packed_inputs(lens, lens, 4, 2, 64, torch.float16)
    )
    lse2, delta = torch.zeros(2, 1, 4, q.shape[0], device=DEVICE)
    with pytest.raises(ValueError, match=r"config=\(64, 64, 2, 1.*consumer warpgroups"):
        if kernel == "forward":
            lse = torch.empty(4, q.shape[0])
            varlen.varlen_fwd_hopper(
                q, k, v, torch.empty_like(q), lse, cu_q, cu_k, 300, 0.125, True, Variant(), (64, 64, 2, 1, True)
            )
        elif kernel == "dK/dV":
            dk, dv = torch.empty_like(k), torch.empty_like(v)
            varlen.varlen_bwd_dkdv_hopper(
                q,
                k,
                v,
                q,
                dk,
                dv,
                lse2,
                delta,
                cu_q,
                cu_k,
                schedule(cu_q),
                300,
                0.125,
                True,
                Variant(),
                (64, 64, 2, 1),
            )
        else:
            varlen.varlen_bwd_dq_hopper(
                q,
                k,
                v,
                q,
                torch.empty_like(q),
                lse2,
                delta,
                cu_q,
                cu_k,
                schedule(cu_k),
                300,
                0.125,
                True,
                Variant(),
                (64, 64, 2, 1),
            )
