"""Adapters that plug flashdoc's kernels into other libraries.

Each submodule imports its library only when it is imported itself, so flashdoc does not depend on any of them:
``flashdoc.integrations.transformers`` needs Hugging Face transformers (``pip install flashdoc[transformers]``).
"""
