"""The attention implementations flashdoc is timed against, each loaded only if it is available here.

Each peer takes q, k, v in its own layout and returns the output; ``load_peers`` reports a peer that does not
load (not installed, no kernel for this device) with the reason, and the run goes on without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F


def naive_attention(q, k, v, causal):
    """softmax(q kᵀ / √d) v written as matmul-softmax-matmul: materialises the (N, N) scores."""
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        n = scores.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@dataclasses.dataclass
class Peer:
    name: str
    layout: str  # "bhnd": (batch, heads, seqlen, dim), as SDPA; "bnhd": (batch, seqlen, heads, dim), as flash-attn
    load: Callable  # (device) -> attention function (q, k, v, causal) -> out; raises if unavailable


def _load_naive(device):
    return naive_attention


def _sdpa_loader(backend_name):
    def load(device):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)
        if device == "cuda" and backend_name == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
            raise RuntimeError("cuDNN is not available in this torch build")

        def attn(q, k, v, causal):
            with sdpa_kernel(backend):  # only this backend: an unsupported shape raises instead of falling back
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        # A tiny call tells whether the backend exists on this device at all.
        x = torch.randn(1, 1, 128, 64, device=device, dtype=torch.float16 if device == "cuda" else torch.float32)
        try:
            attn(x, x, x, True)
        except RuntimeError as e:
            raise RuntimeError(f"no {backend_name} kernel on {device} ({str(e).splitlines()[0][:120]})") from e
        return attn

    return load


def _load_flex(device):
    if device != "cuda":
        raise RuntimeError(
            "CPU mode: torch.compile of FlexAttention on the CPU takes minutes, too long for a smoke run"
        )
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # Static shapes: one compile (forward and backward kernels, ~5 s) per shape. dynamic=True still compiled
    # once per N and its kernels were 15-35% slower (no static bounds), which would flatter flashdoc. The
    # compiles are paid ahead of the timing (benchmarks.precompile). Past dynamo's default limit of 8 versions
    # of one function, torch.compile silently runs it eagerly, at a fraction of the speed: raise the limits.
    torch._dynamo.config.recompile_limit = max(1024, torch._dynamo.config.recompile_limit)
    torch._dynamo.config.accumulated_recompile_limit = max(4096, torch._dynamo.config.accumulated_recompile_limit)
    compiled = torch.compile(flex_attention, dynamic=False)
    block_masks = {}

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def attn(q, k, v, causal):
        block_mask = None
        if causal:
            n = q.shape[-2]
            if n not in block_masks:  # built on the first (untimed) call of each N, then reused
                block_masks[n] = create_block_mask(causal_mask, None, None, n, n, device=q.device)
            block_mask = block_masks[n]
        return compiled(q, k, v, block_mask=block_mask)

    return attn


def _load_flash_attn(device):
    from flash_attn import flash_attn_func  # ImportError -> "not installed"

    return lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal)


def _load_flashdoc(device):
    from flashdoc import flash_attn_func

    return lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal)


# Order = order in plots and tables. flashdoc last so that it is drawn on top.
PEERS = [
    Peer("naive", "bhnd", _load_naive),
    Peer("sdpa-efficient", "bhnd", _sdpa_loader("EFFICIENT_ATTENTION")),
    Peer("sdpa-flash", "bhnd", _sdpa_loader("FLASH_ATTENTION")),
    Peer("sdpa-cudnn", "bhnd", _sdpa_loader("CUDNN_ATTENTION")),
    Peer("flex", "bhnd", _load_flex),
    Peer("flash-attn", "bnhd", _load_flash_attn),
    Peer("flashdoc", "bnhd", _load_flashdoc),
]


def peer(name):
    """The peer called ``name``."""
    for p in PEERS:
        if p.name == name:
            return p
    raise ValueError(f"no peer {name!r}; the peers are: {', '.join(p.name for p in PEERS)}")


def load_peers(device, names=None):
    """{name: attention function} for the peers that load, and {name: reason} for those that do not."""
    available, skipped = {}, {}
    for p in PEERS:
        if names is not None and p.name not in names:
            continue
        try:
            available[p.name] = p.load(device)
        except Exception as e:  # ImportError, "No available kernel", ...
            skipped[p.name] = failure_reason(e)
    return available, skipped


def failure_reason(e):
    """One line saying why a peer did not load or a measurement did not happen."""
    if isinstance(e, torch.OutOfMemoryError):
        return "out of memory"
    if isinstance(e, ImportError):
        return f"not installed ({e})"
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")
