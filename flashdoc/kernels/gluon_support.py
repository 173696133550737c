"""Which Triton releases the Hopper (Gluon) kernels run on.

Gluon is Triton's experimental lower-level dialect, and its API moves between releases. The Hopper kernels
therefore run only on releases where the GPU test suite passed and the benchmark was recorded on an H200
(``VERIFIED_TRITON``). On any other release the portable kernels take every call, and the first call that would
have gone to a Hopper kernel says so once, with the reason and the override: a silent 20% slowdown is the one
outcome this module exists to prevent.

Differences between the verified releases' APIs, where the kernels need any, are bridged here and nowhere else.
"""

from __future__ import annotations

import re
import warnings

import triton

from .._config import switch

# Each release verified on an H200: the GPU suite passes and the benchmark ran, Hopper kernels against cuDNN.
VERIFIED_TRITON = ("3.6", "3.7", "3.8", "3.9")

# FLASHDOC_UNVERIFIED_TRITON=1 lets the Hopper kernels run on a Triton release not in VERIFIED_TRITON.
UNVERIFIED_ENV = "FLASHDOC_UNVERIFIED_TRITON"


def release(version: str) -> str:
    """'3.8.0', '3.8.0+git1a2b3c' or '3.8.0rc1' -> '3.8': the major.minor release a version string belongs to."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else version


def gluon_verdict(version: str, has_gluon: bool, allow_unverified: bool) -> tuple[bool, str]:
    """Whether the Hopper kernels may run on Triton ``version``, and why, in words for a report or a warning."""
    if not has_gluon:
        return False, f"Triton {version} has no Gluon (triton.experimental.gluon)"
    verified = ", ".join(VERIFIED_TRITON)
    if release(version) in VERIFIED_TRITON:
        return True, f"Triton {version} is a verified release ({verified})"
    if allow_unverified:
        return True, f"Triton {version} is not verified ({verified}), but {UNVERIFIED_ENV}=1 allows it"
    return False, f"Triton {version} is not a release the Hopper kernels were verified on ({verified})"


def _has_gluon() -> bool:
    try:
        from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma  # noqa: F401
    except ImportError:
        return False
    return True


HAS_GLUON = _has_gluon()
ALLOWED, REASON = gluon_verdict(triton.__version__, HAS_GLUON, switch(UNVERIFIED_ENV))

_warned = False


def warn_portable_fallback() -> None:
    """Warn, once per process, that a call a Hopper kernel would take runs on the portable kernels because of the
    Triton release (``ALLOWED`` is False)."""
    global _warned
    if _warned:
        return
    _warned = True
    fix = f"install a verified Triton (pip install 'triton>={VERIFIED_TRITON[0]},<{_next(VERIFIED_TRITON[-1])}')" + (
        f", or set {UNVERIFIED_ENV}=1 to try the Hopper kernels on this one" if HAS_GLUON else ""
    )
    warnings.warn(
        f"flashdoc: {REASON}, so this Hopper GPU runs the portable kernels, which reach about 80% of the Hopper "
        f"kernels' speed. To get them back, {fix}. `python -m flashdoc` shows which path each call takes.",
        RuntimeWarning,
        stacklevel=3,
    )


def _next(rel: str) -> str:
    major, minor = rel.split(".")
    return f"{major}.{int(minor) + 1}"


# The TMA copies' names: Triton 3.8 added async_load/async_store, and 3.9 removed the older names, which
# 3.6 and 3.7 have alone. Same arguments, same instructions.
if HAS_GLUON:
    from triton.experimental.gluon.language.nvidia.hopper import tma as _tma

    tma_load = getattr(_tma, "async_load", None) or _tma.async_copy_global_to_shared
    tma_store = getattr(_tma, "async_store", None) or _tma.async_copy_shared_to_global

    # A barrier among the warps of a partition (of the whole CTA outside warp_specialize): ``thread_barrier`` up
    # to 3.8, ``barrier`` in 3.9. Same instruction.
    from triton.experimental.gluon import language as _gl

    thread_barrier = getattr(_gl, "barrier", None) or _gl.thread_barrier

    if hasattr(_tma, "async_atomic_add"):  # 3.8 and later
        tma_reduce_add = _tma.async_atomic_add
    else:
        from triton._C.libtriton import ir as _ir
        from triton.experimental.gluon.language._core import builtin as _builtin

        @_builtin
        def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
            """Add the shared-memory tile src into the tile of tensor_desc at coord (fp32), by the TMA unit: a
            bulk reduce-add that completes asynchronously, like ``tma_store``; ``tma.store_wait`` waits for it.
            Before 3.8, Gluon's builder has the operation but its Python API does not wrap it."""
            coord = _semantic._convert_to_ir_values(coord, require_i64=False)
            _semantic.builder.create_async_tma_reduce(
                _ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle
            )

    # Aggregates (classes of tensors, shared-memory buffers and constexprs that jitted code passes and returns as
    # one value) sit under this private name from 3.6 to 3.9; Gluon's own Blackwell helpers import them so.
    from triton.language.core import _aggregate as aggregate  # noqa: F401
