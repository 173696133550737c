"""Entry point for mkdocs-macros (``module_name: tools/macros`` in mkdocs.yml).

mkdocs-macros loads this file by path, not as part of the ``tools`` package, so the project root is put on
``sys.path`` first; the macros themselves live in ``tools/site_macros/``.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tools.site_macros import define_env  # noqa: E402

__all__ = ["define_env"]
