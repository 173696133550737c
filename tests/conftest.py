"""Test-suite hooks: readable dtype ids and the ``gpu`` marker (the oracle lives in ``attention_oracle.py``).

Two tiers. Tests marked ``@pytest.mark.gpu`` sweep every feature over odd shapes and are skipped, with a visible
reason, where there is no CUDA GPU. The unmarked tests are a CPU subset small enough for CI: on the CPU the
kernels run through Triton's interpreter (flashdoc turns it on at import when there is no GPU).

On the GPU the wide sweeps run with ``FLASHDOC_AUTOTUNE=0`` (one config per head dim, so one compile per shape
family instead of one per autotune candidate); ``test_every_config_*`` check every autotune candidate directly.
"""

import os

import pytest
import torch

# first: without a GPU, importing flashdoc turns on Triton's interpreter, which must happen before triton loads
import flashdoc  # noqa: F401, I001
from attention_oracle import DTYPE_IDS

if torch.cuda.is_available():
    os.environ.setdefault("FLASHDOC_AUTOTUNE", "0")


@pytest.fixture(autouse=True)
def _fresh_plans():
    """Each test works its launches out afresh: a plan kept from an earlier test with the same shapes would not
    see what this one patches (the SM count, a config table)."""
    from flashdoc.kernels.launch import forget_plans

    forget_plans()


def pytest_make_parametrize_id(config, val, argname):
    return DTYPE_IDS.get(val) if isinstance(val, torch.dtype) else None


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (this machine has none; the CPU subset runs instead)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
