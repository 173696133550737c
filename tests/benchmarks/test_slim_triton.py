"""benchmarks/kernels/slim_triton.sh on a made-up wheel: what it drops and keeps, the executable bits zip loses,
and parts that join back into the archive their sums describe."""

import _ctypes
import hashlib
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernels" / "slim_triton.sh"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("strip", "xz", "split", "sha256sum")), reason="needs binutils and xz"
)

KEPT = [
    "triton/__init__.py",
    "triton/backends/nvidia/compiler.py",
    "triton/backends/nvidia/bin/ptxas",
    "triton/backends/nvidia/bin/ptxas-blackwell",
    "triton/backends/nvidia/lib/libdevice.10.bc",
    "triton/language/payload.bin",
    "triton-9.9.0.dist-info/METADATA",
]
DROPPED = [
    "triton/backends/amd/compiler.py",
    "triton/backends/nvidia/lib/cupti/libcupti.so",
    "triton/backends/nvidia/lib/cupti-blackwell/libcupti.so",
    "triton/_C/libproton.so",
]


def make_wheel(path: Path) -> None:
    """A wheel laid out as Triton's: a real shared object for libtriton.so (strip must accept it), and 1.5 MB of
    random bytes that xz cannot shrink, so a 1 MB part size cuts the archive in two."""
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.write(_ctypes.__file__, "triton/_C/libtriton.so")
        for name in KEPT + DROPPED:
            data = os.urandom(1_500_000) if name.endswith("payload.bin") else name.encode()
            wheel.writestr(name, data)


def test_slim_archive_keeps_what_tests_load(tmp_path):
    wheel = tmp_path / "triton-9.9.0-cp312-abi3-manylinux_2_28_x86_64.whl"
    make_wheel(wheel)
    out = tmp_path / "out"
    subprocess.run(["bash", str(SCRIPT), str(wheel), str(out)], check=True, env={**os.environ, "PART_MB": "1"})

    parts = sorted(out.glob("triton-9.9.0.txz.*"))
    assert [p.name for p in parts] == ["triton-9.9.0.txz.00", "triton-9.9.0.txz.01"]
    sums = dict(reversed(line.split()) for line in (out / "triton-9.9.0.sha256").read_text().splitlines())
    assert sums == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in parts}

    joined = tmp_path / "joined.txz"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(joined, "r:xz") as archive:
        archive.extractall(unpacked, filter="tar")
    for name in KEPT:
        assert (unpacked / name).is_file(), name
    for name in DROPPED:
        assert not (unpacked / name).exists(), name
    for binary in ("ptxas", "ptxas-blackwell"):
        assert os.access(unpacked / "triton/backends/nvidia/bin" / binary, os.X_OK)
    stripped = unpacked / "triton/_C/libtriton.so"
    assert 0 < stripped.stat().st_size <= Path(_ctypes.__file__).stat().st_size


def test_small_archive_stays_whole(tmp_path):
    wheel = tmp_path / "triton-9.9.0-cp312-abi3-manylinux_2_28_x86_64.whl"
    make_wheel(wheel)
    out = tmp_path / "out"
    subprocess.run(["bash", str(SCRIPT), str(wheel), str(out)], check=True)
    assert sorted(p.name for p in out.iterdir()) == ["triton-9.9.0.sha256", "triton-9.9.0.txz"]
