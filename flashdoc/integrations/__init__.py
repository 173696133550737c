"""Adapters that plug flashdoc's kernels into other libraries.

Each submodule imports its library only when it is imported itself, so flashdoc does not depend on any of them:
``flashdoc.integrations.transformers`` needs Hugging Face transformers 4.53 or newer
(``pip install 'transformers>=4.53'``; from a checkout, ``pip install '.[transformers]'``).
"""
