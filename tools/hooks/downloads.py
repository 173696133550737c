"""mkdocs hook: put flashdoc's wheel, sdist and their SHA256SUMS into the built site's downloads/ folder."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # mkdocs loads hooks by path; the tools package lives at the project root
    sys.path.insert(0, ROOT)

from tools import downloads  # noqa: E402

log = logging.getLogger("mkdocs.hooks.downloads")


def on_post_build(config, **kwargs):
    try:
        files = downloads.build(Path(config["site_dir"]) / downloads.SITE_DIR)
    except (RuntimeError, ValueError) as err:
        raise PluginError(str(err)) from err
    log.info("downloads: %s", ", ".join(p.name for p in files))
