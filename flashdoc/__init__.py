"""flashdoc: exact FlashAttention (forward and backward) in Triton.

On a machine without a CUDA GPU, importing flashdoc turns on Triton's interpreter (``TRITON_INTERPRET=1``) so
that the very same kernels run on CPU tensors, slowly but exactly. It has to happen here, before the kernels
are defined: Triton chooses between compiling and interpreting when ``@triton.jit`` decorates a function, not
when it is called (Triton's own library functions, such as ``tl.zeros``, are decorated when triton is
imported). A value you set yourself (``TRITON_INTERPRET=0`` or ``1``) is left alone.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        raise ImportError(
            "flashdoc runs its kernels through Triton's interpreter on a machine without a CUDA GPU, and Triton "
            "reads TRITON_INTERPRET when it is first imported: triton was imported before flashdoc, with the "
            "interpreter off. Import flashdoc before triton (or before anything that imports triton), or set "
            "TRITON_INTERPRET=1 in the environment")
    os.environ["TRITON_INTERPRET"] = "1"

from . import reference  # noqa: E402  (teaching implementations shown on the site)
from .interface import flash_attn_func, scaled_dot_product_attention  # noqa: E402

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("flashdoc")
except PackageNotFoundError:  # running from a source checkout that was never installed
    __version__ = "0+unknown"

__all__ = ["flash_attn_func", "scaled_dot_product_attention", "reference", "__version__"]
