"""The Triton kernels behind flashdoc.

``forward.py`` holds the fused forward kernel, ``forward_hopper.py`` its warp-specialised Hopper version (in
Gluon, taken on H100/H200 where it applies), ``backward.py`` the three backward kernels, and
``backward_hopper.py`` the Hopper versions of its dK/dV and dQ kernels. ``mask.py`` is the masking core they all
call: which key blocks a tile visits, which elements it masks, and how a score changes (causal, sliding windows,
softcap, ALiBi, dropout). ``hopper_common.py`` holds what the two Hopper files share: Gluon itself, their host
descriptors, the causal work order, the key ranges on the masking core, and the aggregates their partitions'
state travels in. Each kernel file reads in the same order:
tuning constants, kernels, launch functions. ``launch.py`` holds what launching any of them
takes: the device and context guard, the host tensor descriptors, the launch cache, and the second stream the
backward forks for its dQ kernel. The torch.library ops and the autograd wiring live in
``flashdoc/interface.py``.

Importing ``flashdoc`` decides, once, whether these kernels are compiled for the GPU or run by Triton's
interpreter on the CPU (see ``flashdoc/__init__.py``): Triton makes that choice when ``@triton.jit`` runs.
"""

import triton.language.standard
from triton import knobs
from triton.runtime.jit import JITFunction

# True when the kernels were decorated under TRITON_INTERPRET=1: they then run on CPU tensors, in numpy.
INTERPRET: bool = bool(knobs.runtime.interpret)

# Triton's library functions (tl.zeros, tl.cdiv, ...) were decorated when triton was first imported: for the
# interpreter to run them, that must have happened with TRITON_INTERPRET=1 already set (importing flashdoc
# first does it). Otherwise every interpreted kernel would fail inside Triton; ``launch`` refuses instead.
LIBRARY_INTERPRETED: bool = not any(isinstance(f, JITFunction) for f in vars(triton.language.standard).values())

# exp2 is one instruction on the GPU, exp is exp2 plus a multiply: the forward and backward kernels fold log2(e)
# into the softmax scale once, on the host.
LOG2E = 1.4426950408889634


# Host-side integer helpers. Triton's own ``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions
# whose host call goes through Triton's JIT machinery (about 2-5 us each); the decode entry point's split
# heuristic made hundreds of them per call, more than its kernels' run time at short caches.


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for non-negative a and positive b."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n for n >= 1 (0 for 0, as Triton's)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
