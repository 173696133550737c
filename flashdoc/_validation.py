"""The one place where flashdoc checks its inputs, so that every bad call fails the same way: a ValueError or
TypeError that names the argument and says what is allowed."""

import math
from typing import Optional

import torch

from ._config import switch
from .kernels import INTERPRET

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
# The kernels hold softmax_scale and softcap in float32: a Python float outside its normal range would become
# inf or 0 there, and every output NaN.
_FLOAT32 = torch.finfo(torch.float32)
# Window sides reach the ops as int64 (torch's schema type for an int).
_INT64_MAX = 2**63 - 1


def _type_name(value) -> str:
    """The type's name, NumPy's with its package (else numpy.bool would read as a bool)."""
    kind = type(value)
    return f"numpy.{kind.__name__}" if kind.__module__.split(".")[0] == "numpy" else kind.__name__


def check_int(value, name: str, minimum: Optional[int] = 0, meaning: str = "") -> None:
    """An int that is not a bool (or a ``torch.SymInt``, which tracing passes for sizes), at least ``minimum``
    (None: any int)."""
    about = f" ({meaning})" if meaning else ""
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int{about}, got {_type_name(value)}")
    if minimum is not None and isinstance(value, int) and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{about}, got {value}")


def check_bool(value, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {_type_name(value)}")


def _finite(value) -> bool:
    """math.isfinite in comparisons: torch.compile, which passes a float argument as a symbolic float from its
    second value on, traces comparisons but not math.isfinite (under fullgraph=True that call fails)."""
    return value == value and -math.inf < value < math.inf  # NaN is the one value unequal to itself


def _in_float32_range(value: float) -> bool:
    return _FLOAT32.tiny <= value <= _FLOAT32.max


def check_dtype(t: torch.Tensor, name: str) -> None:
    """TypeError naming ``name`` unless t's dtype is one the kernels compute in."""
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; allowed: torch.float16, torch.bfloat16, torch.float32")


def _validate_tensor(t, name: str, ref=None, ref_name: str = "q", dims: int = 4) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested:
        raise TypeError(
            f"{name} is a nested tensor; pass a dense one, or concatenate the sequences and call "
            "flash_attn_varlen_func with their cu_seqlens"
        )
    if t.layout != torch.strided:
        raise TypeError(f"{name} has layout {t.layout}; allowed: torch.strided (call .to_dense() on it)")
    check_dtype(t, name)
    if ref is not None and t.dtype != ref.dtype:
        raise TypeError(f"{name} has dtype {t.dtype} but {ref_name} has {ref.dtype}; all three must share one dtype")
    if ref is not None and t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; all three must be on one device")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D, got {t.dim()}-D with shape {tuple(t.shape)}")


def _validate_device(q, qn: str) -> None:
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{qn} is on {q.device}; allowed devices: cuda, or cpu (through Triton's interpreter)")
    if q.device.type == "cpu" and not INTERPRET:
        raise ValueError(
            f"{qn} is a CPU tensor but flashdoc's kernels were compiled for the GPU; move the tensors to CUDA, "
            "or set TRITON_INTERPRET=1 before importing flashdoc to run them through Triton's interpreter"
        )


def _validate_heads_and_dim(q, k, v, h: int, d: int, dims: str, names) -> None:
    """Heads on axis h (GQA/MQA: a multiple of k's) and one head_dim (1 to MAX_HEAD_DIM) on axis d."""
    qn, kn, vn = names
    if k.shape[h] != v.shape[h]:
        raise ValueError(f"{kn} and {vn} must have the same number of heads, got {k.shape[h]} and {v.shape[h]}")
    if k.shape[h] < 1 or q.shape[h] % k.shape[h] != 0:
        raise ValueError(
            f"{qn} heads ({q.shape[h]}) must be a multiple of {kn} heads ({k.shape[h]}) (GQA/MQA); layout is {dims}"
        )
    head_dim = q.shape[d]
    if k.shape[d] != head_dim or v.shape[d] != head_dim:
        raise ValueError(f"{qn}, {kn} and {vn} must share one head_dim, got {head_dim}, {k.shape[d]}, {v.shape[d]}")
    if head_dim > MAX_HEAD_DIM or head_dim < 1:
        raise ValueError(f"head_dim is {head_dim}; allowed: 1 to {MAX_HEAD_DIM}")


def _validate_scale_and_causal(softmax_scale, causal, scale_name: str, causal_name: str) -> None:
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
            raise TypeError(f"{scale_name} must be a float or None, got {_type_name(softmax_scale)}")
        if not (_finite(softmax_scale) and softmax_scale > 0):
            raise ValueError(
                f"{scale_name} must be a finite number > 0 (default head_dim ** -0.5), got {softmax_scale}"
            )
        if not _in_float32_range(softmax_scale):
            raise ValueError(
                f"{scale_name} is {softmax_scale}, which float32 (the kernels' type) cannot hold; allowed: "
                f"{_FLOAT32.tiny:.3g} to {_FLOAT32.max:.3g}"
            )
    check_bool(causal, causal_name)


def validate_attention_inputs(
    q, k, v, *, layout: str, softmax_scale, causal, scale_name: str, causal_name: str, names=("q", "k", "v")
) -> None:
    """Check q, k, v and the scalar arguments.

    layout: "bshd" (flash-attn: batch, seqlen, heads, head_dim) or "bhsd" (SDPA: batch, heads, seqlen, head_dim).
    names: what the caller calls q, k, v (flash-attn: q, k, v; SDPA: query, key, value).
    """
    qn, kn, vn = names
    _validate_tensor(q, qn)
    _validate_tensor(k, kn, q, qn)
    _validate_tensor(v, vn, q, qn)
    _validate_device(q, qn)
    s, h = (1, 2) if layout == "bshd" else (2, 1)
    dims = "(batch, seqlen, heads, head_dim)" if layout == "bshd" else "(batch, heads, seqlen, head_dim)"
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise ValueError(
            f"batch sizes differ: {qn} {q.shape[0]}, {kn} {k.shape[0]}, {vn} {v.shape[0]}; layout is {dims}"
        )
    if k.shape[s] != v.shape[s]:
        raise ValueError(
            f"{kn} and {vn} must have the same seqlen, got {k.shape[s]} and {v.shape[s]}; layout is {dims}"
        )
    if k.shape[s] < 1:
        raise ValueError(f"{kn} has zero keys (seqlen 0); attention needs at least one key; layout is {dims}")
    if q.shape[0] < 1 or q.shape[s] < 1 or q.shape[h] < 1:
        raise ValueError(f"{qn} must have batch, heads and seqlen >= 1, got shape {tuple(q.shape)}; layout is {dims}")
    _validate_heads_and_dim(q, k, v, h, 3, dims, names)
    _validate_scale_and_causal(softmax_scale, causal, scale_name, causal_name)


def validate_dropout(dropout_p) -> None:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {_type_name(dropout_p)}")
    if not (0.0 <= dropout_p < 1.0):
        raise ValueError(
            f"dropout_p must be in [0, 1) (the probability of dropping each attention weight), got {dropout_p}"
        )


def validate_window_and_softcap(window_size, softcap) -> None:
    """window_size two ints >= -1 (left, right; -1 unbounded) and softcap a finite float >= 0 (0: none), for
    every entry point that takes them."""
    if (
        not isinstance(window_size, (tuple, list))
        or len(window_size) != 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size)
    ):
        raise TypeError(f"window_size must be a pair of ints (left, right), -1 for unbounded, got {window_size!r}")
    if any(w < -1 for w in window_size):
        raise ValueError(
            f"window_size must be two ints >= -1 (left, right; -1 for unbounded), got {tuple(window_size)}"
        )
    if any(w > _INT64_MAX for w in window_size):
        raise ValueError(
            f"window_size sides must be at most 2**63 - 1 (int64), got {tuple(window_size)}; a side as long as "
            "the sequence, or -1, already covers every key"
        )
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a float, got {_type_name(softcap)}")
    if not (_finite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be a finite float >= 0 (0 for no capping), got {softcap}")
    if softcap != 0 and not _in_float32_range(softcap):
        raise ValueError(
            f"softcap is {softcap}, which float32 (the kernels' type) cannot hold; allowed: 0 (no capping) or "
            f"{_FLOAT32.tiny:.3g} to {_FLOAT32.max:.3g}"
        )


def validate_variant_options(
    q, *, dropout_p, window_size, softcap, alibi_slopes, return_attn_probs=False, batch=None
) -> None:
    """flash-attn 2's options beyond the scale and causal: dropout_p in [0, 1); window_size two ints >= -1;
    softcap a float >= 0; alibi_slopes None or fp32 of shape (nheads,) or (batch, nheads) on q's device.
    q: (batch, seqlen, nheads, headdim), or (total, nheads, headdim) with ``batch`` given (varlen)."""
    validate_dropout(dropout_p)
    validate_window_and_softcap(window_size, softcap)
    if alibi_slopes is not None:
        batch, nheads = (q.shape[0], q.shape[2]) if batch is None else (batch, q.shape[1])
        if not isinstance(alibi_slopes, torch.Tensor):
            raise TypeError(f"alibi_slopes must be a torch.Tensor or None, got {type(alibi_slopes).__name__}")
        if alibi_slopes.dtype != torch.float32:
            raise TypeError(f"alibi_slopes has dtype {alibi_slopes.dtype}; allowed: torch.float32")
        if tuple(alibi_slopes.shape) not in ((nheads,), (batch, nheads)):
            raise ValueError(
                f"alibi_slopes has shape {tuple(alibi_slopes.shape)}; allowed: ({nheads},) or "
                f"({batch}, {nheads}), i.e. (nheads,) or (batch, nheads)"
            )
        if alibi_slopes.device != q.device:
            raise ValueError(f"alibi_slopes is on {alibi_slopes.device} but q is on {q.device}; move it to {q.device}")
        if alibi_slopes.requires_grad and torch.is_grad_enabled():
            raise ValueError(
                "alibi_slopes requires grad, but the kernels compute no gradient for the slopes (flash-attn's do "
                "not either), so its .grad would stay None without a word; pass alibi_slopes.detach(), or add the bias "
                "to the scores yourself if the slopes are learned"
            )
    check_bool(return_attn_probs, "return_attn_probs")


def _validate_cu_seqlens(cu, name: str, q) -> None:
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} has dtype {cu.dtype}; allowed: torch.int32")
    if cu.dim() != 1 or cu.shape[0] < 2:
        raise ValueError(
            f"{name} must be 1-D of shape (batch + 1,) with batch >= 1 (the cumulative sequence lengths, "
            f"starting at 0), got shape {tuple(cu.shape)}"
        )
    if cu.device != q.device:
        raise ValueError(f"{name} is on {cu.device} but q is on {q.device}; move it to {q.device}")
    if cu.stride(0) != 1:  # the kernels index it as a plain array
        raise ValueError(f"{name} must be contiguous, got stride {cu.stride(0)}; call .contiguous() on it")


def host_readable(*tensors) -> bool:
    """Whether reading these tensors' values costs no synchronisation (arguments that are not tensors, such as
    None or an int, are ignored): all on the CPU, and not traced by ``torch.compile``, where a read would break the
    graph. The checks of device values always run there, since the interpreted kernels would otherwise read and
    write past the CPU tensors and corrupt the process's heap."""
    first = tensors[0] if tensors else None
    if isinstance(first, torch.Tensor) and first.device.type != "cpu":
        return False  # a GPU call (callers pass q first), answered before the slower checks below
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    # a subclass, such as the fake tensors of tracing, may hold no values to read
    plain = all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors)
    return plain and not torch.compiler.is_compiling() and all(t.device.type == "cpu" for t in tensors)


def debug_varlen() -> bool:
    """Whether ``FLASHDOC_DEBUG_VARLEN=1``: the varlen checks that read cu_seqlens on the host (a device sync)."""
    return switch("FLASHDOC_DEBUG_VARLEN")


def validate_varlen_inputs(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, softmax_scale, causal
) -> None:
    """Check a varlen call: q (total_q, nheads, headdim), k and v (total_k, nheads_k, headdim), cu_seqlens_q and
    cu_seqlens_k int32 (batch + 1,) on q's device, max_seqlen_q and max_seqlen_k ints >= 0.

    Everything here reads shapes, dtypes and devices only, except the checks of the cu_seqlens' values (start at
    0, non-decreasing, end at the totals, longest length <= max_seqlen): on a GPU they wait for the device, so they
    run with ``FLASHDOC_DEBUG_VARLEN=1`` only; on the CPU they cost nothing and always run (``host_readable``)."""
    _validate_tensor(q, "q", dims=3)
    _validate_tensor(k, "k", q, dims=3)
    _validate_tensor(v, "v", q, dims=3)
    _validate_device(q, "q")
    dims = "(total_tokens, heads, head_dim)"
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"k and v must have the same total_k, got {k.shape[0]} and {v.shape[0]}; layout is {dims}")
    if q.shape[1] < 1:
        raise ValueError(f"q must have heads >= 1, got shape {tuple(q.shape)}; layout is {dims}")
    _validate_heads_and_dim(q, k, v, 1, 2, dims, ("q", "k", "v"))
    _validate_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q)
    _validate_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(
            f"cu_seqlens_q has {cu_seqlens_q.shape[0] - 1} sequences and cu_seqlens_k "
            f"{cu_seqlens_k.shape[0] - 1}; both must be (batch + 1,) for the same batch"
        )
    check_int(max_seqlen_q, "max_seqlen_q", meaning="the longest sequence's length")
    check_int(max_seqlen_k, "max_seqlen_k", meaning="the longest sequence's length")
    _validate_scale_and_causal(softmax_scale, causal, "softmax_scale", "causal")
    if debug_varlen() or host_readable(q, cu_seqlens_q, cu_seqlens_k):
        for cu, name, total, max_seqlen in (
            (cu_seqlens_q, "cu_seqlens_q", q.shape[0], max_seqlen_q),
            (cu_seqlens_k, "cu_seqlens_k", k.shape[0], max_seqlen_k),
        ):
            values = cu.tolist()
            lengths = [b - a for a, b in zip(values, values[1:])]
            if values[0] != 0:
                raise ValueError(f"{name} must start at 0, got {values[0]}")
            if min(lengths) < 0:
                raise ValueError(f"{name} must be non-decreasing, got {values}")
            if values[-1] != total:
                raise ValueError(
                    f"{name} ends at {values[-1]} but the tensor holds {total} tokens; its last entry must be the total"
                )
            if max(lengths) > max_seqlen:
                which = "max_seqlen_q" if name.endswith("q") else "max_seqlen_k"
                raise ValueError(
                    f"{which} is {max_seqlen} but {name} holds a sequence of {max(lengths)} tokens; it must be at "
                    "least the longest length"
                )
