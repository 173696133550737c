"""flash-attn 2's seven attention functions under flash-attn's module name, for code written against ``flash_attn``.

    from flashdoc.flash_attn_interface import flash_attn_qkvpacked_func   # was: from flash_attn import ...

``flash_attn_func``, ``flash_attn_varlen_func`` and ``flash_attn_with_kvcache`` are flashdoc's own, re-exported.
The four packed forms take the tensors that a fused projection produces, Q, K and V stacked in one (or K and V in
one), with flash-attn's signatures, and call those three on views of their slices: nothing is copied on the way
in, and autograd gathers the three gradients into one gradient of the stacked tensor. flash-attn's packed backward
writes that gradient in place; here autograd stacks it, one extra copy of the gradient per call. As in the
functions they call, ``return_attn_probs=True`` gives ``None`` for the probabilities (they are never formed), and
the varlen functions take no ``block_table`` (``flash_attn_with_kvcache`` reads paged caches). Their errors name
the arguments they were given (``qkv``, ``kv``, ``cu_seqlens``, ``max_seqlen``), never the slices.
"""

import torch

from ._validation import Names, _and, _validate_tensor
from .interface import _flash_attn, _flash_attn_varlen, flash_attn_func, flash_attn_varlen_func
from .kvcache import flash_attn_with_kvcache

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
]


# The layouts the errors state, and the names they give the slices (k and v of kv are both "kv"; q, k and v of
# qkv all "qkv", and the varlen form's one cu_seqlens and max_seqlen serve queries and keys).
_QKV = "(batch, seqlen, 3, nheads, headdim)"
_KV = "(batch, seqlen_k, 2, nheads_k, headdim)"
_VARLEN_QKV = "(total, 3, nheads, headdim)"
_VARLEN_KV = "(total_k, 2, nheads_k, headdim)"
_QKV_NAMES = Names("qkv", "qkv", "qkv", layout=_QKV)
_KV_NAMES = Names("q", "kv", "kv", layout=f"q (batch, seqlen_q, nheads, headdim), kv {_KV}")
_VARLEN_QKV_NAMES = Names("qkv", "qkv", "qkv", "cu_seqlens", "cu_seqlens", "max_seqlen", "max_seqlen", _VARLEN_QKV)
_VARLEN_KV_NAMES = Names("q", "kv", "kv", layout=f"q (total_q, nheads, headdim), kv {_VARLEN_KV}")


def _unstack(name: str, packed, dim: int, count: int, layout: str, nonempty=()):
    """The ``count`` views of ``packed`` along ``dim``, after checking that it is a tensor the kernels take, of
    ``layout``'s shape, with at least one element along each of the ``nonempty`` dims. The checks that follow, on
    the views, name ``packed`` too; these are the ones whose errors would otherwise show a view's shape."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(packed).__name__}")
    _validate_tensor(packed, name, dims=packed.dim())  # a nested tensor first: it has no shape to compare
    if packed.dim() != len(layout.split(",")) or packed.shape[dim] != count:
        raise ValueError(
            f"{name} must have shape {layout}, got {tuple(packed.shape)}; stack the tensors along dim {dim} "
            f"(torch.stack(..., dim={dim}))"
        )
    if any(packed.shape[d] < 1 for d in nonempty):
        labels = layout.strip("()").split(", ")
        raise ValueError(
            f"{name} must have {_and(labels[d] for d in nonempty)} >= 1, got shape {tuple(packed.shape)}; "
            f"layout is {layout}"
        )
    return packed.unbind(dim)


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """``flash_attn_func`` on ``qkv`` (batch, seqlen, 3, nheads, headdim): queries, keys and values stacked on dim
    2, as one projection to ``3 x nheads x headdim`` features gives them after a reshape. The heads are the same for
    all three (no GQA: use ``flash_attn_kvpacked_func``). Every other argument (there is no ``return_lse`` keyword:
    use ``return_attn_probs``), and the result, as ``flash_attn_func``'s."""
    q, k, v = _unstack("qkv", qkv, 2, 3, _QKV, nonempty=(0, 1, 3))
    return _flash_attn(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        False,
        _QKV_NAMES,
    )


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """``flash_attn_func`` on ``q`` (batch, seqlen_q, nheads, headdim) and ``kv`` (batch, seqlen_k, 2, nheads_k,
    headdim), keys and values stacked on dim 2 (nheads a multiple of nheads_k: GQA/MQA). Every other argument (there
    is no ``return_lse`` keyword: use ``return_attn_probs``), and the result, as ``flash_attn_func``'s."""
    k, v = _unstack("kv", kv, 2, 2, _KV)
    return _flash_attn(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        False,
        _KV_NAMES,
    )


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """``flash_attn_varlen_func`` on ``qkv`` (total, 3, nheads, headdim), a packed batch's queries, keys and values
    stacked on dim 1; the same ``cu_seqlens`` and ``max_seqlen`` serve queries and keys. Every other argument (there
    is no ``return_lse`` keyword: use ``return_attn_probs``), and the result, as ``flash_attn_varlen_func``'s."""
    q, k, v = _unstack("qkv", qkv, 1, 3, _VARLEN_QKV, nonempty=(2,))
    return _flash_attn_varlen(
        q,
        k,
        v,
        cu_seqlens,
        cu_seqlens,
        max_seqlen,
        max_seqlen,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        False,
        _VARLEN_QKV_NAMES,
    )


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """``flash_attn_varlen_func`` on ``q`` (total_q, nheads, headdim) and ``kv`` (total_k, 2, nheads_k, headdim),
    keys and values stacked on dim 1. Every other argument (there is no ``return_lse`` keyword: use
    ``return_attn_probs``), and the result, as ``flash_attn_varlen_func``'s."""
    k, v = _unstack("kv", kv, 1, 2, _VARLEN_KV)
    return _flash_attn_varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        False,
        _VARLEN_KV_NAMES,
    )
