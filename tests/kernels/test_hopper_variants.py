"""The Hopper (Gluon) kernels' sliding windows and softcap against a float64 oracle, by flash-attn's criterion.

The dispatcher sends windows and softcap to these kernels (``mask.hopper_supports``). On the GPU: the forward,
dK/dV (narrow at d <= 128, wide at d = 256) and dQ kernels, called directly in their tuned configs and in the
other configs the tables' tests use, over odd lengths, GQA, both diagonal alignments, fp16 and bf16. On the CPU:
the rule that turns (causal, window_size) into the kernels' causal offset and window width
(``hopper_common.mask``) against flash-attn's definition, element by element.
"""

import pytest
import torch
from attention_oracle import assert_close_like_flash_attn, make_qkv

from flashdoc.kernels.hopper_common import mask

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9

# (causal, window_size, softcap): softcap alone, a window alone in each shape flash-attn allows (left and right,
# left only, right only, the diagonal alone), causal with a left edge, and a window with softcap
VARIANTS = [
    (False, (-1, -1), 50.0),
    (True, (-1, -1), 50.0),
    (False, (128, 0), 0.0),
    (True, (100, -1), 0.0),
    (False, (57, 33), 0.0),
    (False, (300, -1), 0.0),
    (False, (-1, 20), 0.0),
    (False, (0, 0), 0.0),
    (False, (90, 10), 30.0),
]
VARIANT_IDS = [f"{'causal' if c else 'full'}-win{w[0]},{w[1]}-cap{s:g}" for c, w, s in VARIANTS]
SHAPES = [(2, 1000, 1203, 4, 2), (1, 777, 333, 2, 1), (1, 1023, 1024, 4, 1), (3, 64, 64, 2, 2)]


def visible(seqlen_q, seqlen_k, causal, window_size, bottom_right, device="cpu"):
    """flash-attn's mask: query i sees key j when i + offset - left <= j <= i + offset + right (-1: no bound;
    causal: right = 0), offset = seqlen_k - seqlen_q when bottom_right, else 0."""
    left, right = window_size
    if causal:
        right = 0
    offset = seqlen_k - seqlen_q if bottom_right else 0
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    keep = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        keep &= j <= i + offset + right
    if left >= 0:
        keep &= j >= i + offset - left
    return keep


def reference(q, k, v, scale, causal, window_size, softcap, bottom_right, dtype=torch.float64):
    """Attention with a window and softcap in plain PyTorch, in dtype: out (B, Sq, H, D) and lse (B, H, Sq); rows
    that see no key output 0 with lse -inf."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    keep = visible(q.shape[1], k.shape[1], causal, window_size, bottom_right, q.device)
    has_key = keep.any(dim=1)[:, None]
    masked = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(masked.float(), dim=-1).detach()
    p = torch.softmax(masked.masked_fill(~has_key, 0.0), dim=-1) * has_key
    return torch.einsum("bhqk,bkhd->bqhd", p.to(dtype), v), lse


@pytest.mark.parametrize(
    "causal, window_size",
    [
        (False, (-1, -1)),
        (True, (-1, -1)),
        (False, (128, 0)),
        (True, (100, -1)),
        (False, (57, 33)),
        (False, (300, -1)),
        (False, (-1, 20)),
        (False, (0, 0)),
        (True, (5, 7)),
    ],
)
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(113, 203), (203, 113), (64, 64)])
@pytest.mark.parametrize("bottom_right", [False, True])
def test_mask_rule_matches_flash_attn(causal, window_size, seqlen_q, seqlen_k, bottom_right):
    """The Hopper kernels see key j from query i when j <= i + right_offset (IS_CAUSAL) and j >= i + left_offset
    (IS_LOCAL), with j < seqlen_k: exactly flash-attn's window, for every (i, j). (A window's left edge always
    comes with a right one there.) Windows are a flash-attn API feature, so bottom-right aligned only: the core's
    ``band`` treats a side at least seqlen_k wide as unbounded, as flash-attn does, which top-left alignment
    with seqlen_q > seqlen_k would contradict."""
    if not bottom_right and window_size != (-1, -1):
        pytest.skip("windows are aligned bottom-right (flash-attn's API; the SDPA API has no window)")
    m = mask(causal, window_size, 0.0, 0.125, seqlen_q, seqlen_k, bottom_right)
    i = torch.arange(seqlen_q)[:, None]
    j = torch.arange(seqlen_k)[None, :]
    keep = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    if m.is_causal:
        keep &= j <= i + m.right_offset
    if m.is_local:
        keep &= j >= i + m.left_offset
        assert m.is_causal
    assert torch.equal(keep, visible(seqlen_q, seqlen_k, causal, window_size, bottom_right))


def test_softcap_folds_into_the_scales():
    """softcap * tanh(s * scale / softcap) in log2 units: tanh's argument takes scale / softcap, the exponent
    softcap * log2(e); without softcap the exponent takes scale * log2(e) as before."""
    m = mask(False, (-1, -1), 50.0, 0.125, 10, 10, True)
    assert m.softcap and m.softcap_scale == 0.125 / 50.0 and m.qk_scale == pytest.approx(50.0 * 1.4426950408889634)
    m = mask(True, (-1, -1), 0.0, 0.125, 10, 10, True)
    assert not m.softcap and not m.is_local and m.qk_scale == 0.125 * 1.4426950408889634


def _inputs(shape, head_dim, dtype, softcap):
    q, k, v = make_qkv(*shape, head_dim, dtype, requires_grad=False)
    if softcap > 0:  # scores large enough for the cap to bend them (flash-attn's tests scale q the same way)
        q = (q.float() * softcap / 4).to(dtype)
    return q, k, v


def _misses(*checks) -> list:
    """Run each check; the messages of those that fail (so that one test reports every config that misses)."""
    found = []
    for check in checks:
        try:
            check()
        except AssertionError as error:
            found.append(str(error).splitlines()[0])
    return found


def every_case(test):
    """Run ``test`` on the GPU for every variant, head dim, dtype, shape and alignment: one test id per case, so
    a run lists each case that misses."""
    for mark in reversed(
        [
            pytest.mark.gpu,
            pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only"),
            pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"]),
            pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}"),
            pytest.mark.parametrize("causal, window_size, softcap", VARIANTS, ids=VARIANT_IDS),
            pytest.mark.parametrize("bottom_right", [False, True]),
            pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s))),
        ]
    ):
        test = mark(test)
    return test


@every_case
def test_gpu_hopper_forward_variants(causal, window_size, softcap, head_dim, dtype, shape, bottom_right, monkeypatch):
    """The Hopper forward with windows and softcap, in its default config (None: ``WINDOW_CONFIGS`` or the tuned
    one) and others (two and three consumers, a persistent grid of 7 programs that each claim several items),
    against the oracle: output by flash-attn's 2x rule, lse to 1e-3. out and lse start as NaN: every row must be
    written, the rows that see no key too. Every config is checked before the test fails, and the failure names
    each config that missed."""
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.launch import on_device

    monkeypatch.setattr(fh, "_sm_count", lambda device_index: 7)
    monkeypatch.setattr(fh, "heads_per_section", lambda k, n_pairs: min(3, n_pairs))
    if head_dim > fh.MAX_SEPARATE_O_HEAD_DIM:
        others = [(64, 32, 3, 2, True)]
    else:
        others = [(64, 128, 2, 3, True), (64, 64, 4, 3, False)]
    q, k, v = _inputs(shape, head_dim, dtype, softcap)
    scale = head_dim**-0.5
    out_ref, lse_ref = reference(q, k, v, scale, causal, window_size, softcap, bottom_right)
    out_pt, _ = reference(q, k, v, scale, causal, window_size, softcap, bottom_right, dtype)
    misses = []
    for config in [None, *others]:
        out = torch.full_like(q, float("nan"))
        lse = torch.full((shape[0], shape[3], shape[1]), float("nan"), device="cuda")
        with on_device(q.device):
            fh.attn_fwd_hopper(
                q, k, v, out, lse, scale, causal, bottom_right, config, window_size=window_size, softcap=softcap
            )
        misses += _misses(
            lambda out=out, config=config: assert_close_like_flash_attn(f"out {config}", out, out_ref, out_pt, dtype),
            lambda lse=lse, config=config: torch.testing.assert_close(
                lse, lse_ref.float(), atol=1e-3, rtol=1e-4, msg=lambda m, config=config: f"lse {config}: {m}"
            ),
        )
    assert not misses, " | ".join(misses)


@every_case
def test_gpu_hopper_backward_variants(causal, window_size, softcap, head_dim, dtype, shape, bottom_right, monkeypatch):
    """The Hopper dK/dV and dQ kernels with windows and softcap (tanh's derivative in dS), in their tuned configs
    and others, against the oracle's gradients by flash-attn's criterion (3x). Calls whose (head dim, causal)
    has no table entry go to the portable kernels and are not run here. Every config is checked before the test
    fails."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.backward import bwd_preprocess
    from flashdoc.kernels.launch import on_device

    monkeypatch.setattr(fh, "heads_per_section", lambda k, n_pairs: min(3, n_pairs))
    table_causal = causal or window_size != (-1, -1)
    dkdv_config = bh.HOPPER_DKDV_CONFIGS.get((head_dim, table_causal))
    dq_config = bh.HOPPER_DQ_CONFIGS.get((head_dim, table_causal))
    if dkdv_config is None and dq_config is None:
        pytest.skip(f"(head dim {head_dim}, causal {table_causal}) runs the portable backward")
    if head_dim > bh.MAX_NARROW_HEAD_DIM:
        dkdv_configs, dq_configs = [dkdv_config], [dq_config, (64, 32, 3, 2)]
    else:
        dkdv_configs, dq_configs = [dkdv_config, (64, 64, 3, 2)], [dq_config, (64, 64, 2, 2)]
    scale = head_dim**-0.5
    q, k, v = _inputs(shape, head_dim, dtype, softcap)
    dout = torch.randn_like(q)
    ref_in = [t.double().requires_grad_() for t in (q, k, v)]
    pt_in = [t.clone().requires_grad_() for t in (q, k, v)]
    out_ref, lse_ref = reference(*ref_in, scale, causal, window_size, softcap, bottom_right)
    out_pt, _ = reference(*pt_in, scale, causal, window_size, softcap, bottom_right, dtype)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(out_ref, ref_in, dout.double())
    dq_pt, dk_pt, dv_pt = torch.autograd.grad(out_pt, pt_in, dout)
    with on_device(q.device):
        delta, lse2 = bwd_preprocess(dout, out_ref.detach().to(dtype), lse_ref.contiguous(), None)
    variant = dict(window_size=window_size, softcap=softcap)
    misses = []
    for config in sorted(set(dkdv_configs) - {None}):
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        with on_device(q.device):
            bh.bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, scale, causal, bottom_right, config, **variant)
        misses += _misses(
            lambda dk=dk, c=config: assert_close_like_flash_attn(f"dk {c}", dk, dk_ref, dk_pt, dtype, mult=3.0),
            lambda dv=dv, c=config: assert_close_like_flash_attn(f"dv {c}", dv, dv_ref, dv_pt, dtype, mult=3.0),
        )
    for config in sorted(set(dq_configs) - {None}):
        dq = torch.empty_like(q)
        with on_device(q.device):
            bh.bwd_dq_hopper(q, k, v, dout, dq, lse2, delta, scale, causal, bottom_right, config, **variant)
        misses += _misses(
            lambda dq=dq, c=config: assert_close_like_flash_attn(f"dq {c}", dq, dq_ref, dq_pt, dtype, mult=3.0)
        )
    assert not misses, " | ".join(misses)


def test_bounded_exponent_only_where_every_probability_stays_normal():
    """The forward fixes its row max for softcap only in bf16 (P keeps fp32's exponent range; fp16's tops out at
    65504) and only while the smallest probability, 2^(64 - 2 softcap log2(e)), is a normal float: up to a
    softcap of about 65."""
    from flashdoc.kernels.mask import bounded_exponent

    assert bounded_exponent(50.0, torch.bfloat16) and bounded_exponent(1.0, torch.bfloat16)
    assert bounded_exponent(65.0, torch.bfloat16) and not bounded_exponent(66.0, torch.bfloat16)
    assert not bounded_exponent(50.0, torch.float16) and not bounded_exponent(0.0, torch.bfloat16)
    # and where it pays: not at d = 64, whose loop the tanh and the exponential bound
    from flashdoc.kernels import forward_hopper as fh

    assert fh.bounded(128, 50.0, torch.bfloat16) and fh.bounded(256, 50.0, torch.bfloat16)
    assert not fh.bounded(64, 50.0, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("softcap", [50.0, 65.0])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_hopper_forward_softcap_at_the_edges_of_the_cap(softcap, causal):
    """Rows whose scores all sit at the cap's bottom (-softcap) and rows at its top, in one call: with the row max
    fixed (bf16, ``mask.bounded_exponent``) their probabilities are the bound's smallest and largest. Output by
    flash-attn's rule against the oracle, LSE to 1e-3."""
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.launch import on_device
    from flashdoc.kernels.mask import bounded_exponent

    assert bounded_exponent(softcap, torch.bfloat16)
    batch, seqlen, heads, d = 2, 300, 2, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    k = 1.0 + 0.05 * torch.randn(batch, seqlen, heads, d, device="cuda", generator=gen)
    # scores of about +-40 softcaps: every tanh is within bf16's rounding of -1 (even rows) or 1 (odd rows)
    sign = torch.where(torch.arange(seqlen, device="cuda") % 2 == 0, -1.0, 1.0)[None, :, None, None]
    q = (
        sign
        * 40
        * softcap
        * d**-0.5
        * (1.0 + 0.05 * torch.randn(batch, seqlen, heads, d, device="cuda", generator=gen))
    )
    q, k = q.to(torch.bfloat16), k.to(torch.bfloat16)
    v = torch.randn(batch, seqlen, heads, d, device="cuda", generator=gen).to(torch.bfloat16)
    scale = d**-0.5
    out_ref, lse_ref = reference(q, k, v, scale, causal, (-1, -1), softcap, True)
    out_pt, _ = reference(q, k, v, scale, causal, (-1, -1), softcap, True, torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((batch, heads, seqlen), float("nan"), device="cuda")
    with on_device(q.device):
        fh.attn_fwd_hopper(q, k, v, out, lse, scale, causal, True, softcap=softcap)
    assert_close_like_flash_attn("out", out, out_ref, out_pt, torch.bfloat16)
    torch.testing.assert_close(lse, lse_ref.float(), atol=1e-3, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
def test_gpu_hopper_supports_the_variants_it_has():
    """The predicates the dispatcher asks (``mask.hopper_supports``): windows and softcap yes (a window on the
    causal tables' entries), ALiBi no, the fused dK/dV/dQ kernel never with a variant."""
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh

    q, k, _ = make_qkv(1, 4096, 4096, 2, 2, 64, torch.bfloat16, requires_grad=False)
    assert fh.supports(q, False, window_size=(128, 0)) and fh.supports(q, False, softcap=30.0)
    assert not fh.supports(q, False, alibi=True)
    assert bh.supports_dkdv(q, False, window_size=(128, 0)) and bh.supports_dq(q, False, window_size=(128, 0))
    assert bh.supports_fused_dq(q, k, True)
    assert not bh.supports_fused_dq(q, k, True, window_size=(128, 0))
    assert not bh.supports_fused_dq(q, k, False, softcap=30.0)
    assert not bh.supports_dkdv(q, False, alibi=True) and not bh.supports_dq(q, True, alibi=True)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize(
    "causal, window_size, softcap", [(False, (256, 0), 0.0), (True, (-1, -1), 30.0), (False, (100, 50), 20.0)]
)
def test_gpu_flash_attn_func_runs_the_variants_on_hopper(causal, window_size, softcap, monkeypatch):
    """Through the public flash_attn_func, a window or softcap call at d = 128 runs the Hopper forward and the
    Hopper dK/dV and dQ kernels (the dispatcher asks the predicates), and its output and gradients match the
    oracle by flash-attn's rule."""
    import inspect

    import flashdoc
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh

    if "window_size" not in inspect.signature(flashdoc.flash_attn_func).parameters:
        pytest.skip("this flash_attn_func has no window_size (the variants' interface is not merged)")
    calls = []
    for module, name in ((fh, "attn_fwd_hopper"), (bh, "bwd_dkdv_hopper"), (bh, "bwd_dq_hopper")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda *a, _real=real, _name=name, **kw: calls.append(_name) or _real(*a, **kw)
        )
    q, k, v = _inputs((2, 1000, 1203, 4, 2), 128, torch.bfloat16, softcap)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flashdoc.flash_attn_func(q, k, v, causal=causal, window_size=window_size, softcap=softcap)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    assert set(calls) == {"attn_fwd_hopper", "bwd_dkdv_hopper", "bwd_dq_hopper"}, calls
    scale = 128**-0.5
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    pt_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out_ref, _ = reference(*ref_in, scale, causal, window_size, softcap, True)
    out_pt, _ = reference(*pt_in, scale, causal, window_size, softcap, True, torch.bfloat16)
    assert_close_like_flash_attn("out", out, out_ref, out_pt, torch.bfloat16)
    for name, g, g_ref, g_pt in zip(
        "qkv", grads, torch.autograd.grad(out_ref, ref_in, dout.double()), torch.autograd.grad(out_pt, pt_in, dout)
    ):
        assert_close_like_flash_attn(f"d{name}", g, g_ref, g_pt, torch.bfloat16, mult=3.0)


def test_dispatcher_sends_windows_and_softcap_to_a_willing_hopper_kernel():
    """Windows and softcap go to a Hopper kernel whose predicate takes the variant keywords and says yes; dropout
    never does (the Gluon kernels have no Philox stream), nor does any variant to a predicate without them."""
    from flashdoc.kernels import mask

    q = torch.empty(1, 8, 2, 64)
    willing = lambda q, causal, window_size=(-1, -1), softcap=0.0, alibi=False: True  # noqa: E731
    unwilling = lambda q, causal, window_size=(-1, -1), softcap=0.0, alibi=False: not alibi  # noqa: E731
    plain_only = lambda q, causal: True  # noqa: E731
    window = mask.Variant(window_size=(16, 0))
    assert mask.hopper_supports(willing, q, True, window)
    assert mask.hopper_supports(willing, q, False, mask.Variant(softcap=30.0))
    assert not mask.hopper_supports(unwilling, q, True, mask.Variant(alibi_slopes=torch.ones(2)))
    assert not mask.hopper_supports(willing, q, True, mask.Variant(window_size=(16, 0), dropout_p=0.1))
    assert not mask.hopper_supports(plain_only, q, True, window)
    assert mask.hopper_supports(plain_only, q, True, mask.Variant())
