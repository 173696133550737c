"""``python -m flashdoc`` and ``flashdoc.show_config()``: which versions, which GPU, which kernel path each call
takes and why, where compiled kernels are cached, and the value (or default) of every switch flashdoc reads.

Modelled on ``python -m torch.utils.collect_env``: paste its output into a bug report. It reads the same
decisions the kernels make (``kernels.gluon_support``, the Hopper kernels' config tables), so it cannot drift
from them.
"""

from __future__ import annotations

import os
import platform
import sys

# The switches flashdoc reads, with their default and what setting them does.
SWITCHES = {
    "FLASHDOC_HOPPER": ("1", "0 keeps every call on the portable kernels, even on Hopper"),
    "FLASHDOC_UNVERIFIED_TRITON": ("0", "1 lets the Hopper kernels run on a Triton release they were not verified on"),
    "FLASHDOC_AUTOTUNE": ("1", "0 skips the autotuner and takes each head dim's default tile config"),
    "FLASHDOC_LAUNCH_CACHE": ("1", "0 sends every launch through Triton's own (slower) launch path"),
    "FLASHDOC_DIRECT_LAUNCH": ("1", "0 keeps cached launches on the Python wrapper around Triton's C launcher"),
    "FLASHDOC_DEBUG_VARLEN": ("0", "1 checks cu_seqlens' values on the host at every varlen call (waits for the GPU)"),
    "FLASHDOC_DEBUG_CHECKS": (
        "0",
        "1 checks the KV cache's device values on the host at every decode call (waits for the GPU; read at import)",
    ),
    "TRITON_INTERPRET": ("unset", "1 runs the kernels in Triton's interpreter on CPU tensors (set without a GPU)"),
    "TRITON_CACHE_DIR": ("unset", "where Triton keeps compiled kernels"),
}


def switch(name: str) -> bool:
    """Whether one of flashdoc's switches (``SWITCHES``) is on: "1" or "0" from the environment, its default when
    unset or empty. Any other value is refused by name, so that a spelling such as "true" cannot leave a switch
    at its default unnoticed."""
    default = SWITCHES[name][0]
    value = os.environ.get(name) or default
    if value not in ("0", "1"):
        raise ValueError(f"the environment sets {name}={value!r}; allowed: 0 or 1 (unset means {default})")
    return value == "1"


def _versions() -> list[tuple[str, str]]:
    import torch
    import triton

    import flashdoc

    cuda = torch.version.cuda or "none (a CPU build)"
    return [
        ("flashdoc", f"{flashdoc.__version__} ({os.path.dirname(flashdoc.__file__)})"),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("torch", f"{torch.__version__}, CUDA {cuda}"),
        ("Triton", triton.__version__),
        ("OS", platform.platform()),
    ]


def _gpus() -> list[tuple[str, str]]:
    import torch

    if not torch.cuda.is_available():
        return [("GPU", "none: the kernels run in Triton's interpreter on the CPU (slow, exact)")]
    rows = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        rows.append(
            (
                f"GPU {i}",
                f"{p.name}, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
                f"{p.total_memory / 2**30:.0f} GiB",
            )
        )
    return rows


def kernel_paths(capability: tuple[int, int] | None, interpret: bool | None = None) -> list[tuple[str, str]]:
    """(operation, the kernel that takes it and why) for a GPU of the given compute capability (None: no GPU),
    with the kernels compiled or (interpret) run by Triton's interpreter; by default as this process runs them."""
    from .kernels import INTERPRET, backward_hopper, decode, decode_hopper, forward_hopper, gluon_support

    if interpret is None:
        interpret = INTERPRET
    if capability is None or interpret:
        why = "no CUDA GPU" if capability is None else "TRITON_INTERPRET=1"
        return [("every call", f"portable kernels in Triton's interpreter ({why})")]
    if capability[0] != 9:
        return [
            (
                "every call",
                f"portable kernels (compute capability {capability[0]}.{capability[1]}: the Gluon "
                "kernels are written for Hopper, 9.0)",
            )
        ]
    if not forward_hopper.ENABLED:
        return [("every call", "portable kernels (FLASHDOC_HOPPER=0)")]
    if not gluon_support.ALLOWED:
        return [("every call", f"portable kernels: {gluon_support.REASON}")]

    def dims(table):
        """The table's head dims, each marked with the one mask it takes where it has one entry of the two (a
        sliding window takes the causal entry)."""
        masks = {}
        for d, causal in table:
            masks.setdefault(d, set()).add(causal)
        only = {True: " (causal or windowed)", False: " (unmasked)"}
        return ", ".join(f"{d}{only[next(iter(m))] if len(m) == 1 else ''}" for d, m in sorted(masks.items()))

    fwd, dkdv = forward_hopper.HOPPER_CONFIGS, backward_hopper.HOPPER_DKDV_CONFIGS
    dq, fused = backward_hopper.HOPPER_DQ_CONFIGS, backward_hopper.FUSED_DQ_CONFIGS
    fused_from = "".join(
        f"; causal calls at d = {d} from {n} tokens"
        for (d, _), n in sorted(backward_hopper.FUSED_DQ_MIN_SEQLEN.items())
    )
    variants = (
        "windows and softcap: the Hopper kernels wherever the same call without them takes them (a window takes "
        "the causal entries); ALiBi and dropout: portable"
    )
    return [
        (
            "forward",
            f"Hopper (Gluon) kernel for plain, causal, windowed and softcapped calls at head dims {dims(fwd)} "
            "in fp16/bf16; portable kernel otherwise (fp32, other head dims, ALiBi, dropout)",
        ),
        (
            "backward dK/dV",
            f"Hopper kernel at head dims {dims(dkdv)} in fp16/bf16 where the fused kernel below does not take the "
            "call; portable otherwise",
        ),
        (
            "backward dQ",
            f"Hopper kernel at head dims {dims(dq)} in fp16/bf16 where the fused kernel below does not take the "
            "call; portable otherwise",
        ),
        (
            "backward, fused",
            f"one Hopper kernel computes dK, dV and dQ at head dims {dims(fused)} in fp16/bf16 where the call allows "
            f"a dQ that varies in its last bits (deterministic=False, flash-attn's default){fused_from}; not with "
            "a window or softcap",
        ),
        ("variants", variants),
        (
            "varlen forward",
            "Hopper kernel where the forward above takes the dense call; portable otherwise",
        ),
        (
            "varlen backward",
            "Hopper dK/dV and dQ kernels where the backward above takes the dense call (the split kernels, "
            "never the fused one); portable otherwise",
        ),
        (
            "decode (kvcache)",
            "Hopper kernel for one-query steps over pages of "
            f"{', '.join(map(str, decode.HOPPER_PAGE_SIZES))} rows with no window, softcap, ALiBi, left padding or "
            f"cache_batch_idx, at head dims {', '.join(map(str, decode_hopper.HEAD_DIMS))} in fp16/bf16, where the "
            "batch alone does not fill the GPU; the portable split-KV kernel otherwise",
        ),
        ("why", gluon_support.REASON),
    ]


def _cache_dir() -> str:
    try:
        from triton import knobs

        return knobs.cache.dir
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".triton", "cache"))


def report() -> str:
    """The environment report as text."""
    import torch

    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    sections = [
        ("Versions", _versions()),
        ("GPUs", _gpus()),
        ("Kernel path", kernel_paths(capability)),
        (
            "Compiled kernels",
            [
                ("Triton cache", _cache_dir()),
                ("autotuning", "each process tunes once per shape family and keeps it in memory"),
            ],
        ),
        (
            "Switches",
            [
                (name, f"{os.environ.get(name, '(default ' + default + ')')}: {meaning}")
                for name, (default, meaning) in SWITCHES.items()
            ],
        ),
    ]
    width = max(len(key) for _, rows in sections for key, _ in rows)
    lines = []
    for title, rows in sections:
        lines.append(title)
        lines.extend(f"  {key:<{width}}  {value}" for key, value in rows)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def show_config() -> None:
    """Print what flashdoc runs on here, as ``python -m flashdoc`` does: the versions, the GPUs, which kernels
    the calls run on and why, where compiled kernels are kept, and flashdoc's environment switches."""
    print(report(), end="")
