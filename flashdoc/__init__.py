"""flashdoc: exact FlashAttention (forward and backward) in Triton.

On a machine without a CUDA GPU, importing flashdoc turns on Triton's interpreter (``TRITON_INTERPRET=1``) so
that the very same kernels run on CPU tensors, slowly but exactly. It has to happen here, before the kernels
are defined: Triton chooses between compiling and interpreting when ``@triton.jit`` decorates a function, not
when it is called. A value you set yourself (``TRITON_INTERPRET=0`` or ``1``) is left alone. Triton's own
library functions (``tl.zeros``, ``tl.cdiv``, ...) are decorated when triton is imported, so if it was imported
before flashdoc, the kernels refuse to run (see ``kernels.LIBRARY_INTERPRETED``); the rest of flashdoc works.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from . import reference  # noqa: E402  (teaching implementations shown on the site)
from ._config import show_config  # noqa: E402
from .interface import flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention  # noqa: E402
from .kvcache import flash_attn_with_kvcache  # noqa: E402

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("flashdoc")
except PackageNotFoundError:  # running from a source checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "scaled_dot_product_attention",
    "reference",
    "show_config",
    "__version__",
]
