"""flashdoc's wheel and sdist, published with the site so readers can install what the snippets import.

The site serves them from ``downloads/`` with a ``SHA256SUMS`` file (``sha256sum -c SHA256SUMS`` checks
them); ``tools/hooks/downloads.py`` builds them after each site build, and ``install_line`` is the one line
that installs the wheel from the published site (``tools/hooks/install_line.py`` puts it on pages).
"""

from __future__ import annotations

import hashlib
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.outputs import ROOT

SITE_DIR = "downloads"
CHECKSUMS = "SHA256SUMS"


def version() -> str:
    """flashdoc's version, as pyproject.toml states it (the one place it is written)."""
    match = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    if match is None:
        raise ValueError('pyproject.toml has no `version = "..."` line in [project]')
    return match[1]


def wheel_name() -> str:
    return f"flashdoc-{version()}-py3-none-any.whl"


def sdist_name() -> str:
    return f"flashdoc-{version()}.tar.gz"


def wheel_url(site_url: str) -> str:
    return f"{site_url.rstrip('/')}/{SITE_DIR}/{wheel_name()}"


def install_line(site_url: str) -> str:
    """One line of HTML: how to install flashdoc from the published site, with links to the checksums and sdist."""
    base = f"{site_url.rstrip('/')}/{SITE_DIR}"
    return (
        f'<p class="fd-install">The code on this page imports flashdoc; install it with '
        f"<code>pip install {html.escape(wheel_url(site_url))}</code> "
        f'(<a href="{base}/{CHECKSUMS}">SHA-256</a>, <a href="{base}/{sdist_name()}">source</a>).</p>'
    )


# What the distributions are built from: the package and the files its metadata names, nothing else of the repo.
SOURCES = ("pyproject.toml", "README.md", "flashdoc")


def build(target: Path) -> list[Path]:
    """Build the wheel and the sdist from the checkout into ``target`` and write SHA256SUMS; the files.

    PEP 517 hooks of the build backend (setuptools) in this interpreter, on a copy of the sources, so that
    nothing is downloaded and no build folders are left in the checkout.
    """
    target.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory(prefix="flashdoc-dist-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        src.mkdir()
        for name in SOURCES:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(ROOT / name, src / name)
        for hook, name in (("build_wheel", wheel_name()), ("build_sdist", sdist_name())):
            code = f"import sys; from setuptools import build_meta; build_meta.{hook}(sys.argv[1])"
            proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True)
            if proc.returncode != 0 or not (out / name).is_file():
                raise RuntimeError(f"building flashdoc's {name} failed ({hook}):\n{proc.stderr[-3000:]}")
            built.append(Path(shutil.copy2(out / name, target / name)))
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in built)
    (target / CHECKSUMS).write_text(sums, encoding="utf-8")
    return built + [target / CHECKSUMS]
