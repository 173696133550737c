"""The one place where flashdoc checks its inputs, so that every bad call fails the same way: a ValueError or
TypeError that names the argument and says what is allowed."""

import math
from typing import NamedTuple, Optional

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


class Names(NamedTuple):
    """What the caller calls the tensors and counts that the checks name. A packed function's q, k and v are
    slices of the tensor it was given, so they take that tensor's name (k and v of ``kv`` are both "kv"), and
    ``layout`` states its layout in the shape errors in place of the unpacked one."""

    q: str = "q"
    k: str = "k"
    v: str = "v"
    cu_seqlens_q: str = "cu_seqlens_q"
    cu_seqlens_k: str = "cu_seqlens_k"
    max_seqlen_q: str = "max_seqlen_q"
    max_seqlen_k: str = "max_seqlen_k"
    layout: Optional[str] = None


FLASH_NAMES = Names()
SDPA_NAMES = Names("query", "key", "value")


def _each(names, tensors) -> dict:
    """Each name once, with its tensor: k and v sliced from one ``kv`` are one tensor to the caller."""
    return dict(zip(names, tensors))


def _and(words) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


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


def _validate_tensor(t, name: str, ref=None, ref_name: str = "q", dims: int = 4, group=None) -> None:
    """group: the names of the tensors that must share t's dtype and device, when not "all three" (a packed
    tensor passed as two of them is named once)."""
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
        together = _together(group)
        raise TypeError(f"{name} has dtype {t.dtype} but {ref_name} has {ref.dtype}; {together} must share one dtype")
    if ref is not None and t.device != ref.device:
        together = _together(group)
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; {together} must be on one device")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D, got {t.dim()}-D with shape {tuple(t.shape)}")


def _together(group) -> str:
    """The tensors that must share a dtype and a device, as the caller named them."""
    names = list(dict.fromkeys(group[:3])) if group is not None else []
    return "all three" if len(names) in (0, 3) else _and(names)


def _layout(layout: str, names: Names) -> str:
    """The layout that shape errors state: the packed tensor's when the tensors are its slices."""
    if names.layout is not None:
        return names.layout
    return {
        "bshd": "(batch, seqlen, heads, head_dim)",
        "bhsd": "(batch, heads, seqlen, head_dim)",
        "varlen": "(total_tokens, heads, head_dim)",
    }[layout]


def _validate_device(q, qn: str) -> None:
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{qn} is on {q.device}; allowed devices: cuda, or cpu (through Triton's interpreter)")
    if q.device.type == "cpu" and not INTERPRET:
        raise ValueError(
            f"{qn} is a CPU tensor but flashdoc's kernels were compiled for the GPU; move the tensors to CUDA, "
            "or set TRITON_INTERPRET=1 before importing flashdoc to run them through Triton's interpreter"
        )


def _validate_heads_and_dim(q, k, v, h: int, d: int, layout: str, names: Names) -> None:
    """Heads on axis h (GQA/MQA: a multiple of k's) and one head_dim (1 to MAX_HEAD_DIM) on axis d."""
    if k.shape[h] != v.shape[h]:
        raise ValueError(
            f"{names.k} and {names.v} must have the same number of heads, got {k.shape[h]} and {v.shape[h]}"
        )
    if k.shape[h] < 1 or q.shape[h] % k.shape[h] != 0:
        raise ValueError(
            f"{names.q} heads ({q.shape[h]}) must be a multiple of {names.k} heads ({k.shape[h]}) (GQA/MQA); "
            f"layout is {_layout(layout, names)}"
        )
    head_dim = q.shape[d]
    if k.shape[d] != head_dim or v.shape[d] != head_dim:
        each = _each(names[:3], (q, k, v))
        raise ValueError(
            f"{_and(each)} must share one head_dim, got {', '.join(str(t.shape[d]) for t in each.values())}"
        )
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
    q, k, v, *, layout: str, softmax_scale, causal, scale_name: str, causal_name: str, names: Names = FLASH_NAMES
) -> None:
    """Check q, k, v and the scalar arguments.

    layout: "bshd" (flash-attn: batch, seqlen, heads, head_dim) or "bhsd" (SDPA: batch, heads, seqlen, head_dim).
    names: what the caller calls q, k, v (flash-attn: q, k, v; SDPA: query, key, value; a packed function: the
    packed tensor).
    """
    qn, kn, vn = names.q, names.k, names.v
    _validate_tensor(q, qn)
    _validate_tensor(k, kn, q, qn, group=names)
    _validate_tensor(v, vn, q, qn, group=names)
    _validate_device(q, qn)
    s, h = (1, 2) if layout == "bshd" else (2, 1)
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        sizes = ", ".join(f"{n} {t.shape[0]}" for n, t in _each(names[:3], (q, k, v)).items())
        raise ValueError(f"batch sizes differ: {sizes}; layout is {_layout(layout, names)}")
    if k.shape[s] != v.shape[s]:
        raise ValueError(
            f"{kn} and {vn} must have the same seqlen, got {k.shape[s]} and {v.shape[s]}; layout is "
            f"{_layout(layout, names)}"
        )
    if k.shape[s] < 1:
        raise ValueError(
            f"{kn} has zero keys (seqlen 0); attention needs at least one key; layout is {_layout(layout, names)}"
        )
    if q.shape[0] < 1 or q.shape[s] < 1 or q.shape[h] < 1:
        raise ValueError(
            f"{qn} must have batch, heads and seqlen >= 1, got shape {tuple(q.shape)}; layout is "
            f"{_layout(layout, names)}"
        )
    _validate_heads_and_dim(q, k, v, h, 3, layout, names)
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


def check_alibi_slopes(alibi_slopes, q, batch: int, nheads: int, q_name: str = "q") -> None:
    """alibi_slopes (not None) a float32 tensor of shape (nheads,) or (batch, nheads) on q's device, for every
    entry point that takes it."""
    if not isinstance(alibi_slopes, torch.Tensor):
        raise TypeError(
            "alibi_slopes must be a float32 tensor of shape (nheads,) or (batch, nheads), or None, got "
            f"{_type_name(alibi_slopes)}"
        )
    if alibi_slopes.dtype != torch.float32:
        raise TypeError(f"alibi_slopes must be a float32 tensor, got dtype {alibi_slopes.dtype}; call .float() on it")
    if tuple(alibi_slopes.shape) not in ((nheads,), (batch, nheads)):
        raise ValueError(
            f"alibi_slopes has shape {tuple(alibi_slopes.shape)}; allowed: ({nheads},) or ({batch}, {nheads}), "
            f"one slope a head (nheads = {nheads}), the same for every sequence or one row a sequence (batch = {batch})"
        )
    if alibi_slopes.device != q.device:
        raise ValueError(
            f"alibi_slopes is on {alibi_slopes.device} but {q_name} is on {q.device}; move it to {q.device}"
        )


def validate_variant_options(
    q, *, dropout_p, window_size, softcap, alibi_slopes, return_attn_probs=False, batch=None, names=FLASH_NAMES
) -> None:
    """flash-attn 2's options beyond the scale and causal: dropout_p in [0, 1); window_size two ints >= -1;
    softcap a float >= 0; alibi_slopes None or as ``check_alibi_slopes`` says, and not requiring grad.
    q: (batch, seqlen, nheads, headdim), or (total, nheads, headdim) with ``batch`` given (varlen)."""
    validate_dropout(dropout_p)
    validate_window_and_softcap(window_size, softcap)
    if alibi_slopes is not None:
        batch, nheads = (q.shape[0], q.shape[2]) if batch is None else (batch, q.shape[1])
        check_alibi_slopes(alibi_slopes, q, batch, nheads, names.q)
        # (flash_attn_with_kvcache, which has no backward, checks the slopes above and not this)
        if alibi_slopes.requires_grad and torch.is_grad_enabled():
            raise ValueError(
                "alibi_slopes requires grad, but the kernels compute no gradient for the slopes (flash-attn's do "
                "not either), so its .grad would stay None without a word; pass alibi_slopes.detach(), or add the bias "
                "to the scores yourself if the slopes are learned"
            )
    check_bool(return_attn_probs, "return_attn_probs")


def _validate_cu_seqlens(cu, name: str, q, q_name: str = "q") -> None:
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
        raise ValueError(f"{name} is on {cu.device} but {q_name} is on {q.device}; move it to {q.device}")
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
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, softmax_scale, causal, names=FLASH_NAMES
) -> None:
    """Check a varlen call: q (total_q, nheads, headdim), k and v (total_k, nheads_k, headdim), cu_seqlens_q and
    cu_seqlens_k int32 (batch + 1,) on q's device, max_seqlen_q and max_seqlen_k ints >= 0.

    Everything here reads shapes, dtypes and devices only, except the checks of the cu_seqlens' values (start at
    0, non-decreasing, end at the totals, longest length <= max_seqlen): on a GPU they wait for the device, so they
    run with ``FLASHDOC_DEBUG_VARLEN=1`` only; on the CPU they cost nothing and always run (``host_readable``).
    names: what the caller calls the tensors and counts (a packed function: its own arguments)."""
    qn, kn, vn = names.q, names.k, names.v
    _validate_tensor(q, qn, dims=3)
    _validate_tensor(k, kn, q, qn, dims=3, group=names)
    _validate_tensor(v, vn, q, qn, dims=3, group=names)
    _validate_device(q, qn)
    if k.shape[0] != v.shape[0]:
        raise ValueError(
            f"{kn} and {vn} must have the same total_k, got {k.shape[0]} and {v.shape[0]}; layout is "
            f"{_layout('varlen', names)}"
        )
    if q.shape[1] < 1:
        raise ValueError(f"{qn} must have heads >= 1, got shape {tuple(q.shape)}; layout is {_layout('varlen', names)}")
    _validate_heads_and_dim(q, k, v, 1, 2, "varlen", names)
    cu_q_name, cu_k_name = names.cu_seqlens_q, names.cu_seqlens_k
    _validate_cu_seqlens(cu_seqlens_q, cu_q_name, q, qn)
    _validate_cu_seqlens(cu_seqlens_k, cu_k_name, q, qn)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(
            f"{cu_q_name} has {cu_seqlens_q.shape[0] - 1} sequences and {cu_k_name} "
            f"{cu_seqlens_k.shape[0] - 1}; both must be (batch + 1,) for the same batch"
        )
    check_int(max_seqlen_q, names.max_seqlen_q, meaning="the longest sequence's length")
    check_int(max_seqlen_k, names.max_seqlen_k, meaning="the longest sequence's length")
    _validate_scale_and_causal(softmax_scale, causal, "softmax_scale", "causal")
    if debug_varlen() or host_readable(q, cu_seqlens_q, cu_seqlens_k):
        for cu, name, total, max_seqlen, which in (
            (cu_seqlens_q, cu_q_name, q.shape[0], max_seqlen_q, names.max_seqlen_q),
            (cu_seqlens_k, cu_k_name, k.shape[0], max_seqlen_k, names.max_seqlen_k),
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
                raise ValueError(
                    f"{which} is {max_seqlen} but {name} holds a sequence of {max(lengths)} tokens; it must be at "
                    "least the longest length"
                )
