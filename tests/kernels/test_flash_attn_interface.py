"""flashdoc.flash_attn_interface: flash-attn's seven functions by its module's name. The packed forms must give what
the unpacked functions give on the same tensors, output and gradients, with every option passed through in
flash-attn's positional order, and refuse a tensor that is not stacked as they expect."""

import inspect
import re

import pytest
import torch
from attention_oracle import DEVICE, assert_close_like_flash_attn, attention_math

import flashdoc
from flashdoc import flash_attn_interface as fai

# On the CPU the interpreter runs fp32 (it computes bf16 wrongly); on a GPU the half types too.
DTYPES = [torch.float32] if DEVICE == "cpu" else [torch.float16, torch.bfloat16]
FLASH_ATTN_FUNCTIONS = {
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
}


def test_exports_flash_attns_seven_functions():
    assert set(fai.__all__) == FLASH_ATTN_FUNCTIONS
    assert fai.flash_attn_func is flashdoc.flash_attn_func
    assert fai.flash_attn_varlen_func is flashdoc.flash_attn_varlen_func
    assert fai.flash_attn_with_kvcache is flashdoc.flash_attn_with_kvcache


# flash-attn 2.8's signatures of its packed functions, written out: the options after the tensors, with defaults
OPTIONS = [
    ("dropout_p", 0.0),
    ("softmax_scale", None),
    ("causal", False),
    ("window_size", (-1, -1)),
    ("softcap", 0.0),
    ("alibi_slopes", None),
    ("deterministic", False),
    ("return_attn_probs", False),
]


@pytest.mark.parametrize(
    "name,tensors",
    [
        ("flash_attn_qkvpacked_func", ["qkv"]),
        ("flash_attn_kvpacked_func", ["q", "kv"]),
        ("flash_attn_varlen_qkvpacked_func", ["qkv", "cu_seqlens", "max_seqlen"]),
        (
            "flash_attn_varlen_kvpacked_func",
            ["q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"],
        ),
    ],
)
def test_signatures_are_flash_attns(name, tensors):
    params = list(inspect.signature(getattr(fai, name)).parameters.values())
    assert [p.name for p in params[: len(tensors)]] == tensors
    assert all(p.default is p.empty for p in params[: len(tensors)])
    assert [(p.name, p.default) for p in params[len(tensors) :]] == OPTIONS


def _twin(packed, dim):
    """A copy of the packed tensor (a leaf of its own) and the views of its slices: the unpacked function gets the
    same strides as the packed one passes, so the two calls take the same path and must agree bit for bit."""
    twin = packed.detach().clone().requires_grad_(True)
    return twin, twin.unbind(dim)


def _check_against_unpacked(packed_out, packed, unpacked_out, twin):
    """The same output, and the same gradient for the packed tensor as autograd gives its twin through the
    unpacked call."""
    torch.testing.assert_close(packed_out, unpacked_out, rtol=0, atol=0)
    g = torch.randn_like(packed_out)
    (packed_grad,) = torch.autograd.grad(packed_out, packed, g)
    (twin_grad,) = torch.autograd.grad(unpacked_out, twin, g)
    torch.testing.assert_close(packed_grad, twin_grad, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (9, -1))])
def test_qkvpacked_matches_flash_attn_func(dtype, causal, window):
    torch.manual_seed(0)
    qkv = torch.randn(2, 37, 3, 4, 24, device=DEVICE, dtype=dtype, requires_grad=True)
    # positionally, in flash-attn's order: dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
    # deterministic (bit-identical gradients, so that the two calls' can be compared exactly)
    out = fai.flash_attn_qkvpacked_func(qkv, 0.0, 0.3, causal, window, 0.0, None, True)
    twin, parts = _twin(qkv, 2)
    want = flashdoc.flash_attn_func(*parts, 0.0, 0.3, causal, window, 0.0, None, True)
    _check_against_unpacked(out, qkv, want, twin)
    if window == (-1, -1):  # and the oracle, which knows no window
        ref, _ = attention_math(*qkv.unbind(2), 0.3, causal)
        pt, _ = attention_math(*qkv.unbind(2), 0.3, causal, dtype=dtype)
        assert_close_like_flash_attn("out", out.detach(), ref, pt.detach(), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_kvpacked_matches_flash_attn_func(dtype, kv_heads):
    """GQA/MQA: the packed keys and values have their own head count."""
    torch.manual_seed(1)
    q = torch.randn(2, 19, 4, 32, device=DEVICE, dtype=dtype, requires_grad=True)
    kv = torch.randn(2, 45, 2, kv_heads, 32, device=DEVICE, dtype=dtype, requires_grad=True)
    out, lse, probs = fai.flash_attn_kvpacked_func(q, kv, causal=True, softcap=5.0, return_attn_probs=True)
    twin, parts = _twin(kv, 2)
    want, want_lse = flashdoc.flash_attn_func(q, *parts, causal=True, softcap=5.0, return_lse=True)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=0)
    assert probs is None
    _check_against_unpacked(out, kv, want, twin)


def _cu_seqlens(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
def test_varlen_qkvpacked_matches_flash_attn_varlen_func(dtype):
    torch.manual_seed(2)
    lengths = [5, 0, 23, 11]
    cu = _cu_seqlens(lengths)
    qkv = torch.randn(sum(lengths), 3, 2, 16, device=DEVICE, dtype=dtype, requires_grad=True)
    out = fai.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lengths), causal=True, window_size=(4, 0))
    twin, parts = _twin(qkv, 1)
    want = flashdoc.flash_attn_varlen_func(*parts, cu, cu, max(lengths), max(lengths), causal=True, window_size=(4, 0))
    _check_against_unpacked(out, qkv, want, twin)


@pytest.mark.parametrize("dtype", DTYPES)
def test_varlen_kvpacked_matches_flash_attn_varlen_func(dtype):
    torch.manual_seed(3)
    q_lengths, k_lengths = [3, 17, 1], [20, 17, 9]
    cu_q, cu_k = _cu_seqlens(q_lengths), _cu_seqlens(k_lengths)
    q = torch.randn(sum(q_lengths), 4, 16, device=DEVICE, dtype=dtype, requires_grad=True)
    kv = torch.randn(sum(k_lengths), 2, 2, 16, device=DEVICE, dtype=dtype, requires_grad=True)
    slopes = torch.rand(4, device=DEVICE) * 0.3
    args = (cu_q, cu_k, max(q_lengths), max(k_lengths), 0.0, None, True, (-1, -1), 0.0, slopes)
    out = fai.flash_attn_varlen_kvpacked_func(q, kv, *args)
    twin, parts = _twin(kv, 1)
    want = flashdoc.flash_attn_varlen_func(q, *parts, *args)
    _check_against_unpacked(out, kv, want, twin)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda t: fai.flash_attn_qkvpacked_func(t(2, 8, 2, 4, 16)), r"qkv must have shape \(batch, seqlen, 3"),
        (lambda t: fai.flash_attn_qkvpacked_func(t(8, 3, 4, 16)), r"qkv must have shape .* got \(8, 3, 4, 16\)"),
        (lambda t: fai.flash_attn_kvpacked_func(t(2, 8, 4, 16), t(2, 8, 3, 4, 16)), r"kv must have shape .*dim=2"),
        (
            lambda t: fai.flash_attn_varlen_qkvpacked_func(t(8, 2, 4, 16), _cu_seqlens([8]), 8),
            r"qkv must have shape \(total, 3",
        ),
        (
            lambda t: fai.flash_attn_varlen_kvpacked_func(
                t(8, 4, 16), t(8, 4, 16), _cu_seqlens([8]), _cu_seqlens([8]), 8, 8
            ),
            r"kv must have shape \(total_k, 2",
        ),
    ],
)
def test_refuses_a_tensor_stacked_otherwise(call, match):
    def t(*shape):
        return torch.zeros(shape, device=DEVICE)

    with pytest.raises(ValueError, match=match):
        call(t)


def test_errors_name_the_arguments_the_caller_passed():
    """Checks of the packed tensor and of the varlen form's one cu_seqlens and max_seqlen use those names, not the
    names of the function the wrapper calls."""
    qkv = torch.zeros(8, 3, 2, 16, device=DEVICE)
    cu = torch.tensor([0, 8], dtype=torch.int32, device=DEVICE)
    with pytest.raises(TypeError, match="qkv has dtype torch.int64"):
        fai.flash_attn_qkvpacked_func(torch.zeros(1, 4, 3, 2, 16, dtype=torch.int64, device=DEVICE))
    with pytest.raises(TypeError, match="kv has dtype torch.float64"):
        fai.flash_attn_kvpacked_func(torch.zeros(1, 4, 2, 16), torch.zeros(1, 4, 2, 2, 16, dtype=torch.float64))
    with pytest.raises(TypeError, match="cu_seqlens has dtype torch.int64"):
        fai.flash_attn_varlen_qkvpacked_func(qkv, cu.long(), 8)
    with pytest.raises(TypeError, match="max_seqlen must be an int"):
        fai.flash_attn_varlen_qkvpacked_func(qkv, cu, torch.tensor(8))


def test_refuses_a_list_of_tensors():
    q = torch.zeros(1, 4, 2, 16, device=DEVICE)
    with pytest.raises(TypeError, match=r"qkv must be a torch.Tensor .* got list"):
        fai.flash_attn_qkvpacked_func([q, q, q])


def _z(*shape, **kwargs):
    return torch.zeros(shape, device=kwargs.pop("device", DEVICE), **kwargs)


_CU = [0, 8]
# the values of cu_seqlens are read on the host only there (on a GPU, with FLASHDOC_DEBUG_VARLEN=1)
_CPU_ONLY = pytest.mark.skipif(DEVICE != "cpu", reason="cu_seqlens' values are checked on CPU tensors only")

# Every check of a packed call, past the packed tensor's own shape: those done on its slices (against q, among the
# three, of the options) must still name the tensor and the counts the caller passed.
PACKED_ERRORS = [
    (
        lambda: fai.flash_attn_kvpacked_func(_z(1, 8, 2, 16), _z(1, 8, 2, 2, 16, dtype=torch.float16)),
        TypeError,
        "kv has dtype torch.float16 but q has torch.float32; q and kv must share one dtype",
    ),
    (
        lambda: fai.flash_attn_kvpacked_func(_z(1, 8, 2, 16), _z(1, 8, 2, 2, 16, device="meta")),
        ValueError,
        "kv is on meta but q is on .*; q and kv must be on one device",
    ),
    (
        lambda: fai.flash_attn_kvpacked_func(_z(1, 8, 2, 16), _z(2, 8, 2, 2, 16)),
        ValueError,
        r"batch sizes differ: q 1, kv 2; layout is .*kv \(batch, seqlen_k, 2, nheads_k, headdim\)",
    ),
    (
        lambda: fai.flash_attn_kvpacked_func(_z(1, 8, 2, 16), _z(1, 0, 2, 2, 16)),
        ValueError,
        r"kv has zero keys .*kv \(batch, seqlen_k, 2, nheads_k, headdim\)",
    ),
    (
        lambda: fai.flash_attn_kvpacked_func(_z(1, 8, 4, 16), _z(1, 8, 2, 3, 16)),
        ValueError,
        r"q heads \(4\) must be a multiple of kv heads \(3\)",
    ),
    (
        lambda: fai.flash_attn_kvpacked_func(_z(1, 8, 2, 16), _z(1, 8, 2, 2, 32)),
        ValueError,
        "q and kv must share one head_dim, got 16, 32",
    ),
    (
        lambda: fai.flash_attn_qkvpacked_func(_z(1, 8, 3, 2, 16, device="meta")),
        ValueError,
        "qkv is on meta; allowed devices",
    ),
    (
        lambda: fai.flash_attn_qkvpacked_func(_z(1, 0, 3, 2, 16)),
        ValueError,
        r"qkv must have batch, seqlen and nheads >= 1, got shape \(1, 0, 3, 2, 16\); layout is \(batch, seqlen, 3",
    ),
    (
        lambda: fai.flash_attn_qkvpacked_func(_z(1, 8, 3, 0, 16)),
        ValueError,
        r"qkv must have batch, seqlen and nheads >= 1, got shape \(1, 8, 3, 0, 16\)",
    ),
    (
        lambda: fai.flash_attn_qkvpacked_func(_z(1, 8, 3, 2, 16), alibi_slopes=_z(2, device="meta")),
        ValueError,
        "alibi_slopes is on meta but qkv is on",
    ),
    (
        lambda: fai.flash_attn_varlen_qkvpacked_func(_z(8, 3, 0, 16), torch.tensor(_CU, dtype=torch.int32), 8),
        ValueError,
        r"qkv must have nheads >= 1, got shape \(8, 3, 0, 16\); layout is \(total, 3, nheads, headdim\)",
    ),
    (
        lambda: fai.flash_attn_varlen_qkvpacked_func(
            _z(8, 3, 2, 16), torch.tensor(_CU, dtype=torch.int32, device="meta"), 8
        ),
        ValueError,
        "cu_seqlens is on meta but qkv is on",
    ),
    pytest.param(
        lambda: fai.flash_attn_varlen_qkvpacked_func(_z(8, 3, 2, 16), torch.tensor([0, 7], dtype=torch.int32), 8),
        ValueError,
        "cu_seqlens ends at 7 but the tensor holds 8 tokens",
        marks=_CPU_ONLY,
    ),
    pytest.param(
        lambda: fai.flash_attn_varlen_qkvpacked_func(_z(8, 3, 2, 16), torch.tensor(_CU, dtype=torch.int32), 4),
        ValueError,
        "max_seqlen is 4 but cu_seqlens holds a sequence of 8 tokens",
        marks=_CPU_ONLY,
    ),
    (
        lambda: fai.flash_attn_varlen_qkvpacked_func(
            _z(8, 3, 2, 16), _cu_seqlens([8]), 8, alibi_slopes=_z(2, device="meta")
        ),
        ValueError,
        "alibi_slopes is on meta but qkv is on",
    ),
    (
        lambda: fai.flash_attn_varlen_kvpacked_func(
            _z(8, 2, 16), _z(8, 2, 2, 16, dtype=torch.float16), _cu_seqlens([8]), _cu_seqlens([8]), 8, 8
        ),
        TypeError,
        "kv has dtype torch.float16 but q has torch.float32; q and kv must share one dtype",
    ),
    (
        lambda: fai.flash_attn_varlen_kvpacked_func(
            _z(8, 4, 16), _z(8, 2, 3, 16), _cu_seqlens([8]), _cu_seqlens([8]), 8, 8
        ),
        ValueError,
        r"q heads \(4\) must be a multiple of kv heads \(3\) \(GQA/MQA\); layout is .*kv \(total_k, 2, nheads_k",
    ),
    (
        lambda: fai.flash_attn_varlen_kvpacked_func(
            _z(8, 2, 16), _z(8, 2, 2, 32), _cu_seqlens([8]), _cu_seqlens([8]), 8, 8
        ),
        ValueError,
        "q and kv must share one head_dim, got 16, 32",
    ),
]


@pytest.mark.parametrize("call,exc,match", PACKED_ERRORS)
def test_errors_through_the_slices_name_the_packed_tensor(call, exc, match):
    """Each error names kv or qkv, never k or v (nor q, for qkv), and the varlen qkv form's cu_seqlens and
    max_seqlen, not the _q and _k names of the function it calls."""
    with pytest.raises(exc, match=match) as error:
        call()
    message = str(error.value)
    assert re.search(r"\b[kv]\b", message) is None, message
    assert "cu_seqlens_" not in message and "max_seqlen_" not in message, message
    if "qkv" in message:
        assert re.search(r"\bq\b", message) is None, message
