"""mkdocs hook: publish every snippet file with the site, so each code block can link to its whole file."""

import shutil
from pathlib import Path

SNIPPETS_DIR = Path(__file__).resolve().parents[2] / "snippets"


def on_post_build(config, **kwargs):
    target = Path(config["site_dir"]) / "snippets"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(SNIPPETS_DIR, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
