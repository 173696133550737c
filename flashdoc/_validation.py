"""The one place where flashdoc checks its inputs, so that every bad call fails the same way: a ValueError or
TypeError that names the argument and says what is allowed."""

import math

import torch

from .kernels import INTERPRET

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256


def _validate_tensor(t, name: str, ref=None, ref_name: str = "q") -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; allowed: torch.float16, torch.bfloat16, torch.float32")
    if ref is not None and t.dtype != ref.dtype:
        raise TypeError(f"{name} has dtype {t.dtype} but {ref_name} has {ref.dtype}; all three must share one dtype")
    if ref is not None and t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; all three must be on one device")
    if t.dim() != 4:
        raise ValueError(f"{name} must be 4-D, got {t.dim()}-D with shape {tuple(t.shape)}")


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
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{qn} is on {q.device}; allowed devices: cuda, or cpu (through Triton's interpreter)")
    if q.device.type == "cpu" and not INTERPRET:
        raise ValueError(
            f"{qn} is a CPU tensor but flashdoc's kernels were compiled for the GPU; move the tensors to CUDA, "
            "or set TRITON_INTERPRET=1 before importing flashdoc to run them through Triton's interpreter"
        )
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
    if k.shape[h] != v.shape[h]:
        raise ValueError(f"{kn} and {vn} must have the same number of heads, got {k.shape[h]} and {v.shape[h]}")
    if k.shape[h] < 1 or q.shape[h] % k.shape[h] != 0:
        raise ValueError(
            f"{qn} heads ({q.shape[h]}) must be a multiple of {kn} heads ({k.shape[h]}) (GQA/MQA); layout is {dims}"
        )
    d = q.shape[3]
    if k.shape[3] != d or v.shape[3] != d:
        raise ValueError(f"{qn}, {kn} and {vn} must share one head_dim, got {d}, {k.shape[3]}, {v.shape[3]}")
    if d > MAX_HEAD_DIM or d < 1:
        raise ValueError(f"head_dim is {d}; allowed: 1 to {MAX_HEAD_DIM}")
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
            raise TypeError(f"{scale_name} must be a float or None, got {type(softmax_scale).__name__}")
        if not (math.isfinite(softmax_scale) and softmax_scale > 0):
            raise ValueError(
                f"{scale_name} must be a finite number > 0 (default head_dim ** -0.5), got {softmax_scale}"
            )
    if not isinstance(causal, bool):
        raise TypeError(f"{causal_name} must be a bool, got {type(causal).__name__}")


def validate_dropout(dropout_p) -> None:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if not (0.0 <= dropout_p < 1.0):
        raise ValueError(
            f"dropout_p must be in [0, 1) (the probability of dropping each attention weight), got {dropout_p}"
        )


def validate_variant_options(q, *, dropout_p, window_size, softcap, alibi_slopes, return_attn_probs=False) -> None:
    """flash-attn 2's options beyond the scale and causal: dropout_p in [0, 1); window_size two ints >= -1;
    softcap a float >= 0; alibi_slopes None or fp32 of shape (nheads,) or (batch, nheads) on q's device.
    q: (batch, seqlen, nheads, headdim)."""
    validate_dropout(dropout_p)
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
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a float, got {type(softcap).__name__}")
    if not (math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be a finite float >= 0 (0 for no capping), got {softcap}")
    if alibi_slopes is not None:
        batch, nheads = q.shape[0], q.shape[2]
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
    if not isinstance(return_attn_probs, bool):
        raise TypeError(f"return_attn_probs must be a bool, got {type(return_attn_probs).__name__}")
