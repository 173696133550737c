"""Hugging Face transformers models on flashdoc's kernels: ``attn_implementation="flashdoc"``.

::

    import flashdoc.integrations.transformers

    flashdoc.integrations.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flashdoc")

``register()`` adds flashdoc to transformers' ``AttentionInterface`` (the function each attention layer calls)
and to its ``AttentionMaskInterface`` (what the model builds as a mask before the first layer). The mask it
builds is flash-attn's: nothing, or the 2-D padding mask. The attention function then does what transformers'
FlashAttention path does, on flashdoc's kernels:

- a padded batch (a 2-D mask with zeros) is unpadded into one packed tensor of real tokens, run through
  ``flashdoc.flash_attn_varlen_func`` with its ``cu_seqlens``, and scattered back to the padded layout; a decode
  step of a left-padded batch (a few real queries per sequence) instead attends over the cache in place,
  through ``flashdoc.flash_attn_with_kvcache`` with each row's padding as its ``cache_leftpad``;
- a padding-free batch, several sequences packed along each row, is found from ``position_ids`` (a position
  that does not follow the one before it starts a new sequence, the rule eager's mask uses) or taken from the
  ``cu_seq_lens_q/k`` and ``max_length_q/k`` keyword arguments, and runs through the same varlen function;
- anything else is one ``flashdoc.flash_attn_func`` call.

Causal masks are aligned bottom-right, as in flash-attn, so decoding with a cache needs no mask, and a step's
few queries against the cache run on the split-KV kernel (``flash_attn_func`` sends them there). A layer's
``sliding_window`` becomes ``window_size=(sliding_window - 1, 0)`` when causal (the query and the
``sliding_window - 1`` keys before it, exactly eager's mask) and ``(sliding_window - 1, sliding_window - 1)``
when not (transformers' encoders pass ``sliding_window`` one larger than their half-width for this reason).
``softcap`` (Gemma 2's ``attn_logit_softcapping``) is applied after scaling, GQA/MQA need nothing, and dropout
is whatever the layer passes (its attention dropout in training, 0 in evaluation). Attention sinks (``s_aux``:
gpt-oss, one learned logit per head that joins every row's softmax and has no value) renormalise the kernels'
output through the log-sum-exp they return (:func:`_with_sinks`), so they are exact and take gradients.

What flashdoc cannot compute fails on the first call with a ValueError that says what and why, instead of
computing something else: a 4-D or float mask, mask functions with parts besides causal, window, padding and
packing (Gemma 3's bidirectional image tokens; Llama 4's chunked attention past its first chunk),
``output_attentions=True``, a head mask, an additive position bias (T5), sparse attention over
selected keys, per-token sinks, and a sliding window over a padding mask with holes in it (unpadding would move
the window's edges). A model class that supports neither flash-attn nor registered attention functions (BLOOM,
T5) is refused when it is built (:func:`_check_models`).
"""

from __future__ import annotations

import inspect
import sys
import weakref

import torch
import torch.nn.functional as F

import flashdoc
from flashdoc._validation import MAX_HEAD_DIM
from flashdoc.bert_padding import mask_layout
from flashdoc.kernels.decode import fits_one_tile

__all__ = ["NAME", "attention_forward", "mask_function", "register"]

NAME = "flashdoc"


# --8<-- [start:register]
def register(name: str = NAME) -> str:
    """Make ``attn_implementation=name`` run attention on flashdoc's kernels; returns the name.

    Call it once, before building or loading a model. It registers ``attention_forward`` with
    ``transformers.AttentionInterface`` and ``mask_function`` with ``transformers.AttentionMaskInterface``.

    transformers treats every name that contains "flash" as a flash-attn package to import when a model is
    built; for such a name (the default, "flashdoc", is one) this also tells that import to return flashdoc's
    functions, and stops transformers from swapping in a kernel from the Hub for models that list the flash
    kernels they support. Models that can run neither flash-attn nor registered attention functions are
    refused when they are built.
    """
    if not isinstance(name, str) or not name or "|" in name or "/" in name or ":" in name:
        raise ValueError(
            f"name must be a non-empty str without '|', '/' or ':' (transformers' kernel syntax), got {name!r}"
        )
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
    except ImportError as e:  # transformers < 4.53 has no AttentionMaskInterface, or its import failed
        version = getattr(sys.modules.get("transformers"), "__version__", "not importable")
        raise ImportError(
            "flashdoc.integrations.transformers needs transformers >= 4.53 (AttentionInterface and "
            f"AttentionMaskInterface); this environment's transformers ({version}) gave: {e}. "
            "pip install 'transformers>=4.53'"
        ) from e
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, mask_function)
    _NAMES.add(name)
    if "flash" in name:
        _FLASH_NAMES.add(name)
        _answer_flash_import()
    _check_models()
    return name


# --8<-- [end:register]


_NAMES: set[str] = set()  # every name registered
_FLASH_NAMES: set[str] = set()  # those that contain "flash"
_UNSET = object()


def _answer_flash_import() -> None:
    """Let transformers' flash-attn import succeed for the registered flash names, with flashdoc's functions.

    When a model is built with an ``attn_implementation`` whose name contains "flash", transformers (5.x) calls
    ``modeling_flash_attention_utils.lazy_import_flash_attention(name)``, which asks ``_lazy_imports(name)`` for
    the flash-attn functions; for a name it does not know, that looks for a kernel on the Hugging Face Hub and
    fails ("Could not find the currently requested flash attention implementation"). transformers has no public
    way to declare another provider, so this wraps ``_lazy_imports`` to answer for the registered names with
    flashdoc's ``flash_attn_func`` and ``flash_attn_varlen_func`` (and transformers' own pad/unpad helpers) and
    to pass every other name through unchanged. :func:`attention_forward` does not use what it returns; it only
    lets the model build, and gives transformers' own flash helpers, wherever they run, flashdoc's functions.
    """
    try:
        from transformers import modeling_flash_attention_utils as fa_utils
    except ImportError:  # transformers 4.x: no flash import at model build, nothing to answer
        return
    original = getattr(fa_utils, "_lazy_imports", None)
    if original is None:
        return  # this transformers does not import flash-attn by name at model build
    if getattr(original, "_flashdoc", False):
        return

    def _lazy_imports(implementation, *args, **kwargs):
        if implementation in _FLASH_NAMES:
            return (
                flashdoc.flash_attn_func,
                getattr(flashdoc, "flash_attn_varlen_func", None),
                None,  # transformers' paged attention is not routed to flashdoc.flash_attn_with_kvcache
                getattr(fa_utils, "_pad_input", None),
                getattr(fa_utils, "_unpad_input", None),
            )
        return original(implementation, *args, **kwargs)

    _lazy_imports._flashdoc = True
    _lazy_imports.__wrapped__ = original
    fa_utils._lazy_imports = _lazy_imports


def _declares_flash_attn(cls) -> bool:
    """Whether a model class declares flash-attn support: ``_supports_flash_attn``, named
    ``_supports_flash_attn_2`` in older releases such as 4.53 (True where it declares neither)."""
    return getattr(cls, "_supports_flash_attn", getattr(cls, "_supports_flash_attn_2", True))


def _check_models() -> None:
    """Check each model built with a registered name, where transformers checks its own implementations' support.

    - A model class that declares neither flash-attn support (``_declares_flash_attn``) nor support for
      registered attention functions (``_supports_attention_backend``) is refused: such a model computes attention
      in its own code (BLOOM, MPT, BigBird) or builds its masks differently (BigBird-Pegasus's decoder marks its
      layers not causal and relies on a 4-D mask), and given flashdoc's mask, ``None`` or a 2-D padding mask, it
      would compute something else or fail inside its own code. transformers checks nothing for a registered
      name, and refuses ``flash_attention_2`` for the same models.
    - A model class may list the flash kernels it is compatible with (``_compatible_flash_implementations``:
      gpt-oss and other models with attention sinks, which flash-attn 2 cannot compute). For any other name that
      contains "flash", transformers (5.x) then builds the model with the list's first entry instead, a kernel from
      the Hugging Face Hub, and only logs a warning: asked for flashdoc, the model would run something else, or
      fail to build on a machine that cannot reach the Hub. The registered names are kept instead; what flashdoc
      cannot compute for such a model is refused by :func:`attention_forward` on the first call, by name."""
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return
    original = getattr(PreTrainedModel, "_check_and_adjust_attn_implementation", None)
    if original is None or getattr(original, "_flashdoc", False):
        return

    def _check_and_adjust_attn_implementation(self, attn_implementation, *args, **kwargs):
        if attn_implementation not in _NAMES:
            return original(self, attn_implementation, *args, **kwargs)
        cls = type(self)
        if not _declares_flash_attn(cls) and not getattr(cls, "_supports_attention_backend", True):
            raise ValueError(
                f"attn_implementation={attn_implementation!r}: {cls.__name__} supports neither flash-attn nor "
                "registered attention functions (it computes attention, or builds its masks, its own way), so "
                "flashdoc cannot run it. Use attn_implementation='sdpa' or 'eager' for this model."
            )
        compatible = getattr(self, "_compatible_flash_implementations", None)
        if attn_implementation not in _FLASH_NAMES or compatible is None or attn_implementation in compatible:
            return original(self, attn_implementation, *args, **kwargs)
        # the check reads the list from the instance: list the name there for the call, then put back what was
        own = vars(self).get("_compatible_flash_implementations", _UNSET)
        self._compatible_flash_implementations = [*compatible, attn_implementation]
        try:
            return original(self, attn_implementation, *args, **kwargs)
        finally:
            if own is _UNSET:
                del self._compatible_flash_implementations
            else:
                self._compatible_flash_implementations = own

    _check_and_adjust_attn_implementation._flashdoc = True
    _check_and_adjust_attn_implementation.__wrapped__ = original
    PreTrainedModel._check_and_adjust_attn_implementation = _check_and_adjust_attn_implementation


def mask_function(
    batch_size,
    q_length=None,
    kv_length=None,
    q_offset=0,
    kv_offset=0,
    mask_function=None,
    attention_mask=None,
    **kwargs,
):
    """The mask transformers builds for flashdoc: ``None`` or the 2-D padding mask, as for flash-attn.

    transformers 5 passes the query length and offset; 4.x passes ``cache_position`` instead (by keyword), which
    this does not need: only the keys' length and offset matter here.

    The causal, sliding-window and packed-sequence parts of the mask are applied inside the kernels (from
    ``is_causal``, ``sliding_window`` and ``position_ids``); only padding has to travel as a tensor. A mask
    function with any other part asks for a pattern flashdoc cannot apply: a model's own function on top
    (``or_mask_function``/``and_mask_function``, bidirectional image tokens), blocks of tokens, chunked
    attention over more keys than a chunk holds (Llama 4), or a mask built with ``torch.vmap``. That fails here
    with a ValueError naming the part.
    """
    unapplied = "vmap-built masks" if kwargs.get("use_vmap") else _unapplied_mask(mask_function, kv_offset + kv_length)
    if unapplied is not None:
        raise ValueError(
            "attn_implementation='flashdoc' supports causal, bidirectional, sliding-window, padding and "
            f"packed-sequence masks; this model's mask also has {unapplied}, which flashdoc's kernels cannot "
            "apply. Use attn_implementation='sdpa' or 'eager' for this model or input."
        )
    if attention_mask is not None:
        attention_mask = attention_mask[:, -kv_length:]
        # All ones and as long as the keys: no padding, the kernels need no mask. A shorter mask means a static
        # cache whose unused tail must be cut off, so it is kept.
        if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
            attention_mask = None
    return attention_mask


# The parts of transformers' mask functions (masking_utils) that flashdoc applies by other means: causal or not
# (is_causal), sliding windows (the layer's sliding_window), padding (the 2-D mask) and packed sequences
# (position_ids). Every other part is refused, so that a model's new overlay fails loudly instead of being dropped.
_APPLIED_MASKS = (
    "causal_mask_function",
    "bidirectional_mask_function",
    "sliding_window_overlay.",
    "sliding_window_bidirectional_overlay.",
    "padding_mask_function.",
    "packed_sequence_mask_function.",
)
# Functions that only combine or wrap others: what they hold is checked instead.
_COMBINING_MASKS = ("and_masks.", "remap_positions_for_packed_sequence.")


def _unapplied_mask(fn, kv_end: int, depth: int = 0) -> str | None:
    """A description of the first part of ``fn`` (a mask function built by transformers' masking_utils) that
    flashdoc does not apply, or None. kv_end: one past the last key position, for chunked attention, which is
    plain causal attention while every key lies in the first chunk (transformers' own rule for flash-attn)."""
    if fn is None:
        return None
    name = getattr(fn, "__qualname__", type(fn).__name__)
    if name.startswith(_APPLIED_MASKS):
        return None
    if name.startswith("chunked_overlay."):
        chunk = inspect.getclosurevars(fn).nonlocals.get("chunk_size")
        if isinstance(chunk, int) and kv_end <= chunk:
            return None
        return f"chunked attention (chunks of {chunk} keys) over {kv_end} keys"
    if name.startswith(_COMBINING_MASKS) and depth < 8:
        for part in inspect.getclosurevars(fn).nonlocals.values():
            for f in part if isinstance(part, (tuple, list)) else (part,):
                if callable(f) and (found := _unapplied_mask(f, kv_end, depth + 1)) is not None:
                    return found
        return None
    if name.startswith("or_masks."):
        return "a union with another mask function (or_masks)"
    return f"the mask function {name}"


def _refuse(name: str, why: str):
    raise ValueError(
        f"attn_implementation='flashdoc' cannot compute {name}: {why}. Use attn_implementation='eager' "
        "(or 'sdpa') for this model or call."
    )


# --8<-- [start:forward]
def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (batch, heads, seqlen_q, head_dim), key and value
    (batch, kv_heads, seqlen_k, head_dim) in; (batch, seqlen_q, heads, value's head_dim) and no weights out.
    What flashdoc cannot compute (attention weights asked for, a mask it cannot apply) raises a ValueError
    that names it."""
    _check_supported(module, attention_mask, kwargs)
    is_causal = module.is_causal if is_causal is None else is_causal
    if sliding_window is None:  # a layer that keeps its window rather than pass it (Qwen2-MoE's sliding layers)
        sliding_window = getattr(module, "sliding_window", None)
    window = (-1, -1)
    if sliding_window is not None and sliding_window > 0:
        window = (sliding_window - 1, 0 if is_causal else sliding_window - 1)
    options = dict(
        dropout_p=float(dropout),
        softmax_scale=scaling,
        causal=bool(is_causal),
        window_size=window,
        softcap=float(softcap or 0.0),
        deterministic=bool(kwargs.get("deterministic") or False),
    )
    # flash-attn's layout, (batch, seqlen, heads, head_dim)
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    head_dim, v_head_dim = q.shape[-1], v.shape[-1]
    if max(head_dim, v_head_dim) > MAX_HEAD_DIM:
        _refuse(
            f"a head dimension of {max(head_dim, v_head_dim)}", f"its kernels take head dimensions up to {MAX_HEAD_DIM}"
        )
    if v_head_dim < head_dim:  # e.g. MLA: zero columns of v give zero columns of the output, cut off below
        v = F.pad(v, (0, head_dim - v_head_dim))
    elif v_head_dim > head_dim:  # zero columns of q and k leave every score as it was; the scale keeps q's width
        q, k = (F.pad(t, (0, v_head_dim - head_dim)) for t in (q, k))
        if options["softmax_scale"] is None:
            options["softmax_scale"] = head_dim**-0.5
    batch, seqlen_q = q.shape[:2]
    sinks = _sinks(kwargs.get("s_aux"), q)

    if (left_pad := _decode_step_left_padding(q, k, attention_mask, options)) is not None:
        out = _decode_in_place(q, k, v, left_pad, attention_mask.shape[1], options, sinks)
    elif attention_mask is not None:  # padding: unpad, one varlen call, pad back
        if window != (-1, -1):
            _check_no_holes(attention_mask)
        q, k, v, index_q, cu_q, cu_k, max_q, max_k = _unpad(q, k, v, attention_mask)
        out = _attend(flashdoc.flash_attn_varlen_func, (q, k, v, cu_q, cu_k, max_q, max_k), options, sinks)
        out = out.new_zeros(batch * seqlen_q, *out.shape[1:]).index_copy(0, index_q, out)
    elif (packed := _packed(kwargs, batch, seqlen_q, k.shape[1])) is not None:  # padding-free
        cu_q, cu_k, max_q, max_k = packed
        q, k, v = (t.reshape(-1, *t.shape[2:]) for t in (q, k, v))
        out = _attend(flashdoc.flash_attn_varlen_func, (q, k, v, cu_q, cu_k, max_q, max_k), options, sinks)
    else:
        out = _attend(flashdoc.flash_attn_func, (q, k, v), options, sinks)
    out = out.reshape(batch, seqlen_q, *out.shape[-2:])
    return out[..., :v_head_dim], None


# --8<-- [end:forward]


def _attend(attention, args, options, sinks, lse_option="return_lse"):
    """attention(*args, **options), with the layer's sinks folded in when it has them."""
    if sinks is None:
        return attention(*args, **options)
    out, lse = attention(*args, **options, **{lse_option: True})
    return _with_sinks(out, lse, sinks)


# --8<-- [start:sinks]
def _with_sinks(out, lse, sinks):
    """The attention output when each head's softmax has one more logit, its sink, whose
    value vector is zero.

    A row's weights become exp(s_j) / (sum_j exp(s_j) + exp(sink)): the kernel's weights
    times exp(lse) / (exp(lse) + exp(sink)) = sigmoid(lse - sink), lse being the log of
    the row's own sum. So the output is scaled by that factor, and the sinks' gradient,
    and the LSE's (which the kernels' backward takes), follow from it.

    out: (..., seqlen, heads, head_dim); lse: (..., heads, seqlen) float32; sinks:
    (heads,). A row that sees no key has lse = -inf and stays zero, as in eager
    attention, where its sink takes all the weight."""
    weight = torch.sigmoid(lse - sinks.float()[:, None]).transpose(-1, -2)
    return (out.float() * weight.unsqueeze(-1)).to(out.dtype)


# --8<-- [end:sinks]


def _sinks(s_aux, q: torch.Tensor) -> torch.Tensor | None:
    """The layer's attention sinks (``s_aux``, one logit per query head), checked, or None."""
    if s_aux is None:
        return None
    heads = q.shape[2]
    if not isinstance(s_aux, torch.Tensor) or not s_aux.is_floating_point():
        got = s_aux.dtype if isinstance(s_aux, torch.Tensor) else type(s_aux).__name__
        raise TypeError(f"s_aux (attention sinks) must be a floating-point tensor of shape ({heads},), got {got}")
    if s_aux.shape != (heads,):
        raise ValueError(
            f"s_aux (attention sinks) must hold one logit per query head, shape ({heads},), got "
            f"{tuple(s_aux.shape)}; per-token sinks are not supported"
        )
    if s_aux.device != q.device:
        raise ValueError(f"s_aux (attention sinks) is on {s_aux.device} but the queries are on {q.device}")
    return s_aux


def _may_be_a_decode_step(q, k, options) -> bool:
    """Whether a padded call could run as a decode step over the cache in place (``_decode_in_place``), judged
    from shapes and options alone: a few queries per KV head (they fit the decode kernel's tile), no dropout, no
    gradient, and a head dimension the decode kernel takes."""
    head_dim = q.shape[-1]
    return (
        options["dropout_p"] == 0.0
        and fits_one_tile(q.shape[2], k.shape[2], q.shape[1])
        and head_dim % 8 == 0
        and head_dim <= 256
        and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad))
    )


def _decode_step_left_padding(q, k, mask, options):
    """Each row's count of leading padding, int32 (batch,), when this call is a decode step of a left-padded batch
    (as ``generate`` makes one): its mask is left padding alone and its few queries are real tokens. Else None,
    and the varlen path takes the call (a mask shorter than the keys included: ``_unpad`` says what is wrong)."""
    if mask is None or not _may_be_a_decode_step(q, k, options) or k.shape[1] < mask.shape[1]:
        return None
    return _per_tensor(mask, "left padding", (q.shape[1],), _find_left_padding)


def _decode_in_place(q, k, v, left_pad, seqlen_k, options, sinks):
    """The decode step attended over the cache where it lies: ``flash_attn_with_kvcache`` with each row's padding
    as its ``cache_leftpad``, where unpadding would gather every cached key and value first."""
    k, v = k[:, :seqlen_k], v[:, :seqlen_k]  # a static cache longer than what was written: its tail is unused
    cache_options = dict(
        cache_seqlens=seqlen_k,
        cache_leftpad=left_pad,
        **{name: options[name] for name in ("softmax_scale", "causal", "window_size", "softcap")},
    )
    return _attend(flashdoc.flash_attn_with_kvcache, (q, k, v), cache_options, sinks, "return_softmax_lse")


def _find_left_padding(mask, seqlen_q):
    """Each row's count of leading padding, int32 (batch,), when every row is padding and then real tokens only
    and its last seqlen_q positions (the queries) are real; else None. One read of the mask on the host."""
    mask = mask.bool()
    left_only = (mask.cummax(-1).values == mask).all() & mask[:, -seqlen_q:].all()
    if not bool(left_only):
        return None
    return (mask.shape[1] - mask.sum(-1)).to(torch.int32)


# Keyword arguments through which transformers' models ask for attention that flashdoc's kernels cannot compute,
# or that this integration does not route to them. Ignoring one would compute something else, so each is refused
# by name.
_REFUSED_KWARGS = {
    "head_mask": ("a head_mask", "its kernels take no per-head weights"),
    "position_bias": (
        "an additive position bias (position_bias, T5's relative attention bias)",
        "its kernels add no bias tensor to the scores",
    ),
    "indices": (
        "sparse attention over selected keys (indices)",
        "its kernels attend to every key the mask allows",
    ),
    "block_indices": (
        "block-sparse attention over selected key blocks (block_indices)",
        "its kernels attend to every key the mask allows",
    ),
    "sinks": (
        "per-token attention sinks (sinks)",
        "it takes one sink logit per head (s_aux), not one per token",
    ),
    "block_table": (
        "paged attention (block_table)",
        "this integration does not route transformers' paged cache to flashdoc.flash_attn_with_kvcache",
    ),
}


def _check_supported(module, attention_mask, kwargs) -> None:
    if kwargs.get("output_attentions") or getattr(getattr(module, "config", None), "output_attentions", False):
        _refuse("output_attentions=True", "its kernels never form the attention probabilities")
    for name, (what, why) in _REFUSED_KWARGS.items():
        if kwargs.get(name) is not None:
            _refuse(what, why)
    if attention_mask is None:
        return
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        shape = tuple(attention_mask.shape) if hasattr(attention_mask, "shape") else type(attention_mask).__name__
        _refuse(
            f"an attention mask of shape {shape}",
            "it takes causal, sliding-window and padding masks, which transformers passes as a 2-D (batch, seqlen) "
            "padding mask; a 4-D mask can hold any pattern",
        )
    if attention_mask.is_floating_point():
        _refuse("a float attention mask", "it takes a boolean or 0/1 padding mask, not additive biases")


def _check_no_holes(mask: torch.Tensor) -> None:
    """A sliding window counts positions; after unpadding, a gap inside a row would move the window's edge."""
    if _per_tensor(mask, "holes", (), _has_holes):
        _refuse(
            "a sliding window over a padding mask with holes",
            "unpadding closes the gaps, which would let a query see keys outside its window; pad on the left or "
            "the right only",
        )


def _has_holes(mask: torch.Tensor) -> bool:
    m = mask.bool()
    starts = (m[:, 1:] & ~m[:, :-1]).sum(-1) + m[:, 0]
    return bool((starts > 1).any())


# Every layer of one forward gets the same mask (or position_ids) tensor, and what the integration derives from it
# reads the GPU (token counts and the longest sequence decide the calls' shapes). The last answer of each kind is
# kept for that tensor, so a forward waits for the GPU once, not once a layer: each wait drains the queue of
# launched work, and in a step whose host time is close to its GPU time, per-layer waits leave the GPU idle while
# the host queues the next layer.
_answers = {}  # kind -> (weakref to the tensor, (its version, extra key), the answer)


def _per_tensor(tensor: torch.Tensor, kind: str, extra, find):
    """find(tensor, *extra), or its last answer for this same tensor, unmodified since, and the same extra."""
    if torch.compiler.is_compiling() or tensor.is_inference():  # an inference tensor has no version to check
        return find(tensor, *extra)
    ref, key, answer = _answers.get(kind, (None, None, None))
    if ref is None or ref() is not tensor or key != (tensor._version, extra):
        answer = find(tensor, *extra)
        _answers[kind] = (weakref.ref(tensor), (tensor._version, extra), answer)
    return answer


def _unpad(q, k, v, mask):
    """Gather the real tokens of a padded batch into flash-attn's packed varlen layout.

    mask: (batch, seqlen_k) bool, True for a real token. The queries are the last seqlen_q positions of the keys
    (a prefill has seqlen_q = seqlen_k; a decoding step appends to a cache), so their mask is the mask's tail.
    """
    batch, seqlen_q = q.shape[:2]
    seqlen_k = mask.shape[1]
    if k.shape[1] < seqlen_k:
        raise ValueError(f"the attention mask covers {seqlen_k} keys but there are {k.shape[1]}")
    if k.shape[1] > seqlen_k:  # a static cache longer than what was written: its tail is unused
        k, v = k[:, :seqlen_k], v[:, :seqlen_k]
    index_q, index_k, cu_q, cu_k, max_q, max_k = _per_tensor(mask, "unpadding", (seqlen_q,), _find_unpadding)
    k, v = (t.reshape(batch * seqlen_k, *t.shape[2:]).index_select(0, index_k) for t in (k, v))
    q = q.reshape(batch * seqlen_q, *q.shape[2:]).index_select(0, index_q)
    return q, k, v, index_q, cu_q, cu_k, max_q, max_k


def _find_unpadding(mask, seqlen_q):
    """(index_q, index_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) of a padding mask."""
    index_k, cu_k, max_k, _ = mask_layout(mask)
    if seqlen_q == mask.shape[1]:
        return index_k, index_k, cu_k, cu_k, max_k, max_k
    index_q, cu_q, max_q, _ = mask_layout(mask[:, -seqlen_q:])
    return index_q, index_k, cu_q, cu_k, max_q, max_k


def _packed(kwargs, batch, seqlen_q, seqlen_k):
    """(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) for a padding-free batch, or None."""
    names = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
    given = [kwargs.get(n) for n in names]
    if all(x is not None for x in given):  # from a data collator (DataCollatorWithFlattening) or the model
        cu_q, cu_k, max_q, max_k = given
        return cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k)
    position_ids = kwargs.get("position_ids")
    if position_ids is None or seqlen_q != seqlen_k or seqlen_q == 1:
        return None
    if position_ids.dim() not in (1, 2):
        _refuse(
            f"position_ids of shape {tuple(position_ids.shape)} without an attention mask",
            "it finds packed sequences in 2-D (batch, seqlen) position ids",
        )
    if position_ids.shape[-1] != seqlen_q:
        return None
    return _per_tensor(position_ids, "packed", (batch,), _find_packed)


def _find_packed(position_ids, batch):
    seqlen_q = position_ids.shape[-1]
    position_ids = position_ids.reshape(-1, seqlen_q).expand(batch, -1)
    # A sequence starts at each row's first token and wherever a position does not follow on from the one
    # before it (a reset to 0 in a packed batch): the rule of transformers' find_packed_sequence_indices.
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    first = starts.flatten().nonzero().flatten().to(torch.int32)
    if first.numel() == batch:  # only the rows' own first tokens: nothing is packed
        return None
    cu = torch.cat([first, first.new_tensor([batch * seqlen_q])])
    longest = int((cu[1:] - cu[:-1]).max())
    return cu, cu, longest, longest
