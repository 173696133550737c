"""The Triton-release gate of the Hopper kernels, its warning, and the environment report, all on the CPU: version
strings are faked, since the gate's logic is what CI can check."""

import os
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

import flashdoc
from flashdoc import _config
from flashdoc.kernels import forward_hopper, gluon_support


@pytest.mark.parametrize("version", ["3.6.0", "3.7.1", "3.8.0", "3.9.0", "3.9.0+git1a2b3c4", "3.7.0rc1"])
def test_verified_releases_take_the_hopper_path(version):
    allowed, reason = gluon_support.gluon_verdict(version, has_gluon=True, allow_unverified=False)
    assert allowed, reason
    assert version in reason


@pytest.mark.parametrize("version", ["3.5.1", "3.10.0", "4.0.0"])
def test_other_releases_fall_back_unless_allowed(version):
    allowed, reason = gluon_support.gluon_verdict(version, has_gluon=True, allow_unverified=False)
    assert not allowed
    assert version in reason and "3.6, 3.7, 3.8, 3.9" in reason
    allowed, reason = gluon_support.gluon_verdict(version, has_gluon=True, allow_unverified=True)
    assert allowed and gluon_support.UNVERIFIED_ENV in reason


def test_a_triton_without_gluon_never_takes_it():
    allowed, reason = gluon_support.gluon_verdict("3.9.0", has_gluon=False, allow_unverified=True)
    assert not allowed and "no Gluon" in reason


def test_release_parses_version_strings():
    assert gluon_support.release("3.8.0") == "3.8"
    assert gluon_support.release("3.10.2+gitdeadbee") == "3.10"


def _hopper_call(monkeypatch, gluon_allowed):
    """What ``gluon_runs`` decides for a bf16 call on a (pretend) Hopper GPU, with Gluon allowed or not."""
    monkeypatch.setattr(forward_hopper, "GLUON", gluon_allowed)
    monkeypatch.setattr(forward_hopper, "ENABLED", True)
    monkeypatch.setattr(forward_hopper, "_is_hopper", lambda index: True)
    monkeypatch.setattr(gluon_support, "_warned", False)
    monkeypatch.setattr(gluon_support, "REASON", "Triton 3.10.0 is not a release the Hopper kernels were verified on")
    q = types.SimpleNamespace(is_cuda=True, dtype=torch.bfloat16, device=types.SimpleNamespace(index=0))
    return forward_hopper.gluon_runs(q)


def test_an_unverified_triton_warns_once_and_runs_portable(monkeypatch):
    with pytest.warns(RuntimeWarning) as caught:
        assert _hopper_call(monkeypatch, gluon_allowed=False) is False
        monkeypatch.setattr(forward_hopper, "GLUON", False)
        assert (
            forward_hopper.gluon_runs(
                types.SimpleNamespace(is_cuda=True, dtype=torch.float16, device=types.SimpleNamespace(index=0))
            )
            is False
        )
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "Triton 3.10.0" in message  # the version and the reason
    assert "pip install 'triton>=3.6,<3.10'" in message  # the fix
    assert gluon_support.UNVERIFIED_ENV in message  # the override


def test_a_verified_triton_does_not_warn(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _hopper_call(monkeypatch, gluon_allowed=True) is True


def test_the_report_says_which_path_and_why(monkeypatch):
    monkeypatch.setattr(gluon_support, "ALLOWED", False)
    monkeypatch.setattr(gluon_support, "REASON", "Triton 3.10.0 is not verified")
    fallback = dict(_config.kernel_paths((9, 0), interpret=False))
    assert fallback == {"every call": "portable kernels: Triton 3.10.0 is not verified"}
    monkeypatch.setattr(gluon_support, "ALLOWED", True)
    if forward_hopper.ENABLED:
        paths = dict(_config.kernel_paths((9, 0), interpret=False))
        assert (
            "Hopper (Gluon) kernel for plain, causal, windowed and softcapped calls at head dims 64, 128, 256"
            in paths["forward"]
        )
        assert "64 (causal or windowed), 128, 256" in paths["backward dK/dV"]
        assert "deterministic=False" in paths["backward, fused"] and "from 2048 tokens" in paths["backward, fused"]
        assert "windows and softcap: the Hopper kernels" in paths["variants"]
        assert "ALiBi and dropout: portable" in paths["variants"]
        assert "Hopper dK/dV and dQ kernels" in paths["varlen backward"]
        assert "one-query steps over pages of 16 rows" in paths["decode (kvcache)"]
        assert "head dims 64, 128" in paths["decode (kvcache)"]
    assert "8.0" in dict(_config.kernel_paths((8, 0), interpret=False))["every call"]
    assert "no CUDA GPU" in dict(_config.kernel_paths(None))["every call"]


def test_the_report_lists_every_switch_flashdoc_reads():
    package = Path(flashdoc.__file__).parent
    read = {m for path in package.rglob("*.py") for m in re.findall(r"FLASHDOC_[A-Z_]+", path.read_text())}
    assert read <= set(_config.SWITCHES), read - set(_config.SWITCHES)


@pytest.mark.parametrize("name", [n for n in _config.SWITCHES if n.startswith("FLASHDOC_")])
def test_every_switch_reads_0_and_1_and_refuses_anything_else_by_name(name, monkeypatch):
    default = _config.SWITCHES[name][0] == "1"
    for value, on in (("0", False), ("1", True), ("", default)):
        monkeypatch.setenv(name, value)
        assert _config.switch(name) is on, (name, value)
    monkeypatch.delenv(name)
    assert _config.switch(name) is default
    monkeypatch.setenv(name, "true")
    with pytest.raises(ValueError, match=f"{name}='true'; allowed: 0 or 1"):
        _config.switch(name)


def test_a_misspelt_switch_fails_the_import_by_name():
    """A switch read at import refuses a value it does not know there, before any call runs on a default."""
    env = {**os.environ, "FLASHDOC_HOPPER": "off"}
    proc = subprocess.run([sys.executable, "-c", "import flashdoc"], capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "FLASHDOC_HOPPER='off'; allowed: 0 or 1" in proc.stderr


def test_python_m_flashdoc_prints_the_report():
    out = subprocess.run([sys.executable, "-m", "flashdoc"], capture_output=True, text=True, check=True).stdout
    for heading in ("Versions", "GPUs", "Kernel path", "Compiled kernels", "Switches"):
        assert heading in out
    for switch in _config.SWITCHES:
        assert switch in out
    assert f"flashdoc  {flashdoc.__version__}".split()[1] in out
    assert torch.__version__ in out
